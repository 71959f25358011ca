#!/usr/bin/python3
"""HardSigmoid and HardSwish in int8, end to end (issue 29, item 1), on
TensorFlow Lite 2.2 and ArmNN (registered by tests/tflite/armnn.cmake).

    hard_act_test.py --qfold BIN --root DIR --work DIR --schema-py DIR CASE

Cases:
- sweep: HardSigmoid (torch's alpha 1/6, beta 1/2) and HardSwish alone
  between a DQ and a Q, on all 256 int8 inputs, for several input / output
  qparams: the export (HardSigmoid: an ADD with RELU6 and a MUL; HardSwish:
  HARD_SWISH) on TFLite 2.2 bit-exact with qfold's integer reference
  (`QFOLD_ENGINE=ref qfold run` of the QDQ model), on ArmNN within 1 LSB,
  and HardSigmoid's integers within 1 LSB of the exact function rounded.
- mobilenet_v3_13 / mobilenet_v3_14: torchvision's mobilenet_v3_small
  (random BatchNorm statistics, 64x64 inputs) exported by PyTorch 1.13 at
  opset 13 (every HardSwish as HardSigmoid + Mul) or 14 (HardSwish, and
  HardSigmoid in the squeeze-excite blocks), quantized on both targets with
  no op left in float, torch's HardSigmoid + Mul pairs quantized as one
  HardSwish; ONNX Runtime runs the QDQ model; the export on TFLite 2.2
  bit-exact with `QFOLD_ENGINE=ref qfold run`, and (one target per opset)
  every op alone on both runtimes (armnn_test.py's export_and_check).
The integer reference runs on the reference kernels (QFOLD_ENGINE=ref), as
armnn_test.py does: oneDNN's int8 convolutions requantize in float.

The helpers (runtimes, structure check, integer reference) are
armnn_test.py's.
"""
import collections
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import armnn_test as A  # noqa: E402
import refcache  # noqa: E402
from qfcli import check  # noqa: E402

ARGS = None  # set by qfcli.main
REF = {"QFOLD_ENGINE": "ref"}


def _init():
    A.ARGS = ARGS


def work(name):
    return os.path.join(ARGS.work, name)


def op_counts(path):
    import onnx
    return collections.Counter(n.op_type for n in onnx.load(path).graph.node)


def tflite_ops(path):
    """The builtin operator of every operator of a .tflite, in order."""
    tfl = A.tfl()
    m = tfl.Model.Model.GetRootAs(open(path, "rb").read(), 0)
    names = {v: k for k, v in vars(tfl.BuiltinOperator.BuiltinOperator).items() if not k.startswith("_")}
    g = m.Subgraphs(0)
    res = []
    for i in range(g.OperatorsLength()):
        oc = m.OperatorCodes(g.Operators(i).OpcodeIndex())
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()) if hasattr(oc, "DeprecatedBuiltinCode") \
            else oc.BuiltinCode()
        res.append(names.get(code, str(code)))
    return res


# --- the sweeps --------------------------------------------------------------------

THIRD = float(np.float32(1 / 6))  # what torch writes
# (op, input qparams, output qparams): output ranges a calibration gives
# ([0, 1] from -128), an output range ending below 1 (1 saturates), a zero
# point inside (both RELU6 bounds inside int8), wide and narrow inputs;
# HardSwish where its relu-ish exponent is positive (input scale > 3 / 256)
# and where it is far below.
SWEEPS = [("HardSigmoid", (0.05, 10), (1 / 255, -128)), ("HardSigmoid", (0.023, -3), (0.0031, -128)),
          ("HardSigmoid", (0.11, 0), (0.0061, -40)), ("HardSigmoid", (0.7, 5), (0.0039, -128)),
          ("HardSigmoid", (0.0071, 100), (0.0019, 20)),
          ("HardSwish", (0.7, -20), (0.5, -60)), ("HardSwish", (0.004, 30), (0.0035, -90)),
          ("HardSwish", (0.031, -128), (0.09, -128))]


