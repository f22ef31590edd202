"""One cgroup per sandbox: a single memory limit and a process limit for
everything the sandbox holds, on cgroup v2 or v1.

Address-space rlimits bound one process's mappings only: memfds, forked
children, tmpfs files and shared memory all escape them, and CUDA reserves
terabytes of address space it never touches. A memory cgroup charges every
page the sandbox's processes bring in, whoever maps it, so one limit covers
all routes; ``memory.oom.group`` (v2) or the worker (v1, on seeing the
``oom_kill`` counter move) then ends the whole sandbox.

Layouts handled:

* v2 (unified, ``cgroup.controllers`` at the mount): sandboxes are children
  of one parent cgroup that has ``memory`` and ``pids`` in its
  ``cgroup.subtree_control``. The parent holds no processes of its own
  (cgroup v2's no-internal-process rule), so the operator names a delegated
  one (``SANDBOX_CGROUP_PARENT``) unless the worker's own cgroup may have
  children (the root cgroup, or an empty delegated one).
* v1 (one hierarchy per controller): a directory per sandbox in each of
  ``memory``, ``pids`` and ``freezer``, under the worker's own cgroup in
  that hierarchy (v1 lets a cgroup hold processes and children both).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

MOUNT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "freezer")
SANDBOXES_DIR = "slaq-sandboxes"
"""The directory, under the parent, that holds one cgroup per sandbox."""
REMOVE_SECONDS = 10.0
"""How long removal waits for a killed sandbox's processes to leave its cgroup."""


class CgroupUnavailable(RuntimeError):
    """This host gives the worker no cgroup it can put sandboxes in."""


@dataclass(frozen=True)
class CgroupHost:
    """Where this worker makes sandbox cgroups: one parent (v2) or one per controller (v1)."""

    version: int
    parents: dict[str, Path]
    """v2: ``{"unified": dir}``; v1: ``{"memory": dir, "pids": dir, "freezer": dir}``."""


def _own_paths(proc_cgroup: Path) -> dict[str, str]:
    """The worker's cgroup per controller (``"unified"`` for v2), from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in proc_cgroup.read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and not controllers:
            own["unified"] = path
        for controller in controllers.split(","):
            if controller:
                own[controller] = path
    return own


def _under(mount: Path, path: str) -> Path:
    return mount / path.lstrip("/")


def detect(mount: Path = MOUNT, parent: str = "",
           proc_cgroup: Path = Path("/proc/self/cgroup")) -> CgroupHost:
    """The cgroup layout this worker can use, checked and prepared; raises
    ``CgroupUnavailable`` with what the operator must provide.

    ``parent`` (``SANDBOX_CGROUP_PARENT``) is a cgroup path relative to the
    mount (v2) or to each controller's hierarchy (v1); empty means the
    worker's own cgroup.
    """
    if (mount / "cgroup.controllers").is_file():
        return _detect_v2(mount, parent, proc_cgroup)
    if all((mount / name / "cgroup.procs").is_file() for name in V1_CONTROLLERS):
        return _detect_v1(mount, parent, proc_cgroup)
    raise CgroupUnavailable(
        f"no cgroup v2 at {mount} and no cgroup v1 memory, pids and freezer hierarchies "
        "under it")


def _detect_v2(mount: Path, parent: str, proc_cgroup: Path) -> CgroupHost:
    where = _under(mount, parent or _own_paths(proc_cgroup).get("unified", "/"))
    available = (where / "cgroup.controllers").read_text().split() if where.is_dir() else []
    missing = [name for name in ("memory", "pids") if name not in available]
    if missing:
        raise CgroupUnavailable(
            f"cgroup {where} does not offer the {' and '.join(missing)} controller(s) "
            "to its children; delegate a cgroup with them to the worker and name it in "
            "SANDBOX_CGROUP_PARENT")
    sandboxes = where / SANDBOXES_DIR
    try:
        enabled = (where / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(enabled):
            _write(where / "cgroup.subtree_control", "+memory +pids")
        sandboxes.mkdir(exist_ok=True)
        _write(sandboxes / "cgroup.subtree_control", "+memory +pids")
    except OSError as exc:
        hint = (" (it holds processes: cgroup v2 lets only a cgroup without processes "
                "have limited children, so run the worker in a leaf such as "
                f"{where}/worker and keep {where} for sandboxes)"
                if exc.errno == errno.EBUSY else "")
        raise CgroupUnavailable(f"cannot make sandbox cgroups under {where}: "
                                f"{exc.strerror or exc}{hint}") from None
    return CgroupHost(version=2, parents={"unified": sandboxes})


def _detect_v1(mount: Path, parent: str, proc_cgroup: Path) -> CgroupHost:
    own = _own_paths(proc_cgroup)
    parents: dict[str, Path] = {}
    for name in V1_CONTROLLERS:
        sandboxes = _under(mount / name, parent or own.get(name, "/")) / SANDBOXES_DIR
        try:
            sandboxes.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot make sandbox cgroups under {sandboxes.parent}: "
                                    f"{exc.strerror or exc}") from None
        parents[name] = sandboxes
    return CgroupHost(version=1, parents=parents)


def _pid_namespace() -> str:
    """This process's pid namespace (its inode), so workers of different
    containers sharing one parent cgroup never judge each other's pids."""
    try:
        return os.readlink("/proc/self/ns/pid").split("[")[-1].rstrip("]")
    except OSError:
        return "0"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(host: CgroupHost) -> int:
    """Remove sandbox cgroups left by workers that died without removing
    them. Their sandboxes died with them (--die-with-parent), but a worker
    killed between freezing a sandbox and thawing it (v1) leaves its
    processes frozen with their SIGKILL pending: thaw them, kill what is
    left, and remove each cgroup the kernel lets go (an emptied one that
    still shows a dying process is taken by the next sweep). Returns how
    many went."""
    removed = 0
    namespace = _pid_namespace()
    for key, parent in host.parents.items():
        for path in parent.glob(f"sandbox-{namespace}-*-*"):
            pid = path.name.split("-")[2]
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
            if key == "freezer":
                with contextlib.suppress(OSError):
                    _write(path / "freezer.state", "THAWED")
            with contextlib.suppress(OSError, ValueError):
                for task in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(task), signal.SIGKILL)
            with contextlib.suppress(OSError):
                path.rmdir()
                removed += 1
    return removed


