"""The guard bench's frontier figures and target marks, on literal cells."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.bench.guard import every_shortfall, frontier, met, parse_spec, shortfall, write_chart


def figs(avg: float, compl: float, t95: float = 1.0) -> dict[str, float]:
    return {"avg_norm_loss": avg, "mean_completion": compl, "t95_mean": t95}


GRID = {
    # las 0.2 / 10 s; slaq 10% lower loss, 5% longer; oracle 20% lower loss.
    ("t", 2, 2.0, 1.0): {"las": figs(0.2, 10.0), "fair": figs(0.3, 11.0),
                         "slaq@0.4": figs(0.18, 10.5), "oracle@0.4": figs(0.16, 10.0)},
    # uncontended: slaq 5% behind las, 20% longer, t95 10% behind.
    ("t", 2, 1.2, 1.0): {"las": figs(0.2, 10.0), "fair": figs(0.3, 11.0),
                         "slaq@0.4": figs(0.21, 12.0, 1.1), "oracle@0.4": figs(0.2, 10.0)},
}


def test_frontier_point_and_targets() -> None:
    r = frontier(GRID, "t", "slaq@0.4", "oracle@0.4")
    assert r["gain_mean"] == pytest.approx((10.0 - 5.0) / 2)
    assert r["cost_mean"] == pytest.approx((5.0 + 20.0) / 2)
    assert r["contended_gain"] == pytest.approx(10.0)
    assert r["worst_gain"] == pytest.approx(-5.0) and r["worst_cost"] == pytest.approx(20.0)
    assert r["worst_t95"] == pytest.approx(-10.0)
    assert r["oracle_contended_gain"] == pytest.approx(20.0)
    assert r["captured"] == pytest.approx(50.0)
    assert met(r) == {"contended_gain": True, "worst_gain": False, "mean_cost": False,
                      "worst_cost": False, "worst_t95": False, "captured": True}
    fair = frontier(GRID, "t", "fair", None)
    assert math.isnan(fair["captured"]) and met(fair)["captured"] is None


def test_policy_specs_and_chart(tmp_path: Path) -> None:
    assert parse_spec("slaq") == ("slaq", {})
    assert parse_spec("oracle-mix:0.5") == ("oracle-mix", {"weight": 0.5})
    assert parse_spec("slaq:0.01") == ("slaq", {"completion_weight": 0.01})
    with pytest.raises(ValueError):
        parse_spec("oracle:0.5")
    with pytest.raises(ValueError):
        parse_spec("las")
    rows = {"t|fair": frontier(GRID, "t", "fair", None),
            "t|slaq@0.4": frontier(GRID, "t", "slaq@0.4", "oracle@0.4")}
    path = tmp_path / "chart.html"
    write_chart(path, rows, ["t"], ["slaq"], (0.4,), "note")
    text = path.read_text()
    assert "cdn.plot.ly/plotly" not in text and "plotly.js" in text
    # fair is 50% behind las, slaq 2.5% ahead: the axis spans slaq, las and
    # the target, and fair's legend says where it is.
    assert "fair (-50.0%, +10.0%: off the chart)" in text


def test_the_guard_rules_shortfalls() -> None:
    # 2 points short of the contended gain, 4 over the mean cost.
    assert shortfall(3.0, 7.0) == pytest.approx(6.0)
    assert shortfall(9.0, -2.0) == 0.0
    r = frontier(GRID, "t", "slaq@0.4", "oracle@0.4")
    # Contended +10% (met), mean cost +12.5% (9.5 over), worst gain -5% (2
    # under), worst cost +20% (5 over), worst t95 -10% (5 under).
    assert every_shortfall(r) == pytest.approx(9.5 + 2.0 + 5.0 + 5.0)
