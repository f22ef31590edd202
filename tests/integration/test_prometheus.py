"""Prometheus metrics on a real portal: the API's /metrics, the scheduler's
and a worker's own endpoints, checked against what happened.

A CPU pool of two slots (with its worker endpoint on) and a GPU pool of one
(its worker advertises a GPU this machine may lack) run a few short jobs, one
of them failing; the figures are compared with the database (chunks stored,
training seconds), the decisions the scheduler recorded (chunks granted per
pool) and the requests the test made. Figures land a moment after the event
(a chunk's figures after its commit), so every comparison first awaits the
figures to settle, then asserts.
"""

from __future__ import annotations

import math
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.db import engine_for
from backend.core.models import Job, Role
from backend.core.redis_conn import free_port
from tests.utils.portal import Portal, make_user_token, start_portal, token_client
from tests.utils.waiting import wait_until

# One database: the subject is figures exported from Redis counters.
pytestmark = pytest.mark.one_database

METRICS_TOKEN = f"prom-{secrets.token_hex(16)}"
FAKE_GPU = "Test GPU:16384"
LONG = 50_000

Figures = dict[str, list[tuple[dict[str, str], float]]]
"""Sample name -> (labels, value) of each of its series."""


@dataclass
class Metered:
    portal: Portal
    scheduler_port: int
    worker_port: int


def _ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


@pytest.fixture(scope="module")
def metered(module_db_url: str, redis_url: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Metered]:
    data: Path = tmp_path_factory.mktemp("prometheus")
    scheduler_port, worker_port = _ports(2)
    portal = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url, workers=2,
                          extra_env={"METRICS_TOKEN": METRICS_TOKEN,
                                     "SCHEDULER_METRICS_PORT": str(scheduler_port),
                                     "WORKER_METRICS_PORT": str(worker_port)})
    try:
        portal.start_workers(1, name="gpu-workers", pool="gpu", gpu=FAKE_GPU,
                             extra_env={"WORKER_METRICS_PORT": "0"})
        portal.wait_for_slots(3)
        yield Metered(portal, scheduler_port, worker_port)
    finally:
        portal.close()


def _signed_in(metered: Metered, tenant: str, email: str, **kwargs: Any) -> Iterator[httpx.Client]:
    token = make_user_token(metered.portal.db_url, tenant=tenant, email=email, **kwargs)
    with token_client(metered.portal, token) as client:
        yield client


@pytest.fixture(scope="module")
def admin(metered: Metered) -> Iterator[httpx.Client]:
    yield from _signed_in(metered, "platform", "ops@prom.test", role=Role.platform_admin)


@pytest.fixture(scope="module")
def member(metered: Metered) -> Iterator[httpx.Client]:
    yield from _signed_in(metered, "lab", "m@lab.test", max_slots=10)


@pytest.fixture(scope="module")
def parked(metered: Metered) -> Iterator[httpx.Client]:
    """A tenant whose slot quota is 0: its jobs stay queued."""
    yield from _signed_in(metered, "parked", "p@parked.test", max_slots=0)


def parse(text: str) -> Figures:
    out: Figures = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def scrape(client: httpx.Client, url: str = "/metrics") -> Figures:
    answer = client.get(url)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return parse(answer.text)


def value(figures: Figures, name: str, **labels: str) -> float:
    """The sum of ``name``'s series whose labels include ``labels``."""
    return sum(v for found, v in figures.get(name, [])
               if all(found.get(k) == want for k, want in labels.items()))


