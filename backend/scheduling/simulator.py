"""Discrete-event simulator: the real policies on a simulated clock.

Jobs replay recorded curves (:mod:`backend.scheduling.trace`). The simulator
plays the live scheduler's part with in-memory state: at every arrival and
chunk completion it builds a :class:`~backend.scheduling.types.Snapshot`,
calls ``policy.allocate`` (the very code the live scheduler calls), checks
the grants against the hard limits with the live scheduler's own check
(:func:`~backend.scheduling.allocation.split_grants`), and runs them: a chunk
of ``n`` iterations takes the curve's recorded seconds for those iterations
plus the curve's measured chunk overhead (half before the first iteration: dispatch
and checkpoint load; half after the last: checkpoint save and report). Loss
points become visible to the policy when the chunk ends. A job that has not
run yet is sized, as live, from the seconds per iteration of the jobs of its
kind (algorithm and dataset) that ran before it
(:class:`~backend.scheduling.speed.SpeedEstimates`); only the first of a kind
gets the default chunk length. A job finishes
when its curve ends (it converged in the recorded run), or earlier when an
optional ``stopper`` (an experiment's early-stopping rule) stops it: a
stopped job that is running ends with its chunk in flight, like a live job
paused mid-chunk.

**The round** is the live scheduler's own (:mod:`backend.scheduling.round`,
:func:`decide_round`): the never-run jobs the warm-up admission lets in join
the policy's view, the policy ranks (``ranking_extra`` jobs beyond the free
slots where there are pools), the ranking is checked with ``split_grants``,
placed on pools and on slots (resident slot first, moves amortised), and the
free slots' worth of it runs.

**Pools** (``SimConfig.pools``, optional): the slots belong to named pools
(:class:`SimPool`: slots, GPU or not, memory, tenants it is reserved for, and
a speed-up for jobs that want a GPU), and jobs may carry
:class:`~backend.scheduling.types.Requirements` (``simulate(...,
requirements={job_id: ...})``), matched to pools by
:func:`~backend.scheduling.placement.place`. Grants the hard-limit check
refuses are counted (``SimResult.rejected``) and dropped, as live; without
pools a refused grant is a policy bug and stops the simulation.

**Decision time** (``SimConfig.charge_decisions``): when set, each decision's
wall time (``allocate``, and with pools ``split_grants`` and ``place``) is
added to the simulated clock: its grants start that much later, and slots
freed or jobs arriving meanwhile wait for the next decision, which starts when
this one ends. ``decision_seconds`` charges a fixed time instead (for
deterministic tests). With neither pools nor charging, results are exactly
those of the plain simulator.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time as wallclock
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from backend.scheduling.loss_history import LossHistory, LossRing
from backend.scheduling.placement import eligible_pools, refusal
from backend.scheduling.policies.oracle import TrueCurve
from backend.scheduling.registry import SIMULATION_ONLY, make_policy
from backend.scheduling.residency import (
    IDLE_CHUNK_FACTOR,
    SWITCH_SHARE,
    SlotView,
    slots_wanted,
)
from backend.scheduling.round import (
    RANKING_EXTRA,
    Decided,
    WarmupShares,
    admit,
    after,
    allowance,
    decide,
    warmup_shares,
)
from backend.scheduling.rungs import Owed, continuations, note_cut
from backend.scheduling.speed import SpeedEstimates
from backend.scheduling.trace import Trace, TraceCurve
from backend.scheduling.types import (
    Grant,
    JobView,
    Policy,
    PoolView,
    Requirements,
    Snapshot,
    TenantView,
)
from backend.scheduling.workload import Arrival

RESIDENT_CHUNK_SECONDS = 0.02
"""A chunk that steps on its resident trainer pays the dispatch alone: the
20 ms the recorded traces add to their measured save + restore."""

__all__ = ["RANKING_EXTRA", "SimConfig", "SimJob", "SimPool", "SimResult", "build_policy",
           "decide_round", "simulate", "switch_cost", "true_curves"]


@dataclass(frozen=True)
class SimPool:
    """A pool of simulated worker slots.

    ``speedup``: how many times faster a job that wants a GPU
    (``Requirements.wants_gpu``, e.g. a torch job) runs its iterations here
    than its recorded seconds (the chunk overhead is unchanged); other jobs
    run at their recorded speed on any pool.
    """

    name: str
    slots: int
    gpu: bool = False
    speedup: float = 1.0
    memory_mb: int = 0
    reserved_for: frozenset[int] = frozenset()

    def view(self, free: int) -> PoolView:
        return PoolView(name=self.name, slots=self.slots, free=free,
                        gpu="simulated GPU" if self.gpu else None, memory_mb=self.memory_mb,
                        reserved_for=self.reserved_for)


@dataclass(frozen=True)
class SimConfig:
    """The simulated cluster: slots, chunk length, tenant quotas; optionally
    pools (their slots must add up to ``slots``) and decision time charged to
    the clock (see the module docstring)."""

    slots: int
    chunk_seconds: float = 1.0
    default_chunk_iterations: int = 10
    tenants: Mapping[int, TenantView] = field(default_factory=dict)
    pools: Sequence[SimPool] = ()
    charge_decisions: bool = False
    decision_seconds: float | None = None
    ranking_extra: int = RANKING_EXTRA
    attained_overhead: bool = True
    """Whether a job's attained service counts its chunks' overhead; the live
    scheduler counts its iterations' measured seconds only."""
    history_points: int | None = None
    """Policies see at most this many of a job's newest loss points, and its
    initial loss, as the live scheduler's history cache holds them; ``None``:
    the whole history."""
    residency: bool = True
    """Slots keep the trainer of the job they ran last, as live: a chunk that
    steps on pays ``RESIDENT_CHUNK_SECONDS``, a move the curve's whole chunk
    overhead (save, restore, dispatch), and slots, chunk lengths and the
    ranking come from the live scheduler's steps (:mod:`residency`).
    False: every chunk pays the whole overhead (the model before residency)."""
    switch_share: float = SWITCH_SHARE
    """A moving job's chunk is stretched until its switch is at most this share of
    it (:func:`backend.scheduling.residency.amortised`); 1: never stretched."""
    idle_factor: float = IDLE_CHUNK_FACTOR
    """Chunks granted while slots stay idle are up to this many chunks long
    (:func:`backend.scheduling.residency.unhurried`); 1: never."""


