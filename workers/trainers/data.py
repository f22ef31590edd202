"""The data a job's trainer gets: its dataset split into training and held-out rows.

The split is fixed (a constant seed, not the job's), so every job on the same
data trains on the same rows and reports validation metrics on the same
held-out rows: runs compare, and a resumed chunk sees exactly the same split.
"""

from __future__ import annotations

import functools

import numpy as np

from workers.datasets import Dataset
from workers.trainers.contract import TrainingData

HOLDOUT_FRACTION = 0.2
HOLDOUT_MAX_ROWS = 2000
"""Validation beyond this many rows costs more than it tells."""
MIN_ROWS_FOR_HOLDOUT = 50
"""Smaller data trains on every row and reports no validation metrics."""
_SPLIT_SEED = 20171025


@functools.lru_cache(maxsize=8)
def holdout(dataset: Dataset) -> TrainingData:
    """``dataset`` split into training rows and a held-out validation set.

    Cached per dataset object (datasets are cached and read-only), so a big
    table is split once per worker process rather than once per chunk.
    """
    n = dataset.n_samples
    if n < MIN_ROWS_FOR_HOLDOUT:
        return TrainingData.whole(dataset)
    size = min(HOLDOUT_MAX_ROWS, max(1, int(n * HOLDOUT_FRACTION)))
    order = np.random.default_rng(_SPLIT_SEED).permutation(n)
    held, kept = np.sort(order[:size]), np.sort(order[size:])
    return TrainingData(
        name=dataset.name, task=dataset.task,
        train=_rows(dataset, kept), validation=_rows(dataset, held),
    )


def _rows(dataset: Dataset, rows: np.ndarray) -> Dataset:
    X = dataset.X[rows]
    X.setflags(write=False)
    y = None
    if dataset.y is not None:
        y = dataset.y[rows]
        y.setflags(write=False)
    return Dataset(dataset.name, dataset.task, X, y, dataset.n_classes)
