// The job's headline numbers: progress, iterations, losses, training time,
// its pool, the latest evaluation. `update` draws them all from the job;
// `live` moves only those the loss stream changes between job refreshes.

import { clear, formatDuration, formatLoss, formatNumber, h, progressBar, TERMINAL } from "../dom.js";

const stat = (label, value, testid, cls) =>
  h("div", { class: cls }, h("dt", {}, label), h("dd", testid ? { "data-testid": testid } : {}, value));

// The latest evaluation's values (val_loss first), or a word on why there are none.
function lastEvalStats(job) {
  const entries = Object.entries(job.last_eval || {})
    .sort(([a], [b]) => (a === "val_loss" ? -1 : b === "val_loss" ? 1 : a.localeCompare(b)));
  if (!entries.length) {
    return [stat("Last evaluation", job.eval_every > 0 ? "none yet" : "off", "last-eval")];
  }
  const at = job.last_eval_iteration === null ? "—" : `iteration ${formatNumber(job.last_eval_iteration)}`;
  return [
    stat("Last evaluation", at, "last-eval"),
    ...entries.map(([name, value]) => stat(name, formatLoss(value), `last-eval-${name}`)),
  ];
}

export function createStats(section) {
  const list = h("dl", { class: "stats", id: "job-stats" });
  section.setAttribute("aria-labelledby", "stats-title");
  clear(section, h("h2", { id: "stats-title", class: "visually-hidden" }, "Progress"), list);
  const shown = (testid) => list.querySelector(`[data-testid=${testid}]`);

  return {
    update(job) {
      clear(
        list,
        stat("Progress", progressBar(job), null, "wide"),
        stat("Iterations", formatNumber(job.iterations_done), "iterations"),
        stat("Current loss", formatLoss(job.current_loss), "current-loss"),
        stat("Best loss", formatLoss(job.best_loss), "best-loss"),
        stat("First loss", formatLoss(job.initial_loss)),
        stat("Training time", formatDuration(job.elapsed_seconds)),
        stat("Chunks run", formatNumber(job.chunks_run)),
        stat("Worker pool", job.pool || "—", "pool"),
        // A finished job's last grant predicted a gain it no longer has ahead of it.
        stat("Predicted gain", job.predicted_gain === null || TERMINAL.has(job.status) ? "—" : formatLoss(job.predicted_gain)),
        stat("Scheduled on", job.quality_metric, "quality-metric"),
        ...lastEvalStats(job),
      );
    },
    /** The job's iterations, losses and progress as the stream moved them. */
    live(job) {
      shown("iterations").textContent = formatNumber(job.iterations_done);
      shown("current-loss").textContent = formatLoss(job.current_loss);
      shown("best-loss").textContent = formatLoss(job.best_loss);
      const bar = list.querySelector(".progress");
      if (bar) bar.replaceWith(progressBar(job));
    },
  };
}
