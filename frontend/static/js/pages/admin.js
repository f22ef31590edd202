// Admin page. Platform admins: tenants' quotas beside their usage (editable,
// validated here and by the server), users, the active policy, the audit
// log. Tenant admins: the same, read-only, for their own tenant. Members:
// a clear "not allowed" (the API answers 403 too).

import { api, ApiError, fieldErrors } from "../api.js";
import { $, clear, formatNumber, formatTime, h, notice } from "../dom.js";
import { ROLE_LABELS, startPage } from "../layout.js";

const QUOTAS = [
  { name: "max_slots", label: "Slots", usage: "running_slots", type: "int", minimum: 0, maximum: 10000, help: "Chunks in flight at once." },
  { name: "max_active_jobs", label: "Active jobs", usage: "active_jobs", type: "int", minimum: 0, maximum: 1000000, help: "Unfinished jobs (queued, running or paused)." },
  { name: "max_queued_jobs", label: "Queued jobs", usage: "queued_jobs", type: "int", minimum: 0, maximum: 1000000, help: "Jobs waiting for a slot." },
  { name: "max_iterations_per_job", label: "Iterations per job", type: "int", minimum: 1, maximum: 100000000, help: "Largest max_iterations a job may ask for." },
  { name: "share_weight", label: "Share weight", type: "float", minimum: 0, exclusiveMinimum: true, maximum: 1000, help: "Relative share of slots under contention." },
];

let me = null;
let tenants = [];
let canEdit = false;

function rangeText(q) {
  return `${q.exclusiveMinimum ? ">" : "≥"} ${formatNumber(q.minimum)} and ≤ ${formatNumber(q.maximum)}${q.type === "int" ? ", whole number" : ""}`;
}

function checkQuota(q, raw) {
  const text = raw.trim();
  if (text === "") return { error: "Enter a value." };
  const n = Number(text);
  if (!Number.isFinite(n)) return { error: "Enter a number." };
  if (q.type === "int" && !Number.isInteger(n)) return { error: "Enter a whole number." };
  if ((q.exclusiveMinimum ? n <= q.minimum : n < q.minimum) || n > q.maximum) {
    return { error: `Must be ${rangeText(q)}.` };
  }
  return { value: n };
}

function quotaCell(tenant, q) {
  const limit = tenant.quotas[q.name];
  if (!q.usage) return h("td", { class: "num" }, formatNumber(limit));
  const used = tenant.usage[q.usage];
  const pct = limit > 0 ? Math.min(100, (100 * used) / limit) : 100;
  return h(
    "td",
    { class: "quota-cell", "data-label": q.label },
    h("span", { class: "use" }, formatNumber(used)),
    ` of ${formatNumber(limit)}`,
    h("span", { class: `meter${used >= limit ? " full" : ""}`, "aria-hidden": "true" },
      h("span", { style: `width:${pct}%` })),
  );
}

function renderTenants() {
  const rows = tenants.map((t) =>
    h(
      "tr",
      { dataset: { tenantId: String(t.id), tenant: t.name } },
      h("th", { scope: "row" }, t.name),
      QUOTAS.map((q) => quotaCell(t, q)),
      canEdit
        ? h("td", {}, h("button", {
            type: "button",
            class: "btn btn-quiet",
            "aria-label": `Edit quotas of ${t.name}`,
            onClick: () => openEditor(t),
          }, "Edit"))
        : null,
    ),
  );
  clear(
    $("#tenants"),
    tenants.length
      ? h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { id: "tenants-table" },
            h("caption", { class: "visually-hidden" }, "Tenants: usage of each quota"),
            h("thead", {}, h("tr", {},
              h("th", { scope: "col" }, "Tenant"),
              QUOTAS.map((q) => h("th", { scope: "col" }, q.usage ? `${q.label} (used of limit)` : q.label)),
              canEdit ? h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")) : null)),
            h("tbody", {}, rows),
          ),
        )
      : h("p", { class: "subtle" }, "No tenants."),
  );
}

