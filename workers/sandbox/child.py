"""Entry point run INSIDE the sandbox (``python -I -S child.py FD_IN FD_OUT FD_STATE MODULES``).

Self-contained on purpose: the portal's packages are not visible in the
sandbox, only the standard library, the read-only site-packages, this file and
the trainer and loop contracts (mounted as the tiny package ``slaq_trainer``). It serves
the worker's requests over two pipe fds with length-prefixed frames: a JSON
header, then ``n_raw`` raw frames. Training states cross in FD_STATE, a memfd the
worker shares (written from offset 0, its size in the reply), rather than the
pipe. MODULES (comma-separated, e.g. ``numpy,torch``) are imported before the
first request, so a spare sandbox has paid for them before tenant code
enters. Everything it answers is checked again on the worker side, so
nothing here needs to be trusted.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import struct
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

SITE = "/sandbox/site-packages"
LIB = "/sandbox/lib"
WORK = "/work"
_LEN = struct.Struct(">I")
# The worker caps what it reads from us; this only stops a runaway request.
_MAX_IN = 1 << 31
_IO_BYTES = 1 << 30
"""Per read or write of a state: one call (one copy, no joining) below 1 GiB."""

for path in (LIB, SITE, SITE + "-plat"):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)

# Imported before any request so a pre-started sandbox has paid for them.
import numpy as np  # noqa: E402
import numpy.random  # noqa: E402, F401  (lazily imported by numpy otherwise)
import slaq_trainer  # noqa: E402  (the contract)


def _warm_torch(torch: Any) -> None:
    """What every torch trainer's first chunk would otherwise pay: building an
    optimiser imports torch._dynamo and sympy (1.6 s of CPU), the first
    backward pass and torch.save/load set up lazily; with the slot's GPU, the
    CUDA context and cuBLAS (0.3 s, and 0.2 s more at the first step). The
    context holds some GPU memory while the spare waits: the slot's own GPU,
    which the next job on the slot uses anyway."""
    import io

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 2)).to(device)
        for optimiser in (torch.optim.Adam(model.parameters()),
                          torch.optim.SGD(model.parameters())):
            loss = torch.nn.functional.cross_entropy(
                model(torch.zeros(4, 8, device=device)),
                torch.tensor([0, 1, 0, 1], device=device))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict()}, buffer)
        torch.load(io.BytesIO(buffer.getvalue()), map_location=device, weights_only=True)
        loss.item()  # waits for the device; float() of a grad tensor warns in every job's output


_WARM_UPS = {"torch": _warm_torch}
"""Modules whose first use costs much more than their import."""


def _preimport(names: str) -> None:
    """Import (and warm up) the operator's heavy modules now; one not
    installed is skipped."""
    for name in filter(None, (part.strip() for part in names.split(","))):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if name in _WARM_UPS:
            _WARM_UPS[name](module)


if len(sys.argv) > 4:
    _preimport(sys.argv[4])


def _warm_up() -> None:
    """Run pydantic's lazily imported paths once, before any tenant code is here."""

    class Warm(slaq_trainer.TrainerParams):
        rate: float = 0.1

    Warm.model_validate({"rate": 0.2}).model_dump(mode="json")
    Warm.model_json_schema()
    # And numpy's common first calls (page faults in its libraries, lazy setup).
    x = np.random.default_rng(0).normal(size=(16, 4))
    onehot = np.eye(4)[np.arange(16) % 4]
    logits = x @ x.T[:, :4] - onehot
    np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)).mean()
    (logits.argmax(axis=1) == onehot.argmax(axis=1)).mean()


_warm_up()


@dataclass(frozen=True, eq=False)
class Dataset:
    """The fields of the portal's ``Dataset`` a trainer reads."""

    name: str
    task: str
    X: Any
    y: Any
    n_classes: int

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])


