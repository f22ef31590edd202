"""Starting one bubblewrap sandbox for one chunk of tenant code, and ending it.

The sandbox sees read-only system paths (``/usr``, the Python installation, the
virtualenv's site-packages), the child entry script and the trainer contract,
and a private tmpfs ``/work``; nothing of the portal's repository, data
directory, checkpoints, uploads or database. It has no network (a fresh
network namespace has only a downed loopback), its own pid/ipc/uts
namespaces, an environment without the worker's variables, and runs as an
unprivileged uid of its own. Memory (every page it holds: processes, memfds,
tmpfs (its /work, /tmp and /dev/shm are private ones), shared memory, page
cache it dirties) and processes are bounded by a
cgroup of its own (``cgroup.py``) that the launcher joins before bubblewrap
starts; core dumps and (as a second line) processes by rlimits set
before the interpreter starts, so tenant code cannot lift them. There is no
CPU-time rlimit: a sandbox may stay resident for hours, and each call has a
deadline instead. States cross in a memfd shared with the worker, not the pipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from workers.sandbox import cgroup, gpu

HERE = Path(__file__).resolve().parent
CHILD_SCRIPT = HERE / "child.py"
CONTRACT = HERE.parent / "trainers" / "contract.py"
LOOP = HERE.parent / "trainers" / "loop.py"
PACKAGE_INIT = HERE / "package_init.py"
"""The package ``slaq_trainer`` tenant code imports: these three files."""
OUTPUT_TAIL_BYTES = 64 * 1024
PIPE_BYTES = 1 << 20
"""Linux's default /proc/sys/fs/pipe-max-size; a smaller cap leaves the default 64 KiB."""
# Unprivileged uids for sandboxes: one per sandbox so each has its own process
# count, far above any uid a distribution hands out.
UID_BASE = 3_000_000
UID_SPAN = 1_000_000


# Joins the sandbox's cgroup(s), then becomes bubblewrap: everything the
# sandbox ever starts is inside from its first instruction, with no window in
# which a fork could stay outside. (A preexec_fn would do the same in Python,
# but is unsafe in a threaded worker.)
JOIN_CGROUP = ('pid=$$; while [ "$1" != -- ]; do echo "$pid" > "$1" || exit 125; shift; done; '
               'shift; exec "$@"')
NO_CGROUP_HINT = ("; set SANDBOX_REQUIRE_CGROUP=false only on a development machine "
                  "(sandboxes then have no memory or process limit)")


class SandboxUnavailable(RuntimeError):
    """bubblewrap, a helper it needs, or a usable cgroup is missing on this worker."""


@dataclass(frozen=True)
class SandboxLimits:
    memory_mib: int = 4096
    """Everything one sandbox holds, by cgroup; also the basis of the state cap."""
    max_processes: int = 64
    """Processes and threads (cgroup ``pids.max``; torch and CUDA start a dozen threads)."""
    work_mib: int = 1024
    """Size of the private ``/work`` and ``/tmp`` tmpfs (each; inside the memory limit)."""
    preimport: tuple[str, ...] = ("numpy", "torch")
    """Modules a started sandbox imports before any tenant code is in it (if installed)."""
    gpus: tuple[int, ...] = ()
    """Minor numbers of the slot's GPUs whose device nodes the sandbox gets."""
    cgroup_parent: str = ""
    require_cgroup: bool = True
    env: tuple[tuple[str, str], ...] = field(default=())
    """Extra environment (tests); not for secrets."""


@dataclass(frozen=True)
class _Binary:
    bwrap: str
    prlimit: str
    setpriv: str


