"""The README's "Using the API from a script" block, run as written against
a real portal (issue 38: its responses ran together on one line, it read
job 1 whatever id it got back, and a wrong password ended in a traceback)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import httpx
import pytest

from tests.utils.portal import ROOT, Portal, make_user_token

# The script talks HTTP; what it stores is the portal's business.
pytestmark = pytest.mark.one_database

DEMO = "demo@demo.example.com"


def _script(portal: Portal) -> str:
    """The README's block, with the password prompt left out (the test sets
    SLAQ_PASSWORD) and PORTAL pointed at this portal."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Using the API from a script", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "no bash block under 'Using the API from a script'"
    lines = []
    for line in block.group(1).splitlines():
        if line.startswith("read "):
            continue
        if line.startswith("PORTAL="):
            line = f"PORTAL={portal.base_url}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _run(portal: Portal, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", _script(portal)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, SLAQ_PASSWORD=password))


def test_readme_script_submits_and_reads_back_its_own_job(portal: Portal) -> None:
    make_user_token(portal.db_url, tenant="demo", email=DEMO)
    # Another job first, so the one the script submits is not job 1.
    other = make_user_token(portal.db_url, tenant="not-demo", email="x@not-demo.test")
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {other}"}) as api:
        first = api.post("/api/v1/jobs", json={"algorithm": "logistic_regression",
                                               "dataset": "iris"}).json()["id"]
        api.post(f"/api/v1/jobs/{first}/cancel")

    done = _run(portal, "pw-" + DEMO)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and done.stdout.endswith("\n"), done.stdout
    submitted = re.fullmatch(r"submitted job (\d+)", lines[0])
    assert submitted, lines
    job = json.loads(lines[1])
    assert job["id"] == int(submitted.group(1)) != first
    assert job["algorithm"] == "logistic_regression"


def test_readme_script_says_a_wrong_password_and_stops(portal: Portal) -> None:
    make_user_token(portal.db_url, tenant="demo", email=DEMO)
    refused = _run(portal, "not-the-password")
    assert refused.returncode != 0
    assert refused.stdout == ""
    assert refused.stderr.strip() == "sign-in refused: wrong email or password"
