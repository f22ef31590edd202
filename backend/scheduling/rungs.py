"""Grants of an experiment's jobs end at its early-stopping rule's rungs (pure).

The rule judges a job when one of its chunks commits. A chunk that runs past
a rung carries a hopeless job beyond the point where the rule would have
stopped it: a fast configuration sized to the chunk length (or stretched to
amortise a move, :func:`backend.scheduling.residency.amortised`) once ran all
its 600 iterations in one grant, and the rule never judged it. So a grant to
an experiment job is cut to end at the next rung, applied after every other
sizing, and a new configuration's first grant ends at the first rung.

The rung is a judgement, not a new scheduling decision: the iterations cut
off are *owed* to the job, and once its chunk has committed and the rule has
kept it, they are granted to it again ahead of the policy's ranking, on the
slot it holds (:func:`continuations`). Without that, on the recorded torch
sweep, a configuration cut at its first rung waited behind every other
configuration's first chunk, and the sweep found its best 35% later
(docs/experiments.md).

Worked example: a predictive rule with ``min_iterations`` 100 judges at 100,
200 and 400 of a 600-iteration budget. A job at iteration 0 granted 600
iterations gets 100; at 100 granted 600, it gets 100 (to 200); at 150
granted 30, it keeps 30; at 400 granted 600, it keeps its 200 (no rung is
left before its end).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

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


def cut_at_rung(grant: Grant, job: JobView, config: RuleConfig | None,
                owed: dict[int, int]) -> Grant:
    """:func:`at_rung`, noting in ``owed`` (job id -> iterations) what the cut
    took off the grant, for :func:`continuations`."""
    cut = at_rung(grant, job, config)
    if cut.iterations < grant.iterations:
        owed[job.job_id] = grant.iterations - cut.iterations
    else:
        owed.pop(job.job_id, None)
    return cut


def continuations(owed: dict[int, int], waiting: Mapping[int, JobView], gone: set[int],
                  free_slots: int) -> list[Grant]:
    """Grants of what ``owed`` holds for jobs waiting now (their chunk ended at
    a rung and the rule kept them), at most ``free_slots``, in the order cut.

    Entries of ``gone`` jobs (stopped, paused, finished) are dropped; those of
    jobs still running stay until their chunk ends. Worked example: owed
    ``{4: 500, 7: 200}``, job 4 waiting, job 7 running: one grant of 500
    iterations to job 4, and ``owed`` keeps ``{7: 200}``."""
    grants: list[Grant] = []
    for job_id in list(owed):
        if job_id in gone:
            del owed[job_id]
        elif job_id in waiting and len(grants) < free_slots:
            job = waiting[job_id]
            iterations = min(owed.pop(job_id), job.remaining_iterations)
            if iterations > 0:
                grants.append(Grant(
                    job_id=job_id, iterations=iterations, predicted_gain=None,
                    reason=f"continues its grant past iteration {job.iterations_done}, where "
                           "its experiment's early-stopping rule judged it and kept it"))
    return grants
