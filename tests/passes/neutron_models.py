#!/usr/bin/python3
"""The Neutron-ready passes on PyTorch models and through the commands.

    neutron_models.py QFOLD NODE ORT_RUN_JS WORKDIR CASE

The model (torch, opset 13): Conv -> Relu -> Div(4), a grouped Conv (groups 4,
not depthwise) -> Relu, Cat(Conv 1x1, Conv 3x3) -> Relu, AvgPool -> Div(3),
Linear + a constant [10].

Cases:
  float     `qfold fuse --passes canonicalize,div_to_mul,fuse_linear_add,
            move_act_before_concat --verify`: the report counts (2 Div, 1 Add, 1
            Relu rewritten; the Div by 4 exact, by 3 within 1 ulp), no Div or Add
            left, no Relu reading a Concat, ONNX Runtime on the rewritten file equal
            to torch within 1e-5 relative, `qfold run` before / after within 1e-6.
  quantize  `qfold quantize` (target neutron: the passes on) writes no Div, no
            grouped convolution but depthwise ones, and prints one line per pass;
            `--set neutron-passes=off` keeps them (and `--target generic` prints no
            line); the QDQ passes alone (`qfold fuse --pipeline neutron_qdq`) on the
            passes-off model change no integer: `qfold run` (int8), `qfold run
            --simulate` and ONNX Runtime give bit-identical outputs before and after.
  qat       `qfold qat` (neutron) prints the lines and writes no Div / grouped conv;
            `qfold finalize` of its --keep-qat graph splits with the neutron target
            and not with generic, the two bit-identical (qfold run, ONNX Runtime);
            the passes-off QAT model through neutron_qdq: bit-identical.
  export    `qfold export --target neutron` of a QDQ model with a grouped conv and a
            redundant DQ -> Q pair (onnx.helper): its lines on stderr (1 split, 1
            fold), the TFLite files with and without --target compute the same
            integers (TFLite's interpreter), and an unknown target is a usage error.
"""
import json
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcache  # noqa: E402

QFOLD, NODE, ORT_RUN, WORK, CASE = sys.argv[1:6]
os.makedirs(WORK, exist_ok=True)


def fail(msg):
    print(f"FAIL [{CASE}]: {msg}")
    sys.exit(1)


