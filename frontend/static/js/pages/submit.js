// Submit page: a form generated from the catalog's parameter schemas, checked
// in the page and then by the server (422 messages land next to their field;
// a quota refusal, 409, is shown above the form). The tenant's uploaded
// datasets are offered beside the built-in ones for the algorithms whose
// tasks they fit. ?clone=ID pre-fills the form from a job, ?dataset=upload:ID
// picks an upload.

import { api, ApiError, fieldErrors } from "../api.js";
import { $, clear, formatNumber, h, notice } from "../dom.js";
import { startPage } from "../layout.js";
import { datasetLabel, hasDefaultName, loadUploads, uploadId } from "../uploads.js";

const INT32_MAX = 2 ** 31 - 1;

// Field specs, keyed like the server's error locations ("params.l2").
const fields = new Map(); // key -> {spec, input, error}
let catalog = { algorithms: [], datasets: [] };

function idFor(key) {
  return `f-${key.replace(/[^a-zA-Z0-9_-]/g, "-")}`;
}

/** "learning_rate" -> "Learning rate"; "l2" -> "L2". */
function humanize(name) {
  const words = String(name).split("_").join(" ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function describeRange(spec) {
  const parts = [];
  const lo = spec.minimum;
  const hi = spec.maximum;
  const lowOp = spec.exclusiveMinimum ? ">" : "≥";
  const highOp = spec.exclusiveMaximum ? "<" : "≤";
  if (lo !== null && lo !== undefined && hi !== null && hi !== undefined) {
    parts.push(`${lowOp} ${lo} and ${highOp} ${hi}`);
  } else if (lo !== null && lo !== undefined) parts.push(`${lowOp} ${lo}`);
  else if (hi !== null && hi !== undefined) parts.push(`${highOp} ${hi}`);
  if (spec.type === "int") parts.push("whole number");
  if (spec.log_scale) parts.push("log scale");
  return parts.length ? ` (${parts.join(", ")})` : "";
}

/** One labelled input for a schema entry: {name, type, default, minimum, maximum, choices, help}. */
function fieldFor(key, spec) {
  const id = idFor(key);
  const helpId = `${id}-help`;
  const errorId = `${id}-error`;
  let input;
  if (spec.type === "choice") {
    input = h(
      "select",
      { id, name: key, "aria-describedby": `${helpId} ${errorId}` },
      (spec.choices || []).map((c) => h("option", { value: c }, c)),
    );
    if (spec.default !== null && spec.default !== undefined) input.value = String(spec.default);
  } else {
    input = h("input", {
      id,
      name: key,
      type: "text",
      inputmode: spec.type === "int" ? "numeric" : "decimal",
      autocomplete: "off",
      spellcheck: "false",
      "aria-describedby": `${helpId} ${errorId}`,
      placeholder: spec.optional && spec.type !== "text" ? "none" : null,
    });
    input.value = spec.default === null || spec.default === undefined ? "" : String(spec.default);
  }
  if (!spec.optional && spec.type !== "choice") input.setAttribute("aria-required", "true");
  const error = h("span", { class: "field-error", id: errorId });
  input.addEventListener("change", () => showError(key, validateField(key)));
  fields.set(key, { spec, input, error });
  const label = spec.label || humanize(spec.name);
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label, spec.optional ? h("span", { class: "subtle" }, " (optional)") : null),
    input,
    h("span", { class: "help", id: helpId }, `${spec.help || ""}${describeRange(spec)}`.trim()),
    error,
  );
}

function parseValue(spec, raw) {
  const text = raw.trim();
  if (spec.type === "choice" || spec.type === "text") return { value: text };
  if (text === "") return spec.optional ? { value: null } : { error: "Enter a value." };
  const n = Number(text);
  if (!Number.isFinite(n)) return { error: "Enter a number." };
  if (spec.type === "int" && !Number.isInteger(n)) return { error: "Enter a whole number." };
  const lo = spec.minimum;
  const hi = spec.maximum;
  const tooLow =
    lo !== null && lo !== undefined && (spec.exclusiveMinimum ? n <= lo : n < lo);
  const tooHigh =
    hi !== null && hi !== undefined && (spec.exclusiveMaximum ? n >= hi : n > hi);
  if (tooLow || tooHigh) return { error: `Must be${describeRange({ ...spec, log_scale: false, type: "" })}.` };
  return { value: n };
}

