#!/usr/bin/env python3
"""Writes the small TorchScript models the engine's tests load, so tests need no Python.

    /usr/bin/python3 worker/engine/testdata/make_torchscript_models.py worker/engine/testdata

Each file is a torch.jit.script module saved by Debian's python3-torch 1.13. Inputs
are [N, 8] (8 features, 3 classes) unless said otherwise; every model is built after
torch.manual_seed(7), so the files are the same on every run of the same torch.
"""
import os
import sys
from typing import Dict

import torch
from torch import nn


class TinyMlp(nn.Module):
    """Linear-tanh-Linear: no buffers, no dropout (for exactness tests)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class NativeMlp(nn.Module):
    """The native engine's mlp [8, 16, 3]: fc1, ReLU, fc2 (same names and layout)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class TinyBn(nn.Module):
    """BatchNorm (buffers), dropout and a frozen parameter."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(16, 3)
        self.scale = nn.Parameter(torch.full([3], 2.0), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop(torch.relu(self.bn(self.fc1(x))))
        return self.fc2(x) * self.scale


class TinyCnn(nn.Module):
    """Images [N, 1, 6, 6]: conv + BatchNorm2d + pool, for NPY image data."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 3 * 3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


class NoParameters(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :3] * 2.0


class WrongShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).unsqueeze(2)  # [N, 3, 1]


class TwoClasses(nn.Module):
    """Too few classes for 3-class data."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class ReturnsNan(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * float("nan")


class Float64(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.double())


class TokenLm(nn.Module):
    """A next-token model over int64 windows [N, T] of ids < 64 (the npy testdata's
    tokens_u2.npy holds ids < 61): its own per-token loss [N, T] and metrics."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 8)
        self.out = nn.Linear(8, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.embed(x)))  # [N, T, 64]

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.forward(x)
        losses = nn.functional.cross_entropy(
            logits.reshape(-1, 64), y.reshape(-1), reduction="none")
        return losses.view(y.shape)

    @torch.jit.export
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        hits = (self.forward(x).argmax(-1) == y).float()
        return {"token_accuracy": hits.mean(1).sum()}


class Regressor(nn.Module):
    """[N, 8] -> [N, 2] values, squared error per value; mean absolute error per sample."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.fc(x) - y) ** 2

    @torch.jit.export
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"mae": (self.fc(x) - y).abs().mean(1).sum()}


class SoftmaxHead(nn.Module):
    """A classifier ending in softmax: trains worse under the cross-entropy (a warning)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc(x), 1)


class ReducedLoss(nn.Module):
    """A loss already averaged to a scalar: refused (Tributary sums and divides itself)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    @torch.jit.export
    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.fc(x), y)


class VectorMetrics(nn.Module):
    """A classifier whose metrics are not scalars: refused."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    @torch.jit.export
    def metrics(self, x: torch.Tensor, y: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"per_class": self.fc(x).sum(0)}


MODELS = {
    "token_lm": TokenLm,
    "regressor": Regressor,
    "softmax_head": SoftmaxHead,
    "reduced_loss": ReducedLoss,
    "vector_metrics": VectorMetrics,
    "tiny_mlp": TinyMlp,
    "native_mlp": NativeMlp,
    "tiny_bn": TinyBn,
    "tiny_cnn": TinyCnn,
    "no_parameters": NoParameters,
    "wrong_shape": WrongShape,
    "two_classes": TwoClasses,
    "returns_nan": ReturnsNan,
    "float64": Float64,
}


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, cls in MODELS.items():
        torch.manual_seed(7)
        path = os.path.join(out, name + ".pt")
        torch.jit.script(cls()).save(path)
        print(path)


if __name__ == "__main__":
    main()
