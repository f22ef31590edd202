// Jobs page: the tenant's jobs with status, progress, loss, a sparkline and,
// for waiting jobs, what they wait for in plain words (the server's explanation). Filter by
// status, paginate, and stay live (SSE job events + a slow poll). Ticked jobs can be
// compared, or paused, resumed and cancelled in one request (POST /api/v1/jobs/bulk).

import { api } from "../api.js";
import {
  $,
  clear,
  formatLoss,
  h,
  jobTitle,
  notice,
  progressBar,
  relativeTime,
  statusBadge,
  TERMINAL,
} from "../dom.js";
import { tagChips } from "../labels.js";
import { startPage } from "../layout.js";
import { showState, subscribe } from "../live.js";
import { sparkline } from "../sparkline.js";
import { datasetLabel, isUnknownUpload, loadUploads, uploadId } from "../uploads.js";

const STATUSES = ["queued", "running", "paused", "completed", "failed", "cancelled"];
const PAGE_SIZES = [10, 20, 50, 100];
const SLOW_POLL_MS = 15000;
const FAST_POLL_MS = 5000;
const SPARK_POINTS = 50;
// A job queued a moment ago is placed by the scheduler within about a second.
const EXPLAIN_RETRY_MS = 1500;

// Sort orders the API knows (backend/services/job_search.py), by what a user looks for.
const SORTS = [
  ["-id", "Newest first"],
  ["id", "Oldest first"],
  ["name", "Name"],
  ["algorithm", "Algorithm"],
  ["dataset", "Dataset"],
  ["status", "Status"],
  ["-progress", "Progress (most first)"],
  ["current_loss", "Loss (lowest first)"],
  ["best_loss", "Best loss (lowest first)"],
  ["-elapsed", "Training time (longest first)"],
  ["metric:val_loss", "Latest val_loss (lowest first)"],
  ["-metric:val_accuracy", "Latest val_accuracy (highest first)"],
  ["-metric:val_r2", "Latest val_r2 (highest first)"],
];
// Filters kept in the address, so a search can be bookmarked and shared.
const FILTERS = ["q", "algorithm", "dataset", "experiment", "tag"];

const state = {
  status: "",
  q: "",
  algorithm: "",
  dataset: "",
  experiment: "",
  tag: "",
  sort: "-id",
  limit: 20,
  offset: 0,
  total: 0,
  rows: new Map(), // job id -> {job, tr}
  sparks: new Map(), // job id -> {iterations, losses}
  live: "off",
  loading: null,
  selected: new Set(), // job ids ticked for the compare view and the bulk actions
};

function readUrl() {
  const params = new URLSearchParams(window.location.search);
  const status = params.get("status") || "";
  state.status = STATUSES.includes(status) ? status : "";
  const limit = Number(params.get("limit"));
  state.limit = PAGE_SIZES.includes(limit) ? limit : 20;
  state.offset = Math.max(0, Math.floor(Number(params.get("offset")) || 0));
  for (const key of FILTERS) state[key] = params.get(key) || "";
  const sort = params.get("sort") || "-id";
  state.sort = SORTS.some(([value]) => value === sort) ? sort : "-id";
}

function filtered() {
  return Boolean(state.status || FILTERS.some((key) => state[key]));
}

function writeUrl() {
  const params = new URLSearchParams();
  if (state.status) params.set("status", state.status);
  if (state.limit !== 20) params.set("limit", String(state.limit));
  if (state.offset) params.set("offset", String(state.offset));
  for (const key of FILTERS) if (state[key]) params.set(key, state[key]);
  if (state.sort !== "-id") params.set("sort", state.sort);
  const query = params.toString();
  window.history.pushState(null, "", query ? `/jobs?${query}` : "/jobs");
}

