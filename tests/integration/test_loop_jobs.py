"""Loop scripts (``train(params, data, ctx)``) as jobs on the real portal:
uploaded like trainer code, run in the sandbox by real Celery workers, on
both databases. The two examples of ``examples/loops`` train; a paused and
resumed job, and jobs that move between slots, store exactly the losses and
held-out metrics of one uninterrupted run of the same script in this process.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.db import engine_for
from backend.core.models import MetricRecord
from tests.integration.test_client_cli import slaq
from tests.integration.test_end_to_end import stored_points, submit, wait_finished
from tests.integration.test_residency import job_of, same_losses
from tests.utils.loop_scripts import EXAMPLES, load_loop_script
from tests.utils.portal import Portal, make_user_token, start_portal, token_client
from tests.utils.waiting import wait_until

DIGITS = EXAMPLES / "digits_loop.py"
PYTHON_DOCS = EXAMPLES / "python_docs_loop.py"
SMALL_GRU = {"context": 16, "hidden": 32, "batch_size": 16}


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """Two slots, with a lease long enough for a torch sandbox to start on a
    busy test machine (every move starts one: imports, warm-up, the script),
    and workers at normal priority: niced, they barely start on a machine
    whose other processes keep every core busy."""
    running = start_portal(data_dir=tmp_path_factory.mktemp("portal"), db_url=module_db_url,
                           redis_url=redis_url,
                           extra_env={"LEASE_SECONDS": "20", "WORKER_NICE": "0"})
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def token(portal: Portal) -> str:
    tenant = f"loops-{uuid.uuid4().hex[:6]}"
    return make_user_token(portal.db_url, tenant=tenant, email=f"dev@{tenant}.test",
                           allow_code_uploads=True)


@pytest.fixture(scope="module")
def api(portal: Portal, token: str) -> Iterator[httpx.Client]:
    with token_client(portal, token) as client:
        yield client


def upload(api: httpx.Client, script: Path) -> str:
    resp = api.post("/api/v1/code",
                    files={"file": (script.name, script.read_bytes(), "text/x-python")},
                    data={"name": f"{script.stem}-{uuid.uuid4().hex[:6]}"})
    assert resp.status_code == 201, resp.text
    assert resp.json()["contract"] == "loop", resp.json()
    return str(resp.json()["algorithm"])


def uninterrupted(script: Path, job: dict[str, Any]) -> tuple[list[float], dict[int, Any]]:
    """The job's losses and held-out metrics from one run of its script in this
    process, evaluated where the worker evaluates."""
    import torch

    from workers.datasets.text import load_text
    from workers.iterations import run_iterations
    from workers.stopping import StopRule
    from workers.trainers.contract import TrainingData

    torch.set_num_threads(1)  # as in the sandbox: the same sums in the same order
    if job["dataset"] == "python_docs":
        train, validation = load_text("python_docs")
        data = TrainingData(name="python_docs", task="text", text=train,
                            validation_text=validation)
    else:
        from workers.datasets import load_dataset
        from workers.trainers.data import holdout

        data = holdout(load_dataset(job["dataset"], job["dataset_params"]))
    cls = load_loop_script(script)
    trainer = cls(cls.Params.model_validate(job["params"]), data, job["seed"])
    total = job["stopping"]["max_iterations"]
    run = run_iterations(trainer, StopRule(max_iterations=total, tolerance=None), total,
                         lambda _run: True, eval_every=job["eval_every"])
    trainer.close()
    assert run.error is None, run.error
    return [p[1] for p in run.points], dict(run.evaluations)


def stored_evaluations(db_url: str, job_id: int) -> dict[int, dict[str, float]]:
    with Session(engine_for(db_url)) as session:
        rows = session.execute(
            select(col(MetricRecord.iteration), col(MetricRecord.name), col(MetricRecord.value))
            .where(col(MetricRecord.job_id) == job_id, col(MetricRecord.split) == "eval")
        ).all()
    found: dict[int, dict[str, float]] = {}
    for iteration, name, value in rows:
        found.setdefault(int(iteration), {})[name] = float(value)
    return found


def assert_reproduces(portal: Portal, script: Path, job: dict[str, Any]) -> None:
    losses, evaluations = uninterrupted(script, job)
    points = stored_points(portal.db_url, job["id"])
    assert [i for i, _ in points] == list(range(1, len(losses) + 1)), "points lost or repeated"
    assert [loss for _, loss in points] == same_losses(losses), job["id"]
    stored = stored_evaluations(portal.db_url, job["id"])
    assert sorted(stored) == sorted(evaluations)
    for iteration, metrics in evaluations.items():
        assert stored[iteration] == pytest.approx(metrics, rel=1e-12, abs=0), iteration


def test_digits_loop_paused_and_resumed_reproduces_one_run(
        portal: Portal, api: httpx.Client) -> None:
    iterations = 4000
    # Long enough (seconds on an idle machine) that the pause lands mid-run:
    # at 600 iterations the job could finish before the pause was read.
    job = submit(api, algorithm=upload(api, DIGITS), dataset="digits", seed=5, eval_every=50,
                 stopping={"max_iterations": iterations, "tolerance": None})
    wait_until(lambda: job_of(api, job["id"])["iterations_done"] >= 60, 120,
               "the loop to train past its first evaluation")
    assert api.post(f"/api/v1/jobs/{job['id']}/pause").status_code == 200
    paused = wait_until(
        lambda: (j := job_of(api, job["id"]))["status"] == "paused"
        and j["residency"]["checkpoint_iteration"] == j["iterations_done"] and j,
        60, "the paused loop's state to be written")
    assert 0 < paused["iterations_done"] < iterations
    assert api.post(f"/api/v1/jobs/{job['id']}/resume").status_code == 200
    done = wait_finished(api, job["id"], timeout=240)
    assert done["status"] == "completed", (done["error"], portal.log_tail())
    # Let go when paused, so resumed from its checkpoint in a new sandbox.
    assert done["residency"]["restores"] >= 2, done["residency"]
    assert_reproduces(portal, DIGITS, done)
    with Session(engine_for(portal.db_url)) as session:
        accuracy = session.execute(
            select(col(MetricRecord.iteration)).where(
                col(MetricRecord.job_id) == job["id"], col(MetricRecord.split) == "train",
                col(MetricRecord.name) == "accuracy")).scalars().all()
    assert sorted(accuracy) == list(range(1, iterations + 1))


def test_loops_that_take_turns_on_the_slots_reproduce_one_run(
        portal: Portal, api: httpx.Client) -> None:
    """Three loop jobs on two slots under fair sharing: they move between
    slots (a sandbox started, the state restored) and each stores exactly its
    uninterrupted run."""
    algorithm = upload(api, DIGITS)
    jobs = [submit(api, algorithm=algorithm, dataset="digits", seed=seed, eval_every=100,
                   stopping={"max_iterations": 400, "tolerance": None}) for seed in (1, 2, 3)]
    finished = [wait_finished(api, j["id"], timeout=300) for j in jobs]
    assert [j["status"] for j in finished] == ["completed"] * 3, (
        [j["error"] for j in finished], portal.log_tail())
    assert any(j["residency"]["restores"] > 1 for j in finished), "no loop ever moved"
    for job in finished:
        assert_reproduces(portal, DIGITS, job)


@pytest.mark.one_database  # the contracts compared; resumption runs on both databases above
def test_the_loop_and_the_same_model_as_a_trainer_store_the_same_run(
        portal: Portal, api: httpx.Client) -> None:
    """Both contracts through the same sandbox: the digits loop and its twin
    written as a Trainer (same network, optimiser and batch order)."""
    twin = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "digits_mlp.py"
    resp = api.post("/api/v1/code",
                    files={"file": (twin.name, twin.read_bytes(), "text/x-python")},
                    data={"name": f"digits-mlp-{uuid.uuid4().hex[:6]}"})
    assert resp.status_code == 201 and resp.json()["contract"] == "trainer", resp.text
    spec = {"dataset": "digits", "seed": 9, "eval_every": 50,
            "stopping": {"max_iterations": 200, "tolerance": None}}
    jobs = [submit(api, algorithm=algorithm, **spec)
            for algorithm in (resp.json()["algorithm"], upload(api, DIGITS))]
    done = [wait_finished(api, job["id"], timeout=240) for job in jobs]
    assert [j["status"] for j in done] == ["completed"] * 2, (
        [j["error"] for j in done], portal.log_tail())
    trainer, loop = (stored_points(portal.db_url, j["id"]) for j in done)
    assert len(trainer) == 200 and loop == trainer
    evaluations = [stored_evaluations(portal.db_url, j["id"]) for j in done]
    assert sorted(evaluations[0]) == [50, 100, 150, 200] and evaluations[1] == evaluations[0]


@pytest.mark.one_database  # the text loop; resumption runs on both databases above
def test_python_docs_loop_trains_a_language_model(portal: Portal, api: httpx.Client) -> None:
    job = submit(api, algorithm=upload(api, PYTHON_DOCS), dataset="python_docs", seed=2,
                 params=SMALL_GRU, eval_every=40,
                 stopping={"max_iterations": 120, "tolerance": None})
    done = wait_finished(api, job["id"], timeout=240)
    assert done["status"] == "completed", (done["error"], portal.log_tail())
    points = stored_points(portal.db_url, job["id"])
    assert points[-1][1] < points[0][1], "the model did not learn"
    assert sorted(stored_evaluations(portal.db_url, job["id"])) == [40, 80, 120]
    assert_reproduces(portal, PYTHON_DOCS, done)


@pytest.mark.one_database  # the command line is the subject; the jobs ran on both above
def test_the_cli_uploads_a_loop_script_and_submits_it_like_any_algorithm(
        portal: Portal, api: httpx.Client, token: str, tmp_path: Path) -> None:
    env = {"SLAQ_URL": portal.base_url, "SLAQ_TOKEN": token}
    name = f"digits-cli-{uuid.uuid4().hex[:6]}"
    uploaded = slaq(tmp_path, "code", "upload", str(DIGITS), "--name", name, env=env)
    assert uploaded.returncode == 0, uploaded.stderr
    algorithm = uploaded.stdout.split()[0]
    assert algorithm.startswith("code:") and "(loop," in uploaded.stdout, uploaded.stdout
    listed = slaq(tmp_path, "code", "list", env=env)
    assert any(line.split()[:3] == [algorithm, name, "loop"]
               for line in listed.stdout.splitlines()), listed.stdout
    submitted = slaq(tmp_path, "submit", algorithm, "digits", "--max-iterations", "100",
                     "--tolerance", "none", "--eval-every", "50", "-p", "hidden=32", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[0])
    done = wait_finished(api, job_id, timeout=240)
    assert done["status"] == "completed", (done["error"], portal.log_tail())
    assert sorted(stored_evaluations(portal.db_url, job_id)) == [50, 100]
    missing = slaq(tmp_path, "code", "upload", str(tmp_path / "nothing.py"), env=env)
    assert missing.returncode == 2 and "no such file" in missing.stderr
