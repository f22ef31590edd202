"""Grants of an experiment's jobs end at its early-stopping rule's rungs (pure).

The rule judges a job when one of its chunks commits. A chunk that runs past
a rung carries a hopeless job beyond the point where the rule would have
stopped it: a fast configuration sized to the chunk length (or stretched to
amortise a move, :func:`backend.scheduling.residency.amortised`) once ran all
its 600 iterations in one grant, and the rule never judged it. So a grant to
an experiment job is cut to end at the next rung, applied after every other
sizing, and a new configuration's first grant ends at the first rung.

The rung is a judgement, not a new scheduling decision: for a job that is
dear to move, the rest of the grant's time slice is *owed* to it, and once
its chunk has committed and the rule has kept it, it is granted to it again
ahead of the policy's ranking, on the slot it holds (:func:`continuations`),
so that the judgement costs it no move. A job cheap to move goes back to the
ranking instead (:data:`CHEAP_MOVE_SHARE`).

Worked example: a predictive rule with ``min_iterations`` 100 judges at 100,
200 and 400 of a 600-iteration budget. A job at iteration 0 granted 600
iterations gets 100; at 100 granted 600, it gets 100 (to 200); at 150
granted 30, it keeps 30; at 400 granted 600, it keeps its 200 (no rung is
left before its end).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from backend.scheduling.early_stopping import RuleConfig, judged_at
from backend.scheduling.types import Grant, JobView


def next_rung(config: RuleConfig | None, iterations_done: int, max_iterations: int) -> int | None:
    """The first rung after ``iterations_done``, or None past the last."""
    if config is None:
        return None
    return next((r for r in judged_at(config, max_iterations) if r > iterations_done), None)


def at_rung(grant: Grant, job: JobView, config: RuleConfig | None) -> Grant:
    """``grant`` cut to end at ``job``'s next rung under ``config`` (the rule
    of the job's experiment; None for a job with no rule), its reason saying so."""
    rung = next_rung(config, job.iterations_done, job.max_iterations)
    if rung is None or job.iterations_done + grant.iterations <= rung:
        return grant
    return replace(grant, iterations=rung - job.iterations_done,
                   reason=f"{grant.reason}; ends at iteration {rung}, where its experiment's "
                          "early-stopping rule judges it")


@dataclass(frozen=True)
class Owed:
    """What a cut at a rung took off a job's grant, owed until ``until``.

    ``iterations`` is what the cut took off; the continuation is sized to the
    time left in the slice at the job's measured speed where it has one
    (:func:`owed_now`)."""

    iterations: int
    until: float
    """The end of the grant's time slice: a grant cut at every rung must not
    hold its slot for a dozen chunks' overheads (a fast job's grant can be
    tens of thousands of iterations), so what is left then goes back to the
    ranking."""
    chunk_seconds: float = 0.0
    """The chunk length when the grant was made (0: unknown), against which
    a move's cost is weighed (:data:`CHEAP_MOVE_SHARE`): not the slice, which
    a move may have stretched to amortise that very cost."""
    moved: bool = False
    """The grant moved the job onto its slot (or started it there): the move
    is no part of the job's slice, and the deadline is put back by its
    measured cost when the continuation is granted (:func:`continuations`)."""


def note_cut(owed: dict[int, Owed], grant: Grant, cut: Grant, job: JobView, now: float,
             chunk_seconds: float, moved: bool = False) -> None:
    """Record in ``owed`` what cutting ``grant`` to ``cut`` took off. A cut
    continuation keeps the deadline of the grant it continues; a new grant's
    slice is the chunk length, or the grant's own length where it is longer
    (a move stretched to amortise its switch)."""
    left = grant.iterations - cut.iterations
    if left <= 0:
        owed.pop(job.job_id, None)
        return
    before = owed.get(job.job_id)
    if before is not None:
        owed[job.job_id] = replace(before, iterations=left)
        return
    spi = job.seconds_per_iteration or job.estimated_seconds_per_iteration or 0.0
    owed[job.job_id] = Owed(left, now + max(chunk_seconds, grant.iterations * spi),
                            chunk_seconds, moved)


def cut_at_rung(grant: Grant, job: JobView, config: RuleConfig | None, owed: dict[int, Owed],
                now: float, chunk_seconds: float, moved: bool = False) -> Grant:
    """:func:`at_rung`, noting in ``owed`` what the cut took off the grant
    (:func:`note_cut`), for :func:`continuations`."""
    cut = at_rung(grant, job, config)
    note_cut(owed, grant, cut, job, now, chunk_seconds, moved)
    return cut


