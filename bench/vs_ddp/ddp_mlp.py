"""ddp_mlp: the PyTorch side of the vs_ddp benchmark.

Trains the MLP of a Tributary job spec (the JSON that `tributary local --job_json` reads,
with the .proto field names) with torch.nn.parallel.DistributedDataParallel over the
gloo backend: one process per replica on this machine, rendezvous through a file. It
mirrors what Tributary does with the same spec: the Fashion-MNIST IDX files read with
gzip + struct, pixels / 255 (and the training set's per-feature standardisation when
dataset.normalize is set), Linear -> ReLU (-> Dropout) layers, softmax cross-entropy,
the same optimizer, learning rate, schedule and weight decay, a global batch split over
the processes (the first ones take the remainder), an epoch's short last batch kept, the
gradient of the global batch mean (each process scales its loss sum by
world_size / global_batch), evaluation by rank 0 every eval_interval_steps (0: about
ten times a run, every ceil(steps / 10)) on the test set's first eval_samples (0: 1000)
and after the last step on all of it. Initial values come from torch's default init
seeded with the job's seed, not from Tributary's.

Prints evaluations as they come and, last, one JSON line (rank 0):
  processes, threads, steps, batch, samples, test_accuracy, test_loss, final_loss,
  reported_samples_per_second (samples over rank 0's step time, evaluations excluded),
  training_seconds (first step to the end, evaluations included), setup_seconds (script
  start to the first step: imports, data, process start, rendezvous), evaluations
  [{step, accuracy, seconds since the first step}], torch_version, blas (the BLAS library
  loaded), sgemm_gflops_per_process (a 1024^3 float32 product timed by rank 0 before
  training, on its --threads).

With a torchscript job (`--model_file=net.pt`, the file the job names), the model is
that file, loaded with torch.jit.load in every process (DDP broadcasts rank 0's
parameters and, with broadcast_buffers=True, its buffers: Tributary's policy), and the
samples keep their image shape [N, 1, 28, 28] as Tributary hands them to the module.

Usage: /usr/bin/python3 ddp_mlp.py --job_json=FILE --processes=2 --threads=1 --work_dir=DIR
       [--model_file=net.pt] [--check_only]
"""

import time

SCRIPT_START = time.time()  # Before importing torch: its import is part of the set-up.

import argparse
import ctypes
import gzip
import json
import math
import os
import signal
import struct
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")


class SpecError(Exception):
    """The job spec asks for something this script does not mirror."""


