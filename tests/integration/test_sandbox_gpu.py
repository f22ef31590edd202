"""The slot's GPU in the sandbox: its device nodes, nothing else of /dev.

Needs no portal services (no database, Redis or backend settings), so it runs
as it is on a GPU host: ``pytest --noconftest tests/integration/test_sandbox_gpu.py``.
The cgroup parent comes from ``SANDBOX_CGROUP_PARENT``, as the worker's does.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from workers.datasets import Dataset
from workers.sandbox import SandboxedTrainer, SandboxError
from workers.sandbox.gpu import slot_gpus
from workers.sandbox.runner import SandboxLimits
from workers.sandbox.trainer import encode_data, start_sandbox
from workers.trainers.contract import TrainingData

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
BWRAP_DEV = {"console", "core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr",
             "stdin", "stdout", "tty", "urandom", "zero"}
"""What bubblewrap's --dev holds (and the private /dev/shm)."""
GPU_NODES = re.compile(r"nvidia(\d+|ctl|-uvm|-uvm-tools)")


def _data() -> TrainingData:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(512, 16)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    table = Dataset(name="gpu", task="classification", X=X, y=y, n_classes=2)
    return TrainingData(name="gpu", task="classification", train=table)


def _limits(**overrides: object) -> SandboxLimits:
    values: dict[str, object] = {
        "memory_mib": 8192, "gpus": slot_gpus("auto"), "preimport": ("numpy", "torch"),
        "cgroup_parent": os.environ.get("SANDBOX_CGROUP_PARENT", ""), **overrides}
    return SandboxLimits(**values)  # type: ignore[arg-type]


def _run(fixture: str, limits: SandboxLimits, params: dict[str, object]) -> SandboxedTrainer:
    data = _data()
    meta, blob = encode_data(data)
    trainer = start_sandbox(limits, data, 1, call_seconds=300.0, max_state_bytes=1 << 30)
    trainer.load_and_init((FIXTURES / fixture).read_bytes(), meta, blob, params)
    return trainer


def test_sandbox_dev_holds_only_the_slot_gpu_nodes() -> None:
    limits = _limits(preimport=("numpy",))
    trainer = _run("list_dev.py", limits, {})
    with trainer, pytest.raises(SandboxError) as raised:
        trainer.step(1)
    listed = set(json.loads(str(raised.value).split("DEV:", 1)[1].split(" (at ")[0]))
    expected_gpu = {f"nvidia{m}" for m in limits.gpus}
    if limits.gpus:
        expected_gpu |= {n for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
                         if Path("/dev", n).exists()}
    assert {n for n in listed if GPU_NODES.fullmatch(n)} == expected_gpu
    assert listed - expected_gpu <= BWRAP_DEV, listed - expected_gpu - BWRAP_DEV


def test_tenant_torch_trainer_runs_on_the_slot_gpu() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed on this worker")
    limits = _limits()
    if not limits.gpus or not torch.cuda.is_available():
        nodes = sorted(p.name for p in Path("/dev").glob("nvidia*"))
        pytest.skip(f"no GPU for this slot (device nodes {nodes or 'none'}; torch sees "
                    f"{torch.cuda.device_count()} CUDA devices)")
    trainer = _run("torch_mlp.py", limits, {"hidden": 512, "layers": 3})
    with trainer:
        metrics = trainer.step(50)
        assert [m["on_cuda"] for m in metrics] == [1.0] * 50
        assert metrics[-1]["loss"] < metrics[0]["loss"]
        output = trainer.output_tail()
        assert f"on cuda ({torch.cuda.get_device_name(0)})" in output, output
        state = trainer.state()
    with _run("torch_mlp.py", limits, {"hidden": 512, "layers": 3}) as resumed:
        resumed.restore(state)
        assert resumed.iteration == 50
        assert resumed.step(1)[0]["on_cuda"] == 1.0


def test_tenant_loop_runs_on_the_slot_gpu_and_resumes_there() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed on this worker")
    limits = _limits()
    if not limits.gpus or not torch.cuda.is_available():
        pytest.skip("no GPU for this slot")
    with _run("torch_loop_gpu.py", limits, {"hidden": 512}) as trainer:
        metrics = trainer.step(40)
        assert [m["on_cuda"] for m in metrics] == [1.0] * 40
        assert metrics[-1]["loss"] < metrics[0]["loss"]
        state = trainer.state()
        going_on = trainer.step(5)
    with _run("torch_loop_gpu.py", limits, {"hidden": 512}) as resumed:
        resumed.restore(state)
        again = resumed.step(5)
    # Restored on the GPU from its checkpoint, the loop steps on as it had.
    assert [m["on_cuda"] for m in again] == [1.0] * 5
    assert [m["loss"] for m in again] == pytest.approx([m["loss"] for m in going_on], rel=1e-4)
