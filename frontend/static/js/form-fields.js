// What the job forms share (the sweep form, and the submit form's helpers):
// the catalog as a form offers it (built-in algorithms and datasets plus the
// tenant's uploads and uploaded code), parameter labels and ranges in words,
// and parsing a typed value against its schema entry.

import { api, ApiError } from "./api.js";
import { $, clear, formatNumber, h, notice } from "./dom.js";
import { loadUploads } from "./uploads.js";

/** "learning_rate" -> "Learning rate"; "l2" -> "L2". */
export function humanize(name) {
  const words = String(name).split("_").join(" ");
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** A DOM id for a field key ("params.l2" -> "f-params-l2"). */
export function idFor(key) {
  return `f-${key.replace(/[^a-zA-Z0-9_-]/g, "-")}`;
}

/** " (≥ 0 and ≤ 1, whole number, log scale)" for a schema entry, or "". */
export function describeRange(spec) {
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

/**
 * Parse what was typed for a schema entry: {value} or {error}; an empty
 * optional field is {value: null, unset: true}, and a field with an
 * `offWord` ("off") reads that word as null.
 */
export function parseValue(spec, raw) {
  const text = String(raw).trim();
  if (spec.type === "choice" || spec.type === "text") return { value: text };
  if (spec.type === "json") {
    try {
      const value = JSON.parse(text || "{}");
      if (value && typeof value === "object" && !Array.isArray(value)) return { value };
    } catch {
      // fall through to the message
    }
    return { error: "Enter a JSON object, e.g. {\"learning_rate\": 0.1}." };
  }
  if (text === "") return spec.optional ? { value: null, unset: true } : { error: "Enter a value." };
  if (spec.offWord && text.toLowerCase() === spec.offWord) return { value: null };
  const n = Number(text);
  if (!Number.isFinite(n)) return { error: spec.offWord ? `Enter a number, or ${spec.offWord}.` : "Enter a number." };
  if (spec.type === "int" && !Number.isInteger(n)) return { error: "Enter a whole number." };
  const lo = spec.minimum;
  const hi = spec.maximum;
  const tooLow = lo !== null && lo !== undefined && (spec.exclusiveMinimum ? n <= lo : n < lo);
  const tooHigh = hi !== null && hi !== undefined && (spec.exclusiveMaximum ? n >= hi : n > hi);
  if (tooLow || tooHigh) return { error: `Must be${describeRange({ ...spec, log_scale: false, type: "" })}.` };
  return { value: n };
}

/** An upload as the catalog describes a dataset (uploads take no parameters). */
export function uploadEntry(d) {
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

/** A tenant's uploaded trainer as the catalog describes an algorithm. */
export function codeEntry(c) {
  return {
    name: c.algorithm,
    title: `${c.name} (your code)`,
    description: `Your uploaded trainer ${c.filename}; it runs in a sandbox, and its own Params model checks the parameters when the job starts.`,
    tasks: ["classification", "regression", "clustering", "text"],
    params: [],
    code: true,
  };
}

/**
 * The algorithms and datasets `me` can train: the installed catalog, the
 * tenant's own uploads (a platform admin lists every tenant's; jobs train on
 * their own tenant's only) and its uploaded trainers.
 */
export async function loadCatalog(me) {
  const [algorithms, datasets, uploads, code] = await Promise.all([
    api("/api/v1/catalog/algorithms"),
    api("/api/v1/catalog/datasets"),
    loadUploads(),
    // Tenants without code uploads get a 403 here: they simply have no code.
    api("/api/v1/code").catch(() => []),
  ]);
  const own = uploads.filter((d) => d.tenant_id === me.tenant_id).map(uploadEntry);
  return { algorithms: [...algorithms, ...code.map(codeEntry)], datasets: [...own, ...datasets] };
}

/** The catalog for a form in ``root``; null, with the reason shown there, when
 * it could not be loaded or offers no algorithm. */
export async function catalogForForm(me, root) {
  let catalog;
  try {
    catalog = await loadCatalog(me);
  } catch (err) {
    clear(root, notice("error", `Could not load the catalog: ${err.message}`));
    return null;
  }
  if (!catalog.algorithms.length) {
    clear(root, notice("info", "No algorithms are installed on this portal."));
    return null;
  }
  return catalog;
}

/** A refused submission, above the form (#form-message): a quota refusal (409)
 * with its figures after ``quotaHeadline``, anything else plainly. Field
 * errors (422) are the form's own. */
export function showRefusal(err, quotaHeadline) {
  const message = $("#form-message");
  if (!(err instanceof ApiError && err.status === 409)) {
    clear(message, notice("error", `Could not submit: ${err.message}`));
    return;
  }
  const d = err.detail && typeof err.detail === "object" ? err.detail : {};
  clear(
    message,
    notice(
      "error",
      h("strong", {}, quotaHeadline),
      h("span", { "data-testid": "quota-message" }, d.message || err.message),
      d.quota ? h("div", { class: "small" }, `Quota ${d.quota}: limit ${d.limit}, in use ${d.usage}.`) : null,
    ),
  );
  message.focus?.();
}

export function compatibleDatasets(catalog, algo) {
  const tasks = new Set(algo ? algo.tasks : []);
  return catalog.datasets.filter((d) => (d.tasks || []).some((t) => tasks.has(t)));
}

export function datasetOptions(options) {
  const option = (d) => h("option", { value: d.name }, d.title || d.name);
  const uploads = options.filter((d) => d.upload);
  const builtIn = options.filter((d) => !d.upload);
  if (!uploads.length) return builtIn.map(option);
  return [
    h("optgroup", { label: "Your uploads" }, uploads.map(option)),
    h("optgroup", { label: "Built-in" }, builtIn.map(option)),
  ];
}

export function algorithmOptions(catalog) {
  const option = (a) => h("option", { value: a.name }, a.title || a.name);
  const code = catalog.algorithms.filter((a) => a.code);
  const installed = catalog.algorithms.filter((a) => !a.code);
  if (!code.length) return installed.map(option);
  return [
    h("optgroup", { label: "Installed" }, installed.map(option)),
    h("optgroup", { label: "Your code" }, code.map(option)),
  ];
}

/** What the slot running a job must offer (docs/pools.md). */
export const REQUIREMENT_FIELDS = [
  {
    name: "gpu",
    label: "Hardware",
    type: "choice",
    choices: ["any", "gpu", "cpu"],
    default: "any",
    help: "any: the trainer decides (PyTorch trainers take a GPU slot when one is free); gpu: run only on a GPU pool; cpu: never prefer one.",
  },
  {
    name: "pool",
    label: "Worker pool",
    type: "text",
    default: "",
    optional: true,
    help: "Run only on this worker pool; leave empty for any pool your team may use.",
  },
];

const HARDWARE = { any: null, gpu: true, cpu: false };

/** The form's requirement fields as the API's `requirements` object. */
export function requirementsBody(raw) {
  const out = {};
  const gpu = HARDWARE[raw.gpu ?? "any"];
  if (gpu !== null && gpu !== undefined) out.gpu = gpu;
  if (raw.pool) out.pool = raw.pool;
  return out;
}

/** A job's `requirements` as the form's field values (for a clone). */
export function requirementsFields(requirements) {
  const gpu = requirements?.gpu;
  return { gpu: gpu === true ? "gpu" : gpu === false ? "cpu" : "any", pool: requirements?.pool || "" };
}

/**
 * A form's fields, keyed like the server's 422 error locations
 * ("params.l2", "stopping.max_iterations"): each a labelled input from a
 * schema entry {name, label, type, default, minimum, maximum, choices, help,
 * optional, offWord, placeholder}, with its error line.
 */
export class FieldSet {
  constructor() {
    this.fields = new Map(); // key -> {spec, input, error}
  }

  /** The labelled input for `spec`, registered under `key`. */
  field(key, spec) {
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
        inputmode: spec.type === "int" ? "numeric" : spec.type === "float" ? "decimal" : "text",
        autocomplete: "off",
        spellcheck: "false",
        "aria-describedby": `${helpId} ${errorId}`,
        placeholder: spec.placeholder || (spec.optional && spec.type !== "text" ? "none" : null),
      });
      input.value = spec.default === null || spec.default === undefined ? "" : String(spec.default);
    }
    if (!spec.optional && spec.type !== "choice") input.setAttribute("aria-required", "true");
    const error = h("span", { class: "field-error", id: errorId });
    input.addEventListener("change", () => this.showError(key, this.parse(key).error || ""));
    this.fields.set(key, { spec, input, error });
    const label = spec.label || humanize(spec.name);
    return h(
      "div",
      { class: "field" },
      h("label", { for: id }, label, spec.optional ? h("span", { class: "subtle" }, " (optional)") : null),
      input,
      h("span", { class: "help", id: helpId }, `${spec.help || ""}${spec.noRange ? "" : describeRange(spec)}`.trim()),
      error,
    );
  }

  /** Register an input built elsewhere (e.g. a select with its own options). */
  adopt(key, spec, input, error) {
    this.fields.set(key, { spec, input, error });
  }

  get(key) {
    return this.fields.get(key);
  }

  has(key) {
    return this.fields.has(key);
  }

  /** Forget the fields whose key starts with `prefix`. */
  drop(prefix) {
    for (const key of [...this.fields.keys()]) if (key.startsWith(prefix)) this.fields.delete(key);
  }

  parse(key) {
    const f = this.fields.get(key);
    return f ? parseValue(f.spec, f.input.value) : { error: "" };
  }

  /** Show `message` by the field (none clears it); false when there is no such field. */
  showError(key, message) {
    const f = this.fields.get(key);
    if (!f) return false;
    f.error.textContent = message || "";
    if (message) f.input.setAttribute("aria-invalid", "true");
    else f.input.removeAttribute("aria-invalid");
    return true;
  }

  clearErrors() {
    for (const key of this.fields.keys()) this.showError(key, "");
  }
}

