"""What the loop contract costs: the same model as a loop script and as a
Trainer, side by side, resident (one trainer each, kept between chunks).

    .venv/bin/python -m tests.bench.loop_overhead [--rounds 7] [--iterations 400]
        [--where sandbox in-process]

The loop is ``examples/loops/digits_loop.py``; its twin written as a Trainer
is ``tests/fixtures/trainers/digits_mlp.py`` (same network, optimiser and
batch order: both report the same losses, which the bench checks). Each
round runs one chunk of ``--iterations`` through the worker's own iteration
loop (``workers.iterations.run_iterations``, evaluating every 50) on each,
alternating which goes first; slot time is the chunk's wall time, so the
loop's costs (handing control to its thread and back, the parking in
``report()``) are in it. In-process the worker steps a Trainer one
iteration per call and a loop in batches (as it steps sandboxed code), so
there the comparison also shows what batching saves. Prints per-round
figures and the median overhead of the loop over the Trainer, in wall and
CPU time; asserts nothing (figures depend on the machine). On a busy
machine chunk-to-chunk noise is larger than the overhead, so it first
measures the adapter alone: a loop and a Trainer that train nothing, per
iteration in CPU time, the difference then set against the model's own CPU
time per iteration.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

from backend.core.settings import Settings
from tests.utils.loop_scripts import EXAMPLES, load_loop_script
from workers.datasets import load_dataset
from workers.iterations import run_iterations
from workers.sandbox import spare
from workers.sandbox import trainer as sandboxed
from workers.stopping import StopRule
from workers.trainers.contract import Trainer, TrainingData
from workers.trainers.data import holdout
from workers.trainers.loop import LoopContext, loop_trainer

LOOP = EXAMPLES / "digits_loop.py"
TWIN = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "digits_mlp.py"
EVAL_EVERY = 50
KINDS = ("trainer", "loop")


def _twin_class() -> type[Trainer]:
    load_loop_script(LOOP)  # puts the contract package in sys.modules as slaq_trainer
    spec = importlib.util.spec_from_file_location("bench_digits_mlp", TWIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type[Trainer] = module.DigitsMLP
    return cls


def _open(kind: str, where: str, data: TrainingData) -> Trainer:
    if where == "in-process":
        cls = _twin_class() if kind == "trainer" else load_loop_script(LOOP)
        return cls(cls.Params(), data, 1)
    settings = Settings()
    limits = sandboxed.limits_from(settings)
    meta, blob = sandboxed.encode_data(data)
    box = sandboxed.start_sandbox(limits, data, 1, call_seconds=600.0,
                                  max_state_bytes=sandboxed.max_state_bytes(settings))
    source = (TWIN if kind == "trainer" else LOOP).read_bytes()
    box.load_and_init(source, meta, blob, {})
    return box


def _cpu_seconds(trainer: Trainer) -> float:
    """CPU time of this process and, for a sandboxed trainer, of every process
    in its sandbox: what the chunk cost, whatever else the machine runs."""
    import psutil

    total = time.process_time()
    process = getattr(trainer, "process", None)
    if process is not None:
        root = psutil.Process(process.proc.pid)
        for proc in [root, *root.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def _chunk(trainer: Trainer, start: int, iterations: int) -> tuple[float, float, list[float]]:
    rule = StopRule(max_iterations=start + iterations, tolerance=None)
    cpu = _cpu_seconds(trainer)
    began = time.perf_counter()
    run = run_iterations(trainer, rule, iterations, lambda _run: True, start=start,
                         eval_every=EVAL_EVERY)
    seconds = time.perf_counter() - began
    cpu = _cpu_seconds(trainer) - cpu
    if run.error is not None:
        raise run.error
    return seconds, cpu, [p[1] for p in run.points]


def measure(where: str, rounds: int, iterations: int, extra_us: float) -> float:
    data = holdout(load_dataset("digits", {}))
    trainers = {kind: _open(kind, where, data) for kind in KINDS}
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    cpus: dict[str, list[float]] = {kind: [] for kind in KINDS}
    losses: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        # Round 0 warms up (first batches, page faults) and is not counted.
        for index in range(rounds + 1):
            order = KINDS if index % 2 else KINDS[::-1]
            for kind in order:
                seconds, cpu, got = _chunk(trainers[kind], index * iterations, iterations)
                losses[kind] += got
                if index:
                    times[kind].append(seconds)
                    cpus[kind].append(cpu)
    finally:
        for trainer in trainers.values():
            trainer.close()
    same = losses["trainer"] == losses["loop"]
    print(f"\n{where}: {rounds} chunks of {iterations} iterations each (evaluating every "
          f"{EVAL_EVERY}); same losses from both: {'yes' if same else 'NO'}")
    print(f"{'chunk':>6s} {'trainer s':>10s} {'loop s':>10s} {'wall ratio':>11s} "
          f"{'trainer cpu':>12s} {'loop cpu':>9s} {'cpu ratio':>10s}")
    walls, cpu_ratios = [], []
    for index in range(rounds):
        a, b = times["trainer"][index], times["loop"][index]
        c, d = cpus["trainer"][index], cpus["loop"][index]
        walls.append(b / a)
        cpu_ratios.append(d / c)
        print(f"{index + 1:6d} {a:10.3f} {b:10.3f} {b / a:11.4f} {c:12.3f} {d:9.3f} "
              f"{d / c:10.4f}")
    per_iteration = {k: statistics.median(v) / iterations * 1000 for k, v in times.items()}
    wall = statistics.median(walls) - 1
    cpu = statistics.median(cpu_ratios) - 1
    print(f"median ms per iteration: trainer {per_iteration['trainer']:.3f}, loop "
          f"{per_iteration['loop']:.3f}")
    print(f"loop overhead (target <= 2% of slot time): {wall * 100:+.2f}% of wall time "
          f"(chunk ratios {min(walls):.3f}..{max(walls):.3f}), {cpu * 100:+.2f}% of CPU time "
          f"(chunk ratios {min(cpu_ratios):.3f}..{max(cpu_ratios):.3f})")
    trainer_cpu_us = statistics.median(cpus["trainer"]) / iterations * 1e6
    print(f"the adapter's own {extra_us:.2f} us per iteration is "
          f"{extra_us / trainer_cpu_us * 100:.2f}% of this model's {trainer_cpu_us:.0f} us of "
          "CPU per iteration")
    return cpu


class _NullTrainer(Trainer):
    """Does nothing per iteration but return its loss: what the portal costs a Trainer."""

    name = "null"
    batched = True

    def step(self, n: int) -> list[dict[str, float]]:
        self.iteration += n
        return [{"loss": 1.0, "accuracy": 0.5} for _ in range(n)]

    def state(self) -> bytes:
        return b""

    def restore(self, blob: bytes) -> None:
        pass


def _null_loop(params: object, data: TrainingData, ctx: LoopContext) -> None:
    ctx.checkpoint(lambda: b"")
    while True:
        ctx.report(loss=1.0, accuracy=0.5)


def adapter_cost(iterations: int) -> float:
    """Microseconds of CPU the loop contract adds per iteration: a loop and a
    Trainer that do no training, through the worker's iteration loop, in-process
    (CPU time, so what else the machine runs hardly moves it)."""
    data = TrainingData(name="none", task="regression")
    costs = {}
    for kind, cls in (("trainer", _NullTrainer), ("loop", loop_trainer(_null_loop, name="null"))):
        samples = []
        for _ in range(5):
            trainer = cls(cls.Params(), data, 1)
            rule = StopRule(max_iterations=iterations, tolerance=None)
            began = time.process_time()
            run = run_iterations(trainer, rule, iterations, lambda _run: True,
                                 eval_every=EVAL_EVERY)
            samples.append((time.process_time() - began) / iterations * 1e6)
            trainer.close()
            assert run.error is None and len(run.points) == iterations
        costs[kind] = statistics.median(samples)
    extra = costs["loop"] - costs["trainer"]
    print(f"\nno model, {iterations} iterations, evaluating every {EVAL_EVERY}: the portal's "
          f"iteration loop costs {costs['trainer']:.2f} us per iteration with a Trainer, "
          f"{costs['loop']:.2f} us with a loop: the loop contract adds {extra:.2f} us per "
          "iteration")
    return extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--where", nargs="+", default=["sandbox", "in-process"],
                        choices=["sandbox", "in-process"])
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as the sandbox's OMP_NUM_THREADS=1
    print(f"digits MLP (64 hidden, Adam, batch 64) on {sys.platform}, torch "
          f"{torch.__version__}, one thread")
    extra = adapter_cost(200_000)
    for where in args.where:
        measure(where, args.rounds, args.iterations, extra)
    spare.discard()


if __name__ == "__main__":
    main()
