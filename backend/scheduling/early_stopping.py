"""Which configurations of an experiment to stop early, and why (pure: no I/O).

Two rules, both deciding on the experiment's objective metric:

* **predictive**: the scheduler's curve predictor gives each running job's
  final objective with a band. After ``min_iterations``, a job whose
  *optimistic* bound cannot reach the *pessimistic* bound of the current
  top-``k`` is hopeless: even if it does as well as its band allows, and the
  others as badly, at least ``k`` others finish ahead of it.
* **asha**: successive halving. Rungs sit at ``min_iterations * reduction**i``;
  a job at a rung must be in the best ``1/reduction`` of the configurations
  that reached that rung, or it stops.

Each rule has **rungs**, the iterations it is sure to judge a job at (ASHA's
own; for the predictive rule ``min_iterations * 2**i``): the scheduler ends an
experiment job's grants there (:mod:`backend.scheduling.rungs`), so no chunk
carries a hopeless job past the point where it would have been stopped.

Everything is compared in "lower is better" form: a maximised objective
(``val_accuracy``) is negated on the way in and back on the way out. A job
that is currently the best is never stopped, whatever its prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.scheduling.predictor import LossPredictor
from backend.scheduling.types import JobView, LossPoint

RULES = ("none", "predictive", "asha")
EXTRAPOLATION_MARGIN = 0.3
"""How much better than its optimistic prediction a job may still end, as a
fraction of that value, at the start of its budget (none at its end)."""
RISING_MARGIN = 0.1
"""A series this share of its drop (plus noise) above its best is rising:
predicted to end no better than it is now (``CurveFit.rising``)."""
FLOOR_WINDOW = 50
"""Iterations of training loss averaged as its level now, for
:func:`training_floor` (minibatch losses are noisy)."""
FLOOR_NOISE_VALUES = 4
"""The held-out values whose steps measure its noise, for :func:`training_floor`."""


@dataclass(frozen=True)
class RuleConfig:
    rule: str = "none"
    top_k: int = 3
    min_iterations: int = 100
    reduction: int = 3
    metric: str = "loss"
    maximise: bool = False


def rule_config(spec: dict[str, Any]) -> RuleConfig | None:
    """The experiment's rule from its stored spec; ``None`` when it has none."""
    early = spec.get("early_stopping") or {}
    rule = str(early.get("rule") or "none")
    if rule == "none":
        return None
    objective = spec.get("objective") or {}
    metric = str(objective.get("metric") or "loss")
    mode = objective.get("mode")
    maximise = mode == "max" if mode in ("min", "max") else "accuracy" in metric
    return RuleConfig(rule=rule, top_k=int(early.get("top_k", 3)),
                      min_iterations=int(early.get("min_iterations", 100)),
                      reduction=int(early.get("reduction", 3)), metric=metric,
                      maximise=maximise)


@dataclass(frozen=True)
class Trial:
    """One configuration as the rule sees it, in the metric's own units.

    ``points`` is its objective series ``(iteration, value)``, oldest first;
    ``final`` the predicted objective at its last iteration as ``(mean, low,
    high)``, or ``None`` when the predictor cannot tell yet. ``floor`` is the
    best a held-out loss can still reach by its training loss
    (:func:`training_floor`), ``None`` where that says nothing. ``stoppable``
    jobs are queued or running and were never stopped before (a job resumed
    by hand after a stop is the user's call, not the rule's)."""

    job_id: int
    iterations_done: int
    max_iterations: int
    points: Sequence[tuple[int, float]] = ()
    final: tuple[float, float, float] | None = None
    stoppable: bool = True
    floor: float | None = None


@dataclass(frozen=True)
class Stop:
    job_id: int
    reason: str


@dataclass(frozen=True)
class Judgement:
    """What the rule made of an experiment's jobs: those it stops, and for
    each other stoppable job why it keeps running, in the rule's own numbers."""

    stops: list[Stop]
    kept: dict[int, str]


def decide(trials: Sequence[Trial], config: RuleConfig) -> list[Stop]:
    """The jobs ``config``'s rule stops now, with plain-words reasons."""
    return judge(trials, config).stops