/** The server's plain account of the job, with the technical reason behind "Why?". */
function waitingCell(job) {
  const explanation = job.explanation;
  if (!explanation) return null;
  return h(
    "div",
    { class: "reason", "data-testid": "job-explanation" },
    explanation.summary,
    explanation.detail && !TERMINAL.has(job.status)
      ? h("details", { class: "why" }, h("summary", {}, "Why?"), h("span", { class: "small mono" }, explanation.detail))
      : null,
  );
}

/** The latest evaluation: the metric the sort follows if it is one, else val_loss or the first. */
function heldOut(job) {
  const metrics = job.last_eval || {};
  const names = Object.keys(metrics);
  if (!names.length) return "–";
  const sorted = state.sort.replace(/^-/, "").replace(/^metric:/, "");
  const name = names.includes(sorted) ? sorted : names.includes("val_loss") ? "val_loss" : names.sort()[0];
  return `${name} ${formatLoss(metrics[name])}`;
}

function sparkCell(job) {
  const cached = state.sparks.get(job.id);
  if (!cached) return h("span", { class: "spark-none" }, "…");
  return sparkline(cached.losses, `Loss trend of job ${job.id}`);
}

// ---- choosing runs to compare ----

function compareLabel() {
  const n = state.selected.size;
  return n ? `Compare ${n} selected` : "Compare";
}

function syncCompare() {
  const button = $("#compare-selected");
  if (!button) return;
  button.disabled = state.selected.size < 2;
  button.textContent = compareLabel();
  for (const [action, label] of BULK) {
    const bulkButton = $(`#bulk-${action}`);
    if (!bulkButton) continue;
    bulkButton.disabled = state.selected.size === 0;
    bulkButton.textContent = state.selected.size ? `${label} ${state.selected.size}` : label;
  }
}

// ---- acting on the selection ----

const BULK = [
  ["pause", "Pause"],
  ["resume", "Resume"],
  ["cancel", "Cancel"],
];
const DONE = { pause: "Paused", resume: "Resumed", cancel: "Cancelled" };
const DOING = { pause: "Pausing", resume: "Resuming", cancel: "Cancelling" };
// What a job must be for each action to change it (the server skips the rest).
const ACTS_ON = { pause: ["queued", "running"], resume: ["paused"], cancel: ["queued", "running", "paused"] };

function jobsWord(n) {
  return n === 1 ? "1 job" : `${n} jobs`;
}

function bulkButtons() {
  return BULK.map(([action, label]) => {
    const button = h(
      "button",
      {
        type: "button",
        class: action === "cancel" ? "btn btn-danger" : "btn",
        id: `bulk-${action}`,
        disabled: state.selected.size === 0,
        title: `${label} every ticked job that can be ${DONE[action].toLowerCase()}`,
      },
      state.selected.size ? `${label} ${state.selected.size}` : label,
    );
    button.addEventListener("click", () => bulk(action));
    return button;
  });
}

async function bulk(action) {
  const ids = [...state.selected].sort((a, b) => a - b);
  if (!ids.length) return;
  if (action === "cancel" && !window.confirm(`Cancel ${jobsWord(ids.length)} for good? Their loss histories are kept.`)) {
    return;
  }
  const out = $("#bulk-result");
  clear(out, notice("loading", `${DOING[action]} ${jobsWord(ids.length)}…`));
  let result;
  try {
    result = await api("/api/v1/jobs/bulk", { method: "POST", body: { action, ids } });
  } catch (err) {
    clear(out, notice("error", `Could not ${action} the ticked jobs: ${err.message}`));
    return;
  }
  const left = ids.length - result.changed;
  const why = `not ${ACTS_ON[action].join(" or ")}`;
  clear(
    out,
    notice(
      result.changed ? "success" : "info",
      `${DONE[action]} ${jobsWord(result.changed)}.`,
      left ? ` ${jobsWord(left)} left as they were (${why}).` : "",
    ),
  );
  state.selected.clear();
  syncCompare();
  load({ quiet: true });
}

