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
LOOP = ROOT / "examples" / "loops" / "digits_loop.py"


def _allow_code(portal: Portal, tenant: str, allow: bool = True) -> None:
    with Session(engine_for(portal.db_url)) as session:
        row = session.exec(select(Tenant).where(Tenant.name == tenant)).one()
        row.allow_code_uploads = allow
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


def test_a_loop_script_uploads_and_trains_like_any_algorithm(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    """Issue 37: a researcher's own training loop (``train(params, data,
    ctx)``), uploaded as it is, is listed as a loop and trained from the
    submit form, with its held-out metrics on the job page."""
    user = accounts("lou@loops.test", tenant="loops")
    _allow_code(browser_portal, "loops")
    page = make_page()
    sign_in(page, user, "/datasets")
    page.get_by_label("Python file").set_input_files(str(LOOP))
    page.get_by_label("Name").last.fill("digits-loop-web")
    page.get_by_role("button", name="Upload trainer").click()
    expect(page.locator("#code-message")).to_contain_text("jobs run it as code:")
    row = page.locator("#code-table tr", has_text="digits-loop-web")
    expect(row.locator('td[data-label="Contract"]')).to_have_text("loop")
    screenshot(page, "datasets-loop-code")

    row.get_by_role("link", name="Train").click()
    page.wait_for_url(re.compile(r"/submit\?algorithm=code%3A\d+$"))
    page.locator("#f-dataset").select_option("digits")
    page.get_by_label("Maximum iterations").fill("150")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    with api_client(browser_portal, user) as api:
        job = wait_until(lambda: (lambda j: j if j["status"] in FINISHED else None)(
            api.get(f"/api/v1/jobs/{job_id}").json()), 180, "the loop job to finish")
    assert job["status"] == "completed", job
    assert job["iterations_done"] == 150, job
    assert "val_loss" in job["last_eval"], job
    # The sandbox's own torch warm-up once warned into every job's output.
    assert "Warning" not in (job["trainer_output"] or ""), job["trainer_output"]
    assert job["name"] == "digits-loop-web on digits", job  # the names the tenant gave
    page.reload()
    expect(page.get_by_role("heading", name="digits-loop-web on digits")).to_be_visible()
    expect(page.locator("#loss-chart .main-svg").first).to_be_visible()
    expect(page.get_by_text("val_loss").first).to_be_visible()
    screenshot(page, "job-loop-code")


def test_tenants_without_code_uploads_do_not_see_the_section(
        make_page: Callable[..., Page], accounts: Callable[..., Account]) -> None:
    user = accounts("nico@no-code.test", tenant="no-code")
    page = make_page()
    sign_in(page, user, "/datasets")
    expect(page.get_by_role("heading", name="Your tenant's datasets")).to_be_visible()
    expect(page.get_by_role("heading", name="Your trainer code")).to_have_count(0)


def test_code_turned_off_stays_listed_and_marked(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    # Issue 38: turning a tenant's code off hid the code it had uploaded.
    user = accounts("otto@off-code.test", tenant="off-code")
    _allow_code(browser_portal, "off-code")
    page = make_page()
    sign_in(page, user, "/datasets")
    # The help points at the guide the portal serves, not a repository path.
    help_link = page.get_by_role("link", name="how to write one")
    expect(help_link).to_have_attribute("href", "/help/tenant-code")
    with api_client(browser_portal, user) as api:
        uploaded = api.post("/api/v1/code", data={"name": "kept"},
                            files={"file": ("logistic.py", LEGIT.read_bytes(), "text/x-python")})
        assert uploaded.status_code == 201, uploaded.text
    _allow_code(browser_portal, "off-code", allow=False)

    page.reload()
    section = page.locator("#code-section")
    expect(section.get_by_role("heading", name="Your trainer code")).to_be_visible()
    expect(section).to_contain_text("uploads and new jobs disabled by the platform admin")
    row = page.locator("#code-table tr", has_text="kept")
    expect(row).to_contain_text("disabled")
    expect(row.get_by_role("link", name="Train")).to_have_count(0)
    expect(page.get_by_role("button", name="Upload trainer")).to_have_count(0)
    section.scroll_into_view_if_needed()
    screenshot(page, "datasets-trainer-code-off")

    # It can still be deleted; with nothing left to list, the section goes.
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete kept").click()
    expect(page.get_by_role("heading", name="Your trainer code")).to_have_count(0)


def test_help_for_tenant_code_is_served_by_the_portal(
        make_page: Callable[..., Page], accounts: Callable[..., Account]) -> None:
    user = accounts("hana@help-code.test", tenant="help-code")
    page = make_page()
    sign_in(page, user, "/help/tenant-code")
    expect(page.get_by_role("heading", name="Running your own trainer code")).to_be_visible()
    # Links between the guides stay within the portal.
    page.locator("#help-doc a[href='trainers.md']").first.click()
    page.wait_for_url("**/help/trainers")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Trainers: the contract, built-ins, plugins")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Help").click()
    page.wait_for_url("**/help")
    expect(page.get_by_role("link", name="Downloading a job's model")).to_be_visible()
    assert page.request.get("/help/no-such-guide").status == 404
    assert page.request.get("/help/..%2Fsecrets").status == 404
