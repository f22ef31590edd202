"""Building the trainer a chunk runs (registered in-process, or tenant code sandboxed)
and reading the data it trains on from the database and shared storage."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from backend.core.models import Job
from workers.datasets.text import job_text
from workers.datasets.uploaded import resolve_dataset
from workers.trainers.contract import Trainer, TrainingData
from workers.trainers.data import holdout
from workers.trainers.loop import LoopTrainer
from workers.trainers.registry import TenantCode, build_trainer, resolve


def load_trainer(engine: Engine, job: Job, checkpoint: bytes | None) -> Trainer:
    """The job's trainer, at its checkpoint when ``checkpoint`` is given.

    Tenant code (``code:<id>``) never runs in this process: it gets a
    sandboxed child that speaks the contract over a pipe.
    """
    data = load_training_data(engine, job)
    trainer: Trainer
    source = resolve(job.algorithm)
    if isinstance(source, TenantCode):
        from workers.sandbox import open_job_trainer

        trainer = open_job_trainer(engine, job, data)
    else:
        trainer = build_trainer(source.cls, data, job.params, job.seed)
        if isinstance(trainer, LoopTrainer):
            from backend.core.settings import get_settings

            # A silent loop fails with its own reason before its lease runs out.
            trainer.report_seconds = 0.8 * get_settings().lease_seconds
    if checkpoint is not None:
        try:
            trainer.restore(checkpoint)
        except BaseException:
            trainer.close()
            raise
    return trainer


def load_training_data(engine: Engine, job: Job) -> TrainingData:
    """The job's data, built-in or its tenant's upload, split for validation."""
    text = job_text(engine, job.dataset, tenant_id=job.tenant_id)
    if text is not None:
        train, validation = text
        return TrainingData(name=job.dataset, task="text", text=train,
                            validation_text=validation or None)
    return holdout(resolve_dataset(engine, job))