@dataclass
class _Slot:
    """One simulated worker slot and the job whose trainer it holds."""

    view: SlotView
    busy: bool = False


@dataclass
class SimJob:
    """One simulated job's state and, once done, its outcome."""

    job_id: int
    curve: TraceCurve
    tenant_id: int
    arrival: float
    ring: LossRing = field(default_factory=LossRing)
    iteration_times: list[float] = field(default_factory=list)
    done: int = 0
    running: bool = False
    waiting_since: float = 0.0
    attained: float = 0.0
    chunks: int = 0
    pending: int = 0
    finish: float | None = None
    stopped: bool = False
    experiment_id: int | None = None
    requirements: Requirements = field(default_factory=Requirements)
    # The pool of the chunk in flight (None when none is, or without pools),
    # and the pool of every chunk run so far ("" without pools).
    pool: str | None = None
    chunk_pools: list[str] = field(default_factory=list)
    # Recorded seconds are divided by this for the chunk in flight (its pool's speed-up).
    speed: float = 1.0
    history_points: int | None = None
    slot: int | None = None
    """The slot holding its trainer (simulated residency)."""
    switch_known: bool = False
    """It has started on a slot once, so its switch cost is measured."""
    moves: int = 0
    """Starts on a slot after its first."""
    chunk_event: int = -1
    """The sequence number of its chunk's completion event (a cut chunk's old one is stale)."""
    yield_after: int | None = None
    """Iterations after which its lengthened chunk in flight ends once a job waits."""
    chunk_overhead: float = 0.0
    chunk_log_index: int | None = None
    _view: JobView | None = field(default=None, repr=False, compare=False)

    @property
    def history(self) -> LossHistory:
        """Every loss point the job has reported (zero-copy)."""
        return self.ring.view()

    @property
    def kind(self) -> tuple[str, str]:
        """What its speed is estimated by before it has run, as live."""
        return self.curve.algorithm, self.curve.dataset

    def view(self, estimate: float | None = None) -> JobView:
        """``estimate``: seconds per iteration of its kind, which sizes the
        first chunk of a job that has not run yet.

        The history is a zero-copy view of the job's points (its newest
        ``history_points`` of them, if set): copying every history every
        round would dominate. Memoised until the job's state changes (_start, _complete) or, before
        its first chunk, its kind's estimate does."""
        if self._view is not None and (
                self.done or self._view.estimated_seconds_per_iteration == estimate):
            return self._view
        losses = self.ring.view(self.history_points)
        initial = None
        if len(losses) < len(self.ring):
            initial = self.curve.losses[0]  # its first point, whatever its speed
        self._view = JobView(
            job_id=self.job_id, tenant_id=self.tenant_id, submitted_at=self.arrival,
            iterations_done=self.done, max_iterations=max(self.curve.max_iterations,
                                                           self.curve.iterations),
            losses=losses, initial_loss=initial, running=self.running,
            attained_seconds=self.attained,
            waiting_since=self.waiting_since, chunks_run=self.chunks,
            requirements=self.requirements, pool=self.pool,
            experiment_id=self.experiment_id, estimated_seconds_per_iteration=estimate,
            switch_seconds=switch_cost(self.curve) if self.switch_known else 0.0,
            moves=self.moves,
        )
        return self._view


