"""The contract's helpers: parameter schemas, metric checks and the held-out split."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest
from pydantic import Field

from workers.datasets import dataset_from_arrays, load_dataset
from workers.trainers.contract import TrainerParams, clean_metrics
from workers.trainers.data import HOLDOUT_MAX_ROWS, holdout
from workers.trainers.params_schema import ParamsError, params_catalog, validate_params
from workers.trainers.registry import make_trainer, trainers


class Example(TrainerParams):
    rate: float = Field(0.1, gt=0, le=1, description="How fast.",
                        json_schema_extra={"log_scale": True})
    layers: int = Field(2, ge=1, le=8)
    kind: Literal["a", "b"] = "a"


def test_the_catalogue_comes_from_the_model() -> None:
    entries = {e["name"]: e for e in params_catalog(Example)}
    assert entries["rate"] == {"name": "rate", "type": "float", "default": 0.1, "minimum": 0,
                               "maximum": 1, "choices": [], "help": "How fast.",
                               "log_scale": True, "exclusiveMinimum": True}
    assert entries["layers"]["type"] == "int" and entries["layers"]["minimum"] == 1
    assert entries["kind"]["type"] == "choice" and entries["kind"]["choices"] == ["a", "b"]


def test_every_bad_field_is_named_in_one_error() -> None:
    with pytest.raises(ParamsError) as caught:
        validate_params(Example, {"rate": 2, "layers": True, "kind": "c", "extra": 1,
                                  "bogus": "x"}, "algorithm example")
    problems = dict(caught.value.problems)
    assert problems["rate"] == "rate must be <= 1.0; got 2"
    assert problems["layers"] == "layers must be a number, got True"
    assert problems["kind"].startswith("kind must be one of")
    assert "unknown parameter 'extra' for algorithm example" in problems["extra"]
    assert "bogus" in problems


def test_integral_floats_are_integers_and_nan_is_refused() -> None:
    assert validate_params(Example, {"layers": 3.0}, "x").model_dump()["layers"] == 3
    with pytest.raises(ParamsError, match="rate"):
        validate_params(Example, {"rate": float("nan")}, "x")


def test_metrics_are_checked() -> None:
    assert clean_metrics({"loss": 1, "accuracy": 0.5}, where="s") == {"loss": 1.0,
                                                                      "accuracy": 0.5}
    for bad in ({"loss": "1"}, {"loss": True}, {"": 1.0}, {"x" * 65: 1.0}, [1.0],
                {"acc\ud800": 1.0}, {"a\x00": 1.0}, {"\x1b[31macc": 1.0}, {"a\nb": 1.0}):
        with pytest.raises(ValueError, match="^s: "):
            clean_metrics(bad, where="s")


def test_the_holdout_split_is_fixed_disjoint_and_bounded() -> None:
    wine = load_dataset("wine", {})
    split = holdout(wine)
    assert split.train is not None and split.validation is not None
    assert split.train.n_samples + split.validation.n_samples == wine.n_samples
    assert split.validation.n_samples == int(wine.n_samples * 0.2)
    rows = {tuple(r) for r in split.train.X}
    assert not any(tuple(r) in rows for r in split.validation.X)
    again = holdout(wine)
    assert again.validation is not None
    assert np.array_equal(again.validation.X, split.validation.X)
    big = holdout(load_dataset("synthetic_classification", {"n_samples": 20_000}))
    assert big.validation is not None and big.validation.n_samples == HOLDOUT_MAX_ROWS
    rng = np.random.default_rng(0)
    tiny = dataset_from_arrays("tiny", "classification", rng.normal(size=(40, 2)),
                               np.arange(40) % 2)
    assert holdout(tiny).validation is None and holdout(tiny).train is tiny


@pytest.mark.parametrize("name", ["logistic_regression", "linear_svm", "mlp", "kmeans",
                                  "linear_regression"])
def test_built_in_trainers_report_held_out_metrics(name: str) -> None:
    dataset = "diabetes" if name == "linear_regression" else "wine"
    trainer = make_trainer(name, holdout(load_dataset(dataset, {})), {}, seed=0)
    before = trainer.evaluate()
    trainer.step(200)
    after = trainer.evaluate()
    assert after["val_loss"] < before["val_loss"]
    if name in ("logistic_regression", "linear_svm", "mlp"):
        assert 0.8 < after["val_accuracy"] <= 1.0
    assert name in trainers()
