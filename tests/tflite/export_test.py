#!/usr/bin/python3
"""Tests of `qfold export` and of the .tflite outputs of `quantize`
(registered by tests/tflite/tflite.cmake).

    export_test.py --qfold BIN --root DIR --work DIR --reader DIR CASE

The models are built here with PyTorch and quantized by qfold; the written
files are read back with the Python reader flatc generates from the vendored
schema (--reader: the build tree's gen/tflite_py), independent of the C++
writer. This is a smoke check of the structure (identifier, version, opcode
fields, layouts, quantized dimensions, zero-point vectors, bias scales,
alignment, names); the thorough structural checker and ArmNN's numeric check
are tests of their own.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from qfcli import Skip, check, error_line, run_qfold  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

ARGS = None  # set by qfcli.main

CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV, TRANSPOSE, RESHAPE = 3, 4, 9, 67, 39, 22
QUANTIZE = 114
INT8, INT32 = 9, 2


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv, expect=0):
    return run_qfold(ARGS.qfold, argv, expect=expect, timeout=300)


def export_torch(net, shape, path):
    import torch
    torch.manual_seed(0)
    net.eval()
    torch.onnx.export(net, torch.zeros(*shape), path, opset_version=13, training=torch.onnx.TrainingMode.PRESERVE,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


def export_model(name, shape, path):
    """Model NAME (models() or "outer") exported to PATH, through
    tests/ref/refcache.py (computed once per `make test`; a hit imports no
    torch)."""
    refcache.call(torch_export, name, list(shape), path, base=ARGS.work)


def torch_export(name, shape, path):
    import torch
    torch.manual_seed(0)  # the weights: one draw, whatever the case
    net = net_outer() if name == "outer" else {n: m for n, m, _ in models()}[name]
    export_torch(net, shape, path)


def model_shapes():
    """(name, input shape) of models(), without torch."""
    return [("convbn", (1, 3, 12, 12)), ("residual", (1, 3, 8, 8))]


def calib(shape, n=16):
    path = work("calib_%s.npy" % "x".join(map(str, shape)))
    np.save(path, np.random.default_rng(1).standard_normal((n,) + tuple(shape[1:])).astype(np.float32))
    return path


def models():
    """(name, module, input shape): the quantizer's test CNN kinds."""
    import torch
    import torch.nn as nn

    class ConvBn(nn.Module):  # Conv+BN, depthwise (stride 2), GAP, Linear+BN
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.dw, self.b2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.BatchNorm2d(8)
            self.pw = nn.Conv2d(8, 12, 1)
            self.fc, self.b3 = nn.Linear(12, 16), nn.BatchNorm1d(16)
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            a = torch.relu(self.b1(self.c1(x)))
            a = nn.functional.relu6(self.b2(self.dw(a)))
            a = torch.relu(self.pw(a))
            g = torch.flatten(nn.functional.adaptive_avg_pool2d(a, 1), 1)
            return self.head(torch.relu(self.b3(self.fc(g))))

    class Residual(nn.Module):  # residual Add, Concat, ConvTranspose, pools, a flatten of 2x2 spatial
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
            self.c3 = nn.Conv2d(14, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 2 * 2, 10)

        def forward(self, x):
            a = torch.relu(self.c1(x))
            a = a + torch.relu(self.c2(a))
            u = torch.relu(self.up(torch.relu(self.down(a))))
            d = torch.relu(self.c3(torch.cat([a, u], 1)))
            p = nn.functional.max_pool2d(nn.functional.avg_pool2d(d, 2), 2)
            return self.fc(torch.flatten(p, 1))

    cb = ConvBn()
    with torch.no_grad():  # random statistics: a fresh BN is the identity and hides every fold bug
        for bn in (cb.b1, cb.b2, cb.b3):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return [(n, m, s) for (n, s), m in zip(model_shapes(), (cb, Residual()))]


def net_outer():
    """A MatMul of two activations (TFLite's BATCH_MATMUL, not in the op set)."""
    import torch.nn as nn

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            g = self.c(x).mean((2, 3))
            return (g.unsqueeze(2) @ g.unsqueeze(1)).flatten(1)

    return Outer()


def reader():
    sys.path.insert(0, ARGS.reader)
    from tflite.Model import Model
    return Model


def load(path):
    buf = open(path, "rb").read()
    return buf, reader().GetRootAs(buf, 0)