function openEditor(tenant) {
  const inputs = {};
  const errors = {};
  const grid = h("div", { class: "fields" });
  for (const q of QUOTAS) {
    const id = `quota-${q.name}`;
    inputs[q.name] = h("input", {
      id,
      name: q.name,
      type: "text",
      inputmode: q.type === "int" ? "numeric" : "decimal",
      value: String(tenant.quotas[q.name]),
      "aria-describedby": `${id}-help ${id}-error`,
      autocomplete: "off",
    });
    errors[q.name] = h("span", { class: "field-error", id: `${id}-error` });
    grid.appendChild(h("div", { class: "field" },
      h("label", { for: id }, q.label),
      inputs[q.name],
      h("span", { class: "help", id: `${id}-help` }, `${q.help} (${rangeText(q)})`),
      errors[q.name]));
  }
  const message = h("div", { id: "quota-message", "aria-live": "polite", tabindex: "-1" });
  const showErrors = (map) => {
    let first = null;
    for (const q of QUOTAS) {
      const m = map[q.name] || "";
      errors[q.name].textContent = m;
      if (m) {
        inputs[q.name].setAttribute("aria-invalid", "true");
        first ||= inputs[q.name];
      } else inputs[q.name].removeAttribute("aria-invalid");
    }
    const other = Object.entries(map).filter(([k]) => !QUOTAS.some((q) => q.name === k));
    clear(message, first || other.length
      ? notice("error", "The quotas were not saved.", other.length ? h("ul", {}, other.map(([, m]) => h("li", {}, m))) : null)
      : null);
    if (first) first.focus();
  };
  const form = h(
    "form",
    { id: "quota-form", novalidate: true },
    h("h3", { id: "quota-form-title" }, `Quotas of ${tenant.name}`),
    message,
    grid,
    h("div", { class: "btn-row" },
      h("button", { type: "submit", class: "btn btn-primary" }, "Save quotas"),
      h("button", { type: "button", class: "btn", onClick: closeEditor }, "Cancel")),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {};
    const bad = {};
    for (const q of QUOTAS) {
      const parsed = checkQuota(q, inputs[q.name].value);
      if (parsed.error) bad[q.name] = parsed.error;
      else if (parsed.value !== tenant.quotas[q.name]) body[q.name] = parsed.value;
    }
    if (Object.keys(bad).length) {
      showErrors(bad);
      return;
    }
    showErrors({});
    if (!Object.keys(body).length) {
      clear(message, notice("info", "Nothing changed."));
      return;
    }
    try {
      const updated = await api(`/api/v1/admin/tenants/${tenant.id}`, { method: "PATCH", body });
      tenants = tenants.map((t) => (t.id === updated.id ? updated : t));
      renderTenants();
      closeEditor();
      clear($("#tenants-message"), notice("success", `Saved the quotas of ${updated.name}.`));
      loadAudit();
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) showErrors(fieldErrors(err.detail));
      else clear(message, notice("error", `Could not save: ${err.message}`));
    }
  });
  clear($("#quota-editor"), form);
  $("#quota-editor").hidden = false;
  clear($("#tenants-message"));
  inputs[QUOTAS[0].name].focus();
}

function closeEditor() {
  clear($("#quota-editor"));
  $("#quota-editor").hidden = true;
}