def delta(after: Figures, before: Figures, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def by_label(figures: Figures, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for found, v in figures.get(name, []):
        out[found.get(label, "")] = out.get(found.get(label, ""), 0.0) + v
    return out


def settle(probe: Callable[[], bool], timeout: float = 60) -> None:
    """Poll until ``probe`` holds or ``timeout`` passes; the asserts after it
    say what differs, so a timeout is not an error here."""
    deadline = time.monotonic() + timeout
    while not probe() and time.monotonic() < deadline:
        time.sleep(0.2)


def _spec(seed: int, iterations: int = 30, **requirements: Any) -> dict[str, Any]:
    return {"algorithm": "logistic_regression", "dataset": "digits", "seed": seed,
            "stopping": {"max_iterations": iterations, "tolerance": None},
            "requirements": requirements}


def _submit(api: httpx.Client, spec: dict[str, Any]) -> dict[str, Any]:
    answer = api.post("/api/v1/jobs", json=spec)
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


def _finished(api: httpx.Client, job_id: int) -> dict[str, Any] | None:
    job: dict[str, Any] = api.get(f"/api/v1/jobs/{job_id}").json()
    return job if job["status"] in ("completed", "failed", "cancelled") else None


def _wait_finished(api: httpx.Client, job_id: int, timeout: float = 180) -> dict[str, Any]:
    return wait_until(lambda: _finished(api, job_id), timeout, f"job {job_id} to finish")


def test_metrics_needs_a_platform_admin_or_the_metrics_token(
        metered: Metered, admin: httpx.Client, member: httpx.Client) -> None:
    url = f"{metered.portal.base_url}/metrics"
    anonymous = httpx.get(url)
    assert anonymous.status_code == 401
    assert "METRICS_TOKEN" in anonymous.json()["detail"]
    assert "platform admin" in anonymous.json()["detail"]
    assert anonymous.headers["www-authenticate"].startswith("Bearer")

    wrong = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}x"})
    assert wrong.status_code == 401
    assert "neither the METRICS_TOKEN nor a valid API token" in wrong.json()["detail"]

    refused = member.get("/metrics")
    assert refused.status_code == 403
    assert "only platform admins" in refused.json()["detail"]
    assert "slaq_" not in refused.text

    prometheus = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert prometheus.status_code == 200
    assert "slaq_slots_alive" in parse(prometheus.text)
    assert "slaq_tenant_queue_jobs" in scrape(admin)

    # Not in the OpenAPI schema (it is not JSON), and the token reaches no log.
    assert "/metrics" not in admin.get("/openapi.json").json()["paths"]
    for name, log in metered.portal.logs.items():
        assert METRICS_TOKEN not in log.read_text(errors="replace"), f"token in {name} log"


def test_figures_match_the_jobs_that_ran(metered: Metered, admin: httpx.Client,
                                         member: httpx.Client) -> None:
    before = scrape(admin)
    specs = [_spec(1, gpu=False), _spec(2, gpu=False), _spec(3, gpu=True),
             {"algorithm": "linear_regression", "dataset": "diabetes",
              "params": {"learning_rate": 10.0, "momentum": 0.99},
              "stopping": {"max_iterations": 3000, "tolerance": None},
              "requirements": {"pool": "cpu"}}]
    ids = [int(_submit(member, spec)["id"]) for spec in specs]
    jobs = [_wait_finished(member, j) for j in ids]
    assert [j["status"] for j in jobs] == ["completed", "completed", "completed", "failed"], \
        [(j["status"], j["end_reason"]) for j in jobs]

    decisions = [d for j in ids for d in member.get(f"/api/v1/jobs/{j}/decisions").json()]
    granted = Counter(str(d["pool"]) for d in decisions)
    assert granted["gpu"] >= 1, "the GPU job's chunks were placed elsewhere"
    with Session(engine_for(metered.portal.db_url)) as session:
        stored = session.execute(select(col(Job.chunks_run), col(Job.attained_seconds))
                                 .where(col(Job.id).in_(ids))).all()
    chunks = sum(n for n, _ in stored)
    training = sum(s for _, s in stored)
    member.get("/api/v1/no-such-route")
    assert member.get("/static/app.css").status_code == 200
    refused = member.post("/api/v1/jobs", content=b'{"algorithm": NaN}',
                          headers={"content-type": "application/json"})
    assert refused.status_code == 422

    after: Figures = {}

    def granted_by_pool() -> dict[str, float]:
        pools = set(by_label(after, "slaq_chunks_granted_total", "pool")) | set(granted)
        found = {p: delta(after, before, "slaq_chunks_granted_total", pool=p) for p in pools}
        return {p: n for p, n in found.items() if n}

    def landed() -> bool:
        nonlocal after
        after = scrape(admin)
        return (delta(after, before, "slaq_chunk_duration_seconds_count") == chunks
                and delta(after, before, "slaq_chunks_failed_total") >= 1
                and delta(after, before, "slaq_api_requests_total", route="unmatched") >= 1
                and delta(after, before, "slaq_api_requests_total", status="422") >= 1
                and granted_by_pool() == granted)

    settle(landed)
    # Every grant is a decision row: per pool, exactly as many were counted.
    assert granted_by_pool() == granted
    assert delta(after, before, "slaq_chunks_granted_total") >= len(ids)
    # Every chunk stored (chunks_run) was timed once; overhead is its wall
    # time less the training seconds the database added up.
    assert delta(after, before, "slaq_chunk_duration_seconds_count") == chunks
    assert delta(after, before, "slaq_chunk_overhead_seconds_count") == chunks
    assert delta(after, before, "slaq_chunk_duration_seconds_count", pool="gpu") >= 1
    wall = delta(after, before, "slaq_chunk_duration_seconds_sum")
    overhead = delta(after, before, "slaq_chunk_overhead_seconds_sum")
    assert wall > training > 0
    assert math.isclose(overhead, wall - training, rel_tol=1e-6, abs_tol=1e-6), \
        (overhead, wall, training)
    assert delta(after, before, "slaq_chunk_duration_seconds_bucket", le="+Inf") == chunks
    assert delta(after, before, "slaq_chunks_failed_total", reason="job_failed") == 1
    assert delta(after, before, "slaq_chunks_failed_total", reason="error") == 0
    assert delta(after, before, "slaq_chunks_failed_total", pool="cpu") == 1
    # Rounds that granted are timed; there are at most as many as grants.
    decided = delta(after, before, "slaq_decision_seconds_count")
    assert 1 <= decided <= len(decisions)
    assert delta(after, before, "slaq_round_seconds_count") >= decided

    alive = by_label(after, "slaq_slots_alive", "pool")
    assert alive["cpu"] == 2 and alive["gpu"] == 1
    busy = by_label(after, "slaq_slots_busy", "pool")
    assert all(0 <= busy[p] <= alive[p] for p in alive)

    # Request latency by route template: the calls this test made.
    for route, method, calls in (("/api/v1/jobs", "POST", len(ids) + 1),
                                 ("/api/v1/jobs/{job_id}/decisions", "GET", len(ids))):
        assert delta(after, before, "slaq_api_request_duration_seconds_count",
                     route=route, method=method) == calls, route
        assert delta(after, before, "slaq_api_request_duration_seconds_bucket",
                     route=route, method=method, le="+Inf") == calls, route
    assert delta(after, before, "slaq_api_requests_total", route="/api/v1/jobs",
                 method="POST", status="201") == len(ids)
    # Refused by the JSON guard before routing, still labelled with its route.
    assert delta(after, before, "slaq_api_requests_total", route="/api/v1/jobs",
                 method="POST", status="422") == 1
    assert delta(after, before, "slaq_api_requests_total", route="unmatched",
                 status="404") == 1
    # Static files are served by a mounted app: labelled with the mount's template.
    assert delta(after, before, "slaq_api_requests_total", route="/static/{path}",
                 status="200") == 1
    assert delta(after, before, "slaq_api_request_duration_seconds_count",
                 route="/api/v1/jobs/{job_id}", method="GET") >= len(ids)
    routes = {labels["route"] for labels, _ in after["slaq_api_requests_total"]}
    assert not any("no-such-route" in r or r.rstrip("/").split("/")[-1].isdigit()
                   for r in routes), routes


def test_queue_figures_per_tenant_and_pool(admin: httpx.Client, parked: httpx.Client) -> None:
    began = time.monotonic()
    named = _submit(parked, _spec(10, LONG, pool="cpu"))
    unnamed = _submit(parked, _spec(11, LONG))
    assert unnamed["requirements"]["pool"] is None
    try:
        figures: Figures = {}

        def waited_a_second() -> bool:
            nonlocal figures
            figures = scrape(admin)
            return value(figures, "slaq_tenant_queue_oldest_wait_seconds", tenant="parked") >= 1

        settle(waited_a_second, 30)
        waited = value(figures, "slaq_tenant_queue_oldest_wait_seconds", tenant="parked")
        assert 1 <= waited <= time.monotonic() - began + 1
        queued = by_label(figures, "slaq_tenant_queue_jobs", "tenant")
        assert queued["parked"] == 2
        assert queued["lab"] == 0 and sum(queued.values()) == 2, queued
        pools = by_label(figures, "slaq_queue_jobs", "pool")
        assert pools == {"cpu": 1, "gpu": 0, "any": 1}
        oldest = by_label(figures, "slaq_queue_oldest_wait_seconds", "pool")
        assert oldest["gpu"] == 0 and 0 < oldest["any"] <= waited and 0 < oldest["cpu"] <= waited
        assert oldest["cpu"] >= oldest["any"] - 0.01  # the cpu job was submitted first
    finally:
        parked.post("/api/v1/jobs/bulk", json={"action": "cancel",
                                               "ids": [named["id"], unnamed["id"]]})

    def emptied() -> bool:
        nonlocal figures
        figures = scrape(admin)
        return value(figures, "slaq_tenant_queue_jobs", tenant="parked") == 0

    settle(emptied, 30)
    assert value(figures, "slaq_tenant_queue_jobs", tenant="parked") == 0
    assert value(figures, "slaq_tenant_queue_oldest_wait_seconds", tenant="parked") == 0
    assert value(figures, "slaq_queue_jobs") == 0


def test_busy_slots_follow_a_running_chunk(admin: httpx.Client, member: httpx.Client) -> None:
    job = _submit(member, _spec(20, LONG, pool="cpu"))
    figures: Figures = {}

    def busy_is(n: int) -> Callable[[], bool]:
        def probe() -> bool:
            nonlocal figures
            figures = scrape(admin)
            return value(figures, "slaq_slots_busy", pool="cpu") == n
        return probe

    try:
        settle(busy_is(1), 60)
        assert value(figures, "slaq_slots_busy", pool="cpu") == 1
        assert value(figures, "slaq_slots_busy", pool="gpu") == 0
        assert value(figures, "slaq_slots_alive", pool="cpu") == 2
    finally:
        member.post(f"/api/v1/jobs/{job['id']}/cancel")
    settle(busy_is(0), 60)
    assert value(figures, "slaq_slots_busy") == 0


def test_the_schedulers_own_endpoint(metered: Metered, admin: httpx.Client,
                                     member: httpx.Client) -> None:
    job = _submit(member, _spec(30, gpu=True))
    _wait_finished(member, int(job["id"]))
    url = f"http://127.0.0.1:{metered.scheduler_port}/metrics"
    api: Figures = {}
    own: Figures = {}

    def agree() -> bool:
        nonlocal api, own
        api, own = scrape(admin), parse(httpx.get(url, timeout=10).text)
        return (by_label(own, "slaq_scheduler_grants_total", "pool")
                == {p: n for p, n in by_label(api, "slaq_chunks_granted_total", "pool").items()
                    if n}
                and value(own, "slaq_scheduler_decision_seconds_count")
                == value(api, "slaq_decision_seconds_count"))

    settle(agree)
    # One scheduler has run since the portal started: its own counts are the cluster's.
    grants = by_label(own, "slaq_scheduler_grants_total", "pool")
    assert grants == {p: n for p, n in by_label(api, "slaq_chunks_granted_total",
                                                "pool").items() if n}
    assert grants.get("gpu", 0) >= 1
    assert value(own, "slaq_scheduler_decision_seconds_count") == \
        value(api, "slaq_decision_seconds_count") > 0
    assert value(own, "slaq_scheduler_reclaims_total") == value(api, "slaq_chunks_reclaimed_total")
    assert value(own, "slaq_scheduler_rejections_total") == \
        value(api, "slaq_grants_rejected_total")
    assert value(own, "slaq_scheduler_active") == 1
    assert value(own, "slaq_scheduler_round_seconds_count") > \
        value(own, "slaq_scheduler_decision_seconds_count")


def test_a_workers_own_endpoint_shows_its_host_and_pool(
        metered: Metered, admin: httpx.Client, member: httpx.Client) -> None:
    cpu, gpu = _submit(member, _spec(40, pool="cpu")), _submit(member, _spec(41, gpu=True))
    for job in (cpu, gpu):
        _wait_finished(member, int(job["id"]))
    url = f"http://127.0.0.1:{metered.worker_port}/metrics"
    api: Figures = {}
    own: Figures = {}

    def agree() -> bool:
        nonlocal api, own
        api, own = scrape(admin), parse(httpx.get(url, timeout=10).text)
        stored = value(own, "slaq_worker_chunks_total", outcome="ran") + \
            value(own, "slaq_worker_chunks_total", outcome="failed")
        return (value(own, "slaq_worker_chunk_duration_seconds_count")
                == value(api, "slaq_chunk_duration_seconds_count", pool="cpu") == stored)

    settle(agree)
    # Chunks run in Celery's child processes; the main process serves their sums.
    ran = value(own, "slaq_worker_chunk_duration_seconds_count")
    assert ran == value(api, "slaq_chunk_duration_seconds_count", pool="cpu") > 0
    assert value(own, "slaq_worker_chunk_overhead_seconds_count") == ran
    assert value(own, "slaq_worker_chunk_duration_seconds_sum") == pytest.approx(
        value(api, "slaq_chunk_duration_seconds_sum", pool="cpu"))
    assert value(own, "slaq_worker_chunks_total", outcome="ran") + \
        value(own, "slaq_worker_chunks_total", outcome="failed") == ran
    assert value(own, "slaq_worker_chunks_failed_total", reason="job_failed") == \
        value(api, "slaq_chunks_failed_total", pool="cpu", reason="job_failed")
    assert value(own, "slaq_worker_slots_alive") == 2
    # The GPU pool's worker (same host, other pool) is not in this endpoint.
    pools = {labels.get("pool") for series in own.values() for labels, _ in series
             if "pool" in labels}
    assert pools == {"cpu"}
    assert value(api, "slaq_chunk_duration_seconds_count", pool="gpu") >= 1
