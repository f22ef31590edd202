"""Worker slots as Celery nodes of one process each.

A job's trainer stays loaded in the process that ran its last chunk, and the
scheduler sends the job's next chunk to that process's own queue
(:func:`backend.core.pools.slot_queue`). Celery cannot address one process
of a multi-process node, so each slot is a node of its own (``--concurrency
1``): ``slaq worker --concurrency 4`` starts four such nodes and waits for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

from workers.priority import lower_session_group


def node_argv(name: str, queue: str, loglevel: str = "INFO", *,
              quiet: bool = False) -> list[str]:
    """The command of one slot's node, taking ``queue`` (its pool's) and its own.
    ``quiet``: no start-up banner (``slaq run`` prints one summary instead)."""
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app",
            *(["--quiet"] if quiet else []), "worker",
            "--concurrency", "1", "--pool", "prefork", "-Q", queue,
            "--loglevel", loglevel, "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-n", f"{name}@%h"]


def run_nodes(count: int, queue: str, *, loglevel: str = "INFO", name: str = "",
              nice: int = 0) -> int:
    """Run ``count`` one-slot nodes until they exit; SIGTERM and SIGINT are passed on.

    Started as a session of its own, this process leads it: it lowers the
    session's CPU share by ``nice`` for all its nodes (:mod:`workers.priority`).
    """
    lower_session_group(nice)
    base = name or f"slaq-{os.getpid()}"
    procs = [subprocess.Popen(node_argv(f"{base}-{i}", queue, loglevel)) for i in range(count)]

    def forward(signum: int, _frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [proc.wait() for proc in procs]
    return max(codes, key=abs, default=0)