/** The stopping rule's fields, as the submit and sweep forms ask them. */
export const STOPPING_FIELDS = [
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
    help: "Stop once the quality metric (loss, or val_loss) is at or below this. With a target and no tolerance, the job runs to the target or to the maximum.",
  },
  {
    name: "tolerance",
    label: "Convergence tolerance",
    type: "float",
    default: null,
    minimum: 0,
    maximum: 1,
    exclusiveMinimum: true,
    exclusiveMaximum: true,
    optional: true,
    // Empty leaves the choice to the server (StoppingRule in backend/schemas.py); "off" disables.
    offWord: "off",
    placeholder: "default",
    help: "Stop when the quality metric has stopped moving: the mean of its last window differs from the window before by less than this (relative), allowing for noise. The training loss is judged only after 30% of the maximum iterations; val_loss once it has two windows of evaluations. Empty: 0.0001, but only when no target loss is set (a job with a target runs to it or to the maximum). Type off to never test convergence, or a number to test it alongside a target.",
  },
  {
    name: "window",
    label: "Convergence window",
    type: "int",
    default: 10,
    minimum: 1,
    maximum: 1000,
    help: "Iterations (evaluations, for val_loss) in each of the two windows the convergence test compares; at least 3 are used.",
  },
];

/**
 * Maximum iterations the submit form proposes for one job, above the API's
 * 1,000 so a new user has a job to watch: the default logistic regression on
 * digits then converges near iteration 1,700 (measured: 0.4 s of compute
 * alone, several seconds live), a small CNN runs about 8 s of compute. The
 * sweep form keeps 1,000: a sweep is many jobs.
 */
export const SUBMIT_MAX_ITERATIONS = 5000;

/** The stopping fields as the submit form asks them: STOPPING_FIELDS with its default. */
export const SUBMIT_STOPPING_FIELDS = STOPPING_FIELDS.map((s) =>
  s.name === "max_iterations" ? { ...s, default: SUBMIT_MAX_ITERATIONS } : s);

/** The evaluation fields of a job. */
export const EVALUATION_FIELDS = [
  {
    name: "eval_every",
    label: "Evaluate every",
    type: "int",
    default: 50,
    minimum: 0,
    maximum: null,
    help: "Measure held-out metrics (val_loss, val_accuracy…) every this many iterations; 0 never.",
  },
  {
    name: "quality_metric",
    label: "Quality metric",
    type: "choice",
    choices: ["loss", "val_loss"],
    default: "loss",
    help: "What the scheduler and the target loss follow: the training loss, or the held-out val_loss.",
  },
];
