"""PyTorch jobs over REST on real Celery workers: a CNN on digits and a
character transformer on an uploaded text train to completion; with every
worker process SIGKILLed mid-chunk they resume from their checkpoints with
each iteration stored once and every loss, per-iteration metric and
evaluation bit-for-bit equal to one uninterrupted run of the same trainer.
Also the text-upload path: a .txt dataset is stored, previewed, refused when
it is not usable text."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import func, select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Decision, MetricRecord
from tests.integration.test_end_to_end import stored_points, submit, wait_finished
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

pytest.importorskip("torch")
# What these check is the trainers' exact resume, not storage: the kill-and-
# resume tests of tests/integration/test_end_to_end.py run on both databases.
pytestmark = pytest.mark.one_database

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus" / "python_docstrings.txt"
CNN_ITERATIONS = 300
LM_ITERATIONS = 240
EVAL_EVERY = 50
CNN_SPEC: dict[str, Any] = {
    "algorithm": "torch_cnn", "dataset": "digits", "seed": 7,
    "params": {"channels": 8, "batch_size": 64, "learning_rate": 0.003},
    "stopping": {"max_iterations": CNN_ITERATIONS, "tolerance": None},
    "eval_every": EVAL_EVERY,
}
LM_PARAMS = {"context": 32, "d_model": 32, "n_heads": 2, "n_layers": 1, "batch_size": 8,
             "learning_rate": 0.003}


def _upload_text(api: httpx.Client, body: bytes, name: str) -> httpx.Response:
    return api.post("/api/v1/datasets", data={"name": name, "task": "text"},
                    files={"file": ("corpus.txt", body, "text/plain")})


def _metrics(db_url: str, job_id: int, split: str) -> dict[str, list[tuple[int, float]]]:
    with session_scope(engine_for(db_url)) as session:
        rows = session.execute(
            select(col(MetricRecord.name), col(MetricRecord.iteration), col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == split)
            .order_by(col(MetricRecord.name), col(MetricRecord.iteration))
        ).all()
    out: dict[str, list[tuple[int, float]]] = {}
    for name, iteration, value in rows:
        out.setdefault(str(name), []).append((int(iteration), float(value)))
    return out


def _chunks(db_url: str, job_id: int) -> int:
    with session_scope(engine_for(db_url)) as session:
        return int(session.execute(
            select(func.count()).select_from(Decision).where(col(Decision.job_id) == job_id)
        ).scalar_one())


def _kill_workers_mid_chunk(portal: Portal, api: httpx.Client, job_id: int) -> None:
    """SIGKILL every worker process while a chunk of ``job_id`` is streaming
    points past the last committed checkpoint."""
    client = portal.redis()
    stream = portal.keys.job_stream(job_id)

    def mid_chunk() -> bool:
        committed = api.get(f"/api/v1/jobs/{job_id}").json()["iterations_done"]
        last = cast(list[tuple[str, dict[str, str]]], client.xrevrange(stream, count=1))
        return bool(last) and int(last[0][1]["iteration"]) > committed + 2

    wait_until(mid_chunk, 120, "a chunk in flight", interval=0.02)
    victims = portal.kill_slots()
    assert victims


def _uninterrupted(job: dict[str, Any], data: Any, eval_at: list[int]
                   ) -> tuple[list[dict[str, float]], dict[int, dict[str, float]]]:
    """One trainer stepped from 0 to the job's end in this process, never
    checkpointed: its per-iteration metrics and its evaluations at ``eval_at``."""
    from workers.trainers.registry import make_trainer

    trainer = make_trainer(job["algorithm"], data, job["params"], job["seed"])
    steps: list[dict[str, float]] = []
    evaluations: dict[int, dict[str, float]] = {}
    total = job["stopping"]["max_iterations"]
    for stop in sorted({*eval_at, total}):
        steps += trainer.step(stop - trainer.iteration)
        if stop in eval_at:
            evaluations[stop] = trainer.evaluate()
    return steps, evaluations


def _assert_same_as_uninterrupted(portal: Portal, job: dict[str, Any], data: Any,
                                  train_metric: str) -> None:
    total = job["stopping"]["max_iterations"]
    points = stored_points(portal.db_url, job["id"])
    assert [i for i, _ in points] == list(range(1, total + 1)), "loss points lost or duplicated"
    train = _metrics(portal.db_url, job["id"], "train")
    assert [i for i, _ in train[train_metric]] == list(range(1, total + 1)), \
        f"{train_metric} points lost or duplicated"
    held = _metrics(portal.db_url, job["id"], "eval")
    eval_at = sorted({i for values in held.values() for i, _ in values})
    assert eval_at, "no evaluation stored"
    assert {i for i in range(EVAL_EVERY, total + 1, EVAL_EVERY)} <= set(eval_at)
    steps, evaluations = _uninterrupted(job, data, eval_at)
    # Bit for bit: losses are float32 values widened to float64 on both sides.
    assert [loss for _, loss in points] == [m["loss"] for m in steps]
    assert [v for _, v in train[train_metric]] == [m[train_metric] for m in steps]
    for name, values in held.items():
        assert values == [(i, evaluations[i][name]) for i, _ in values], name


def test_cnn_job_killed_mid_chunk_resumes_exactly(portal: Portal, api: httpx.Client) -> None:
    from workers.datasets import load_dataset
    from workers.trainers.data import holdout

    job = submit(api, **CNN_SPEC)
    assert job["params"]["kernel_size"] == 3, "defaults are filled from the schema"
    _kill_workers_mid_chunk(portal, api, job["id"])
    done = wait_finished(api, job["id"], timeout=300)
    assert done["status"] == "completed", done
    assert _chunks(portal.db_url, job["id"]) >= 2
    _assert_same_as_uninterrupted(portal, done, holdout(load_dataset("digits")), "accuracy")
    assert set(done["last_eval"]) == {"val_loss", "val_accuracy"}
    assert done["last_eval"]["val_accuracy"] > 0.5, "the CNN learned next to nothing"


def test_transformer_job_on_uploaded_text_killed_mid_chunk_resumes_exactly(
        portal: Portal, api: httpx.Client) -> None:
    from workers.datasets.text import split_text
    from workers.trainers.contract import TrainingData

    body = CORPUS.read_text(encoding="utf-8")[:40_000]
    uploaded = _upload_text(api, body.encode(), "docs-lm")
    assert uploaded.status_code == 201, uploaded.text
    dataset = uploaded.json()
    assert (dataset["task"], dataset["tasks"]) == ("text", ["text"])
    assert (dataset["rows"], dataset["columns"]) == (len(body), len(set(body)))
    job = submit(api, algorithm="char_transformer", dataset=dataset["dataset"], seed=3,
                 params=LM_PARAMS, eval_every=EVAL_EVERY,
                 stopping={"max_iterations": LM_ITERATIONS, "tolerance": None})
    _kill_workers_mid_chunk(portal, api, job["id"])
    done = wait_finished(api, job["id"], timeout=300)
    assert done["status"] == "completed", done
    assert _chunks(portal.db_url, job["id"]) >= 2
    train, validation = split_text(body)
    data = TrainingData(name=dataset["dataset"], task="text", text=train,
                        validation_text=validation)
    _assert_same_as_uninterrupted(portal, done, data, "bits_per_char")
    assert set(done["last_eval"]) == {"val_loss", "val_bits_per_char"}


def test_tabular_trainer_refuses_a_text_dataset(api: httpx.Client) -> None:
    body = CORPUS.read_text(encoding="utf-8")[:5_000].encode()
    uploaded = _upload_text(api, body, "docs-small")
    assert uploaded.status_code == 201, uploaded.text
    resp = api.post("/api/v1/jobs", json={"algorithm": "torch_cnn",
                                          "dataset": uploaded.json()["dataset"]})
    assert resp.status_code == 422, resp.text
    assert "text" in resp.text


def test_text_upload_preview_and_refusals(api: httpx.Client) -> None:
    body = "first line\r\nsecond line\n" * 40
    created = _upload_text(api, ("\ufeff" + body).encode(), "crlf-text")
    assert created.status_code == 201, created.text
    preview = api.get(f"/api/v1/datasets/{created.json()['id']}/preview")
    assert preview.status_code == 200, preview.text
    shown = preview.json()
    assert shown["text"].startswith("first line\nsecond line\nfirst line")
    assert shown["total_rows"] == len(body.replace("\r\n", "\n"))
    assert shown["columns"] == [] and shown["rows"] == []
    for bad, problem in ((b"caf\xe9 au lait " * 40, "UTF-8"), (b"\x00\x01\x02" * 200, "binary"),
                         (b"short", "at least")):
        refused = _upload_text(api, bad, "bad-text")
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "file"]
        assert problem in refused.json()["detail"][0]["msg"]
    wrong = api.post("/api/v1/datasets", data={"name": "x", "task": "poetry"},
                     files={"file": ("a.txt", b"abc", "text/plain")})
    assert wrong.status_code == 422 and "text" in wrong.json()["detail"][0]["msg"]
