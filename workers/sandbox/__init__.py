"""Tenant trainer code, run in a bubblewrap sandbox with a cgroup of its own.

``open_sandboxed_trainer`` is the entry point; see ``deploy/PRODUCTION.md``
for what the sandbox does and does not protect against.
"""

from workers.sandbox.runner import SandboxLimits, SandboxUnavailable
from workers.sandbox.trainer import (
    SandboxedTrainer,
    SandboxError,
    open_job_trainer,
    open_sandboxed_trainer,
)

__all__ = ["SandboxError", "SandboxLimits", "SandboxUnavailable", "SandboxedTrainer",
           "open_job_trainer", "open_sandboxed_trainer"]
