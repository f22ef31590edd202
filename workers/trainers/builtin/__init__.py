"""The built-in numpy trainers: five classic algorithms on tabular data.

Each is a :class:`workers.trainers.contract.Trainer`; the registry in
``workers.trainers.registry`` lists them next to the PyTorch trainers and
operators' plugins.
"""

from __future__ import annotations

from workers.trainers.builtin.kmeans import MiniBatchKMeansTrainer
from workers.trainers.builtin.linear_regression import LinearRegressionTrainer
from workers.trainers.builtin.logistic import LogisticRegressionTrainer
from workers.trainers.builtin.mlp import MLPTrainer
from workers.trainers.builtin.svm import LinearSVMTrainer
from workers.trainers.contract import Trainer

NUMPY_TRAINERS: tuple[type[Trainer], ...] = (
    LogisticRegressionTrainer,
    LinearSVMTrainer,
    MLPTrainer,
    MiniBatchKMeansTrainer,
    LinearRegressionTrainer,
)
