"""Admin pages for tenants, users and API tokens; a user's own tokens on the
account page; downloading a finished job's model."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page, expect

from backend.core.models import Role
from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until


def _login_status(portal: Portal, email: str, password: str) -> int:
    with httpx.Client(base_url=portal.base_url, timeout=30) as client:
        return client.post("/api/v1/auth/login",
                           json={"email": email, "password": password}).status_code


def _token_works(portal: Portal, token: str) -> bool:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as client:
        return client.get("/api/v1/auth/me").status_code == 200


def test_platform_admin_creates_a_tenant_and_a_user_then_disables_the_user(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    admin = accounts("root@adm-team.test", tenant="adm-team", role=Role.platform_admin)
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, admin, "/admin")
    # New users go to the admin's own tenant unless another is chosen.
    expect(page.get_by_label("Tenant", exact=True).locator("option:checked")).to_have_text(
        "adm-team")

    page.get_by_label("New tenant name").fill("Bad Name")
    page.get_by_role("button", name="Create tenant").click()
    expect(page.locator("#nt-name-error")).to_contain_text("lower-case letters")
    page.get_by_label("New tenant name").fill("adm-new")
    page.get_by_role("button", name="Create tenant").click()
    expect(page.locator("#tenants-message")).to_contain_text("Created the tenant adm-new")
    expect(page.locator("#tenants-table tr[data-tenant='adm-new']")).to_be_visible()
    page.get_by_label("New tenant name").fill("adm-new")
    page.get_by_role("button", name="Create tenant").click()
    expect(page.locator("#tenants-message")).to_contain_text("exists already")

    email = "newbie@adm-new.test"
    page.get_by_label("New user's email").fill(email)
    page.get_by_label("Initial password").fill("short")
    page.get_by_role("button", name="Add user").click()
    expect(page.locator("#nu-password-error")).to_contain_text("At least 10 characters")
    page.get_by_label("Initial password").fill("password123")
    page.get_by_role("button", name="Add user").click()
    # The server's strength check speaks next to the field.
    expect(page.locator("#nu-password-error")).not_to_be_empty()
    page.get_by_role("button", name="Suggest a password").click()
    password = page.get_by_label("Initial password").input_value()
    assert len(password) == 16
    page.get_by_label("Role", exact=True).select_option("member")
    page.get_by_label("Tenant", exact=True).select_option(label="adm-new")
    page.get_by_role("button", name="Add user").click()
    expect(page.locator("#new-user-message")).to_contain_text(f"Added {email} (member) to adm-new")
    row = page.locator(f"#users-table tr[data-email='{email}']")
    expect(row).to_contain_text("adm-new")
    expect(row).to_contain_text("yes")
    assert _login_status(browser_portal, email, password) == 200
    screenshot(page, "admin-forms")

    row.get_by_role("button", name=f"Disable {email}").click()
    expect(page.locator("#users-message")).to_contain_text(f"{email} is disabled")
    expect(row).to_contain_text("disabled")
    assert _login_status(browser_portal, email, password) == 401
    # Admins cannot disable themselves: no button on their own row.
    expect(page.locator(f"#users-table tr[data-email='{admin.email}'] button")).to_have_count(0)
    expect(page.locator("#audit")).to_contain_text("user.update")


def test_tenant_admin_revokes_a_users_token_and_a_user_their_own(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    boss = accounts("boss@tok-team.test", tenant="tok-team", role=Role.tenant_admin)
    member = accounts("tess@tok-team.test", tenant="tok-team")
    outsider = accounts("otto@tok-other.test", tenant="tok-other")
    assert _token_works(browser_portal, member.token)

    page = make_page()
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, boss, "/admin")
    tokens = page.locator("#tokens-table")
    row = tokens.locator(f"tbody tr[data-user='{member.email}']")
    expect(row).to_have_count(1)
    # Only the tenant's own users' tokens.
    expect(tokens).not_to_contain_text(outsider.email)
    row.get_by_role("button", name=re.compile(r"^Revoke ")).click()
    expect(page.locator("#tokens-message")).to_contain_text(f"Revoked {member.email}'s token")
    expect(row).to_have_count(0)
    assert not _token_works(browser_portal, member.token)

    own = make_page()
    own.on("dialog", lambda dialog: dialog.accept())
    sign_in(own, outsider, "/account")
    expect(own.locator("#my-tokens-table tbody tr")).to_have_count(1)
    own.get_by_label("Token name").fill("ci-script")
    own.get_by_label("Expires after (days)").fill("30")
    own.get_by_role("button", name="Create token").click()
    secret = own.get_by_test_id("new-token")
    expect(secret).to_be_visible()
    token = secret.inner_text().strip()
    assert _token_works(browser_portal, token)
    mine = own.locator("#my-tokens-table tbody tr", has_text="ci-script")
    expect(mine).to_have_attribute("data-state", "active")
    screenshot(own, "account")
    own.get_by_role("button", name="Revoke ci-script").click()
    expect(own.locator("#tokens-message")).to_contain_text("Revoked ci-script")
    expect(mine).to_have_attribute("data-state", "revoked")
    assert not _token_works(browser_portal, token)
    assert _token_works(browser_portal, outsider.token)


def test_a_finished_jobs_model_downloads_from_its_page(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("mo@model-team.test", tenant="model-team")
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={
            "algorithm": "logistic_regression", "dataset": "iris",
            "stopping": {"max_iterations": 200, "tolerance": None}}).json()["id"]
        wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
                   60, "the job to finish")
    sign_in(page, user, f"/jobs/{job_id}")
    button = page.get_by_role("button", name="Download model")
    expect(button).to_be_enabled()
    with page.expect_download() as got:
        button.click()
    download = got.value
    assert download.suggested_filename == f"job-{job_id}-iteration-200.npz"
    data = Path(download.path()).read_bytes()
    assert len(data) > 0
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        assert archive.files
    expect(page.locator("#control-message")).to_contain_text("Downloaded")
    expect(page.locator("#control-message")).to_contain_text("numpy .npz archive")


def test_a_torch_jobs_model_downloads_as_pt_with_how_to_load_it(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    # Issue 38: it came as a torch.save file named .npz, described as numpy.
    torch = pytest.importorskip("torch")
    user = accounts("tia@model-team.test", tenant="model-team")
    with api_client(browser_portal, user) as api:
        job_id = api.post("/api/v1/jobs", json={
            "algorithm": "torch_mlp", "dataset": "iris",
            "stopping": {"max_iterations": 20, "tolerance": None}}).json()["id"]
        wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] == "completed",
                   120, "the torch job to finish")
    sign_in(page, user, f"/jobs/{job_id}")
    with page.expect_download() as got:
        page.get_by_role("button", name="Download model").click()
    assert got.value.suggested_filename == f"job-{job_id}-iteration-20.pt"
    saved = torch.load(got.value.path(), weights_only=True, map_location="cpu")
    assert saved["trainer"] == "torch_mlp"
    message = page.locator("#control-message")
    expect(message).to_contain_text("a PyTorch file; torch.load(path, weights_only=True)")
    screenshot(page, "job-model-download-torch", full_page=False)
    # The help it links to is served by the portal, with the same recipe.
    message.get_by_role("link", name="How to load it").click()
    page.wait_for_url("**/help/models")
    expect(page.get_by_role("heading", name="Downloading a job's model")).to_be_visible()
    expect(page.locator("#help-doc")).to_contain_text("torch.load(")
    expect(page.get_by_test_id("whoami")).to_be_visible()
    screenshot(page, "help-models")
