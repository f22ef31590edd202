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

import numpy as np
import pytest

from backend.core.settings import Settings
from workers.datasets import Dataset
from workers.sandbox import SandboxedTrainer, SandboxError, open_sandboxed_trainer
from workers.trainers.contract import Metrics, TrainingData

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
SECRET_NAME = "SLAQ_SANDBOX_TEST_SECRET"
SECRET_VALUE = "s3cret-the-tenant-must-not-see"


def _settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"sandbox_step_timeout_seconds": 20.0,
                                 "sandbox_memory_mib": 1024, **overrides}
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


def _open(fixture: str, data: TrainingData | None = None, **settings: object) -> SandboxedTrainer:
    return open_sandboxed_trainer(FIXTURES / fixture, {}, data or _table_data(), 7,
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
    trainer = _open(fixture, data, **settings)
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
    assert "no secrets among HOME" in reason, reason  # ...the tenant does not
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
    assert "memory" in reason and "512 MiB" in reason


def test_endless_loop_is_killed_at_the_deadline(bystander: Bystander) -> None:
    started = time.monotonic()
    reason, _ = _fails("forever.py", lambda t: t.step(3), sandbox_step_timeout_seconds=2.0)
    assert "did not answer step(3) within 2 s" in reason
    assert time.monotonic() - started < 60


def test_cpu_time_limit_ends_a_spinning_trainer() -> None:
    reason, _ = _fails("forever.py", lambda t: t.step(1), sandbox_cpu_seconds=1,
                       sandbox_step_timeout_seconds=60.0)
    assert "CPU time" in reason


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
