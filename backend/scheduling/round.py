"""One scheduling round as pure steps, shared by the live scheduler and the simulator.

The live scheduler (:mod:`backend.scheduler.service`) and the simulator
(:mod:`backend.scheduling.simulator`) differ only in their I/O: a wall clock,
the database, Redis and Celery on one side; a simulated clock and recorded
curves on the other. What they decide goes through the steps below, in this
order, so the two cannot drift apart (blox's ``admission.accept ->
policy.schedule -> placement.place``):

1. **admission** (:func:`admit`): which never-run jobs the policy sees this
   round, at the rate the slots can warm them up (the policy's warm-up
   shares, :func:`warmup_shares`), round-robin across tenants;
2. **ranking** (:func:`rank`): the policy's grants for more than the free
   slots (``RANKING_EXTRA`` more, and past every job tied to some pool), with
   each experiment's focus applied;
3. **check and placement** (:func:`decide`): the ranking checked against the
   hard limits (:func:`~backend.scheduling.allocation.split_grants`), placed on
   pools (:func:`~backend.scheduling.placement.place`), cut to the free slots,
   then given a slot each, resident slot first, with a moving job's chunk
   stretched to amortise its switch, and every chunk longer in a round that
   leaves slots idle (:mod:`backend.scheduling.residency`);
4. **bookkeeping** (:func:`after`): the snapshot as the granted chunks leave it,
   for the next step of the same round.

Grants made before the policy runs (the rest of a grant cut at a rung, the
head of the last ranking) go through steps 3 and 4 the same way
(``decide(..., ranking=...)``; :func:`from_backlog`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice

from backend.scheduling.allocation import Rejected, chunk_iterations, split_grants
from backend.scheduling.experiment_focus import Standing, focus
from backend.scheduling.placement import place
from backend.scheduling.policies.slaq import SWEEP_WARMUP_SHARE, WARMUP_SHARE
from backend.scheduling.residency import (
    IDLE_CHUNK_FACTOR,
    SWITCH_SHARE,
    SlotView,
    amortised,
    assign_slots,
    steps_on,
    unhurried,
    yielding,
)
from backend.scheduling.types import Grant, JobView, Policy, Snapshot, TenantView

RANKING_EXTRA = 32
"""Grants ranked beyond the free slots where there are pools: the top jobs may
all need a pool with no free slot (or be at a tenant's quota in it), and the
next ones can use the slots there are. Live, the same number of grants is
kept as the backlog a freed slot takes before the next ranking."""

HELD_BACK_EXPLAINED = 1000
"""Never-run jobs not admitted this round that still get a place (and a
published reason) in the queue; the rest show none."""

BACKLOG_PREFIX = "from backlog: "
"""Starts the reason of a grant served from the last ranking."""


@dataclass(frozen=True)
class WarmupShares:
    """Shares of all slots that never-run jobs may hold for their first chunk:
    ``own`` for jobs of their own, ``sweep`` for an experiment's configurations."""

    own: float = WARMUP_SHARE
    sweep: float = SWEEP_WARMUP_SHARE


def warmup_shares(policy: object) -> WarmupShares:
    """The warm-up shares of ``policy`` (looked up through wrappers that keep
    the policy they wrap as ``.policy``); the slaq defaults for a policy that
    has none of its own (fair, las, fifo...)."""
    seen = 0
    while policy is not None and seen < 8:
        own = getattr(policy, "warmup_share", None)
        if own is not None:
            return WarmupShares(float(own), float(getattr(policy, "sweep_warmup_share",
                                                          SWEEP_WARMUP_SHARE)))
        policy = getattr(policy, "policy", None)
        seen += 1
    return WarmupShares()


@dataclass(frozen=True)
class Allowance:
    """How many never-run jobs may join the policy's view this round:
    ``new`` in all, ``configurations`` of them an experiment's."""

    new: int
    configurations: int


def allowance(known: Sequence[JobView], slots: int, shares: WarmupShares) -> Allowance:
    """The admission's allowance, from the jobs the policy sees anyway
    (``known``: every job that has run, with those running now): all the
    slots' worth at ``shares.own``, an experiment's configurations at
    ``shares.sweep``, less the never-run jobs running, plus the slots the jobs
    with history leave idle; at least one each."""
    running_new = running_configurations = waiting = 0
    for view in known:
        if not view.running:
            waiting += 1
        elif view.chunks_run == 0 and view.iterations_done == 0:
            running_new += 1
            if view.experiment_id is not None:
                running_configurations += 1
    idle = max(slots - waiting, 0)
    return Allowance(
        new=max(math.ceil(shares.own * slots) - running_new + idle, 1),
        # An experiment's configurations warm up at their own share, so a
        # sweep's backlog does not fill the admission.
        configurations=max(math.ceil(shares.sweep * slots) - running_configurations + idle, 1))


def admit(known: Sequence[JobView], new: Mapping[int, Sequence[int]],
          experiment_of: Mapping[int, int | None], *, slots: int,
          tenants: Mapping[int, TenantView], shares: WarmupShares,
          explained: int = HELD_BACK_EXPLAINED) -> tuple[list[int], list[int]]:
    """Never-run jobs admitted to the policy's view, and those held back (the
    first ``explained`` of them, in their turn's order).

    ``new``: per tenant, its never-run waiting jobs, oldest first (at least
    the allowance plus ``explained`` of them); ``experiment_of``: each one's
    experiment. Without this, thousands of new jobs all pass the warm-up bound
    at once and every slot goes to first chunks while jobs with history
    starve (and every round ranks them all). New jobs are admitted
    round-robin across tenants, oldest first within a tenant, tenants at
    their slot quota last (their new jobs keep their place but take no
    admission), so one tenant's flood does not hold back another's first job.
    """
    allowed = allowance(known, slots, shares)
    configurations = allowed.configurations
    in_flight: Counter[int] = Counter(view.tenant_id for view in known if view.running)
    queues = []
    for tenant_id, jobs in new.items():
        if not jobs:
            continue
        limit = tenants[tenant_id].max_slots if tenant_id in tenants else slots
        queues.append((jobs[0], in_flight[tenant_id] >= limit, jobs))
    queues.sort(key=lambda q: (q[1], q[0]))
    order: list[int] = []
    for depth in range(max((len(q[2]) for q in queues), default=0)):
        if len(order) >= allowed.new + explained:
            break
        order.extend(q[2][depth] for q in queues if depth < len(q[2]))
    admitted: list[int] = []
    held: list[int] = []
    for job_id in order:
        configuration = experiment_of.get(job_id) is not None
        if len(admitted) >= allowed.new or (configuration and configurations <= 0):
            held.append(job_id)
            continue
        if configuration:
            configurations -= 1
        admitted.append(job_id)
    return admitted, held[:explained]


def pool_bound(snapshot: Snapshot) -> int:
    """Waiting jobs tied to some pools (a GPU, memory, a named pool): the
    ranking reaches past them all, so that when their pools are full the
    other pools' free slots still find jobs."""
    if len(snapshot.pools) < 2:
        return 0
    return sum(1 for job in snapshot.waiting()
               if job.requirements.gpu or job.requirements.pool
               or job.requirements.min_memory_mb)


def rank(policy: Policy, snapshot: Snapshot, *, standings: Mapping[int, Standing] | None = None,
         extra: int = RANKING_EXTRA) -> tuple[list[Grant], int]:
    """The policy's ranking beyond the free slots, with each predictive
    experiment's slots handed to its leading configurations; and how many
    grants it was asked for.

    Without pools in the snapshot, placement takes every grant and the round
    runs the free slots' worth: a longer ranking would never be used, so the
    policy is asked for the free slots alone.
    """
    asked = snapshot.free_slots
    if snapshot.pools:
        asked += extra + pool_bound(snapshot)
    ranking = policy.allocate(replace(snapshot, free_slots=asked))
    return focus(snapshot, ranking, standings or {}), asked


@dataclass
class Decided:
    """What one step of a round grants: each grant (with its pool, its chunk
    length final) and the free slot that runs it (``None``: its pool's queue,
    or no slots modelled); the grants the hard-limit check refused; how many
    of the free slots' worth of the ranking no pool could take now."""

    grants: list[tuple[Grant, SlotView | None]] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    unplaced: int = 0
    asked: int = 0


def decide(policy: Policy, snapshot: Snapshot, *, ranking: Sequence[Grant] | None = None,
           standings: Mapping[int, Standing] | None = None, extra: int = RANKING_EXTRA,
           free: Sequence[SlotView] = (), resident: Mapping[int, str] | None = None,
           reserved: Collection[int] = (), share: float = SWITCH_SHARE,
           default_pool: str = "", cut: Callable[[Grant, JobView, bool], Grant] | None = None,
           idle_factor: float = IDLE_CHUNK_FACTOR) -> Decided:
    """Rank (unless ``ranking`` is given), check, place and put on slots.

    ``free``: the free slots, each with the job it holds loaded (none: no
    slots modelled, every grant goes to its pool's queue); ``resident``: job
    id -> the slot holding its trainer; ``reserved``: jobs whose resident slot
    waits for them (owed the rest of a cut grant) unless they are granted;
    ``default_pool``: the pool name of a grant placed where there are no
    pools; ``cut``: applied to each grant last (an experiment's rungs);
    ``idle_factor``: chunks granted while slots stay idle are up to this many
    chunks long (:func:`~backend.scheduling.residency.unhurried`; 1: off).
    """
    asked = 0
    over: list[Rejected] = []
    if ranking is None:
        ranking, asked = rank(policy, snapshot, standings=standings, extra=extra)
        # More grants than it was asked for: the policy broke its promise.
        over = [(grant, f"grant {number} of {len(ranking)} exceeds the {asked} free slots")
                for number, grant in enumerate(ranking[asked:], start=asked + 1)]
        ranking = ranking[:asked]
    ok, rejected = split_grants(replace(snapshot, free_slots=max(asked, snapshot.free_slots)),
                                ranking)
    rejected += over
    placed = [replace(grant, pool=pool or default_pool)
              for grant, pool in place(snapshot, ok)][:snapshot.free_slots]
    ran = {grant.job_id for grant in placed}
    unplaced = sum(1 for g in ok[:snapshot.free_slots] if g.job_id not in ran)
    homes = resident or {}
    slots = [s for s in free if s.resident_job not in reserved or s.resident_job in ran]
    views = {job.job_id: job for job in snapshot.jobs}
    # Every job that waits is granted now and slots stay idle: no decision
    # is pending for them, so chunks can be long (an arrival takes an idle slot).
    # Counted only up to the free slots: a round may see 10,000 jobs.
    waiting = (j for j in snapshot.jobs if not j.running and j.remaining_iterations > 0)
    idle = sum(1 for _ in islice(waiting, snapshot.free_slots)) < snapshot.free_slots
    out: list[tuple[Grant, SlotView | None]] = []
    for grant, slot in assign_slots(placed, slots, homes):
        job = views.get(grant.job_id)
        if job is not None:
            # Stretched to amortise a move (or while slots idle), then cut (at
            # an experiment's next rung): no stretch carries a job past a judgement.
            grant = amortised(grant, job, slot, homes, share)
            if idle:
                grant = unhurried(grant, job, snapshot.chunk_seconds, idle_factor)
            if cut is not None:
                grant = cut(grant, job, not steps_on(grant, slot, homes))
            grant = yielding(grant)
        out.append((grant, slot))
    return Decided(out, rejected, unplaced, asked)


def backlog(policy: Policy, snapshot: Snapshot, *,
            standings: Mapping[int, Standing] | None = None,
            length: int = RANKING_EXTRA) -> list[Grant]:
    """The next ``length`` grants the policy would make (experiment focus
    applied): the backlog a slot freed before the next ranking takes."""
    return focus(snapshot, policy.allocate(replace(snapshot, free_slots=length)),
                 standings or {})


def from_backlog(snapshot: Snapshot, backlog: list[Grant]) -> list[Grant]:
    """Grants for the free slots from the head of the last ranking, taken off
    ``backlog`` (which this pops): jobs granted, paused or cancelled since, or
    whose tenant is at its quota now, are skipped; each is sized again (the
    job may have run since it was ranked) and its reason says where it came from."""
    waiting = {job.job_id: job for job in snapshot.waiting()}
    in_flight = snapshot.running_by_tenant()
    picked: list[Grant] = []
    while backlog and len(picked) < snapshot.free_slots:
        grant = backlog.pop(0)
        job = waiting.get(grant.job_id)
        if job is None:
            continue
        used = in_flight.get(job.tenant_id, 0)
        if used >= snapshot.tenant(job.tenant_id).max_slots:
            continue  # the next ranking places it again
        in_flight[job.tenant_id] = used + 1
        picked.append(replace(grant, iterations=chunk_iterations(snapshot, job),
                              reason=f"{BACKLOG_PREFIX}{grant.reason}"))
    return picked


def after(snapshot: Snapshot, grants: Sequence[Grant]) -> Snapshot:
    """``snapshot`` with ``grants`` running: their jobs marked running on their
    pools, and the free slots (in all and per pool) they took gone."""
    if not grants:
        return snapshot
    granted = {g.job_id: g.pool for g in grants}
    taken = Counter(g.pool for g in grants)
    return replace(snapshot, free_slots=max(snapshot.free_slots - len(grants), 0),
                   jobs=[replace(j, running=True, pool=granted[j.job_id])
                         if j.job_id in granted else j for j in snapshot.jobs],
                   pools=[replace(p, free=max(p.free - taken[p.name], 0))
                          for p in snapshot.pools])
