#!/usr/bin/python3
"""QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger: qfold against ONNX Runtime.

    qlinear_ort.py --qfold QFOLD --node NODE --ort-js ORT_RUN_JS --work DIR CASE

CASE is `conv` or `matmul`. Each builds random one-node models (python3-onnx,
weights and qparams as initializers, activations as graph inputs), runs them
with `qfold run` and with ONNX Runtime (tests/ref/ort_run.js), and requires the
outputs to be EXACTLY equal.

ONNX Runtime requantizes as MlasRequantizeOutput does: the combined scale
x_scale * w_scale / y_scale is formed in float32 (left to right), the int32
accumulator is converted to float32 and multiplied by it in float32, the
result is rounded half to even and the zero point added with saturation.
Each case also counts the elements where that differs from the same formula
in float64 (the ONNX definition read literally) to show the cases are
sensitive to the difference.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NP2ONNX = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32,
           np.float32: TensorProto.FLOAT}
RANGE = {np.int8: (-128, 127), np.uint8: (0, 255)}


def rand_q(rng, dt, shape):
    lo, hi = RANGE[dt]
    return rng.integers(lo, hi + 1, size=shape).astype(dt)


def conv_acc(x, w, xzp, wzp, group, strides, pads, dilations):
    """int64 accumulators of a grouped N-D conv of (x - xzp) and (w - wzp), numpy."""
    x = x.astype(np.int64) - int(xzp)
    wzp = np.asarray(wzp, dtype=np.int64).reshape(-1)
    w = w.astype(np.int64) - (wzp.reshape((-1,) + (1,) * (w.ndim - 1)) if wzp.size > 1 else int(wzp[0]))
    rank = x.ndim - 2
    pad_width = [(0, 0), (0, 0)] + [(pads[i], pads[i + rank]) for i in range(rank)]
    xp = np.pad(x, pad_width)
    n, c = x.shape[:2]
    m = w.shape[0]
    ks = w.shape[2:]
    out = [(xp.shape[2 + i] - dilations[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(rank)]
    cg, mg = c // group, m // group
    y = np.zeros((n, m) + tuple(out), dtype=np.int64)
    for kidx in np.ndindex(*ks):
        sl = tuple(slice(kidx[i] * dilations[i], kidx[i] * dilations[i] + strides[i] * (out[i] - 1) + 1, strides[i])
                   for i in range(rank))
        patch = xp[(slice(None), slice(None)) + sl]  # n, c, out...
        for g in range(group):
            wg = w[g * mg:(g + 1) * mg, :, ][(slice(None), slice(None)) + kidx]  # mg, cg
            pg = patch[:, g * cg:(g + 1) * cg]
            y[:, g * mg:(g + 1) * mg] += np.einsum("mc,nc...->nm...", wg, pg)
    return y


def requant(acc, xs, ws, ys, yzp, dt, axis_shape, f64=False):
    lo, hi = RANGE[dt]
    ws = np.asarray(ws, dtype=np.float32).reshape(axis_shape) if np.size(ws) > 1 else np.float32(ws)
    if f64:
        v = acc.astype(np.float64) * (np.float64(xs) * np.asarray(ws, np.float64) / np.float64(ys))
    else:
        s = (np.float32(xs) * np.asarray(ws, np.float32)).astype(np.float32) / np.float32(ys)
        v = acc.astype(np.float32) * s.astype(np.float32)
    return np.clip(np.round(v) + int(yzp), lo, hi).astype(dt)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def save_model(path, node, inputs, output, inits):
    graph = helper.make_graph([node], "g", inputs, [output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, path)


def run_both(args, name, model, feeds, expect_dtype):
    d = os.path.join(args.work, name)
    os.makedirs(d, exist_ok=True)
    paths = []
    for j, a in enumerate(feeds):
        p = os.path.join(d, f"in{j}.npy")
        np.save(p, a)
        paths.append(p)
    q_out = os.path.join(d, "qfold.npy")
    cmd = [args.qfold, "run", model]
    for p in paths:
        cmd += ["-i", p]
    cmd += ["-o", q_out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: qfold run failed: {r.stderr.strip()}")
    r = subprocess.run([args.node, args.ort_js, model, d] + paths, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: onnxruntime failed: {r.stderr.strip()}")
    got, ref = np.load(q_out), np.load(os.path.join(d, "out0.npy"))
    if got.dtype != ref.dtype or got.shape != ref.shape or got.dtype != expect_dtype:
        raise RuntimeError(f"{name}: qfold gives {got.dtype}{got.shape}, onnxruntime {ref.dtype}{ref.shape}")
    return got, ref


def report(name, got, ref, extra=""):
    bad = int(np.count_nonzero(got != ref))
    diff = int(np.max(np.abs(got.astype(np.int64) - ref.astype(np.int64)))) if got.size else 0
    status = "ok" if bad == 0 else "FAIL"
    print(f"{status} {name}: {got.size} elements, {bad} differ (max {diff}){extra}")
    return bad == 0


def pick_y_scale(acc, xs, ws_max):
    """A y_scale that puts most outputs in range with a few saturating."""
    sd = float(np.std(acc)) if acc.size else 1.0
    return np.float32(max(sd, 1.0) * float(xs) * float(ws_max) / 45.0)


# (name, x dtype, w dtype, x shape, w shape, group, strides, pads, dilations, per-channel, bias)
CONV_CASES = [
    ("conv_u8s8_pad_bias", np.uint8, np.int8, (2, 8, 11, 13), (16, 8, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1), False, True),
    ("conv_s8s8_stride2_perch", np.int8, np.int8, (1, 16, 15, 15), (24, 16, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1), True, True),
    ("conv_u8u8_groups", np.uint8, np.uint8, (1, 12, 9, 10), (18, 4, 3, 3), 3, (1, 1), (0, 1, 2, 1), (1, 1), False, False),
    ("conv_s8s8_depthwise_perch", np.int8, np.int8, (2, 32, 14, 14), (32, 1, 3, 3), 32, (1, 1), (1, 1, 1, 1), (1, 1), True, True),
    ("conv_u8s8_depthwise_stride2", np.uint8, np.int8, (1, 24, 17, 17), (48, 1, 5, 5), 24, (2, 2), (2, 2, 2, 2), (1, 1), True, True),
    ("conv_u8s8_dilated", np.uint8, np.int8, (1, 6, 16, 16), (8, 6, 3, 3), 1, (1, 1), (2, 2, 2, 2), (2, 2), True, False),
    ("conv_s8s8_pointwise", np.int8, np.int8, (1, 64, 7, 7), (32, 64, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1), True, True),
    ("conv1d_u8s8", np.uint8, np.int8, (2, 4, 30), (6, 4, 5), 1, (2,), (1, 2), (1,), True, True),
    ("conv3d_s8s8", np.int8, np.int8, (1, 3, 5, 6, 7), (4, 3, 3, 3, 3), 1, (1, 2, 1), (1, 1, 0, 1, 1, 0), (1, 1, 1), False, True),
    ("conv_u8s8_big_k", np.uint8, np.int8, (1, 128, 8, 8), (16, 128, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1), True, True),
]


def conv_cases(args, rng):
    ok = True
    for (name, xdt, wdt, xsh, wsh, group, strides, pads, dil, perch, with_bias) in CONV_CASES:
        m = wsh[0]
        x = rand_q(rng, xdt, xsh)
        w = rand_q(rng, wdt, wsh)
        xs = np.float32(rng.uniform(0.005, 0.05))
        xzp = xdt(rng.integers(100, 156)) if xdt == np.uint8 else xdt(rng.integers(-20, 21))
        ws = rng.uniform(0.001, 0.02, size=m if perch else 1).astype(np.float32)
        # onnxruntime takes per-channel zero points that are all equal.
        wzp = np.full(ws.shape, 120 if wdt == np.uint8 else 0, dtype=wdt)
        acc = conv_acc(x, w, xzp, wzp, group, strides, pads, dil)
        bias = rng.integers(-3000, 3000, size=m).astype(np.int32) if with_bias else None
        if bias is not None:
            acc = acc + bias.reshape((1, m) + (1,) * (acc.ndim - 2))
        ys = pick_y_scale(acc, xs, ws.max())
        ydt = xdt
        yzp = ydt(rng.integers(110, 146)) if ydt == np.uint8 else ydt(rng.integers(-10, 11))
        ws_arg = ws if perch else ws.reshape(())
        wzp_arg = wzp if perch else wzp.reshape(())
        inits = [init("x_scale", xs), init("x_zero_point", np.array(xzp, dtype=xdt)), init("w", w),
                 init("w_scale", ws_arg), init("w_zero_point", wzp_arg), init("y_scale", ys),
                 init("y_zero_point", np.array(yzp, dtype=ydt))]
        ins = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point"]
        if bias is not None:
            inits.append(init("B", bias))
            ins.append("B")
        out_shape = list(acc.shape)
        node = helper.make_node("QLinearConv", ins, ["y"], name=name, group=group, strides=list(strides),
                                pads=list(pads), dilations=list(dil), kernel_shape=list(wsh[2:]))
        path = os.path.join(args.work, name + ".onnx")
        save_model(path, node, [helper.make_tensor_value_info("x", NP2ONNX[xdt], list(xsh))],
                   helper.make_tensor_value_info("y", NP2ONNX[ydt], out_shape), inits)
        got, ref = run_both(args, name, path, [x], ydt)
        axis = (1, m) + (1,) * (acc.ndim - 2)
        mine32 = requant(acc, xs, ws_arg, ys, yzp, ydt, axis)
        mine64 = requant(acc, xs, ws_arg, ys, yzp, ydt, axis, f64=True)
        extra = (f"; numpy float32 formula vs onnxruntime: {int(np.count_nonzero(mine32 != ref))} differ, "
                 f"float64 formula: {int(np.count_nonzero(mine64 != ref))} differ")
        ok &= report(name, got, ref, extra)

    ok &= conv_ties(args, rng)

    # ConvInteger (onnxruntime: uint8 activations and weights).
    name = "convinteger_u8u8"
    x = rand_q(rng, np.uint8, (2, 6, 9, 9))
    w = rand_q(rng, np.uint8, (10, 3, 3, 3))
    want = conv_acc(x, w, 131, 117, 2, (2, 1), (1, 0, 1, 2), (1, 1)).astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "x_zero_point", "w_zero_point"], ["y"], name=name, group=2,
                            strides=[2, 1], pads=[1, 0, 1, 2])
    path = os.path.join(args.work, name + ".onnx")
    save_model(path, node, [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 6, 9, 9])],
               helper.make_tensor_value_info("y", TensorProto.INT32, list(want.shape)),
               [init("w", w), init("x_zero_point", np.array(131, np.uint8)), init("w_zero_point", np.array(117, np.uint8))])
    got, ref = run_both(args, name, path, [x], np.int32)
    ok &= report(name, got, ref, f"; numpy: {int(np.count_nonzero(want != ref))} differ")
    return ok


def tie_scales(rng, count):
    """x_scale, y_scale and `count` weight scales whose real combined scale
    x_scale * w_scale / y_scale lies a few float32 ulps around 1/2: with small
    odd accumulators the products land next to .5, where rounding the combined
    scale in float32 or in float64 decides the result."""
    xs = np.float32(rng.uniform(0.01, 0.05))
    ys = np.float32(rng.uniform(0.001, 0.01))
    base = np.float32(0.5 * float(ys) / float(xs))
    k = np.arange(count) % 9 - 4
    ws = (base * (1.0 + k * 2.0 ** -23)).astype(np.float32)
    return xs, ws, ys


def conv_ties(args, rng):
    name = "conv_s8s8_ties_perch"
    m = 36
    x = rng.integers(-8, 9, size=(2, 4, 12, 12)).astype(np.int8)
    w = rng.integers(-3, 4, size=(m, 4, 1, 2)).astype(np.int8)
    xs, ws, ys = tie_scales(rng, m)
    wzp = np.zeros(m, np.int8)
    acc = conv_acc(x, w, 0, wzp, 1, (1, 1), (0, 0, 0, 1), (1, 1))
    inits = [init("x_scale", xs), init("x_zero_point", np.array(0, np.int8)), init("w", w), init("w_scale", ws),
             init("w_zero_point", wzp), init("y_scale", ys), init("y_zero_point", np.array(3, np.int8))]
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                            "y_scale", "y_zero_point"], ["y"], name=name, pads=[0, 0, 0, 1])
    path = os.path.join(args.work, name + ".onnx")
    save_model(path, node, [helper.make_tensor_value_info("x", TensorProto.INT8, list(x.shape))],
               helper.make_tensor_value_info("y", TensorProto.INT8, list(acc.shape)), inits)
    got, ref = run_both(args, name, path, [x], np.int8)
    axis = (1, m, 1, 1)
    mine32 = requant(acc, xs, ws, ys, 3, np.int8, axis)
    mine64 = requant(acc, xs, ws, ys, 3, np.int8, axis, f64=True)
    extra = (f"; numpy float32 formula vs onnxruntime: {int(np.count_nonzero(mine32 != ref))} differ, "
             f"float64 formula: {int(np.count_nonzero(mine64 != ref))} differ")
    good = report(name, got, ref, extra)
    if np.count_nonzero(mine64 != ref) == 0:
        print(f"FAIL {name}: the case does not separate float32 from float64 requantization")
        good = False
    return good


def matmul_ties(args, rng):
    name = "mm_s8s8_ties_percol"
    n = 45
    a = rng.integers(-8, 9, size=(30, 4)).astype(np.int8)
    b = rng.integers(-3, 4, size=(4, n)).astype(np.int8)
    as_, bs, ys = tie_scales(rng, n)
    bzp = np.zeros(n, np.int8)
    acc = np.matmul(a.astype(np.int64), b.astype(np.int64))
    inits = [init("a_scale", as_), init("a_zero_point", np.array(0, np.int8)), init("b", b), init("b_scale", bs),
             init("b_zero_point", bzp), init("y_scale", ys), init("y_zero_point", np.array(-2, np.int8))]
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                                              "y_scale", "y_zero_point"], ["y"], name=name)
    path = os.path.join(args.work, name + ".onnx")
    save_model(path, node, [helper.make_tensor_value_info("a", TensorProto.INT8, list(a.shape))],
               helper.make_tensor_value_info("y", TensorProto.INT8, list(acc.shape)), inits)
    got, ref = run_both(args, name, path, [a], np.int8)
    mine32 = requant(acc, as_, bs, ys, -2, np.int8, (-1,))
    mine64 = requant(acc, as_, bs, ys, -2, np.int8, (-1,), f64=True)
    extra = (f"; numpy float32 formula vs onnxruntime: {int(np.count_nonzero(mine32 != ref))} differ, "
             f"float64 formula: {int(np.count_nonzero(mine64 != ref))} differ")
    good = report(name, got, ref, extra)
    if np.count_nonzero(mine64 != ref) == 0:
        print(f"FAIL {name}: the case does not separate float32 from float64 requantization")
        good = False
    return good


# (name, a dtype, b dtype, a shape, b shape, per-column b)
MM_CASES = [
    ("mm_u8s8_2d", np.uint8, np.int8, (37, 64), (64, 29), False),
    ("mm_u8u8_2d_percol", np.uint8, np.uint8, (16, 100), (100, 24), True),
    ("mm_s8s8_batched_shared_b", np.int8, np.int8, (3, 10, 48), (48, 20), True),
    ("mm_s8s8_batched_broadcast", np.int8, np.int8, (2, 1, 7, 33), (3, 33, 9), False),
    ("mm_u8s8_large", np.uint8, np.int8, (64, 512), (512, 96), True),
]


def matmul_cases(args, rng):
    ok = True
    for (name, adt, bdt, ash, bsh, percol) in MM_CASES:
        n = bsh[-1]
        a = rand_q(rng, adt, ash)
        b = rand_q(rng, bdt, bsh)
        as_ = np.float32(rng.uniform(0.005, 0.05))
        azp = adt(rng.integers(100, 156)) if adt == np.uint8 else adt(rng.integers(-20, 21))
        bs = rng.uniform(0.001, 0.02, size=n if percol else 1).astype(np.float32)
        bzp = np.full(bs.shape, 125 if bdt == np.uint8 else 0, dtype=bdt)
        acc = np.matmul(a.astype(np.int64) - int(azp), b.astype(np.int64) - bzp.astype(np.int64).reshape(-1))
        ys = pick_y_scale(acc, as_, bs.max())
        ydt = adt
        yzp = ydt(rng.integers(110, 146)) if ydt == np.uint8 else ydt(rng.integers(-10, 11))
        bs_arg = bs if percol else bs.reshape(())
        bzp_arg = bzp if percol else bzp.reshape(())
        inits = [init("a_scale", as_), init("a_zero_point", np.array(azp, dtype=adt)), init("b", b),
                 init("b_scale", bs_arg), init("b_zero_point", bzp_arg), init("y_scale", ys),
                 init("y_zero_point", np.array(yzp, dtype=ydt))]
        node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                                                  "y_scale", "y_zero_point"], ["y"], name=name)
        path = os.path.join(args.work, name + ".onnx")
        save_model(path, node, [helper.make_tensor_value_info("a", NP2ONNX[adt], list(ash))],
                   helper.make_tensor_value_info("y", NP2ONNX[ydt], list(acc.shape)), inits)
        got, ref = run_both(args, name, path, [a], ydt)
        mine32 = requant(acc, as_, bs_arg, ys, yzp, ydt, (-1,) if percol else ())
        mine64 = requant(acc, as_, bs_arg, ys, yzp, ydt, (-1,) if percol else (), f64=True)
        extra = (f"; numpy float32 formula vs onnxruntime: {int(np.count_nonzero(mine32 != ref))} differ, "
                 f"float64 formula: {int(np.count_nonzero(mine64 != ref))} differ")
        ok &= report(name, got, ref, extra)
    ok &= matmul_ties(args, rng)

    # MatMulInteger with a per-column b zero point.
    name = "matmulinteger_u8u8"
    a = rand_q(rng, np.uint8, (2, 5, 40))
    b = rand_q(rng, np.uint8, (40, 11))
    bzp = rng.integers(0, 256, size=11).astype(np.uint8)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zero_point", "b_zero_point"], ["y"], name=name)
    path = os.path.join(args.work, name + ".onnx")
    save_model(path, node, [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 5, 40])],
               helper.make_tensor_value_info("y", TensorProto.INT32, [2, 5, 11]),
               [init("b", b), init("a_zero_point", np.array(140, np.uint8)), init("b_zero_point", bzp)])
    got, ref = run_both(args, name, path, [a], np.int32)
    want = np.matmul(a.astype(np.int64) - 140, b.astype(np.int64) - bzp.astype(np.int64)).astype(np.int32)
    ok &= report(name, got, ref, f"; numpy: {int(np.count_nonzero(want != ref))} differ")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qfold", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--ort-js", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("case", choices=["conv", "matmul"])
    args = ap.parse_args()
    args.work = os.path.join(args.work, args.case)
    os.makedirs(args.work, exist_ok=True)
    rng = np.random.default_rng(20261130 if args.case == "conv" else 7)
    ok = conv_cases(args, rng) if args.case == "conv" else matmul_cases(args, rng)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
