// Datasets page: upload a CSV (with a progress bar: XMLHttpRequest reports
// upload progress, fetch does not), list the tenant's uploads, preview the
// first rows and column types, delete one (refused while a job uses it),
// and go on to train on one.

import { ApiError, api, fieldErrors, upload } from "../api.js";
import {
  $,
  clear,
  formatBytes,
  formatNumber,
  formatTime,
  formatValue,
  h,
  notice,
} from "../dom.js";
import { startPage } from "../layout.js";
import { refreshTrainerCode, trainerCodeSection } from "../trainer-code.js";

const MAX_BYTES = 20 * 1024 * 1024;
const TASK_HELP = {
  classification: "Predict a class; the label column may hold text (class names).",
  regression: "Predict a number; the label column must be numeric.",
  clustering: "Group similar rows; every column is a feature and there is no label.",
  text: "Train a character-level language model: a UTF-8 text file (.txt) of 200 characters to 5 MB.",
};

let me = null;
let datasets = [];

// ---- upload ----

function field(id, label, input, help, optional = false) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label, optional ? h("span", { class: "subtle" }, " (optional)") : null),
    input,
    help ? h("span", { class: "help", id: `${id}-help` }, help) : null,
    h("span", { class: "field-error", id: `${id}-error` }),
  );
}

function setFieldError(key, message) {
  const input = $(`#ds-${key}`);
  const error = $(`#ds-${key}-error`);
  if (!input || !error) return false;
  error.textContent = message || "";
  if (message) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
  return true;
}

/** "My data (v2).csv" -> "My data v2": what the name field accepts. */
function nameFromFile(filename) {
  const base = filename.replace(/\.[^.]*$/, "").replace(/[^A-Za-z0-9 ._-]+/g, " ").trim();
  return base.replace(/^[^A-Za-z0-9]+/, "").replace(/\s+/g, " ").slice(0, 64);
}

function uploadForm() {
  const file = h("input", {
    id: "ds-file",
    name: "file",
    type: "file",
    accept: ".csv,.tsv,.txt,text/csv,text/tab-separated-values",
    "aria-describedby": "ds-file-help ds-file-error",
  });
  const name = h("input", {
    id: "ds-name",
    name: "name",
    type: "text",
    maxlength: "64",
    autocomplete: "off",
    spellcheck: "false",
    "aria-describedby": "ds-name-help ds-name-error",
  });
  const task = h(
    "select",
    { id: "ds-task", name: "task", "aria-describedby": "ds-task-help ds-task-error" },
    Object.keys(TASK_HELP).map((t) => h("option", { value: t }, t[0].toUpperCase() + t.slice(1))),
  );
  const label = h("input", {
    id: "ds-label",
    name: "label",
    type: "text",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "last column",
    "aria-describedby": "ds-label-help ds-label-error",
  });
  file.addEventListener("change", () => {
    const chosen = file.files[0];
    setFieldError("file", "");
    if (chosen && !name.value.trim()) name.value = nameFromFile(chosen.name);
    if (chosen && chosen.size > MAX_BYTES) {
      setFieldError("file", `This file is ${formatBytes(chosen.size)}; the limit is 20 MB.`);
    }
  });
  task.addEventListener("change", () => {
    $("#ds-task-help").textContent = TASK_HELP[task.value];
    label.disabled = task.value === "clustering" || task.value === "text";
  });
  const form = h(
    "form",
    { id: "upload-form", novalidate: true },
    h("div", { id: "upload-message", "aria-live": "polite", tabindex: "-1" }),
    h(
      "div",
      { class: "fields" },
      field("ds-file", "CSV file", file, "UTF-8; cells separated by commas, semicolons or tabs; an optional header row; at most 20 MB."),
      field("ds-name", "Dataset name", name, "Unique in your tenant: letters, digits, spaces, '.', '_' or '-'."),
      field("ds-task", "Task", task, TASK_HELP.classification),
      field("ds-label", "Label column", label, "A header name or a 0-based column number (-1 is the last).", true),
    ),
    h(
      "div",
      { class: "upload-progress", id: "upload-progress-box", hidden: true },
      h("progress", { id: "upload-progress", max: "100", value: "0", "aria-label": "Upload progress" }),
      h("span", { class: "progress-label", id: "upload-progress-label", "aria-live": "polite" }),
    ),
    h("div", { class: "btn-row" }, h("button", { type: "submit", class: "btn btn-primary", id: "upload-button" }, "Upload")),
  );
  form.addEventListener("submit", onUpload);
  return form;
}

