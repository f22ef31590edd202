// Admin page. Platform admins: tenants' quotas beside their usage (editable,
// validated here and by the server), new tenants, users (add, disable), API
// tokens (revoke), the active policy and its completion guard, the audit
// log. Tenant admins: their own tenant's quotas and policy read-only, and its
// users and tokens. Members: a clear "not allowed" (the API answers 403 too).

import { api, ApiError, fieldErrors } from "../api.js";
import { $, clear, formatNumber, formatTime, h, notice } from "../dom.js";
import { ROLE_LABELS, startPage } from "../layout.js";
import { whatIfSection } from "../what-if.js";

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
  if (!q.usage) return h("td", { class: "num", "data-label": q.label }, formatNumber(limit));
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
      h("td", { "data-label": "Own code" }, t.allow_code_uploads ? "allowed" : "off"),
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
              h("th", { scope: "col" }, "Own code"),
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
  // Uploaded trainer code runs sandboxed, but a sandbox is not a guarantee:
  // platform admins opt tenants in one by one (deploy/PRODUCTION.md).
  const allowCode = h("input", {
    id: "quota-allow-code",
    type: "checkbox",
    "aria-describedby": "quota-allow-code-help",
  });
  allowCode.checked = Boolean(tenant.allow_code_uploads);
  grid.appendChild(h("div", { class: "field field-check" },
    h("label", { for: "quota-allow-code" }, allowCode, " Allow uploaded trainer code"),
    h("span", { class: "help", id: "quota-allow-code-help" },
      "Members may upload Python trainers; each chunk runs in a sandbox with no network and no portal files.")));
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
    if (allowCode.checked !== Boolean(tenant.allow_code_uploads)) body.allow_code_uploads = allowCode.checked;
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

function tenantName(id) {
  const found = tenants.find((t) => t.id === id);
  return found ? found.name : `#${id}`;
}

async function loadUsers() {
  const box = $("#users");
  let users;
  try {
    users = await api("/api/v1/admin/users");
  } catch (err) {
    clear(box, notice("error", `Could not load users: ${err.message}`));
    return;
  }
  const mayManage = (u) => u.id !== me.id && (canEdit || u.role !== "platform_admin");
  clear(box, users.length ? h("div", { class: "table-wrap" }, h("table", { id: "users-table", class: "cards" },
    h("caption", { class: "visually-hidden" }, "Users"),
    h("thead", {}, h("tr", {}, ["Email", "Role", "Tenant", "Active", ""].map((c) =>
      h("th", { scope: "col" }, c || h("span", { class: "visually-hidden" }, "Actions"))))),
    h("tbody", {}, users.map((u) => h("tr", { class: u.is_active ? null : "is-muted", dataset: { userId: String(u.id), email: u.email } },
      h("td", { "data-label": "Email" }, u.email),
      h("td", { "data-label": "Role" }, ROLE_LABELS[u.role] || u.role),
      h("td", { "data-label": "Tenant" }, tenantName(u.tenant_id)),
      h("td", { "data-label": "Active" }, u.is_active ? "yes" : "disabled"),
      h("td", { class: "actions", "data-label": "" }, mayManage(u)
        ? h("button", {
            type: "button",
            class: `btn btn-quiet${u.is_active ? " btn-danger" : ""}`,
            "aria-label": `${u.is_active ? "Disable" : "Enable"} ${u.email}`,
            onClick: () => setActive(u, !u.is_active),
          }, u.is_active ? "Disable" : "Enable")
        : null)))))) : h("p", { class: "subtle" }, "No users."));
}

async function setActive(user, active) {
  const message = $("#users-message");
  if (!active && !window.confirm(`Disable ${user.email}? They can no longer sign in, and their API tokens stop working.`)) return;
  try {
    await api(`/api/v1/admin/users/${user.id}`, { method: "PATCH", body: { is_active: active } });
  } catch (err) {
    clear(message, notice("error", `Could not ${active ? "enable" : "disable"} ${user.email}: ${err.message}`));
    return;
  }
  clear(message, notice("success", active ? `${user.email} can sign in again.` : `${user.email} is disabled: they can no longer sign in or use their tokens.`));
  loadUsers();
  loadTokens();
  loadAudit();
}

function formField(id, label, input, help) {
  return h("div", { class: "field" },
    h("label", { for: id }, label),
    input,
    help ? h("span", { class: "help", id: `${id}-help` }, help) : null,
    h("span", { class: "field-error", id: `${id}-error` }));
}

