"""Three models written in PyTorch, trained by torch and by pyipu's PopART TrainingSession from
the same initial weights on the same data: an MLP, a small ResNet-style CNN with
BatchNormalization and a two-layer transformer encoder with an LM head.

Each model's forward takes the input and the labels and returns the mean cross-entropy, so the
loss is inside the exported graph (SoftmaxCrossEntropyLoss). The export is torch's TorchScript
exporter in training mode: BatchNormalization keeps its batch statistics
(`training_mode=1`), parameters keep their names, nothing is folded. No Dropout (p = 0): the
two engines' random streams differ.

Shared by tests/test_training_vs_torch.py and benchmarks/train_side_by_side.py; needs torch
(tests/training_sessions.py, the pyipu side, does not).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn
from torch.nn import functional as F
from training_sessions import ADAM_EPS, OPTIMIZERS, PyipuTrainer

OPSET = 17  # GELU exports as its Erf formula below opset 20
NOISE = 2.0  # the inputs: a class prototype plus this much unit noise


class MLP(nn.Module):
    def __init__(self, d_in: int = 64, hidden: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc2(F.relu(self.fc1(x))))
        return F.cross_entropy(self.head(h), y)


class Block(nn.Module):
    """conv-BN-ReLU-conv-BN plus the shortcut (a strided 1×1 conv-BN when the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.short = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + self.short(x))


class ResNet(nn.Module):
    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.block1 = Block(width, width, 1)
        self.block2 = Block(width, 2 * width, 2)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.block2(self.block1(F.relu(self.bn(self.stem(x)))))
        return F.cross_entropy(self.head(h.mean(dim=(2, 3))), y)


class Attention(nn.Module):
    """Multi-head self-attention. The key projection has no bias: softmax over the keys cancels
    it, so its gradient is rounding noise, which Adam would scale up to full-size steps."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        dh = d // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(b, s, self.heads, dh).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(dh), dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, s, d))


class EncoderLayer(nn.Module):
    """Pre-norm: x + attention(LN(x)), then x + MLP(LN(x)) with GELU."""

    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.att = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.att(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    """Token + learned position embeddings, two encoder layers, a final LayerNorm and an LM
    head predicting each position's label token."""

    def __init__(
        self, vocab: int = 64, seq: int = 16, d: int = 32, heads: int = 4, layers: int = 2
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, 2 * d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos
        for layer in self.layers:
            h = layer(h)
        logits = self.head(self.ln(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@dataclass
class Case:
    """A model, its batch and a data stream: `data(steps)` gives (inputs, labels) per step."""

    name: str
    make: Callable[[], nn.Module]
    batch: int
    x_shape: tuple[int, ...]  # one sample
    classes: int  # labels are in [0, classes)
    y_shape: tuple[int, ...] = ()  # one sample's labels
    tokens: bool = False  # integer inputs in [0, classes)

    def data(self, steps: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """A learnable stream, so the loss falls and the gradients stay informative for the
        whole run: a noisy copy of a fixed random prototype of the label's class, or (tokens)
        labels that are a fixed shift of each token."""
        rng = np.random.default_rng(seed)
        if self.tokens:
            x = rng.integers(0, self.classes, (steps, self.batch, *self.x_shape)).astype(np.int64)
            return x, (x + int(rng.integers(1, self.classes))) % self.classes
        prototypes = rng.standard_normal((self.classes, *self.x_shape))
        y = rng.integers(0, self.classes, (steps, self.batch))
        x = prototypes[y] + NOISE * rng.standard_normal((steps, self.batch, *self.x_shape))
        return x.astype(np.float32), y.astype(np.int64)


CASES = {
    "mlp": Case("mlp", MLP, 32, (64,), 10),
    "resnet": Case("resnet", ResNet, 8, (3, 16, 16), 10),
    "transformer": Case("transformer", Transformer, 8, (16,), 64, (16,), tokens=True),
}


def build(case: Case, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return case.make()


def export(case: Case, model: nn.Module, **kw: Any) -> onnx.ModelProto:
    """The ONNX training graph: inputs `x`, `y`, output `loss`, initializers named as the
    parameters and buffers."""
    x, y = case.data(1)
    args = (torch.from_numpy(x[0]), torch.from_numpy(y[0]))
    f = io.BytesIO()
    options: dict[str, Any] = {
        "input_names": ["x", "y"],
        "output_names": ["loss"],
        "opset_version": OPSET,
        "training": torch.onnx.TrainingMode.TRAINING,
        "do_constant_folding": False,
        "dynamo": False,
    }
    options.update(kw)
    torch.onnx.export(model, args, f, **options)
    return onnx.load_from_string(f.getvalue())


def torch_optimizer(model: nn.Module, kind: str) -> torch.optim.Optimizer:
    cfg = OPTIMIZERS[kind]
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), **cfg)
    return torch.optim.Adam(model.parameters(), eps=ADAM_EPS, **cfg)


class TorchTrainer:
    """torch eager: one optimizer step per call of `step(x, y)`; returns the loss."""

    def __init__(self, case: Case, kind: str, seed: int = 0) -> None:
        self.model = build(case, seed)
        self.model.train()
        self.opt = torch_optimizer(self.model, kind)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = self.model(torch.from_numpy(x), torch.from_numpy(y))
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def parameters(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.model.named_parameters()}


def pyipu_trainer(case: Case, kind: str, batches_per_step: int = 1, seed: int = 0) -> PyipuTrainer:
    """The exported model of the same seed's torch parameters in a TrainingSession."""
    return PyipuTrainer(export(case, build(case, seed)), kind, batches_per_step)
