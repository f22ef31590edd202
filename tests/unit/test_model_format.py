"""The model download's format is read from the checkpoint's bytes."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from backend.core.model_format import BYTES, NPZ, TORCH, model_format


def test_numpy_archive_is_npz() -> None:
    buffer = io.BytesIO()
    np.savez(buffer, w=np.zeros(3), __meta__=np.frombuffer(b"{}", dtype=np.uint8))
    assert model_format(buffer.getvalue()) is NPZ


def test_torch_save_file_is_torch() -> None:
    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(2)}}, buffer)
    assert model_format(buffer.getvalue()) is TORCH


@pytest.mark.parametrize("data", [b"", b"my trainer's own bytes", b"PK\x03\x04 not a zip"])
def test_anything_else_is_opaque_bytes(data: bytes) -> None:
    assert model_format(data) is BYTES


def test_a_zip_of_other_files_is_opaque_bytes() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("weights.json", "{}")
    assert model_format(buffer.getvalue()) is BYTES
