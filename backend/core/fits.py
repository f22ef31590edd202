"""The scheduler's loss-curve fits, published for the job page's chart.

The chart should show what the scheduler believes, not a second opinion: a
separate fit on the API side could disagree with the one that decided the
job's grants. So the scheduler publishes each fit it makes, and the API only
reads it. Payloads have the shape of the prediction route's response
(``backend.schemas.Prediction``) plus ``family`` and ``fitted_at``.

Best effort, like every other Redis write here: a lost or missing fit only
leaves the chart without a prediction until the job's next refit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from backend.core.redis_keys import RedisKeys

log = logging.getLogger(__name__)

FIT_TTL_SECONDS = 24 * 3600
"""How long a published fit outlives its last refit. A runnable job is refitted
whenever it reports new points, so only jobs that stopped reporting (finished,
cancelled, or paused for a day) lose their fit."""


def fit_payload(*, job_id: int, from_iteration: int, family: str,
                rows: Iterable[tuple[int, float, float, float]],
                fitted_at: float) -> dict[str, Any]:
    """One job's published fit.

    ``from_iteration`` is the newest iteration the fit saw (the iteration it
    was fitted at); ``rows`` are ``(iteration, predicted, low, high)`` ahead of
    it, empty while the job has too little history to extrapolate;
    ``fitted_at`` is Unix time.
    """
    return {
        "job_id": job_id,
        "from_iteration": from_iteration,
        "points": [{"iteration": int(i), "loss": float(loss), "low": float(low),
                    "high": float(high)} for i, loss, low, high in rows],
        "family": family,
        "fitted_at": fitted_at,
    }


def publish_fits(client: redis.Redis, keys: RedisKeys, payloads: Iterable[Mapping[str, Any]],
                 *, ttl_seconds: int = FIT_TTL_SECONDS) -> int:
    """Store each payload (from :func:`fit_payload`) under its job's key, in one
    round trip; returns how many were written (0 if Redis failed)."""
    pipe = client.pipeline(transaction=False)
    count = 0
    for payload in payloads:
        pipe.set(keys.fit(int(payload["job_id"])), json.dumps(payload), ex=ttl_seconds)
        count += 1
    if not count:
        return 0
    try:
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("could not publish %d loss-curve fits: %s", count, exc)
        return 0
    return count


def read_fit(client: redis.Redis, keys: RedisKeys, job_id: int) -> dict[str, Any] | None:
    """The latest published fit of ``job_id``, or ``None`` if there is none
    (never fitted, lapsed, or Redis unavailable)."""
    try:
        raw: Any = client.get(keys.fit(job_id))
    except redis.RedisError as exc:
        log.warning("could not read the fit of job %s: %s", job_id, exc)
        return None
    if raw is None:
        return None
    try:
        payload = json.loads(raw)
    except ValueError:
        log.warning("unreadable fit for job %s; ignoring it", job_id)
        return None
    return payload if isinstance(payload, dict) else None


def fit_for_chart(payload: Mapping[str, Any], *, done: int,
                  floor: float | None) -> dict[str, Any]:
    """A published fit as the job page draws it: only what lies ahead.

    The scheduler refits once per round, so by the time a page asks, the job
    may have run past the iteration it was fitted at; points at or before
    ``done`` (the job's last done iteration) are the past and are dropped, so
    the band starts where the job is. ``floor`` (0 for a metric that cannot go
    below it, None when the job has reported values below 0) clamps the
    prediction and its band: a least-squares band around a loss near 0 dips
    below it ("band -0.014 – 0.015" for a loss that cannot be negative).
    """
    points = []
    for point in payload.get("points") or []:
        if int(point["iteration"]) <= done:
            continue
        if floor is not None:
            point = {**point, **{k: max(float(point[k]), floor) for k in ("loss", "low", "high")}}
        points.append(point)
    return {**payload, "points": points}
