"""Acting on many jobs from the jobs list: tick some, pause, resume or cancel
them in one request; the list shows the result, and jobs that an action does
not apply to are left as they were, with a message that says so."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Dialog, Locator, Page, expect

from tests.browser.helpers import DESKTOP, LONG_JOB, Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal


def test_pause_resume_and_cancel_ticked_jobs(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    # No slots: the jobs stay queued until the test acts on them.
    user = accounts("bea@bulk-team.test", tenant="bulk-team", max_slots=0)
    with api_client(browser_portal, user) as api:
        ids = []
        for name in ("one", "two", "three"):
            created = api.post("/api/v1/jobs", json={**LONG_JOB, "name": name})
            assert created.status_code == 201, created.text
            ids.append(int(created.json()["id"]))
        try:
            page = make_page(DESKTOP)
            sign_in(page, user, "/jobs")

            def row(job_id: int) -> Locator:
                return page.locator(f"#jobs-table tr[data-job-id='{job_id}']")

            def status(job_id: int) -> str:
                return str(api.get(f"/api/v1/jobs/{job_id}").json()["status"])

            expect(page.locator("#bulk-pause")).to_be_disabled()
            for job_id in ids[:2]:
                page.get_by_label(f"Select job {job_id}", exact=True).check()
            expect(page.locator("#bulk-pause")).to_have_text("Pause 2")
            page.locator("#bulk-pause").click()
            expect(page.locator("#bulk-result")).to_contain_text("Paused 2 jobs.")
            for job_id in ids[:2]:
                expect(row(job_id)).to_have_attribute("data-status", "paused")
            expect(row(ids[2])).to_have_attribute("data-status", "queued")
            assert [status(i) for i in ids] == ["paused", "paused", "queued"]
            # The selection is cleared after an action.
            expect(page.locator("#bulk-resume")).to_be_disabled()

            # Resume applies to paused jobs only: the queued one is left, and said so.
            for job_id in (ids[1], ids[2]):
                page.get_by_label(f"Select job {job_id}", exact=True).check()
            page.locator("#bulk-resume").click()
            result = page.locator("#bulk-result")
            expect(result).to_contain_text("Resumed 1 job.")
            expect(result).to_contain_text("1 job left as they were (not paused)")
            assert [status(i) for i in ids] == ["paused", "queued", "queued"]

            # Cancel asks first; declining changes nothing.
            page.get_by_label(f"Select job {ids[0]}", exact=True).check()
            page.get_by_label(f"Select job {ids[2]}", exact=True).check()
            page.once("dialog", lambda dialog: dialog.dismiss())
            page.locator("#bulk-cancel").click()
            expect(page.locator("#bulk-cancel")).to_have_text("Cancel 2")
            assert [status(i) for i in ids] == ["paused", "queued", "queued"]
            questions: list[str] = []

            def accept(dialog: Dialog) -> None:
                questions.append(dialog.message)
                dialog.accept()

            page.once("dialog", accept)
            page.locator("#bulk-cancel").click()
            expect(result).to_contain_text("Cancelled 2 jobs.")
            assert questions and "Cancel 2 jobs" in questions[0]
            expect(row(ids[0])).to_have_attribute("data-status", "cancelled")
            assert [status(i) for i in ids] == ["cancelled", "queued", "cancelled"]
            screenshot(page, "jobs-bulk")
        finally:
            for job_id in ids:
                api.post(f"/api/v1/jobs/{job_id}/cancel")