class Channel:
    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.rin = os.fdopen(fd_in, "rb", buffering=0)
        self.wout = os.fdopen(fd_out, "wb", buffering=0)

    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            got = self.rin.read(n)
            if not got:
                raise EOFError("worker closed the pipe")
            chunks.append(got)
            n -= len(got)
        return b"".join(chunks)

    def _frame(self) -> bytes:
        (size,) = _LEN.unpack(self._read_exact(4))
        if size > _MAX_IN:
            raise EOFError("request frame too large")
        return self._read_exact(size)

    def receive(self) -> tuple[dict[str, Any], list[bytes]]:
        header = json.loads(self._frame())
        raws = [self._frame() for _ in range(int(header.get("n_raw", 0)))]
        return header, raws

    def send(self, header: dict[str, Any], raws: tuple[bytes, ...] = ()) -> None:
        header = {**header, "n_raw": len(raws)}
        body = json.dumps(header, allow_nan=True).encode()
        parts = [_LEN.pack(len(body)), body]
        for raw in raws:
            parts += [_LEN.pack(len(raw)), raw]
        self.wout.write(b"".join(parts))


def _reason(exc: BaseException) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    tenant = [f for f in frames if f.filename.startswith(WORK)]
    last = (tenant or frames)[-1] if frames else None
    where = f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}" if last else ""
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "where": where,
            "memory": isinstance(exc, MemoryError)}


def _load_data(raw: bytes, meta: dict[str, Any], name: str) -> Any:
    """The job's data from one raw frame: UTF-8 JSON for text, else arrays laid
    end to end as ``meta["arrays"]`` describes (read-only views, no copies)."""
    if meta.get("kind") == "text":
        doc = json.loads(raw)
        return slaq_trainer.TrainingData(name=name, task="text", text=doc["text"],
                                         validation_text=doc.get("validation_text"))
    arrays = {}
    for item in meta["arrays"]:
        dtype = np.dtype(item["dtype"])
        count = int(np.prod(item["shape"], dtype=np.int64))
        flat = np.frombuffer(raw, dtype=dtype, count=count, offset=int(item["offset"]))
        arrays[item["name"]] = flat.reshape(item["shape"])
    task = str(meta["task"])
    n_classes = int(meta["n_classes"])

    def table(prefix: str) -> Dataset | None:
        if f"{prefix}X" not in arrays:
            return None
        y = arrays.get(f"{prefix}y")
        return Dataset(name=name, task=task, X=arrays[f"{prefix}X"], y=y, n_classes=n_classes)

    return slaq_trainer.TrainingData(name=name, task=task,
                                     train=table(""), validation=table("val_"))


def _trainer_class(module: Any) -> type:
    """The module's one concrete Trainer subclass; failing that, a loop
    trainer for its ``train(params, data, ctx)`` (the loop contract)."""
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, slaq_trainer.Trainer)
             and obj is not slaq_trainer.Trainer and obj.__module__ == module.__name__
             and not inspect.isabstract(obj)]
    if not found and callable(getattr(module, "train", None)):
        params = getattr(module, "Params", slaq_trainer.NoParams)
        if not (inspect.isclass(params) and issubclass(params, slaq_trainer.TrainerParams)):
            raise TypeError("the loop script's Params must be a subclass of "
                            "slaq_trainer.TrainerParams")
        return slaq_trainer.loop_trainer(module.train, name="loop", params=params)
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise TypeError("the uploaded module must define exactly one concrete subclass of "
                        "slaq_trainer.Trainer, or a loop function train(params, data, ctx) "
                        f"(found {names})")
    return found[0]


def _write_state(fd: int, blob: bytes | bytearray | memoryview) -> int:
    view = memoryview(blob).cast("B")
    os.ftruncate(fd, 0)  # drop the last state's pages before writing this one
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:done + _IO_BYTES], done)
    return done


def _read_state(fd: int, size: int) -> bytes:
    parts = []
    done = 0
    while done < size:
        part = os.pread(fd, min(size - done, _IO_BYTES), done)
        if not part:
            raise EOFError("the state file is shorter than announced")
        parts.append(part)
        done += len(part)
    return b"".join(parts)


