"""Jobs through the browser: submit with the generated form, watch the chart
grow live, pause/resume/cancel, validation, clone, and the live jobs list."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import LONG_JOB, PHONE, Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

POINTS = "() => { const gd = document.getElementById('loss-chart');" \
         " return gd && gd.data ? gd.data[0].x.length : 0; }"


def chart_points(page: Page) -> int:
    return int(page.evaluate(POINTS))


def wait_for_more_points(page: Page, than: int, timeout: float = 30_000) -> int:
    page.wait_for_function(f"n => ({POINTS})() > n", arg=than, timeout=timeout)
    return chart_points(page)


def test_submit_through_form_and_chart_grows_without_reload(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("sam@team-a.test", tenant="team-a")
    sign_in(page, user, "/submit")
    page.get_by_label("Algorithm").select_option("logistic_regression")
    # Only datasets whose tasks fit the algorithm are offered.
    datasets = page.locator("#f-dataset option").evaluate_all("os => os.map(o => o.value)")
    assert "digits" in datasets and "diabetes" not in datasets
    page.get_by_label("Dataset").select_option("digits")
    page.get_by_label("Name (optional)").fill("browser-live")
    page.get_by_label("Learning rate").fill("0.05")
    page.get_by_label("Maximum iterations").fill("100000")
    # Off: with neither a target nor a tolerance the default convergence test applies.
    page.get_by_label("Convergence tolerance (optional)").fill("off")
    page.get_by_role("button", name="Submit job").click()

    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    page.evaluate("window.__noReload = 'still here'")
    expect(page.get_by_role("heading", level=1)).to_contain_text("browser-live")
    first = wait_for_more_points(page, 0)
    later = wait_for_more_points(page, first)
    assert later > first
    assert page.evaluate("window.__noReload") == "still here", "the page reloaded"
    # The points came live: the line under the chart counts them as they arrive.
    expect(page.locator("#chart-note")).to_contain_text(
        re.compile(r"[\d,]+ points shown, up to iteration [\d,]+"))
    expect(page.get_by_test_id("scheduler-reason")).to_be_visible()
    expect(page.locator("#stream-live")).to_have_attribute("data-state", "live")
    page.wait_for_timeout(1500)  # let the prediction and timeline draw
    screenshot(page, "job-running")

    with api_client(browser_portal, user) as api:
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200


def test_pause_resume_cancel_from_the_job_page(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("pat@team-a.test", tenant="team-a")
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={**LONG_JOB, "name": "controls"}).json()["id"]
        sign_in(page, user, f"/jobs/{job_id}")
        title = page.locator("#job-title")
        wait_for_more_points(page, 0)

        page.get_by_role("button", name="Pause").click()
        expect(title).to_have_attribute("data-status", "paused")
        expect(page.get_by_text("Job paused.")).to_be_visible()
        expect(page.get_by_role("button", name="Resume")).to_be_enabled()
        expect(page.get_by_role("button", name="Pause")).to_be_disabled()
        assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "paused"
        screenshot(page, "job-paused")

        page.get_by_role("button", name="Resume").click()
        expect(page.get_by_text("Job resumed and queued.")).to_be_visible()
        expect(title).to_have_attribute("data-status", re.compile("queued|running"))
        wait_for_more_points(page, chart_points(page))  # it trains again

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel").click()
        expect(title).to_have_attribute("data-status", "cancelled")
        expect(page.locator("#job-outcome")).to_contain_text("cancelled by user")
        for name in ("Pause", "Resume", "Cancel"):
            expect(page.get_by_role("button", name=name, exact=True)).to_be_disabled()
        assert api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "cancelled"

        # The loss history downloads as CSV and JSON.
        with page.expect_download() as got:
            page.get_by_role("button", name="Download CSV").click()
        csv_text = got.value.path().read_text().splitlines()
        assert csv_text[0].startswith("iteration,loss") and len(csv_text) > 2
        with page.expect_download() as got:
            page.get_by_role("button", name="Download JSON").click()
        assert got.value.suggested_filename == f"job-{job_id}-losses.json"


def test_form_validation_in_the_page_and_on_the_server(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("val@val-team.test", tenant="val-team")
    sign_in(page, user, "/submit")
    rate = page.get_by_label("Learning rate")
    rate.fill("fast")
    page.get_by_label("Convergence window").fill("5000")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#f-params-learning_rate-error")).to_have_text("Enter a number.")
    expect(rate).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-stopping-window-error")).to_contain_text("≤ 1000")
    expect(page.locator("#form-message")).to_contain_text("Fix the 2 fields")
    expect(rate).to_be_focused()
    screenshot(page, "submit-invalid")

    # The page cannot know the tenant's per-job limit: the server's 422 lands
    # next to the field it names.
    rate.fill("0.1")
    page.get_by_label("Convergence window").fill("10")
    page.get_by_label("Maximum iterations").fill("5000000")
    page.get_by_role("button", name="Submit job").click()
    error = page.locator("#f-stopping-max_iterations-error")
    expect(error).to_contain_text("over the limit")
    expect(page.locator("#form-message")).to_contain_text("The server refused the job")
    expect(page).to_have_url(re.compile(r"/submit$"))
    with api_client(browser_portal, user) as api:
        assert api.get("/api/v1/jobs").json()["total"] == 0


def test_clone_prefills_the_form_from_a_job(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("cleo@team-a.test", tenant="team-a")
    spec = {"name": "original", "algorithm": "linear_svm", "dataset": "wine", "seed": 7,
            "params": {"learning_rate": 0.02, "batch_size": 32},
            "stopping": {"max_iterations": 300, "target_loss": 0.05, "tolerance": None,
                         "window": 20}}
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
    sign_in(page, user, f"/submit?clone={job_id}")
    expect(page.locator("#form-message")).to_contain_text(f"Pre-filled from job #{job_id}")
    expect(page.get_by_label("Algorithm")).to_have_value("linear_svm")
    expect(page.get_by_label("Dataset")).to_have_value("wine")
    expect(page.get_by_label("Name (optional)")).to_have_value("original (copy)")
    expect(page.get_by_label("Seed")).to_have_value("7")
    expect(page.get_by_label("Learning rate")).to_have_value("0.02")
    expect(page.get_by_label("Batch size")).to_have_value("32")
    expect(page.get_by_label("Maximum iterations")).to_have_value("300")
    expect(page.get_by_label("Target loss (optional)")).to_have_value("0.05")
    # A disabled test stays disabled in the clone, whatever the default would be.
    expect(page.get_by_label("Convergence tolerance (optional)")).to_have_value("off")
    expect(page.get_by_label("Convergence window")).to_have_value("20")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    clone_id = int(page.url.rsplit("/", 1)[1])
    with api_client(browser_portal, user) as api:
        clone = api.get(f"/api/v1/jobs/{clone_id}").json()
    assert clone_id != job_id
    assert clone["params"]["learning_rate"] == 0.02 and clone["seed"] == 7
    assert clone["stopping"]["target_loss"] == 0.05 and clone["stopping"]["tolerance"] is None


def test_jobs_list_is_live_filtered_and_paginated(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    user = accounts("lee@list-team.test", tenant="list-team")
    page = make_page()
    sign_in(page, user, "/jobs?limit=10")
    expect(page.get_by_text("Your tenant has no jobs yet.")).to_be_visible()
    short = {"algorithm": "logistic_regression", "dataset": "iris",
             "stopping": {"max_iterations": 40, "tolerance": None}}
    with api_client(browser_portal, user) as api:
        ids = [api.post("/api/v1/jobs", json={**short, "name": f"short-{i}"}).json()["id"]
               for i in range(11)]
        # Rows appear with no reload, from the live event stream.
        rows = page.locator("#jobs-table tbody tr")
        expect(rows).to_have_count(10)
        expect(page.locator("#page-info")).to_have_text("Showing 1–10 of 11")
        wait_until(lambda: all(api.get(f"/api/v1/jobs/{i}").json()["status"] == "completed"
                               for i in ids), 60, "the short jobs to finish")
    expect(page.locator("#jobs-table tbody tr[data-status=completed]")).to_have_count(
        10, timeout=25_000)
    expect(rows.first.locator("svg.sparkline")).to_be_visible()
    expect(rows.first.locator("progress")).to_have_attribute("value", "100")
    screenshot(page, "jobs")

    page.get_by_role("button", name="Older →").click()
    expect(page.locator("#page-info")).to_have_text("Showing 11–11 of 11")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"offset=10"))

    page.get_by_label("Status").select_option("running")
    expect(page.get_by_text("No running jobs.")).to_be_visible()
    page.get_by_label("Status").select_option("completed")
    expect(rows).to_have_count(10)

    phone = make_page(PHONE)
    sign_in(phone, user, "/jobs")
    expect(phone.locator("#jobs-table tbody tr")).to_have_count(11)
    screenshot(phone, "jobs")


def test_waiting_job_shows_its_queue_position(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    # A tenant with no slots: its job waits for good.
    user = accounts("wes@wait-team.test", tenant="wait-team", max_slots=0)
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={**LONG_JOB, "name": "waiting"}).json()["id"]
        sign_in(page, user, "/jobs")
        row = page.locator(f"tr[data-job-id='{job_id}']")
        # Placed by the scheduler a moment after submission: the list asks again.
        expect(row).to_contain_text(re.compile(r"Queue position \d+\."), timeout=15_000)
        expect(row.get_by_text("queued", exact=True)).to_be_visible()
        page.goto(f"/jobs/{job_id}")
        expect(page.get_by_test_id("scheduler-reason")).to_contain_text(
            re.compile(r"slot quota: it is 0, .* Queue position \d+\.$"), timeout=15_000)
        expect(page.locator("#chart-note")).to_contain_text("No loss points yet")
        screenshot(page, "job-waiting")
        api.post(f"/api/v1/jobs/{job_id}/cancel")
