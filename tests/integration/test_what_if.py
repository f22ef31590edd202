"""What-if replay of the portal's own history: jobs that ran on real workers
are recorded with ``slaq record-trace --from-portal``, replayed by ``slaq
simulate`` into a report, and by the admin route for platform admins only."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from backend.core.models import Role, as_utc
from backend.scheduling.trace import load_trace
from tests.utils.portal import Portal, make_user_token, token_client
from tests.utils.waiting import wait_until

JOBS = 4


@pytest.fixture(scope="module")
def history(portal: Portal) -> Iterator[dict[str, Any]]:
    """Four small jobs run to completion on the portal's workers, and one cancelled."""
    token = make_user_token(portal.db_url, tenant="replayed", email="r@replayed.test")
    with token_client(portal, token) as api:
        ids = []
        for k in range(JOBS):
            spec = {"algorithm": "logistic_regression", "dataset": "digits", "seed": k,
                    "params": {"learning_rate": 0.05 * (k + 1)},
                    "stopping": {"max_iterations": 40 + 10 * k, "tolerance": None}}
            made = api.post("/api/v1/jobs", json=spec)
            assert made.status_code == 201, made.text
            ids.append(made.json()["id"])
        long = api.post("/api/v1/jobs", json={
            "algorithm": "mlp", "dataset": "digits",
            "stopping": {"max_iterations": 100_000, "tolerance": None}}).json()["id"]

        def done() -> list[dict[str, Any]] | None:
            jobs = [api.get(f"/api/v1/jobs/{i}").json() for i in ids]
            return jobs if all(j["status"] == "completed" for j in jobs) else None

        jobs = wait_until(done, 120, "the small jobs to complete")
        assert api.post(f"/api/v1/jobs/{long}/cancel").status_code == 200
        losses = {j["id"]: api.get(f"/api/v1/jobs/{j['id']}/losses",
                                   params={"max_points": 100_000}).json() for j in jobs}
    yield {"jobs": jobs, "losses": losses, "cancelled": long}


def _slaq(portal: Portal, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], env=portal.env,
                          capture_output=True, text=True, timeout=300)


def test_recorded_history_replays_into_a_report(portal: Portal, history: dict[str, Any],
                                                tmp_path: Path) -> None:
    out = tmp_path / "history.json"
    recorded = _slaq(portal, "record-trace", "--from-portal", "--since", "1h", "--out", str(out))
    assert recorded.returncode == 0, recorded.stderr
    assert f"wrote {JOBS} completed jobs" in recorded.stdout
    assert "1 not completed (cancelled)" in recorded.stdout
    trace = load_trace(out)
    by_id = {c.id: c for c in trace.curves}
    assert set(by_id) == {f"job-{j['id']}" for j in history["jobs"]}
    for job in history["jobs"]:
        curve, live = by_id[f"job-{job['id']}"], history["losses"][job["id"]]
        assert live["iterations"] == list(range(1, curve.iterations + 1))
        assert curve.losses == pytest.approx(live["losses"], rel=1e-5)  # 6 digits kept
        assert curve.params == job["params"] and curve.seed == job["seed"]
        assert curve.chunk_overhead_seconds > 0
    times = [a.time for a in trace.arrivals]
    assert times[0] == 0 and times == sorted(times)

    report = tmp_path / "what-if.html"
    replayed = _slaq(portal, "simulate", "--trace", str(out), "--slots", "2", "--policy", "fair",
                     "--policy", "slaq", "--completion-guard", "0.25", "--completion-guard", "1",
                     "--report", str(report))
    assert replayed.returncode == 0, replayed.stderr
    assert f"{out.name}, 2 slots, its {JOBS} recorded arrivals" in replayed.stdout
    rows = [line.split("  ")[0] for line in replayed.stdout.splitlines()[3:6]]
    assert rows == ["fair", "slaq (guard 0.25)", "slaq (guard 1)"], replayed.stdout
    for option in ("--completion-guard", "--completion-weight"):
        refused = _slaq(portal, "simulate", "--trace", str(out), option, "2")
        assert refused.returncode == 2
        assert f"{option} must be between 0 (off) and 1" in refused.stderr
    weighed = _slaq(portal, "simulate", "--trace", str(out), "--slots", "2", "--policy", "slaq",
                    "--completion-weight", "0", "--completion-weight", "0.01", "--json")
    assert list(json.loads(weighed.stdout)) == ["slaq (weight 0)", "slaq (weight 0.01)"]
    html = report.read_text()
    assert "Plotly.newPlot" in html and f"its {JOBS} recorded arrivals" in html
    as_json = _slaq(portal, "simulate", "--trace", str(out), "--slots", "2", "--policy", "las",
                    "--json")
    figures = json.loads(as_json.stdout)["las"]
    assert figures["makespan"] > 0 and figures["mean_completion"] > 0


