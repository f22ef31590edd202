// The scheduler's latest grants to the job, newest first (GET /jobs/{id}/decisions).

import { clear, formatClock, formatNumber, h, notice } from "../dom.js";

const SHOWN = 10;

export function createDecisions(section) {
  const box = h("div", { id: "job-decisions" });
  section.setAttribute("aria-labelledby", "decisions-title");
  clear(section, h("h2", { id: "decisions-title" }, "Scheduler decisions"), box);

  return {
    update(decisions) {
      const list = decisions.slice(0, SHOWN);
      if (!list.length) {
        clear(box, h("p", { class: "subtle" }, "No slot granted yet."));
        return;
      }
      clear(
        box,
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "cards" },
            h("caption", { class: "visually-hidden" }, "Most recent grants first"),
            h("thead", {}, h("tr", {}, ["When", "Chunk", "Iterations", "Reason"].map((c) => h("th", { scope: "col" }, c)))),
            h(
              "tbody",
              {},
              list.map((d) =>
                h(
                  "tr",
                  {},
                  h("td", { class: "nowrap", "data-label": "When" }, formatClock(d.created_at)),
                  h("td", { class: "num", "data-label": "Chunk" }, String(d.chunk_seq)),
                  h("td", { class: "num", "data-label": "Iterations" }, formatNumber(d.iterations)),
                  h("td", { class: "reason", "data-label": "Reason", title: `policy ${d.policy}` }, d.reason),
                ),
              ),
            ),
          ),
        ),
        decisions.length > list.length
          ? h("p", { class: "small subtle" }, `${list.length} of ${decisions.length} shown.`)
          : null,
      );
    },
    failed(err) {
      clear(box, notice("error", `Could not load decisions: ${err.message}`));
    },
  };
}
