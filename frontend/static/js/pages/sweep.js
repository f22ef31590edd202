// New sweep, /experiments/new: an experiment from a search space. Each of the
// algorithm's parameters is either fixed (one value for every run) or swept
// (a set of choices, or a linear or log range); a grid or seeded random
// sampler picks the configurations, whose number is shown before submitting.
// The server checks it all (422 messages land by their field; a quota
// refusal, 409, refuses the whole sweep and is shown above the form).

import { api, ApiError, fieldErrors } from "../api.js";
import { $, clear, formatNumber, h, notice } from "../dom.js";
import {
  algorithmOptions,
  catalogForForm,
  compatibleDatasets,
  datasetOptions,
  describeRange,
  EVALUATION_FIELDS,
  FieldSet,
  humanize,
  idFor,
  showRefusal,
  STOPPING_FIELDS,
} from "../form-fields.js";
import { startPage } from "../layout.js";

const INT32_MAX = 2 ** 31 - 1;
const form = new FieldSet();
const swept = new Map(); // param name -> {spec, mode select, choice boxes}
let catalog = { algorithms: [], datasets: [] };

const OBJECTIVE_METRICS = ["loss", "val_loss", "val_accuracy", "accuracy"];

function algorithm() {
  return catalog.algorithms.find((a) => a.name === $("#f-algorithm").value);
}

function dataset() {
  return catalog.datasets.find((d) => d.name === $("#f-dataset").value);
}

// ---- the search space ----

/** A sensible starting range: a decade either side of a log-scaled default, else the bounds. */
function startRange(spec) {
  const d = Number(spec.default);
  const lo = spec.minimum ?? null;
  const hi = spec.maximum ?? null;
  let low;
  let high;
  if (spec.log_scale && d > 0) {
    low = d / 10;
    high = d * 10;
  } else {
    low = lo ?? d;
    high = hi ?? d;
  }
  if (lo !== null && (low < lo || (spec.exclusiveMinimum && low <= lo))) low = spec.exclusiveMinimum ? d : lo;
  if (hi !== null && high > hi) high = hi;
  if (spec.type === "int") {
    low = Math.ceil(low);
    high = Math.floor(high);
  }
  return { low: Number(low.toPrecision(6)), high: Number(high.toPrecision(6)) };
}

function sweepControls(spec) {
  const key = `space.${spec.name}`;
  if (spec.type === "choice") {
    const boxes = (spec.choices || []).map((c) =>
      h(
        "label",
        { class: "inline-check" },
        h("input", { type: "checkbox", value: c, name: `${key}.values`, checked: true, onChange: updateCount }),
        c,
      ),
    );
    const error = h("span", { class: "field-error", id: `${idFor(key)}-values-error` });
    form.adopt(`${key}.values`, { type: "text" }, boxes[0]?.querySelector("input") || h("input"), error);
    return { node: h("div", { class: "sweep-range" }, h("span", { class: "label" }, "Values to try"), h("div", { class: "choice-row" }, boxes), error), boxes };
  }
  const start = startRange(spec);
  const bounds = { type: spec.type, minimum: spec.minimum, maximum: spec.maximum, exclusiveMinimum: spec.exclusiveMinimum };
  const low = form.field(`${key}.low`, { ...bounds, name: "low", label: "From", default: start.low, noRange: true });
  const high = form.field(`${key}.high`, { ...bounds, name: "high", label: "To", default: start.high, noRange: true });
  const log = h("input", { type: "checkbox", id: idFor(`${key}.log`), name: `${key}.log`, checked: Boolean(spec.log_scale), onChange: updateCount });
  for (const k of ["low", "high"]) form.get(`${key}.${k}`).input.addEventListener("input", updateCount);
  return {
    node: h("div", { class: "sweep-range fields" }, low, high, h("label", { class: "inline-check", for: idFor(`${key}.log`) }, log, "Log scale")),
    log,
  };
}

