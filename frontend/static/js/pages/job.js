// Job page: a live loss chart (history, then SSE points appended with
// Plotly.extendTraces; the user's zoom survives thanks to uirevision; a log
// axis once the losses span orders of magnitude), the predicted curve with
// its band, a running-vs-waiting timeline, the scheduler's reason, controls,
// downloads (loss history, the trained model) and the job's error. Metrics
// beyond the loss (job-metrics.js): the held-out loss on the loss chart, the
// others in a chart beside it, refreshed on the job's events like the rest.

import { api, ApiError, fetchFile } from "../api.js";
import {
  baseLayout,
  chartColors,
  onThemeChange,
  PLOT_CONFIG,
  themedAxis,
  timeAxis,
  valueAxis,
} from "../charts.js";
import {
  $,
  clear,
  download,
  formatClock,
  formatDuration,
  formatLoss,
  formatNumber,
  formatTime,
  h,
  jobTitle,
  notice,
  parseTime,
  progressBar,
  statusBadge,
  TERMINAL,
  throttle,
} from "../dom.js";
import { drawMetricsChart, evalLoss, evalLossTrace } from "../job-metrics.js";
import { labelsPanel } from "../labels.js";
import { startPage } from "../layout.js";
import { showState, subscribe } from "../live.js";
import { datasetLabel, loadUploads, uploadId } from "../uploads.js";

const JOB_ID = Number(window.location.pathname.split("/").filter(Boolean)[1]);
const HISTORY_POINTS = 2000;
const MAX_CHART_POINTS = 20000;
const DOWNLOAD_POINTS = 100000;
const POLL_MS = 10000;
const EXPLAIN_RETRY_MS = 1500;
const EXPLAIN_RETRIES = 3;

const state = {
  job: null,
  xs: [],
  ys: [],
  lastIteration: 0,
  stream: null,
  events: null,
  chartReady: false,
  logScale: false,
  scaleChosen: false, // the user ticked or unticked "Log scale": no more automatic switching
  lossMin: Infinity,
  lossMax: -Infinity,
  allPositive: true,
  showPrediction: true,
  decisions: [],
  metrics: null,
  committed: 0, // iterations_done as the server last said (the stream runs ahead of it)
  askedAt: 0, // when that answer was asked for (performance.now())
  streamedAt: -1, // when the last new loss point arrived
  fetching: false, // a GET of the job is in flight
  refetch: false, // something changed while it was: fetch again when it lands
  predicted: [], // the fit's points as the server sent them
  bandStart: null, // the first predicted iteration drawn (null: none drawn)
};

const TRACE = { loss: 0, low: 1, high: 2, predicted: 3, evalLoss: 4 };

// ---- rendering the page frame ----

function skeleton(root) {
  const logToggle = h("input", { type: "checkbox", id: "log-scale" });
  const predToggle = h("input", { type: "checkbox", id: "show-prediction", checked: true });
  logToggle.addEventListener("change", () => {
    state.scaleChosen = true;
    applyScale(logToggle.checked);
  });
  predToggle.addEventListener("change", () => {
    state.showPrediction = predToggle.checked;
    Plotly.restyle("loss-chart", { visible: state.showPrediction }, [
      TRACE.low,
      TRACE.high,
      TRACE.predicted,
    ]);
  });
  clear(
    root,
    h(
      "div",
      { class: "page-head" },
      h("h1", { id: "job-title" }),
      h(
        "div",
        { class: "btn-row", role: "group", "aria-label": "Job controls" },
        h("button", { type: "button", class: "btn", id: "btn-pause", onClick: () => control("pause") }, "Pause"),
        h("button", { type: "button", class: "btn", id: "btn-resume", onClick: () => control("resume") }, "Resume"),
        h("button", { type: "button", class: "btn btn-danger", id: "btn-cancel", onClick: () => control("cancel") }, "Cancel"),
        h("a", { class: "btn", href: `/submit?clone=${JOB_ID}`, id: "btn-clone" }, "Clone"),
        h("button", { type: "button", class: "btn", id: "btn-model", onClick: downloadModel }, "Download model"),
        h("button", { type: "button", class: "btn", id: "btn-continue", onClick: openContinue }, "Continue training"),
      ),
    ),
    continueForm(),
    h("div", { id: "control-message", "aria-live": "polite" }),
    h("div", { id: "job-outcome" }),
    h("div", { id: "job-labels" }),
    h("div", { id: "scheduler-reason" }),
    h("section", { class: "panel", "aria-labelledby": "stats-title" },
      h("h2", { id: "stats-title", class: "visually-hidden" }, "Progress"),
      h("dl", { class: "stats", id: "job-stats" })),
    h(
      "div",
      { class: "grid-2" },
      h(
        "section",
        { class: "panel", "aria-labelledby": "chart-title" },
        h(
          "div",
          { class: "page-head" },
          h("h2", { id: "chart-title" }, "Loss"),
          h("span", { class: "live-dot", id: "stream-live", "data-state": "off" }, "Not live"),
        ),
        h(
          "div",
          { class: "chart-tools" },
          h("label", { class: "inline-check", for: "log-scale" }, logToggle, "Log scale"),
          h("label", { class: "inline-check", for: "show-prediction" }, predToggle, "Show prediction"),
          h(
            "div",
            { class: "btn-row" },
            h("button", { type: "button", class: "btn btn-quiet", id: "download-csv", onClick: () => downloadHistory("csv") }, "Download CSV"),
            h("button", { type: "button", class: "btn btn-quiet", id: "download-json", onClick: () => downloadHistory("json") }, "Download JSON"),
          ),
        ),
        h("div", { id: "loss-chart", class: "chart", role: "img", "aria-label": "Loss by iteration, with the validation loss and the predicted curve" }),
        h("p", { id: "chart-note", class: "small subtle", "aria-live": "polite" }),
        h("p", { id: "prediction-note", class: "small subtle" }),
      ),
      h(
        "section",
        { class: "panel", "aria-labelledby": "metrics-title" },
        h("div", { class: "page-head" }, h("h2", { id: "metrics-title" }, "Other metrics")),
        h("div", { id: "metrics-chart", class: "chart", role: "img", "aria-label": "Training and validation metrics other than the loss, by iteration" }),
        h("p", { id: "metrics-note", class: "small subtle", "aria-live": "polite" }),
      ),
    ),
    h(
      "section",
      { class: "panel", id: "sample-panel", "aria-labelledby": "sample-title", hidden: true },
      h("h2", { id: "sample-title" }, "Generated text"),
      h("p", { class: "small subtle", id: "sample-note" }),
      h("pre", { class: "mono sample-text", id: "sample-text", "data-testid": "text-sample" }),
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "timeline-title" },
      h("h2", { id: "timeline-title" }, "Running and waiting"),
      h("div", { id: "timeline-chart", class: "chart-small", role: "img", "aria-label": "When the job ran and when it waited" }),
      h("p", { class: "small subtle", id: "timeline-note" }),
    ),
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "panel", "aria-labelledby": "spec-title" },
        h("h2", { id: "spec-title" }, "Specification"), h("dl", { class: "kv", id: "job-spec" }),
        h("div", { id: "trainer-output-box" })),
      h("section", { class: "panel", "aria-labelledby": "decisions-title" },
        h("h2", { id: "decisions-title" }, "Scheduler decisions"), h("div", { id: "job-decisions" })),
    ),
  );
}

