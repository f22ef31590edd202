"""``SandboxedTrainer``: the trainer contract, served by tenant code in a sandbox.

The worker drives it like any trainer; each call becomes one request over the
pipe with a deadline. Whatever goes wrong in the child (an exception, a hang,
a kill by a limit, garbage on the pipe) becomes a ``SandboxError`` whose
message is the reason shown with the job, and the sandbox is ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from workers.sandbox import gpu, protocol, spare
from workers.sandbox.runner import SandboxLimits, SandboxProcess
from workers.trainers.contract import Metrics, Trainer, TrainerParams, TrainingData

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from backend.core.models import Job

MAX_SOURCE_BYTES = 1 << 20
STARTUP_SECONDS = 30.0
"""Interpreter start and imports; not a tenant's time, so not its deadline."""
REPLY_BUDGET = protocol.MAX_HEADER_BYTES // 2
"""What one step reply should stay under: half the cap, since metrics vary
in size from one batch to the next."""
STATE_IO_BYTES = 1 << 30
"""Per read or write of a state: one call, so one copy and no joining, below 1 GiB."""
FIRST_STEP_CALL = 8
"""Iterations of a sandbox's first step call, which measures its reply size."""
STATE_SHARE = 4
"""The state cap, by default, is this fraction of the memory limit: taking a
state holds the model, its serialised copy and the copy in the state memfd
at once, all inside the limit."""
_SIGNALS = {9: "SIGKILL", 11: "SIGSEGV", 6: "SIGABRT", 7: "SIGBUS"}


class SandboxError(RuntimeError):
    """Tenant code failed; the message is the job's readable reason and
    ``output_tail`` what the trainer printed up to then (shown with the job)."""

    def __init__(self, message: str, output_tail: str = "") -> None:
        super().__init__(message)
        self.output_tail = output_tail


class SandboxParams(TrainerParams):
    """Whatever the tenant's own ``Params`` accepted (validated in the sandbox)."""


def encode_data(data: TrainingData) -> tuple[dict[str, Any], bytes]:
    """The job's data for the sandbox: a description and one blob. Arrays are
    laid end to end (the child maps them without copying or parsing); text is JSON."""
    if data.task == "text" or data.train is None:
        doc = {"text": data.text or "", "validation_text": data.validation_text}
        return {"kind": "text"}, json.dumps(doc).encode()
    parts: list[bytes] = []
    described: list[dict[str, Any]] = []
    offset = 0
    for prefix, table in (("", data.train), ("val_", data.validation)):
        if table is None:
            continue
        for name, values in (("X", table.X), ("y", table.y)):
            if values is None:
                continue
            array = np.ascontiguousarray(values)
            described.append({"name": prefix + name, "dtype": array.dtype.str,
                              "shape": list(array.shape), "offset": offset})
            parts.append(array.tobytes())
            # Keep every array aligned for its dtype (and then some).
            offset += len(parts[-1])
            pad = -offset % 64
            parts.append(b"\0" * pad)
            offset += pad
    meta = {"kind": "arrays", "task": data.task, "n_classes": int(data.train.n_classes),
            "arrays": described}
    return meta, b"".join(parts)


