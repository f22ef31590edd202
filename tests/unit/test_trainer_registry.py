"""The one lookup by name: what a job's ``algorithm`` resolves to."""

from __future__ import annotations

import pytest

from workers.trainers.builtin import NUMPY_TRAINERS
from workers.trainers.registry import (
    Registered,
    TenantCode,
    UnknownTrainer,
    catalog,
    resolve,
    sources,
    trainer_class,
)


def test_a_builtin_resolves_to_its_class() -> None:
    source = resolve("logistic_regression")
    assert isinstance(source, Registered)
    assert source.cls is trainer_class("logistic_regression")
    assert source.origin == "built-in"
    assert sources()["logistic_regression"] == source


def test_tenant_code_is_named_not_loaded() -> None:
    assert resolve("code:42") == TenantCode("code:42", 42)
    assert resolve("code:nope") == TenantCode("code:nope", None)
    with pytest.raises(UnknownTrainer):
        trainer_class("code:42")


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError) as caught:
        resolve("xgboost")
    assert isinstance(caught.value, UnknownTrainer)
    assert caught.value.known == sorted(sources())
    assert "unknown algorithm 'xgboost'" in str(caught.value)


def test_the_catalogue_lists_every_registered_trainer_with_its_origin() -> None:
    entries = {entry["name"]: entry for entry in catalog()}
    assert set(entries) == set(sources())
    for cls in NUMPY_TRAINERS:
        assert entries[cls.name]["source"] == "built-in"
