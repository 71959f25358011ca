#!/usr/bin/python3
"""float16 / bfloat16 models (registered by tests/io/half.cmake).

    half_test.py --qfold BIN --node NODE --ort-run ORT_RUN.js --work DIR CASE

Models are built with onnx.helper from a float32 one by casting every
initializer and the graph's inputs and outputs (nothing else inserted).
References: ONNX Runtime's own float16 run; for bfloat16, which ORT's CPU
provider cannot run, numpy in float32 on the bfloat16 values, and torch's
bfloat16 rounding (through tests/ref/refcache.py: computed once per `make
test`; torch is imported on a miss only).
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import check, error_line  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

ARGS = None
F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT


def work(*p):
    return os.path.join(ARGS.work, *p)


def qfold(*argv, expect=0):
    _, out, err = qfcli.run_qfold(ARGS.qfold, argv, expect=expect, timeout=60)
    return out, err


def ort(model, inputs, tag):
    d = work(tag + ".ort")
    os.makedirs(d, exist_ok=True)
    p = subprocess.run([ARGS.node, ARGS.ort_run, model, d] + inputs, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "ORT failed on %s:\n%s" % (model, p.stderr))
    return np.load(os.path.join(d, "out0.npy"))


def rel(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a - b))) / max(1e-6, float(np.max(np.abs(b))))


def close(a, b, what, tol):
    check(a.shape == b.shape, "%s: shapes %s and %s" % (what, a.shape, b.shape))
    d = rel(a, b)
    check(d <= tol, "%s: relative difference %.3g > %g" % (what, d, tol))


def bf16(a):
    """float32 values rounded to bfloat16 (torch's rounding), as float32."""
    return refcache.call(bf16_torch, np.ascontiguousarray(a, dtype=np.float32))


def bf16_torch(a):
    import torch
    return torch.from_numpy(a).bfloat16().float().numpy()


def bf16_tensor(a, name):
    """A BFLOAT16 TensorProto (raw_data: the upper 16 bits of the rounded float32)."""
    bits = (bf16(a).view(np.uint32) >> 16).astype(np.uint16)
    t = helper.make_tensor(name, BF16, a.shape, bits.tobytes(), raw=True)
    return t


WEIGHTS = None


def weights():
    g = np.random.default_rng(0)

    def f(*s, lo=-1.0, hi=1.0):
        return g.uniform(lo, hi, s).astype(np.float32)
    return {"w1": f(8, 3, 3, 3), "b1": f(8), "s1": f(8, lo=0.5, hi=2), "t1": f(8), "m1": f(8),
            "v1": f(8, lo=0.5, hi=2), "w2": f(4, 8, 3, 3), "s2": f(4, lo=0.5, hi=2), "t2": f(4), "m2": f(4),
            "v2": f(4, lo=0.5, hi=2)}


NODES = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c1", "s1", "t1", "m1", "v1"], ["n1"], name="bn1", epsilon=1e-3),
    helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
    helper.make_node("BatchNormalization", ["c2", "s2", "t2", "m2", "v2"], ["y"], name="bn2"),
]


def cnn(dtype):
    """The Conv-BN CNN with every initializer and the I/O in `dtype`."""
    w = weights()
    if dtype == F16:
        inits = [numpy_helper.from_array(v.astype(np.float16), k) for k, v in w.items()]
    elif dtype == BF16:
        inits = [bf16_tensor(v, k) for k, v in w.items()]
    else:
        inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    g = helper.make_graph(NODES, "half", [helper.make_tensor_value_info("x", dtype, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", dtype, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def x16():
    p = work("x16.npy")
    np.save(p, np.random.default_rng(5).standard_normal((1, 3, 10, 10)).astype(np.float16))
    return p


def initializer_types(path):
    m = onnx.load(path)
    return {t.name: t.data_type for t in m.graph.initializer}, m


def ref_numpy(w, x):
    """The CNN in float64 from the given weights (no rounding)."""
    return refcache.call(ref_torch, w, x)


def ref_torch(w, x):
    import torch
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in w.items()}
    y = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), t["w1"], t["b1"], padding=1)
    y = torch.nn.functional.batch_norm(y, t["m1"], t["v1"], t["s1"], t["t1"], eps=1e-3)
    y = torch.relu(y)
    y = torch.nn.functional.conv2d(y, t["w2"])
    y = torch.nn.functional.batch_norm(y, t["m2"], t["v2"], t["s2"], t["t2"], eps=1e-5)
    return y.numpy()