def test_a_platform_admin_replays_the_last_hours(portal: Portal,
                                                 history: dict[str, Any]) -> None:
    admin = make_user_token(portal.db_url, tenant="ops", email="ops@ops.test",
                            role=Role.platform_admin)
    with token_client(portal, admin) as api:
        in_force = api.get("/api/v1/admin/policy").json()["completion_guard"]
        assert in_force != 1.0
        # The admin's completion weight is the one slaq replays with.
        assert api.put("/api/v1/admin/policy", json={"completion_weight": 0.05}).status_code == 200
        started = api.post("/api/v1/admin/what-if", json={
            "hours": 1, "policies": ["fair", "slaq"], "completion_guards": [in_force, 1.0],
            "completion_weights": [0.05, 0.2]})
        assert started.status_code == 202, started.text
        run = started.json()
        assert started.headers["location"] == f"/api/v1/admin/what-if/{run['id']}"
        runs = ["fair", "slaq", "slaq (weight 0.2)", "slaq (guard 1)",
                "slaq (guard 1, weight 0.2)"]
        assert run["jobs"] == JOBS and run["policies"] == runs
        assert run["started_by"] == "ops@ops.test" and run["state"] in {"running", "done"}
        assert run["hours"] == 1.0  # the window asked, for the page's selector

        def finished() -> dict[str, Any] | None:
            now = api.get(started.headers["location"])
            assert now.status_code == 200, now.text
            return None if now.json()["state"] == "running" else now.json()

        done = wait_until(finished, 120, "the what-if replay to finish")
        assert done["state"] == "done", done["error"]
        assert done["progress"] == {"policy": runs[-1], "jobs_finished": JOBS}
        assert api.get("/api/v1/admin/what-if/latest").json()["id"] == run["id"]
        assert done["hours"] == 1.0
        assert _seconds(done["result"]["until"]) - _seconds(done["result"]["since"]) == \
            pytest.approx(3600, abs=1)
        body = done["result"]
        # The run at the guard and weight in force is the policy as the portal runs it.
        assert [r["label"] for r in body["runs"]] == ["as run", *runs]
        assert body["jobs"] == JOBS and body["slots"] == 2  # the slots up now
        assert body["left_out"] == {"not completed (cancelled)": 1}
        assert body["chunk_seconds"] == float(portal.env["CHUNK_SECONDS"])
        assert body["active_policy"] == portal.env["POLICY"]
        assert body["completion_guard"] == in_force
        assert body["completion_weight"] == 0.05
        assert api.put("/api/v1/admin/policy", json={"completion_weight": 0}).status_code == 200
        # As it ran: the real completion times, scored by the simulator's metrics.
        real = [_seconds(j["finished_at"]) - _seconds(j["created_at"]) for j in history["jobs"]]
        as_run = body["runs"][0]
        assert as_run["figures"]["mean_completion"] == pytest.approx(sum(real) / JOBS, rel=1e-3)
        for replayed in body["runs"]:
            figures = replayed["figures"]
            # Finished jobs count at their final loss (0 at a curve's end), so
            # the all-jobs average is below the active jobs' one.
            assert 0 < figures["arrived_norm_loss"] <= figures["avg_norm_loss"]
            assert len(replayed["t90"]) == JOBS and replayed["t90"] == sorted(replayed["t90"])
            assert len(replayed["timeline"]["seconds"]) == len(
                replayed["timeline"]["mean_norm_loss"]) > 0

        bad = api.post("/api/v1/admin/what-if", json={"hours": 0})
        assert bad.status_code == 422
        too_strict = api.post("/api/v1/admin/what-if", json={"completion_guards": [3]})
        assert too_strict.status_code == 422 and "completion_guards" in too_strict.text
        too_heavy = api.post("/api/v1/admin/what-if", json={"completion_weights": [0.1, 2]})
        assert too_heavy.status_code == 422 and "completion_weights" in too_heavy.text
        squared = api.post("/api/v1/admin/what-if", json={
            "policies": ["fair", "slaq"], "completion_guards": [0, 0.5, 1],
            "completion_weights": [0, 0.01, 0.1]})
        assert squared.status_code == 422
        assert "that is 10 runs to replay (slaq runs once per guard and weight)" in squared.text
        too_many = api.post("/api/v1/admin/what-if", json={
            "policies": ["fair", "las", "fifo", "slaq-classic", "slaq", "oracle"],
            "completion_guards": [0, 0.5, 1]})
        assert too_many.status_code == 422
        assert "that is 10 runs to replay (slaq runs once per guard and weight); a replay " \
            "compares at most 8" in too_many.text
        unknown = api.post("/api/v1/admin/what-if", json={"policies": ["nope"]})
        assert unknown.status_code == 422 and "unknown policy 'nope'" in unknown.text
        empty = api.post("/api/v1/admin/what-if", json={"hours": 1e-6})
        assert empty.status_code == 422
        assert "No job submitted in that window has completed" in empty.json()["detail"]
        missing = api.get(f"/api/v1/admin/what-if/{'0' * 32}")
        assert missing.status_code == 404 and "kept for a day" in missing.text
        assert api.get("/api/v1/admin/what-if/not-an-id").status_code == 422