/** One parameter: a fixed value, or a range or set of choices to sweep. */
function paramRow(spec, values) {
  const name = spec.name;
  const title = spec.label || humanize(name);
  const fixed = form.field(`params.${name}`, { ...spec, label: "Value for every run" });
  if (name in values && values[name] !== null) form.get(`params.${name}`).input.value = String(values[name]);
  const mode = h(
    "select",
    { id: idFor(`mode.${name}`), name: `mode.${name}`, "aria-label": `${title}: fixed or swept` },
    h("option", { value: "fixed" }, "Fixed"),
    h("option", { value: "sweep" }, "Sweep"),
  );
  const sweep = sweepControls(spec);
  const sweepBox = h("div", { class: "sweep-box", hidden: true }, sweep.node, h("span", { class: "help" }, `${spec.help || ""}${describeRange(spec)}`.trim()));
  const row = h(
    "fieldset",
    { class: "param-row", dataset: { param: name } },
    h("legend", {}, title),
    h("div", { class: "param-mode" }, mode),
    h("div", { class: "param-body" }, fixed, sweepBox),
  );
  const apply = () => {
    const sweeping = mode.value === "sweep";
    sweepBox.hidden = !sweeping;
    fixed.hidden = sweeping;
    updateCount();
  };
  mode.addEventListener("change", apply);
  swept.set(name, { spec, mode, ...sweep });
  return row;
}

function renderParams(container, prefix, params, values = {}, sweepable = false) {
  form.drop(`${prefix}.`);
  if (sweepable) {
    form.drop("space.");
    swept.clear();
  }
  const list = params || [];
  container.hidden = list.length === 0;
  const body = sweepable
    ? h("div", { class: "param-rows" }, list.map((p) => paramRow(p, values)))
    : h("div", { class: "fields" }, list.map((p) => {
        const node = form.field(`${prefix}.${p.name}`, p);
        if (p.name in values && values[p.name] !== null) form.get(`${prefix}.${p.name}`).input.value = String(values[p.name]);
        return node;
      }));
  clear(container, h("legend", {}, container.dataset.legend), body);
}

function onAlgorithmChange() {
  const algo = algorithm();
  $("#algorithm-description").textContent = algo ? `${algo.description} Tasks: ${algo.tasks.join(", ")}.` : "";
  const select = $("#f-dataset");
  const keep = select.value;
  const options = compatibleDatasets(catalog, algo);
  clear(select, datasetOptions(options));
  if (options.some((d) => d.name === keep)) select.value = keep;
  select.disabled = options.length === 0;
  form.showError("dataset", options.length ? "" : "No dataset suits this algorithm's tasks.");
  const params = algo ? algo.params : [];
  renderParams($("#algo-params"), "params", params, {}, true);
  if (algo && algo.code) {
    clear($("#algo-params"), h("legend", {}, "Algorithm parameters"),
      notice("info", "Uploaded trainers declare their parameters themselves: sweeps over them are submitted over the API (POST /api/v1/experiments)."));
    $("#algo-params").hidden = false;
  }
  onDatasetChange();
  updateCount();
}

function onDatasetChange() {
  const ds = dataset();
  $("#dataset-description").textContent = ds ? `${ds.description} Tasks: ${(ds.tasks || []).join(", ")}.` : "";
  renderParams($("#dataset-params"), "dataset_params", ds ? ds.params : []);
}

// ---- counting configurations ----