function setFormErrors(prefix, keys, errors) {
  let first = null;
  for (const key of keys) {
    const input = $(`#${prefix}-${key}`);
    const text = errors[key] || "";
    $(`#${prefix}-${key}-error`).textContent = text;
    if (text) {
      input.setAttribute("aria-invalid", "true");
      first ||= input;
    } else input.removeAttribute("aria-invalid");
  }
  if (first) first.focus();
  return Object.entries(errors).filter(([k]) => !keys.includes(k)).map(([, m]) => m);
}

/** A random password that passes the server's strength check (16 characters from 62). */
function suggestPassword() {
  const alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
  const bytes = new Uint8Array(16);
  window.crypto.getRandomValues(bytes);
  return [...bytes].map((b) => alphabet[b % alphabet.length]).join("");
}

function userForm() {
  const keys = ["email", "password", "role", "tenant_id"];
  const email = h("input", { id: "nu-email", type: "email", autocomplete: "off", spellcheck: "false", "aria-describedby": "nu-email-error" });
  const password = h("input", { id: "nu-password", type: "text", autocomplete: "new-password", spellcheck: "false", "aria-describedby": "nu-password-help nu-password-error" });
  const roles = canEdit ? ["member", "tenant_admin", "platform_admin"] : ["member", "tenant_admin"];
  const role = h("select", { id: "nu-role", "aria-describedby": "nu-role-error" }, roles.map((r) => h("option", { value: r }, ROLE_LABELS[r])));
  const tenant = h("select", { id: "nu-tenant_id", "aria-describedby": "nu-tenant_id-error", disabled: !canEdit },
    tenants.map((t) => h("option", { value: String(t.id) }, t.name)));
  tenant.value = String(me.tenant_id);
  const message = h("div", { id: "new-user-message", "aria-live": "polite" });
  const form = h("form", { id: "new-user-form", novalidate: true },
    h("h3", {}, "Add a user"),
    message,
    h("div", { class: "fields" },
      formField("nu-email", "New user's email", email),
      formField("nu-password", "Initial password", password, "At least 10 characters and hard to guess; tell it to the user, who signs in with it."),
      formField("nu-role", "Role", role),
      formField("nu-tenant_id", "Tenant", tenant)),
    h("div", { class: "btn-row" },
      h("button", { type: "submit", class: "btn btn-primary" }, "Add user"),
      h("button", { type: "button", class: "btn", onClick: () => { password.value = suggestPassword(); password.focus(); } }, "Suggest a password")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { email: email.value.trim(), password: password.value, role: role.value, tenant_id: Number(tenant.value) };
    const local = {};
    if (!/^[^@\s]+@[^@\s]+$/.test(body.email)) local.email = "Enter an email address.";
    if (body.password.length < 10) local.password = "At least 10 characters.";
    clear(message);
    if (Object.keys(local).length) {
      setFormErrors("nu", keys, local);
      return;
    }
    setFormErrors("nu", keys, {});
    let created;
    try {
      created = await api("/api/v1/admin/users", { method: "POST", body });
    } catch (err) {
      const rest = err instanceof ApiError && err.status === 422
        ? setFormErrors("nu", keys, fieldErrors(err.detail))
        : [err.message];
      if (rest.length) clear(message, notice("error", `The user was not added: ${rest.join("; ")}`));
      return;
    }
    form.reset();
    tenant.value = String(me.tenant_id);
    clear(message, notice("success", `Added ${created.email} (${ROLE_LABELS[created.role] || created.role}) to ${tenantName(created.tenant_id)}.`));
    loadUsers();
    loadAudit();
  });
  return form;
}

function tenantForm() {
  const name = h("input", { id: "nt-name", type: "text", maxlength: "64", autocomplete: "off", spellcheck: "false", "aria-describedby": "nt-name-help nt-name-error" });
  const form = h("form", { id: "new-tenant-form", class: "inline-form", novalidate: true },
    formField("nt-name", "New tenant name", name, "Lower-case letters, digits, '-' or '_'; default quotas, editable after."),
    h("button", { type: "submit", class: "btn btn-primary" }, "Create tenant"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const message = $("#tenants-message");
    const value = name.value.trim();
    if (!/^[a-z0-9][a-z0-9_-]{1,63}$/.test(value)) {
      setFormErrors("nt", ["name"], { name: "2 to 64 characters: lower-case letters, digits, '-' or '_', starting with a letter or digit." });
      return;
    }
    setFormErrors("nt", ["name"], {});
    let created;
    try {
      created = await api("/api/v1/admin/tenants", { method: "POST", body: { name: value } });
    } catch (err) {
      const rest = err instanceof ApiError && err.status === 422
        ? setFormErrors("nt", ["name"], fieldErrors(err.detail))
        : [err.message];
      if (rest.length) clear(message, notice("error", `The tenant was not created: ${rest.join("; ")}`));
      return;
    }
    form.reset();
    tenants = [...tenants, created];
    renderTenants();
    // The add-user form offers the new tenant too.
    $("#new-user-form").replaceWith(userForm());
    clear(message, notice("success", `Created the tenant ${created.name}. Add its first user below.`));
    loadAudit();
  });
  return form;
}