def test_one_replay_runs_at_a_time(portal: Portal, history: dict[str, Any]) -> None:
    admin = make_user_token(portal.db_url, tenant="ops", email="ops2@ops.test",
                            role=Role.platform_admin)
    client, keys = portal.redis(), portal.keys
    # Another replay's process holds the lease (it renews it while it runs).
    assert client.set(keys.what_if_running, "f" * 32, nx=True, ex=60)
    try:
        with token_client(portal, admin) as api:
            busy = api.post("/api/v1/admin/what-if", json={"hours": 1, "policies": ["fair"]})
        assert busy.status_code == 409, busy.text
        assert "Another what-if replay is running" in busy.json()["detail"]
    finally:
        client.delete(keys.what_if_running)


def test_a_replay_whose_process_died_reads_as_lost(portal: Portal) -> None:
    admin = make_user_token(portal.db_url, tenant="ops", email="ops3@ops.test",
                            role=Role.platform_admin)
    client, keys = portal.redis(), portal.keys
    # What a replaying process leaves behind when it is killed mid-way: its
    # state still says running, and its lease has expired.
    run_id = "e" * 32
    client.hset(keys.what_if_run(run_id), mapping={
        "state": "running", "started_at": "2026-11-25T00:00:00+00:00", "started_by": "x@ops.test",
        "policies": '["slaq"]', "jobs": 7, "policy": "slaq", "jobs_finished": 3})
    try:
        with token_client(portal, admin) as api:
            lost = api.get(f"/api/v1/admin/what-if/{run_id}")
        assert lost.status_code == 200, lost.text
        body = lost.json()
        assert body["state"] == "lost" and body["result"] is None
        assert "Run it again" in body["error"]
        assert body["progress"] == {"policy": "slaq", "jobs_finished": 3}
    finally:
        client.delete(keys.what_if_run(run_id))


def test_no_replay_yet_is_204_not_404(portal: Portal) -> None:
    # Issue 38: the admin page asks on every load; a 404 logged an error each time.
    admin = make_user_token(portal.db_url, tenant="ops", email="ops@ops.test",
                            role=Role.platform_admin)
    portal.redis().delete(portal.keys.what_if_latest)
    with token_client(portal, admin) as api:
        none = api.get("/api/v1/admin/what-if/latest")
        assert none.status_code == 204 and none.content == b""
        assert api.get(f"/api/v1/admin/what-if/{'0' * 32}").status_code == 404


@pytest.mark.parametrize("role", [Role.member, Role.tenant_admin])
def test_only_platform_admins_replay_every_tenants_history(portal: Portal, role: Role) -> None:
    token = make_user_token(portal.db_url, tenant="replayed", email=f"{role}@replayed.test",
                            role=role)
    with token_client(portal, token) as api:
        refused = api.post("/api/v1/admin/what-if", json={})
        assert refused.status_code == 403, refused.text
        for path in ("latest", "0" * 32):
            unseen = api.get(f"/api/v1/admin/what-if/{path}")
            assert unseen.status_code == 403, unseen.text


def _seconds(iso: str) -> float:
    return as_utc(datetime.fromisoformat(iso.replace("Z", "+00:00"))).timestamp()
