"""Exp, Log, ReduceSum and ReduceMax in int8 and on the TFLite runtimes
(issue 29 item 6): qfold's integer reference (`QFOLD_ENGINE=ref qfold run` of
the QDQ model, the int8 executor) against TensorFlow Lite 2.2 running the
export, bit for bit; ArmNN 20.08 where its TfLite parser has the operator
(EXP: yes; LOG, SUM, REDUCE_MAX: its parser has no such operator, which
case_armnn_limits pins); ONNX Runtime running the QDQ models.

  sweep    every int8 input through DQ -> Exp / Log -> Q (several qparams;
           log(x <= 0) included): TFLite 2.2 has no int8 EXP / LOG, so the
           export writes DEQUANTIZE -> EXP / LOG -> QUANTIZE and qfold's int8
           table computes what those three compute.
  reduce   one-op DQ -> ReduceSum / ReduceMax -> Q models (axes attribute and
           input forms, negative axes, keepdims 0 / 1, qparams shared and
           own): TFLite 2.2's SUM (its biased rounding and its wrap past the
           output range included) and REDUCE_MAX, bit for bit.
  quantize a small CNN with Exp, Log, ReduceSum and ReduceMax quantized by
           qfold (both targets, opsets 13 and 18): no op left in float, the
           export on TFLite 2.2 bit-exact with qfold's int8 run, ONNX Runtime
           on the QDQ model within 1 LSB of qfold's simulation of it.
  armnn_limits  ArmNN 20.08 runs the EXP export within 1 LSB, and refuses
           LOG, SUM and REDUCE_MAX (its parser lacks them).
  refusals what the export refuses, naming the node.

    reduce_test.py --qfold BIN --root SRC --work DIR CASE
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from qfcli import Skip, check, run_qfold  # noqa: E402

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
RUNNERS = {"ArmNN": os.path.join(HERE, "armnn_run.py"), "TFLite": os.path.join(HERE, "..", "ref", "tflite_run.py")}
ARGS = None


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv, expect=0, ref=False):
    env = dict(os.environ, QFOLD_ENGINE="ref") if ref else None
    return run_qfold(ARGS.qfold, argv, expect=expect, timeout=600, env=env)


def runtime(rt, jobs):
    """[(model, input .npy)] on runtime rt in one subprocess: (exit status,
    stderr, [first output array per job])."""
    argv, outs = [], []
    for i, (model, inp) in enumerate(jobs):
        outs.append(work("%s_out%d.npz" % (rt, i)))
        argv += [model, inp, outs[-1]]
    p = subprocess.run([PY, RUNNERS[rt]] + argv, capture_output=True, text=True, timeout=300)
    if p.returncode == 4:
        raise Skip("%s is not installed here: %s" % (rt, p.stderr.strip()[-300:]))
    if p.returncode != 0:
        return p.returncode, p.stderr, None
    res = []
    for o in outs:
        with np.load(o) as z:
            res.append(z[z.files[0]])
    return 0, p.stderr, res


def run_ok(rt, jobs):
    rc, err, res = runtime(rt, jobs)
    check(rc == 0, "%s failed (exit %d):\n%s" % (rt, rc, err[-2000:]))
    return res


def qdq_model(path, op, in_shape, out_shape, qin, qout, opset=13, axes_input=None, **attrs):
    """x -> Q(qin) -> DQ -> op -> Q(qout) -> DQ -> y (onnx.helper); axes_input:
    a constant int64 axes input (ReduceSum 13+, ReduceMax 18+)."""
    import onnx
    from onnx import TensorProto, helper
    init = [helper.make_tensor("si", TensorProto.FLOAT, [], [qin[0]]),
            helper.make_tensor("zi", TensorProto.INT8, [], [qin[1]]),
            helper.make_tensor("so", TensorProto.FLOAT, [], [qout[0]]),
            helper.make_tensor("zo", TensorProto.INT8, [], [qout[1]])]
    ins = ["xd"]
    if axes_input is not None:
        init.append(helper.make_tensor("axes", TensorProto.INT64, [len(axes_input)], axes_input))
        ins.append("axes")
    nodes = [helper.make_node("QuantizeLinear", ["x", "si", "zi"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "si", "zi"], ["xd"]),
             helper.make_node(op, ins, ["t"], **attrs),
             helper.make_node("QuantizeLinear", ["t", "so", "zo"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "so", "zo"], ["y"])]
    g = helper.make_graph(nodes, "one_op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if opset <= 17:  # onnx 1.12's checker knows opsets up to 17
        onnx.checker.check_model(m)
    onnx.save(m, path)


def int8_of(y, q):
    """qfold's dequantized int8 output back to its integers."""
    return np.rint(y.astype(np.float64) / q[0] + q[1]).astype(np.int32)


