"""Tenant code in the real bubblewrap sandbox, driven through ``SandboxedTrainer``.

Each hostile trainer gets a test of its own. While it runs, a legitimate
sandboxed trainer trains in another thread and must finish with the right
number of finite losses: one tenant's failure stays in its own sandbox.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backend.core.settings import Settings
from tests.utils.waiting import wait_until
from workers.datasets import Dataset
from workers.sandbox import (
    SandboxedTrainer,
    SandboxError,
    SandboxUnavailable,
    open_sandboxed_trainer,
    protocol,
    runner,
    spare,
)
from workers.trainers.contract import Metrics, TrainingData

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
SECRET_NAME = "SLAQ_SANDBOX_TEST_SECRET"
SECRET_VALUE = "s3cret-the-tenant-must-not-see"


def _settings(**overrides: object) -> Settings:
    # numpy only: these trainers do not use torch, and importing it in every
    # sandbox would cost a second of CPU each on a small test machine.
    values: dict[str, object] = {"sandbox_step_timeout_seconds": 20.0,
                                 "sandbox_memory_mib": 1024,
                                 "sandbox_preimport": ["numpy"], **overrides}
    return Settings(**values)  # type: ignore[arg-type]


def _table_data() -> TrainingData:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(240, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64)
    train = Dataset(name="blobs", task="classification", X=X[:200], y=y[:200], n_classes=2)
    val = Dataset(name="blobs", task="classification", X=X[200:], y=y[200:], n_classes=2)
    return TrainingData(name="blobs", task="classification", train=train, validation=val)


def _text_data(text: str) -> TrainingData:
    return TrainingData(name="paths", task="text", text=text)


def _open(fixture: str, data: TrainingData | None = None, params: dict[str, Any] | None = None,
          **settings: object) -> SandboxedTrainer:
    return open_sandboxed_trainer(FIXTURES / fixture, params or {}, data or _table_data(), 7,
                                  settings=_settings(**settings))


class Bystander:
    """A legitimate sandboxed job training beside a hostile one."""

    def __init__(self, chunks: int = 6) -> None:
        self.losses: list[float] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(chunks,), daemon=True)
        self.thread.start()

    def _run(self, chunks: int) -> None:
        try:
            state: bytes | None = None
            # One sandbox per chunk, resumed from the last state, as the worker does.
            for _ in range(chunks):
                trainer = open_sandboxed_trainer(FIXTURES / "logistic.py",
                                                 {"learning_rate": 0.5}, _table_data(), 7,
                                                 settings=_settings())
                with trainer:
                    if state is not None:
                        trainer.restore(state)
                    self.losses += [m["loss"] for m in trainer.step(5)]
                    state = trainer.state()
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def finish(self) -> list[float]:
        self.thread.join(120)
        assert not self.thread.is_alive(), "the legitimate job did not finish"
        assert self.error is None, f"the legitimate job failed: {self.error}"
        return self.losses


@pytest.fixture
def bystander() -> Iterator[Bystander]:
    running = Bystander()
    yield running
    losses = running.finish()
    assert len(losses) == 30
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]


def _fails(fixture: str, call: Callable[[SandboxedTrainer], object],
           data: TrainingData | None = None, **settings: object) -> tuple[str, str]:
    trainer = _open(fixture, data, None, **settings)
    try:
        with pytest.raises(SandboxError) as raised:
            call(trainer)
        return str(raised.value), trainer.output_tail()
    finally:
        trainer.close()
        trainer.process.proc.wait(10)  # the sandbox is gone (raises if it lingers)


def test_legitimate_trainer_resumes_exactly() -> None:
    whole = _open("logistic.py")
    with whole:
        straight = [m["loss"] for m in whole.step(8)]
        evaluation = whole.evaluate()
        assert "tenant trainer ready" in whole.output_tail()
    losses: list[Metrics] = []
    state: bytes | None = None
    for _ in range(2):
        with _open("logistic.py") as part:
            if state is not None:
                part.restore(state)
                assert part.iteration == 4
            losses += part.step(4)
            state = part.state()
    assert [m["loss"] for m in losses] == straight
    assert straight[-1] < straight[0]
    assert set(evaluation) == {"val_loss", "val_accuracy"}


def test_a_warm_spare_still_counts_the_start_a_cold_move_would_pay() -> None:
    # The switch cost the scheduler charges is what a move costs when the
    # slot's spare is still importing; a warm spare must not hide it.
    with _open("logistic.py", sandbox_prestart=False) as cold:
        started_for_it = cold.unpaid_start_seconds
    spare.discard()
    with _open("logistic.py"):
        pass  # takes no spare (none yet) and has the next one started
    assert spare.wait_ready(60)
    with _open("logistic.py") as warm:
        assert warm.unpaid_start_seconds > started_for_it
        assert warm.unpaid_start_seconds > 0.01  # at least an interpreter's start and numpy
    spare.discard()


def test_params_are_validated_by_the_tenant_schema() -> None:
    with pytest.raises(SandboxError, match="learning_rate"):
        open_sandboxed_trainer(FIXTURES / "logistic.py", {"learning_rate": -1}, _table_data(),
                               1, settings=_settings())
    with pytest.raises(SandboxError, match="learnig_rate"):
        open_sandboxed_trainer(FIXTURES / "logistic.py", {"learnig_rate": 0.1}, _table_data(),
                               1, settings=_settings())


def test_reads_environment_and_finds_no_secret(bystander: Bystander,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    monkeypatch.setenv("DATABASE_URL", "postgresql://portal:pw@db/slaq")
    assert os.environ[SECRET_NAME] == SECRET_VALUE  # the worker has it...
    reason, output = _fails("read_env.py", lambda t: t.step(2))
    assert "no secrets among " in reason, reason  # ...the tenant does not
    assert "FOUND SECRETS" not in reason
    env = json.loads(output.split("ENV:", 1)[1].splitlines()[0])
    assert SECRET_NAME not in env and "DATABASE_URL" not in env
    assert SECRET_VALUE not in output
    assert env["HOME"] == "/work"


def test_opening_portal_files_is_refused(bystander: Bystander, tmp_path: Path) -> None:
    # Stand-ins for the portal's files, readable by anyone on the host, so only
    # the sandbox can be what refuses them.
    database = tmp_path / "slaq.db"
    other_upload = tmp_path / "uploads" / "tenant-2" / "secret.py"
    other_upload.parent.mkdir(parents=True)
    for private in (database, other_upload):
        private.write_text("private")
        private.chmod(0o644)
    tmp_path.chmod(0o755)
    paths = [str(database), str(other_upload), str(FIXTURES / "logistic.py"),
             str(Path.cwd() / "pyproject.toml")]
    for path in paths:
        assert Path(path).is_file()
    reason, output = _fails("open_files.py", lambda t: t.step(1), _text_data(json.dumps(paths)))
    assert "could not open any portal file" in reason
    assert "OPENED" not in reason
    assert output.count("refused ") == len(paths)


def test_network_is_refused(bystander: Bystander) -> None:
    # Redis answers on the host, so a refusal is the sandbox's doing.
    socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    reason, output = _fails("connect_tcp.py", lambda t: t.step(1))
    assert "no network from the sandbox" in reason
    assert "CONNECTED" not in reason
    assert "refused 127.0.0.1:6379" in output


def test_memory_blowup_fails_with_a_memory_reason(bystander: Bystander) -> None:
    reason, _ = _fails("memory_hog.py", lambda t: t.step(1), sandbox_memory_mib=512)
    assert "trainer ran out of memory (limit 512 MiB)" in reason, reason


@pytest.mark.parametrize("route", ["anon", "memfd", "children", "work", "shm", "tmpfs"])
def test_no_route_holds_more_than_the_memory_limit(route: str, bystander: Bystander) -> None:
    # /work as large as three limits, so its own size cannot be what stops it.
    trainer = _open("memory_routes.py", params={"route": route, "mib": 768},
                    sandbox_memory_mib=256, sandbox_work_mib=768)
    try:
        with pytest.raises(SandboxError) as raised:
            trainer.step(1)
    finally:
        trainer.close()
    reason = str(raised.value)
    assert f"filling 768 MiB by {route}" in trainer.output_tail()
    if route == "tmpfs" and "ROUTE REFUSED" in reason:
        # This host lets no unprivileged user namespace be made: the route is shut.
        return
    assert "HELD" not in reason
    assert reason.startswith("trainer ran out of memory (limit 256 MiB)"), reason
    # The sandbox is gone, and its cgroup with it; the worker (this process) lives on.
    trainer.process.proc.wait(10)
    cgroup = trainer.process.cgroup
    assert cgroup is not None
    wait_until(lambda: not any(path.exists() for path in cgroup.dirs.values()), 15,
               "the sandbox's cgroup to be removed")


def test_a_limit_too_small_for_the_preimports_says_so() -> None:
    pytest.importorskip("torch", reason="torch is not installed here")
    # torch's libraries alone need more than 64 MiB resident.
    with pytest.raises(SandboxError, match=r"ran out of memory \(limit 64 MiB\) while starting "
                       r"\(importing numpy, torch\); raise SANDBOX_MEMORY_MIB"):
        _open("logistic.py", sandbox_memory_mib=64, sandbox_preimport=["numpy", "torch"])


def test_a_worker_without_a_usable_cgroup_refuses_tenant_code() -> None:
    # A control file as the parent: no cgroup can be made under it.
    with pytest.raises(SandboxUnavailable, match="needs a cgroup for its memory"):
        _open("logistic.py", sandbox_cgroup_parent="cgroup.procs")
    runner.cgroup_host.cache_clear()


def test_step_batches_stay_under_the_reply_cap() -> None:
    # ~60 bytes of metrics per iteration: 60,000 in one reply would be 3.6 MB,
    # over the 1 MiB cap; the sandboxed trainer splits the call instead.
    with _open("fast_metrics.py") as trainer:
        metrics = trainer.step(60_000)
        assert len(metrics) == 60_000 and trainer.iteration == 60_000
        assert metrics[-1]["loss"] == pytest.approx(1 / (60_000 + 0.123456789))
        per_call = protocol.MAX_HEADER_BYTES // 2 / trainer.reply_bytes_per_iteration
        assert per_call < 60_000


def test_a_big_state_crosses_and_resumes() -> None:
    # 300 MiB: more than the old pipe-framed cap of 256 MiB, less than the
    # default cap of a quarter of the default 4 GiB memory limit.
    params: dict[str, Any] = {"state_mib": 300}
    with _open("big_state.py", params=params, sandbox_memory_mib=4096) as first:
        first.step(3)
        blob = first.state()
    assert len(blob) == 16 + 300 * 1024 * 1024 // 32 * 32
    with _open("big_state.py", params=params, sandbox_memory_mib=4096) as second:
        second.restore(blob)
        assert second.iteration == 3
        assert "restored" in second.output_tail()


def test_a_state_over_the_cap_fails_readably() -> None:
    # The cap follows the memory limit: a quarter of 512 MiB.
    with _open("big_state.py", params={"state_mib": 200}, sandbox_memory_mib=512) as trainer:
        trainer.step(1)
        with pytest.raises(SandboxError, match=r"state of \d+ bytes is over the "
                           f"{128 * 1024 * 1024}-byte limit"):
            trainer.state()


def test_endless_loop_is_killed_at_the_deadline(bystander: Bystander) -> None:
    started = time.monotonic()
    reason, _ = _fails("forever.py", lambda t: t.step(3), sandbox_step_timeout_seconds=2.0)
    assert "did not answer step(3) within 2 s" in reason
    assert time.monotonic() - started < 60


def test_fork_bomb_is_stopped_by_the_process_limit(bystander: Bystander) -> None:
    reason, _ = _fails("fork_bomb.py", lambda t: t.step(1), sandbox_max_processes=16)
    assert "fork refused after" in reason, reason
    children = int(reason.split("fork refused after ")[1].split()[0])
    assert children < 16
    # The host still forks.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0


def test_garbage_on_the_pipe_fails_with_a_protocol_reason(bystander: Bystander) -> None:
    reason, _ = _fails("garbage_pipe.py", lambda t: t.step(2))
    assert "broke the sandbox protocol during step(2)" in reason
    assert "not JSON" in reason


def test_child_exceptions_come_back_readable() -> None:
    with _open("fork_bomb.py", sandbox_max_processes=4) as trainer, \
            pytest.raises(SandboxError) as raised:
        trainer.step(1)
    text = str(raised.value)
    assert text.startswith("trainer failed in step(1): RuntimeError: fork refused")
    assert "tenant_trainer.py" in text
