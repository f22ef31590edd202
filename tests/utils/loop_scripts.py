"""Loading a loop script (``train(params, data, ctx)``) in the test process,
as the sandbox does: ``slaq_trainer`` is the contract package there, so it is
put in ``sys.modules`` here under the same name (tests and benchmarks only)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from workers.trainers import contract, loop
from workers.trainers.loop import LoopTrainer, loop_trainer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "loops"


def _contract_package() -> types.ModuleType:
    package = types.ModuleType("slaq_trainer")
    for name in ("Metrics", "NoParams", "Trainer", "TrainerParams", "TrainingData",
                 "clean_metrics"):
        setattr(package, name, getattr(contract, name))
    package.loop = loop  # type: ignore[attr-defined]
    package.LoopTrainer = LoopTrainer  # type: ignore[attr-defined]
    package.loop_trainer = loop_trainer  # type: ignore[attr-defined]
    return package


def load_loop_script(path: Path, name: str = "loop") -> type[LoopTrainer]:
    """The loop trainer class for the script at ``path``."""
    sys.modules.setdefault("slaq_trainer", _contract_package())
    spec = importlib.util.spec_from_file_location(f"loop_script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return loop_trainer(module.train, name=name, params=module.Params)