/**
 * The status to show. Every chunk ends with the job "queued" until the
 * scheduler grants the next one, and the loss stream runs ahead of the
 * server's record within a chunk: points past the iteration the server last
 * reported mean a chunk is in flight, so the job is running, whatever the
 * last fetch said. Only points that arrived after that fetch was asked for
 * count: a lost chunk's points stay past the record while the job waits.
 */
function shownStatus() {
  const job = state.job;
  const inFlight = state.lastIteration > state.committed && state.streamedAt > state.askedAt;
  return job.status === "queued" && inFlight ? "running" : job.status;
}

function renderStatus() {
  const job = state.job;
  const status = shownStatus();
  clear($("#job-title"), jobTitle(job), " ", statusBadge(status));
  $("#job-title").dataset.status = status;
}

/** A fresh copy of the job from the server, remembered as committed progress. */
function takeJob(job, askedAt) {
  state.job = job;
  state.committed = job.iterations_done;
  state.askedAt = askedAt;
}

// The server's words for a running job (backend/services/job_explanation.py).
const RUNNING_SUMMARY = "Running: it holds a slot for its current chunk of iterations.";

function renderJob() {
  const job = state.job;
  document.title = `${jobTitle(job)} · SLAQ portal`;
  renderStatus();
  $("#btn-pause").disabled = !["queued", "running"].includes(job.status);
  $("#btn-resume").disabled = job.status !== "paused";
  $("#btn-cancel").disabled = TERMINAL.has(job.status);
  const continuable = CONTINUABLE.has(job.status);
  $("#btn-continue").disabled = !continuable;
  $("#btn-continue").title = continuable
    ? "Train on from its last checkpoint with more iterations or another stopping rule"
    : job.status === "failed"
      ? "A failed job would fail the same way from its checkpoint: clone it instead"
      : "Only a finished job (completed or cancelled) can be continued";
  if (!continuable) $("#continue-form").hidden = true;
  const model = $("#btn-model");
  model.disabled = job.iterations_done === 0;
  // The file's format is the trainer's (numpy .npz, PyTorch .pt, or a
  // plugin's own bytes): the download says which, with how to load it.
  model.title = job.iterations_done === 0
    ? "No model yet: the job has not run"
    : TERMINAL.has(job.status)
      ? "The trained model's checkpoint, in its trainer's format"
      : "The model as trained so far, in its trainer's format";

  renderLabels();
  const outcome = $("#job-outcome");
  if (job.status === "failed") {
    clear(
      outcome,
      notice(
        "error",
        h("strong", {}, "The job failed. "),
        h("span", { "data-testid": "job-error" }, job.end_reason || "no reason recorded"),
        job.error && job.error !== job.end_reason ? h("pre", { class: "mono small" }, job.error) : null,
      ),
    );
  } else if (job.status === "completed" || job.status === "cancelled") {
    clear(outcome, notice(job.status === "completed" ? "success" : "info",
      h("strong", {}, job.status === "completed" ? "Finished: " : "Stopped: "),
      job.end_reason || job.status, ". The loss history is kept."));
  } else {
    clear(outcome);
  }

  renderSample(job);

  // Uploaded trainer code's own prints: where its author looks first when
  // the job fails (shown open then) or behaves oddly.
  const printed = job.trainer_output || "";
  const box = $("#trainer-output-box");
  if (!printed) clear(box);
  else if (!$("#trainer-output") || $("#trainer-output").textContent !== printed) {
    clear(box, h("details", { open: job.status === "failed" },
      h("summary", {}, "Trainer output (last chunk)"),
      h("pre", { class: "mono small", id: "trainer-output" }, printed)));
  }

  // One plain summary from the server (what it waits for, its place, roughly
  // when); the scheduler's technical reason only on demand. A finished job's
  // ending is told by the outcome box above, never by its last rank.
  const reasonBox = $("#scheduler-reason");
  const explanation = job.explanation;
  if (job.status !== "queued" || (explanation && explanation.position !== null)) state.explainRetries = 0;
  else if (!state.explainTimer && (state.explainRetries || 0) < EXPLAIN_RETRIES) {
    // Just queued: the scheduler places it within a second or so; ask again
    // then, as no event says when it has (a few times: far back in a huge
    // queue it may stay unplaced, and the slow poll covers that).
    state.explainRetries = (state.explainRetries || 0) + 1;
    state.explainTimer = setTimeout(() => {
      state.explainTimer = null;
      if (state.job.status === "queued") refreshJob();
    }, EXPLAIN_RETRY_MS);
  }
  if (explanation && !TERMINAL.has(job.status)) {
    const summary = shownStatus() !== job.status ? RUNNING_SUMMARY : explanation.summary;
    clear(reasonBox, h(
      "div",
      { class: "notice notice-info" },
      h("span", { "data-testid": "scheduler-reason" }, summary),
      explanation.detail
        ? h("details", { class: "why", "data-testid": "reason-detail" },
          h("summary", {}, "Why?"),
          h("p", { class: "small mono" }, explanation.detail))
        : null,
    ));
  } else clear(reasonBox);

  const stat = (label, value, testid, cls) =>
    h("div", { class: cls }, h("dt", {}, label), h("dd", testid ? { "data-testid": testid } : {}, value));
  clear(
    $("#job-stats"),
    stat("Progress", progressBar(job), null, "wide"),
    stat("Iterations", formatNumber(job.iterations_done), "iterations"),
    stat("Current loss", formatLoss(job.current_loss), "current-loss"),
    stat("Best loss", formatLoss(job.best_loss), "best-loss"),
    stat("First loss", formatLoss(job.initial_loss)),
    stat("Training time", formatDuration(job.elapsed_seconds)),
    stat("Chunks run", formatNumber(job.chunks_run)),
    stat("Worker pool", job.pool || "—", "pool"),
    // A finished job's last grant predicted a gain it no longer has ahead of it.
    stat("Predicted gain", job.predicted_gain === null || TERMINAL.has(job.status) ? "—" : formatLoss(job.predicted_gain)),
    stat("Scheduled on", job.quality_metric, "quality-metric"),
    ...lastEvalStats(job, stat),
  );

  const kv = [];
  const add = (k, v) => kv.push(h("dt", {}, k), h("dd", {}, v));
  add("Job", `#${job.id}`);
  add("Algorithm", job.algorithm);
  add("Dataset", uploadId(job.dataset) === null
    ? job.dataset
    : [h("a", { href: "/datasets" }, datasetLabel(job.dataset)), " ", h("span", { class: "subtle mono small" }, `(${job.dataset})`)]);
  add("Parameters", paramText(job.params));
  if (Object.keys(job.dataset_params || {}).length) add("Dataset parameters", paramText(job.dataset_params));
  add("Seed", String(job.seed));
  add("Evaluation", job.eval_every > 0
    ? `on the held-out split every ${formatNumber(job.eval_every)} iterations`
    : "off (eval_every 0)");
  add("Quality metric", job.quality_metric === "val_loss"
    ? "val_loss: the scheduler and the loss target follow the held-out loss"
    : "loss: the scheduler and the loss target follow the training loss");
  const s = job.stopping;
  add(
    "Stopping",
    [
      `at most ${formatNumber(s.max_iterations)} iterations`,
      s.target_loss !== null ? `${job.quality_metric} ≤ ${formatLoss(s.target_loss)}` : null,
      s.tolerance !== null ? `relative change < ${formatLoss(s.tolerance)} over ${formatNumber(s.window)} iterations` : "no convergence test",
    ].filter(Boolean).join("; "),
  );
  add("Submitted", formatTime(job.created_at));
  add("Started", formatTime(job.started_at));
  add("Finished", formatTime(job.finished_at));
  clear($("#job-spec"), kv);
}

