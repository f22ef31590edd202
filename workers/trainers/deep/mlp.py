"""``torch_mlp``: a fully connected ReLU network for tabular classification."""

from __future__ import annotations

from pydantic import Field
from torch import nn

from workers.trainers.contract import TrainerParams
from workers.trainers.deep.tabular import TabularClassifier, hidden_stack


class MlpParams(TrainerParams):
    hidden_units: int = Field(128, ge=4, le=4096, description="Width of each hidden layer.")
    hidden_layers: int = Field(2, ge=1, le=4, description="Number of hidden layers.")
    learning_rate: float = Field(1e-3, ge=1e-5, le=1.0, description="Adam step size.",
                                 json_schema_extra={"log_scale": True})
    batch_size: int = Field(128, ge=1, le=4096, description="Rows per minibatch.",
                            json_schema_extra={"log_scale": True})
    weight_decay: float = Field(0.0, ge=0.0, le=0.1, description="L2 penalty (Adam).")


class TorchMlp(TabularClassifier):
    name = "torch_mlp"
    title = "MLP (PyTorch)"
    description = ("Fully connected ReLU network trained with Adam on minibatches; "
                   "runs on a GPU when the worker has one.")
    Params = MlpParams

    def build_model(self) -> nn.Module:
        p = self.params
        assert isinstance(p, MlpParams)
        return nn.Sequential(*hidden_stack(self.n_features, p.hidden_units, p.hidden_layers),
                             nn.Linear(p.hidden_units, self.n_classes))
