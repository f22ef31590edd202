"""``slaq`` for a researcher's daily use (issue 38, items 7, 8 and 11):
find runs, label and delete them, pause and resume, download the model and
the history, held-out metrics in ``status``; real subprocesses against a
real API on both databases."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Job, JobStatus, LossRecord
from tests.utils.portal import ROOT, Portal, make_user_token, running_portal

# The command line is the subject; test_find_and_label_runs covers both databases.
pytestmark = pytest.mark.one_database

QUEUED = {"algorithm": "logistic_regression", "dataset": "digits",
          "stopping": {"max_iterations": 100_000, "tolerance": None}}


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("cli-runs")
    with running_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                        workers=0) as running:
        yield running


@pytest.fixture(scope="module")
def token(portal: Portal) -> str:
    return make_user_token(portal.db_url, tenant="shell", email="sam@shell.test")


@pytest.fixture
def api(portal: Portal, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


def slaq(portal: Portal, token: str, *args: str,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SLAQ_URL", "SLAQ_TOKEN")}
    env.update({"SLAQ_URL": portal.base_url, "SLAQ_TOKEN": token, "HOME": str(portal.data_dir)})
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT, env=env,
                          input=stdin if stdin is not None else "", capture_output=True,
                          text=True, timeout=120, check=False)


def _submit(api: httpx.Client, name: str) -> int:
    resp = api.post("/api/v1/jobs", json={**QUEUED, "name": name})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


def _finish(db_url: str, job_id: int, **values: object) -> None:
    """The job as a worker leaves it when it ends (tests of the CLI, not of training)."""
    with session_scope(engine_for(db_url)) as session:
        session.execute(update(Job).where(col(Job.id) == job_id).values(
            status=JobStatus.completed, iterations_done=100, **values))
        session.commit()


def test_find_label_and_read_runs(portal: Portal, token: str, api: httpx.Client) -> None:
    keep = _submit(api, "adam keep")
    other = _submit(api, "sgd other")
    labelled = slaq(portal, token, "label", str(keep), "--name", "adam lr 0.1",
                    "--tag", "keep,baseline", "--note", "-", stdin="clipped grads\nv2")
    assert labelled.returncode == 0, labelled.stderr
    assert "adam lr 0.1" in labelled.stdout and "baseline, keep" in labelled.stdout

    tagged = slaq(portal, token, "status", "--tag", "keep")
    assert tagged.returncode == 0, tagged.stderr
    assert f"\n{keep} " in tagged.stdout and f"\n{other} " not in tagged.stdout
    assert "baseline,keep" in tagged.stdout
    assert f"\n{other} " in slaq(portal, token, "status", "--search", "SGD").stdout
    assert "no jobs match" in slaq(portal, token, "status", "--algorithm", "kmeans").stdout

    _finish(portal.db_url, other, last_eval={"iteration": 100, "val_accuracy": 0.91,
                                             "val_loss": 0.3})
    by_accuracy = slaq(portal, token, "status", "--sort=-metric:val_accuracy")
    first_row = by_accuracy.stdout.splitlines()[1]
    assert first_row.startswith(f"{other} ") and "val_accuracy=0.91" in first_row, \
        by_accuracy.stdout
    detail = slaq(portal, token, "status", str(other)).stdout
    assert "held-out:" in detail and "val_accuracy=0.91, val_loss=0.3 (iteration" in detail
    note = slaq(portal, token, "status", str(keep)).stdout
    assert "tags:" in note and "clipped grads" in note

    bad = slaq(portal, token, "status", "--sort", "colour")
    assert bad.returncode == 1 and "sort 'colour' is not known" in bad.stderr


def test_pause_resume_and_downloads(portal: Portal, token: str, api: httpx.Client,
                                    tmp_path: Path) -> None:
    job = _submit(api, "to pause")
    paused = slaq(portal, token, "pause", str(job))
    assert paused.returncode == 0 and f"job {job} paused" in paused.stdout, paused.stderr
    assert api.get(f"/api/v1/jobs/{job}").json()["status"] == "paused"
    again = slaq(portal, token, "pause", str(job))
    assert again.returncode == 1 and f"job {job}:" in again.stderr
    resumed = slaq(portal, token, "resume", str(job))
    assert resumed.returncode == 0 and f"job {job} queued" in resumed.stdout

    done = _submit(api, "trained")
    with session_scope(engine_for(portal.db_url)) as session:
        session.add_all(LossRecord(job_id=done, iteration=i, loss=1.0 / i, seconds=0.01)
                        for i in range(1, 4))
        session.commit()
    _finish(portal.db_url, done, checkpoint_iteration=3)
    folder = portal.data_dir / "checkpoints" / str(done)
    folder.mkdir(parents=True)
    (folder / f"{3:012d}.ckpt").write_bytes(b"trained state")
    saved = slaq(portal, token, "checkpoint", str(done), "-o", str(tmp_path))
    assert saved.returncode == 0, saved.stderr
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].read_bytes() == b"trained state"
    assert files[0].name.startswith(f"job-{done}-iteration-3")
    csv = slaq(portal, token, "export", str(done))
    assert csv.returncode == 0, csv.stderr
    lines = csv.stdout.splitlines()
    assert lines[0].startswith("iteration,loss") and lines[1].startswith("1,1")
    missing = slaq(portal, token, "checkpoint", str(job))
    assert missing.returncode == 1 and "no checkpoint yet" in missing.stderr


def test_delete_asks_and_is_tenant_scoped(portal: Portal, token: str,
                                          api: httpx.Client) -> None:
    job = _submit(api, "to delete")
    unconfirmed = slaq(portal, token, "delete", str(job))
    assert unconfirmed.returncode == 2 and "add --yes" in unconfirmed.stderr
    active = slaq(portal, token, "delete", str(job), "--yes")
    assert active.returncode == 1 and "cancel it first" in active.stderr
    api.post(f"/api/v1/jobs/{job}/cancel")
    stranger = make_user_token(portal.db_url, tenant="strangers", email="st@strangers.test")
    assert slaq(portal, stranger, "delete", str(job), "--yes").returncode == 1
    assert slaq(portal, stranger, "label", str(job), "--name", "x").returncode == 1
    deleted = slaq(portal, token, "delete", str(job), "--yes")
    assert deleted.returncode == 0 and f"deleted job {job}" in deleted.stdout
    assert api.get(f"/api/v1/jobs/{job}").status_code == 404


def test_code_and_text_uploads(portal: Portal, token: str, tmp_path: Path) -> None:
    refused = slaq(portal, token, "code", "upload",
                   str(ROOT / "tests" / "fixtures" / "trainers" / "logistic.py"))
    assert refused.returncode == 1 and "may not upload trainer code" in refused.stderr
    coder = make_user_token(portal.db_url, tenant="coders", email="cy@coders.test",
                            allow_code_uploads=True)
    uploaded = slaq(portal, coder, "code", "upload",
                    str(ROOT / "tests" / "fixtures" / "trainers" / "logistic.py"),
                    "--name", "my-logistic")
    assert uploaded.returncode == 0, uploaded.stderr
    algorithm = uploaded.stdout.split()[0]
    assert algorithm.startswith("code:")
    listed = slaq(portal, coder, "code", "list")
    assert algorithm in listed.stdout and "my-logistic" in listed.stdout

    text = tmp_path / "poems.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    done = slaq(portal, token, "upload", str(text), "--task", "text")
    assert done.returncode == 0, done.stderr
    assert "(text)" in done.stdout and "poems" in done.stdout
    assert "poems" in slaq(portal, token, "datasets").stdout
