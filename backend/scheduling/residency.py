"""Slot assignment: which free worker slot runs each placed grant.

Placement (:mod:`backend.scheduling.placement`) picks a pool for each grant;
this picks the slot in it. A slot keeps the trainer of the job it ran last
(resident: loaded, nothing to build or restore), so:

1. a job whose resident slot is free goes back there;
2. every other grant takes a free slot of its pool, empty slots first, then
   slots whose resident job is not granted this round (that job is evicted:
   its state is written as it leaves);
3. a grant with no free slot of its pool left goes to the pool's queue,
   where any of its slots takes it.

Worked example: slots ``a`` (holds job 1) and ``b`` (holds job 9, not
granted now) are free in pool ``cpu``; grants for jobs 2 and 1 (in that
order) get ``b`` for job 2 (job 9 leaves it) and ``a`` for job 1 (it steps
on), and no job's resident trainer is moved.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

import numpy as np

from backend.scheduling.types import Grant, JobView, Snapshot

SWITCH_SHARE = 0.05
"""At most this share of a moving job's slot time goes to the move itself."""


@dataclass(frozen=True)
class SlotView:
    """A free worker slot: its id, pool, own queue and the job it holds loaded."""

    slot_id: str
    pool: str
    queue: str
    resident_job: int | None = None


def assign_slots(grants: Sequence[Grant], free: Sequence[SlotView],
                 resident: Mapping[int, str]) -> list[tuple[Grant, SlotView | None]]:
    """Each grant (placed on a pool) with the free slot that runs it, in the
    grants' order; ``None`` where its pool has no free slot to name.

    ``resident`` maps job ids to the slot holding their trainer. Slots
    without their own queue (older workers) are never named.
    """
    open_slots = [s for s in free if s.queue]
    by_id = {s.slot_id: s for s in open_slots}
    taken: set[str] = set()
    chosen: dict[int, SlotView] = {}
    for grant in grants:
        home = by_id.get(resident.get(grant.job_id, ""))
        if home is not None and home.pool == grant.pool and home.slot_id not in taken:
            chosen[grant.job_id] = home
            taken.add(home.slot_id)
    granted = {g.job_id for g in grants}

    def eviction_cost(slot: SlotView) -> int:
        # An empty slot costs nothing; a job granted this round left its slot
        # already (it runs elsewhere); a waiting job's trainer is lost last.
        if slot.resident_job is None:
            return 0
        return 1 if slot.resident_job in granted else 2

    # Per pool, the slots left, cheapest eviction first (in the order given
    # among equals); stored reversed to pop from the end: one pass however
    # many slots and grants a round has.
    spare: dict[str, list[SlotView]] = {}
    for slot in sorted((s for s in open_slots if s.slot_id not in taken), key=eviction_cost):
        spare.setdefault(slot.pool, []).append(slot)
    for left in spare.values():
        left.reverse()
    assigned: list[tuple[Grant, SlotView | None]] = []
    for grant in grants:
        found = chosen.get(grant.job_id)
        if found is None:
            pool_slots = spare.get(grant.pool)
            found = pool_slots.pop() if pool_slots else None
        assigned.append((grant, found))
    return assigned


def move_chunk_seconds(switch: Any, moves: Any, attained: Any,
                       share: float = SWITCH_SHARE) -> Any:
    """Training seconds a moving job's chunk needs so that its switches, this
    one included, stay within ``share`` of its slot time; <= 0: none needed.

    Counted over the job's life, not chunk by chunk: a job with 20 s of
    training that moves for the first time at 0.2 s has switched 1% of its
    time and may move with a short chunk, while a job moved often gets long
    ones. So slaq keeps its fine-grained decisions where moves are rare and
    cheap, and thrashing is bounded all the same. Takes floats or arrays.
    """
    return (moves + 1) * switch * (1 - share) / share - attained


def steps_on(grant: Grant, slot: SlotView | None, resident: Mapping[int, str]) -> bool:
    """Whether ``slot`` holds the trainer of ``grant``'s job: the grant moves
    nothing (no build, no restore)."""
    return slot is not None and resident.get(grant.job_id) == slot.slot_id


def amortised(grant: Grant, job: JobView, slot: SlotView | None,
              resident: Mapping[int, str], share: float = SWITCH_SHARE) -> Grant:
    """``grant`` long enough that a job that moves spends at most ``share``
    of its slot time on its moves (:func:`move_chunk_seconds`).

    A job that steps on where it is resident keeps the policy's short chunk:
    fine-grained decisions cost nothing when nothing moves. Example: a job of
    0.01 s an iteration whose move costs 1.5 s, moved for the first time
    after 10 s of training, gets at least (1.5 * 19 - 10) / 0.01 = 1,850
    iterations (18.5 s of training). ``share`` 1 turns the stretching off
    (the simulator's trade-off studies).
    """
    spi = job.seconds_per_iteration
    if steps_on(grant, slot, resident) or job.switch_seconds <= 0 or spi is None or share >= 1:
        return grant
    needed = move_chunk_seconds(job.switch_seconds, job.moves, job.attained_seconds, share)
    if needed <= 0:
        return grant
    wanted = math.ceil(needed / spi)
    iterations = min(max(grant.iterations, wanted), max(job.remaining_iterations, 1))
    return grant if iterations == grant.iterations else replace(grant, iterations=iterations)