@dataclass
class SimResult:
    """``decision_seconds`` is the summed wall time of the decisions
    (``allocate``; with pools also ``split_grants`` and ``place``), and
    ``decision_times`` each one's; ``charged_seconds`` what was added to the
    simulated clock. With pools: ``rejected`` = grants the hard-limit check
    refused, ``unplaced`` = grants within the free slots' worth of a ranking
    that no pool could take that round (their jobs kept waiting),
    ``left_free`` = per pool, free slots a decision left free although a
    waiting job could run there (summed over decisions: its tenant at a
    quota, a GPU slot kept for a GPU job, or a ranking too short to reach
    it), and
    ``pool_busy`` = slot-seconds of chunks run per pool (``pool_slots`` its
    size) and ``chunk_log`` every chunk as (start, end, pool)."""

    policy: str
    jobs: list[SimJob]
    decisions: int
    decision_seconds: float
    grants: int
    decision_times: list[float] = field(default_factory=list)
    charged_seconds: float = 0.0
    rejected: int = 0
    unplaced: int = 0
    left_free: dict[str, int] = field(default_factory=dict)
    pool_busy: dict[str, float] = field(default_factory=dict)
    pool_slots: dict[str, int] = field(default_factory=dict)
    chunk_log: list[tuple[float, float, str]] = field(default_factory=list)

    def utilisation(self, start: float | None = None, end: float | None = None
                    ) -> dict[str, float]:
        """Busy fraction of each pool's slots from ``start`` (default: the first
        arrival) to ``end`` (default: the last finish)."""
        if not self.jobs:
            return {}
        if start is None:
            start = min(j.arrival for j in self.jobs)
        if end is None:
            end = max(j.finish or 0.0 for j in self.jobs)
        busy = dict.fromkeys(self.pool_slots, 0.0)
        for begin, finish, pool in self.chunk_log:
            busy[pool] += max(0.0, min(finish, end) - max(begin, start))
        span = end - start
        return {name: busy[name] / (slots * span) if slots and span > 0 else 0.0
                for name, slots in self.pool_slots.items()}


def true_curves(trace: Trace, arrivals: Sequence[Arrival]) -> dict[int, TrueCurve]:
    """What the oracle may know: every job's recorded future."""
    out = {}
    for a in arrivals:
        c = trace.curve(a.curve_id)
        out[a.index] = TrueCurve(initial_loss=c.initial_loss, losses=c.losses, seconds=c.seconds)
    return out


