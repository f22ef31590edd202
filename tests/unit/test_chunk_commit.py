"""What a chunk's commit writes to its job, on literal inputs: a run that
reaches its end while its experiment's rule stops it is not counted as
stopped early."""

from __future__ import annotations

from backend.core.models import Job, JobStatus
from workers.chunk_service import _progress_values, _Run
from workers.stopping import Verdict


def job(status: JobStatus, stopped_early: bool) -> Job:
    return Job(id=7, tenant_id=1, user_id=1, algorithm="mlp", dataset="digits",
               max_iterations=600, iterations_done=400, status=status,
               stopped_early=stopped_early,
               end_reason="stopped early: its predicted final val_loss 3.01 cannot reach the top 2")


def test_a_last_chunk_that_ends_the_run_after_a_stop_leaves_it_completed_not_stopped() -> None:
    # The rule paused job 7 while its last chunk (400 -> 600) ran.
    done = _Run(iteration=600, verdict=Verdict("completed", "reached max iterations (600)"))
    values = _progress_values(job(JobStatus.paused, stopped_early=True), done)
    assert values["status"] == "completed"
    assert values["stopped_early"] is False
    assert values["end_reason"] == "reached max iterations (600)"


def test_a_chunk_that_does_not_end_the_run_keeps_the_stop() -> None:
    partway = _Run(iteration=500)
    values = _progress_values(job(JobStatus.paused, stopped_early=True), partway)
    assert values["status"] == "paused"
    assert "stopped_early" not in values and "end_reason" not in values


def test_a_failed_last_chunk_keeps_the_stop_and_says_why_it_failed() -> None:
    failed = _Run(iteration=450, verdict=Verdict("failed", "loss diverged at iteration 450"))
    values = _progress_values(job(JobStatus.paused, stopped_early=True), failed)
    assert values["status"] == "failed"
    assert "stopped_early" not in values
    assert values["error"] == "loss diverged at iteration 450"
