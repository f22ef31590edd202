"""The PyTorch trainers: shapes, learning, exact resumption, parameters, text data."""

from __future__ import annotations

import io
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

torch = pytest.importorskip("torch")

from workers.datasets import dataset_from_arrays, load_dataset  # noqa: E402
from workers.datasets.text import (  # noqa: E402
    MAX_VOCABULARY,
    MIN_TEXT_CHARS,
    TEXT_DATASETS,
    clean_text,
    load_text,
    split_text,
    text_from_upload,
)
from workers.trainers.contract import Trainer, TrainingData  # noqa: E402
from workers.trainers.deep import TRAINERS, CharTransformer, TorchCnn, TorchMlp  # noqa: E402
from workers.trainers.deep.base import TorchTrainer  # noqa: E402

TABULAR = (TorchMlp, TorchCnn)
SMALL_LM = {"context": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "batch_size": 8}


@pytest.fixture(scope="module")
def digits() -> TrainingData:
    full = load_dataset("digits")
    assert full.y is not None
    cut = 1500
    train = dataset_from_arrays("digits", "classification", full.X[:cut], full.y[:cut])
    held = dataset_from_arrays("digits", "classification", full.X[cut:], full.y[cut:])
    return TrainingData(name="digits", task="classification", train=train, validation=held)


@pytest.fixture(scope="module")
def wine() -> TrainingData:
    return TrainingData(name="wine", task="classification", train=load_dataset("wine"))


@pytest.fixture(scope="module")
def text() -> TrainingData:
    train, validation = load_text("python_docs")
    return TrainingData(name="python_docs", task="text", text=train[:20_000],
                        validation_text=validation[:4_000])


def _make(cls: type[Trainer], data: TrainingData, seed: int = 0,
          **params: Any) -> TorchTrainer:
    if cls is CharTransformer:
        params = {**SMALL_LM, **params}
    trainer = cls(cls.Params.model_validate(params), data, seed)
    assert isinstance(trainer, TorchTrainer)
    return trainer


def _data_for(cls: type[Trainer], digits: TrainingData, text: TrainingData) -> TrainingData:
    return text if cls is CharTransformer else digits


def _losses(metrics: list[dict[str, float]]) -> list[float]:
    return [m["loss"] for m in metrics]


def test_catalogue_names_and_tasks() -> None:
    names = {cls.name: cls.tasks for cls in TRAINERS}
    assert names == {"torch_mlp": ("classification",), "torch_cnn": ("classification",),
                     "char_transformer": ("text",)}


@pytest.mark.parametrize("cls", TABULAR)
def test_tabular_step_reports_each_iteration(cls: type[Trainer], digits: TrainingData) -> None:
    trainer = _make(cls, digits)
    metrics = trainer.step(7)
    assert len(metrics) == 7
    assert trainer.iteration == 7
    for m in metrics:
        assert set(m) == {"loss", "accuracy"}
        assert math.isfinite(m["loss"]) and m["loss"] > 0
        assert 0.0 <= m["accuracy"] <= 1.0


@pytest.mark.parametrize("cls", TABULAR)
def test_tabular_loss_decreases_and_validates(cls: type[Trainer], digits: TrainingData) -> None:
    trainer = _make(cls, digits, learning_rate=0.003)
    losses = _losses(trainer.step(150))
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    held = trainer.evaluate()
    assert set(held) == {"val_loss", "val_accuracy"}
    # 10 balanced classes: chance is 10%; a trained model is far above it.
    assert held["val_accuracy"] > 0.6
    assert held["val_loss"] < losses[0]


def test_evaluate_without_validation_is_empty(wine: TrainingData) -> None:
    assert _make(TorchMlp, wine).evaluate() == {}


def test_cnn_reads_square_rows_as_images_and_others_as_signals(
        digits: TrainingData, wine: TrainingData) -> None:
    image = _make(TorchCnn, digits)
    signal = _make(TorchCnn, wine)
    assert any(isinstance(m, torch.nn.Conv2d) for m in image.model.modules())
    assert not any(isinstance(m, torch.nn.Conv1d) for m in image.model.modules())
    assert any(isinstance(m, torch.nn.Conv1d) for m in signal.model.modules())
    losses = _losses(signal.step(120))
    assert np.mean(losses[-20:]) < np.mean(losses[:20])


