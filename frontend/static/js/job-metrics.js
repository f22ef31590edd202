// A job's metrics beyond the training loss (GET /api/v1/jobs/{id}/metrics):
// the held-out loss drawn on the loss chart's axes, the other metrics
// (accuracy, val_accuracy, ...) in a chart of their own.

import { baseLayout, chartColors, PLOT_CONFIG, themedAxis, valueAxis } from "./charts.js";
import { formatLoss } from "./dom.js";

/** Held-out series drawn on the loss chart rather than the metrics chart. */
const ON_LOSS_AXES = new Set(["val_loss", "loss"]);

// A palette that reads on light and dark backgrounds; --chart-eval wins if
// the stylesheet defines it.
const PALETTE = ["#1a7f37", "#8250df", "#cf222e", "#0a7ea4", "#9a6700", "#6e7781"];

function evalColor() {
  const css = getComputedStyle(document.documentElement).getPropertyValue("--chart-eval").trim();
  return css || PALETTE[0];
}

// Markers show where evaluations ran; past this many points they only clutter.
const MARKERS_UP_TO = 60;

function heldOutMode(n) {
  return n <= MARKERS_UP_TO ? "lines+markers" : "lines";
}

/** The column name of a held-out metric: "val_" prefixed unless it has it. */
export function evalColumn(name) {
  return name.startsWith("val_") ? name : `val_${name}`;
}

/** The held-out loss series (iterations, values) of `history`, or null. */
export function evalLoss(history) {
  if (!history) return null;
  for (const name of ON_LOSS_AXES) {
    const s = history.eval[name];
    if (s) return { name: evalColumn(name), xs: s.iterations, ys: s.values };
  }
  return null;
}

/** The validation-loss trace of the loss chart (empty until the first evaluation). */
export function evalLossTrace(history) {
  const s = evalLoss(history) || { xs: [], ys: [] };
  return {
    x: s.xs.slice(),
    y: s.ys.slice(),
    customdata: s.ys.map(formatLoss),
    hovertemplate: "%{customdata}",
    type: "scatter",
    mode: heldOutMode(s.xs.length),
    name: "val_loss",
    legendgroup: "eval",
    line: { color: evalColor(), width: 2 },
    marker: { size: 5, color: evalColor() },
  };
}

/** The series of the metrics chart: per-iteration metrics and held-out ones
 * other than the loss, as [{label, split, xs, ys}], in a stable order. */
export function otherSeries(history) {
  if (!history) return [];
  const out = [];
  for (const [name, s] of Object.entries(history.train).sort()) {
    out.push({ label: name, split: "train", xs: s.iterations, ys: s.values });
  }
  for (const [name, s] of Object.entries(history.eval).sort()) {
    if (ON_LOSS_AXES.has(name)) continue;
    out.push({ label: evalColumn(name), split: "eval", xs: s.iterations, ys: s.values });
  }
  return out;
}

function metricsLayout(empty, note) {
  const c = chartColors();
  return baseLayout({
    annotations: empty
      ? [{ text: note, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 14, color: c.muted } }]
      : [],
    uirevision: "metrics",
    margin: { l: 56, r: 16, t: 32, b: 44 },
    xaxis: themedAxis({ title: { text: "Iteration" }, rangemode: "tozero", zeroline: false, automargin: true, visible: !empty, hoverformat: ",d" }),
    yaxis: valueAxis({ title: { text: "Value" }, zeroline: false, automargin: true, visible: !empty }),
    legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
    hovermode: "x unified",
    showlegend: true,
  });
}

/**
 * Draw (or redraw, keeping the user's zoom) the metrics chart into `el`.
 * A per-iteration metric and its held-out twin (accuracy, val_accuracy)
 * share a colour: solid for training, dashed with markers for held-out.
 */
export function drawMetricsChart(el, history, emptyNote) {
  const series = otherSeries(history);
  const colourOf = new Map();
  const base = (label) => label.replace(/^val_/, "");
  const traces = series.map((s) => {
    const key = base(s.label);
    if (!colourOf.has(key)) colourOf.set(key, PALETTE[(colourOf.size + 1) % PALETTE.length]);
    const color = colourOf.get(key);
    const held = s.split === "eval";
    return {
      x: s.xs.slice(),
      y: s.ys.slice(),
      customdata: s.ys.map(formatLoss),
      hovertemplate: "%{customdata}",
      type: "scatter",
      mode: held ? heldOutMode(s.xs.length) : "lines",
      name: s.label,
      line: { color, width: 2, dash: held ? "dash" : "solid" },
      marker: { size: 5, color },
    };
  });
  Plotly.react(el, traces, metricsLayout(traces.length === 0, emptyNote), PLOT_CONFIG);
  return series;
}