IDLE_CHUNK_FACTOR = 5
"""A chunk granted while slots stay idle is up to this many chunks long."""


def unhurried(grant: Grant, job: JobView, chunk_seconds: float,
              factor: float = IDLE_CHUNK_FACTOR) -> Grant:
    """``grant`` as long as ``factor`` chunks, for a round that leaves slots
    idle with every waiting job granted: nobody waits for this slot, and a
    job that arrives finds an idle one. The lengthened grant yields: once a
    job waits for a slot, it ends where the grant it was lengthened from
    would have (``yield_after``), so arrivals past the idle slots wait no
    longer than they would for a plain chunk.

    Every chunk costs a commit and a dispatch (20-60 ms live, whatever the
    model), so a job alone on the cluster trains in 1 s chunks at 94-97%
    goodput and in 5 s chunks at 99%; a 0.55 s iteration would even make a
    chunk of one. Short chunks are worth that only where a decision is to be
    made. Example: 0.01 s an iteration at 1 s chunks, 100 iterations granted:
    500. A job of unknown speed keeps its grant (its first chunk measures it).
    """
    spi = job.seconds_per_iteration
    if spi is None or factor <= 1:
        return grant
    wanted = int(factor * chunk_seconds / spi)
    iterations = min(max(grant.iterations, wanted), max(job.remaining_iterations, 1))
    if iterations == grant.iterations:
        return grant
    return replace(grant, iterations=iterations, yield_after=grant.iterations)


def yielding(grant: Grant) -> Grant:
    """A lengthened ``grant`` made final: without a yield point it cannot
    reach (cut at or below it), else with its reason saying where it yields,
    so the decision log explains a grant several chunks long."""
    if grant.yield_after is None:
        return grant
    if grant.yield_after >= grant.iterations:
        return replace(grant, yield_after=None)
    return replace(grant, reason=f"{grant.reason}; {grant.iterations} iterations while slots "
                                 f"idle, ending after {grant.yield_after} once a job waits "
                                 "for a slot")


def slots_wanted(snapshot: Snapshot, yielding: Collection[int] = ()) -> bool:
    """True when a waiting job cannot start now and a lengthened chunk ending
    would let it: no slot is free and its tenant is below its ``max_slots``,
    or its tenant (one of ``yielding``, the tenants holding lengthened chunks)
    holds the chunk it waits for, at its quota or with no slot free.
    Lengthened chunks in flight then end at their yield points."""
    free = snapshot.free_slots > 0
    running = snapshot.running_by_tenant()
    for job in snapshot.jobs:
        if job.running or job.remaining_iterations <= 0:
            continue
        at_quota = running.get(job.tenant_id, 0) >= snapshot.tenant(job.tenant_id).max_slots
        if job.tenant_id in yielding and (at_quota or not free):
            return True
        if not free and not at_quota:
            return True
    return False


def switch_charge(snapshot: Snapshot, job: JobView) -> float:
    """Seconds a grant to ``job`` now spends moving it: none when its trainer
    is loaded on a free slot, else its measured switch cost (0 while unknown)."""
    return 0.0 if job.job_id in snapshot.resident else job.switch_seconds


def switch_discounts(snapshot: Snapshot, jobs: Sequence[JobView],
                     resident: frozenset[int] | None = None) -> np.ndarray:
    """Per job, the share of a grant's slot time that trains:
    ``chunk / (chunk + switch)``, the chunk as long as a move makes it
    (:func:`amortised`), 1 for a job that steps on or whose cost is unknown.

    A policy multiplies a gain per slot-second by it, so a job that must move
    ranks below an equal one that steps on. One array pass: the live
    scheduler ranks thousands of jobs a round. ``resident``: the jobs that
    step on, if not ``snapshot.resident`` (a policy that keeps each job's
    discount as if it moved, across decisions, passes none).
    """
    count = len(jobs)
    charge = np.fromiter(map(_SWITCH, jobs), float, count)
    resident = snapshot.resident if resident is None else resident
    if resident:
        ids = np.fromiter(map(_ID, jobs), np.int64, count)
        charge[np.isin(ids, np.fromiter(resident, np.int64))] = 0.0
    needed = move_chunk_seconds(charge, np.fromiter(map(_MOVES, jobs), float, count),
                                np.fromiter(map(_ATTAINED, jobs), float, count))
    chunk = np.maximum(snapshot.chunk_seconds, needed)
    return chunk / np.maximum(chunk + charge, 1e-12)


_SWITCH = attrgetter("switch_seconds")
_ID = attrgetter("job_id")
_MOVES = attrgetter("moves")
_ATTAINED = attrgetter("attained_seconds")
