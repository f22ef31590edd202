"""Every page in light and dark mode at a desktop and a phone width, saved to
artifacts/screenshots/ for a person to look at; asserts that each page
rendered its content and that nothing makes the page wider than the screen
(wide tables scroll inside their own box)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from backend.core.models import Role
from tests.browser.helpers import (
    DESKTOP,
    PHONE,
    RENDER_MS,
    Account,
    api_client,
    screenshot,
    sign_in,
)
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
SPECIES = ["setosa", "versicolor", "virginica"]
CSV = "petal_length,petal_width,species\n" + "".join(
    f"{1 + (i % 3) * 2 + i / 100:.2f},{(i % 3) * 0.8 + i / 200:.2f},{SPECIES[i % 3]}\n"
    for i in range(60))
_made: dict[str, int] = {}  # one upload and one finished job, shared by every run


def _setup(portal: Portal, admin: Account) -> int:
    with api_client(portal, admin) as api:
        if "job" not in _made:
            upload = api.post("/api/v1/datasets", data={"name": "petals", "task": "classification"},
                              files={"file": ("petals.csv", CSV.encode(), "text/csv")})
            assert upload.status_code == 201, upload.text
            job_id = api.post("/api/v1/jobs", json={
                "algorithm": "mlp", "dataset": upload.json()["dataset"],
                "stopping": {"max_iterations": 600, "tolerance": None}}).json()["id"]
            wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
                       60, "the screenshot job to finish")
            _made["job"] = job_id
        return _made["job"]


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_page_renders_in_both_themes_at_desktop_and_phone_width(
        viewport: ViewportSize, theme: str, make_page: Callable[..., Page],
        accounts: Callable[..., Account], browser_portal: Portal) -> None:
    admin = accounts("shots@shots-team.test", tenant="shots-team", role=Role.platform_admin)
    job_id = _setup(browser_portal, admin)

    page = make_page(viewport)
    page.emulate_media(color_scheme=theme)  # type: ignore[arg-type]
    page.goto("/login")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    screenshot(page, "login", theme)
    sign_in(page, admin, "/jobs")

    def job_page() -> None:
        expect(page.locator("#loss-chart .main-svg").first).to_be_visible()
        expect(page.locator("#timeline-chart .main-svg").first).to_be_visible()
        expect(page.locator("#prediction-note")).not_to_be_empty()

    def datasets_page() -> None:
        page.get_by_role("button", name="Preview petals").click()
        expect(page.locator("#preview-table tbody tr").first).to_be_visible()

    checks: dict[str, tuple[str, Callable[[], None]]] = {
        "/jobs": ("jobs-admin", lambda: expect(page.locator("#jobs-table svg.sparkline").first)
                  .to_be_visible()),
        f"/jobs/{job_id}": ("job-completed", job_page),
        "/submit": ("submit", lambda: expect(page.get_by_label("Learning rate")).to_be_visible()),
        "/cluster": ("cluster-admin", lambda: expect(page.locator("#workers li").first)
                     .to_be_visible()),
        "/admin": ("admin-platform", lambda: expect(page.locator("#tokens-table")).to_be_visible()),
        "/datasets": ("datasets", datasets_page),
        "/account": ("account", lambda: expect(page.locator("#my-tokens-table")).to_be_visible()),
        "/docs": ("docs", lambda: expect(page.locator(".opblock").first).to_be_visible(
            timeout=RENDER_MS)),
        "/redoc": ("redoc", lambda: expect(page.get_by_role("heading", name="Submit Job").first)
                   .to_be_visible(timeout=RENDER_MS)),
        # A guide with a wide table and long code lines: it must fit a phone too.
        "/help/models": ("help-models", lambda: expect(page.get_by_test_id("whoami"))
                         .to_be_visible()),
    }
    for path, (name, check) in checks.items():
        page.goto(path)
        check()
        # The API reference pages are long: their first screen is what to look at.
        screenshot(page, name, theme, full_page=path not in ("/docs", "/redoc"))
        assert page.evaluate(OVERFLOW) <= 1, \
            f"{path} is wider than the screen: {page.evaluate(WIDE)}"