class SandboxedTrainer(Trainer):
    """A proxy for a tenant's trainer running in its own sandboxed process."""

    name: ClassVar[str] = "code"
    Params: ClassVar[type[TrainerParams]] = SandboxParams
    batched: ClassVar[bool] = True
    """Every call crosses a pipe: the iteration loop steps it in batches."""

    def __init__(self, process: SandboxProcess, data: TrainingData, seed: int, *,
                 call_seconds: float, max_state_bytes: int) -> None:
        super().__init__(SandboxParams(), data, seed)
        self.process = process
        self.call_seconds = call_seconds
        self.max_state_bytes = max_state_bytes
        self.reader = protocol.Reader(process.read_fd)
        self.tenant_name = ""
        self.validated_params: dict[str, Any] = {}
        self.replenish_spare = False
        """Start the worker's next spare sandbox when this one closes."""
        self.reply_bytes_per_iteration = 0.0
        """The most reply bytes one iteration's metrics took so far."""
        self.unpaid_start_seconds = 0.0
        """What this sandbox's start would have cost on top had no spare been
        warm: its imports, less the part this job waited for. A move to a slot
        whose spare is still importing pays it, so the switch cost counts it."""

    # -- plumbing -----------------------------------------------------------
    def _death_reason(self) -> str | None:
        if self.process.oom_killed():
            return self._oom_reason()
        # The pipe closes as the process dies; give the kernel a moment to finish.
        try:
            code = self.process.proc.wait(0.5)
        except subprocess.TimeoutExpired:
            return None
        signal_no = -code if code < 0 else code - 128 if code > 128 else 0
        if signal_no == 9:
            return "trainer process was killed (SIGKILL)"
        if signal_no:
            return f"trainer process died of {_SIGNALS.get(signal_no, f'signal {signal_no}')}"
        return f"trainer process exited (status {code}) instead of answering"

    def _oom_reason(self) -> str:
        return f"trainer ran out of memory (limit {self.process.limits.memory_mib} MiB)"

    def _fail(self, reason: str) -> SandboxError:
        output = self.output_tail()
        self.close()
        return SandboxError(reason, output)

    def send(self, payload: bytes, what: str, *, seconds: float | None = None) -> None:
        if self.process.closed:
            raise SandboxError(f"trainer sandbox is closed; cannot {what}")
        limit = self.call_seconds if seconds is None else seconds
        try:
            protocol.write_all(self.process.write_fd, payload, time.monotonic() + limit)
        except protocol.DeadlineExceeded:
            raise self._fail(f"trainer did not take {what} within {limit:g} s; "
                             "it was stopped") from None
        except EOFError:
            reason = self._death_reason() or "trainer process closed its pipe"
            raise self._fail(f"{reason} (during {what})") from None

    def receive(self, what: str, *,
                seconds: float | None = None) -> tuple[dict[str, Any], list[bytes]]:
        limit = self.call_seconds if seconds is None else seconds
        try:
            # States cross in the memfd: the pipe carries no raw frames back.
            reply, got = self.reader.message(0, time.monotonic() + limit)
        except protocol.DeadlineExceeded:
            if self.process.oom_killed():
                raise self._fail(f"{self._oom_reason()} (during {what})") from None
            raise self._fail(f"trainer did not answer {what} within {limit:g} s; "
                             "it was stopped") from None
        except EOFError:
            reason = self._death_reason() or "trainer process closed its pipe"
            raise self._fail(f"{reason} (during {what})") from None
        except protocol.ProtocolError as exc:
            raise self._fail(f"trainer broke the sandbox protocol during {what}: {exc}") from None
        if self.process.oom_killed():
            # A process of the sandbox was killed for memory, yet the trainer
            # answered: its answer may rest on that process's lost work.
            raise self._fail(f"{self._oom_reason()} (during {what})")
        if not reply["ok"]:
            text = protocol.error_text(reply)
            if reply.get("memory") is True:
                text = f"{self._oom_reason()}: {text}"
            raise self._fail(f"trainer failed in {what}: {text}")
        return reply, got

    def call(self, what: str, header: dict[str, Any], raws: tuple[bytes, ...] = (), *,
             seconds: float | None = None) -> tuple[dict[str, Any], list[bytes]]:
        """One request and its reply, each within the call deadline."""
        self.send(protocol.encode(header, raws), what, seconds=seconds)
        return self.receive(what, seconds=seconds)

    # -- the contract -------------------------------------------------------
    def load_and_init(self, source: bytes, data_meta: dict[str, Any], data_blob: bytes,
                      params: dict[str, Any]) -> dict[str, Any]:
        """Load the tenant's module and data, then build its trainer from ``params``.

        Both requests go down the pipe at once (one wake-up of the child, not
        two); the replies are read in order, so a failed load is reported as such.
        Returns the parameters as the tenant's ``Params`` validated them.
        """
        load = protocol.encode({"op": "load", "data": data_meta, "name": self.data.name},
                               (source, data_blob))
        init = protocol.encode({"op": "init", "params": params, "seed": self.seed,
                                "call_seconds": self.call_seconds})
        self.send(load + init, "load")
        reply, _ = self.receive("load")
        name = reply.get("name")
        self.tenant_name = name if isinstance(name, str) else ""
        reply, _ = self.receive("init")
        validated = reply.get("params")
        if not isinstance(validated, dict):
            raise self._fail("trainer broke the sandbox protocol during init: no params")
        self.validated_params = validated
        return validated

    def describe(self) -> dict[str, Any]:
        reply, _ = self.call("describe", {"op": "describe"})
        return reply

    def step(self, n: int) -> list[Metrics]:
        """``n`` iterations, in as many calls as keep each reply under
        ``REPLY_BUDGET``: the worker sizes batches by time, and a trainer that
        reports many metrics per iteration would outgrow the reply cap first."""
        metrics: list[Metrics] = []
        while len(metrics) < n:
            size = n - len(metrics)
            if self.reply_bytes_per_iteration:
                size = min(size, max(1, int(REPLY_BUDGET // self.reply_bytes_per_iteration)))
            else:
                size = min(size, FIRST_STEP_CALL)
            metrics += self._step_call(size)
        return metrics

    def _step_call(self, n: int) -> list[Metrics]:
        reply, _ = self.call(f"step({n})", {"op": "step", "n": int(n)})
        try:
            metrics = protocol.step_metrics(reply, n)
        except protocol.ProtocolError as exc:
            raise self._fail(f"trainer broke the sandbox protocol during step({n}): "
                             f"{exc}") from None
        # The largest seen, so one light batch does not let the next outgrow the cap.
        self.reply_bytes_per_iteration = max(self.reply_bytes_per_iteration,
                                             self.reader.last_header_bytes / n)
        self.iteration += n
        return metrics

    def evaluate(self) -> Metrics:
        reply, _ = self.call("evaluate()", {"op": "evaluate"})
        try:
            return protocol.eval_metrics(reply)
        except protocol.ProtocolError as exc:
            raise self._fail(f"trainer broke the sandbox protocol during evaluate(): "
                             f"{exc}") from None

    def state(self) -> bytes:
        reply, _ = self.call("state()", {"op": "state"})
        size = reply.get("state_bytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise self._fail("trainer broke the sandbox protocol during state(): no state size")
        if size > self.max_state_bytes:
            raise self._fail(f"trainer state of {size} bytes is over the "
                             f"{self.max_state_bytes}-byte limit")
        fd = self.process.state_fd
        parts: list[bytes] = []
        done = 0
        while done < size:
            part = os.pread(fd, min(size - done, STATE_IO_BYTES), done)
            if not part:
                raise self._fail("trainer broke the sandbox protocol during state(): "
                                 f"announced {size} bytes, wrote {done}")
            parts.append(part)
            done += len(part)
        # Give the pages back: they count against the sandbox's memory limit.
        os.ftruncate(fd, 0)
        return b"".join(parts)

    def restore(self, blob: bytes) -> None:
        if len(blob) > self.max_state_bytes:
            raise SandboxError(f"checkpoint of {len(blob)} bytes is over the state limit")
        if self.process.closed:
            raise SandboxError("trainer sandbox is closed; cannot restore()")
        fd = self.process.state_fd
        view = memoryview(blob).cast("B")
        os.ftruncate(fd, 0)
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:done + STATE_IO_BYTES], done)
        try:
            reply, _ = self.call("restore()", {"op": "restore", "state_bytes": len(view)})
        finally:
            if not self.process.closed:
                os.ftruncate(fd, 0)
        iteration = reply.get("iteration")
        if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
            raise self._fail("trainer broke the sandbox protocol during restore(): "
                             "no iteration count")
        self.iteration = iteration

    def output_tail(self) -> str:
        """The end of the trainer's stdout and stderr (at most 64 KiB)."""
        return self.process.output.text()

    def close(self) -> None:
        """End the sandbox now. Its output up to here is kept (``output_tail``);
        the child holds nothing worth a graceful exit, and the kernel tears the
        namespaces down while the worker goes on."""
        if not self.process.closed:
            self.process.output.text()  # take in what the pipe holds before the end
            self.process.kill(wait=False)
            if self.replenish_spare:
                spare.replenish(self.process.limits)

    def __enter__(self) -> SandboxedTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_sandbox(limits: SandboxLimits, data: TrainingData, seed: int, *,
                  call_seconds: float, max_state_bytes: int,
                  prestart: bool = False) -> SandboxedTrainer:
    """A sandbox whose child has started and said it is ready (no tenant code yet);
    with ``prestart``, the worker's spare, and the next spare started at once
    (and again when this one closes, if that one is gone)."""
    if prestart:
        try:
            trainer = _ready(spare.take(limits), data, seed, call_seconds, max_state_bytes)
            trainer.replenish_spare = True
            # This sandbox may stay resident for hours: the next job to come to
            # the slot finds its spare warm instead of waiting for its imports.
            spare.replenish(limits)
            return trainer
        except SandboxError:
            pass  # a spare that died while waiting (its parent thread ended): start afresh
    return _ready(SandboxProcess(limits), data, seed, call_seconds, max_state_bytes)


def _ready(process: SandboxProcess, data: TrainingData, seed: int, call_seconds: float,
           max_state_bytes: int) -> SandboxedTrainer:
    trainer = SandboxedTrainer(process, data, seed, call_seconds=call_seconds,
                               max_state_bytes=max_state_bytes)
    asked = time.monotonic()
    deadline = asked + STARTUP_SECONDS
    try:
        ready, _ = trainer.reader.message(1024, deadline)
    except (protocol.DeadlineExceeded, EOFError, protocol.ProtocolError) as exc:
        if process.oom_killed():
            # Before any tenant code: the limit is too small for what spares import.
            limits = process.limits
            raise trainer._fail(
                f"trainer sandbox ran out of memory (limit {limits.memory_mib} MiB) while "
                f"starting (importing {', '.join(limits.preimport) or 'nothing'}); raise "
                "SANDBOX_MEMORY_MIB or trim SANDBOX_PREIMPORT") from None
        trainer.close()
        output = trainer.output_tail()
        tail = output.strip().splitlines()[-3:]
        raise SandboxError(f"trainer sandbox did not start ({type(exc).__name__}: {exc}); "
                           f"output: {' | '.join(tail) or 'none'}", output) from None
    if ready.get("ready") is not True:
        raise trainer._fail("trainer sandbox did not start: unexpected first message")
    trainer.unpaid_start_seconds = unpaid_start(process.spawned_at, ready.get("at"), asked,
                                                time.monotonic())
    return trainer


def unpaid_start(spawned_at: float, ready_at: object, asked: float, now: float) -> float:
    """Seconds of a sandbox's start (spawn to its "ready") that the job taking
    it did not wait for (it waited from ``asked`` to ``now``). Example: a
    spare spawned at 0 and ready at 2.5, taken at 10: 2.5 unpaid; taken at
    1.0 and ready for it at 2.5: 1.0. A malformed time counts as nothing."""
    if isinstance(ready_at, bool) or not isinstance(ready_at, (int, float)) \
            or not spawned_at <= ready_at <= now:
        return 0.0
    return max(0.0, (ready_at - spawned_at) - (now - asked))


def limits_from(settings: Any) -> SandboxLimits:
    return SandboxLimits(memory_mib=int(settings.sandbox_memory_mib),
                         max_processes=int(settings.sandbox_max_processes),
                         work_mib=int(settings.sandbox_work_mib),
                         preimport=tuple(settings.sandbox_preimport),
                         gpus=gpu.slot_gpus(str(settings.sandbox_gpus)),
                         cgroup_parent=str(settings.sandbox_cgroup_parent),
                         require_cgroup=bool(settings.sandbox_require_cgroup))


def max_state_bytes(settings: Any) -> int:
    """``SANDBOX_MAX_STATE_MIB`` when set, else a share of the memory limit."""
    mib = settings.sandbox_max_state_mib or settings.sandbox_memory_mib // STATE_SHARE
    return int(mib) * 1024 * 1024


def open_sandboxed_trainer(source_path: Path, params: dict[str, Any], data: TrainingData,
                           seed: int, *, settings: Any) -> SandboxedTrainer:
    """Start a sandbox, load the tenant's source and data, build the trainer.

    The caller then calls ``restore()`` when resuming, drives ``step()``,
    ``evaluate()`` and ``state()``, stores ``output_tail()`` with the job, and
    always ``close()``s it. Raises ``SandboxError`` with a readable reason.
    """
    source = Path(source_path).read_bytes()
    if len(source) > MAX_SOURCE_BYTES:
        raise SandboxError(f"trainer source is over {MAX_SOURCE_BYTES} bytes")
    data_meta, blob = encode_data(data)
    step_seconds = settings.sandbox_step_timeout_seconds or settings.lease_seconds
    trainer = start_sandbox(limits_from(settings), data, seed, call_seconds=float(step_seconds),
                            max_state_bytes=max_state_bytes(settings),
                            prestart=bool(settings.sandbox_prestart))
    try:
        trainer.load_and_init(source, data_meta, blob, params)
    except BaseException:
        trainer.close()
        raise
    return trainer


def open_job_trainer(engine: Engine, job: Job, data: TrainingData) -> SandboxedTrainer:
    """``open_sandboxed_trainer`` for a job naming ``code:<id>`` of its own tenant."""
    from backend.core.code_refs import load_trainer_code
    from backend.core.settings import get_settings

    try:
        source = load_trainer_code(engine, job.algorithm, job.tenant_id)
    except LookupError as exc:
        raise SandboxError(str(exc)) from None
    return open_sandboxed_trainer(source, dict(job.params), data, job.seed,
                                  settings=get_settings())
