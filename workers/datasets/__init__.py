"""Datasets the workers train on: a registry of built-in and seeded synthetic data.

Every dataset is returned standardised (zero mean, unit variance per column) so
one learning-rate range suits all of them and loss curves are comparable across
jobs. ``Dataset`` holds only arrays and a few labels, so a tenant's uploaded CSV
can become one through ``dataset_from_arrays`` without touching the trainers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from workers.datasets.params import ParamSpec, ParamValue, fill_params, seed_spec

Task = Literal["classification", "regression", "clustering", "text"]

# Guards the worker's memory: 50M float64 cells is 400 MB before standardising.
MAX_CELLS = 50_000_000


@dataclass(frozen=True, eq=False)
class Dataset:
    """Standardised arrays ready for training. Arrays are read-only (shared via a cache)."""

    name: str
    task: Task
    X: np.ndarray
    y: np.ndarray | None
    n_classes: int

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    def supports(self, task: str) -> bool:
        """Whether an algorithm for ``task`` can train on this data.

        Derived from the arrays, not the registry, so uploaded data answers too:
        labelled data can also be clustered (labels ignored).
        """
        if task == "clustering":
            return True
        if task == "classification":
            return self.y is not None and self.n_classes >= 2
        if task == "regression":
            return self.y is not None and self.task == "regression"
        return False


def standardise(columns: np.ndarray) -> np.ndarray:
    """Zero-mean, unit-variance columns; constant columns become all zeros."""
    values = np.asarray(columns, dtype=np.float64)
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    # A constant column carries no information; dividing by 1 leaves it at 0
    # instead of producing NaN.
    safe = np.where(std > 0, std, 1.0)
    return (values - mean) / safe


def dataset_from_arrays(name: str, task: Task, X: Any, y: Any | None) -> Dataset:
    """Build a standardised, read-only ``Dataset`` from raw arrays.

    Classification labels of any type are mapped to 0..C-1 in sorted order;
    regression targets are standardised like the features.
    """
    features = np.asarray(X, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] == 0 or features.shape[1] == 0:
        raise ValueError(f"{name}: X must be a non-empty 2-D array; got shape {features.shape}")
    if not np.all(np.isfinite(features)):
        raise ValueError(f"{name}: X contains NaN or infinite values")
    features = standardise(features)
    target: np.ndarray | None = None
    n_classes = 0
    if y is not None:
        raw = np.asarray(y)
        if raw.shape != (features.shape[0],):
            raise ValueError(f"{name}: y must have shape ({features.shape[0]},); got {raw.shape}")
        if task == "regression":
            target = standardise(raw.reshape(-1, 1)).ravel()
        else:
            classes, target = np.unique(raw, return_inverse=True)
            target = target.astype(np.int64)
            n_classes = int(classes.size)
    elif task != "clustering":
        raise ValueError(f"{name}: a {task} dataset needs targets y")
    features.setflags(write=False)
    if target is not None:
        target.setflags(write=False)
    return Dataset(name=name, task=task, X=features, y=target, n_classes=n_classes)


Loader = Callable[[Mapping[str, ParamValue]], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class DatasetInfo:
    """A catalogue entry: what the dataset is, which tasks it suits, its parameters."""

    name: str
    title: str
    description: str
    task: Task
    tasks: tuple[Task, ...]
    params: tuple[ParamSpec, ...]
    loader: Loader

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "task": self.task,
            "tasks": list(self.tasks),
            "params": [p.to_json() for p in self.params],
        }


def _sklearn() -> Any:
    """sklearn.datasets, imported on first load: the API lists this catalogue
    but never loads data, and importing sklearn (with scipy) costs it seconds
    of start-up."""
    from sklearn import datasets

    return datasets


def preload() -> None:
    """Import what loading a built-in data set needs, once, in a worker's main
    process before it forks its pool: each pool process then inherits it
    instead of paying ~0.9 s (sklearn with scipy) on its first chunk."""
    _sklearn()


def _builtin(loader: str) -> Loader:
    def load(_params: Mapping[str, ParamValue]) -> tuple[np.ndarray, np.ndarray]:
        X, y = getattr(_sklearn(), loader)(return_X_y=True)
        return np.asarray(X), np.asarray(y)

    return load


def _check_size(params: Mapping[str, ParamValue]) -> None:
    cells = int(params["n_samples"]) * int(params["n_features"])
    if cells > MAX_CELLS:
        raise ValueError(
            f"n_samples * n_features = {cells:,} exceeds the limit of {MAX_CELLS:,} values"
        )


def _synthetic_classification(p: Mapping[str, ParamValue]) -> tuple[np.ndarray, np.ndarray]:
    _check_size(p)
    n_features, n_classes = int(p["n_features"]), int(p["n_classes"])
    # make_classification puts each class on a hypercube vertex in the
    # informative subspace, so it needs 2**n_informative >= n_classes.
    needed = max(2, math.ceil(math.log2(n_classes)))
    if needed > n_features:
        raise ValueError(f"n_classes={n_classes} needs n_features >= {needed}")
    n_informative = min(n_features, max(needed, n_features // 2))
    n_redundant = min(2, n_features - n_informative)
    X, y = _sklearn().make_classification(
        n_samples=int(p["n_samples"]),
        n_features=n_features,
        n_informative=n_informative,
        n_redundant=n_redundant,
        n_classes=n_classes,
        n_clusters_per_class=1,
        random_state=int(p["seed"]),
    )
    return X, y


def _synthetic_regression(p: Mapping[str, ParamValue]) -> tuple[np.ndarray, np.ndarray]:
    _check_size(p)
    n_features = int(p["n_features"])
    X, y = _sklearn().make_regression(
        n_samples=int(p["n_samples"]),
        n_features=n_features,
        n_informative=min(n_features, 10),
        noise=float(p["noise"]),
        random_state=int(p["seed"]),
    )
    return X, y


def _blobs(p: Mapping[str, ParamValue]) -> tuple[np.ndarray, np.ndarray]:
    _check_size(p)
    X, y = _sklearn().make_blobs(
        n_samples=int(p["n_samples"]),
        n_features=int(p["n_features"]),
        centers=int(p["centers"]),
        cluster_std=float(p["cluster_std"]),
        random_state=int(p["seed"]),
    )
    return X, y


def _n_samples(default: int) -> ParamSpec:
    return ParamSpec(
        "n_samples", "int", default, 100, 1_000_000, help="Number of rows.", log_scale=True
    )


def _n_features(default: int) -> ParamSpec:
    return ParamSpec("n_features", "int", default, 2, 500, help="Number of feature columns.")


_LABELLED: tuple[Task, ...] = ("classification", "clustering")


def _text_only(_params: Mapping[str, ParamValue]) -> tuple[np.ndarray, np.ndarray]:
    raise ValueError("python_docs is a text dataset; workers.datasets.text.load_text reads it")


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            "digits",
            "Handwritten digits",
            "1,797 8x8 images of digits 0-9 (64 pixel features, 10 classes).",
            "classification",
            _LABELLED,
            (),
            _builtin("load_digits"),
        ),
        DatasetInfo(
            "breast_cancer",
            "Breast cancer (Wisconsin)",
            "569 tumours, 30 features, benign vs malignant (2 classes).",
            "classification",
            _LABELLED,
            (),
            _builtin("load_breast_cancer"),
        ),
        DatasetInfo(
            "wine",
            "Wine",
            "178 wines, 13 chemical features, 3 cultivars.",
            "classification",
            _LABELLED,
            (),
            _builtin("load_wine"),
        ),
        DatasetInfo(
            "iris",
            "Iris",
            "150 flowers, 4 measurements, 3 species.",
            "classification",
            _LABELLED,
            (),
            _builtin("load_iris"),
        ),
        DatasetInfo(
            "diabetes",
            "Diabetes progression",
            "442 patients, 10 baseline features, disease progression after a year.",
            "regression",
            ("regression", "clustering"),
            (),
            _builtin("load_diabetes"),
        ),
        DatasetInfo(
            "synthetic_classification",
            "Synthetic classification",
            "Seeded Gaussian clusters on hypercube vertices (sklearn make_classification).",
            "classification",
            _LABELLED,
            (
                _n_samples(5000),
                _n_features(20),
                ParamSpec("n_classes", "int", 2, 2, 20, help="Number of classes."),
                seed_spec(),
            ),
            _synthetic_classification,
        ),
        DatasetInfo(
            "synthetic_regression",
            "Synthetic regression",
            "Seeded random linear model plus Gaussian noise (sklearn make_regression).",
            "regression",
            ("regression", "clustering"),
            (
                _n_samples(5000),
                _n_features(20),
                ParamSpec("noise", "float", 10.0, 0.0, 1000.0, help="Std of the added noise."),
                seed_spec(),
            ),
            _synthetic_regression,
        ),
        DatasetInfo(
            "blobs",
            "Gaussian blobs",
            "Seeded isotropic Gaussian blobs (sklearn make_blobs); labels are the blob ids.",
            "clustering",
            ("clustering", "classification"),
            (
                _n_samples(1500),
                _n_features(2),
                ParamSpec("centers", "int", 5, 2, 50, help="Number of blobs."),
                ParamSpec("cluster_std", "float", 1.0, 0.01, 100.0, help="Std of each blob."),
                seed_spec(),
            ),
            _blobs,
        ),
        DatasetInfo(
            "python_docs",
            "Python docstrings (text)",
            "337k characters of Python standard-library docstrings (PSF License), for "
            "character-level language models (char_transformer).",
            "text",
            ("text",),
            (),
            _text_only,
        ),
    )
}


def load_dataset(name: str, params: Mapping[str, Any] | None = None) -> Dataset:
    """Load a registered dataset, standardised, with missing params defaulted.

    Cached per process because a worker reloads the dataset for every chunk of
    a job; the returned arrays are read-only so sharing them is safe.
    """
    info = DATASETS.get(name)
    if info is None:
        raise KeyError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}")
    filled = fill_params(info.params, params, f"dataset {name}")
    return _load_cached(name, tuple(sorted(filled.items())))


@functools.lru_cache(maxsize=16)
def _load_cached(name: str, key: tuple[tuple[str, ParamValue], ...]) -> Dataset:
    info = DATASETS[name]
    X, y = info.loader(dict(key))
    return dataset_from_arrays(name, info.task, X, y)