def build_policy(name: str, trace: Trace, arrivals: Sequence[Arrival], **options: Any) -> Policy:
    """A registry policy; simulation-only ones are handed the true curves."""
    if name in SIMULATION_ONLY:
        options = {**options, "true_curves": true_curves(trace, arrivals)}
    return make_policy(name, **options)


_ARRIVE, _COMPLETE = 1, 0  # completions first at equal times: their slots are free


Stopper = Callable[[float, Mapping[int, SimJob], Sequence[SimJob]], Iterable[int]]
"""``stopper(now, active jobs, jobs whose chunk just ended)``: ids to stop now."""


def simulate(
    policy: Policy, trace: Trace, arrivals: Sequence[Arrival], config: SimConfig,
    stopper: Stopper | None = None, *, requirements: Mapping[int, Requirements] | None = None,
    progress: Callable[[int], None] | None = None,
    rungs: Callable[[Grant, JobView], Grant] | None = None,
) -> SimResult:
    """Run ``arrivals`` to completion under ``policy``; deterministic for given
    inputs unless decision time is charged by the wall clock.

    ``requirements``: per job id (arrival index), what the job needs of a
    pool; only meaningful with ``config.pools``. ``progress``: called with
    the number of jobs finished so far each time it grows (a long replay's
    progress). ``rungs``: cuts each grant after every other sizing, as the
    live scheduler cuts an experiment's grants at its rule's rungs
    (:func:`backend.scheduling.rungs.at_rung`).
    """
    needs = requirements or {}
    jobs = [SimJob(a.index, trace.curve(a.curve_id), a.tenant_id, a.time, waiting_since=a.time,
                   experiment_id=a.experiment_id,
                   requirements=needs.get(a.index, Requirements()),
                   history_points=config.history_points)
            for a in arrivals]
    if [j.job_id for j in jobs] != list(range(len(jobs))):
        raise ValueError("arrival indices must be 0..n-1 in order")
    pools = {p.name: p for p in config.pools}
    # Per job, the pools it may ever run on; per pool, how many of them wait.
    eligible: dict[int, list[str]] = {}
    if pools:
        if sum(p.slots for p in config.pools) != config.slots or len(pools) != len(config.pools):
            raise ValueError("pools must have distinct names and add up to config.slots")
        pool_views = [p.view(p.slots) for p in config.pools]
        for job in jobs:
            why = refusal(pool_views, job.requirements, job.tenant_id)
            if why is not None:
                raise ValueError(f"job {job.job_id} can never run: {why}")
            eligible[job.job_id] = [p.name for p in eligible_pools(
                pool_views, job.requirements, job.tenant_id)]
    waiting_for = dict.fromkeys(pools, 0)
    # First chunks are sized from the speed of jobs of the same kind, as live;
    # ``fresh``: per kind, the waiting jobs that have not run, whose views
    # carry its estimate; ``moved``: kinds whose estimate changed since.
    speeds = SpeedEstimates()
    fresh: dict[tuple[str, str], set[int]] = {}
    moved: set[tuple[str, str]] = set()
    events: list[tuple[float, int, int, int]] = []
    for job in jobs:
        heapq.heappush(events, (job.arrival, _ARRIVE, job.job_id, job.job_id))
    active: dict[int, SimJob] = {}
    # The active jobs' views, in the same order, updated as they change: a
    # decision's snapshot is a copy of this, not a pass over every job.
    views: dict[int, JobView] = {}
    # One history per curve (and speed), shared by every job that replays
    # it; a chunk's points are copied from it as arrays.
    point_lists: dict[tuple[int, float], LossHistory] = {}
    free = config.slots
    pool_free = {p.name: p.slots for p in config.pools}
    result = SimResult(policy.name, jobs, 0, 0.0, 0,
                       pool_busy={p.name: 0.0 for p in config.pools},
                       pool_slots={p.name: p.slots for p in config.pools})
    charge = config.charge_decisions or config.decision_seconds is not None
    waiting = 0  # active jobs without a chunk in flight
    slots = _slots(config) if config.residency else []
    ready_at = -math.inf  # the end of the last decision: the next cannot start before
    seq = len(jobs)
    finished = 0
    owed: dict[int, Owed] = {}  # job id -> what a cut at a rung took off its grant
    yielders: dict[int, SimJob] = {}  # lengthened chunks in flight, before their yield point
    shares = warmup_shares(policy)
    while events:
        now = max(events[0][0], ready_at)
        ended: list[SimJob] = []
        while events and events[0][0] <= now:
            at, kind, event, job_id = heapq.heappop(events)
            job = jobs[job_id]
            if kind == _COMPLETE and event != job.chunk_event:
                continue  # the chunk was cut short: it ended at its new end
            yielders.pop(job_id, None)
            if kind == _ARRIVE:
                active[job_id] = job
                views[job_id] = job.view(speeds.get(job.kind))
                fresh.setdefault(job.kind, set()).add(job_id)
                waiting += 1
                for name in eligible.get(job_id, ()):
                    waiting_for[name] += 1
            else:
                free += 1
                if job.pool is not None:
                    pool_free[job.pool] += 1
                if job.slot is not None:
                    slots[job.slot].busy = False
                _complete(job, at, _points(point_lists, job.curve, job.speed))
                speeds.observe(job.kind, job.history)
                moved.add(job.kind)
                ended.append(job)
                if job.finish is None and job.stopped:
                    job.finish = at
                if job.finish is not None:
                    _let_go(slots, job)
                    del active[job_id]
                    del views[job_id]
                    finished += 1
                else:
                    views[job_id] = job.view()
                    waiting += 1
                    for name in eligible.get(job_id, ()):
                        waiting_for[name] += 1
        if stopper is not None and ended:
            for job_id in list(stopper(now, active, ended)):
                job = active[job_id]
                job.stopped = True
                if not job.running:
                    job.finish = now
                    _let_go(slots, job)
                    del active[job_id]
                    del views[job_id]
                    finished += 1
                    fresh.get(job.kind, set()).discard(job_id)
                    waiting -= 1
                    for name in eligible.get(job_id, ()):
                        waiting_for[name] -= 1
        if progress is not None and ended:
            progress(finished)
        seq = _yield_if_wanted(yielders, views, config, free, now, events, seq, result)
        if free <= 0 or waiting <= 0:
            continue
        for job_kind in moved:
            for job_id in fresh.get(job_kind, ()):
                views[job_id] = jobs[job_id].view(speeds.get(job_kind))
        moved.clear()
        # A grant cut at a rung goes on past it once the rule has kept the
        # job, ahead of the policy, as live (backend.scheduling.rungs).
        continuing = continuations(
            owed, {j: views[j] for j in owed if j in active and not active[j].running},
            {j for j in owed if j not in active or active[j].stopped}, free, now)
        started = wallclock.perf_counter()
        placed = decide_round(policy, views, config, now=now, free=free, pool_free=pool_free,
                              slots=slots, continuing=continuing, result=result, shares=shares)
        took = wallclock.perf_counter() - started
        result.decision_seconds += took
        result.decision_times.append(took)
        result.decisions += 1
        begin = now
        if charge:
            cost = took if config.decision_seconds is None else config.decision_seconds
            result.charged_seconds += cost
            begin = ready_at = now + cost
        for grant, pool_name, slot in placed:
            if rungs is not None:
                cut = rungs(grant, views[grant.job_id])
                note_cut(owed, grant, cut, views[grant.job_id], begin, config.chunk_seconds,
                         moved=slot is None or slots[slot].view.resident_job != grant.job_id)
                grant = cut
            job = active[grant.job_id]
            speed = 1.0
            if pool_name is not None:
                pool = pools[pool_name]
                pool_free[pool_name] -= 1
                if job.requirements.wants_gpu:
                    speed = pool.speedup
            overhead = None if slot is None else _take(slots, slot, job)
            end = _start(job, grant, begin, pool_name, speed, config.attained_overhead, overhead)
            views[job.job_id] = job.view()
            fresh.get(job.kind, set()).discard(job.job_id)
            if pool_name is not None:
                result.pool_busy[pool_name] += end - begin
                result.chunk_log.append((begin, end, pool_name))
            free -= 1
            waiting -= 1
            for name in eligible.get(job.job_id, ()):
                waiting_for[name] -= 1
            result.grants += 1
            seq += 1
            job.chunk_event = seq
            if job.yield_after is not None:
                yielders[job.job_id] = job
            if pool_name is not None:
                job.chunk_log_index = len(result.chunk_log) - 1
            heapq.heappush(events, (end, _COMPLETE, seq, job.job_id))
        seq = _yield_if_wanted(yielders, views, config, free, now, events, seq, result)
        for name, count in pool_free.items():
            if count > 0 and waiting_for[name] > 0:
                result.left_free[name] = result.left_free.get(name, 0) + count
        if not events and active:
            raise RuntimeError(f"{policy.name}: jobs wait but nothing runs at t={now:.1f}")
    return result


