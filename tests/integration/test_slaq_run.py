"""`slaq run` as a new user runs it: no Redis reachable, an empty data dir."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.core.redis_conn import free_port, reachable
from tests.utils.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_slaq_run_starts_everything_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, DATA_DIR=str(tmp_path / "var"), PORT=str(port), WORKERS="1",
               REDIS_URL=f"redis://127.0.0.1:{free_port()}/0", DATABASE_URL="",
               CHUNK_SECONDS="0.3", PYTHONUNBUFFERED="1")
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "run"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> dict[str, Any] | None:
            try:
                body = httpx.get(f"{base}/api/v1/health", timeout=2).json()
                return body if body.get("worker_slots", 0) >= 1 else None
            except (httpx.HTTPError, ValueError):
                return None

        wait_until(healthy, 90, "the portal to be healthy with one worker slot")
        # The banner comes once the API answers, after the start-up lines.
        wait_until(lambda: "Press Ctrl-C to stop." in (tmp_path / "run.log").read_text(),
                   30, "the banner")
        output = (tmp_path / "run.log").read_text()
        assert "started a private one" in output
        assert f"http://127.0.0.1:{port}/" in output
        assert (tmp_path / "var" / "slaq.db").exists()
        # No default password: the banner shows the generated one, once.
        shown = re.search(r"demo tenant admin: (\S+) / (\S+)", output)
        assert shown, output
        email, password = shown.groups()
        assert email == "demo@demo.example.com" and password != "demo"
        token = httpx.post(f"{base}/api/v1/auth/token", json={
            "email": email, "password": password}).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{base}/api/v1/jobs", headers=headers, json={
            "algorithm": "logistic_regression", "dataset": "wine",
            "stopping": {"max_iterations": 60, "tolerance": None}}).json()
        wait_until(lambda: httpx.get(f"{base}/api/v1/jobs/{job['id']}", headers=headers)
                   .json()["status"] == "completed", 90, "the demo job to complete")
        redis_url = next(line.split()[-1] for line in output.splitlines()
                         if "started a private one" in line)
        # Issue 38: the scheduler logged a line per round, burying the one-time
        # passwords; after a job's rounds the banner is still the last thing.
        after = (tmp_path / "run.log").read_text().split("Press Ctrl-C to stop.", 1)[1]
        assert not after.strip(), after[:2000]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert "Stopped." in (tmp_path / "run.log").read_text()
        assert not reachable(redis_url), "the private Redis must stop with the portal"
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{base}/api/v1/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_compose_file_parses() -> None:
    if shutil.which("docker-compose"):
        cmd = ["docker-compose", "-f", "docker-compose.yml", "config", "-q"]
    elif subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        cmd = ["docker", "compose", "-f", "docker-compose.yml", "config", "-q"]
    else:
        pytest.fail("neither docker compose nor docker-compose is installed "
                    "(scripts/test-services.sh installs it)")
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    services = subprocess.run([*cmd[:-2], "config", "--services"], cwd=ROOT,
                              capture_output=True, text=True).stdout.split()
    assert {"redis", "postgres", "api", "scheduler", "worker", "flower"} <= set(services)
