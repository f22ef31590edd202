"""Training yields the CPU to the processes that answer people.

On a host that runs the API and the scheduler beside worker slots, a chunk
must not slow down a page. ``os.nice`` alone does not do this on Linux with
autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``): each
session is its own scheduling group, and groups share the CPU equally
whatever their processes' niceness. A worker started in its own session (as
the supervisor and the test harness start it) therefore also lowers its
session's group, through ``/proc/self/autogroup`` (sched(7)).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

AUTOGROUP = Path("/proc/self/autogroup")


def lower_process(nice: int) -> None:
    """This process, by ``nice`` steps (its children inherit it)."""
    if nice:
        os.nice(nice)


def lower_session_group(nice: int, autogroup: Path = AUTOGROUP) -> bool:
    """This session's autogroup, when this process leads the session: a
    worker started from someone's shell must not lower the shell's other
    programs. True when the group's niceness was set."""
    if not nice or os.getsid(0) != os.getpid() or not autogroup.exists():
        return False
    try:
        autogroup.write_text(str(nice))
    except OSError as exc:  # a kernel without autogroup, or a read-only /proc
        log.info("could not lower this session's scheduling group: %s", exc)
        return False
    return True
