"""Sandbox cgroups on a cgroup v2 layout, in a directory laid out like one.

The v1 hierarchies are exercised for real by the sandbox integration tests
on hosts that have them; hosts in production usually have v2, so its paths
are checked here against the files the kernel would show.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from workers.sandbox import cgroup


def _v2(tmp_path: Path, own: str = "/workers", controllers: str = "cpu memory pids") -> Path:
    mount = tmp_path / "cgroup"
    (mount / own.strip("/")).mkdir(parents=True)
    for where in (mount, mount / own.strip("/")):
        (where / "cgroup.controllers").write_text(controllers + "\n")
        (where / "cgroup.subtree_control").write_text("")
    (tmp_path / "self-cgroup").write_text(f"0::{own}\n")
    return mount


def _detect(tmp_path: Path, parent: str = "") -> cgroup.CgroupHost:
    return cgroup.detect(tmp_path / "cgroup", parent, tmp_path / "self-cgroup")


def test_v2_sandboxes_go_under_the_workers_cgroup_with_controllers_enabled(
        tmp_path: Path) -> None:
    mount = _v2(tmp_path)
    host = _detect(tmp_path)
    assert host.version == 2
    assert host.parents == {"unified": mount / "workers" / cgroup.SANDBOXES_DIR}
    assert (mount / "workers" / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (host.parents["unified"] / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_v2_limits_are_written_before_any_process_joins(tmp_path: Path) -> None:
    _v2(tmp_path)
    host = _detect(tmp_path)
    box = cgroup.SandboxCgroup(host, 512 * 1024 * 1024, 24)
    where = box.dirs["unified"]
    assert (where / "memory.max").read_text() == str(512 * 1024 * 1024)
    assert (where / "memory.oom.group").read_text() == "1"
    assert (where / "pids.max").read_text() == "24"
    assert box.procs_files == [str(where / "cgroup.procs")]
    assert box.oom_kills() == 0
    (where / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    assert box.oom_kills() == 1


def test_a_named_parent_wins_over_the_workers_own_cgroup(tmp_path: Path) -> None:
    mount = _v2(tmp_path)
    (mount / "delegated").mkdir()
    (mount / "delegated" / "cgroup.controllers").write_text("memory pids\n")
    (mount / "delegated" / "cgroup.subtree_control").write_text("memory pids\n")
    host = _detect(tmp_path, parent="/delegated")
    assert host.parents["unified"] == mount / "delegated" / cgroup.SANDBOXES_DIR


def test_v2_without_the_memory_controller_is_refused_with_what_to_do(tmp_path: Path) -> None:
    _v2(tmp_path, controllers="cpu pids")
    with pytest.raises(cgroup.CgroupUnavailable, match="memory controller.*SANDBOX_CGROUP_PARENT"):
        _detect(tmp_path)


def test_no_cgroup_filesystem_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cgroup").mkdir()
    (tmp_path / "self-cgroup").write_text("0::/\n")
    with pytest.raises(cgroup.CgroupUnavailable, match="no cgroup v2"):
        _detect(tmp_path)


def test_sweep_removes_what_dead_workers_left_and_nothing_else(tmp_path: Path) -> None:
    _v2(tmp_path)
    host = _detect(tmp_path)
    parent = host.parents["unified"]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = cgroup._pid_namespace()
    left = parent / f"sandbox-{here}-{dead.pid}-0123456789ab"
    ours = parent / f"sandbox-{here}-{os.getpid()}-0123456789ab"
    # Another container's worker, whose pids mean nothing here.
    elsewhere = parent / f"sandbox-1{here}-{dead.pid}-0123456789ab"
    for path in (left, ours, elsewhere):
        path.mkdir()
    assert cgroup.sweep(host) == 1
    assert not left.exists() and ours.exists() and elsewhere.exists()


def test_kill_ends_every_process_listed_in_the_cgroup(tmp_path: Path) -> None:
    _v2(tmp_path)
    box = cgroup.SandboxCgroup(_detect(tmp_path), 1 << 30, 8)
    # Without cgroup.kill (kernels before 5.14) every listed pid gets SIGKILL.
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(2)]
    (box.dirs["unified"] / "cgroup.procs").write_text(
        "".join(f"{p.pid}\n" for p in sleepers))
    box.kill()
    assert [p.wait(10) for p in sleepers] == [-signal.SIGKILL] * 2


@pytest.mark.skipif(not Path("/proc/self/cgroup").is_file() or os.geteuid() != 0,
                    reason="needs this host's cgroup filesystem, writable (root)")
def test_this_host_offers_a_cgroup_for_sandboxes() -> None:
    # The one real check: the integration tests' sandboxes depend on it.
    host = cgroup.detect()
    box = cgroup.SandboxCgroup(host, 256 * 1024 * 1024, 16)
    try:
        assert all(path.is_dir() for path in box.dirs.values())
        assert box.oom_kills() == 0
    finally:
        assert box.remove()
    assert not any(path.exists() for path in box.dirs.values())