function roundHalfEven(v) {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The grid's values of a range: `points` evenly (or log-evenly) spaced, whole numbers deduplicated. */
export function gridValues(spec, low, high, log, points) {
  if (!(Number.isFinite(low) && Number.isFinite(high)) || high < low || points < 1) return [];
  if (log && low <= 0) return [];
  // As the server samples (backend/services/experiment_specs.py): one point is the
  // range's (geometric) middle; whole numbers round half to even, duplicates merge.
  let raw;
  if (points === 1 || low === high) raw = [log ? Math.sqrt(low * high) : (low + high) / 2];
  else {
    raw = [];
    for (let i = 0; i < points; i += 1) {
      const t = i / (points - 1);
      raw.push(log ? Math.exp(Math.log(low) + t * (Math.log(high) - Math.log(low))) : low + t * (high - low));
    }
  }
  return [...new Set(spec.type === "int" ? raw.map(roundHalfEven) : raw)];
}

/** The number of configurations the sampler will make, or an explanation why none. */
function countConfigurations() {
  const kind = form.get("sampler.kind")?.input.value || "grid";
  const sweeping = [...swept.values()].filter((s) => s.mode.value === "sweep");
  if (!sweeping.length) return { n: 1, note: "Nothing is swept: the sweep has one configuration." };
  if (kind === "random") {
    const samples = form.parse("sampler.samples");
    return samples.error ? { n: null, note: "Enter the number of samples." } : { n: samples.value };
  }
  const points = form.parse("sampler.points");
  if (points.error) return { n: null, note: "Enter the points per range." };
  let n = 1;
  for (const s of sweeping) {
    if (s.spec.type === "choice") {
      n *= s.boxes.filter((b) => b.querySelector("input").checked).length;
    } else {
      const low = form.parse(`space.${s.spec.name}.low`);
      const high = form.parse(`space.${s.spec.name}.high`);
      if (low.error || high.error) return { n: null, note: `Check the range of ${s.spec.name}.` };
      n *= gridValues(s.spec, low.value, high.value, s.log.checked, points.value).length;
    }
  }
  return { n };
}

function updateCount() {
  const out = $("#config-count");
  if (!out) return;
  const kind = form.get("sampler.kind")?.input.value || "grid";
  for (const el of document.querySelectorAll("[data-sampler]")) el.hidden = el.dataset.sampler !== kind;
  const { n, note } = countConfigurations();
  out.dataset.count = n === null ? "" : String(n);
  clear(
    out,
    n === null ? "" : h("strong", {}, `${formatNumber(n)} configuration${n === 1 ? "" : "s"}`),
    n === null ? "" : n === 1 ? " (one job)" : ` (${formatNumber(n)} jobs)`,
    note ? h("span", { class: "subtle" }, ` ${note}`) : "",
  );
}

// ---- the form ----

const SAMPLER = [
  { name: "kind", label: "Sampler", type: "choice", choices: ["grid", "random"], default: "grid", help: "Grid: every combination. Random: seeded draws from the ranges." },
  { name: "points", label: "Points per range", type: "int", default: 3, minimum: 1, maximum: 100, help: "Grid values taken from each swept range.", sampler: "grid" },
  { name: "samples", label: "Samples", type: "int", default: 8, minimum: 1, maximum: 1000, help: "Configurations drawn at random.", sampler: "random" },
  { name: "seed", label: "Sampler seed", type: "int", default: 0, minimum: 0, maximum: INT32_MAX, help: "The same seed draws the same configurations.", sampler: "random" },
];

const OBJECTIVE = [
  { name: "metric", label: "Metric to optimise", type: "choice", choices: OBJECTIVE_METRICS, default: "loss", help: "val_* metrics need evaluation (Evaluate every above 0)." },
  { name: "mode", label: "Goal", type: "choice", choices: ["min", "max"], default: "min", help: "min for losses, max for accuracies." },
];

const EARLY = [
  { name: "rule", label: "Early stopping", type: "choice", choices: ["none", "predictive", "asha"], default: "none", help: "predictive: stop runs whose predicted final value cannot reach the top k. asha: successive halving, as a baseline." },
  { name: "top_k", label: "Top k", type: "int", default: 3, minimum: 1, maximum: 1000, help: "Runs a stopped one is measured against.", rule: "predictive" },
  { name: "min_iterations", label: "Minimum iterations", type: "int", default: 100, minimum: 1, maximum: null, help: "No run is stopped before this many iterations.", rule: "any" },
  { name: "reduction", label: "Reduction factor", type: "int", default: 3, minimum: 2, maximum: 100, help: "ASHA keeps one run in this many at each rung.", rule: "asha" },
];

function section(legend, ...children) {
  return h("fieldset", {}, h("legend", {}, legend), ...children);
}

function wrapped(attr, value, node) {
  node.dataset[attr] = value;
  return node;
}

function buildForm(root) {
  const algoSelect = h("select", { id: "f-algorithm", name: "algorithm", "aria-describedby": "algorithm-description f-algorithm-error" }, algorithmOptions(catalog));
  const dsSelect = h("select", { id: "f-dataset", name: "dataset", "aria-describedby": "dataset-description f-dataset-error" });
  const algoError = h("span", { class: "field-error", id: "f-algorithm-error" });
  const dsError = h("span", { class: "field-error", id: "f-dataset-error" });
  form.adopt("algorithm", { type: "choice" }, algoSelect, algoError);
  form.adopt("dataset", { type: "choice" }, dsSelect, dsError);

  const general = section(
    "What to train",
    h(
      "div",
      { class: "fields" },
      form.field("name", { name: "name", label: "Experiment name", type: "text", default: "", optional: true, help: "Names the experiment and its runs (empty: the server names it); up to 200 characters." }),
      form.field("seed", { name: "seed", label: "Seed", type: "int", default: 0, minimum: 0, maximum: INT32_MAX, help: "Every run's training seed." }),
      h("div", { class: "field" }, h("label", { for: "f-algorithm" }, "Algorithm"), algoSelect, h("span", { class: "help", id: "algorithm-description" }), algoError),
      h("div", { class: "field" }, h("label", { for: "f-dataset" }, "Dataset"), dsSelect, h("span", { class: "help", id: "dataset-description" }), dsError),
    ),
  );
  const sampler = section(
    "Sampler",
    h("div", { class: "fields" }, SAMPLER.map((s) => {
      const node = form.field(`sampler.${s.name}`, s);
      return s.sampler ? wrapped("sampler", s.sampler, node) : node;
    })),
  );
  const objective = section("Objective", h("div", { class: "fields" }, OBJECTIVE.map((s) => form.field(`objective.${s.name}`, s))));
  const early = section("Early stopping", h("div", { class: "fields" }, EARLY.map((s) => wrapped("rule", s.rule || "", form.field(`early_stopping.${s.name}`, s)))));
  const evaluation = section("Evaluation", h("div", { class: "fields" }, EVALUATION_FIELDS.map((s) => form.field(s.name, s))));
  const stopping = section("Each run's stopping rule", h("div", { class: "fields" }, STOPPING_FIELDS.map((s) => form.field(`stopping.${s.name}`, s))));
  const el = h(
    "form",
    { id: "sweep-form", novalidate: true, "aria-describedby": "form-message" },
    h("div", { id: "form-message", "aria-live": "polite", tabindex: "-1" }),
    general,
    h("fieldset", { id: "algo-params", dataset: { legend: "Algorithm parameters: fixed or swept" } }),
    h("fieldset", { id: "dataset-params", dataset: { legend: "Dataset parameters" } }),
    sampler,
    objective,
    early,
    evaluation,
    stopping,
    h("p", { id: "config-count", class: "config-count", "aria-live": "polite" }),
    h(
      "div",
      { class: "btn-row" },
      h("button", { type: "submit", class: "btn btn-primary", id: "submit-button" }, "Start the sweep"),
      h("a", { class: "btn", href: "/experiments" }, "Cancel"),
    ),
  );
  clear(root, el);
  form.get("name").input.maxLength = 200;
  algoSelect.addEventListener("change", onAlgorithmChange);
  dsSelect.addEventListener("change", onDatasetChange);
  for (const key of ["sampler.kind", "sampler.points", "sampler.samples"]) {
    form.get(key).input.addEventListener("input", updateCount);
    form.get(key).input.addEventListener("change", updateCount);
  }
  const metric = form.get("objective.metric").input;
  metric.addEventListener("change", () => {
    form.get("objective.mode").input.value = /acc/.test(metric.value) ? "max" : "min";
  });
  const rule = form.get("early_stopping.rule").input;
  const showRule = () => {
    for (const node of el.querySelectorAll("[data-rule]")) {
      const r = node.dataset.rule;
      node.hidden = r !== "" && (rule.value === "none" || (r !== "any" && r !== rule.value));
    }
  };
  rule.addEventListener("change", showRule);
  showRule();
  el.addEventListener("submit", onSubmit);
}

// ---- submitting ----

function collect() {
  const errors = {};
  const body = { params: {}, dataset_params: {}, space: {}, sampler: {}, stopping: {}, objective: {}, early_stopping: {} };
  const sweeping = new Set([...swept.values()].filter((s) => s.mode.value === "sweep").map((s) => s.spec.name));
  for (const [key, f] of form.fields) {
    if (key.startsWith("space.")) continue;
    const [group, name] = key.includes(".") ? key.split(/\.(.+)/) : [null, key];
    if (group === "params" && sweeping.has(name)) continue;
    if (group === "sampler" && name !== "kind" && f.input.closest("[data-sampler]")?.hidden) continue;
    if (group === "early_stopping" && f.input.closest("[data-rule]")?.hidden) continue;
    const parsed = form.parse(key);
    if (parsed.error) {
      errors[key] = parsed.error;
      continue;
    }
    if (parsed.unset && f.spec.offWord) continue;
    if (group) body[group][name] = parsed.value;
    else body[name] = parsed.value;
  }
  for (const name of sweeping) {
    const s = swept.get(name);
    if (s.spec.type === "choice") {
      const values = s.boxes.map((b) => b.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
      if (!values.length) errors[`space.${name}.values`] = "Tick at least one value.";
      body.space[name] = { type: "choice", values };
      continue;
    }
    const low = form.parse(`space.${name}.low`);
    const high = form.parse(`space.${name}.high`);
    if (low.error) errors[`space.${name}.low`] = low.error;
    if (high.error) errors[`space.${name}.high`] = high.error;
    if (!low.error && !high.error && high.value < low.value) errors[`space.${name}.high`] = "Must be at least the From value.";
    if (s.log.checked && !low.error && low.value <= 0) errors[`space.${name}.low`] = "A log range must start above 0.";
    body.space[name] = { type: s.spec.type, low: low.value, high: high.value, log: s.log.checked };
  }
  if (!body.algorithm) errors.algorithm = "Choose an algorithm.";
  if (!body.dataset) errors.dataset = "Choose a dataset.";
  return { body, errors };
}

/**
 * The field a server error belongs to. Pydantic names a range's type in the
 * location ("space.learning_rate.float.low", or "space.learning_rate.float"
 * for low above high); errors about a swept parameter as a whole land by its
 * upper bound or its values.
 */
function placeKey(key) {
  if (form.has(key)) return key;
  const m = /^space\.([^.]+)(?:\.(?:choice|float|int))?(?:\.(.+))?$/.exec(key);
  if (!m) return key;
  const candidates = [m[2] ? `space.${m[1]}.${m[2]}` : null, `space.${m[1]}.high`, `space.${m[1]}.values`];
  return candidates.find((k) => k && form.has(k)) || key;
}

function showErrors(errors, intro) {
  const unplaced = [];
  for (const [key, message] of Object.entries(errors)) {
    if (key === "_form" || !form.showError(placeKey(key), message)) unplaced.push(key === "_form" ? message : `${key}: ${message}`);
  }
  const count = Object.keys(errors).length - unplaced.length;
  clear(
    $("#form-message"),
    notice(
      "error",
      h("strong", {}, intro),
      count ? ` Fix the ${count === 1 ? "field" : `${count} fields`} marked below.` : "",
      unplaced.length ? h("ul", {}, unplaced.map((m) => h("li", {}, m))) : null,
    ),
  );
  ($("#sweep-form [aria-invalid='true']") || $("#form-message")).focus?.();
}

async function onSubmit(event) {
  event.preventDefault();
  form.clearErrors();
  clear($("#form-message"));
  const { body, errors } = collect();
  if (Object.keys(errors).length) {
    showErrors(errors, "The sweep was not submitted.");
    return;
  }
  const button = $("#submit-button");
  button.disabled = true;
  clear($("#form-message"), notice("loading", "Submitting the sweep…"));
  try {
    const exp = await api("/api/v1/experiments", { method: "POST", body });
    const n = (exp.job_ids || []).length;
    clear($("#form-message"), notice("success", `Experiment #${exp.id} submitted with ${formatNumber(n)} runs. Opening it…`));
    window.location.assign(`/experiments/${exp.id}`);
  } catch (err) {
    button.disabled = false;
    if (err instanceof ApiError && err.status === 422) {
      showErrors(fieldErrors(err.detail), "The server refused the sweep.");
    } else {
      showRefusal(err, "Over your tenant's quota: nothing was submitted. ");
    }
  }
}

async function main() {
  const me = await startPage("experiments");
  const root = $("#sweep-root");
  catalog = await catalogForForm(me, root);
  if (!catalog) return;
  buildForm(root);
  onAlgorithmChange();
}

main();
