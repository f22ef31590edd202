// What every Plotly chart shares: colours read from the stylesheet's CSS
// variables (so charts follow the light or dark theme), axis styling, the
// portal's time format, and redrawing when the theme changes.

import { PLOT_CLOCK, PLOT_DATE_TIME } from "./format.js";

const DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

/** The chart colours of the theme in force, from app.css's --chart-* variables. */
export function chartColors() {
  const css = getComputedStyle(document.documentElement);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    bg: v("--chart-bg", "#ffffff"),
    ink: v("--chart-ink", "#1b1f24"),
    muted: v("--chart-muted", "#56606b"),
    grid: v("--chart-grid", "#e3e7eb"),
    line: v("--chart-line", "#0b5cad"),
    predicted: v("--chart-predicted", "#b35f00"),
    band: v("--chart-band", "rgba(214,126,0,0.18)"),
    running: v("--chart-running", "rgba(46,164,79,0.85)"),
    waiting: v("--chart-waiting", "rgba(210,153,34,0.28)"),
  };
}

/** Axis settings in the theme's colours, merged with `extra`. */
export function themedAxis(extra = {}) {
  const c = chartColors();
  return { gridcolor: c.grid, linecolor: c.grid, zerolinecolor: c.grid, ...extra };
}

/** A value axis: plain decimals, and exponents written "1e-4" as in the page text. */
export function valueAxis(extra = {}) {
  return themedAxis({ exponentformat: "e", separatethousands: true, ...extra });
}

/** A time axis with 24-hour "HH:MM:SS" ticks (dates once it spans days). */
export function timeAxis(extra = {}) {
  return themedAxis({
    type: "date",
    hoverformat: PLOT_CLOCK,
    // Ticks closer than a second apart would repeat the same HH:MM:SS.
    tickformatstops: [
      { dtickrange: [null, 1000], value: `${PLOT_CLOCK}.%L` },
      { dtickrange: [1000, 86400000], value: PLOT_CLOCK },
      { dtickrange: [86400000, null], value: "%Y-%m-%d" },
    ],
    ...extra,
  });
}

export { PLOT_DATE_TIME };

/** Layout fields every chart shares, in the theme's colours, merged with `extra`. */
export function baseLayout(extra = {}) {
  const c = chartColors();
  return {
    paper_bgcolor: c.bg,
    plot_bgcolor: c.bg,
    font: { family: "system-ui, sans-serif", size: 12, color: c.ink },
    hoverlabel: { bgcolor: c.bg, bordercolor: c.grid, font: { color: c.ink } },
    modebar: { bgcolor: "rgba(0,0,0,0)", color: c.muted, activecolor: c.ink },
    ...extra,
  };
}

/** Call `redraw` when the browser switches between light and dark. */
export function onThemeChange(redraw) {
  if (DARK && DARK.addEventListener) DARK.addEventListener("change", () => redraw());
}

export const PLOT_CONFIG = { responsive: true, displaylogo: false };
