"""The submit form's defaults give a job worth watching, and a converged job's
page says which series converged."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, api_client, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until
from workers.stopping import MIN_SHARE


def _submit_form(page: Page) -> int:
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    return int(page.url.rsplit("/", 1)[1])


def _finished(portal: Portal, user: Account, job_id: int) -> dict[str, Any]:
    with api_client(portal, user) as api:
        def probe() -> dict[str, Any] | None:
            job: dict[str, Any] = api.get(f"/api/v1/jobs/{job_id}").json()
            return job if job["status"] in ("completed", "failed", "cancelled") else None

        return wait_until(probe, 240, f"job {job_id} to finish")


def test_the_default_job_trains_past_its_noise(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("walt@watch-team.test", tenant="watch-team")
    sign_in(page, user, "/submit")
    most = page.get_by_label("Maximum iterations")
    expect(most).to_have_value("5000")
    tolerance_help = page.locator("#" + (page.get_by_label(
        "Convergence tolerance (optional)").get_attribute("aria-describedby") or "").split()[0])
    expect(tolerance_help).to_contain_text("after 30% of the maximum iterations")
    job_id = _submit_form(page)
    done = _finished(browser_portal, user, job_id)
    assert done["status"] == "completed", done
    # The old test ended this job at iteration 121, 0.1 s in.
    assert done["iterations_done"] >= MIN_SHARE * 5000, done["end_reason"]
    expect(page.locator("#job-outcome")).to_contain_text(done["end_reason"])


def test_a_converged_job_page_names_the_series(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("cleo@watch-team.test", tenant="watch-team")
    sign_in(page, user, "/submit")
    page.get_by_label("Algorithm").select_option("kmeans")
    page.get_by_label("Dataset").select_option("iris")
    page.get_by_label("Maximum iterations").fill("200")
    job_id = _submit_form(page)
    done = _finished(browser_portal, user, job_id)
    assert done["iterations_done"] == 60, done["end_reason"]
    expect(page.locator("#job-outcome")).to_contain_text(
        "Finished: converged: the training loss stopped improving")
