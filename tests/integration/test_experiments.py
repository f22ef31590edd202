"""Experiments on a live portal (real API, scheduler, Celery workers, Redis,
SQLite and PostgreSQL): a 12-configuration sweep submitted in one request
runs on real workers; quotas admit a sweep whole or refuse it whole; cancel,
pause and resume act on every job; predictive early stopping stops a
hopeless configuration with a readable reason, never the best, and the
decision log shows it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until


@pytest.fixture(scope="module")
def sweep_portal(module_db_url: str, redis_url: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("experiments")
    running = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                           workers=2, policy="slaq", extra_env={"CHUNK_SECONDS": "0.3"})
    try:
        yield running
    finally:
        running.close()


# Chunks are sized by time, so a short job ends in a grant or two, before a
# rule looks at it: jobs a rule must see run until the test cancels them.
LONG = 50_000


@contextmanager
def _running(api: httpx.Client, spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """An experiment created from ``spec``, cancelled whatever the test does."""
    created = api.post("/api/v1/experiments", json=spec)
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    try:
        yield body
    finally:
        api.post(f"/api/v1/experiments/{body['id']}/cancel")


def _client(portal: Portal, tenant: str, **quotas: Any) -> httpx.Client:
    token = make_user_token(portal.db_url, tenant=tenant, email=f"u@{tenant}.test", **quotas)
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


def _sweep(**extra: Any) -> dict[str, Any]:
    return {"name": "lr x width", "algorithm": "mlp", "dataset": "digits", "seed": 3,
            "params": {"batch_size": 32},
            "space": {"learning_rate": {"type": "choice", "values": [0.01, 0.03, 0.1, 0.2]},
                      "hidden_units": {"type": "int", "low": 8, "high": 32}},
            "sampler": {"kind": "grid", "points": 3},
            "stopping": {"max_iterations": 40, "tolerance": None},
            "eval_every": 20, "objective": {"metric": "val_loss"}, **extra}


def test_a_twelve_configuration_sweep_runs_on_real_workers(sweep_portal: Portal) -> None:
    with _client(sweep_portal, "sweepers") as api, _client(sweep_portal, "others") as other:
        created = api.post("/api/v1/experiments", json=_sweep())
        assert created.status_code == 201, created.text
        body = created.json()
        experiment_id, job_ids = body["id"], body["job_ids"]
        assert len(job_ids) == 12 == len(set(job_ids))
        sampled = {(c["params"]["learning_rate"], c["params"]["hidden_units"])
                   for c in body["configurations"]}
        assert sampled == {(lr, h) for lr in (0.01, 0.03, 0.1, 0.2) for h in (8, 20, 32)}

        def finished() -> dict[str, Any] | None:
            got: dict[str, Any] = api.get(f"/api/v1/experiments/{experiment_id}").json()
            return got if got["counts"]["completed"] == 12 else None

        done = wait_until(finished, 240, "all 12 configurations to complete", interval=0.5)
        assert done["status"] == "completed"
        values = {j["id"]: j["objective_value"] for j in done["jobs"]}
        assert None not in values.values()
        assert done["best_job_id"] == min(values, key=lambda j: values[j])
        assert {j["iterations_done"] for j in done["jobs"]} == {40}
        # Each job is an ordinary job too, naming its experiment.
        one = api.get(f"/api/v1/jobs/{job_ids[5]}").json()
        assert one["experiment_id"] == experiment_id and one["status"] == "completed"
        assert one["params"]["batch_size"] == 32
        # Another tenant sees nothing of it.
        assert other.get(f"/api/v1/experiments/{experiment_id}").status_code == 404
        assert other.post(f"/api/v1/experiments/{experiment_id}/cancel").status_code == 404
        assert other.get("/api/v1/experiments").json()["total"] == 0
        listed = api.get("/api/v1/experiments").json()
        assert [e["id"] for e in listed["items"]] == [experiment_id]
        assert listed["items"][0]["jobs"] == 12


def test_quotas_admit_a_sweep_whole_or_not_at_all(sweep_portal: Portal) -> None:
    # No slots: nothing runs, so the counts below are the submissions alone.
    with _client(sweep_portal, "tight", max_active_jobs=10, max_slots=0) as api:
        refused = api.post("/api/v1/experiments", json=_sweep())
        assert refused.status_code == 409, refused.text
        detail = refused.json()["detail"]
        assert detail["quota"] == "max_active_jobs"
        assert "adds 12 jobs" in detail["message"] and "nothing was created" in detail["message"]
        assert api.get("/api/v1/jobs").json()["total"] == 0
        assert api.get("/api/v1/experiments").json()["total"] == 0

        eight = api.post("/api/v1/experiments", json=_sweep(
            space={"learning_rate": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
            sampler={"kind": "random", "samples": 8, "seed": 1}))
        assert eight.status_code == 201, eight.text
        three = api.post("/api/v1/experiments", json=_sweep(
            space={"learning_rate": {"type": "choice", "values": [0.01, 0.02, 0.03]}}))
        assert three.status_code == 409
        assert "only 2 more fit" in three.json()["detail"]["message"]
        assert api.get("/api/v1/jobs").json()["total"] == 8
        assert api.get("/api/v1/experiments").json()["total"] == 1

        # One bad configuration refuses the whole sweep, naming the configuration.
        bad = api.post("/api/v1/experiments", json=_sweep(
            space={"learning_rate": {"type": "choice", "values": [0.01, -5.0]}}))
        assert bad.status_code == 422
        locs = [d["loc"] for d in bad.json()["detail"]]
        assert ["body", "configurations", 1, "params", "learning_rate"] in locs
        huge = api.post("/api/v1/experiments", json=_sweep(space={
            "learning_rate": {"type": "float", "low": 0.01, "high": 0.1},
            "hidden_units": {"type": "int", "low": 4, "high": 400}},
            sampler={"kind": "grid", "points": 20}))
        assert huge.status_code == 422 and "at most 200" in huge.text
        assert api.get("/api/v1/jobs").json()["total"] == 8


def test_cancel_pause_and_resume_act_on_every_job(sweep_portal: Portal) -> None:
    with _client(sweep_portal, "control", max_slots=0) as api:
        body = api.post("/api/v1/experiments", json=_sweep(
            space={"learning_rate": {"type": "choice", "values": [0.01, 0.02, 0.03, 0.04]}}
        )).json()
        eid, ids = body["id"], body["job_ids"]

        def statuses() -> list[str]:
            return [api.get(f"/api/v1/jobs/{i}").json()["status"] for i in ids]

        paused = api.post(f"/api/v1/experiments/{eid}/pause")
        assert paused.status_code == 200 and sorted(paused.json()["changed"]) == sorted(ids)
        assert statuses() == ["paused"] * 4
        assert api.post(f"/api/v1/experiments/{eid}/pause").status_code == 409
        # A job of it still answers to the single-job routes.
        assert api.post(f"/api/v1/jobs/{ids[0]}/resume").json()["status"] == "queued"
        resumed = api.post(f"/api/v1/experiments/{eid}/resume").json()
        assert sorted(resumed["changed"]) == sorted(ids[1:])
        assert statuses() == ["queued"] * 4
        cancelled = api.post(f"/api/v1/experiments/{eid}/cancel").json()
        assert cancelled["status"] == "cancelled" and cancelled["counts"]["cancelled"] == 4
        assert statuses() == ["cancelled"] * 4
        again = api.post(f"/api/v1/experiments/{eid}/cancel")
        assert again.status_code == 409 and "finished" in again.json()["detail"]


def test_predictive_stopping_stops_a_hopeless_configuration(sweep_portal: Portal) -> None:
    rates = [1e-6, 0.05, 0.1, 0.2]
    with _client(sweep_portal, "stoppers") as api, _running(api, _sweep(
            name="lr", params={"hidden_units": 16},
            space={"learning_rate": {"type": "choice", "values": rates}},
            stopping={"max_iterations": LONG, "tolerance": None}, eval_every=10,
            early_stopping={"rule": "predictive", "top_k": 2, "min_iterations": 50})) as body:
        eid = body["id"]
        by_rate = {c["params"]["learning_rate"]: c["job_id"] for c in body["configurations"]}
        hopeless = by_rate[1e-6]

        def stopped() -> dict[str, Any] | None:
            got: dict[str, Any] = api.get(f"/api/v1/experiments/{eid}").json()
            early = [j["id"] for j in got["jobs"] if j["stopped_early"]]
            return got if hopeless in early else None

        # Another hopeless one (a diverging rate) may be stopped first; the
        # flat one must follow.
        got = wait_until(stopped, 150, "the flat configuration to be stopped early",
                         interval=0.5)
        stops = [j for j in got["jobs"] if j["stopped_early"]]
        assert len(stops) <= 2, "the top 2 are never stopped"
        for job in stops:
            assert job["status"] == "paused"
            # Either form of the rule's argument: its predicted final, or the
            # floor its training loss puts under an overfitting val_loss.
            assert job["end_reason"].startswith((
                "stopped early: its predicted final val_loss ",
                "stopped early: its val_loss can fall at most to ")), job["end_reason"]
            assert "cannot reach the top 2 (best " in job["end_reason"]
            assert job["id"] != got["best_job_id"]
        # The decision log names the stop, and no grant follows it while the
        # others keep training.
        decisions = api.get(f"/api/v1/jobs/{hopeless}/decisions").json()
        stop = next(d for d in decisions if d["policy"] == "early stopping: predictive")
        assert stop["reason"].startswith("stopped early")
        others = [j["id"] for j in got["jobs"] if not j["stopped_early"]]
        before = {j["id"]: j["iterations_done"] for j in got["jobs"]}

        def others_moved() -> bool:
            now = api.get(f"/api/v1/experiments/{eid}").json()
            return any(j["iterations_done"] >= before[j["id"]] + 50
                       for j in now["jobs"] if j["id"] in others)

        wait_until(others_moved, 120, "the other configurations to keep training")
        assert api.get(f"/api/v1/jobs/{hopeless}/decisions").json()[0]["policy"] == \
            "early stopping: predictive"
        # Stopped, not finished: it resumes by hand and the rule leaves it be.
        resumed = api.post(f"/api/v1/jobs/{hopeless}/resume").json()
        assert resumed["status"] in ("queued", "running") and resumed["stopped_early"]


# Grants from the scheduler's backlog carry a prefix saying so.
FOCUS = re.compile(r"^(?:from backlog: )?experiment focus: its latest val_loss (\S+) "
                   r"\(iteration \d+\), .* job (\d+) \(its latest val_loss (\S+) "
                   r"\(iteration \d+\)(, past its best \S+)?\)(, which took an earlier slot)?$")


def test_a_predictive_experiments_slots_go_to_its_leading_configurations(
        sweep_portal: Portal) -> None:
    # top_k as large as the sweep: nothing can be stopped, so every grant the
    # focus moves stays visible in the decision log.
    rates = [1e-5, 1e-3, 0.05, 0.1]
    with _client(sweep_portal, "focus") as api, _running(api, _sweep(
            name="focus", params={"hidden_units": 16},
            space={"learning_rate": {"type": "choice", "values": rates}},
            stopping={"max_iterations": LONG, "tolerance": None}, eval_every=10,
            early_stopping={"rule": "predictive", "top_k": len(rates),
                            "min_iterations": 50})) as body:
        jobs = [c["job_id"] for c in body["configurations"]]

        def focused() -> list[tuple[int, re.Match[str]]]:
            found = []
            for job in jobs:
                for decision in api.get(f"/api/v1/jobs/{job}/decisions").json():
                    match = FOCUS.match(decision["reason"])
                    if match:
                        found.append((job, match))
            return found

        moved = wait_until(focused, 150, "a grant moved by the experiment focus", interval=1)
        for job, match in moved:
            chosen, ranked, ranked_final = float(match[1]), int(match[2]), float(match[3])
            assert ranked in jobs and ranked != job, "moved within the experiment"
            # Lower val_loss is better: the slot went to the one ahead, unless
            # the ranked job was past its best (those wait behind the ones
            # still improving) or was itself ahead and took an earlier slot.
            assert chosen <= ranked_final or match[4] or match[5]
        got = api.get(f"/api/v1/experiments/{body['id']}").json()
        assert not any(j["stopped_early"] for j in got["jobs"])


def test_slaq_sweep_submits_a_spec_file(sweep_portal: Portal, tmp_path: Path) -> None:
    token = make_user_token(sweep_portal.db_url, tenant="cli-sweep", email="c@cli.test",
                            max_slots=0)
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps(_sweep(
        space={"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}})))
    env = {**{k: v for k, v in os.environ.items() if k not in ("SLAQ_URL", "SLAQ_TOKEN")},
           "HOME": str(tmp_path), "SLAQ_URL": sweep_portal.base_url, "SLAQ_TOKEN": token}

    def slaq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "backend.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    done = slaq("sweep", str(spec))
    assert done.returncode == 0, done.stderr
    first, ids = done.stdout.splitlines()
    experiment_id = int(first.split()[1].rstrip(":"))
    job_ids = [int(i) for i in ids.split()]
    with httpx.Client(base_url=sweep_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        got = api.get(f"/api/v1/experiments/{experiment_id}").json()
    assert got["job_ids"] == job_ids and len(job_ids) == 3
    assert sorted(c["params"]["learning_rate"] for c in got["configurations"]) == \
        [0.001, 0.01, 0.1]
    status = slaq("status", "--experiment", str(experiment_id))
    assert status.returncode == 0, status.stderr
    assert all(str(i) in status.stdout for i in job_ids)
    assert "learning_rate=0.01" in status.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_sweep(space={"learning_rate": {"type": "choice",
                                                              "values": [-1.0]}})))
    refused = slaq("sweep", str(bad))
    assert refused.returncode == 1 and "learning_rate" in refused.stderr


def test_asha_stops_the_lagging_configurations_at_a_rung(sweep_portal: Portal) -> None:
    rates = [1e-6, 1e-5, 0.02, 0.05, 0.1, 0.2]
    with _client(sweep_portal, "halvers") as api, _running(api, _sweep(
            name="asha", params={"hidden_units": 16},
            space={"learning_rate": {"type": "choice", "values": rates}},
            stopping={"max_iterations": LONG, "tolerance": None}, eval_every=10,
            objective={"metric": "loss"},
            early_stopping={"rule": "asha", "min_iterations": 30, "reduction": 3})) as body:
        eid = body["id"]
        by_rate = {c["params"]["learning_rate"]: c["job_id"] for c in body["configurations"]}

        flat = {by_rate[1e-6], by_rate[1e-5]}

        def stopped() -> dict[str, Any] | None:
            got: dict[str, Any] = api.get(f"/api/v1/experiments/{eid}").json()
            early = {j["id"] for j in got["jobs"] if j["stopped_early"]}
            return got if flat <= early else None

        # Whichever reaches a rung first is judged first; the two flat rates
        # must be stopped once they reach one.
        got = wait_until(stopped, 150, "ASHA to stop the two flat configurations",
                         interval=0.5)
        stops = [j["id"] for j in got["jobs"] if j["stopped_early"]]
        assert len(stops) < len(rates), "the best configuration is never stopped"
        for job in got["jobs"]:
            if job["id"] not in stops:
                continue
            assert job["end_reason"].startswith("stopped early (ASHA): its loss ")
            # Never the best where it was judged. (The experiment's best_job_id
            # ranks the latest minibatch loss, which a stopped job keeps frozen
            # while the others' keeps moving, so it is no measure of the rule.)
            place = re.search(r"\(place (\d+);", job["end_reason"])
            assert place and int(place.group(1)) >= 2, job["end_reason"]
            decisions = api.get(f"/api/v1/jobs/{job['id']}/decisions").json()
            assert any(d["policy"] == "early stopping: asha" for d in decisions)
