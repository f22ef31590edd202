"""The training loop shared by live chunks and trace recording.

Both step a trainer one iteration at a time, time each step, and ask the stop
rule after every loss, so a recorded trace and a live job see the same losses
and stop at the same iteration with the same verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from workers.algorithms.base import Trainer
from workers.stopping import StopRule, Verdict, check

Point = tuple[int, float, float]
"""One iteration's ``(iteration, loss, seconds)``."""


@dataclass
class Iterations:
    """What a call to :func:`run_iterations` did, filled in as it goes."""

    iteration: int
    """The last iteration run (the starting iteration when none ran)."""
    points: list[Point] = field(default_factory=list)
    verdict: Verdict | None = None
    stopped: bool = False
    """``on_tick`` asked to stop before the run was over."""
    error: Exception | None = None
    """What a step or ``on_tick`` raised; the run ended there."""


def run_iterations(
    trainer: Trainer,
    rule: StopRule,
    budget: int,
    on_tick: Callable[[Iterations], bool],
    *,
    start: int = 0,
    history: Iterable[float] = (),
    initial: float | None = None,
) -> Iterations:
    """Step ``trainer`` from iteration ``start`` until the stop rule gives a
    verdict, ``budget`` iterations have run, or ``rule.max_iterations`` is
    reached, whichever comes first.

    ``history`` holds the losses just before ``start`` (a resumed job's
    recent points) so the convergence test spans the resume; ``initial`` is
    the job's first loss, or None to take the first loss run here.
    ``on_tick`` is called after every iteration has been judged, the final
    one included; returning False abandons the run at once.
    """
    run = Iterations(iteration=start)
    recent = list(history)
    stop_at = min(start + budget, rule.max_iterations)
    try:
        while run.iteration < stop_at:
            started = time.perf_counter()
            loss = float(trainer.step(1)[0])
            elapsed = time.perf_counter() - started
            run.iteration += 1
            run.points.append((run.iteration, loss, elapsed))
            recent.append(loss)
            if initial is None:
                initial = loss
            run.verdict = check(rule, run.iteration, recent, initial)
            # check() looks back at most rule.window losses before the newest.
            del recent[:-(rule.window + 1)]
            if not on_tick(run):
                run.stopped = True
                return run
            if run.verdict is not None:
                break
    except Exception as exc:  # the caller decides what a broken step means
        run.error = exc
    return run