function validateField(key) {
  const f = fields.get(key);
  if (!f) return "";
  const parsed = parseValue(f.spec, f.input.value);
  return parsed.error || "";
}

function showError(key, message) {
  const f = fields.get(key);
  if (!f) return false;
  f.error.textContent = message || "";
  if (message) f.input.setAttribute("aria-invalid", "true");
  else f.input.removeAttribute("aria-invalid");
  return true;
}

function clearErrors() {
  for (const key of fields.keys()) showError(key, "");
  clear($("#form-message"));
}

// ---- building the form ----

function algorithm() {
  return catalog.algorithms.find((a) => a.name === $("#f-algorithm").value);
}

function dataset() {
  return catalog.datasets.find((d) => d.name === $("#f-dataset").value);
}

function dropFields(prefix) {
  for (const key of [...fields.keys()]) if (key.startsWith(prefix)) fields.delete(key);
}

function renderParams(container, prefix, params, values = {}) {
  dropFields(`${prefix}.`);
  const fieldset = container;
  const list = params || [];
  fieldset.hidden = list.length === 0;
  const grid = h("div", { class: "fields" });
  for (const p of list) {
    grid.appendChild(fieldFor(`${prefix}.${p.name}`, p));
    if (p.name in values && values[p.name] !== null && values[p.name] !== undefined) {
      fields.get(`${prefix}.${p.name}`).input.value = String(values[p.name]);
    }
  }
  clear(fieldset, h("legend", {}, fieldset.dataset.legend), grid);
}

function compatibleDatasets(algo) {
  const tasks = new Set(algo ? algo.tasks : []);
  return catalog.datasets.filter((d) => (d.tasks || []).some((t) => tasks.has(t)));
}

function datasetOptions(options) {
  const option = (d) => h("option", { value: d.name }, d.title || d.name);
  const uploads = options.filter((d) => d.upload);
  const builtIn = options.filter((d) => !d.upload);
  if (!uploads.length) return builtIn.map(option);
  return [
    h("optgroup", { label: "Your uploads" }, uploads.map(option)),
    h("optgroup", { label: "Built-in" }, builtIn.map(option)),
  ];
}

/** An upload as the catalog describes a dataset (uploads take no parameters). */
function uploadEntry(d) {
  const shape = [`${formatNumber(d.rows)} rows`, `${formatNumber(d.columns)} features`];
  if (d.n_classes) shape.push(`${formatNumber(d.n_classes)} classes`);
  return {
    name: d.dataset,
    title: `${d.name} (uploaded)`,
    description: `Your uploaded ${d.task} CSV: ${shape.join(", ")}.`,
    tasks: d.tasks,
    params: [],
    upload: true,
  };
}

function onAlgorithmChange(values = {}, datasetName = null) {
  const algo = algorithm();
  $("#algorithm-description").textContent = algo
    ? `${algo.description} Tasks: ${algo.tasks.join(", ")}.`
    : "";
  const select = $("#f-dataset");
  const keep = datasetName || select.value;
  const options = compatibleDatasets(algo);
  clear(select, datasetOptions(options));
  if (options.some((d) => d.name === keep)) select.value = keep;
  select.disabled = options.length === 0;
  showError("dataset", options.length ? "" : "No dataset suits this algorithm's tasks.");
  renderParams($("#algo-params"), "params", algo ? algo.params : [], values.params || {});
  onDatasetChange(values.dataset_params || {});
}

function onDatasetChange(values = {}) {
  const ds = dataset();
  $("#dataset-description").textContent = ds
    ? `${ds.description} Tasks: ${(ds.tasks || []).join(", ")}.`
    : "";
  renderParams($("#dataset-params"), "dataset_params", ds ? ds.params : [], values);
}

const STOPPING = [
  {
    name: "max_iterations",
    label: "Maximum iterations",
    type: "int",
    default: 1000,
    minimum: 1,
    maximum: null,
    help: "Stop after this many iterations; your tenant's per-job limit applies.",
  },
  {
    name: "target_loss",
    label: "Target loss",
    type: "float",
    default: null,
    optional: true,
    help: "Stop once the loss is at or below this.",
  },
  {
    name: "tolerance",
    label: "Convergence tolerance",
    type: "float",
    default: 0.0001,
    minimum: 0,
    maximum: 1,
    exclusiveMinimum: true,
    exclusiveMaximum: true,
    optional: true,
    help: "Converged when the relative loss change over the window is below this; empty disables the test.",
  },
  {
    name: "window",
    label: "Convergence window",
    type: "int",
    default: 10,
    minimum: 1,
    maximum: 1000,
    help: "Iterations the convergence test spans.",
  },
];

