"""A waiting job's queue position and the jobs it says go first are one
ranking's (issue 38: "4 jobs ... go first" beside "Queue position 3")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_end_to_end import submit
from tests.utils.portal import Portal, make_user_token, running_portal
from tests.utils.waiting import wait_until

pytestmark = pytest.mark.one_database  # one ranking, not the database, is the subject

LONG = {"algorithm": "logistic_regression", "dataset": "digits",
        "params": {"learning_rate": 0.05},
        "stopping": {"max_iterations": 100_000, "tolerance": None}}
GO_FIRST = re.compile(r"(\d+) jobs? .* go(?:es)? first")
POSITION = re.compile(r"Queue position (\d+)\.")


@pytest.fixture(scope="module")
def las_portal(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """Two slots under least attained service: running jobs rank before
    waiting ones that have trained more, so "go first" counts them."""
    data: Path = tmp_path_factory.mktemp("las")
    with running_portal(data_dir=data, db_url=f"sqlite:///{data / 'portal.db'}",
                        redis_url=redis_url, workers=2, policy="las",
                        # Not niced: on a loaded machine niced slots took minutes to start.
                        extra_env={"CHUNK_SECONDS": "1", "WORKER_NICE": "0"}) as portal:
        yield portal


def test_queue_position_counts_the_jobs_that_go_first(las_portal: Portal) -> None:
    token = make_user_token(las_portal.db_url, tenant="rankers", email="rae@rankers.test")
    with httpx.Client(base_url=las_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        ids = [submit(api, **LONG, name=f"run-{i}")["id"] for i in range(5)]
        try:
            def queue_with_turns() -> list[dict[str, Any]] | None:
                # One listing: the scheduler publishes every entry at once.
                jobs = api.get("/api/v1/jobs", params={"status": "queued"}).json()["items"]
                placed = [j for j in jobs if j["queue_position"]]
                turns = [j for j in placed if GO_FIRST.search(j["explanation"]["summary"])]
                return placed if len(placed) >= 2 and turns else None

            placed = wait_until(queue_with_turns, 60, "two placed jobs, one waiting its turn")
            positions = [j["queue_position"] for j in placed]
            assert len(set(positions)) == len(positions), f"one place each: {positions}"
            for job in placed:
                summary = job["explanation"]["summary"]
                said = POSITION.search(summary)
                assert said is not None and int(said.group(1)) == job["queue_position"], summary
                first = GO_FIRST.search(summary)
                if first is not None:
                    assert int(first.group(1)) == job["queue_position"] - 1, summary
                else:
                    # "Next in line": nothing waiting before it, so at most the
                    # two running jobs are.
                    assert job["queue_position"] <= 3, summary
        finally:
            for job_id in ids:
                api.post(f"/api/v1/jobs/{job_id}/cancel")
