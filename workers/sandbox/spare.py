"""One pre-started, still empty sandbox per worker process.

Starting a sandbox costs little (bubblewrap: ~10 ms), but the interpreter's
imports cost a few hundred ms of CPU (numpy, pydantic) to seconds (torch:
``SANDBOX_PREIMPORT``). A worker keeps
one sandbox started ahead, before any tenant's code or data is in it, and
hands it to the next job that comes to the slot; as soon as it is taken it
starts the next spare, so a job that takes the slot from a resident one
finds a warm sandbox (a slot holds at most its resident sandbox and one
spare). Each sandbox still serves exactly one job: a
spare has run no code but ours (its imports and warm-ups) and holds nothing
of any tenant, so handing it over shares nothing between tenants.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import select
import threading
import time

from workers.sandbox.runner import SandboxLimits, SandboxProcess

_lock = threading.Lock()
_started = threading.Condition(_lock)
"""Notified when a new spare is in place."""
_spare: SandboxProcess | None = None
_requests: queue.SimpleQueue[SandboxLimits] | None = None
_requests_pid = 0
"""The process that started the starter thread (a forked worker needs its own)."""


def take(limits: SandboxLimits) -> SandboxProcess:
    """A started sandbox for ``limits``: the spare when it fits and lives, else a new one."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None and (spare.limits != limits or spare.proc.poll() is not None):
        spare.kill(wait=False)
        spare = None
    return spare if spare is not None else SandboxProcess(limits)


def replenish(limits: SandboxLimits) -> None:
    """Have the next spare started unless one is ready. Called as a spare is
    taken and as a sandbox closes; the start itself (a fork and exec, then the
    spare's imports in its own process) happens on the starter thread."""
    _starter().put(limits)


def _start_spare(limits: SandboxLimits) -> None:
    global _spare
    with _lock:
        if _spare is not None and _spare.limits == limits and _spare.proc.poll() is None:
            return
    fresh = SandboxProcess(limits)
    with _lock:
        old, _spare = _spare, fresh
        _started.notify_all()
    if old is not None:
        old.kill(wait=False)


def _run_starter(requests: queue.SimpleQueue[SandboxLimits]) -> None:
    while True:
        limits = requests.get()
        with contextlib.suppress(Exception):  # no spare then: the next chunk starts its own
            _start_spare(limits)


def _starter() -> queue.SimpleQueue[SandboxLimits]:
    """The queue of the thread that starts spares. It never ends: bubblewrap's
    --die-with-parent follows the thread that started it, so a spare started
    by a short-lived thread would die with that thread."""
    global _requests, _requests_pid
    with _lock:
        if _requests is None or _requests_pid != os.getpid():
            _requests = queue.SimpleQueue()
            _requests_pid = os.getpid()
            threading.Thread(target=_run_starter, args=(_requests,), daemon=True,
                             name="sandbox-spare-starter").start()
        return _requests


def wait_ready(timeout: float) -> bool:
    """Wait until a spare is in place and its child has finished its imports
    (its first message, "ready", is in the pipe; ``take`` leaves it there for
    the trainer to read). For benchmarks and tests; workers never wait."""
    deadline = time.monotonic() + timeout
    with _started:
        _started.wait_for(lambda: _spare is not None, timeout)
        process = _spare
    if process is None:
        return False
    readable, _, _ = select.select([process.read_fd], [], [],
                                   max(0.0, deadline - time.monotonic()))
    return bool(readable)


def discard() -> None:
    """End the spare (tests, shutdown)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        spare.kill()


atexit.register(discard)
