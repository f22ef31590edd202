"""Longer chunks while slots idle, on real workers with the default factor:
a job alone on the cluster is granted chunks several times as long as the
same job gets while jobs wait for the slots (the scheduler's own grants,
read from the decisions it stored)."""

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
from tests.utils.portal import Portal, start_portal

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