@pytest.mark.parametrize("kernel", [1, 2, 4, 7])
def test_cnn_shapes_for_every_kernel(kernel: int, digits: TrainingData,
                                     wine: TrainingData) -> None:
    for data in (digits, wine):
        trainer = _make(TorchCnn, data, kernel_size=kernel)
        assert math.isfinite(trainer.step(1)[0]["loss"])


def test_transformer_learns_text(text: TrainingData) -> None:
    trainer = _make(CharTransformer, text, learning_rate=0.01)
    metrics = trainer.step(80)
    assert set(metrics[0]) == {"loss", "bits_per_char"}
    assert metrics[0]["bits_per_char"] == pytest.approx(metrics[0]["loss"] / math.log(2))
    # An untrained model is near uniform over the vocabulary.
    vocabulary = len(set(text.text or "")) + 1
    assert metrics[0]["loss"] == pytest.approx(math.log(vocabulary), rel=0.2)
    losses = _losses(metrics)
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    held = trainer.evaluate()
    assert set(held) == {"val_loss", "val_bits_per_char"}
    assert held["val_loss"] < losses[0]


def test_transformer_handles_short_text_and_unseen_characters() -> None:
    data = TrainingData(name="t", task="text", text="abcab", validation_text="zzaq")
    trainer = _make(CharTransformer, data, context=64)
    assert len(trainer.step(3)) == 3
    assert math.isfinite(trainer.evaluate()["val_loss"])


def test_transformer_refuses_tables(digits: TrainingData) -> None:
    with pytest.raises(ValueError, match="text dataset"):
        _make(CharTransformer, digits)


def test_tabular_refuses_unlabelled_data() -> None:
    blobs = dataset_from_arrays("b", "clustering", np.random.default_rng(0).normal(size=(40, 3)),
                                None)
    with pytest.raises(ValueError, match="labelled"):
        _make(TorchMlp, TrainingData(name="b", task="clustering", train=blobs))


@pytest.mark.parametrize("cls", TRAINERS)
def test_restore_reproduces_uninterrupted_losses_exactly(
        cls: type[Trainer], digits: TrainingData, text: TrainingData) -> None:
    data = _data_for(cls, digits, text)
    uninterrupted = _make(cls, data, seed=3)
    expected = _losses(uninterrupted.step(25))

    first = _make(cls, data, seed=3)
    head = _losses(first.step(10))
    first.evaluate()  # evaluating between chunks must not shift the run
    blob = first.state()
    resumed = _make(cls, data, seed=3)
    resumed.restore(blob)
    assert resumed.iteration == 10
    tail = _losses(resumed.step(15))
    assert head + tail == expected  # bit-for-bit, not approximately
    assert resumed.evaluate() == uninterrupted.evaluate()


@pytest.mark.parametrize("cls", TRAINERS)
def test_seeds_give_different_runs(cls: type[Trainer], digits: TrainingData,
                                   text: TrainingData) -> None:
    data = _data_for(cls, digits, text)
    assert _losses(_make(cls, data, seed=1).step(5)) != _losses(_make(cls, data, seed=2).step(5))


def test_global_rng_is_left_alone(digits: TrainingData, text: TrainingData) -> None:
    before = torch.random.get_rng_state()
    for cls in TRAINERS:
        trainer = _make(cls, _data_for(cls, digits, text))
        trainer.step(2)
        trainer.restore(trainer.state())
    assert torch.equal(before, torch.random.get_rng_state())


def test_restore_refuses_another_trainers_checkpoint(digits: TrainingData) -> None:
    blob = _make(TorchMlp, digits).state()
    with pytest.raises(ValueError, match="torch_mlp"):
        _make(TorchCnn, digits).restore(blob)


def _write_marker(path: str) -> None:  # pragma: no cover - must never run
    Path(path).write_text("unpickled")


class _Payload:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_write_marker, (self.path,))


