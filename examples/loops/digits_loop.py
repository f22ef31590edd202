"""An ordinary PyTorch training script: an MLP on the digits images.

``digits_plain.py`` adapted to the portal's loop contract: upload it as trainer
code and run it on ``digits``; ``docs/trainers.md`` shows the diff.
"""

import io
import itertools

import torch
from slaq_trainer import TrainerParams
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Params(TrainerParams):
    hidden: int = 64
    learning_rate: float = 1e-3
    batch_size: int = 64


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


def train(params, data, ctx):
    seed, start = ctx.seed, ctx.iteration
    torch.manual_seed(seed)
    X, y = tensors(data.train)
    model = nn.Sequential(nn.Linear(X.shape[1], params.hidden), nn.ReLU(),
                          nn.Linear(params.hidden, data.train.n_classes))
    opt = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
    ctx.restore(lambda blob: load_checkpoint(model, opt, io.BytesIO(blob)))
    ctx.checkpoint(lambda: save_checkpoint(model, opt, io.BytesIO()).getvalue())
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
            ctx.report(loss=loss.item(), accuracy=accuracy)
            if ctx.evaluate_now:
                val_loss, val_accuracy = evaluate(model, data.validation)
                ctx.report_eval(val_loss=val_loss, val_accuracy=val_accuracy)

