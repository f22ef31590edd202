"""The supervisor restarts crashed children without ever blocking its loop,
backs off while a child keeps crashing at start, and starts over after a
stable run. Children are real processes; the clock is passed in."""

from __future__ import annotations

import os
import sys
import time

from backend.supervisor import (
    FIRST_RESTART_SECONDS,
    MAX_RESTART_SECONDS,
    STABLE_SECONDS,
    Child,
    restart_delay,
)

CRASH = [sys.executable, "-c", "raise SystemExit(3)"]
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _wait_exit(child: Child) -> None:
    assert child.proc is not None
    child.proc.wait(30)


def test_back_off_doubles_and_is_capped() -> None:
    delays = [restart_delay(n) for n in range(12)]
    assert delays[0] == FIRST_RESTART_SECONDS
    assert delays[1] == 2 * FIRST_RESTART_SECONDS
    assert max(delays) == MAX_RESTART_SECONDS
    assert delays == sorted(delays)


def test_quick_crashes_back_off_and_a_stable_run_resets_it() -> None:
    env = dict(os.environ)
    child = Child("crashy", CRASH)
    now = 1000.0
    child.start(env, now)
    seen = []
    for _ in range(3):
        _wait_exit(child)
        line = child.check(env, now + 1)  # crashed one second after starting
        assert line is not None and "exited with 3" in line
        assert child.restart_at is not None
        seen.append(child.restart_at - (now + 1))
        now = child.restart_at
        assert child.check(env, now) == f"crashy restarted (restart {child.restarts})"
    assert seen == [restart_delay(0), restart_delay(1), restart_delay(2)]

    # This run lasts past the stable bound before crashing: back to the first delay.
    _wait_exit(child)
    child.check(env, now + STABLE_SECONDS + 1)
    assert child.restart_at == now + STABLE_SECONDS + 1 + FIRST_RESTART_SECONDS


def test_a_pending_restart_does_not_block_watching_others() -> None:
    env = dict(os.environ)
    crashy, steady = Child("crashy", CRASH), Child("steady", SLEEP)
    crashy.start(env, 0.0)
    steady.start(env, 0.0)
    try:
        _wait_exit(crashy)
        crashy.quick_failures = 6  # a long back-off is due
        started = time.monotonic()
        assert crashy.check(env, 1.0) is not None
        assert crashy.check(env, 2.0) is None  # still waiting, returns at once
        assert steady.check(env, 2.0) is None
        assert time.monotonic() - started < restart_delay(6)
        assert crashy.restart_at == 1.0 + restart_delay(6)

        assert steady.proc is not None
        steady.proc.kill()
        steady.proc.wait(30)
        line = steady.check(env, 3.0)
        assert line is not None and line.startswith("steady exited")
        assert steady.check(env, 3.0 + FIRST_RESTART_SECONDS) == "steady restarted (restart 1)"
        assert steady.proc.poll() is None
    finally:
        steady.stop(timeout=5)
        crashy.stop(timeout=5)
