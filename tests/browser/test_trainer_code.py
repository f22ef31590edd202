"""Tenant code from the browser: upload a trainer on the datasets page, train
it from the submit form, and see its job finish with the trainer's output."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect
from sqlmodel import Session, select

from backend.core.db import engine_for
from backend.core.models import Tenant
from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import ROOT, Portal
from tests.utils.waiting import wait_until

FINISHED = {"completed", "failed", "cancelled"}

LEGIT = ROOT / "tests" / "fixtures" / "trainers" / "logistic.py"


def _allow_code(portal: Portal, tenant: str) -> None:
    with Session(engine_for(portal.db_url)) as session:
        row = session.exec(select(Tenant).where(Tenant.name == tenant)).one()
        row.allow_code_uploads = True
        session.add(row)
        session.commit()


def test_upload_then_train_uploaded_code(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    user = accounts("cora@coders.test", tenant="coders")
    _allow_code(browser_portal, "coders")
    page = make_page()
    sign_in(page, user, "/datasets")
    expect(page.get_by_role("heading", name="Your trainer code")).to_be_visible()
    page.get_by_label("Python file").set_input_files(str(LEGIT))
    page.get_by_label("Name").last.fill("softmax-web")
    page.get_by_role("button", name="Upload trainer").click()
    expect(page.locator("#code-message")).to_contain_text("jobs run it as code:")
    row = page.locator("#code-table tr", has_text="softmax-web")
    expect(row).to_be_visible()
    screenshot(page, "datasets-trainer-code")

    row.get_by_role("link", name="Train").click()
    page.wait_for_url(re.compile(r"/submit\?algorithm=code%3A\d+$"))
    expect(page.locator("#f-algorithm")).to_have_value(re.compile(r"^code:\d+$"))
    page.get_by_label("Parameters (JSON object)").fill('{"learning_rate": 0.5}')
    page.locator("#f-dataset").select_option("wine")
    page.get_by_label("Maximum iterations").fill("60")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    with api_client(browser_portal, user) as api:
        job = wait_until(lambda: (lambda j: j if j["status"] in FINISHED else None)(
            api.get(f"/api/v1/jobs/{job_id}").json()), 120, "the tenant-code job to finish")
    assert job["status"] == "completed", job
    assert job["algorithm"].startswith("code:") and job["iterations_done"] == 60
    page.reload()
    page.get_by_text("Trainer output (last chunk)").click()
    expect(page.locator("#trainer-output")).to_contain_text("tenant trainer ready")
    expect(page.locator("#loss-chart .main-svg").first).to_be_visible()
    screenshot(page, "job-tenant-code")


def test_tenants_without_code_uploads_do_not_see_the_section(
        make_page: Callable[..., Page], accounts: Callable[..., Account]) -> None:
    user = accounts("nico@no-code.test", tenant="no-code")
    page = make_page()
    sign_in(page, user, "/datasets")
    expect(page.get_by_role("heading", name="Your tenant's datasets")).to_be_visible()
    expect(page.get_by_role("heading", name="Your trainer code")).to_have_count(0)
