#!/usr/bin/python3
"""int8 LeakyRelu end to end (registered by tests/tflite/leaky.cmake):
quantize (both targets) -> `qfold run` -> ONNX Runtime on the QDQ model ->
export (LEAKY_RELU) -> TensorFlow Lite 2.2 and ArmNN 20.08 -> `qfold check`.

    leaky_test.py --qfold BIN --root DIR --work DIR --schema-py DIR CASE

Cases:
- sweep: LeakyRelu alone between a DQ and a Q, on all 256 int8 inputs, for
  alphas 0.01, 0.1, 0.2, 1.5 at three input / output qparams each: exported
  as one LEAKY_RELU with alpha in its options; ArmNN 20.08 within 1 LSB of
  `QFOLD_ENGINE=ref qfold run` (TFLite's reference_ops::QuantizeLeakyRelu,
  two fixed-point multipliers); the default engine (oneDNN, with its
  fallback for qfold's int8 table op) equal to the reference kernels; qfold's
  integers within 1 LSB of the exact function and of ONNX Runtime's run of
  the QDQ model (float LeakyRelu, one rounding). TensorFlow Lite 2.2 has no
  int8 LEAKY_RELU (float32 and uint8 only): the test asserts that it refuses
  the file with that message, and compares bit for bit instead should the
  installed TFLite run it (2.3 and later: the same reference kernel).
- model: a small CNN with LeakyRelu after convolutions, after an Add and
  before a pool (alphas 0.1, 0.2, 0.01), quantized for neutron and generic
  with no op left in float, every LeakyRelu at its own output qparams;
  ONNX Runtime on the QDQ model against `qfold run`; the export (3
  LEAKY_RELU) checked as armnn_test.export_and_check checks, on the runtimes
  that run int8 LEAKY_RELU (ArmNN 20.08: each op alone within 1 LSB, the
  whole model; TFLite only if it is later than 2.2), and on TFLite 2.2 every
  other op alone bit for bit, fed qfold's integer reference.
- check: `qfold check --target neutron` of the float model (quantized
  through memory) and of its QDQ model, both rule generations
  (neutron-flow sdk3 and sdk2): every LeakyRelu on the NPU, no
  "left in float" rule, no "no int8" text anywhere in the report; `export
  --target neutron`'s report: every LEAKY_RELU placed on the NPU.
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


def ort_run(model, x, tag):
    np.save(work("ort_in_%s.npy" % tag), x)
    od = work("ort_%s" % tag)
    os.makedirs(od, exist_ok=True)
    p = subprocess.run(["node", os.path.join(ARGS.root, "tests", "ref", "ort_run.js"), model, od,
                        work("ort_in_%s.npy" % tag)], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr[-2000:]))
    return np.load(os.path.join(od, "out0.npy"))


def tflite_ops(path):
    """[(builtin name, operator)] of a .tflite, in order."""
    tfl = A.tfl()
    m = tfl.Model.Model.GetRootAs(open(path, "rb").read(), 0)
    names = {v: k for k, v in vars(tfl.BuiltinOperator.BuiltinOperator).items() if not k.startswith("_")}
    g = m.Subgraphs(0)
    res = []
    for i in range(g.OperatorsLength()):
        op = g.Operators(i)
        oc = m.OperatorCodes(op.OpcodeIndex())
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()) if hasattr(oc, "DeprecatedBuiltinCode") \
            else oc.BuiltinCode()
        res.append((names.get(code, str(code)), op))
    return res


def leaky_alpha(op):
    """The alpha of a LEAKY_RELU operator's LeakyReluOptions."""
    tfl = A.tfl()
    check(op.BuiltinOptionsType() == tfl.BuiltinOptions.BuiltinOptions.LeakyReluOptions,
          "LEAKY_RELU without LeakyReluOptions (options type %d)" % op.BuiltinOptionsType())
    t = op.BuiltinOptions()
    o = tfl.LeakyReluOptions.LeakyReluOptions()
    o.Init(t.Bytes, t.Pos)
    return o.Alpha()


