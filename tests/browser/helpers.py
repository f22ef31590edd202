"""Helpers for the browser tests: accounts, signing in, screenshots."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import httpx
from playwright.sync_api import Page, ViewportSize

from backend.core.models import Role
from tests.utils.portal import ROOT, Portal

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
PHONE: ViewportSize = {"width": 390, "height": 844}


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


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    width = page.viewport_size["width"] if page.viewport_size else 0
    path = SCREENSHOTS / f"{name}-{'phone' if width < 600 else 'desktop'}.png"
    page.screenshot(path=path, full_page=True)
    return path


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
