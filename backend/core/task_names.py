"""Celery task names shared by the senders and the workers that define the tasks.

The scheduler sends tasks by name without importing the worker code (which
pulls in the training libraries), so the name is the whole contract: a typo on
either side leaves chunks queued that no worker ever picks up.
"""

from __future__ import annotations

RUN_CHUNK_TASK = "slaq.run_chunk"
"""Runs one granted chunk: args ``[job_id, chunk_seq, iterations]``."""