function buildForm(root) {
  fields.clear();
  const algoSelect = h(
    "select",
    { id: "f-algorithm", name: "algorithm", "aria-describedby": "algorithm-description f-algorithm-error" },
    catalog.algorithms.map((a) => h("option", { value: a.name }, a.title || a.name)),
  );
  const dsSelect = h("select", {
    id: "f-dataset",
    name: "dataset",
    "aria-describedby": "dataset-description f-dataset-error",
  });
  const algoError = h("span", { class: "field-error", id: "f-algorithm-error" });
  const dsError = h("span", { class: "field-error", id: "f-dataset-error" });
  fields.set("algorithm", { spec: { type: "choice" }, input: algoSelect, error: algoError });
  fields.set("dataset", { spec: { type: "choice" }, input: dsSelect, error: dsError });

  const general = h(
    "fieldset",
    {},
    h("legend", {}, "What to train"),
    h(
      "div",
      { class: "fields" },
      h(
        "div",
        { class: "field" },
        h("label", { for: "f-algorithm" }, "Algorithm"),
        algoSelect,
        h("span", { class: "help", id: "algorithm-description" }),
        algoError,
      ),
      h(
        "div",
        { class: "field" },
        h("label", { for: "f-dataset" }, "Dataset"),
        dsSelect,
        h("span", { class: "help", id: "dataset-description" }),
        dsError,
      ),
      fieldFor("name", {
        name: "name",
        label: "Name",
        type: "text",
        default: "",
        optional: true,
        help: "A label for the jobs list; up to 200 characters.",
      }),
      fieldFor("seed", {
        name: "seed",
        label: "Seed",
        type: "int",
        default: 0,
        minimum: 0,
        maximum: INT32_MAX,
        help: "Random seed; the same seed reproduces the same run.",
      }),
    ),
  );
  const stopping = h(
    "fieldset",
    {},
    h("legend", {}, "Stopping rule"),
    h("div", { class: "fields" }, STOPPING.map((s) => fieldFor(`stopping.${s.name}`, s))),
  );
  const form = h(
    "form",
    { id: "submit-form", novalidate: true, "aria-describedby": "form-message" },
    h("div", { id: "form-message", "aria-live": "polite" }),
    general,
    h("fieldset", { id: "algo-params", dataset: { legend: "Algorithm parameters" } }),
    h("fieldset", { id: "dataset-params", dataset: { legend: "Dataset parameters" } }),
    stopping,
    h(
      "div",
      { class: "btn-row" },
      h("button", { type: "submit", class: "btn btn-primary", id: "submit-button" }, "Submit job"),
      h("a", { class: "btn", href: "/jobs" }, "Cancel"),
    ),
  );
  clear(root, form);
  algoSelect.addEventListener("change", () => onAlgorithmChange());
  dsSelect.addEventListener("change", () => onDatasetChange());
  form.addEventListener("submit", onSubmit);
  const nameField = fields.get("name");
  nameField.input.maxLength = 200;
}

function fill(job) {
  $("#f-algorithm").value = job.algorithm;
  onAlgorithmChange({ params: job.params, dataset_params: job.dataset_params }, job.dataset);
  if ($("#f-dataset").value !== job.dataset) {
    const known = catalog.datasets.some((d) => d.name === job.dataset);
    showError("dataset", uploadId(job.dataset) !== null && !known
      ? `The job trained on ${datasetLabel(job.dataset)}, which your tenant no longer has; choose another dataset.`
      : `Dataset ${datasetLabel(job.dataset)} is not available for this algorithm.`);
  }
  const set = (key, value) => {
    const f = fields.get(key);
    if (f) f.input.value = value === null || value === undefined ? "" : String(value);
  };
  // A default name ("<algorithm> on <dataset>") is the server's to choose again.
  set("name", hasDefaultName(job) ? "" : `${job.name} (copy)`.slice(0, 200));
  set("seed", job.seed);
  for (const s of STOPPING) set(`stopping.${s.name}`, job.stopping[s.name]);
}

