// The job page's head: the job's name with its status badge, and its
// controls (pause, resume, cancel, clone, download the model, continue),
// each enabled only when it applies, with a title saying why not.

import { api } from "../api.js";
import { clear, h, jobTitle, statusBadge, TERMINAL } from "../dom.js";
import { CONTINUABLE } from "./continue-form.js";
import { downloadModel } from "./downloads.js";

const DONE = { pause: "paused", resume: "resumed and queued", cancel: "cancelled" };

/**
 * `head` is the page head to fill. `current()` is the job as the page last
 * heard of it; `say(kind, ...text)` its message line; `onJob(job, askedAt)`
 * gets the job a control returned, `onRefused()` runs when one was refused
 * (the job may have moved meanwhile); `onContinue()` opens the continue form.
 */
export function createHeader(head, { jobId, current, say, onJob, onRefused, onContinue }) {
  const title = h("h1", { id: "job-title" });
  const button = (id, label, onClick, cls = "btn") => h("button", { type: "button", class: cls, id, onClick }, label);
  const pause = button("btn-pause", "Pause", () => control("pause"));
  const resume = button("btn-resume", "Resume", () => control("resume"));
  const cancel = button("btn-cancel", "Cancel", () => control("cancel"), "btn btn-danger");
  const model = button("btn-model", "Download model", fetchModel);
  const resumeFrom = button("btn-continue", "Continue training", onContinue);
  clear(
    head,
    title,
    h(
      "div",
      { class: "btn-row", role: "group", "aria-label": "Job controls" },
      pause,
      resume,
      cancel,
      h("a", { class: "btn", href: `/submit?clone=${jobId}`, id: "btn-clone" }, "Clone"),
      model,
      resumeFrom,
    ),
  );

  async function control(action) {
    if (action === "cancel" && !window.confirm("Cancel this job for good? Its loss history is kept.")) return;
    [pause, resume, cancel].forEach((b) => { b.disabled = true; });
    let job;
    let askedAt;
    try {
      askedAt = performance.now();
      job = await api(`/api/v1/jobs/${jobId}/${action}`, { method: "POST" });
    } catch (err) {
      say("error", `Could not ${action} the job: ${err.message}`);
      await onRefused();
      return;
    }
    say("success", `Job ${DONE[action]}.`);
    onJob(job, askedAt);
  }

  async function fetchModel() {
    model.disabled = true;
    try {
      await downloadModel(jobId, { say });
    } finally {
      model.disabled = current().iterations_done === 0;
    }
  }

  /** `status` is the status to show (a chunk in flight reads "running" whatever the job says). */
  return function update(job, status) {
    clear(title, jobTitle(job), " ", statusBadge(status));
    title.dataset.status = status;
    pause.disabled = !["queued", "running"].includes(job.status);
    resume.disabled = job.status !== "paused";
    cancel.disabled = TERMINAL.has(job.status);
    const continuable = CONTINUABLE.has(job.status);
    resumeFrom.disabled = !continuable;
    resumeFrom.title = continuable
      ? "Train on from its last checkpoint with more iterations or another stopping rule"
      : job.status === "failed"
        ? "A failed job would fail the same way from its checkpoint: clone it instead"
        : "Only a finished job (completed or cancelled) can be continued";
    model.disabled = job.iterations_done === 0;
    // The file's format is the trainer's (numpy .npz, PyTorch .pt, or a
    // plugin's own bytes): the download says which, with how to load it.
    model.title = job.iterations_done === 0
      ? "No model yet: the job has not run"
      : TERMINAL.has(job.status)
        ? "The trained model's checkpoint, in its trainer's format"
        : "The model as trained so far, in its trainer's format";
  };
}
