"""An ordinary PyTorch training script: a character-level GRU language model.

This is the plain version of ``python_docs_loop.py`` (the same loop adapted to
the portal's loop contract); ``docs/trainers.md`` shows the diff. It runs
alone on any UTF-8 text: ``python python_docs_plain.py corpus.txt``.
"""

import io
import itertools
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from pydantic import BaseModel
from torch import nn
from torch.utils.data import DataLoader


class Params(BaseModel):
    context: int = 32
    hidden: int = 64
    learning_rate: float = 3e-3
    batch_size: int = 32
    eval_every: int = 100


class CharGRU(nn.Module):
    def __init__(self, vocabulary, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocabulary)

    def forward(self, ids):
        out, _ = self.gru(self.embed(ids))
        return self.head(out)


def save_checkpoint(model, opt, file):
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, file)
    return file


def load_checkpoint(model, opt, file):
    saved = torch.load(file, weights_only=True)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])


def windows(text, vocabulary, context, stride=1):
    """Every ``context + 1`` characters from ``stride`` to ``stride`` (unknown ones as 0)."""
    ids = torch.tensor([vocabulary.get(c, 0) for c in text])
    return ids.unfold(0, context + 1, stride)


def cross_entropy(model, batch):
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       batch[:, 1:].reshape(-1))


def evaluate(model, held):
    with torch.no_grad():
        return cross_entropy(model, held).item()


def train(params, data, seed=0, start=0, steps=5000, resume=None):
    torch.manual_seed(seed)
    vocabulary = {c: i + 1 for i, c in enumerate(sorted(set(data.text)))}
    held = windows(data.validation_text, vocabulary, params.context, params.context)[:256]
    model = CharGRU(len(vocabulary) + 1, params.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
    if resume:
        load_checkpoint(model, opt, resume)
    shuffle = torch.Generator()
    loader = DataLoader(windows(data.text, vocabulary, params.context),
                        batch_size=params.batch_size, shuffle=True, generator=shuffle)
    step = start
    for epoch in itertools.count(step // len(loader)):
        shuffle.manual_seed(seed + epoch)  # each epoch's order from the seed: resumable
        for batch in itertools.islice(loader, step % len(loader), None):
            loss = cross_entropy(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            bits = loss.item() / 0.6931471805599453
            print(f"step {step}: loss {loss.item():.4f} ({bits:.3f} bits/char)")
            if step % params.eval_every == 0:
                val_loss = evaluate(model, held)
                print(f"step {step}: val_loss {val_loss:.4f}")
            if step == steps:
                return save_checkpoint(model, opt, io.BytesIO())


if __name__ == "__main__":
    text = Path(sys.argv[1]).read_text(encoding="utf-8")
    cut = int(len(text) * 0.9)
    train(Params(), SimpleNamespace(text=text[:cut], validation_text=text[cut:]))
