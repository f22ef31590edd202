// Job page, /jobs/{id}: the job's sections (frontend/static/js/job/), each
// built into its place in the page's frame and redrawn from the job as the
// server last told it, and the loop that keeps them live: the job's loss
// stream (SSE) appends points to the loss chart and moves the headline
// numbers; the portal's event stream, and a slow poll while the page is
// visible, fetch the job, its metrics and its scheduler decisions again.

import { api, ApiError } from "../api.js";
import { onThemeChange } from "../charts.js";
import { $, clear, h, jobTitle, notice, TERMINAL, throttle } from "../dom.js";
import { createContinueForm } from "../job/continue-form.js";
import { createDecisions } from "../job/decisions.js";
import { createHeader } from "../job/header.js";
import { createLabels } from "../job/labels.js";
import { createLossChart } from "../job/loss-chart.js";
import { createLossSeries } from "../job/loss-series.js";
import { createMetricsChart } from "../job/metrics-chart.js";
import { createOutcome } from "../job/outcome.js";
import { createReason } from "../job/reason.js";
import { createSample } from "../job/sample.js";
import { createSpec } from "../job/spec.js";
import { createStats } from "../job/stats.js";
import { createTimeline, DECISIONS_ASKED } from "../job/timeline.js";
import { startPage } from "../layout.js";
import { subscribe } from "../live.js";
import { loadUploads, uploadId } from "../uploads.js";

const JOB_ID = Number(window.location.pathname.split("/").filter(Boolean)[1]);
const HISTORY_POINTS = 2000;
const POLL_MS = 10000;

/** The page's frame: an empty place for each section, in the page's order. */
function frame(root) {
  const panel = () => h("section", { class: "panel" });
  const at = {
    head: h("div", { class: "page-head" }),
    continueForm: h("form"),
    message: h("div", { id: "control-message", "aria-live": "polite" }),
    outcome: h("div"),
    labels: h("div"),
    reason: h("div"),
    stats: panel(),
    loss: panel(),
    metrics: panel(),
    sample: panel(),
    timeline: panel(),
    spec: panel(),
    decisions: panel(),
  };
  clear(
    root,
    at.head, at.continueForm, at.message, at.outcome, at.labels, at.reason, at.stats,
    h("div", { class: "grid-2" }, at.loss, at.metrics),
    at.sample, at.timeline,
    h("div", { class: "grid-2" }, at.spec, at.decisions),
  );
  return at;
}

/**
 * Show `first` (the job, asked for at `askedAt`) with its loss `history`,
 * and keep the page live until it is left.
 */
