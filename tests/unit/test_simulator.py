"""The simulator, its workload generator, figures, CLI, and the golden trace."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from backend.scheduling import simulator
from backend.scheduling.metrics import figures
from backend.scheduling.simulator import SimConfig, SimJob, SimResult, build_policy, simulate
from backend.scheduling.trace import Trace, TraceCurve, load_trace, save_trace
from backend.scheduling.types import Grant, Snapshot
from backend.scheduling.workload import Arrival, generate_workload
from backend.simulation.cli import SIM_POLICIES, simulate_main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_TRACE = ROOT / "data" / "traces" / "golden-small.json"
GOLDEN_RESULT = Path(__file__).parent / "golden" / "simulator-small.json"
GOLDEN_ARGS = {"slots": 2, "load": 1.5, "seed": 0, "jobs": 12, "chunk_seconds": 0.05}


def tiny_trace() -> Trace:
    def curve(i: int, n: int, rate: float) -> TraceCurve:
        losses = tuple(0.1 + rate**k for k in range(1, n + 1))
        return TraceCurve(id=f"c{i}", losses=losses, seconds=(0.01,) * n,
                          chunk_overhead_seconds=0.02, max_iterations=2 * n)
    return Trace((curve(0, 300, 0.97), curve(1, 120, 0.9), curve(2, 600, 0.995)))


def run(policy: str, trace: Trace, **kw: float) -> dict[str, float]:
    arrivals = generate_workload(trace, slots=int(kw.get("slots", 2)), load=kw.get("load", 1.5),
                                 jobs=int(kw.get("jobs", 9)), seed=int(kw.get("seed", 0)),
                                 chunk_seconds=kw.get("chunk_seconds", 0.5))
    config = SimConfig(slots=int(kw.get("slots", 2)), chunk_seconds=kw.get("chunk_seconds", 0.5))
    result = simulate(build_policy(policy, trace, arrivals), trace, arrivals, config)
    assert all(j.finish is not None for j in result.jobs)
    return figures(result).as_dict()


@pytest.mark.parametrize("policy", SIM_POLICIES)
def test_every_policy_runs_every_job_to_the_end(policy: str) -> None:
    fig = run(policy, tiny_trace())
    assert 0.0 < fig["avg_norm_loss"] < 1.0
    assert fig["t90_mean"] <= fig["t95_mean"] <= fig["t99_mean"] <= fig["mean_completion"]
    assert fig["makespan"] > 0


def test_deterministic_for_a_seed() -> None:
    assert run("slaq", tiny_trace()) == run("slaq", tiny_trace())


def test_workload_generator() -> None:
    trace = tiny_trace()
    a = generate_workload(trace, slots=2, load=1.0, jobs=30, seed=4)
    assert a == generate_workload(trace, slots=2, load=1.0, jobs=30, seed=4)
    assert [x.index for x in a] == list(range(30))
    assert a[0].time == 0.0 and all(p.time <= q.time for p, q in zip(a, a[1:], strict=False))
    counts = {c.id: sum(x.curve_id == c.id for x in a) for c in trace.curves}
    assert set(counts.values()) == {10}, "balanced passes over the trace"
    faster = generate_workload(trace, slots=2, load=2.0, jobs=30, seed=4)
    assert faster[-1].time == pytest.approx(a[-1].time / 2)


def test_fifo_serves_in_order_on_one_slot() -> None:
    trace = tiny_trace()
    arrivals = generate_workload(trace, slots=1, load=3.0, jobs=4, seed=1)
    result = simulate(build_policy("fifo", trace, arrivals), trace, arrivals, SimConfig(slots=1))
    finishes = [j.finish or 0.0 for j in result.jobs]
    assert finishes == sorted(finishes)


class Greedy:
    """A broken policy: one grant more than there are free slots."""

    name = "greedy"

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        return [Grant(j.job_id, 10, "too many") for j in snapshot.waiting()][
            : snapshot.free_slots + 1]


def test_simulator_rejects_grants_over_the_limits() -> None:
    trace = tiny_trace()
    arrivals = generate_workload(trace, slots=1, load=3.0, jobs=4, seed=1)
    with pytest.raises(AssertionError, match="free slots"):
        simulate(Greedy(), trace, arrivals, SimConfig(slots=1))


def test_normalised_loss_and_time_to_fraction() -> None:
    trace = Trace((TraceCurve(id="lin", losses=(1.0, 0.5, 0.2, 0.05, 0.0),
                              seconds=(1.0,) * 5),))
    arrivals = generate_workload(trace, slots=1, load=0.1, jobs=1, seed=0)
    result = simulate(build_policy("fifo", trace, arrivals), trace, arrivals,
                      SimConfig(slots=1, chunk_seconds=10.0))
    fig = figures(result)
    # iterations end at 1..5 s; normalised 1, .5, .2, .05, 0 -> 90% after 4 s, 99% after 5 s
    assert fig.t90_mean == 4.0 and fig.t95_mean == 4.0 and fig.t99_mean == 5.0
    assert fig.mean_completion == 5.0
    assert fig.avg_norm_loss == pytest.approx((1 + 1 + 0.5 + 0.2 + 0.05) / 5)


def test_a_finished_job_leaves_the_papers_average_but_not_the_arrived_jobs_one() -> None:
    curve = TraceCurve(id="c", losses=(1.0, 0.5, 0.0), seconds=(1.0,) * 3)
    # Both arrive at 0; A's iterations end at 1, 2, 3 s (it finishes at 3),
    # B's at 4, 5, 6 s: normalised 1, 0.5, 0 each.
    a = SimJob(0, curve, 1, 0.0, iteration_times=[1.0, 2.0, 3.0], finish=3.0)
    b = SimJob(1, curve, 1, 0.0, iteration_times=[4.0, 5.0, 6.0], finish=6.0)
    result = SimResult(policy="fifo", jobs=[a, b], decisions=2, decision_seconds=0.0, grants=2)
    # Per second: both 1, 1, then 0.5 and 1; then B alone 1, 1, 0.5 (A has left) ...
    assert figures(result).avg_norm_loss == pytest.approx((1 + 1 + 0.75 + 1 + 1 + 0.5) / 6)
    # ... or with A still counted at 0: 0.5, 0.5, 0.25.
    assert figures(result).arrived_norm_loss == pytest.approx((1 + 1 + 0.75 + 0.5 + 0.5 + 0.25) / 6)


def test_trace_round_trip(tmp_path: Path) -> None:
    trace = tiny_trace()
    save_trace(trace, tmp_path / "t.json")
    again = load_trace(tmp_path / "t.json")
    assert [c.id for c in again.curves] == [c.id for c in trace.curves]
    assert again.curves[0].losses[:3] == pytest.approx(trace.curves[0].losses[:3], rel=1e-5)


@pytest.mark.parametrize("steps", [(2, 2), (3, 1), (0,), (6,)])
def test_evaluations_must_lie_on_the_curve_in_order(steps: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="val_loss evaluations need increasing iterations "
                                         "within 1..5"):
        TraceCurve(id="c", losses=(5.0, 4.0, 3.0, 2.0, 1.0), seconds=(1.0,) * 5,
                   evaluations={"val_loss": tuple((i, 1.0) for i in steps)})


def golden_figures() -> dict[str, dict[str, float]]:
    trace = load_trace(GOLDEN_TRACE)
    return {p: run(p, trace, **GOLDEN_ARGS) for p in SIM_POLICIES}


def test_golden_trace() -> None:
    got = golden_figures()
    if os.environ.get("SLAQ_UPDATE_GOLDEN") == "1":
        GOLDEN_RESULT.write_text(json.dumps({"args": GOLDEN_ARGS, "figures": got}, indent=2)
                                 + "\n")
    want = json.loads(GOLDEN_RESULT.read_text())
    assert want["args"] == GOLDEN_ARGS
    for policy, figs in want["figures"].items():
        for key, value in figs.items():
            assert math.isclose(got[policy][key], value, rel_tol=1e-6, abs_tol=1e-9), \
                (policy, key, got[policy][key], value)


def test_cli_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.html"
    code = simulate_main(["--trace", str(GOLDEN_TRACE), "--policy", "fair", "--policy", "slaq",
                          "--policy", "oracle", "--slots", "2", "--seed", "1", "--jobs", "8",
                          "--chunk-seconds", "0.05", "--json", "--report", str(report)])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"fair", "slaq", "oracle"}
    assert set(out["slaq"]) == {"avg_norm_loss", "arrived_norm_loss", "t90_mean", "t95_mean",
                                "t99_mean", "t90_p95", "mean_completion", "makespan"}
    html = report.read_text()
    assert "plotly" in html.lower() and '<script src="http' not in html


def test_cli_table_and_bad_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_main(["--trace", str(GOLDEN_TRACE), "--policy", "las", "--jobs", "6",
                          "--chunk-seconds", "0.05"]) == 0
    assert "las" in capsys.readouterr().out
    assert simulate_main(["--trace", str(tmp_path / "missing.json")]) == 2


def test_first_chunk_is_sized_from_jobs_of_the_same_kind() -> None:
    # As live: job 1 (same kind as job 0, which ran first) gets a first chunk
    # filling the chunk length at job 0's speed; job 2, of a kind never seen,
    # gets the default 10 iterations.
    def curve(cid: str, algorithm: str) -> TraceCurve:
        return TraceCurve(id=cid, losses=tuple(1.0 / k for k in range(1, 301)),
                          seconds=(0.01,) * 300, algorithm=algorithm, dataset="d",
                          max_iterations=300, chunk_overhead_seconds=0.2)

    trace = Trace((curve("a", "x"), curve("b", "x"), curve("c", "y")))
    arrivals = [Arrival(0, 0.0, "a"), Arrival(1, 5.0, "b"), Arrival(2, 5.0, "c")]
    result = simulate(build_policy("fifo", trace, arrivals), trace, arrivals,
                      SimConfig(slots=2, chunk_seconds=0.5))
    # The overhead between chunks leaves a gap in each job's iteration times.
    first_chunk = [1 + next(i for i, gap in enumerate(np.diff(job.iteration_times)) if gap > 0.1)
                   for job in result.jobs]
    # 0.5 s at 0.01 s an iteration (49 when the averaged seconds round up).
    assert first_chunk[0] == 10 and first_chunk[2] == 10
    assert first_chunk[1] in (49, 50)


class Watching:
    """FIFO that records, per decision, each waiting job's visible history."""

    name = "watching"

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, float | None, float]] = []

    def allocate(self, snapshot: Snapshot) -> list[Grant]:
        waiting = sorted(snapshot.waiting(), key=lambda j: j.job_id)
        for job in waiting:
            if job.losses:
                self.seen.append((job.iterations_done, len(job.losses), job.initial_loss,
                                  job.losses[0].loss))
        return [Grant(j.job_id, 100, "in order") for j in waiting][: snapshot.free_slots]


