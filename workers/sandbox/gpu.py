"""The slot's GPU inside a sandbox: its device nodes and the driver's libraries.

A sandbox gets ``/dev/nvidia<N>`` of its slot's GPU(s) and the control nodes
CUDA opens (``nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools``), nothing
else of the host's ``/dev``; the user-space driver (``libcuda`` and
friends) read-only where it lives outside ``/usr`` (which every sandbox sees
already); and ``CUDA_VISIBLE_DEVICES`` naming the GPU by UUID, so CUDA picks
the same card whatever index it would give it with the other nodes missing.

Which GPU a slot has: ``SANDBOX_GPUS`` when set (``none``, or minor numbers
such as ``0`` or ``2,3``); else the worker's own ``CUDA_VISIBLE_DEVICES``
when it lists indices (one worker process per GPU, as the GPU pool runs);
else the host's only GPU when it has exactly one; else none.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

DEV = Path("/dev")
DRIVER_PROC = Path("/proc/driver/nvidia/gpus")
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
SYSTEM_TOPS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Bound read-only into every sandbox already (``runner._system_binds``)."""
DRIVER_LIBRARIES = ("cuda", "nvidia-ml", "nvidia-ptxjitcompiler", "nvidia-nvvm",
                    "nvidia-gpucomp")
"""What CUDA programs dlopen from the driver (torch needs the first two; the
JIT compiler for PTX kernels; the others on newer drivers)."""


@dataclass(frozen=True)
class GpuBinds:
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def slot_gpus(setting: str, environ: dict[str, str] | None = None,
              dev: Path = DEV) -> tuple[int, ...]:
    """The minor numbers of this worker slot's GPUs (see the module docstring)."""
    text = setting.strip().lower()
    if text in ("none", "off", "cpu"):
        return ()
    if text and text != "auto":
        return tuple(int(part) for part in text.split(","))
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        parts = [part.strip() for part in visible.split(",") if part.strip()]
        if all(part.isdigit() for part in parts):
            return tuple(int(part) for part in parts)
        return ()  # UUIDs or "-1": not something to map onto device nodes here
    present = [int(m.group(1)) for p in dev.glob("nvidia*")
               if (m := re.fullmatch(r"nvidia(\d+)", p.name))]
    return tuple(present) if len(present) == 1 else ()


def _uuid(minor: int, driver_proc: Path = DRIVER_PROC) -> str | None:
    """The GPU's UUID from the driver's /proc entry whose device minor is ``minor``."""
    for info in driver_proc.glob("*/information"):
        text = info.read_text(errors="replace")
        found_minor = re.search(r"Device Minor:\s*(\d+)", text)
        found_uuid = re.search(r"GPU UUID:\s*(\S+)", text)
        if found_minor and found_uuid and int(found_minor.group(1)) == minor:
            return found_uuid.group(1)
    return None


def _library_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """Directories holding the driver's user-space libraries: from
    the linker cache, or the worker's LD_LIBRARY_PATH (containers often put
    the driver in /usr/local/nvidia/lib64 and point only that variable at it)."""
    env = os.environ if environ is None else environ
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                                 timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        listing = ""
    paths: list[str] = []
    for name in DRIVER_LIBRARIES:
        paths += re.findall(rf"lib{re.escape(name)}\.so[^ ]* .*=> (\S+)", listing)
        for directory in filter(None, env.get("LD_LIBRARY_PATH", "").split(":")):
            paths += [str(p) for p in Path(directory).glob(f"lib{name}.so*")]
    dirs: list[str] = []
    for path in paths:
        # The directory as named (the linker looks there) and where it resolves.
        for parent in (os.path.dirname(path), os.path.dirname(os.path.realpath(path))):
            if parent not in dirs:
                dirs.append(parent)
    return dirs


def _visible_already(directory: str) -> bool:
    """Inside /usr or a top-level system directory, which every sandbox sees."""
    top = "/" + directory.strip("/").split("/", 1)[0]
    return top in SYSTEM_TOPS


def gpu_binds(minors: tuple[int, ...], dev: Path = DEV) -> GpuBinds:
    """bubblewrap arguments and environment giving a sandbox these GPUs."""
    if not minors:
        return GpuBinds()  # no nodes, so CUDA finds no device without being told
    args: list[str] = []
    for name in [f"nvidia{m}" for m in minors] + list(CONTROL_NODES):
        if (dev / name).exists():
            # --dev-bind: CUDA needs the node usable as a device (other binds are nodev).
            args += ["--dev-bind", str(dev / name), f"/dev/{name}"]
    libraries = _library_dirs()
    for directory in libraries:
        if not _visible_already(directory):
            args += ["--ro-bind", directory, directory]
    env = {"CUDA_VISIBLE_DEVICES": ",".join(_uuid(m) or str(m) for m in minors)}
    if libraries:
        env["LD_LIBRARY_PATH"] = ":".join(libraries)
    return GpuBinds(args=args, env=env)