function selectCell(job) {
  const box = h("input", {
    type: "checkbox",
    class: "select-job",
    "aria-label": `Select job ${job.id}`,
    checked: state.selected.has(job.id),
  });
  box.addEventListener("change", () => {
    if (box.checked) state.selected.add(job.id);
    else state.selected.delete(job.id);
    syncCompare();
  });
  return h("td", { "data-label": "Select", class: "select-cell" }, box);
}

function compareButton() {
  const button = h(
    "button",
    { type: "button", class: "btn", id: "compare-selected", disabled: state.selected.size < 2,
      title: "Tick two or more jobs to see their curves and parameters side by side" },
    compareLabel(),
  );
  button.addEventListener("click", () => {
    window.location.assign(`/compare?jobs=${[...state.selected].sort((a, b) => a - b).join(",")}`);
  });
  return button;
}

function rowFor(job) {
  const tr = h(
    "tr",
    { dataset: { jobId: String(job.id), status: job.status } },
    selectCell(job),
    h(
      "td",
      { "data-label": "Job" },
      h(
        "div",
        {},
        h("a", { class: "job-name", href: `/jobs/${job.id}` }, jobTitle(job)),
        h(
          "div",
          { class: "small subtle" },
          `#${job.id} · ${job.algorithm} on ${datasetLabel(job.dataset)} · ${relativeTime(job.created_at)}`,
          job.experiment_id ? " · " : null,
          job.experiment_id ? h("a", { href: `/experiments/${job.experiment_id}` }, `experiment ${job.experiment_id}`) : null,
        ),
        tagChips(job.tags),
      ),
    ),
    h("td", { "data-label": "Status" }, statusBadge(job.status)),
    h("td", { "data-label": "Progress" }, progressBar(job)),
    h(
      "td",
      { "data-label": "Loss", class: "num" },
      h("span", { "data-testid": "current-loss" }, formatLoss(job.current_loss)),
    ),
    h("td", { "data-label": "Held-out", class: "num", "data-testid": "held-out" }, heldOut(job)),
    h("td", { "data-label": "Trend" }, sparkCell(job)),
    h(
      "td",
      { "data-label": "Details" },
      waitingCell(job),
    ),
  );
  return tr;
}

async function loadSpark(job) {
  const cached = state.sparks.get(job.id);
  if (cached && cached.iterations === job.iterations_done) return false;
  if (job.iterations_done === 0) {
    state.sparks.set(job.id, { iterations: 0, losses: [] });
    return true;
  }
  try {
    const history = await api(`/api/v1/jobs/${job.id}/losses?max_points=${SPARK_POINTS}`);
    state.sparks.set(job.id, { iterations: job.iterations_done, losses: history.losses });
    return true;
  } catch {
    return false;
  }
}

function replaceRow(job) {
  const entry = state.rows.get(job.id);
  if (!entry) return;
  const tr = rowFor(job);
  entry.tr.replaceWith(tr);
  if (entry.job.status !== job.status) tr.classList.add("flash");
  state.rows.set(job.id, { job, tr });
}

function renderToolbar() {
  const select = h(
    "select",
    { id: "status-filter", name: "status" },
    h("option", { value: "" }, "All statuses"),
    STATUSES.map((s) => h("option", { value: s }, s[0].toUpperCase() + s.slice(1))),
  );
  select.value = state.status;
  select.addEventListener("change", () => {
    state.status = select.value;
    state.offset = 0;
    writeUrl();
    load();
  });
  const size = h(
    "select",
    { id: "page-size", name: "limit" },
    PAGE_SIZES.map((n) => h("option", { value: String(n) }, `${n} per page`)),
  );
  size.value = String(state.limit);
  size.addEventListener("change", () => {
    state.limit = Number(size.value);
    state.offset = 0;
    writeUrl();
    load();
  });
  return h(
    "div",
    {},
    findForm(),
    h(
    "div",
    { class: "toolbar" },
    h("div", { class: "field" }, h("label", { for: "status-filter" }, "Status"), select),
    h("div", { class: "field" }, h("label", { for: "page-size" }, "Page size"), size),
    h("div", { class: "field btn-row", role: "group", "aria-label": "Ticked jobs" }, compareButton(), bulkButtons()),
    h("span", { class: "live-dot", id: "jobs-live", "data-state": state.live }, ""),
    ),
  );
}

