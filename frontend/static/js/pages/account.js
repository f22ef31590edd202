// Your account: who you are, your API tokens (create one, shown once; revoke
// one, it stops working at once), and where the API is documented.

import { ApiError, api, fieldErrors } from "../api.js";
import { $, clear, formatTime, h, notice } from "../dom.js";
import { ROLE_LABELS, startPage } from "../layout.js";

function tokenState(t) {
  if (t.revoked_at) return "revoked";
  if (t.expires_at && new Date(t.expires_at) <= new Date()) return "expired";
  return "active";
}

async function loadTokens() {
  const box = $("#tokens");
  let tokens;
  try {
    tokens = await api("/api/v1/auth/tokens");
  } catch (err) {
    clear(box, notice("error", `Could not load your tokens: ${err.message}`));
    return;
  }
  tokens.reverse(); // newest first
  if (!tokens.length) {
    clear(box, h("p", { class: "subtle" }, "You have no API tokens. Create one below to call the API from scripts or the slaq command."));
    return;
  }
  clear(
    box,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { id: "my-tokens-table", class: "cards" },
        h("caption", { class: "visually-hidden" }, "Your API tokens, newest first"),
        h("thead", {}, h("tr", {}, ["Name", "Starts with", "Created", "Last used", "Expires", "State", ""].map((c) =>
          h("th", { scope: "col" }, c || h("span", { class: "visually-hidden" }, "Actions"))))),
        h(
          "tbody",
          {},
          tokens.map((t) => {
            const state = tokenState(t);
            return h(
              "tr",
              { class: state === "active" ? null : "is-muted", dataset: { tokenId: String(t.id), state } },
              h("td", { "data-label": "Name" }, h("strong", {}, t.name)),
              h("td", { class: "mono", "data-label": "Starts with" }, `${t.prefix}…`),
              h("td", { class: "nowrap", "data-label": "Created" }, formatTime(t.created_at)),
              h("td", { class: "nowrap", "data-label": "Last used" }, t.last_used_at ? formatTime(t.last_used_at) : "never"),
              h("td", { class: "nowrap", "data-label": "Expires" }, t.expires_at ? formatTime(t.expires_at) : "never"),
              h("td", { "data-label": "State" }, state === "revoked" ? `revoked ${formatTime(t.revoked_at)}` : state),
              h(
                "td",
                { class: "actions", "data-label": "" },
                state === "active"
                  ? h("button", { type: "button", class: "btn btn-quiet btn-danger", "aria-label": `Revoke ${t.name}`, onClick: () => revoke(t) }, "Revoke")
                  : null,
              ),
            );
          }),
        ),
      ),
    ),
  );
}

async function revoke(t) {
  if (!window.confirm(`Revoke the token ${t.name}? Scripts using it stop working at once.`)) return;
  const message = $("#tokens-message");
  try {
    await api(`/api/v1/auth/tokens/${t.id}`, { method: "DELETE" });
  } catch (err) {
    clear(message, notice("error", `Could not revoke ${t.name}: ${err.message}`));
    return;
  }
  clear(message, notice("success", `Revoked ${t.name}: it no longer works.`));
  loadTokens();
}

function createForm() {
  const name = h("input", { id: "token-name", name: "name", type: "text", maxlength: "100", autocomplete: "off", "aria-describedby": "token-name-error" });
  const days = h("input", { id: "token-days", name: "expires_in_days", type: "text", inputmode: "numeric", autocomplete: "off", placeholder: "never", "aria-describedby": "token-days-help token-days-error" });
  const errorOf = (id) => h("span", { class: "field-error", id: `${id}-error` });
  const form = h(
    "form",
    { id: "token-form", class: "inline-form", novalidate: true },
    h("div", { class: "field" }, h("label", { for: "token-name" }, "Token name"), name, errorOf("token-name")),
    h("div", { class: "field" }, h("label", { for: "token-days" }, "Expires after (days)"), days,
      h("span", { class: "help", id: "token-days-help" }, "1 to 3650; empty: never."), errorOf("token-days")),
    h("button", { type: "submit", class: "btn btn-primary" }, "Create token"),
  );
  const setError = (id, text) => {
    $(`#${id}-error`).textContent = text || "";
    if (text) $(`#${id}`).setAttribute("aria-invalid", "true");
    else $(`#${id}`).removeAttribute("aria-invalid");
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const message = $("#token-created");
    setError("token-name", "");
    setError("token-days", "");
    const body = { name: name.value.trim() };
    const rawDays = days.value.trim();
    if (!body.name) {
      setError("token-name", "Name the token, e.g. after the script that uses it.");
      name.focus();
      return;
    }
    if (rawDays) {
      const n = Number(rawDays);
      if (!Number.isInteger(n) || n < 1 || n > 3650) {
        setError("token-days", "Enter a whole number of days from 1 to 3650, or leave it empty.");
        days.focus();
        return;
      }
      body.expires_in_days = n;
    }
    let created;
    try {
      created = await api("/api/v1/auth/tokens", { method: "POST", body });
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) {
        const errors = fieldErrors(err.detail);
        setError("token-name", errors.name || "");
        setError("token-days", errors.expires_in_days || "");
        if (!errors.name && !errors.expires_in_days) clear(message, notice("error", err.message));
      } else {
        clear(message, notice("error", `Could not create the token: ${err.message}`));
      }
      return;
    }
    form.reset();
    clear(
      message,
      notice(
        "success",
        h("strong", {}, `Token ${created.name} created. Copy it now: it is not shown again.`),
        h("code", { class: "secret", "data-testid": "new-token" }, created.token),
        h("span", { class: "small" }, "Send it as ", h("code", {}, "Authorization: Bearer <token>"), "."),
      ),
    );
    loadTokens();
  });
  return form;
}

async function main() {
  const me = await startPage("account");
  clear(
    $("#account-root"),
    h(
      "section",
      { class: "panel", "aria-labelledby": "me-title" },
      h("h2", { id: "me-title" }, "You"),
      h(
        "dl",
        { class: "kv" },
        h("dt", {}, "Email"), h("dd", {}, me.email),
        h("dt", {}, "Tenant"), h("dd", {}, me.tenant_name),
        h("dt", {}, "Role"), h("dd", {}, ROLE_LABELS[me.role] || me.role),
      ),
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "tokens-title" },
      h("h2", { id: "tokens-title" }, "API tokens"),
      h("p", { class: "small subtle" }, "Tokens let scripts and the slaq command act as you. Revoke one you no longer use or may have leaked."),
      h("div", { id: "tokens-message", "aria-live": "polite" }),
      h("div", { id: "tokens" }, notice("loading", "Loading your tokens…")),
      h("h3", {}, "Create a token"),
      createForm(),
      h("div", { id: "token-created", "aria-live": "polite" }),
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "api-title" },
      h("h2", { id: "api-title" }, "The API"),
      h(
        "ul",
        { class: "docs-links" },
        h("li", {}, h("a", { href: "/docs" }, "Interactive reference (Swagger UI)"), ": try any route with your session."),
        h("li", {}, h("a", { href: "/redoc" }, "Readable reference (ReDoc)")),
        h("li", {}, h("a", { href: "/openapi.json" }, "OpenAPI schema (JSON)")),
      ),
    ),
  );
  await loadTokens();
}

main();
