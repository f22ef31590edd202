"""The ``slaq`` client commands, run as real subprocesses against the real portal."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from backend.client import SlaqClient, SlaqError, describe_error
from tests.utils.portal import ROOT, Portal

# The client's commands and files are the subject; the API under them is
# tested on both databases elsewhere.
pytestmark = pytest.mark.one_database

EMAIL = "alice@team-a.test"  # created by the member_token fixture
PASSWORD = "pw-" + EMAIL


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def slaq(home: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("SLAQ_URL", "SLAQ_TOKEN", "XDG_CONFIG_HOME")}
    base.update({"HOME": str(home), **(env or {})})
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def signed_in(home: Path, portal: Portal, member_token: str) -> Path:
    done = slaq(home, "login", "--url", portal.base_url, "--email", EMAIL,
                "--password", PASSWORD)
    assert done.returncode == 0, done.stderr
    return home


def test_login_stores_a_private_token(home: Path, portal: Portal, member_token: str) -> None:
    done = slaq(home, "login", "--url", portal.base_url + "/", "--email", EMAIL,
                "--password", PASSWORD)
    assert done.returncode == 0, done.stderr
    assert "signed in" in done.stdout and EMAIL in done.stdout
    path = home / ".config" / "slaq" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())
    assert stored["url"] == portal.base_url
    assert stored["token"] not in done.stdout + done.stderr, "the token is never printed"
    with SlaqClient(stored["url"], stored["token"]) as client:
        assert client.me()["email"] == EMAIL


def test_wrong_password_and_missing_credentials(home: Path, portal: Portal,
                                                member_token: str) -> None:
    bad = slaq(home, "login", "--url", portal.base_url, "--email", EMAIL, "--password", "nope")
    assert bad.returncode == 1
    assert "error: wrong email or password" in bad.stderr
    assert not (home / ".config" / "slaq" / "credentials.json").exists()
    nothing = slaq(home, "status")
    assert nothing.returncode == 2 and "slaq login" in nothing.stderr


def test_submit_status_watch(signed_in: Path) -> None:
    done = slaq(signed_in, "submit", "logistic_regression", "iris", "--param",
                "learning_rate=0.1", "-p", "batch_size=32", "--max-iterations", "120",
                "--tolerance", "none", "--name", "from the cli")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())

    table = slaq(signed_in, "status")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["ID", "STATUS", "ALGORITHM"]
    assert any(line.split()[0] == str(job_id) for line in table.stdout.splitlines()[1:])

    watched = slaq(signed_in, "watch", str(job_id), timeout=150)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    lines = watched.stdout.splitlines()
    assert lines[0].startswith(f"job {job_id}: logistic_regression on iris")
    progress = [line for line in lines if line.startswith("iteration")]
    assert progress, watched.stdout
    assert "loss" in progress[0] and "%" in progress[0]
    assert progress[-1].split()[1] == "120/120" and "100%" in progress[-1]
    assert f"job {job_id} completed after 120 iterations" in lines[-1]

    one = slaq(signed_in, "status", str(job_id))
    assert one.returncode == 0
    assert "completed" in one.stdout and '"learning_rate": 0.1' in one.stdout
    as_json = json.loads(slaq(signed_in, "status", str(job_id), "--json").stdout)
    assert as_json["params"]["batch_size"] == 32 and as_json["name"] == "from the cli"
    assert as_json["stopping"]["tolerance"] is None


def test_submit_from_file_and_cancel(signed_in: Path, tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"algorithm": "mlp", "dataset": "digits",
                                "params": {"learning_rate": 0.05},
                                "stopping": {"max_iterations": 100000, "tolerance": None}}))
    done = slaq(signed_in, "submit", "--file", str(spec), "--seed", "3")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    cancelled = slaq(signed_in, "cancel", job_id)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"job {job_id} cancelled"
    again = slaq(signed_in, "cancel", job_id)
    assert again.returncode == 1 and "cannot cancel a job that is cancelled" in again.stderr
    watched = slaq(signed_in, "watch", job_id)
    assert watched.returncode == 1 and "cancelled" in watched.stdout.splitlines()[-1]


def test_errors_are_readable(signed_in: Path) -> None:
    bad = slaq(signed_in, "submit", "logistic_regression", "iris", "--param",
               "learning_rate=-1", "--param", "learning_rte=0.1")
    assert bad.returncode == 1
    errors = bad.stderr.splitlines()
    assert any(e.startswith("error: params.learning_rate: ") for e in errors), bad.stderr
    assert any(e.startswith("error: params.learning_rte: unknown parameter") for e in errors)
    unknown = slaq(signed_in, "submit", "gradient_magic", "iris")
    assert "error: algorithm: unknown algorithm 'gradient_magic'" in unknown.stderr
    usage = slaq(signed_in, "submit", "mlp", "iris", "--param", "oops")
    assert usage.returncode == 2 and "KEY=VALUE" in usage.stderr
    missing = slaq(signed_in, "status", "99999999")
    assert missing.returncode == 1 and "error: job 99999999 not found" in missing.stderr


def test_environment_overrides_the_file(signed_in: Path, portal: Portal) -> None:
    revoked = slaq(signed_in, "status", env={"SLAQ_TOKEN": "slaq_not-a-token"})
    assert revoked.returncode == 1
    assert "token is not valid" in revoked.stderr and "slaq login" in revoked.stderr
    nowhere = slaq(signed_in, "status", env={"SLAQ_URL": "http://127.0.0.1:9"})
    assert nowhere.returncode == 1 and "cannot reach http://127.0.0.1:9" in nowhere.stderr
    stored = json.loads((signed_in / ".config/slaq/credentials.json").read_text())
    fresh = Path(str(signed_in) + "-empty")
    only_env = slaq(fresh, "status", env={"SLAQ_URL": portal.base_url,
                                          "SLAQ_TOKEN": stored["token"]})
    assert only_env.returncode == 0, only_env.stderr


def test_upload_and_train_from_the_cli(signed_in: Path, tmp_path: Path) -> None:
    csv = tmp_path / "points.csv"
    csv.write_text("x,y,cls\n" + "".join(f"{i % 7},{(i * 3) % 5},{'ab'[i % 2]}\n"
                                         for i in range(40)))
    up = slaq(signed_in, "upload", str(csv), "--task", "classification")
    assert up.returncode == 0, up.stderr
    ref = up.stdout.split()[0]
    assert ref.startswith("upload:") and "40 rows, 2 features, 2 classes" in up.stdout
    listed = slaq(signed_in, "datasets")
    assert ref in listed.stdout and "points" in listed.stdout
    dup = slaq(signed_in, "upload", str(csv), "--task", "classification")
    assert dup.returncode == 1 and "exists already" in dup.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n" + "1,2\n" * 5 + "1,x\n" + "1,2\n" * 5)
    refused = slaq(signed_in, "upload", str(bad), "--task", "regression")
    assert "error: file: row 7, column 'b': 'x' is not a number" in refused.stderr
    job = slaq(signed_in, "submit", "linear_svm", ref, "--max-iterations", "30")
    assert job.returncode == 0, job.stderr
    assert slaq(signed_in, "watch", job.stdout.strip()).returncode == 0


def test_python_client(portal: Portal, member_token: str) -> None:
    with SlaqClient(portal.base_url, member_token) as client:
        job = client.submit({"algorithm": "kmeans", "dataset": "blobs",
                             "stopping": {"max_iterations": 10000, "tolerance": None}})
        assert client.job(job["id"])["status"] in ("queued", "running")
        assert client.pause(job["id"])["status"] == "paused"
        assert client.resume(job["id"])["status"] == "queued"
        assert client.cancel(job["id"])["status"] == "cancelled"
        assert job["id"] in [j["id"] for j in client.jobs(status="cancelled")["items"]]
        with pytest.raises(SlaqError) as info:
            client.submit({"algorithm": "kmeans", "dataset": "blobs", "seed": -1})
        assert info.value.status_code == 422 and str(info.value).startswith("seed: ")
    with SlaqClient(portal.base_url) as anonymous, pytest.raises(SlaqError) as info:
        anonymous.jobs()
    assert info.value.status_code == 401
    assert httpx.get(f"{portal.base_url}/api/v1/health").status_code == 200


def test_describe_error_shapes() -> None:
    detail = [{"loc": ["body", "params", "learning_rate"], "msg": "must be > 0"},
              {"loc": ["query", "limit"], "msg": "too big"}, "plain"]
    assert describe_error(422, detail) == ("params.learning_rate: must be > 0\n"
                                           "limit: too big\nplain")
    assert describe_error(409, {"quota": "x", "message": "quota reached"}) == "quota reached"
    assert describe_error(500, None) == "HTTP 500"