def decide_round(policy: Policy, views: Mapping[int, JobView], config: SimConfig, *,
                 now: float, free: int | None = None, pool_free: Mapping[str, int] | None = None,
                 slots: list[_Slot] | None = None, continuing: Sequence[Grant] = (),
                 result: SimResult | None = None, shares: WarmupShares | None = None
                 ) -> list[tuple[Grant, str | None, int | None]]:
    """One decision of the simulated cluster, the live scheduler's round
    (:mod:`backend.scheduling.round`): admission, ranking, check, placement
    on pools and slots. ``views``: the active jobs, in arrival order;
    ``free`` / ``pool_free``: free slots in all and per pool (default: all of
    them); ``slots``: the slots and the trainers they hold (default: all free
    and empty, or none without ``config.residency``); ``continuing``: the rest
    of grants cut at a rung, run first. Returns each grant with its pool
    (``None`` without pools) and its slot (an index into ``slots``)."""
    pools = {p.name: p for p in config.pools}
    if pool_free is None:
        pool_free = {p.name: p.slots for p in config.pools}
    if slots is None:
        slots = _slots(config) if config.residency else []
    snapshot = Snapshot(
        now=now, free_slots=config.slots if free is None else free,
        total_slots=config.slots, chunk_seconds=config.chunk_seconds,
        jobs=_admitted(views, config, warmup_shares(policy) if shares is None else shares),
        tenants=config.tenants, default_chunk_iterations=config.default_chunk_iterations,
        pools=[pools[name].view(count) for name, count in pool_free.items()],
        resident=frozenset(j for j in (s.view.resident_job for s in slots if not s.busy)
                           if j is not None),
    )
    return _decide(policy, snapshot, continuing, slots, config,
                   SimResult(policy.name, [], 0, 0.0, 0) if result is None else result,
                   bool(pools))


