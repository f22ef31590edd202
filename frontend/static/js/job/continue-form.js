// Continuing a finished job (POST /api/v1/jobs/{id}/continue): a form,
// filled from the job, for its new iteration limit and stopping rule. The
// server says why when it refuses; the page's message line shows it.

import { api } from "../api.js";
import { clear, formatNumber, h } from "../dom.js";

/** The statuses a job can be continued from (a failed one would fail the same way). */
export const CONTINUABLE = new Set(["completed", "cancelled"]);

function optionalNumber(text) {
  const t = text.trim();
  return t === "" ? null : Number(t);
}

const field = (id, label, input, help) => h(
  "div",
  { class: "field" },
  h("label", { for: id }, label),
  input,
  help ? h("span", { class: "small subtle", id: `${id}-help` }, help) : null,
);

/**
 * `form` is the page's <form> to fill; `say(kind, ...text)` the page's
 * message line; `onJob(job, askedAt)` gets the continued job.
 */
export function createContinueForm(form, { jobId, say, onJob }) {
  const max = h("input", { id: "continue-max", name: "max_iterations", type: "number", min: "1", step: "1", required: true, "aria-describedby": "continue-max-help" });
  const target = h("input", { id: "continue-target", name: "target_loss", inputmode: "decimal", placeholder: "none", "aria-describedby": "continue-target-help" });
  const tolerance = h("input", { id: "continue-tolerance", name: "tolerance", inputmode: "decimal", placeholder: "off", "aria-describedby": "continue-tolerance-help" });
  const submit = h("button", { type: "submit", class: "btn btn-primary", id: "continue-submit" }, "Continue");
  form.id = "continue-form";
  form.className = "panel stack";
  form.hidden = true;
  form.setAttribute("aria-labelledby", "continue-title");
  clear(
    form,
    h("h2", { id: "continue-title" }, "Continue training"),
    h("p", { class: "small subtle" },
      "The job trains on from its last checkpoint, its loss history kept; it is queued again and counts against your team's quotas like a new job."),
    h(
      "div",
      { class: "grid-3" },
      field("continue-max", "Max iterations", max, "More than the iterations it has done (the server says why if not)"),
      field("continue-target", "Target", target, "Empty: no target"),
      field("continue-tolerance", "Convergence tolerance", tolerance, "Empty: no convergence test"),
    ),
    h(
      "div",
      { class: "btn-row" },
      submit,
      h("button", { type: "button", class: "btn", id: "continue-close", onClick: () => { form.hidden = true; } }, "Close"),
    ),
  );

  async function send() {
    const body = {
      max_iterations: Number(max.value),
      target_loss: optionalNumber(target.value),
      tolerance: optionalNumber(tolerance.value),
    };
    for (const [name, value] of Object.entries(body)) {
      if (value !== null && !Number.isFinite(value)) {
        say("error", `Could not continue the job: ${name} must be a number.`);
        return;
      }
    }
    submit.disabled = true;
    let continued;
    let askedAt;
    try {
      askedAt = performance.now();
      continued = await api(`/api/v1/jobs/${jobId}/continue`, { method: "POST", body });
      form.hidden = true;
      say("success",
        `Job continued: queued to train from iteration ${formatNumber(continued.iterations_done)} to at most ${formatNumber(continued.stopping.max_iterations)}.`);
    } catch (err) {
      say("error", `Could not continue the job: ${err.message}`);
      return;
    } finally {
      submit.disabled = false;
    }
    onJob(continued, askedAt);
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });

  return {
    /** Show the form, filled from `job`: twice the iterations it has done, its target and tolerance. */
    open(job) {
      const s = job.stopping;
      max.value = String(Math.max(s.max_iterations, job.iterations_done) * 2);
      target.value = s.target_loss === null ? "" : String(s.target_loss);
      tolerance.value = s.tolerance === null ? "" : String(s.tolerance);
      form.hidden = false;
      max.focus();
    },
    /** Hidden once the job can no longer be continued. */
    update(job) {
      if (!CONTINUABLE.has(job.status)) form.hidden = true;
    },
  };
}