def _binaries() -> _Binary:
    found = {name: shutil.which(name) for name in ("bwrap", "prlimit", "setpriv")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise SandboxUnavailable(
            f"tenant code needs {', '.join(missing)} on the worker (Debian: apt-get install "
            "bubblewrap util-linux); this worker cannot run uploaded trainers")
    return _Binary(bwrap=str(found["bwrap"]), prlimit=str(found["prlimit"]),
                   setpriv=str(found["setpriv"]))


@lru_cache(maxsize=4)
def cgroup_host(parent: str) -> cgroup.CgroupHost:
    """This worker's cgroup layout, found once per process and parent (and
    cleared of what dead workers left)."""
    host = cgroup.detect(parent=parent)
    cgroup.sweep(host)
    return host


def sandbox_cgroup(limits: SandboxLimits) -> cgroup.SandboxCgroup | None:
    """A fresh cgroup with the sandbox's limits; None only where the operator
    turned the requirement off and the host has none."""
    try:
        host = cgroup_host(limits.cgroup_parent)
        return cgroup.SandboxCgroup(host, limits.memory_mib * 1024 * 1024,
                                    limits.max_processes)
    except (cgroup.CgroupUnavailable, OSError) as exc:
        if not limits.require_cgroup:
            return None
        raise SandboxUnavailable(
            f"tenant code needs a cgroup for its memory and process limits: {exc}; this "
            f"worker cannot run uploaded trainers{NO_CGROUP_HINT}") from None


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for name in ("/etc/ld.so.cache", "/etc/localtime"):
        args += ["--ro-bind-try", name, name]
    return args


def _python_binds() -> tuple[list[str], str]:
    """Binds for the interpreter and the virtualenv's libraries; the interpreter path."""
    python = os.path.realpath(sys.executable)
    args: list[str] = []
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr"):
        args += ["--ro-bind", prefix, prefix]
    if not python.startswith(("/usr/", prefix + "/")):
        args += ["--ro-bind", python, python]
    purelib = os.path.realpath(sysconfig.get_path("purelib"))
    platlib = os.path.realpath(sysconfig.get_path("platlib"))
    args += ["--ro-bind", purelib, "/sandbox/site-packages"]
    if platlib != purelib:
        args += ["--ro-bind", platlib, "/sandbox/site-packages-plat"]
    return args, python


def _parent_dirs(binds: list[str]) -> list[str]:
    """World-readable directories above each bind target: bubblewrap would
    otherwise create them 0700, which the unprivileged uid cannot enter."""
    targets = [binds[i + 2] for i, arg in enumerate(binds)
               if arg in ("--ro-bind", "--ro-bind-try")]
    parents: list[str] = []
    for target in targets:
        for ancestor in reversed(Path(target).parents):
            text = str(ancestor)
            if text != "/" and text not in parents and not text.startswith("/usr"):
                parents.append(text)
    args: list[str] = []
    for parent in parents:
        args += ["--perms", "0755", "--dir", parent]
    return args


ENVIRONMENT = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/work",
    # The sandbox's uid has no passwd entry; libraries that ask for a user
    # name (getpass.getuser(), as torch's compile caches do) read these first.
    "USER": "tenant",
    "LOGNAME": "tenant",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",
    # One thread each: threads count against the process limit, and a chunk
    # gets one CPU slot from the scheduler.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The whole environment tenant code sees; nothing of the worker's."""


def sandbox_command(limits: SandboxLimits, fds: tuple[int, int, int], uid: int) -> list[str]:
    """The bubblewrap command line; ``fds`` are the child's request, reply and
    state fds (inherited as they are)."""
    tools = _binaries()
    python_binds, python = _python_binds()
    gpus = gpu.gpu_binds(limits.gpus)
    work = str(limits.work_mib * 1024 * 1024)
    cmd = [tools.bwrap,
           "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--hostname", "sandbox",
           "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in {**ENVIRONMENT, **gpus.env, **dict(limits.env)}.items():
        cmd += ["--setenv", key, value]
    own_binds = ["--ro-bind", str(CHILD_SCRIPT), "/sandbox/child.py",
                 "--ro-bind", str(PACKAGE_INIT), "/sandbox/lib/slaq_trainer/__init__.py",
                 "--ro-bind", str(CONTRACT), "/sandbox/lib/slaq_trainer/contract.py",
                 "--ro-bind", str(LOOP), "/sandbox/lib/slaq_trainer/loop.py"]
    binds = _system_binds() + python_binds + own_binds + gpus.args
    # /dev first: the GPU nodes are bound into it, and a later --dev would hide them.
    cmd += ["--dev", "/dev"] + _parent_dirs(binds) + binds
    cmd += ["--proc", "/proc",
            # POSIX shared memory (torch's DataLoader workers use it), private
            # like /tmp and, like everything else, inside the memory limit.
            "--perms", "1777", "--size", work, "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", work, "--tmpfs", "/tmp",
            "--perms", "0777", "--size", work, "--tmpfs", "/work",
            "--remount-ro", "/", "--chdir", "/work", "--"]
    # No file-size or address-space rlimit: files live in tmpfs inside the
    # memory limit, and a state file may rightly be gigabytes. The cgroup's
    # pids.max bounds processes; RLIMIT_NPROC is a second line should the
    # cgroup requirement be turned off.
    cmd += [tools.prlimit, f"--nproc={limits.max_processes}", "--core=0", "--"]
    if os.geteuid() == 0:
        # Drop root inside the sandbox: as root the kernel would ignore the
        # process limit, and capabilities would outlive the namespaces.
        cmd += [tools.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    cmd += [python, "-I", "-S", "-B", "/sandbox/child.py", *(str(fd) for fd in fds),
            ",".join(limits.preimport)]
    if os.geteuid() != 0:
        # Unprivileged worker: bubblewrap needs a user namespace of its own.
        cmd.insert(1, "--unshare-user")
    return cmd


class OutputTail:
    """Drains the child's stdout/stderr so it never blocks, keeping the last bytes.

    A thread reads as output arrives; ``text()`` first takes whatever is
    already in the pipe, so output written before the child's last reply is
    never missed (the child runs unbuffered).
    """

    def __init__(self, fd: int, limit: int = OUTPUT_TAIL_BYTES) -> None:
        self.fd = fd
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0
        self.eof = False
        self.lock = threading.Lock()
        os.set_blocking(fd, False)
        self.thread = threading.Thread(target=self._drain, daemon=True, name="sandbox-output")
        self.thread.start()

    def _read_available(self) -> None:
        """Append what the pipe holds now; call with the lock held."""
        while not self.eof:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                return
            self.data += chunk
            excess = len(self.data) - self.limit
            if excess > 0:
                del self.data[:excess]
                self.dropped += excess

    def _drain(self) -> None:
        while True:
            try:
                select.select([self.fd], [], [])
            except (OSError, ValueError):
                return
            with self.lock:
                self._read_available()
                if self.eof:
                    os.close(self.fd)
                    return

    def text(self) -> str:
        with self.lock:
            self._read_available()
            body = self.data.decode("utf-8", "replace")
            dropped = self.dropped
        if dropped:
            return f"[... {dropped} earlier bytes not kept ...]\n{body}"
        return body


class SandboxProcess:
    """One running sandbox: pipes to its child, the state memfd, its cgroup,
    its output tail, and how to end it."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self.uid = UID_BASE + secrets.randbelow(UID_SPAN)
        self.cgroup = sandbox_cgroup(limits)
        # States cross here, not through the pipe: one copy each way, no framing.
        # No sealing allowed, so tenant code cannot freeze it against the worker.
        self.state_fd = os.memfd_create("slaq-sandbox-state", os.MFD_CLOEXEC)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        out_r, out_w = os.pipe()
        for fd in (to_child_w, from_child_w):
            # Data are megabytes: big pipes mean few wake-ups per transfer.
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self.spawned_at = time.monotonic()
        try:
            cmd = sandbox_command(limits, (to_child_r, from_child_w, self.state_fd), self.uid)
            if self.cgroup is not None:
                cmd = ["/bin/sh", "-c", JOIN_CGROUP, "sh", *self.cgroup.procs_files, "--", *cmd]
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                pass_fds=(to_child_r, from_child_w, self.state_fd), close_fds=True,
                start_new_session=True, env={"PATH": "/usr/bin:/bin"})
        except BaseException:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w, out_r, out_w,
                       self.state_fd):
                os.close(fd)
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        for fd in (to_child_r, from_child_w, out_w):
            os.close(fd)
        os.set_blocking(to_child_w, False)
        os.set_blocking(from_child_r, False)
        self.write_fd = to_child_w
        self.read_fd = from_child_r
        self.output = OutputTail(out_r)
        self.closed = False

    def exit_description(self) -> str | None:
        """How the sandbox ended, or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        if code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with status {code}"

    def oom_killed(self) -> bool:
        """Whether the kernel has killed anything in the sandbox for its memory limit."""
        return self.cgroup is not None and self.cgroup.oom_kills() > 0

    def kill(self, *, wait: bool = True) -> None:
        """End the sandbox and everything in it; idempotent. With ``wait=False``
        the process is reaped (and its cgroup removed) by a background thread,
        off the chunk's path."""
        if self.closed:
            return
        self.closed = True
        # bwrap leads its own process group; the pid namespace takes every
        # process inside down with its init, --die-with-parent backs that up,
        # and the cgroup catches anything that slipped out of both.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()
        for fd in (self.write_fd, self.read_fd, self.state_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        if wait:
            self._reap()
        else:
            threading.Thread(target=self._reap, daemon=True, name="sandbox-reaper").start()

    def _reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.cgroup is not None:
            self.cgroup.remove()
        self.output.thread.join(2)