def runners(model, inp):
    """The runtimes that run int8 LEAKY_RELU: ArmNN 20.08, and TFLite when
    the installed one does. TensorFlow Lite 2.2's LEAKY_RELU takes float32
    and uint8 only (int8 came in 2.3, with the two-multiplier kernel qfold
    computes; 2.2's uint8 kernel is an older one that copies the positive
    side whatever the output's qparams): asserted here by its refusal."""
    p = subprocess.run([A.PY, A.RUNNERS["TFLite"], model, inp, work("tflite_probe.npz")], capture_output=True,
                       text=True, timeout=300)
    if p.returncode == 0:
        print("TFLite runs int8 LEAKY_RELU: compared bit for bit")
        return list(A.RUNNERS)
    check(p.returncode == 3 and "Only float32 and uint8 is supported currently, got INT8" in p.stderr,
          "TFLite failed on int8 LEAKY_RELU other than TFLite 2.2 does (exit %d):\n%s"
          % (p.returncode, p.stderr[-1500:]))
    print("TFLite 2.2 refuses int8 LEAKY_RELU (%s): ArmNN only"
          % p.stderr.strip().splitlines()[0])
    return ["ArmNN"]


# --- the sweep -------------------------------------------------------------------

ALPHAS = [0.01, 0.1, 0.2, 1.5]
# (input qparams, output qparams): an output range a calibration gives for
# alpha < 1 (the negative side shrunk), an output scale finer than the
# input's (identity multiplier above 1), zero points at the ends of int8
QPARAMS = [((0.05, 10), (0.04, -60)), ((0.023, -30), (0.031, -100)), ((0.11, 127), (0.07, 3))]
SWEEPS = [(a, qi, qo) for a in ALPHAS for qi, qo in QPARAMS]


def case_sweep():
    _init()
    xq = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    jobs, refs = [], []
    for k, (alpha, qin, qout) in enumerate(SWEEPS):
        model = work("sweep%d.onnx" % k)
        A._qdq_op_model(model, "LeakyRelu", ["N", 256], qin, qout, alpha=alpha)
        out = work("sweep%d.tflite" % k)
        A.qfold("export", model, "-o", out)
        A.structure(out)
        ops = tflite_ops(out)
        check([o[0] for o in ops] == ["LEAKY_RELU"], "alpha %g %r: exported as %r" % (alpha, qin, [o[0] for o in ops]))
        got_alpha = leaky_alpha(ops[0][1])
        check(got_alpha == np.float32(alpha), "alpha %g: the options hold %r" % (alpha, got_alpha))
        x = ((xq.astype(np.float64) - qin[1]) * qin[0]).astype(np.float32)
        np.save(work("sweep%d_x.npy" % k), x)
        np.save(work("sweep%d_xq.npy" % k), xq)
        A.qfold("run", model, "-i", work("sweep%d_x.npy" % k), "-o", work("sweep%d_y.npy" % k),
                env=dict(os.environ, **REF))
        y = np.load(work("sweep%d_y.npy" % k))
        r = np.rint(y.astype(np.float64) / qout[0] + qout[1]).astype(np.int32).reshape(1, -1)
        refs.append(r)
        # the default engine (oneDNN where it loads) computes the same integers
        A.qfold("run", model, "-i", work("sweep%d_x.npy" % k), "-o", work("sweep%d_yd.npy" % k),
                env=A.default_engine())
        yd = np.load(work("sweep%d_yd.npy" % k))
        check(np.array_equal(yd, y), "alpha %g %r: the default engine differs from the reference kernels" % (alpha, qin))
        # the exact function of the input's real values, rounded: within 1 LSB
        # (two roundings: the multiplier's and the product's)
        xr = x.astype(np.float64).reshape(r.shape)
        exact = np.clip(np.rint(np.where(xr >= 0, xr, alpha * xr) / qout[0]) + qout[1], -128, 127)
        d = np.abs(r - exact)
        check(d.max() <= 1, "alpha %g %r -> %r: %d LSB from the exact function" % (alpha, qin, qout, int(d.max())))
        # ONNX Runtime on the QDQ model: float LeakyRelu, QuantizeLinear (one rounding)
        yo = ort_run(model, x, "s%d" % k)
        ro = np.rint(yo.astype(np.float64) / qout[0] + qout[1]).astype(np.int32).reshape(r.shape)
        do = np.abs(ro - r)
        print("alpha %g %r -> %r: qfold vs the exact function max %d LSB (%.4f differ), vs ONNX Runtime max %d "
              "(%.4f differ)" % (alpha, qin, qout, int(d.max()), float((d > 0).mean()), int(do.max()),
                                 float((do > 0).mean())))
        check(do.max() <= 1, "alpha %g %r: ONNX Runtime %d LSB from qfold's integers" % (alpha, qin, int(do.max())))
        jobs.append((out, work("sweep%d_xq.npy" % k)))
    for rt in runners(jobs[0][0], jobs[0][1]):
        got = A.armnn_many(jobs, rt)
        rows = []
        for (alpha, qin, qout), g, r in zip(SWEEPS, got, refs):
            d = np.abs(list(g.values())[0].astype(np.int32).reshape(r.shape) - r)
            rows.append((alpha, qin, qout, int(d.max()), float((d > 0).mean())))
        print("%s vs qfold's integer reference, alpha (input qparams) -> (output qparams): max LSB, share "
              "differing:\n  %s" % (rt, "\n  ".join("%g %r -> %r: %d %.4f" % r for r in rows)))
        lim = 1 if rt == "ArmNN" else 0
        bad = [r for r in rows if r[3] > lim]
        check(not bad, "%s: sweeps further from qfold's integer reference than %d LSB: %r" % (rt, lim, bad))


