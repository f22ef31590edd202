"""Continuing runs and generated text in the browser (issue 38, items 9 and
12): a finished job continued from its page, refused first with the
server's reason; an experiment given configurations from its page; a
char_transformer's generated sample on its job page, shown as text even
when the model writes markup."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

SHORT = {"algorithm": "logistic_regression", "dataset": "iris", "seed": 3, "eval_every": 10,
         "params": {"learning_rate": 0.05}}
SWEEP = {"name": "page sweep", "algorithm": "logistic_regression", "dataset": "iris",
         "space": {"learning_rate": {"type": "choice", "values": [0.1, 0.01]}},
         "stopping": {"max_iterations": 10, "tolerance": None}}
MARKUP = b"<img src=x onerror=alert(1)><b>bold</b> & more text\n" * 40
LM = {"context": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "batch_size": 8,
      "learning_rate": 0.01}


def _finished(api: httpx.Client, job_id: int, timeout: float = 180) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        return dict(job) if job["status"] in ("completed", "failed", "cancelled") else None
    return wait_until(probe, timeout, f"job {job_id} to finish")


def test_continue_a_finished_job_from_its_page(
        browser_portal: Portal, accounts: Callable[..., Account], page: Page) -> None:
    account = accounts("cory@goon.test", tenant="goon")
    with api_client(browser_portal, account) as api:
        resp = api.post("/api/v1/jobs", json={
            **SHORT, "stopping": {"max_iterations": 30, "tolerance": None}})
        assert resp.status_code == 201, resp.text
        job_id = int(resp.json()["id"])
        assert _finished(api, job_id)["iterations_done"] == 30
    sign_in(page, account, f"/jobs/{job_id}")
    expect(page.locator("#job-title")).to_have_attribute("data-status", "completed")
    button = page.get_by_role("button", name="Continue training")
    expect(button).to_be_enabled()
    button.click()
    form = page.locator("#continue-form")
    expect(form).to_be_visible()
    expect(page.get_by_label("Max iterations")).to_have_value("60")

    page.get_by_label("Max iterations").fill("30")
    form.get_by_role("button", name="Continue", exact=True).click()
    expect(page.locator("#control-message")).to_contain_text(
        "not more than the 30 iterations")
    screenshot(page, "job-continue-refused")

    page.get_by_label("Max iterations").fill("60")
    form.get_by_role("button", name="Continue", exact=True).click()
    expect(page.locator("#control-message")).to_contain_text(
        "queued to train from iteration 30 to at most 60")
    expect(form).to_be_hidden()
    expect(page.locator("#job-title")).to_have_attribute("data-status", "completed",
                                                         timeout=120_000)
    expect(page.get_by_test_id("iterations")).to_have_text("60")
    expect(page.locator("#job-spec")).to_contain_text("at most 60 iterations")
    expect(button).to_be_enabled()
    screenshot(page, "job-continued")
    with api_client(browser_portal, account) as api:
        losses = api.get(f"/api/v1/jobs/{job_id}/losses").json()
    assert losses["iterations"] == list(range(1, 61)), "each iteration once, none lost"


def test_a_running_job_cannot_be_continued(
        browser_portal: Portal, accounts: Callable[..., Account], page: Page) -> None:
    account = accounts("cory@goon.test", tenant="goon")
    with api_client(browser_portal, account) as api:
        resp = api.post("/api/v1/jobs", json={
            **SHORT, "stopping": {"max_iterations": 100_000, "tolerance": None}})
        job_id = int(resp.json()["id"])
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
    sign_in(page, account, f"/jobs/{job_id}")
    expect(page.locator("#job-title")).to_have_attribute("data-status", "paused")
    button = page.get_by_role("button", name="Continue training")
    expect(button).to_be_disabled()
    expect(button).to_have_attribute("title", re.compile("Only a finished job"))
    with api_client(browser_portal, account) as api:
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200


def test_add_configurations_on_the_experiment_page(
        browser_portal: Portal, accounts: Callable[..., Account], page: Page) -> None:
    account = accounts("exa@goon.test", tenant="goon")
    with api_client(browser_portal, account) as api:
        resp = api.post("/api/v1/experiments", json=SWEEP)
        assert resp.status_code == 201, resp.text
        experiment = resp.json()
    sign_in(page, account, f"/experiments/{experiment['id']}")
    box = page.get_by_label("Configurations, one per line")
    expect(box).to_have_attribute("placeholder", "learning_rate=…")
    expect(page.locator("#add-help")).to_contain_text("learning_rate")

    box.fill("momentum=0.5")
    page.get_by_role("button", name="Add configurations").click()
    expect(page.locator("#experiment-message")).to_contain_text(
        "not swept by this experiment: momentum")

    box.fill("learning_rate=0.3\nlearning_rate=0.1")
    page.get_by_role("button", name="Add configurations").click()
    message = page.locator("#experiment-message")
    expect(message).to_contain_text("Added 1 configuration: #")
    expect(box).to_have_value("")
    expect(page.locator("#experiment-counts > div").first.locator("dd")).to_have_text("3")
    expect(page.locator("#experiment-compare")).to_contain_text("0.3")
    screenshot(page, "experiment-configurations-added")
    with api_client(browser_portal, account) as api:
        shown = api.get(f"/api/v1/experiments/{experiment['id']}").json()
    assert sorted(c["params"]["learning_rate"] for c in shown["configurations"]) == \
        [0.01, 0.1, 0.3]


def test_char_transformer_shows_its_sample_as_text(
        browser_portal: Portal, accounts: Callable[..., Account], page: Page) -> None:
    account = accounts("lem@goon.test", tenant="goon")
    with api_client(browser_portal, account) as api:
        upload = api.post("/api/v1/datasets", data={"name": "markup", "task": "text"},
                          files={"file": ("markup.txt", MARKUP, "text/plain")})
        assert upload.status_code == 201, upload.text
        resp = api.post("/api/v1/jobs", json={
            "algorithm": "char_transformer", "dataset": upload.json()["dataset"],
            "params": LM, "eval_every": 10,
            "stopping": {"max_iterations": 20, "tolerance": None}})
        assert resp.status_code == 201, resp.text
        job_id = int(resp.json()["id"])
        done = _finished(api, job_id, timeout=240)
    assert done["status"] == "completed", done
    assert done["text_sample_iteration"] == 20
    sample = done["text_sample"]
    prompt = MARKUP.decode()[:16]
    assert sample.startswith(prompt) and len(sample) == len(prompt) + 120
    sign_in(page, account, f"/jobs/{job_id}")
    panel = page.locator("#sample-panel")
    expect(panel).to_be_visible()
    expect(page.get_by_test_id("text-sample")).to_have_text(sample)
    expect(page.locator("#sample-note")).to_contain_text("iteration 20")
    assert page.locator("#sample-text img, #sample-text b").count() == 0, "text, never markup"
    screenshot(page, "job-text-sample")
