#!/usr/bin/python3
"""The neutron target's qparams against the NXP Neutron quantizer's rules
(issue 30 item 4; registered by tests/tflite/nqparams.cmake).

    neutron_qparams_test.py --qfold BIN --root DIR --work DIR --schema-py DIR CASE

qparams: a model with Softmax, Sigmoid, Tanh, a Concat (of a Sigmoid's output,
a Relu's, a scaled conv's and a Softmax's) and a MatMul of two activations
(the Concat's and the Tanh's, reshaped) quantized with --target neutron; the written QDQ file holds
Softmax / Sigmoid outputs at 1/256, -128 and Tanh's at 1/128, 0 exactly, every
observed Concat input at its output's scale and zero point (one observer over
the union of their ranges: the scale is the union's), the Sigmoid and Softmax
inputs of the Concat at their fixed qparams (requantized by the concat), both MatMul inputs
with zero point 0 and the observed one symmetric (scale = max|x| / 127);
ONNX Runtime and qfold's int8 run agree on it (quantize_test's measure).
With --target generic the same Concat keeps requantizing its inputs to the first's.
tflite: the model without the MatMul (TFLite 2.2 has no int8 BATCH_MATMUL;
the export refuses it), logits out, exported and run on TFLite 2.2, every op bit-exact
with qfold's integer reference (armnn_test.export_and_check).
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tflite"))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
from qfcli import check  # noqa: E402
import qfcli  # noqa: E402
import refcache  # noqa: E402

ARGS = None  # set by qfcli.main


def work(name):
    return os.path.join(ARGS.work, name)


def build_net(matmul):
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(3, 8, 3, padding=1)
            self.c3 = nn.Conv2d(3, 4, 3, padding=1)
            self.c4 = nn.Conv2d(3, 4, 3, padding=1)
            self.c5 = nn.Conv2d(3, 4, 3, padding=1)
            self.fc = nn.Linear(28, 6)

        def forward(self, x):
            a = torch.relu(self.c1(x))  # >= 0
            b = self.c2(x) * 3.0  # signed, wider: the union is not a's range
            c = torch.cat([a, b], 1)
            s = torch.sigmoid(self.c3(x))
            t = torch.tanh(self.c4(x))
            m = torch.softmax(self.c5(x), 1)
            # fixed inputs first and last, observed between (the export makes one Concat of the two)
            d = torch.cat([s, c, m], 1)
            if matmul:
                # out straight from the MatMul: a Softmax after it would turn
                # one LSB of TFLite's against ONNX's requantization into ten
                q = torch.flatten(d, 2)  # [N, 24, 64]
                k = torch.flatten(t, 2)  # [N, 4, 64]
                return torch.matmul(q, k.transpose(1, 2))
            g = torch.flatten(nn.functional.adaptive_avg_pool2d(torch.cat([d, t], 1), 1), 1)
            return self.fc(g)

    torch.manual_seed(30)
    return Net().eval()


def torch_export(matmul, path):
    import torch
    torch.onnx.export(build_net(matmul), torch.zeros(1, 3, 8, 8), path, opset_version=13,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


def torch_amax(calib):
    """max |d| over the calibration data (d: the second Concat's output, whose
    group the MatMul's first input is)."""
    import torch
    net = build_net(True)
    with torch.no_grad():
        x = torch.from_numpy(calib)
        a = torch.relu(net.c1(x))
        b = net.c2(x) * 3.0
        s = torch.sigmoid(net.c3(x))
        m = torch.softmax(net.c5(x), 1)
        seen = [a, b, s, m]
    return max(float(v.abs().max()) for v in seen)


def data():
    rng = np.random.default_rng(30)
    calib = rng.standard_normal((32, 3, 8, 8)).astype(np.float32)
    x = rng.standard_normal((64, 3, 8, 8)).astype(np.float32)
    np.save(work("calib.npy"), calib)
    return calib, x


def qdq_facts(path):
    """Per value name: (scale, zero point) of the Q that writes it / the DQ
    that reads it back; the graph's nodes; its producers."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}
    return m, inits, producer


def dq_qparams(inits, producer, value):
    """(scale, zero point) of the DequantizeLinear producing `value`."""
    n = producer.get(value)
    check(n is not None and n.op_type == "DequantizeLinear", "%s is not read through a DequantizeLinear" % value)
    return float(inits[n.input[1]]), int(inits[n.input[2]])


def q_qparams(m, inits, value):
    """(scale, zero point) of the QuantizeLinear reading `value`."""
    qs = [n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == value]
    check(len(qs) == 1, "%s is not quantized by one QuantizeLinear (%d)" % (value, len(qs)))
    return float(inits[qs[0].input[1]]), int(inits[qs[0].input[2]])


def source_op(producer, v):
    """The op whose output reaches v through Q -> DQ."""
    return producer[producer[producer[v].input[0]].input[0]].op_type


def quantize(model, out, target):
    rep = out + ".json"
    qfcli.run_qfold(ARGS.qfold, ["quantize", model, "-o", out, "--calib", work("calib.npy"), "--target", target,
                                 "--report", rep], timeout=600)
    with open(rep) as f:
        return json.load(f)


def case_qparams():
    import quantize_test as qt
    qt.ARGS = ARGS
    model = work("nq.onnx")
    refcache.call(torch_export, True, model, base=ARGS.work)
    calib, x = data()
    out = work("nq_neutron.onnx")
    rep = quantize(model, out, "neutron")
    check(rep["counts"]["left_float"] == 0, "left in float: %r" % rep["left_float"])
    m, inits, producer = qdq_facts(out)
    by_op = {}
    for n in m.graph.node:
        by_op.setdefault(n.op_type, []).append(n)
    check(all(len(by_op.get(op, [])) == k for op, k in (("Softmax", 1), ("Sigmoid", 1), ("Tanh", 1), ("Concat", 1),
                                                         ("MatMul", 1))), "ops: %r" % {k: len(v) for k, v in by_op.items()})
    # fixed output qparams, exactly
    for op, want in (("Softmax", (1 / 256, -128)), ("Sigmoid", (1 / 256, -128)), ("Tanh", (1 / 128, 0))):
        got = q_qparams(m, inits, by_op[op][0].output[0])
        check(got == want, "%s output qparams %r, want %r" % (op, got, want))
    # Concats: the observed inputs at the output's qparams, the Sigmoid input at its own
    for n in by_op["Concat"]:
        y = q_qparams(m, inits, n.output[0])
        for v in n.input:
            got = dq_qparams(inits, producer, v)
            fixed_in = source_op(producer, v) in ("Sigmoid", "Softmax")
            want = (1 / 256, -128) if fixed_in else y
            check(got == want, "Concat %s input %s: qparams %r, want %r (output %r)" % (n.name, v, got, want, y))
    # MatMul: both inputs zero point 0; the observed one per-tensor symmetric
    # over the union of the concatenated ranges (min/max: max|x| / 127)
    mm = by_op["MatMul"][0]
    (sa, za), (sb, zb) = (dq_qparams(inits, producer, v) for v in mm.input[:2])
    check(za == 0 and zb == 0, "MatMul input zero points %d, %d (want 0, 0)" % (za, zb))
    check(sb == 1 / 128, "MatMul second input (the Tanh's): scale %r, want 1/128" % sb)
    want = float(np.float32(torch_amax(calib)) / np.float32(127.0))
    check(abs(sa - want) <= 1e-4 * want, "MatMul first input: scale %.9g, want max|x| / 127 = %.9g" % (sa, want))
    print("neutron: fixed qparams exact, Concat inputs = outputs, MatMul inputs zp 0 (scale %.6g, union %.6g)"
          % (sa, want))
    # qfold and ONNX Runtime on the file (quantize_test's measure)
    qt.lsb_agreement(out, x, 0.999, 1)
    # generic: the first Concat's second input keeps its own qparams
    out_g = work("nq_generic.onnx")
    quantize(model, out_g, "generic")
    m, inits, producer = qdq_facts(out_g)
    cat = [n for n in m.graph.node if n.op_type == "Concat"]
    check(len(cat) == 1 and len(cat[0].input) == 4, "generic: the Concat of s, a, b, m not found")
    y = q_qparams(m, inits, cat[0].output[0])
    a, b = (dq_qparams(inits, producer, v) for v in cat[0].input[1:3])
    check(y == (1 / 256, -128) and a != b, "generic: Concat output %r (want the Sigmoid's), a %r, b %r (want apart)"
          % (y, a, b))


def case_tflite():
    import armnn_test as at
    at.ARGS = ARGS
    model = work("nq_tfl.onnx")
    refcache.call(torch_export, False, model, base=ARGS.work)
    calib, x = data()
    out = work("nq_tfl_neutron.onnx")
    rep = quantize(model, out, "neutron")
    check(rep["counts"]["left_float"] == 0, "left in float: %r" % rep["left_float"])
    m, inits, producer = qdq_facts(out)
    fixed = {"Sigmoid", "Tanh", "Softmax"}
    for n in m.graph.node:
        if n.op_type == "Concat":
            y = q_qparams(m, inits, n.output[0])
            observed = [v for v in n.input if source_op(producer, v) not in fixed]
            check(len(observed) >= 2 and all(dq_qparams(inits, producer, v) == y for v in observed),
                  "Concat %s: observed inputs apart from the output" % n.name)
    # ArmNN (each op within 1 LSB, checked) flips ~3 % of the CONCATENATION's
    # outputs (its requantized Sigmoid / Tanh / Softmax inputs) and of the
    # MEAN's by 1 LSB; the 28-wide FULLY_CONNECTED sums them into ~40 % of its
    # 6 logits (measured: max 4 LSB, mean 0.57 LSB, 1 top-1 flip in 64). The
    # whole-model bounds are ArmNN's; TFLite 2.2 is held to bit-exact (every
    # op alone and the whole model) whatever they are.
    r = at.export_and_check(out, x, work("calib.npy"), whole_lsb=(6, 1.0), min_top1=0.95)
    ops = sorted({o["op"] for o in r["ops"]})
    print("exported ops: %s" % ", ".join(ops))


if __name__ == "__main__":
    sys.exit(qfcli.main("neutron_qparams", globals(), paths=("--root", "--work", "--schema-py")))
