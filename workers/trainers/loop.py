"""The loop contract: your own training loop, driven by ``report()`` calls.

A researcher keeps an ordinary training function and adds a few calls on the
``ctx`` the portal passes in::

    def train(params, data, ctx):
        model, opt = build(params, seed=ctx.seed)
        ctx.restore(lambda blob: load(model, opt, blob))   # resumed: put the state back
        ctx.checkpoint(lambda: save(model, opt))           # how to take the state
        for batch in batches(data, seed=ctx.seed, start=ctx.iteration):
            loss = train_step(model, opt, batch)
            ctx.report(loss=loss, accuracy=acc)            # one iteration done
            if ctx.evaluate_now:
                ctx.report_eval(val_loss=validate(model))

:class:`LoopTrainer` turns such a function into a :class:`Trainer`, so the
worker, the sandbox, residency, pause/resume and moves drive it unchanged:
the function runs in a thread of its own, and ``report()`` is where it
parks once the iterations a ``step(n)`` asked for are done. ``state()`` runs
the checkpoint callback on that thread while it is parked, and
``restore(blob)`` makes ``ctx.restore(callback)`` call ``callback(blob)``.
A parked loop that the portal closes leaves ``report()`` by an exception
(:class:`LoopStopped`) that unwinds the function.

This file imports nothing of the portal but the contract next to it: inside
the sandbox it is ``slaq_trainer.loop``.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from .contract import Metrics, NoParams, Task, Trainer, TrainerParams, TrainingData

ALL_TASKS: tuple[Task, ...] = ("classification", "regression", "clustering", "text")
REPORT_SECONDS = 60.0
"""Longest wait for the loop's next report (or evaluation, or state) before
the call fails; the worker sets it under the call's own deadline."""
STOP_SECONDS = 5.0
"""How long ``close()`` waits for a parked loop to unwind."""
MAGIC = b"SLAQLOOP1\n"
"""First bytes of a loop trainer's state: the portal's header, then the user's blob."""
_HEADER = struct.Struct(">I")

TrainFunction = Callable[[Any, TrainingData, "LoopContext"], object]
"""``train(params, data, ctx)``: the user's loop."""


class LoopError(RuntimeError):
    """The loop broke the contract; the message is the job's readable reason."""


class LoopStopped(BaseException):  # noqa: N818 - a signal to unwind, not an error
    """Raised inside ``report()`` when the portal closes a parked loop. A
    BaseException, so the user's ``except Exception`` does not swallow it."""


