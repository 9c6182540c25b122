"""PyTorch's forward+backward of engine_bench's models, for its side-by-side ratio.

The same layer sizes (logreg 784-10, MLP 784-256-128-10, CNN conv3x3(32)-pool-conv3x3(64)-
pool-128-10), mean softmax cross-entropy, float32 with TF32 off. Each call takes the batch
from host memory and reads the loss back, as Tributary's replicas do. Best of 5 windows,
after 10 warm-up calls. Prints `torch_engine <model> <batch> <samples/s>` per case and a
`torch_engine version <version> <device>` line first. Exit code 3: no usable torch.
"""
import argparse
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda. Default: cpu.")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (device cpu only). Default: 1.")
    parser.add_argument("--min_seconds", type=float, default=1.0,
                        help="Seconds per measurement (5 windows). Default: 1.0.")
    args = parser.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError as e:
        print(f"torch_engine: cannot import torch: {e}", file=sys.stderr)
        return 3
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_engine: torch has no CUDA device here", file=sys.stderr)
        return 3
    if args.device == "cpu":  # On a GPU PyTorch keeps its own CPU threads, as in real use.
        torch.set_num_threads(max(1, args.threads))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch_engine version {torch.__version__} {args.device}", flush=True)

    def model(name):
        if name == "logreg":
            return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
        if name == "mlp":
            return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                                 nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                             nn.Linear(128, 10))

    loss_fn = nn.CrossEntropyLoss()
    for name in ["logreg", "mlp", "cnn"]:
        net = model(name).to(args.device)
        for batch in [64, 256]:
            x = torch.rand(batch, 1, 28, 28)
            y = torch.randint(0, 10, (batch,))

            def step():
                net.zero_grad(set_to_none=False)
                loss = loss_fn(net(x.to(args.device)), y.to(args.device))
                loss.backward()
                return loss.item()

            for _ in range(10):
                step()
            best = float("inf")
            for _ in range(5):
                calls, start = 0, time.perf_counter()
                while True:
                    step()
                    calls += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= args.min_seconds / 5:
                        break
                best = min(best, elapsed / calls)
            print(f"torch_engine {name} {batch} {batch / best:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
