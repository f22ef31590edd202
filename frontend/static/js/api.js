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

function parseBody(text) {
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * POST a multipart form with upload progress (fetch reports none):
 * `onProgress(sentBytes, totalBytes)` while the body goes out, then
 * `onProgress(total, total, "processing")` while the server reads it.
 * Resolves to the parsed JSON; rejects with ApiError like `api`.
 */
export function upload(path, formData, onProgress = () => {}) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    xhr.setRequestHeader("Accept", "application/json");
    if (csrfToken) xhr.setRequestHeader("X-CSRF-Token", csrfToken);
    xhr.withCredentials = true;
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded, event.total);
    });
    xhr.upload.addEventListener("load", (event) => {
      onProgress(event.total || 0, event.total || 0, "processing");
    });
    xhr.addEventListener("load", () => {
      if (xhr.status === 401) {
        window.location.assign(loginUrl());
        return;
      }
      const data = parseBody(xhr.responseText);
      if (xhr.status >= 200 && xhr.status < 300) {
        resolve(data);
        return;
      }
      const detail = data && typeof data === "object" && "detail" in data ? data.detail : data;
      reject(new ApiError(xhr.status, detail));
    });
    xhr.addEventListener("error", () =>
      reject(new ApiError(0, "the upload was interrupted: the portal cannot be reached")),
    );
    xhr.addEventListener("abort", () => reject(new ApiError(0, "the upload was cancelled")));
    xhr.send(formData);
  });
}

/**
 * GET a file. Resolves to {blob, filename} (the name from Content-Disposition,
 * else `fallbackName`); rejects with ApiError like `api`.
 */
export async function fetchFile(path, fallbackName) {
  let response;
  try {
    response = await fetch(path, { credentials: "same-origin" });
  } catch {
    throw new ApiError(0, "the portal cannot be reached; check your connection");
  }
  if (response.status === 401) {
    window.location.assign(loginUrl());
    return new Promise(() => {});
  }
  if (!response.ok) {
    const data = parseBody(await response.text());
    const detail = data && typeof data === "object" && "detail" in data ? data.detail : data;
    throw new ApiError(response.status, detail);
  }
  const disposition = response.headers.get("Content-Disposition") || "";
  const match = /filename="([^"]+)"/.exec(disposition);
  return { blob: await response.blob(), filename: match ? match[1] : fallbackName, headers: response.headers };
}
