"""A waiting job says in plain words what it waits for, where it stands and
roughly when it will start; a finished one says why it ended."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_end_to_end import submit, wait_finished
from tests.utils.portal import Portal, make_user_token, running_portal
from tests.utils.waiting import wait_until

LONG = {"algorithm": "logistic_regression", "dataset": "digits",
        "params": {"learning_rate": 0.05},
        "stopping": {"max_iterations": 100_000, "tolerance": None}}


@pytest.fixture(scope="module")
def one_slot(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """One worker slot and 2 s chunks: one job runs while the other waits."""
    data: Path = tmp_path_factory.mktemp("one-slot")
    with running_portal(data_dir=data, db_url=f"sqlite:///{data / 'portal.db'}",
                        redis_url=redis_url, workers=1,
                        extra_env={"CHUNK_SECONDS": "2"}) as portal:
        yield portal


@pytest.fixture
def api(one_slot: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(one_slot.db_url, tenant="waiters", email="walt@waiters.test")
    with httpx.Client(base_url=one_slot.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def test_waiting_behind_a_running_job_in_plain_words(api: httpx.Client) -> None:
    first = submit(api, **LONG, name="first")
    second = submit(api, **LONG, name="second")
    ids = (first["id"], second["id"])
    try:
        def waiting_with_estimate() -> dict[str, Any] | None:
            # Under the fair policy the two take turns: whichever waits is
            # next in line; an estimate needs one timed chunk.
            for job_id in ids:
                job = api.get(f"/api/v1/jobs/{job_id}").json()
                if job["status"] == "queued" and job["explanation"]["estimate_seconds"]:
                    return job
            return None

        job = wait_until(waiting_with_estimate, 60, "a waiting job with an estimate")
        why = job["explanation"]
        summary = why["summary"]
        assert summary.startswith("Waiting for a free slot"), summary
        assert why["position"] == job["queue_position"] == 1
        assert summary.count("position") == 1, "the position is said once"
        assert "Queue position 1." in summary
        # Chunks last about 2 s on one slot: a rounded "about N s" (or "within
        # seconds" under 5 s), never a bare number of seconds.
        assert re.search(r"Expected to start (in about \d+ s|within seconds)\.", summary), \
            summary
        assert 0 < why["estimate_seconds"] < 60
        assert "rank" not in summary and "gain" not in summary, "technical words stay out"
        assert why["detail"], "the policy's own reason stays available"

        running = next(api.get(f"/api/v1/jobs/{i}").json() for i in ids if i != job["id"])
        if running["status"] == "running":
            assert running["explanation"]["summary"].startswith("Running")
            assert running["explanation"]["position"] is None
    finally:
        for job_id in ids:
            api.post(f"/api/v1/jobs/{job_id}/cancel")
    ended = wait_finished(api, ids[0])
    assert ended["explanation"]["summary"] == "Cancelled: cancelled by user."
    assert ended["explanation"]["position"] is None and ended["queue_position"] is None


def test_finished_job_says_why_it_ended(api: httpx.Client) -> None:
    job = submit(api, algorithm="kmeans", dataset="iris", params={"n_clusters": 3},
                 stopping={"max_iterations": 50, "tolerance": None})
    done = wait_finished(api, job["id"])
    assert done["explanation"]["summary"] == "Completed: reached max iterations (50)."
    assert done["explanation"]["estimate_seconds"] is None