# --- cases ----------------------------------------------------------------------


def case_fp16_cnn():
    """An fp16 CNN with BatchNorm: qfold run vs ORT's fp16 run; the folded
    model keeps float16 everywhere (weights folded in float32, rounded once),
    has no BatchNorm, and runs in ORT like the original."""
    src, x = work("h.onnx"), x16()
    onnx.save(cnn(F16), src)
    want = ort(src, [x], "orig")
    check(want.dtype == np.float16, "ORT gave %s" % want.dtype)
    y = work("y.npy")
    out, _ = qfold("run", src, "-i", x, "-o", y)
    check("y: float16 [1, 4, 8, 8]" in out, "run printed %r" % out)
    got = np.load(y)
    check(got.dtype == np.float16, "qfold run wrote %s, not float16" % got.dtype)
    close(got, want, "qfold run vs ORT (fp16)", 1e-2)
    fused = work("hf.onnx")
    qfold("fuse", src, "-o", fused)
    types, m = initializer_types(fused)
    onnx.checker.check_model(m)
    check(all(t == F16 for t in types.values()), "fused initializers not all float16: %s" % types)
    check(m.graph.input[0].type.tensor_type.elem_type == F16 and m.graph.output[0].type.tensor_type.elem_type == F16,
          "fused model's I/O is not float16")
    check(not [n for n in m.graph.node if n.op_type in ("BatchNormalization", "Cast")],
          "fused model has %s" % [n.op_type for n in m.graph.node])
    check(os.path.getsize(fused) < os.path.getsize(src), "the folded fp16 model grew")
    close(ort(fused, [x], "fused"), want, "ORT on the folded model vs ORT on the original", 1e-2)
    y2 = work("y2.npy")
    qfold("run", fused, "-i", x, "-o", y2)
    close(np.load(y2), want, "qfold run on the folded model vs ORT on the original", 1e-2)
    # --verify's default tolerance allows for the weights' rounding to fp16;
    # inspect names the model's dtypes.
    out, _ = qfold("fuse", src, "-o", work("hv.onnx"), "--verify")
    check("(tolerance 0.01) ok" in out, "fuse --verify printed %r" % out)
    out, _ = qfold("inspect", src)
    check("x  float16 [1, 3, 10, 10]" in out and "y  float16 [1, 4, 8, 8]" in out, "inspect printed %r" % out)
    # The folded weight is w * gamma / sqrt(var + eps) in float32, rounded once to fp16.
    w = {k: v.astype(np.float16).astype(np.float64) for k, v in weights().items()}
    s = w["s1"] / np.sqrt(w["v1"] + np.float64(np.float32(1e-3)))
    want_w = (w["w1"] * s[:, None, None, None]).astype(np.float32).astype(np.float16)
    got_w = numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "w1"))
    ulp = np.abs(got_w.view(np.int16).astype(np.int32) - want_w.view(np.int16).astype(np.int32))
    check(int(ulp.max()) <= 1, "folded w1 differs from the fp16 rounding of the float32 fold by %d ULP" % ulp.max())


