"""Helpers for the browser tests: accounts, signing in, screenshots."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, Route, ViewportSize

from backend.core.models import Role
from tests.utils.portal import ROOT, Portal

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
RENDER_MS = 30_000
"""How long the API reference viewers (megabyte scripts) may take to draw on a
busy machine, where expect's default 5 s is not enough."""
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 375, "height": 812}


@dataclass(frozen=True)
class Account:
    email: str
    password: str
    token: str
    tenant: str
    role: Role


def sign_in(page: Page, account: Account, path: str = "/jobs") -> None:
    """Sign in through the login form, landing on ``path``."""
    page.goto(path)
    page.wait_for_url(re.compile(r"/login"))
    page.get_by_label("Email").fill(account.email)
    page.get_by_label("Password").fill(account.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(path.split("?")[0]) + r"(\?.*)?$"))
    page.get_by_test_id("whoami").wait_for()


def screenshot(page: Page, name: str, theme: str | None = None, *,
               full_page: bool = True) -> Path:
    """Save a PNG as ``<name>[-<theme>]-<desktop|phone>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    width = page.viewport_size["width"] if page.viewport_size else 0
    suffix = f"-{theme}" if theme else ""
    path = SCREENSHOTS / f"{name}{suffix}-{'phone' if width < 600 else 'desktop'}.png"
    page.screenshot(path=path, full_page=full_page)
    return path


@dataclass
class Traffic:
    """Every request a browser context made, and those kept from leaving the portal."""

    portal_host: str
    urls: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def foreign(self) -> list[str]:
        return [u for u in self.urls
                if urlsplit(u).scheme in ("http", "https", "ws", "wss")
                and urlsplit(u).netloc != self.portal_host]


def portal_only(context: BrowserContext, base_url: str) -> Traffic:
    """Record every request of ``context`` and abort any to another host, as
    if the machine had no internet: a page that needs one shows it."""
    traffic = Traffic(urlsplit(base_url).netloc)
    context.on("request", lambda request: traffic.urls.append(request.url))

    def route(route: Route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.netloc != traffic.portal_host:
            traffic.blocked.append(url)
            route.abort("internetdisconnected")
        else:
            route.continue_()

    context.route("**/*", route)
    return traffic


def console_errors(page: Page) -> list[str]:
    """A list that fills with the page's console errors (failed loads, CSP
    violations, uncaught errors) from now on."""
    errors: list[str] = []

    def keep(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(f"{message.text} ({message.location.get('url', '')})")

    page.on("console", keep)
    return errors


def api_client(portal: Portal, account: Account) -> httpx.Client:
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {account.token}"})


LONG_JOB = {
    "algorithm": "logistic_regression",
    "dataset": "digits",
    "params": {"learning_rate": 0.05},
    # No convergence test: the job runs until stopped (about a minute).
    "stopping": {"max_iterations": 100_000, "tolerance": None},
}
