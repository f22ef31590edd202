"""What-if replays in the background: a platform admin's request starts one
and returns at once; the admin page polls its progress and shows the report.

At the bounds, reading the window's jobs takes about ten seconds and
replaying them under slaq half a minute (thousands of decisions, each
refitting a curve): too long for a request to hold a connection. Both run
in a process of its own, spawned by the API process that took the request,
so its CPU time does not hold that process's GIL while it serves others.
Its state lives in Redis (any API process answers the polls) for a day:

- ``running``: with progress, the policy being replayed and how many of its
  jobs have finished;
- ``done``: with the report (:func:`backend.services.what_if.report`);
- ``failed``: with what went wrong;
- ``lost``: the process died before it answered (the portal restarted); run
  it again.

One replay runs at a time across the portal, held by a short lease the
replaying process keeps renewing; a second request gets :class:`ReplayBusy`.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis

from backend.core.db import engine_for, session_scope
from backend.core.models import utcnow
from backend.core.redis_conn import get_redis
from backend.core.redis_keys import RedisKeys
from backend.core.settings import get_settings
from backend.scheduling.registry import policy_runs
from backend.scheduling.types import TenantView
from backend.services.errors import Conflict
from backend.services.portal_trace import (
    PortalWorkload,
    WorkloadTooLarge,
    record_portal_workload,
)
from backend.services.what_if import NothingToReplay, replay, report

log = logging.getLogger(__name__)

KEEP_SECONDS = 24 * 3600
"""How long a replay's state and report stay readable."""
LEASE_SECONDS = 30
"""A replay whose process stopped renewing its lease this long ago is lost."""
MAX_SECONDS = 600.0
"""A replay still running after this long is stopped, so that a runaway one
cannot hold the one-at-a-time lease for ever (the bounds take under a minute)."""
_RENEW_SECONDS = 5.0
_PROGRESS_SECONDS = 0.5
"""Progress is written at most this often: a replay ends thousands of chunks."""

# A compare-and-set on the lease: renew (ttl > 0) or release (ttl 0) it only
# while it still names this replay, so a late process never frees another's.
_LEASE_SCRIPT = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > 0 then return redis.call('expire', KEYS[1], ARGV[2]) end
return redis.call('del', KEYS[1])
"""


class ReplayBusy(Conflict, RuntimeError):
    """Another replay holds the lease."""

    def __init__(self, running: Mapping[str, Any] | None) -> None:
        who = f" by {running['started_by']}" if running and running.get("started_by") else ""
        super().__init__(f"Another what-if replay is running (started{who}); one runs at a "
                         "time. Wait for it: the admin page shows its progress and result.")


@dataclass(frozen=True)
class Window:
    """The jobs submitted in ``[since, until)``, read from the portal's
    database by the replaying process (at the bounds that takes seconds)."""

    since: datetime
    until: datetime
    jobs: int
    """How many of them completed (:func:`~backend.services.portal_trace.check_window`)."""


@dataclass(frozen=True)
class ReplayJob:
    """What the replaying process needs: the workload, or the window to read
    it from, and how to replay it."""

    workload: PortalWorkload | Window
    policies: Sequence[str]
    slots: int
    chunk_seconds: float
    tenants: Mapping[int, TenantView] = field(default_factory=dict)
    completion_guards: Sequence[float] = ()
    """Completion guards to replay the guarded policies at (none: ``in_force``)."""
    in_force: float | None = None
    """The completion guard in force: a run at it is labelled with the policy's name."""
    completion_weight: float = 0.0
    """slaq's completion weight in force: slaq replays with it, as the live scheduler runs."""
    completion_weights: Sequence[float] = ()
    """Completion weights to replay slaq at (none: ``completion_weight``)."""
    hours: float | None = None
    """The window as asked ("the last N hours"): the page shows a replay with it."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Added to the report as is (the slots, chunk length and policy in force)."""
    max_seconds: float = MAX_SECONDS

    @property
    def labels(self) -> list[str]:
        """The simulated runs' labels, in the order they replay (progress names them)."""
        return [run.label for run in policy_runs(self.policies, self.completion_guards,
                                                 self.in_force, self.completion_weights,
                                                 self.completion_weight)]


def start(client: redis.Redis, keys: RedisKeys, job: ReplayJob, *, started_by: str) -> str:
    """Start ``job`` in a new process; its id, for :func:`read`."""
    run_id = uuid.uuid4().hex
    if not client.set(keys.what_if_running, run_id, nx=True, ex=LEASE_SECONDS):
        holder: Any = client.get(keys.what_if_running)
        raise ReplayBusy(read(client, keys, holder or ""))
    key = keys.what_if_run(run_id)
    with client.pipeline() as pipe:
        pipe.hset(key, mapping={
            "state": "running", "started_at": utcnow().isoformat(), "started_by": started_by,
            "policies": json.dumps(job.labels), "jobs": _job_count(job.workload),
            **({"hours": repr(float(job.hours))} if job.hours is not None else {})})
        pipe.expire(key, KEEP_SECONDS)
        pipe.set(keys.what_if_latest, run_id, ex=KEEP_SECONDS)
        pipe.execute()
    # Starting the process (an interpreter, imports, the workload piped to
    # it) takes a second or more: a thread does it, so the request need not wait.
    threading.Thread(target=_launch, args=(client, keys, run_id, job),
                     name="slaq-what-if-launch", daemon=True).start()
    return run_id


