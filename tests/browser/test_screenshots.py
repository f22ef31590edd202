"""Every page at a desktop and a phone width, saved to artifacts/screenshots/
for a person to look at; asserts only that each page rendered its content
and that nothing is wider than the screen."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from backend.core.models import Role
from tests.browser.helpers import DESKTOP, PHONE, Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"
# Elements sticking out on the right that no scrolling box contains.
WIDE = """() => [...document.querySelectorAll('body *')].filter(el => {
  if (el.getBoundingClientRect().right <= window.innerWidth + 1) return false;
  if (getComputedStyle(el).position !== 'static') return true;
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    if (getComputedStyle(p).overflowX !== 'visible') return false;
  }
  return true;
}).slice(0, 5).map(el => `${el.tagName.toLowerCase()}#${el.id}.${el.className}`)"""
_made: dict[str, int] = {}  # one finished job shared by both widths


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_page_renders_at_desktop_and_phone_width(
        viewport: ViewportSize, make_page: Callable[..., Page],
        accounts: Callable[..., Account], browser_portal: Portal) -> None:
    admin = accounts("shots@shots-team.test", tenant="shots-team", role=Role.platform_admin)
    with api_client(browser_portal, admin) as api:
        if "job" not in _made:
            job_id = api.post("/api/v1/jobs", json={
                "name": "screenshot job", "algorithm": "mlp", "dataset": "digits",
                "stopping": {"max_iterations": 600, "tolerance": None}}).json()["id"]
            wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
                       60, "the screenshot job to finish")
            _made["job"] = job_id
        job_id = _made["job"]

    page = make_page(viewport)
    page.goto("/login")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    screenshot(page, "login")
    sign_in(page, admin, "/jobs")

    checks = {
        "/jobs": lambda: expect(page.locator("#jobs-table tbody tr").first).to_be_visible(),
        f"/jobs/{job_id}": lambda: expect(page.locator("#loss-chart .main-svg").first)
        .to_be_visible(),
        "/submit": lambda: expect(page.get_by_label("Learning rate")).to_be_visible(),
        "/cluster": lambda: expect(page.locator("#workers li").first).to_be_visible(),
        "/admin": lambda: expect(page.locator("#tenants-table")).to_be_visible(),
    }
    names = {"/jobs": "jobs-admin", f"/jobs/{job_id}": "job-completed", "/submit": "submit",
             "/cluster": "cluster-admin", "/admin": "admin-platform"}
    for path, check in checks.items():
        page.goto(path)
        check()
        page.wait_for_timeout(800 if path != "/cluster" else 2500)
        screenshot(page, names[path])
        assert page.evaluate(OVERFLOW) <= 1, \
            f"{path} is wider than the screen: {page.evaluate(WIDE)}"
