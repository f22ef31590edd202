// Compare page, /compare?jobs=1,2,3: the chosen runs side by side (compare.js),
// polled every few seconds while any of them still trains.

import { api, ApiError } from "../api.js";
import { createCompare } from "../compare.js";
import { $, clear, h, notice, TERMINAL } from "../dom.js";
import { startPage } from "../layout.js";
import { showState } from "../live.js";
import { loadUploads } from "../uploads.js";

const POLL_MS = 4000;
const MAX_RUNS = 50;

function wantedIds() {
  const raw = new URLSearchParams(window.location.search).get("jobs") || "";
  const ids = raw.split(",").map((s) => s.trim()).filter(Boolean);
  const good = [...new Set(ids.filter((s) => /^\d+$/.test(s)).map(Number))];
  return { good: good.slice(0, MAX_RUNS), bad: ids.filter((s) => !/^\d+$/.test(s)), capped: good.length > MAX_RUNS };
}

async function loadJobs(ids, missing) {
  const jobs = await Promise.all(
    ids.map((id) =>
      api(`/api/v1/jobs/${id}`).catch((err) => {
        if (err instanceof ApiError && (err.status === 404 || err.status === 403)) missing.add(id);
        return null;
      }),
    ),
  );
  return jobs.filter(Boolean);
}

async function main() {
  await startPage("jobs");
  await loadUploads();
  const { good, bad, capped } = wantedIds();
  const message = $("#compare-message");
  const root = $("#compare-root");
  if (good.length === 0) {
    clear(
      root,
      notice("info", "Choose runs to compare: tick them in the ", h("a", { href: "/jobs" }, "jobs list"), " and select Compare."),
    );
    return;
  }
  const missing = new Set();
  let jobs = await loadJobs(good, missing);
  const problems = [];
  if (bad.length) problems.push(`Not job numbers: ${bad.join(", ")}.`);
  if (capped) problems.push(`Only the first ${MAX_RUNS} runs are compared.`);
  const showProblems = () => {
    const all = [...problems];
    if (missing.size) all.push(`No job ${[...missing].map((id) => `#${id}`).join(", ")} in your tenant.`);
    clear(message, all.length ? notice("warn", all.join(" ")) : null);
  };
  showProblems();
  if (!jobs.length) {
    clear(root, notice("error", "None of these runs could be loaded."));
    return;
  }
  const view = createCompare(root);
  await view.update(jobs);
  showState($("#compare-live"), jobs.every((j) => TERMINAL.has(j.status)) ? "off" : "live");

  // Finished runs no longer change; poll only those still going.
  const poll = async () => {
    const open = jobs.filter((j) => !TERMINAL.has(j.status));
    if (!open.length) {
      showState($("#compare-live"), "off");
      return;
    }
    if (document.visibilityState === "visible") {
      const fresh = await loadJobs(open.map((j) => j.id), missing);
      const byId = new Map(fresh.map((j) => [j.id, j]));
      jobs = jobs.filter((j) => !missing.has(j.id)).map((j) => byId.get(j.id) || j);
      showProblems();
      await view.update(jobs);
    }
    setTimeout(poll, POLL_MS);
  };
  setTimeout(poll, POLL_MS);
}

main();
