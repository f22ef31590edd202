"""A tenant torch trainer's chunk: time until its sandbox is ready to step,
and its state's crossing (run through ``sandbox_overhead --torch``).

Each chunk is what a worker does when a job comes to its slot: a sandbox
(cold, or the pre-started spare that has imported numpy and torch), the
tenant's module loaded and its model built, the last chunk's state restored,
one step, the state taken. The same trainer class in-process gives the part
of that time which is the trainer's own (building a model, loading a state),
so the difference is what the sandbox costs. Prints figures; asserts nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from backend.core.settings import Settings
from workers.datasets import Dataset
from workers.sandbox import spare
from workers.sandbox import trainer as sandboxed
from workers.sandbox.runner import SandboxLimits
from workers.trainers import contract
from workers.trainers.contract import Trainer, TrainingData

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "torch_mlp.py"
MODES = ("in-process", "sandbox, cold", "sandbox, warm spare")


def _data() -> TrainingData:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 16)).astype(np.float32)
    table = Dataset(name="bench", task="classification", X=X,
                    y=(X[:, 0] > 0).astype(np.int64), n_classes=2)
    return TrainingData(name="bench", task="classification", train=table)


def _in_process_class() -> type[Trainer]:
    sys.modules.setdefault("slaq_trainer", contract)
    spec = importlib.util.spec_from_file_location("bench_torch_trainer", SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type[Trainer] = module.TorchMLP
    return cls


def _chunk(mode: str, limits: SandboxLimits, params: dict[str, int], state: bytes | None,
           cls: type[Trainer]) -> tuple[dict[str, float], bytes]:
    marks: dict[str, float] = {}
    data = _data()
    started = time.perf_counter()
    trainer: Trainer
    if mode == "in-process":
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = cls(cls.Params.model_validate(params), data, 1)
        marks["start"] = 0.0
        marks["load+init"] = time.perf_counter() - started
    else:
        meta, blob = sandboxed.encode_data(data)
        box = sandboxed.start_sandbox(limits, data, 1, call_seconds=600.0,
                                      max_state_bytes=(limits.memory_mib // 4) << 20,
                                      prestart=mode.endswith("spare"))
        marks["start"] = time.perf_counter() - started
        box.load_and_init(SOURCE.read_bytes(), meta, blob, dict(params))
        marks["load+init"] = time.perf_counter() - started - marks["start"]
        trainer = box
    mark = time.perf_counter()
    if state is not None:
        trainer.restore(state)
    marks["restore"] = time.perf_counter() - mark
    marks["ready"] = time.perf_counter() - started
    mark = time.perf_counter()
    trainer.step(1)
    marks["step"] = time.perf_counter() - mark
    mark = time.perf_counter()
    out = trainer.state()
    marks["state"] = time.perf_counter() - mark
    trainer.close()
    return marks, out


def main(chunks: int, hidden: int, layers: int) -> None:
    import torch

    torch.set_num_threads(1)  # as the sandbox's OMP_NUM_THREADS=1
    # The worker's limits from the environment (SANDBOX_CGROUP_PARENT etc.), as a worker's.
    limits = sandboxed.limits_from(Settings())
    params = {"hidden": hidden, "layers": layers}
    cls = _in_process_class()
    device = "cuda" if limits.gpus and torch.cuda.is_available() else "cpu"
    print(f"tenant torch MLP, {layers} x {hidden} hidden, Adam, on {device}; memory limit "
          f"{limits.memory_mib} MiB, state cap {limits.memory_mib // 4} MiB; {chunks} chunks "
          "per mode, interleaved")
    states: dict[str, bytes | None] = dict.fromkeys(MODES)
    marks: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    spare.replenish(limits)
    for _ in range(chunks + 1):  # the first round warms page caches and is not counted
        for mode in MODES:
            if mode.endswith("spare"):
                # As a worker: the spare was started during the last chunk; wait
                # until it has finished its imports so this chunk only takes it.
                spare.wait_ready(120)
            got, states[mode] = _chunk(mode, limits, params, states[mode], cls)
            marks[mode].append(got)
    spare.discard()
    size = len(states["in-process"] or b"")
    print(f"state: {size / 1e6:.0f} MB")
    print(f"{'':22s}" + "".join(f"{key:>11s}" for key in
                                ("start", "load+init", "restore", "ready", "step", "state")))
    for mode in MODES:
        counted = marks[mode][1:]
        print(f"{mode:22s}" + "".join(
            f"{statistics.median(m[key] for m in counted) * 1000:9.0f}ms"
            for key in ("start", "load+init", "restore", "ready", "step", "state")))
    def median_ms(mode: str, *keys: str) -> float:
        return statistics.median(sum(m[k] for k in keys) for m in marks[mode][1:]) * 1000

    local_build = median_ms("in-process", "load+init")
    local_ready = median_ms("in-process", "ready")
    for mode in MODES[1:]:
        # The trainer's own work (building the model, loading its state) is
        # paid in-process too; what remains is the sandbox's.
        own = median_ms(mode, "start", "load+init") - local_build
        crossing = median_ms(mode, "restore") - median_ms("in-process", "restore")
        print(f"{mode}: sandbox ready for the tenant's model {own:.0f} ms later than "
              f"in-process (target <= 100 ms with a warm spare); the state's crossing adds "
              f"{crossing:.0f} ms to restore, "
              f"{median_ms(mode, 'state') - median_ms('in-process', 'state'):.0f} ms to state(); "
              f"ready to step {median_ms(mode, 'ready'):.0f} ms after the chunk starts "
              f"(in-process {local_ready:.0f} ms)")
