"""The pieces behind the Prometheus endpoints: the Redis-kept counters and
histograms (applied here to a dict the way Redis applies HINCRBY), the route
labels, the token check, and the API's multiprocess mode."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from starlette.routing import Mount, Route

from backend.api.metrics import UNMATCHED, route_label, same_secret
from backend.cli import _multiprocess_metrics
from backend.core import metrics_store as store
from backend.scheduler import metrics as scheduler_metrics
from workers import metrics as worker_metrics

ROOT = Path(__file__).resolve().parents[2]


def apply(fields: dict[str, str], batch: store.Batch) -> None:
    """What HINCRBY / HINCRBYFLOAT do to the hash."""
    for name, amount in batch.ints.items():
        fields[name] = str(int(fields.get(name, "0")) + amount)
    for name, value in batch.floats.items():
        fields[name] = repr(float(fields.get(name, "0")) + value)


class Families(Collector):
    def __init__(self, *families: Any) -> None:
        self.families = families

    def collect(self) -> Any:
        yield from self.families


def exposed(*families: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Families through the text format and Prometheus's own parser."""
    text = generate_latest(Families(*families)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_an_observation_lands_in_the_smallest_bucket_that_holds_it() -> None:
    bounds = (0.1, 1.0, 10.0)
    assert store.bucket_of(0.1, bounds) == 0.1
    assert store.bucket_of(0.10001, bounds) == 1.0
    assert store.bucket_of(0.0, bounds) == 0.1
    assert store.bucket_of(11, bounds) == math.inf


def test_histograms_are_cumulative_and_summed_over_hosts() -> None:
    fields: dict[str, str] = {}
    bounds = (0.5, 1.0, 5.0)
    for host, seconds in (("a", 0.2), ("a", 0.7), ("b", 0.7), ("b", 9.0)):
        apply(fields, store.Batch().observe("d", {"pool": "cpu", "host": host}, seconds, bounds))
    apply(fields, store.Batch().observe("d", {"pool": "gpu", "host": "c"}, 3.0, bounds))
    apply(fields, store.Batch().observe("d", {"pool": "gpu", "host": "c"}, math.nan, bounds))
    figures = store.parse(fields)

    cluster = exposed(store.histogram_family(figures, "d", "slaq_d", "doc", bounds, ["pool"]))
    buckets = {(labels["pool"], labels["le"]): v for labels, v in cluster["slaq_d_bucket"]}
    assert [buckets[("cpu", le)] for le in ("0.5", "1.0", "5.0", "+Inf")] == [1, 3, 3, 4]
    assert [buckets[("gpu", le)] for le in ("0.5", "1.0", "5.0", "+Inf")] == [0, 0, 1, 1]
    counts = {labels["pool"]: v for labels, v in cluster["slaq_d_count"]}
    sums = {labels["pool"]: v for labels, v in cluster["slaq_d_sum"]}
    assert counts == {"cpu": 4, "gpu": 1}  # the NaN was not recorded
    assert sums["cpu"] == pytest.approx(0.2 + 0.7 + 0.7 + 9.0) and sums["gpu"] == 3.0

    # One host's view: only its series, with its labels kept.
    one = exposed(store.histogram_family(figures, "d", "w_d", "doc", bounds, ["pool", "host"],
                                         where={"host": "b", "pool": "cpu"}))
    assert one["w_d_count"] == [({"pool": "cpu", "host": "b"}, 2.0)]
    assert one["w_d_sum"][0][1] == pytest.approx(9.7)


def test_counters_sum_over_unkept_labels_and_show_zeros() -> None:
    fields: dict[str, str] = {}
    apply(fields, store.Batch().inc("granted", {"pool": "cpu"}, 3).inc("granted", {"pool": "cpu"}))
    apply(fields, store.Batch().inc("failed", {"pool": "cpu", "host": "a", "reason": "error"})
          .inc("failed", {"pool": "cpu", "host": "b", "reason": "error"}, 2))
    figures = store.parse(fields)
    out = exposed(
        store.counter_family(figures, "granted", "slaq_granted", "doc", ["pool"],
                             zero=[("cpu",), ("gpu",)]),
        store.counter_family(figures, "failed", "slaq_failed", "doc", ["pool", "reason"]),
        store.counter_family(figures, "never", "slaq_never", "doc", zero=[()]))
    assert sorted((labels["pool"], v) for labels, v in out["slaq_granted_total"]) == \
        [("cpu", 4.0), ("gpu", 0.0)]
    assert out["slaq_failed_total"] == [({"pool": "cpu", "reason": "error"}, 3.0)]
    assert out["slaq_never_total"] == [({}, 0.0)]


def test_fields_that_do_not_parse_are_skipped() -> None:
    fields = {"x|not json|total": "1", "y|{}|total": "many", "z|{}|b:wide": "1",
              "ok|{\"pool\":\"cpu\"}|total": "2"}
    figures = store.parse(fields)
    assert figures.counters == {("ok", (("pool", "cpu"),)): 2.0}
    assert figures.histograms[("z", ())].count == 0


def test_route_labels_are_templates_never_raw_paths() -> None:
    api_route = SimpleNamespace(path_format="/api/v1/jobs/{job_id}", path="/api/v1/jobs/{job_id}")
    assert route_label({"route": api_route}) == "/api/v1/jobs/{job_id}"
    assert route_label({"route": SimpleNamespace(path="/static")}) == "/static"
    # Answered before routing (the JSON guard): matched here, by template.
    routes = [Route("/api/v1/jobs", _nothing, methods=["POST"]),
              Route("/api/v1/jobs/{job_id}", _nothing)]
    scope = {"type": "http", "method": "POST", "path": "/api/v1/jobs/12345", "root_path": ""}
    assert route_label(scope, routes) == "/api/v1/jobs/{job_id}"
    assert route_label(dict(scope, path="/api/v1/jobs"), routes) == "/api/v1/jobs"
    assert route_label(dict(scope, path="/api/v1/nothing/12345"), routes) == UNMATCHED
    # A mount rewrote root_path: matched as the request arrived.
    mounted = dict(scope, method="GET", path="/static/app.css", root_path="/static")
    static = [Mount("/static", app=_no_app)]
    assert route_label(mounted, static) == UNMATCHED
    assert route_label(mounted, static, dict(mounted, root_path="")) == "/static/{path}"


def _nothing(_request: Any) -> None:
    return None


async def _no_app(_scope: Any, _receive: Any, _send: Any) -> None:
    return None


def test_tokens_compare_by_content() -> None:
    assert same_secret("s3cret-token", "s3cret-token")
    assert not same_secret("s3cret-token", "s3cret-tokem")
    assert not same_secret("s3cret", "s3cret-token")
    assert not same_secret("", "s3cret-token")


def test_endpoints_stay_off_at_port_zero() -> None:
    assert scheduler_metrics.serve(0, "127.0.0.1", lambda: True) is False
    assert worker_metrics.serve(0, "127.0.0.1") is False


def test_several_api_processes_answer_with_their_sum(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With API_PROCESSES > 1, ``slaq api`` gives the processes one
    multiprocess directory (an earlier run's files removed): requests counted
    in two processes are collected, summed, by a third."""
    folder = tmp_path / "prom"
    folder.mkdir()
    (folder / "counter_999999.db").write_bytes(b"stale")
    (folder / "notes.txt").write_text("not prometheus-client's")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    _multiprocess_metrics(tmp_path / "unused")
    assert not (folder / "counter_999999.db").exists() and (folder / "notes.txt").exists()
    assert not (tmp_path / "unused").exists()

    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(folder))
    record = textwrap.dedent("""
        import sys
        from backend.api.metrics import REQUEST_SECONDS, REQUESTS
        for _ in range(int(sys.argv[1])):
            REQUEST_SECONDS.labels(method="GET", route="/api/v1/jobs").observe(0.01)
            REQUESTS.labels(method="GET", route="/api/v1/jobs", status="200").inc()
    """)
    for calls in (3, 4):
        subprocess.run([sys.executable, "-c", record, str(calls)], cwd=ROOT, env=env,
                       check=True, timeout=120)
    collect = textwrap.dedent("""
        from prometheus_client import generate_latest
        from backend.api.metrics import _own_figures
        print(generate_latest(_own_figures()).decode())
    """)
    text = subprocess.run([sys.executable, "-c", collect], cwd=ROOT, env=env, check=True,
                          timeout=120, capture_output=True, text=True).stdout
    samples = {(s.name, s.labels.get("status", "")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("slaq_api_request_duration_seconds_count", "")] == 7
    assert samples[("slaq_api_requests_total", "200")] == 7
