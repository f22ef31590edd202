// Cluster page. The last hour of slots and queue length comes from the
// scheduler's own record (GET /api/v1/cluster/history), drawn on load and
// extended every 2 s. The page also samples GET /api/v1/cluster every 2 s
// for who holds the slots (stacked by job or tenant), the aggregate
// normalised loss, the queue, live workers and the policy in force; those
// samples are kept in sessionStorage so leaving and coming back keeps them.

import { api } from "../api.js";
import { baseLayout, chartColors, onThemeChange, PLOT_CONFIG, timeAxis, valueAxis } from "../charts.js";
import { $, clear, formatClock, formatLoss, formatNumber, h, notice, statusBadge } from "../dom.js";
import { PLOT_CLOCK } from "../format.js";
import { startPage } from "../layout.js";
import { jobName, loadUploads } from "../uploads.js";

const SAMPLE_MS = 2000;
const KEEP = 900; // 30 minutes at one sample per 2 s
const STORE = "slaq.cluster.samples.v1";
const OTHER = "other tenants";

let samples = [];
// The scheduler's samples ({at, total, busy, free, queued, running, granted, ...}), oldest first.
let history = [];
const HISTORY_MINUTES = 60;
let groupBy = "job";
let failures = 0;
let me = null;

function storeKey() {
  return `${STORE}.${me ? me.id : 0}`;
}

function loadStored() {
  try {
    const raw = JSON.parse(window.sessionStorage.getItem(storeKey()) || "[]");
    return Array.isArray(raw) ? raw.filter((s) => Date.now() - s.t < KEEP * SAMPLE_MS * 1.5) : [];
  } catch {
    return [];
  }
}

function store() {
  try {
    window.sessionStorage.setItem(storeKey(), JSON.stringify(samples));
  } catch {
    // Storage full or disabled: history just won't survive a reload.
  }
}

/** The compact sample we keep: time, slots, who runs, the loss figure. */
function compact(c) {
  return {
    t: Date.now(),
    total: c.total_slots,
    busy: c.busy_slots,
    loss: c.avg_norm_loss,
    running: (c.running || []).map((r) => ({
      job: r.job_id,
      name: r.name,
      tenant: r.tenant_name || OTHER,
    })),
  };
}

// Until a minute of samples exists, show a minute: a few seconds stretched
// over the whole width read as a frozen chart.
const MIN_WINDOW_MS = 60000;

function timeRange() {
  if (!samples.length) return {};
  const first = samples[0].t;
  const last = samples[samples.length - 1].t;
  return last - first < MIN_WINDOW_MS ? { range: [new Date(first), new Date(first + MIN_WINDOW_MS)] } : { autorange: true };
}

function historyRange() {
  const now = Date.now();
  const first = history.length ? history[0].at * 1000 : now;
  return { range: [new Date(Math.min(first, now - MIN_WINDOW_MS)), new Date(now)] };
}

/** A time axis labelled HH:MM:SS whatever the zoom (no milliseconds). */
function clockAxis(range) {
  return timeAxis({
    automargin: true,
    nticks: window.innerWidth < 600 ? 4 : 8,
    tickformatstops: [
      { dtickrange: [null, 86400000], value: PLOT_CLOCK },
      { dtickrange: [86400000, null], value: "%Y-%m-%d" },
    ],
    ...range,
  });
}

/** Ticks on whole numbers only: a count axis labelled 0, 0, 1, 1, 2 reads as a bug. */
function wholeTicks(values) {
  const top = Math.max(1, ...values);
  return { tick0: 0, dtick: Math.max(1, Math.ceil(top / 6)), range: [0, top * 1.05 + 0.05] };
}

