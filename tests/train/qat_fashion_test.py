#!/usr/bin/python3
"""`qfold qat` against PyTorch 1.13 FX QAT on Fashion-MNIST (issue 10's
accuracy test; registered by tests/train/qat_fashion.cmake, and run on the
whole data set by scripts/accuracy.sh).

    qat_fashion_test.py --qfold BIN --root DIR --work DIR [--train 4000] [--test 5000]
                        [--seeds 7,8] [--epochs 1] [--lr 0.0003] [--momentum 0.5]
                        [--calib-count 256] [--freeze-observers 48] [--freeze-bn never]
                        [--table] [--no-check]

The model is the bundled CNN (examples/fashion_mnist: Conv+BN+ReLU,
depthwise Conv+BN+ReLU (groups = channels), pointwise Conv+BN+ReLU, twice,
global average pool, Linear+BN1d+ReLU, Linear; its trained float weights
fashion_cnn.pt) on normalized images (tests/ref/fx_qat.py says why).
tests/ref/fx_qat.py exports it (float, BatchNorm kept) with the data slices
and runs PyTorch's FX QAT (prepare_qat_fx, the Neutron scheme, the same
calibration, optimizer, learning rate, batches in the order of `qfold train
--seed S`, observer schedule; convert_to_reference_fx). qfold then runs:
  float      `qfold eval` of the exported float model
  PTQ        `qfold quantize --target neutron` (512 calibration images), `qfold eval`
  QAT        `qfold qat --target neutron` with the same recipe, per seed; its int8
             model evaluated by `qfold eval` (the integer executor) and by ONNX Runtime
The checks, on the means over the seeds (one seed's figure swings by a few
tenths of a point with the batch order, in PyTorch as in qfold; every figure
is printed): qfold's QAT int8 top-1 >= qfold's PTQ int8 top-1, within 0.5
point of float, not below PyTorch FX QAT's; ONNX Runtime's top-1 on every
QAT model within 0.1 point of `qfold eval`'s; the first step's loss (the same
weights, calibration and batch) within 1 % of PyTorch's (the fake-quant
placement differs: PyTorch quantizes Linear+BN1d's output before the ReLU and
the pool's output on its input's grid).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from qfcli import Fail, check, run_qfold  # noqa: E402

ARGS = None


def work(*parts):
    return os.path.join(ARGS.work, *parts)


def qfold(*argv, timeout=3600):
    return run_qfold(ARGS.qfold, argv, expect=0, timeout=timeout)[1]


def qfold_top1(model, compare=None):
    argv = ["eval", model, "--data", work("test_x.npy"), "--labels", work("test_y.npy"), "--json"]
    if compare:
        argv += ["--compare", compare]
    return [m["top1"] for m in json.loads(qfold(*argv))["models"]]


def ort_top1(model, y):
    out = work("ort_out")
    os.makedirs(out, exist_ok=True)
    p = subprocess.run(["node", os.path.join(ARGS.root, "tests", "ref", "ort_run.js"), model, out,
                        work("test_x.npy")], capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr))
    return float((np.load(os.path.join(out, "out0.npy")).argmax(1) == y).mean())


def step_losses(csv_path):
    import csv
    with open(csv_path, newline="") as f:
        return [float(r["loss"]) for r in csv.DictReader(f) if r["kind"] == "step"]


def when(v):
    return "never" if v < 0 else str(v)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qfold", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=5000)
    ap.add_argument("--seeds", default="7,8")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.0003)
    ap.add_argument("--momentum", type=float, default=0.5)
    ap.add_argument("--calib-count", type=int, default=256)
    ap.add_argument("--freeze-observers", type=int, default=48, help="optimizer steps; -1: never")
    ap.add_argument("--freeze-bn", type=int, default=-1, help="optimizer steps; -1: never")
    ap.add_argument("--table", action="store_true", help="print a Markdown table row (scripts/accuracy.sh)")
    ap.add_argument("--no-check", action="store_true", help="print the figures only")
    ARGS = ap.parse_args()
    for k in ("qfold", "root", "work"):
        setattr(ARGS, k, os.path.abspath(getattr(ARGS, k)))
    os.makedirs(ARGS.work, exist_ok=True)
    try:
        return run()
    except Fail as e:
        print("FAIL qat_fashion: %s" % e)
        return 1


def run():
    a = ARGS
    common = ["--epochs", a.epochs, "--batch", a.batch, "--lr", a.lr, "--momentum", a.momentum, "--calib-count",
              a.calib_count]
    recipe = common + ["--freeze-observers", when(a.freeze_observers), "--freeze-bn", when(a.freeze_bn)]
    t0 = time.time()
    p = subprocess.run(["/usr/bin/python3", os.path.join(a.root, "tests", "ref", "fx_qat.py"), "--out", a.work,
                        "--state", os.path.join(a.root, "examples", "fashion_mnist", "fashion_cnn.pt"),
                        "--train", str(a.train), "--test", str(a.test), "--seeds", a.seeds, "--no-ptq"]
                       + [str(v) for v in common + ["--freeze-observers", a.freeze_observers,
                                                    "--freeze-bn", a.freeze_bn]],
                       capture_output=True, text=True, timeout=3600)
    check(p.returncode == 0, "tests/ref/fx_qat.py failed:\n" + p.stderr)
    ref = json.loads(p.stdout.strip().splitlines()[-1])
    t_torch = time.time() - t0
    y = np.load(work("test_y.npy"))

    qfold("quantize", work("float.onnx"), "-o", work("ptq.onnx"), "--calib", work("calib.npy"), "--target",
          "neutron")
    f_top1, ptq_top1 = qfold_top1(work("float.onnx"), work("ptq.onnx"))
    check(abs(f_top1 - ref["float_top1"]) <= 0.001, "float top-1: qfold %.2f %%, PyTorch %.2f %%: not one model?"
          % (100 * f_top1, 100 * ref["float_top1"]))
    runs = []
    t_qfold = 0.0
    for r in ref["qat"]:
        s = r["seed"]
        out, log = work("qat_%d.onnx" % s), work("qat_%d.csv" % s)
        t0 = time.time()
        qfold("qat", work("float.onnx"), "-o", out, "--data", work("train_x.npy"), "--labels", work("train_y.npy"),
              "--target", "neutron", "--optimizer", "sgd", "--seed", s, "--log", log, *recipe)
        t_qfold += time.time() - t0
        q = qfold_top1(out)[0]
        o = ort_top1(out, y)
        losses = step_losses(log)
        runs.append({"seed": s, "qfold": q, "ort": o, "torch": r["int8_top1"], "loss1": losses[0],
                     "torch_loss1": r["losses"][0], "steps": len(losses), "torch_steps": len(r["losses"])})
        print("seed %d: qfold qat int8 %.2f %% (ONNX Runtime %.2f %%), PyTorch FX QAT int8 %.2f %%; "
              "step 1 loss %.6f / %.6f" % (s, 100 * q, 100 * o, 100 * r["int8_top1"], losses[0], r["losses"][0]))
    mq = float(np.mean([r["qfold"] for r in runs]))
    mt = float(np.mean([r["torch"] for r in runs]))
    print("float %.2f %%, qfold PTQ %.2f %%, qfold QAT %.2f %% (mean of %d seeds), PyTorch FX QAT %.2f %% "
          "(%d train / %d test images; PyTorch %.0f s, qfold qat %.0f s)"
          % (100 * f_top1, 100 * ptq_top1, 100 * mq, len(runs), 100 * mt, a.train, a.test, t_torch, t_qfold))
    if a.table:
        print("| %d train images, %d epoch(s), lr %g | %.2f %% | %.2f %% | %.2f %% | %.2f %% | %s |"
              % (a.train, a.epochs, a.lr, 100 * f_top1, 100 * ptq_top1, 100 * mq, 100 * mt,
                 " / ".join("%.2f" % (100 * r["qfold"]) for r in runs)))
    if a.no_check:
        return 0
    for r in runs:
        check(r["steps"] == r["torch_steps"], "seed %d: qfold ran %d steps, PyTorch %d"
              % (r["seed"], r["steps"], r["torch_steps"]))
        check(abs(r["loss1"] - r["torch_loss1"]) <= 0.01 * r["torch_loss1"],
              "seed %d step 1: loss %.6f, PyTorch %.6f: not the same batch, weights or calibration?"
              % (r["seed"], r["loss1"], r["torch_loss1"]))
        check(abs(r["ort"] - r["qfold"]) <= 0.001, "seed %d: ONNX Runtime %.2f %%, qfold eval %.2f %% on one model"
              % (r["seed"], 100 * r["ort"], 100 * r["qfold"]))
    check(mq >= ptq_top1, "qfold qat %.2f %% below qfold PTQ %.2f %%" % (100 * mq, 100 * ptq_top1))
    check(mq >= f_top1 - 0.005, "qfold qat %.2f %%: more than 0.5 point below float %.2f %%"
          % (100 * mq, 100 * f_top1))
    check(mq >= mt, "qfold qat %.2f %% below PyTorch FX QAT %.2f %%" % (100 * mq, 100 * mt))
    print("ok qat_fashion")
    return 0


if __name__ == "__main__":
    sys.exit(main())
