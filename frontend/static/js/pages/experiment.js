// Experiment page, /experiments/{id}: a sweep's status counts, its best run,
// Cancel / Pause / Resume for all its jobs, and its runs compared side by
// side (compare.js), early-stopped ones marked with their reason. Polled
// every few seconds; parts are updated in place, never re-rendered whole.

import { api, ApiError } from "../api.js";
import { createCompare } from "../compare.js";
import { $, clear, formatDuration, formatNumber, formatValue, h, notice, TERMINAL } from "../dom.js";
import { labelsPanel } from "../labels.js";
import { startPage } from "../layout.js";
import { showState } from "../live.js";
import { loadUploads } from "../uploads.js";

const POLL_MS = 3000;
const EXPERIMENT_ID = Number(window.location.pathname.split("/").filter(Boolean)[1]);
const STATUSES = ["queued", "running", "paused", "completed", "failed", "cancelled"];
const RULES = {
  none: "none",
  predictive: "predictive (stops runs whose predicted final value cannot reach the top k)",
  asha: "successive halving (ASHA)",
};

const state = {
  experiment: null,
  full: new Map(), // job id -> JobPublic (for elapsed time; finished runs are not fetched again)
  view: null,
  busy: false,
};

function countsOf(jobs) {
  const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]));
  for (const job of jobs) counts[job.status] = (counts[job.status] || 0) + 1;
  return counts;
}

function renderCounts(exp) {
  const counts = countsOf(exp.jobs || []);
  const early = (exp.jobs || []).filter((j) => j.stopped_early).length;
  const items = STATUSES.filter((s) => counts[s] > 0).map((s) =>
    h("div", { "data-status": s }, h("dt", {}, s[0].toUpperCase() + s.slice(1)), h("dd", { "data-testid": `count-${s}` }, formatNumber(counts[s]))),
  );
  if (early) items.push(h("div", {}, h("dt", {}, "Stopped early"), h("dd", { "data-testid": "count-stopped-early" }, formatNumber(early))));
  return h("dl", { class: "stats", id: "experiment-counts" }, h("div", {}, h("dt", {}, "Runs"), h("dd", {}, formatNumber((exp.jobs || []).length))), items);
}

function renderSummary(exp) {
  const best = (exp.jobs || []).find((j) => j.id === exp.best_job_id);
  const objective = exp.objective ? `${exp.objective.mode === "max" ? "maximise" : "minimise"} ${exp.objective.metric}` : "—";
  const rule = exp.early_stopping || { rule: "none" };
  const ruleText = [RULES[rule.rule] || rule.rule];
  if (rule.rule !== "none") {
    if (rule.rule === "predictive" && rule.top_k) ruleText.push(`top ${rule.top_k}`);
    if (rule.min_iterations) ruleText.push(`after ${formatNumber(rule.min_iterations)} iterations`);
    if (rule.rule === "asha" && rule.reduction) ruleText.push(`keeps 1 run in ${rule.reduction} at each rung`);
  }
  return h(
    "dl",
    { class: "kv", id: "experiment-summary" },
    h("dt", {}, "Objective"), h("dd", {}, objective),
    h("dt", {}, "Best run"),
    h(
      "dd",
      { "data-testid": "best-job" },
      best
        ? [h("a", { href: `/jobs/${best.id}` }, `#${best.id} ${best.name || ""}`.trim()),
            best.objective_value !== null && best.objective_value !== undefined
              ? ` · ${exp.objective ? exp.objective.metric : "value"} ${formatValue(best.objective_value)}`
              : ""]
        : "none yet",
    ),
    h("dt", {}, "Early stopping"), h("dd", {}, ruleText.join(", ")),
    h("dt", {}, "Search space"),
    h("dd", { class: "small" }, Object.entries(exp.space || {}).map(([k, s]) => h("div", {}, h("code", {}, k), ": ", spaceText(s)))),
  );
}

