"""Every Redis key the portal uses, in one place.

Redis holds fast, rebuildable state only; the database is the truth. If Redis
is wiped, leases vanish (the scheduler returns those jobs to the queue and a
late worker's result is fenced off by the job's chunk_seq in the database),
heartbeats reappear within one period, and live charts resume from the DB.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    prefix: str = "slaq"

    @property
    def chunk_queue(self) -> str:
        """Celery queue (a Redis list) of run_chunk messages; namespaced so two
        portals sharing a Redis never run each other's chunks."""
        return f"{self.prefix}.chunks"

    @property
    def wake(self) -> str:
        """List: any push wakes the scheduler (arrivals, completions, admin changes)."""
        return f"{self.prefix}:wake"

    @property
    def slots_wanted(self) -> str:
        """String with TTL, set by the scheduler while a job waits for a slot that
        none is free for: chunks lengthened while slots were idle end at their
        yield points (``backend.scheduling.residency.unhurried``)."""
        return f"{self.prefix}:slots:wanted"

    def lease(self, job_id: int) -> str:
        """String with TTL: the chunk_seq currently allowed to run ``job_id``."""
        return f"{self.prefix}:lease:{job_id}"

    def lost_chunks(self, job_id: int) -> str:
        """String with TTL, "<chunks_run>:<count>": how many of the job's chunks in a
        row were lost with their worker still up, since it last stored one."""
        return f"{self.prefix}:lost:{job_id}"

    @property
    def leases(self) -> str:
        """Sorted set job_id -> lease expiry (ms): counts chunks in flight."""
        return f"{self.prefix}:leases"

    @property
    def lease_slots(self) -> str:
        """Hash job_id -> "<chunk_seq>:<slot id>": the worker slot that started
        the leased chunk; the scheduler revokes the lease once that slot's
        heartbeat is gone (:meth:`backend.core.leases.Leases.revoke_orphaned`)."""
        return f"{self.prefix}:lease-slots"

    @property
    def workers(self) -> str:
        """Sorted set slot id (host:pid) -> heartbeat expiry (ms): live capacity."""
        return f"{self.prefix}:workers"

    @property
    def worker_info(self) -> str:
        """Hash: worker slot id -> its advert (pool, cores, memory, GPU) as JSON,
        written with every heartbeat; entries of slots gone are dropped when
        the live slots are listed."""
        return f"{self.prefix}:worker-info"

    @property
    def resident(self) -> str:
        """Hash job_id -> the worker slot id whose process holds the job's trainer
        loaded (resident) since its last committed chunk; placement sends the
        job's next chunk there (:mod:`backend.core.residency`)."""
        return f"{self.prefix}:resident"

    def job_stream(self, job_id: int) -> str:
        """Stream of loss points (fields: iteration, loss, seconds) for live charts."""
        return f"{self.prefix}:stream:job:{job_id}"

    @property
    def events(self) -> str:
        """Pub/sub channel: JSON "job changed" notices for pages and the scheduler."""
        return f"{self.prefix}:events"

    @property
    def scheduler_lock(self) -> str:
        """String with TTL: the owner token (host:pid) of the one running
        scheduler process; only that owner renews or deletes it
        (:class:`backend.core.leases.SchedulerLock`)."""
        return f"{self.prefix}:scheduler:lock"

    @property
    def waiting(self) -> str:
        """Hash job_id -> JSON {position, reason, predicted_gain} from the last round."""
        return f"{self.prefix}:waiting"

    def experiment_verdicts(self, experiment_id: int) -> str:
        """Hash with TTL: job_id -> why the experiment's early-stopping rule
        keeps that job running, as of its last judgement (rewritten whole each
        time; :mod:`backend.scheduler.experiment_stopping`)."""
        return f"{self.prefix}:experiment:{experiment_id}:verdicts"

    def fit(self, job_id: int) -> str:
        """String with TTL: JSON of the scheduler's latest loss-curve fit for
        ``job_id`` ({job_id, from_iteration, points, family, fitted_at}); see
        :mod:`backend.core.fits`. The TTL lets fits of finished jobs lapse."""
        return f"{self.prefix}:fit:job:{job_id}"

    def signin_failures(self, kind: str, digest: str) -> str:
        """Counter with TTL: failed sign-ins per account or client address."""
        return f"{self.prefix}:signin-failures:{kind}:{digest}"

    def signin_backoff(self, kind: str, digest: str) -> str:
        """String with TTL: while it exists, sign-ins for that (account, address)
        pair or that address wait (:mod:`backend.rate_limit`). Under the
        counters' ``signin-failures`` namespace, so wiping that resets both."""
        return f"{self.prefix}:signin-failures:{kind}:{digest}:wait"

    @property
    def auth_epoch(self) -> str:
        """String: a random value replaced whenever an account, API token or
        tenant changes; API processes drop the callers they remember once it
        differs (:mod:`backend.core.auth_epoch`). Random, not a counter, so a
        wiped and re-made key never repeats an old value."""
        return f"{self.prefix}:auth-epoch"

    @property
    def scheduler_status(self) -> str:
        """Hash: the last round's time, policy, slots and queue length (cluster page),
        and ``owner``, the lock token of the scheduler that ran it."""
        return f"{self.prefix}:scheduler:status"

    @property
    def scheduler_rounds(self) -> str:
        """List, newest first and capped: JSON [round ms, ms until its grants were
        dispatched, grants] of the scheduler's recent rounds (benchmarks, health)."""
        return f"{self.prefix}:scheduler:rounds"

    @property
    def cluster_history(self) -> str:
        """Sorted set, scored by Unix time: JSON samples of slots, queue and decisions per
        scheduling round, trimmed by age and count (:mod:`backend.core.cluster_history`)."""
        return f"{self.prefix}:cluster:history"

    @property
    def metrics(self) -> str:
        """Hash: the cluster's Prometheus counters and histograms, added to by the
        scheduler and every worker process (HINCRBY/HINCRBYFLOAT in one MULTI per
        chunk or round) and read whole by any API process's /metrics and the
        workers' endpoints (:mod:`backend.core.metrics_store`). Fields are
        ``<metric>|<labels as JSON>|<total, sum, count or b:<bucket bound>>``.
        Wiping it resets the counters, which Prometheus's rate() tolerates."""
        return f"{self.prefix}:metrics"

    def what_if_run(self, run_id: str) -> str:
        """Hash with a day's TTL: one what-if replay's state, progress and, once
        done, its report as JSON (:mod:`backend.services.what_if_runs`)."""
        return f"{self.prefix}:what-if:run:{run_id}"

    @property
    def what_if_running(self) -> str:
        """String with a short TTL the replaying process keeps renewing: the id
        of the what-if replay running now. One at a time, so an admin's
        replay cannot take every core from the scheduler; gone while its id
        says running means the process died."""
        return f"{self.prefix}:what-if:running"

    @property
    def what_if_latest(self) -> str:
        """String: the id of the newest what-if replay, which the admin page shows."""
        return f"{self.prefix}:what-if:latest"
