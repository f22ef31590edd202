"""The API process relaxes and freezes its garbage collector at startup
(backend.core.heap): checked in a fresh interpreter, whose collector state
is its own."""

from __future__ import annotations

import json
import subprocess
import sys

from backend.core.heap import YOUNG_THRESHOLD

PROBE = """
import gc, json, time
from fastapi.testclient import TestClient
from backend.main import create_app
before = gc.get_freeze_count()
with TestClient(create_app()):
    deadline = time.monotonic() + 60
    while gc.get_freeze_count() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"before": before, "frozen": gc.get_freeze_count(),
                      "threshold": gc.get_threshold()}))
"""


def test_api_startup_freezes_its_heap_and_relaxes_young_passes() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=120, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] == 0
    # Modules and the trainer catalogue: far more than a handful of objects.
    assert seen["frozen"] > 10_000
    assert seen["threshold"][0] == YOUNG_THRESHOLD
