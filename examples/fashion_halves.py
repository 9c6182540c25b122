#!/usr/bin/env python3
"""A regression task on real numbers: the bottom half of a Fashion-MNIST image from its
top half, as NPY files for Tributary (float features, float targets).

    /usr/bin/python3 examples/fashion_halves.py --out /tmp/fashion-halves

writes train_x.npy [60000, 392] (rows 0-13 of each image, float32 in [0, 1]),
train_y.npy [60000, 392] (rows 14-27), test_x.npy, test_y.npy and targets.json with
the variance of the test targets (the mean squared error of always predicting the
mean pixel value: a model has learned something once its test MSE is below it).
Train the example regressor on them (examples/models.py --model inpainter):

    tributary local --model_file=/tmp/models/inpainter.pt --dataset=npy \\
        --train_npy=/tmp/fashion-halves/train_x.npy \\
        --train_labels_npy=/tmp/fashion-halves/train_y.npy ...

Only the standard library and NumPy are needed.
"""
import argparse
import json
import os

import numpy as np

from fashion_to_npy import DEFAULT_DIR, find, read_idx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idx_dir", default=DEFAULT_DIR,
                        help=f"directory of the IDX files (default: {DEFAULT_DIR})")
    parser.add_argument("--out", required=True, help="directory for the .npy files")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    figures = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(find(args.idx_dir, f"{prefix}-images-idx3-ubyte"))
        pixels = images.astype(np.float32) / np.float32(255)
        top = np.ascontiguousarray(pixels[:, :14, :].reshape(len(pixels), -1))
        bottom = np.ascontiguousarray(pixels[:, 14:, :].reshape(len(pixels), -1))
        np.save(os.path.join(args.out, f"{split}_x.npy"), top)
        np.save(os.path.join(args.out, f"{split}_y.npy"), bottom)
        figures[f"{split}_samples"] = int(len(pixels))
        # Per-value variance around the split's own mean pixel value: the MSE of the
        # best constant prediction.
        figures[f"{split}_target_variance"] = float(bottom.var())
        print(f"{split}: {len(pixels)} samples, x {list(top.shape[1:])}, y "
              f"{list(bottom.shape[1:])}, target variance {bottom.var():.5f}")
    with open(os.path.join(args.out, "targets.json"), "w") as f:
        json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
