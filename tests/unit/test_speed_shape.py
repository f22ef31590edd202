"""Jobs share first-chunk speed estimates only with jobs of the same shape."""

from __future__ import annotations

from backend.scheduler.state import shape_key


def test_a_learning_rate_sweep_shares_one_shape() -> None:
    assert shape_key({"hidden_units": 256, "learning_rate": 0.1}, {"n_samples": 5000}) == \
        shape_key({"hidden_units": 256, "learning_rate": 0.001}, {"n_samples": 5000})


def test_a_wider_model_or_more_data_is_another_shape() -> None:
    small = shape_key({"hidden_units": 256, "learning_rate": 0.1}, {})
    assert shape_key({"hidden_units": 4096, "learning_rate": 0.1}, {}) != small
    assert shape_key({"hidden_units": 256}, {"n_samples": 20000}) != \
        shape_key({"hidden_units": 256}, {"n_samples": 5000})
    # The same value as a model setting and as a data setting are not confused.
    assert shape_key({"n": 3}, {}) != shape_key({}, {"n": 3})
