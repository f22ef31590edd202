"""The loop contract in-process: a user's own loop, driven through the
Trainer contract, reproduces one uninterrupted run across any split into
steps, states and restores; each way of breaking the contract fails with a
reason that says what to change."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import numpy as np
import pytest

from workers.iterations import run_iterations
from workers.stopping import StopRule
from workers.trainers.contract import TrainerParams, TrainingData
from workers.trainers.loop import LoopContext, LoopError, LoopTrainer, loop_trainer

DATA = TrainingData(name="none", task="regression")


class Params(TrainerParams):
    rate: float = 0.05


def sgd(params: Params, data: TrainingData, ctx: LoopContext) -> None:
    """Linear regression by SGD on data drawn from the seed; batches drawn
    from (seed, iteration), so resuming at any iteration is exact."""
    truth = np.random.default_rng(ctx.seed).normal(size=4)
    w = np.zeros(4)

    def load(blob: bytes) -> None:
        w[:] = json.loads(blob)["w"]

    ctx.restore(load)
    ctx.checkpoint(lambda: json.dumps({"w": w.tolist()}).encode())
    while True:
        rng = np.random.default_rng([ctx.seed, ctx.iteration])
        X = rng.normal(size=(16, 4))
        error = X @ w - X @ truth
        w -= params.rate * X.T @ error / len(X)
        ctx.report(loss=float(np.mean(error ** 2)), norm=np.linalg.norm(w))
        if ctx.evaluate_now:
            ctx.report_eval(val_loss=float(np.sum((w - truth) ** 2)))


SGD = loop_trainer(sgd, name="sgd-loop", params=Params)


def build(cls: type[LoopTrainer] = SGD, seed: int = 3) -> LoopTrainer:
    return cls(cls.Params(), DATA, seed)


def test_steps_states_and_restores_reproduce_one_run() -> None:
    whole = build()
    reference = whole.step(60)
    reference_eval = whole.evaluate()
    whole.close()
    got: list[dict[str, float]] = []
    trainer = build()
    for size in (1, 7, 13, 2):
        got += trainer.step(size)
        blob = trainer.state()
        trainer.close()
        trainer = build()
        trainer.restore(blob)
        assert trainer.iteration == len(got)
    got += trainer.step(60 - len(got))
    assert got == reference
    assert trainer.evaluate() == reference_eval
    assert trainer.iteration == 60
    trainer.close()


def test_run_iterations_evaluates_on_schedule() -> None:
    trainer = build()
    run = run_iterations(trainer, StopRule(max_iterations=40, tolerance=None), 40,
                         lambda _run: True, eval_every=10)
    trainer.close()
    assert run.error is None
    assert [p[0] for p in run.points] == list(range(1, 41))
    assert [i for i, _ in run.evaluations] == [10, 20, 30, 40]
    assert all(m["val_loss"] >= 0 for _, m in run.evaluations)
    assert all("norm" in m for _, m in run.metrics)


def test_evaluation_is_taken_once_per_iteration() -> None:
    trainer = build()
    trainer.step(5)
    first = trainer.evaluate()
    assert first and trainer.evaluate() == first
    trainer.close()


def skips_evaluation(params: Any, data: TrainingData, ctx: LoopContext) -> None:
    value = [float(ctx.iteration)]

    def load(blob: bytes) -> None:
        value[0] = float(blob)

    ctx.restore(load)
    ctx.checkpoint(lambda: repr(value[0]).encode())
    while True:
        value[0] = value[0] * 0.9 + 1
        ctx.report(loss=value[0])


def test_a_loop_that_trains_on_when_asked_to_evaluate_loses_nothing() -> None:
    cls = loop_trainer(skips_evaluation, name="no-eval")
    whole = build(cls)
    reference = whole.step(12)
    whole.close()
    trainer = build(cls)
    got = trainer.step(4)
    # It trained iteration 5 instead of evaluating: no metrics, and iteration
    # 5 is kept for the next step, through a state and restore too.
    assert trainer.evaluate() == {}
    blob = trainer.state()
    trainer.close()
    again = build(cls)
    again.restore(blob)
    assert again.iteration == 4
    got += again.step(8)
    again.close()
    assert got == reference


def test_a_loop_parked_longer_than_the_report_limit_steps_on() -> None:
    """Between chunks a resident loop waits as long as its job does: the
    limit counts from each command, not from the last report."""
    trainer = build()
    trainer.report_seconds = 5.0
    first = trainer.step(3)
    trainer._last_sign -= 3600  # as if parked for an hour
    blob = trainer.state()
    trainer._last_sign -= 3600
    assert len(trainer.step(2)) == 2
    trainer._last_sign -= 3600
    assert trainer.evaluate()
    trainer.close()
    resumed, whole = build(), build()
    resumed.restore(blob)
    assert first + resumed.step(2) == whole.step(5)
    for each in (resumed, whole):
        each.close()


def test_close_unwinds_a_parked_loop() -> None:
    trainer = build()
    trainer.step(3)
    thread = trainer._thread
    assert thread is not None and thread.is_alive()
    trainer.close()
    assert not thread.is_alive()


def _failure(cls: type[LoopTrainer], *, steps: int = 3, seconds: float = 5.0) -> str:
    trainer = build(cls)
    trainer.report_seconds = seconds
    try:
        with pytest.raises(Exception) as caught:
            for _ in range(steps):
                trainer.step(2)
                trainer.state()
        return f"{type(caught.value).__name__}: {caught.value}"
    finally:
        trainer.close()


def test_a_loop_that_never_reports_fails_with_a_reason() -> None:
    def silent(params: Any, data: TrainingData, ctx: LoopContext) -> None:
        threading.Event().wait(1)  # busy with anything but report()

    reason = _failure(loop_trainer(silent, name="silent"), seconds=0.3)
    assert "without calling ctx.report()" in reason


def test_a_report_from_another_thread_fails_the_loop() -> None:
    def threaded(params: Any, data: TrainingData, ctx: LoopContext) -> None:
        ctx.checkpoint(lambda: b"")

        def background() -> None:
            with contextlib.suppress(LoopError):  # the failure is the loop's, not this thread's
                ctx.report(loss=1.0)

        worker = threading.Thread(target=background)
        worker.start()
        worker.join()

    reason = _failure(loop_trainer(threaded, name="threaded"))
    assert "LoopError" in reason and "not from the thread running train()" in reason


def test_an_exception_in_the_state_callback_is_the_state_error() -> None:
    def broken(params: Any, data: TrainingData, ctx: LoopContext) -> None:
        ctx.checkpoint(lambda: 1 / 0)  # type: ignore[arg-type, return-value]
        while True:
            ctx.report(loss=1.0)

    assert _failure(loop_trainer(broken, name="broken")).startswith("ZeroDivisionError")


@pytest.mark.parametrize(("body", "expected"), [
    ("return", "train() returned after iteration 0"),
    ("ctx.report(loss=1.0); return", "train() returned after iteration 1"),
    ("ctx.report(loss='1')", "must be a number"),
    ("ctx.report(loss=1.0); ctx.report_eval(val_loss=1.0)", "ctx.evaluate_now is false"),
    ("while True: ctx.report(loss=1.0)", "never called ctx.checkpoint"),
    ("ctx.checkpoint(lambda: 'text')\n    while True: ctx.report(loss=1.0)", "must return bytes"),
    ("raise SystemExit(3)", "train() called exit"),
    # Caught by the loop, a breach still fails the job.
    ("while True:\n        try: ctx.report_eval(val_loss=1.0)\n        except Exception: pass",
     "ctx.evaluate_now is false"),
])
def test_contract_breaches_are_named(body: str, expected: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def train(params, data, ctx):\n    {body}\n", namespace)  # noqa: S102
    assert expected in _failure(loop_trainer(namespace["train"], name="breach"))


def test_a_resumed_loop_must_restore_before_it_reports() -> None:
    trainer = build()
    trainer.step(2)
    blob = trainer.state()
    trainer.close()

    def forgets(params: Any, data: TrainingData, ctx: LoopContext) -> None:
        ctx.checkpoint(lambda: b"")
        while True:
            ctx.report(loss=1.0)

    cls = loop_trainer(forgets, name="forgets")
    resumed = build(cls)
    resumed.restore(blob)
    with pytest.raises(LoopError, match="before calling ctx.restore"):
        resumed.step(1)
    resumed.close()


def test_a_state_taken_before_the_loop_ran_is_what_it_was_given() -> None:
    fresh = build()
    blank = fresh.state()
    resumed = build()
    resumed.restore(blank)
    assert resumed.step(5) == fresh.step(5)
    assert resumed.state() == fresh.state()
    for trainer in (fresh, resumed):
        trainer.close()


def test_not_a_loop_state_is_refused() -> None:
    with pytest.raises(ValueError, match="not a loop trainer's state"):
        build().restore(b"PK\x03\x04")


def test_a_loop_trainer_is_accepted_as_an_operators_plugin() -> None:
    from importlib.metadata import EntryPoint

    from workers.trainers.registry import _load_plugin

    entry = EntryPoint(name="sgd-loop", value=f"{__name__}:SGD", group="slaq.trainers")
    assert _load_plugin(entry, {}) is SGD
    assert SGD.batched and SGD.Params is Params and SGD.__module__ == __name__
