#!/usr/bin/python3
"""The C example program (examples/c/qfold_pipeline.c) against the CLI.

    pipeline_test.py --example BIN --qfold BIN --examples DIR --work DIR

Runs fuse -> quantize (neutron, a small calibration slice) -> eval -> export
TFLite on the bundled Fashion-MNIST model twice: through the library's public
headers (the example program) and through the qfold command, each in a
directory of its own. The model files and the .tflite must be equal byte for
byte, the eval figures equal, and the example must write no file the CLI
does not. The data: the first images of the Fashion-MNIST data set when it is
installed (examples/fashion_mnist/train.py), else seeded blobs with seeded
labels (the comparison holds either way).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

CALIB, TEST = 64, 256


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (" ".join(argv), p.returncode, p.stdout, p.stderr))
    return p.stdout


def data(examples, work):
    sys.path.insert(0, os.path.join(examples, "fashion_mnist"))
    try:
        from train import load  # noqa: E402
        xtr, _ = load("train")
        xte, yte = load("test")
        calib, test, labels = xtr[:CALIB], xte[:TEST], yte[:TEST]
    except (ImportError, OSError):
        rng = np.random.default_rng(28)
        calib = rng.random((CALIB, 1, 28, 28), dtype=np.float32) ** 3
        test = rng.random((TEST, 1, 28, 28), dtype=np.float32) ** 3
        labels = rng.integers(0, 10, TEST)
    paths = [os.path.join(work, n) for n in ("calib.npy", "test.npy", "labels.npy")]
    for p, a, t in zip(paths, (calib, test, labels), (np.float32, np.float32, np.int64)):
        np.save(p, np.ascontiguousarray(a, dtype=t))
    return paths


def main():
    ap = argparse.ArgumentParser()
    for a in ("--example", "--qfold", "--examples", "--work"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    lib, cli = os.path.join(args.work, "lib"), os.path.join(args.work, "cli")
    os.makedirs(lib)
    os.makedirs(cli)
    calib, test, labels = data(args.examples, args.work)
    model = os.path.join(args.examples, "fashion_mnist", "fashion_cnn.onnx")

    out = run([args.example, model, calib, test, labels, lib])
    lib_eval = json.loads(out)

    q = args.qfold
    run([q, "fuse", model, "-o", os.path.join(cli, "fused.onnx")])
    run([q, "quantize", os.path.join(cli, "fused.onnx"), "-o", os.path.join(cli, "quant.onnx"), "--calib", calib])
    cli_eval = json.loads(run([q, "eval", os.path.join(cli, "quant.onnx"), "--data", test, "--labels", labels,
                               "--json"]))
    run([q, "export", os.path.join(cli, "quant.onnx"), "-o", os.path.join(cli, "quant.tflite")])

    files = sorted(os.listdir(cli))
    if sorted(os.listdir(lib)) != files:
        fail("the example wrote %s, the CLI %s" % (sorted(os.listdir(lib)), files))
    for name in files:
        a = open(os.path.join(lib, name), "rb").read()
        b = open(os.path.join(cli, name), "rb").read()
        if a != b:
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            fail("%s differs: %d bytes from the example, %d from the CLI, first difference at byte %d"
                 % (name, len(a), len(b), first))
    le, ce = lib_eval, cli_eval
    for k in ("samples", "classes"):
        if le[k] != ce[k]:
            fail("eval %s: example %r, CLI %r" % (k, le[k], ce[k]))
    for k in ("top1", "top5"):
        if le["models"][0].get(k) != ce["models"][0].get(k):
            fail("eval %s: example %r, CLI %r" % (k, le["models"][0].get(k), ce["models"][0].get(k)))
    print("ok: %s equal byte for byte; eval %d samples, top-1 %.4f, top-5 %.4f on both"
          % (", ".join(files), ce["samples"], ce["models"][0]["top1"], ce["models"][0].get("top5", -1)))


if __name__ == "__main__":
    main()
