"""Sweep samplers: grid and seeded random over choices, linear/log floats and
integers; the configuration cap and clashes are clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from backend.services.experiment_specs import (
    MAX_CONFIGURATIONS,
    ExperimentCreate,
    configurations,
    job_specs,
)
from backend.services.specs import SpecErrors


def _spec(**extra: Any) -> ExperimentCreate:
    return ExperimentCreate.model_validate({"algorithm": "mlp", "dataset": "digits", **extra})


def test_grid_is_the_product_of_the_axes() -> None:
    spec = _spec(space={"learning_rate": {"type": "float", "low": 0.001, "high": 0.1,
                                          "log": True},
                        "hidden_units": {"type": "choice", "values": [8, 32]}},
                 sampler={"kind": "grid", "points": 3})
    configs = configurations(spec)
    assert len(configs) == 6
    assert sorted({c["learning_rate"] for c in configs}) == [0.001, 0.01, 0.1]
    assert {c["hidden_units"] for c in configs} == {8, 32}


def test_int_grid_drops_duplicate_points() -> None:
    spec = _spec(space={"hidden_units": {"type": "int", "low": 4, "high": 6}},
                 sampler={"kind": "grid", "points": 5})
    assert [c["hidden_units"] for c in configurations(spec)] == [4, 5, 6]


def test_random_is_seeded_and_within_bounds() -> None:
    body: dict[str, Any] = {
        "space": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
                  "hidden_units": {"type": "int", "low": 4, "high": 64}},
        "sampler": {"kind": "random", "samples": 20, "seed": 7}}
    first, again = configurations(_spec(**body)), configurations(_spec(**body))
    assert first == again and len(first) == 20
    assert all(1e-4 <= c["learning_rate"] <= 1.0 and 4 <= c["hidden_units"] <= 64
               for c in first)
    other = configurations(_spec(**{**body, "sampler": {**body["sampler"], "seed": 8}}))
    assert other != first
    # Log-uniform: about half the draws fall below the geometric middle 0.01.
    below = sum(c["learning_rate"] < 0.01 for c in first)
    assert 3 <= below <= 17


def test_too_many_configurations_is_refused() -> None:
    spec = _spec(space={"a": {"type": "choice", "values": list(range(20))},
                        "b": {"type": "choice", "values": list(range(20))}})
    with pytest.raises(SpecErrors, match=f"400 configurations.*at most {MAX_CONFIGURATIONS}"):
        configurations(spec)


def test_a_parameter_both_fixed_and_swept_is_refused() -> None:
    spec = _spec(params={"learning_rate": 0.1},
                 space={"learning_rate": {"type": "choice", "values": [0.1, 0.2]}})
    with pytest.raises(SpecErrors, match="both fixed"):
        configurations(spec)


def test_bad_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="log range needs low > 0"):
        _spec(space={"learning_rate": {"type": "float", "low": 0, "high": 1, "log": True}})
    with pytest.raises(ValueError, match="above high"):
        _spec(space={"hidden_units": {"type": "int", "low": 9, "high": 3}})


def test_job_specs_overlay_fixed_and_sampled_params() -> None:
    spec = _spec(name="lr", params={"hidden_units": 16}, stopping={"max_iterations": 50},
                 space={"learning_rate": {"type": "choice", "values": [0.01, 0.1]}})
    specs = job_specs(spec)
    assert [s.params for _, s in specs] == [{"hidden_units": 16, "learning_rate": 0.01},
                                            {"hidden_units": 16, "learning_rate": 0.1}]
    assert specs[1][1].name == "lr #2: learning_rate=0.1"
    assert all(s.stopping.max_iterations == 50 for _, s in specs)
    # Left out, eval_every stays unset so each job shortens it as a lone job does.
    assert "eval_every" not in specs[0][1].model_fields_set