/**
 * The text a language model generated at its latest evaluation. Set as
 * textContent: whatever the model writes (markup included) shows as the
 * characters it is, never as HTML.
 */
function renderSample(job) {
  const panel = $("#sample-panel");
  const text = job.text_sample;
  panel.hidden = text === null || text === undefined;
  if (panel.hidden) return;
  $("#sample-note").textContent = `Sampled from the model at its evaluation at iteration ${formatNumber(job.text_sample_iteration)}: `
    + "the start of its text, continued one character at a time. A new sample comes with every evaluation.";
  const pre = $("#sample-text");
  if (pre.textContent !== text) pre.textContent = text;
}

// The latest evaluation's values (val_loss first), or a word on why there are none.
function lastEvalStats(job, stat) {
  const entries = Object.entries(job.last_eval || {})
    .sort(([a], [b]) => (a === "val_loss" ? -1 : b === "val_loss" ? 1 : a.localeCompare(b)));
  if (!entries.length) {
    return [stat("Last evaluation", job.eval_every > 0 ? "none yet" : "off", "last-eval")];
  }
  const at = job.last_eval_iteration === null ? "—" : `iteration ${formatNumber(job.last_eval_iteration)}`;
  return [
    stat("Last evaluation", at, "last-eval"),
    ...entries.map(([name, value]) => stat(name, formatLoss(value), `last-eval-${name}`)),
  ];
}

