"""Which contract an uploaded source follows, read without running it."""

from __future__ import annotations

import pytest

from backend.services.code_uploads import contract_of
from tests.utils.loop_scripts import EXAMPLES


@pytest.mark.parametrize(("source", "expected"), [
    ("from slaq_trainer import Trainer\nclass T(Trainer):\n    pass\n", "trainer"),
    ("import slaq_trainer\nclass T(slaq_trainer.Trainer):\n    pass\n", "trainer"),
    ("def train(params, data, ctx):\n    pass\n", "loop"),
    # A Trainer subclass wins, as in the sandbox.
    ("class T(Trainer):\n    pass\ndef train(params, data, ctx):\n    pass\n", "trainer"),
    ("def fit(params, data, ctx):\n    pass\n", "unknown"),
    ("def train(:\n", "unknown"),
    ("\udcff = 1", "unknown"),
])
def test_the_contract_is_read_from_the_source(source: str, expected: str) -> None:
    assert contract_of(source.encode("utf-8", "surrogateescape")) == expected


@pytest.mark.parametrize("script", ["digits_loop.py", "python_docs_loop.py"])
def test_the_examples_are_loops(script: str) -> None:
    assert contract_of((EXAMPLES / script).read_bytes()) == "loop"
