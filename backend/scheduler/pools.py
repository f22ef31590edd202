"""The pools the scheduler sees each round, from the live slots' adverts.

The scheduler is the one writer of the ``worker_pool`` table's resources: a
pool it sees for the first time (or whose smallest worker changed) is
recorded, so the API can tell at submit whether any pool can ever run a job
(:mod:`backend.services.pools`), and platform admins can reserve it for
tenants.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session, col

from backend.core.models import WorkerPool, utcnow
from backend.core.pools import DEFAULT_POOL, SlotInfo
from backend.scheduling.types import PoolView

# How often the live pools' last_seen is refreshed.
REFRESH_SECONDS = 5.0


@dataclass(frozen=True)
class Resources:
    """A pool's smallest worker: what any job placed on it may count on."""

    cores: int
    memory_mb: int
    gpu: str | None
    gpu_memory_mb: int


def smallest(adverts: list[SlotInfo]) -> Resources:
    # A pool has a GPU only if every worker in it has one.
    gpus = [a for a in adverts if a.gpu]
    all_gpu = bool(adverts) and len(gpus) == len(adverts)
    return Resources(cores=min((a.cores for a in adverts), default=0),
                     memory_mb=min((a.memory_mb for a in adverts), default=0),
                     gpu=gpus[0].gpu if all_gpu else None,
                     gpu_memory_mb=min((a.gpu_memory_mb for a in gpus), default=0)
                     if all_gpu else 0)


class PoolRegistry:
    def __init__(self) -> None:
        self._recorded: dict[str, Resources] = {}
        self._stamped_at = float("-inf")

    def views(self, session: Session, adverts: Mapping[str, SlotInfo],
              in_flight: Mapping[str, int]) -> list[PoolView]:
        """This round's pools: live and free slots, resources and reservations.

        The pool table is a handful of rows, read every round so that a new
        reservation holds from the next grant on. A recorded pool with no live
        slot is listed empty, so a job that needs it can be told "waiting for
        a GPU slot: 0 of 0 free".
        """
        by_pool: dict[str, list[SlotInfo]] = {}
        for info in adverts.values():
            by_pool.setdefault(info.pool, []).append(info)
        live = {name: smallest(members) for name, members in by_pool.items()}
        rows = {r.name: r for r in session.execute(select(WorkerPool)).scalars()}
        recorded = {name: Resources(r.cores, r.memory_mb, r.gpu, r.gpu_memory_mb)
                    for name, r in rows.items()}
        now = time.monotonic()
        changed = {name: found for name, found in live.items() if recorded.get(name) != found}
        if changed or (live and now - self._stamped_at >= REFRESH_SECONDS):
            self._record(session, live, set(rows))
            self._stamped_at = now
            recorded.update(live)
        views = []
        for name in sorted(set(recorded) | {DEFAULT_POOL}):
            found = recorded.get(name)
            slots = len(by_pool.get(name, ()))
            row = rows.get(name)
            views.append(PoolView(
                name=name, slots=slots, free=max(slots - in_flight.get(name, 0), 0),
                gpu=found.gpu if found else None,
                gpu_memory_mb=found.gpu_memory_mb if found else 0,
                memory_mb=found.memory_mb if found else 0, cores=found.cores if found else 0,
                reserved_for=frozenset(int(t) for t in row.reserved_for or ())
                if row is not None else frozenset()))
        return views

    @staticmethod
    def _record(session: Session, live: Mapping[str, Resources], existing: set[str]) -> None:
        """Record the live pools' resources, and when they were last seen."""
        stamp = utcnow()
        for name, found in live.items():
            values: dict[str, Any] = {
                "cores": found.cores, "memory_mb": found.memory_mb, "gpu": found.gpu,
                "gpu_memory_mb": found.gpu_memory_mb, "last_seen": stamp}
            if name in existing:
                session.execute(update(WorkerPool).where(col(WorkerPool.name) == name)
                                .values(**values))
            else:
                session.add(WorkerPool(name=name, first_seen=stamp, **values))
        session.commit()