def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if a.ndim == 4 else a


def nchw(a):
    return a.transpose(0, 3, 1, 2) if a.ndim == 4 else a


# (op, input qparams, output qparams): every int8 input value
SWEEPS = [("Exp", (0.02, 0), (0.05, -128)), ("Exp", (0.031, -20), (0.011, 7)), ("Exp", (0.05, -128), (0.4, -100)),
          ("Exp", (0.1, 3), (2.0, 0)),  # exp(0) / 2 = 0.5: a tie, away from zero as TFLite's QUANTIZE
          ("Exp", (0.25, 0), (1e-4, 0)),  # exp past 2^31 steps: TFLite's float -> int32 gives INT32_MIN
          ("Log", (0.02, -128), (0.05, 10)), ("Log", (0.031, -20), (0.011, 7)), ("Log", (0.031, -20), (0.011, -7)),
          ("Log", (0.05, -128), (0.03, -3)), ("Log", (0.1, 3), (0.2, 100))]


def case_sweep():
    jobs, refs, sims = [], [], []
    for k, (op, qin, qout) in enumerate(SWEEPS):
        model = work("sweep%d.onnx" % k)
        qdq_model(model, op, ["N", 256], ["N", 256], qin, qout)
        out = work("sweep%d.tflite" % k)
        qfold("export", model, "-o", out)
        xq = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
        x = ((xq.astype(np.float64) - qin[1]) * qin[0]).astype(np.float32)
        np.save(work("sweep%d_x.npy" % k), x)
        np.save(work("sweep%d_xq.npy" % k), xq)
        qfold("run", model, "-i", work("sweep%d_x.npy" % k), "-o", work("sweep%d_y.npy" % k), ref=True)
        refs.append(int8_of(np.load(work("sweep%d_y.npy" % k)), qout).reshape(-1))
        qfold("run", model, "--simulate", "-i", work("sweep%d_x.npy" % k), "-o", work("sweep%d_s.npy" % k))
        sims.append(int8_of(np.load(work("sweep%d_s.npy" % k)), qout).reshape(-1))
        jobs.append((out, work("sweep%d_xq.npy" % k)))
    got = run_ok("TFLite", jobs)
    rows, bad = [], []
    for (op, qin, qout), g, r, s in zip(SWEEPS, got, refs, sims):
        g = g.astype(np.int32).reshape(-1)
        d = np.abs(g - r)
        ds = np.abs(s - r)
        rows.append("%s %r -> %r: TFLite 2.2 max %d LSB (%d differ); the float simulation %d differ, max %d"
                    % (op, qin, qout, d.max(), (d > 0).sum(), (ds > 0).sum(), ds.max()))
        if d.max() != 0:
            bad.append((op, qin, qout, [(int(i) - 128, int(g[i]), int(r[i])) for i in np.nonzero(d)[0][:6]]))
    print("every int8 input, qfold's int8 run vs TFLite 2.2 on the export:\n  " + "\n  ".join(rows))
    check(not bad, "TFLite 2.2 differs from qfold's int8 run (q, TFLite, qfold): %r" % bad)


