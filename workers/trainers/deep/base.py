"""What every PyTorch trainer shares: device choice, private RNG, checkpoints.

Exact resumption is the point of this module. A chunk restored from
``state()`` must produce the same losses, bit for bit, as the run that was
never interrupted, so:

* all randomness (weight init, minibatch indices) comes from one private
  ``torch.Generator`` on the CPU that the trainer owns and checkpoints; the
  global RNG is never consumed, so other code in the worker cannot shift a
  job's stream and a job cannot shift another's;
* the models have no dropout and use only kernels with deterministic
  implementations (explicit attention, strided convolutions instead of
  pooling), and ``torch.use_deterministic_algorithms`` is on;
* the number of CPU threads is fixed (``SLAQ_TORCH_THREADS``, default 1),
  because a reduction split over a different number of threads can round
  differently.

Checkpoints are ``torch.save`` of plain state dicts and tensors, read back
with ``weights_only=True``, so a blob can never run code when loaded.
"""

from __future__ import annotations

import functools
import io
import logging
import os
from abc import abstractmethod
from typing import Any, ClassVar

import torch
from torch import nn

from workers.trainers.contract import Metrics, Trainer, TrainerParams, TrainingData

log = logging.getLogger(__name__)

# cuBLAS is only deterministic with a fixed workspace; it reads this when it
# first initialises, so it must be set before any CUDA matmul runs.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

THREADS_ENV = "SLAQ_TORCH_THREADS"
STATE_VERSION = 1


def torch_threads() -> int:
    """CPU threads every torch trainer in this process uses (fixed for determinism)."""
    try:
        return max(1, int(os.environ.get(THREADS_ENV, "1")))
    except ValueError:
        return 1


@functools.cache
def pick_device() -> torch.device:
    """The first GPU when the worker has one, else the CPU; said once per process,
    so an operator (and the GPU pool's test) can see where training runs."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    log.info("PyTorch trainers train on %s (%s)", device, name)
    return device


def _configure_process() -> None:
    threads = torch_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    # warn_only: an op without a deterministic kernel should not fail a job;
    # the models here use none, and the unit tests check exact resumption.
    torch.use_deterministic_algorithms(True, warn_only=True)


class TorchTrainer(Trainer):
    """Base of the PyTorch trainers: subclasses build ``self.model`` in
    ``build_model`` and run one optimisation step in ``train_step``."""

    uses_gpu: ClassVar[bool] = True
    learning_rate_field: ClassVar[str] = "learning_rate"

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        super().__init__(params, data, seed)
        _configure_process()
        self.device = pick_device()
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(self.seed)
        # Layers initialise their weights from the global RNG; fork it so the
        # init is drawn from the job's seed and the global stream is left as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self.generator)))
            model = self.build_model()
        self.model: nn.Module = model.to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=float(getattr(params, self.learning_rate_field)),
            weight_decay=float(getattr(params, "weight_decay", 0.0)))

    @abstractmethod
    def build_model(self) -> nn.Module:
        """The freshly initialised model (on the CPU; the base moves it)."""

    @abstractmethod
    def train_step(self) -> Metrics:
        """One optimisation step on a minibatch drawn with ``self.generator``."""

    def sample(self, high: int, size: int) -> torch.Tensor:
        """``size`` indices in ``[0, high)`` from the job's generator, on the device."""
        return torch.randint(0, high, (size,), generator=self.generator).to(self.device)

    def step(self, n: int) -> list[Metrics]:
        self.model.train()
        out: list[Metrics] = []
        for _ in range(n):
            out.append(self.train_step())
            self.iteration += 1
        return out

    def state(self) -> bytes:
        blob: dict[str, Any] = {
            "version": STATE_VERSION,
            "trainer": self.name,
            "iteration": self.iteration,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
        }
        if self.device.type == "cuda":
            blob["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        buffer = io.BytesIO()
        torch.save(blob, buffer)
        return buffer.getvalue()

    def restore(self, blob: bytes) -> None:
        # weights_only: tensors and plain containers only; never unpickles code.
        saved = torch.load(io.BytesIO(blob), map_location=self.device, weights_only=True)
        if not isinstance(saved, dict) or saved.get("version") != STATE_VERSION:
            raise ValueError("not a checkpoint of this trainer version")
        if saved.get("trainer") != self.name:
            raise ValueError(f"checkpoint of {saved.get('trainer')!r}, not {self.name!r}")
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.generator.set_state(saved["generator"].cpu())
        if "cuda_rng" in saved and self.device.type == "cuda":
            torch.cuda.set_rng_state(saved["cuda_rng"].cpu(), self.device)
        self.iteration = int(saved["iteration"])