def tensors(sg):
    return [sg.Tensors(i) for i in range(sg.TensorsLength())]


def check_structure(path, onnx_names, float_io):
    """The smoke check of one file; returns (model, ops as builtin codes)."""
    buf, m = load(path)
    check(buf[4:8] == b"TFL3", "%s: identifier %r" % (path, buf[4:8]))
    check(m.Version() == 3, "version %d" % m.Version())
    check(b"qfold" in m.Description(), "description %r" % m.Description())
    codes = []
    for i in range(m.OperatorCodesLength()):
        c = m.OperatorCodes(i)
        check(c.DeprecatedBuiltinCode() == min(c.BuiltinCode(), 127), "opcode fields %d / %d"
              % (c.DeprecatedBuiltinCode(), c.BuiltinCode()))
        codes.append(c.BuiltinCode())
    check(m.Buffers(0).DataLength() == 0, "buffer 0 is not empty")
    for i in range(m.BuffersLength()):
        b = m.Buffers(i)
        if b.DataLength():
            off = b._tab.Vector(b._tab.Offset(4))
            check(off % 16 == 0, "buffer %d data at offset %d, not 16-byte aligned" % (i, off))
    check(m.SubgraphsLength() == 1, "subgraphs")
    sg = m.Subgraphs(0)
    ts = tensors(sg)
    ops = [sg.Operators(i) for i in range(sg.OperatorsLength())]
    op_codes = [codes[o.OpcodeIndex()] for o in ops]
    for t in ts:
        q = t.Quantization()
        if t.Type() == INT8 and t.Buffer() == 0:
            check(q is not None and q.ScaleLength() == 1 and q.ZeroPointLength() == 1,
                  "int8 activation %s: not per tensor" % t.Name())
        if q is not None and q.ScaleLength():
            check(q.ZeroPointLength() == q.ScaleLength(), "%s: %d zero points for %d scales"
                  % (t.Name(), q.ZeroPointLength(), q.ScaleLength()))
    for o, code in zip(ops, op_codes):
        ins = o.InputsAsNumpy()
        if code in (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED):
            x, w, b = ts[ins[0]], ts[ins[1]], ts[ins[2]]
            wq, bq, xq = w.Quantization(), b.Quantization(), x.Quantization()
            check(w.Type() == INT8 and b.Type() == INT32, "weight / bias types")
            check(not wq.ZeroPointAsNumpy().any(), "%s: weights not symmetric" % w.Name())
            if code == CONV_2D:
                check(wq.QuantizedDimension() == 0 and w.ShapeAsNumpy()[3] == x.ShapeAsNumpy()[3],
                      "%s: CONV_2D weight not OHWI per channel on 0" % w.Name())
            if code == DEPTHWISE_CONV_2D:
                check(wq.QuantizedDimension() == 3 and w.ShapeAsNumpy()[0] == 1, "%s: not 1HWO on 3" % w.Name())
            if code == FULLY_CONNECTED:
                check(wq.ScaleLength() == 1, "%s: per-channel FULLY_CONNECTED" % w.Name())
            want = (xq.ScaleAsNumpy()[0] * wq.ScaleAsNumpy()).astype(np.float32)
            check(np.allclose(bq.ScaleAsNumpy(), want, rtol=1e-6), "%s: bias scale is not s_in * s_w" % b.Name())
    # names: every int8 activation made by an op carries an ONNX value name,
    # except the few tensors the export adds (suffixes below)
    added = ("_nchw", "_nobias", "_padded", "_fixed", "_requant", "_1x1")
    for t in ts:
        name = t.Name().decode()
        if t.Buffer() == 0 and not name.endswith(added):
            check(name in onnx_names, "tensor %r is not an ONNX value name" % name)
    io_type = 0 if float_io else INT8
    for i in list(sg.InputsAsNumpy()) + list(sg.OutputsAsNumpy()):
        check(ts[i].Type() == io_type, "boundary tensor %s type %d" % (ts[i].Name(), ts[i].Type()))
    return m, op_codes


def onnx_value_names(path):
    import onnx
    g = onnx.load(path).graph
    return {v for n in g.node for v in list(n.input) + list(n.output)} | {i.name for i in g.input}


# --- cases ---------------------------------------------------------------------------

