"""What users call their runs: a name, tags and a free-text note on a job
or an experiment, and deleting a finished one with everything it stored.

Text is bounded and made storable (:mod:`backend.core.safe_text`): a name
is one line, a note keeps its newlines, a tag is a short word the jobs list
can filter by. Deleting is allowed only for finished runs: quotas count
queued, running and paused jobs (:mod:`backend.services.quotas`), so a
finished job holds no quota and its removal leaves every quota's usage as
it was.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import delete, select
from sqlmodel import Session, col

from backend.core.models import (
    FINISHED,
    NOTE_MAX,
    TAG_MAX,
    Decision,
    Experiment,
    ExperimentTag,
    Job,
    JobTag,
    LossRecord,
    MetricRecord,
)
from backend.core.safe_text import storable
from backend.services.errors import Conflict

MAX_TAGS = 20
"""Most tags on one job or experiment."""
NAME_MAX = 200
TAG = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.:+-]{{0,{TAG_MAX - 1}}}$")
TAG_RULE = (f"a tag is 1 to {TAG_MAX} letters, digits or _ . : + - and starts with a letter "
            "or digit")


class NotFinished(Conflict):
    """The run is still queued, running or paused: it cannot be deleted."""


class LabelsUpdate(BaseModel):
    """A change to a run's labels; a field left out stays as it is."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description=f"One line, at most {NAME_MAX} characters; "
                             "empty clears it")
    tags: list[str] | None = Field(None, description=f"The whole new set of tags (at most "
                                   f"{MAX_TAGS}; {TAG_RULE}); [] removes them all")
    note: str | None = Field(None, description=f"Free text, at most {NOTE_MAX} characters")

    @field_validator("name")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if "\n" in value or "\r" in value:
            raise ValueError("a name is one line: remove the line breaks")
        if len(value) > NAME_MAX:
            raise ValueError(f"a name has at most {NAME_MAX} characters, this one {len(value)}")
        return storable(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        tags = list(dict.fromkeys(t.strip() for t in value))
        for tag in tags:
            if not TAG.match(tag):
                raise ValueError(f"tag {tag[:TAG_MAX + 10]!r} is not valid: {TAG_RULE}")
        if len(tags) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags, got {len(tags)}")
        return tags

    @field_validator("note")
    @classmethod
    def _note(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value) > NOTE_MAX:
            raise ValueError(f"a note has at most {NOTE_MAX} characters, this one {len(value)}")
        return storable(value)


def job_tags(session: Session, job_ids: Iterable[int]) -> dict[int, list[str]]:
    """Each job's tags, sorted; a job without tags is left out."""
    ids = list(job_ids)
    out: dict[int, list[str]] = {}
    if not ids:
        return out
    for job_id, tag in session.execute(
            select(col(JobTag.job_id), col(JobTag.tag)).where(col(JobTag.job_id).in_(ids))
            .order_by(col(JobTag.tag))).all():
        out.setdefault(int(job_id), []).append(str(tag))
    return out


def experiment_tags(session: Session, experiment_id: int) -> list[str]:
    return [str(t) for t in session.execute(
        select(col(ExperimentTag.tag)).where(col(ExperimentTag.experiment_id) == experiment_id)
        .order_by(col(ExperimentTag.tag))).scalars().all()]


def label_job(*, session: Session, job: Job, change: LabelsUpdate) -> None:
    """Apply ``change`` to ``job`` and commit."""
    if change.name is not None:
        job.name = change.name
    if change.note is not None:
        job.note = change.note
    session.add(job)
    if change.tags is not None:
        session.execute(delete(JobTag).where(col(JobTag.job_id) == job.id))
        session.add_all(JobTag(job_id=job.id or 0, tag=t) for t in change.tags)
    session.commit()
    session.refresh(job)


def label_experiment(*, session: Session, experiment: Experiment,
                     change: LabelsUpdate) -> None:
    """Apply ``change`` to ``experiment`` and commit."""
    if change.name is not None:
        experiment.name = change.name
    if change.note is not None:
        experiment.note = change.note
    session.add(experiment)
    if change.tags is not None:
        session.execute(delete(ExperimentTag)
                        .where(col(ExperimentTag.experiment_id) == experiment.id))
        session.add_all(ExperimentTag(experiment_id=experiment.id or 0, tag=t)
                        for t in change.tags)
    session.commit()
    session.refresh(experiment)


def _delete_job_rows(session: Session, job_ids: list[int]) -> None:
    # Children first: the foreign keys point at the job.
    for model, column in ((LossRecord, LossRecord.job_id), (MetricRecord, MetricRecord.job_id),
                          (Decision, Decision.job_id), (JobTag, JobTag.job_id)):
        session.execute(delete(model).where(col(column).in_(job_ids)))
    session.execute(delete(Job).where(col(Job.id).in_(job_ids)))


def delete_jobs_files(checkpoint_dir: Path, job_ids: Iterable[int]) -> None:
    """Remove the jobs' checkpoint folders (after the rows are gone: a crash
    between leaves files nobody can reach, never a row without its data)."""
    for job_id in job_ids:
        shutil.rmtree(checkpoint_dir / str(int(job_id)), ignore_errors=True)


def delete_job(*, session: Session, job: Job) -> None:
    """Delete a finished job's rows (losses, metrics, decisions, tags); the
    caller removes its files after this commits. Raises :class:`NotFinished`."""
    if job.status not in FINISHED:
        raise NotFinished(f"job {job.id} is {job.status}: cancel it first, then delete it")
    _delete_job_rows(session, [job.id or 0])


def delete_experiment(*, session: Session, experiment: Experiment) -> list[int]:
    """Delete a finished experiment with every job of it; the ids of those
    jobs (for their files). Raises :class:`NotFinished` while any job is active."""
    jobs = session.execute(select(Job).where(col(Job.experiment_id) == experiment.id)
                           ).scalars().all()
    active = [j.id for j in jobs if j.status not in FINISHED]
    if active:
        raise NotFinished(f"experiment {experiment.id} still has {len(active)} active "
                          f"job{'s' if len(active) != 1 else ''}: cancel it first, then "
                          "delete it")
    ids = [j.id or 0 for j in jobs]
    _delete_job_rows(session, ids)
    session.execute(delete(ExperimentTag)
                    .where(col(ExperimentTag.experiment_id) == experiment.id))
    session.delete(experiment)
    return ids