def judge(trials: Sequence[Trial], config: RuleConfig) -> Judgement:
    """:func:`decide`, with the reason each job it does not stop runs on."""
    if config.rule == "predictive":
        return _predictive(trials, config)
    if config.rule == "asha":
        return _asha(trials, config)
    return Judgement([], {})


def _sign(config: RuleConfig) -> float:
    return -1.0 if config.maximise else 1.0


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _protected(trials: Sequence[Trial], sign: float) -> set[int]:
    """The currently best job(s): lowest latest value, and lowest best-so-far."""
    with_points = [t for t in trials if t.points]
    if not with_points:
        return set()
    latest = min(with_points, key=lambda t: sign * t.points[-1][1])
    best_seen = min(with_points, key=lambda t: min(sign * v for _, v in t.points))
    return {latest.job_id, best_seen.job_id}


def _bounds(trial: Trial, sign: float) -> tuple[float, float, float]:
    """(mean, optimistic, pessimistic) of the final objective, lower is better.

    A job that cannot run further (finished, or paused by hand) ends where it
    is; a running one without a fit could still end anywhere below its value."""
    current = sign * trial.points[-1][1]
    if not trial.stoppable or trial.iterations_done >= trial.max_iterations:
        return current, current, current
    if trial.final is None:
        return current, -math.inf, current
    mean, low, high = (sign * v for v in trial.final)
    optimistic = min(low, high)
    # The predictor's band is its fit's uncertainty, not the extrapolation's:
    # far from its end a curve can still bend a lot (a sweep's best MLP,
    # 12% into its budget, was predicted to end at 0.0180 +- 0.0003 and ended
    # at 0.0142). Widen the optimistic side in proportion to the budget left.
    left = 1.0 - min(trial.iterations_done / max(trial.max_iterations, 1), 1.0)
    optimistic -= EXTRAPOLATION_MARGIN * left * abs(optimistic)
    # The training loss bounds what a held-out loss can still gain, without
    # extrapolating (training_floor): the margin is for extrapolations only.
    if trial.floor is not None:
        optimistic = max(optimistic, sign * trial.floor)
    # A rival's pessimistic side is no better than where it stands: a job is
    # stopped for what others have shown, not for what their fits promise
    # (a slow fit extrapolated over most of its budget can promise anything).
    # Nor worse than the worst it has shown: a young fit's upper band is as
    # wild as its lower one (a live MLP's learning rate 0.2 at iteration 100
    # was given 487 +- 2,880), and judged against such bands no configuration,
    # however flat, is behind.
    worst = max(sign * v for _, v in trial.points)
    return mean, optimistic, min(max(low, high, current), worst)


def _predictive(trials: Sequence[Trial], config: RuleConfig) -> Judgement:
    sign = _sign(config)
    scored = {t.job_id: _bounds(t, sign) for t in trials if t.points}
    best_ids = _protected(trials, sign)
    protected = set(best_ids)
    # Also never the job predicted to finish best.
    if scored:
        protected.add(min(scored, key=lambda j: scored[j][0]))
    best_now = min((sign * t.points[-1][1] for t in trials if t.points), default=math.nan)
    need = "≥" if config.maximise else "≤"
    stops, kept = [], {}
    for trial in trials:
        if not trial.stoppable:
            continue
        job_id = trial.job_id
        if not trial.points or trial.iterations_done < config.min_iterations:
            kept[job_id] = (f"not judged before iteration {config.min_iterations} "
                            f"(at {trial.iterations_done})")
            continue
        if trial.final is None:
            kept[job_id] = (f"too few {config.metric} values to predict its final one yet "
                            f"({len(trial.points)} so far)")
            continue
        mean_u, low_u, high_u = trial.final
        if job_id in protected:
            which = "the best so far" if job_id in best_ids else "predicted to finish best"
            kept[job_id] = (f"{which} (predicted final {config.metric} {_fmt(mean_u)}); the "
                            "rule never stops the best")
            continue
        others = sorted(b[2] for j, b in scored.items() if j != job_id)
        if len(others) < config.top_k:
            plural = "" if len(others) == 1 else "s"
            kept[job_id] = (f"only {len(others)} other configuration{plural} to compare with; "
                            f"the rule needs {config.top_k} for the top {config.top_k}")
            continue
        threshold = others[config.top_k - 1]
        mean, optimistic, _ = scored[job_id]
        floored = trial.floor is not None and sign * trial.floor >= optimistic
        if optimistic > threshold:
            spread = abs(high_u - low_u) / 2
            why = (f"its {config.metric} can fall at most to {_fmt(sign * optimistic)} (its "
                   f"best so far less its training loss)" if floored else
                   f"its predicted final {config.metric} {_fmt(mean_u)} ± {_fmt(spread)}")
            stops.append(Stop(job_id, (
                f"stopped early: {why} cannot reach the top {config.top_k} (best "
                f"{_fmt(sign * best_now)}; the top {config.top_k} end at "
                f"{_fmt(sign * threshold)} or better)")))
        else:
            at_best = (f"{_fmt(sign * optimistic)} by its training loss" if floored
                       else _fmt(sign * optimistic))
            kept[job_id] = (f"predicted final {config.metric} {_fmt(mean_u)} (at best "
                            f"{at_best}), needs {need} {_fmt(sign * threshold)} "
                            f"to reach the top {config.top_k}")
    return Judgement(stops, kept)


