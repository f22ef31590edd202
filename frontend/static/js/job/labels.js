// The job's labels panel (labels.js): redrawn only when the labels or
// finishedness change, so an open form stays open across live updates.

import { clear, TERMINAL } from "../dom.js";
import { labelsPanel } from "../labels.js";

/** `onSaved(job)` gets the job with its new labels. */
export function createLabels(box, { onSaved }) {
  let key = null;
  box.id = "job-labels";
  return function update(job) {
    const next = JSON.stringify([job.name, job.tags, job.note, TERMINAL.has(job.status)]);
    if (key === next) return;
    key = next;
    clear(box, labelsPanel({
      run: job,
      kind: "job",
      finished: TERMINAL.has(job.status),
      onSaved,
      afterDelete: () => window.location.assign(`/jobs?deleted=${job.id}`),
    }));
  };
}