function drawHistory() {
  const x = history.map((p) => new Date(p.at * 1000));
  const c = chartColors();
  Plotly.react("history-chart", [
    {
      x,
      y: history.map((p) => p.busy),
      name: "Busy slots",
      type: "scatter",
      mode: "lines",
      fill: "tozeroy",
      line: { color: c.line, width: 1.5, shape: "hv" },
      hovertemplate: "%{y} busy<extra></extra>",
    },
    {
      x,
      y: history.map((p) => p.total),
      name: "Live slots",
      type: "scatter",
      mode: "lines",
      line: { color: c.ink, dash: "dot", width: 1.5, shape: "hv" },
      hovertemplate: "%{y} live<extra></extra>",
    },
    {
      x,
      y: history.map((p) => p.queued),
      name: "Waiting jobs",
      type: "scatter",
      mode: "lines",
      yaxis: "y2",
      line: { color: c.predicted, width: 1.5, shape: "hv" },
      hovertemplate: "%{y} waiting<extra></extra>",
    },
  ], baseLayout({
    uirevision: "history",
    margin: { l: 48, r: 48, t: 32, b: 40 },
    xaxis: clockAxis(historyRange()),
    yaxis: valueAxis({ title: { text: "Slots" }, rangemode: "tozero", tickformat: "d", automargin: true, ...wholeTicks(history.map((p) => p.total)) }),
    yaxis2: valueAxis({
      title: { text: "Waiting jobs" }, overlaying: "y", side: "right", rangemode: "tozero",
      tickformat: "d", showgrid: false, automargin: true, ...wholeTicks(history.map((p) => p.queued)),
    }),
    legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
    showlegend: true,
    hovermode: "x unified",
  }), PLOT_CONFIG);
  const chart = $("#history-chart");
  chart.dataset.points = String(history.length);
  chart.dataset.oldest = history.length ? String(history[0].at) : "";
  const last = history[history.length - 1];
  $("#history-note").textContent = history.length
    ? `Recorded by the scheduler every few seconds since ${formatClock(new Date(history[0].at * 1000))}; ` +
      `the last hour is kept. Latest: ${last.busy} of ${last.total} slots busy, ${formatNumber(last.queued)} waiting, ` +
      `${formatNumber(history.reduce((n, p) => n + p.granted, 0))} chunks granted in this window.`
    : "The scheduler has not recorded any round yet.";
}

async function loadHistory() {
  const since = history.length ? `&since=${history[history.length - 1].at}` : "";
  const got = await api(`/api/v1/cluster/history?minutes=${HISTORY_MINUTES}${since}`);
  history.push(...got.samples);
  const cutoff = got.now - HISTORY_MINUTES * 60;
  const stale = history.findIndex((p) => p.at >= cutoff);
  if (stale > 0) history.splice(0, stale);
  drawHistory();
}

function keyOf(r) {
  if (groupBy === "tenant") return r.job === null ? OTHER : r.tenant;
  if (r.job === null) return OTHER;
  return `${r.tenant} / #${r.job} ${jobName(r.name)}`.trim();
}

function drawOccupancy() {
  const keys = [];
  const seen = new Set();
  for (const s of samples) {
    for (const r of s.running) {
      const k = keyOf(r);
      if (!seen.has(k)) {
        seen.add(k);
        keys.push(k);
      }
    }
  }
  const x = samples.map((s) => new Date(s.t));
  const traces = keys.map((k) => ({
    x,
    y: samples.map((s) => s.running.filter((r) => keyOf(r) === k).length),
    name: k,
    type: "scatter",
    mode: "lines",
    stackgroup: "slots",
    line: { width: 0.5, shape: "hv" },
    hovertemplate: "%{y} slot(s)<extra>%{fullData.name}</extra>",
  }));
  traces.push({
    x,
    y: samples.map((s) => s.total),
    name: "Live slots",
    type: "scatter",
    mode: "lines",
    line: { color: chartColors().ink, dash: "dot", width: 1.5, shape: "hv" },
  });
  Plotly.react("occupancy-chart", traces, baseLayout({
    uirevision: `occupancy-${groupBy}`,
    margin: { l: 48, r: 16, t: 32, b: 40 },
    xaxis: clockAxis(timeRange()),
    yaxis: valueAxis({ title: { text: "Slots" }, rangemode: "tozero", dtick: 1, tickformat: "d", automargin: true }),
    legend: { orientation: "h", x: 0, y: 1.02, xanchor: "left", yanchor: "bottom" },
    showlegend: true,
    hovermode: "x unified",
  }), PLOT_CONFIG);
}

