"""Dark mode follows the browser's colour scheme, charts included; the loss
chart picks a log axis from the data as points arrive, keeping the user's zoom."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from backend.core.models import Role
from tests.browser.helpers import Account, api_client, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

CHART_BG = "el => getComputedStyle(el).backgroundColor"
Y_TYPE = "() => document.getElementById('loss-chart')._fullLayout.yaxis.type"
X_RANGE = "() => document.getElementById('loss-chart')._fullLayout.xaxis.range"
POINTS = "() => document.getElementById('loss-chart').data[0].x.length"


def test_dark_mode_colours_pages_and_charts(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("nyx@dark-team.test", tenant="dark-team")
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={
            "algorithm": "logistic_regression", "dataset": "iris",
            "stopping": {"max_iterations": 200, "tolerance": None}}).json()["id"]
        wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
                   60, "the job to finish")
    page.emulate_media(color_scheme="dark")
    sign_in(page, user, f"/jobs/{job_id}")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(18, 21, 25)"
    chart = page.locator("#loss-chart .main-svg").first
    expect(chart).to_be_visible()
    assert chart.evaluate(CHART_BG) == "rgb(28, 33, 39)"
    # Switching the scheme while the page is open re-colours the charts too.
    page.emulate_media(color_scheme="light")
    page.wait_for_function(
        "() => getComputedStyle(document.querySelector('#loss-chart .main-svg'))"
        ".backgroundColor === 'rgb(255, 255, 255)'")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(244, 246, 248)"


def test_loss_axis_turns_log_as_points_arrive_and_keeps_the_zoom(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    # No slots at first: the page opens on a job with no points yet.
    user = accounts("lou@log-team.test", tenant="log-team", max_slots=0)
    admin = accounts("root@log-admin.test", tenant="log-admin", role=Role.platform_admin)
    with api_client(browser_portal, user) as api:
        job = api.post("/api/v1/jobs", json={
            "algorithm": "linear_regression", "dataset": "synthetic_regression",
            "dataset_params": {"noise": 1.0, "n_samples": 2000},
            "params": {"learning_rate": 0.02},
            "stopping": {"max_iterations": 100_000, "tolerance": None}}).json()
    sign_in(page, user, f"/jobs/{job['id']}")
    expect(page.locator("#chart-note")).to_contain_text("No loss points yet")
    assert page.evaluate(Y_TYPE) == "linear"
    expect(page.get_by_label("Log scale")).not_to_be_checked()

    with api_client(browser_portal, admin) as api:
        tenant_id = next(t["id"] for t in api.get("/api/v1/admin/tenants").json()
                         if t["name"] == "log-team")
        assert api.patch(f"/api/v1/admin/tenants/{tenant_id}",
                         json={"max_slots": 1}).status_code == 200
    job_id = job["id"]
    with api_client(browser_portal, user) as api:

        def hold() -> None:
            """Pause the job so the next step happens between two known batches of points."""
            assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
            wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "paused",
                       30, "the job to pause")

        def more_points() -> None:
            seen = page.evaluate(POINTS)
            assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
            page.wait_for_function(f"n => ({POINTS})() > n", arg=seen, timeout=30_000)

        try:
            page.wait_for_function(f"() => ({Y_TYPE})() === 'log'", timeout=30_000)
            expect(page.get_by_label("Log scale")).to_be_checked()
            expect(page.locator("#chart-note")).to_contain_text("Log scale, as the losses span")
            # The user zooms in on the first iterations; new points must not undo it.
            hold()
            page.evaluate("Plotly.relayout('loss-chart', {'xaxis.range': [0, 40]})")
            more_points()
            assert page.evaluate(X_RANGE) == [0, 40]
            assert page.evaluate(Y_TYPE) == "log"
            # The user's own choice of scale wins over the automatic one.
            hold()
            page.get_by_label("Log scale").uncheck()
            more_points()
            assert page.evaluate(Y_TYPE) == "linear"
            assert page.evaluate(X_RANGE) == [0, 40]
        finally:
            api.post(f"/api/v1/jobs/{job_id}/cancel")
