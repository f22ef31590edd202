"""Longer chunks while slots idle, on real workers with the default factor:
a job alone on the cluster is granted chunks several times as long as the
same job gets while jobs wait for the slots (the scheduler's own grants,
read from the decisions it stored); and such a chunk ends early once a job
waits for its slot."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.db import engine_for
from backend.core.models import Decision
from backend.core.settings import Settings
from tests.integration.test_end_to_end import submit, wait_finished
from tests.integration.test_residency import MLP
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

# One database: the subject is the scheduler's chunk length, not storage.
pytestmark = pytest.mark.one_database

DEFAULT_FACTOR = Settings.model_fields["idle_chunk_factor"].default


@pytest.fixture(scope="module")
def portal(module_db_url: str, redis_url: str,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """The conftest's portal with the deployed default chunks (its ``api`` uses this one)."""
    running = start_portal(data_dir=tmp_path_factory.mktemp("idle"), db_url=module_db_url,
                           redis_url=redis_url, as_deployed=True)
    try:
        yield running
    finally:
        running.close()


def granted(portal: Portal, job_ids: list[int]) -> list[int]:
    """Iterations of every grant to ``job_ids`` after each job's first
    (the first measures a new job's speed at the default length)."""
    with Session(engine_for(portal.db_url)) as session:
        rows = session.execute(select(col(Decision.job_id), col(Decision.iterations))
                               .where(col(Decision.job_id).in_(job_ids))
                               .order_by(col(Decision.id))).all()
    seen: set[int] = set()
    out = []
    for job_id, iterations in rows:
        if job_id in seen:
            out.append(int(iterations))
        seen.add(job_id)
    return out


def test_a_job_alone_gets_longer_chunks_than_jobs_that_wait_for_slots(
        portal: Portal, api: httpx.Client) -> None:
    alone = submit(api, **MLP, stopping={"max_iterations": 8000, "tolerance": None})
    assert wait_finished(api, alone["id"], timeout=180)["status"] == "completed"
    # Three of the same jobs on the two slots: one always waits.
    sharing = [submit(api, **MLP, seed=seed, stopping={"max_iterations": 2500,
                                                       "tolerance": None})
               for seed in (1, 2, 3)]
    for job in sharing:
        assert wait_finished(api, job["id"], timeout=240)["status"] == "completed"
    long_chunks = granted(portal, [alone["id"]])
    short_chunks = granted(portal, [j["id"] for j in sharing])
    assert long_chunks and short_chunks, (long_chunks, short_chunks)
    # The same network at the same speed: about DEFAULT_FACTOR times as many
    # iterations a grant; half of that leaves room for a noisy machine.
    ratio = statistics.median(long_chunks) / statistics.median(short_chunks)
    assert ratio >= DEFAULT_FACTOR / 2, (long_chunks, short_chunks)


LONG_FACTOR = 60
"""Lengthened chunks of 30 s (0.5 s chunks): a chunk that did not yield would
outlast the test's wait for the job behind it."""


@pytest.fixture(scope="module")
def long_portal(module_db_url: str, redis_url: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    running = start_portal(data_dir=tmp_path_factory.mktemp("yield"), db_url=module_db_url,
                           redis_url=redis_url, as_deployed=True,
                           extra_env={"IDLE_CHUNK_FACTOR": str(LONG_FACTOR)})
    try:
        yield running
    finally:
        running.close()


def decisions(portal: Portal, job_id: int) -> list[tuple[int, int]]:
    """(chunk_seq, iterations) of every grant to ``job_id``, in order."""
    with Session(engine_for(portal.db_url)) as session:
        rows = session.execute(select(col(Decision.chunk_seq), col(Decision.iterations))
                               .where(col(Decision.job_id) == job_id)
                               .order_by(col(Decision.id))).all()
    return [(int(seq), int(iterations)) for seq, iterations in rows]


def test_a_lengthened_chunk_yields_to_its_tenants_next_job(long_portal: Portal) -> None:
    # One slot for the tenant, two on the cluster: its first job runs alone in
    # lengthened chunks, and its second can only start once that chunk ends.
    token = make_user_token(long_portal.db_url, tenant="solo", email="u@solo.test", max_slots=1)
    with httpx.Client(base_url=long_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        first = submit(api, **MLP, stopping={"max_iterations": 100_000, "tolerance": None})
        # Its first chunk measures its speed; the next is lengthened.
        wait_until(lambda: len(decisions(long_portal, first["id"])) >= 2, 60,
                   "the first job's lengthened chunk")
        second = submit(api, **MLP, seed=1, stopping={"max_iterations": 200, "tolerance": None})
        wait_until(lambda: decisions(long_portal, second["id"]), 20,
                   "the second job's first chunk (a lengthened chunk runs 30 s)")
        done = api.get(f"/api/v1/jobs/{first['id']}").json()["iterations_done"]
        granted_before = sum(iterations for _, iterations in decisions(long_portal, first["id"]))
        api.post(f"/api/v1/jobs/{first['id']}/cancel")
        assert wait_finished(api, second["id"], timeout=120)["status"] == "completed"
    lengthened = [iterations for _, iterations in decisions(long_portal, first["id"])][1]
    # The chunk in flight ended before its grant ran out: fewer iterations
    # done than granted, the tenant's slot went to the second job.
    assert done < granted_before, (done, granted_before, decisions(long_portal, first["id"]))
    assert lengthened > 10 * decisions(long_portal, first["id"])[0][1], lengthened
