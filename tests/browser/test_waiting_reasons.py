"""A waiting job's page and the jobs list say in plain words what it waits
for, with the scheduler's technical reason behind "Why?"; a finished job
says how it ended, not its last place in line."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import (
    DESKTOP,
    LONG_JOB,
    PHONE,
    Account,
    api_client,
    screenshot,
    sign_in,
)
from tests.utils.portal import Portal

ZERO_QUOTA = "Waiting for your team's slot quota: it is 0"
ONE_SLOT = "Waiting for your team's one slot (its quota)"


def test_waiting_job_page_in_plain_words_with_why_on_demand(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    # A team with no slots: its job waits for as long as the test needs.
    user = accounts("zed@zero-team.test", tenant="zero-team", max_slots=0)
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={**LONG_JOB, "name": "stuck"}).json()["id"]
        try:
            for theme in ("light", "dark"):
                for viewport in (DESKTOP, PHONE):
                    page = make_page(viewport)
                    page.emulate_media(color_scheme="dark" if theme == "dark" else "light")
                    sign_in(page, user, f"/jobs/{job_id}")
                    reason = page.get_by_test_id("scheduler-reason")
                    # Placed by the scheduler a moment after submission: the page asks again.
                    expect(reason).to_contain_text(ZERO_QUOTA, timeout=15_000)
                    text = reason.inner_text()
                    assert text.count("position") <= 1, f"said once: {text}"
                    assert "rank" not in text and "predicted gain" not in text, text
                    why = page.get_by_test_id("reason-detail")
                    expect(why.locator("p")).to_be_hidden()
                    why.locator("summary").click()
                    expect(why.locator("p")).to_be_visible()
                    expect(why.locator("p")).not_to_be_empty()
                    screenshot(page, "job-waiting", theme)
        finally:
            api.post(f"/api/v1/jobs/{job_id}/cancel")
    page = make_page(DESKTOP)
    sign_in(page, user, f"/jobs/{job_id}")
    expect(page.locator("#job-outcome")).to_contain_text("cancelled by user")
    expect(page.get_by_test_id("scheduler-reason")).to_have_count(0)


def test_jobs_list_says_which_job_waits_for_the_team_quota(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    # One slot of quota, two jobs: they take turns, and whichever waits says why.
    user = accounts("wes@one-slot.test", tenant="one-slot", max_slots=1)
    with api_client(browser_portal, user) as api:
        ids = []
        for name in ("holder", "waiter"):
            created = api.post("/api/v1/jobs", json={**LONG_JOB, "name": name})
            assert created.status_code == 201, created.text
            ids.append(created.json()["id"])
        try:
            page = make_page(DESKTOP)
            sign_in(page, user, "/jobs")
            waiting = page.get_by_test_id("job-explanation").filter(has_text=ONE_SLOT)
            expect(waiting.first).to_be_visible(timeout=30_000)
            screenshot(page, "jobs-waiting")
        finally:
            for job_id in ids:
                api.post(f"/api/v1/jobs/{job_id}/cancel")


def test_queue_positions_and_jobs_going_first_agree_on_the_jobs_list(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    # Issue 38: "4 jobs ... go first" beside "Queue position 3". Two slots,
    # five jobs of one team: the waiting ones are placed in one ranking.
    user = accounts("quinn@queue-team.test", tenant="queue-team", max_slots=4)
    go_first = re.compile(r"(\d+) jobs? .* go(?:es)? first")
    position = re.compile(r"Queue position (\d+)\.")
    with api_client(browser_portal, user) as api:
        ids = [api.post("/api/v1/jobs", json={**LONG_JOB, "name": f"q{i}"}).json()["id"]
               for i in range(5)]
        try:
            page = make_page(DESKTOP)
            sign_in(page, user, "/jobs?status=queued")
            turns = page.get_by_test_id("job-explanation").filter(has_text="go first")
            expect(turns.first).to_be_visible(timeout=60_000)
            texts = page.get_by_test_id("job-explanation").all_inner_texts()
            placed = []
            for text in texts:
                said = position.search(text)
                first = go_first.search(text)
                if said and first:
                    assert int(first.group(1)) == int(said.group(1)) - 1, text
                if said:
                    placed.append(int(said.group(1)))
            assert placed and len(placed) == len(set(placed)), texts
            screenshot(page, "jobs-queue-one-ranking")
        finally:
            for job_id in ids:
                api.post(f"/api/v1/jobs/{job_id}/cancel")
