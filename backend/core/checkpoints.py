"""Checkpoint store: one file per (job, iteration), written atomically.

Files are named by iteration and the database records which iteration is the
job's current checkpoint in the same transaction that stores the chunk's loss
points. A crash between writing a file and that commit leaves an orphan file
and the old checkpoint still in force: the chunk is simply run again.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class CheckpointStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _dir(self, job_id: int) -> Path:
        return self.root / str(int(job_id))

    def path(self, job_id: int, iteration: int) -> Path:
        return self._dir(job_id) / f"{int(iteration):012d}.ckpt"

    def save(self, job_id: int, iteration: int, data: bytes) -> Path:
        target = self.path(job_id, iteration)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def load(self, job_id: int, iteration: int) -> bytes | None:
        try:
            return self.path(job_id, iteration).read_bytes()
        except FileNotFoundError:
            return None

    def prune(self, job_id: int, keep_iteration: int) -> None:
        """Delete the job's checkpoints older than ``keep_iteration``'s.

        Newer files are kept: one may be a state still being written behind
        (recorded by a later commit), and an orphan of a dropped chunk is
        replaced or pruned once the job saves past it.
        """
        folder = self._dir(job_id)
        if not folder.exists():
            return
        for entry in folder.glob("*.ckpt"):
            if entry.stem.isdigit() and int(entry.stem) < keep_iteration:
                entry.unlink(missing_ok=True)
