"""The compare view reads at a glance (issue 38, item 10): the compared
metric first and the parameters every run shares folded, a log axis chosen
by the job page's rule, short legend names, and parallel coordinates with
round ticks and missing values drawn apart from the real lows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

STOP = {"max_iterations": 20, "tolerance": None}
CHART = "document.getElementById('compare-chart')"
PARCOORDS = "document.getElementById('compare-parcoords')"


def _runs(api: httpx.Client) -> list[dict[str, Any]]:
    specs = [
        {"algorithm": "kmeans", "dataset": "iris", "name": "a clustering run with a long name",
         "stopping": STOP},
        {"algorithm": "logistic_regression", "dataset": "iris", "params": {"learning_rate": 0.5},
         "eval_every": 10, "stopping": STOP, "name": "fast logistic regression on iris"},
        {"algorithm": "logistic_regression", "dataset": "iris", "params": {"learning_rate": 0.05},
         "eval_every": 10, "stopping": STOP, "name": "slow logistic regression on iris"},
    ]
    ids = []
    for spec in specs:
        resp = api.post("/api/v1/jobs", json=spec)
        assert resp.status_code == 201, resp.text
        ids.append(int(resp.json()["id"]))

    def done() -> list[dict[str, Any]] | None:
        jobs = [api.get(f"/api/v1/jobs/{i}").json() for i in ids]
        return jobs if all(j["status"] == "completed" for j in jobs) else None
    return wait_until(done, 120, "the runs to finish")


def test_compare_view_reads_at_a_glance(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal) -> None:
    user = accounts("gla@glance.test", tenant="glance")
    with api_client(browser_portal, user) as api:
        kmeans, fast, slow = _runs(api)
    assert kmeans["current_loss"] / slow["current_loss"] > 50, "losses far apart, as meant"

    sign_in(page, user, f"/compare?jobs={kmeans['id']},{fast['id']},{slow['id']}")
    page.wait_for_function(f"() => {CHART}?.data?.length === 6")
    # Losses of ~68 and ~0.1: a log axis, chosen by the job page's rule.
    assert page.evaluate(f"() => {CHART}.layout.yaxis.type") == "log"
    expect(page.get_by_label("Log scale")).to_be_checked()
    expect(page.locator("#compare-chart-note")).to_contain_text("chosen as on the job page")
    # Short legend names: the number and what differs, never the whole name.
    names = page.evaluate(f"() => {CHART}.data.filter((t) => t.showlegend !== false)"
                          ".map((t) => t.name)")
    assert sorted(names) == sorted([f"#{kmeans['id']} kmeans",
                                    f"#{fast['id']} learning_rate=0.5",
                                    f"#{slow['id']} learning_rate=0.05"]), names
    # The user's choice sticks.
    page.get_by_label("Log scale").uncheck()
    page.wait_for_function(f"() => {CHART}.layout.yaxis.type === 'linear'")

    # The compared metric first, right after the run.
    table = page.locator("#compare-table")
    keys = table.locator("thead th").evaluate_all("ths => ths.map((t) => t.dataset.key)")
    assert keys[:2] == ["id", "final"], keys

    # Parallel coordinates: kmeans has no learning rate; it sits at "missing",
    # below the axis, apart from the lowest real rate (0.05, at the bottom).
    labels = page.evaluate(f"() => {PARCOORDS}.layout.xaxis.ticktext")
    axis = labels.index("learning_rate")
    lines = {t["meta"]["job"]: t for t in page.evaluate(f"() => {PARCOORDS}.data")}
    assert lines[kmeans["id"]]["y"][axis] < -0.1
    assert lines[slow["id"]]["y"][axis] == 0 and lines[fast["id"]]["y"][axis] == 1
    assert lines[kmeans["id"]]["meta"]["values"][axis] is None
    ticks = page.evaluate(f"() => {PARCOORDS}.layout.annotations"
                          ".map((a) => ({x: a.x, y: a.y, text: a.text, bg: a.bgcolor,"
                          " anchor: a.xanchor}))")
    assert {"x": axis, "y": -0.16, "text": "<i>missing</i>"}.items() <= \
        next(t for t in ticks if t["x"] == axis and "missing" in t["text"]).items()
    final = labels.index("final loss (log)")
    on_final = [t["text"] for t in ticks if t["x"] == final]
    assert len(on_final) >= 4 and "1" in on_final and "10" in on_final, on_final
    assert all(t["bg"] and t["anchor"] == "right" for t in ticks)
    expect(page.locator("#compare-parcoords-note")).to_contain_text("missing")
    screenshot(page, "compare-glance")

    # Two runs of one trainer: what they share is one line, not columns.
    page.goto(f"/compare?jobs={fast['id']},{slow['id']}")
    same = page.get_by_test_id("same-params")
    expect(same).to_have_text("batch_size=64, l2=1e-4, momentum=0.9")
    expect(table.locator("th[data-key^='param:']")).to_have_count(1)
    page.wait_for_function(f"() => {CHART}?.data?.length === 4")
    assert page.evaluate(f"() => {CHART}.layout.yaxis.type") == "linear", \
        "losses within 50 times of each other stay linear"
    assert page.evaluate(f"() => {PARCOORDS}.layout.xaxis.ticktext") == \
        ["learning_rate", "final loss"]
    page.get_by_role("button", name="Show them as columns").click()
    expect(table.locator("th[data-key^='param:']")).to_have_count(4)
    screenshot(page, "compare-folded")