def case_sweep():
    _init()
    jobs, refs, xs = [], [], []
    for k, (op, qin, qout) in enumerate(SWEEPS):
        model = work("sweep%d.onnx" % k)
        attrs = {"alpha": THIRD, "beta": 0.5} if op == "HardSigmoid" else {}
        A._qdq_op_model(model, op, ["N", 256], qin, qout, **attrs)
        out = work("sweep%d.tflite" % k)
        A.qfold("export", model, "-o", out)
        A.structure(out)
        want = ["ADD", "MUL"] if op == "HardSigmoid" else ["HARD_SWISH"]
        got = tflite_ops(out)
        check(got == want, "%s %r: exported as %r, expected %r" % (op, qin, got, want))
        xq = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
        x = ((xq.astype(np.float64) - qin[1]) * qin[0]).astype(np.float32)
        np.save(work("sweep%d_x.npy" % k), x)
        np.save(work("sweep%d_xq.npy" % k), xq)
        A.qfold("run", model, "-i", work("sweep%d_x.npy" % k), "-o", work("sweep%d_y.npy" % k),
                env=dict(os.environ, **REF))
        y = np.load(work("sweep%d_y.npy" % k))
        refs.append(np.rint(y.astype(np.float64) / qout[0] + qout[1]).astype(np.int32).reshape(1, -1))
        xs.append(x.astype(np.float64))
        jobs.append((out, work("sweep%d_xq.npy" % k)))
    # The integer form is HardSigmoid: within 1 LSB of the exact function
    # of the input's real values, rounded into the output's integers.
    for (op, qin, qout), x, r in zip(SWEEPS, xs, refs):
        if op != "HardSigmoid":
            continue
        exact = np.clip(np.rint(np.clip(x / 6 + 0.5, 0, 1) / qout[0]) + qout[1], -128, 127).reshape(r.shape)
        d = np.abs(r - exact)
        print("HardSigmoid %r -> %r: qfold's integers vs the exact function: max %d LSB, %.4f differ"
              % (qin, qout, int(d.max()), float((d > 0).mean())))
        check(d.max() <= 1, "HardSigmoid %r: %d LSB from the exact function" % (qin, int(d.max())))
    for rt in A.RUNNERS:
        got = A.armnn_many(jobs, rt)
        rows = []
        for (op, qin, qout), g, r in zip(SWEEPS, got, refs):
            a = list(g.values())[0].astype(np.int32).reshape(r.shape)
            d = np.abs(a - r)
            rows.append((op, qin, qout, int(d.max()), float((d > 0).mean())))
        print("%s vs qfold's integer reference, op (input qparams) (output qparams): max LSB, share differing:\n  %s"
              % (rt, "\n  ".join("%s %r %r: %d %.4f" % r for r in rows)))
        lim = 1 if rt == "ArmNN" else 0
        bad = [r for r in rows if r[3] > lim]
        check(not bad, "%s: sweeps further from qfold's integer reference than %d LSB: %r" % (rt, lim, bad))


# --- mobilenet_v3_small ------------------------------------------------------------

def export_mobilenet_v3(shape, opset, path):
    """torchvision's mobilenet_v3_small (10 classes) with random BatchNorm
    statistics, exported by PyTorch at `opset`; through refcache."""
    import torch
    import torchvision
    from qfref import randomize_bn
    torch.manual_seed(29)
    net = torchvision.models.mobilenet_v3_small(weights=None, num_classes=10)
    randomize_bn(net, torch.Generator().manual_seed(29), negative_gamma=False)
    net.eval()
    torch.onnx.export(net, torch.zeros(1, *shape), path, opset_version=opset, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


def ort_run(model, x):
    np.save(work("ort_in.npy"), x)
    os.makedirs(work("ort"), exist_ok=True)
    p = subprocess.run(["node", os.path.join(ARGS.root, "tests", "ref", "ort_run.js"), model, work("ort"),
                        work("ort_in.npy")], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, QF_ORT_OPT="disabled"))
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr[-2000:]))
    return np.load(os.path.join(work("ort"), "out0.npy"))


def tflite_exact(qdq, x):
    """The export of qdq on TFLite 2.2 against `QFOLD_ENGINE=ref qfold run`
    of qdq on x: the same integers."""
    out = work("whole.tflite")
    A.qfold("export", qdq, "-o", out)
    A.structure(out)
    (si, zi), (so, zo) = A.io_qparams(out)
    xq = A.nhwc(A.quantize_input(x, si, zi))
    np.save(work("whole_x.npy"), x)
    A.qfold("run", qdq, "-i", work("whole_x.npy"), "-o", work("whole_y.npy"), env=dict(os.environ, **REF))
    ref = np.rint(np.load(work("whole_y.npy")).astype(np.float64) / so + zo).astype(np.int32)
    got = list(A.armnn(out, xq, "TFLite").values())[0].astype(np.int32).reshape(ref.shape)
    d = np.abs(got - ref)
    print("whole model on TFLite 2.2 vs QFOLD_ENGINE=ref qfold run, %d inputs: max %d LSB, %.4f differ"
          % (len(x), int(d.max()), float((d > 0).mean())))
    check(d.max() == 0, "TFLite 2.2 differs from qfold's integer run by up to %d LSB" % d.max())
    return out


