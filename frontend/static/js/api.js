// The REST API as the pages use it: same origin, the session cookie, and the
// CSRF token on every unsafe request. A 401 sends the browser to /login.

let csrfToken = null;

export function setCsrfToken(token) {
  csrfToken = token || null;
}

/** An HTTP error from the API, with its status and parsed `detail`. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(describeDetail(status, detail));
    this.status = status;
    this.detail = detail;
  }
}

function describeDetail(status, detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((d) => d.msg || JSON.stringify(d)).join("; ");
  if (detail && typeof detail === "object" && detail.message) return detail.message;
  return `request failed (HTTP ${status})`;
}

export function loginUrl() {
  const here = window.location.pathname + window.location.search;
  return `/login?next=${encodeURIComponent(here)}`;
}

const UNSAFE = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/**
 * Call the API. `body` is sent as JSON. Resolves to the parsed JSON (or null
 * for an empty response); rejects with ApiError. A 401 redirects to /login
 * unless `{redirectOn401: false}`.
 */
export async function api(path, { method = "GET", body, redirectOn401 = true, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (UNSAFE.has(method) && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      signal,
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "the portal cannot be reached; check your connection");
  }
  if (response.status === 401 && redirectOn401) {
    window.location.assign(loginUrl());
    // Never settle: the page is going away.
    return new Promise(() => {});
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!response.ok) {
    const detail = data && typeof data === "object" && "detail" in data ? data.detail : data;
    throw new ApiError(response.status, detail);
  }
  return data;
}

/**
 * Map a 422 `detail` list onto form fields: returns {fieldKey: message} where
 * fieldKey is the loc without its leading "body", joined by "." (e.g.
 * "params.learning_rate", "stopping.max_iterations"), plus `_form` for
 * messages that name no field.
 */
export function fieldErrors(detail) {
  const out = {};
  if (!Array.isArray(detail)) {
    out._form = describeDetail(422, detail);
    return out;
  }
  for (const item of detail) {
    const loc = Array.isArray(item.loc) ? item.loc.filter((p) => p !== "body") : [];
    const key = loc.length ? loc.join(".") : "_form";
    out[key] = out[key] ? `${out[key]}; ${item.msg}` : item.msg;
  }
  return out;
}
