"""``slaq_trainer/__init__.py`` inside the sandbox: the trainer contract and
the loop contract under the names tenant code imports (``from slaq_trainer
import Trainer, TrainerParams``; ``slaq_trainer.loop``). Not imported by the
portal itself: ``workers/sandbox/runner.py`` mounts it with
``workers/trainers/contract.py`` and ``loop.py`` beside it."""

from slaq_trainer import loop
from slaq_trainer.contract import (
    METRIC_NAME_MAX,
    Metrics,
    NoParams,
    Task,
    Trainer,
    TrainerParams,
    TrainingData,
    clean_metrics,
)
from slaq_trainer.loop import LoopContext, LoopTrainer, loop_trainer

__all__ = ["METRIC_NAME_MAX", "LoopContext", "LoopTrainer", "Metrics", "NoParams", "Task",
           "Trainer", "TrainerParams", "TrainingData", "clean_metrics", "loop", "loop_trainer"]
