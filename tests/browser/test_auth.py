"""Signing in and out; every page says who you are and your tenant."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, screenshot, sign_in


def test_sign_in_shows_user_and_tenant_then_sign_out(page: Page,
                                                      accounts: Callable[..., Account]) -> None:
    member = accounts("mia@team-a.test", tenant="team-a")
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fjobs$"))
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    screenshot(page, "login")

    sign_in(page, member)
    for path in ("/jobs", "/submit", "/cluster"):
        page.goto(path)
        who = page.get_by_test_id("whoami")
        expect(who).to_contain_text("mia@team-a.test")
        expect(page.get_by_test_id("tenant-name")).to_have_text("team-a")
        expect(who).to_contain_text("member")
    # Members get no Admin link.
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Jobs")).to_be_visible()
    expect(nav.get_by_role("link", name="Admin")).to_have_count(0)

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/login"))
    page.goto("/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next="))


def test_wrong_password_is_refused_with_a_message(page: Page,
                                                  accounts: Callable[..., Account]) -> None:
    member = accounts("max@team-a.test", tenant="team-a")
    page.goto("/login")
    page.get_by_label("Email").fill(member.email)
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Wrong email or password")
    expect(page).to_have_url(re.compile(r"/login"))
    # Empty fields are caught in the page.
    page.get_by_label("Email").fill("")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#email-error")).to_have_text("Enter your email address.")
    expect(page.get_by_label("Email")).to_have_attribute("aria-invalid", "true")