/**
 * What the early-stopping rule did and why the others run on: runs stopped,
 * the slot-seconds that saved (and how that is estimated), the iterations it
 * judges at, and for each queued or running configuration the rule's own
 * reason for keeping it. Empty for an experiment without a rule.
 */
function renderStopping(exp) {
  const rule = (exp.early_stopping || {}).rule || "none";
  if (rule === "none") return h("section", { id: "experiment-stopping", hidden: true });
  const stopped = exp.stopped_early || 0;
  const runs = stopped === 1 ? "1 run" : `${formatNumber(stopped)} runs`;
  const saved = stopped
    ? [`, saving about ${formatDuration(exp.saved_slot_seconds || 0)} of slot time `,
        h("span", { class: "muted small", "data-testid": "saved-estimate" }, `(estimated: ${exp.saved_estimate})`)]
    : "";
  const open = (exp.jobs || []).filter((j) => (j.status === "running" || j.status === "queued") && !j.stopped_early);
  const items = open.map((j) =>
    h(
      "li",
      { "data-job": String(j.id) },
      h("a", { href: `/jobs/${j.id}` }, `#${j.id}`),
      ` ${paramsText(exp, j)}: `,
      h("span", { class: "why-running" }, j.why_running || "not judged yet"),
    ),
  );
  return h(
    "section",
    { id: "experiment-stopping", "aria-label": "Early stopping" },
    h("p", { "data-testid": "stopped-summary" }, `Stopped early: ${runs}`, saved, "."),
    exp.rungs && exp.rungs.length
      ? h("p", { class: "small", "data-testid": "rungs" }, `Judged at every commit; each run's grants end at iterations ${exp.rungs.map(formatNumber).join(", ")}.`)
      : null,
    open.length
      ? [h("h3", {}, "Why each running configuration runs on"), h("ul", { class: "small", id: "why-running" }, items)]
      : null,
  );
}

function paramsText(exp, job) {
  const value = (v) => (typeof v === "number" ? formatValue(v) : String(v));
  return Object.keys(exp.space || {}).map((k) => `${k}=${value((job.params || {})[k])}`).join(", ");
}

function spaceText(s) {
  if (!s || typeof s !== "object") return String(s);
  if (s.type === "choice") return `one of ${(s.values || []).map(String).join(", ")}`;
  return `${s.type} from ${s.low} to ${s.high}${s.log ? " (log)" : ""}`;
}

async function act(action) {
  if (state.busy) return;
  state.busy = true;
  const message = $("#experiment-message");
  clear(message, notice("loading", `${action[0].toUpperCase()}${action.slice(1)}…`));
  try {
    await api(`/api/v1/experiments/${EXPERIMENT_ID}/${action}`, { method: "POST" });
    clear(message, notice("success", `Asked every run of the experiment to ${action}.`));
    await refresh();
  } catch (err) {
    clear(message, notice("error", `Could not ${action} the experiment: ${err.message}`));
  } finally {
    state.busy = false;
  }
}

function renderActions(exp) {
  const jobs = exp.jobs || [];
  const open = jobs.some((j) => !TERMINAL.has(j.status));
  const running = jobs.some((j) => j.status === "running" || j.status === "queued");
  const paused = jobs.some((j) => j.status === "paused");
  return h(
    "div",
    { class: "btn-row", id: "experiment-actions" },
    h("button", { type: "button", class: "btn", id: "exp-pause", disabled: !running, onClick: () => act("pause") }, "Pause all"),
    h("button", { type: "button", class: "btn", id: "exp-resume", disabled: !paused, onClick: () => act("resume") }, "Resume all"),
    h("button", { type: "button", class: "btn btn-danger", id: "exp-cancel", disabled: !open, onClick: () => act("cancel") }, "Cancel all"),
  );
}

/**
 * "Add configurations": one per line, `name=value` for each swept parameter,
 * sent as POST /api/v1/experiments/{id}/configurations. The server adds
 * those the experiment does not hold yet and says what is wrong otherwise.
 */
