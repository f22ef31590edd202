"""Every trainer a job can name, and the one lookup by name: ``resolve``.

A job's ``algorithm`` names one of four kinds of trainer: a built-in numpy
trainer (``workers.trainers.builtin``), a PyTorch trainer
(``workers.trainers.deep``), an operator's plugin, or a tenant's uploaded
code (``code:<id>``). ``resolve(name)`` says which, once, for admission
(``backend.services.specs``, the catalogue route) and for the worker
(``workers.trainer_loading``).

Operators add trainers by installing a package that declares them in the
``slaq.trainers`` entry-point group (``name = "package.module:TrainerClass"``).
Plugins are operator-installed and so trusted like the portal's own code;
tenants' uploaded code never runs through here: ``resolve`` only names it,
and the worker runs it in a sandbox (see ``workers.sandbox``).
A plugin that fails to load, is not a Trainer, or reuses a taken name is
skipped with a warning rather than taking the whole catalogue down.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from backend.core.code_refs import is_code_ref, parse_code_ref
from workers.trainers.contract import Trainer, TrainerParams, TrainingData
from workers.trainers.params_schema import params_catalog, validate_params

if TYPE_CHECKING:
    from workers.datasets import Dataset

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "slaq.trainers"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Registered:
    """A trainer class run in the worker process: built-in, PyTorch or a plugin."""

    cls: type[Trainer]
    origin: str
    """Where it comes from, as the catalogue shows it: ``built-in``,
    ``built-in (PyTorch)`` or ``plugin <distribution>``."""


@dataclass(frozen=True)
class TenantCode:
    """A tenant's uploaded trainer code, ``code:<id>``: never imported here,
    checked against its tenant at admission and run in a sandbox."""

    ref: str
    code_id: int | None
    """None when ``ref`` starts ``code:`` but is not a valid reference."""


TrainerSource = Registered | TenantCode


class UnknownTrainer(KeyError):
    """No trainer has this name; ``known`` lists the registered names."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown algorithm {name!r}; known algorithms: {', '.join(known)}")
        self.name = name
        self.known = known


def resolve(name: str) -> TrainerSource:
    """What a job's ``algorithm`` names, or ``UnknownTrainer``.

    A built-in numpy trainer is found without building the whole catalogue:
    that imports torch, seconds of a worker's first chunk for a job that
    never uses it. Plugins cannot take a built-in's name, so this is the
    source ``sources()`` would give.
    """
    if is_code_ref(name):
        return TenantCode(name, parse_code_ref(name))
    from workers.trainers.builtin import NUMPY_TRAINERS

    for builtin in NUMPY_TRAINERS:
        if builtin.name == name:
            return Registered(builtin, "built-in")
    found = sources().get(name)
    if found is None:
        raise UnknownTrainer(name, sorted(sources()))
    return found


@functools.cache
def sources() -> dict[str, Registered]:
    """Name to registered trainer, built-ins first; loaded once per process."""
    from workers.trainers.builtin import NUMPY_TRAINERS

    found: dict[str, Registered] = {}
    for cls in NUMPY_TRAINERS:
        found[cls.name] = Registered(cls, "built-in")
    for cls in _deep_trainers():
        found[cls.name] = Registered(cls, "built-in (PyTorch)")
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        plugin = _load_plugin(entry, {name: source.cls for name, source in found.items()})
        if plugin is not None:
            origin = f"plugin {entry.dist.name if entry.dist else entry.value}"
            found[plugin.name] = Registered(plugin, origin)
    return found


@functools.cache
def trainers() -> dict[str, type[Trainer]]:
    """Name to trainer class, built-ins first; loaded once per process."""
    return {name: source.cls for name, source in sources().items()}


def _deep_trainers() -> tuple[type[Trainer], ...]:
    try:
        from workers.trainers.deep import TRAINERS
    except ImportError as exc:  # torch is an optional extra
        log.info("PyTorch trainers unavailable: %s", exc)
        return ()
    return TRAINERS


def _load_plugin(entry: EntryPoint, taken: Mapping[str, type[Trainer]]) -> type[Trainer] | None:
    try:
        cls = entry.load()
    except Exception:
        log.exception("trainer plugin %s (%s) failed to import; skipped", entry.name, entry.value)
        return None
    if not (isinstance(cls, type) and issubclass(cls, Trainer)):
        log.warning("trainer plugin %s is not a Trainer subclass; skipped", entry.value)
        return None
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        log.warning("trainer plugin %s has an invalid name %r; skipped", entry.value, name)
        return None
    if name in taken:
        log.warning("trainer plugin %s reuses the name %r; skipped", entry.value, name)
        return None
    if not (isinstance(cls.Params, type) and issubclass(cls.Params, TrainerParams)):
        log.warning("trainer plugin %s: Params is not a TrainerParams model; skipped", entry.value)
        return None
    return cls


def trainer_class(name: str) -> type[Trainer]:
    """The class of a registered trainer; ``UnknownTrainer`` for any other name,
    tenant code included (it is never imported in the portal's processes)."""
    source = resolve(name)
    if not isinstance(source, Registered):
        raise UnknownTrainer(name, sorted(sources()))
    return source.cls


def catalog() -> list[dict[str, Any]]:
    """What GET /catalog/algorithms shows: every registered trainer."""
    return [catalog_entry(source) for source in sources().values()]


def catalog_entry(source: Registered) -> dict[str, Any]:
    """What GET /catalog/algorithms shows for one trainer."""
    cls = source.cls
    return {
        "name": cls.name,
        "title": cls.title or cls.name,
        "description": cls.description,
        "tasks": list(cls.tasks),
        "params": params_catalog(cls.Params),
        "source": source.origin,
        "uses_gpu": cls.uses_gpu,
    }


def algorithm_params(name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validated hyper-parameters with defaults filled, as stored with a job."""
    cls = trainer_class(name)
    return validate_params(cls.Params, params, f"algorithm {name}").model_dump()


def make_trainer(
    name: str, data: TrainingData | Dataset, params: Mapping[str, Any] | None, seed: int
) -> Trainer:
    """A fresh trainer at iteration 0. A bare ``Dataset`` is trained on whole."""
    return build_trainer(trainer_class(name), data, params, seed)


def build_trainer(
    cls: type[Trainer], data: TrainingData | Dataset, params: Mapping[str, Any] | None,
    seed: int,
) -> Trainer:
    """A fresh trainer of a resolved class (``Registered.cls``) at iteration 0."""
    name = cls.name
    training = data if isinstance(data, TrainingData) else TrainingData.whole(data)
    if training.task == "text" and "text" not in cls.tasks:
        raise ValueError(f"{name} ({'/'.join(cls.tasks)}) cannot train on text "
                         f"dataset {training.name!r}")
    return cls(validate_params(cls.Params, params, f"algorithm {name}"), training, seed)


def restore_trainer(
    name: str, blob: bytes, data: TrainingData | Dataset, params: Mapping[str, Any] | None,
    seed: int,
) -> Trainer:
    """A trainer put back to a checkpoint taken with ``Trainer.state()``."""
    trainer = make_trainer(name, data, params, seed)
    trainer.restore(blob)
    return trainer
