"""The checkpoint cadence of a resident trainer, on real Celery workers: while
a job stays on its slot its state is written behind (a background thread
writes the file while the next chunks train) and recorded by a later commit,
so a crash restarts it from a recent checkpoint, and no older file is kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_end_to_end import stored_points, submit, wait_finished
from tests.integration.test_residency import MLP, job_of, same_losses, uninterrupted_losses
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

# The workers' writes, not the database, are the subject (test_residency runs both).
pytestmark = pytest.mark.one_database

CADENCE = 1.0
ITERATIONS = 8000


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    running = start_portal(data_dir=tmp_path_factory.mktemp("cadence"), db_url=module_db_url,
                           redis_url=redis_url, extra_env={"CHECKPOINT_SECONDS": str(CADENCE)})
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def api(portal: Portal) -> Iterator[httpx.Client]:
    token = make_user_token(portal.db_url, tenant="team-a", email="alice@team-a.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def checkpoint_files(portal: Portal, job_id: int) -> list[int]:
    folder = Path(portal.data_dir) / "checkpoints" / str(job_id)
    return sorted(int(f.stem) for f in folder.glob("*.ckpt"))


def test_a_resident_job_is_checkpointed_at_the_cadence_and_a_crash_resumes_there(
        portal: Portal, api: httpx.Client) -> None:
    job = submit(api, **MLP, stopping={"max_iterations": ITERATIONS, "tolerance": None})

    def saved_twice_in_place() -> dict[str, Any] | None:
        found = job_of(api, job["id"])
        figures = found["residency"]
        # Still on its first slot (one start), yet checkpoints keep being recorded.
        return found if (figures["restores"] == 1 and figures["checkpoints_saved"] >= 2
                         and figures["checkpoint_iteration"] > 0) else None

    running = wait_until(saved_twice_in_place, 120, "two cadence checkpoints on one slot")
    assert running["status"] in ("running", "queued"), running

    def settled_on_disk() -> list[int] | None:
        # Read around the listing: a commit in between may record a newer state.
        before = job_of(api, job["id"])["residency"]["checkpoint_iteration"]
        files = checkpoint_files(portal, job["id"])
        after = job_of(api, job["id"])["residency"]["checkpoint_iteration"]
        # The recorded state is on disk and older ones are pruned (a newer one
        # may be in flight behind the training).
        return files if before == after and before in files and min(files) == before else None

    wait_until(settled_on_disk, 30, "the recorded checkpoint on disk, older ones pruned")
    victims = portal.kill_slots()
    assert victims
    done = wait_finished(api, job["id"], timeout=300)
    assert done["status"] == "completed", done
    assert done["residency"]["restores"] >= 2, done["residency"]
    points = stored_points(portal.db_url, job["id"])
    assert [i for i, _ in points] == list(range(1, ITERATIONS + 1)), "points lost or duplicated"
    assert [loss for _, loss in points] == same_losses(uninterrupted_losses(done))
