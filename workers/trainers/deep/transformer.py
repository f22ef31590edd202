"""``char_transformer``: a small character-level transformer language model.

Trains on ``data.text`` (an uploaded ``.txt`` or the built-in corpus), one
minibatch of random windows per iteration; the loss is the mean cross-entropy
per predicted character (nats), reported also as ``bits_per_char``.
Attention is written out (matmul, causal mask, softmax) rather than calling
fused attention kernels, whose CUDA backward passes are not deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn
from torch.nn import functional as F

from workers.trainers.contract import Metrics, TrainerParams, TrainingData
from workers.trainers.deep.base import TorchTrainer

EVAL_WINDOWS = 64
"""Most validation windows evaluate() scores, so evaluation cost stays bounded."""
SAMPLE_CHARS = 120
"""Characters text_sample() generates after its prompt."""
SAMPLE_PROMPT = 16
"""Most characters of the text's start that prompt the sample."""
SAMPLE_TEMPERATURE = 0.8
"""Below 1: likelier characters are favoured, so an early model's sample is
less noise than its raw distribution, a trained one's still varied."""
MIN_TEXT = 3
"""Fewest characters to train on: one window of two characters and its target."""


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


class CharTransformerParams(TrainerParams):
    context: int = Field(64, ge=2, le=256, description="Characters of context per prediction.")
    d_model: int = Field(64, ge=8, le=256, description="Width of the embeddings.")
    n_heads: int = Field(4, ge=1, le=8, description="Attention heads (must divide d_model).")
    n_layers: int = Field(2, ge=1, le=6, description="Transformer blocks.")
    learning_rate: float = Field(3e-3, ge=1e-5, le=0.1, description="Adam step size.",
                                 json_schema_extra={"log_scale": True})
    batch_size: int = Field(16, ge=1, le=256, description="Windows per minibatch.",
                            json_schema_extra={"log_scale": True})

    @model_validator(mode="after")
    def _heads_divide_width(self) -> CharTransformerParams:
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        return self


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention then a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(w, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, w // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(w // self.heads)
        scores = scores.masked_fill(mask[:t, :t], float("-inf"))
        attended = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, w)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


class CharModel(nn.Module):
    def __init__(self, vocab: int, context: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)
        # True above the diagonal: a position may not look at later characters.
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        mask: torch.Tensor = self.mask  # type: ignore[assignment]
        for block in self.blocks:
            x = block(x, mask)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


class CharTransformer(TorchTrainer):
    name = "char_transformer"
    title = "Character transformer LM (PyTorch)"
    description = ("Small GPT-style character language model on a text dataset; loss is "
                   "cross-entropy per character (also reported in bits per character).")
    tasks = ("text",)
    Params = CharTransformerParams

    def __init__(self, params: TrainerParams, data: TrainingData, seed: int) -> None:
        if not data.text or len(data.text) < MIN_TEXT:
            raise ValueError(f"{self.name} needs a text dataset of at least {MIN_TEXT} "
                             "characters")
        assert isinstance(params, CharTransformerParams)
        # Index 0 stands for any character the training text lacks (only the
        # validation text can have one); the vocabulary comes from the data,
        # so it is rebuilt identically on restore and needs no checkpointing.
        # Code points in numpy: every chunk rebuilds the trainer, and a
        # per-character Python loop over a 5 MB upload would cost seconds.
        self.vocabulary = np.unique(_code_points(data.text))
        # Short texts train on shorter windows rather than failing.
        self.context = min(params.context, len(data.text) - 1)
        super().__init__(params, data, seed)
        self.tokens = self.encode(data.text)
        self.validation = self.encode(data.validation_text) \
            if data.validation_text and len(data.validation_text) >= 2 else None

    def encode(self, text: str) -> torch.Tensor:
        """Token ids: 1 + the character's rank in the vocabulary, 0 if unknown."""
        codes = _code_points(text)
        rank = np.searchsorted(self.vocabulary, codes)
        known = self.vocabulary[np.minimum(rank, self.vocabulary.size - 1)] == codes
        ids = np.where(known, rank + 1, 0).astype(np.int64)
        return torch.from_numpy(ids).to(self.device)

    def build_model(self) -> nn.Module:
        p = self.params
        assert isinstance(p, CharTransformerParams)
        return CharModel(int(self.vocabulary.size) + 1, self.context, p.d_model, p.n_heads,
                         p.n_layers)

    def _windows(self, tokens: torch.Tensor, starts: torch.Tensor, length: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = torch.arange(length + 1, device=tokens.device)
        rows = tokens[starts.unsqueeze(1) + offsets]
        return rows[:, :-1], rows[:, 1:]

    def _loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.model(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def train_step(self) -> Metrics:
        p = self.params
        assert isinstance(p, CharTransformerParams)
        starts = self.sample(self.tokens.shape[0] - self.context, p.batch_size)
        inputs, targets = self._windows(self.tokens, starts, self.context)
        loss = self._loss(inputs, targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        value = float(loss.item())
        return {"loss": value, "bits_per_char": value / math.log(2)}

    def decode(self, ids: list[int]) -> str:
        """Text of token ids; the unknown-character id reads as U+FFFD."""
        return "".join(chr(int(self.vocabulary[i - 1])) if i > 0 else "\ufffd" for i in ids)

    def text_sample(self) -> str:
        """The start of the text (up to ``SAMPLE_PROMPT`` characters, cut at its
        first line break) continued by ``SAMPLE_CHARS`` sampled characters.
        Drawn with a generator of its own, seeded by the job's seed, so
        sampling never changes the training run and one model's sample is
        the same on every device it runs on."""
        text = self.data.text or ""
        prompt = text[:SAMPLE_PROMPT].split("\n")[0] or text[:1]
        ids = self.encode(prompt).tolist()
        generator = torch.Generator(device="cpu")
        generator.manual_seed(self.seed)
        self.model.eval()
        with torch.no_grad():
            for _ in range(SAMPLE_CHARS):
                window = torch.tensor([ids[-self.context:]], dtype=torch.long, device=self.device)
                logits = self.model(window)[0, -1].float().cpu() / SAMPLE_TEMPERATURE
                logits[0] = float("-inf")  # never the unknown-character id
                probs = torch.softmax(logits, dim=-1)
                ids.append(int(torch.multinomial(probs, 1, generator=generator).item()))
        self.model.train()
        return self.decode(ids)

    def evaluate(self) -> Metrics:
        """Loss on evenly spaced validation windows: the same windows every time
        and no draw from the training generator, so evaluating never changes
        the training run."""
        if self.validation is None:
            return {}
        length = min(self.context, int(self.validation.shape[0]) - 1)
        room = int(self.validation.shape[0]) - length
        count = min(EVAL_WINDOWS, room)
        starts = torch.linspace(0, room - 1, count, device=self.device).long()
        self.model.eval()
        with torch.no_grad():
            inputs, targets = self._windows(self.validation, starts, length)
            loss = float(self._loss(inputs, targets).item())
        self.model.train()
        return {"val_loss": loss, "val_bits_per_char": loss / math.log(2)}
