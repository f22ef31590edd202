// The admin page's what-if replay: the portal's recent completed jobs,
// simulated under other policies next to how they actually ran. POST
// /api/v1/admin/what-if starts a replay in the background; the page polls
// its state (progress, then the report) at /api/v1/admin/what-if/{id}.
// Platform admins only: it spans every tenant.

import { api } from "./api.js";
import { baseLayout, chartColors, onThemeChange, PLOT_CONFIG, themedAxis, valueAxis } from "./charts.js";
import { clear, formatDuration, formatNumber, formatTime, formatValue, h, notice } from "./dom.js";

const WINDOWS = [["1", "the last hour"], ["24", "the last 24 hours"], ["168", "the last 7 days"]];
const POLICIES = ["fair", "las", "slaq", "fifo", "slaq-classic", "oracle"];
const DEFAULT_POLICIES = new Set(["fair", "las", "slaq"]);
const FIGURES = [
  // The paper's measure averages over the active jobs only; the second
  // counts finished jobs too, so holding converged jobs back earns nothing.
  ["avg_norm_loss", "Avg normalised loss (active jobs)", formatValue],
  ["arrived_norm_loss", "Avg normalised loss (all jobs)", formatValue],
  // 90%, as in the chart below it (the table and the chart tell one story).
  ["t90_mean", "Time to 90% (mean)", formatDuration],
  ["mean_completion", "Mean completion", formatDuration],
  ["makespan", "Makespan", formatDuration],
];
const POLL_MS = 1000;
const BASE = "/api/v1/admin/what-if";

/** "the last hour", "the last 5 hours": the window a replay was asked for. */
function windowLabel(hours) {
  if (!hours) return "the window";
  const known = WINDOWS.find(([value]) => Number(value) === hours);
  if (known) return known[1];
  return `the last ${formatNumber(hours)} hour${hours === 1 ? "" : "s"}`;
}

/** Show `hours` in the window selector, adding it if the API was asked for another. */
function selectWindow(select, hours) {
  if (!hours) return;
  const value = String(hours);
  if (![...select.options].some((o) => o.value === value)) {
    select.append(h("option", { value }, windowLabel(hours)));
  }
  select.value = value;
}

let last = null;
let following = null; // the id of the replay this page shows

