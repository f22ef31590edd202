// One way to write numbers and times on every page: 4 significant digits,
// plain decimals from 0.001 up to a million and "1.429e-4"-style exponents
// outside that range; counts with thousands separators; times on a 24-hour
// clock, "HH:MM:SS", in the browser's time zone.

const DIGITS = 4;
const SMALL = 1e-3;
const LARGE = 1e6;

function trimZeros(text) {
  // Only after a decimal point: "1000" keeps its zeros, "1.500" loses two.
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}

function exponential(n) {
  const [mantissa, exponent] = n.toExponential(DIGITS - 1).split("e");
  return `${trimZeros(mantissa)}e${exponent}`;
}

/** A measured value (a loss, a gain, a cell of data) to 4 significant digits. */
export function formatValue(value) {
  if (value === null || value === undefined || value === "") return "—";
  const n = Number(value);
  if (Number.isNaN(n)) return "—";
  if (!Number.isFinite(n)) return n > 0 ? "∞" : "−∞";
  if (n === 0) return "0";
  const rounded = Number(n.toPrecision(DIGITS));
  const abs = Math.abs(rounded);
  if (abs < SMALL || abs >= LARGE) return exponential(n);
  const decimals = Math.max(0, DIGITS - 1 - Math.floor(Math.log10(abs)));
  return trimZeros(rounded.toFixed(decimals));
}

export const formatLoss = formatValue;

/** A count or limit: whole numbers with separators ("12,345"); any fraction as formatValue. */
export function formatNumber(value) {
  if (value === null || value === undefined || value === "") return "—";
  const n = Number(value);
  if (!Number.isInteger(n)) return formatValue(n);
  return Math.abs(n) >= LARGE * 1000 ? exponential(n) : n.toLocaleString("en-US");
}

export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${formatValue(bytes / 1024)} KB`;
  return `${formatValue(bytes / (1024 * 1024))} MB`;
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${seconds < 10 ? formatValue(Number(seconds.toFixed(1))) : s} s`;
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
  if (iso instanceof Date) return iso;
  const zoned = /(Z|[+-]\d\d:?\d\d)$/.test(iso) ? iso : `${iso}Z`;
  return new Date(zoned);
}

const pad = (n) => String(n).padStart(2, "0");

/** "14:03:27" (24-hour, local time). */
export function formatClock(iso) {
  const d = parseTime(iso);
  if (!d || Number.isNaN(d.getTime())) return "—";
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** "2025-11-23 14:03:27" (24-hour, local time). */
export function formatTime(iso) {
  const d = parseTime(iso);
  if (!d || Number.isNaN(d.getTime())) return "—";
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${formatClock(d)}`;
}

export function relativeTime(iso) {
  if (!iso) return "—";
  const seconds = (Date.now() - parseTime(iso).getTime()) / 1000;
  if (seconds < 45) return "just now";
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

// The same formats for Plotly (d3 time formats), so chart axes and hovers
// read like the text around them.
export const PLOT_CLOCK = "%H:%M:%S";
export const PLOT_DATE_TIME = "%Y-%m-%d %H:%M:%S";
