"""The job page never contradicts the job (issue 38): while the job trains
its badge does not read "queued" nor its summary "will place it in line";
at the end it reads completed with its finish time; and the predicted band
starts after the last drawn loss point and stays at or above 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

ITERATIONS = 24_000  # ten-odd seconds of chunks of 0.5 s: long enough for fits to be drawn

# What the page shows, read in one go (the chart's traces: loss, band low, ...).
SNAPSHOT = """() => {
  const title = document.querySelector("#job-title");
  const gd = document.getElementById("loss-chart");
  const data = gd && gd.data ? gd.data : [];
  const loss = data[0] ? Array.from(data[0].x) : [];
  const band = data[1] ? Array.from(data[1].x) : [];
  const low = data[1] ? Array.from(data[1].y) : [];
  const reason = document.querySelector("[data-testid=scheduler-reason]");
  return {
    status: title ? title.dataset.status : null,
    lastX: loss.length ? loss[loss.length - 1] : 0,
    bandFirst: band.length ? band[0] : null,
    minLow: low.length ? Math.min(...low) : null,
    summary: reason ? reason.textContent : "",
  };
}"""


def test_job_page_status_follows_the_job_from_start_to_finish(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("sam@status-team.test", tenant="status-team")
    sign_in(page, user, "/jobs")
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={
            "algorithm": "logistic_regression", "dataset": "digits",
            "params": {"learning_rate": 0.05},
            "stopping": {"max_iterations": ITERATIONS, "tolerance": None}}).json()["id"]
        page.goto(f"/jobs/{job_id}")
        page.locator("#job-title[data-status]").wait_for()

        samples: list[dict[str, Any]] = []
        wrong: list[str] = []

        def sample() -> bool:
            shown = page.evaluate(SNAPSHOT)
            job = api.get(f"/api/v1/jobs/{job_id}").json()  # read after the page
            samples.append(shown)
            if shown["status"] == "queued" and shown["lastX"] > job["iterations_done"]:
                wrong.append(f"'queued' with points drawn to {shown['lastX']}, past the "
                             f"{job['iterations_done']} the job had committed: {shown}")
            if shown["lastX"] > 0 and "place it in line" in shown["summary"]:
                wrong.append(f"told to wait in line after it ran: {shown}")
            if shown["bandFirst"] is not None and shown["bandFirst"] <= shown["lastX"]:
                wrong.append(f"band drawn over iterations done: {shown}")
            if shown["minLow"] is not None and shown["minLow"] < 0:
                wrong.append(f"band below 0: {shown}")
            return job["status"] == "completed"

        wait_until(sample, 120, "the job to finish", interval=0.05)
        assert not wrong, wrong[:5]
        running = [s for s in samples if s["status"] == "running"]
        assert len(running) >= 10, f"too few samples while it trained: {len(samples)}"
        assert any(s["bandFirst"] is not None for s in running), "no band drawn while it ran"

    # At the end: one story, completed, with its finish time.
    expect(page.locator("#job-title")).to_have_attribute("data-status", "completed")
    expect(page.locator("#job-stats .progress-label")).to_have_text(
        f"{ITERATIONS:,} / {ITERATIONS:,} iterations")
    finished = page.locator("#job-spec dt", has_text="Finished").locator(
        "xpath=following-sibling::dd[1]")
    expect(finished).not_to_have_text("—")
    expect(page.locator("#job-outcome")).to_contain_text("Finished:")
    expect(page.locator("#stream-live")).to_have_text("Finished")
    assert page.evaluate(SNAPSHOT)["lastX"] == ITERATIONS
    screenshot(page, "job-finished-status", full_page=False)
