#!/usr/bin/env python3
"""Defines example models in PyTorch and saves them as TorchScript files for Tributary.

Tributary trains any module that torch.jit.script can compile, whose forward takes one
float32 batch [N, *sample_shape] and returns class scores (logits) [N, classes]. The
loss is the summed cross-entropy of those logits, computed by Tributary. Parameters are
trained; buffers (BatchNorm running statistics) follow rank 0, as DDP's
broadcast_buffers=True does.

    /usr/bin/python3 examples/models.py --out /tmp/models          # every model
    /usr/bin/python3 examples/models.py --model cnn --out /tmp/models

Each model is written as <out>/<name>.pt. Run it with Debian's python3-torch
(/usr/bin/python3); the first python3 on PATH may lack it.
"""
import argparse
import os

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


MODELS = {
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