function paramText(params) {
  const entries = Object.entries(params || {});
  if (!entries.length) return "defaults";
  return h("span", { class: "mono" }, entries.map(([k, v]) => `${k}=${v}`).join(", "));
}

// ---- the loss chart ----

// Shown in place of empty axes until the first loss point arrives.
function emptyNote() {
  return [{ text: "No loss points yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { size: 14, color: chartColors().muted } }];
}

// Plotly's default log ticks label the in-between digits bare ("2", "5"), which
// reads as 2 and 5 beside 0.1; label 1-2-5 steps in full instead.
function lossScale() {
  return state.logScale
    ? { type: "log", dtick: "D2", tickformat: "~g" }
    : { type: "linear", dtick: null, tickformat: "" };
}

const LOG_RATIO = 50; // max/min beyond which a log axis reads better
const LOG_MIN_POINTS = 5;

function trackRange(ys) {
  for (const y of ys) {
    if (!Number.isFinite(y)) continue;
    if (y <= 0) state.allPositive = false;
    if (y < state.lossMin) state.lossMin = y;
    if (y > state.lossMax) state.lossMax = y;
  }
}

/** Log when every loss is positive and they span more than LOG_RATIO. */
function wantsLog() {
  return state.allPositive && state.xs.length >= LOG_MIN_POINTS && state.lossMin > 0
    && state.lossMax / state.lossMin > LOG_RATIO;
}

function applyScale(log) {
  state.logScale = log;
  $("#log-scale").checked = log;
  if (!state.chartReady) return;
  const scale = lossScale();
  // Only the y axis changes; the x range the user zoomed to stays (uirevision).
  Plotly.relayout("loss-chart", { "yaxis.type": scale.type, "yaxis.dtick": scale.dtick, "yaxis.tickformat": scale.tickformat, "yaxis.autorange": true });
}

/** Re-evaluated as points arrive, until the user picks a scale themselves. */
function autoScale() {
  if (state.scaleChosen) return;
  const log = wantsLog();
  if (log !== state.logScale) applyScale(log);
}

function chartLayout() {
  const empty = state.xs.length === 0 && !evalLoss(state.metrics);
  return baseLayout({
    annotations: empty ? emptyNote() : [],
    uirevision: `job-${JOB_ID}`,
    margin: { l: 56, r: 16, t: 32, b: 44 },
    xaxis: themedAxis({ title: { text: "Iteration" }, rangemode: "tozero", zeroline: false, automargin: true, visible: !empty, hoverformat: ",d" }),
    yaxis: valueAxis({ title: { text: "Loss" }, ...lossScale(), zeroline: false, automargin: true, visible: !empty }),
    legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
    hovermode: "x unified",
    showlegend: true,
  });
}

// Hover labels carry the page's own number format (format.js), not d3's.
const HOVER = "%{customdata}";

function lossTraces() {
  const c = chartColors();
  const visible = state.showPrediction;
  return [
    { x: state.xs.slice(), y: state.ys.slice(), customdata: state.ys.map(formatLoss), hovertemplate: HOVER, type: "scatter", mode: "lines", name: "Loss", line: { color: c.line, width: 2 } },
    { x: [], y: [], type: "scatter", mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false, visible, name: "low" },
    { x: [], y: [], type: "scatter", mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: c.band, hoverinfo: "skip", name: "Prediction band", visible },
    { x: [], y: [], customdata: [], hovertemplate: HOVER, type: "scatter", mode: "lines", name: predictedName(), line: { color: c.predicted, dash: "dash", width: 2 }, visible },
    evalLossTrace(state.metrics),
  ];
}

// The scheduler predicts the metric it schedules on.
function predictedName() {
  return state.job && state.job.quality_metric !== "loss" ? `Predicted ${state.job.quality_metric}` : "Predicted";
}

function drawChart() {
  trackRange(state.ys);
  state.logScale = wantsLog();
  $("#log-scale").checked = state.logScale;
  Plotly.newPlot("loss-chart", lossTraces(), chartLayout(), PLOT_CONFIG);
  state.chartReady = true;
}

// Light or dark: the colours live in the layout and traces, so redraw them
// (the user's zoom survives: same uirevision).
function rethemeCharts() {
  if (!state.chartReady) return;
  Plotly.react("loss-chart", lossTraces(), chartLayout(), PLOT_CONFIG);
  loadPrediction();
  drawTimeline();
  drawMetrics();
}

// ---- metrics beyond the loss ----

const refreshMetrics = throttle(loadMetrics, 2000);

async function loadMetrics() {
  try {
    state.metrics = await api(`/api/v1/jobs/${JOB_ID}/metrics?max_points=${HISTORY_POINTS}`);
  } catch (err) {
    $("#metrics-note").textContent = `The metrics could not be loaded (${err.message}).`;
    return;
  }
  if (!state.chartReady) return;
  const val = evalLossTrace(state.metrics);
  Plotly.restyle("loss-chart", { x: [val.x], y: [val.y], customdata: [val.customdata], mode: [val.mode] }, [TRACE.evalLoss]);
  if (val.x.length) {
    Plotly.relayout("loss-chart", { "xaxis.visible": true, "yaxis.visible": true, annotations: [] });
  }
  drawMetrics();
}

function drawMetrics() {
  if (!state.chartReady || !state.metrics) return;
  const job = state.job;
  const waiting = job.eval_every > 0
    ? `No other metrics yet: held-out metrics every ${formatNumber(job.eval_every)} iterations`
    : "This job records no other metrics";
  // The chart says it briefly (a phone-wide chart cuts long text); the note
  // below says when to expect them.
  const series = drawMetricsChart("metrics-chart", state.metrics,
    job.eval_every > 0 ? "No other metrics yet" : "No other metrics");
  const evals = state.metrics.eval.val_loss || state.metrics.eval.loss;
  const parts = [];
  if (series.length) parts.push(`${series.map((s) => s.label).join(", ")} by iteration; held-out metrics dashed.`);
  else parts.push(`${waiting}.`);
  if (evals) parts.push(`val_loss: ${formatNumber(evals.total_points)} evaluations, drawn on the loss chart.`);
  $("#metrics-note").textContent = parts.join(" ");
}

function chartNote() {
  const n = state.xs.length;
  const auto = state.logScale && !state.scaleChosen
    ? ` Log scale, as the losses span ${formatNumber(Math.round(state.lossMax / state.lossMin))}× from largest to smallest.`
    : "";
  const note = n
    ? `${formatNumber(n)} points shown, up to iteration ${formatNumber(state.lastIteration)}.${auto}`
    : TERMINAL.has(state.job.status)
      ? "This job recorded no loss points."
      : "No loss points yet: the chart fills in as soon as the job runs.";
  $("#chart-note").textContent = note;
}

function appendPoints(points) {
  const fresh = points.filter(([iteration]) => iteration > state.lastIteration);
  if (!fresh.length) return;
  state.streamedAt = performance.now();
  const xs = fresh.map((p) => p[0]);
  const ys = fresh.map((p) => p[1]);
  if (state.xs.length === 0 && !evalLoss(state.metrics)) {
    Plotly.relayout("loss-chart", { "xaxis.visible": true, "yaxis.visible": true, annotations: [] });
  }
  state.xs.push(...xs);
  state.ys.push(...ys);
  state.lastIteration = xs[xs.length - 1];
  trackRange(ys);
  if (state.xs.length > MAX_CHART_POINTS) {
    decimate();
    Plotly.restyle("loss-chart", { x: [state.xs.slice()], y: [state.ys.slice()], customdata: [state.ys.map(formatLoss)] }, [TRACE.loss]);
  } else {
    Plotly.extendTraces("loss-chart", { x: [xs], y: [ys], customdata: [ys.map(formatLoss)] }, [TRACE.loss]);
  }
  autoScale();
  chartNote();
  liveStats(fresh[fresh.length - 1]);
  if (state.bandStart !== null && state.bandStart <= state.lastIteration) drawPrediction();
  refreshPrediction();
}

// Halve the stored points, keeping each pair's lower loss (the curve's shape
// and its best values survive); the newest point is always kept.
function decimate() {
  const xs = [];
  const ys = [];
  const n = state.xs.length - 1;
  for (let i = 0; i < n; i += 2) {
    const j = i + 1 < n && state.ys[i + 1] < state.ys[i] ? i + 1 : i;
    xs.push(state.xs[j]);
    ys.push(state.ys[j]);
  }
  xs.push(state.xs[n]);
  ys.push(state.ys[n]);
  state.xs = xs;
  state.ys = ys;
}

// Between job refreshes, keep the headline numbers in step with the stream.
function liveStats([iteration, loss]) {
  const job = state.job;
  if (!job || iteration <= job.iterations_done) return;
  job.iterations_done = iteration;
  job.current_loss = loss;
  job.best_loss = job.best_loss === null ? loss : Math.min(job.best_loss, loss);
  job.progress = Math.min(iteration / job.stopping.max_iterations, 1);
  $("[data-testid=iterations]").textContent = formatNumber(iteration);
  $("[data-testid=current-loss]").textContent = formatLoss(loss);
  $("[data-testid=best-loss]").textContent = formatLoss(job.best_loss);
  const bar = $("#job-stats .progress");
  if (bar) bar.replaceWith(progressBar(job));
  if ($("#job-title").dataset.status !== shownStatus()) renderJob();
}

const refreshPrediction = throttle(loadPrediction, 4000);

async function loadPrediction() {
  const note = $("#prediction-note");
  if (TERMINAL.has(state.job.status)) {
    note.textContent = "The job has ended, so there is nothing left to predict.";
    state.predicted = [];
    state.bandStart = null;
    Plotly.restyle("loss-chart", { x: [[], [], []], y: [[], [], []] }, [TRACE.low, TRACE.high, TRACE.predicted]);
    return;
  }
  let prediction;
  try {
    prediction = await api(`/api/v1/jobs/${JOB_ID}/prediction`);
  } catch (err) {
    note.textContent =
      err instanceof ApiError && err.status === 404
        ? "No prediction is available for this job."
        : `The prediction could not be loaded (${err.message}).`;
    return;
  }
  state.predicted = prediction.points || [];
  drawPrediction();
}

// The server cuts the fit at the job's last committed iteration; the live
// stream runs ahead of that within a chunk, so the drawn prediction is cut
// again at the last drawn loss point, here and as points arrive: the band
// starts where the loss line ends, never over iterations already done.
function drawPrediction() {
  const note = $("#prediction-note");
  const fitted = state.predicted;
  const pts = fitted.filter((p) => p.iteration > state.lastIteration);
  state.bandStart = pts.length ? pts[0].iteration : null;
  if (fitted.length && !pts.length) {
    note.textContent = "The job has run past its last prediction; the next one follows its newest points.";
  } else if (!pts.length) {
    note.textContent = state.job.quality_metric === "loss"
      ? "The predicted curve appears once the job has a few loss points."
      : `The predicted ${state.job.quality_metric} curve appears once the job has a few evaluations.`;
  } else {
    const last = pts[pts.length - 1];
    note.textContent = `Predicted ${state.job.quality_metric} at iteration ${formatNumber(last.iteration)}: ${formatLoss(last.loss)} (band ${formatLoss(last.low)} – ${formatLoss(last.high)}).`;
  }
  const xs = pts.map((p) => p.iteration);
  const customdata = pts.map((p) => `${formatLoss(p.loss)} (band ${formatLoss(p.low)} – ${formatLoss(p.high)})`);
  Plotly.restyle(
    "loss-chart",
    { x: [xs, xs, xs], y: [pts.map((p) => p.low), pts.map((p) => p.high), pts.map((p) => p.loss)], customdata: [[], [], customdata] },
    [TRACE.low, TRACE.high, TRACE.predicted],
  );
}

async function loadHistory() {
  const history = await api(`/api/v1/jobs/${JOB_ID}/losses?max_points=${HISTORY_POINTS}`);
  state.xs = history.iterations.slice();
  state.ys = history.losses.slice();
  state.lastIteration = state.xs.length ? state.xs[state.xs.length - 1] : 0;
}

function openStream() {
  if (state.stream || TERMINAL.has(state.job.status)) return;
  state.stream = subscribe(
    () => `/api/v1/jobs/${JOB_ID}/stream?after_iteration=${state.lastIteration}`,
    { points: (data) => appendPoints(data.points || []) },
    (s) => showState($("#stream-live"), s),
  );
}

function closeStream() {
  if (!state.stream) return;
  state.stream.close();
  state.stream = null;
  const el = $("#stream-live");
  el.dataset.state = "off";
  el.textContent = "Finished";
}

// ---- running vs waiting ----

const refreshDecisions = throttle(loadDecisions, 3000);

async function loadDecisions() {
  try {
    state.decisions = await api(`/api/v1/jobs/${JOB_ID}/decisions?limit=500`);
  } catch (err) {
    clear($("#job-decisions"), notice("error", `Could not load decisions: ${err.message}`));
    return;
  }
  renderDecisions();
  drawTimeline();
}

function renderDecisions() {
  const list = state.decisions.slice(0, 10);
  if (!list.length) {
    clear($("#job-decisions"), h("p", { class: "subtle" }, "No slot granted yet."));
    return;
  }
  clear(
    $("#job-decisions"),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "cards" },
        h("caption", { class: "visually-hidden" }, "Most recent grants first"),
        h("thead", {}, h("tr", {}, ["When", "Chunk", "Iterations", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
        h(
          "tbody",
          {},
          list.map((d) =>
            h(
              "tr",
              {},
              h("td", { class: "nowrap", "data-label": "When" }, formatClock(d.created_at)),
              h("td", { class: "num", "data-label": "Chunk" }, String(d.chunk_seq)),
              h("td", { class: "num", "data-label": "Iterations" }, formatNumber(d.iterations)),
              h("td", { class: "reason", "data-label": "Reason", title: `policy ${d.policy}` }, d.reason),
            ),
          ),
        ),
      ),
    ),
    state.decisions.length > list.length
      ? h("p", { class: "small subtle" }, `${list.length} of ${state.decisions.length} shown.`)
      : null,
  );
}

/**
 * Shade when the job ran (a grant's start plus its iterations at the job's
 * measured seconds per iteration, cut at the next grant) against the span
 * it existed; the rest is waiting (or paused). Approximate by design.
 */
function drawTimeline() {
  const job = state.job;
  const start = parseTime(job.created_at).getTime();
  const end = job.finished_at ? parseTime(job.finished_at).getTime() : Date.now();
  const perIteration = job.iterations_done > 0 ? job.elapsed_seconds / job.iterations_done : 0.001;
  const grants = state.decisions
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
    uirevision: `timeline-${JOB_ID}`,
    margin: { l: 16, r: 16, t: 28, b: 32 },
    xaxis: timeAxis({ range: [new Date(start), new Date(end)], automargin: true, nticks: window.innerWidth < 600 ? 3 : 8, tickangle: 0 }),
    yaxis: { visible: false, range: [0, 1], fixedrange: true },
    shapes,
    legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
  });
  Plotly.react("timeline-chart", traces, layout, PLOT_CONFIG);
  const total = Math.max(end - start, 1);
  $("#timeline-note").textContent = grants.length
    ? `Approximate: ran about ${Math.round((100 * ran) / total)}% of the ${formatDuration(total / 1000)} since submission, over ${grants.length} grant${grants.length === 1 ? "" : "s"}${state.decisions.length >= 500 ? " (latest 500 shown)" : ""}.`
    : "Not granted a slot yet: the job has been waiting since it was submitted.";
}

