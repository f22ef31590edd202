// Runs side by side, for the compare page and the experiment page: their
// curves overlaid (smoothed, with the raw curve faint behind), a parameter
// table that marks the parameters the runs differ in, sortable by any
// column, a Top-K filter, and a parallel-coordinates plot of the parameters
// against the final value of the chosen metric.
//
// `createCompare(root, options).update(jobs)` takes JobPublic-like objects
// (id, name, status, params, iterations_done, elapsed_seconds, ...); curves
// are fetched again only for jobs whose iteration count moved, and charts are
// redrawn with Plotly.react, so polling never flickers.

import { api } from "./api.js";
import { baseLayout, chartColors, PLOT_CONFIG, themedAxis, valueAxis, onThemeChange } from "./charts.js";
import { clear, formatNumber, formatValue, h, jobTitle, statusBadge } from "./dom.js";
import { evalColumn } from "./job-metrics.js";

const CURVE_POINTS = 500;
const FETCH_AT_ONCE = 4;
// Colours that read on light and dark backgrounds, one per run.
const PALETTE = ["#0b6bcb", "#d1461f", "#1a8a3a", "#8250df", "#b8860b", "#0a8a8a",
  "#c2185b", "#5d6b7a", "#7a4b00", "#3f51b5"];

/** Exponential moving average, debiased as TensorBoard's: 0 leaves the curve as it is. */
export function smooth(values, weight) {
  const out = [];
  let last = 0;
  let norm = 0;
  for (const v of values) {
    if (!Number.isFinite(v)) {
      out.push(v);
      continue;
    }
    last = last * weight + (1 - weight) * v;
    norm = norm * weight + (1 - weight);
    out.push(last / norm);
  }
  return out;
}

/** Whether a smaller value of `metric` is better: losses yes, accuracies no. */
function lowerIsBetter(metric, objective) {
  if (objective && objective.metric === metric) return objective.mode !== "max";
  return !/acc|auc|f1|precision|recall|r2|score/i.test(metric);
}

