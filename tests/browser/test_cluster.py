"""The cluster page: live workers, policy, the queue, and slot occupancy
sampled over time."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import LONG_JOB, PHONE, Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal

TRACES = "() => { const gd = document.getElementById('occupancy-chart');" \
         " return gd && gd.data ? gd.data.map(t => t.name) : []; }"


def test_cluster_page_shows_workers_queue_and_occupancy(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    user = accounts("cory@cluster-team.test", tenant="cluster-team")
    other = accounts("otto@other-team.test", tenant="other-team")
    with api_client(browser_portal, user) as api, api_client(browser_portal, other) as api2:
        mine = api.post("/api/v1/jobs", json={**LONG_JOB, "name": "occupant"}).json()["id"]
        theirs = api2.post("/api/v1/jobs", json={**LONG_JOB, "name": "secret"}).json()["id"]
        try:
            page = make_page()
            sign_in(page, user, "/cluster")
            expect(page.locator("#workers li")).to_have_count(2)
            expect(page.get_by_test_id("policy")).to_have_text("fair")
            expect(page.get_by_test_id("slots")).to_contain_text("of 2")
            expect(page.locator("#cluster-live")).to_have_attribute("data-state", "live")
            # Both jobs get a slot; the other tenant's stays anonymous.
            page.wait_for_function(
                f"() => ({TRACES})().some(n => n.includes('occupant'))", timeout=20_000)
            page.wait_for_function(
                f"() => ({TRACES})().includes('other tenants')", timeout=20_000)
            expect(page.locator("#cluster-root")).not_to_contain_text("secret")
            page.get_by_label("Group slots").select_option("tenant")
            page.wait_for_function(f"() => ({TRACES})().includes('cluster-team')")
            expect(page.get_by_test_id("avg-loss")).not_to_have_text("—")
            page.wait_for_timeout(2500)  # one more sample for the charts
            screenshot(page, "cluster")

            phone = make_page(PHONE)
            sign_in(phone, user, "/cluster")
            expect(phone.locator("#workers li")).to_have_count(2)
            phone.wait_for_timeout(2500)
            screenshot(phone, "cluster")
        finally:
            api.post(f"/api/v1/jobs/{mine}/cancel")
            api2.post(f"/api/v1/jobs/{theirs}/cancel")
