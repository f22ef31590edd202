// Submit page: a form generated from the catalog's parameter schemas, checked
// in the page and then by the server (422 messages land next to their field;
// a quota refusal, 409, is shown above the form). The tenant's uploaded
// datasets are offered beside the built-in ones for the algorithms whose
// tasks they fit. ?clone=ID pre-fills the form from a job, ?dataset=upload:ID
// picks an upload.

import { api, ApiError, fieldErrors } from "../api.js";
import { $, clear, h, notice } from "../dom.js";
import { startPage } from "../layout.js";
import {
  algorithmOptions as sharedAlgorithmOptions,
  catalogForForm,
  compatibleDatasets as sharedCompatibleDatasets,
  datasetOptions,
  EVALUATION_FIELDS,
  REQUIREMENT_FIELDS,
  requirementsBody,
  requirementsFields,
  FieldSet,
  parseValue,
  showRefusal,
  SUBMIT_STOPPING_FIELDS,
} from "../form-fields.js";
import { datasetLabel, hasDefaultName, uploadId } from "../uploads.js";

const INT32_MAX = 2 ** 31 - 1;

// Field specs, keyed like the server's error locations ("params.l2").
const form = new FieldSet();
const fields = form.fields; // key -> {spec, input, error}
let catalog = { algorithms: [], datasets: [] };

const fieldFor = (key, spec) => form.field(key, spec);
const showError = (key, message) => form.showError(key, message);

function clearErrors() {
  form.clearErrors();
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
  form.drop(prefix);
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
  return sharedCompatibleDatasets(catalog, algo);
}

function algorithmOptions() {
  return sharedAlgorithmOptions(catalog);
}

/** Uploaded code declares its parameters itself: they are sent as a JSON object. */
function renderCodeParams(container, values) {
  for (const key of [...fields.keys()]) if (key.startsWith("params.")) fields.delete(key);
  fields.delete("params_json");
  const field = fieldFor("params_json", {
    name: "params_json",
    label: "Parameters (JSON object)",
    type: "json",
    default: JSON.stringify(values || {}),
    help: "Passed to your trainer's Params model, e.g. {\"learning_rate\": 0.1}.",
  });
  clear(container, h("legend", {}, "Algorithm parameters"), h("div", { class: "fields" }, field));
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
  if (algo && algo.code) {
    renderCodeParams($("#algo-params"), values.params || {});
  } else {
    fields.delete("params_json");
    renderParams($("#algo-params"), "params", algo ? algo.params : [], values.params || {});
  }
  onDatasetChange(values.dataset_params || {});
}

function onDatasetChange(values = {}) {
  const ds = dataset();
  $("#dataset-description").textContent = ds
    ? `${ds.description} Tasks: ${(ds.tasks || []).join(", ")}.`
    : "";
  renderParams($("#dataset-params"), "dataset_params", ds ? ds.params : [], values);
}

function buildForm(root) {
  fields.clear();
  const algoSelect = h(
    "select",
    { id: "f-algorithm", name: "algorithm", "aria-describedby": "algorithm-description f-algorithm-error" },
    algorithmOptions(),
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
    h("div", { class: "fields" }, SUBMIT_STOPPING_FIELDS.map((s) => fieldFor(`stopping.${s.name}`, s))),
  );
  const evaluation = h(
    "fieldset",
    {},
    h("legend", {}, "Evaluation"),
    h("div", { class: "fields" }, EVALUATION_FIELDS.map((s) => fieldFor(s.name, s))),
  );
  const hardware = h(
    "fieldset",
    {},
    h("legend", {}, "Where it runs"),
    h("div", { class: "fields" }, REQUIREMENT_FIELDS.map((s) => fieldFor(`requirements.${s.name}`, s))),
  );
  const form = h(
    "form",
    { id: "submit-form", novalidate: true, "aria-describedby": "form-message" },
    h("div", { id: "form-message", "aria-live": "polite" }),
    general,
    h("fieldset", { id: "algo-params", dataset: { legend: "Algorithm parameters" } }),
    h("fieldset", { id: "dataset-params", dataset: { legend: "Dataset parameters" } }),
    evaluation,
    stopping,
    hardware,
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
  for (const s of SUBMIT_STOPPING_FIELDS) {
    const value = job.stopping[s.name];
    // A clone keeps a disabled test disabled, whatever the default would be.
    set(`stopping.${s.name}`, s.offWord && value === null ? s.offWord : value);
  }
  for (const s of EVALUATION_FIELDS) if (job[s.name] !== undefined) set(s.name, job[s.name]);
  for (const [name, value] of Object.entries(requirementsFields(job.requirements))) {
    set(`requirements.${name}`, value);
  }
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
  const body = { params: {}, dataset_params: {}, stopping: {}, requirements: {} };
  for (const [key, f] of fields) {
    const parsed = parseValue(f.spec, f.input.value);
    if (parsed.error) {
      errors[key] = parsed.error;
      continue;
    }
    // An empty field with an "off" word is left out, so the server's default applies.
    if (parsed.unset && f.spec.offWord) continue;
    const [group, name] = key.includes(".") ? key.split(/\.(.+)/) : [null, key];
    if (key === "params_json") body.params = parsed.value;
    else if (group) body[group][name] = parsed.value;
    else body[name] = parsed.value;
  }
  body.requirements = requirementsBody(body.requirements);
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
    } else {
      showRefusal(err, "Over your tenant's quota. ");
    }
  }
}

async function main() {
  const me = await startPage("submit");
  const root = $("#submit-root");
  catalog = await catalogForForm(me, root);
  if (!catalog) return;
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
  const wantedAlgorithm = new URLSearchParams(window.location.search).get("algorithm");
  if (wantedAlgorithm && catalog.algorithms.some((a) => a.name === wantedAlgorithm)) {
    $("#f-algorithm").value = wantedAlgorithm;
  }
  const wanted = new URLSearchParams(window.location.search).get("dataset");
  if (wanted) {
    pickDataset(wanted);
    return;
  }
  onAlgorithmChange();
}

main();
