"""Only a worker that leads its session lowers the session's group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workers.priority import lower_session_group

SCRIPT = ("import sys; from pathlib import Path; from workers.priority import "
          "lower_session_group; print(lower_session_group(7, Path(sys.argv[1])))")


def _run(autogroup: Path, *, new_session: bool) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(autogroup)], capture_output=True,
                          text=True, check=True, start_new_session=new_session,
                          cwd=Path(__file__).resolve().parents[2])
    return done.stdout.strip()


def test_a_session_leader_lowers_its_group(tmp_path: Path) -> None:
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-1 nice 0\n")
    assert _run(group, new_session=True) == "True"
    assert group.read_text() == "7"


def test_a_process_inside_someone_elses_session_leaves_the_group_alone(tmp_path: Path) -> None:
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-1 nice 0\n")
    assert _run(group, new_session=False) == "False"
    assert group.read_text() == "/autogroup-1 nice 0\n"


def test_no_autogroup_no_change(tmp_path: Path) -> None:
    assert lower_session_group(7, tmp_path / "missing") is False
    assert lower_session_group(0, tmp_path / "missing") is False