def run(args, expect=0):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != expect:
        fail(f"{' '.join(args)}: exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def torch_export(path):
    import torch
    import torch.nn as nn

    torch.manual_seed(7)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0 = nn.Conv2d(3, 8, 3, padding=1)
            self.g = nn.Conv2d(8, 12, 3, padding=1, groups=4)
            self.a = nn.Conv2d(12, 6, 1)
            self.b = nn.Conv2d(12, 6, 3, padding=1)
            self.fc = nn.Linear(12 * 4 * 4, 10)
            self.register_buffer("c", torch.linspace(-1, 1, 10))

        def forward(self, x):
            x = torch.relu(self.c0(x)) / 4.0
            x = torch.relu(self.g(x))
            x = torch.relu(torch.cat([self.a(x), self.b(x)], 1))
            x = nn.functional.avg_pool2d(x, 2) / 3.0
            return self.fc(x.flatten(1)) + self.c

    m = M().eval()
    x = torch.randn(64, 3, 8, 8)
    torch.onnx.export(m, x[:1], path, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    with torch.no_grad():
        y = m(x[:8]).numpy()
    return [x.numpy()], [y]


def model():
    path = os.path.join(WORK, "neutron_net.onnx")
    xs, ys = refcache.call(torch_export, path, base=WORK)
    calib = os.path.join(WORK, "calib.npy")
    np.save(calib, xs[0])
    x8 = os.path.join(WORK, "x8.npy")
    np.save(x8, xs[0][:8])
    return path, calib, x8, ys[0]


def ort(path, x):
    out = os.path.join(WORK, os.path.basename(path) + ".ort")
    os.makedirs(out, exist_ok=True)
    run([NODE, ORT_RUN, path, out, x])
    return np.load(os.path.join(out, "out0.npy"))


def qrun(path, x, *flags):
    out = os.path.join(WORK, os.path.basename(path) + ("".join(flags) or ".int8") + ".npy")
    run([QFOLD, "run", path, "-i", x, "-o", out, *flags])
    return np.load(out)


def ops(path):
    return [n.op_type for n in onnx.load(path).graph.node]


def grouped(path):
    """The Conv nodes with 1 < group that are not depthwise."""
    m = onnx.load(path)
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    out = []
    for n in m.graph.node:
        g = next((a.i for a in n.attribute if a.name == "group"), 1)
        if n.op_type != "Conv" or g <= 1:
            continue
        wn = n.input[1]
        if wn in prod and prod[wn].op_type == "DequantizeLinear":
            wn = prod[wn].input[0]
        if wn not in w or w[wn].shape[1] != 1:  # depthwise: one input channel per group
            out.append(n.name)
    return out


def pass_result(rep, name):
    got = [r for r in rep["passes"] if r["pass"] == name]
    if not got:
        fail(f"no {name} in the report")
    return got[0]


def same(name, a, b):
    if a.shape != b.shape or not np.array_equal(a, b):
        d = float(np.max(np.abs(a.astype(np.float64) - b))) if a.shape == b.shape else float("inf")
        fail(f"{name}: not bit-identical (max diff {d:.3g}, shapes {a.shape} {b.shape})")
    print(f"  {name}: bit-identical ({a.size} values)")


def case_float():
    path, _, x8, y = model()
    out = os.path.join(WORK, "float.onnx")
    report = os.path.join(WORK, "float.json")
    p = run([QFOLD, "fuse", path, "-o", out, "--verify", "--report", report, "--passes",
             "canonicalize,div_to_mul,fuse_linear_add,move_act_before_concat"])
    print(p.stdout, end="")
    rep = json.load(open(report))
    for name, want in (("div_to_mul", 2), ("fuse_linear_add", 1), ("move_act_before_concat", 1)):
        r = pass_result(rep, name)
        if r["rewrites"] != want:
            fail(f"{name}: {r['rewrites']} rewrites, want {want} ({r})")
    # 4 and 3: one exact (a power of two), one within 1 ulp
    reasons = [e["reason"] for e in pass_result(rep, "div_to_mul")["rewritten"]]
    if not any("exact" in r for r in reasons) or not any("within 1 ulp" in r for r in reasons):
        fail(f"div_to_mul's lines do not say which is exact: {reasons}")
    o = ops(out)
    if "Div" in o or "Add" in o:
        fail(f"Div / Add left: {o}")
    # the Relu after the Concat moved onto its inputs: no Relu reads a Concat
    m = onnx.load(out)
    prod = {o: n for n in m.graph.node for o in n.output}
    if any(n.op_type == "Relu" and prod.get(n.input[0]) is not None and prod[n.input[0]].op_type == "Concat"
           for n in m.graph.node):
        fail("a Relu still reads the Concat")
    got = ort(out, x8)
    rel = float(np.max(np.abs(got - y))) / float(np.max(np.abs(y)))
    print(f"  ONNX Runtime on the rewritten model vs torch: rel {rel:.3g}")
    if rel > 1e-5:
        fail(f"rewritten model differs from torch: rel {rel:.3g}")
    a, b = qrun(path, x8), qrun(out, x8)
    rel = float(np.max(np.abs(a - b))) / float(np.max(np.abs(a)))
    print(f"  qfold run before vs after: rel {rel:.3g}")
    if rel > 1e-6:
        fail(f"qfold run before / after differ: rel {rel:.3g}")


def case_quantize():
    path, calib, x8, y = model()
    on, off, split = (os.path.join(WORK, f"q_{k}.onnx") for k in ("on", "off", "split"))
    p = run([QFOLD, "quantize", path, "-o", on, "--calib", calib, "--report", on + ".json"])
    print(p.stdout, end="")
    for line in ("neutron     div_to_mul: 2 rewrites", "neutron     fuse_linear_add: 1 rewrite",
                 "neutron     move_act_before_concat: 1 rewrite", "neutron     split_group_conv_qdq: 1 rewrite",
                 "neutron     fold_dq_q: 0 rewrites"):
        if line not in p.stdout:
            fail(f"quantize printed no '{line}'")
    if "Div" in ops(on) or grouped(on):
        fail(f"quantize --target neutron left Div / grouped convs: {grouped(on)} {ops(on)}")
    rep = json.load(open(on + ".json"))
    if rep["quantize_convert"]["pipeline"] != "quantize_convert_neutron":
        fail(f"convert pipeline {rep['quantize_convert']['pipeline']}")
    p = run([QFOLD, "quantize", path, "-o", off, "--calib", calib, "--set", "neutron-passes=off"])
    if "neutron     " in p.stdout:
        fail("neutron-passes=off still ran the passes")
    if not grouped(off):
        fail("the passes-off model has no grouped conv: the comparison below tests nothing")
    p = run([QFOLD, "quantize", path, "-o", os.path.join(WORK, "q_generic.onnx"), "--calib", calib, "--target",
             "generic"])
    if "neutron     " in p.stdout:
        fail("--target generic ran the Neutron passes")
    run([QFOLD, "fuse", off, "-o", split, "--pipeline", "neutron_qdq"])
    if grouped(split):
        fail(f"neutron_qdq left grouped convs: {grouped(split)}")
    same("qfold run (int8) before / after the QDQ passes", qrun(off, x8), qrun(split, x8))
    same("qfold run --simulate before / after", qrun(off, x8, "--simulate"), qrun(split, x8, "--simulate"))
    same("ONNX Runtime before / after", ort(off, x8), ort(split, x8))
    # the model quantize writes runs the same in qfold and ONNX Runtime
    same("quantize's model: ONNX Runtime vs qfold run --simulate", ort(on, x8), qrun(on, x8, "--simulate"))


def qdq_model(path):
    """x -Q-DQ-Q-DQ- (a redundant pair) -> grouped Conv (group 2, int8 per-channel W, int32 b) -> Relu -Q-DQ- y"""
    rng = np.random.default_rng(5)
    wq = rng.integers(-127, 128, (6, 2, 3, 3)).astype(np.int8)
    sw = (0.002 * (1 + np.arange(6))).astype(np.float32)
    sx = np.float32(0.03)
    bq = rng.integers(-2000, 2000, 6).astype(np.int32)
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"),
             numpy_helper.from_array(np.array(5, np.int8), "zx"),
             numpy_helper.from_array(np.array(sx, np.float32), "sx2"),
             numpy_helper.from_array(np.array(5, np.int8), "zx2"),
             numpy_helper.from_array(wq, "Wq"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(np.zeros(6, np.int8), "zw"),
             numpy_helper.from_array(bq, "bq"), numpy_helper.from_array((sx * sw).astype(np.float32), "sb"),
             numpy_helper.from_array(np.array(0.05, np.float32), "sy"),
             numpy_helper.from_array(np.array(-7, np.int8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="xq"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="xd"),
             helper.make_node("QuantizeLinear", ["xd", "sx2", "zx2"], ["xq2"], name="xq2"),
             helper.make_node("DequantizeLinear", ["xq2", "sx2", "zx2"], ["xd2"], name="xd2"),
             helper.make_node("DequantizeLinear", ["Wq", "sw", "zw"], ["W"], name="W", axis=0),
             helper.make_node("DequantizeLinear", ["bq", "sb"], ["b"], name="b", axis=0),
             helper.make_node("Conv", ["xd2", "W", "b"], ["c"], name="conv", group=2, pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"], name="yq"),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="yd")]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6, 7, 7])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def tflite_out(tfl, x):
    out = tfl + ".npz"
    p = subprocess.run([sys.executable, os.path.join(HERE, "..", "ref", "tflite_run.py"), tfl, x, out],
                       capture_output=True, text=True)
    if p.returncode == 4:
        print("SKIP: TFLite's library is missing")
        sys.exit(77)
    if p.returncode != 0:
        fail(f"tflite_run {tfl}: exit {p.returncode}\n{p.stderr}")
    z = np.load(out)
    return z[list(z.keys())[0]]


def case_export():
    path = os.path.join(WORK, "qdq_group.onnx")
    qdq_model(path)
    x = os.path.join(WORK, "xq.npy")
    np.save(x, np.random.default_rng(9).uniform(-3, 3, (4, 4, 7, 7)).astype(np.float32))
    a, b = os.path.join(WORK, "plain.tflite"), os.path.join(WORK, "neutron.tflite")
    run([QFOLD, "export", path, "-o", a, "--float-io"])
    p = run([QFOLD, "export", path, "-o", b, "--float-io", "--target", "neutron"])
    print(p.stderr, end="")
    for line in ("neutron     split_group_conv_qdq: 1 rewrite", "neutron     fold_dq_q: 1 rewrite"):
        if line not in p.stderr:
            fail(f"export --target neutron printed no '{line}'")
    same("TFLite: export vs export --target neutron", tflite_out(a, x), tflite_out(b, x))
    p = run([QFOLD, "export", path, "-o", b, "--target", "nowhere"], expect=2)
    if "unknown --target 'nowhere'" not in p.stderr:
        fail(f"unknown target message: {p.stderr}")
    # the QDQ passes on this model: qfold run and ONNX Runtime unchanged, bit for bit
    split = os.path.join(WORK, "qdq_group.neutron.onnx")
    run([QFOLD, "fuse", path, "-o", split, "--pipeline", "neutron_qdq"])
    if ops(split).count("QuantizeLinear") != 1 + 2 + 1:  # x, the 2 groups' outputs, the output
        fail(f"fold_dq_q / split left {ops(split).count('QuantizeLinear')} QuantizeLinear: {ops(split)}")
    same("qfold run (int8)", qrun(path, x), qrun(split, x))
    same("ONNX Runtime", ort(path, x), ort(split, x))


def case_qat():
    path, calib, x8, _ = model()
    labels = os.path.join(WORK, "labels.npy")
    np.save(labels, (np.arange(64) % 10).astype(np.int64))
    on, off, split, keep = (os.path.join(WORK, f"qat_{k}.onnx") for k in ("on", "off", "split", "keep"))
    common = ["--data", calib, "--labels", labels, "--epochs", "1", "--batch", "16"]
    p = run([QFOLD, "qat", path, "-o", on, "--keep-qat", keep, *common])
    print(p.stdout, end="")
    for line in ("neutron     div_to_mul: 2 rewrites", "neutron     split_group_conv_qdq: 1 rewrite"):
        if line not in p.stdout:
            fail(f"qat printed no '{line}'")
    if "Div" in ops(on) or grouped(on):
        fail(f"qat --target neutron left Div / grouped convs: {grouped(on)}")
    # finalize of the training graph: neutron splits, generic keeps the group;
    # the integers are the same
    fin_n, fin_g = os.path.join(WORK, "fin_neutron.onnx"), os.path.join(WORK, "fin_generic.onnx")
    p = run([QFOLD, "finalize", keep, "-o", fin_n])
    if "neutron     split_group_conv_qdq: 1 rewrite" not in p.stdout:
        fail(f"finalize printed no split line:\n{p.stdout}")
    p = run([QFOLD, "finalize", keep, "-o", fin_g, "--target", "generic"])
    if "neutron     " in p.stdout or not grouped(fin_g) or grouped(fin_n):
        fail(f"finalize --target generic: {p.stdout}; grouped {grouped(fin_g)} / {grouped(fin_n)}")
    same("finalize neutron vs generic, qfold run (int8)", qrun(fin_g, x8), qrun(fin_n, x8))
    same("finalize neutron vs generic, ONNX Runtime", ort(fin_g, x8), ort(fin_n, x8))
    # passes off: the grouped conv stays; the QDQ passes alone change no integer
    p = run([QFOLD, "qat", path, "-o", off, "--set", "neutron-passes=off", *common])
    if "neutron     " in p.stdout or not grouped(off):
        fail("neutron-passes=off: passes ran or no grouped conv left")
    run([QFOLD, "fuse", off, "-o", split, "--pipeline", "neutron_qdq"])
    same("qat model before / after neutron_qdq, qfold run (int8)", qrun(off, x8), qrun(split, x8))


{"float": case_float, "quantize": case_quantize, "export": case_export, "qat": case_qat}[CASE]()
print(f"PASS [{CASE}]")
