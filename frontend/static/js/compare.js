// Runs side by side, for the compare page and the experiment page: their
// curves overlaid (smoothed, with the raw curve faint behind; a log axis
// chosen as on the job page; legend names short: the run's number and the
// parameters it differs in), a table led by the compared metric whose
// parameter columns are those the runs differ in (the ones they share are
// folded into one line), sortable by any column, a Top-K filter, and a
// parallel-coordinates plot of the differing parameters against the final
// value of the chosen metric (missing values drawn apart, below each axis).
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

const LOG_RATIO = 50; // max/min beyond which a log axis reads better (as on the job page)
const LOG_MIN_POINTS = 5;
const MISSING_AT = -0.16; // a missing value's place: below every axis, apart from its lowest value
const SHORT_NAME = 28; // characters of a legend name after the run's number

function isMissing(v) {
  return v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
}

/** Round numbers between lo and hi for an axis's ticks: 1, 2 or 5 times a power of ten. */
function niceTicks(lo, hi, count = 4) {
  const raw = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/**
 * One axis of the parallel coordinates: where each run sits on it (0..1, or
 * MISSING_AT for a run without a value, so a missing value never reads as
 * the lowest), its value in words, and labelled ticks: the two ends and
 * round values between them (decades on a log axis), never crowding the
 * ends. Numbers spread over more than two decades go on a log scale;
 * anything else is a set of levels.
 */
function axisFor(label, values) {
  const present = values.filter((v) => !isMissing(v));
  const gap = present.length < values.length;
  const numeric = present.length > 0 && present.every((v) => typeof v === "number");
  const missingTick = gap ? [{ at: MISSING_AT, text: "missing", missing: true }] : [];
  if (numeric) {
    const lo = Math.min(...present);
    const hi = Math.max(...present);
    const log = lo > 0 && hi / lo >= 100;
    const f = log ? Math.log10 : (v) => v;
    const span = f(hi) - f(lo);
    const at = (v) => (span > 0 ? (f(v) - f(lo)) / span : 0.5);
    let ticks = [{ at: span > 0 ? 0 : 0.5, text: formatValue(lo) }];
    if (span > 0) {
      const first = Math.ceil(Math.log10(lo));
      const inner = log
        ? Array.from({ length: Math.max(0, Math.floor(Math.log10(hi)) - first + 1) }, (_, k) => 10 ** (first + k))
        : niceTicks(lo, hi);
      const between = inner.map((v) => ({ at: at(v), text: formatValue(v) })).filter((t) => t.at > 0.12 && t.at < 0.88);
      // At most three labels between the ends, evenly picked.
      const every = Math.ceil(between.length / 3) || 1;
      ticks = [...ticks, ...between.filter((_, k) => k % every === 0), { at: 1, text: formatValue(hi) }];
    }
    return {
      label: log ? `${label} (log)` : label,
      position: (row) => (isMissing(values[row]) ? MISSING_AT : at(values[row])),
      text: (row) => (isMissing(values[row]) ? "missing" : formatValue(values[row])),
      raw: (row) => (isMissing(values[row]) ? null : values[row]),
      ticks: [...ticks, ...missingTick],
    };
  }
  const levels = [...new Set(present.map(paramText))].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  const at = (text) => (levels.length > 1 ? levels.indexOf(text) / (levels.length - 1) : 0.5);
  return {
    label,
    position: (row) => (isMissing(values[row]) ? MISSING_AT : at(paramText(values[row]))),
    text: (row) => (isMissing(values[row]) ? "missing" : paramText(values[row])),
    raw: (row) => values[row] ?? null,
    ticks: [...levels.map((text) => ({ at: at(text), text })), ...missingTick],
  };
}

export function createCompare(root, { objective = null, emptyNote = "No runs to compare." } = {}) {
  const state = {
    jobs: [],
    curves: new Map(), // job id -> {iterations, series: Map(metric -> {xs, ys})}
    metric: objective ? objective.metric : "loss",
    smoothing: 0.6,
    log: false,
    logChosen: false, // the user ticked or unticked "Log scale": no more automatic choice
    showSame: false, // the parameters every run shares shown as columns too
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
  const sameBox = h("p", { class: "small", id: "compare-same" });
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
      h("p", { class: "small subtle" }, "The compared metric first, then the parameters the runs differ in (highlighted). Select a heading to sort."),
      sameBox,
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
    state.logChosen = true;
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

  /**
   * Log when every shown value of the metric is positive and they span more
   * than LOG_RATIO, the job page's rule; asked again for each metric until
   * the user sets the box.
   */
  function wantsLog() {
    let lo = Infinity;
    let hi = -Infinity;
    let n = 0;
    for (const job of shownJobs()) {
      for (const y of state.curves.get(job.id)?.series.get(state.metric)?.ys || []) {
        if (!Number.isFinite(y)) continue;
        if (y <= 0) return false;
        lo = Math.min(lo, y);
        hi = Math.max(hi, y);
        n += 1;
      }
    }
    return n >= LOG_MIN_POINTS && hi / lo > LOG_RATIO;
  }

  /**
   * A legend name: the run's number and the fewest facts that tell it from
   * the other runs ("#12 learning_rate=0.1", "#7 kmeans"), picked greedily:
   * first the fact that sets it apart from the most runs (its algorithm or
   * dataset where those differ, then its parameters); else its name. Cut
   * short; the full name is in the hover text and the table.
   */
  function shortName(job, diff) {
    const facts = [
      { get: (j) => j.algorithm, show: (v) => String(v) },
      { get: (j) => j.dataset, show: (v) => String(v) },
      ...[...diff].map((k) => ({ get: (j) => j.params?.[k], show: (v) => `${k}=${paramText(v)}` })),
    ].filter((f) => !isMissing(f.get(job)));
    let others = state.jobs.filter((j) => j.id !== job.id);
    const parts = [];
    while (others.length && facts.length) {
      const apart = (f) => others.filter((j) => !sameValue(f.get(j), f.get(job))).length;
      const best = facts.reduce((a, b) => (apart(b) > apart(a) ? b : a));
      if (apart(best) === 0) break;
      parts.push(best.show(best.get(job)));
      others = others.filter((j) => sameValue(best.get(j), best.get(job)));
      facts.splice(facts.indexOf(best), 1);
    }
    const text = parts.length ? parts.join(", ") : jobTitle(job);
    return `#${job.id} ${text.length > SHORT_NAME ? `${text.slice(0, SHORT_NAME - 1)}…` : text}`;
  }

  function secondsPerIteration(job) {
    return job.iterations_done > 0 && job.elapsed_seconds ? job.elapsed_seconds / job.iterations_done : null;
  }

  function drawCurves() {
    const c = chartColors();
    const traces = [];
    const diff = differing(paramKeys());
    let missingTime = false;
    if (!state.logChosen) {
      state.log = wantsLog();
      logBox.checked = state.log;
    }
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
      const label = shortName(job, diff);
      const full = `#${job.id} ${jobTitle(job)}`.replace(/[<>&]/g, (ch) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;" })[ch]);
      traces.push({
        x: xs, y: s.ys, type: "scatter", mode: "lines", name: `${label} (raw)`,
        legendgroup: String(job.id), showlegend: false, hoverinfo: "skip",
        opacity: 0.25, line: { color, width: 1 }, meta: { job: job.id, kind: "raw" },
      });
      const ys = smooth(s.ys, state.smoothing);
      traces.push({
        x: xs, y: ys, type: "scatter", mode: s.xs.length <= 40 ? "lines+markers" : "lines", name: label,
        legendgroup: String(job.id), line: { color, width: 2 }, marker: { size: 4, color },
        customdata: ys.map(formatValue), hovertemplate: `${full}: %{customdata}<extra></extra>`,
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
        // As on the job page: a label at every decade and at 2 and 5 times it.
        dtick: state.log ? "D2" : null, tickformat: state.log ? "~g" : "",
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
    if (state.log) {
      notes.push(state.logChosen
        ? "Log scale leaves out values at or below zero."
        : `Log scale, chosen as on the job page: the values span more than ${LOG_RATIO} times; untick it for a linear axis.`);
    }
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
    const all = paramKeys();
    const diff = differing(all);
    // With one run nothing differs: every parameter stays a column then.
    const fold = state.jobs.length > 1 && !state.showSame;
    const keys = fold ? all.filter((k) => diff.has(k)) : all;
    const same = all.filter((k) => !diff.has(k));
    const otherMetrics = metricNames().filter((m) => m !== state.metric);
    const columns = [
      { key: "id", label: "Run" },
      { key: "final", label: `Final ${state.metric}`, num: true },
      ...keys.map((k) => ({ key: `param:${k}`, label: k, param: k, diff: diff.has(k) })),
      { key: "status", label: "Status" },
      { key: "iterations", label: "Iterations", num: true },
      ...otherMetrics.map((m) => ({ key: `metric:${m}`, label: `Final ${m}`, num: true })),
    ];
    drawSame(same, fold);
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
        h("td", { class: "num", "data-testid": "final-metric" }, formatValue(finalValue(job))),
        keys.map((k) => h("td", { class: diff.has(k) ? "diff" : null, "data-param": k }, paramText(job.params?.[k]))),
        h(
          "td",
          {},
          statusBadge(job.status),
          job.stopped_early ? h("span", { class: "badge badge-stopped", "data-testid": "stopped-early" }, "stopped early") : null,
          job.end_reason ? h("div", { class: "reason", "data-testid": "end-reason" }, job.end_reason) : null,
        ),
        h("td", { class: "num" }, formatNumber(job.iterations_done)),
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

  /** One line for the parameters every run shares, and the switch that unfolds them. */
  function drawSame(same, fold) {
    if (!same.length || state.jobs.length < 2) {
      clear(sameBox);
      return;
    }
    const first = state.jobs[0].params || {};
    const toggle = h("button", {
      type: "button", class: "btn btn-quiet btn-small", id: "cmp-show-same", "aria-pressed": String(!fold),
      onClick: () => {
        state.showSame = !state.showSame;
        drawTable();
      },
    }, fold ? "Show them as columns" : "Fold them");
    clear(
      sameBox,
      h("span", { class: "subtle" }, `Same in every run (${same.length}): `),
      h("span", { class: "mono", "data-testid": "same-params" }, same.map((k) => `${k}=${paramText(first[k])}`).join(", ")),
      " ",
      toggle,
    );
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
    // Every shown run with a value somewhere: one whose final value is missing
    // sits at the metric axis's "missing" place, dotted, not at its bottom.
    const jobs = shownJobs().filter((job) => job.iterations_done > 0 || !isMissing(finalValue(job)));
    const all = paramKeys();
    const diff = differing(all);
    // A parameter every run shares says nothing about the metric: no axis for it.
    const keys = state.jobs.length > 1 ? all.filter((k) => diff.has(k)) : all;
    const dims = keys.map((k) => axisFor(k, jobs.map((job) => job.params?.[k])));
    const finals = jobs.map((job) => finalValue(job));
    dims.push(axisFor(`final ${state.metric}`, finals));
    const lower = lowerIsBetter(state.metric, state.objective);
    const known = finals.filter((v) => !isMissing(v));
    const lo = Math.min(...known);
    const hi = Math.max(...known);
    const traces = jobs.map((job, row) => {
      // 1 for the best run, 0 for the worst (and for a run without a value).
      const v = finals[row];
      const goodness = isMissing(v) ? 0 : hi > lo ? (lower ? (hi - v) / (hi - lo) : (v - lo) / (hi - lo)) : 1;
      const label = `#${job.id} ${jobTitle(job)}`.replace(/[<>&]/g, (ch) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;" })[ch]);
      return {
        type: "scatter", mode: "lines+markers", name: label, showlegend: false,
        x: dims.map((_, i) => i), y: dims.map((d) => d.position(row)),
        customdata: dims.map((d) => `${d.label}: ${d.text(row)}`),
        hovertemplate: `${label}<br>%{customdata}<extra></extra>`,
        line: { color: goodnessColor(goodness), width: 1.5 + 2 * goodness, dash: isMissing(v) ? "dot" : "solid" },
        marker: { size: 6, color: goodnessColor(goodness) },
        meta: { job: job.id, kind: "parallel", values: dims.map((d) => d.raw(row)) },
      };
    });
    // Ticks left of each axis, on the page's background so lines passing
    // behind never cover them; "missing" below the axis, in italics.
    const annotations = [];
    const shapes = [];
    dims.forEach((d, i) => {
      for (const t of d.ticks) {
        annotations.push({
          x: i, y: t.at, text: t.missing ? `<i>${t.text}</i>` : t.text, showarrow: false,
          xanchor: "right", xshift: -6, font: { size: 11, color: t.missing ? c.muted : c.ink },
          bgcolor: c.bg, borderpad: 1,
        });
        shapes.push({ type: "line", x0: i - 0.035, x1: i, y0: t.at, y1: t.at, line: { color: c.muted, width: 1 } });
      }
      if (d.ticks.some((t) => t.missing)) {
        shapes.push({ type: "line", x0: i, x1: i, y0: MISSING_AT + 0.03, y1: -0.04, line: { color: c.grid, width: 1, dash: "dot" } });
      }
    });
    const empty = jobs.length === 0;
    if (empty) {
      annotations.push({ text: `No run has a final ${state.metric} yet`, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 14, color: c.muted } });
    }
    const layout = baseLayout({
      margin: { l: 24, r: 24, t: 16, b: 56 },
      xaxis: themedAxis({
        tickvals: dims.map((_, i) => i), ticktext: dims.map((d) => d.label), showgrid: true,
        gridcolor: c.muted, zeroline: false, range: [-0.5, Math.max(1, dims.length - 1) + 0.15],
        fixedrange: true, visible: !empty, automargin: true, tickfont: { size: 12, color: c.ink },
      }),
      yaxis: themedAxis({ visible: false, range: [MISSING_AT - 0.06, 1.06], fixedrange: true }),
      hovermode: "closest",
      annotations,
      shapes,
    });
    Plotly.react(parcoords, traces, layout, PLOT_CONFIG);
    parcoords.dataset.lines = String(jobs.length);
    const folded = all.length - keys.length;
    parNote.textContent = empty
      ? `No run has a final ${state.metric} yet.`
      : [`${jobs.length} run${jobs.length === 1 ? "" : "s"}, one line each; the stronger the colour and the thicker the line, the better its final ${state.metric} (${lower ? "lower" : "higher"} is better).`,
        folded ? `${folded} parameter${folded === 1 ? "" : "s"} the same in every run ${folded === 1 ? "has" : "have"} no axis.` : "",
        dims.some((d) => d.ticks.some((t) => t.missing)) ? "A run without a value sits at \u201cmissing\u201d below the axis (dotted line if its final value is missing), apart from the real lows." : ""]
        .filter(Boolean).join(" ");
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
