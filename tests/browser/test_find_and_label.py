"""Finding and labelling runs in the browser (issue 38, items 7 and 8): the
jobs list searched, filtered and sorted (also by the latest held-out metric),
and a job renamed, tagged, annotated and deleted from its page, confirmed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, ViewportSize, expect
from sqlalchemy import select
from sqlmodel import col

from backend.core.db import engine_for, session_scope
from backend.core.models import Job, JobStatus, Role, Tenant, User, utcnow
from tests.browser.helpers import DESKTOP, PHONE, Account, screenshot, sign_in
from tests.utils.portal import Portal, make_user_token, running_portal

QUEUED = {"algorithm": "logistic_regression", "dataset": "digits",
          "stopping": {"max_iterations": 100_000, "tolerance": None}}


@pytest.fixture(scope="module")
def quiet_portal(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """API and scheduler, no worker: what is tested here is stored, not trained."""
    data: Path = tmp_path_factory.mktemp("labels-portal")
    with running_portal(data_dir=data, db_url=f"sqlite:///{data / 'portal.db'}",
                        redis_url=redis_url, workers=0) as portal:
        yield portal


@pytest.fixture(scope="module")
def labeller(quiet_portal: Portal) -> Account:
    email = "lou@labels.test"
    token = make_user_token(quiet_portal.db_url, tenant="labels", email=email,
                            role=Role.tenant_admin)
    return Account(email, "pw-" + email, token, "labels", Role.tenant_admin)


@pytest.fixture
def open_page(browser: Browser, quiet_portal: Portal) -> Iterator[Callable[..., Page]]:
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    def make(viewport: ViewportSize | None = None) -> Page:
        context = browser.new_context(viewport=viewport or DESKTOP,
                                      base_url=quiet_portal.base_url)
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        return page

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def _api(portal: Portal, account: Account) -> httpx.Client:
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        headers={"Authorization": f"Bearer {account.token}"})


def _submit(api: httpx.Client, **spec: Any) -> int:
    resp = api.post("/api/v1/jobs", json={**QUEUED, **spec})
    assert resp.status_code == 201, resp.text
    return int(resp.json()["id"])


def _evaluated(db_url: str, tenant: str, accuracies: dict[str, float]) -> None:
    """Finished jobs with a held-out accuracy, as workers leave them."""
    with session_scope(engine_for(db_url)) as session:
        tenant_row = session.execute(select(Tenant).where(col(Tenant.name) == tenant)).scalar_one()
        user = session.execute(select(User).where(col(User.tenant_id) == tenant_row.id)
                               ).scalars().first()
        assert user is not None
        for name, accuracy in accuracies.items():
            session.add(Job(tenant_id=tenant_row.id or 0, user_id=user.id or 0, name=name,
                            algorithm="mlp", dataset="wine", max_iterations=100,
                            iterations_done=100, status=JobStatus.completed,
                            finished_at=utcnow(),
                            last_eval={"iteration": 100, "val_accuracy": accuracy}))
        session.commit()


def _names(page: Page) -> list[str]:
    return page.locator("#jobs-table .job-name").all_inner_texts()


def test_find_runs_by_search_tag_and_held_out_metric(
        open_page: Callable[..., Page], quiet_portal: Portal, labeller: Account) -> None:
    with _api(quiet_portal, labeller) as api:
        adam = _submit(api, name="adam lr 0.1")
        _submit(api, name="sgd baseline", algorithm="linear_regression", dataset="diabetes")
        api.patch(f"/api/v1/jobs/{adam}", json={"tags": ["keep"], "note": "best so far"})
    _evaluated(quiet_portal.db_url, "labels", {"mlp small": 0.81, "mlp wide": 0.95,
                                               "mlp deep": 0.88})
    page = open_page(DESKTOP)
    sign_in(page, labeller, "/jobs")
    expect(page.locator("#jobs-table .job-name")).to_have_count(5)

    page.get_by_label("Search name or note").fill("ADAM")
    page.get_by_role("button", name="Find").click()
    expect(page.locator("#jobs-table .job-name")).to_have_count(1)
    assert _names(page) == ["adam lr 0.1"]
    assert "q=ADAM" in page.url, "the search is in the address, to bookmark"
    expect(page.get_by_test_id("tags").first).to_have_text("keep")

    page.get_by_role("button", name="Clear").click()
    expect(page.locator("#jobs-table .job-name")).to_have_count(5)
    page.get_by_label("Sort").select_option("-metric:val_accuracy")
    expect(page.locator("#jobs-table .job-name").first).to_have_text("mlp wide")
    assert _names(page)[:3] == ["mlp wide", "mlp deep", "mlp small"]
    expect(page.get_by_test_id("held-out").first).to_have_text("val_accuracy 0.95")
    screenshot(page, "jobs-find-sorted-by-accuracy")

    # A tag chip leads to the list filtered by that tag; nothing matching says so.
    page.get_by_test_id("tags").get_by_role("link", name="keep").click()
    expect(page.locator("#jobs-table .job-name")).to_have_count(1)
    expect(page.get_by_label("Tag")).to_have_value("keep")
    page.get_by_label("Algorithm").fill("kmeans")
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_test_id("no-match")).to_contain_text("No jobs match this search.")

    phone = open_page(PHONE)
    sign_in(phone, labeller, "/jobs?sort=-metric:val_accuracy&q=mlp")
    expect(phone.locator("#jobs-table .job-name").first).to_have_text("mlp wide")
    screenshot(phone, "jobs-find-sorted-by-accuracy")


def test_label_and_delete_a_job_from_its_page(
        open_page: Callable[..., Page], quiet_portal: Portal, labeller: Account) -> None:
    with _api(quiet_portal, labeller) as api:
        job_id = _submit(api, name="unnamed run")
        page = open_page(DESKTOP)
        sign_in(page, labeller, f"/jobs/{job_id}")
        delete = page.locator("#labels-delete")
        expect(delete).to_be_disabled()  # queued: cancel first

        page.get_by_role("button", name="Edit labels").click()
        page.get_by_label("Tags").fill("data/v2")
        page.get_by_role("button", name="Save labels").click()
        expect(page.locator("#labels-message")).to_contain_text("is not valid")

        page.get_by_label("Name", exact=True).fill("lr 0.1 warm restart")
        page.get_by_label("Tags").fill("restarts, v2")
        page.get_by_label("Note").fill("diverged at 3k;\nretry with clipping")
        page.get_by_role("button", name="Save labels").click()
        expect(page.locator("#labels-message")).to_contain_text("Labels saved.")
        expect(page.locator("#job-title")).to_contain_text("lr 0.1 warm restart")
        expect(page.get_by_test_id("note")).to_have_text("diverged at 3k;\nretry with clipping")
        stored = api.get(f"/api/v1/jobs/{job_id}").json()
        assert stored["tags"] == ["restarts", "v2"] and stored["name"] == "lr 0.1 warm restart"
        screenshot(page, "job-labels")

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel", exact=True).click()
        expect(delete).to_be_enabled()
        # Dismissed: nothing is deleted.
        page.once("dialog", lambda dialog: dialog.dismiss())
        delete.click()
        expect(delete).to_be_enabled()
        assert api.get(f"/api/v1/jobs/{job_id}").status_code == 200

        asked: list[str] = []

        def accept(dialog: Dialog) -> None:
            asked.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        delete.click()
        page.wait_for_url("**/jobs")
        expect(page.locator("#bulk-result")).to_contain_text(f"Job {job_id} was deleted")
        assert "cannot be undone" in asked[0] and "lr 0.1 warm restart" in asked[0]
        assert api.get(f"/api/v1/jobs/{job_id}").status_code == 404
        screenshot(page, "jobs-after-delete")


def test_label_and_delete_an_experiment(
        open_page: Callable[..., Page], quiet_portal: Portal, labeller: Account) -> None:
    with _api(quiet_portal, labeller) as api:
        created = api.post("/api/v1/experiments", json={
            "name": "lr sweep", "algorithm": "logistic_regression", "dataset": "digits",
            "space": {"learning_rate": {"type": "choice", "values": [0.01, 0.1]}},
            "sampler": {"kind": "grid"}, "stopping": {"max_iterations": 40, "tolerance": None}})
        assert created.status_code == 201, created.text
        experiment = created.json()
        page = open_page(DESKTOP)
        sign_in(page, labeller, f"/experiments/{experiment['id']}")
        expect(page.locator("#labels-delete")).to_be_disabled()
        page.get_by_role("button", name="Edit labels").click()
        page.get_by_label("Name", exact=True).fill("lr sweep, digits")
        page.get_by_label("Tags").fill("sweep, digits")
        page.get_by_label("Note").fill("grid over two rates")
        page.get_by_role("button", name="Save labels").click()
        expect(page.locator("#labels-message")).to_contain_text("Labels saved.")
        expect(page.locator("#experiment-title")).to_have_text("lr sweep, digits")
        assert api.get(f"/api/v1/experiments/{experiment['id']}").json()["tags"] == \
            ["digits", "sweep"]
        api.post(f"/api/v1/experiments/{experiment['id']}/cancel")
        delete = page.locator("#labels-delete")
        expect(delete).to_be_enabled(timeout=20_000)  # the page polls: every job finished
        screenshot(page, "experiment-labels")
        page.once("dialog", lambda dialog: dialog.accept())
        delete.click()
        page.wait_for_url("**/experiments")
        assert api.get(f"/api/v1/experiments/{experiment['id']}").status_code == 404
        for job_id in experiment["job_ids"]:
            assert api.get(f"/api/v1/jobs/{job_id}").status_code == 404
        audit = api.get("/api/v1/admin/audit").json()
        assert any(a["action"] == "experiment.delete" and a["details"]["jobs"] ==
                   experiment["job_ids"] for a in audit)
