"""The datasets page: upload a CSV with a progress bar, see it listed and
previewed, train on it from the submit form, clone keeps it, its name (not
``upload:<id>``) is shown everywhere, and deleting it is refused while a job
uses it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from playwright.sync_api import Page, expect

from tests.browser.helpers import Account, api_client, screenshot, sign_in
from tests.utils.portal import Portal


def _flowers(path: Path, rows: int = 40_000) -> Path:
    """A semicolon-separated CSV of about 1.5 MB: big enough to take a few
    progress reports, separated by ';' as many spreadsheets export it."""
    rng = np.random.default_rng(3)
    names = ["setosa", "versicolor", "virginica"]
    lines = ["sepal_length;sepal_width;petal_length;species"]
    for i in range(rows):
        c = i % 3
        x = rng.normal(loc=[1.0 + 2 * c, -c, 3.0 * c], scale=0.4)
        lines.append(";".join(f"{v:.5f}" for v in x) + f";{names[c]}")
    path.write_text("\n".join(lines) + "\n")
    return path


SEEN = """() => {
  window.__seen = [];
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) window.__seen.push(n.textContent);
  }).observe(document.getElementById("upload-progress-label"), { childList: true });
}"""


def test_upload_preview_train_clone_and_delete(
        page: Page, accounts: Callable[..., Account], browser_portal: Portal,
        tmp_path: Path) -> None:
    user = accounts("dana@data-team.test", tenant="data-team")
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, user, "/datasets")
    expect(page.get_by_text("Your tenant has no uploaded datasets yet")).to_be_visible()

    csv = _flowers(tmp_path / "flowers.csv")
    page.get_by_label("CSV file").set_input_files(csv)
    expect(page.get_by_label("Dataset name")).to_have_value("flowers")
    page.get_by_label("Label column (optional)").fill("species")
    # A slow uplink (about 3 s for the file), so the bar has something to show.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 20, "downloadThroughput": -1,
        "uploadThroughput": 512 * 1024})
    # Every text the progress line shows the user, as it changes.
    page.evaluate(SEEN)
    page.get_by_role("button", name="Upload").click()
    bar = page.locator("#upload-progress")
    expect(bar).to_be_visible()
    expect(page.locator("#upload-progress-label")).to_contain_text(re.compile(r"Uploading: .* of "))
    screenshot(page, "datasets-uploading")

    expect(page.locator("#upload-message")).to_contain_text(
        "Uploaded flowers: 40,000 rows, 3 features, 3 classes")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    progress = page.evaluate("window.__seen")
    sent = [int(m.group(1)) for text in progress if (m := re.search(r"\((\d+)%\)$", text))]
    assert sent == sorted(sent) and sent[-1] == 100, progress
    assert any(0 < s < 100 for s in sent), f"no progress reported on the way: {progress}"
    assert progress[-1] == "Sent. The portal is checking the file…", progress
    expect(bar).to_be_hidden()

    row = page.locator("#datasets-table tr[data-name='flowers']")
    expect(row).to_contain_text("classification")
    expect(row).to_contain_text("40,000")
    # The new upload is previewed at once: first rows, names and types.
    headers = page.locator("#preview-table thead th")
    expect(headers).to_have_count(4)
    expect(headers.nth(0)).to_contain_text("sepal_length")
    expect(headers.nth(0)).to_contain_text("number")
    expect(headers.nth(3)).to_contain_text("class · label")
    expect(page.locator("#preview-table tbody tr")).to_have_count(10)
    first_row = page.locator("#preview-table tbody tr").first
    expect(first_row.locator("td").nth(3)).to_have_text("setosa")
    screenshot(page, "datasets-preview")

    with api_client(browser_portal, user) as api:
        ds = next(d for d in api.get("/api/v1/datasets").json() if d["name"] == "flowers")
    ref = ds["dataset"]

    # Train on it from the submit form.
    row.get_by_role("link", name="Train on flowers").click()
    page.wait_for_url(re.compile(r"/submit\?dataset="))
    expect(page.get_by_label("Dataset")).to_have_value(ref)
    expect(page.get_by_label("Algorithm")).to_have_value("logistic_regression")
    expect(page.locator("#dataset-description")).to_contain_text("Your uploaded classification CSV")
    # Only algorithms whose tasks the upload fits offer it.
    page.get_by_label("Algorithm").select_option("linear_regression")
    assert ref not in page.locator("#f-dataset option").evaluate_all("os => os.map(o => o.value)")
    page.get_by_label("Algorithm").select_option("logistic_regression")
    page.get_by_label("Dataset").select_option(ref)
    page.get_by_label("Maximum iterations").fill("100000")
    page.get_by_label("Convergence tolerance (optional)").fill("off")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    with api_client(browser_portal, user) as api:
        # Paused, the job is unfinished for as long as the test needs.
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
    expect(page.get_by_role("heading", level=1)).to_contain_text("logistic_regression on flowers")
    expect(page.locator("#job-spec")).to_contain_text("flowers")
    expect(page.locator("#job-spec")).not_to_contain_text("deleted")

    # Clone keeps the upload, with no false error.
    page.get_by_role("link", name="Clone").click()
    expect(page.locator("#form-message")).to_contain_text(f"Pre-filled from job #{job_id}")
    expect(page.get_by_label("Dataset")).to_have_value(ref)
    expect(page.locator("#f-dataset-error")).to_have_text("")

    page.goto("/jobs")
    expect(page.locator(f"tr[data-job-id='{job_id}']")).to_contain_text(
        "logistic_regression on flowers")
    expect(page.locator("#jobs-table")).not_to_contain_text("upload:")

    # Deleting is refused while the (paused) job may still use it, and says why.
    page.goto("/datasets")
    page.get_by_role("button", name="Delete flowers").click()
    expect(page.get_by_test_id("delete-error")).to_contain_text("flowers is still in use")
    expect(page.get_by_test_id("delete-error")).to_contain_text("unfinished job")
    expect(row).to_be_visible()
    with api_client(browser_portal, user) as api:
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
    page.get_by_role("button", name="Delete flowers").click()
    expect(page.locator("#list-message")).to_contain_text("Deleted flowers.")
    expect(row).to_have_count(0)
    # The job keeps its results; its dataset is named as gone.
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#job-spec")).to_contain_text(f"deleted upload #{ds['id']}")


def test_a_bad_csv_is_refused_with_the_reason(
        page: Page, accounts: Callable[..., Account], tmp_path: Path) -> None:
    user = accounts("dora@data-team.test", tenant="data-team")
    sign_in(page, user, "/datasets")
    bad = tmp_path / "decimal-commas.csv"
    bad.write_text("a;b;label\n" + "".join(f"{i},5;{i};{i % 2}\n" for i in range(12)))
    page.get_by_label("CSV file").set_input_files(bad)
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#ds-file-error")).to_contain_text("decimal comma")
    expect(page.get_by_label("CSV file")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#upload-message")).to_contain_text("The upload was refused")