/** Search and filters: applied when submitted (Enter or "Find"), sorting at once. */
function findForm() {
  const field = (key, label, attrs = {}) =>
    h("div", { class: "field" }, h("label", { for: `find-${key}` }, label),
      h("input", { id: `find-${key}`, name: key, value: state[key], ...attrs }));
  const sort = h(
    "select",
    { id: "find-sort", name: "sort" },
    SORTS.map(([value, label]) => h("option", { value }, label)),
  );
  sort.value = state.sort;
  const form = h(
    "form",
    { class: "find-runs", id: "find-runs", role: "search", "aria-label": "Find jobs" },
    field("q", "Search name or note", { type: "search", placeholder: "e.g. adam", maxlength: "200" }),
    h(
      "details",
      {
        class: "more-filters",
        id: "more-filters",
        // Folded on a phone unless one of them is in use; open on wider screens.
        open: window.matchMedia("(min-width: 700px)").matches || ["algorithm", "dataset", "experiment", "tag"].some((key) => state[key]),
      },
      h("summary", {}, "More filters"),
      h(
        "div",
        { class: "find-runs" },
        field("algorithm", "Algorithm", { list: "find-algorithms", maxlength: "100" }),
        field("dataset", "Dataset", { maxlength: "100" }),
        field("experiment", "Experiment id", { type: "number", min: "1", inputmode: "numeric" }),
        field("tag", "Tag", { maxlength: "40" }),
      ),
    ),
    h("div", { class: "field" }, h("label", { for: "find-sort" }, "Sort"), sort),
    h("div", { class: "field btn-row" },
      h("button", { type: "submit", class: "btn btn-primary", id: "find-submit" }, "Find"),
      h("button", { type: "button", class: "btn", id: "find-clear" }, "Clear")),
    h("datalist", { id: "find-algorithms" }),
  );
  const apply = () => {
    for (const key of FILTERS) state[key] = form.elements[key].value.trim();
    state.sort = sort.value;
    state.offset = 0;
    writeUrl();
    load();
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply();
  });
  sort.addEventListener("change", apply);
  form.querySelector("#find-clear").addEventListener("click", () => {
    for (const key of FILTERS) form.elements[key].value = "";
    sort.value = "-id";
    apply();
  });
  api("/api/v1/catalog/algorithms").then((algorithms) => {
    clear($("#find-algorithms"), algorithms.map((a) => h("option", { value: a.name || a.key || a })));
  }).catch(() => {});
  return form;
}

function renderPager() {
  const first = state.total ? state.offset + 1 : 0;
  const last = Math.min(state.offset + state.limit, state.total);
  const prev = h(
    "button",
    { type: "button", class: "btn", id: "page-prev", disabled: state.offset === 0 },
    "← Newer",
  );
  const next = h(
    "button",
    { type: "button", class: "btn", id: "page-next", disabled: last >= state.total },
    "Older →",
  );
  prev.addEventListener("click", () => {
    state.offset = Math.max(0, state.offset - state.limit);
    writeUrl();
    load();
  });
  next.addEventListener("click", () => {
    state.offset += state.limit;
    writeUrl();
    load();
  });
  return h(
    "nav",
    { class: "pager", "aria-label": "Pages" },
    h("span", { "aria-live": "polite", id: "page-info" }, `Showing ${first}–${last} of ${state.total}`),
    h("div", { class: "btn-row" }, prev, next),
  );
}

