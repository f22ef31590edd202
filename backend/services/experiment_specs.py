"""An experiment's request body, and the samplers that turn its search space
into configurations (one job spec each).

Pure: no database. Admission (catalogues, quotas) happens per configuration in
:func:`backend.services.jobs.admit_jobs`, exactly as for a single job.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.schemas import DEFAULT_EVAL_EVERY, MAX_EVAL_EVERY, JobCreate, StoppingRule
from backend.services.specs import SpecError, SpecErrors

MAX_CONFIGURATIONS = 200
"""Most jobs one experiment may create: a bigger sweep is a 422, not a flood."""


class ChoiceAxis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["choice"]
    values: list[Any] = Field(..., min_length=1, max_length=MAX_CONFIGURATIONS)


class FloatAxis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["float"]
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> FloatAxis:
        _check_range(self.low, self.high, self.log)
        return self


class IntAxis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["int"]
    low: int
    high: int
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> IntAxis:
        _check_range(self.low, self.high, self.log)
        return self


def _check_range(low: float, high: float, log: bool) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("low and high must be finite numbers")
    if low > high:
        raise ValueError(f"low {low} is above high {high}")
    if log and low <= 0:
        raise ValueError(f"a log range needs low > 0, got {low}")


Axis = Annotated[ChoiceAxis | FloatAxis | IntAxis, Field(discriminator="type")]


class Sampler(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["grid", "random"] = "grid"
    samples: int = Field(10, ge=1, le=MAX_CONFIGURATIONS,
                         description="Configurations a random sampler draws")
    points: int = Field(3, ge=1, le=MAX_CONFIGURATIONS,
                        description="Grid points per numeric axis")
    seed: int = Field(0, ge=0, le=2**31 - 1)


class Objective(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str = Field("loss", min_length=1, max_length=64,
                        description="'loss' (training), or an evaluation metric such as "
                        "'val_loss' or 'val_accuracy'")
    mode: Literal["min", "max"] | None = Field(
        None, description="Minimise or maximise; left out: max for accuracies, else min")

    @property
    def maximise(self) -> bool:
        if self.mode is not None:
            return self.mode == "max"
        return "accuracy" in self.metric

    @property
    def direction(self) -> str:
        return "max" if self.maximise else "min"


class EarlyStopping(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: Literal["none", "predictive", "asha"] = "none"
    top_k: int = Field(3, ge=1, le=MAX_CONFIGURATIONS)
    min_iterations: int = Field(100, ge=1)
    reduction: int = Field(3, ge=2, le=100)


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=200)
    algorithm: str
    dataset: str
    dataset_params: dict[str, Any] = Field(default_factory=dict)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    params: dict[str, Any] = Field(default_factory=dict, description="Fixed parameters")
    space: dict[str, Axis] = Field(default_factory=dict, description="Swept parameters")
    sampler: Sampler = Field(default_factory=Sampler)
    stopping: StoppingRule = Field(default_factory=StoppingRule)
    eval_every: int = Field(DEFAULT_EVAL_EVERY, ge=0, le=MAX_EVAL_EVERY)
    quality_metric: str = "loss"
    objective: Objective = Field(default_factory=Objective)
    early_stopping: EarlyStopping = Field(default_factory=EarlyStopping)


def configurations(spec: ExperimentCreate) -> list[dict[str, Any]]:
    """The sampled values of each configuration (swept parameters only), in
    a deterministic order; raises SpecErrors for a space that cannot work."""
    clash = sorted(set(spec.space) & set(spec.params))
    if clash:
        raise SpecErrors([SpecError(["space", name], f"{name} is both fixed (params) and "
                                    "swept (space); keep it in one of them") for name in clash])
    if not spec.space:
        return [{}]
    if spec.sampler.kind == "grid":
        axes = {name: _grid_values(axis, spec.sampler.points) for name, axis in spec.space.items()}
        count = math.prod(len(v) for v in axes.values())
        _check_count(count, "the grid")
        return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
    _check_count(spec.sampler.samples, "sampler.samples")
    rng = random.Random(spec.sampler.seed)
    return [{name: _draw(axis, rng) for name, axis in spec.space.items()}
            for _ in range(spec.sampler.samples)]


def _check_count(count: int, what: str) -> None:
    if count > MAX_CONFIGURATIONS:
        raise SpecErrors([SpecError(["sampler"], f"{what} makes {count} configurations; an "
                                    f"experiment may have at most {MAX_CONFIGURATIONS}: use "
                                    "fewer grid points or values, or a random sampler")])


def _readable(value: float) -> float:
    # Grid and random floats are shown in tables and job names: 6 digits is plenty.
    return float(f"{value:.6g}")


def _grid_values(axis: ChoiceAxis | FloatAxis | IntAxis, points: int) -> list[Any]:
    if isinstance(axis, ChoiceAxis):
        return list(axis.values)
    low, high = float(axis.low), float(axis.high)
    if points == 1 or low == high:
        raw = [math.sqrt(low * high) if axis.log else (low + high) / 2]
    elif axis.log:
        step = (math.log(high) - math.log(low)) / (points - 1)
        raw = [math.exp(math.log(low) + i * step) for i in range(points)]
    else:
        raw = [low + i * (high - low) / (points - 1) for i in range(points)]
    if isinstance(axis, IntAxis):
        return list(dict.fromkeys(int(round(v)) for v in raw))
    return [_readable(v) for v in raw]


def _draw(axis: ChoiceAxis | FloatAxis | IntAxis, rng: random.Random) -> Any:
    if isinstance(axis, ChoiceAxis):
        return axis.values[rng.randrange(len(axis.values))]
    if axis.log:
        value = math.exp(rng.uniform(math.log(axis.low), math.log(axis.high)))
    else:
        value = rng.uniform(axis.low, axis.high)
    if isinstance(axis, IntAxis):
        return min(max(int(round(value)), axis.low), axis.high)
    return _readable(value)


def job_specs(spec: ExperimentCreate) -> list[tuple[dict[str, Any], JobCreate]]:
    """(sampled values, job spec) per configuration: the fixed parameters
    overlaid with the sampled ones, everything else shared."""
    return [(values, job_spec(spec, index, values))
            for index, values in enumerate(configurations(spec), start=1)]


def job_spec(spec: ExperimentCreate, index: int, values: dict[str, Any]) -> JobCreate:
    """The job spec of the experiment's ``index``-th configuration (from 1),
    whose swept parameters take ``values``."""
    name = spec.name or f"{spec.algorithm} sweep"
    shared: dict[str, Any] = {
        "algorithm": spec.algorithm, "dataset": spec.dataset,
        "dataset_params": spec.dataset_params, "seed": spec.seed,
        "stopping": spec.stopping.model_dump(),
        "quality_metric": spec.quality_metric,
    }
    if "eval_every" in spec.model_fields_set:
        # Left out, each job shortens the default to its length as a lone job does.
        shared["eval_every"] = spec.eval_every
    label = ", ".join(f"{k}={v}" for k, v in values.items())
    job_name = f"{name} #{index}" + (f": {label}" if label else "")
    try:
        return JobCreate.model_validate({**shared, "name": job_name[:200],
                                         "params": {**spec.params, **values}})
    except ValueError as exc:
        raise SpecErrors([SpecError(["quality_metric"], str(exc))]) from None