function addForm() {
  const text = h("textarea", { id: "add-configurations", rows: "3", "aria-describedby": "add-help" });
  const form = h(
    "form",
    { id: "add-form", class: "stack" },
    h("h2", { id: "add-title" }, "Add configurations"),
    h("label", { for: "add-configurations" }, "Configurations, one per line"),
    text,
    h("span", { class: "small subtle", id: "add-help" }),
    h("div", { class: "btn-row" }, h("button", { type: "submit", class: "btn", id: "add-submit" }, "Add configurations")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    addConfigurations();
  });
  return h("section", { class: "panel", id: "experiment-add", "aria-labelledby": "add-title" }, form);
}

/** A value as typed: a number, true/false, or else the text itself. */
function typed(raw) {
  const t = raw.trim();
  if (t === "true" || t === "false") return t === "true";
  if (t !== "" && Number.isFinite(Number(t))) return Number(t);
  return t;
}

function parseConfigurations(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean).map((line, i) => {
    const values = {};
    for (const part of line.split(",").map((p) => p.trim()).filter(Boolean)) {
      const at = part.indexOf("=");
      if (at <= 0) throw new Error(`line ${i + 1}: write name=value, got "${part}"`);
      values[part.slice(0, at).trim()] = typed(part.slice(at + 1));
    }
    return values;
  });
}

