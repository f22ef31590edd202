"""A job's switch cost is what a move costs when the slot's spare sandbox is
not warm yet: moves come in bursts, and the spare taken by the last one is
still importing when the next arrives."""

from __future__ import annotations

from typing import cast

import pytest

from workers.resident import Resident
from workers.sandbox.trainer import unpaid_start
from workers.trainers.contract import Trainer


@pytest.mark.parametrize(("spawned", "ready", "asked", "now", "unpaid"), [
    (0.0, 2.5, 10.0, 10.001, 2.5),  # a warm spare: the whole import was paid ahead
    (0.0, 2.5, 1.0, 2.5, 1.0),      # taken while importing: waited 1.5 of it
    (5.0, 7.0, 5.0, 7.0, 0.0),      # started for this job: waited for all of it
])
def test_the_part_of_a_start_a_job_did_not_wait_for(spawned: float, ready: float, asked: float,
                                                     now: float, unpaid: float) -> None:
    assert unpaid_start(spawned, ready, asked, now) == pytest.approx(unpaid, abs=0.01)


@pytest.mark.parametrize("ready", [None, "2.5", True, -1.0, 99.0])
def test_a_ready_time_that_is_not_a_time_between_spawn_and_now_counts_as_nothing(
        ready: object) -> None:
    assert unpaid_start(0.0, ready, 10.0, 10.5) == 0.0


def test_the_switch_cost_counts_a_cold_start_and_the_save() -> None:
    res = Resident(job_id=1, trainer=cast(Trainer, object()), iteration=10, saved_iteration=0,
                   saved_at=0.0, start_seconds=0.4, unpaid_start_seconds=2.1, save_seconds=0.3)
    assert res.switch_seconds == pytest.approx(2.8)
    warm_only = Resident(job_id=1, trainer=cast(Trainer, object()), iteration=10,
                         saved_iteration=0, saved_at=0.0, start_seconds=0.4, save_seconds=0.3)
    assert warm_only.switch_seconds == pytest.approx(0.7)