// ---- controls, downloads, refreshes ----

/** The labels panel; redrawn only when the labels or finishedness change, so an open form stays open. */
function renderLabels() {
  const job = state.job;
  const key = JSON.stringify([job.name, job.tags, job.note, TERMINAL.has(job.status)]);
  if (state.labelsKey === key) return;
  state.labelsKey = key;
  clear($("#job-labels"), labelsPanel({
    run: job,
    kind: "job",
    finished: TERMINAL.has(job.status),
    onSaved: (changed) => {
      takeJob(changed, performance.now());
      renderJob();
    },
    afterDelete: () => window.location.assign(`/jobs?deleted=${job.id}`),
  }));
}

// ---- continuing a finished job (POST /api/v1/jobs/{id}/continue) ----

const CONTINUABLE = new Set(["completed", "cancelled"]);

function continueForm() {
  const field = (id, label, input, help) => h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    input,
    help ? h("span", { class: "small subtle", id: `${id}-help` }, help) : null,
  );
  const form = h(
    "form",
    { id: "continue-form", class: "panel stack", hidden: true, "aria-labelledby": "continue-title" },
    h("h2", { id: "continue-title" }, "Continue training"),
    h("p", { class: "small subtle" },
      "The job trains on from its last checkpoint, its loss history kept; it is queued again and counts against your team's quotas like a new job."),
    h(
      "div",
      { class: "grid-3" },
      field("continue-max", "Max iterations",
        h("input", { id: "continue-max", name: "max_iterations", type: "number", min: "1", step: "1", required: true, "aria-describedby": "continue-max-help" }),
        "More than the iterations it has done (the server says why if not)"),
      field("continue-target", "Target",
        h("input", { id: "continue-target", name: "target_loss", inputmode: "decimal", placeholder: "none", "aria-describedby": "continue-target-help" }),
        "Empty: no target"),
      field("continue-tolerance", "Convergence tolerance",
        h("input", { id: "continue-tolerance", name: "tolerance", inputmode: "decimal", placeholder: "off", "aria-describedby": "continue-tolerance-help" }),
        "Empty: no convergence test"),
    ),
    h(
      "div",
      { class: "btn-row" },
      h("button", { type: "submit", class: "btn btn-primary", id: "continue-submit" }, "Continue"),
      h("button", { type: "button", class: "btn", id: "continue-close", onClick: () => { $("#continue-form").hidden = true; } }, "Close"),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    submitContinue();
  });
  return form;
}