def case_cnn():
    """The test CNNs quantized (neutron: per-tensor Linear weights), exported,
    read back; the report's totals and per-op fields; --all-outputs."""
    for name, shape in model_shapes():
        src, q = work(name + ".onnx"), work(name + "_q.onnx")
        export_model(name, shape, src)
        qfold("quantize", src, "-o", q, "--calib", calib(shape), "--target", "neutron")
        names = onnx_value_names(q)
        for float_io in (False, True):
            out, rep = work(name + ".tflite"), work(name + ".json")
            _, _, err = qfold("export", q, "-o", out, "--report", rep, *(["--float-io"] if float_io else []))
            check("tflite: " in err and "peak activations" in err, "summary:\n" + err)
            _, codes = check_structure(out, names, float_io)
            with open(rep) as f:
                r = json.load(f)
            check(r["totals"]["model_bytes"] == os.path.getsize(out), "model_bytes")
            check(len(r["ops"]) == len(codes), "report ops %d, file %d" % (len(r["ops"]), len(codes)))
            check(r["totals"]["macs"] == sum(o["macs"] for o in r["ops"]) > 0, "macs")
            check(0 < r["totals"]["peak_activation_bytes"] <= r["totals"]["activation_bytes_no_reuse"], "arena")
            check(all(o["max_lsb"] is None for o in r["ops"]), "max_lsb set without a measurement")
            check(all(len(s) == 4 for o in r["ops"] if o["op"] == "CONV_2D" for s in o["inputs"] + o["outputs"]),
                  "conv shapes")
        if name == "convbn":
            check(codes.count(CONV_2D) == 2 and codes.count(DEPTHWISE_CONV_2D) == 1
                  and codes.count(FULLY_CONNECTED) == 2, "convbn ops %r" % codes)
            # NHWC once: a flatten of 1x1 spatial needs no TRANSPOSE
            check(TRANSPOSE not in codes, "a TRANSPOSE in %r" % codes)
        else:
            check(TRANSPOSE_CONV in codes, "residual ops %r" % codes)
            # the one TRANSPOSE: before the flatten of 2x2 spatial data, then its RESHAPE
            check(codes.count(TRANSPOSE) == 1 and codes[codes.index(TRANSPOSE) + 1] == RESHAPE,
                  "residual ops %r" % codes)
        # --all-outputs (debug): every int8 activation an output
        dbg = work(name + "_all.tflite")
        qfold("export", q, "-o", dbg, "--all-outputs")
        _, m = load(dbg)
        sg = m.Subgraphs(0)
        check(sg.OutputsLength() >= sg.OperatorsLength(), "--all-outputs: %d outputs for %d ops"
              % (sg.OutputsLength(), sg.OperatorsLength()))


def case_generic_linear():
    """--target generic: per-channel Linear weights. Each Gemm is exported as
    RESHAPE -> CONV_2D 1x1 (per channel on 0) -> RESHAPE, not as a per-channel
    FULLY_CONNECTED (which ArmNN's parser aborts on); the numbers on both
    runtimes are tests/tflite/armnn_test.py's generic_linear."""
    name, shape = model_shapes()[0]
    src, q, out = work("convbn.onnx"), work("generic.onnx"), work("generic.tflite")
    export_model(name, shape, src)
    qfold("quantize", src, "-o", q, "--calib", calib(shape), "--target", "generic")
    qfold("export", q, "-o", out)
    m, codes = check_structure(out, onnx_value_names(q), False)
    check(FULLY_CONNECTED not in codes, "a FULLY_CONNECTED in %r" % codes)
    # c1, pw, and the two Linear layers (fc, head) as 1x1 convolutions
    check(codes.count(CONV_2D) == 4 and codes.count(DEPTHWISE_CONV_2D) == 1, "generic ops %r" % codes)
    sg = m.Subgraphs(0)
    ts = tensors(sg)
    lin = 0
    for i, code in enumerate(codes):
        o = sg.Operators(i)
        if code != CONV_2D or ts[o.InputsAsNumpy()[1]].ShapeAsNumpy()[1:3].tolist() != [1, 1]:
            continue
        x = ts[o.InputsAsNumpy()[0]]
        if not x.Name().decode().endswith("_1x1"):
            continue
        lin += 1
        w = ts[o.InputsAsNumpy()[1]]
        check(w.Quantization().ScaleLength() == w.ShapeAsNumpy()[0] > 1, "%s: not per channel" % w.Name())
        check(codes[i - 1] == RESHAPE and codes[i + 1] == RESHAPE, "Linear %d: no RESHAPE around it: %r" % (lin, codes))
        check(x.ShapeAsNumpy()[1:3].tolist() == [1, 1], "Linear input shape %r" % x.ShapeAsNumpy())
    check(lin == 2, "%d Linear layers as 1x1 CONV_2D, want 2: %r" % (lin, codes))


