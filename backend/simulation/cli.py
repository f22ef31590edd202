"""``slaq simulate`` and ``slaq record-trace``: argparse front ends.

``simulate_main`` runs one workload under each requested policy in the
simulator and prints a table (or, with ``--json``, one JSON object keyed by
policy name); ``record_trace_main`` records loss curves of the portal's own
algorithms into a trace file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from backend.scheduling.metrics import Figures, figures
from backend.scheduling.policies.slaq import COMPLETION_WEIGHT as DEFAULT_COMPLETION_WEIGHT
from backend.scheduling.registry import DEFAULT_COMPLETION_GUARD, POLICIES, policy_runs
from backend.scheduling.simulator import SimConfig, SimResult, build_policy, simulate
from backend.scheduling.trace import load_trace, save_trace
from backend.scheduling.workload import generate_workload

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDARD_TRACE = REPO_ROOT / "data" / "traces" / "standard.json"
TORCH_TRACE = REPO_ROOT / "data" / "traces" / "torch.json"
"""Deep-learning curves of the PyTorch trainers (``slaq record-trace --preset torch``)."""
SWEEP_TRACES = {name: REPO_ROOT / "data" / "traces" / f"{name}.json"
                for name in ("sweep-numpy", "sweep-torch", "sweep-cnn", "sweep-transformer")}
"""Every configuration of a sweep (``slaq record-trace --preset sweep-numpy``)."""
SIM_POLICIES = ("fifo", "fair", "las", "slaq-classic", "slaq", "oracle")
"""Default comparison order: baselines first, oracle last."""


def run_policies(
    trace_path: Path, policies: list[str], *, slots: int, load: float, seed: int,
    jobs: int | None = None, chunk_seconds: float = 1.0, tenants: int = 1,
    completion_guards: Sequence[float] = (), completion_weights: Sequence[float] = (),
) -> dict[str, tuple[SimResult, Figures]]:
    """Simulate one workload under each policy; shared by the CLI and benchmarks.

    A trace with recorded arrivals (``record-trace --from-portal``) replays
    them; ``load``, ``seed``, ``jobs`` and ``tenants`` then do not apply.
    The guarded policies run once per completion guard in
    ``completion_guards`` (none: their default), labelled ``"slaq (guard 0.6)"``,
    and slaq once per completion weight in ``completion_weights`` (none: its
    default), ``"slaq (weight 0.01)"``."""
    trace = load_trace(trace_path)
    arrivals = list(trace.arrivals) or generate_workload(
        trace, slots=slots, load=load, jobs=jobs, seed=seed, tenants=tenants,
        chunk_seconds=chunk_seconds)
    config = SimConfig(slots=slots, chunk_seconds=chunk_seconds)
    out = {}
    for run in policy_runs(policies, completion_guards, weights=completion_weights):
        policy = build_policy(run.policy, trace, arrivals, completion_guard=run.completion_guard,
                              completion_weight=run.completion_weight)
        result = simulate(policy, trace, arrivals, config)
        out[run.label] = (result, figures(result))
    return out


def _table(runs: dict[str, tuple[SimResult, Figures]]) -> str:
    keys = list(Figures.__dataclass_fields__)
    width = max(16, *(len(k) + 2 for k in keys))
    label = max([13, *(len(name) + 2 for name in runs)])
    head = f"{'policy':<{label}}" + "".join(f"{k:>{width}}" for k in keys) \
        + f"{'ms/decision':>13}"
    lines = [head, "-" * len(head)]
    for name, (result, fig) in runs.items():
        ms = 1000 * result.decision_seconds / max(result.decisions, 1)
        lines.append(f"{name:<{label}}" + "".join(f"{getattr(fig, k):>{width}.4g}" for k in keys)
                     + f"{ms:>13.3f}")
    return "\n".join(lines)


def simulate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="slaq simulate",
                                     description="Compare scheduling policies in the simulator.")
    parser.add_argument("--policy", action="append", choices=sorted(POLICIES),
                        help="policy to run (repeatable; default: all)")
    parser.add_argument("--slots", type=int, default=4, help="worker slots (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--trace", type=Path, default=STANDARD_TRACE, help="trace JSON file")
    parser.add_argument("--load", type=float, default=1.2,
                        help="offered load as a multiple of capacity (default 1.2)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="number of jobs (default: two per trace curve)")
    parser.add_argument("--chunk-seconds", type=float, default=1.0,
                        help="target chunk length (default 1.0, the live default)")
    parser.add_argument("--tenants", type=int, default=1, help="tenants to spread jobs over")
    parser.add_argument("--completion-guard", type=float, action="append", default=[],
                        metavar="FRACTION",
                        help="slaq's and oracle's completion-time guard: the share of a "
                        "round-robin turn every job is guaranteed, 0 (off) to 1 (default "
                        f"{DEFAULT_COMPLETION_GUARD:g}); repeat it to compare settings")
    parser.add_argument("--completion-weight", type=float, action="append", default=[],
                        metavar="WEIGHT",
                        help="slaq's completion weight, 0 (off) to 1 (default "
                        f"{DEFAULT_COMPLETION_WEIGHT:g}); repeat it to compare settings")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--report", type=Path, help="write a Plotly HTML report here")
    args = parser.parse_args(argv)
    if args.slots < 1 or args.load <= 0 or args.chunk_seconds <= 0:
        parser.error("--slots, --load and --chunk-seconds must be positive")
    if any(not 0 <= guard <= 1 for guard in args.completion_guard):
        parser.error("--completion-guard must be between 0 (off) and 1")
    if any(not 0 <= weight <= 1 for weight in args.completion_weight):
        parser.error("--completion-weight must be between 0 (off) and 1")
    policies = args.policy or list(SIM_POLICIES)
    try:
        runs = run_policies(args.trace, policies, slots=args.slots, load=args.load,
                            seed=args.seed, jobs=args.jobs, chunk_seconds=args.chunk_seconds,
                            tenants=args.tenants, completion_guards=args.completion_guard,
                            completion_weights=args.completion_weight)
    except (OSError, ValueError) as exc:
        print(f"slaq simulate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({name: fig.as_dict() for name, (_, fig) in runs.items()}, indent=2))
    recorded = len(load_trace(args.trace).arrivals)
    workload = (f"its {recorded} recorded arrivals" if recorded
                else f"load {args.load}, seed {args.seed}")
    if not args.json:
        print(f"trace {args.trace.name}, {args.slots} slots, {workload}")
        print(_table(runs))
    if args.report:
        from backend.simulation.report import run_figures, write_html

        note = (f"trace {args.trace.name}, {args.slots} slots, {workload}, "
                f"chunk {args.chunk_seconds}s")
        write_html(args.report, "SLAQ simulation", run_figures(runs), [note])
        if not args.json:
            print(f"report written to {args.report}")
    return 0


def record_trace_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="slaq record-trace",
        description="Run the portal's algorithms to convergence and save their loss curves.")
    parser.add_argument("--out", type=Path, default=None,
                        help="trace file to write (default: data/traces/<preset>.json; "
                        "standard.json for small)")
    parser.add_argument("--preset", choices=["standard", "small", "torch", *SWEEP_TRACES],
                        default="standard",
                        help="which set of runs (small: the golden-test trace; torch: the "
                        "PyTorch trainers, needs the torch extra; sweep-numpy, sweep-torch, "
                        "sweep-cnn, sweep-transformer: sweeps for tests/bench/sweeps.py)")
    parser.add_argument("--only", action="append", default=[],
                        help="keep runs whose id contains this text (repeatable)")
    parser.add_argument("--from-portal", action="store_true",
                        help="record the portal's own completed jobs instead (its database, "
                        "DATABASE_URL), with their arrival times: replay them with "
                        "slaq simulate --trace")
    parser.add_argument("--since", type=_duration, default=None, metavar="DURATION",
                        help="with --from-portal: jobs submitted in the last DURATION "
                        "(e.g. 90m, 24h, 7d; default 24h)")
    args = parser.parse_args(argv)
    if args.from_portal:
        return _record_portal(parser, args)
    if args.since is not None:
        parser.error("--since applies only with --from-portal")
    if args.preset == "torch":
        return _record_torch(parser, args)
    if args.preset in SWEEP_TRACES:
        return _record_sweep(parser, args)
    if args.out is None:
        args.out = STANDARD_TRACE
    from backend.simulation.record import SMALL_RUNS, STANDARD_RUNS, record_trace

    runs = STANDARD_RUNS if args.preset == "standard" else SMALL_RUNS
    if args.only:
        runs = tuple(r for r in runs if any(text in r.curve_id for text in args.only))
    if not runs:
        parser.error("no runs selected")

    def progress(curve: object) -> None:
        c = curve  # a TraceCurve; printed as it completes so long recordings show life
        print(f"{c.id}: {c.iterations} iterations, {c.total_seconds:.1f}s "  # type: ignore[attr-defined]
              f"({c.stop_reason})", flush=True)  # type: ignore[attr-defined]

    trace = record_trace(runs, description=f"{args.preset} runs of the portal's algorithms",
                         progress=progress)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, args.out)
    print(f"wrote {len(trace.curves)} curves to {args.out} "
          f"({args.out.stat().st_size / 1e6:.2f} MB)")
    return 0


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """Seconds in ``90m``, ``24h``, ``7d`` or a plain number of hours."""
    value, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "h")
    try:
        seconds = float(value) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration such as 90m, 24h or 7d") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be positive")
    return seconds


def _record_portal(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from datetime import timedelta

    from backend.core.db import session_scope
    from backend.core.models import utcnow
    from backend.services.portal_trace import WorkloadTooLarge, record_portal_workload

    if args.only or args.preset != "standard":
        parser.error("--from-portal records the portal's jobs: --preset and --only do not apply")
    if args.out is None:
        parser.error("--from-portal needs --out (where to write the trace)")
    until = utcnow()
    since = until - timedelta(seconds=args.since or 86400)
    try:
        with session_scope() as session:
            workload = record_portal_workload(session, since, until)
    except WorkloadTooLarge as exc:
        parser.error(str(exc))
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(workload.left_out.items()))
    if not workload.trace.curves:
        print(f"slaq record-trace: no job submitted since {since:%Y-%m-%d %H:%M} UTC has "
              f"completed; nothing written" + (f" (left out: {skipped})" if skipped else ""),
              file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(workload.trace, args.out)
    print(f"wrote {len(workload.trace.curves)} completed jobs submitted since "
          f"{since:%Y-%m-%d %H:%M} UTC to {args.out}" + (f"; left out: {skipped}" if skipped
                                                       else ""))
    print(f"replay them: slaq simulate --trace {args.out} --slots N --report what-if.html")
    return 0


def _record_torch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        from backend.simulation.record_torch import TORCH_RUNS, record_torch_trace
    except ImportError as exc:
        parser.error(f"the torch preset needs the torch extra (pip install '.[torch]'): {exc}")
    runs = tuple(r for r in TORCH_RUNS
                 if not args.only or any(text in r.curve_id for text in args.only))
    if not runs:
        parser.error("no runs selected")
    out: Path = args.out or TORCH_TRACE
    trace = record_torch_trace(runs, progress=lambda c: print(
        f"{c.id}: {c.iterations} iterations, {c.total_seconds:.1f}s ({c.stop_reason})",
        flush=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, out)
    print(f"wrote {len(trace.curves)} curves to {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


def _record_sweep(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from backend.simulation.record_sweeps import RECORDERS

    if args.only:
        parser.error("--only does not apply to sweeps: a sweep is recorded whole")
    try:
        trace = RECORDERS[args.preset](lambda line: print(line, flush=True))
    except ImportError as exc:
        parser.error(f"the {args.preset} preset needs the torch extra (pip install '.[torch]'): "
                     f"{exc}")
    out: Path = args.out or SWEEP_TRACES[args.preset]
    out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, out)
    print(f"wrote {len(trace.curves)} curves to {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":  # pragma: no cover - convenience for `python -m`
    raise SystemExit(simulate_main(sys.argv[1:]))