def case_fp16_shared_weight():
    """One fp16 weight read by two Conv+BN: each fold copies it (tied weights
    keep their value for the other reader), and the copies stay float16 (a
    float32 copy would not type-check next to float16 data)."""
    w = weights()
    inits = [numpy_helper.from_array(w[k].astype(np.float16), k) for k in ("w1", "b1", "s1", "t1", "m1", "v1")]
    inits += [numpy_helper.from_array((w[k][:8] * 0.5 + 1).astype(np.float16), k + "b") for k in ("s1", "v1")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s1", "t1", "m1", "v1"], ["n1"], name="bn1"),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "s1b", "t1", "m1", "v1b"], ["n2"], name="bn2"),
        helper.make_node("Add", ["n1", "n2"], ["y"], name="add"),
    ]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", F16, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", F16, [1, 8, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    src, fused, x = work("sh.onnx"), work("shf.onnx"), x16()
    onnx.save(m, src)
    qfold("fuse", src, "-o", fused)
    types, fm = initializer_types(fused)
    onnx.checker.check_model(fm, full_check=True)
    check(not [n for n in fm.graph.node if n.op_type == "BatchNormalization"], "a BatchNorm was not folded")
    check(all(t == F16 for t in types.values()), "fused initializers not all float16: %s" % types)
    close(ort(fused, [x], "shf"), ort(src, [x], "sh"), "ORT on the folded model vs the original", 1e-2)
    # The float32 model with the shared weight as float16 behind a Cast: both
    # folded copies stay float16 behind their Casts (the model keeps its size).
    cast = helper.make_node("Cast", ["w1_h"], ["w1"], name="w1_cast", to=F32)
    inits = [numpy_helper.from_array(w["w1"].astype(np.float16), "w1_h")] + [
        numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name) for t in inits[1:]]
    g = helper.make_graph([cast] + nodes, "shared_cast", [helper.make_tensor_value_info("x", F32, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", F32, [1, 8, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    src, fused, x32 = work("shc.onnx"), work("shcf.onnx"), work("x32.npy")
    onnx.save(m, src)
    np.save(x32, np.load(x).astype(np.float32))
    qfold("fuse", src, "-o", fused)
    types, fm = initializer_types(fused)
    onnx.checker.check_model(fm, full_check=True)
    conv_w = [n.input[1] for n in fm.graph.node if n.op_type == "Conv"]
    casts = {n.output[0]: n.input[0] for n in fm.graph.node if n.op_type == "Cast"}
    check(len(conv_w) == 2 and all(c in casts and types.get(casts[c]) == F16 for c in conv_w),
          "the folded conv weights are not float16 behind Casts: %s, %s" % (conv_w, types))
    close(ort(fused, [x32], "shcf"), ort(src, [x32], "shc"), "ORT on the folded Cast model vs the original", 1e-2)


def case_fp16_constant_of_shape():
    """An fp16 model whose ConstantOfShape fills with a float16 value added to
    float16 data: import folds the chain into a constant (qfold runs static
    shapes), which the folded model writes in float16 (a float32 one would
    not type-check)."""
    w = weights()
    inits = [numpy_helper.from_array(w[k].astype(np.float16), k) for k in ("w1", "b1", "s1", "t1", "m1", "v1")]
    fill = helper.make_tensor("fill", F16, [1], np.array([0.5], np.float16).view(np.uint16).tolist())
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s1", "t1", "m1", "v1"], ["n1"], name="bn1"),
        helper.make_node("Shape", ["n1"], ["shp"], name="shape"),
        helper.make_node("ConstantOfShape", ["shp"], ["half"], name="cos", value=fill),
        helper.make_node("Add", ["n1", "half"], ["y"], name="add"),
    ]
    g = helper.make_graph(nodes, "cos", [helper.make_tensor_value_info("x", F16, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", F16, [1, 8, 10, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    src, fused, x = work("cos.onnx"), work("cosf.onnx"), x16()
    onnx.save(m, src)
    qfold("fuse", src, "-o", fused)
    fm = onnx.load(fused)
    onnx.checker.check_model(fm, full_check=True)
    types = {t.name: t.data_type for t in fm.graph.initializer}
    check(all(t == F16 for t in types.values()), "initializers not all float16: %s" % types)
    for n in fm.graph.node:
        for a in n.attribute:
            check(not a.HasField("t") or a.t.data_type != TensorProto.FLOAT,
                  "node %s (%s) holds a float32 tensor attribute" % (n.name, n.op_type))
    close(ort(fused, [x], "cosf"), ort(src, [x], "cos"), "ORT on the folded model vs the original", 1e-2)


def case_fp16_quantize():
    """`qfold quantize` of an fp16 model: an int8 QDQ model with float32 data
    around its int8 tensors (QuantizeLinear takes float16 only from opset 19),
    valid for onnx's checker; ORT and qfold's integer executor agree within
    an LSB of the output scale, and both stay near the fp16 model."""
    src, x = work("h.onnx"), x16()
    onnx.save(cnn(F16), src)
    calib, x32 = work("calib32.npy"), work("x32.npy")
    np.save(calib, np.random.default_rng(3).standard_normal((32, 3, 10, 10)).astype(np.float32))
    np.save(x32, np.load(x).astype(np.float32))
    q = work("q.onnx")
    qfold("quantize", src, "-o", q, "--calib", calib)
    m = onnx.load(q)
    onnx.checker.check_model(m, full_check=True)
    check(m.graph.input[0].type.tensor_type.elem_type == F32 and m.graph.output[0].type.tensor_type.elem_type == F32,
          "the int8 model's I/O is not float32")
    dq = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y"]
    check(len(dq) == 1, "no DequantizeLinear writes y")
    scale = float(numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == dq[0].input[1])))
    got_ort = ort(q, [x32], "q")
    y = work("yq.npy")
    qfold("run", q, "-i", x32, "-o", y)
    d = float(np.abs(np.load(y) - got_ort).max())
    check(d <= 1.01 * scale, "qfold run vs ORT on the int8 model: %.4g (output scale %.4g)" % (d, scale))
    ref = ort(src, [x], "q_ref").astype(np.float32)
    close(got_ort, ref, "int8 model vs the fp16 model", 0.05)


def case_fp16_weights_behind_cast():
    """An fp32 model whose weights are fp16 initializers behind Cast(to=FLOAT)
    (the common export pattern): run vs ORT; the fold goes through the Casts,
    the new weights are written as fp16 behind a Cast again (the model does
    not double in size), and ORT runs the result like the original."""
    w = weights()
    inits, casts = [], []
    for k, v in w.items():
        inits.append(numpy_helper.from_array(v.astype(np.float16), k + "_h"))
        casts.append(helper.make_node("Cast", [k + "_h"], [k], name=k + "_cast", to=F32))
    g = helper.make_graph(casts + NODES, "cast", [helper.make_tensor_value_info("x", F32, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", F32, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    src = work("c.onnx")
    onnx.save(m, src)
    x = work("x.npy")
    np.save(x, np.load(x16()).astype(np.float32))
    want = ort(src, [x], "orig")
    y = work("y.npy")
    qfold("run", src, "-i", x, "-o", y)
    close(np.load(y), want, "qfold run vs ORT (fp16 weights behind Casts)", 1e-5)
    fused = work("cf.onnx")
    qfold("fuse", src, "-o", fused)
    types, fm = initializer_types(fused)
    onnx.checker.check_model(fm)
    check(not [n for n in fm.graph.node if n.op_type == "BatchNormalization"], "a BatchNorm is left")
    conv_w = [n.input[1] for n in fm.graph.node if n.op_type == "Conv"]
    producers = {o: n for n in fm.graph.node for o in n.output}
    for cw in conv_w:
        p = producers.get(cw)
        check(p is not None and p.op_type == "Cast" and types.get(p.input[0]) == F16,
              "conv weight %s is not an fp16 initializer behind a Cast" % cw)
    check(os.path.getsize(fused) < 1.2 * os.path.getsize(src),
          "the fused model is %d bytes, the original %d" % (os.path.getsize(fused), os.path.getsize(src)))
    close(ort(fused, [x], "fused"), want, "ORT on the folded model vs ORT on the original", 1e-2)


def case_bf16_cnn():
    """A bfloat16 CNN (ORT's CPU provider has no bfloat16 Conv): qfold run
    against the same network in float64 on the bfloat16 weights and input,
    rounded to bfloat16; the folded model keeps bfloat16 and still computes
    it."""
    src = work("b.onnx")
    onnx.save(cnn(BF16), src)
    xf = np.random.default_rng(6).standard_normal((1, 3, 10, 10)).astype(np.float32)
    x = work("x.npy")
    np.save(x, xf)  # float32: run rounds it to the model's bfloat16
    w = {k: bf16(v) for k, v in weights().items()}
    want = bf16(ref_numpy(w, bf16(xf)).astype(np.float32))
    y = work("y.npy")
    out, _ = qfold("run", src, "-i", x, "-o", y)
    check("y: bfloat16 [1, 4, 8, 8]" in out, "run printed %r" % out)
    got = np.load(y)
    check(np.array_equal(bf16(got), got), "qfold's output holds values that are not bfloat16")
    close(got, want, "qfold run vs float64 reference (bfloat16)", 1e-2)
    fused = work("bf.onnx")
    qfold("fuse", src, "-o", fused)
    types, m = initializer_types(fused)
    onnx.checker.check_model(m)
    check(all(t == BF16 for t in types.values()), "fused initializers not all bfloat16: %s" % types)
    check(m.graph.output[0].type.tensor_type.elem_type == BF16, "fused output is not bfloat16")
    qfold("run", fused, "-i", x, "-o", y)
    close(np.load(y), want, "qfold run on the folded bfloat16 model vs the reference", 3e-2)


def case_cast_rounding():
    """Cast to float16 / bfloat16 inside a float32 model rounds to nearest
    even exactly as numpy (float16) and torch (bfloat16) do: subnormals,
    ties, overflow to infinity, NaN."""
    g = np.random.default_rng(1)
    vals = np.concatenate([
        g.standard_normal(2000).astype(np.float32) * np.float32(1e3),
        (g.standard_normal(2000) * 1e-6).astype(np.float32),  # fp16 subnormals
        np.array([65504, 65519.99, 65520, 1e6, -1e6, 2.0 ** -25, 2.0 ** -24, 3 * 2.0 ** -26, 1 + 2.0 ** -11,
                  1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 3.4e38, 0.0, -0.0, np.inf, -np.inf],
                 dtype=np.float32)]).reshape(1, -1)
    x = work("x.npy")
    np.save(x, vals)
    for to, ref in ((F16, lambda a: a.astype(np.float16).astype(np.float32)), (BF16, bf16)):
        nodes = [helper.make_node("Cast", ["x"], ["h"], to=to), helper.make_node("Cast", ["h"], ["y"], to=F32)]
        gr = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("x", F32, list(vals.shape))],
                               [helper.make_tensor_value_info("y", F32, list(vals.shape))])
        m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        p = work("cast%d.onnx" % to)
        onnx.save(m, p)
        y = work("y.npy")
        qfold("run", p, "-i", x, "-o", y)
        got, want = np.load(y), ref(vals)
        bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        check(bad.size == 0, "Cast to %s: %d values differ, e.g. %r -> %r (want %r)"
              % ("float16" if to == F16 else "bfloat16", bad.size, vals.flat[bad[:3]], got.flat[bad[:3]],
                 want.flat[bad[:3]]))


def case_bad_half():
    """A float16 initializer whose raw_data does not fit its shape: exit 2
    naming it."""
    m = cnn(F16)
    t = next(t for t in m.graph.initializer if t.name == "b1")
    t.raw_data = t.raw_data[:-2]
    p = work("bad.onnx")
    with open(p, "wb") as f:
        f.write(m.SerializeToString())
    _, err = qfold("run", p, "-i", x16(), "-o", work("y.npy"), expect=2)
    error_line(err, "initializer 'b1'", "float16", "needs 16")


if __name__ == "__main__":
    sys.exit(qfcli.main("half", globals(), paths=("--work",), options=("--node", "--ort-run")))
