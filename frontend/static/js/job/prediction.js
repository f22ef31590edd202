// The predicted curve and its band on the loss chart (GET /jobs/{id}/prediction).
// The server cuts the fit at the job's last committed iteration; the live
// stream runs ahead of that within a chunk, so the drawn prediction is cut
// again at the last drawn loss point, here and as points arrive: the band
// starts where the loss line ends, never over iterations already done.

import { api, ApiError } from "../api.js";
import { chartColors } from "../charts.js";
import { formatLoss, formatNumber, TERMINAL } from "../dom.js";

/** Where the band's traces sit in the loss chart: low, high, predicted. */
export const BAND_TRACES = [1, 2, 3];

// Hover labels carry the page's own number format (format.js), not d3's.
const HOVER = "%{customdata}";

/** The band's traces, empty until the prediction is loaded. */
export function bandTraces(job, visible) {
  const c = chartColors();
  // The scheduler predicts the metric it schedules on.
  const name = job && job.quality_metric !== "loss" ? `Predicted ${job.quality_metric}` : "Predicted";
  return [
    { x: [], y: [], type: "scatter", mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false, visible, name: "low" },
    { x: [], y: [], type: "scatter", mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: c.band, hoverinfo: "skip", name: "Prediction band", visible },
    { x: [], y: [], customdata: [], hovertemplate: HOVER, type: "scatter", mode: "lines", name, line: { color: c.predicted, dash: "dash", width: 2 }, visible },
  ];
}

/**
 * `chart` is the loss chart's element (drawn before `load` is called),
 * `note` the line under it; `series` the loss points drawn (loss-series.js);
 * `current()` the job as the page last heard of it.
 */
export function createPrediction(chart, note, { jobId, series, current }) {
  let predicted = []; // the fit's points as the server sent them
  let bandStart = null; // the first predicted iteration drawn (null: none drawn)

  function draw() {
    const job = current();
    const pts = predicted.filter((p) => p.iteration > series.lastIteration);
    bandStart = pts.length ? pts[0].iteration : null;
    if (predicted.length && !pts.length) {
      note.textContent = "The job has run past its last prediction; the next one follows its newest points.";
    } else if (!pts.length) {
      note.textContent = job.quality_metric === "loss"
        ? "The predicted curve appears once the job has a few loss points."
        : `The predicted ${job.quality_metric} curve appears once the job has a few evaluations.`;
    } else {
      const last = pts[pts.length - 1];
      note.textContent = `Predicted ${job.quality_metric} at iteration ${formatNumber(last.iteration)}: ${formatLoss(last.loss)} (band ${formatLoss(last.low)} – ${formatLoss(last.high)}).`;
    }
    const xs = pts.map((p) => p.iteration);
    const customdata = pts.map((p) => `${formatLoss(p.loss)} (band ${formatLoss(p.low)} – ${formatLoss(p.high)})`);
    Plotly.restyle(
      chart,
      { x: [xs, xs, xs], y: [pts.map((p) => p.low), pts.map((p) => p.high), pts.map((p) => p.loss)], customdata: [[], [], customdata] },
      BAND_TRACES,
    );
  }

  return {
    /** Ask the server for the job's prediction and draw it (nothing for a finished job). */
    async load() {
      const job = current();
      if (TERMINAL.has(job.status)) {
        note.textContent = "The job has ended, so there is nothing left to predict.";
        predicted = [];
        bandStart = null;
        Plotly.restyle(chart, { x: [[], [], []], y: [[], [], []] }, BAND_TRACES);
        return;
      }
      let prediction;
      try {
        prediction = await api(`/api/v1/jobs/${jobId}/prediction`);
      } catch (err) {
        note.textContent =
          err instanceof ApiError && err.status === 404
            ? "No prediction is available for this job."
            : `The prediction could not be loaded (${err.message}).`;
        return;
      }
      predicted = prediction.points || [];
      draw();
    },
    /** New loss points arrived: cut the band again where the loss line now ends. */
    follow() {
      if (bandStart !== null && bandStart <= series.lastIteration) draw();
    },
  };
}