def _number(name: str, value: object) -> float:
    if type(value) is float:  # the common case, per iteration: no more checks
        return value
    if isinstance(value, bool | str | bytes):
        raise TypeError(f"ctx.report: metric {name!r} must be a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]  # tensors and numpy scalars too
    except (TypeError, ValueError):
        raise TypeError(f"ctx.report: metric {name!r} must be a number (or a one-element "
                        f"tensor), got {type(value).__name__}") from None


class LoopContext:
    """What ``train(params, data, ctx)`` gets: the job's seed and position,
    and the calls that hand iterations, evaluations and state to the portal."""

    def __init__(self, driver: LoopTrainer, seed: int, iteration: int) -> None:
        self._driver = driver
        self.seed = seed
        """The job's seed: seed every random source from it (and the iteration)."""
        self.iteration = iteration
        """Iterations done so far: where the loop starts (its resume point), then
        one more after each ``report()``."""
        self.evaluate_now = False
        """True right after a ``report()`` when the portal wants held-out metrics
        now: call ``report_eval()`` before training further."""

    def report(self, loss: object, **metrics: object) -> None:
        """One iteration is done: its loss and any other training metrics.
        Returns when the loop may go on (possibly a grant later)."""
        values = {"loss": _number("loss", loss)}
        for name, value in metrics.items():
            values[name] = _number(name, value)
        self._driver._report(values)

    def report_eval(self, **metrics: object) -> None:
        """Held-out metrics (``val_loss``...) for the iteration just reported;
        only when ``evaluate_now`` is true."""
        self._driver._report_eval({name: _number(name, value)
                                   for name, value in metrics.items()})

    def restore(self, callback: Callable[[bytes], object]) -> bool:
        """On a resumed job, call ``callback(blob)`` with the bytes the checkpoint
        callback returned; True when it did, False on a fresh start."""
        return self._driver._restore(callback)

    def checkpoint(self, callback: Callable[[], bytes]) -> None:
        """Register how to take the whole training state as bytes (model,
        optimiser, RNG...). The portal calls it, while the loop is parked in
        ``report()``, whenever it needs the state."""
        if not callable(callback):
            raise TypeError("ctx.checkpoint wants a function returning bytes")
        self._driver._checkpoint = callback


def pack_state(iteration: int, pending: list[Metrics], blob: bytes, *, fresh: bool) -> bytes:
    """A loop's state: where it stands, iterations it ran past the portal's
    count (``pending``), and the user's own bytes."""
    header = json.dumps({"iteration": iteration, "pending": pending, "fresh": fresh}).encode()
    return MAGIC + _HEADER.pack(len(header)) + header + blob


def unpack_state(blob: bytes) -> tuple[int, list[Metrics], bytes | None]:
    """``(iteration, pending, user blob or None for a fresh start)``."""
    data = bytes(blob)
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEADER.size:
        raise ValueError("not a loop trainer's state (it was taken by another kind of trainer)")
    (size,) = _HEADER.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _HEADER.size
    header = json.loads(data[start:start + size])
    pending = [{str(k): float(v) for k, v in item.items()} for item in header["pending"]]
    user = None if header["fresh"] else data[start + size:]
    return int(header["iteration"]), pending, user


class LoopTrainer(Trainer):
    """A :class:`Trainer` that runs ``train_function`` in a thread and takes
    control back in its ``report()`` calls. Subclasses come from
    :func:`loop_trainer`."""

    train_function: ClassVar[TrainFunction]
    batched: ClassVar[bool] = True
    """Stepped in batches of about 100 ms, so handing control to and from the
    loop's thread costs nothing measurable per iteration."""

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        super().__init__(params, data, seed)
        self.report_seconds = REPORT_SECONDS
        self._lock = threading.Condition()
        self._ctx = LoopContext(self, self.seed, 0)
        self._thread: threading.Thread | None = None
        self._ident = -1
        """The loop thread's id, which every call on ``ctx`` must come from."""
        self._done = 0
        """Iterations the loop has reported (ahead of ``iteration`` by ``len(pending)``)."""
        self._target = 0
        self._metrics: list[Metrics] = []
        self._pending: list[Metrics] = []
        self._command: str | None = None
        self._parked = False
        self._parked_in = ""
        self._parks = 0
        """How many times the loop has parked: a command's answer is the next park."""
        self._last_sign = 0.0
        """When the loop last reported (or started): the deadline runs from here."""
        self._evaluating = False
        self._eval_result: Metrics = {}
        self._eval_iteration = -1
        self._state_result: tuple[bytes | None, BaseException | None] | None = None
        self._checkpoint: Callable[[], bytes] | None = None
        self._restore_blob: bytes | None = None
        self._restored_from: bytes | None = None
        """The whole blob ``restore()`` got, which is also the state until the loop runs."""
        self._restore_done = False
        self._failure: BaseException | None = None
        self._finished = False
        self._closing = False

    # -- the loop's side (its own thread) ----------------------------------------
    def _breach(self, message: str) -> LoopError:
        """The loop broke the contract: the job fails with ``message`` even if
        the loop catches the error raised to it (lock held or not)."""
        error = LoopError(message)
        with self._lock:
            if self._failure is None:
                self._failure = error
            self._lock.notify_all()
        return error

    def _own_thread(self, call: str) -> None:
        if threading.get_ident() != self._ident:
            raise self._breach(f"ctx.{call}() was called from thread "
                               f"{threading.current_thread().name!r}, not from the thread "
                               "running train(); call it from your training loop itself")

    def _report(self, values: Metrics) -> None:
        self._own_thread("report")
        with self._lock:
            if self._closing or self._failure is not None:
                raise LoopStopped
            if self._restore_blob is not None and not self._restore_done:
                raise self._breach(f"the job resumes at iteration {self._done}, but train() "
                                   "reported an iteration before calling "
                                   "ctx.restore(callback) to put its state back")
            self._ctx.evaluate_now = False
            self._done += 1
            self._ctx.iteration = self._done
            self._last_sign = time.monotonic()
            if self._evaluating:
                # Asked to evaluate, it trained on instead: this iteration is
                # beyond what the portal counted, kept for its next step.
                self._evaluating = False
                self._eval_result = {}
                self._pending.append(values)
                self._park("report")
                return
            self._metrics.append(values)
            if self._done >= self._target:
                self._park("report")

    def _report_eval(self, values: Metrics) -> None:
        self._own_thread("report_eval")
        with self._lock:
            if self._closing or self._failure is not None:
                raise LoopStopped
            if not self._evaluating:
                raise self._breach("ctx.report_eval() was called while ctx.evaluate_now is "
                                   "false: evaluate only when it is true (the job sets how "
                                   "often)")
            self._evaluating = False
            self._ctx.evaluate_now = False
            self._eval_result = values
            self._eval_iteration = self._done
            self._last_sign = time.monotonic()
            self._park("report_eval")

    def _restore(self, callback: Callable[[bytes], object]) -> bool:
        self._own_thread("restore")
        if self._restore_blob is None:
            return False
        if self._restore_done:
            raise self._breach("ctx.restore() was called twice")
        self._restore_done = True
        callback(self._restore_blob)
        return True

    def _park(self, where: str) -> None:
        """Wait, lock held, for the portal's next command; run the ones meant
        for this thread (state) and return when the loop may go on."""
        self._parked, self._parked_in = True, where
        self._parks += 1
        self._lock.notify_all()
        while True:
            self._lock.wait_for(lambda: self._command is not None)
            command, self._command = self._command, None
            if command == "state":
                self._state_result = self._take_state()
                self._lock.notify_all()
                continue
            self._parked = False
            if command == "stop":
                raise LoopStopped
            if command == "evaluate":
                self._evaluating = True
                self._ctx.evaluate_now = True
            self._last_sign = time.monotonic()
            return

    def _take_state(self) -> tuple[bytes | None, BaseException | None]:
        callback = self._checkpoint
        self._lock.release()  # the callback may take long; nothing else runs meanwhile
        try:
            if callback is None:
                raise LoopError("train() never called ctx.checkpoint(callback), so the "
                                "portal cannot take its state")
            blob = callback()
            if not isinstance(blob, bytes | bytearray | memoryview):
                raise TypeError("the ctx.checkpoint callback must return bytes, got "
                                f"{type(blob).__name__}")
            return bytes(blob), None
        except BaseException as exc:  # noqa: BLE001 - handed to state(), which raises it
            return None, exc
        finally:
            self._lock.acquire()

    def _run(self) -> None:
        self._ident = threading.get_ident()
        try:
            type(self).train_function(self.params, self.data, self._ctx)
        except LoopStopped:
            return
        except Exception as exc:
            with self._lock:
                self._failure = self._failure or exc
                self._lock.notify_all()
            return
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the like, in user code
            with self._lock:
                self._failure = self._failure or LoopError(f"train() called exit ({exc!r})")
                self._lock.notify_all()
            return
        with self._lock:
            self._finished = True
            self._lock.notify_all()

    # -- the portal's side ------------------------------------------------------
    def _start(self) -> None:
        self._last_sign = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"slaq-loop-{self.name}")
        self._thread.start()

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        """Wait, lock held, until ``ready()``; raise the loop's failure or a
        readable reason when it ends, breaks the contract or stays silent."""
        while True:
            if self._failure is not None:
                raise self._failure
            if ready():
                return
            if self._finished:
                raise LoopError(f"train() returned after iteration {self._done}, while the "
                                "job was still running: loop until the portal stops it (its "
                                "stopping rule ends the job, report() never returns then)")
            left = self._last_sign + self.report_seconds - time.monotonic()
            if left <= 0:
                hint = "; call ctx.report() once per iteration" if "report" in what else ""
                raise LoopError(f"train() ran {self.report_seconds:g} s without {what}{hint}")
            self._lock.wait(left)

    def _send(self, command: str) -> None:
        # The deadline runs from now: a resident loop may have been parked for hours.
        self._last_sign = time.monotonic()
        self._command = command
        self._lock.notify_all()

    def step(self, n: int) -> list[Metrics]:
        out: list[Metrics] = []
        with self._lock:
            if self._failure is not None:
                raise self._failure
            while self._pending and len(out) < n:
                out.append(self._pending.pop(0))
            wanted = n - len(out)
            if wanted:
                self._metrics = []
                before = self._parks
                if self._thread is None:
                    self._target = self._done + wanted
                    self._start()
                else:
                    self._wait(lambda: self._parked, "parking in ctx.report()")
                    self._target = self._done + wanted
                    self._send("go")
                self._wait(lambda: self._parks > before, "calling ctx.report()")
                out += self._metrics
                self._metrics = []
        self.iteration += len(out)
        return out

    def evaluate(self) -> Metrics:
        with self._lock:
            if self._thread is None or self._pending:
                return {}  # not started, or already trained past this iteration
            self._wait(lambda: self._parked, "parking in ctx.report()")
            if self._parked_in == "report_eval" and self._eval_iteration == self._done:
                return dict(self._eval_result)
            before = self._parks
            self._send("evaluate")
            self._wait(lambda: self._parks > before, "calling ctx.report_eval()")
            return dict(self._eval_result) if not self._pending else {}

    def state(self) -> bytes:
        with self._lock:
            if self._thread is None:
                # Not run since it was built: its state is what it was given.
                if self._restored_from is not None:
                    return self._restored_from
                return pack_state(self.iteration, [], b"", fresh=True)
            self._wait(lambda: self._parked, "parking in ctx.report()")
            self._state_result = None
            self._send("state")
            self._wait(lambda: self._state_result is not None, "returning its state")
            assert self._state_result is not None
            blob, error = self._state_result
            self._state_result = None
            if error is not None:
                raise error
            assert blob is not None
            return pack_state(self.iteration, list(self._pending), blob, fresh=False)

    def restore(self, blob: bytes) -> None:
        if self._thread is not None:
            raise LoopError("restore() on a loop that has already run")
        iteration, pending, user = unpack_state(blob)
        self.iteration = iteration
        self._pending = pending
        self._done = iteration + len(pending)
        self._ctx.iteration = self._done
        self._restore_blob = user
        self._restored_from = bytes(blob)

    def close(self) -> None:
        """Unwind a parked loop (its ``report()`` raises :class:`LoopStopped`);
        a loop that is not parked stops at its next call on ``ctx``."""
        thread = self._thread
        if thread is None:
            return
        with self._lock:
            self._closing = True
            if self._parked:
                self._send("stop")
        if thread is not threading.current_thread():
            thread.join(STOP_SECONDS)


_NAME = re.compile(r"[^A-Za-z0-9_]")


def loop_trainer(train: TrainFunction, *, name: str, params: type[TrainerParams] = NoParams,
                 title: str = "", description: str = "",
                 tasks: tuple[Task, ...] = ALL_TASKS, uses_gpu: bool = False,
                 ) -> type[LoopTrainer]:
    """A trainer class for ``train(params, data, ctx)``: what an operator's
    plugin declares in the ``slaq.trainers`` entry-point group, and what the
    sandbox builds from an uploaded loop script."""
    if not callable(train):
        raise TypeError("loop_trainer wants the training function train(params, data, ctx)")
    if not (isinstance(params, type) and issubclass(params, TrainerParams)):
        raise TypeError("Params must be a subclass of TrainerParams")
    attributes = {"name": name, "title": title, "description": description,
                  "tasks": tuple(tasks), "Params": params, "uses_gpu": uses_gpu,
                  "train_function": staticmethod(train), "__module__": train.__module__,
                  "__doc__": train.__doc__}
    return type(f"Loop_{_NAME.sub('_', name)}", (LoopTrainer,), attributes)