/** The form, filled from the job: twice the iterations it has done, its target and tolerance. */
function openContinue() {
  const job = state.job;
  const s = job.stopping;
  $("#continue-max").value = String(Math.max(s.max_iterations, job.iterations_done) * 2);
  $("#continue-target").value = s.target_loss === null ? "" : String(s.target_loss);
  $("#continue-tolerance").value = s.tolerance === null ? "" : String(s.tolerance);
  $("#continue-form").hidden = false;
  $("#continue-max").focus();
}

function optionalNumber(text) {
  const t = text.trim();
  return t === "" ? null : Number(t);
}

async function submitContinue() {
  const message = $("#control-message");
  const button = $("#continue-submit");
  const body = {
    max_iterations: Number($("#continue-max").value),
    target_loss: optionalNumber($("#continue-target").value),
    tolerance: optionalNumber($("#continue-tolerance").value),
  };
  for (const [name, value] of Object.entries(body)) {
    if (value !== null && !Number.isFinite(value)) {
      clear(message, notice("error", `Could not continue the job: ${name} must be a number.`));
      return;
    }
  }
  button.disabled = true;
  try {
    const askedAt = performance.now();
    takeJob(await api(`/api/v1/jobs/${JOB_ID}/continue`, { method: "POST", body }), askedAt);
    $("#continue-form").hidden = true;
    clear(message, notice("success",
      `Job continued: queued to train from iteration ${formatNumber(state.job.iterations_done)} to at most ${formatNumber(state.job.stopping.max_iterations)}.`));
  } catch (err) {
    clear(message, notice("error", `Could not continue the job: ${err.message}`));
    return;
  } finally {
    button.disabled = false;
  }
  renderJob();
  afterStatusChange();
}