def read_idx(path):
    """An IDX file (plain or gzip) as a numpy array of its declared shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise SpecError(f"{path}: {len(data)} bytes, too short for an IDX header")
    zero, dtype_code, dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise SpecError(f"{path}: magic {data[:4].hex()}, expected unsigned-byte IDX (0x0008)")
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise SpecError(f"{path}: header says {shape} ({int(np.prod(shape))} bytes), "
                        f"body has {body.size}")
    return body.reshape(shape)


def find_idx(directory, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            return path
    raise SpecError(f"dataset: neither {name} nor {name}.gz in {directory}")


def load_data(spec, images=False):
    dataset = spec.get("dataset", {})
    if dataset.get("format", "IDX") != "IDX":
        raise SpecError(f"dataset.format {dataset.get('format')}: only IDX is mirrored")
    directory = dataset.get("directory", "/usr/share/datasets/fashion-mnist")
    arrays = [read_idx(find_idx(directory, name)) for name in IDX_NAMES]
    train_x, train_y, test_x, test_y = arrays
    train_limit = int(dataset.get("train_limit", 0))
    test_limit = int(dataset.get("test_limit", 0))
    if train_limit > 0:
        train_x, train_y = train_x[:train_limit], train_y[:train_limit]
    if test_limit > 0:
        test_x, test_y = test_x[:test_limit], test_y[:test_limit]
    train_x = train_x.reshape(len(train_x), -1).astype(np.float32) / 255.0
    test_x = test_x.reshape(len(test_x), -1).astype(np.float32) / 255.0
    image_shape = arrays[0].shape[1:]
    if dataset.get("normalize", False):
        mean = train_x.astype(np.float64).mean(axis=0)
        std = train_x.astype(np.float64).std(axis=0)
        scale = np.where(std > 1e-6, 1.0 / np.maximum(std, 1e-6), 1.0)
        train_x = ((train_x - mean.astype(np.float32)) * scale.astype(np.float32))
        test_x = ((test_x - mean.astype(np.float32)) * scale.astype(np.float32))
    if images:  # Tributary gives a TorchScript module [N, 1, rows, cols].
        train_x = train_x.reshape(len(train_x), 1, *image_shape)
        test_x = test_x.reshape(len(test_x), 1, *image_shape)
    tensors = [torch.from_numpy(np.ascontiguousarray(train_x, dtype=np.float32)),
               torch.from_numpy(train_y.astype(np.int64)),
               torch.from_numpy(np.ascontiguousarray(test_x, dtype=np.float32)),
               torch.from_numpy(test_y.astype(np.int64))]
    for tensor in tensors:
        tensor.share_memory_()
    return tensors


def build_model(spec, inputs, model_file=""):
    model = spec.get("model", {})
    if model.get("name", "mlp") == "torchscript":
        if not model_file:
            raise SpecError("model torchscript: pass the file with --model_file")
        return torch.jit.load(model_file)
    if model.get("name", "mlp") != "mlp":
        raise SpecError(f"model.name {model.get('name')}: only mlp is mirrored")
    sizes = [int(s) for s in model.get("layer_sizes", [784, 256, 128, 10])]
    if sizes[0] != inputs:
        raise SpecError(f"model.layer_sizes starts with {sizes[0]} inputs, the data has {inputs}")
    dropout = float(model.get("dropout", 0.0))
    layers = []
    for i in range(1, len(sizes)):
        layers.append(nn.Linear(sizes[i - 1], sizes[i]))
        if i + 1 < len(sizes):
            layers.append(nn.ReLU())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


def build_optimizer(spec, parameters):
    opt = spec.get("optimizer", {})
    kind = opt.get("type", "SGD")
    lr = float(opt.get("learning_rate", 0.1))
    decay = float(opt.get("weight_decay", 0.0))
    if kind == "SGD":
        return torch.optim.SGD(parameters, lr=lr, weight_decay=decay)
    if kind == "MOMENTUM":
        return torch.optim.SGD(parameters, lr=lr, momentum=float(opt.get("momentum", 0.9)),
                               nesterov=bool(opt.get("nesterov", False)), weight_decay=decay)
    betas = (float(opt.get("beta1", 0.9)), float(opt.get("beta2", 0.999)))
    eps = float(opt.get("epsilon", 1e-8))
    if kind == "ADAM":
        return torch.optim.Adam(parameters, lr=lr, betas=betas, eps=eps, weight_decay=decay)
    if kind == "ADAMW":
        return torch.optim.AdamW(parameters, lr=lr, betas=betas, eps=eps, weight_decay=decay)
    raise SpecError(f"optimizer.type {kind}: not mirrored")


def learning_rate(spec, step, total_steps):
    """common/optimizer.cc's Optimizer::LearningRate."""
    opt = spec.get("optimizer", {})
    base = float(opt.get("learning_rate", 0.1))
    schedule = opt.get("schedule", {})
    kind = schedule.get("kind", "CONSTANT")
    rate = base
    if kind == "STEP":
        rate = base * float(schedule.get("gamma", 0.1)) ** (step // int(schedule["step_size"]))
    elif kind == "COSINE":
        progress = 1.0 if total_steps == 0 else min(1.0, step / total_steps)
        low = float(schedule.get("min_lr", 0.0))
        rate = low + (base - low) * (1 + math.cos(math.pi * progress)) / 2
    warmup = int(schedule.get("warmup_steps", 0))
    if step < warmup:
        rate *= (step + 1) / warmup
    return rate


def split(batch, world, rank):
    """[begin, end) of rank's share of a batch: the first batch % world ranks take one more."""
    base, extra = divmod(batch, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def evaluate(module, test_x, test_y):
    module.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for begin in range(0, len(test_x), 1000):
            logits = module(test_x[begin:begin + 1000])
            labels = test_y[begin:begin + 1000]
            loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(dim=1) == labels).sum().item()
    module.train()
    count = max(1, len(test_x))
    return correct / count, loss_sum / count


def blas_library():
    """The BLAS this process loaded (Debian's torch uses whichever libblas.so.3 points to)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line and "/" in line}
    return ", ".join(sorted(os.path.basename(path) for path in paths)) or "none found"


def sgemm_gflops():
    """This process's float32 matrix product speed (1024^3, best of 3), its threads."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    best = float("inf")
    for _ in range(3):
        begin = time.time()
        a @ b
        best = min(best, time.time() - begin)
    return 2 * 1024 ** 3 / best / 1e9


def train(rank, args, spec, data):
    # Never outlive the parent, whatever ends it (PR_SET_PDEATHSIG).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    torch.set_num_threads(args.threads)
    world = args.processes
    dist.init_process_group("gloo", init_method="file://" + args.store, rank=rank,
                            world_size=world)
    train_x, train_y, test_x, test_y = data
    seed = int(spec.get("seed", 1))
    torch.manual_seed(seed)
    module = build_model(spec, train_x.shape[1], args.model_file)
    model = nn.parallel.DistributedDataParallel(module)
    optimizer = build_optimizer(spec, model.parameters())

    batch = int(spec["global_batch_size"])
    samples = len(train_x)
    per_epoch = (samples + batch - 1) // batch
    epochs = int(spec.get("epochs", 0))
    max_steps = int(spec.get("max_steps", 0))
    total = epochs * per_epoch if epochs > 0 else max_steps
    if max_steps > 0 and max_steps < total:
        total = max_steps
    # As Tributary's rank 0 evaluates (common/job_spec.h EvalIntervalSteps,
    # PeriodicEvalSamples): about ten times a run on the first 1000 test samples.
    eval_interval = int(spec.get("eval_interval_steps", 0)) or max(1, (total + 9) // 10)
    eval_samples = int(spec.get("eval_samples", 0)) or 1000
    if rank == 0:
        gflops = sgemm_gflops()
        blas = blas_library()
        print(f"ddp_mlp: {world} processes x {args.threads} threads, torch {torch.__version__}, "
              f"BLAS {blas} ({gflops:.1f} GFLOP/s sgemm per process), {samples} training "
              f"samples, {total} steps ({per_epoch} per epoch), batch {batch}", flush=True)

    dist.barrier()
    start = time.time()
    setup_seconds = start - args.script_start
    step_seconds = 0.0
    trained = 0
    evaluations = []
    last = (-1.0, -1.0)  # (test accuracy, test loss) of the latest evaluation; -1: none.
    order = None
    last_loss = torch.zeros(2)
    for step in range(total):
        epoch, index = divmod(step, per_epoch)
        if index == 0:
            order = torch.from_numpy(np.random.RandomState(seed + epoch).permutation(samples))
        step_start = time.time()
        begin = index * batch
        step_batch = min(batch, samples - begin)
        lo, hi = split(step_batch, world, rank)
        chosen = order[begin + lo:begin + hi]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(spec, step, total)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = F.cross_entropy(model(train_x[chosen]), train_y[chosen], reduction="sum")
        # DDP averages over the processes: scaled so, the result is the batch mean.
        (loss_sum * (world / step_batch)).backward()
        optimizer.step()
        step_seconds += time.time() - step_start
        trained += step_batch
        done = step + 1
        if done == total:
            last_loss = torch.tensor([loss_sum.item(), float(hi - lo)])
        due = done % eval_interval == 0
        if rank == 0 and (due or done == total) and len(test_x) > 0:
            n = len(test_x) if done == total else min(eval_samples, len(test_x))
            last = evaluate(module, test_x[:n], test_y[:n])
            seconds = time.time() - start
            evaluations.append({"step": done, "accuracy": round(last[0], 4),
                                "seconds": round(seconds, 3)})
            print(f"eval   epoch {epoch} step {done}: test loss {last[1]:.4f} accuracy "
                  f"{last[0]:.4f} elapsed {seconds:.1f}s", flush=True)
    dist.all_reduce(last_loss)  # The last step's loss over the whole batch.
    training_seconds = time.time() - start
    if rank == 0:
        print(json.dumps({
            "processes": world, "threads": args.threads, "steps": total, "batch": batch,
            "samples": trained, "test_accuracy": round(last[0], 4),
            "test_loss": round(last[1], 4),
            "final_loss": round(last_loss[0].item() / max(1.0, last_loss[1].item()), 6),
            "reported_samples_per_second": round(trained / step_seconds, 1) if step_seconds else 0,
            "training_seconds": round(training_seconds, 3),
            "setup_seconds": round(setup_seconds, 3), "evaluations": evaluations,
            "torch_version": torch.__version__, "blas": blas,
            "sgemm_gflops_per_process": round(gflops, 2)}), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job_json", required=True, help="Tributary JobSpec as JSON.")
    parser.add_argument("--processes", type=int, default=2, help="DDP processes. Default: 2.")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per process. Default: 1.")
    parser.add_argument("--work_dir", required=True,
                        help="Directory for the gloo rendezvous file.")
    parser.add_argument("--model_file", default="",
                        help="The TorchScript file of a torchscript job. Default: none.")
    parser.add_argument("--check_only", action="store_true",
                        help="Only check that the job can be mirrored (data, model, optimizer, "
                             "mode) and exit 0, or 1 saying why.")
    args = parser.parse_args()
    if args.processes < 1 or args.threads < 1:
        sys.exit(f"ddp_mlp: --processes and --threads must be >= 1, got {args.processes} and "
                 f"{args.threads}")
    with open(args.job_json) as f:
        spec = json.load(f)
    try:
        if spec.get("mode", "SYNC") != "SYNC":
            raise SpecError(f"mode {spec.get('mode')}: DDP is synchronous; only SYNC is mirrored")
        torchscript = spec.get("model", {}).get("name", "mlp") == "torchscript"
        data = load_data(spec, images=torchscript)
        build_model(spec, data[0].shape[1], args.model_file)
        build_optimizer(spec, nn.Linear(1, 1).parameters())
        learning_rate(spec, 0, 1)
    except (SpecError, KeyError, ValueError, ZeroDivisionError) as error:
        sys.exit(f"ddp_mlp: cannot mirror the job: {error!r}")
    if args.check_only:
        print(f"ddp_mlp: the job can be mirrored ({len(data[0])} training samples)")
        return
    # The processes' BLAS and OpenMP threads: set before they import numpy and torch.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    args.script_start = SCRIPT_START
    args.store = os.path.join(args.work_dir, f"gloo-store-{os.getpid()}")
    if os.path.exists(args.store):
        os.remove(args.store)
    mp.spawn(train, args=(args, spec, data), nprocs=args.processes, join=True)


if __name__ == "__main__":
    main()
