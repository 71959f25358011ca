#!/usr/bin/python3
"""Fashion-MNIST slices as .npy files for qfold (calibration, evaluation).

    examples/fashion_mnist/make_data.py OUTDIR [--calib 512] [--test 10000]

Writes OUTDIR/calib.npy (the first --calib training images), OUTDIR/test.npy
and OUTDIR/test_labels.npy (the first --test test images, int64 labels).
Images are float32 [N, 1, 28, 28] in [0, 1], the bundled model's input.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import load  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--calib", type=int, default=512)
    ap.add_argument("--test", type=int, default=10000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    xtr, _ = load("train")
    xte, yte = load("test")
    np.save(os.path.join(args.out, "calib.npy"), np.ascontiguousarray(xtr[:args.calib]))
    np.save(os.path.join(args.out, "test.npy"), np.ascontiguousarray(xte[:args.test]))
    np.save(os.path.join(args.out, "test_labels.npy"), yte[:args.test].astype(np.int64))


if __name__ == "__main__":
    main()
