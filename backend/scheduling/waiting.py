"""Why a job waits, as facts: what the scheduler publishes and the API reads.

The scheduler builds one :class:`WaitingEntry` per waiting job each time it
explains the queue (:func:`backend.scheduling.explain.explain_waiting`, then
pools, estimates and the new jobs not yet admitted, in
:meth:`backend.scheduler.service.Scheduler._explain`) and stores it as JSON
in the Redis hash ``RedisKeys.waiting`` (:meth:`WaitingEntry.to_json`); the
API reads it back (:meth:`WaitingEntry.from_json`) and words it with
:mod:`backend.scheduling.waiting_words`, the one place where the sentences a
user reads are written. The entry itself holds no sentence of ours: only
figures and the policy's own account of its rank (``policy_reason``, as the
decision rows store it).

Example: a job third in a LAS ranking, behind two running jobs::

    WaitingEntry(job_id=5, kind=WaitKind.SLOT, position=3, policy="las", ahead=2,
                 running_ahead=2, quota=4, policy_reason="rank 3 by least attained ...")

reads "Waiting for a free slot: every slot is busy, and it is next in line
after the 2 jobs running now. Queue position 3."
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal


class WaitKind:
    """What a waiting job waits for (``WaitingEntry.kind``)."""

    NEXT = "next"
    """A slot is free and the job is among the next granted."""
    SLOT = "slot"
    """First in line; every slot is busy."""
    TURN = "turn"
    """Behind other waiting jobs the policy ranks ahead of it."""
    QUOTA = "quota"
    """Its tenant runs as many chunks as its slot quota allows."""
    QUOTA_ZERO = "quota_zero"
    """Its tenant's slot quota is 0."""
    NEW = "new"
    """A new job not yet admitted to warm up (see the live scheduler)."""
    NO_WORKERS = "no_workers"
    """No worker slot is alive."""
    POOL = "pool"
    """Every slot of the pools that can run it is busy (or there is none)."""


PoolHold = Literal["no_pool", "pool_quota", "busy"]


@dataclass(frozen=True)
class PoolWait:
    """Why the worker pools hold a job back (:func:`backend.scheduling.
    placement.pool_waits`).

    ``hold`` is ``no_pool`` (no live pool can run it), ``pool_quota`` (its
    team uses all its slots in every pool it can use: ``limits`` lists
    ``(pool, slots)``), or ``busy``: the pools it can use (``full``) have
    ``free`` of ``slots`` free, and the ``kept_free`` free slots of the GPU
    pools ``kept`` are kept for jobs that want a GPU.
    """

    hold: PoolHold
    limits: tuple[tuple[str, int], ...] = ()
    full: tuple[str, ...] = ()
    free: int = 0
    slots: int = 0
    kept: tuple[str, ...] = ()
    kept_free: int = 0
    gpu: bool = False
    """The job asks for a GPU."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PoolWait:
        return cls(hold=raw.get("hold", "busy"),
                   limits=tuple((str(p), int(n)) for p, n in raw.get("limits") or ()),
                   full=tuple(str(p) for p in raw.get("full") or ()),
                   free=int(raw.get("free") or 0), slots=int(raw.get("slots") or 0),
                   kept=tuple(str(p) for p in raw.get("kept") or ()),
                   kept_free=int(raw.get("kept_free") or 0), gpu=bool(raw.get("gpu")))


@dataclass(frozen=True)
class WaitingEntry:
    """Where a waiting job stands.

    ``position`` is its place (1 = next) in one ranking of every active job,
    the running ones as they will be when their chunks end (a new job not yet
    admitted comes after every ranked job); ``ahead`` jobs, ``running_ahead``
    of them running now, come before it. ``ahead_in_tenant`` of its own
    tenant's waiting jobs rank before it, which is what a job at its tenant's
    slot ``quota`` waits on.
    """

    job_id: int
    kind: str = WaitKind.SLOT
    position: int = 0
    """0: not shown (a list in another order)."""
    predicted_gain: float | None = None
    policy: str = ""
    """The policy in force, whose order the position is in."""
    ranked: bool = True
    """Whether the policy ranked it; False for a new job not yet admitted to
    the policy's view (it comes after every ranked job, in arrival order)."""
    policy_reason: str = ""
    """The policy's own account of its rank (its grant's reason); empty for
    a job the policy has not ranked."""
    at_quota: bool = False
    ahead: int = 0
    running_ahead: int = 0
    ahead_in_tenant: int = 0
    quota: int = 0
    new_ahead: int = 0
    """For a new job not yet admitted: the new jobs that came before it."""
    sweep_share: float | None = None
    """For a new configuration of an experiment not yet admitted: the share of
    the slots new configurations may hold while other jobs wait."""
    pool: PoolWait | None = None
    """Set when the pools, not the ranking, hold it (``kind`` is ``POOL``)."""
    estimate_seconds: float | None = None
    """Roughly how long until it gets a slot (:func:`backend.scheduling.
    explain.wait_estimate`); None when that cannot honestly be said."""

    @property
    def reason(self) -> str:
        """The scheduler's reason in words (:func:`backend.scheduling.
        waiting_words.reason`): for tests and logs, never published."""
        from backend.scheduling.waiting_words import reason

        return reason(self)

    def to_json(self) -> str:
        """The entry as the scheduler publishes it (one JSON object)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes, job_id: int) -> WaitingEntry:
        """The entry published for ``job_id``; fields it does not know are
        ignored, missing ones take their defaults."""
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["job_id"] = job_id
        if isinstance(values.get("pool"), dict):
            values["pool"] = PoolWait.from_dict(values["pool"])
        return cls(**values)
