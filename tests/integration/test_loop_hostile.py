"""Loop scripts that break the loop contract, on real workers and sandboxes:
one that never calls ``report()``, one that calls it from another thread, one
whose state callback raises. Each fails its job once, with a reason that
says what to change, while another tenant's job beside it completes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_hostile_text import _finished, _stored, _submit
from tests.utils.portal import Portal, make_user_token, start_portal, token_client

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "loop_hostile.py"
pytestmark = pytest.mark.one_database  # the sandbox and the loop do not touch the database


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """Calls into the sandbox time out after 4 s, so a silent loop fails
    quickly; workers at normal priority, as in ``test_loop_jobs``."""
    running = start_portal(
        data_dir=tmp_path_factory.mktemp("portal"), db_url=module_db_url, redis_url=redis_url,
        # A slot idle for IDLE_SAVE_SECONDS saves its trainer's state; on a
        # busy machine that could come between the two chunks and fail the
        # state modes there, before the end-of-job save these tests are about.
        extra_env={"SANDBOX_STEP_TIMEOUT_SECONDS": "4", "LEASE_SECONDS": "20",
                   "WORKER_NICE": "0", "IDLE_SAVE_SECONDS": "600"})
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def api(portal: Portal) -> Iterator[httpx.Client]:
    tenant = f"loop-hostile-{uuid.uuid4().hex[:6]}"
    token = make_user_token(portal.db_url, tenant=tenant, email=f"dev@{tenant}.test",
                            allow_code_uploads=True)
    with token_client(portal, token) as client:
        yield client


@pytest.fixture(scope="module")
def neighbour(portal: Portal) -> Iterator[httpx.Client]:
    tenant = f"neighbour-{uuid.uuid4().hex[:6]}"
    token = make_user_token(portal.db_url, tenant=tenant, email=f"dev@{tenant}.test")
    with token_client(portal, token) as client:
        yield client


def _upload(api: httpx.Client, mode: str) -> str:
    source = FIXTURE.read_text().replace('MODE = "silent"', f"MODE = {mode!r}")
    resp = api.post("/api/v1/code",
                    files={"file": ("loop_hostile.py", source.encode(), "text/x-python")},
                    data={"name": f"loop-{mode}-{uuid.uuid4().hex[:6]}"})
    assert resp.status_code == 201, resp.text
    assert resp.json()["contract"] == "loop"
    return str(resp.json()["algorithm"])


@pytest.mark.parametrize(("mode", "reasons"), [
    ("silent", ["training error at iteration 1:",
                "LoopError: train() ran 3.2 s without calling ctx.report(); call ctx.report() "
                "once per iteration"]),
    ("thread", ["training error at iteration 1:",
                "LoopError: ctx.report() was called from thread 'reporter', not from the "
                "thread running train()"]),
    ("state", ["saving its state failed at iteration 20:", "trainer failed in state(): "
               "ZeroDivisionError: integer division or modulo by zero (at tenant_trainer.py"]),
])
def test_a_loop_breaking_the_contract_fails_once_saying_why(
        api: httpx.Client, neighbour: httpx.Client, portal: Portal, mode: str,
        reasons: list[str]) -> None:
    normal = _submit(neighbour, "logistic_regression", 60, {"learning_rate": 0.1})
    hostile = _submit(api, _upload(api, mode), 20)
    bad = _finished(api, hostile, portal)
    good = _finished(neighbour, normal, portal)
    assert good["status"] == "completed" and good["iterations_done"] == 60, good
    assert bad["status"] == "failed", (bad, portal.log_tail())
    for reason in reasons:
        assert reason in bad["error"], bad["error"]
    job, grants = _stored(portal, hostile)
    # Failed by the chunk that met the breach: never lost, never run again.
    assert grants == job.chunks_run, (grants, job)
    if mode != "state":
        assert grants == 1, (grants, job)
