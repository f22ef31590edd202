// Labels on a run (job or experiment): its tags and note shown as they are,
// an "Edit labels" form for the name, tags and note (PATCH), and "Delete"
// for a finished run, confirmed first (DELETE). The server validates and
// says what is wrong; its message is shown beside the form.

import { api } from "./api.js";
import { $, clear, h, notice } from "./dom.js";

/** Tags as small chips; each links to the jobs list filtered by it. */
export function tagChips(tags) {
  if (!tags || !tags.length) return null;
  return h(
    "span",
    { class: "tags", "data-testid": "tags" },
    tags.map((tag) => h("a", { class: "tag", href: `/jobs?tag=${encodeURIComponent(tag)}` }, tag)),
  );
}

function splitTags(text) {
  return text.split(/[,\s]+/).map((t) => t.trim()).filter(Boolean);
}

/**
 * The labels panel. `run` is the job or experiment as the API returns it;
 * `kind` is "job" or "experiment"; `finished` says whether it may be deleted;
 * `onSaved(run)` gets the changed run; `afterDelete()` runs once it is gone.
 */
export function labelsPanel({ run, kind, finished, onSaved, afterDelete }) {
  const path = kind === "job" ? `/api/v1/jobs/${run.id}` : `/api/v1/experiments/${run.id}`;
  const message = h("div", { id: "labels-message", "aria-live": "polite" });
  const shown = h(
    "div",
    { id: "labels-shown" },
    tagChips(run.tags) || h("span", { class: "subtle small" }, "No tags."),
    run.note
      ? h("p", { class: "note", "data-testid": "note" }, run.note)
      : h("p", { class: "subtle small" }, "No note."),
  );
  const name = h("input", { id: "label-name", name: "name", maxlength: "200", value: run.name || "" });
  const tags = h("input", {
    id: "label-tags", name: "tags", value: (run.tags || []).join(", "),
    placeholder: "baseline, lr-sweep", "aria-describedby": "label-tags-help",
  });
  const note = h("textarea", { id: "label-note", name: "note", rows: "3", maxlength: "2000" });
  note.value = run.note || "";
  const form = h(
    "form",
    { id: "labels-form", class: "stack", hidden: true },
    h("div", { class: "field" }, h("label", { for: "label-name" }, "Name"), name),
    h(
      "div",
      { class: "field" },
      h("label", { for: "label-tags" }, "Tags"),
      tags,
      h("span", { class: "small subtle", id: "label-tags-help" }, "Separated by commas; letters, digits and _ . : + -"),
    ),
    h("div", { class: "field" }, h("label", { for: "label-note" }, "Note"), note),
    h(
      "div",
      { class: "btn-row" },
      h("button", { type: "submit", class: "btn btn-primary", id: "labels-save" }, "Save labels"),
      h("button", { type: "button", class: "btn", id: "labels-cancel" }, "Cancel"),
    ),
  );
  const edit = h("button", { type: "button", class: "btn", id: "labels-edit" }, "Edit labels");
  const remove = h(
    "button",
    {
      type: "button", class: "btn btn-danger", id: "labels-delete", disabled: !finished,
      title: finished ? `Delete this ${kind} and everything it stored` : `Cancel the ${kind} first; then it can be deleted`,
    },
    `Delete ${kind}`,
  );
  edit.addEventListener("click", () => {
    form.hidden = false;
    edit.hidden = true;
    name.focus();
  });
  form.querySelector("#labels-cancel").addEventListener("click", () => {
    form.hidden = true;
    edit.hidden = false;
    clear(message);
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const save = $("#labels-save", form);
    save.disabled = true;
    try {
      const changed = await api(path, {
        method: "PATCH",
        body: { name: name.value, tags: splitTags(tags.value), note: note.value },
      });
      onSaved(changed);
      // The page may have drawn the panel again with the saved labels: say so in the one shown.
      clear(document.getElementById("labels-message") || message, notice("success", "Labels saved."));
    } catch (err) {
      clear(message, notice("error", `Could not save the labels: ${err.message}`));
    } finally {
      save.disabled = false;
    }
  });
  remove.addEventListener("click", async () => {
    const what = kind === "job"
      ? "its loss history, metrics, scheduler decisions and model"
      : "all its jobs with their loss histories, metrics and models";
    if (!window.confirm(`Delete ${kind} ${run.id} (${run.name || "unnamed"}) and ${what}? This cannot be undone.`)) return;
    remove.disabled = true;
    try {
      await api(path, { method: "DELETE" });
      afterDelete();
    } catch (err) {
      remove.disabled = false;
      clear(message, notice("error", `Could not delete the ${kind}: ${err.message}`));
    }
  });
  return h(
    "section",
    { class: "panel", "aria-labelledby": "labels-title", id: "labels" },
    h("div", { class: "page-head" }, h("h2", { id: "labels-title" }, "Labels"), h("div", { class: "btn-row" }, edit, remove)),
    shown,
    form,
    message,
  );
}
