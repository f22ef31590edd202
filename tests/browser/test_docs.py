"""The API reference pages, /docs (Swagger UI) and /redoc, work with no
internet: every script and style comes from the portal."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import RENDER_MS, console_errors, portal_only, screenshot
from tests.utils.portal import Portal


def test_swagger_ui_is_served_from_the_portal(make_page: Callable[..., Page],
                                              browser_portal: Portal) -> None:
    page = make_page()
    traffic = portal_only(page.context, browser_portal.base_url)
    errors = console_errors(page)
    page.goto("/docs")
    expect(page.get_by_role("heading", name="SLAQ portal")).to_be_visible(timeout=RENDER_MS)
    submit = page.locator(".opblock-post .opblock-summary-path", has_text="/api/v1/jobs").first
    expect(submit).to_be_visible()
    expect(page.locator(".opblock").first).to_be_visible()
    assert page.locator(".opblock").count() > 20
    # Opening an operation shows its schema: the viewer is working, not just drawn.
    submit.click()
    expect(page.get_by_text("Submit a training job").first).to_be_visible()
    screenshot(page, "docs", full_page=False)
    assert traffic.foreign() == [], f"requests left the portal: {traffic.foreign()}"
    assert not errors, f"console errors on /docs: {errors}"


def test_redoc_is_served_from_the_portal(make_page: Callable[..., Page],
                                         browser_portal: Portal) -> None:
    page = make_page()
    traffic = portal_only(page.context, browser_portal.base_url)
    errors = console_errors(page)
    page.goto("/redoc")
    expect(page.get_by_role("heading", name="SLAQ portal", exact=False).first).to_be_visible(
        timeout=RENDER_MS)
    expect(page.get_by_role("heading", name="Submit Job").first).to_be_visible()
    screenshot(page, "redoc", full_page=False)
    assert traffic.foreign() == [], f"requests left the portal: {traffic.foreign()}"
    assert not errors, f"console errors on /redoc: {errors}"
