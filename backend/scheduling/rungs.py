"""Grants of an experiment's jobs end at its early-stopping rule's rungs (pure).

The rule judges a job when one of its chunks commits. A chunk that runs past
a rung carries a hopeless job beyond the point where the rule would have
stopped it: a fast configuration sized to the chunk length (or stretched to
amortise a move, :func:`backend.scheduling.residency.amortised`) once ran all
its 600 iterations in one grant, and the rule never judged it. So a grant to
an experiment job is cut to end at the next rung, applied after every other
sizing, and a new configuration's first grant ends at the first rung.

What a cut takes off is not owed to the job: once its chunk has committed
and the rule has kept it, it waits to be ranked again with every other job,
where the experiment focus (:mod:`backend.scheduling.experiment_focus`)
hands the experiment's slots to its leading configurations. Until
2026-11-28 the rest of the grant's time slice was owed and granted again
ahead of the ranking; measured again then, every recorded sweep found its
best sooner without it (torch 11.9 / 5.9 / 3.0 s -> 5.6 / 2.9 / 1.6 at 2 / 4
/ 8 slots, seeds 0-2; 11 of 12 sweep-cluster cells sooner on held-out seeds
7-9, the 12th the same) and the other tenants' jobs kept a lower loss: a
continuation gave a configuration chosen by queue order the rest of its
slice before the others had shown anything (docs/experiments.md, "Rungs").

Worked example: a predictive rule with ``min_iterations`` 100 judges at 100,
200 and 400 of a 600-iteration budget. A job at iteration 0 granted 600
iterations gets 100; at 100 granted 600, it gets 100 (to 200); at 150
granted 30, it keeps 30; at 400 granted 600, it keeps its 200 (no rung is
left before its end).
"""

from __future__ import annotations

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