async function control(action) {
  if (action === "cancel" && !window.confirm("Cancel this job for good? Its loss history is kept.")) return;
  const message = $("#control-message");
  const buttons = ["#btn-pause", "#btn-resume", "#btn-cancel"].map((s) => $(s));
  buttons.forEach((b) => { b.disabled = true; });
  try {
    const askedAt = performance.now();
    takeJob(await api(`/api/v1/jobs/${JOB_ID}/${action}`, { method: "POST" }), askedAt);
    const done = { pause: "paused", resume: "resumed and queued", cancel: "cancelled" }[action];
    clear(message, notice("success", `Job ${done}.`));
  } catch (err) {
    clear(message, notice("error", `Could not ${action} the job: ${err.message}`));
    await refreshJob();
    return;
  }
  renderJob();
  afterStatusChange();
}

function afterStatusChange() {
  if (TERMINAL.has(state.job.status)) {
    // The job's points are all committed now: stop the stream at once (the
    // dot must not read "Live" beside "Completed") and take the last points
    // it may not have sent from the stored history.
    if (state.stream) {
      closeStream();
      catchUp().catch((err) => {
        $("#chart-note").textContent = `The last loss points could not be loaded (${err.message}).`;
      });
    }
  } else {
    openStream();
  }
  refreshDecisions();
}

