// Why the job waits: one plain summary from the server (what it waits for,
// its place, roughly when; backend/services/job_explanation.py), the
// scheduler's technical reason only on demand. A finished job's ending is
// told by the outcome box, never by its last rank.

import { clear, h, TERMINAL } from "../dom.js";

const RETRY_MS = 1500;
const RETRIES = 3;

// The server's words for a running job (backend/services/job_explanation.py).
const RUNNING_SUMMARY = "Running: it holds a slot for its current chunk of iterations.";

/**
 * `retry()` is called when a job just queued has no place yet: the
 * scheduler places it within a second or so, and no event says when it has.
 */
export function createReason(box, { retry }) {
  let retries = 0;
  let timer = null;
  box.id = "scheduler-reason";

  /** `status` is the status the page shows (a chunk in flight reads "running"). */
  return function update(job, status) {
    const explanation = job.explanation;
    if (job.status !== "queued" || (explanation && explanation.position !== null)) retries = 0;
    else if (!timer && retries < RETRIES) {
      // Ask again a few times: far back in a huge queue it may stay
      // unplaced, and the page's slow poll covers that.
      retries += 1;
      timer = setTimeout(() => {
        timer = null;
        retry();
      }, RETRY_MS);
    }
    if (explanation && !TERMINAL.has(job.status)) {
      const summary = status !== job.status ? RUNNING_SUMMARY : explanation.summary;
      clear(box, h(
        "div",
        { class: "notice notice-info" },
        h("span", { "data-testid": "scheduler-reason" }, summary),
        explanation.detail
          ? h("details", { class: "why", "data-testid": "reason-detail" },
            h("summary", {}, "Why?"),
            h("p", { class: "small mono" }, explanation.detail))
          : null,
      ));
    } else clear(box);
  };
}