class Server:
    def __init__(self, channel: Channel, state_fd: int) -> None:
        self.channel = channel
        self.state_fd = state_fd
        self.cls: Any = None
        self.data: Any = None
        self.trainer: Any = None

    def op_load(self, req: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
        source, data = raws
        path = os.path.join(WORK, "tenant_trainer.py")
        with open(path, "wb") as handle:
            handle.write(source)
        self.data = _load_data(data, req["data"], str(req.get("name", "")))
        spec = importlib.util.spec_from_file_location("tenant_trainer", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["tenant_trainer"] = module
        spec.loader.exec_module(module)
        self.cls = _trainer_class(module)
        return {"ok": True, "name": str(getattr(self.cls, "name", self.cls.__name__)),
                "title": str(getattr(self.cls, "title", "")),
                "tasks": [str(t) for t in getattr(self.cls, "tasks", ())]}

    def op_describe(self, req: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
        if self.cls is None:
            raise RuntimeError("no trainer loaded")
        return {"ok": True, "name": str(getattr(self.cls, "name", self.cls.__name__)),
                "schema": self.cls.Params.model_json_schema()}

    def op_init(self, req: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
        if self.cls is None:
            raise RuntimeError("no trainer loaded")
        params = self.cls.Params.model_validate(req.get("params") or {})
        self.trainer = self.cls(params, self.data, int(req["seed"]))
        if isinstance(self.trainer, slaq_trainer.LoopTrainer) and req.get("call_seconds"):
            # Under the worker's deadline, so a silent loop fails with its own reason.
            self.trainer.report_seconds = 0.8 * float(req["call_seconds"])
        return {"ok": True, "params": params.model_dump(mode="json")}

    def _need(self) -> Any:
        if self.trainer is None:
            raise RuntimeError("trainer not initialised")
        return self.trainer

    def op_restore(self, req: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
        trainer = self._need()
        trainer.restore(_read_state(self.state_fd, int(req["state_bytes"])))
        return {"ok": True, "iteration": int(trainer.iteration)}

    def op_step(self, req: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
        trainer = self._need()
        metrics = trainer.step(int(req["n"]))
        return {"ok": True, "metrics": list(metrics), "iteration": int(trainer.iteration)}

    def op_evaluate(self, req: dict[str, Any], raws: list[bytes]) -> dict[str, Any]:
        return {"ok": True, "metrics": self._need().evaluate()}

    def serve(self) -> None:
        while True:
            try:
                req, raws = self.channel.receive()
            except EOFError:
                return
            op = str(req.get("op"))
            if op == "close":
                self.channel.send({"ok": True})
                return
            try:
                if op == "state":
                    blob = self._need().state()
                    if not isinstance(blob, bytes | bytearray | memoryview):
                        raise TypeError(f"state() must return bytes, got {type(blob).__name__}")
                    reply: dict[str, Any] = {"ok": True,
                                             "state_bytes": _write_state(self.state_fd, blob)}
                else:
                    handler = getattr(self, f"op_{op}", None)
                    if handler is None:
                        raise ValueError(f"unknown request {op!r}")
                    reply = handler(req, raws)
            except BaseException as exc:  # noqa: BLE001 - every failure is the tenant's to read
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    reply = {"ok": False, "error": f"trainer called exit ({exc!r})", "where": ""}
                else:
                    reply = _reason(exc)
                    traceback.print_exc()
            try:
                self.channel.send(reply)
            except (TypeError, ValueError) as exc:
                self.channel.send({"ok": False, "error": f"trainer returned a value that is "
                                   f"not JSON: {exc}", "where": ""})


def main() -> None:
    fd_in, fd_out, fd_state = (int(arg) for arg in sys.argv[1:4])
    os.chdir(WORK)
    channel = Channel(fd_in, fd_out)
    # "at": when its imports were done, on the worker's clock (CLOCK_MONOTONIC
    # is shared; no time namespace), so a spare taken long after still tells
    # the worker what a start without a warm spare costs.
    channel.send({"ok": True, "ready": True, "pid": os.getpid(), "at": time.monotonic()})
    Server(channel, fd_state).serve()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: tenant atexit hooks and finalisers have had their turn.
    os._exit(0)


if __name__ == "__main__":
    main()