def case_refusals():
    """Exit 2, one line naming the node and the reason, nothing written."""
    name, shape = model_shapes()[0]
    src = work("convbn.onnx")
    export_model(name, shape, src)

    def refused(model, *needles):
        out = work("refused.tflite")
        _, _, err = qfold("export", model, "-o", out, "--report", work("refused.json"), expect=2)
        error_line(err, *needles)
        check(not os.path.exists(out) and not os.path.exists(work("refused.json")), "something was written")
        check(not [f for f in os.listdir(ARGS.work) if "qfold-tmp" in f], "a temporary file was left")

    # a float model: its first op reads the float input
    refused(src, "node '/c1/Conv' (Conv)", "not an int8 QDQ model")

    # a MatMul of two activations (TFLite's BATCH_MATMUL, not in the op set)
    src2, q2 = work("outer.onnx"), work("outer_q.onnx")
    export_model("outer", (1, 3, 4, 4), src2)
    qfold("quantize", src2, "-o", q2, "--calib", calib((1, 3, 4, 4)))
    refused(q2, "(MatMul)", "BATCH_MATMUL")


def _requant_model(path, s1, s2, op=None):
    """x -> Q(s1) -> DQ -> [op] -> Q(s2) -> DQ -> y, int8, zero points 0: an
    int8 -> int8 requantization with no op (op None) or around a Flatten."""
    import onnx
    from onnx import TensorProto, helper
    c = lambda n, v, t=TensorProto.FLOAT: helper.make_tensor(n, t, [], [v])  # noqa: E731
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"])]
    mid = "d1"
    if op:
        nodes.append(helper.make_node(op, ["d1"], ["f"]))
        mid = "f"
    nodes += [helper.make_node("QuantizeLinear", [mid, "s2", "z"], ["q2"]),
              helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"])]
    g = helper.make_graph(nodes, "requant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16] if op else [1, 4, 2, 2])],
                          [c("s1", s1), c("s2", s2), c("z", 0, TensorProto.INT8)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def case_requant():
    """An int8 -> int8 requantization (PyTorch's nn.Dropout / nn.Flatten with
    a fake-quant of their own): QUANTIZE where TFLite's fixed point equals the
    float DQ -> Q on every int8 input (scale 1 -> 0.5: a doubling), refused
    naming the qparams where it does not (1 -> 2: q = 1 is a tie, which
    QuantizeLinear rounds to even, TFLite away from zero)."""
    for op in (None, "Flatten"):
        ok, bad = work("requant_ok.onnx"), work("requant_bad.onnx")
        _requant_model(ok, 1.0, 0.5, op)
        _requant_model(bad, 1.0, 2.0, op)
        out = work("requant.tflite")
        _, _, err = qfold("export", ok, "-o", out)
        m, codes = check_structure(out, onnx_value_names(ok), False)
        check(QUANTIZE in codes, "%s: no QUANTIZE in %r" % (op, codes))
        _, _, err = qfold("export", bad, "-o", out + "2", expect=2)
        error_line(err, "scale 1, zero point 0 to 2, 0", "rounds apart")
        check(not os.path.exists(out + "2"), "something was written")


def case_tflite_out():
    """`quantize -o X.tflite` writes the model `export` writes from the ONNX
    file (the same operators and tensor shapes); --verify needs an ONNX output."""
    name, shape = model_shapes()[0]
    src = work(name + ".onnx")
    export_model(name, shape, src)
    c = calib(shape)
    direct, q, exported = work("direct.tflite"), work("q.onnx"), work("exported.tflite")
    _, _, err = qfold("quantize", src, "-o", direct, "--calib", c)
    check("tflite: " in err, "no TFLite summary:\n" + err)
    qfold("quantize", src, "-o", q, "--calib", c)
    qfold("export", q, "-o", exported)
    shapes = []
    for path in (direct, exported):
        _, m = load(path)
        sg = m.Subgraphs(0)
        ops = [m.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode() for i in range(sg.OperatorsLength())]
        shapes.append((ops, sorted(tuple(t.ShapeAsNumpy()) if t.ShapeLength() else () for t in tensors(sg))))
    check(shapes[0] == shapes[1], "quantize -o .tflite and export differ:\n%r\n%r" % tuple(shapes))
    _, _, err = qfold("quantize", src, "-o", work("v.tflite"), "--calib", c, "--verify", expect=2)
    error_line(err, "--verify")


def maxpool_export(relu, ceil, pad, side, path):
    """A Conv [-> Relu] -> MaxPool2d(3, 2, pad, ceil_mode) -> Conv network
    exported to PATH (refcache's PyTorch side)."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    c1, c2, pool = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1), nn.MaxPool2d(3, 2, pad, ceil_mode=ceil)
    net = nn.Sequential(c1, nn.ReLU(), pool, c2) if relu else nn.Sequential(c1, pool, c2)
    export_torch(net, (1, 3, side, side), path)


def case_maxpool_pads():
    """MaxPool2d with pads TFLite's SAME cannot express (ResNet's stem:
    3x3, stride 2, pads 1) and ceil_mode (GoogLeNet): a pad by the int8
    minimum (PAD when the zero point is -128, after a Relu; PADV2 of -128
    otherwise) then a VALID MAX_POOL_2D, bit-exact with `qfold run` on
    TensorFlow Lite 2.2 (ArmNN 20.08 pads with 0 and has no PADV2)."""
    import subprocess
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref", "tflite_run.py")
    PAD, PADV2, MAX_POOL = 34, 60, 17
    for relu, ceil, pad, side, want in ((True, False, 1, 32, PAD), (False, False, 1, 32, PADV2),
                                        (True, True, 1, 16, PAD), (False, True, 1, 16, PADV2)):
        tag = "r%d_c%d_p%d_s%d" % (relu, ceil, pad, side)
        src, q, t = work(tag + ".onnx"), work(tag + "_q.onnx"), work(tag + ".tflite")
        refcache.call(maxpool_export, relu, ceil, pad, side, src, base=ARGS.work)
        qfold("quantize", src, "-o", q, "--calib", calib((1, 3, side, side)))
        qfold("export", q, "-o", t)
        buf, m = load(t)
        sg = m.Subgraphs(0)
        ops = [m.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode() for i in range(sg.OperatorsLength())]
        check(want in ops and MAX_POOL in ops, "%s: ops %r, want %d before MAX_POOL_2D" % (tag, ops, want))
        x = np.random.default_rng(4).standard_normal((8, 3, side, side)).astype(np.float32)
        np.save(work("x.npy"), x)
        run_qfold(ARGS.qfold, ["run", q, "-i", work("x.npy"), "-o", work("yq.npy")], expect=0,
                  env=dict(os.environ, QFOLD_ENGINE="ref"))
        yq = np.load(work("yq.npy"))
        ti, to = sg.Tensors(sg.Inputs(0)), sg.Tensors(sg.Outputs(0))
        si, zi = ti.Quantization().Scale(0), ti.Quantization().ZeroPoint(0)
        so, zo = to.Quantization().Scale(0), to.Quantization().ZeroPoint(0)
        xq = np.clip(np.rint(x / si) + zi, -128, 127).astype(np.int8).transpose(0, 2, 3, 1).copy()
        np.save(work("xq.npy"), xq)
        p = subprocess.run(["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable, runner, t,
                            work("xq.npy"), work("o.npz")], capture_output=True, text=True, timeout=300)
        if p.returncode == 4:
            raise Skip("TFLite 2.2's library is missing (scripts/deps.sh installs it)")
        check(p.returncode == 0, "%s: TFLite 2.2 refused it:\n%s" % (tag, p.stderr[-1500:]))
        with np.load(work("o.npz")) as z:
            yt = z[z.files[0]].transpose(0, 3, 1, 2).astype(np.float64)
        d = np.abs((yt - zo) * so - yq) / so
        check(d.max() <= 1e-3, "%s: TFLite 2.2 differs from qfold's int8 run by %.2f LSB" % (tag, d.max()))


if __name__ == "__main__":
    import qfcli
    sys.exit(qfcli.main("tflite_export", globals(), paths=("--root", "--work", "--reader")))
