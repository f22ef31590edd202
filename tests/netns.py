"""Hosts for tests made of Linux network namespaces: each has its own
addresses, ports and hostname, and they reach each other (and the test, in
the root namespace) over veth pairs plugged into one bridge.

::

    root namespace: bridge slaqt-<id>-br  10.213.K.254/24
        ├── veth slaqt-<id>-a  <->  eth0 in netns slaqt-<id>-a  10.213.K.1
        ├── veth slaqt-<id>-b  <->  eth0 in netns slaqt-<id>-b  10.213.K.2
        └── ...

Everything made here carries the prefix ``slaqt-<id>-`` where ``<id>`` is
the creating process's pid in hex, so a later run can remove what a killed
run left behind (:func:`remove_leftovers`) without touching a run in
progress. The filesystem is shared by all hosts, as on NFS.

Processes started with :meth:`Host.spawn` run in the host's namespace with
the host's own hostname (a UTS namespace), in a process group of their own;
:func:`network` kills whatever still runs in its namespaces on the way out.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "slaqt"
"""Every namespace, link and temporary directory made here starts with this."""
SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")
"""The /24 of a network is the first of these that no local address or route overlaps."""
_OWNED = re.compile(rf"^{PREFIX}-([0-9a-f]+)-")


def run_id(pid: int | None = None) -> str:
    """The ``<id>`` in this process's names: its pid in hex (6 digits at most)."""
    return f"{os.getpid() if pid is None else pid:x}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=30)


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces, veth pairs and a bridge"
    for tool in ("ip", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"needs the '{tool}' command (iproute2 / util-linux)"
    probe = f"{PREFIX}-{run_id()}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' is unavailable here: {made.stderr.strip()}"
    try:
        ran = subprocess.run(["ip", "netns", "exec", probe, "unshare", "--uts", "true"],
                             capture_output=True, text=True, timeout=30)
        if ran.returncode != 0:
            return f"'ip netns exec ... unshare --uts' fails here: {ran.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_names() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_names() -> list[str]:
    out = _ip("-o", "link", "show", check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def _netns_pids(netns: str) -> list[int]:
    out = _ip("netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill_netns_processes(netns: str, grace: float = 3.0, timeout: float = 5.0) -> list[int]:
    """Stop every process still running in ``netns``: SIGINT first (PostgreSQL's
    fast shutdown, which also removes its shared memory), SIGKILL for whatever
    is left after ``grace`` seconds. Returns their pids."""
    signalled: list[int] = []
    deadline = time.monotonic() + grace + timeout
    sig = signal.SIGINT
    kill_after = time.monotonic() + grace
    while True:
        pids = [p for p in _netns_pids(netns) if p != os.getpid()]
        if not pids or time.monotonic() > deadline:
            return signalled
        if sig == signal.SIGINT and time.monotonic() > kill_after:
            sig = signal.SIGKILL
        for pid in pids:
            if sig == signal.SIGINT and pid in signalled:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if pid not in signalled:
                signalled.append(pid)
        time.sleep(0.05)


def _delete_netns(netns: str) -> None:
    kill_netns_processes(netns)
    _ip("netns", "del", netns, check=False)


def remove_leftovers() -> list[str]:
    """Remove namespaces, links and temporary directories that runs whose
    process is gone left behind (a run killed before its clean-up); returns
    what was removed. Those of a live run, this one included, are kept."""
    removed: list[str] = []

    def dead(name: str) -> bool:
        match = _OWNED.match(name)
        return match is not None and not _alive(int(match.group(1), 16))

    for netns in _netns_names():
        if dead(netns):
            _delete_netns(netns)
            removed.append(f"netns {netns}")
    for link in _link_names():
        if dead(link):
            _ip("link", "del", link, check=False)
            removed.append(f"link {link}")
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}-*"):
        if dead(path.name):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"dir {path}")
    return removed


def owned_now() -> list[str]:
    """This process's namespaces, links and temporary directories still present."""
    mine = f"{PREFIX}-{run_id()}-"
    found = [f"netns {n}" for n in _netns_names() if n.startswith(mine)]
    found += [f"link {n}" for n in _link_names() if n.startswith(mine)]
    found += [f"dir {p}" for p in Path(tempfile.gettempdir()).glob(f"{mine}*")]
    return found


def temp_dir(label: str) -> Path:
    """A temporary directory named for this run, so leftovers can be found."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}-{run_id()}-{label}-"))


def _free_subnet() -> ipaddress.IPv4Network:
    used: list[ipaddress.IPv4Network] = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for token in _ip(*args, check=False).stdout.split():
            with contextlib.suppress(ValueError):
                net = ipaddress.ip_network(token, strict=False)
                if isinstance(net, ipaddress.IPv4Network) and token[0].isdigit():
                    used.append(net)
    subnets = list(SUPERNET.subnets(new_prefix=24))
    start = os.getpid() % len(subnets)
    for candidate in subnets[start:] + subnets[:start]:
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise RuntimeError(f"no free /24 in {SUPERNET}")


@dataclass
class Host:
    """One namespace: a name, its address on the bridge and its link."""

    name: str
    netns: str
    hostname: str
    address: str
    link: str
    """The root-side end of the host's veth pair: down cuts the host off."""

    def command(self, argv: Sequence[str], user: str | None = None) -> list[str]:
        """``argv`` run in this host: its network namespace, its hostname and,
        with ``user``, that user's uid, gid and groups. Every step execs the
        next, so the pid of the process started is the pid of ``argv``."""
        inner = list(argv)
        if user is not None:
            inner = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *inner]
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname, *inner]

    def spawn(self, argv: Sequence[str], *, env: dict[str, str], log: Path,
              cwd: Path | None = None, user: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` in this host in a new session (its own process
        group), with stdout and stderr appended to ``log``."""
        with log.open("ab") as out:
            return subprocess.Popen(self.command(argv, user), env=env, cwd=cwd, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    def cut(self) -> None:
        """Take the host's link down: nothing reaches it or leaves it any more."""
        _ip("link", "set", self.link, "down")

    def reconnect(self) -> None:
        _ip("link", "set", self.link, "up")

    def pids(self) -> set[int]:
        """Every process running in the host's namespace."""
        return set(_netns_pids(self.netns))


@dataclass
class Network:
    bridge: str
    subnet: ipaddress.IPv4Network
    gateway: str
    """The root namespace's address on the bridge (where the test talks from)."""
    hosts: dict[str, Host] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]


def _build(net: Network, names: Sequence[str]) -> None:
    hosts = list(net.subnet.hosts())
    _ip("link", "add", net.bridge, "type", "bridge")
    _ip("addr", "add", f"{net.gateway}/{net.subnet.prefixlen}", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")
    for index, name in enumerate(names):
        base = f"{PREFIX}-{run_id()}-{name}"
        host = Host(name=name, netns=base, hostname=f"{PREFIX}-{name}",
                    address=str(hosts[index]), link=base)
        _ip("netns", "add", host.netns)
        net.hosts[name] = host
        peer = f"{base}p"
        _ip("link", "add", host.link, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", host.netns)
        _ip("link", "set", host.link, "master", net.bridge)
        _ip("link", "set", host.link, "up")
        inside = ("ip", "netns", "exec", host.netns, "ip")
        for args in (("link", "set", "lo", "up"),
                     ("link", "set", peer, "name", "eth0"),
                     ("addr", "add", f"{host.address}/{net.subnet.prefixlen}", "dev", "eth0"),
                     ("link", "set", "eth0", "up")):
            subprocess.run([*inside, *args], check=True, capture_output=True, timeout=30)


def _teardown(net: Network) -> None:
    for host in net.hosts.values():
        _delete_netns(host.netns)  # takes the veth pair with it
        _ip("link", "del", host.link, check=False)  # in case the namespace was not made
    _ip("link", "del", net.bridge, check=False)


@contextmanager
def network(names: Sequence[str]) -> Iterator[Network]:
    """Hosts named ``names`` on one bridge, removed on the way out with every
    process still running in them, whatever happened inside the block."""
    if len(run_id()) > 6:
        raise RuntimeError("pid too large for 15-character interface names")
    subnet = _free_subnet()
    net = Network(bridge=f"{PREFIX}-{run_id()}-br", subnet=subnet,
                  gateway=str(subnet.network_address + 254))
    try:
        _build(net, names)
        yield net
    finally:
        _teardown(net)