# (op, input shape, axes, keepdims, axes as input, opset, input qparams, output
# qparams); never the batch axis: the runtimes run one sample at a time
REDUCES = [
    ("ReduceSum", [2, 3, 5, 7], [2, 3], 1, False, 11, (0.02, 3), (0.1, -5)),
    ("ReduceSum", [2, 3, 5, 7], [1], 1, True, 13, (0.05, -128), (0.5, 10)),
    ("ReduceSum", [2, 3, 5, 7], [-1], 1, True, 13, (0.03, -7), (0.06, 1)),
    ("ReduceSum", [2, 3, 5, 7], [-2, 3], 0, True, 13, (0.04, 5), (0.9, -3)),
    ("ReduceSum", [2, 3, 5, 7], [1, 2, 3], 1, False, 12, (0.013, 17), (0.7, 0)),
    ("ReduceSum", [2, 6, 4], [1, 2], 0, True, 13, (0.02, 3), (0.02, 3)),  # shared qparams: TFLite's raw sum
    ("ReduceSum", [2, 3, 5, 7], [2, 3], 1, True, 13, (0.05, 0), (0.05, 40)),  # sums wrap past 127
    ("ReduceMax", [2, 3, 5, 7], [2, 3], 1, False, 13, (0.02, 3), (0.02, 3)),
    ("ReduceMax", [2, 3, 5, 7], [1], 0, False, 13, (0.05, -20), (0.05, -20)),
    ("ReduceMax", [2, 3, 5, 7], [-1, 1], 1, True, 18, (0.03, 7), (0.03, 7)),
    ("ReduceMax", [2, 6, 4], [1, 2], 0, False, 13, (0.1, 0), (0.1, 0)),
]


def reduce_out_shape(shape, axes, keep):
    axes = [a % len(shape) for a in axes] if axes else list(range(len(shape)))
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


def case_reduce():
    rng = np.random.default_rng(29)
    jobs, refs = [], []
    for k, (op, shape, axes, keep, as_input, opset, qin, qout) in enumerate(REDUCES):
        model = work("red%d.onnx" % k)
        attrs = {"keepdims": keep}
        if axes is not None and not as_input:
            attrs["axes"] = axes
        osh = reduce_out_shape(shape, axes, keep)
        qdq_model(model, op, ["N"] + shape[1:], ["N"] + osh[1:], qin, qout, opset=opset,
                  axes_input=axes if as_input else None, **attrs)
        out = work("red%d.tflite" % k)
        qfold("export", model, "-o", out)
        xq = rng.integers(-128, 128, [8] + shape[1:]).astype(np.int8)
        x = ((xq.astype(np.float64) - qin[1]) * qin[0]).astype(np.float32)
        np.save(work("red%d_x.npy" % k), x)
        np.save(work("red%d_xq.npy" % k), nhwc(xq))
        qfold("run", model, "-i", work("red%d_x.npy" % k), "-o", work("red%d_y.npy" % k), ref=True)
        refs.append(int8_of(np.load(work("red%d_y.npy" % k)), qout))
        jobs.append((out, work("red%d_xq.npy" % k)))
    got = run_ok("TFLite", jobs)
    bad = []
    for row, g, r in zip(REDUCES, got, refs):
        g = nchw(g).astype(np.int32).reshape(r.shape)
        d = np.abs(g - r)
        print("%s axes %r keepdims %d %s opset %d %r -> %r: TFLite 2.2 max %d LSB (%d of %d differ)"
              % (row[0], row[2], row[3], "input" if row[4] else "attribute", row[5], row[6], row[7], d.max(),
                 (d > 0).sum(), d.size))
        if d.max():
            bad.append(row)
    check(not bad, "TFLite 2.2 differs from qfold's int8 run: %r" % bad)