async function showJob(root, first, askedAt, history) {
  let job = first;
  let committed = job.iterations_done; // iterations_done as the server last said (the stream runs ahead of it)
  let asked = askedAt; // when that answer was asked for (performance.now())
  let streamedAt = -1; // when the last new loss point arrived
  let shown = null; // the status the title shows
  let fetching = false; // a GET of the job is in flight
  let refetch = false; // something changed while it was: fetch again when it lands
  let stream = null;
  let metrics = null;
  let decisions = [];
  let drawn = false; // the charts are drawn (the chart library loaded)

  const current = () => job;
  const at = frame(root);
  const say = (kind, ...text) => clear(at.message, notice(kind, ...text));
  const series = createLossSeries(history);
  const header = createHeader(at.head, {
    jobId: JOB_ID, current, say, onJob: changed, onRefused: refreshJob,
    onContinue: () => continueForm.open(job),
  });
  const continueForm = createContinueForm(at.continueForm, { jobId: JOB_ID, say, onJob: changed });
  const outcome = createOutcome(at.outcome);
  const labels = createLabels(at.labels, {
    onSaved: (saved) => {
      take(saved, performance.now());
      render();
    },
  });
  const reason = createReason(at.reason, {
    retry: () => {
      if (job.status === "queued") refreshJob();
    },
  });
  const stats = createStats(at.stats);
  const lossChart = createLossChart(at.loss, { jobId: JOB_ID, series, current, say });
  const metricsChart = createMetricsChart(at.metrics);
  const sample = createSample(at.sample);
  const timeline = createTimeline(at.timeline, { jobId: JOB_ID });
  const spec = createSpec(at.spec);
  const decisionList = createDecisions(at.decisions);
  const refreshPrediction = throttle(() => lossChart.prediction.load(), 4000);
  const refreshMetrics = throttle(loadMetrics, 2000);
  const refreshDecisions = throttle(loadDecisions, 3000);

  /** A fresh copy of the job from the server, remembered as committed progress. */
  function take(fresh, when) {
    job = fresh;
    committed = fresh.iterations_done;
    asked = when;
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
    const inFlight = series.lastIteration > committed && streamedAt > asked;
    return job.status === "queued" && inFlight ? "running" : job.status;
  }

  function render() {
    document.title = `${jobTitle(job)} · SLAQ portal`;
    shown = shownStatus();
    header(job, shown);
    continueForm.update(job);
    labels(job);
    outcome(job);
    sample(job);
    spec(job);
    reason(job, shown);
    stats.update(job);
  }

  /** A control answered with the job: show it, and follow its new status. */
  function changed(fresh, when) {
    take(fresh, when);
    render();
    afterStatusChange();
  }

  function onPoints(points) {
    const added = lossChart.append(points);
    if (!added) return;
    streamedAt = performance.now();
    lossChart.note();
    liveStats(added.xs[added.xs.length - 1], added.ys[added.ys.length - 1]);
    lossChart.prediction.follow();
    refreshPrediction();
  }

  // Between job refreshes, keep the headline numbers in step with the stream.
  function liveStats(iteration, loss) {
    if (iteration <= job.iterations_done) return;
    job.iterations_done = iteration;
    job.current_loss = loss;
    job.best_loss = job.best_loss === null ? loss : Math.min(job.best_loss, loss);
    job.progress = Math.min(iteration / job.stopping.max_iterations, 1);
    stats.live(job);
    if (shown !== shownStatus()) render();
  }

  function drawMetrics() {
    if (drawn && metrics) metricsChart.update(job, metrics);
  }

  async function loadMetrics() {
    try {
      metrics = await api(`/api/v1/jobs/${JOB_ID}/metrics?max_points=${HISTORY_POINTS}`);
    } catch (err) {
      metricsChart.failed(err);
      return;
    }
    lossChart.setMetrics(metrics);
    drawMetrics();
  }

  async function loadDecisions() {
    try {
      decisions = await api(`/api/v1/jobs/${JOB_ID}/decisions?limit=${DECISIONS_ASKED}`);
    } catch (err) {
      decisionList.failed(err);
      return;
    }
    decisionList.update(decisions);
    timeline(job, decisions);
  }

  // Light or dark: the colours live in the charts' layouts and traces.
  function retheme() {
    lossChart.retheme();
    lossChart.prediction.load();
    timeline(job, decisions);
    drawMetrics();
  }

  function openStream() {
    if (stream || TERMINAL.has(job.status)) return;
    stream = subscribe(
      () => `/api/v1/jobs/${JOB_ID}/stream?after_iteration=${series.lastIteration}`,
      { points: (data) => onPoints(data.points || []) },
      (state) => lossChart.showStream(state),
    );
  }

  function closeStream() {
    if (!stream) return;
    stream.close();
    stream = null;
    lossChart.showStream("finished");
  }

  function afterStatusChange() {
    if (TERMINAL.has(job.status)) {
      // The job's points are all committed now: stop the stream at once (the
      // dot must not read "Live" beside "Completed") and take the last points
      // it may not have sent from the stored history.
      if (stream) {
        closeStream();
        catchUp().catch((err) => {
          lossChart.problem(`The last loss points could not be loaded (${err.message}).`);
        });
      }
    } else {
      openStream();
    }
    refreshDecisions();
  }

  async function catchUp() {
    const stored = await api(`/api/v1/jobs/${JOB_ID}/losses?max_points=${HISTORY_POINTS}`);
    onPoints(stored.iterations.map((it, i) => [it, stored.losses[i]]));
    await loadMetrics();
  }

  /**
   * Fetch the job again. One GET at a time, and one more after it when asked
   * meanwhile: answers land in the order asked, so an older answer (a chunk's
   * "queued") never overwrites a newer one ("running", "completed"), and the
   * last change is always fetched after it happened.
   */
  async function refreshJob() {
    if (fetching) {
      refetch = true;
      return;
    }
    fetching = true;
    try {
      do {
        refetch = false;
        try {
          const when = performance.now();
          take(await api(`/api/v1/jobs/${JOB_ID}`), when);
        } catch (err) {
          say("error", `Could not refresh the job: ${err.message}`);
          return;
        }
        render();
        lossChart.note();
        afterStatusChange();
      } while (refetch);
    } finally {
      fetching = false;
    }
  }

  render();
  // Not fatal: the loss chart draws without them and they are retried live.
  await loadMetrics();
  if (typeof Plotly === "undefined") {
    lossChart.unavailable();
    return;
  }
  lossChart.draw();
  drawn = true;
  drawMetrics();
  onThemeChange(retheme);
  lossChart.note();
  lossChart.prediction.load();
  loadDecisions();
  openStream();
  if (TERMINAL.has(job.status)) lossChart.showStream("finished");
  subscribe(() => "/api/v1/events", {
    job: (event) => {
      if (event.job_id !== JOB_ID) return;
      refreshJob();
      refreshDecisions();
      refreshMetrics();
    },
  });
  const poll = () => {
    if (document.visibilityState === "visible" && !TERMINAL.has(job.status)) {
      refreshJob();
      refreshMetrics();
    }
    setTimeout(poll, POLL_MS);
  };
  setTimeout(poll, POLL_MS);
}

async function main() {
  await startPage("jobs");
  const root = $("#job-root");
  if (!Number.isInteger(JOB_ID) || JOB_ID <= 0) {
    clear(root, notice("error", "That is not a job address."), h("a", { href: "/jobs" }, "Back to jobs"));
    return;
  }
  let job;
  let askedAt;
  let history;
  try {
    job = await api(`/api/v1/jobs/${JOB_ID}`);
    askedAt = performance.now();
    [history] = await Promise.all([
      api(`/api/v1/jobs/${JOB_ID}/losses?max_points=${HISTORY_POINTS}`),
      uploadId(job.dataset) === null ? null : loadUploads(),
    ]);
  } catch (err) {
    const text = err instanceof ApiError && err.status === 404
      ? `Job ${JOB_ID} does not exist, or belongs to another tenant.`
      : `Could not load job ${JOB_ID}: ${err.message}`;
    clear(root, notice("error", text), h("a", { href: "/jobs" }, "Back to jobs"));
    return;
  }
  await showJob(root, job, askedAt, history);
}

main();
