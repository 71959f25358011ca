#!/usr/bin/python3
"""Models at opsets 7..21 through qfold (issue 7, item 1).

    opsets_test.py QFOLD NODE ORT_RUN_JS WORKDIR CASE

CASE:
  torch9, torch11, torch13, torch17  a small CNN (Conv + BN twice, ReLU6 / clamp
      -> Clip, F.pad -> Pad, split -> Split, mean -> ReduceMean, slicing -> Slice,
      unsqueeze / squeeze, Linear -> Gemm, softmax) exported by PyTorch 1.13 at
      that opset, BN kept (TrainingMode.PRESERVE). Checked: `qfold run` against
      PyTorch; `qfold fuse` folds both BNs, writes the model's own opset, the
      onnx checker (full_check) passes and ONNX Runtime gives PyTorch's outputs;
      `qfold quantize` writes opset >= 13 (every op in 13's form: the checker
      passes and ORT runs it).
  hand11_softmax  opset 11 Softmax on a 4-D input along axis 1 (2-D coercion,
      not opset 13's single axis), axis 3 and the default: run and fuse vs ORT;
      quantized (opset raised to 13) vs the float model in ORT.
  hand18 .. hand21  built with onnx.helper at that opset (ReduceMean with an
      axes input, Split with num_outputs (uneven), Pad with axes, Squeeze /
      Unsqueeze with axes inputs, Clip, BN after Conv); onnx 1.12's checker
      does not know these opsets, ORT 1.30 does: `qfold run` and the fused
      model vs ORT on the original, fused opset unchanged, BN folded.
  bad_spatial  BatchNormalization-7 with spatial = 0: refused, exit 2, the
      node named, nothing written.
  bad_opset6, bad_opset22  opsets outside 7..21: refused, exit 2.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

QFOLD, NODE, ORT_JS, WORK, CASE = sys.argv[1:6]
WORK = os.path.join(WORK, CASE)
os.makedirs(WORK, exist_ok=True)
TOL = 1e-4


def work(name):
    return os.path.join(WORK, name)


def fail(msg):
    print(f"{CASE}: FAIL: {msg}")
    sys.exit(1)


def run(cmd, expect=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != expect:
        fail(f"{' '.join(cmd)}: exit {p.returncode} (want {expect})\n{p.stdout}{p.stderr}")
    return p


def save_npy(name, a):
    path = work(name)
    np.save(path, a)
    return path


def qfold_run(model, inputs, nout):
    ins = [save_npy(f"in{j}.npy", a) for j, a in enumerate(inputs)]
    outs = [work(f"qf_out{j}.npy") for j in range(nout)]
    cmd = [QFOLD, "run", model]
    for p in ins:
        cmd += ["-i", p]
    for p in outs:
        cmd += ["-o", p]
    run(cmd)
    return [np.load(p) for p in outs]


def ort_run(model, inputs, nout):
    ins = [save_npy(f"ort_in{j}.npy", a) for j, a in enumerate(inputs)]
    odir = work("ort_" + os.path.basename(model))
    os.makedirs(odir, exist_ok=True)
    run([NODE, ORT_JS, model, odir] + ins)
    return [np.load(os.path.join(odir, f"out{j}.npy")) for j in range(nout)]


def close(name, got, want):
    for j, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape:
            fail(f"{name}: output {j} shape {a.shape}, want {b.shape}")
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        scale = max(1e-6, float(np.max(np.abs(b)))) if b.size else 1.0
        if err / scale > TOL:
            fail(f"{name}: output {j} differs by {err:g} (scale {scale:g})")
        print(f"{CASE}: {name}: output {j} max |diff| {err:.3g}")


def default_opset(m):
    return [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]


def fuse(model, check, nbn_before):
    out = work("fused.onnx")
    run([QFOLD, "fuse", model, "-o", out])
    m0, m1 = onnx.load(model), onnx.load(out)
    if sum(n.op_type == "BatchNormalization" for n in m0.graph.node) != nbn_before:
        fail(f"the model has not {nbn_before} BatchNormalization nodes")
    left = sum(n.op_type == "BatchNormalization" for n in m1.graph.node)
    if left:
        fail(f"fuse left {left} BatchNormalization nodes")
    if default_opset(m1) != default_opset(m0):
        fail(f"fuse wrote opset {default_opset(m1)}, the model has {default_opset(m0)}")
    if check:
        onnx.checker.check_model(m1, full_check=True)
    return out


# --- PyTorch models -------------------------------------------------------------


def torch_export(opset, model):
    """The case's network exported at OPSET to MODEL; returns its input and
    outputs (numpy). Called through tests/ref/refcache.py: computed once per
    `make test`, the second pass imports no torch."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(opset)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.b1 = nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 8, 3)
            self.b2 = nn.BatchNorm2d(8)
            self.fc = nn.Linear(5, 4)

        def forward(self, x):
            y = F.relu6(self.b1(self.c1(x)))
            y = F.pad(y, (1, 1, 2, 0))
            y = self.b2(self.c2(y))
            a, b = torch.split(y, [3, 5], dim=1)
            a = torch.clamp(a, -0.5, 0.5)
            m = b.mean(dim=(2, 3))
            s = a[:, :, 1:5, 2:7]
            u = m.unsqueeze(1).squeeze(1)
            p = F.softmax(self.fc(u), dim=-1)
            return p, s

    net = Net()
    # A fresh BN is the identity (REFERENCES.md): randomize it.
    for bn in (net.b1, net.b2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    net.eval()
    x = torch.randn(2, 3, 8, 10)
    with torch.no_grad():
        want = [t.numpy() for t in net(x)]
    torch.onnx.export(net, x, model, opset_version=opset, training=torch.onnx.TrainingMode.PRESERVE,
                      input_names=["x"], output_names=["p", "s"])
    return x.numpy(), want


def torch_case(opset):
    model = work("model.onnx")
    x, want = refcache.call(torch_export, opset, model, base=WORK)
    m = onnx.load(model)
    ops = sorted({n.op_type for n in m.graph.node})
    print(f"{CASE}: opset {default_opset(m)}, ops {' '.join(ops)}")
    xs = [x]
    close("qfold run vs torch", qfold_run(model, xs, 2), want)
    fused = fuse(model, True, 2)
    close("fused in ORT vs torch", ort_run(fused, xs, 2), want)
    close("fused in qfold vs torch", qfold_run(fused, xs, 2), want)
    # The quantizer raises the opset to 13 (per-channel QDQ): every op must
    # then be in opset 13's form.
    calib = save_npy("calib.npy", np.random.default_rng(opset).standard_normal((8, 3, 8, 10), np.float32))
    quant = work("quant.onnx")
    run([QFOLD, "quantize", model, "-o", quant, "--calib", calib])
    mq = onnx.load(quant)
    if default_opset(mq) != max(13, opset):
        fail(f"quantize wrote opset {default_opset(mq)}, want {max(13, opset)}")
    if mq.ir_version < 7:
        fail(f"quantize wrote IR version {mq.ir_version} with opset {default_opset(mq)} (13 needs 7)")
    onnx.checker.check_model(mq, full_check=True)
    got = ort_run(quant, xs, 2)
    for j, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or not np.all(np.isfinite(a)):
            fail(f"quantized model in ORT: output {j} shape {a.shape}, want {b.shape}")
    print(f"{CASE}: quantized model: opset {default_opset(mq)}, checker and ORT pass")


# --- hand-made models -----------------------------------------------------------


def init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def make(nodes, inits, inputs, outputs, opset):
    g = helper.make_graph(nodes, "opsets", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="opsets_test")
    m.ir_version = 10 if opset >= 21 else 9 if opset >= 19 else 8
    path = work("model.onnx")
    onnx.save(m, path)
    return path


def vi(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def hand_new(opset):
    rng = np.random.default_rng(opset)
    f32 = np.float32
    w = rng.standard_normal((7, 3, 3, 3)).astype(f32) * 0.3
    inits = [
        init("w", w), init("cb", rng.standard_normal(7).astype(f32)),
        init("g", rng.uniform(0.5, 1.5, 7).astype(f32)), init("b", rng.uniform(-0.5, 0.5, 7).astype(f32)),
        init("mu", rng.uniform(-0.5, 0.5, 7).astype(f32)), init("var", rng.uniform(0.5, 2, 7).astype(f32)),
        init("pads", np.array([1, 2, 0, 1], np.int64)), init("pad_axes", np.array([2, 3], np.int64)),
        init("red_axes", np.array([2, 3], np.int64)), init("sq_axes", np.array([3], np.int64)),
        init("lo", np.array(-0.7, f32)), init("hi", np.array(0.9, f32)),
        init("us_axes", np.array([1], np.int64)), init("none_axes", np.zeros(0, np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["bn"], name="bn", epsilon=1e-3),
        helper.make_node("Clip", ["bn", "lo", "hi"], ["cl"], name="clip"),
        helper.make_node("Pad", ["cl", "pads", "", "pad_axes"], ["pd"], name="pad"),
        # 7 channels into 3 parts: 3, 3, 1 (the last one smaller)
        helper.make_node("Split", ["pd"], ["s0", "s1", "s2"], name="split", axis=1, num_outputs=3),
        helper.make_node("ReduceMean", ["s0", "red_axes"], ["rm"], name="rmean", keepdims=1),
        helper.make_node("Squeeze", ["rm", "sq_axes"], ["sq"], name="squeeze"),
        helper.make_node("Unsqueeze", ["sq", "us_axes"], ["us"], name="unsqueeze"),
        # noop_with_empty_axes with no axes: the identity
        helper.make_node("ReduceMean", ["s1", "none_axes"], ["nop"], name="rnoop", noop_with_empty_axes=1),
        helper.make_node("ReduceMean", ["s2"], ["all"], name="rall", keepdims=0),
    ]
    outputs = [vi("us", None), vi("nop", None), vi("all", None), vi("s2", None)]
    model = make(nodes, inits, [vi("x", [2, 3, 7, 5])], outputs, opset)
    xs = [rng.standard_normal((2, 3, 7, 5)).astype(f32)]
    want = ort_run(model, xs, 4)
    close("qfold run vs ORT", qfold_run(model, xs, 4), want)
    fused = fuse(model, False, 1)
    close("fused in ORT vs ORT", ort_run(fused, xs, 4), want)


def hand11_softmax():
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Softmax", ["x"], ["y1"], name="sm_axis1", axis=1),
        helper.make_node("Softmax", ["x"], ["y3"], name="sm_axis3", axis=3),
        helper.make_node("Softmax", ["x"], ["yd"], name="sm_default"),
    ]
    model = make(nodes, [], [vi("x", [2, 3, 4, 5])], [vi("y1", [2, 3, 4, 5]), vi("y3", [2, 3, 4, 5]),
                                                      vi("yd", [2, 3, 4, 5])], 11)
    xs = [rng.standard_normal((2, 3, 4, 5)).astype(np.float32)]
    want = ort_run(model, xs, 3)
    close("qfold run vs ORT", qfold_run(model, xs, 3), want)
    out = work("fused.onnx")
    run([QFOLD, "fuse", model, "-o", out])
    m1 = onnx.load(out)
    if default_opset(m1) != 11:
        fail(f"fuse wrote opset {default_opset(m1)}")
    onnx.checker.check_model(m1, full_check=True)
    close("fused in ORT vs ORT", ort_run(out, xs, 3), want)
    # quantize raises the opset to 13, where Softmax normalises one axis:
    # the 2-D coercion of axis 1 must then be written out (Flatten -> Softmax
    # -> Reshape), not silently become softmax along axis 1.
    calib = save_npy("calib.npy", rng.standard_normal((8, 3, 4, 5)).astype(np.float32))
    quant = work("quant.onnx")
    run([QFOLD, "quantize", model, "-o", quant, "--calib", calib])
    mq = onnx.load(quant)
    if default_opset(mq) != 13:
        fail(f"quantize wrote opset {default_opset(mq)}, want 13")
    onnx.checker.check_model(mq, full_check=True)
    got = ort_run(quant, xs, 3)
    for j, (a, b) in enumerate(zip(got, want)):
        err = float(np.max(np.abs(a - b)))
        if a.shape != b.shape or err > 0.05:
            fail(f"quantized model in ORT: output {j} differs by {err:g} from the float model")
        print(f"{CASE}: quantized model in ORT: output {j} max |diff| {err:.3g} (int8)")


def refused(model, needle):
    out = work("out.onnx")
    p = run([QFOLD, "fuse", model, "-o", out], expect=2)
    msg = p.stderr.strip()
    if needle not in msg or len(msg.splitlines()) != 1:
        fail(f"message {msg!r} does not name {needle!r} in one line")
    if os.path.exists(out):
        fail("a refused model wrote an output")
    print(f"{CASE}: refused: {msg}")


def bad_spatial():
    c = np.ones(2, np.float32)
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="bn_elem", spatial=0)]
    inits = [init(n, c) for n in ("g", "b", "m", "v")]
    refused(make(nodes, inits, [vi("x", [1, 2, 3])], [vi("y", [1, 2, 3])], 7), "bn_elem")


def bad_opset(v):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    refused(make(nodes, [], [vi("x", [1, 2])], [vi("y", [1, 2])], v), f"opset {v}")


def main():
    if CASE.startswith("torch"):
        torch_case(int(CASE[5:]))
    elif CASE == "hand11_softmax":
        hand11_softmax()
    elif CASE.startswith("hand"):
        hand_new(int(CASE[4:]))
    elif CASE == "bad_spatial":
        bad_spatial()
    elif CASE.startswith("bad_opset"):
        bad_opset(int(CASE[9:]))
    else:
        fail("unknown case")
    print(f"{CASE}: ok")


if __name__ == "__main__":
    main()
