"""slaq's kept scores, found by the view's identity, and the ranking that
indexes a decision's jobs without a list of them all, on literal entries."""

from __future__ import annotations

import numpy as np

from backend.scheduling.policies.slaq_memo import KeptScores, Ranking
from backend.scheduling.policies.slaq_scores import Scored
from backend.scheduling.predictor import CurveFit
from backend.scheduling.types import JobView

FIT = CurveFit(job_id=0, key=(10, 10), family="exp", params=(1.0, 0.1, 2.0), k_last=10, k0=0.0,
               span=9.0, lo=0.1, height=1.0, anchor=0.3, noise=0.0, drift=0.0, initial_loss=1.0,
               lowest_loss=0.3, largest_step_drop=0.1, seconds_per_iteration=0.01)


def view(job_id: int) -> JobView:
    return JobView(job_id=job_id, tenant_id=1, submitted_at=0.0, iterations_done=10,
                   max_iterations=100)


def entry(job: JobView | None, moving: float) -> Scored:
    return Scored(job, FIT, 90, 10, 10, 0.5, 0.0, 0.2, plain=moving, moving=moving)


def test_rows_find_the_very_view_only() -> None:
    kept = KeptScores()
    a, b, c = view(1), view(2), view(3)
    kept.remember_all([1, 2], [entry(a, 0.5), entry(b, 0.25)])
    rows = kept.rows([c, b, a, view(1)])  # a new view of job 1 is not its kept one
    assert rows[0] == -1 and rows[3] == -1
    assert kept.moving(rows[1:3]).tolist() == [0.25, 0.5]


def test_a_new_entry_takes_the_jobs_row_and_forgets_the_old_view() -> None:
    kept = KeptScores()
    old, new = view(1), view(1)
    kept.remember(1, entry(old, 0.5))
    kept.remember_all([1], [entry(new, 0.75)])
    assert kept.rows([old]).tolist() == [-1]
    assert kept.moving(kept.rows([new])).tolist() == [0.75]
    assert kept.entries[1].moving == 0.75


def test_an_entry_without_a_view_is_kept_by_job_only() -> None:
    kept = KeptScores()
    a = view(1)
    kept.remember(1, entry(a, 0.5))
    kept.remember(1, entry(None, 0.1))
    assert kept.rows([a]).tolist() == [-1]
    assert kept.entries[1].view is None


def test_changed_in_place_moves_the_row() -> None:
    kept = KeptScores()
    a = view(1)
    e = entry(a, 0.5)
    kept.remember(1, e)
    e.take(entry(a, 0.125))
    kept.changed(1, e)
    assert kept.moving(kept.rows([a])).tolist() == [0.125]


def test_rows_grow_and_keep_only_renumbers() -> None:
    kept = KeptScores()
    views = [view(i) for i in range(200)]
    kept.remember_all(list(range(200)), [entry(v, float(i)) for i, v in enumerate(views)])
    assert kept.moving(kept.rows(views)).tolist() == [float(i) for i in range(200)]
    kept.keep_only([5, 150])
    assert kept.rows(views[:10]).tolist().count(-1) == 9
    assert kept.moving(kept.rows([views[150], views[5]])).tolist() == [150.0, 5.0]
    assert sorted(kept.entries) == [5, 150]


def test_ranking_reads_positions_then_more() -> None:
    jobs = [view(i) for i in range(5)]
    extra = view(9)
    ranking = Ranking(jobs, np.array([4, 1]), [extra])
    assert len(ranking) == 3
    assert [j.job_id for j in ranking] == [4, 1, 9]
    assert [ranking[i].job_id for i in range(3)] == [4, 1, 9]
    assert ranking[-1] is extra and [j.job_id for j in ranking[1:]] == [1, 9]
    assert [j.job_id for j in ranking.plus([jobs[0]])] == [4, 1, 9, 0]


def test_newest_points_mask_and_mean_match_the_recent_offset() -> None:
    from backend.scheduling.predictor.windows import _mean_over, _newest_points, _recent_offset

    used = np.array([[True, True, True, True, False], [True, True, False, False, False]])
    resid = np.array([[9.0, 1.0, 2.0, 3.0, 7.0], [4.0, 6.0, 8.0, 8.0, 8.0]])
    newest = _newest_points(used)
    assert newest.tolist() == [[False, True, True, True, False], [True, True, False, False, False]]
    assert _mean_over(resid, newest).tolist() == [2.0, 5.0]
    assert _recent_offset(resid, used).tolist() == [2.0, 5.0]


def test_keep_only_keeps_an_entry_without_a_view_and_gives_it_no_row() -> None:
    kept = KeptScores()
    seen = view(1)
    kept.remember(1, entry(seen, 0.5))
    kept.remember(2, entry(None, 0.25))  # its fit still pending: no view
    kept.keep_only([1, 2])
    assert sorted(kept.entries) == [1, 2] and kept.entries[2].view is None
    assert kept._row_of_view.keys() == {id(seen)}
    assert kept.moving(kept.rows([seen])).tolist() == [0.5]