function drawLoss() {
  Plotly.react("loss-chart", [{
    x: samples.map((s) => new Date(s.t)),
    y: samples.map((s) => s.loss),
    customdata: samples.map((s) => formatLoss(s.loss)),
    hovertemplate: "%{customdata}",
    type: "scatter",
    mode: "lines",
    name: "Mean normalised loss",
    line: { color: chartColors().line, width: 2 },
    connectgaps: false,
  }], baseLayout({
    uirevision: "loss",
    margin: { l: 48, r: 16, t: 8, b: 40 },
    xaxis: clockAxis(timeRange()),
    yaxis: valueAxis({
      title: { text: "Loss / first loss" },
      automargin: true,
      // With no samples Plotly autoranges to 0-4; the ratio mostly lives in 0-1.
      ...(samples.some((s) => s.loss !== null) ? { rangemode: "tozero" } : { range: [0, 1] }),
    }),
    hovermode: "x unified",
  }), PLOT_CONFIG);
}

function jobLink(entry) {
  if (entry.job_id === null) return h("span", { class: "subtle" }, "another tenant's job");
  return h("a", { href: `/jobs/${entry.job_id}` }, entry.name ? jobName(entry.name) : `Job #${entry.job_id}`);
}

function table(caption, headers, rows, empty) {
  if (!rows.length) return h("p", { class: "subtle" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, headers.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows),
    ),
  );
}

function renderNow(c) {
  const stat = (label, value, testid) =>
    h("div", {}, h("dt", {}, label), h("dd", { "data-testid": testid }, value));
  clear(
    $("#cluster-stats"),
    stat("Policy", c.policy, "policy"),
    // Busy and free add up to the live slots: running jobs beyond them (a
    // dead worker's, until reclaimed) are not counted as busy slots.
    stat("Busy slots", `${Math.min(c.busy_slots, c.total_slots)} of ${c.total_slots}`, "slots"),
    stat("Free slots", String(c.free_slots ?? Math.max(c.total_slots - c.busy_slots, 0)), "free-slots"),
    stat("Waiting jobs", formatNumber(c.queued_total ?? (c.queued || []).length), "queued-count"),
    stat("Mean normalised loss", c.avg_norm_loss === null ? "—" : formatLoss(c.avg_norm_loss), "avg-loss"),
    // One pool is the plain case: its slots are the figures above.
    ...((c.pools || []).length > 1
      ? [stat("Worker pools", (c.pools || []).map((p) =>
        `${p.name}${p.gpu ? ` (${p.gpu})` : ""}: ${p.busy} of ${p.slots} busy`).join("; "), "pools")]
      : []),
  );
  clear(
    $("#running-list"),
    table(
      "Jobs holding a slot",
      ["Job", "Tenant", "Status"],
      (c.running || []).map((r) =>
        h("tr", {}, h("td", {}, jobLink(r)), h("td", {}, r.tenant_name || "—"), h("td", {}, statusBadge(r.status))),
      ),
      "No job is running.",
    ),
  );
  clear(
    $("#queue-list"),
    table(
      "Jobs waiting for a slot, in the order they were queued",
      ["#", "Job", "Tenant", "Why it waits"],
      (c.queued || []).map((q) =>
        h(
          "tr",
          {},
          h("td", { class: "num" }, String(q.position)),
          h("td", {}, jobLink(q)),
          h("td", {}, q.tenant_name || "—"),
          h("td", { class: "reason" }, q.reason || (q.job_id === null ? "—" : "waiting for a free slot")),
        ),
      ),
      "The queue is empty.",
    ),
  );
  const workers = c.workers || [];
  clear(
    $("#workers-list"),
    workers.length
      ? h("ul", { class: "mono small", id: "workers" }, workers.map((w) => h("li", {}, w)))
      : notice("warn", "No live worker: jobs will wait until a worker starts."),
  );
  const sched = c.scheduler || {};
  $("#scheduler-note").textContent = sched.at
    ? `Last scheduling round at ${formatClock(new Date(sched.at * 1000))} (${Math.max(0, Math.round(Date.now() / 1000 - sched.at))} s ago): ${formatNumber(sched.runnable ?? 0)} runnable job(s), ${formatNumber(sched.granted ?? 0)} chunk(s) granted.`
    : "The scheduler has not reported a round yet.";
}

