// The shared page frame: site header with navigation, who you are and your
// tenant, and sign-out. Every signed-in page starts with `startPage(...)`.

import { api, ApiError, setCsrfToken } from "./api.js";
import { $, clear, h, notice } from "./dom.js";

const NAV = [
  { key: "jobs", href: "/jobs", label: "Jobs" },
  { key: "submit", href: "/submit", label: "Submit" },
  { key: "experiments", href: "/experiments", label: "Experiments" },
  { key: "datasets", href: "/datasets", label: "Datasets" },
  { key: "cluster", href: "/cluster", label: "Cluster" },
  { key: "admin", href: "/admin", label: "Admin", roles: ["tenant_admin", "platform_admin"] },
  { key: "help", href: "/help", label: "Help" },
  { key: "docs", href: "/docs", label: "API docs" },
];

export const ROLE_LABELS = {
  member: "member",
  tenant_admin: "tenant admin",
  platform_admin: "platform admin",
};

function renderHeader(active, me) {
  const header = $("#site-header");
  const links = NAV.filter((item) => !item.roles || (me && item.roles.includes(me.role))).map(
    (item) =>
      h(
        "li",
        {},
        h(
          "a",
          { href: item.href, "aria-current": item.key === active ? "page" : null },
          item.label,
        ),
      ),
  );
  const who = me
    ? h(
        "div",
        { class: "whoami", "data-testid": "whoami" },
        h(
          "a",
          {
            class: "whoami-email",
            href: "/account",
            title: "Your account and API tokens",
            "aria-current": active === "account" ? "page" : null,
          },
          me.email,
        ),
        h(
          "span",
          { class: "whoami-tenant" },
          "Tenant ",
          h("strong", { "data-testid": "tenant-name" }, me.tenant_name),
          ` · ${ROLE_LABELS[me.role] || me.role}`,
        ),
        h("button", { type: "button", class: "btn btn-quiet", onClick: signOut }, "Sign out"),
      )
    : null;
  clear(
    header,
    h(
      "div",
      { class: "header-inner" },
      h("a", { class: "brand", href: "/jobs" }, "SLAQ", h("span", {}, " portal")),
      h("nav", { "aria-label": "Main" }, h("ul", {}, links)),
      who,
    ),
  );
}

async function signOut() {
  try {
    await api("/api/v1/auth/logout", { method: "POST", redirectOn401: false });
  } catch {
    // Signed out or not, the login page is where we go.
  }
  window.location.assign("/login");
}

/**
 * Draw the header, load who is signed in (redirecting to /login on 401) and
 * return them: {id, email, role, tenant_id, tenant_name, csrf_token}.
 */
export async function startPage(active) {
  renderHeader(active, null);
  try {
    const me = await api("/api/v1/auth/me");
    setCsrfToken(me.csrf_token);
    renderHeader(active, me);
    return me;
  } catch (err) {
    const main = $("#main");
    clear(
      main,
      notice(
        "error",
        h("strong", {}, "The portal could not load your account. "),
        err instanceof ApiError ? err.message : String(err),
        " ",
        h("a", { href: window.location.href }, "Try again"),
      ),
    );
    throw err;
  }
}
