"""Resident trainers on real Celery workers: a job's trainer stays loaded on
the slot that ran its last chunk, and its state leaves the slot only when
the job does.

Counted from the job's own figures, which the workers keep (not timing):
``restores`` (chunks that built the trainer and restored its checkpoint),
``resident_chunks`` (chunks that stepped on the trainer already loaded) and
``checkpoints_saved``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.test_end_to_end import (
    stored_iterations,
    stored_points,
    submit,
    wait_finished,
)
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

# One database: the subject is trainers kept on their slot; the checkpoint protocol runs on both
# databases in test_chunk_protocol.
pytestmark = pytest.mark.one_database

MLP = {"algorithm": "mlp", "dataset": "digits",
       "params": {"hidden_units": 64, "batch_size": 64}}


def job_of(api: httpx.Client, job_id: int) -> dict[str, Any]:
    return api.get(f"/api/v1/jobs/{job_id}").json()


def uninterrupted_losses(job: dict[str, Any]) -> list[float]:
    """The job's trainer stepped from 0 to its end in this process, in one go."""
    from workers.datasets import load_dataset
    from workers.trainers.data import holdout
    from workers.trainers.registry import make_trainer

    data = holdout(load_dataset(job["dataset"], job["dataset_params"]))
    trainer = make_trainer(job["algorithm"], data, job["params"], job["seed"])
    steps = trainer.step(job["stopping"]["max_iterations"])
    return [m["loss"] for m in steps]


def same_losses(expected: list[float]) -> Any:
    """Equal to ``expected`` as stored: PostgreSQL's float8 text round trip may
    move the last bit; a state restored wrongly differs by far more."""
    return pytest.approx(expected, rel=1e-12, abs=0)


def test_consecutive_chunks_on_one_slot_step_on_without_restoring(
        portal: Portal, api: httpx.Client) -> None:
    job = submit(api, **MLP, stopping={"max_iterations": 3000, "tolerance": None})
    done = wait_finished(api, job["id"], timeout=180)
    assert done["status"] == "completed", done
    assert stored_iterations(portal.db_url, job["id"]) == list(range(1, 3001))
    figures = done["residency"]
    assert done["chunks_run"] >= 4, "too few chunks to tell residency from luck"
    # Alone on two free slots, it never leaves the slot that holds it.
    assert figures["restores"] == 1, figures
    assert figures["resident_chunks"] == done["chunks_run"] - 1, figures
    # Saved at its end (and at most at the cadence): far fewer saves than chunks.
    assert figures["checkpoint_iteration"] == 3000
    assert 1 <= figures["checkpoints_saved"] < done["chunks_run"], figures
    assert figures["switch_seconds"] is not None and figures["switch_seconds"] > 0


def test_jobs_that_take_turns_on_the_slots_repeat_and_lose_nothing(
        portal: Portal, api: httpx.Client) -> None:
    """Three jobs on two slots under fair sharing: slots change hands, each
    leaving job's state is written, and each job's losses are those of one
    uninterrupted run, every iteration stored once."""
    jobs = [submit(api, **MLP, seed=seed, stopping={"max_iterations": 1500, "tolerance": None})
            for seed in (1, 2, 3)]
    finished = [wait_finished(api, j["id"], timeout=240) for j in jobs]
    assert [j["status"] for j in finished] == ["completed"] * 3, finished
    moved = [j for j in finished if j["residency"]["restores"] > 1]
    assert moved, "no job ever left its slot: the test shows nothing"
    for job in finished:
        points = stored_points(portal.db_url, job["id"])
        assert [i for i, _ in points] == list(range(1, 1501)), "points lost or duplicated"
        assert [loss for _, loss in points] == same_losses(uninterrupted_losses(job)), job["id"]


def test_pause_writes_the_resident_state_and_resume_continues_it(
        portal: Portal, api: httpx.Client) -> None:
    job = submit(api, **MLP, stopping={"max_iterations": 20000, "tolerance": None})
    wait_until(lambda: job_of(api, job["id"])["residency"]["resident_chunks"] >= 2, 120,
               "the job to step on its resident trainer")
    assert api.post(f"/api/v1/jobs/{job['id']}/pause").status_code == 200

    def written() -> dict[str, Any] | None:
        found = job_of(api, job["id"])
        if found["status"] != "paused":
            return None
        figures = found["residency"]
        return found if figures["checkpoint_iteration"] == found["iterations_done"] else None

    paused = wait_until(written, 60, "the paused job's state to be written")
    assert paused["iterations_done"] > 0
    assert api.post(f"/api/v1/jobs/{job['id']}/resume").status_code == 200
    wait_until(lambda: job_of(api, job["id"])["iterations_done"] > paused["iterations_done"],
               60, "the resumed job to train on")
    assert api.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 200
    cancelled = wait_until(
        lambda: (j := job_of(api, job["id"]))["residency"]["checkpoint_iteration"]
        == j["iterations_done"] and j["status"] == "cancelled" and j, 60,
        "the cancelled job's state to be written")
    iterations = stored_iterations(portal.db_url, job["id"])
    assert iterations == list(range(1, cancelled["iterations_done"] + 1))


def test_sigkill_of_the_slot_holding_a_resident_trainer_loses_nothing(
        portal: Portal, api: httpx.Client) -> None:
    job = submit(api, **MLP, stopping={"max_iterations": 4000, "tolerance": None})
    wait_until(lambda: job_of(api, job["id"])["residency"]["resident_chunks"] >= 2, 120,
               "the job to step on its resident trainer")
    victims = portal.kill_slots()
    assert victims
    done = wait_finished(api, job["id"], timeout=240)
    assert done["status"] == "completed", done
    # Restored from its last checkpoint, the lost iterations ran again and
    # reproduced the points already stored: each once, equal to one run.
    assert done["residency"]["restores"] >= 2, done["residency"]
    points = stored_points(portal.db_url, job["id"])
    assert [i for i, _ in points] == list(range(1, 4001))
    assert [loss for _, loss in points] == same_losses(uninterrupted_losses(done))