def _write(path: Path, value: str) -> None:
    # One write(2) per value: cgroup files act on each write, not on close.
    # O_CREAT does nothing on cgroupfs (its files exist or cannot be made)
    # and lets a directory laid out like it stand in for it in unit tests.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (``memory.events``, ``memory.oom_control``)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
    return out


class SandboxCgroup:
    """The cgroup(s) of one sandbox: limits set before any process joins."""

    def __init__(self, host: CgroupHost, memory_bytes: int, max_pids: int) -> None:
        self.host = host
        self.memory_bytes = memory_bytes
        # Who made it (pid namespace, pid), so ``sweep`` can tell a dead
        # worker's leftovers from a live worker's sandboxes.
        self.name = f"sandbox-{_pid_namespace()}-{os.getpid()}-{secrets.token_hex(6)}"
        self.dirs = {key: parent / self.name for key, parent in host.parents.items()}
        made: list[Path] = []
        try:
            for path in self.dirs.values():
                path.mkdir()
                made.append(path)
            if host.version == 2:
                self._limit_v2(memory_bytes, max_pids)
            else:
                self._limit_v1(memory_bytes, max_pids)
        except OSError as exc:
            for path in made:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise CgroupUnavailable(f"cannot set up a sandbox cgroup: {exc}") from None

    def _limit_v2(self, memory_bytes: int, max_pids: int) -> None:
        path = self.dirs["unified"]
        _write(path / "memory.max", str(memory_bytes))
        # Swap would let a sandbox hold more than its limit, just slower.
        if (path / "memory.swap.max").exists():
            _write(path / "memory.swap.max", "0")
        # An OOM kill takes the whole sandbox, not one process of it.
        _write(path / "memory.oom.group", "1")
        _write(path / "pids.max", str(max_pids))

    def _limit_v1(self, memory_bytes: int, max_pids: int) -> None:
        memory = self.dirs["memory"]
        _write(memory / "memory.limit_in_bytes", str(memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            # memory + swap, so swap adds nothing (must be set after the plain limit).
            _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
        with contextlib.suppress(OSError):
            _write(memory / "memory.swappiness", "0")
        _write(self.dirs["pids"] / "pids.max", str(max_pids))

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its pid into to join (every hierarchy on v1)."""
        return [str(path / "cgroup.procs") for path in self.dirs.values()]

    def _memory_dir(self) -> Path:
        return self.dirs["unified" if self.host.version == 2 else "memory"]

    def oom_kills(self) -> int:
        """Processes the kernel killed for this sandbox's memory limit so far."""
        if self.host.version == 2:
            events = _keyed(self._memory_dir() / "memory.events")
            return max(events.get("oom_kill", 0), events.get("oom_group_kill", 0))
        control = _keyed(self._memory_dir() / "memory.oom_control")
        return control.get("oom_kill", 0) + control.get("under_oom", 0)

    def peak_bytes(self) -> int | None:
        """The most memory the sandbox held at once, where the kernel reports it."""
        name = "memory.peak" if self.host.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self._memory_dir() / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(x) for x in Path(procs).read_text().split())
        return sorted(found)

    def kill(self, *, freeze: bool = True) -> None:
        """SIGKILL every process in the sandbox; with ``freeze`` (v1), forks
        racing the kill included. Freeze only where the caller is sure to
        get to the thaw: a daemon thread stopped by the worker's exit in
        between would leave the sandbox frozen (``sweep`` mends that)."""
        if self.host.version == 2 and (self.dirs["unified"] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.dirs["unified"] / "cgroup.kill", "1")
            return
        freezer = self.dirs.get("freezer") if freeze else None
        if freezer is not None:
            # Frozen, nothing can fork between reading the list and the kills.
            with contextlib.suppress(OSError):
                _write(freezer / "freezer.state", "FROZEN")
        try:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            if freezer is not None:
                # SIGKILL is delivered once the tasks thaw.
                with contextlib.suppress(OSError):
                    _write(freezer / "freezer.state", "THAWED")

    def remove(self, timeout: float = REMOVE_SECONDS) -> bool:
        """Kill what is left and remove the cgroup once its processes are gone;
        False if some were still there at ``timeout`` (the directory is left)."""
        deadline = time.monotonic() + timeout
        pending = list(self.dirs.values())
        while pending:
            # No freezing here: this runs on a reaper thread that the worker's
            # exit may stop at any point, and the first kill already froze out
            # forks; what is left is dying.
            self.kill(freeze=False)
            for path in list(pending):
                try:
                    path.rmdir()
                    pending.remove(path)
                except FileNotFoundError:
                    pending.remove(path)
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        pending.remove(path)
            if pending:
                if time.monotonic() > deadline:
                    return False
                # Exiting tasks leave within milliseconds of their SIGKILL; the
                # kernel offers no wait for "cgroup empty" on v1.
                time.sleep(0.01)
        return True