function setLive(ok, message) {
  const el = $("#cluster-live");
  el.dataset.state = ok ? "live" : "polling";
  el.textContent = ok ? "Live · every 2 s" : message;
}

async function sample() {
  try {
    const c = await api("/api/v1/cluster");
    failures = 0;
    samples.push(compact(c));
    if (samples.length > KEEP) samples.splice(0, samples.length - KEEP);
    store();
    renderNow(c);
    await loadHistory();
    drawOccupancy();
    drawLoss();
    setLive(true);
    if ($("#cluster-error")) $("#cluster-error").remove();
  } catch (err) {
    failures += 1;
    setLive(false, "Retrying…");
    if (!$("#cluster-error")) {
      $("#cluster-root").prepend(h("div", { id: "cluster-error" }));
    }
    clear($("#cluster-error"), notice("error", `Could not read the cluster (${err.message}); retrying.`));
  }
  setTimeout(sample, failures ? Math.min(SAMPLE_MS * 2 ** failures, 30000) : SAMPLE_MS);
}

function skeleton() {
  const group = h(
    "select",
    { id: "group-by" },
    h("option", { value: "job" }, "by job"),
    h("option", { value: "tenant" }, "by tenant"),
  );
  group.addEventListener("change", () => {
    groupBy = group.value;
    drawOccupancy();
  });
  const isAdmin = me && me.role === "platform_admin";
  clear(
    $("#cluster-root"),
    h("section", { class: "panel", "aria-label": "Now" }, h("dl", { class: "stats", id: "cluster-stats" }),
      h("p", { class: "small subtle", id: "scheduler-note" })),
    h(
      "section",
      { class: "panel", "aria-labelledby": "history-title" },
      h("h2", { id: "history-title" }, "Slots and queue, last hour"),
      h("div", { id: "history-chart", class: "chart", role: "img", "aria-label": "Busy and live slots and waiting jobs over the last hour" }),
      h("p", { class: "small subtle", id: "history-note" }),
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "occ-title" },
      h("div", { class: "page-head" }, h("h2", { id: "occ-title" }, "Who holds the slots"),
        h("div", { class: "field" }, h("label", { for: "group-by", class: "visually-hidden" }, "Group slots"), group)),
      h("div", { id: "occupancy-chart", class: "chart", role: "img", "aria-label": "Busy slots over time, stacked by job or tenant" }),
      h("p", { class: "small subtle" }, isAdmin
        ? "Sampled by this page every 2 s while it is open."
        : "Sampled by this page every 2 s while it is open. Other tenants' jobs are grouped as “other tenants”."),
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "loss-title" },
      h("h2", { id: "loss-title" }, "Mean normalised loss of active jobs"),
      h("div", { id: "loss-chart", class: "chart-small", role: "img", "aria-label": "Mean loss relative to first loss over time" }),
      h("p", { class: "small subtle" }, "Each running or waiting job's current loss divided by its first loss, averaged (a job without losses counts as 1)."),
    ),
    h(
      "div",
      { class: "grid-2" },
      h("section", { class: "panel", "aria-labelledby": "run-title" }, h("h2", { id: "run-title" }, "Running"), h("div", { id: "running-list" })),
      h("section", { class: "panel", "aria-labelledby": "queue-title" }, h("h2", { id: "queue-title" }, "Queue"), h("div", { id: "queue-list" })),
    ),
    h("section", { class: "panel", "aria-labelledby": "workers-title" }, h("h2", { id: "workers-title" }, "Live workers"), h("div", { id: "workers-list" })),
  );
}

async function main() {
  me = await startPage("cluster");
  await loadUploads();
  if (typeof Plotly === "undefined") {
    clear($("#cluster-root"), notice("error", "The chart library did not load."));
    return;
  }
  samples = loadStored();
  skeleton();
  onThemeChange(() => {
    drawHistory();
    drawOccupancy();
    drawLoss();
  });
  sample();
}

main();
