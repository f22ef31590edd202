// The text a language model generated at its latest evaluation, hidden for
// a job that has none. Set as textContent: whatever the model writes (markup
// included) shows as the characters it is, never as HTML.

import { clear, formatNumber, h } from "../dom.js";

export function createSample(section) {
  const note = h("p", { class: "small subtle", id: "sample-note" });
  const pre = h("pre", { class: "mono sample-text", id: "sample-text", "data-testid": "text-sample" });
  section.id = "sample-panel";
  section.setAttribute("aria-labelledby", "sample-title");
  section.hidden = true;
  clear(section, h("h2", { id: "sample-title" }, "Generated text"), note, pre);

  return function update(job) {
    const text = job.text_sample;
    section.hidden = text === null || text === undefined;
    if (section.hidden) return;
    note.textContent = `Sampled from the model at its evaluation at iteration ${formatNumber(job.text_sample_iteration)}: `
      + "the start of its text, continued one character at a time. A new sample comes with every evaluation.";
    if (pre.textContent !== text) pre.textContent = text;
  };
}