def test_restore_never_unpickles_code(digits: TrainingData, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save({"version": 1, "trainer": "torch_mlp", "model": _Payload(str(marker))}, buffer)
    with pytest.raises(pickle.UnpicklingError):
        _make(TorchMlp, digits).restore(buffer.getvalue())
    assert not marker.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cls", TRAINERS)
def test_cuda_trains_and_resumes_exactly(cls: type[Trainer], digits: TrainingData,
                                         text: TrainingData) -> None:
    data = _data_for(cls, digits, text)
    uninterrupted = _make(cls, data, seed=5)
    assert uninterrupted.device.type == "cuda"
    expected = _losses(uninterrupted.step(12))
    first = _make(cls, data, seed=5)
    head = _losses(first.step(5))
    resumed = _make(cls, data, seed=5)
    resumed.restore(first.state())
    assert head + _losses(resumed.step(7)) == expected


@pytest.mark.parametrize(("cls", "params", "problem"), [
    (TorchMlp, {"learning_rat": 0.1}, "Extra inputs"),
    (TorchMlp, {"learning_rate": 0}, "greater than or equal"),
    (TorchMlp, {"hidden_units": True}, "must be a number"),
    (TorchMlp, {"batch_size": 10_000}, "less than or equal"),
    (TorchCnn, {"kernel_size": 9}, "less than or equal"),
    (TorchCnn, {"channels": "16"}, "must be a number"),
    (TorchCnn, {"channels": 2.5}, "integer"),
    (CharTransformer, {"d_model": 30, "n_heads": 4}, "must divide"),
    (CharTransformer, {"learning_rate": float("nan")}, "finite"),
])
def test_params_are_validated(cls: type[Trainer], params: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        cls.Params.model_validate(params)


@pytest.mark.parametrize("cls", TRAINERS)
def test_params_schema_documents_every_field(cls: type[Trainer]) -> None:
    schema = cls.Params.model_json_schema()
    for name, field in schema["properties"].items():
        assert field.get("description"), name
        assert "minimum" in field and "maximum" in field, name
    assert schema["properties"]["learning_rate"].get("log_scale") is True
    assert "default" in schema["properties"]["learning_rate"]


def test_params_fill_defaults_and_take_integral_floats() -> None:
    params = TorchMlp.Params.model_validate({"hidden_units": 32.0}).model_dump()
    assert params["hidden_units"] == 32 and isinstance(params["hidden_units"], int)
    assert params["learning_rate"] == TorchMlp.Params.model_fields["learning_rate"].default


def test_builtin_corpus_splits_into_train_and_validation() -> None:
    assert set(TEXT_DATASETS) == {"python_docs"}
    train, validation = load_text("python_docs")
    assert len(train) > 200_000
    assert 0.05 < len(validation) / (len(train) + len(validation)) < 0.15
    assert train.endswith("\n")
    with pytest.raises(KeyError, match="python_docs"):
        load_text("shakespeare")


def test_clean_text_normalises_and_refuses_bad_files() -> None:
    body = "line one\r\nline two\rline three\n" * 20
    cleaned = clean_text(b"\xef\xbb\xbf" + body.encode())
    assert "\r" not in cleaned and cleaned.startswith("line one\nline two\nline three\n")
    with pytest.raises(ValueError, match="UTF-8"):
        clean_text(b"caf\xe9 " * 100)
    with pytest.raises(ValueError, match="binary"):
        clean_text(b"a\x00b" * 100)
    with pytest.raises(ValueError, match=f"at least {MIN_TEXT_CHARS}"):
        clean_text(b"too short")
    many = "".join(chr(0x4E00 + i) for i in range(MAX_VOCABULARY + 1)).encode()
    with pytest.raises(ValueError, match="distinct characters"):
        clean_text(many)


def test_split_cuts_at_a_line_break() -> None:
    text = "".join(f"line {i:04d}\n" for i in range(500))
    train, validation = split_text(text)
    assert train + validation == text
    assert train.endswith("\n") and validation.startswith("line ")
    assert len(validation) == pytest.approx(0.1 * len(text), abs=200)


def test_text_from_upload_reads_and_checks(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_bytes(("hello world\r\n" * 50).encode())
    train, validation = text_from_upload(good)
    assert (train + validation) == "hello world\n" * 50
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe" * 200)
    with pytest.raises(ValueError, match="UTF-8"):
        text_from_upload(bad)


def test_record_torch_curve_runs_to_its_budget() -> None:
    from backend.simulation.record import DISPATCH_SECONDS
    from backend.simulation.record_torch import TorchRunSpec, record_torch_curve

    spec = TorchRunSpec("char_transformer", "python_docs", SMALL_LM, seed=4, max_iterations=12)
    curve = record_torch_curve(spec, overhead_samples=2)
    assert curve.id == spec.curve_id and curve.iterations == 12
    assert curve.stop_reason == "reached max iterations (12)"
    assert min(curve.seconds) > 0 and curve.chunk_overhead_seconds > DISPATCH_SECONDS
    data = TrainingData(name="python_docs", task="text", text=load_text("python_docs")[0],
                        validation_text=load_text("python_docs")[1])
    assert list(curve.losses) == _losses(_make(CharTransformer, data, seed=4).step(12))


def test_a_recorded_curve_carries_the_held_out_metrics_a_live_job_reports(
        tmp_path: Path) -> None:
    from backend.scheduling.trace import Trace, load_trace, save_trace
    from backend.simulation.record_torch import TorchRunSpec, record_torch_curve
    from workers.trainers.data import holdout

    spec = TorchRunSpec("torch_mlp", "digits", {"hidden_units": 16}, max_iterations=25,
                        eval_every=10)
    curve = record_torch_curve(spec, overhead_samples=1)
    # Every 10 iterations and at the end, as a live job with eval_every=10.
    assert [i for i, _ in curve.evaluations["val_loss"]] == [10, 20, 25]
    trainer = _make(TorchMlp, holdout(load_dataset("digits")), hidden_units=16)
    trainer.step(10)
    assert curve.evaluations["val_loss"][0][1] == pytest.approx(trainer.evaluate()["val_loss"])
    save_trace(Trace(curves=(curve,)), tmp_path / "t.json")
    loaded = load_trace(tmp_path / "t.json").curves[0].evaluations["val_accuracy"]
    assert [i for i, _ in loaded] == [10, 20, 25]
    assert [v for _, v in loaded] == pytest.approx([v for _, v in
                                                    curve.evaluations["val_accuracy"]], rel=1e-5)


def test_the_committed_torch_sweep_is_judged_on_held_out_rows() -> None:
    from backend.scheduling.trace import load_trace
    from backend.simulation.cli import SWEEP_TRACES

    sweep = load_trace(SWEEP_TRACES["sweep-torch"])
    assert len(sweep.curves) >= 30
    for curve in sweep.curves:
        steps = [i for i, _ in curve.evaluations["val_loss"]]
        assert steps == list(range(50, curve.iterations + 1, 50)), curve.id


def test_committed_torch_trace_covers_every_trainer() -> None:
    from backend.scheduling.trace import load_trace
    from backend.simulation.cli import TORCH_TRACE
    from backend.simulation.record_torch import TORCH_RUNS

    trace = load_trace(TORCH_TRACE)
    assert [c.id for c in trace.curves] == [r.curve_id for r in TORCH_RUNS]
    assert {c.algorithm for c in trace.curves} == {cls.name for cls in TRAINERS}
    for curve in trace.curves:
        assert curve.final_loss < 0.7 * curve.initial_loss, curve.id


def test_transformer_text_sample_is_its_own_draw(text: TrainingData) -> None:
    """A sample continues the text's start, is the same for the same model,
    changes as the model learns, and never changes the training run."""
    sampled = _make(CharTransformer, text, learning_rate=0.01)
    plain = _make(CharTransformer, text, learning_rate=0.01)
    first = sampled.text_sample()
    assert first is not None
    prompt = (text.text or "")[:16].split("\n")[0]
    assert first.startswith(prompt) and len(first) == len(prompt) + 120
    assert sampled.text_sample() == first, "deterministic for one model"
    assert set(first[len(prompt):]) <= set(text.text or ""), "only characters of the text"
    losses = _losses(sampled.step(40))
    later = sampled.text_sample()
    assert later != first, "a trained model writes something else"
    assert losses == _losses(plain.step(40)), "sampling left the training run alone"
    assert _losses(sampled.step(5)) == _losses(plain.step(5))


def test_tabular_trainers_have_no_text_sample(digits: TrainingData) -> None:
    assert _make(TorchMlp, digits).text_sample() is None