/** The section's form; the newest replay (running or done) appears under it. */
export function whatIfSection() {
  const hours = h("select", { id: "what-if-hours", name: "hours" },
    WINDOWS.map(([value, label]) => h("option", { value }, label)));
  hours.value = "24";
  const slots = h("input", { id: "what-if-slots", name: "slots", type: "number", min: "1", max: "4096", placeholder: "as now", "aria-describedby": "what-if-slots-help" });
  const guards = h("input", { id: "what-if-guards", name: "completion_guards", type: "text", inputmode: "decimal", placeholder: "as in force", "aria-describedby": "what-if-guards-help" });
  const weights = h("input", { id: "what-if-weights", name: "completion_weights", type: "text", inputmode: "decimal", placeholder: "as in force", "aria-describedby": "what-if-weights-help" });
  const boxes = POLICIES.map((p) => h("label", { class: "inline-check" },
    h("input", { type: "checkbox", name: "policy", value: p, checked: DEFAULT_POLICIES.has(p) }), ` ${p}`));
  const button = h("button", { type: "submit", class: "btn btn-primary" }, "Replay");
  const form = h("form", { id: "what-if-form", class: "toolbar" },
    h("div", { class: "field" }, h("label", { for: "what-if-hours" }, "Jobs submitted in"), hours),
    h("div", { class: "field" }, h("label", { for: "what-if-slots" }, "Worker slots"), slots,
      h("span", { class: "help", id: "what-if-slots-help" }, "empty: the slots up now")),
    h("div", { class: "field" }, h("label", { for: "what-if-guards" }, "Completion guards"), guards,
      h("span", { class: "help", id: "what-if-guards-help" }, "slaq's, up to 3 from 0 to 1, e.g. 0.25, 0.6")),
    h("div", { class: "field" }, h("label", { for: "what-if-weights" }, "Completion weights"), weights,
      h("span", { class: "help", id: "what-if-weights-help" }, "slaq's, up to 3 from 0 to 1, e.g. 0, 0.01")),
    h("fieldset", {}, h("legend", {}, "Policies to compare"), h("div", { class: "chart-tools" }, boxes)),
    button);
  const out = h("div", { id: "what-if-result", "aria-live": "polite" });
  const show = (run, note = null) => {
    // The selector shows the window of the replay on show (say, after a
    // reload), once: not again on each poll, which would undo a new choice.
    if (following !== run.id) selectWindow(hours, run.hours);
    following = run.id;
    button.disabled = run.state === "running";
    showRun(out, run, note);
    if (run.state === "running") setTimeout(() => poll(run.id, 0), POLL_MS);
  };
  const poll = async (id, failures) => {
    if (following !== id) return;
    try {
      const run = await api(`${BASE}/${id}`);
      if (following === id) show(run);
    } catch (err) {
      if (err.status === 404) {
        button.disabled = false;
        clear(out, notice("error", err.message));
      } else {
        setTimeout(() => poll(id, failures + 1), Math.min(POLL_MS * 2 ** (failures + 1), 30000));
      }
    }
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const policies = [...form.querySelectorAll("input[name=policy]:checked")].map((b) => b.value);
    if (!policies.length) {
      clear(out, notice("error", "Choose at least one policy to compare."));
      return;
    }
    const body = { hours: Number(hours.value), policies };
    if (slots.value) body.slots = Number(slots.value);
    for (const [input, key, what] of [[guards, "completion_guards", "Completion guards"],
      [weights, "completion_weights", "Completion weights"]]) {
      const values = input.value.split(/[\s,]+/).filter(Boolean).map(Number);
      if (values.length > 3 || values.some((v) => !Number.isFinite(v) || v < 0 || v > 1)) {
        clear(out, notice("error", `${what}: up to three numbers from 0 to 1, separated by commas.`));
        return;
      }
      if (values.length) body[key] = values;
    }
    button.disabled = true;
    following = null;
    clear(out, notice("loading", "Starting the replay…"));
    try {
      show(await api(BASE, { method: "POST", body }));
    } catch (err) {
      button.disabled = false;
      clear(out, notice("error", `Could not replay: ${err.message}`));
      // One replay runs at a time: follow the one that holds the cluster.
      if (err.status === 409) api(`${BASE}/latest`).then((run) => show(run, err.message), () => {});
    }
  });
  onThemeChange(() => { if (last) render(out, last.result, last); });
  // 204 (null) when no replay ran in the last day.
  api(`${BASE}/latest`).then((run) => { if (run && following === null) show(run); }, () => {});
  return [
    h("p", { class: "small subtle" },
      "What would the portal's recent history have looked like under another policy? ",
      "Every job submitted in the window that completed is replayed in the simulator with its real loss curve, ",
      "speed and chunk cost, the tenants' current quotas, and the portal's chunk length, next to how it actually ran. ",
      "How it ran also holds what the simulator does not model (worker start-up, waiting for scheduler rounds), ",
      "so compare the policies with each other and read that row as the reference. ",
      "A replay runs in the background, one at a time; a window of thousands of jobs takes about half a minute under slaq."),
    form, out,
  ];
}

/** A replay's state: its progress, its report, or why there is none. */
function showRun(out, run, note) {
  const aside = note ? notice("info", note) : null;
  if (run.state === "done") {
    last = run;
    render(out, run.result, run, aside);
  } else if (run.state === "running") {
    const n = run.policies.length;
    const at = Math.max(0, run.policies.indexOf(run.progress.policy));
    const share = run.jobs ? (at + run.progress.jobs_finished / run.jobs) / n : 0;
    const doing = run.progress.policy
      ? `Replaying under ${run.progress.policy} (${at + 1} of ${n}): ${formatNumber(run.progress.jobs_finished)} of ${formatNumber(run.jobs)} jobs finished…`
      : `Reading the ${formatNumber(run.jobs)} completed jobs submitted in ${windowLabel(run.hours)}…`;
    const who = h("span", { class: "subtle" },
      ` Started ${formatTime(run.started_at)}${run.started_by ? ` by ${run.started_by}` : ""}.`);
    clear(out, aside, notice("loading", doing, who, h("div", { class: "progress" },
      h("progress", { max: "1", value: String(share), "aria-label": "Replay progress" }))));
  } else {
    clear(out, aside, notice("error", `The replay started ${formatTime(run.started_at)} did not finish: ${run.error}`));
  }
}