def _admitted(views: Mapping[int, JobView], config: SimConfig,
              shares: WarmupShares) -> list[JobView]:
    """The views the policy sees this round, in arrival order: every job that
    has run, and the never-run jobs the round's admission lets in, as live
    (:func:`backend.scheduling.round.admit`)."""
    known: list[JobView] = []
    new: dict[int, list[tuple[float, int]]] = {}
    for view in views.values():
        if view.running or view.chunks_run or view.iterations_done:
            known.append(view)
        else:
            new.setdefault(view.tenant_id, []).append((view.waiting_since, view.job_id))
    if not new:
        return known
    # Only a tenant's head can be admitted: the allowance, and no more, of each.
    head = allowance(known, config.slots, shares).new
    order = {tenant: [job for _, job in sorted(jobs)[:head]] for tenant, jobs in new.items()}
    admitted, _ = admit(known, order, {j: views[j].experiment_id for q in order.values()
                                       for j in q},
                        slots=config.slots, tenants=config.tenants, shares=shares, explained=0)
    let_in = set(admitted)
    return [view for view in views.values() if view.job_id in let_in
            or view.running or view.chunks_run or view.iterations_done]


def _decide(policy: Policy, snapshot: Snapshot, continuing: Sequence[Grant], slots: list[_Slot],
            config: SimConfig, result: SimResult, pooled: bool
            ) -> list[tuple[Grant, str | None, int | None]]:
    """The live scheduler's round (:func:`backend.scheduling.round.decide`):
    the rest of grants cut at a rung first, then the policy's ranking beyond
    the free slots, checked against the hard limits, placed on pools and
    slots; each grant with its pool (``None`` without pools) and its slot (an
    index into ``slots``; ``None`` without residency)."""
    index = {s.view.slot_id: i for i, s in enumerate(slots)}
    free = [s.view for s in slots if not s.busy]
    resident = {s.view.resident_job: s.view.slot_id for s in slots
                if s.view.resident_job is not None}
    out: list[tuple[Grant, str | None, int | None]] = []

    def run(decided: Decided) -> None:
        _count(decided, result, pooled, policy.name)
        for grant, slot in decided.grants:
            if slots and slot is None:  # every free slot is named: only a policy bug gets here
                raise AssertionError(f"no free slot for job {grant.job_id}")
            if slot is not None:
                free.remove(slot)
            out.append((grant, grant.pool or None, None if slot is None else index[slot.slot_id]))

    if continuing:
        decided = decide(policy, snapshot, ranking=list(continuing), free=free,
                         resident=resident, share=config.switch_share,
                         idle_factor=config.idle_factor)
        run(decided)
        snapshot = after(snapshot, [grant for grant, _ in decided.grants])
    if snapshot.free_slots > 0:
        run(decide(policy, snapshot, extra=config.ranking_extra, free=free, resident=resident,
                   share=config.switch_share, idle_factor=config.idle_factor))
    return out


