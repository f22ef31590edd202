"""A job's metrics other than the training loss: per-iteration (``train``)
and held-out (``eval``) series, read from ``metric_point``."""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlmodel import Session, col

from backend.core.models import Job, MetricRecord
from backend.schemas import LossHistory, MetricSeries, MetricsHistory
from backend.services.jobs import (
    downsample,
    last_eval_iteration,
    last_eval_metrics,
    loss_history,
)

SPLITS = ("train", "eval")


def metrics_history(*, session: Session, job: Job, max_points: int,
                    split: str | None = None) -> MetricsHistory:
    """Every metric series of ``job`` (both splits, or only ``split``), each
    downsampled like the loss history to about ``max_points`` points."""
    query = (select(col(MetricRecord.split), col(MetricRecord.name),
                    col(MetricRecord.iteration), col(MetricRecord.value))
             .where(col(MetricRecord.job_id) == job.id))
    if split is not None:
        query = query.where(col(MetricRecord.split) == split)
    rows = session.execute(query.order_by(col(MetricRecord.split), col(MetricRecord.name),
                                          col(MetricRecord.iteration))).all()
    points: dict[tuple[str, str], tuple[list[int], list[float]]] = defaultdict(
        lambda: ([], []))
    for row_split, name, iteration, value in rows:
        its, values = points[(str(row_split), str(name))]
        its.append(int(iteration))
        values.append(float(value))
    series: dict[str, dict[str, MetricSeries]] = {s: {} for s in SPLITS}
    for (row_split, name), (its, values) in points.items():
        if row_split not in series:
            continue  # a split this version does not know: not served rather than mislabelled
        total = len(its)
        shrunk = total > max_points
        if shrunk:
            its, values = downsample(its, values, max_points)
        series[row_split][name] = MetricSeries(
            name=name, split=row_split,
            total_points=total, downsampled=shrunk, iterations=its, values=values)
    return MetricsHistory(job_id=job.id or 0, quality_metric=job.quality_metric,
                          eval_every=job.eval_every, last_eval=last_eval_metrics(job),
                          last_eval_iteration=last_eval_iteration(job),
                          train=series["train"], eval=series["eval"])


def eval_column(name: str) -> str:
    """A held-out metric's export column: ``val_`` prefixed unless it has it."""
    return name if name.startswith("val_") else f"val_{name}"


@dataclass(frozen=True)
class ExportTable:
    """A job's whole history as one table: a row per iteration, a column per
    metric (``None`` where a metric has no value at that iteration)."""

    columns: list[str]
    rows: list[list[float | int | None]]
    losses: LossHistory
    metrics: MetricsHistory


def export_table(*, session: Session, job: Job, max_points: int) -> ExportTable:
    """The loss and every metric series of ``job`` (each downsampled like the
    loss history) joined on iteration: ``iteration, loss, <train metrics>,
    <val_* metrics>``; held-out columns are empty between evaluations."""
    losses = loss_history(session=session, job_id=job.id or 0, max_points=max_points)
    metrics = metrics_history(session=session, job=job, max_points=max_points)
    columns = ["iteration", "loss"]
    series: list[tuple[list[int], list[float]]] = [(losses.iterations, losses.losses)]
    for name, s in sorted(metrics.train.items()):
        if name != "loss":  # the loss column is loss_point's
            columns.append(name)
            series.append((s.iterations, s.values))
    for name, s in sorted(metrics.eval.items()):
        columns.append(eval_column(name))
        series.append((s.iterations, s.values))
    table: dict[int, list[float | int | None]] = {}
    for index, (its, values) in enumerate(series, start=1):
        for it, value in zip(its, values, strict=True):
            row = table.get(it)
            if row is None:
                row = table[it] = [it, *([None] * (len(columns) - 1))]
            row[index] = value
    return ExportTable(columns=columns, rows=[table[it] for it in sorted(table)],
                       losses=losses, metrics=metrics)


def export_csv(table: ExportTable) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(["" if v is None else v for v in row] for row in table.rows)
    return out.getvalue()


def _finite(value: float | int | None) -> float | int | None:
    """JSON has no NaN or infinity: such a value (a diverged step) becomes null."""
    return value if value is None or math.isfinite(value) else None


def export_json(table: ExportTable, job: Job) -> dict[str, Any]:
    def points(split: dict[str, MetricSeries]) -> dict[str, Any]:
        return {name: {"total_points": s.total_points, "downsampled": s.downsampled,
                       "points": [{"iteration": i, "value": _finite(v)}
                                  for i, v in zip(s.iterations, s.values, strict=True)]}
                for name, s in split.items()}

    return {
        "job_id": job.id, "name": job.name, "algorithm": job.algorithm, "dataset": job.dataset,
        "quality_metric": job.quality_metric, "eval_every": job.eval_every,
        "last_eval": table.metrics.last_eval,
        "last_eval_iteration": table.metrics.last_eval_iteration,
        "total_points": table.losses.total_points, "downsampled": table.losses.downsampled,
        "points": [{"iteration": i, "loss": _finite(v)}
                   for i, v in zip(table.losses.iterations, table.losses.losses, strict=True)],
        "metrics": {"train": points(table.metrics.train), "eval": points(table.metrics.eval)},
        "columns": table.columns,
        "rows": [[_finite(v) for v in row] for row in table.rows],
    }