def case_refusals():
    """What the export refuses, naming the node and why: a ReduceMax whose
    qparams differ (left DQ -> ReduceMax -> Q: TFLite's REDUCE_MAX has no
    requantization), a reduction without keepdims whose kept axes NHWC
    reorders."""
    for op, shape, osh, attrs, qout, needle in (
            ("ReduceMax", ["N", 3, 4, 5], ["N", 3, 1, 1], {"axes": [2, 3]}, (0.05, 3),
             "not an int8 ReduceMax (its input and output qparams differ)"),
            ("ReduceSum", ["N", 3, 4, 5], ["N", 3, 4], {"axes": [3], "keepdims": 0}, (0.3, 0),
             "a reduction without keepdims that reorders NHWC axes")):
        m = work(op + ".onnx")
        qdq_model(m, op, shape, osh, (0.02, 3), qout, opset=11, **attrs)
        out = work(op + ".tflite")
        _, _, err = qfold("export", m, "-o", out, expect=2)
        print(err.strip())
        check(("'%s_2' (%s)" % (op, op)) in err and needle in err, "%s: unexpected refusal: %s" % (op, err))
        check(not os.path.exists(out), "%s: a file was written for a refused model" % op)


def case_armnn_limits():
    model = work("exp.onnx")
    qdq_model(model, "Exp", ["N", 256], ["N", 256], (0.031, -20), (0.011, 7))
    out = work("exp.tflite")
    qfold("export", model, "-o", out)
    xq = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    np.save(work("xq.npy"), xq)
    x = ((xq.astype(np.float64) + 20) * 0.031).astype(np.float32)
    np.save(work("x.npy"), x)
    qfold("run", model, "-i", work("x.npy"), "-o", work("y.npy"), ref=True)
    r = int8_of(np.load(work("y.npy")), (0.011, 7)).reshape(-1)
    g = run_ok("ArmNN", [(out, work("xq.npy"))])[0].astype(np.int32).reshape(-1)
    d = np.abs(g - r)
    print("ArmNN 20.08, DEQUANTIZE -> EXP -> QUANTIZE on every int8 input: max %d LSB, %d differ" % (d.max(),
                                                                                                (d > 0).sum()))
    check(d.max() <= 1, "ArmNN's EXP is %d LSB from qfold's int8 run" % d.max())
    # LOG, SUM, REDUCE_MAX: ArmNN 20.08's TfLite parser has none of them
    for op, shape, osh, attrs, qout in (("Log", [1, 256], [1, 256], {}, (0.011, 7)),
                                        ("ReduceSum", [1, 3, 4, 5], [1, 3, 1, 1], {"axes": [2, 3]}, (0.3, 0)),
                                        ("ReduceMax", [1, 3, 4, 5], [1, 3, 1, 1], {"axes": [2, 3]}, (0.02, 3))):
        m = work(op + ".onnx")
        qdq_model(m, op, shape, osh, (0.02, 3), qout, opset=11, **attrs)
        t = work(op + ".tflite")
        qfold("export", m, "-o", t)
        np.save(work(op + ".npy"), np.zeros([1] + shape[1:] if len(shape) != 4 else [1, 4, 5, 3], np.int8))
        rc, err, _ = runtime("ArmNN", [(t, work(op + ".npy"))])
        print("ArmNN 20.08 on the %s export: exit %d: %s" % (op, rc, err.strip().splitlines()[-1:] or ""))
        check(rc != 0, "ArmNN 20.08 ran the %s export: this test's premise (no parser for it) is stale" % op)
        check("Operator not supported" in err, "ArmNN refused the %s export for another reason: %s" % (op, err[-500:]))
        run_ok("TFLite", [(t, work(op + ".npy"))])


def io_qparams(path):
    """(scale, zero point) of the QDQ model's input Q and output DQ."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    xin, yout = m.graph.input[0].name, m.graph.output[0].name
    qi = [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == xin][0]
    qo = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == yout][0]
    return [(float(init[n.input[1]]), int(init[n.input[2]])) for n in (qi, qo)]


def to_opset18(path):
    """The model at opset 18: ReduceMax / ReduceMean axes become an input."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(path)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 18
    for k, n in enumerate(m.graph.node):
        if n.op_type in ("ReduceMax", "ReduceMean"):
            axes = [a for a in n.attribute if a.name == "axes"]
            if axes:
                name = "axes18_%d" % k
                m.graph.initializer.append(numpy_helper.from_array(np.array(axes[0].ints, np.int64), name))
                n.input.append(name)
                n.attribute.remove(axes[0])
    onnx.save(m, path)


