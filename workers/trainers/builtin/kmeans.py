"""Mini-batch k-means (Sculley, "Web-scale k-means clustering", WWW 2010).

Each iteration assigns a mini-batch to its nearest centres (assignments taken
before any update, as in the paper), then moves every centre with a
per-centre learning rate 1/count. Applying the paper's per-row updates
c <- (1 - 1/v) c + (1/v) x for the m rows of one centre telescopes to the
running mean c <- (v0 * c + sum x) / (v0 + m), which is computed in one
vectorised step.

Loss = inertia on the evaluation rows: the SUM (not mean) of squared
distances from each row to its nearest centre, i.e. sklearn's ``inertia_``
when the dataset has at most 2000 rows (all rows are evaluated). Larger
datasets report it on a fixed 2000-row sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from workers.trainers.builtin.base import (
    NumpyTrainer,
    check_compatible,
    pack_state,
    rng_state,
    unpack_state,
)
from workers.trainers.builtin.sampling import BatchSampler, evaluation_indices
from workers.trainers.builtin.sgd import batch_size_field
from workers.trainers.contract import Metrics, TrainerParams, TrainingData

if TYPE_CHECKING:
    from workers.datasets import Dataset


class KMeansParams(TrainerParams):
    n_clusters: int = Field(8, ge=2, le=100, description="Number of centres (k).")
    batch_size: int = batch_size_field(256)
    init: Literal["k-means++", "random"] = Field(
        "k-means++", description="k-means++ seeding or k distinct random rows.")
    n_init: int = Field(3, ge=1, le=20, description=(
        "Seedings tried; the one with the lowest inertia on the seeding rows is kept."))


# k-means++ costs O(n k) per centre; seeding on a sample keeps init cheap on
# big data while still spreading the centres well.
_INIT_ROWS = 10_000


def squared_distances(X: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, rows x centres, clipped at 0 against round-off."""
    d2 = (X * X).sum(axis=1)[:, None] - 2.0 * X @ centres.T + (centres * centres).sum(axis=1)
    return np.maximum(d2, 0.0)


def kmeans_plus_plus(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeding (Arthur & Vassilvitskii 2007, greedy variant).

    Each next centre is the best of ``2 + log k`` candidates drawn with
    probability ~ D(x)^2. Plain k-means++ (one candidate) too often starts in a
    poor basin that a single mini-batch run cannot leave, e.g. on iris.
    """
    n = X.shape[0]
    trials = 2 + int(np.log(k))
    centres = [X[rng.integers(n)]]
    closest = squared_distances(X, centres[0][None, :])[:, 0]
    for _ in range(1, k):
        total = closest.sum()
        if total > 0:
            # Inverse-CDF sampling; clip guards the float edge where u*total
            # lands past the last cumulative sum.
            draws = np.searchsorted(np.cumsum(closest), rng.random(trials) * total)
            candidates = np.minimum(draws, n - 1)
        else:  # every row already coincides with a centre
            candidates = rng.integers(n, size=trials)
        per_candidate = np.minimum(closest[None, :], squared_distances(X[candidates], X))
        best = int(per_candidate.sum(axis=1).argmin())
        centres.append(X[candidates[best]])
        closest = per_candidate[best]
    return np.array(centres)


def inertia(X: np.ndarray, centres: np.ndarray) -> float:
    """Sum of squared distances from each row to its nearest centre."""
    return float(squared_distances(X, centres).min(axis=1).sum())


class MiniBatchKMeansTrainer(NumpyTrainer):
    name = kind = "kmeans"
    title = "Mini-batch k-means"
    description = "Sculley's mini-batch k-means; loss = inertia (sum of squared distances)."
    tasks = ("clustering",)
    Params = KMeansParams

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        super().__init__(params, data, seed)
        dataset = self.dataset
        k = int(self.hp["n_clusters"])
        if k > dataset.n_samples:
            raise ValueError(f"n_clusters={k} exceeds the {dataset.n_samples} rows of the data")
        self.rng = np.random.default_rng(self.seed)
        sample = dataset.X
        if dataset.n_samples > _INIT_ROWS:
            sample = dataset.X[self.rng.choice(dataset.n_samples, _INIT_ROWS, replace=False)]
        # Mini-batch updates rarely escape a bad start (two centres in one
        # cluster), so several seedings are compared up front, as sklearn's
        # MiniBatchKMeans does; seeding is cheap next to training.
        candidates = [self._seed_centres(sample, k) for _ in range(int(self.hp["n_init"]))]
        self.centres = min(candidates, key=lambda c: inertia(sample, c))
        self.counts = np.zeros(k)
        self.sampler = BatchSampler(dataset.n_samples, int(self.hp["batch_size"]), self.rng)
        rows = evaluation_indices(dataset.n_samples)
        self._X_eval = dataset.X if rows is None else dataset.X[rows]

    def _seed_centres(self, sample: np.ndarray, k: int) -> np.ndarray:
        if self.hp["init"] == "k-means++":
            return kmeans_plus_plus(sample, k, self.rng)
        return sample[self.rng.choice(sample.shape[0], k, replace=False)].copy()

    def held_out(self, validation: Dataset) -> Metrics:
        # Inertia is a sum: scaled to the evaluation rows' count so that
        # val_loss and loss share one axis.
        per_row = inertia(validation.X, self.centres) / validation.n_samples
        return {"val_loss": per_row * self._X_eval.shape[0]}

    def losses(self, n: int) -> list[float]:
        k = self.centres.shape[0]
        losses: list[float] = []
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(n):
                batch = self.dataset.X[self.sampler.next()]
                nearest = squared_distances(batch, self.centres).argmin(axis=1)
                added = np.bincount(nearest, minlength=k).astype(np.float64)
                sums = np.zeros_like(self.centres)
                np.add.at(sums, nearest, batch)
                hit = added > 0
                new_counts = self.counts + added
                self.centres[hit] = (
                    self.counts[hit, None] * self.centres[hit] + sums[hit]
                ) / new_counts[hit, None]
                self.counts = new_counts
                self.iteration += 1
                losses.append(inertia(self._X_eval, self.centres))
        return losses

    def state(self) -> bytes:
        meta = {
            "algorithm": self.kind,
            "data_shape": [self.dataset.n_samples, self.dataset.n_features],
            "iteration": self.iteration,
            "rng": rng_state(self.rng),
            "sampler": self.sampler.state(),
        }
        return pack_state({"centres": self.centres, "counts": self.counts}, meta)

    def restore(self, blob: bytes) -> None:
        arrays, meta = unpack_state(blob)
        check_compatible(meta, self.kind, self.dataset)
        trainer = self
        if arrays["centres"].shape != trainer.centres.shape:
            raise ValueError(
                f"checkpoint has {arrays['centres'].shape[0]} centres, "
                f"n_clusters={trainer.centres.shape[0]}"
            )
        trainer.centres = np.array(arrays["centres"], dtype=np.float64)
        trainer.counts = np.array(arrays["counts"], dtype=np.float64)
        trainer.iteration = int(meta["iteration"])
        trainer.rng.bit_generator.state = dict(meta["rng"])
        trainer.sampler.restore(meta["sampler"])