function render(out, data, run, aside = null) {
  const runs = data.runs;
  const asRun = runs.find((r) => r.label === "as run");
  // Simulated runs compare with each other: the live history also holds costs
  // the simulator does not see, so it is the baseline only when the policy in
  // force was not simulated.
  // A run at another completion guard than the one in force is labelled
  // with it ("slaq (guard 0.6)"), so it is never taken for the policy in force.
  const inForce = runs.find((r) => r.label === data.active_policy);
  const base = inForce || asRun;
  const baseName = inForce ? `${inForce.label}, the policy in force, simulated` : "how they ran";
  const skipped = Object.entries(data.left_out || {}).map(([why, n]) => `${n} ${why}`).join(", ");
  const change = (run, key) => {
    const from = base.figures[key];
    if (run === base || run === asRun || !from) return "";
    const pct = Math.round((100 * (from - run.figures[key])) / from);
    if (pct === 0) return " (same)";
    return ` (${formatNumber(Math.abs(pct))}% ${pct > 0 ? "better" : "worse"})`;
  };
  const table = h("div", { class: "table-wrap" }, h("table", { "data-testid": "what-if-table" },
    h("caption", {}, `${formatNumber(data.jobs)} completed jobs submitted in ${windowLabel(run.hours)} `,
      `(${formatTime(data.since)} to ${formatTime(data.until)}), on ${data.slots} slots, ${data.chunk_seconds} s chunks`,
      data.completion_guard === undefined ? "" : `, completion guard in force ${data.completion_guard}`,
      data.completion_weight ? `, slaq's completion weight in force ${data.completion_weight}` : "",
      `; lower is better, change against ${baseName}`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Run"), FIGURES.map(([, label]) => h("th", { scope: "col" }, label)))),
    h("tbody", {}, runs.map((run) => h("tr", {},
      h("th", { scope: "row" }, run === asRun ? "as it ran" : run.label),
      FIGURES.map(([key, , fmt]) => h("td", { class: "num" }, fmt(run.figures[key]), h("span", { class: "subtle" }, change(run, key)))))))));
  const timeline = h("div", { class: "chart", "data-testid": "what-if-timeline", role: "img", "aria-label": "Mean normalised loss of the active jobs over time, per run" });
  const cdf = h("div", { class: "chart", "data-testid": "what-if-cdf", role: "img", "aria-label": "Share of jobs that reached 90% of their loss reduction, by seconds since arrival, per run" });
  const took = (Date.parse(run.finished_at) - Date.parse(run.started_at)) / 1000;
  const when = h("p", { class: "small subtle", "data-testid": "what-if-when" },
    `Replay started ${formatTime(run.started_at)}${run.started_by ? ` by ${run.started_by}` : ""}, took ${formatDuration(took)}.`);
  clear(out, aside, skipped ? notice("info", `Left out: ${skipped}.`) : null, when, table, timeline, cdf);
  const c = chartColors();
  const margin = { l: 60, r: 16, t: 40, b: 48 };
  const legend = { orientation: "h", x: 0, y: -0.2 };
  const dash = (run) => (run === asRun ? "dot" : "solid");
  Plotly.react(timeline, runs.map((run) => ({
    x: run.timeline.seconds, y: run.timeline.mean_norm_loss, mode: "lines", name: run.label,
    line: { dash: dash(run), width: run === asRun ? 2.5 : 1.8 },
  })), baseLayout({
    title: { text: "Mean normalised loss of active jobs", font: { size: 14, color: c.ink } }, margin, legend,
    xaxis: themedAxis({ title: { text: "seconds since the first job arrived" } }),
    yaxis: valueAxis({ title: { text: "normalised loss" }, rangemode: "tozero" }),
  }), PLOT_CONFIG);
  Plotly.react(cdf, runs.map((run) => ({
    x: run.t90, y: run.t90.map((_, i) => (i + 1) / run.t90.length), mode: "lines", line: { shape: "hv", dash: dash(run) }, name: run.label,
  })), baseLayout({
    title: { text: "Jobs that reached 90% of their loss reduction", font: { size: 14, color: c.ink } }, margin, legend,
    xaxis: themedAxis({ title: { text: "seconds since arrival" } }),
    yaxis: valueAxis({ title: { text: "share of jobs" }, range: [0, 1.02] }),
  }), PLOT_CONFIG);
}
