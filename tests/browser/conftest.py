"""Browser tests: Debian chromium driven by Playwright (sync API) against a
whole portal (API, scheduler, two Celery worker processes) on real Redis and
an SQLite database.

One portal serves every browser test (starting one takes seconds); tests
keep out of each other's way by using their own tenants and users.
Screenshots go to ``artifacts/screenshots/`` (ignored by git).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    ViewportSize,
    sync_playwright,
)

from backend.core.models import Role
from tests.browser.helpers import CHROMIUM, CHROMIUM_ARGS, DESKTOP, Account
from tests.utils.portal import Portal, make_user_token, start_portal


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser_portal(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """The whole portal, once for all browser tests, on SQLite."""
    data: Path = tmp_path_factory.mktemp("browser-portal")
    # Slots not niced: on a loaded shared machine niced slots took minutes to
    # start, and these tests are about pages, not CPU shares.
    running = start_portal(data_dir=data, db_url=f"sqlite:///{data / 'portal.db'}",
                           redis_url=redis_url, workers=2, extra_env={"WORKER_NICE": "0"})
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="session")
def accounts(browser_portal: Portal) -> Callable[..., Account]:
    """``accounts(email, tenant=..., role=...)``: a user (made once) who can
    sign in with their password or call the API with their token."""
    made: dict[str, Account] = {}

    def get(email: str, *, tenant: str = "team-a", role: Role = Role.member,
            **quotas: int) -> Account:
        if email not in made:
            token = make_user_token(browser_portal.db_url, tenant=tenant, email=email,
                                    role=role, **quotas)
            made[email] = Account(email, "pw-" + email, token, tenant, role)
        return made[email]

    return get


@pytest.fixture(scope="session")
def playwright_session() -> Iterator[Playwright]:
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def browser(playwright_session: Playwright) -> Iterator[Browser]:
    launched = playwright_session.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture
def make_page(browser: Browser, browser_portal: Portal) -> Iterator[Callable[..., Page]]:
    """``make_page(viewport=DESKTOP)``: a fresh browser context (own cookies).
    Uncaught page errors fail the test."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    def make(viewport: ViewportSize | None = None) -> Page:
        context = browser.new_context(viewport=viewport or DESKTOP,
                                      base_url=browser_portal.base_url, accept_downloads=True)
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def page(make_page: Callable[..., Page]) -> Page:
    return make_page()