async function loadTokens() {
  const box = $("#admin-tokens");
  let tokens;
  try {
    tokens = await api("/api/v1/admin/tokens");
  } catch (err) {
    clear(box, notice("error", `Could not load API tokens: ${err.message}`));
    return;
  }
  if (!tokens.length) {
    clear(box, h("p", { class: "subtle" }, "No active API tokens."));
    return;
  }
  clear(box, h("div", { class: "table-wrap" }, h("table", { id: "tokens-table", class: "cards" },
    h("caption", { class: "visually-hidden" }, "Active API tokens, newest first"),
    h("thead", {}, h("tr", {}, ["User", "Token", "Starts with", "Created", "Last used", "Expires", ""].map((c) =>
      h("th", { scope: "col" }, c || h("span", { class: "visually-hidden" }, "Actions"))))),
    h("tbody", {}, tokens.map((t) => h("tr", { class: t.state === "active" ? null : "is-muted", dataset: { tokenId: String(t.id), user: t.user_email } },
      h("td", { "data-label": "User" }, t.user_email, canEdit ? h("div", { class: "small subtle" }, tenantName(t.tenant_id)) : null),
      h("td", { "data-label": "Token" }, t.name),
      h("td", { class: "mono", "data-label": "Starts with" }, `${t.prefix}…`),
      h("td", { class: "nowrap", "data-label": "Created" }, formatTime(t.created_at)),
      h("td", { class: "nowrap", "data-label": "Last used" }, t.last_used_at ? formatTime(t.last_used_at) : "never"),
      h("td", { class: "nowrap", "data-label": "Expires" }, t.state === "expired" ? "expired" : t.expires_at ? formatTime(t.expires_at) : "never"),
      h("td", { class: "actions", "data-label": "" }, h("button", {
        type: "button",
        class: "btn btn-quiet btn-danger",
        "aria-label": `Revoke ${t.name} of ${t.user_email}`,
        onClick: () => revokeToken(t),
      }, "Revoke"))))))));
}

async function revokeToken(t) {
  if (!window.confirm(`Revoke ${t.user_email}'s token ${t.name}? Scripts using it stop working at once.`)) return;
  const message = $("#tokens-message");
  try {
    await api(`/api/v1/admin/tokens/${t.id}`, { method: "DELETE" });
  } catch (err) {
    clear(message, notice("error", `Could not revoke the token: ${err.message}`));
    return;
  }
  clear(message, notice("success", `Revoked ${t.user_email}'s token ${t.name}.`));
  loadTokens();
  loadAudit();
}