CHEAP_MOVE_SHARE = 0.1
"""A job whose measured move costs less than this share of a chunk is owed
nothing past a rung: it goes back to the ranking, as if its grant had ended.

The continuation exists to spare a move: a configuration cut at its rung and
then passed over pays a switch when it is served again. Where a move is that
cheap the slot is worth more to the experiment's leaders, whom the focus
(:mod:`backend.scheduling.experiment_focus`) serves from the ranking. On the
recorded sweeps (moves of 0.01-0.1 s against 1 s chunks) owing nothing found
the best sooner in 22 of 24 cells; in a live sweep of 10.8M/16.1M-parameter
models, whose moves cost 0.6-2 s, it took 145-176 s against 123-150 s
(docs/experiments.md, "Rungs"). Where the move's cost is not measured yet,
the job is owed its slice."""


def cheap_to_move(entry: Owed, job: JobView) -> bool:
    """Whether ``job``'s measured move costs less than
    :data:`CHEAP_MOVE_SHARE` of ``entry``'s chunk (False where unmeasured).
    Worked example: 1 s chunks, a move of 0.03 s: cheap; of 0.4 s: not, even
    where the grant was stretched to a 6 s slice to amortise it."""
    return 0 < job.switch_seconds < CHEAP_MOVE_SHARE * entry.chunk_seconds


def continuations(owed: dict[int, Owed], waiting: Mapping[int, JobView], gone: set[int],
                  free_slots: int, now: float) -> list[Grant]:
    """Grants of what ``owed`` holds for jobs waiting now (their chunk ended at
    a rung and the rule kept them), at most ``free_slots``, in the order cut.

    Entries of ``gone`` jobs (stopped, paused, finished) are dropped, and so,
    once their job waits, are those whose slice has ended (put back first by
    the move their grant paid: :func:`after_move`) and those of jobs cheap to
    move (:func:`cheap_to_move`); a running job's entry waits for its chunk
    to end. The others stay until the grant made of them is cut again
    (:func:`note_cut`) or runs to its end. Worked example:
    owed ``{4: 500 until 12.0, 7: 200 until 11.0}`` at 11.5, both waiting,
    job 4 measured at 0.002 s an iteration: job 7's slice has ended (it goes
    back to the ranking), and job 4 gets one grant of 250 iterations, the
    half second left of its slice."""
    grants: list[Grant] = []
    for job_id, entry in list(owed.items()):
        if entry.moved and job_id in waiting:
            entry = owed[job_id] = after_move(entry, waiting[job_id])
        if job_id in gone or (job_id in waiting and (
                entry.until < now or cheap_to_move(entry, waiting[job_id]))):
            del owed[job_id]
        elif job_id in waiting and len(grants) < free_slots:
            job = waiting[job_id]
            iterations = min(owed_now(entry, job, now), job.remaining_iterations)
            if iterations <= 0:
                del owed[job_id]
                continue
            grants.append(Grant(
                job_id=job_id, iterations=iterations, predicted_gain=None,
                reason=f"continues its grant past iteration {job.iterations_done}, where "
                       "its experiment's early-stopping rule judged it and kept it"))
    return grants


def after_move(entry: Owed, job: JobView) -> Owed:
    """``entry`` with its slice put back by the move its grant paid, now
    that the job's first chunk of that grant has measured it.

    The slice is what the policy gave the job to train; a move (or a new
    job's start) is paid inside it before the first iteration. Where the move
    costs as much as the slice, nothing was left of it when the chunk cut at
    the rung ended: the continuation was lost, and the job moved again to
    go on, paying once more. Worked example: a 1 s slice from 9.41 (until
    10.41), a start measured at 0.98 s, the chunk to rung 100 ended at 10.6:
    until 11.39, and 0.79 s of the slice is still owed."""
    return replace(entry, until=entry.until + job.switch_seconds, moved=False)


def owed_now(entry: Owed, job: JobView, now: float) -> int:
    """Iterations that fill the rest of ``entry``'s slice at ``job``'s measured
    speed; what the cut took off where it has none yet.

    The cut grant was sized on a speed estimated before the job had run (a
    new configuration borrows similar jobs'), and the iterations it took off
    keep that estimate's error: on the CNN sweep a configuration measured at
    2.0-3.2 ms an iteration was sized at 3.5 ms, so its first slice ran 0.66 s
    of its 1 s, and one sized too fast overran its slice by as much, holding
    a slot the ranking should have given. Worked example: owed 500 until
    12.0, at 11.5, measured at 0.002 s an iteration: 250."""
    spi = job.seconds_per_iteration
    if not spi:
        return entry.iterations
    # The epsilon: 2.8 s left at 0.002 s is 1,400 iterations, not float's 1,399.99.
    return int((entry.until - now) / spi + 1e-9)
