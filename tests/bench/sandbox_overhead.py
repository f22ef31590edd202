"""Per-chunk overhead of sandboxed tenant code vs the same maths in-process.

    .venv/bin/python -m tests.bench.sandbox_overhead [--chunks 10] [--chunk-seconds 1.0]
    .venv/bin/python -m tests.bench.sandbox_overhead --torch [--chunks 5] [--hidden 4096]

``--torch`` instead measures a tenant torch trainer (``torch_mlp.py``, by
default 3 hidden layers of 4096: 33.6M parameters, ~400 MB of state with
Adam) chunk by chunk: how long until its sandbox is ready to step (sandbox
start, tenant module import and model build, restore of the last state), in
a cold sandbox, in a pre-started spare that has imported torch, and for the
same steps in-process; and how long its state takes to cross.

One trainer source (``tests/fixtures/trainers/logistic.py``) is run two ways,
chunk by chunk as a worker runs a job: built from params, data and seed,
restored from the last chunk's state, stepped in batches of ``BATCH_SECONDS`` (as workers do)
until the chunk's iterations are done, evaluated, its state taken, closed.

* in-process: the class imported into this process (``slaq_trainer`` is the
  contract module), as a built-in trainer runs;
* sandboxed, cold start: one fresh bubblewrap sandbox per chunk, started
  when the chunk starts;
* sandboxed, pre-started spare: one fresh sandbox per chunk too, but started
  (empty) while the previous chunk ran, as workers do by default
  (``SANDBOX_PRESTART``).

Both chunks run the same number of iterations (calibrated so the in-process
chunk takes ``--chunk-seconds``). Prints per-chunk wall time, the difference
in ms and as a share of the chunk, and where the sandbox's time goes
(start to ready, load + init, restore, steps, state, close). Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import resource
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from backend.core.settings import Settings
from workers.datasets import Dataset
from workers.iterations import BATCH_SECONDS
from workers.sandbox import spare
from workers.sandbox import trainer as sandboxed
from workers.trainers import contract
from workers.trainers.contract import Trainer, TrainingData

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "logistic.py"
PARAMS = {"learning_rate": 0.1}
SIDES = ("in-process", "sandboxed, cold start", "sandboxed, pre-started spare")


def _data(rows: int = 8000, features: int = 32, classes: int = 4) -> TrainingData:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, features))
    y = rng.integers(0, classes, rows)
    split = rows * 4 // 5
    return TrainingData(
        name="bench", task="classification",
        train=Dataset(name="bench", task="classification", X=X[:split], y=y[:split],
                      n_classes=classes),
        validation=Dataset(name="bench", task="classification", X=X[split:], y=y[split:],
                           n_classes=classes))


def _in_process_class() -> type[Trainer]:
    sys.modules.setdefault("slaq_trainer", contract)
    spec = importlib.util.spec_from_file_location("bench_tenant_trainer", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type[Trainer] = module.SoftmaxRegression
    return cls


def _drive(trainer: Trainer, state: bytes | None, iterations: int, batch: int,
           marks: dict[str, float]) -> bytes:
    started = time.perf_counter()
    if state is not None:
        trainer.restore(state)
    marks["restore"] = time.perf_counter() - started
    started = time.perf_counter()
    done = 0
    while done < iterations:
        n = min(batch, iterations - done)
        trainer.step(n)
        done += n
    trainer.evaluate()
    marks["steps"] = time.perf_counter() - started
    started = time.perf_counter()
    blob = trainer.state()
    marks["state"] = time.perf_counter() - started
    return blob


def in_process_chunk(cls: type[Trainer], data: TrainingData, state: bytes | None,
                     iterations: int, batch: int) -> tuple[float, bytes, dict[str, float]]:
    marks: dict[str, float] = {}
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # as the sandbox captures it
        trainer = cls(cls.Params.model_validate(PARAMS), data, 1)
    marks["build"] = time.perf_counter() - started
    blob = _drive(trainer, state, iterations, batch, marks)
    trainer.close()
    return time.perf_counter() - started, blob, marks


def sandboxed_chunk(settings: Settings, data: TrainingData, state: bytes | None,
                    iterations: int, batch: int,
                    prestart: bool) -> tuple[float, bytes, dict[str, float]]:
    marks: dict[str, float] = {}
    started = time.perf_counter()
    data_meta, blob = sandboxed.encode_data(data)
    trainer = sandboxed.start_sandbox(
        sandboxed.limits_from(settings), data, 1, call_seconds=60.0,
        max_state_bytes=sandboxed.max_state_bytes(settings), prestart=prestart)
    marks["start"] = time.perf_counter() - started
    loaded = time.perf_counter()
    trainer.load_and_init(SOURCE.read_bytes(), data_meta, blob, PARAMS)
    marks["load+init"] = time.perf_counter() - loaded
    out = _drive(trainer, state, iterations, batch, marks)
    closing = time.perf_counter()
    trainer.close()
    marks["close"] = time.perf_counter() - closing
    return time.perf_counter() - started, out, marks


def _calibrate(cls: type[Trainer], data: TrainingData, chunk_seconds: float) -> tuple[int, int]:
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = cls(cls.Params.model_validate(PARAMS), data, 1)
    trainer.step(3)
    started = time.perf_counter()
    trainer.step(20)
    each = (time.perf_counter() - started) / 20
    return max(1, int(chunk_seconds / each)), max(1, int(BATCH_SECONDS / each))


def _median(samples: list[dict[str, float]], key: str) -> float:
    return statistics.median(s[key] for s in samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--chunk-seconds", type=float, default=1.0)
    parser.add_argument("--torch", action="store_true",
                        help="time a tenant torch trainer's readiness and state instead")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()
    if args.torch:
        from tests.bench.sandbox_torch import main as torch_main

        torch_main(args.chunks, args.hidden, args.layers)
        return
    # Tenant code gets one BLAS thread (a chunk holds one CPU slot); give the
    # in-process side the same, or the comparison measures thread contention.
    threadpool_limits(1)
    settings = Settings(sandbox_step_timeout_seconds=60.0)
    data = _data()
    cls = _in_process_class()
    iterations, batch = _calibrate(cls, data, args.chunk_seconds)
    print(f"chunk: {iterations} iterations in step() calls of {batch} "
          f"(~{BATCH_SECONDS * 1000:.0f} ms each), {args.chunks} chunks per side")
    # Interleaved so machine load drifts hit every side alike.
    walls: dict[str, list[float]] = {side: [] for side in SIDES}
    marks: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    states: dict[str, bytes | None] = dict.fromkeys(SIDES)
    sandboxed_chunk(settings, data, None, 1, 1, False)  # warm the page cache once
    spare.replenish(sandboxed.limits_from(settings))  # a spare for the first chunk
    for _ in range(args.chunks):
        for side in SIDES:
            # The spare's imports (seconds of CPU with torch) run between
            # chunks on a worker; here they would land in whichever side runs
            # next, so wait them out first.
            spare.wait_ready(120)
            if side == "in-process":
                wall, states[side], mark = in_process_chunk(cls, data, states[side],
                                                            iterations, batch)
            else:
                wall, states[side], mark = sandboxed_chunk(
                    settings, data, states[side], iterations, batch, side.endswith("spare"))
            walls[side].append(wall)
            marks[side].append(mark)
    spare.discard()
    local = statistics.median(walls["in-process"]) * 1000
    chunk_ms = args.chunk_seconds * 1000
    calls = max(1, iterations // batch)
    print(f"{'in-process':30s} chunk (median): {local:8.1f} ms")
    for side in SIDES[1:]:
        box = statistics.median(walls[side]) * 1000
        print(f"{side:30s} chunk (median): {box:8.1f} ms; difference {box - local:7.1f} ms "
              f"= {100 * (box - local) / chunk_ms:5.1f}% of the chunk")
    # On a shared machine the step times of the two sides drift by more than
    # the overhead itself, so also add up the sandbox's own costs: the fixed
    # ones (median of each part, less what the in-process side spends on the
    # same parts) plus one pipe round trip per step() call.
    round_trip = _round_trip_ms(settings, data)
    print(f"pipe round trip (describe, median of 200): {round_trip:.2f} ms; "
          f"{calls} step() calls per chunk")
    local_fixed = sum(_median(marks["in-process"], k) for k in ("build", "restore", "state"))
    for side in SIDES[1:]:
        fixed = sum(_median(marks[side], k)
                    for k in ("start", "load+init", "restore", "state", "close"))
        total = fixed - local_fixed + calls * round_trip
        print(f"{side:30s} overhead: fixed {fixed:6.1f} ms - in-process {local_fixed:4.1f} ms "
              f"+ {calls} x {round_trip:.2f} ms pipe = {total:6.1f} ms per chunk "
              f"= {100 * total / chunk_ms:5.1f}% of a {args.chunk_seconds:g} s chunk "
              "(target <= 2%)")
        print("    breakdown (median ms): " + ", ".join(
            f"{key} {_median(marks[side], key):.1f}"
            for key in ("start", "load+init", "restore", "steps", "state", "close")))
    cpu = _interpreter_cpu_ms()
    print(f"CPU of one sandbox interpreter start (python -I -S, numpy + contract imports): "
          f"{cpu:.0f} ms = {100 * cpu / chunk_ms:.0f}% of a chunk's CPU; with a pre-started "
          "spare it runs between chunks, off the chunk's wall time")
    print("same final state every way: "
          f"{len({states[side] for side in SIDES}) == 1}")


def _round_trip_ms(settings: Settings, data: TrainingData) -> float:
    meta, blob = sandboxed.encode_data(data)
    trainer = sandboxed.start_sandbox(sandboxed.limits_from(settings), data, 1,
                                      call_seconds=60.0, max_state_bytes=1 << 26)
    with trainer:
        trainer.load_and_init(SOURCE.read_bytes(), meta, blob, PARAMS)
        samples = []
        for _ in range(200):
            started = time.perf_counter()
            trainer.call("describe", {"op": "describe"})
            samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def _interpreter_cpu_ms(runs: int = 5) -> float:
    site = sysconfig.get_path("purelib")
    code = (f"import sys; sys.path += [{site!r}, {str(Path(contract.__file__).parent)!r}]; "
            "import numpy, contract")
    samples = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-I", "-S", "-B", "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples) * 1000

if __name__ == "__main__":
    main()