/** What the completion guard trades, in words an operator can choose by. */
function guardMeaning(fraction) {
  if (fraction <= 0) return "off: quality first, jobs near convergence may wait long";
  if (fraction >= 1) return "every job runs as often as round-robin would run it: mean completion near fair sharing";
  return `every job is served at least ${Math.round(fraction * 100)}% as often as round-robin would serve it`;
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
  const state = () => [
    h("p", {}, "Active policy: ", h("strong", { "data-testid": "active-policy" }, policy.active), "."),
    h("p", {}, "Completion guard (", policy.guarded.join(", "), "): ",
      h("strong", { "data-testid": "completion-guard" }, String(policy.completion_guard)), ", ",
      guardMeaning(policy.completion_guard), "."),
    h("p", {}, "Completion weight (slaq; COMPLETION_WEIGHT until changed here): ",
      h("strong", { "data-testid": "completion-weight" }, String(policy.completion_weight)), ", ",
      policy.completion_weight > 0
        ? `a job's score gains ${policy.completion_weight} over the seconds it has left, so jobs near their end finish sooner.`
        : "off: jobs are ranked on their predicted loss drop alone."),
  ];
  if (!canEdit) {
    clear(box, state(), h("p", { class: "small subtle" }, "Only platform admins change them."));
    return;
  }
  const select = h("select", { id: "policy-select", name: "name" },
    policy.available.map((p) => h("option", { value: p }, p)));
  select.value = policy.active;
  const guard = h("input", { id: "guard-input", name: "completion_guard", type: "number", min: "0", max: "1", step: "0.05",
    required: true, value: String(policy.completion_guard), "aria-describedby": "guard-help" });
  const weight = h("input", { id: "weight-input", name: "completion_weight", type: "number", min: "0", max: "1", step: "0.01",
    required: true, value: String(policy.completion_weight), "aria-describedby": "guard-help" });
  const message = h("div", { "aria-live": "polite" });
  const current = h("div", {}, state());
  const form = h("form", { id: "policy-form", class: "toolbar" },
    h("div", { class: "field" }, h("label", { for: "policy-select" }, "Choose a policy"), select),
    h("div", { class: "field" }, h("label", { for: "guard-input" }, "Completion guard"), guard),
    h("div", { class: "field" }, h("label", { for: "weight-input" }, "Completion weight"), weight),
    h("button", { type: "submit", class: "btn btn-primary" }, "Apply"));
  const help = h("p", { class: "small subtle", id: "guard-help" },
    "The completion guard trades quality for completion time: from 0 (off) to 1. ",
    "Higher values finish jobs sooner and keep less of slaq's lead on loss; ",
    "the completion weight (slaq only, from 0, off, to 1; 0.01 is already a clear nudge) moves jobs near their end ahead. ",
    "Try a guard or a weight on your own history with the what-if replay below first.");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      policy = await api("/api/v1/admin/policy", {
        method: "PUT", body: { name: select.value, completion_guard: Number(guard.value), completion_weight: Number(weight.value) } });
      clear(message, notice("success", `The scheduler now uses ${policy.active} with completion guard ${policy.completion_guard} and completion weight ${policy.completion_weight}, from its next round.`));
      clear(current, state());
      loadAudit();
    } catch (err) {
      clear(message, notice("error", `Could not change the policy: ${err.message}`));
    }
  });
  clear(box, current, form, help, message);
}

async function loadAudit() {
  const box = $("#audit");
  try {
    const entries = await api("/api/v1/admin/audit?limit=50");
    clear(box, entries.length ? h("div", { class: "table-wrap" }, h("table", {},
      h("caption", { class: "visually-hidden" }, "Recent admin actions, newest first"),
      h("thead", {}, h("tr", {}, ["When", "Who", "Action", "Target", "Details"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, entries.map((e) => h("tr", {},
        h("td", { class: "nowrap" }, formatTime(e.created_at)),
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
    canEdit ? null : notice("info", `You are a ${ROLE_LABELS[me.role]}: you see ${me.tenant_name}'s usage and settings read-only, and manage its users and their API tokens.`),
    h("section", { class: "panel", "aria-labelledby": "tenants-title" },
      h("h2", { id: "tenants-title" }, canEdit ? "Tenants and quotas" : "Your tenant's quotas"),
      h("div", { id: "tenants-message", "aria-live": "polite" }),
      h("div", { id: "tenants" }, notice("loading", "Loading tenants…")),
      h("div", { id: "quota-editor", class: "panel", hidden: true }),
      canEdit ? tenantForm() : null),
    h("section", { class: "panel", "aria-labelledby": "users-title" },
      h("h2", { id: "users-title" }, "Users"),
      h("div", { id: "users-message", "aria-live": "polite" }),
      h("div", { id: "users" }, notice("loading", "Loading users…")),
      userForm()),
    h("section", { class: "panel", "aria-labelledby": "tokens-title" },
      h("h2", { id: "tokens-title" }, "API tokens"),
      h("p", { class: "small subtle" }, canEdit ? "Every tenant's active tokens." : `Active tokens of ${me.tenant_name}'s users.`),
      h("div", { id: "tokens-message", "aria-live": "polite" }),
      h("div", { id: "admin-tokens" }, notice("loading", "Loading tokens…"))),
    h("section", { class: "panel", "aria-labelledby": "policy-title" },
      h("h2", { id: "policy-title" }, "Scheduling policy"), h("div", { id: "policy" })),
    canEdit ? h("section", { class: "panel", "aria-labelledby": "what-if-title" },
      h("h2", { id: "what-if-title" }, "What if?"), whatIfSection()) : null,
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
  tenants = first; // before the skeleton: the add-user form lists them
  skeleton();
  renderTenants();
  await Promise.all([loadPolicy(), loadUsers(), loadTokens(), loadAudit()]);
}

start();