PREDICTIVE_RUNG_FACTOR = 2
"""The predictive rule's rungs double: it may judge at any commit, and these
are the iterations where a grant must end so that it does judge."""


def judged_at(config: RuleConfig, max_iterations: int) -> list[int]:
    """The rule's rungs below ``max_iterations``: the iterations at which it
    is sure to judge a job (none for ``"none"``)."""
    if config.rule == "asha":
        return [r for r in rungs(config, max_iterations) if r < max_iterations]
    if config.rule != "predictive" or config.min_iterations <= 0:
        return []
    out, rung = [], config.min_iterations
    while rung < max_iterations:
        out.append(rung)
        rung *= PREDICTIVE_RUNG_FACTOR
    return out


def rungs(config: RuleConfig, max_iterations: int) -> list[int]:
    """Iterations at which ASHA compares: min_iterations * reduction**i."""
    out, rung = [], config.min_iterations
    while rung <= max_iterations:
        out.append(rung)
        rung *= config.reduction
    return out


def _value_at(trial: Trial, rung: int) -> float | None:
    """The objective as it stood at ``rung`` (its last point at or before it)."""
    found = None
    for iteration, value in trial.points:
        if iteration > rung:
            break
        found = value
    return found


def _asha(trials: Sequence[Trial], config: RuleConfig) -> Judgement:
    sign = _sign(config)
    protected = _protected(trials, sign)
    stops, kept = [], {}
    for trial in trials:
        if not trial.stoppable:
            continue
        ladder = rungs(config, trial.max_iterations)
        reached = [r for r in ladder if trial.iterations_done >= r]
        ahead = [r for r in ladder if trial.iterations_done < r]
        then = f"; next judged at iteration {ahead[0]}" if ahead else ""
        if trial.job_id in protected:
            kept[trial.job_id] = "the best so far; the rule never stops the best"
            continue
        if not trial.points or not reached:
            kept[trial.job_id] = (f"first judged at iteration {ladder[0]}" if ladder
                                  else "never judged: its budget ends before the first rung")
            continue
        rung = reached[-1]
        at_rung = {}
        for other in trials:
            # A job that ended before the rung took part with its final value.
            if other.points and (other.iterations_done >= rung or not other.stoppable):
                value = _value_at(other, rung)
                if value is not None:
                    at_rung[other.job_id] = sign * value
        mine = at_rung.get(trial.job_id)
        if mine is None or len(at_rung) < config.reduction:
            kept[trial.job_id] = (f"waiting for {config.reduction} configurations to reach "
                                  f"iteration {rung} ({len(at_rung)} so far)")
            continue
        keep = max(1, len(at_rung) // config.reduction)
        ranked = sorted(at_rung.values())
        cutoff = ranked[keep - 1]
        place = 1 + sum(1 for v in ranked if v < mine)
        if mine > cutoff:
            stops.append(Stop(trial.job_id, (
                f"stopped early (ASHA): its {config.metric} {_fmt(sign * mine)} at iteration "
                f"{rung} is not in the top 1/{config.reduction} of the {len(at_rung)} "
                f"configurations that reached it (place {place}; the best {keep} are at "
                f"{_fmt(sign * cutoff)} or better)")))
        else:
            kept[trial.job_id] = (f"its {config.metric} {_fmt(sign * mine)} at iteration {rung} "
                                  f"is in the top 1/{config.reduction} of the {len(at_rung)} "
                                  f"that reached it (place {place}){then}")
    return Judgement(stops, kept)


def floors_by_training_loss(config: RuleConfig) -> bool:
    """Whether :func:`training_floor` applies to ``config``'s objective: a
    held-out loss (``val_loss``), compared with the training loss in the
    same units; not the training loss itself, nor an accuracy."""
    return (config.rule == "predictive" and not config.maximise and config.metric != "loss"
            and config.metric.endswith("loss"))


def training_floor(points: Sequence[tuple[int, float]], training: Sequence[tuple[int, float]],
                   *, maximise: bool) -> float | None:
    """The lowest a held-out loss can still fall to, judged by the job's
    training loss: its best so far, less the training loss's level now (the
    mean over the last ``FLOOR_WINDOW`` iterations), less its own noise (the
    median step between its last ``FLOOR_NOISE_VALUES`` values).

    The argument: a held-out loss does not fall by more than the training
    loss still falls (the model learns from the training data; what it
    gains on held-out data it gains there first), and a training loss (a
    cross-entropy or a squared error) cannot fall below zero. Nothing is
    extrapolated: where the held-out objective has two or three evaluations,
    the training loss has hundreds of points, and once it is near zero (a
    configuration that has learnt its training set) the held-out loss can
    only wobble around its best. Worked example: best ``val_loss`` so far
    0.160, training loss about 0.004 over the last 50 iterations, steps of
    0.006 and 0.002 between the last three values: at best 0.160 - 0.004 -
    0.004 = 0.152.

    ``None`` (nothing known) for a maximised metric, a series of fewer than
    two values, no training loss, or a negative one (not a loss)."""
    if maximise or len(points) < 2 or not training:
        return None
    newest = training[-1][0]
    level = [v for i, v in training if i > newest - FLOOR_WINDOW]
    if min(level) < 0:
        return None
    values = [v for _, v in points]
    recent = values[-FLOOR_NOISE_VALUES:]
    steps = sorted(abs(b - a) for a, b in zip(recent, recent[1:], strict=False))
    noise = steps[len(steps) // 2] if len(steps) % 2 else \
        (steps[len(steps) // 2 - 1] + steps[len(steps) // 2]) / 2
    return min(values) - sum(level) / len(level) - noise


def predict_final(predictor: LossPredictor, *, job_id: int, points: Sequence[tuple[int, float]],
                  max_iterations: int, maximise: bool) -> tuple[float, float, float] | None:
    """The objective predicted at ``max_iterations`` as ``(mean, low, high)``
    in the metric's units, from the same curve fits the scheduler ranks by.

    The predictor models decreasing, positive losses: a maximised metric is
    negated and every series is shifted above zero before fitting."""
    if len(points) < 2:
        return None
    sign = -1.0 if maximise else 1.0
    values = [sign * v for _, v in points]
    lowest, highest = min(values), max(values)
    shift = 0.0 if lowest > 0 else (highest - lowest) + abs(lowest) + 1e-6
    last_iteration = points[-1][0]
    losses = tuple(LossPoint(int(i), v + shift, 1e-3)
                   for (i, _), v in zip(points, values, strict=True))
    fit = predictor.fit(JobView(job_id=job_id, tenant_id=0, submitted_at=0.0,
                                iterations_done=last_iteration, max_iterations=max_iterations,
                                losses=losses, initial_loss=losses[0].loss))
    if not fit.known:
        return None
    if fit.rising(RISING_MARGIN):
        # Overfitting or diverging: it may get back to its best, no further.
        mean, low, high = fit.anchor, fit.lowest_loss, fit.anchor + fit.band_width(0)
    else:
        mean, low, high = fit.predict(max(max_iterations - last_iteration, 0))
    out = [sign * (v - shift) for v in (mean, low, high)]
    return out[0], min(out[1], out[2]), max(out[1], out[2])
