"""What a job's downloadable model (its latest checkpoint) is, read from its bytes.

A checkpoint is whatever the job's trainer's ``state()`` returned, so its
format follows the trainer, not the portal: the built-in numpy trainers
write a numpy ``.npz`` archive (``workers.trainers.builtin.base.pack_state``), the
PyTorch trainers a ``torch.save`` file (``workers.trainers.deep.base``), and
plugin or uploaded trainers any bytes they like. The download names and
describes each by looking at the bytes, so a torch file is never served as
``.npz`` and no worker code is needed to tell (docs/models.md shows how to
load each).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFormat:
    key: str
    """``npz``, ``torch`` or ``bytes``: the ``X-Model-Format`` header's value."""
    suffix: str
    """The downloaded file's extension."""
    description: str
    """One sentence for the user: what the file is and how to read it."""


NPZ = ModelFormat(
    "npz", ".npz",
    "a numpy .npz archive of the model's arrays plus a JSON '__meta__' entry: "
    "np.load(path, allow_pickle=False) reads it")
TORCH = ModelFormat(
    "torch", ".pt",
    "a PyTorch file (torch.save) of a dict with the model's state_dict under 'model': "
    "torch.load(path, weights_only=True) reads it")
BYTES = ModelFormat(
    "bytes", ".bin",
    "the bytes the job's own trainer wrote with state(): its restore() reads them")


def model_format(data: bytes) -> ModelFormat:
    """The format of checkpoint ``data``; ``BYTES`` when it is neither numpy's
    nor PyTorch's (both are zip archives: numpy's holds only ``.npy`` members,
    PyTorch's a pickled ``data.pkl`` beside its tensor storages)."""
    if not data.startswith(b"PK\x03\x04"):
        return BYTES
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:
        return BYTES
    if names and all(name.endswith(".npy") for name in names):
        return NPZ
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        return TORCH
    return BYTES
