"""An ordinary PyTorch training script: an MLP on the digits images.

This is the plain version of ``digits_loop.py`` (the same loop adapted to the
portal's loop contract); ``docs/trainers.md`` shows the diff. It runs alone:
``python digits_plain.py`` (needs torch and scikit-learn).
"""

import io
import itertools
from types import SimpleNamespace

import torch
from pydantic import BaseModel
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Params(BaseModel):
    hidden: int = 64
    learning_rate: float = 1e-3
    batch_size: int = 64
    eval_every: int = 50


def save_checkpoint(model, opt, file):
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, file)
    return file


def load_checkpoint(model, opt, file):
    saved = torch.load(file, weights_only=True)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])


def tensors(table):
    return torch.tensor(table.X, dtype=torch.float32), torch.tensor(table.y).long()


def evaluate(model, table):
    X, y = tensors(table)
    with torch.no_grad():
        logits = model(X)
    accuracy = (logits.argmax(1) == y).float().mean()
    return nn.functional.cross_entropy(logits, y).item(), accuracy.item()


def train(params, data, seed=0, start=0, steps=2000, resume=None):
    torch.manual_seed(seed)
    X, y = tensors(data.train)
    model = nn.Sequential(nn.Linear(X.shape[1], params.hidden), nn.ReLU(),
                          nn.Linear(params.hidden, data.train.n_classes))
    opt = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
    if resume:
        load_checkpoint(model, opt, resume)
    shuffle = torch.Generator()
    loader = DataLoader(TensorDataset(X, y), batch_size=params.batch_size, shuffle=True,
                        generator=shuffle)
    step = start
    for epoch in itertools.count(step // len(loader)):
        shuffle.manual_seed(seed + epoch)  # each epoch's order from the seed: resumable
        for xb, yb in itertools.islice(loader, step % len(loader), None):
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            accuracy = (logits.argmax(1) == yb).float().mean().item()
            print(f"step {step}: loss {loss.item():.4f} accuracy {accuracy:.3f}")
            if step % params.eval_every == 0:
                val_loss, val_accuracy = evaluate(model, data.validation)
                print(f"step {step}: val_loss {val_loss:.4f} val_accuracy {val_accuracy:.3f}")
            if step == steps:
                return save_checkpoint(model, opt, io.BytesIO())


if __name__ == "__main__":
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X - X.mean(0)) / (X.std(0) + 1e-8)
    X_tr, X_val, y_tr, y_val = train_test_split(X, y, test_size=0.2, random_state=0)
    train(Params(), SimpleNamespace(train=SimpleNamespace(X=X_tr, y=y_tr, n_classes=10),
                                    validation=SimpleNamespace(X=X_val, y=y_val)))
