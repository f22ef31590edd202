// The job's specification (what it trains, on what, with which parameters,
// when it stops, when it ran) and uploaded trainer code's own prints: where
// its author looks first when the job fails (shown open then) or behaves oddly.

import { clear, formatLoss, formatNumber, formatTime, h } from "../dom.js";
import { datasetLabel, uploadId } from "../uploads.js";

function paramText(params) {
  const entries = Object.entries(params || {});
  if (!entries.length) return "defaults";
  return h("span", { class: "mono" }, entries.map(([k, v]) => `${k}=${v}`).join(", "));
}

function stopping(job) {
  const s = job.stopping;
  return [
    `at most ${formatNumber(s.max_iterations)} iterations`,
    s.target_loss !== null ? `${job.quality_metric} ≤ ${formatLoss(s.target_loss)}` : null,
    s.tolerance !== null ? `relative change < ${formatLoss(s.tolerance)} over ${formatNumber(s.window)} iterations` : "no convergence test",
  ].filter(Boolean).join("; ");
}

export function createSpec(section) {
  const list = h("dl", { class: "kv", id: "job-spec" });
  const outputBox = h("div", { id: "trainer-output-box" });
  section.setAttribute("aria-labelledby", "spec-title");
  clear(section, h("h2", { id: "spec-title" }, "Specification"), list, outputBox);

  return function update(job) {
    const printed = job.trainer_output || "";
    const shown = outputBox.querySelector("#trainer-output");
    if (!printed) clear(outputBox);
    else if (!shown || shown.textContent !== printed) {
      clear(outputBox, h("details", { open: job.status === "failed" },
        h("summary", {}, "Trainer output (last chunk)"),
        h("pre", { class: "mono small", id: "trainer-output" }, printed)));
    }

    const kv = [];
    const add = (k, v) => kv.push(h("dt", {}, k), h("dd", {}, v));
    add("Job", `#${job.id}`);
    add("Algorithm", job.algorithm);
    add("Dataset", uploadId(job.dataset) === null
      ? job.dataset
      : [h("a", { href: "/datasets" }, datasetLabel(job.dataset)), " ", h("span", { class: "subtle mono small" }, `(${job.dataset})`)]);
    add("Parameters", paramText(job.params));
    if (Object.keys(job.dataset_params || {}).length) add("Dataset parameters", paramText(job.dataset_params));
    add("Seed", String(job.seed));
    add("Evaluation", job.eval_every > 0
      ? `on the held-out split every ${formatNumber(job.eval_every)} iterations`
      : "off (eval_every 0)");
    add("Quality metric", job.quality_metric === "val_loss"
      ? "val_loss: the scheduler and the loss target follow the held-out loss"
      : "loss: the scheduler and the loss target follow the training loss");
    add("Stopping", stopping(job));
    add("Submitted", formatTime(job.created_at));
    add("Started", formatTime(job.started_at));
    add("Finished", formatTime(job.finished_at));
    clear(list, kv);
  };
}