@pytest.mark.parametrize("cap", [None, 150])
def test_policies_see_the_newest_points_the_live_cache_keeps(cap: int | None) -> None:
    # One job of 600 iterations in chunks of 100: after each chunk the policy
    # sees the whole history, or with a cap (the live scheduler's cache) the
    # newest ``cap`` points and the job's first loss as its initial loss.
    trace = tiny_trace()
    arrivals = [Arrival(0, 0.0, "c2")]
    policy = Watching()
    simulate(policy, trace, arrivals, SimConfig(slots=1, history_points=cap))
    first = trace.curve("c2").losses[0]
    assert [done for done, *_ in policy.seen] == [100, 200, 300, 400, 500]
    for done, shown, initial, oldest in policy.seen:
        if cap is None or done <= cap:
            assert (shown, initial, oldest) == (done, None, first)
        else:
            assert shown == cap and initial == first
            assert oldest == trace.curve("c2").losses[done - cap]


@pytest.mark.parametrize("overhead", [True, False])
def test_attained_service_counts_chunk_overhead_unless_told_not_to(overhead: bool) -> None:
    # 100-iteration chunks of 0.01 s iterations with 0.02 s overhead each: the
    # live scheduler counts 1 s of service a chunk; the simulator by default 1.02 s.
    trace = tiny_trace()
    seen: list[float] = []

    class Recording(Watching):
        def allocate(self, snapshot: Snapshot) -> list[Grant]:
            seen.extend(j.attained_seconds for j in snapshot.waiting() if j.losses)
            return super().allocate(snapshot)

    simulate(Recording(), trace, [Arrival(0, 0.0, "c2")],
             SimConfig(slots=1, attained_overhead=overhead))
    per_chunk = 1.0 + (0.02 if overhead else 0.0)
    assert seen == pytest.approx([per_chunk * k for k in range(1, 6)])


