"""Live loss streams (SSE) on a real portal: they stay open on idle jobs, and
a reconnect with Last-Event-ID resumes without losing or repeating a point."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.core.models import Role
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

# One database: the subject is server-sent events from Redis streams, not the database.
pytestmark = pytest.mark.one_database

KEEPALIVE = 2.0
"""The test portal's keep-alive period: small, so a minute shows many."""
# Longer than the stream client's 30 s socket timeout and health-check
# interval, each of which once cut idle streams.
STREAM_SECONDS = float(os.environ.get("SLAQ_STREAM_TEST_SECONDS", "36"))
FINISHED = {"completed", "failed", "cancelled"}
# A silence of a few keep-alive periods means the stream is stuck.
READ_TIMEOUT = httpx.Timeout(10.0, read=4 * KEEPALIVE)


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("portal")
    running = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                           extra_env={"STREAM_KEEPALIVE_SECONDS": str(KEEPALIVE)})
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(autouse=True)
def api_log_stays_clean(portal: Portal) -> Iterator[None]:
    """A stream that fails (a Redis timeout, a cancelled cleanup) shows up
    only as a traceback in the API's log: the client just sees the end."""
    log = portal.logs["api"]
    start = log.stat().st_size
    yield
    with log.open("rb") as fh:
        fh.seek(start)
        new = fh.read().decode(errors="replace")
    assert "Traceback" not in new, new[-4000:]


@pytest.fixture(scope="module")
def admin(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="platform", email="root@platform.test",
                            role=Role.platform_admin)
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def client_for(portal: Portal, token: str) -> httpx.Client:
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


@dataclass
class Message:
    """One SSE message; ``comment`` set for a comment line (keep-alive)."""

    event: str | None = None
    data: str = ""
    id: str | None = None
    retry: str | None = None
    comment: str | None = None

    def points(self) -> list[tuple[int, float]]:
        assert self.event == "points", self
        return [(int(i), float(loss)) for i, loss in json.loads(self.data)["points"]]