def _count(decided: Decided, result: SimResult, pooled: bool, name: str) -> None:
    if decided.rejected and not pooled:
        # Live, such grants are dropped with a warning; a simulation that
        # quietly did the same would report figures for a different policy.
        raise AssertionError(f"{name} broke the hard limits: "
                             + "; ".join(reason for _, reason in decided.rejected))
    result.rejected += len(decided.rejected)
    result.unplaced += decided.unplaced


def _slots(config: SimConfig) -> list[_Slot]:
    named = [(p.name, p.slots) for p in config.pools] or [("", config.slots)]
    return [_Slot(SlotView(f"{name}#{i}", name, f"{name}#{i}"))
            for name, count in named for i in range(count)]


def _take(slots: list[_Slot], index: int, job: SimJob) -> float:
    """``job`` runs on slot ``index``; its chunk's overhead: the dispatch alone
    if the slot holds its trainer, else the whole save + restore + dispatch."""
    slot = slots[index]
    stays = slot.view.resident_job == job.job_id
    if not stays:
        if job.slot is not None and slots[job.slot].view.resident_job == job.job_id:
            slots[job.slot].view = replace(slots[job.slot].view, resident_job=None)
        slot.view = replace(slot.view, resident_job=job.job_id)
        job.moves += job.switch_known
    slot.busy = True
    job.slot = index
    job.switch_known = True
    overhead = job.curve.chunk_overhead_seconds
    return min(RESIDENT_CHUNK_SECONDS, overhead) if stays else overhead


def switch_cost(curve: TraceCurve) -> float:
    """What a move costs beyond a chunk that steps on: the curve's overhead less
    the dispatch every chunk pays, as the workers measure it live (build,
    restore and save, not the dispatch)."""
    return max(curve.chunk_overhead_seconds - RESIDENT_CHUNK_SECONDS, 0.0)


def _let_go(slots: list[_Slot], job: SimJob) -> None:
    """A job that finished or was stopped leaves its slot."""
    if job.slot is not None and slots[job.slot].view.resident_job == job.job_id:
        slots[job.slot].view = replace(slots[job.slot].view, resident_job=None)


