"""The typed waiting entry: what the scheduler publishes is facts, read back
whole, and worded in one place (backend.scheduling.waiting_words)."""

from __future__ import annotations

import json

from backend.scheduling.waiting import PoolWait, WaitingEntry, WaitKind
from backend.scheduling.waiting_words import detail, reason, summary


def test_an_entry_survives_its_json_and_holds_no_sentence() -> None:
    pool = PoolWait("busy", full=("cpu",), free=0, slots=2, kept=("gpu",), kept_free=1)
    entry = WaitingEntry(7, kind=WaitKind.POOL, position=3, predicted_gain=0.25,
                         policy="slaq", policy_reason="rank 3 by predicted gain 0.25",
                         ahead=2, running_ahead=1, quota=4, pool=pool, estimate_seconds=12.5)
    text = entry.to_json()
    assert WaitingEntry.from_json(text, 7) == entry
    raw = json.loads(text)
    assert "reason" not in raw and "detail" not in raw, "words are the reader's, not published"
    assert raw["position"] == 3, "scripts read the position from the hash"


def test_reading_ignores_unknown_fields_and_takes_the_key_as_the_id() -> None:
    old = json.dumps({"position": 2, "kind": "slot", "reason": "old words", "detail": "x"})
    entry = WaitingEntry.from_json(old, 9)
    assert (entry.job_id, entry.position, entry.kind) == (9, 2, WaitKind.SLOT)


def test_new_jobs_not_yet_ranked_are_worded_from_their_facts() -> None:
    new = WaitingEntry(1, kind=WaitKind.NEW, position=12, ranked=False, new_ahead=2,
                       sweep_share=0.5)
    assert reason(new) == ("new job waiting to start: 2 new jobs ahead of it; new jobs get "
                           "their first chunk as slots free up (an experiment's new "
                           "configurations hold at most 50% of the slots while others wait)")
    assert detail(new) == reason(new), "no policy account yet: the reason is the detail"
    assert summary(new) == ("Waiting for its first chunk: new jobs start as slots free up, "
                            "in the order they came; 2 jobs came before it.")
    quota = WaitingEntry(2, kind=WaitKind.QUOTA, position=13, ranked=False, quota=2,
                         ahead_in_tenant=3)
    assert reason(quota) == ("your team is using all 2 of its slots (its quota); new job, "
                             "3 of your team's jobs ahead of it")


def test_ranked_jobs_carry_the_policys_account_as_their_detail() -> None:
    ranked = WaitingEntry(3, kind=WaitKind.TURN, position=4, policy="fifo",
                          policy_reason="rank 4 by submission time")
    assert reason(ranked) == "waiting for a free slot, position 4: rank 4 by submission time"
    assert detail(ranked) == "rank 4 by submission time"
    held = WaitingEntry(3, kind=WaitKind.POOL, position=4, policy_reason="rank 4",
                        pool=PoolWait("pool_quota", limits=(("gpu", 1),)))
    assert reason(held) == ("your team is using all of its slots in the pools this job can "
                            "use (1 in pool gpu)")
    assert summary(held).startswith("Your team is using all of its slots in the pools")