def sse(resp: httpx.Response) -> Iterator[Message]:
    assert resp.status_code == 200, resp.read()
    assert resp.headers["content-type"].startswith("text/event-stream")
    fields: dict[str, str] = {}
    for line in resp.iter_lines():
        if not line:
            if fields:
                yield Message(**fields)
            fields = {}
        elif line.startswith(":"):
            yield Message(comment=line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data" and "data" in fields:
                value = fields["data"] + "\n" + value
            fields[name] = value


def open_stream(client: httpx.Client, job_id: int, *, after: int = 0,
                last_event_id: str | None = None) -> Any:
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    # The query parameter is what the page put in the URL; a browser repeats
    # that URL on reconnect and adds Last-Event-ID.
    return client.stream("GET", f"/api/v1/jobs/{job_id}/stream",
                         params={"after_iteration": after}, headers=headers,
                         timeout=READ_TIMEOUT)


def submit(client: httpx.Client, max_iterations: int, **spec: Any) -> dict[str, Any]:
    body = {"algorithm": "logistic_regression", "dataset": "breast_cancer", **spec,
            "stopping": {"max_iterations": max_iterations, "tolerance": None}}
    resp = client.post("/api/v1/jobs", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()


def stored_iterations(client: httpx.Client, job_id: int) -> list[int]:
    history = client.get(f"/api/v1/jobs/{job_id}/losses", params={"max_points": 100_000}).json()
    assert not history["downsampled"]
    return list(history["iterations"])


def check_ids(message: Message) -> None:
    """The id is the event's last iteration: what a reconnect resumes after."""
    points = message.points()
    assert points and message.id == str(points[-1][0]), message


def blocked_stream_reads(portal: Portal) -> int:
    """The API's live-stream connections now waiting in XREAD."""
    name = f"{portal.prefix}:api-live"
    return sum(1 for c in portal.redis().client_list()
               if c.get("name") == name and c.get("cmd") == "xread")


def test_idle_stream_keeps_alive_then_delivers_points(portal: Portal, admin: httpx.Client) -> None:
    token = make_user_token(portal.db_url, tenant="stream-idle", email="ida@stream-idle.test",
                            max_slots=0)
    with client_for(portal, token) as member:
        job = submit(member, max_iterations=60)
        assert job["status"] == "queued"
        keepalives: list[float] = []
        got: list[int] = []
        with open_stream(member, job["id"]) as resp:
            messages = sse(resp)
            opened = time.monotonic()
            for message in messages:
                assert message.event != "points", f"a job with no slot streamed {message}"
                if message.comment == "keep-alive":
                    keepalives.append(time.monotonic())
                if time.monotonic() - opened >= STREAM_SECONDS:
                    break
            # Every wait above was shorter than the read timeout, so the stream
            # never went quiet; now check it kept a steady beat all along.
            assert len(keepalives) >= STREAM_SECONDS / KEEPALIVE * 0.6, keepalives
            gaps = [b - a for a, b in zip([opened, *keepalives], keepalives, strict=False)]
            assert max(gaps) < 2.5 * KEEPALIVE, gaps
            assert member.get(f"/api/v1/jobs/{job['id']}").json()["status"] == "queued"

            resp_quota = admin.patch(f"/api/v1/admin/tenants/{job['tenant_id']}",
                                     json={"max_slots": 2})
            assert resp_quota.status_code == 200, resp_quota.text
            for message in messages:
                if message.event == "points":
                    check_ids(message)
                    got.extend(i for i, _ in message.points())
                    if got[-1] >= 60:
                        break
        assert got == list(range(1, 61))
        # The stream runs ahead of the database: points go out before their chunk commits.
        wait_until(lambda: member.get(f"/api/v1/jobs/{job['id']}").json()["status"] in FINISHED,
                   60, "the job to finish")
        assert stored_iterations(member, job["id"]) == got
        # The server noticed the client left and gave its Redis connection up.
        wait_until(lambda: blocked_stream_reads(portal) == 0, 30, "the stream to end")


def test_reconnect_with_last_event_id_loses_and_repeats_nothing(
        portal: Portal, api: httpx.Client) -> None:
    # About 3 ms an iteration: the job runs for many chunks, long enough to
    # drop and resume the stream several times while it trains.
    total = 3000
    job = submit(api, total, algorithm="mlp", dataset="digits", params={"hidden_units": 64})
    received: list[int] = []
    last_id: str | None = None

    def progress() -> tuple[str, int]:
        status = api.get(f"/api/v1/jobs/{job['id']}").json()["status"]
        return status, max(stored_iterations(api, job["id"]), default=0)

    def moved_on(since: int) -> bool:
        status, stored = progress()
        return status in FINISHED or stored > since + 20

    for cycle in range(4):
        if progress()[0] in FINISHED:
            break
        if cycle == 2 and last_id is not None:
            # The page's own reopen: no Last-Event-ID, its last iteration in the URL.
            stream = open_stream(api, job["id"], after=int(last_id))
        else:
            stream = open_stream(api, job["id"], last_event_id=last_id)
        with stream as resp:
            for message in sse(resp):
                if message.event == "points":
                    check_ids(message)
                    received.extend(i for i, _ in message.points())
                    last_id = message.id
                    break  # drop the connection mid-job
                if message.comment and progress()[0] in FINISHED:
                    break  # it ended before we saw a new point: nothing left to drop
        # While nobody listens the job moves on: those points must come later.
        wait_until(partial(moved_on, int(last_id or 0)), 60, "the job to make progress")

    with open_stream(api, job["id"], last_event_id=last_id) as resp:
        deadline = time.monotonic() + 180
        checked = 0.0
        for message in sse(resp):
            if message.event == "points":
                check_ids(message)
                received.extend(i for i, _ in message.points())
            if time.monotonic() - checked >= 0.5:
                checked = time.monotonic()
                status, last_stored = progress()
                if status in FINISHED and received and received[-1] >= last_stored:
                    break
            assert time.monotonic() < deadline, "the job did not finish in time"

    assert progress()[0] == "completed"
    stored = stored_iterations(api, job["id"])
    assert stored == list(range(1, total + 1))
    counts = Counter(received)
    assert [i for i in stored if i not in counts] == [], "points lost across reconnects"
    assert [i for i, n in counts.items() if n > 1] == [], "points sent twice"
    assert received == stored


def test_streams_end_when_clients_leave(portal: Portal) -> None:
    token = make_user_token(portal.db_url, tenant="stream-parked",
                            email="pat@stream-parked.test", max_slots=0)
    with client_for(portal, token) as member:
        job = submit(member, max_iterations=10)
        before = blocked_stream_reads(portal)
        streams = [open_stream(member, job["id"]) for _ in range(3)]
        responses = [s.__enter__() for s in streams]
        try:
            # Kept in a list: a reader dropped half-way closes its connection.
            readers = [sse(resp) for resp in responses]
            for reader in readers:
                assert next(reader).retry == "2000"
            wait_until(lambda: blocked_stream_reads(portal) >= before + 3, 30,
                       "three streams waiting in XREAD on the shared client")
        finally:
            for s in streams:
                s.__exit__(None, None, None)
        wait_until(lambda: blocked_stream_reads(portal) == before, 30,
                   "the streams to end after their clients left")
        member.post(f"/api/v1/jobs/{job['id']}/cancel")