function showProgress(sent, total, phase) {
  const box = $("#upload-progress-box");
  const bar = $("#upload-progress");
  const text = $("#upload-progress-label");
  box.hidden = false;
  if (phase === "processing") {
    bar.value = 100;
    text.textContent = "Sent. The portal is checking the file…";
    return;
  }
  const pct = total ? Math.round((100 * sent) / total) : 0;
  bar.value = pct;
  text.textContent = `Uploading: ${formatBytes(sent)} of ${formatBytes(total)} (${pct}%)`;
}

async function onUpload(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const message = $("#upload-message");
  for (const key of ["file", "name", "task", "label"]) setFieldError(key, "");
  clear(message);
  const file = $("#ds-file").files[0];
  const name = $("#ds-name").value.trim();
  const task = $("#ds-task").value;
  const label = $("#ds-label").value.trim();
  const problems = {};
  if (!file) problems.file = "Choose a CSV file.";
  else if (file.size > MAX_BYTES) problems.file = `This file is ${formatBytes(file.size)}; the limit is 20 MB.`;
  if (!name) problems.name = "Give the dataset a name.";
  if (Object.keys(problems).length) {
    for (const [key, text] of Object.entries(problems)) setFieldError(key, text);
    clear(message, notice("error", "Nothing was uploaded: fix the fields marked below."));
    $(problems.file ? "#ds-file" : "#ds-name").focus();
    return;
  }
  const body = new FormData();
  body.append("file", file, file.name);
  body.append("name", name);
  body.append("task", task);
  if (task !== "clustering" && task !== "text" && label) body.append("label", label);
  const button = $("#upload-button");
  button.disabled = true;
  showProgress(0, file.size);
  let created;
  try {
    created = await upload("/api/v1/datasets", body, showProgress);
  } catch (err) {
    button.disabled = false;
    $("#upload-progress-box").hidden = true;
    let text = err.message;
    if (err instanceof ApiError && err.status === 422) {
      const errors = fieldErrors(err.detail);
      const unplaced = Object.entries(errors).filter(([key, msg]) => !setFieldError(key, msg));
      text = unplaced.length ? unplaced.map(([, msg]) => msg).join("; ") : "fix the fields marked below.";
    }
    clear(message, notice("error", h("strong", {}, "The upload was refused: "), text));
    message.focus();
    return;
  }
  button.disabled = false;
  $("#upload-progress-box").hidden = true;
  form.reset();
  $("#ds-task-help").textContent = TASK_HELP.classification;
  $("#ds-label").disabled = false;
  clear(
    message,
    notice(
      "success",
      h("strong", {}, `Uploaded ${created.name}: `),
      describe(created),
      ". ",
      h("a", { href: submitLink(created) }, "Train a model on it"),
    ),
  );
  await loadList();
  showPreview(created.id);
}

// ---- list, preview, delete ----

function describe(d) {
  const parts = [`${formatNumber(d.rows)} rows`, `${formatNumber(d.columns)} feature${d.columns === 1 ? "" : "s"}`];
  if (d.n_classes) parts.push(`${formatNumber(d.n_classes)} classes`);
  return parts.join(", ");
}

function submitLink(d) {
  return `/submit?dataset=${encodeURIComponent(d.dataset)}`;
}

function renderList() {
  const box = $("#datasets-list");
  if (!datasets.length) {
    clear(box, h("div", { class: "empty" }, h("p", {}, "Your tenant has no uploaded datasets yet. Upload a CSV above.")));
    return;
  }
  const showTenant = me.role === "platform_admin";
  clear(
    box,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "datasets-table", class: "cards" },
        h("caption", { class: "visually-hidden" }, "Uploaded datasets, newest first"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { scope: "col" }, "Name"),
            h("th", { scope: "col" }, "Task"),
            h("th", { scope: "col", class: "num" }, "Rows"),
            h("th", { scope: "col", class: "num" }, "Features"),
            h("th", { scope: "col", class: "num" }, "Classes"),
            showTenant ? h("th", { scope: "col", class: "num" }, "Tenant") : null,
            h("th", { scope: "col" }, "Uploaded"),
            h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")),
          ),
        ),
        h(
          "tbody",
          {},
          datasets.map((d) =>
            h(
              "tr",
              { dataset: { datasetId: String(d.id), name: d.name } },
              h("td", { "data-label": "Name" }, h("strong", {}, d.name), h("div", { class: "small subtle mono" }, d.dataset)),
              h("td", { "data-label": "Task" }, d.task),
              h("td", { class: "num", "data-label": "Rows" }, formatNumber(d.rows)),
              h("td", { class: "num", "data-label": "Features" }, formatNumber(d.columns)),
              h("td", { class: "num", "data-label": "Classes" }, d.n_classes ? formatNumber(d.n_classes) : "—"),
              showTenant ? h("td", { class: "num", "data-label": "Tenant" }, `#${d.tenant_id}`) : null,
              h("td", { class: "nowrap", "data-label": "Uploaded" }, formatTime(d.created_at)),
              h(
                "td",
                { class: "actions", "data-label": "" },
                h("button", { type: "button", class: "btn btn-quiet", "aria-label": `Preview ${d.name}`, onClick: () => showPreview(d.id) }, "Preview"),
                d.tenant_id === me.tenant_id
                  ? h("a", { class: "btn btn-quiet", href: submitLink(d), "aria-label": `Train on ${d.name}` }, "Train")
                  : null,
                h("button", { type: "button", class: "btn btn-quiet btn-danger", "aria-label": `Delete ${d.name}`, onClick: () => remove(d) }, "Delete"),
              ),
            ),
          ),
        ),
      ),
    ),
  );
}

