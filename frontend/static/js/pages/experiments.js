// Experiments page: the tenant's sweeps, newest first, with how many of
// their runs are in each state; polled while any is still going.

import { api } from "../api.js";
import { $, clear, formatNumber, h, notice, relativeTime, TERMINAL } from "../dom.js";
import { startPage } from "../layout.js";
import { datasetLabel, loadUploads } from "../uploads.js";

const POLL_MS = 5000;

/** "12 runs: 4 running, 8 queued" from a summary's counts by status. */
function counts(exp) {
  const total = typeof exp.jobs === "number" ? exp.jobs : (exp.jobs || exp.job_ids || []).length;
  const parts = Object.entries(exp.counts || {})
    .filter(([, n]) => n > 0)
    .map(([s, n]) => `${formatNumber(n)} ${s}`);
  return `${formatNumber(total)} run${total === 1 ? "" : "s"}${parts.length ? `: ${parts.join(", ")}` : ""}`;
}

function objectiveText(exp) {
  const o = exp.objective;
  if (!o || !o.metric) return "—";
  return `${o.mode === "max" ? "maximise" : "minimise"} ${o.metric}`;
}

function row(exp) {
  return h(
    "tr",
    { dataset: { experimentId: String(exp.id) } },
    h(
      "td",
      { "data-label": "Experiment" },
      // One box: the card layout (narrow screens) gives each child of a cell a grid column.
      h(
        "div",
        {},
        h("a", { class: "job-name", href: `/experiments/${exp.id}` }, exp.name || `Experiment #${exp.id}`),
        h("div", { class: "small subtle" }, `#${exp.id} · ${exp.algorithm || ""} on ${datasetLabel(exp.dataset || "")}${exp.created_at ? ` · ${relativeTime(exp.created_at)}` : ""}`),
      ),
    ),
    h("td", { "data-label": "Status" }, exp.status ? h("span", { class: `badge status-${exp.status}` }, exp.status) : "—"),
    h("td", { "data-label": "Runs" }, counts(exp)),
    h(
      "td",
      { "data-label": "Objective" },
      objectiveText(exp),
    ),
  );
}

async function load(root) {
  const data = await api("/api/v1/experiments");
  const items = Array.isArray(data) ? data : data.items || [];
  if (!items.length) {
    clear(
      root,
      h(
        "div",
        { class: "empty panel" },
        h("p", {}, "Your tenant has no experiments yet."),
        h("a", { class: "btn btn-primary", href: "/experiments/new" }, "Start a sweep"),
      ),
    );
    return false;
  }
  const table = h(
    "table",
    { class: "cards", id: "experiments-table" },
    h("caption", { class: "visually-hidden" }, "Experiments of your tenant, newest first"),
    h("thead", {}, h("tr", {}, ["Experiment", "Status", "Runs", "Objective"].map((l) => h("th", { scope: "col" }, l)))),
    h("tbody", {}, items.map(row)),
  );
  const existing = $("#experiments-table");
  if (existing) existing.replaceWith(table);
  else clear(root, h("div", { class: "table-wrap" }, table));
  return items.some((e) => !TERMINAL.has(e.status));
}

async function main() {
  await startPage("experiments");
  await loadUploads();
  const root = $("#experiments-root");
  let open;
  try {
    open = await load(root);
  } catch (err) {
    clear(root, notice("error", `Could not load experiments: ${err.message}`));
    return;
  }
  const poll = async () => {
    if (document.visibilityState === "visible") {
      try {
        open = await load(root);
      } catch {
        // keep what is shown; the next poll tries again
      }
    }
    setTimeout(poll, open ? POLL_MS : POLL_MS * 4);
  };
  setTimeout(poll, POLL_MS);
}

main();
