"""Which GPU a worker slot gives its sandboxes, and the binds that gives them."""

from __future__ import annotations

from pathlib import Path

from workers.sandbox import gpu


def _dev(tmp_path: Path, *names: str) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in names:
        (dev / name).write_text("")
    return dev


def test_the_setting_wins_then_the_workers_cuda_visible_devices(tmp_path: Path) -> None:
    dev = _dev(tmp_path, "nvidia0", "nvidia1", "nvidiactl")
    assert gpu.slot_gpus("2,3", {"CUDA_VISIBLE_DEVICES": "0"}, dev) == (2, 3)
    assert gpu.slot_gpus("none", {"CUDA_VISIBLE_DEVICES": "0"}, dev) == ()
    assert gpu.slot_gpus("auto", {"CUDA_VISIBLE_DEVICES": "1"}, dev) == (1,)
    assert gpu.slot_gpus("auto", {"CUDA_VISIBLE_DEVICES": "-1"}, dev) == ()


def test_auto_takes_the_only_gpu_and_never_guesses_among_several(tmp_path: Path) -> None:
    one = _dev(tmp_path, "nvidia0", "nvidiactl", "nvidia-uvm")
    assert gpu.slot_gpus("auto", {}, one) == (0,)
    several = tmp_path / "several"
    several.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (several / name).write_text("")
    assert gpu.slot_gpus("auto", {}, several) == ()
    assert gpu.slot_gpus("auto", {}, tmp_path / "missing") == ()


def test_binds_name_only_the_slots_nodes_and_the_control_nodes(tmp_path: Path) -> None:
    dev = _dev(tmp_path, "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset")
    binds = gpu.gpu_binds((1,), dev)
    bound = [binds.args[i + 2] for i, arg in enumerate(binds.args) if arg == "--dev-bind"]
    assert bound == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert binds.env["CUDA_VISIBLE_DEVICES"] == "1"  # no driver here to name its UUID
    assert gpu.gpu_binds((), dev).args == []


def test_the_gpu_is_named_by_uuid_where_the_driver_says_it(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    for bus, minor, uuid in (("0000:00:05.0", 0, "GPU-aaa"), ("0000:00:06.0", 1, "GPU-bbb")):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(
            f"Model: \t\t NVIDIA H200\nGPU UUID: \t {uuid}\nDevice Minor: \t {minor}\n")
    assert gpu._uuid(1, gpus) == "GPU-bbb"
    assert gpu._uuid(2, gpus) is None
