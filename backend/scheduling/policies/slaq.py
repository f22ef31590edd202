"""SLAQ: give each slot to the largest predicted normalised loss reduction per slot-second."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import attrgetter

import numpy as np

from backend.scheduling.allocation import fill_slots
from backend.scheduling.guards import Ranked, ServiceFloor, WaitBounds, split_waiting
from backend.scheduling.policies.slaq_memo import KeptScores, Ranking
from backend.scheduling.policies.slaq_scores import (
    Scored,
    best_first,
    planned_iterations,
    total_drops,
)
from backend.scheduling.predictor import (
    PENDING,
    UNKNOWN,
    CurveFit,
    LossPredictor,
    drop_model,
    rising_level,
)
from backend.scheduling.residency import switch_discounts
from backend.scheduling.types import Grant, JobView, Snapshot

_RATE = attrgetter("rate")
_WEIGHT = attrgetter("weight")
_MOVING = attrgetter("moving")
_ID = attrgetter("job_id")
_ATTAINED = attrgetter("attained_seconds")
_AMOUNTS = attrgetter("drift", "initial_loss", "lowest_loss", "floor", "anchor", "noise")
_DONE = attrgetter("iterations_done")
_MOST = attrgetter("max_iterations")
_NEWEST = attrgetter("history.newest_iteration")
_K_LAST = attrgetter("k_last")
_SPI = attrgetter("seconds_per_iteration")


WARMUP_SHARE = 1.0
"""Share of all slots new jobs of their own (no experiment) may hold for
their first chunk ahead of every ranked job: a job's first chunk is its
steepest drop, and a short job is a few chunks long (at 1 s chunks, 19%
lower average loss than half the slots on the standard trace's worst
cell). The live scheduler admits new jobs to the policy's view at this
share."""

SWEEP_WARMUP_SHARE = 0.5
"""The same share for an experiment's new configurations (new jobs of its
own count against it too). A sweep's configurations are compared, not each
wanted for itself: at all the slots its 30 configurations would all start
before its leaders get a second chunk, and the torch sweep finds its best
1.4-1.7x later (docs/scheduling.md (a))."""

COMPLETION_WEIGHT = 0.0
"""What finishing a job is worth, in normalised loss: a job's score gains
``COMPLETION_WEIGHT / seconds it has left`` at most (:func:`remaining_seconds`),
so of two jobs with the same predicted drop per slot-second the one nearer
its end goes first, as shortest-remaining-first would. Off (0) unless an
operator sets ``COMPLETION_WEIGHT``: on the tuning traces every weight tried
cost the standard trace quality targets the default meets (docs/scheduling.md,
"A completion term")."""

HORIZONS: tuple[int, ...] = (1, 2, 4, 8, 16)
"""Chunks ahead the lookahead index looks (Gittins-style: the best rate over these)."""


def lookahead_rates(gain: Callable[[np.ndarray], np.ndarray], n: np.ndarray,
                    remaining: np.ndarray, seconds_per_iteration: np.ndarray,
                    horizons: Sequence[int] = HORIZONS) -> np.ndarray:
    """Per job ``j``, the best ``gain(m) / (m s)`` over ``m = min(h n, remaining)``
    for ``h`` in ``horizons``, and at least 0.

    ``gain`` maps a ``(J, H)`` array of iteration counts to the (normalised)
    drops over the next that many iterations. A curve whose drop is still to
    come (a plateau before a drop, a schedule step) has its best rate at a
    longer horizon, so it is not ranked as converged. Horizons past the
    job's end repeat its whole remaining drop, which changes no maximum.
    """
    m = np.minimum(n[:, None] * np.asarray(horizons)[None, :], remaining[:, None])
    rate = gain(m) / np.maximum(m * seconds_per_iteration[:, None], 1e-9)
    return np.maximum(np.where(np.isnan(rate), 0.0, rate).max(1), 0.0)


def remaining_seconds(snapshot: Snapshot, jobs: Sequence[JobView], attained: np.ndarray
                      ) -> np.ndarray:
    """Each job's compute seconds to its ``max_iterations`` at its average
    speed so far (attained seconds per iteration done), at least a tenth of
    a chunk: an upper bound where a convergence test may end the job sooner."""
    done, most = np.fromiter(chain(map(_DONE, jobs), map(_MOST, jobs)), np.int64,
                             2 * len(jobs)).reshape(2, len(jobs))
    per = np.where(done > 0, attained / np.maximum(done, 1),
                   snapshot.chunk_seconds / max(snapshot.default_chunk_iterations, 1))
    return np.maximum((most - done) * per, 0.1 * snapshot.chunk_seconds)


@dataclass
class SlaqPolicy:
    """Quality-driven scheduling (SLAQ, SoCC'17) with a lookahead index.

    A waiting job with history gets an index, in normalised loss drop per
    slot-second:

    * **lookahead**: the best predicted rate over 1, 2, 4, 8 and 16 chunks
      ahead (:func:`lookahead_rate`), where the drop over ``m`` iterations is
      the fit's ``drop(m) + exploration x recent prediction error``; a one-chunk
      rate alone would rank a plateau or a learning-rate step as convergence;
    * **normalised by the predicted total drop**: initial loss to the lower of
      the lowest loss so far and the fit's asymptote (at most
      ``total_drop_cap`` times the drop shown), so a young job's first steep
      chunk does not count as its whole curve;
    * **blended towards least attained service** when the model is unsure:
      weight ``w = error / (error + predicted drop + error_floor)`` of the
      next chunk, all normalised (``blend`` scales it), and ``w = 1`` while
      the job has shown less than ``min_progress`` of its initial loss as
      drop (a plateau at the start is no evidence of convergence). The LAS
      part is ``new_job_gain / (attained seconds + chunk seconds)``: a job's
      one unit of normalised gain spread over the service it has had, which
      falls as the job ages, as LAS does;
    * **rising loss** (newest level above the lowest loss by more than three
      noise widths and ``diverge_margin`` of the drop shown): index 0, so a
      diverging job runs only when a guard says so.

    Order of service: jobs past a wait bound (``bounds``); jobs below the
    service floor (``floor``, :class:`~backend.scheduling.guards.ServiceFloor`,
    the completion-time guard); new jobs within the warm-up share
    (``warmup_share`` of the slots, ``sweep_warmup_share`` for an
    experiment's configurations); everything else by index x tenant share
    weight, new jobs beyond the share at ``new_job_gain`` per chunk second.
    Tenant slot quotas are enforced by ``fill_slots``.

    Worked example (``tests/unit/test_lookahead.py``): 1 free slot of 2
    (``chunk_seconds=1``, 0.01 s an iteration, so 99-iteration chunks), nobody
    behind the service floor. Job 1 fell from 1.0 to 0.5 over 40 iterations
    along ``0.1 + 0.9 r^k``: the exp fit predicts a drop of about 0.35 over
    the next chunk, 0.38 of its predicted total drop of 0.9 (1.0 to the fit's
    asymptote 0.1), best over one chunk: index 0.39 per second; its
    predictions are accurate, so no LAS weight. Job 2 fell from 1.0 to 0.2
    and has been exactly flat for 100 iterations: no decreasing fit, index 0.
    One grant: job 1, 99 iterations, reason "rank 1 by lookahead index: next
    99 iterations predicted to bring 0.385 of its predicted total drop ...",
    ``predicted_gain`` 0.385.
    """

    name: str = "slaq"
    bounds: WaitBounds | None = field(default_factory=WaitBounds)
    floor: ServiceFloor | None = field(default_factory=ServiceFloor)
    exploration: float = 1.0
    warmup_share: float = WARMUP_SHARE
    sweep_warmup_share: float = SWEEP_WARMUP_SHARE
    new_job_gain: float = 1.0
    horizons: tuple[int, ...] = HORIZONS
    blend: float = 1.0
    min_progress: float = 0.02
    total_drop_cap: float = 4.0
    diverge_margin: float = 0.1
    error_floor: float = 0.03
    completion_weight: float = COMPLETION_WEIGHT
    predictor: LossPredictor = field(default_factory=LossPredictor)
    _kept: KeptScores = field(default_factory=KeptScores)
    _memo_chunk: float | None = None

    @property
    def _memo(self) -> dict[int, Scored]:
        """Each job's kept score, by job id."""
        return self._kept.entries

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        if snapshot.free_slots <= 0:
            return []
        overdue, behind, rest = split_waiting(snapshot, self.bounds, self.floor)
        if not overdue and not behind and not rest:
            return []
        self._forget_finished(snapshot)
        known, scores, new = self._scored(snapshot, rest)
        warm = self._warmup(snapshot, new)
        warm_ids = {job.job_id for job, _, _ in warm}
        unseen = [job for job in new if job.job_id not in warm_ids]
        ranked = known.plus(unseen)
        scores = np.concatenate((
            scores, np.full(len(unseen), self.new_job_gain / snapshot.chunk_seconds)))
        if any(t.share_weight != 1.0 for t in snapshot.tenants.values()):
            weights = {t: snapshot.tenant(t).share_weight for t in {j.tenant_id for j in ranked}}
            scores *= np.fromiter((weights[job.tenant_id] for job in ranked), float, len(ranked))
        ordered = best_first(ranked, scores, snapshot.free_slots)
        return fill_slots(snapshot, chain(overdue, behind, warm,
                                          self._explained(snapshot, ordered)))

    def _scored(self, snapshot: Snapshot, jobs: list[JobView]
                ) -> tuple[Ranking, np.ndarray, list[JobView]]:
        """Jobs with a usable fit and their scores (lookahead index blended
        with LAS, per slot-second, the seconds a move would waste included),
        and the new jobs (no curve to extrapolate yet). Only jobs whose view
        changed are looked at again."""
        chunk = snapshot.chunk_seconds
        if chunk != self._memo_chunk:
            # Every score is per chunk length: a new length rescores every job.
            self._kept.clear()
            self._memo_chunk = chunk
        kept = self._kept
        memo = kept.entries
        # Most of 10,000 jobs are the very view their score was made from:
        # one lookup by identity each, in C, to the row of its kept score.
        rows = kept.rows(jobs)
        hit = rows >= 0
        new: list[JobView] = []
        changed: list[JobView] = []
        rescore: list[tuple[JobView, CurveFit]] = []
        for job in compress(jobs, (~hit).tolist()):
            history = job.history
            entry = memo.get(job.job_id)
            if not history.size:
                new.append(job)
            elif entry is not None and entry.remaining == job.max_iterations - job.iterations_done \
                    and entry.fit.key == (history.newest_iteration, history.size):
                rescore.append((job, entry.fit))  # the same fit, a new view
            else:
                changed.append(job)
        fits = self.predictor.fit_many(changed)
        refreshed = self.predictor.refreshed
        if refreshed:
            # Refitted now though unchanged since their score was made.
            rescore = [(job, refreshed.get(job.job_id, fit)) for job, fit in rescore]
            # A kept score is updated where it is, so the decision's lists see
            # it, whether or not its view is in this decision (a guard may
            # serve the job now, and the view come back unchanged later).
            held = [(e.view, e) for e in map(memo.get, refreshed)
                    if e is not None and e.view is not None]
            again = self._entries(snapshot, [(view, refreshed[view.job_id]) for view, _ in held])
            for (view, entry), fresh in zip(held, again, strict=True):
                entry.take(fresh)
                kept.changed(view.job_id, entry)
        waiting: list[tuple[JobView, Scored]] = []  # not fitted yet: scored anew each call
        for job, fit in zip(changed, fits, strict=True):
            # ``fit.known`` and ``fit.pending`` inline: hundreds of jobs a decision.
            family = fit.family
            if family == UNKNOWN:
                new.append(job)
                continue
            if family != PENDING:
                rescore.append((job, fit))
                continue
            entry = memo.get(job.job_id)
            remaining = job.max_iterations - job.iterations_done
            if entry is None or entry.fit is not fit or entry.remaining != remaining \
                    or entry.newest != job.history.newest_iteration:
                # Nothing known of its curve yet: least attained service, fully
                # (no view, so it is handed to the predictor again).
                entry = Scored(None, fit, remaining, job.history.newest_iteration,
                                planned_iterations(snapshot, job, fit), 0.0, 1.0, 0.0)
                kept.remember(job.job_id, entry)
            waiting.append((job, entry))
        made = self._entries(snapshot, rescore)
        kept.remember_all([job.job_id for job, _ in rescore], made)
        more = [job for job, _ in rescore]
        scored = made
        if waiting:
            pending = [job for job, _ in waiting]
            entries = [entry for _, entry in waiting]
            plain, moving = self._whole(snapshot, pending,
                                        np.fromiter(map(_RATE, entries), float),
                                        np.fromiter(map(_WEIGHT, entries), float))
            for entry, p, m in zip(entries, plain.tolist(), moving.tolist(), strict=True):
                entry.plain, entry.moving = p, m
            more += pending
            scored = made + entries
        # Read after the refreshed entries' rows were updated.
        known = Ranking(jobs, np.flatnonzero(hit), more)
        scores = np.concatenate((kept.moving(rows[hit]),
                                 np.fromiter(map(_MOVING, scored), float, len(scored))))
        if snapshot.resident:
            # Loaded on a free slot: no move, so no discount for one.
            at = np.flatnonzero(np.fromiter(map(snapshot.resident.__contains__, map(_ID, known)),
                                            bool, len(known)))
            if len(at):
                picked = [known[i] for i in at.tolist()]
                plain = np.fromiter((memo[job.job_id].plain for job in picked), float, len(at))
                scores[at] = plain * switch_discounts(snapshot, picked)
        return known, scores, new

    def _whole(self, snapshot: Snapshot, jobs: Sequence[JobView], rate: np.ndarray,
               blend: np.ndarray, rising: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """The jobs' whole scores: the index ``rate`` blended with LAS plus
        the completion term, none for a ``rising`` job (``plain``), and that
        with the seconds a move would waste included (``moving``)."""
        attained = np.fromiter(map(_ATTAINED, jobs), float, len(jobs))
        las = self.new_job_gain / (attained + snapshot.chunk_seconds)
        plain = (1 - blend) * rate + blend * las
        if self.completion_weight:
            finish = self.completion_weight / remaining_seconds(snapshot, jobs, attained)
            if rising is not None:
                finish[rising] = 0.0
            plain = plain + finish
        return plain, plain * switch_discounts(snapshot, jobs, frozenset())

    def _score(self, snapshot: Snapshot, job: JobView, fit: CurveFit) -> float:
        """One job's index blended with LAS, per slot-second, and its completion
        term (before its tenant's weight and any switch discount)."""
        return self._entries(snapshot, [(job, fit)])[0].plain

    def _entries(self, snapshot: Snapshot, items: Sequence[tuple[JobView, CurveFit]]
                 ) -> list[Scored]:
        """Each job's lookahead index, weight of LAS and normalised drop of its
        next chunk, as one array pass over all of ``items``.

        A fit the refit budget kept from before the job's latest points is
        read from where the job is now (``after`` iterations past the fit), so
        a job that just ran is not ranked on the drop it has already made."""
        if not items:
            return []
        chunk = snapshot.chunk_seconds
        jobs = [job for job, _ in items]
        fits = [fit for _, fit in items]
        # Hundreds of jobs: their counts and amounts gathered in C, and
        # planned_iterations as array operations.
        count = len(items)
        done, most, newest, k_last = np.fromiter(
            chain(map(_DONE, jobs), map(_MOST, jobs), map(_NEWEST, jobs), map(_K_LAST, fits)),
            np.int64, 4 * count).reshape(4, count)
        own = np.array(list(map(_SPI, fits)), dtype=float)  # None: NaN
        timed = ~np.isnan(own)
        left = most - done
        wanted = np.full(count, snapshot.default_chunk_iterations)
        wanted[timed] = (chunk / own[timed]).astype(np.int64)  # int(): towards zero
        n = np.maximum(1, np.minimum(wanted, left))
        after, remaining = np.maximum(newest - k_last, 0), np.maximum(left, 1)
        spi = np.where(timed & (own != 0), own, chunk / n)
        drift, initial, lowest, floor, anchor, noise = np.fromiter(
            chain.from_iterable(map(_AMOUNTS, fits)), float, 6 * count).reshape(count, 6).T
        shown = initial - lowest
        scale = total_drops(initial, shown, floor, self.total_drop_cap)
        drop = drop_model(fits, after)
        point = drop(n[:, None])[:, 0] / scale
        index = lookahead_rates(
            lambda m: (drop(m) + self.exploration * (drift[:, None] * m))
            / scale[:, None], n, remaining, spi, self.horizons)
        # ``error_floor`` keeps 0/0 on a converged, perfectly predicted curve
        # from reading as "unsure": only errors material to the total drop count.
        error = drift * n / scale
        weight = np.minimum(1.0, self.blend * error / (error + point + self.error_floor))
        rising = rising_level(anchor, lowest, noise, shown, self.diverge_margin)
        weight[shown < self.min_progress * np.abs(initial)] = 1.0
        index[rising] = 0.0
        weight[rising] = 0.0
        plain, moving = self._whole(snapshot, jobs, index, weight, rising)
        return list(map(Scored, jobs, fits, left.tolist(), newest.tolist(), n.tolist(),
                        index.tolist(), weight.tolist(), point.tolist(), plain.tolist(),
                        moving.tolist()))

    def _warmup(self, snapshot: Snapshot, new: list[JobView]) -> list[Ranked]:
        """New jobs served first, oldest first, while the new jobs running
        (with those taken here) hold less than ``warmup_share`` of all slots,
        or ``sweep_warmup_share`` for an experiment's configuration."""
        if not new:
            return []
        running = sum(1 for job in snapshot.jobs if job.running and not job.losses)
        own_cap = math.ceil(self.warmup_share * snapshot.total_slots)
        sweep_cap = math.ceil(self.sweep_warmup_share * snapshot.total_slots)
        out: list[Ranked] = []
        for job in sorted(new, key=lambda job: (job.waiting_since, job.job_id)):
            if running >= max(own_cap, sweep_cap):
                break
            if running >= (own_cap if job.experiment_id is None else sweep_cap):
                continue
            running += 1
            out.append((job, "warm-up share: new job, its first chunk measures its curve", None))
        return out

    def _explained(self, snapshot: Snapshot, ordered: Iterator[tuple[JobView, float]]
                   ) -> Iterator[Ranked]:
        # Reasons are formatted lazily: only the jobs fill_slots looks at pay for it.
        memo = self._kept.entries
        for rank, (job, score) in enumerate(ordered, start=1):
            entry = memo.get(job.job_id) if job.history.size else None
            if entry is None:
                yield job, f"rank {rank}: new job, assumed gain {self.new_job_gain:g}", None
            elif entry.fit.family == PENDING:
                yield job, (f"rank {rank}: curve not fitted yet (the scheduler is catching up), "
                            f"least attained service meanwhile ({score:.3g} per slot-second)"), None
            else:
                yield job, (
                    f"rank {rank} by lookahead index: next {entry.n} iterations predicted to "
                    f"bring {entry.point:.3g} of its predicted total drop ({score:.3g} per "
                    f"slot-second, {entry.weight:.0%} least-attained-service, "
                    f"{entry.fit.family} fit{self._finishing(snapshot, job)})"
                ), entry.point

    def _finishing(self, snapshot: Snapshot, job: JobView) -> str:
        """The completion term's part of a reason, when it is on."""
        if not self.completion_weight:
            return ""
        left = float(remaining_seconds(snapshot, [job], np.array([job.attained_seconds]))[0])
        return f", {self.completion_weight / left:.3g} of it for finishing in {left:.3g}s"

    def _forget_finished(self, snapshot: Snapshot) -> None:
        if max(len(self._memo), len(self.predictor)) > 2 * len(snapshot.jobs) + 64:
            present = [job.job_id for job in snapshot.jobs]
            self.predictor.forget_except(present)
            self._kept.keep_only(present)
