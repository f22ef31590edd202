"""Celery workers: the run_chunk task, training algorithms, datasets, checkpoints."""

import os

# One worker process is one slot is one core: BLAS thread pools inside every
# worker process would oversubscribe the cores and slow every job down many
# times over. Set before numpy is first imported in the process.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
