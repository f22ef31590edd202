// Small DOM and formatting helpers. Text always goes in as text nodes, never
// as HTML, so job names and server messages cannot inject markup.

/**
 * h("a", {href: "/x", class: "btn"}, "text", child) -> element.
 * Attributes: `class`, `dataset` (object), `on<Event>` (listener), booleans
 * (true sets, false/null omits), anything else via setAttribute.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "value") el.value = value;
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const $ = (selector, root = document) => root.querySelector(selector);

/** A status message region: kind is "info", "error", "success" or "loading". */
export function notice(kind, ...children) {
  const role = kind === "error" ? "alert" : "status";
  return h("div", { class: `notice notice-${kind}`, role }, ...children);
}

export function formatLoss(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "—";
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e5)) return value.toExponential(3);
  return value.toPrecision(4).replace(/\.?0+$/, "") || "0";
}

export function formatNumber(value) {
  if (value === null || value === undefined) return "—";
  return Number(value).toLocaleString("en-US");
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${seconds < 10 ? seconds.toFixed(1) : s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/**
 * Parse an API time. Every stored time is UTC, but some endpoints return it
 * without a zone (SQLite hands back naive datetimes): read those as UTC too.
 */
export function parseTime(iso) {
  if (!iso) return null;
  const zoned = /(Z|[+-]\d\d:?\d\d)$/.test(iso) ? iso : `${iso}Z`;
  return new Date(zoned);
}

export function formatTime(iso) {
  if (!iso) return "—";
  const d = parseTime(iso);
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

export function relativeTime(iso) {
  if (!iso) return "—";
  const seconds = (Date.now() - parseTime(iso).getTime()) / 1000;
  if (seconds < 45) return "just now";
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

export const TERMINAL = new Set(["completed", "failed", "cancelled"]);

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status);
}

export function progressBar(job) {
  const pct = Math.round((job.progress || 0) * 1000) / 10;
  const max = job.stopping ? job.stopping.max_iterations : null;
  const label = max
    ? `${formatNumber(job.iterations_done)} / ${formatNumber(max)} iterations`
    : `${pct}%`;
  return h(
    "div",
    { class: "progress" },
    h("progress", { max: "100", value: String(pct), "aria-label": `Progress: ${label}` }),
    h("span", { class: "progress-label" }, label),
  );
}

export function jobTitle(job) {
  return job.name || `${job.algorithm} on ${job.dataset}`;
}

/** Save text as a file the user downloads. */
export function download(filename, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h("a", { href: url, download: filename, hidden: true });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Run `fn` at most once per `ms`; the latest call made meanwhile runs after. */
export function throttle(fn, ms) {
  let timer = null;
  let queued = null;
  const tick = () => {
    if (queued) {
      const args = queued;
      queued = null;
      fn(...args);
      timer = setTimeout(tick, ms);
    } else {
      timer = null;
    }
  };
  return (...args) => {
    if (timer) {
      queued = args;
      return;
    }
    fn(...args);
    timer = setTimeout(tick, ms);
  };
}
