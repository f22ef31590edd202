"""Previewing an upload (first rows, column names and types, tenant-scoped),
and CSVs separated by semicolons or tabs."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator

import httpx
import pytest

from backend.services.csv_import import parse_csv
from backend.services.uploads import UploadError
from tests.utils.portal import Portal

# One database: the subject is parsing and previewing CSV files, not the database.
pytestmark = pytest.mark.one_database

FLOWERS = "sepal_length,petals,species\n" + "".join(
    f"{1.5 + i / 10:.2f},{i % 4},{['setosa', 'versicolor'][i % 2]}\n" for i in range(25))


def _upload(client: httpx.Client, csv: str, task: str = "classification",
            label: str | None = None) -> httpx.Response:
    data = {"name": f"ds-{uuid.uuid4().hex[:8]}", "task": task}
    if label is not None:
        data["label"] = label
    return client.post("/api/v1/datasets", data=data,
                       files={"file": ("data.csv", csv.encode(), "text/csv")})


@pytest.fixture
def other(portal: Portal, other_token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other_token}"}) as client:
        yield client


def test_preview_shows_first_rows_names_and_types(api: httpx.Client) -> None:
    ds = _upload(api, FLOWERS).json()
    preview = api.get(f"/api/v1/datasets/{ds['id']}/preview")
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert (body["id"], body["name"], body["task"], body["total_rows"]) == (
        ds["id"], ds["name"], "classification", 25)
    assert body["columns"] == [
        {"name": "sepal_length", "role": "feature", "type": "number"},
        {"name": "petals", "role": "feature", "type": "integer"},
        {"name": "label", "role": "label", "type": "class"},
    ]
    assert len(body["rows"]) == 10
    assert body["rows"][0] == [1.5, 0, "setosa"]
    assert body["rows"][1] == [1.6, 1, "versicolor"]
    assert len(api.get(f"/api/v1/datasets/{ds['id']}/preview?rows=3").json()["rows"]) == 3
    assert api.get(f"/api/v1/datasets/{ds['id']}/preview?rows=0").status_code == 422


def test_preview_of_regression_and_clustering_uploads(api: httpx.Client) -> None:
    regression = _upload(api, FLOWERS.replace("setosa", "1.25").replace("versicolor", "2"),
                         task="regression", label="species").json()
    columns = api.get(f"/api/v1/datasets/{regression['id']}/preview").json()["columns"]
    assert columns[-1] == {"name": "target", "role": "label", "type": "number"}
    clustering = _upload(api, FLOWERS.replace(",setosa", "").replace(",versicolor", "")
                         .replace(",species", ""), task="clustering").json()
    body = api.get(f"/api/v1/datasets/{clustering['id']}/preview").json()
    assert [c["role"] for c in body["columns"]] == ["feature", "feature"]
    assert all(len(row) == 2 for row in body["rows"])


def test_preview_is_tenant_scoped(api: httpx.Client, other: httpx.Client) -> None:
    ds = _upload(api, FLOWERS).json()
    assert other.get(f"/api/v1/datasets/{ds['id']}/preview").status_code == 404
    missing = api.get("/api/v1/datasets/99999999/preview")
    assert missing.status_code == 404 and "not found" in missing.json()["detail"]


@pytest.mark.parametrize("separator", [";", "\t"], ids=["semicolon", "tab"])
def test_semicolon_and_tab_separated_files_are_read(api: httpx.Client, separator: str) -> None:
    resp = _upload(api, FLOWERS.replace(",", separator), label="species")
    assert resp.status_code == 201, resp.text
    assert (resp.json()["rows"], resp.json()["columns"], resp.json()["n_classes"]) == (25, 2, 2)


def test_separator_detection_and_hints() -> None:
    def parse(text: str) -> tuple[int, int]:
        parsed = parse_csv(io.BytesIO(text.encode()), task="classification")
        return parsed.rows, parsed.columns

    assert parse(FLOWERS) == (25, 2)
    assert parse(FLOWERS.replace(",", ";")) == (25, 2)
    assert parse(FLOWERS.replace(",", "\t")) == (25, 2)
    # A header settles "1,5;2" (decimal commas) as ';'-separated; the cell then
    # says what is wrong with it.
    decimal_commas = "a;b;label\n" + "".join(f"{i},5;{i};{i % 2}\n" for i in range(12))
    with pytest.raises(UploadError, match="decimal comma"):
        parse(decimal_commas)
    ragged = "a;b;label\n" + "".join(f"{i};{i};{i % 2}\n" for i in range(12)) + "1;2\n"
    with pytest.raises(UploadError, match="looks ';'-separated"):
        parse(ragged)
