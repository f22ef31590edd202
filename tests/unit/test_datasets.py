"""Dataset registry: shapes, standardisation, caching, seeding, errors."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from workers.datasets import DATASETS, dataset_from_arrays, load_dataset
from workers.datasets.params import ParamSpec, fill_params

SMALL = {
    "synthetic_classification": {"n_samples": 300, "n_features": 6, "n_classes": 3},
    "synthetic_regression": {"n_samples": 300, "n_features": 5},
    "blobs": {"n_samples": 300, "centers": 4},
}

EXPECTED_SHAPES = {
    "digits": (1797, 64, 10),
    "breast_cancer": (569, 30, 2),
    "wine": (178, 13, 3),
    "iris": (150, 4, 3),
    "diabetes": (442, 10, 0),
}


@pytest.mark.parametrize("name", sorted(n for n, d in DATASETS.items() if d.task != "text"))
def test_every_dataset_is_standardised(name: str) -> None:
    ds = load_dataset(name, SMALL.get(name, {}))
    assert ds.X.dtype == np.float64
    assert ds.X.ndim == 2
    assert np.allclose(ds.X.mean(axis=0), 0.0, atol=1e-10)
    std = ds.X.std(axis=0)
    # Constant columns (digits has all-zero border pixels) stay at exactly 0.
    assert np.all(np.isclose(std, 1.0) | (std == 0.0))
    assert ds.y is not None and ds.y.shape == (ds.n_samples,)
    assert ds.task in DATASETS[name].tasks
    if ds.task == "regression":
        assert ds.n_classes == 0
        assert abs(ds.y.mean()) < 1e-10 and np.isclose(ds.y.std(), 1.0)
    else:
        assert ds.y.dtype.kind == "i"
        assert set(np.unique(ds.y)) == set(range(ds.n_classes))
    assert not ds.X.flags.writeable  # shared through the cache


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPES))
def test_builtin_shapes(name: str) -> None:
    rows, cols, classes = EXPECTED_SHAPES[name]
    ds = load_dataset(name, {})
    assert ds.X.shape == (rows, cols)
    assert ds.n_classes == classes


def test_digits_has_constant_columns_left_at_zero() -> None:
    ds = load_dataset("digits", {})
    constant = ds.X.std(axis=0) == 0
    assert constant.any()
    assert np.all(ds.X[:, constant] == 0.0)


def test_synthetic_defaults_and_params() -> None:
    ds = load_dataset("synthetic_classification", {})
    assert ds.X.shape == (5000, 20) and ds.n_classes == 2
    ds = load_dataset("blobs", {"n_samples": 400, "n_features": 3, "centers": 7})
    assert ds.X.shape == (400, 3) and ds.n_classes == 7
    assert ds.supports("clustering") and ds.supports("classification")
    assert not ds.supports("regression")


def test_cached_and_default_filled_keys_share_an_entry() -> None:
    a = load_dataset("blobs", {"n_samples": 500})
    b = load_dataset("blobs", {"n_samples": 500, "centers": 5, "seed": 0})
    assert a is b


def test_seeded_reproducible_and_seed_sensitive() -> None:
    from workers import datasets

    params = {"n_samples": 200, "n_features": 4}
    a = load_dataset("synthetic_regression", params)
    datasets._load_cached.cache_clear()  # force a genuine regeneration
    b = load_dataset("synthetic_regression", params)
    assert a is not b
    assert np.array_equal(a.X, b.X) and a.y is not None and b.y is not None
    assert np.array_equal(a.y, b.y)
    c = load_dataset("synthetic_regression", {**params, "seed": 1})
    assert not np.array_equal(a.X, c.X)


def test_unknown_dataset_is_a_readable_key_error() -> None:
    with pytest.raises(KeyError, match="unknown dataset 'nope'.*iris"):
        load_dataset("nope", {})


def test_bad_params_rejected() -> None:
    with pytest.raises(ValueError, match="n_samples must be >= 100"):
        load_dataset("blobs", {"n_samples": 5})
    with pytest.raises(ValueError, match="unknown parameter.*n_sample"):
        load_dataset("blobs", {"n_sample": 500})
    with pytest.raises(ValueError, match="needs n_features >= 5"):
        load_dataset("synthetic_classification", {"n_features": 2, "n_classes": 20})
    with pytest.raises(ValueError, match="exceeds the limit"):
        load_dataset("blobs", {"n_samples": 1_000_000, "n_features": 500})


def test_dataset_from_arrays_maps_labels_and_standardises() -> None:
    X = np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [4.0, 5.0]])
    ds = dataset_from_arrays("upload", "classification", X, ["b", "a", "b", "c"])
    assert ds.n_classes == 3
    assert ds.y is not None and ds.y.tolist() == [1, 0, 1, 2]
    assert np.all(ds.X[:, 1] == 0.0)
    with pytest.raises(ValueError, match="NaN"):
        dataset_from_arrays("upload", "clustering", [[np.nan, 1.0]], None)


def test_param_spec_coercion_and_json() -> None:
    spec = ParamSpec("n", "int", 3, 1, 10, help="count")
    assert spec.coerce(4.0) == 4 and isinstance(spec.coerce("5"), int)
    with pytest.raises(ValueError):
        spec.coerce(2.5)
    with pytest.raises(ValueError):
        spec.coerce(True)
    assert spec.to_json()["maximum"] == 10
    choice = ParamSpec("act", "choice", "relu", choices=("relu", "tanh"))
    assert fill_params((spec, choice), {"act": "tanh"}, "x") == {"n": 3, "act": "tanh"}
    with pytest.raises(ValueError, match="one of relu, tanh"):
        choice.coerce("gelu")


PRELOAD_SCRIPT = """
import sys
from workers import celery_app
assert "sklearn.datasets" not in sys.modules, "imported before the worker starts"
celery_app._start_main_process()
print("sklearn.datasets" in sys.modules)
"""


def test_a_worker_imports_data_set_loaders_before_forking_its_pool() -> None:
    # Pool processes fork from the main process after worker_init: what it
    # imported there, they do not each import on their first chunk.
    done = subprocess.run([sys.executable, "-c", PRELOAD_SCRIPT], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "WORKER_METRICS_PORT": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
