// Small DOM and formatting helpers. Text always goes in as text nodes, never
// as HTML, so job names and server messages cannot inject markup.

import { formatNumber } from "./format.js";
import { datasetLabel, jobName } from "./uploads.js";

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

// Numbers and times are written one way on every page (format.js).
export {
  formatBytes,
  formatClock,
  formatDuration,
  formatLoss,
  formatNumber,
  formatTime,
  formatValue,
  parseTime,
  relativeTime,
} from "./format.js";

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
  return job.name ? jobName(job.name) : `${job.algorithm} on ${datasetLabel(job.dataset)}`;
}

/** Save text (or a Blob) as a file the user downloads. */
export function download(filename, data, type) {
  const blob = data instanceof Blob ? data : new Blob([data], { type });
  const url = URL.createObjectURL(blob);
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