def _start(job: SimJob, grant: Grant, now: float, pool: str | None = None,
           speed: float = 1.0, attained_overhead: bool = True,
           overhead: float | None = None) -> float:
    """Begin a chunk on ``pool`` (``None``: no pools); returns its end time.
    Iteration times are known up front; ``speed`` divides the recorded seconds;
    ``overhead`` (default: the curve's) is the chunk's dispatch, restore and save."""
    curve = job.curve
    count = min(grant.iterations, curve.iterations - job.done)
    secs = np.asarray(curve.seconds[job.done: job.done + count])
    if speed != 1.0:
        secs = secs / speed
    if overhead is None:
        overhead = curve.chunk_overhead_seconds
    first = now + overhead / 2
    job.iteration_times.extend((first + np.cumsum(secs)).tolist())
    job.running = True
    job.pending = count
    job.yield_after = grant.yield_after
    if job.yield_after is not None and job.yield_after >= count:
        job.yield_after = None
    job.chunk_overhead = overhead
    job.pool = pool
    job.speed = speed
    job.chunk_pools.append(pool or "")
    job._view = None
    compute = float(secs.sum())
    duration = overhead + compute
    job.attained += duration if attained_overhead else compute
    return now + duration


def _yield_if_wanted(yielders: dict[int, SimJob], views: Mapping[int, JobView],
                     config: SimConfig, free: int, now: float,
                     events: list[tuple[float, int, int, int]], seq: int,
                     result: SimResult) -> int:
    """Where a job waits that a lengthened chunk ending would let run, end every lengthened
    chunk in flight (``yielders``, emptied) at its yield point, as live
    workers do on the scheduler's word
    (:func:`backend.scheduling.residency.slots_wanted`); returns the last
    event sequence number used."""
    if not yielders or not slots_wanted(Snapshot(
            now=now, free_slots=free, total_slots=config.slots,
            chunk_seconds=config.chunk_seconds, jobs=list(views.values()),
            tenants=config.tenants), {job.tenant_id for job in yielders.values()}):
        return seq
    for job in yielders.values():
        end = _cut_short(job, now, result)
        if end is not None:
            seq += 1
            job.chunk_event = seq
            heapq.heappush(events, (end, _COMPLETE, seq, job.job_id))
    yielders.clear()
    return seq


def _cut_short(job: SimJob, now: float, result: SimResult) -> float | None:
    """End ``job``'s chunk in flight after its yield point, or after the
    iteration running at ``now`` if that is later; its new end, ``None`` if
    that is no sooner. Its attained service and its pool's busy time shrink
    by the iterations dropped."""
    times = job.iteration_times
    first = len(times) - job.pending
    limit = job.yield_after or job.pending
    job.yield_after = None
    # The iteration in progress at ``now`` ends; later ones are dropped.
    keep = max(limit, bisect.bisect_left(times, now, lo=first) - first + 1)
    if keep >= job.pending:
        return None
    old_end = times[-1] + job.chunk_overhead / 2
    end = times[first + keep - 1] + job.chunk_overhead / 2
    dropped = old_end - end
    del times[first + keep:]
    job.pending = keep
    job.attained -= dropped
    job._view = None
    if job.pool is not None:
        result.pool_busy[job.pool] -= dropped
        if job.chunk_log_index is not None:
            begin, _, pool = result.chunk_log[job.chunk_log_index]
            result.chunk_log[job.chunk_log_index] = (begin, end, pool)
    return end


def _points(cache: dict[tuple[int, float], LossHistory], curve: TraceCurve,
            speed: float) -> LossHistory:
    """The curve's loss points as a job reports them running ``speed`` times
    faster than recorded (the seconds it took on its pool, as live)."""
    key = (id(curve), speed)
    found = cache.get(key)
    if found is None:
        seconds = np.asarray(curve.seconds, float)
        found = cache[key] = LossHistory(
            np.arange(1, curve.iterations + 1, dtype=np.int64), np.asarray(curve.losses, float),
            seconds if speed == 1.0 else seconds / speed)
    return found


def _complete(job: SimJob, now: float, points: LossHistory) -> None:
    """A chunk ended: its loss points (``points``: the curve's, at the chunk's
    speed) become visible; the job may be finished."""
    count = job.pending
    end = job.done + count
    job.ring.extend(points.iterations[job.done:end], points.values[job.done:end],
                      points.seconds[job.done:end])
    job.done += count
    job.running = False
    job.pool = None
    job._view = None
    job.chunks += 1
    job.waiting_since = now
    if job.done >= job.curve.iterations:
        job.finish = now

