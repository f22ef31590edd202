"""Early stopping judges live jobs (real API, scheduler, Celery workers, Redis,
SQLite and PostgreSQL): an experiment job's grants end at its rule's rungs,
so a hopeless configuration is stopped at a rung before its last iteration,
never the best; the experiment says how many runs were stopped, the
slot-seconds that saved, and why each running configuration runs on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlmodel import Session, col

from backend.core.leases import Leases
from backend.core.models import Job
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

# The rule and the grants, not the database, are the subject.
pytestmark = pytest.mark.one_database

FLAT = (1e-6, 1e-5)
"""Learning rates at which an MLP on digits barely moves in 600 iterations."""
GOOD = (0.1, 0.2, 0.05)
RUNGS = [100, 200, 400]
"""The predictive rule's rungs for min_iterations 100 and 600 iterations."""


@pytest.fixture(scope="module")
def stopping_portal(module_db_url: str, redis_url: str,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    # Chunks of up to 5 s: a whole 600-iteration run fits in one, so only the
    # rungs end these grants early.
    data: Path = tmp_path_factory.mktemp("live-stopping")
    running = start_portal(data_dir=data, db_url=module_db_url, redis_url=redis_url,
                           workers=2, policy="slaq", extra_env={"CHUNK_SECONDS": "5"})
    try:
        yield running
    finally:
        running.close()


def _client(portal: Portal, tenant: str) -> httpx.Client:
    token = make_user_token(portal.db_url, tenant=tenant, email=f"u@{tenant}.test")
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


def _spec(rates: tuple[float, ...], max_iterations: int) -> dict[str, Any]:
    # The good rates come first: configurations start in order, so the flat
    # ones reach their first rung with rivals to be compared with.
    return {"name": "live stopping", "algorithm": "mlp", "dataset": "digits", "seed": 3,
            "params": {"batch_size": 32, "hidden_units": 16},
            "space": {"learning_rate": {"type": "choice", "values": list(rates)}},
            "stopping": {"max_iterations": max_iterations, "tolerance": None},
            "eval_every": 10, "objective": {"metric": "val_loss"},
            "early_stopping": {"rule": "predictive", "top_k": 2, "min_iterations": 100}}


def _column(db_url: str, job_ids: list[int], column: Any) -> dict[int, Any]:
    engine = create_engine(db_url)
    try:
        with Session(engine) as session:
            return {int(i): v for i, v in session.execute(
                select(col(Job.id), column).where(col(Job.id).in_(job_ids))).all()}
    finally:
        engine.dispose()


def test_a_hopeless_configuration_is_stopped_at_a_rung_never_the_best(
        stopping_portal: Portal) -> None:
    with _client(stopping_portal, "rungs") as api:
        created = api.post("/api/v1/experiments", json=_spec(GOOD + FLAT, 600))
        assert created.status_code == 201, created.text
        eid = created.json()["id"]
        assert created.json()["rungs"] == RUNGS

        leases = Leases(stopping_portal.redis(), stopping_portal.keys)

        def settled() -> dict[str, Any] | None:
            got: dict[str, Any] = api.get(f"/api/v1/experiments/{eid}").json()
            busy = got["counts"]["queued"] + got["counts"]["running"]
            # A configuration paused while its chunk runs is "paused" before
            # that chunk has wound down and committed its last iterations.
            winding_down = any(leases.holder(j["id"]) is not None for j in got["jobs"])
            return got if busy == 0 and not winding_down else None

        got = wait_until(settled, 240, "every configuration to finish or be stopped",
                         interval=0.5)
        jobs = {j["id"]: j for j in got["jobs"]}
        rate = {j["id"]: j["params"]["learning_rate"] for j in got["jobs"]}
        stopped = [j for j in got["jobs"] if j["stopped_early"]]
        assert any(rate[j["id"]] in FLAT for j in stopped), \
            [(rate[i], j["status"], j["iterations_done"], j["end_reason"]) for i, j in jobs.items()]
        for job in stopped:
            assert job["status"] == "paused"
            assert job["iterations_done"] < job["max_iterations"], job
            assert job["end_reason"].startswith(("stopped early: its predicted final val_loss ",
                                                 "stopped early: its val_loss can fall at most "
                                                 "to ")), job["end_reason"]
        # Never the best: not the experiment's best, nor the best finished run.
        finished = [j for j in got["jobs"] if j["status"] == "completed"]
        assert finished, "the good configurations ran to their end"
        best_finished = min(finished, key=lambda j: j["objective_value"])
        assert got["best_job_id"] not in {j["id"] for j in stopped}
        assert all(best_finished["objective_value"] < j["objective_value"] for j in stopped)
        # Stopped at a rung: the chunk that carried it there ended on the rung,
        # and the rule judged it when that chunk committed.
        assert any(j["iterations_done"] in RUNGS for j in stopped if rate[j["id"]] in FLAT), \
            [(rate[j["id"]], j["iterations_done"]) for j in stopped]

        moves = _column(stopping_portal.db_url, list(jobs), col(Job.switch_seconds))
        for job_id, job in jobs.items():
            grants = sorted((d for d in api.get(f"/api/v1/jobs/{job_id}/decisions").json()
                             if d["iterations"] > 0), key=lambda d: d["chunk_seq"])
            # A new configuration's first grant ends at the first rung at the latest.
            assert grants[0]["iterations"] <= RUNGS[0], grants[0]
            if job["status"] == "completed":
                # Its chunks ended on every rung: the grants add up to each one.
                ends, total = set(), 0
                for grant in grants:
                    total += grant["iterations"]
                    ends.add(total)
                assert set(RUNGS) <= ends, [g["iterations"] for g in grants]
                assert any("where its experiment's early-stopping rule judges it"
                           in g["reason"] for g in grants)
            # A small MLP moves in milliseconds, under a tenth of these 5 s
            # chunks: a rung ends its grant, and the rest goes back to the
            # ranking instead of being owed to it (rungs.CHEAP_MOVE_SHARE).
            assert moves[job_id] is not None and moves[job_id] < 0.5, (job_id, moves[job_id])
            assert not any(g["reason"].startswith("continues its grant past iteration")
                           for g in grants), [g["reason"] for g in grants]

        # How many were stopped, and the slot-seconds that saved, estimated
        # from each stopped run's own measured speed.
        assert got["stopped_early"] == len(stopped)
        attained = _column(stopping_portal.db_url, [j["id"] for j in stopped],
                           col(Job.attained_seconds))
        expected = sum((j["max_iterations"] - j["iterations_done"]) * attained[j["id"]]
                       / j["iterations_done"] for j in stopped)
        assert expected > 0
        # The API gives it to the millisecond: a run stopped early saves well under a second here.
        assert got["saved_slot_seconds"] == pytest.approx(expected, rel=1e-3, abs=5e-4)
        assert "measured seconds per iteration" in got["saved_estimate"]
        for job in stopped:
            assert job["saved_slot_seconds"] > 0 and job["why_running"] is None


WHY = re.compile(r"^predicted final val_loss (\S+) \(at best (\S+)(?: by its training loss)?\), "
                 r"needs ≤ (\S+) to reach the top 2$")


def test_each_running_configuration_says_why_the_rule_keeps_it(
        stopping_portal: Portal) -> None:
    # Long runs of good rates: the rule keeps judging them as they run.
    with _client(stopping_portal, "kept") as api:
        created = api.post("/api/v1/experiments", json=_spec(GOOD + (0.02,), 50_000))
        assert created.status_code == 201, created.text
        eid = created.json()["id"]
        try:
            def explained() -> list[tuple[dict[str, Any], re.Match[str]]]:
                got = api.get(f"/api/v1/experiments/{eid}").json()
                return [(j, m) for j in got["jobs"] if j["status"] in ("queued", "running")
                        and (m := WHY.match(j["why_running"] or ""))]

            found = wait_until(explained, 150, "a configuration kept by the rule's numbers",
                               interval=0.5)
            for job, match in found:
                mean, optimistic, needs = (float(v) for v in match.groups())
                # Kept: at best it reaches what the top 2 need.
                assert optimistic <= needs, job["why_running"]
                assert job["iterations_done"] >= 100
        finally:
            api.post(f"/api/v1/experiments/{eid}/cancel")
        got = api.get(f"/api/v1/experiments/{eid}").json()
        assert all(j["why_running"] is None for j in got["jobs"]), "cancelled runs run no more"
