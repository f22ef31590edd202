"""The submit form's stopping rule does what it says: an empty tolerance
leaves the choice to the server (the default test only without a target),
"off" disables the test, a number applies it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from backend.schemas import DEFAULT_TOLERANCE
from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal


def _submit(page: Page, *, target: str, tolerance: str) -> int:
    page.goto("/submit")
    page.get_by_label("Algorithm").select_option("kmeans")
    page.get_by_label("Dataset").select_option("iris")
    page.get_by_label("Maximum iterations").fill("60")
    page.get_by_label("Target loss (optional)").fill(target)
    page.get_by_label("Convergence tolerance (optional)").fill(tolerance)
    page.get_by_role("button", name="Submit job").click()
    try:
        page.wait_for_url(re.compile(r"/jobs/\d+$"))
    except PlaywrightError as exc:
        raise AssertionError(f"not submitted: {page.locator('#submit-form').inner_text()}") \
            from exc
    return int(page.url.rsplit("/", 1)[1])


def test_tolerance_field_follows_the_stopping_rules(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("tess@stop-team.test", tenant="stop-team")
    sign_in(page, user, "/submit")
    field = page.get_by_label("Convergence tolerance (optional)")
    field.wait_for()
    expect(field).to_have_value("")
    expect(field).to_have_attribute("placeholder", "default")
    help_id = field.get_attribute("aria-describedby") or ""
    helptext = page.locator(f"#{help_id.split()[0]}")
    expect(helptext).to_contain_text("only when no target loss is set")
    expect(helptext).to_contain_text("off")
    screenshot(page, "submit-stopping")

    field.fill("soon")
    field.blur()
    expect(page.locator("#submit-form")).to_contain_text("Enter a number, or off.")

    made = {
        "target only": _submit(page, target="0.000001", tolerance=""),
        "nothing": _submit(page, target="", tolerance=""),
        "off": _submit(page, target="", tolerance="off"),
        "both": _submit(page, target="0.000001", tolerance="0.001"),
    }
    with api_client(browser_portal, user) as api:
        stopping: dict[str, Any] = {k: api.get(f"/api/v1/jobs/{v}").json()["stopping"]
                                    for k, v in made.items()}
    assert stopping["target only"]["tolerance"] is None
    assert stopping["target only"]["target_loss"] == 1e-6
    assert stopping["nothing"]["tolerance"] == DEFAULT_TOLERANCE
    assert stopping["off"]["tolerance"] is None
    assert stopping["both"]["tolerance"] == 1e-3