def test_a_chunk_lengthened_while_slots_idle_yields_to_a_job_that_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Job 0 runs alone on two slots: its second chunk is lengthened to five.
    # Jobs 1 and 2 arrive during it; 1 takes the idle slot and 2 waits, so
    # job 0 ends at its yield point (one chunk) and job 2 starts then.
    curve = TraceCurve(id="long", losses=tuple(1 / k for k in range(1, 2001)),
                       seconds=(0.01,) * 2000, chunk_overhead_seconds=0.0)
    trace = Trace((curve,))
    arrivals = [Arrival(0, 0.0, "long"), Arrival(1, 0.5, "long"), Arrival(2, 0.5, "long")]

    def first_start_of_job_2(idle_factor: float) -> float:
        result = simulate(build_policy("fair", trace, arrivals), trace, arrivals,
                          SimConfig(slots=2, chunk_seconds=0.5, idle_factor=idle_factor))
        job = result.jobs[2]
        return job.iteration_times[0] - job.curve.seconds[0]

    lengthened_at = 10 * 0.01  # job 0's first chunk measures its speed (10 iterations)
    assert first_start_of_job_2(5) == pytest.approx(lengthened_at + 0.5)
    # With no lengthening it waits for a plain chunk: the yield costs it nothing.
    assert first_start_of_job_2(1) == pytest.approx(lengthened_at + 0.5)
    # Unyielding, it would wait for job 1's whole chunk (sized from job 0's
    # speed), the first slot to free while job 0's runs on to 2.6 s.
    monkeypatch.setattr(simulator, "_cut_short", lambda *_: None)
    assert first_start_of_job_2(5) == pytest.approx(0.5 + 0.5)


def test_a_cut_chunk_reports_only_the_iterations_it_ran() -> None:
    curve = TraceCurve(id="long", losses=tuple(1 / k for k in range(1, 2001)),
                       seconds=(0.01,) * 2000, chunk_overhead_seconds=0.0)
    trace = Trace((curve,))
    arrivals = [Arrival(0, 0.0, "long"), Arrival(1, 0.5, "long"), Arrival(2, 0.5, "long")]
    result = simulate(build_policy("fair", trace, arrivals), trace, arrivals,
                      SimConfig(slots=2, chunk_seconds=0.5, idle_factor=5))
    job = result.jobs[0]
    assert job.finish is not None and job.done == 2000
    # One point per iteration, in time order, and its service is its iterations' time.
    assert len(job.iteration_times) == 2000
    assert np.all(np.diff(job.iteration_times) > 0)
    assert job.attained == pytest.approx(2000 * 0.01)
