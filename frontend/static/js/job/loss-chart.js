// The job page's loss panel: the loss by iteration (history first, then the
// live stream's points appended with Plotly.extendTraces; the user's zoom
// survives thanks to uirevision), the held-out loss from the job's metrics,
// the predicted curve with its band (prediction.js), a log axis once the
// losses span orders of magnitude, the stream's live dot, and the history's
// downloads.

import { baseLayout, chartColors, PLOT_CONFIG, themedAxis, valueAxis } from "../charts.js";
import { clear, formatLoss, formatNumber, h, notice, TERMINAL } from "../dom.js";
import { evalLoss, evalLossTrace } from "../job-metrics.js";
import { showState } from "../live.js";
import { downloadHistory } from "./downloads.js";
import { BAND_TRACES, bandTraces, createPrediction } from "./prediction.js";

const TRACE = { loss: 0, evalLoss: 4 }; // the band's three sit between (BAND_TRACES)

// Hover labels carry the page's own number format (format.js), not d3's.
const HOVER = "%{customdata}";

// Shown in place of empty axes until the first loss point arrives.
function emptyNote() {
  return [{ text: "No loss points yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 14, color: chartColors().muted } }];
}

/**
 * `section` is the panel to fill; `series` the job's loss points
 * (loss-series.js), which the chart draws as they grow; `current()` the job
 * as the page last heard of it; `say(kind, ...text)` the page's message line.
 */
export function createLossChart(section, { jobId, series, current, say }) {
  let drawn = false;
  let logScale = false;
  let scaleChosen = false; // the user ticked or unticked "Log scale": no more automatic switching
  let showPrediction = true;
  let metrics = null;

  const logToggle = h("input", { type: "checkbox", id: "log-scale" });
  const predToggle = h("input", { type: "checkbox", id: "show-prediction", checked: true });
  const liveDot = h("span", { class: "live-dot", id: "stream-live", "data-state": "off" }, "Not live");
  const chart = h("div", { id: "loss-chart", class: "chart", role: "img", "aria-label": "Loss by iteration, with the validation loss and the predicted curve" });
  const chartNote = h("p", { id: "chart-note", class: "small subtle", "aria-live": "polite" });
  const predictionNote = h("p", { id: "prediction-note", class: "small subtle" });
  const prediction = createPrediction(chart, predictionNote, { jobId, series, current });
  const history = (kind) => downloadHistory(jobId, kind, { current, say });

  logToggle.addEventListener("change", () => {
    scaleChosen = true;
    applyScale(logToggle.checked);
  });
  predToggle.addEventListener("change", () => {
    showPrediction = predToggle.checked;
    Plotly.restyle(chart, { visible: showPrediction }, BAND_TRACES);
  });
  section.setAttribute("aria-labelledby", "chart-title");
  clear(
    section,
    h("div", { class: "page-head" }, h("h2", { id: "chart-title" }, "Loss"), liveDot),
    h(
      "div",
      { class: "chart-tools" },
      h("label", { class: "inline-check", for: "log-scale" }, logToggle, "Log scale"),
      h("label", { class: "inline-check", for: "show-prediction" }, predToggle, "Show prediction"),
      h(
        "div",
        { class: "btn-row" },
        h("button", { type: "button", class: "btn btn-quiet", id: "download-csv", onClick: () => history("csv") }, "Download CSV"),
        h("button", { type: "button", class: "btn btn-quiet", id: "download-json", onClick: () => history("json") }, "Download JSON"),
      ),
    ),
    chart,
    chartNote,
    predictionNote,
  );

  // Plotly's default log ticks label the in-between digits bare ("2", "5"), which
  // reads as 2 and 5 beside 0.1; label 1-2-5 steps in full instead.
  function lossScale() {
    return logScale
      ? { type: "log", dtick: "D2", tickformat: "~g" }
      : { type: "linear", dtick: null, tickformat: "" };
  }

  function applyScale(log) {
    logScale = log;
    logToggle.checked = log;
    if (!drawn) return;
    const scale = lossScale();
    // Only the y axis changes; the x range the user zoomed to stays (uirevision).
    Plotly.relayout(chart, { "yaxis.type": scale.type, "yaxis.dtick": scale.dtick, "yaxis.tickformat": scale.tickformat, "yaxis.autorange": true });
  }

  /** Re-evaluated as points arrive, until the user picks a scale themselves. */
  function autoScale() {
    if (scaleChosen) return;
    const log = series.wantsLog();
    if (log !== logScale) applyScale(log);
  }

  function layout() {
    const empty = series.xs.length === 0 && !evalLoss(metrics);
    return baseLayout({
      annotations: empty ? emptyNote() : [],
      uirevision: `job-${jobId}`,
      margin: { l: 56, r: 16, t: 32, b: 44 },
      xaxis: themedAxis({ title: { text: "Iteration" }, rangemode: "tozero", zeroline: false, automargin: true, visible: !empty, hoverformat: ",d" }),
      yaxis: valueAxis({ title: { text: "Loss" }, ...lossScale(), zeroline: false, automargin: true, visible: !empty }),
      legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
      hovermode: "x unified",
      showlegend: true,
    });
  }

  function traces() {
    const c = chartColors();
    return [
      { x: series.xs.slice(), y: series.ys.slice(), customdata: series.ys.map(formatLoss), hovertemplate: HOVER, type: "scatter", mode: "lines", name: "Loss", line: { color: c.line, width: 2 } },
      ...bandTraces(current(), showPrediction),
      evalLossTrace(metrics),
    ];
  }

  function showAxes() {
    Plotly.relayout(chart, { "xaxis.visible": true, "yaxis.visible": true, annotations: [] });
  }

  return {
    prediction,

    /** The first drawing (with the metrics set before, if any). */
    draw() {
      logScale = series.wantsLog();
      logToggle.checked = logScale;
      Plotly.newPlot(chart, traces(), layout(), PLOT_CONFIG);
      drawn = true;
    },

    /** Light or dark: the colours live in the layout and traces, so redraw them (same uirevision: the zoom stays). */
    retheme() {
      Plotly.react(chart, traces(), layout(), PLOT_CONFIG);
    },

    /** The job's metrics (job-metrics.js): the held-out loss goes on these axes. */
    setMetrics(history) {
      metrics = history;
      if (!drawn) return;
      const val = evalLossTrace(metrics);
      Plotly.restyle(chart, { x: [val.x], y: [val.y], customdata: [val.customdata], mode: [val.mode] }, [TRACE.evalLoss]);
      if (val.x.length) showAxes();
    },

    /** Draw the points past the last one drawn; returns those added (null: none). */
    append(points) {
      const wasEmpty = series.xs.length === 0;
      const added = series.add(points);
      if (!added) return null;
      if (wasEmpty && !evalLoss(metrics)) showAxes();
      if (added.decimated) {
        Plotly.restyle(chart, { x: [series.xs.slice()], y: [series.ys.slice()], customdata: [series.ys.map(formatLoss)] }, [TRACE.loss]);
      } else {
        Plotly.extendTraces(chart, { x: [added.xs], y: [added.ys], customdata: [added.ys.map(formatLoss)] }, [TRACE.loss]);
      }
      autoScale();
      return added;
    },

    /** The line under the chart: how many points, up to where, and why the axis is logarithmic. */
    note() {
      const n = series.xs.length;
      const auto = logScale && !scaleChosen
        ? ` Log scale, as the losses span ${formatNumber(Math.round(series.max / series.min))}× from largest to smallest.`
        : "";
      chartNote.textContent = n
        ? `${formatNumber(n)} points shown, up to iteration ${formatNumber(series.lastIteration)}.${auto}`
        : TERMINAL.has(current().status)
          ? "This job recorded no loss points."
          : "No loss points yet: the chart fills in as soon as the job runs.";
    },

    /** Something went wrong with the points (the message says what). */
    problem(text) {
      chartNote.textContent = text;
    },

    /** The live stream's state ("live", "polling", "off"), or "finished" once the job has ended. */
    showStream(state) {
      if (state === "finished") {
        liveDot.dataset.state = "off";
        liveDot.textContent = "Finished";
      } else showState(liveDot, state);
    },

    unavailable() {
      clear(chart, notice("error", "The chart library did not load."));
    },
  };
}
