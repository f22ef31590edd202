"""How a published fit is cut and clamped for the job page's chart."""

from __future__ import annotations

from backend.core.fits import fit_for_chart, fit_payload

FIT = fit_payload(job_id=1, from_iteration=10, family="exp", fitted_at=0.0,
                  rows=[(11, 0.2, -0.1, 0.5), (20, 0.1, -0.2, 0.4), (30, -0.05, -0.3, 0.3)])


def test_points_at_or_before_the_last_done_iteration_are_dropped() -> None:
    shown = fit_for_chart(FIT, done=20, floor=None)
    assert [p["iteration"] for p in shown["points"]] == [30]
    assert shown["from_iteration"] == 10 and shown["family"] == "exp"


def test_floor_clamps_prediction_and_band() -> None:
    shown = fit_for_chart(FIT, done=10, floor=0.0)
    assert [(p["loss"], p["low"], p["high"]) for p in shown["points"]] == [
        (0.2, 0.0, 0.5), (0.1, 0.0, 0.4), (0.0, 0.0, 0.3)]
    assert FIT["points"][0]["low"] == -0.1, "the published payload is left as it was"


def test_no_floor_keeps_negative_values() -> None:
    assert fit_for_chart(FIT, done=0, floor=None)["points"] == FIT["points"]