function renderEmpty() {
  if (filtered()) {
    return h(
      "div",
      { class: "empty panel", "data-testid": "no-match" },
      h("p", {}, state.status && !FILTERS.some((key) => state[key])
        ? `No ${state.status} jobs.` : "No jobs match this search."),
      h("a", { href: "/jobs" }, "Show all jobs"),
    );
  }
  return h(
    "div",
    { class: "empty panel" },
    h("p", {}, "Your tenant has no jobs yet."),
    h("a", { class: "btn btn-primary", href: "/submit" }, "Submit your first job"),
  );
}

function syncToolbar() {
  for (const key of FILTERS) $(`#find-${key}`).value = state[key];
  if (["algorithm", "dataset", "experiment", "tag"].some((key) => state[key])) $("#more-filters").open = true;
  $("#find-sort").value = state.sort;
  $("#status-filter").value = state.status;
  $("#page-size").value = String(state.limit);
}

async function load({ quiet = false } = {}) {
  const root = $("#jobs-results");
  const params = new URLSearchParams({ limit: String(state.limit), offset: String(state.offset) });
  if (state.status) params.set("status", state.status);
  for (const key of FILTERS) if (state[key]) params.set(key, state[key]);
  params.set("sort", state.sort);
  if (!quiet) clear(root, notice("loading", "Loading jobs…"));
  const token = {};
  state.loading = token;
  let page;
  try {
    page = await api(`/api/v1/jobs?${params}`);
  } catch (err) {
    if (state.loading !== token) return;
    if (quiet) return; // keep showing what we have; the next poll tries again
    clear(
      root,
      notice("error", `Could not load jobs: ${err.message}`),
      h("button", { type: "button", class: "btn", onClick: () => load() }, "Retry"),
    );
    return;
  }
  if (state.loading !== token) return;
  if (page.items.length === 0 && state.offset > 0 && page.total > 0) {
    // The page emptied under us (e.g. jobs finished): step back.
    state.offset = Math.max(0, Math.floor((page.total - 1) / state.limit) * state.limit);
    writeUrl();
    load();
    return;
  }
  state.total = page.total;
  // Upload names load with the page; only rows on an upload wait for them.
  if (page.items.some((job) => uploadId(job.dataset) !== null)) {
    await loadUploads();
    // A job on an upload this page has not seen yet (new since it loaded): learn its name.
    if (page.items.some((job) => isUnknownUpload(job.dataset))) await loadUploads({ refresh: true });
  }
  if (state.loading !== token) return;
  const focused = document.activeElement && document.activeElement.id;
  state.rows.clear();
  let body;
  if (page.items.length === 0) {
    body = renderEmpty();
  } else {
    const tbody = h("tbody");
    for (const job of page.items) {
      const tr = rowFor(job);
      state.rows.set(job.id, { job, tr });
      tbody.appendChild(tr);
    }
    body = h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "cards", id: "jobs-table" },
        h("caption", { class: "visually-hidden" }, `Jobs of your tenant, ${SORTS.find(([v]) => v === state.sort)[1].toLowerCase()}`),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Select")),
            ["Job", "Status", "Progress", "Loss", "Held-out", "Trend", "Details"].map((label) =>
              h("th", { scope: "col", class: label === "Loss" || label === "Held-out" ? "num" : null }, label),
            ),
          ),
        ),
        tbody,
      ),
    );
  }
  clear(root, body, page.items.length ? renderPager() : null);
  if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  followUnplaced();
  // The list shows at once; each trend fills in as its losses arrive.
  await Promise.all(
    page.items.map(async (job) => {
      if ((await loadSpark(job)) && state.loading === token) fillSpark(job);
    }),
  );
}

function fillSpark(job) {
  const entry = state.rows.get(job.id);
  const cell = entry && entry.tr.querySelector('td[data-label="Trend"]');
  if (cell) clear(cell, sparkCell(entry.job));
}

