"""Plain words for where a job stands, and honest wait estimates."""

from __future__ import annotations

from typing import Any

from backend.scheduling.explain import WaitKind, wait_estimate
from backend.scheduling.waiting import WaitingEntry
from backend.services.job_explanation import explain_job, plain_duration


def _waiting(**entry: Any) -> str:
    return explain_job(status="queued", end_reason=None, error=None, last_reason="old",
                       waiting=WaitingEntry(1, **entry)).summary


def test_turn_behind_jobs_with_larger_gains_says_position_once() -> None:
    text = _waiting(kind=WaitKind.TURN, position=5, ahead=4, running_ahead=2, policy="slaq",
                    estimate_seconds=95.0, policy_reason="rank 5 by predicted gain 1.2e-4")
    assert text == ("Waiting for its turn: 4 jobs with larger predicted gains go first "
                    "(2 running now). Queue position 5. Expected to start in about 2 min.")
    # Only the position counts: an entry cannot say more jobs go first than it has before it.
    assert "3 jobs with larger" in _waiting(kind=WaitKind.TURN, position=4, ahead=9,
                                             policy="slaq")


def test_quota_and_unknown_estimate() -> None:
    text = _waiting(kind=WaitKind.QUOTA, position=2, quota=1, ahead_in_tenant=1,
                    estimate_seconds=None)
    assert text.startswith("Waiting for your team's one slot (its quota): another of your "
                           "jobs is using it")
    three = _waiting(kind=WaitKind.QUOTA, position=4, quota=3, ahead_in_tenant=0,
                     estimate_seconds=30.0)
    assert three == ("Waiting for one of your team's 3 slots (its quota): all are in use by "
                     "your other jobs. Queue position 4. Expected to start in about 30 s.")
    assert "and 1 job of yours goes first." in text and "Expected" not in text


def test_finished_jobs_tell_their_end_not_a_rank() -> None:
    done = explain_job(status="completed", end_reason="reached target loss 0.3", error=None,
                       last_reason="rank 1 by predicted gain", waiting=None)
    assert done.summary == "Completed: reached target loss 0.3."
    assert done.detail is None and done.position is None
    failed = explain_job(status="failed", end_reason="trainer crashed", error="Traceback ...",
                         last_reason="rank 1", waiting=None)
    assert failed.summary == "Failed: trainer crashed." and failed.detail == "Traceback ..."


def test_plain_durations_are_rounded() -> None:
    assert plain_duration(12.3) == "about 15 s"
    assert plain_duration(61) == "about 2 min"
    assert plain_duration(7200) == "about 2 h"


def test_estimates() -> None:
    assert wait_estimate(kind=WaitKind.NEW, position=5, chunk_seconds=10.0, free_slots=0,
                         total_slots=2, ahead_in_tenant=0, quota=4) == 25.0
    assert wait_estimate(kind=WaitKind.SLOT, position=1, chunk_seconds=None, free_slots=0,
                         total_slots=2, ahead_in_tenant=0, quota=4) is None, "no chunk timed"
    assert wait_estimate(kind=WaitKind.TURN, position=1, ahead=3, policy="fifo",
                         chunk_seconds=10.0, free_slots=0, total_slots=2, ahead_in_tenant=0,
                         quota=4) is None, "FIFO: unknown job lengths"
    assert wait_estimate(kind=WaitKind.TURN, position=1, ahead=3, policy="slaq",
                         chunk_seconds=10.0, free_slots=0, total_slots=2, ahead_in_tenant=0,
                         quota=4) == 20.0
    assert wait_estimate(kind=WaitKind.NO_WORKERS, position=1, chunk_seconds=10.0,
                         free_slots=0, total_slots=0, ahead_in_tenant=0, quota=1) is None


def test_a_job_stopped_by_its_experiment_says_so_and_how_to_overrule() -> None:
    reason = "stopped early: its predicted final val_loss 0.41 ± 0.03 cannot reach the top 3"
    stopped = explain_job(status="paused", end_reason=reason, error=None,
                          last_reason="rank 9", waiting=None)
    assert stopped.summary.startswith("Paused by its experiment's early-stopping rule")
    assert reason in stopped.summary and "resume it" in stopped.summary
    by_hand = explain_job(status="paused", end_reason=None, error=None, last_reason=None,
                          waiting=None)
    assert "early-stopping" not in by_hand.summary


def test_a_job_between_chunks_is_not_told_to_wait_in_line() -> None:
    # Issue 38: a training job read "Queued: the scheduler will place it in
    # line at its next round" after each of its chunks.
    between = explain_job(status="queued", end_reason=None, error=None,
                          last_reason="rank 1", waiting=None, chunks_run=4).summary
    assert between.startswith("Between chunks:") and "in line" not in between
    new = explain_job(status="queued", end_reason=None, error=None, last_reason=None,
                      waiting=None, chunks_run=0).summary
    assert new == "Queued: the scheduler will place it in line at its next round."
    # Once the scheduler has placed it (a busy portal), its place is what it reads.
    placed = explain_job(status="queued", end_reason=None, error=None, last_reason=None,
                         waiting=WaitingEntry(1, kind=WaitKind.SLOT, position=2),
                         chunks_run=4).summary
    assert "Queue position 2" in placed


def test_next_in_line_behind_running_jobs_says_why_its_position_is_not_1() -> None:
    text = _waiting(kind=WaitKind.SLOT, position=3, ahead=2, running_ahead=2, policy="las")
    assert text == ("Waiting for a free slot: every slot is busy, and it is next in line after "
                    "the 2 jobs running now. Queue position 3.")
    assert _waiting(kind=WaitKind.SLOT, position=1).startswith(
        "Waiting for a free slot: every slot is busy, and it is next in line. Queue position 1.")