# --- the CNN ---------------------------------------------------------------------

def torch_export(path):
    """The test CNN exported by PyTorch 1.13 (through refcache)."""
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.c3 = nn.Conv2d(8, 8, 1)
            self.fc = nn.Linear(8, 6)

        def forward(self, x):
            x = nn.functional.leaky_relu(self.c1(x), 0.1)
            y = nn.functional.leaky_relu(self.c2(x) + self.c3(x), 0.2)
            y = nn.functional.leaky_relu(nn.functional.max_pool2d(y, 2), 0.01)
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    torch.manual_seed(32)
    net = Net().eval()
    torch.onnx.export(net, torch.zeros(1, 3, 10, 10), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


def float_model(tag):
    """The CNN, its calibration set and a generator; files named by tag."""
    model = work("%s_leaky.onnx" % tag)
    refcache.call(torch_export, model, base=ARGS.work)
    import onnx
    n = collections.Counter(x.op_type for x in onnx.load(model).graph.node)["LeakyRelu"]
    check(n == 3, "the export has %d LeakyRelu, expected 3" % n)
    rng = np.random.default_rng(32)
    calib = work("%s_calib.npy" % tag)
    np.save(calib, rng.standard_normal((32, 3, 10, 10)).astype(np.float32))
    return model, calib, rng


def quantize(model, calib, target, tag):
    qdq = work("%s_leaky_%s.onnx" % (tag, target))
    # generic's per-channel Linear weights have no FULLY_CONNECTED ArmNN 20.08
    # takes: its classifier per tensor here (as newops_test.py)
    extra = ["--set", "linear-weights=per-tensor"] if target == "generic" else []
    rep_q = work("%s_quantize_%s.json" % (tag, target))
    A.qfold("quantize", model, "-o", qdq, "--calib", calib, "--target", target, "--report", rep_q, *extra)
    floats = json.load(open(rep_q))["left_float"]
    check(not floats, "%s: ops left in float: %s" % (target, floats))
    return qdq


def tflite_all_but_leaky(qdq, x, target):
    """Where TFLite (2.2) does not run LEAKY_RELU: every other op of the
    export alone on it, fed qfold's integer reference, bit for bit (the
    --all-outputs file export_and_check wrote, its LEAKY_RELU operators cut
    out; their outputs come from the reference)."""
    import copy
    import importlib
    import flatbuffers
    tfl = A.tfl()
    Model = importlib.import_module(tfl.__name__ + ".Model")
    dbg = work("dbg.tflite")
    m = Model.ModelT.InitFromObj(Model.Model.GetRootAs(open(dbg, "rb").read(), 0))
    g = m.subgraphs[0]
    leaky = tfl.BuiltinOperator.BuiltinOperator.LEAKY_RELU
    names = [(t.name.decode() if isinstance(t.name, bytes) else t.name) for t in g.tensors]
    outs = [names[i] for i in g.outputs]
    in_name = names[g.inputs[0]]
    cut = copy.copy(g)
    cut.operators = [op for op in g.operators if m.operatorCodes[op.opcodeIndex].builtinCode != leaky]
    check(len(cut.operators) == len(g.operators) - 3, "%s: %d LEAKY_RELU cut" % (target, len(g.operators) -
                                                                                 len(cut.operators)))
    m.subgraphs = [cut]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path = work("no_leaky.tflite")
    open(path, "wb").write(bytes(b.Output()))
    (si, zi), _ = A.io_qparams(work("m.tflite"))
    xq = A.fit(A.quantize_input(x, si, zi), A.tfl_input_shape(work("m.tflite")))
    ref = A.int8_reference(qdq, x, outs + [in_name])
    alone = A.per_op(path, ref, {in_name: xq}, "TFLite")
    print("%s: each op but LEAKY_RELU alone on TFLite 2.2 vs qfold's integer reference (max LSB, fraction "
          "differing): %s" % (target, ", ".join("%s %d %.4f" % v for v in alone.values())))
    check(len(alone) == len(cut.operators) and all(v[1] == 0 for v in alone.values()),
          "%s: TFLite 2.2 apart from qfold's integer reference: %r" % (target, alone))


def case_model():
    _init()
    model, calib, rng = float_model("model")
    x = rng.standard_normal((200, 3, 10, 10)).astype(np.float32)
    import onnx
    import onnx.numpy_helper
    for target in ("neutron", "generic"):
        qdq = quantize(model, calib, target, "model")
        # every LeakyRelu between a DQ and a Q of its own qparams
        g = onnx.load(qdq).graph
        init = {i.name: onnx.numpy_helper.to_array(i) for i in g.initializer}
        prod = {o: n for n in g.node for o in n.output}
        use = {}
        for n in g.node:
            for i in n.input:
                use.setdefault(i, []).append(n)
        leaky = [n for n in g.node if n.op_type == "LeakyRelu"]
        check(len(leaky) == 3, "%s: %d LeakyRelu in the QDQ model" % (target, len(leaky)))
        for n in leaky:
            dq = prod.get(n.input[0])
            q = use.get(n.output[0], [])
            check(dq is not None and dq.op_type == "DequantizeLinear" and [u.op_type for u in q] == ["QuantizeLinear"],
                  "%s: %s is not between a DQ and a Q" % (target, n.name))
            check(init[q[0].input[1]] != init[dq.input[1]], "%s: %s shares its input's scale" % (target, n.name))
        np.save(work("x.npy"), x)
        A.qfold("run", qdq, "-i", work("x.npy"), "-o", work("y.npy"))
        y = np.load(work("y.npy"))
        yo = ort_run(qdq, x, target)
        steps = float(np.abs(np.diff(np.unique(y))).min())
        top1 = float((y.argmax(1) == yo.argmax(1)).mean())
        print("%s: qfold run vs ONNX Runtime on the QDQ model: max %.2f output steps, top-1 agreement %.3f"
              % (target, float(np.abs(y - yo).max()) / max(steps, 1e-12), top1))
        check(top1 >= 0.98, "%s: top-1 agreement with ONNX Runtime %.3f < 0.98" % (target, top1))
        # the runtimes that run int8 LEAKY_RELU (export_and_check reads A.RUNNERS)
        out = work("probe.tflite")
        A.qfold("export", qdq, "-o", out)
        A.structure(out)
        (si, zi), _ = A.io_qparams(out)
        np.save(work("probe_x.npy"), A.fit(A.quantize_input(x[:4], si, zi), A.tfl_input_shape(out)))
        keep, rts = dict(A.RUNNERS), runners(out, work("probe_x.npy"))
        A.RUNNERS = {rt: keep[rt] for rt in rts}
        # ArmNN 20.08 computes LEAKY_RELU in float (each alone within 1 LSB, 15 %
        # of its outputs at alpha 0.2): chained through ADD / MAX_POOL / MEAN /
        # FULLY_CONNECTED the output's flips average 0.32 LSB (measured, neutron),
        # over the default 0.25
        try:
            rep = A.export_and_check(qdq, x[:64], calib, whole_lsb=(4, 0.5))
        finally:
            A.RUNNERS = keep
        if "TFLite" not in rts:
            tflite_all_but_leaky(qdq, x[:64], target)
        ops = [o["op"] for o in rep["ops"]]
        print("%s: exported ops %s" % (target, ", ".join(ops)))
        check(ops.count("LEAKY_RELU") == 3, "%s: %d LEAKY_RELU in the export" % (target, ops.count("LEAKY_RELU")))
        alphas = sorted(round(leaky_alpha(op), 6) for name, op in tflite_ops(work("m.tflite")) if name == "LEAKY_RELU")
        check(alphas == [0.01, 0.1, 0.2], "%s: LEAKY_RELU alphas %r" % (target, alphas))


# --- qfold check -------------------------------------------------------------------

def case_check():
    _init()
    model, calib, _ = float_model("check")
    qdq = quantize(model, calib, "neutron", "check")
    runs = [(p, w, flow) for p, w in ((model, "float model"), (qdq, "QDQ model")) for flow in ("sdk3", "sdk2")]
    for path, what, flow in runs:
        what = "%s (%s)" % (what, flow)
        out = work("check_%s_%s.json" % ("float" if path == model else "qdq", flow))
        A.qfold("check", path, "--target", "neutron", "--set", "neutron-flow=" + flow, "--json", out)
        text = open(out).read()
        check("no int8" not in text, "%s: the report still says 'no int8': %s" % (what, text[:400]))
        rep = json.loads(text)
        leaky = [n for n in rep["nodes"] if n["op"] == "LeakyRelu"]
        check(len(leaky) == 3, "%s: %d LeakyRelu nodes in the report" % (what, len(leaky)))
        for n in leaky:
            check(n["placement"].lower() == "npu" and not (n.get("rule") or "").startswith("left in float"),
                  "%s: %s placed %s (%s)" % (what, n["name"], n["placement"], n.get("rule")))
        print("%s: LeakyRelu %s" % (what, ", ".join("%s %s" % (n["name"], n["placement"]) for n in leaky)))
    # the export's deployment report places each LEAKY_RELU as check places its node
    A.qfold("export", qdq, "-o", work("t.tflite"), "--target", "neutron", "--report", work("t.json"))
    ops = json.load(open(work("t.json")))["ops"]
    lr = [o for o in ops if o["op"] == "LEAKY_RELU"]
    check(len(lr) == 3 and all(o.get("placement") == "npu" for o in lr),
          "export --target neutron: LEAKY_RELU placements %r" % [(o["op"], o.get("placement")) for o in lr])


if __name__ == "__main__":
    import qfcli
    sys.exit(qfcli.main("tflite_leaky", globals(), paths=("--root", "--work", "--schema-py")))