def net_reduce():
    """A small CNN with the four ops."""
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            e = torch.exp(self.c1(x))
            s = torch.sum(self.c2(e), dim=(2, 3))
            m = torch.amax(torch.log(e), dim=(2, 3))
            return self.fc(torch.cat([s, m], 1))

    torch.manual_seed(3)
    return Net()


def case_quantize():
    import torch
    net = net_reduce().eval()
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (64, 3, 10, 10)).astype(np.float32)
    np.save(work("calib.npy"), x)
    for opset in (13, 18):
        src = work("net%d.onnx" % opset)
        torch.onnx.export(net, torch.from_numpy(x[:1]), src, opset_version=min(opset, 17),
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
        if opset == 18:  # torch 1.13 writes up to 17: the opset-18 forms by hand
            to_opset18(src)
        for target in ("neutron", "generic"):
            tag = "%d_%s" % (opset, target)
            q = work("q%s.onnx" % tag)
            # generic: Linear weights per tensor (its per-channel FULLY_CONNECTED is another matter)
            extra = ["--set", "linear-weights=per-tensor"] if target == "generic" else []
            _, out, err = qfold("quantize", src, "--calib", work("calib.npy"), "--target", target, "-o", q, *extra)
            check("left float  0 ops" in out, "%s: ops left in float:\n%s" % (tag, out))
            _, o, _ = qfold("inspect", q)
            for op in ("Exp", "Log", "ReduceSum", "ReduceMax"):
                check(op in o, "%s: %s missing from the quantized model" % (tag, op))
            t = work("q%s.tflite" % tag)
            _, rep, _ = qfold("export", q, "-o", t)
            np.save(work("x%s.npy" % tag), x[:32])
            qfold("run", q, "-i", work("x%s.npy" % tag), "-o", work("r%s.npy" % tag), ref=True)
            yr = np.load(work("r%s.npy" % tag))
            (si, zi), (so, zo) = io_qparams(q)
            xq = np.clip(np.rint(x[:32] / si) + zi, -128, 127).astype(np.int8)
            np.save(work("xq%s.npy" % tag), nhwc(xq))
            g = run_ok("TFLite", [(t, work("xq%s.npy" % tag))])[0].astype(np.float64)
            d = np.abs((g.reshape(yr.shape) - zo) * so - yr) / so
            print("%s: TFLite 2.2 vs qfold's int8 run: max %.3f LSB" % (tag, d.max()))
            check(d.max() < 1e-3, "%s: TFLite 2.2 differs from qfold's int8 run by %.3f LSB" % (tag, d.max()))
            # ONNX Runtime runs the QDQ model; within 1 LSB of qfold's simulation of it
            od = work("ort%s" % tag)
            os.makedirs(od, exist_ok=True)
            p = subprocess.run([os.environ.get("QF_NODE", "node"), os.path.join(HERE, "..", "ref", "ort_run.js"), q, od,
                                work("x%s.npy" % tag)], capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, "ORT refused %s: %s" % (q, p.stderr[-1000:]))
            yo = np.load(os.path.join(od, "out0.npy"))
            qfold("run", q, "--simulate", "-i", work("x%s.npy" % tag), "-o", work("s%s.npy" % tag))
            ys = np.load(work("s%s.npy" % tag))
            dd = np.abs(yo - ys) / so
            top = float((yo.argmax(1) == yr.argmax(1)).mean())
            print("%s: ORT vs qfold's simulation: max %.2f LSB; top-1 agreement ORT vs qfold int8 %.3f"
                  % (tag, dd.max(), top))
            check(dd.max() <= 1.0 + 1e-3, "%s: ORT is %.2f LSB from qfold's simulation" % (tag, dd.max()))


if __name__ == "__main__":
    import qfcli
    sys.exit(qfcli.main("tflite_reduce", globals(), paths=("--root", "--work")))
