"""Loss histories as numpy arrays: an immutable view and the ring that feeds it.

A scheduler round looks at thousands of jobs' histories. Held as tuples of
:class:`LossPoint` objects, every look (the newest iteration, the mean
seconds per iteration, a fit window) walks Python objects; held as three
arrays it is a slice. :class:`LossHistory` is what a policy sees
(``JobView.history``); :class:`LossRing` is the bounded, append-only store
the live history cache and the simulator keep per job.

``LossHistory`` is still a ``Sequence[LossPoint]`` (indexing builds the point
on demand), so code and tests that read points one at a time keep working.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np


@dataclass(frozen=True)
class LossPoint:
    """One reported training step: iteration number (1-based), loss, and the
    seconds that iteration took."""

    iteration: int
    loss: float
    seconds: float


def _frozen(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


class LossHistory(Sequence[LossPoint]):
    """An immutable loss history, oldest first: ``iterations``, ``values``
    (the losses) and ``seconds`` (per iteration) are equally long read-only
    arrays. ``size`` and ``newest_iteration`` (0 when empty) are plain
    attributes: a round reads them for every job, and a Python-level
    ``len`` or a numpy scalar costs several times an attribute."""

    __slots__ = ("iterations", "values", "seconds", "size", "newest_iteration")

    def __init__(self, iterations: np.ndarray, values: np.ndarray, seconds: np.ndarray) -> None:
        self.iterations = _frozen(iterations)
        self.values = _frozen(values)
        self.seconds = _frozen(seconds)
        self.size = len(iterations)
        self.newest_iteration = int(iterations[-1]) if self.size else 0

    @classmethod
    def of(cls, points: Iterable[LossPoint]) -> LossHistory:
        """``points`` as a history (itself if it already is one)."""
        if isinstance(points, LossHistory):
            return points
        rows = list(points)
        return cls(np.fromiter((p.iteration for p in rows), np.int64, len(rows)),
                   np.fromiter((p.loss for p in rows), float, len(rows)),
                   np.fromiter((p.seconds for p in rows), float, len(rows)))

    def mean_seconds(self, count: int) -> float | None:
        """Mean seconds per iteration over the newest ``count`` points."""
        recent = self.seconds[-count:]
        if not len(recent):
            return None
        # Summed in order, as Python's ``sum`` does: numpy's pairwise sum
        # rounds differently, and simulated schedules must not move with it.
        return sum(recent.tolist()) / len(recent)

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> LossPoint: ...

    @overload
    def __getitem__(self, index: slice) -> LossHistory: ...

    def __getitem__(self, index: int | slice) -> LossPoint | LossHistory:
        if isinstance(index, slice):
            return LossHistory(self.iterations[index], self.values[index], self.seconds[index])
        return LossPoint(int(self.iterations[index]), float(self.values[index]),
                         float(self.seconds[index]))

    def __iter__(self) -> Iterator[LossPoint]:
        for i, v, s in zip(self.iterations.tolist(), self.values.tolist(),
                           self.seconds.tolist(), strict=True):
            yield LossPoint(i, v, s)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LossHistory):
            return bool(np.array_equal(self.iterations, other.iterations)
                        and np.array_equal(self.values, other.values)
                        and np.array_equal(self.seconds, other.seconds))
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((len(self), self.newest_iteration))

    def __repr__(self) -> str:
        return f"LossHistory({len(self)} points, newest iteration {self.newest_iteration})"


EMPTY = LossHistory(np.empty(0, np.int64), np.empty(0), np.empty(0))


class LossRing:
    """A job's newest ``capacity`` points (all of them when ``None``), appended
    in iteration order.

    :meth:`view` is zero-copy and stays valid forever: appends only write past
    the end of every view handed out, and when the buffer is full the kept
    points move to a new buffer (amortised O(1) per point), leaving old views
    on the old one.
    """

    __slots__ = ("capacity", "_it", "_val", "_sec", "_start", "_end")

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        size = 2 * capacity if capacity else 64
        self._it = np.empty(size, np.int64)
        self._val = np.empty(size)
        self._sec = np.empty(size)
        self._start = self._end = 0

    @classmethod
    def of(cls, points: Iterable[LossPoint], capacity: int | None = None) -> LossRing:
        ring = cls(capacity)
        for p in points:
            ring.append(p.iteration, p.loss, p.seconds)
        return ring

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def newest_iteration(self) -> int:
        """The newest point's iteration; 0 when empty."""
        return int(self._it[self._end - 1]) if self._end > self._start else 0

    def append(self, iteration: int, loss: float, seconds: float) -> None:
        if self._end == len(self._it):
            self._move()
        end = self._end
        self._it[end], self._val[end], self._sec[end] = iteration, loss, seconds
        self._end = end + 1
        if self.capacity is not None and self._end - self._start > self.capacity:
            self._start += 1

    def extend(self, iterations: Sequence[int] | np.ndarray, losses: Sequence[float] | np.ndarray,
               seconds: Sequence[float] | np.ndarray) -> None:
        """Append many points at once (a simulated chunk)."""
        it = np.asarray(iterations, np.int64)
        count = len(it)
        if self.capacity is not None and count > self.capacity:
            it = it[-self.capacity:]
            losses, seconds = losses[-self.capacity:], seconds[-self.capacity:]
            count = self.capacity
        if self._end + count > len(self._it):
            self._move(count)
        end = self._end
        self._it[end:end + count] = it
        self._val[end:end + count] = losses
        self._sec[end:end + count] = seconds
        self._end = end + count
        if self.capacity is not None:
            self._start = max(self._start, self._end - self.capacity)

    def view(self, newest: int | None = None) -> LossHistory:
        """The points held (the newest ``newest`` of them, if given), zero-copy."""
        start = self._start if newest is None else max(self._start, self._end - newest)
        return LossHistory(self._it[start:self._end], self._val[start:self._end],
                           self._sec[start:self._end])

    def _move(self, extra: int = 1) -> None:
        kept = self._end - self._start
        if self.capacity is not None:
            size = max(2 * self.capacity, kept + extra)
        else:
            size = max(2 * len(self._it), kept + extra)
        it, val, sec = np.empty(size, np.int64), np.empty(size), np.empty(size)
        it[:kept] = self._it[self._start:self._end]
        val[:kept] = self._val[self._start:self._end]
        sec[:kept] = self._sec[self._start:self._end]
        self._it, self._val, self._sec = it, val, sec
        self._start, self._end = 0, kept
