"""Training algorithms: real maths against scikit-learn, determinism, checkpoints."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression, Ridge

from workers.datasets import Dataset, load_dataset
from workers.trainers.builtin.base import unpack_state
from workers.trainers.contract import Trainer
from workers.trainers.params_schema import params_catalog
from workers.trainers.registry import algorithm_params, make_trainer, restore_trainer, trainers

# A dataset (name, params) each algorithm should learn on, with its hyper-parameters.
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "logistic_regression": ("wine", {}, {}),
    "linear_svm": ("breast_cancer", {}, {}),
    "mlp": ("iris", {}, {"hidden_units": 16, "hidden_layers": 2, "activation": "tanh"}),
    # Random seeding: k-means++ already starts close to the optimum.
    "kmeans": ("blobs", {"n_samples": 600}, {"n_clusters": 5, "init": "random", "n_init": 1}),
    "linear_regression": ("diabetes", {}, {"l2": 1e-3}),
}
# A larger-than-evaluation-set case exercises the 2000-row subsample path too.
BIG = ("synthetic_classification", {"n_samples": 3000, "n_features": 8, "n_classes": 3})


def run(trainer: Trainer, n: int) -> list[float]:
    """The training losses of ``n`` iterations."""
    return [metrics["loss"] for metrics in trainer.step(n)]


def test_registry_covers_cases() -> None:
    assert set(CASES) <= set(trainers())
    for name in CASES:
        catalog = params_catalog(trainers()[name].Params)
        assert catalog, name
        for spec in catalog:
            if spec["name"] == "learning_rate":
                assert spec["minimum"] is not None and spec["minimum"] > 0


def _case(name: str) -> tuple[Dataset, dict[str, Any]]:
    dataset, dataset_params, params = CASES[name]
    return load_dataset(dataset, dataset_params), params


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_decreases(name: str) -> None:
    ds, params = _case(name)
    trainer = make_trainer(name, ds, params, seed=3)
    losses = run(trainer, 300)
    assert len(losses) == 300 and trainer.iteration == 300
    assert all(np.isfinite(losses))
    assert np.mean(losses[-20:]) < 0.8 * losses[0]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("big", [False, True])
def test_restore_is_bitwise_deterministic(name: str, big: bool) -> None:
    if big and name == "linear_regression":
        ds = load_dataset("synthetic_regression", {"n_samples": 3000, "n_features": 8})
        params: dict[str, Any] = {}
    elif big:
        ds, params = load_dataset(*BIG), dict(CASES[name][2])
    else:
        ds, params = _case(name)
    k, m = 37, 45  # odd sizes so restores land mid-epoch
    straight = run(make_trainer(name, ds, params, seed=11), k + m)

    first = make_trainer(name, ds, params, seed=11)
    head = run(first, k)
    data = first.state()
    restored = restore_trainer(name, data, ds, params, seed=11)
    assert restored.iteration == k
    tail = run(restored, m)
    assert head + tail == straight  # exact float equality, not approx

    # The checkpoint is a plain npz: loads without pickle, no object arrays.
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        for key in archive.files:
            assert archive[key].dtype != object
    assert zipfile.is_zipfile(io.BytesIO(data))


def test_different_seeds_differ_and_same_seed_repeats() -> None:
    ds, params = _case("mlp")
    a = run(make_trainer("mlp", ds, params, seed=1), 5)
    b = run(make_trainer("mlp", ds, params, seed=1), 5)
    c = run(make_trainer("mlp", ds, params, seed=2), 5)
    assert a == b and a != c


def test_param_defaults_filled_and_validated() -> None:
    filled = algorithm_params("mlp", {"hidden_units": 8})
    assert filled["hidden_units"] == 8
    assert filled["hidden_layers"] == 1 and filled["activation"] == "relu"
    assert float(filled["learning_rate"]) > 0
    trainer = make_trainer("logistic_regression", load_dataset("iris", {}), {}, seed=0)
    assert trainer.params.model_dump() == algorithm_params("logistic_regression", {})
    assert algorithm_params("logistic_regression", {})["learning_rate"] == 0.1
    assert algorithm_params("logistic_regression", {})["batch_size"] == 64
    with pytest.raises(ValueError, match="learning_rate must be >="):
        algorithm_params("linear_svm", {"learning_rate": 0})
    with pytest.raises(ValueError, match="unknown parameter"):
        algorithm_params("kmeans", {"k": 3})
    with pytest.raises(KeyError, match="unknown algorithm"):
        algorithm_params("xgboost", {})


def test_incompatible_task_and_checkpoint_rejected() -> None:
    with pytest.raises(ValueError, match="cannot train on dataset"):
        make_trainer("linear_regression", load_dataset("iris", {}), {}, seed=0)
    iris = load_dataset("iris", {})
    state = make_trainer("logistic_regression", iris, {}, seed=0).state()
    with pytest.raises(ValueError, match="checkpoint is for"):
        restore_trainer("linear_svm", state, iris, {}, seed=0)
    with pytest.raises(ValueError, match="shape"):
        restore_trainer("logistic_regression", state, load_dataset("wine", {}), {}, seed=0)
    arrays, meta = unpack_state(state)
    assert meta["iteration"] == 0 and "w_W" in arrays


def test_divergence_is_reported_not_caught() -> None:
    ds = load_dataset("diabetes", {})
    trainer = make_trainer("linear_regression", ds, {"learning_rate": 10.0}, seed=0)
    losses = run(trainer, 200)
    assert not np.isfinite(losses[-1])  # the caller, not the trainer, fails the job


# --- comparisons with scikit-learn's solvers on the same objective ---------


def _xent_objective(model: LogisticRegression, ds: Dataset, l2: float) -> float:
    assert ds.y is not None
    proba = model.predict_proba(ds.X)
    nll = -np.mean(np.log(proba[np.arange(ds.n_samples), ds.y]))
    return float(nll + 0.5 * l2 * np.sum(model.coef_**2))


@pytest.mark.parametrize(
    ("dataset", "params", "iterations"),
    [
        ("breast_cancer", {}, 3000),  # default mini-batch SGD
        ("breast_cancer", {"batch_size": 569, "learning_rate": 0.5}, 3000),  # full batch
        ("wine", {"l2": 1e-2}, 1500),  # multinomial
    ],
)
def test_logistic_regression_matches_sklearn_objective(
    dataset: str, params: dict[str, Any], iterations: int
) -> None:
    ds = load_dataset(dataset, {})
    l2 = float(algorithm_params("logistic_regression", params)["l2"])
    ours = run(make_trainer("logistic_regression", ds, params, seed=0), iterations)
    final = float(np.mean(ours[-50:]))  # SGD jitters; judge its recent level
    reference = LogisticRegression(C=1.0 / (l2 * ds.n_samples), tol=1e-10, max_iter=10_000)
    best = _xent_objective(reference.fit(ds.X, ds.y), ds, l2)
    print(f"logistic {dataset} {params}: ours {final:.5f} sklearn {best:.5f}")
    assert best <= final * (1 + 1e-6)  # sklearn's is the optimum
    assert final <= 1.05 * best


@pytest.mark.parametrize(("dataset", "dataset_params", "k"), [("iris", {}, 3), ("blobs", {}, 5)])
def test_kmeans_inertia_close_to_sklearn(
    dataset: str, dataset_params: dict[str, Any], k: int
) -> None:
    ds = load_dataset(dataset, dataset_params)
    ours = run(make_trainer("kmeans", ds, {"n_clusters": k}, seed=0), 300)[-1]
    best = KMeans(n_clusters=k, n_init=10, random_state=0).fit(ds.X).inertia_
    print(f"kmeans {dataset}: ours {ours:.3f} sklearn {best:.3f}")
    assert ours <= 1.10 * best


def test_linear_regression_close_to_ridge() -> None:
    ds = load_dataset("diabetes", {})
    assert ds.y is not None
    l2 = 1e-3
    ours = run(make_trainer("linear_regression", ds, {"l2": l2}, seed=0), 2000)
    final = float(np.mean(ours[-50:]))
    ridge = Ridge(alpha=l2 * ds.n_samples).fit(ds.X, ds.y)
    residuals = ridge.predict(ds.X) - ds.y
    best = 0.5 * float(np.mean(residuals**2)) + 0.5 * l2 * float(np.sum(ridge.coef_**2))
    print(f"linear_regression diabetes: ours {final:.5f} ridge {best:.5f}")
    assert best <= final * (1 + 1e-9)
    assert final <= 1.02 * best