async function loadUsers() {
  const box = $("#users");
  try {
    const users = await api("/api/v1/admin/users");
    const names = new Map(tenants.map((t) => [t.id, t.name]));
    clear(box, users.length ? h("div", { class: "table-wrap" }, h("table", { id: "users-table" },
      h("caption", { class: "visually-hidden" }, "Users"),
      h("thead", {}, h("tr", {}, ["Email", "Role", "Tenant", "Active"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, users.map((u) => h("tr", {},
        h("td", {}, u.email),
        h("td", {}, ROLE_LABELS[u.role] || u.role),
        h("td", {}, names.get(u.tenant_id) || `#${u.tenant_id}`),
        h("td", {}, u.is_active ? "yes" : "no")))))) : h("p", { class: "subtle" }, "No users."));
  } catch (err) {
    clear(box, notice("error", `Could not load users: ${err.message}`));
  }
}

async function loadPolicy() {
  const box = $("#policy");
  let policy;
  try {
    policy = await api("/api/v1/admin/policy");
  } catch (err) {
    clear(box, notice("error", `Could not load the policy: ${err.message}`));
    return;
  }
  if (!canEdit) {
    clear(box, h("p", {}, "Active policy: ", h("strong", { "data-testid": "active-policy" }, policy.active), "."),
      h("p", { class: "small subtle" }, "Only platform admins change it."));
    return;
  }
  const select = h("select", { id: "policy-select", name: "name" },
    policy.available.map((p) => h("option", { value: p }, p)));
  select.value = policy.active;
  const message = h("div", { "aria-live": "polite" });
  const form = h("form", { id: "policy-form", class: "toolbar" },
    h("div", { class: "field" }, h("label", { for: "policy-select" }, "Choose a policy"), select),
    h("button", { type: "submit", class: "btn btn-primary" }, "Apply"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const updated = await api("/api/v1/admin/policy", { method: "PUT", body: { name: select.value } });
      clear(message, notice("success", `The scheduler now uses ${updated.active}, from its next round.`));
      $("[data-testid=active-policy]").textContent = updated.active;
      loadAudit();
    } catch (err) {
      clear(message, notice("error", `Could not change the policy: ${err.message}`));
    }
  });
  clear(box, h("p", {}, "Active policy: ", h("strong", { "data-testid": "active-policy" }, policy.active), "."), form, message);
}

async function loadAudit() {
  const box = $("#audit");
  try {
    const entries = await api("/api/v1/admin/audit?limit=50");
    clear(box, entries.length ? h("div", { class: "table-wrap" }, h("table", {},
      h("caption", { class: "visually-hidden" }, "Recent admin actions, newest first"),
      h("thead", {}, h("tr", {}, ["When", "Who", "Action", "Target", "Details"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, entries.map((e) => h("tr", {},
        h("td", {}, formatTime(e.created_at)),
        h("td", {}, e.actor_email),
        h("td", {}, h("code", {}, e.action)),
        h("td", {}, e.target),
        h("td", { class: "reason mono" }, JSON.stringify(e.details))))))) : h("p", { class: "subtle" }, "No admin actions yet."));
  } catch (err) {
    clear(box, notice("error", `Could not load the audit log: ${err.message}`));
  }
}

function notAllowed(message) {
  clear(
    $("#admin-root"),
    h("div", { class: "panel", "data-testid": "not-allowed" },
      h("h2", {}, "Not allowed"),
      h("p", {}, `You are signed in as ${me.email}, a ${ROLE_LABELS[me.role] || me.role} of ${me.tenant_name}. `,
        "Administration is for tenant admins and platform admins."),
      message ? h("p", { class: "small subtle" }, `The server said: ${message}`) : null,
      h("p", {}, "Ask your tenant admin to change a quota or your role. ", h("a", { href: "/jobs" }, "Back to your jobs"))),
  );
}

function skeleton() {
  clear(
    $("#admin-root"),
    canEdit ? null : notice("info", `You are a ${ROLE_LABELS[me.role]}: you see ${me.tenant_name}'s usage and settings, read-only.`),
    h("section", { class: "panel", "aria-labelledby": "tenants-title" },
      h("h2", { id: "tenants-title" }, canEdit ? "Tenants and quotas" : "Your tenant's quotas"),
      h("div", { id: "tenants-message", "aria-live": "polite" }),
      h("div", { id: "tenants" }, notice("loading", "Loading tenants…")),
      h("div", { id: "quota-editor", class: "panel", hidden: true })),
    h("div", { class: "grid-2" },
      h("section", { class: "panel", "aria-labelledby": "policy-title" },
        h("h2", { id: "policy-title" }, "Scheduling policy"), h("div", { id: "policy" })),
      h("section", { class: "panel", "aria-labelledby": "users-title" },
        h("h2", { id: "users-title" }, "Users"), h("div", { id: "users" }))),
    h("section", { class: "panel", "aria-labelledby": "audit-title" },
      h("h2", { id: "audit-title" }, "Audit log"), h("div", { id: "audit" })),
  );
}

// The page frame goes up only once we know the caller may see it.
async function start() {
  me = await startPage("admin");
  canEdit = me.role === "platform_admin";
  let first;
  try {
    first = await api("/api/v1/admin/tenants");
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) {
      notAllowed(err.message);
      return;
    }
    clear($("#admin-root"), notice("error", `Could not load the admin page: ${err.message}`));
    return;
  }
  skeleton();
  tenants = first;
  renderTenants();
  await Promise.all([loadPolicy(), loadUsers(), loadAudit()]);
}

start();
