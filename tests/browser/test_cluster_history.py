"""The cluster page draws the history the scheduler recorded before the page
was opened, with HH:MM:SS time axes and slot numbers that add up."""

from __future__ import annotations

import re
from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.helpers import DESKTOP, PHONE, Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal
from tests.utils.waiting import wait_until

FIRST_X = """() => { const gd = document.getElementById('history-chart');
  return gd && gd.data && gd.data[0].x.length ? new Date(gd.data[0].x[0]).getTime() : null; }"""
POINTS = """() => { const gd = document.getElementById('history-chart');
  return gd && gd.data ? gd.data[0].x.length : 0; }"""
TICKS = "() => [...document.querySelectorAll('#history-chart .xtick text')].map(t => t.textContent)"


def test_cluster_page_draws_history_recorded_before_it_opened(
        make_page: Callable[..., Page], accounts: Callable[..., Account],
        browser_portal: Portal) -> None:
    user = accounts("hilda@history-team.test", tenant="history-team")
    with api_client(browser_portal, user) as api:
        job = api.post("/api/v1/jobs", json={
            "algorithm": "kmeans", "dataset": "iris", "params": {"n_clusters": 3},
            "stopping": {"max_iterations": 1500, "tolerance": None}}).json()["id"]
        # The job runs and finishes with no page open: only the scheduler saw it.
        wait_until(lambda: api.get(f"/api/v1/jobs/{job}").json()["status"] == "completed",
                   120, "the job to finish")
        recorded = api.get("/api/v1/cluster/history", params={"minutes": 60}).json()["samples"]
        assert any(s["busy"] >= 1 for s in recorded), "the scheduler recorded the busy slot"

    # Both themes, one at each width: test_screenshots covers the other pairs.
    for theme, viewport in (("light", DESKTOP), ("dark", PHONE)):
        page = make_page(viewport)
        page.emulate_media(color_scheme="dark" if theme == "dark" else "light")
        sign_in(page, user, "/cluster")
        opened_ms = page.evaluate("() => performance.timeOrigin")
        page.wait_for_function(f"() => ({POINTS})() > 0")
        first_ms = page.evaluate(FIRST_X)
        assert first_ms < opened_ms - 1000, "points older than the page are drawn"
        # ...and the busy slot of the finished job is among them.
        busy = page.evaluate("() => document.getElementById('history-chart').data[0].y")
        assert max(busy) >= 1
        before = page.evaluate(POINTS)
        page.wait_for_function(f"() => ({POINTS})() > {before}", timeout=20_000)
        ticks = page.evaluate(TICKS)
        assert ticks, "the time axis has labels"
        for tick in ticks:
            assert re.fullmatch(r"\d\d:\d\d:\d\d", tick), f"tick {tick!r} is not HH:MM:SS"
        busy_text = page.get_by_test_id("slots").inner_text()
        used, total = (int(n) for n in re.findall(r"\d+", busy_text))
        free = int(page.get_by_test_id("free-slots").inner_text())
        assert used + free == total == 2, (busy_text, free)
        expect(page.locator("#history-note")).to_contain_text("Recorded by the scheduler")
        screenshot(page, "cluster-history", theme)
