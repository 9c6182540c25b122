#!/usr/bin/env python3
"""Turns plain text into byte-level token files for Tributary's TOKENS data.

    /usr/bin/python3 examples/text_to_tokens.py --out /tmp/fortunes-tokens

reads every fortune file Debian's `fortunes` package ships (/usr/share/games/fortunes,
the plain-text files; `%` lines separate the fortunes), sends every tenth fortune to
the test split, and writes train_tokens.npy and test_tokens.npy (1-D uint8 arrays of
the UTF-8 bytes: token id = byte value, vocabulary 256) and corpus.json with the sizes
and the unigram entropy of the bytes: the cross-entropy, in nats per token, of the
test bytes under the training bytes' frequencies. A language model has learned
something once its test loss per token is below that figure.

Train the example Transformer on them (examples/models.py --model char_lm):

    tributary local --model_file=/tmp/models/char_lm.pt --dataset=tokens \\
        --train_tokens=/tmp/fortunes-tokens/train_tokens.npy \\
        --test_tokens=/tmp/fortunes-tokens/test_tokens.npy --seq_len=64 ...

Only the standard library and NumPy are needed.
"""
import argparse
import json
import math
import os

import numpy as np

DEFAULT_DIR = "/usr/share/games/fortunes"


def fortunes(directory: str):
    """Every fortune of every plain-text file in `directory`, in file-name order."""
    if not os.path.isdir(directory):
        raise SystemExit(f"{directory}: no such directory (apt-get install fortunes)")
    names = sorted(n for n in os.listdir(directory)
                   if "." not in n and os.path.isfile(os.path.join(directory, n)))
    if not names:
        raise SystemExit(f"{directory}: holds no plain-text fortune files")
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            text = f.read()
        for fortune in text.split(b"\n%\n"):
            fortune = fortune.strip(b"%\n")
            if fortune:
                yield fortune + b"\n\n"


def unigram_entropy(train: np.ndarray, test: np.ndarray) -> float:
    """Cross-entropy (nats/token) of `test` under train's byte frequencies (add-one)."""
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(-log_p[test].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus_dir", default=DEFAULT_DIR,
                        help=f"directory of plain-text fortune files (default: {DEFAULT_DIR})")
    parser.add_argument("--out", required=True, help="directory for the .npy files")
    parser.add_argument("--test_every", type=int, default=10,
                        help="every Nth fortune goes to the test split (default: 10)")
    args = parser.parse_args()
    if args.test_every < 2:
        raise SystemExit(f"--test_every={args.test_every}: must be >= 2")
    train, test = bytearray(), bytearray()
    count = 0
    for i, fortune in enumerate(fortunes(args.corpus_dir)):
        (test if i % args.test_every == args.test_every - 1 else train).extend(fortune)
        count += 1
    os.makedirs(args.out, exist_ok=True)
    train_ids = np.frombuffer(bytes(train), dtype=np.uint8)
    test_ids = np.frombuffer(bytes(test), dtype=np.uint8)
    np.save(os.path.join(args.out, "train_tokens.npy"), train_ids)
    np.save(os.path.join(args.out, "test_tokens.npy"), test_ids)
    entropy = unigram_entropy(train_ids, test_ids)
    corpus = {
        "source": args.corpus_dir,
        "fortunes": count,
        "train_tokens": int(train_ids.size),
        "test_tokens": int(test_ids.size),
        "vocabulary": 256,
        "unigram_entropy_nats": entropy,
        "unigram_entropy_bits": entropy / math.log(2),
    }
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(corpus, f, indent=1)
    print(f"{count} fortunes: {train_ids.size} training and {test_ids.size} test bytes -> "
          f"{args.out}/train_tokens.npy, test_tokens.npy; unigram entropy "
          f"{entropy:.4f} nats/token ({entropy / math.log(2):.3f} bits)")


if __name__ == "__main__":
    main()
