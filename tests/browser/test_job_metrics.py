"""The job page draws a built-in job's validation curves: val_loss on the loss
chart's axes and the other metrics (val_accuracy) in a chart beside it, both
growing live, with the last evaluation and the quality metric in the summary
and the metrics in the CSV download."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal

EVAL_EVERY = 10

# Number of points of the trace called `name` in chart `chart` (0 if none).
TRACE_POINTS = """([chart, name]) => {
  const gd = document.getElementById(chart);
  const trace = gd && gd.data ? gd.data.find((t) => t.name === name) : null;
  return trace ? trace.x.length : 0;
}"""


def trace_points(page: Page, chart: str, name: str) -> int:
    return int(page.evaluate(TRACE_POINTS, [chart, name]))


def wait_for_trace(page: Page, chart: str, name: str, more_than: int) -> int:
    page.wait_for_function(f"([c, n, k]) => ({TRACE_POINTS})([c, n]) > k",
                           arg=[chart, name, more_than], timeout=60_000)
    return trace_points(page, chart, name)


def test_job_page_draws_validation_curves_live(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("val@metrics-team.test", tenant="metrics-team")
    spec = {"algorithm": "logistic_regression", "dataset": "digits", "name": "with-eval",
            "params": {"learning_rate": 0.05}, "eval_every": EVAL_EVERY,
            "quality_metric": "val_loss",
            "stopping": {"max_iterations": 100_000, "tolerance": None}}
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
        sign_in(page, user, f"/jobs/{job_id}")
        page.evaluate("window.__noReload = 'still here'")

        first = wait_for_trace(page, "loss-chart", "val_loss", 2)
        later = wait_for_trace(page, "loss-chart", "val_loss", first)  # live, no reload
        assert page.evaluate("window.__noReload") == "still here", "the page reloaded"
        wait_for_trace(page, "metrics-chart", "val_accuracy", 2)
        # The drawn points are the stored evaluations, at multiples of eval_every.
        xs = page.evaluate("() => document.getElementById('loss-chart').data"
                           ".find((t) => t.name === 'val_loss').x")
        stored = api.get(f"/api/v1/jobs/{job_id}/metrics").json()["eval"]["val_loss"]
        assert later >= 3 and xs == stored["iterations"][:len(xs)]
        assert all(x % EVAL_EVERY == 0 for x in xs)

        expect(page.get_by_test_id("quality-metric")).to_have_text("val_loss")
        last = page.get_by_test_id("last-eval-val_loss")
        expect(last).not_to_have_text("—")
        assert math.isfinite(float(last.inner_text().replace(",", "")))
        expect(page.locator("#metrics-note")).to_contain_text("val_accuracy")
        page.wait_for_timeout(1500)  # let the prediction and timeline draw
        shot = screenshot(page, "job-metrics")
        assert shot.stat().st_size > 10_000

        assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
        expect(page.locator("#job-title")).to_have_attribute("data-status", "cancelled")
        with page.expect_download() as got:
            page.get_by_role("button", name="Download CSV").click()
        rows = list(csv.DictReader(io.StringIO(got.value.path().read_text())))
        evaluated = [r for r in rows if r["val_loss"] != ""]
        assert evaluated and len(evaluated) < len(rows)
        assert all(int(r["iteration"]) % EVAL_EVERY == 0 for r in evaluated)