async function addConfigurations() {
  const message = $("#experiment-message");
  let configurations;
  try {
    configurations = parseConfigurations($("#add-configurations").value);
  } catch (err) {
    clear(message, notice("error", `Could not add configurations: ${err.message}`));
    return;
  }
  if (!configurations.length) {
    clear(message, notice("error", "Could not add configurations: write at least one line."));
    return;
  }
  const button = $("#add-submit");
  button.disabled = true;
  state.busy = true;
  try {
    const grown = await api(`/api/v1/experiments/${EXPERIMENT_ID}/configurations`, { method: "POST", body: { configurations } });
    const n = grown.added.length;
    clear(message, notice("success", `Added ${n} configuration${n === 1 ? "" : "s"}: ${grown.added.map((id) => `#${id}`).join(", ")}, queued.`));
    $("#add-configurations").value = "";
    await refresh();
  } catch (err) {
    clear(message, notice("error", `Could not add configurations: ${err.message}`));
  } finally {
    button.disabled = false;
    state.busy = false;
  }
}

/** The help under the form, naming this experiment's swept parameters. */
function renderAddHelp(exp) {
  const names = Object.keys(exp.space || {});
  const example = names.map((k) => `${k}=…`).join(", ");
  $("#add-configurations").placeholder = names.length ? example : "";
  clear($("#add-help"), names.length
    ? ["A value for each swept parameter (", h("code", {}, names.join(", ")), "), e.g. ", h("code", {}, example),
        ". Each configuration the experiment does not hold yet becomes a queued run. To widen a range or add a parameter, see ",
        h("a", { href: "/help/runs" }, "Continuing runs"), "."]
    : "This experiment sweeps no parameter: widen its search space through the API or slaq.");
}

function renderHead(exp) {
  document.title = `${exp.name || `Experiment #${exp.id}`} · SLAQ portal`;
  clear($("#experiment-title"), exp.name || `Experiment #${exp.id}`);
  $("#experiment-title").dataset.status = exp.status || "";
  clear($("#experiment-status"), exp.status ? h("span", { class: `badge status-${exp.status}` }, exp.status) : null);
  $("#experiment-counts").replaceWith(renderCounts(exp));
  $("#experiment-summary").replaceWith(renderSummary(exp));
  $("#experiment-stopping").replaceWith(renderStopping(exp));
  const focused = document.activeElement && document.activeElement.id;
  $("#experiment-actions").replaceWith(renderActions(exp));
  renderAddHelp(exp);
  if (focused && focused.startsWith("exp-")) document.getElementById(focused)?.focus();
}

/** The runs as compare.js takes them: the job's own record with the experiment's fields over it. */
async function runs(exp) {
  const rows = exp.jobs || [];
  const stale = rows.filter((r) => {
    const known = state.full.get(r.id);
    return !known || !(TERMINAL.has(known.status) && known.status === r.status);
  });
  await Promise.all(
    stale.map((r) => api(`/api/v1/jobs/${r.id}`).then((job) => state.full.set(r.id, job)).catch(() => null)),
  );
  return rows.map((r) => ({ ...(state.full.get(r.id) || {}), ...r }));
}

/** Name, tags, note and Delete; drawn again only when they change, so an open form stays open. */
function renderLabels(exp) {
  const finished = (exp.jobs || []).every((j) => TERMINAL.has(j.status));
  const key = JSON.stringify([exp.name, exp.tags, exp.note, finished]);
  if (state.labelsKey === key) return;
  state.labelsKey = key;
  clear($("#experiment-labels"), labelsPanel({
    run: exp,
    kind: "experiment",
    finished,
    onSaved: (changed) => {
      state.experiment = { ...state.experiment, ...changed };
      renderHead(state.experiment);
      renderLabels(state.experiment);
    },
    afterDelete: () => window.location.assign("/experiments"),
  }));
}

async function refresh() {
  const exp = await api(`/api/v1/experiments/${EXPERIMENT_ID}`);
  // Every run's details first, then the head and the table together: drawn
  // before them, the head said "Stopped early: 1" while the run's row still
  // said queued, for as long as the runs took to load.
  const rows = await runs(exp);
  state.experiment = exp;
  renderHead(exp);
  renderLabels(exp);
  if (exp.objective) state.view.setObjective(exp.objective);
  await state.view.update(rows);
  const open = (exp.jobs || []).some((j) => !TERMINAL.has(j.status));
  showState($("#experiment-live"), open ? "live" : "off");
  return open;
}

function skeleton(root) {
  clear(
    root,
    h(
      "div",
      { class: "page-head" },
      h("h1", { id: "experiment-title" }, `Experiment #${EXPERIMENT_ID}`),
      h("span", { id: "experiment-status" }),
      h("span", { class: "live-dot", id: "experiment-live", "data-state": "off" }),
    ),
    h("div", { id: "experiment-message", "aria-live": "polite" }),
    h(
      "section",
      { class: "panel" },
      h("dl", { id: "experiment-counts" }),
      h("dl", { id: "experiment-summary" }),
      h("section", { id: "experiment-stopping", hidden: true }),
      h("div", { id: "experiment-actions" }),
    ),
    h("div", { id: "experiment-labels" }),
    addForm(),
    h("div", { id: "experiment-compare" }),
  );
}

async function main() {
  await startPage("experiments");
  await loadUploads();
  const root = $("#experiment-root");
  if (!Number.isInteger(EXPERIMENT_ID) || EXPERIMENT_ID <= 0) {
    clear(root, notice("error", "No such experiment."));
    return;
  }
  try {
    skeleton(root);
    state.view = createCompare($("#experiment-compare"));
    let open = await refresh();
    const poll = async () => {
      if (document.visibilityState === "visible" && !state.busy) {
        try {
          open = await refresh();
        } catch {
          showState($("#experiment-live"), "polling"); // try again next time
        }
      }
      setTimeout(poll, open ? POLL_MS : POLL_MS * 5);
    };
    setTimeout(poll, POLL_MS);
  } catch (err) {
    const text = err instanceof ApiError && err.status === 404 ? `Experiment #${EXPERIMENT_ID} does not exist in your tenant.` : `Could not load the experiment: ${err.message}`;
    clear(root, notice("error", text), h("p", {}, h("a", { href: "/experiments" }, "All experiments")));
  }
}

main();
