"""Every page works with no internet: the browser asks nothing of any host
but the portal. The sign-in page loads without a single failed request."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, Response, expect

from backend.core.models import Role
from tests.browser.helpers import (
    RENDER_MS,
    Account,
    api_client,
    console_errors,
    portal_only,
    sign_in,
)
from tests.utils.portal import Portal


def test_sign_in_page_loads_without_errors(make_page: Callable[..., Page],
                                           accounts: Callable[..., Account]) -> None:
    page = make_page()
    errors = console_errors(page)
    failed: list[str] = []

    def keep(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page.on("response", keep)
    page.goto("/login?next=%2Fcluster", wait_until="networkidle")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_text("Sign in to continue.")).to_be_visible()
    assert failed == [], failed
    assert errors == [], errors

    # Signed in, the sign-in page sends the browser straight on.
    sign_in(page, accounts("lin@team-a.test", tenant="team-a"), "/jobs")
    page.goto("/login?next=%2Fcluster")
    expect(page).to_have_url(re.compile(r"/cluster$"))
    page.goto("/login?next=%2F%2Fevil.example")
    expect(page).to_have_url(re.compile(r"/jobs$"))


def test_every_page_asks_only_the_portal(make_page: Callable[..., Page],
                                         accounts: Callable[..., Account],
                                         browser_portal: Portal) -> None:
    admin = accounts("walker@walk-team.test", tenant="walk-team", role=Role.platform_admin)
    with api_client(browser_portal, admin) as api:
        job_id = api.post("/api/v1/jobs", json={
            "algorithm": "logistic_regression", "dataset": "iris",
            "stopping": {"max_iterations": 300, "tolerance": None}}).json()["id"]
    page = make_page()
    traffic = portal_only(page.context, browser_portal.base_url)
    page.goto("/login")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    sign_in(page, admin, "/jobs")

    checks: dict[str, Callable[[], None]] = {
        "/jobs": lambda: expect(page.locator("#jobs-table tbody tr").first).to_be_visible(),
        f"/jobs/{job_id}": lambda: expect(page.locator("#loss-chart .main-svg").first)
        .to_be_visible(),
        "/submit": lambda: expect(page.get_by_label("Learning rate")).to_be_visible(),
        "/cluster": lambda: expect(page.locator("#occupancy-chart .main-svg").first)
        .to_be_visible(),
        "/admin": lambda: expect(page.locator("#tenants-table")).to_be_visible(),
        "/datasets": lambda: expect(page.get_by_label("CSV file")).to_be_visible(),
        "/account": lambda: expect(page.locator("#my-tokens-table")).to_be_visible(),
        f"/compare?jobs={job_id}": lambda: expect(page.locator("#compare-chart .main-svg")
                                                  .first).to_be_visible(),
        "/experiments": lambda: expect(page.get_by_role("heading", name="Experiments"))
        .to_be_visible(),
        "/experiments/new": lambda: expect(page.get_by_role("heading", name="New sweep"))
        .to_be_visible(),
        "/docs": lambda: expect(page.locator(".opblock").first).to_be_visible(
            timeout=RENDER_MS),
        "/redoc": lambda: expect(page.get_by_role("heading", name="Submit Job").first)
        .to_be_visible(timeout=RENDER_MS),
        "/help/models": lambda: expect(page.get_by_test_id("whoami")).to_be_visible(),
    }
    for path, check in checks.items():
        page.goto(path)
        check()
    assert traffic.urls, "no requests were recorded"
    assert traffic.foreign() == [], f"requests left the portal: {traffic.foreign()}"
    assert traffic.blocked == []
