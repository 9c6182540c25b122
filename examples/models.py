#!/usr/bin/env python3
"""Defines example models in PyTorch and saves them as TorchScript files for Tributary.

Tributary trains any module that torch.jit.script can compile (docs/models.md). Its
forward takes one batch x [N, *sample_shape] (float32, or int64 for integer data and
token ids). A classifier returns class scores (logits) [N, classes] and Tributary
applies the cross-entropy; any other model defines its own
`@torch.jit.export def loss(self, x, y) -> Tensor` returning unreduced losses ([N] or
[N, ...], e.g. one per token), and may define `metrics(self, x, y) -> Dict[str, Tensor]`
of scalars summed over the batch. Parameters are trained; buffers (BatchNorm running
statistics) follow rank 0, as DDP's broadcast_buffers=True does.

    /usr/bin/python3 examples/models.py --out /tmp/models          # every model
    /usr/bin/python3 examples/models.py --model cnn --out /tmp/models

Each model is written as <out>/<name>.pt. Run it with Debian's python3-torch
(/usr/bin/python3); the first python3 on PATH may lack it.
"""
import argparse
import os
from typing import Dict

import torch
from torch import nn


class Mlp(nn.Module):
    """784-256-128-10 with ReLU: the shape of Tributary's built-in mlp."""

    def __init__(self, inputs: int = 784, classes: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(inputs, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)  # [N, 1, 28, 28] (IDX, NPY images) or [N, 784] alike.
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class Cnn(nn.Module):
    """Two 3x3 conv blocks with BatchNorm and max-pooling, dropout before the head."""

    def __init__(self, channels: int = 1, classes: int = 10, width: int = 32,
                 dropout: float = 0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc1 = nn.Linear(2 * width * 7 * 7, 128)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # Flat features (CSV, NPY [N, 784]): back to images.
            x = x.view(x.size(0), 1, 28, 28)
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        x = self.drop(torch.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


class CharTransformer(nn.Module):
    """A byte-level causal Transformer language model (GPT-style, pre-norm).

    x: int64 [N, T] byte ids (TOKENS data, examples/text_to_tokens.py); y: the next
    byte of each position. loss(x, y) is the cross-entropy of every position, [N, T]:
    Tributary takes the mean over all N * T tokens of the global batch, as
    F.cross_entropy(logits.view(-1, V), y.view(-1)) would.
    """

    def __init__(self, vocab: int = 256, width: int = 64, heads: int = 4, layers: int = 2,
                 context: int = 64):
        super().__init__()
        self.vocab = vocab
        self.context = context
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.size(1)
        positions = torch.arange(t, device=x.device)
        h = self.embed(x) + self.position(positions)
        causal = torch.triu(torch.full((t, t), float("-inf"), device=x.device), diagonal=1)
        h = self.blocks(h, mask=causal)
        return self.head(self.norm(h))  # [N, T, vocab]

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.forward(x)
        losses = nn.functional.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1),
                                             reduction="none")
        return losses.view(y.shape)  # [N, T]: one loss per token

    @torch.jit.export
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        hits = (self.forward(x).argmax(-1) == y).float()
        # Summed over the batch's samples; Tributary divides by the test samples.
        return {"token_accuracy": hits.mean(1).sum()}


class Inpainter(nn.Module):
    """Regression: the bottom half of a Fashion-MNIST image (14 x 28 pixel values) from
    its top half (examples/fashion_halves.py). Squared error per pixel, [N, 392]."""

    def __init__(self, hidden: int = 256):
        super().__init__()
        self.fc1 = nn.Linear(392, hidden)
        self.fc2 = nn.Linear(hidden, 392)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.forward(x) - y.flatten(1)) ** 2

    @torch.jit.export
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        error = (self.forward(x) - y.flatten(1)).abs().mean(1)
        return {"mae": error.sum()}


MODELS = {
    "char_lm": lambda: CharTransformer(),
    "inpainter": lambda: Inpainter(),
    "mlp": lambda: Mlp(),
    "cnn": lambda: Cnn(),
    # The CNN at half width: a quarter of the compute, for quick runs and tests.
    "cnn_small": lambda: Cnn(width=16),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS) + ["all"], default="all",
                        help="which model to write (default: all)")
    parser.add_argument("--out", default=".", help="directory for <name>.pt (default: .)")
    parser.add_argument("--seed", type=int, default=1,
                        help="torch.manual_seed before building, so files are repeatable")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = sorted(MODELS) if args.model == "all" else [args.model]
    for name in names:
        torch.manual_seed(args.seed)
        module = torch.jit.script(MODELS[name]())
        path = os.path.join(args.out, name + ".pt")
        module.save(path)
        parameters = sum(p.numel() for p in module.parameters())
        buffers = sum(b.numel() for b in module.buffers())
        print(f"{path}: {parameters} parameters, {buffers} buffer elements")


if __name__ == "__main__":
    main()