def _launch(client: redis.Redis, keys: RedisKeys, run_id: str, job: ReplayJob) -> None:
    """Spawn the replaying process and reap it when it exits."""
    try:
        # spawn, not fork: the API process runs threads (and an event loop)
        # that a forked copy would inherit mid-step.
        process = multiprocessing.get_context("spawn").Process(
            target=_replay_process, args=(keys, run_id, job), daemon=True,
            name=f"slaq-what-if-{run_id[:8]}")
        process.start()
    except Exception:
        log.exception("could not start what-if replay %s", run_id)
        _finish(client, keys, run_id, state="failed",
                error="The replay could not be started on the server; see its log.")
        return
    process.join()


def read(client: redis.Redis, keys: RedisKeys, run_id: str) -> dict[str, Any] | None:
    """The replay's state as the API answers it; None if unknown or expired."""
    # The lease first: a replay that ends between the two reads has already
    # written its state, so it is never mistaken for a lost one.
    holder = client.get(keys.what_if_running)
    fields: Any = client.hgetall(keys.what_if_run(run_id)) if run_id else {}
    if not fields:
        return None
    state = fields["state"]
    if state == "running" and holder != run_id:
        state = "lost"
    answer: dict[str, Any] = {
        "id": run_id, "state": state, "started_at": fields["started_at"],
        "started_by": fields.get("started_by"), "finished_at": fields.get("finished_at"),
        "policies": json.loads(fields["policies"]), "jobs": int(fields["jobs"]),
        "hours": float(fields["hours"]) if fields.get("hours") else None,
        "progress": {"policy": fields.get("policy"),
                     "jobs_finished": int(fields.get("jobs_finished", 0))},
        "error": fields.get("error"), "result": None,
    }
    if state == "lost":
        answer["error"] = ("The replay stopped without an answer: the portal process running "
                           "it restarted or was killed. Run it again.")
    if state == "done":
        answer["result"] = json.loads(fields["result"])
    return answer


def latest(client: redis.Redis, keys: RedisKeys) -> dict[str, Any] | None:
    """The newest replay of the last day, or None."""
    run_id: Any = client.get(keys.what_if_latest)
    return read(client, keys, run_id) if run_id else None


def _replay_process(keys: RedisKeys, run_id: str, job: ReplayJob) -> None:
    """The spawned process: replay, write the answer, release the lease."""
    # Below the API and the scheduler sharing the host: an admin's report
    # may wait, a slot's next grant should not.
    os.nice(10)
    client = get_redis()
    stop = threading.Event()
    threading.Thread(target=_renew, args=(client, keys, run_id, job.max_seconds, stop),
                     name="slaq-what-if-lease", daemon=True).start()
    try:
        workload = job.workload
        if isinstance(workload, Window):
            workload = _record(workload)
            client.hset(keys.what_if_run(run_id), "jobs", _job_count(workload))
        replays = replay(workload, job.policies, slots=job.slots,
                         chunk_seconds=job.chunk_seconds, tenants=job.tenants,
                         completion_guards=job.completion_guards, in_force=job.in_force,
                         completion_weight=job.completion_weight,
                         completion_weights=job.completion_weights,
                         progress=_Progress(client, keys.what_if_run(run_id),
                                            _job_count(workload)))
        answer = {**report(workload, replays), **job.extra}
    except (WorkloadTooLarge, NothingToReplay) as exc:
        _finish(client, keys, run_id, state="failed", error=str(exc))
    except Exception as exc:
        log.exception("what-if replay %s failed", run_id)
        _finish(client, keys, run_id, state="failed",
                error=f"The replay failed: {type(exc).__name__}: {exc}")
    else:
        _finish(client, keys, run_id, state="done", result=json.dumps(answer))
    finally:
        stop.set()


def _job_count(workload: PortalWorkload | Window) -> int:
    return workload.jobs if isinstance(workload, Window) else len(workload.trace.arrivals)


def _record(window: Window) -> PortalWorkload:
    with session_scope(engine_for(get_settings().database_url)) as session:
        return record_portal_workload(session, window.since, window.until)


def _finish(client: redis.Redis, keys: RedisKeys, run_id: str, **fields: str) -> None:
    state: dict[Any, Any] = {**fields, "finished_at": utcnow().isoformat()}
    client.hset(keys.what_if_run(run_id), mapping=state)
    client.eval(_LEASE_SCRIPT, 1, keys.what_if_running, run_id, 0)


def _renew(client: redis.Redis, keys: RedisKeys, run_id: str, max_seconds: float,
           stop: threading.Event) -> None:
    deadline = time.monotonic() + max_seconds
    while not stop.wait(min(_RENEW_SECONDS, max_seconds)):
        if time.monotonic() > deadline:
            _finish(client, keys, run_id, state="failed",
                    error=f"The replay ran longer than {max_seconds:g} s and was stopped: "
                          "narrow the window or compare fewer policies.")
            os._exit(1)  # the replay's thread cannot be interrupted; this process is its own
        client.eval(_LEASE_SCRIPT, 1, keys.what_if_running, run_id, LEASE_SECONDS)


class _Progress:
    """Writes ``(policy, jobs finished)`` to the replay's state, at most every
    half second, and whenever a policy starts or ends."""

    def __init__(self, client: redis.Redis, key: str, jobs: int) -> None:
        self.client, self.key, self.jobs = client, key, jobs
        self.policy: str | None = None
        self.written = 0.0

    def __call__(self, policy: str, finished: int) -> None:
        now = time.monotonic()
        if (policy == self.policy and finished < self.jobs
                and now - self.written < _PROGRESS_SECONDS):
            return
        self.policy, self.written = policy, now
        self.client.hset(self.key, mapping={"policy": policy, "jobs_finished": finished})
