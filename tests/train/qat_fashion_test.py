#!/usr/bin/python3
"""`qfold qat` against PyTorch 1.13 FX QAT on Fashion-MNIST (issue 10's
accuracy test; registered by tests/train/qat_fashion.cmake, and run on the
whole data set by scripts/accuracy.sh).

    qat_fashion_test.py --qfold BIN --root DIR --work DIR [--train 4000] [--test 5000]
                        [--seeds 7,8,9] [--epochs 1] [--lr 0.0003] [--momentum 0.5]
                        [--calib-count 256] [--freeze-observers 48] [--freeze-bn 48]
                        [--skew S [--gain G]] [--spread S [--gain G]] [--qat-set RULE=V]
                        [--float-margin 0.5] [--table] [--no-check]

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
is printed): qfold's QAT int8 top-1 not below qfold's PTQ int8 top-1 and not
below PyTorch FX QAT's, by more than chance (TORCH_NOISE, PTQ_NOISE below),
and within 0.5 point of float; ONNX Runtime's top-1 on every QAT model
within 0.2 point (the check's margin, not equality) of `qfold eval
--requant onnx`'s on either engine, and of `qfold eval`'s on the oneDNN
engine (whose int8 convs requantize in float too): both requantize as ONNX
Runtime does, and the runs so far printed equal figures. The reference
kernels' default, TFLite's fixed point, is printed, not compared with ONNX
Runtime: it is 1 LSB away on some elements, 0.04-0.24 point of top-1 on
these models (0.24: seed 7 of --skew 8 trained without oneDNN); as many
steps as PyTorch.
The losses are printed, not compared: the fake-quant placement differs
(PyTorch quantizes Linear+BN1d's output before its ReLU and shares one
observer between them, and the average pool's output on its input's grid);
the mean loss of an epoch is within 1 % of PyTorch's.

With --skew S the head is reparametrized first (tests/ref/fx_qat.py --skew: the
float function unchanged, channel ranges spread by up to S^2): a model PTQ
hurts (S = 8: float 88.80 %, PyTorch PTQ 86.94 %, qfold PTQ without
equalization 87.02 %), where qfold's default PTQ (equalize=auto keeps
cross-layer equalization there: 88.22 %) must win back at least a quarter of
PyTorch PTQ's loss, and QAT (equalized before training by the same choice)
must win back --gain points over PTQ without equalization (qfold 88.46 /
88.38 / 88.54 %, PyTorch 88.42 / 87.92 / 87.38 %: +1.4 and +0.9 points on
the means).

With --spread S the channel ranges inside the depthwise-separable blocks are
spread apart (tests/ref/fx_qat.py --spread: float unchanged, every
BatchNorm2d's channels scaled by up to S either way, compensated in the next
layer): the hard depthwise-separable model of issue 10, where the per-tensor
activation grids cost both PTQs points (PyTorch 86.58 %, qfold without
equalization 86.14 %, float 88.80 %). Both must lose more than a point (else
the model is not the hard one); qfold's default PTQ (equalize=auto keeps
`all` there, +12.6 dB: 88.58 %) must win back a quarter of PyTorch's loss,
and QAT must win back --gain points over qfold's PTQ without equalization.
--qat-set RULE=V (repeatable) is passed to `qfold qat` as --set; qfold's PTQ
is run with it too, and QAT's mean must not fall below that PTQ either.

What the figures can show: the bundled model loses only ~0.2 point to PTQ, so QAT
has little to win back and the comparison with PTQ is at the level of
chance; the comparison with PyTorch (same recipe, same data) is the
meaningful one. The recipe is a gentle fine-tune (SGD lr 3e-4, momentum
0.5, observers frozen after 48 of 63 steps), where a batch order changes the
result by tenths of a point, not points. BatchNorm freezes after 48 steps
too, with the observers: in PyTorch's ConvBn / LinearBn parametrization a
frozen BN multiplies the effective step on W * s by s^2 (s = gamma /
running std, up to ~25 on the BN1d of such models); at lr 3e-3 PyTorch's own
run collapses within a few steps of the freeze (88.9 % -> 54-68 %), at 3e-4
it does not.
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
# How far a mean over three batch orders moves by chance (10,000 test images;
# on the 5,000 of the test: qfold 88.64 / 88.50 / 88.46 %, PyTorch 88.54 /
# 88.32 / 88.42 %, PTQ 88.46 %, float 88.80 %;
# the recipe without the BatchNorm freeze: qfold 88.58 / 88.67 / 88.66 %,
# PyTorch 88.82 / 88.62 / 88.53 %; with it: qfold 88.57 / 88.72 / 88.60 %,
# PyTorch 88.65 / 88.59 / 88.65 %; qfold's two engines 0.1 point apart on one
# seed): about 0.1 point for the difference of the two means, 0.05 for
# qfold's mean against the one PTQ figure. The margins are twice that.
TORCH_NOISE = 0.002
PTQ_NOISE = 0.001


def work(*parts):
    return os.path.join(ARGS.work, *parts)


def qfold(*argv, timeout=3600, env=None):
    return run_qfold(ARGS.qfold, argv, expect=0, timeout=timeout, env=env)[1]


def qfold_top1(model, compare=None, requant=None, env=None):
    argv = ["eval", model, "--data", work("test_x.npy"), "--labels", work("test_y.npy"), "--json"]
    if compare:
        argv += ["--compare", compare]
    if requant:
        argv += ["--requant", requant]
    return [m["top1"] for m in json.loads(qfold(*argv, env=env))["models"]]


def qfold_on_onednn():
    """Whether qfold's kernels are oneDNN's (`qfold --version`): under
    QFOLD_INT8=fast its int8 convs requantize in float there, as ONNX Runtime
    does (by default they compute TFLite's integer arithmetic, which moves a
    few of 5,000 top-1 decisions against ONNX Runtime: 13 on the --skew 8
    model once equalize=auto kept `all`)."""
    return "kernels: dnnl" in qfold("--version")


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
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.0003)
    ap.add_argument("--momentum", type=float, default=0.5)
    ap.add_argument("--calib-count", type=int, default=256)
    ap.add_argument("--freeze-observers", type=int, default=48, help="optimizer steps; -1: never")
    ap.add_argument("--freeze-bn", type=int, default=48, help="optimizer steps; -1: never")
    ap.add_argument("--skew", type=float, default=0.0,
                    help="reparametrize the head as tests/ref/fx_qat.py --skew (a model PTQ hurts)")
    ap.add_argument("--spread", type=float, default=0.0,
                    help="spread the depthwise-separable blocks' channels as tests/ref/fx_qat.py --spread")
    ap.add_argument("--qat-set", action="append", default=[], metavar="RULE=VALUE",
                    help="a --set for qfold qat (qfold's PTQ is also run with it, for the figures)")
    ap.add_argument("--qat-arg", action="append", default=[], metavar="ARG",
                    help="an extra argument of qfold qat only (e.g. --qat-arg=--bn-reestimate --qat-arg=4000)")
    ap.add_argument("--gain", type=float, default=0.0,
                    help="with --skew or --spread: qfold's QAT mean must beat qfold's PTQ by this many points")
    ap.add_argument("--float-margin", type=float, default=0.5,
                    help="qfold's QAT mean must be within this many points of float")
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
                        "--train", str(a.train), "--test", str(a.test), "--seeds", a.seeds]
                       + ([] if a.skew > 1 or a.spread > 1 else ["--no-ptq"])
                       + [str(v) for v in common + ["--freeze-observers", a.freeze_observers,
                                                    "--freeze-bn", a.freeze_bn, "--skew", a.skew,
                                                    "--spread", a.spread]],
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
    ptq_off_top1 = ptq_top1
    qat_set = [v for rule in a.qat_set for v in ("--set", rule)]
    if qat_set:
        qfold("quantize", work("float.onnx"), "-o", work("ptq_set.onnx"), "--calib", work("calib.npy"), "--target",
              "neutron", *qat_set)
        ptq_set_top1 = qfold_top1(work("ptq_set.onnx"))[0]
        print("qfold PTQ with %s: %.2f %%" % (" ".join(qat_set), 100 * ptq_set_top1))
    if a.skew > 1 or a.spread > 1:
        # The PTQ-hostile models. qfold's PTQ by default (equalize=auto:
        # cross-layer equalization kept where it brings the int8 outputs
        # clearly closer to float's): where PyTorch's PTQ loses more than a
        # point, qfold's must win back at least a quarter of the loss (issue
        # 8's bar). Without equalization (equalize=off) it is the PTQ that QAT
        # must improve on by --gain (the loss QAT alone can repair); on the
        # spread model it must lose more than a point too, or the model is not
        # the hard one issue 10 asks for.
        qfold("quantize", work("float.onnx"), "-o", work("ptq_off.onnx"), "--calib", work("calib.npy"), "--target",
              "neutron", "--set", "equalize=off")
        ptq_off_top1 = qfold_top1(work("ptq_off.onnx"))[0]
        loss = ref["float_top1"] - ref["ptq_top1"]
        print("%s %g: float %.2f %%, PyTorch PTQ %.2f %%, qfold PTQ %.2f %% (default), with --set equalize=off %.2f %%"
              % ("skew" if a.skew > 1 else "spread", a.skew if a.skew > 1 else a.spread, 100 * f_top1,
                 100 * ref["ptq_top1"], 100 * ptq_top1, 100 * ptq_off_top1))
        if not a.no_check:
            check(loss > 0.01, "PyTorch's PTQ loses only %.2f point on the model" % (100 * loss))
            if a.spread > 1:
                check(f_top1 - ptq_off_top1 > 0.01, "qfold's PTQ without equalization loses only %.2f point on the "
                      "spread model" % (100 * (f_top1 - ptq_off_top1)))
            check(ptq_top1 >= ref["ptq_top1"] + loss / 4,
                  "qfold PTQ %.2f %% wins back less than a quarter of PyTorch PTQ's loss "
                  "(%.2f %%, float %.2f %%)" % (100 * ptq_top1, 100 * ref["ptq_top1"], 100 * f_top1))
    runs = []
    onednn = qfold_on_onednn()
    t_qfold = 0.0
    for r in ref["qat"]:
        s = r["seed"]
        out, log = work("qat_%d.onnx" % s), work("qat_%d.csv" % s)
        t0 = time.time()
        qfold("qat", work("float.onnx"), "-o", out, "--data", work("train_x.npy"), "--labels", work("train_y.npy"),
              "--target", "neutron", "--optimizer", "sgd", "--seed", s, "--log", log, *recipe, *qat_set, *a.qat_arg)
        t_qfold += time.time() - t0
        q = qfold_top1(out)[0]
        qo = qfold_top1(out, requant="onnx")[0]
        qf = qfold_top1(out, env=dict(os.environ, QFOLD_INT8="fast"))[0] if onednn else None
        o = ort_top1(out, y)
        losses = step_losses(log)
        runs.append({"seed": s, "qfold": q, "qfold_onnx": qo, "qfold_fast": qf, "ort": o, "torch": r["int8_top1"], "steps": len(losses),
                     "torch_steps": len(r["losses"])})
        print("seed %d: qfold qat int8 %.2f %% (ONNX Runtime %.2f %%, qfold with ONNX's requantization %.2f %%), "
              "PyTorch FX QAT int8 %.2f %%; mean loss %.6f / %.6f"
              % (s, 100 * q, 100 * o, 100 * qo, 100 * r["int8_top1"], float(np.mean(losses)),
                 float(np.mean(r["losses"]))))
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
        check(abs(r["ort"] - r["qfold_onnx"]) <= 0.002, "seed %d: ONNX Runtime %.2f %%, qfold eval --requant onnx "
              "%.2f %% on one model" % (r["seed"], 100 * r["ort"], 100 * r["qfold_onnx"]))
        if onednn:
            check(abs(r["ort"] - r["qfold_fast"]) <= 0.002, "seed %d: ONNX Runtime %.2f %%, qfold eval under "
                  "QFOLD_INT8=fast %.2f %% on one model" % (r["seed"], 100 * r["ort"], 100 * r["qfold_fast"]))
    if a.gain > 0:
        check(mq >= ptq_off_top1 + a.gain / 100, "qfold qat %.2f %% wins back less than %.1f point over qfold PTQ "
              "without equalization %.2f %%" % (100 * mq, a.gain, 100 * ptq_off_top1))
    check(mq >= ptq_top1 - PTQ_NOISE, "qfold qat %.2f %% below qfold PTQ %.2f %% (by more than %.1f point)"
          % (100 * mq, 100 * ptq_top1, 100 * PTQ_NOISE))
    if qat_set:
        check(mq >= ptq_set_top1 - PTQ_NOISE, "qfold qat %.2f %% below qfold PTQ with %s %.2f %% (by more than "
              "%.1f point)" % (100 * mq, " ".join(qat_set), 100 * ptq_set_top1, 100 * PTQ_NOISE))
    check(mq >= f_top1 - a.float_margin / 100, "qfold qat %.2f %%: more than %.1f point below float %.2f %%"
          % (100 * mq, a.float_margin, 100 * f_top1))
    check(mq >= mt - TORCH_NOISE, "qfold qat %.2f %% below PyTorch FX QAT %.2f %% (by more than %.1f point)"
          % (100 * mq, 100 * mt, 100 * TORCH_NOISE))
    print("ok qat_fashion")
    return 0


if __name__ == "__main__":
    sys.exit(main())
