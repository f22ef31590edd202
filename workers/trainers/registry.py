"""Every trainer the portal can run, by name: built-in, PyTorch and plugins.

Operators add trainers by installing a package that declares them in the
``slaq.trainers`` entry-point group (``name = "package.module:TrainerClass"``).
Plugins are operator-installed and so trusted like the portal's own code;
tenants' uploaded code never comes through here (see ``workers.sandbox``).
A plugin that fails to load, is not a Trainer, or reuses a taken name is
skipped with a warning rather than taking the whole catalogue down.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from workers.trainers.contract import Trainer, TrainerParams, TrainingData
from workers.trainers.params_schema import params_catalog, validate_params

if TYPE_CHECKING:
    from workers.datasets import Dataset

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "slaq.trainers"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


@functools.cache
def trainers() -> dict[str, type[Trainer]]:
    """Name to trainer class, built-ins first; loaded once per process."""
    from workers.trainers.builtin import NUMPY_TRAINERS

    found: dict[str, type[Trainer]] = {}
    sources: dict[str, str] = {}
    for cls in NUMPY_TRAINERS:
        found[cls.name], sources[cls.name] = cls, "built-in"
    for cls in _deep_trainers():
        found[cls.name], sources[cls.name] = cls, "built-in (PyTorch)"
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        plugin = _load_plugin(entry, found)
        if plugin is not None:
            found[plugin.name] = plugin
            sources[plugin.name] = f"plugin {entry.dist.name if entry.dist else entry.value}"
    _SOURCES.clear()
    _SOURCES.update(sources)
    return found


_SOURCES: dict[str, str] = {}


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
    # A built-in numpy trainer is found without building the whole catalogue:
    # that imports torch, seconds of a worker's first chunk for a job that
    # never uses it. Plugins cannot take a built-in's name, so this is the
    # class trainers() would give.
    from workers.trainers.builtin import NUMPY_TRAINERS

    for builtin in NUMPY_TRAINERS:
        if builtin.name == name:
            return builtin
    cls = trainers().get(name)
    if cls is None:
        raise KeyError(f"unknown algorithm {name!r}; known algorithms: "
                       f"{', '.join(sorted(trainers()))}")
    return cls


def catalog_entry(cls: type[Trainer]) -> dict[str, Any]:
    """What GET /catalog/algorithms shows for one trainer."""
    trainers()
    return {
        "name": cls.name,
        "title": cls.title or cls.name,
        "description": cls.description,
        "tasks": list(cls.tasks),
        "params": params_catalog(cls.Params),
        "source": _SOURCES.get(cls.name, "built-in"),
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
    cls = trainer_class(name)
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