// ---- live updates ----

const pendingRows = new Set();
let rowTimer = null;
let reloadTimer = null;

function scheduleReload(delay = 600) {
  if (reloadTimer) return;
  reloadTimer = setTimeout(() => {
    reloadTimer = null;
    load({ quiet: true });
  }, delay);
}

async function refreshRows() {
  rowTimer = null;
  const ids = [...pendingRows];
  pendingRows.clear();
  let anyQueued = false;
  for (const id of ids) {
    if (!state.rows.has(id)) continue;
    let job;
    try {
      job = await api(`/api/v1/jobs/${id}`);
    } catch {
      continue;
    }
    if (state.status && job.status !== state.status) {
      scheduleReload(0); // no longer matches the filter
      return;
    }
    await loadSpark(job);
    replaceRow(job);
    anyQueued ||= job.status === "queued";
  }
  // Queue positions of the other waiting rows may have moved too.
  const waiting = [...state.rows.values()].filter((r) => r.job.status === "queued");
  if (waiting.length && !anyQueued) scheduleReload();
  else followUnplaced();
}

function onJobEvent(event) {
  const id = event.job_id;
  if (event.status === "deleted") {
    if (state.rows.has(id)) scheduleReload(0);
    return;
  }
  if (state.rows.has(id)) {
    pendingRows.add(id);
    if (!rowTimer) rowTimer = setTimeout(refreshRows, 400);
    if (event.status === "queued" || TERMINAL.has(event.status)) {
      // Others' queue positions shift when a job enters or leaves the queue.
      for (const [otherId, row] of state.rows) {
        if (row.job.status === "queued") pendingRows.add(otherId);
      }
    }
  } else if (state.offset === 0 && (!state.status || state.status === event.status)) {
    scheduleReload(); // a new job or one that now matches the filter
  }
}

/** A queued row the scheduler has not placed yet: ask again once it has (no event says so). */
function followUnplaced() {
  const unplaced = [...state.rows.values()].some(
    ({ job }) => job.status === "queued" && job.explanation && job.explanation.position === null,
  );
  // A few times only: far back in a huge queue a job may stay unplaced.
  state.unplacedRetries = unplaced ? (state.unplacedRetries || 0) + 1 : 0;
  if (unplaced && state.unplacedRetries <= 3) scheduleReload(EXPLAIN_RETRY_MS);
}

function setLive(value) {
  state.live = value;
  showState($("#jobs-live"), value);
}

async function main() {
  // Who you are, upload names and the list load side by side: the list does
  // not wait for the header.
  const me = startPage("jobs");
  loadUploads();
  readUrl();
  clear($("#jobs-root"), renderToolbar(), h("div", { id: "bulk-result" }), h("div", { id: "jobs-results" }));
  showState($("#jobs-live"), state.live);
  const deleted = Number(new URLSearchParams(window.location.search).get("deleted"));
  if (Number.isInteger(deleted) && deleted > 0) {
    // Arrived from a job page's "Delete job": say it is done, then drop the marker.
    clear($("#bulk-result"), notice("success", `Job ${deleted} was deleted with its data.`));
    const params = new URLSearchParams(window.location.search);
    params.delete("deleted");
    window.history.replaceState(null, "", params.toString() ? `/jobs?${params}` : "/jobs");
  }
  window.addEventListener("popstate", () => {
    readUrl();
    syncToolbar();
    load();
  });
  await Promise.all([me, load()]);
  subscribe(() => "/api/v1/events", { job: onJobEvent }, setLive);
  // Slow poll as a safety net, faster while the live stream is down.
  const poll = () => {
    if (document.visibilityState === "visible") load({ quiet: true });
    setTimeout(poll, state.live === "live" ? SLOW_POLL_MS : FAST_POLL_MS);
  };
  setTimeout(poll, SLOW_POLL_MS);
}

main();
