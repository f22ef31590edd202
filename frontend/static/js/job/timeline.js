// When the job ran and when it waited: a grant's start plus its iterations
// at the job's measured seconds per iteration, cut at the next grant,
// shaded against the span the job existed; the rest is waiting (or
// paused). Approximate by design.

import { baseLayout, chartColors, PLOT_CONFIG, timeAxis } from "../charts.js";
import { clear, formatClock, formatDuration, formatNumber, h, parseTime } from "../dom.js";

/** How many decisions the page asks for; the note says when it has that many. */
export const DECISIONS_ASKED = 500;

export function createTimeline(section, { jobId }) {
  const chart = h("div", { id: "timeline-chart", class: "chart-small", role: "img", "aria-label": "When the job ran and when it waited" });
  const note = h("p", { class: "small subtle", id: "timeline-note" });
  section.setAttribute("aria-labelledby", "timeline-title");
  clear(section, h("h2", { id: "timeline-title" }, "Running and waiting"), chart, note);

  /** `decisions` are the job's grants (GET /jobs/{id}/decisions), in any order. */
  return function update(job, decisions) {
    const start = parseTime(job.created_at).getTime();
    const end = job.finished_at ? parseTime(job.finished_at).getTime() : Date.now();
    const perIteration = job.iterations_done > 0 ? job.elapsed_seconds / job.iterations_done : 0.001;
    const grants = decisions
      .map((d) => ({ at: parseTime(d.created_at).getTime(), d }))
      .sort((a, b) => a.at - b.at);
    const c = chartColors();
    const shapes = [
      { type: "rect", xref: "x", yref: "paper", x0: new Date(start), x1: new Date(end), y0: 0, y1: 1, fillcolor: c.waiting, line: { width: 0 }, layer: "below" },
    ];
    let ran = 0;
    grants.forEach((g, i) => {
      const next = i + 1 < grants.length ? grants[i + 1].at : end;
      const stop = Math.min(g.at + Math.max(g.d.iterations * perIteration * 1000, 150), next, end);
      if (stop <= g.at) return;
      ran += stop - g.at;
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: new Date(g.at), x1: new Date(stop), y0: 0, y1: 1, fillcolor: c.running, line: { width: 0 } });
    });
    const traces = [
      { x: [null], y: [null], type: "scatter", mode: "markers", marker: { color: c.running, symbol: "square", size: 12 }, name: "Running" },
      { x: [null], y: [null], type: "scatter", mode: "markers", marker: { color: c.waiting, symbol: "square", size: 12, line: { color: c.muted, width: 1 } }, name: "Waiting or paused" },
      {
        x: grants.map((g) => new Date(g.at)),
        y: grants.map(() => 0.5),
        type: "scatter",
        mode: "markers",
        marker: { color: c.ink, size: 5, symbol: "line-ns-open" },
        name: "Grant",
        text: grants.map((g) => `${formatClock(new Date(g.at))} chunk ${g.d.chunk_seq}: ${formatNumber(g.d.iterations)} iterations — ${g.d.reason}`),
        hoverinfo: "text",
        showlegend: false,
      },
    ];
    const layout = baseLayout({
      uirevision: `timeline-${jobId}`,
      margin: { l: 16, r: 16, t: 28, b: 32 },
      xaxis: timeAxis({ range: [new Date(start), new Date(end)], automargin: true, nticks: window.innerWidth < 600 ? 3 : 8, tickangle: 0 }),
      yaxis: { visible: false, range: [0, 1], fixedrange: true },
      shapes,
      legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
    });
    Plotly.react(chart, traces, layout, PLOT_CONFIG);
    const total = Math.max(end - start, 1);
    note.textContent = grants.length
      ? `Approximate: ran about ${Math.round((100 * ran) / total)}% of the ${formatDuration(total / 1000)} since submission, over ${grants.length} grant${grants.length === 1 ? "" : "s"}${decisions.length >= DECISIONS_ASKED ? ` (latest ${DECISIONS_ASKED} shown)` : ""}.`
      : "Not granted a slot yet: the job has been waiting since it was submitted.";
  };
}