async function catchUp() {
  const history = await api(`/api/v1/jobs/${JOB_ID}/losses?max_points=${HISTORY_POINTS}`);
  const missing = [];
  history.iterations.forEach((it, i) => {
    if (it > state.lastIteration) missing.push([it, history.losses[i]]);
  });
  if (missing.length) appendPoints(missing);
  await loadMetrics();
}

/**
 * Fetch the job again. One GET at a time, and one more after it when asked
 * meanwhile: answers land in the order asked, so an older answer (a chunk's
 * "queued") never overwrites a newer one ("running", "completed"), and the
 * last change is always fetched after it happened.
 */
async function refreshJob() {
  if (state.fetching) {
    state.refetch = true;
    return;
  }
  state.fetching = true;
  try {
    do {
      state.refetch = false;
      try {
        const askedAt = performance.now();
        takeJob(await api(`/api/v1/jobs/${JOB_ID}`), askedAt);
      } catch (err) {
        clear($("#control-message"), notice("error", `Could not refresh the job: ${err.message}`));
        return;
      }
      renderJob();
      chartNote();
      afterStatusChange();
    } while (state.refetch);
  } finally {
    state.fetching = false;
  }
}

// The server joins the loss and every metric into one table: a row per
// iteration, a column per metric (val_* empty between evaluations).
async function downloadHistory(kind) {
  const message = $("#control-message");
  try {
    const { blob, filename } = await fetchFile(`/api/v1/jobs/${JOB_ID}/export?format=${kind}&max_points=${DOWNLOAD_POINTS}`, `job-${JOB_ID}-losses.${kind}`);
    download(filename, blob);
  } catch (err) {
    clear(message, notice("error", `Could not download the history: ${err.message}`));
    return;
  }
  if (state.job.iterations_done > DOWNLOAD_POINTS) {
    clear(message, notice("info", `The job has ${formatNumber(state.job.iterations_done)} iterations; the download holds a downsample of at most ${formatNumber(DOWNLOAD_POINTS)} points per metric.`));
  }
}

// What each X-Model-Format of the checkpoint download is (docs/models.md).
const MODEL_FORMATS = {
  npz: "a numpy .npz archive of the model's arrays; np.load(path, allow_pickle=False) reads it.",
  torch: "a PyTorch file; torch.load(path, weights_only=True) reads it (the model's state_dict is under \"model\").",
  bytes: "the bytes this job's trainer wrote with its state(); its restore() reads them.",
};

async function downloadModel() {
  const message = $("#control-message");
  const button = $("#btn-model");
  button.disabled = true;
  try {
    const { blob, filename, headers } = await fetchFile(`/api/v1/jobs/${JOB_ID}/checkpoint`, `job-${JOB_ID}-model.bin`);
    download(filename, blob);
    const how = MODEL_FORMATS[headers.get("X-Model-Format")] || MODEL_FORMATS.bytes;
    clear(message, notice("success", `Downloaded ${filename}: ${how} `,
      h("a", { href: "/help/models" }, "How to load it")));
  } catch (err) {
    clear(message, notice("error", `Could not download the model: ${err.message}`));
  } finally {
    button.disabled = state.job.iterations_done === 0;
  }
}

async function main() {
  await startPage("jobs");
  const root = $("#job-root");
  if (!Number.isInteger(JOB_ID) || JOB_ID <= 0) {
    clear(root, notice("error", "That is not a job address."), h("a", { href: "/jobs" }, "Back to jobs"));
    return;
  }
  try {
    takeJob(await api(`/api/v1/jobs/${JOB_ID}`), performance.now());
    await Promise.all([loadHistory(), uploadId(state.job.dataset) === null ? null : loadUploads()]);
  } catch (err) {
    const text = err instanceof ApiError && err.status === 404
      ? `Job ${JOB_ID} does not exist, or belongs to another tenant.`
      : `Could not load job ${JOB_ID}: ${err.message}`;
    clear(root, notice("error", text), h("a", { href: "/jobs" }, "Back to jobs"));
    return;
  }
  skeleton(root);
  renderJob();
  // Not fatal: the loss chart draws without them and they are retried live.
  await loadMetrics();
  if (typeof Plotly === "undefined") {
    clear($("#loss-chart"), notice("error", "The chart library did not load."));
    return;
  }
  drawChart();
  drawMetrics();
  onThemeChange(rethemeCharts);
  chartNote();
  loadPrediction();
  loadDecisions();
  openStream();
  if (TERMINAL.has(state.job.status)) {
    const el = $("#stream-live");
    el.textContent = "Finished";
  }
  state.events = subscribe(() => "/api/v1/events", {
    job: (event) => {
      if (event.job_id !== JOB_ID) return;
      refreshJob();
      refreshDecisions();
      refreshMetrics();
    },
  });
  const poll = () => {
    if (document.visibilityState === "visible" && !TERMINAL.has(state.job.status)) {
      refreshJob();
      refreshMetrics();
    }
    setTimeout(poll, POLL_MS);
  };
  setTimeout(poll, POLL_MS);
}

main();
