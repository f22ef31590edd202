"""The trainer contract: what every trainer the portal runs must provide.

A trainer is a class. The portal builds it from its validated parameters, the
job's data and seed, then drives it chunk by chunk:

* ``step(n)`` runs ``n`` iterations and returns one metrics dict per
  iteration, each with at least ``"loss"`` (a finite float for a healthy
  model; NaN or inf fails the job);
* ``evaluate()`` returns held-out metrics (``val_loss``, ``val_accuracy``...)
  measured on ``data.validation``; every ``eval_every`` iterations;
* ``state()`` returns the whole training state (model, optimiser, RNG,
  iteration) as bytes, and ``restore(blob)`` on a freshly built trainer puts
  it back, so the next chunk continues exactly where the last one stopped.

Parameters are one pydantic model (``Params``), so the catalogue, the REST
validation and the submit form all come from one schema. The built-in numpy
algorithms, the PyTorch trainers, operators' plugins (entry-point group
``slaq.trainers``) and tenants' uploaded code all implement this class.
``docs/trainers.md`` has a complete example.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

if TYPE_CHECKING:
    from workers.datasets import Dataset

Metrics = dict[str, float]
"""Metric name to value, e.g. ``{"loss": 0.31, "accuracy": 0.9}``."""

Task = Literal["classification", "regression", "clustering", "text"]

METRIC_NAME_MAX = 64
"""Longest metric name stored; longer names are a trainer bug, not data."""


class TrainerParams(BaseModel):
    """Base for every trainer's parameters.

    Unknown names are refused (a typo such as ``learning_rat`` would otherwise
    run with the default and waste cluster time), NaN and infinity are
    refused, and neither booleans nor strings are accepted as numbers:
    ``True`` silently becoming 1, or ``"1e-3"`` parsed from a script's typo,
    hides client bugs. Integral floats for integers (``5.0``) are accepted.
    Mark a field ``json_schema_extra={"log_scale": True}`` to have forms and
    random search sample it on a log axis.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and field.annotation in (int, float) and isinstance(
                value, bool | str):
            raise ValueError(f"{info.field_name} must be a number, got {value!r}")
        return value


class NoParams(TrainerParams):
    """For trainers without hyper-parameters."""


@dataclass(frozen=True)
class TrainingData:
    """What a trainer trains on and evaluates with.

    Tabular jobs get ``train`` and (for datasets big enough to hold rows out)
    ``validation``, both standardised ``Dataset``s; text jobs get
    ``text`` and ``validation_text``. ``task`` says which.
    """

    name: str
    task: Task
    train: Dataset | None = None
    validation: Dataset | None = None
    text: str | None = None
    validation_text: str | None = None

    @classmethod
    def whole(cls, dataset: Dataset) -> TrainingData:
        """Train on all of ``dataset`` with nothing held out (tests, direct use)."""
        return cls(name=dataset.name, task=dataset.task, train=dataset)

    @property
    def tabular(self) -> Dataset:
        """The training table; a clear error for a trainer given text."""
        if self.train is None:
            raise ValueError(f"dataset {self.name!r} is text, not a table")
        return self.train


class Trainer(ABC):
    """One job's training state. Subclasses set the class attributes below.

    ``iteration`` counts completed iterations; ``state()`` must include it.
    Training must be deterministic given (params, data, seed) and a restored
    state, so a chunk re-run after a crash reproduces the same metrics.
    """

    name: ClassVar[str]
    """Catalogue name jobs use as ``"algorithm"``; lowercase, ``[a-z0-9_.-]``."""
    title: ClassVar[str] = ""
    description: ClassVar[str] = ""
    tasks: ClassVar[tuple[Task, ...]] = ("classification",)
    Params: ClassVar[type[TrainerParams]] = NoParams
    uses_gpu: ClassVar[bool] = False
    """Whether a GPU speeds it up: its jobs prefer a GPU pool when one has a free slot."""

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        self.params = params
        self.data = data
        self.seed = int(seed)
        self.iteration = 0

    @abstractmethod
    def step(self, n: int) -> list[Metrics]:
        """Run ``n`` iterations; return each one's metrics (``len == n``)."""

    def evaluate(self) -> Metrics:
        """Held-out metrics for the current model; empty when there are none."""
        return {}

    def text_sample(self) -> str | None:
        """A short text the current model generates (a language model's
        sample), taken after each evaluation and shown on the job page; None
        when the trainer has none. Like ``evaluate()``, it must not change the
        training run (no draw from the training generator)."""
        return None

    @abstractmethod
    def state(self) -> bytes:
        """The full training state as bytes (never a pickle of code)."""

    @abstractmethod
    def restore(self, blob: bytes) -> None:
        """Put back a ``state()``; called on a freshly built trainer."""

    def close(self) -> None:  # noqa: B027 - optional hook, most trainers hold nothing
        """Release what the trainer holds (processes, devices); called after every chunk."""


def clean_metrics(raw: Any, *, where: str) -> Metrics:
    """Check one metrics dict a trainer returned; raise ValueError naming the problem.

    Keeps the rest of the portal simple: after this every value is a float,
    every name a short string, and ``loss`` is present when ``where`` is a step.
    Non-finite values are kept (a NaN loss is how a diverging job reports).
    """
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: metrics must be a dict, got {type(raw).__name__}")
    metrics: Metrics = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key or len(key) > METRIC_NAME_MAX:
            raise ValueError(f"{where}: metric names must be 1-{METRIC_NAME_MAX} characters")
        if not key.isprintable():
            # A lone surrogate or NUL cannot be stored, ESC would act on terminals:
            # refused here, the job fails with this reason instead of its commit.
            raise ValueError(f"{where}: metric name {key!r} holds a character that is not "
                             "printable text (a control character or a lone surrogate)")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: metric {key!r} must be a number, got {value!r}")
        metrics[key] = float(value)
    return metrics
