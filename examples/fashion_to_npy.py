#!/usr/bin/env python3
"""Turns Fashion-MNIST's IDX files into NumPy .npy files Tributary reads (dataset npy).

    /usr/bin/python3 examples/fashion_to_npy.py --out /tmp/fashion-npy
    /usr/bin/python3 examples/fashion_to_npy.py --out /tmp/fashion-npy --dtype uint8

writes train_x.npy [60000, 1, 28, 28], train_y.npy [60000] (int64), test_x.npy and
test_y.npy. Features are float32 in [0, 1] by default (the IDX reader's scaling), or
the raw uint8 pixels with --dtype uint8: Tributary passes integer features on as int64
values, never scaled, so those suit only a model that takes ids (an embedding).
Only the standard library and NumPy are needed.
"""
import argparse
import gzip
import os
import struct

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path: str) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(directory: str, name: str) -> str:
    for candidate in (name + ".gz", name):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"neither {name}.gz nor {name} in {directory}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idx_dir", default=DEFAULT_DIR,
                        help=f"directory of the IDX files (default: {DEFAULT_DIR})")
    parser.add_argument("--out", required=True, help="directory for the .npy files")
    parser.add_argument("--dtype", choices=["float32", "uint8"], default="float32",
                        help="feature dtype (default: float32, scaled to [0, 1]; uint8 reaches the "
                             "model as int64 pixel values)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(find(args.idx_dir, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(find(args.idx_dir, f"{prefix}-labels-idx1-ubyte"))
        x = images.reshape(images.shape[0], 1, images.shape[1], images.shape[2])
        if args.dtype == "float32":
            x = x.astype(np.float32) / np.float32(255)
        np.save(os.path.join(args.out, f"{split}_x.npy"), x)
        np.save(os.path.join(args.out, f"{split}_y.npy"), labels.astype(np.int64))
        print(f"{split}: {x.shape[0]} samples of {list(x.shape[1:])} {x.dtype} -> "
              f"{args.out}/{split}_x.npy, {split}_y.npy")


if __name__ == "__main__":
    main()