def mobilenet_v3(opset):
    _init()
    shape = (3, 64, 64)
    model = work("mnv3.onnx")
    refcache.call(export_mobilenet_v3, list(shape), opset, model, base=ARGS.work)
    src = op_counts(model)
    # torch's forms: 19 HardSwish and 9 squeeze-excite HardSigmoid
    want_src = {13: (0, 28, 28), 14: (19, 9, 9)}[opset]
    check((src["HardSwish"], src["HardSigmoid"], src["Mul"]) == want_src,
          "opset %d export: HardSwish, HardSigmoid, Mul %r, expected %r"
          % (opset, (src["HardSwish"], src["HardSigmoid"], src["Mul"]), want_src))
    rng = np.random.default_rng(opset)
    calib = work("calib.npy")
    np.save(calib, rng.standard_normal((16,) + shape).astype(np.float32))
    x = rng.standard_normal((6,) + shape).astype(np.float32)
    # generic: Linear weights per tensor, as TFLite's FULLY_CONNECTED takes
    # them in 2.2 (its per-channel form is issue 29's item 4).
    targets = [("neutron", []), ("generic", ["--set", "linear-weights=per-tensor"])]
    for i, (target, extra) in enumerate(targets):
        qdq = work("mnv3_%s.onnx" % target)
        A.qfold("quantize", model, "-o", qdq, "--calib", calib, "--target", target, "--report", work("rep.json"),
                *extra)
        rep = json.load(open(work("rep.json")))
        check(rep["left_float"] == [], "%s: ops left in float: %r" % (target, rep["left_float"]))
        q = op_counts(qdq)
        # every x * HardSigmoid(x) pair is one HardSwish; the SE blocks'
        # HardSigmoid and Mul stay
        check((q["HardSwish"], q["HardSigmoid"], q["Mul"]) == (19, 9, 9),
              "%s: the QDQ model has HardSwish, HardSigmoid, Mul %r, expected (19, 9, 9)"
              % (target, (q["HardSwish"], q["HardSigmoid"], q["Mul"])))
        # ONNX Runtime runs the QDQ model as written; its float simulation
        # and qfold's int8 run pick the same class on most inputs.
        yo = ort_run(qdq, x).reshape(len(x), -1)
        np.save(work("x.npy"), x)
        A.qfold("run", qdq, "-i", work("x.npy"), "-o", work("q.npy"), env=dict(os.environ, **REF))
        yq = np.load(work("q.npy")).reshape(len(x), -1)
        agree = float((yo.argmax(1) == yq.argmax(1)).mean())
        print("%s: ONNX Runtime (QDQ) vs qfold int8: top-1 agreement %.3f, max |diff| %.4f (output range %.4f)"
              % (target, agree, float(np.abs(yo - yq).max()), float(np.ptp(yq))))
        check(np.isfinite(yo).all() and agree >= 0.5, "%s: ONNX Runtime vs qfold int8 top-1 %.3f" % (target, agree))
        tflite_exact(qdq, x)
        ops = collections.Counter(tflite_ops(work("whole.tflite")))
        check(ops["HARD_SWISH"] == 19, "%s: %d HARD_SWISH in the export" % (target, ops["HARD_SWISH"]))
        # every op alone on both runtimes, one target per opset (the other
        # shares every kernel)
        if i == (0 if opset == 13 else 1):
            A.export_and_check(qdq, x, calib, whole_lsb=(12, 1.5), min_top1=4 / 6)


def case_mobilenet_v3_13():
    mobilenet_v3(13)


def case_mobilenet_v3_14():
    mobilenet_v3(14)


if __name__ == "__main__":
    import qfcli
    sys.exit(qfcli.main("tflite_hard", globals(), paths=("--root", "--work", "--schema-py")))
