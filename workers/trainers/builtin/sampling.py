"""Mini-batch sampling and the fixed evaluation rows, both checkpoint-friendly."""

from __future__ import annotations

from typing import Any

import numpy as np

# Losses on more rows than this cost more than the mini-batch update itself.
EVAL_ROWS = 2000
# A constant seed, not the job's: jobs with different seeds on the same
# dataset then report losses on the same rows and their curves compare.
_EVAL_SEED = 20171024


def evaluation_indices(n_samples: int) -> np.ndarray | None:
    """Rows the loss is measured on; ``None`` means all rows (small datasets)."""
    if n_samples <= EVAL_ROWS:
        return None
    rng = np.random.default_rng(_EVAL_SEED)
    return np.sort(rng.choice(n_samples, size=EVAL_ROWS, replace=False))


class BatchSampler:
    """Epoch-wise shuffled mini-batches without replacement.

    Instead of storing the current permutation (8 MB for a million rows) in
    every checkpoint, each epoch's permutation is generated from a 63-bit key
    drawn from the job's RNG; the checkpoint keeps only the key and position.
    """

    def __init__(self, n_samples: int, batch_size: int, rng: np.random.Generator) -> None:
        self.n_samples = n_samples
        # A batch larger than the data means full-batch gradient descent.
        self.batch_size = max(1, min(batch_size, n_samples))
        self._rng = rng
        self._key = 0
        self._pos = n_samples  # forces a fresh permutation on the first batch
        self._perm = np.arange(0)

    def _new_epoch(self) -> None:
        self._key = int(self._rng.integers(0, 2**63 - 1))
        self._perm = np.random.default_rng(self._key).permutation(self.n_samples)
        self._pos = 0

    def next(self) -> np.ndarray:
        """Indices of the next mini-batch; a batch may straddle two epochs."""
        parts: list[np.ndarray] = []
        needed = self.batch_size
        while needed:
            if self._pos >= self.n_samples:
                self._new_epoch()
            take = min(needed, self.n_samples - self._pos)
            parts.append(self._perm[self._pos : self._pos + take])
            self._pos += take
            needed -= take
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def state(self) -> dict[str, Any]:
        return {"key": self._key, "pos": self._pos}

    def restore(self, state: dict[str, Any]) -> None:
        self._key = int(state["key"])
        self._pos = int(state["pos"])
        if self._pos < self.n_samples:
            self._perm = np.random.default_rng(self._key).permutation(self.n_samples)
