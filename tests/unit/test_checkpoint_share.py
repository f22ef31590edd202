"""How often a resident trainer's state is written while it stays on its slot."""

from __future__ import annotations

from typing import cast

import pytest

from workers.resident import Resident, cadence_seconds
from workers.trainers.contract import Trainer


def resident(hold_seconds: float) -> Resident:
    # The trainer is never called by the cadence.
    return Resident(job_id=1, trainer=cast(Trainer, object()), iteration=10, saved_iteration=0,
                    saved_at=0.0, start_seconds=1.0, hold_seconds=hold_seconds)


@pytest.mark.parametrize(("hold", "expected"), [
    (0.0, 30.0),   # never saved yet: the setting
    (0.1, 30.0),   # 0.1 s of 30 s is under 2%
    (0.6, 30.0),   # exactly 2%
    (5.0, 250.0),  # a 33M-parameter tenant state: 5 s is 2% of 250 s
])
def test_a_save_that_holds_training_long_is_made_less_often(hold: float,
                                                             expected: float) -> None:
    assert cadence_seconds(resident(hold), 30.0, 0.02) == pytest.approx(expected)


def test_a_share_of_one_keeps_the_setting_whatever_a_save_costs() -> None:
    assert cadence_seconds(resident(5.0), 30.0, 1.0) == 30.0
    assert cadence_seconds(resident(5.0), 0.0, 1.0) == 0.0