async function loadList() {
  try {
    datasets = await api("/api/v1/datasets");
  } catch (err) {
    clear($("#datasets-list"), notice("error", `Could not load the datasets: ${err.message}`));
    return;
  }
  renderList();
}

async function showPreview(id) {
  const box = $("#preview");
  const section = $("#preview-section");
  section.hidden = false;
  clear(box, notice("loading", "Loading the preview…"));
  let preview;
  try {
    preview = await api(`/api/v1/datasets/${id}/preview`);
  } catch (err) {
    clear(box, notice("error", `Could not load the preview: ${err.message}`));
    return;
  }
  $("#preview-title").textContent = `Preview of ${preview.name}`;
  if (preview.text != null) {
    clear(
      box,
      h("p", { class: "small subtle" }, `The beginning of ${formatNumber(preview.total_rows)} characters of text.`),
      h("pre", { class: "text-preview", id: "preview-text" }, preview.text),
    );
    section.scrollIntoView({ block: "nearest" });
    return;
  }
  const cell = (value, column) =>
    h("td", { class: column.type === "class" ? null : "num" }, column.type === "class" ? String(value) : formatValue(value));
  clear(
    box,
    h(
      "p",
      { class: "small subtle" },
      `The first ${formatNumber(preview.rows.length)} of ${formatNumber(preview.total_rows)} rows, as stored: the features, then the ${preview.task === "clustering" ? "rows have no label" : "label"}.`,
    ),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "preview-table", id: "preview-table" },
        h("caption", { class: "visually-hidden" }, `First rows of ${preview.name}`),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            preview.columns.map((c) =>
              h(
                "th",
                { scope: "col", class: c.type === "class" ? null : "num", dataset: { type: c.type } },
                c.name,
                h("span", { class: "col-type" }, c.role === "label" ? `${c.type} · label` : c.type),
              ),
            ),
          ),
        ),
        h("tbody", {}, preview.rows.map((row) => h("tr", {}, row.map((v, i) => cell(v, preview.columns[i]))))),
      ),
    ),
  );
  section.scrollIntoView({ block: "nearest" });
}

async function remove(d) {
  if (!window.confirm(`Delete the dataset ${d.name}? Jobs that trained on it keep their results.`)) return;
  const message = $("#list-message");
  try {
    await api(`/api/v1/datasets/${d.id}`, { method: "DELETE" });
  } catch (err) {
    const text = err instanceof ApiError && err.status === 409
      ? `${d.name} is still in use: ${err.message}.`
      : `Could not delete ${d.name}: ${err.message}`;
    clear(message, notice("error", h("span", { "data-testid": "delete-error" }, text)));
    return;
  }
  clear(message, notice("success", `Deleted ${d.name}.`));
  $("#preview-section").hidden = true;
  await loadList();
}

async function main() {
  me = await startPage("datasets");
  clear(
    $("#datasets-root"),
    h(
      "section",
      { class: "panel", "aria-labelledby": "upload-title" },
      h("h2", { id: "upload-title" }, "Upload a CSV"),
      uploadForm(),
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "list-title" },
      h("h2", { id: "list-title" }, me.role === "platform_admin" ? "Uploaded datasets (every tenant)" : "Your tenant's datasets"),
      h("div", { id: "list-message", "aria-live": "polite" }),
      h("div", { id: "datasets-list" }, notice("loading", "Loading datasets…")),
    ),
    h(
      "section",
      { class: "panel", id: "preview-section", "aria-labelledby": "preview-title", hidden: true },
      h("h2", { id: "preview-title" }, "Preview"),
      h("div", { id: "preview" }),
    ),
  );
  $("#datasets-root").appendChild(trainerCodeSection(me));
  refreshTrainerCode();
  await loadList();
}

main();
