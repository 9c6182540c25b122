#!/usr/bin/env python3
"""Writes the .npy files npy_test.cc reads, with NumPy's own np.save (so the test sees
exactly what users' files look like).

    /usr/bin/python3 worker/engine/testdata/npy/make_npy_files.py worker/engine/testdata/npy
"""
import os
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
x = (np.arange(24, dtype=np.float32) / 10).reshape(6, 1, 2, 2)
np.save(os.path.join(out, "images_f4.npy"), x)
np.save(os.path.join(out, "images_f8.npy"), x.astype(np.float64))
np.save(os.path.join(out, "labels_i8.npy"), np.array([0, 1, 2, 1, 0, 2], dtype=np.int64))
np.save(os.path.join(out, "labels_u1.npy"), np.array([0, 1, 2, 1, 0, 2], dtype=np.uint8))
np.save(os.path.join(out, "labels_short.npy"), np.array([0, 1, 2], dtype=np.int32))
np.save(os.path.join(out, "labels_negative.npy"), np.array([0, 1, -1, 1, 0, 2], dtype=np.int16))
np.save(os.path.join(out, "labels_float.npy"), np.array([0, 1, 2, 1, 0, 2], dtype=np.float32))
np.save(os.path.join(out, "pixels_u1.npy"), np.arange(24, dtype=np.uint8).reshape(6, 4) * 10)
np.save(os.path.join(out, "fortran.npy"), np.asfortranarray(np.ones((6, 4), dtype=np.float32)))
np.save(os.path.join(out, "big_endian.npy"), np.ones((6, 4), dtype=">f4"))
np.save(os.path.join(out, "strings.npy"), np.array(["a"] * 6))
np.save(os.path.join(out, "nan.npy"), np.array([[0, 1], [np.nan, 2]] * 3, dtype=np.float32))
# Targets of other shapes and types, and token streams (TOKENS).
np.save(os.path.join(out, "targets_seq_i8.npy"), np.arange(18, dtype=np.int64).reshape(6, 3) - 2)
np.save(os.path.join(out, "targets_f4.npy"), (np.arange(12, dtype=np.float32) / 4).reshape(6, 2))
np.save(os.path.join(out, "flags_bool.npy"), (np.arange(24).reshape(6, 4) % 3) == 0)
np.save(os.path.join(out, "tokens_u2.npy"), (np.arange(50) * 7 % 61).astype(np.uint16))
np.save(os.path.join(out, "tokens_2d.npy"), np.zeros((5, 2), dtype=np.int32))
np.save(os.path.join(out, "tokens_negative.npy"), np.array([1, 2, -3, 4], dtype=np.int32))
for name in sorted(os.listdir(out)):
    if name.endswith(".npy"):
        print(os.path.join(out, name))
