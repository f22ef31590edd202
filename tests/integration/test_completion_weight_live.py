"""COMPLETION_WEIGHT reaches the live scheduler: on real worker slots, a
portal started with it grants by slaq with the completion term, and the
decision log says how much of a job's score it was."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.waiting import wait_until

FINISHING = re.compile(r", (\S+) of it for finishing in (\S+)s\)")


@pytest.fixture(scope="module")
def weighted_portal(redis_url: str, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[Portal]:
    data: Path = tmp_path_factory.mktemp("weighted")
    running = start_portal(data_dir=data, db_url=f"sqlite:///{data / 'weighted.db'}",
                           redis_url=redis_url, workers=2, policy="slaq",
                           extra_env={"CHUNK_SECONDS": "0.3", "COMPLETION_WEIGHT": "0.05"})
    try:
        yield running
    finally:
        running.close()


def test_a_portal_with_a_completion_weight_grants_with_it(weighted_portal: Portal) -> None:
    token = make_user_token(weighted_portal.db_url, tenant="lab", email="w@lab.test")
    spec = {"algorithm": "mlp", "dataset": "digits",
            "params": {"hidden_units": 32, "learning_rate": 0.05},
            "stopping": {"max_iterations": 4000, "tolerance": None}}
    with httpx.Client(base_url=weighted_portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        jobs = [api.post("/api/v1/jobs", json={**spec, "seed": s}).json()["id"]
                for s in (1, 2, 3)]

        def weighed() -> list[re.Match[str]]:
            return [m for job in jobs for d in api.get(f"/api/v1/jobs/{job}/decisions").json()
                    if (m := FINISHING.search(d["reason"]))]

        found = wait_until(weighed, 120, "a grant ranked with the completion term")
        for match in found:
            # The term is the weight over the seconds left: 0.05 / left (both
            # shown to 3 figures).
            term, left = float(match[1]), float(match[2])
            assert left > 0 and term == pytest.approx(0.05 / left, rel=0.02)
        for job in jobs:
            api.post(f"/api/v1/jobs/{job}/cancel")
