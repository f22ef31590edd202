// The job page's "Other metrics" panel: every metric beyond the loss
// (job-metrics.js draws them; the held-out loss goes on the loss chart).

import { clear, formatNumber, h } from "../dom.js";
import { drawMetricsChart } from "../job-metrics.js";

export function createMetricsChart(section) {
  const chart = h("div", { id: "metrics-chart", class: "chart", role: "img", "aria-label": "Training and validation metrics other than the loss, by iteration" });
  const note = h("p", { id: "metrics-note", class: "small subtle", "aria-live": "polite" });
  section.setAttribute("aria-labelledby", "metrics-title");
  clear(section, h("div", { class: "page-head" }, h("h2", { id: "metrics-title" }, "Other metrics")), chart, note);

  return {
    /** Draw (or redraw, keeping the zoom) `metrics`, GET /jobs/{id}/metrics, of `job`. */
    update(job, metrics) {
      const waiting = job.eval_every > 0
        ? `No other metrics yet: held-out metrics every ${formatNumber(job.eval_every)} iterations`
        : "This job records no other metrics";
      // The chart says it briefly (a phone-wide chart cuts long text); the note
      // below says when to expect them.
      const series = drawMetricsChart(chart, metrics, job.eval_every > 0 ? "No other metrics yet" : "No other metrics");
      const evals = metrics.eval.val_loss || metrics.eval.loss;
      const parts = [];
      if (series.length) parts.push(`${series.map((s) => s.label).join(", ")} by iteration; held-out metrics dashed.`);
      else parts.push(`${waiting}.`);
      if (evals) parts.push(`val_loss: ${formatNumber(evals.total_points)} evaluations, drawn on the loss chart.`);
      note.textContent = parts.join(" ");
    },
    failed(err) {
      note.textContent = `The metrics could not be loaded (${err.message}).`;
    },
  };
}
