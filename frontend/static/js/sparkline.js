// A tiny loss sparkline as inline SVG (no Plotly: the jobs list may show
// dozens of them).

const SVG = "http://www.w3.org/2000/svg";
const W = 100;
const H = 30;

function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** An <svg> drawing `losses` (numbers) left to right; `label` for screen readers. */
export function sparkline(losses, label) {
  const values = (losses || []).filter((v) => Number.isFinite(v));
  if (values.length < 2) {
    const none = document.createElement("span");
    none.className = "spark-none";
    none.textContent = values.length ? "1 point" : "no points yet";
    return none;
  }
  const root = svg("svg", {
    class: "sparkline",
    viewBox: `0 0 ${W} ${H}`,
    preserveAspectRatio: "none",
    role: "img",
    "aria-label": label,
  });
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (hi - lo < 1e-12) {
    lo -= 1;
    hi += 1;
  }
  const step = W / (values.length - 1);
  const y = (v) => (H - 2 - ((v - lo) / (hi - lo)) * (H - 4)).toFixed(2);
  const d = values.map((v, i) => `${i ? "L" : "M"}${(i * step).toFixed(2)} ${y(v)}`).join(" ");
  root.appendChild(svg("path", { d }));
  return root;
}
