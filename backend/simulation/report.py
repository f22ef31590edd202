"""Self-contained Plotly HTML reports of simulation runs.

plotly.js is embedded once (``include_plotlyjs=True``), so a report opens
offline and needs no CDN (DESIGN §3).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from backend.scheduling.metrics import Figures, mean_loss_timeline, time_to_fraction
from backend.scheduling.simulator import SimResult

FIGURE_LABELS: dict[str, str] = {
    "avg_norm_loss": "avg normalised loss",
    "arrived_norm_loss": "avg normalised loss, all jobs",
    "t90_mean": "time to 90% (s)",
    "t95_mean": "time to 95% (s)",
    "t99_mean": "time to 99% (s)",
    "t90_p95": "time to 90%, p95 (s)",
    "mean_completion": "mean completion (s)",
    "makespan": "makespan (s)",
}


def run_figures(runs: Mapping[str, tuple[SimResult, Figures]]) -> list[go.Figure]:
    """Charts comparing policies on one workload."""
    timeline = go.Figure()
    for name, (result, _) in runs.items():
        t, mean = mean_loss_timeline(result)
        timeline.add_trace(go.Scatter(x=t, y=mean, mode="lines", name=name))
    timeline.update_layout(title="Mean normalised loss of active jobs (lower is better)",
                           xaxis_title="simulated seconds", yaxis_title="normalised loss")
    cdf = go.Figure()
    for name, (result, _) in runs.items():
        t90 = np.sort([time_to_fraction(j, 0.90) for j in result.jobs])
        cdf.add_trace(go.Scatter(x=t90, y=np.arange(1, len(t90) + 1) / len(t90),
                                 mode="lines", line_shape="hv", name=name))
    cdf.update_layout(title="Jobs that reached 90% of their loss reduction",
                      xaxis_title="seconds since arrival", yaxis_title="fraction of jobs")
    bars = go.Figure()
    for name, (_, fig) in runs.items():
        keys = ["t90_mean", "t95_mean", "t99_mean", "t90_p95", "mean_completion"]
        bars.add_trace(go.Bar(x=[FIGURE_LABELS[k] for k in keys],
                              y=[getattr(fig, k) for k in keys], name=name))
    bars.update_layout(title="Delays (seconds, lower is better)", barmode="group")
    return [timeline, cdf, bars]


def table_figure(header: Sequence[str], rows: Sequence[Sequence[object]], title: str) -> go.Figure:
    columns = [[_fmt(row[i]) for row in rows] for i in range(len(header))]
    fig = go.Figure(go.Table(header={"values": list(header)}, cells={"values": columns}))
    fig.update_layout(title=title, height=120 + 28 * len(rows))
    return fig


def write_html(path: str | Path, title: str, figures: Sequence[go.Figure],
               notes: Sequence[str] = ()) -> None:
    """One HTML file holding ``figures``; plotly.js is inlined with the first."""
    parts = [
        pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False)
        for i, fig in enumerate(figures)
    ]
    body = "\n".join(f"<p>{html.escape(n)}</p>" for n in notes) + "\n".join(parts)
    Path(path).write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
