"""The training loop shared by live chunks and trace recording.

Both step a trainer, time each step, ask the stop rule after every loss and
run the held-out evaluation every ``eval_every`` iterations, so a recorded
trace and a live job see the same metrics and stop at the same iteration
with the same verdict.

In-process trainers step one iteration per call, so a stop rule fires at
exactly the iteration it names. A trainer that sets ``batched = True`` (the
sandboxed one, whose every call crosses a pipe) is stepped in batches that
each take about ``BATCH_SECONDS``; a target or convergence verdict reached
inside a batch then ends the job at the batch's end, with the iterations
after it kept, because the model did train them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from workers.stopping import StopRule, Verdict, VerdictStatus, check, check_quality
from workers.trainers.contract import Metrics, Trainer, clean_metrics

Point = tuple[int, float, float]
"""One iteration's ``(iteration, loss, seconds)``."""
Sample = tuple[int, Metrics]
"""Metrics taken at one iteration."""

TEXT_SAMPLE_MAX = 1000
"""Most characters of a trainer's text sample kept (the rest is cut off)."""

BATCH_SECONDS = 0.1
"""How long one step() call of a batched trainer should take: long enough that a
pipe round trip (~0.4 ms) costs under 1% of it, short enough to keep the lease
renewed and the live chart moving."""


@dataclass
class Iterations:
    """What a call to :func:`run_iterations` did, filled in as it goes."""

    iteration: int
    """The last iteration run (the starting iteration when none ran)."""
    points: list[Point] = field(default_factory=list)
    metrics: list[Sample] = field(default_factory=list)
    """Per-iteration metrics other than the loss, for iterations that had any."""
    evaluations: list[Sample] = field(default_factory=list)
    """Held-out metrics, every ``eval_every`` iterations and at a completed end."""
    text_sample: tuple[int, str] | None = None
    """The latest evaluation's text sample (``Trainer.text_sample``) and its iteration."""
    verdict: Verdict | None = None
    stopped: bool = False
    """``on_tick`` asked to stop before the run was over."""
    wind_down: bool = False
    """Set by ``on_tick`` to end the run after this step, keeping what it did
    (the job was paused or cancelled mid-chunk)."""
    error: Exception | None = None
    """What a step, an evaluation or ``on_tick`` raised; the run ended there."""


@dataclass
class _Judge:
    """The stop rule's running view: recent losses and quality values."""

    rule: StopRule
    losses: list[float]
    quality: list[float]
    initial: float | None

    def loss(self, iteration: int, loss: float) -> Verdict | None:
        self.losses.append(loss)
        if self.initial is None:
            self.initial = loss
        verdict = check(self.rule, iteration, self.losses, self.initial)
        # check() reads at most the rule's history_length newest losses.
        del self.losses[:-self.rule.history_length]
        return verdict

    def evaluation(self, iteration: int, metrics: Metrics) -> Verdict | None:
        if self.rule.metric == "loss":
            return None
        value = metrics.get(self.rule.metric)
        if value is None:
            return Verdict(VerdictStatus.failed,
                           f"the trainer's evaluation reports no {self.rule.metric} "
                           f"(it reported: {', '.join(sorted(metrics)) or 'nothing'})")
        self.quality.append(value)
        verdict = check_quality(self.rule, iteration, self.quality)
        del self.quality[:-self.rule.history_length]
        return verdict


def run_iterations(
    trainer: Trainer,
    rule: StopRule,
    budget: int,
    on_tick: Callable[[Iterations], bool],
    *,
    start: int = 0,
    history: Iterable[float] = (),
    initial: float | None = None,
    eval_every: int = 0,
    quality_history: Iterable[float] = (),
) -> Iterations:
    """Step ``trainer`` from iteration ``start`` until the stop rule gives a
    verdict, ``budget`` iterations have run, or ``rule.max_iterations`` is
    reached, whichever comes first.

    ``history`` holds the losses just before ``start`` (a resumed job's
    recent points) so the convergence test spans the resume, and
    ``quality_history`` likewise the recent values of the rule's held-out
    metric; ``initial`` is the job's first loss, or None to take the first
    loss run here. ``on_tick`` is called after every step call has been
    judged, the final one included; returning False abandons the run at once,
setting ``wind_down`` ends it there with its results kept.
    """
    run = Iterations(iteration=start)
    judge = _Judge(rule, list(history), list(quality_history), initial)
    stop_at = min(start + budget, rule.max_iterations)
    batched = bool(getattr(trainer, "batched", False))
    size = 1
    try:
        while run.iteration < stop_at:
            size = min(size, stop_at - run.iteration)
            if eval_every > 0:
                size = min(size, eval_every - run.iteration % eval_every)
            started = time.perf_counter()
            steps = trainer.step(size)
            elapsed = time.perf_counter() - started
            _take_steps(run, judge, steps, size, elapsed)
            if run.verdict is not None and run.verdict.status == VerdictStatus.failed:
                on_tick(run)
                break
            due = eval_every > 0 and run.iteration % eval_every == 0
            if due or (run.verdict is not None and eval_every > 0):
                _evaluate(trainer, run, judge)
            if not on_tick(run):
                run.stopped = True
                return run
            if run.verdict is not None or run.wind_down:
                break
            if batched:
                each = elapsed / size
                size = max(1, min(2 * size, int(BATCH_SECONDS / each) if each > 0 else 2 * size))
    except Exception as exc:  # the caller decides what a broken step means
        run.error = exc
    return run


def _take_steps(run: Iterations, judge: _Judge, steps: object, size: int,
                elapsed: float) -> None:
    if not isinstance(steps, list) or len(steps) != size:
        got = len(steps) if isinstance(steps, list) else type(steps).__name__
        raise ValueError(f"step({size}) must return {size} metrics dicts, got {got}")
    each = elapsed / size
    for raw in steps:
        where = f"step at iteration {run.iteration + 1}"
        metrics = clean_metrics(raw, where=where)
        loss = metrics.pop("loss", None)
        if loss is None:
            raise ValueError(f"{where}: the metrics have no 'loss'")
        run.iteration += 1
        run.points.append((run.iteration, loss, each))
        if metrics:
            run.metrics.append((run.iteration, metrics))
        verdict = judge.loss(run.iteration, loss)
        if run.verdict is None and verdict is not None:
            run.verdict = verdict
        if verdict is not None and verdict.status == VerdictStatus.failed:
            run.verdict = verdict
            return  # the model is broken from here on: nothing after counts


def _evaluate(trainer: Trainer, run: Iterations, judge: _Judge) -> None:
    if run.evaluations and run.evaluations[-1][0] == run.iteration:
        return
    started = time.perf_counter()
    metrics = clean_metrics(trainer.evaluate(), where=f"evaluate at iteration {run.iteration}")
    sampler = getattr(trainer, "text_sample", None)
    text = sampler() if callable(sampler) else None
    if text is not None:
        if not isinstance(text, str):
            raise ValueError(f"text_sample at iteration {run.iteration} must return a str or "
                             f"None, got {type(text).__name__}")
        run.text_sample = (run.iteration, text[:TEXT_SAMPLE_MAX])
    if run.points:
        # Evaluation is training time too: it is what the job spends.
        it, loss, seconds = run.points[-1]
        run.points[-1] = (it, loss, seconds + time.perf_counter() - started)
    finite = {k: v for k, v in metrics.items() if math.isfinite(v)}
    if finite:
        run.evaluations.append((run.iteration, finite))
    verdict = judge.evaluation(run.iteration, metrics)
    if verdict is not None and (run.verdict is None or verdict.status == VerdictStatus.failed):
        run.verdict = verdict