function paramText(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return formatValue(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function sameValue(a, b) {
  return JSON.stringify(a ?? null) === JSON.stringify(b ?? null);
}

/** Run `fn` over `items`, at most `n` at a time. */
async function inBatches(items, n, fn) {
  for (let i = 0; i < items.length; i += n) await Promise.all(items.slice(i, i + n).map(fn));
}

function rgbOf(color) {
  const hex = /^#([0-9a-f]{6})$/i.exec(color.trim());
  if (!hex) return null;
  const n = parseInt(hex[1], 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/** From the theme's muted grey (0, the worst run) to its line colour (1, the best). */
function goodnessColor(t) {
  const c = chartColors();
  const a = rgbOf(c.muted) || [128, 128, 128];
  const b = rgbOf(c.line) || [11, 92, 173];
  const f = Math.min(1, Math.max(0, t));
  return `rgb(${a.map((v, k) => Math.round(v + f * (b[k] - v))).join(",")})`;
}

/**
 * One axis of the parallel coordinates: where each run sits on it (0..1),
 * its value in words, and a few labelled ticks. Numbers spread over more than
 * two decades go on a log scale; anything else is a set of levels.
 */
function axisFor(label, values) {
  const numeric = values.length > 0 && values.every((v) => typeof v === "number" && Number.isFinite(v));
  if (numeric) {
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    const log = lo > 0 && hi / lo >= 100;
    const f = log ? Math.log10 : (v) => v;
    const span = f(hi) - f(lo);
    const at = (v) => (span > 0 ? (f(v) - f(lo)) / span : 0.5);
    const ticks = span > 0
      ? [{ at: 0, text: formatValue(lo) }, { at: 1, text: formatValue(hi) }]
      : [{ at: 0.5, text: formatValue(lo) }];
    return { label: log ? `${label} (log)` : label, position: (row) => at(values[row]), text: (row) => formatValue(values[row]), raw: (row) => values[row], ticks };
  }
  const levels = [...new Set(values.map(paramText))].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  const at = (text) => (levels.length > 1 ? levels.indexOf(text) / (levels.length - 1) : 0.5);
  return {
    label,
    position: (row) => at(paramText(values[row])),
    text: (row) => paramText(values[row]),
    raw: (row) => values[row] ?? null,
    ticks: levels.map((text) => ({ at: at(text), text })),
  };
}

export function createCompare(root, { objective = null, emptyNote = "No runs to compare." } = {}) {
  const state = {
    jobs: [],
    curves: new Map(), // job id -> {iterations, series: Map(metric -> {xs, ys})}
    metric: objective ? objective.metric : "loss",
    smoothing: 0.6,
    log: false,
    x: "iteration",
    topK: 0, // 0: all
    sort: { key: "id", dir: 1 },
    objective,
  };

  const metricSelect = h("select", { id: "cmp-metric", name: "metric" }, h("option", { value: "loss" }, "loss"));
  const slider = h("input", {
    id: "cmp-smoothing", type: "range", min: "0", max: "0.99", step: "0.01",
    value: String(state.smoothing), "aria-describedby": "cmp-smoothing-value",
  });
  const sliderValue = h("output", { id: "cmp-smoothing-value", for: "cmp-smoothing" }, String(state.smoothing));
  const logBox = h("input", { id: "cmp-log", type: "checkbox" });
  const xSelect = h(
    "select",
    { id: "cmp-x", name: "x" },
    h("option", { value: "iteration" }, "Iteration"),
    h("option", { value: "time" }, "Training time (s)"),
  );
  const topSelect = h("select", { id: "cmp-topk", name: "topk" }, h("option", { value: "0" }, "All runs"));
  const chart = h("div", { id: "compare-chart", class: "chart", role: "img", "aria-label": "Curves of the compared runs" });
  const chartNote = h("p", { class: "small subtle", id: "compare-chart-note" });
  const tableBox = h("div", { class: "table-wrap", id: "compare-table-wrap" });
  const parcoords = h("div", { id: "compare-parcoords", class: "chart", role: "img", "aria-label": "Parameters against the final metric" });
  const parNote = h("p", { class: "small subtle", id: "compare-parcoords-note" });

  const field = (id, label, input, extra = null) =>
    h("div", { class: "field" }, h("label", { for: id }, label), input, extra);
  clear(
    root,
    h(
      "section",
      { class: "panel", "aria-labelledby": "cmp-curves-h" },
      h("h2", { id: "cmp-curves-h" }, "Curves"),
      h(
        "div",
        { class: "toolbar cmp-controls" },
        field("cmp-metric", "Metric", metricSelect),
        field("cmp-smoothing", "Smoothing", h("div", { class: "cmp-slider" }, slider, sliderValue)),
        field("cmp-x", "X axis", xSelect),
        field("cmp-topk", "Show", topSelect),
        h("label", { class: "inline-check", for: "cmp-log" }, logBox, "Log scale"),
      ),
      chart,
      chartNote,
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "cmp-table-h" },
      h("h2", { id: "cmp-table-h" }, "Parameters and results"),
      h("p", { class: "small subtle" }, "Highlighted columns are the parameters the runs differ in. Select a heading to sort."),
      tableBox,
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "cmp-par-h" },
      h("h2", { id: "cmp-par-h" }, "Parameters against the final metric"),
      parcoords,
      parNote,
    ),
  );

  metricSelect.addEventListener("change", () => {
    state.metric = metricSelect.value;
    redraw();
  });
  slider.addEventListener("input", () => {
    state.smoothing = Number(slider.value);
    sliderValue.textContent = slider.value;
    drawCurves();
  });
  logBox.addEventListener("change", () => {
    state.log = logBox.checked;
    drawCurves();
  });
  xSelect.addEventListener("change", () => {
    state.x = xSelect.value;
    drawCurves();
  });
  topSelect.addEventListener("change", () => {
    state.topK = Number(topSelect.value);
    redraw();
  });
  onThemeChange(() => redraw());

  // ---- data ----

  async function loadCurves(job) {
    const cached = state.curves.get(job.id);
    if (cached && cached.iterations === job.iterations_done) return;
    const series = new Map();
    if (job.iterations_done > 0) {
      const [losses, metrics] = await Promise.all([
        api(`/api/v1/jobs/${job.id}/losses?max_points=${CURVE_POINTS}`).catch(() => null),
        api(`/api/v1/jobs/${job.id}/metrics?max_points=${CURVE_POINTS}`).catch(() => null),
      ]);
      if (losses) series.set("loss", { xs: losses.iterations, ys: losses.losses });
      if (metrics) {
        for (const [name, s] of Object.entries(metrics.train || {})) {
          if (name !== "loss") series.set(name, { xs: s.iterations, ys: s.values });
        }
        for (const [name, s] of Object.entries(metrics.eval || {})) {
          series.set(evalColumn(name), { xs: s.iterations, ys: s.values });
        }
      }
    }
    state.curves.set(job.id, { iterations: job.iterations_done, series });
  }

  function metricNames() {
    const names = new Set(["loss"]);
    if (state.objective) names.add(state.objective.metric);
    for (const c of state.curves.values()) for (const name of c.series.keys()) names.add(name);
    const rest = [...names].filter((n) => n !== "loss").sort();
    return ["loss", ...rest];
  }

  /** The run's last value of `metric` (its current loss before any curve). */
  function finalValue(job, metric = state.metric) {
    const s = state.curves.get(job.id)?.series.get(metric);
    if (s && s.ys.length) return s.ys[s.ys.length - 1];
    if (metric === "loss" && job.current_loss !== null && job.current_loss !== undefined) return job.current_loss;
    if (job.last_eval && metric.startsWith("val_")) {
      const v = job.last_eval[metric] ?? job.last_eval[metric.slice(4)];
      if (v !== undefined) return v;
    }
    return null;
  }

  /** The runs shown: all, or the best K by the chosen metric's final value. */
  function shownJobs() {
    if (!state.topK) return state.jobs;
    const lower = lowerIsBetter(state.metric, state.objective);
    const ranked = state.jobs
      .map((job) => ({ job, v: finalValue(job) }))
      .filter((r) => r.v !== null && Number.isFinite(r.v))
      .sort((a, b) => (lower ? a.v - b.v : b.v - a.v));
    const keep = new Set(ranked.slice(0, state.topK).map((r) => r.job.id));
    return state.jobs.filter((job) => keep.has(job.id));
  }

  function colourOf(job) {
    const index = state.jobs.findIndex((j) => j.id === job.id);
    return PALETTE[(index < 0 ? 0 : index) % PALETTE.length];
  }

  function paramKeys() {
    const keys = new Set();
    for (const job of state.jobs) for (const k of Object.keys(job.params || {})) keys.add(k);
    return [...keys].sort();
  }

  function differing(keys) {
    return new Set(
      keys.filter((k) => state.jobs.some((job) => !sameValue(job.params?.[k], state.jobs[0].params?.[k]))),
    );
  }

  // ---- drawing ----

  function syncControls() {
    const names = metricNames();
    if (!names.includes(state.metric)) names.push(state.metric);
    const current = [...metricSelect.options].map((o) => o.value);
    if (current.join("|") !== names.join("|")) {
      clear(metricSelect, names.map((n) => h("option", { value: n }, n)));
    }
    metricSelect.value = state.metric;
    const n = state.jobs.length;
    const ks = [1, 3, 5, 10, 20].filter((k) => k < n);
    const wanted = ["0", ...ks.map(String)];
    if ([...topSelect.options].map((o) => o.value).join("|") !== wanted.join("|")) {
      clear(
        topSelect,
        h("option", { value: "0" }, "All runs"),
        ks.map((k) => h("option", { value: String(k) }, `Top ${k}`)),
      );
    }
    if (state.topK && !ks.includes(state.topK)) state.topK = 0;
    topSelect.value = String(state.topK);
  }

  function secondsPerIteration(job) {
    return job.iterations_done > 0 && job.elapsed_seconds ? job.elapsed_seconds / job.iterations_done : null;
  }

  function drawCurves() {
    const c = chartColors();
    const traces = [];
    let missingTime = false;
    for (const job of shownJobs()) {
      const s = state.curves.get(job.id)?.series.get(state.metric);
      if (!s || !s.xs.length) continue;
      let xs = s.xs;
      if (state.x === "time") {
        const spi = secondsPerIteration(job);
        if (spi === null) {
          missingTime = true;
          continue;
        }
        xs = s.xs.map((i) => i * spi);
      }
      const color = colourOf(job);
      const label = `#${job.id} ${jobTitle(job)}`;
      traces.push({
        x: xs, y: s.ys, type: "scatter", mode: "lines", name: `${label} (raw)`,
        legendgroup: String(job.id), showlegend: false, hoverinfo: "skip",
        opacity: 0.25, line: { color, width: 1 }, meta: { job: job.id, kind: "raw" },
      });
      const ys = smooth(s.ys, state.smoothing);
      traces.push({
        x: xs, y: ys, type: "scatter", mode: s.xs.length <= 40 ? "lines+markers" : "lines", name: label,
        legendgroup: String(job.id), line: { color, width: 2 }, marker: { size: 4, color },
        customdata: ys.map(formatValue), hovertemplate: `${label}: %{customdata}<extra></extra>`,
        meta: { job: job.id, kind: "smooth" },
      });
    }
    const empty = traces.length === 0;
    const layout = baseLayout({
      uirevision: `${state.metric}|${state.x}|${state.log}`,
      margin: { l: 60, r: 16, t: 32, b: 48 },
      xaxis: themedAxis({
        title: { text: state.x === "time" ? "Training time (s)" : "Iteration" },
        rangemode: "tozero", zeroline: false, automargin: true, visible: !empty,
      }),
      yaxis: valueAxis({
        title: { text: state.metric }, type: state.log ? "log" : "linear",
        zeroline: false, automargin: true, visible: !empty,
      }),
      legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
      hovermode: "closest",
      showlegend: !empty,
      annotations: empty
        ? [{ text: `No ${state.metric} values yet`, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 14, color: c.muted } }]
        : [],
    });
    Plotly.react(chart, traces, layout, PLOT_CONFIG);
    chart.dataset.traces = String(traces.length);
    const notes = [];
    if (state.x === "time") notes.push("Time is each run's training seconds, spread evenly over its iterations (its average seconds per iteration).");
    if (missingTime) notes.push("Runs that have not trained yet have no time axis and are left out.");
    if (state.log) notes.push("Log scale leaves out values at or below zero.");
    chartNote.textContent = notes.join(" ");
  }

  function sortValue(job, key) {
    if (key === "id") return job.id;
    if (key === "name") return jobTitle(job).toLowerCase();
    if (key === "status") return job.status;
    if (key === "iterations") return job.iterations_done;
    if (key === "final") return finalValue(job);
    if (key === "best") return job.best_loss;
    if (key.startsWith("param:")) return job.params?.[key.slice(6)];
    if (key.startsWith("metric:")) return finalValue(job, key.slice(7));
    return null;
  }

  function compare(a, b) {
    const missing = (v) => v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
    if (missing(a) && missing(b)) return 0;
    if (missing(a)) return 1; // runs without a value go last whichever way
    if (missing(b)) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), "en", { numeric: true });
  }

  function drawTable() {
    const keys = paramKeys();
    const diff = differing(keys);
    const otherMetrics = metricNames().filter((m) => m !== state.metric);
    const columns = [
      { key: "id", label: "Run" },
      { key: "status", label: "Status" },
      { key: "iterations", label: "Iterations", num: true },
      ...keys.map((k) => ({ key: `param:${k}`, label: k, param: k, diff: diff.has(k) })),
      { key: "final", label: `Final ${state.metric}`, num: true },
      ...otherMetrics.map((m) => ({ key: `metric:${m}`, label: `Final ${m}`, num: true })),
    ];
    const { key: sortKey, dir } = state.sort;
    const rows = shownJobs().slice().sort((a, b) => {
      const va = sortValue(a, sortKey);
      const vb = sortValue(b, sortKey);
      const missing = (v) => v === null || v === undefined;
      if (missing(va) || missing(vb)) return compare(va, vb);
      return dir * compare(va, vb) || a.id - b.id;
    });
    const best = bestJob();
    const head = h(
      "tr",
      {},
      columns.map((col) => {
        const sorted = col.key === sortKey;
        return h(
          "th",
          {
            scope: "col",
            class: [col.num ? "num" : "", col.diff ? "diff" : ""].join(" ").trim() || null,
            "aria-sort": sorted ? (dir > 0 ? "ascending" : "descending") : null,
            "data-key": col.key,
          },
          h(
            "button",
            {
              type: "button", class: "th-sort",
              onClick: () => {
                state.sort = { key: col.key, dir: sorted ? -dir : 1 };
                drawTable();
              },
            },
            col.label,
            sorted ? (dir > 0 ? " ▲" : " ▼") : "",
          ),
        );
      }),
    );
    const body = rows.map((job) =>
      h(
        "tr",
        {
          dataset: { jobId: String(job.id), status: job.status },
          class: [job.stopped_early ? "stopped-early" : "", best === job.id ? "best-run" : ""].join(" ").trim() || null,
        },
        h(
          "td",
          {},
          h("span", { class: "swatch", style: `background:${colourOf(job)}`, "aria-hidden": "true" }),
          h("a", { class: "job-name", href: `/jobs/${job.id}` }, `#${job.id} ${jobTitle(job)}`),
          best === job.id ? h("span", { class: "badge badge-best", "data-testid": "best-run" }, "best") : null,
        ),
        h(
          "td",
          {},
          statusBadge(job.status),
          job.stopped_early ? h("span", { class: "badge badge-stopped", "data-testid": "stopped-early" }, "stopped early") : null,
          job.end_reason ? h("div", { class: "reason", "data-testid": "end-reason" }, job.end_reason) : null,
        ),
        h("td", { class: "num" }, formatNumber(job.iterations_done)),
        keys.map((k) => h("td", { class: diff.has(k) ? "diff" : null, "data-param": k }, paramText(job.params?.[k]))),
        h("td", { class: "num", "data-testid": "final-metric" }, formatValue(finalValue(job))),
        otherMetrics.map((m) => h("td", { class: "num" }, formatValue(finalValue(job, m)))),
      ),
    );
    const table = h(
      "table",
      { id: "compare-table", class: "compare-table" },
      h("caption", { class: "visually-hidden" }, "Compared runs: parameters and final metrics"),
      h("thead", {}, head),
      h("tbody", {}, body),
    );
    const existing = tableBox.querySelector("table");
    if (existing) existing.replaceWith(table);
    else clear(tableBox, table);
  }

  function bestJob() {
    const lower = lowerIsBetter(state.metric, state.objective);
    let best = null;
    let bestValue = null;
    for (const job of state.jobs) {
      const v = finalValue(job);
      if (v === null || !Number.isFinite(v)) continue;
      if (bestValue === null || (lower ? v < bestValue : v > bestValue)) {
        best = job.id;
        bestValue = v;
      }
    }
    return best;
  }

  /**
   * Parallel coordinates drawn as SVG lines (one per run) over one vertical
   * axis per parameter plus the final metric. Plotly's own parcoords needs
   * WebGL through regl, which compiles code at run time, and the portal's
   * Content-Security-Policy forbids that ('unsafe-eval').
   */
  function drawParcoords() {
    const c = chartColors();
    const jobs = shownJobs().filter((job) => {
      const v = finalValue(job);
      return v !== null && Number.isFinite(v);
    });
    const dims = paramKeys().map((k) => axisFor(k, jobs.map((job) => job.params?.[k])));
    const finals = jobs.map((job) => finalValue(job));
    dims.push(axisFor(`final ${state.metric}`, finals));
    const lower = lowerIsBetter(state.metric, state.objective);
    const lo = Math.min(...finals);
    const hi = Math.max(...finals);
    const traces = jobs.map((job, row) => {
      // 1 for the best run, 0 for the worst.
      const goodness = hi > lo ? (lower ? (hi - finals[row]) / (hi - lo) : (finals[row] - lo) / (hi - lo)) : 1;
      const label = `#${job.id} ${jobTitle(job)}`;
      return {
        type: "scatter", mode: "lines+markers", name: label, showlegend: false,
        x: dims.map((_, i) => i), y: dims.map((d) => d.position(row)),
        customdata: dims.map((d) => `${d.label}: ${d.text(row)}`),
        hovertemplate: `${label}<br>%{customdata}<extra></extra>`,
        line: { color: goodnessColor(goodness), width: 1.5 + 2 * goodness },
        marker: { size: 6, color: goodnessColor(goodness) },
        meta: { job: job.id, kind: "parallel", values: dims.map((d) => d.raw(row)) },
      };
    });
    const annotations = [];
    dims.forEach((d, i) => {
      for (const t of d.ticks) {
        annotations.push({ x: i, y: t.at, text: t.text, showarrow: false, xanchor: "left", xshift: 4, font: { size: 10, color: c.muted } });
      }
    });
    const empty = jobs.length === 0;
    if (empty) {
      annotations.push({ text: `No run has a final ${state.metric} yet`, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 14, color: c.muted } });
    }
    const layout = baseLayout({
      margin: { l: 24, r: 48, t: 16, b: 56 },
      xaxis: themedAxis({
        tickvals: dims.map((_, i) => i), ticktext: dims.map((d) => d.label), showgrid: true,
        gridcolor: c.muted, zeroline: false, range: [-0.25, Math.max(1, dims.length - 1) + 0.4],
        fixedrange: true, visible: !empty, automargin: true,
      }),
      yaxis: themedAxis({ visible: false, range: [-0.08, 1.08], fixedrange: true }),
      hovermode: "closest",
      annotations,
    });
    Plotly.react(parcoords, traces, layout, PLOT_CONFIG);
    parcoords.dataset.lines = String(jobs.length);
    parNote.textContent = empty
      ? `No run has a final ${state.metric} yet.`
      : `${jobs.length} run${jobs.length === 1 ? "" : "s"}, one line each; the stronger the colour and the thicker the line, the better its final ${state.metric} (${lower ? "lower" : "higher"} is better).`;
  }

  function redraw() {
    syncControls();
    drawCurves();
    drawTable();
    drawParcoords();
  }

  return {
    /** Show these runs (fetching the curves that moved) and redraw. */
    async update(jobs) {
      state.jobs = jobs.slice().sort((a, b) => a.id - b.id);
      await inBatches(state.jobs, FETCH_AT_ONCE, loadCurves);
      for (const id of [...state.curves.keys()]) {
        if (!state.jobs.some((j) => j.id === id)) state.curves.delete(id);
      }
      redraw();
    },
    setObjective(next) {
      const first = !state.objective && next;
      state.objective = next;
      if (first && next.metric) state.metric = next.metric;
    },
  };
}