/** Preselect a dataset (?dataset=...), with the first algorithm that can train it. */
function pickDataset(name) {
  const ds = catalog.datasets.find((d) => d.name === name);
  if (!ds) {
    onAlgorithmChange();
    showError("dataset", `Dataset ${datasetLabel(name)} is not available to you.`);
    return;
  }
  const algo = catalog.algorithms.find((a) => a.tasks.some((t) => (ds.tasks || []).includes(t)));
  if (algo) $("#f-algorithm").value = algo.name;
  onAlgorithmChange({}, name);
}

// ---- submitting ----

function collect() {
  const errors = {};
  const body = { params: {}, dataset_params: {}, stopping: {} };
  for (const [key, f] of fields) {
    const parsed = parseValue(f.spec, f.input.value);
    if (parsed.error) {
      errors[key] = parsed.error;
      continue;
    }
    const [group, name] = key.includes(".") ? key.split(/\.(.+)/) : [null, key];
    if (group) body[group][name] = parsed.value;
    else body[name] = parsed.value;
  }
  if (!body.algorithm) errors.algorithm = "Choose an algorithm.";
  if (!body.dataset) errors.dataset = "Choose a dataset.";
  return { body, errors };
}

function showErrors(errors, intro) {
  const unplaced = [];
  for (const [key, message] of Object.entries(errors)) {
    if (key === "_form" || !showError(key, message)) {
      unplaced.push(key === "_form" ? message : `${key}: ${message}`);
    }
  }
  // The first invalid field in reading order gets the focus.
  const first = $("#submit-form [aria-invalid='true']");
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
  (first || $("#form-message")).focus?.();
}

async function onSubmit(event) {
  event.preventDefault();
  clearErrors();
  const { body, errors } = collect();
  if (Object.keys(errors).length) {
    showErrors(errors, "The job was not submitted.");
    return;
  }
  const button = $("#submit-button");
  button.disabled = true;
  clear($("#form-message"), notice("loading", "Submitting…"));
  try {
    const job = await api("/api/v1/jobs", { method: "POST", body });
    clear($("#form-message"), notice("success", `Job #${job.id} submitted. Opening it…`));
    window.location.assign(`/jobs/${job.id}`);
  } catch (err) {
    button.disabled = false;
    if (err instanceof ApiError && err.status === 422) {
      showErrors(fieldErrors(err.detail), "The server refused the job.");
    } else if (err instanceof ApiError && err.status === 409) {
      const d = err.detail && typeof err.detail === "object" ? err.detail : {};
      clear(
        $("#form-message"),
        notice(
          "error",
          h("strong", {}, "Over your tenant's quota. "),
          h("span", { "data-testid": "quota-message" }, d.message || err.message),
          d.quota ? h("div", { class: "small" }, `Quota ${d.quota}: limit ${d.limit}, in use ${d.usage}.`) : null,
        ),
      );
      $("#form-message").focus?.();
    } else {
      clear($("#form-message"), notice("error", `Could not submit: ${err.message}`));
    }
  }
}

async function main() {
  const me = await startPage("submit");
  const root = $("#submit-root");
  try {
    const [algorithms, datasets, uploads] = await Promise.all([
      api("/api/v1/catalog/algorithms"),
      api("/api/v1/catalog/datasets"),
      loadUploads(),
    ]);
    // Jobs train on their own tenant's uploads only (a platform admin lists every tenant's).
    const own = uploads.filter((d) => d.tenant_id === me.tenant_id).map(uploadEntry);
    catalog = { algorithms, datasets: [...own, ...datasets] };
  } catch (err) {
    clear(root, notice("error", `Could not load the catalog: ${err.message}`));
    return;
  }
  if (!catalog.algorithms.length) {
    clear(root, notice("info", "No algorithms are installed on this portal."));
    return;
  }
  buildForm(root);
  $("#form-message").tabIndex = -1;
  const cloneId = new URLSearchParams(window.location.search).get("clone");
  if (cloneId) {
    try {
      const job = await api(`/api/v1/jobs/${encodeURIComponent(cloneId)}`);
      fill(job);
      clear(
        $("#form-message"),
        notice("info", `Pre-filled from job #${job.id}. Change what you like and submit.`),
      );
      return;
    } catch (err) {
      onAlgorithmChange();
      clear($("#form-message"), notice("error", `Could not copy job ${cloneId}: ${err.message}`));
      return;
    }
  }
  const wanted = new URLSearchParams(window.location.search).get("dataset");
  if (wanted) {
    pickDataset(wanted);
    return;
  }
  onAlgorithmChange();
}

main();
