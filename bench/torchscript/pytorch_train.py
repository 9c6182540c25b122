#!/usr/bin/env python3
"""PyTorch's own single-process training of a TorchScript file: the reference that
bench/torchscript compares Tributary's TorchScript replica with.

Loads the file with torch.jit.load, trains it on NPY files with Tributary's contract
(summed cross-entropy over the batch, gradient divided by the batch size, Adam or SGD
applied to the parameters), and prints one JSON line:
  {"samples_per_second": ..., "steps": ..., "seconds": ..., "test_accuracy": ...}

    /usr/bin/python3 bench/torchscript/pytorch_train.py --model cnn.pt \
        --train_x train_x.npy --train_y train_y.npy --steps 200 --threads 1

With --tokens (a 1-D token NPY) and --seq_len T it trains a language model with its own
loss(x, y) on windows [i*T, i*T + T + 1) (x the first T ids, y the last T), the
gradient of the mean over every token, and with --test_tokens reports the mean test
loss per token over the first --eval_windows windows ("test_loss").
"""
import argparse
import json
import os
import sys
import time


def _threads_from_argv():
    for i, arg in enumerate(sys.argv):
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return "1"


# OpenBLAS (LibTorch's matrix products) and OpenMP read these when torch is imported.
os.environ["OPENBLAS_NUM_THREADS"] = _threads_from_argv()
os.environ["OMP_NUM_THREADS"] = _threads_from_argv()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="TorchScript file")
    p.add_argument("--train_x", default="")
    p.add_argument("--train_y", default="")
    p.add_argument("--tokens", default="", help="1-D token ids (.npy): a language model")
    p.add_argument("--test_tokens", default="")
    p.add_argument("--seq_len", type=int, default=64)
    p.add_argument("--eval_windows", type=int, default=512)
    p.add_argument("--test_x", default="")
    p.add_argument("--test_y", default="")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200, help="timed steps (0 = --epochs)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.tokens:
        x, y = windows(args.tokens, args.seq_len)
    elif args.train_x and args.train_y:
        x = torch.from_numpy(np.load(args.train_x).astype(np.float32, copy=False))
        y = torch.from_numpy(np.load(args.train_y).astype(np.int64, copy=False))
    else:
        p.error("--train_x and --train_y (or --tokens)")
    model = torch.jit.load(args.model)

    def losses(bx, by):
        """The batch's unreduced losses: the model's own (a language model) or
        Tributary's cross-entropy over its logits."""
        if args.tokens:
            return model.loss(bx, by)  # [N, T]
        return F.cross_entropy(model(bx), by, reduction="none")  # [N]

    result = train(args, model, x, y, losses)
    if args.test_tokens:
        tx, ty = windows(args.test_tokens, args.seq_len, args.eval_windows)
        result["test_loss"] = test_loss(model, tx, ty, losses)
    if args.test_x:
        tx = torch.from_numpy(np.load(args.test_x).astype(np.float32, copy=False))
        ty = torch.from_numpy(np.load(args.test_y).astype(np.int64, copy=False))
        result["test_accuracy"] = test_accuracy(model, tx, ty)
    print(json.dumps(result))


def train(args, model, x, y, losses) -> dict:
    """--warmup untimed steps, then the timed ones; each step takes the gradient of the
    summed losses divided by their count (the mean over the batch's samples, or over
    every token), as Tributary's PS divides the summed gradient by the reported count."""
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    opt = (torch.optim.Adam(params, lr=args.lr) if args.optimizer == "adam"
           else torch.optim.SGD(params, lr=args.lr))
    n = x.shape[0]
    steps_per_epoch = (n + args.batch - 1) // args.batch
    total = args.steps if args.steps > 0 else args.epochs * steps_per_epoch
    order = torch.randperm(n)

    def step(i: int) -> int:
        j = i % steps_per_epoch
        ids = order[j * args.batch:(j + 1) * args.batch]
        opt.zero_grad(set_to_none=False)
        batch_losses = losses(x[ids], y[ids])
        batch_losses.sum().backward()
        for q in params:
            q.grad.div_(batch_losses.numel())
        opt.step()
        return len(ids)

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    samples = sum(step(args.warmup + i) for i in range(total))
    seconds = time.perf_counter() - start
    return {"samples_per_second": samples / seconds, "steps": total, "seconds": seconds,
            "threads": args.threads, "test_accuracy": -1.0}


def test_loss(model, tx, ty, losses) -> float:
    """The mean loss per element over the test windows."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(0, tx.shape[0], 256):
            batch_losses = losses(tx[k:k + 256], ty[k:k + 256])
            total += float(batch_losses.double().sum())
            count += batch_losses.numel()
    return total / count


def test_accuracy(model, tx, ty) -> float:
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(tx[k:k + 1000]).argmax(1) == ty[k:k + 1000]).sum())
                      for k in range(0, tx.shape[0], 1000))
    return correct / tx.shape[0]


def windows(path: str, seq_len: int, limit: int = 0):
    """x, y of every window of a token file (the first `limit` when > 0)."""
    ids = torch.from_numpy(np.load(path).astype(np.int64))
    count = (ids.numel() - 1) // seq_len
    if limit > 0:
        count = min(count, limit)
    starts = torch.arange(count) * seq_len
    span = starts[:, None] + torch.arange(seq_len + 1)[None, :]
    w = ids[span]
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


if __name__ == "__main__":
    main()
