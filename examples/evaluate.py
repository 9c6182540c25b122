#!/usr/bin/env python3
"""Evaluates a TorchScript model (for example one `tributary export` wrote) on a test
split, as anyone would use the trained file: torch.jit.load, eval mode, argmax.

    /usr/bin/python3 examples/evaluate.py trained.pt                     # Fashion-MNIST IDX
    /usr/bin/python3 examples/evaluate.py trained.pt --x test_x.npy --y test_y.npy

Prints one JSON line: {"accuracy": ..., "loss": ..., "samples": ...}; the loss is
the mean cross-entropy, as Tributary reports it.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_to_npy import DEFAULT_DIR, find, read_idx  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="TorchScript file")
    parser.add_argument("--x", default="", help="test features .npy (default: IDX test split)")
    parser.add_argument("--y", default="", help="test labels .npy")
    parser.add_argument("--idx_dir", default=DEFAULT_DIR, help="IDX directory without --x")
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    if args.x:
        x = np.load(args.x)
        y = np.load(args.y)
        x = x.astype(np.float32) / 255 if x.dtype == np.uint8 else x.astype(np.float32)
    else:
        images = read_idx(find(args.idx_dir, "t10k-images-idx3-ubyte"))
        y = read_idx(find(args.idx_dir, "t10k-labels-idx1-ubyte"))
        x = images.reshape(images.shape[0], 1, *images.shape[1:]).astype(np.float32) / 255
    model = torch.jit.load(args.model)
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for k in range(0, x.shape[0], args.batch):
            xb = torch.from_numpy(x[k:k + args.batch])
            yb = torch.from_numpy(y[k:k + args.batch].astype(np.int64))
            logits = model(xb)
            loss += float(F.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(1) == yb).sum())
    n = x.shape[0]
    print(json.dumps({"accuracy": correct / n, "loss": loss / n, "samples": n}))


if __name__ == "__main__":
    main()
