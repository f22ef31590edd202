"""Finding runs: the jobs list's filters and sort orders, done in SQL so a
tenant with many thousands of jobs gets one indexed page, not all its rows.

A sort key is a column name (``created_at``), ``-`` before it for
descending (``-current_loss``), or ``metric:<name>`` for the latest
held-out value of an evaluation metric (``-metric:val_accuracy``). Jobs
without a value (no evaluation yet, no loss yet) come last either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, cast, func, select
from sqlalchemy.sql import ColumnElement, Select
from sqlmodel import col

from backend.core.models import Job, JobTag
from backend.services.errors import Invalid

METRIC = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_COLUMNS: dict[str, Any] = {
    "id": col(Job.id), "name": func.lower(col(Job.name)), "algorithm": col(Job.algorithm),
    "dataset": col(Job.dataset), "status": col(Job.status), "created_at": col(Job.created_at),
    "finished_at": col(Job.finished_at), "iterations": col(Job.iterations_done),
    "progress": cast(col(Job.iterations_done), Float) / func.nullif(col(Job.max_iterations), 0),
    "current_loss": col(Job.current_loss), "best_loss": col(Job.best_loss),
    "elapsed": col(Job.attained_seconds), "experiment": col(Job.experiment_id),
}
SORT_KEYS = tuple(_COLUMNS) + ("metric:<name>",)
SORT_RULE = ("sort by one of " + ", ".join(SORT_KEYS) + "; put - before it for descending "
             "(-created_at), e.g. metric:val_loss or -metric:val_accuracy for the latest "
             "held-out value")


class BadSearch(Invalid, ValueError):
    """A filter or sort the list cannot apply; the message says what is allowed."""

    def __init__(self, message: str, sort: str) -> None:
        super().__init__(message, loc=("query", "sort"), value=sort)


@dataclass(frozen=True)
class JobSearch:
    """What the caller asked for; every field left empty filters nothing."""

    text: str = ""
    """Part of the job's name or note, any case."""
    statuses: tuple[str, ...] = ()
    algorithm: str | None = None
    dataset: str | None = None
    experiment_id: int | None = None
    tags: tuple[str, ...] = ()
    """The job has every one of these tags."""
    sort: str = "-id"


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def conditions(search: JobSearch) -> list[ColumnElement[bool]]:
    """The WHERE clauses of ``search`` (the caller adds the tenant's)."""
    where: list[ColumnElement[bool]] = []
    if search.text.strip():
        pattern = _like(search.text.strip())
        where.append(func.lower(col(Job.name)).like(pattern, escape="\\")
                     | func.lower(col(Job.note)).like(pattern, escape="\\"))
    if search.statuses:
        where.append(col(Job.status).in_(search.statuses))
    if search.algorithm:
        where.append(col(Job.algorithm) == search.algorithm)
    if search.dataset:
        where.append(col(Job.dataset) == search.dataset)
    if search.experiment_id is not None:
        where.append(col(Job.experiment_id) == search.experiment_id)
    for tag in search.tags:
        where.append(col(Job.id).in_(select(col(JobTag.job_id)).where(col(JobTag.tag) == tag)))
    return where


def order_by(sort: str) -> list[Any]:
    """ORDER BY clauses for ``sort``; raises :class:`BadSearch` naming the
    allowed keys. Ties go newest first, so pages never overlap."""
    descending = sort.startswith("-")
    key = sort[1:] if descending else sort
    if key.startswith("metric:"):
        name = key.removeprefix("metric:")
        if not METRIC.match(name):
            raise BadSearch(f"sort {sort!r}: {name!r} is not a metric name (lower-case "
                            "letters, digits and _, such as val_loss)", sort)
        expression: Any = col(Job.last_eval)[name].as_float()
    elif key in _COLUMNS:
        expression = _COLUMNS[key]
    else:
        raise BadSearch(f"sort {sort!r} is not known: {SORT_RULE}", sort)
    ordered = expression.desc() if descending else expression.asc()
    return [ordered.nulls_last(), col(Job.id).desc()]


def apply(query: Select[Any], search: JobSearch) -> Select[Any]:
    """``query`` (over Job) filtered by ``search``, without ordering."""
    for clause in conditions(search):
        query = query.where(clause)
    return query
