// "Your trainer code" on the datasets page: upload a Python trainer (it is only
// compiled by the portal; it runs in a sandbox when a job uses it), list the
// tenant's uploads, train one, delete one. For a tenant a platform admin has
// not allowed (or no longer allows) to run its own code, uploads and new jobs
// are refused (403, 422): the code it uploaded before stays listed, marked
// so, and can be deleted; a tenant that never uploaded any sees no section.

import { ApiError, api, fieldErrors, upload } from "./api.js";
import { $, clear, formatBytes, formatTime, h, notice } from "./dom.js";

const MAX_BYTES = 256 * 1024;

const DISABLED = "uploads and new jobs disabled by the platform admin";

const CONTRACTS = {
  trainer: "a subclass of slaq_trainer.Trainer",
  loop: "your own loop: train(params, data, ctx) calling ctx.report()",
  unknown: "neither a Trainer subclass nor train(params, data, ctx) was found",
};

let allowed = false; // the tenant may upload and run its own code (/auth/me)

function row(code) {
  return h(
    "tr",
    { dataset: { codeId: String(code.id) } },
    h("th", { scope: "row" }, code.name,
      allowed ? null : [" ", h("span", { class: "badge", title: DISABLED }, "disabled")]),
    h("td", { "data-label": "Algorithm" }, h("code", {}, code.algorithm)),
    h("td", { "data-label": "Contract", title: CONTRACTS[code.contract] || "" }, code.contract),
    h("td", { "data-label": "File" }, code.filename),
    h("td", { class: "num", "data-label": "Size" }, formatBytes(code.size)),
    h("td", { "data-label": "Uploaded" }, formatTime(code.created_at)),
    h(
      "td",
      {},
      allowed
        ? h("a", { class: "btn btn-quiet", href: `/submit?algorithm=${encodeURIComponent(code.algorithm)}` }, "Train")
        : null,
      allowed ? " " : null,
      h("button", { type: "button", class: "btn btn-quiet", onClick: () => remove(code), "aria-label": `Delete ${code.name}` }, "Delete"),
    ),
  );
}

export async function refreshTrainerCode() {
  const list = $("#code-list");
  const section = $("#code-section");
  let codes;
  try {
    codes = await api("/api/v1/code");
  } catch (err) {
    clear(list, notice("error", `Could not load your trainer code: ${err.message}`));
    return;
  }
  // Turned off and nothing uploaded: nothing to show this tenant.
  section.hidden = !allowed && !codes.length;
  if (!codes.length) {
    clear(list, notice("info", "No trainer code yet. Upload a .py file that defines one Trainer subclass or a loop train(params, data, ctx)."));
    return;
  }
  clear(
    list,
    allowed ? null : notice("warn", h("strong", {}, "Your trainer code: "), `${DISABLED}. `,
      "It stays listed, and jobs that ran it keep their results; you can still delete it. ",
      "A platform admin can allow it again."),
    h(
      "table",
      { class: "table", id: "code-table" },
      h("thead", {}, h("tr", {}, ["Name", "Algorithm", "Contract", "File", "Size", "Uploaded", ""].map((c) =>
        h("th", { scope: "col" }, c || h("span", { class: "visually-hidden" }, "Actions"))))),
      h("tbody", {}, codes.map(row)),
    ),
  );
}

async function remove(code) {
  if (!window.confirm(`Delete the trainer ${code.name}? Jobs that ran it keep their results.`)) return;
  try {
    await api(`/api/v1/code/${code.id}`, { method: "DELETE" });
    clear($("#code-message"), notice("success", `Deleted ${code.name}.`));
  } catch (err) {
    const text = err instanceof ApiError && err.status === 409
      ? `${code.name} is still in use: ${err.message}.`
      : `Could not delete ${code.name}: ${err.message}`;
    clear($("#code-message"), notice("error", text));
  }
  await refreshTrainerCode();
}

async function onUpload(event) {
  event.preventDefault();
  const file = $("#code-file").files[0];
  const message = $("#code-message");
  if (!file) {
    clear(message, notice("error", "Choose a .py file to upload."));
    return;
  }
  if (file.size > MAX_BYTES) {
    clear(message, notice("error", `${file.name} is ${formatBytes(file.size)}; the limit is ${formatBytes(MAX_BYTES)}.`));
    return;
  }
  const body = new FormData();
  body.append("file", file);
  const name = $("#code-name").value.trim();
  if (name) body.append("name", name);
  clear(message, notice("loading", `Uploading ${file.name}…`));
  try {
    const created = await upload("/api/v1/code", body);
    clear(message, notice("success", `Uploaded ${created.name}: jobs run it as ${created.algorithm}.`));
    event.target.reset();
  } catch (err) {
    const detail = err instanceof ApiError && err.status === 422 ? Object.values(fieldErrors(err.detail)) : [];
    clear(message, notice("error", `Not uploaded: ${detail.length ? detail.join(" ") : err.message}`));
  }
  await refreshTrainerCode();
}

/** The section (fill it with refreshTrainerCode once it is in the page; it
 * shows itself when there is code to list); ``me`` is /auth/me's answer. */
export function trainerCodeSection(me) {
  allowed = Boolean(me.allow_code_uploads);
  const form = !allowed ? null : h(
    "form",
    { id: "code-form", novalidate: true },
    h(
      "div",
      { class: "fields" },
      h("div", { class: "field" },
        h("label", { for: "code-file" }, "Python file"),
        h("input", { id: "code-file", name: "file", type: "file", accept: ".py,text/x-python", "aria-describedby": "code-file-help" }),
        h("span", { class: "help", id: "code-file-help" },
          "One .py file (at most 256 KiB) defining a subclass of slaq_trainer.Trainer, or your own loop as train(params, data, ctx): ",
          h("a", { href: "/help/tenant-code" }, "how to write one"), ".")),
      h("div", { class: "field" },
        h("label", { for: "code-name" }, "Name", h("span", { class: "subtle" }, " (optional)")),
        h("input", { id: "code-name", name: "name", type: "text", maxlength: 64, autocomplete: "off" }),
        h("span", { class: "help" }, "Unique in your tenant; default the file name.")),
    ),
    h("div", { class: "btn-row" }, h("button", { type: "submit", class: "btn btn-primary" }, "Upload trainer")),
  );
  if (form) form.addEventListener("submit", onUpload);
  const section = h(
    "section",
    { class: "panel", id: "code-section", "aria-labelledby": "code-title", hidden: !allowed },
    h("h2", { id: "code-title" }, "Your trainer code"),
    h("p", { class: "subtle" },
      "Your own training code runs in a sandbox: no network, no portal files, limited memory and time. Its printed output is kept with each job."),
    form,
    h("div", { id: "code-message", "aria-live": "polite" }),
    h("div", { id: "code-list" }, notice("loading", "Loading your trainer code…")),
  );
  return section;
}
