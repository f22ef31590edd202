"""A sweep on real workers: how many configurations the predictive rule
stops, at which iterations, and whether it kept the best.

    SLAQ_TEST_REDIS_DB=11 .venv/bin/python -m tests.bench.live_stopping [--workers 2]
        [--spec tests/bench/specs/torch-mlp-10m.json] [--baseline]

By default the spec is read from docs/experiments.md ("The spec"), so the
figures are those of the sweep the docs show (18 configurations of ``mlp``
on digits, 600 iterations, judged on ``val_loss``). ``--spec`` takes another
(``tests/bench/specs/torch-mlp-10m.json``: 8 configurations of a 10.8M or
16.1M parameter ``torch_mlp``, learning rate x depth, noisy minibatch
losses, judged on ``val_loss`` every 20 iterations; it needs the torch
extra). Besides the stops it prints each configuration's measured move cost
and how the experiment's grants were cut at the rule's rungs and continued
(the decision log's reasons). A fresh portal
(SQLite, real Redis on the test database, Celery worker slots) runs it once
with its rule, then, with ``--baseline``, once more with ``"rule": "none"``
so that every configuration's final value is known: the stopped ones are
compared with the true best, and the slot-seconds the stopped runs would
have used after their stop with the API's estimate of them.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Decision, Job
from tests.utils.portal import Portal, make_user_token, start_portal
from tests.utils.services import TEST_REDIS_DB, test_redis

DOCS = Path(__file__).resolve().parents[2] / "docs" / "experiments.md"


def docs_spec() -> dict[str, Any]:
    """The first JSON block of docs/experiments.md: the spec `slaq sweep` takes."""
    found = re.search(r"```json\n(.*?)```", DOCS.read_text(), re.S)
    if found is None:
        raise SystemExit(f"no JSON spec in {DOCS}")
    spec: dict[str, Any] = json.loads(found.group(1))
    return spec


def run(portal: Portal, tenant: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    token = make_user_token(portal.db_url, tenant=tenant, email=f"b@{tenant}.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as api:
        created = api.post("/api/v1/experiments", json=spec)
        created.raise_for_status()
        eid = created.json()["id"]
        began = time.monotonic()
        while True:
            got: dict[str, Any] = api.get(f"/api/v1/experiments/{eid}").json()
            if got["counts"]["queued"] + got["counts"]["running"] == 0:
                got["wall_seconds"] = time.monotonic() - began
                return got
            if time.monotonic() - began > timeout:
                api.post(f"/api/v1/experiments/{eid}/cancel")
                raise SystemExit(f"experiment {eid} did not settle in {timeout:.0f} s")
            time.sleep(0.5)


def column(db_url: str, job_ids: list[int], name: str) -> dict[int, float | None]:
    """Each job's ``Job.<name>`` (``attained_seconds``, ``switch_seconds``: its
    measured cost of a move to another slot), None where it is unset."""
    with session_scope(engine_for(db_url)) as session:
        return {int(i): None if v is None else float(v) for i, v in session.execute(
            select(col(Job.id), getattr(Job, name)).where(col(Job.id).in_(job_ids)))}


def key(params: dict[str, Any], space: dict[str, Any]) -> str:
    return ", ".join(f"{k}={params[k]:.3g}" if isinstance(params[k], float)
                     else f"{k}={params[k]}" for k in space)


def grant_kinds(db_url: str, job_ids: list[int]) -> dict[str, int]:
    """How many grants the experiment's jobs got, how many were cut to end
    at a rung, and how many continued a grant cut at one."""
    with session_scope(engine_for(db_url)) as session:
        reasons = [str(r) for r in session.execute(
            # A stop is logged too, as a decision of no iterations.
            select(col(Decision.reason)).where(col(Decision.job_id).in_(job_ids),
                                               col(Decision.iterations) > 0)).scalars()]
    cut = sum("where its experiment's early-stopping rule judges it" in r for r in reasons)
    continued = sum(r.startswith("continues its grant past iteration") for r in reasons)
    return {"grants": len(reasons), "cut at a rung": cut, "continued past a rung": continued}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--spec", type=Path, default=None,
                        help="a sweep spec (JSON) instead of the docs' one")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--baseline", action="store_true",
                        help="also run every configuration to its end (rule none)")
    args = parser.parse_args()
    spec = docs_spec() if args.spec is None else json.loads(args.spec.read_text())
    with tempfile.TemporaryDirectory() as tmp, test_redis(Path(tmp), TEST_REDIS_DB) as redis:
        data = Path(tmp) / "portal"
        portal = start_portal(as_deployed=True,
                              data_dir=data, db_url=f"sqlite:///{Path(tmp) / 'portal.db'}",
                              redis_url=redis, workers=args.workers, policy="slaq")
        try:
            got = run(portal, "stopping", spec, args.timeout)
            base = None
            if args.baseline:
                base = run(portal, "baseline", {**spec, "early_stopping": {"rule": "none"}},
                           args.timeout)
            seconds = {i: s or 0.0 for i, s in column(
                portal.db_url, [j["id"] for j in got["jobs"]]
                + ([j["id"] for j in base["jobs"]] if base else []), "attained_seconds").items()}
            grants = grant_kinds(portal.db_url, [j["id"] for j in got["jobs"]])
            moves = column(portal.db_url, [j["id"] for j in got["jobs"]], "switch_seconds")
        finally:
            portal.close()
    space = spec["space"]
    finals = {key(j["params"], space): j["objective_value"] for j in (base or got)["jobs"]}
    spent = {key(j["params"], space): seconds[j["id"]] for j in (base or {"jobs": []})["jobs"]}
    best = min((v, k) for k, v in finals.items() if v is not None)[1]
    stopped = [j for j in got["jobs"] if j["stopped_early"]]
    print(f"{len(got['jobs'])} configurations, {args.workers} worker slots, rule "
          f"{spec['early_stopping']}, wall {got['wall_seconds']:.1f} s")
    print(f"{'configuration':56} {'status':>9} {'iters':>6} {'val_loss':>9} {'final':>9} "
          f"{'move s':>7}")
    for job in sorted(got["jobs"], key=lambda j: key(j["params"], space)):
        name = key(job["params"], space)
        final = finals.get(name) if base else None
        value = job["objective_value"]
        move = moves[job["id"]]
        print(f"{name:56} {('stopped' if job['stopped_early'] else job['status']):>9} "
              f"{job['iterations_done']:>6} "
              f"{'-' if value is None else format(value, '.4g'):>9} "
              f"{'-' if final is None else format(final, '.4g'):>9} "
              f"{'-' if move is None else format(move, '.3f'):>7}")
    most = max(j["max_iterations"] for j in got["jobs"])
    early = [j for j in stopped if j["iterations_done"] < most]
    print(f"stopped: {len(stopped)} of {len(got['jobs'])} ({len(early)} before their last "
          f"iteration), at iterations {sorted(j['iterations_done'] for j in stopped)}; "
          f"rungs {got['rungs']}")
    kept_best = (best not in {key(j["params"], space) for j in stopped}) if base else \
        got["best_job_id"] not in {j["id"] for j in stopped}
    print(f"best configuration ({'true final' if base else 'best reached'}): "
          f"{best if base else got['best_job_id']}; kept: {kept_best}")
    print("the experiment's grants: " + ", ".join(f"{k} {v}" for k, v in grants.items()))
    print(f"saved (API estimate): {got['saved_slot_seconds']:.2f} slot-seconds; "
          f"experiment used {sum(seconds[j['id']] for j in got['jobs']):.2f} training seconds")
    if base:
        would = sum(spent[key(j["params"], space)] - seconds[j["id"]] for j in stopped)
        print(f"the stopped runs' training seconds after their stop, measured by the "
              f"baseline run: {would:.2f}; baseline total {sum(spent.values()):.2f}")


if __name__ == "__main__":
    main()
