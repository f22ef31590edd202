"""What can be trained: algorithms and datasets with their parameter schemas."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from backend.scheduling.registry import live_policy_names
from workers.datasets import DATASETS
from workers.trainers.registry import catalog

router = APIRouter(prefix="/api/v1/catalog", tags=["catalog"])


@router.get("/algorithms")
def list_algorithms() -> list[dict[str, Any]]:
    """Trainers (built-in, PyTorch, plugins) with each hyper-parameter's type,
    range, default and help, and where the trainer comes from."""
    return catalog()


@router.get("/datasets")
def list_datasets() -> list[dict[str, Any]]:
    """Built-in and synthetic datasets with their generator parameters."""
    return [info.to_json() for info in DATASETS.values()]


@router.get("/policies")
def list_policies() -> list[str]:
    """Scheduling policies the live scheduler can run."""
    return live_policy_names()
