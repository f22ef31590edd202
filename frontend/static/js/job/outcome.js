// How a finished job ended: its error when it failed, its end reason when
// it completed or was cancelled; nothing while it is still going.

import { clear, h, notice } from "../dom.js";

export function createOutcome(box) {
  box.id = "job-outcome";
  return function update(job) {
    if (job.status === "failed") {
      clear(
        box,
        notice(
          "error",
          h("strong", {}, "The job failed. "),
          h("span", { "data-testid": "job-error" }, job.end_reason || "no reason recorded"),
          job.error && job.error !== job.end_reason ? h("pre", { class: "mono small" }, job.error) : null,
        ),
      );
    } else if (job.status === "completed" || job.status === "cancelled") {
      clear(box, notice(job.status === "completed" ? "success" : "info",
        h("strong", {}, job.status === "completed" ? "Finished: " : "Stopped: "),
        job.end_reason || job.status, ". The loss history is kept."));
    } else {
      clear(box);
    }
  };
}
