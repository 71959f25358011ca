#!/usr/bin/python3
"""Fixtures for tests/exec/test_exec.c: inputs and expected outputs of the layout
and constant ops, computed independently with numpy.

    exec_fixtures.py OUTDIR

Writes OUTDIR/<case>.in<k>.npy (the node's k-th input) and
OUTDIR/<case>.out<j>.npy (its j-th output). The graph (op, attributes, which
inputs are constants) is described on the C side under the same case name.
"""
import os
import sys

import numpy as np

rng = np.random.default_rng(1234)
I64_MAX = np.iinfo(np.int64).max


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ints(dtype, *shape):
    return rng.integers(-100, 100, size=shape).astype(dtype)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def pad_np(x, pads, mode, value=0):
    """ONNX pads [b0, b1, ..., e0, e1, ...] (negative crops) with numpy."""
    r = x.ndim
    crop = tuple(slice(max(0, -pads[a]), x.shape[a] - max(0, -pads[a + r])) for a in range(r))
    x = x[crop]
    width = [(max(0, pads[a]), max(0, pads[a + r])) for a in range(r)]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=value)
    return np.pad(x, width, mode=mode)


def c_order(a):
    """C order (a transposed view is saved in Fortran order); 0-d stays 0-d."""
    a = np.asarray(a)
    return a.copy(order="C") if a.ndim else a


CASES = {}


def case(name, inputs, outputs):
    CASES[name] = (inputs, outputs)


# Flatten
x = f32(2, 3, 4)
case("flatten_axis1", [x], [x.reshape(2, 12)])
x = ints(np.int64, 2, 3, 4, 5)
case("flatten_neg", [x], [x.reshape(6, 20)])
x = ints(np.uint8, 2, 3)
case("flatten_axis0", [x], [x.reshape(1, 6)])

# Reshape
x = f32(2, 3, 4)
case("reshape_zero_copy", [x, i64(0, -1)], [x.reshape(2, 12)])
case("reshape_infer", [x, i64(3, -1, 2)], [x.reshape(3, 4, 2)])
x = np.zeros((0, 3), dtype=np.float32)
case("reshape_allowzero", [x, i64(3, 0)], [x.reshape(3, 0)])
x = ints(np.int8, 4, 6)
case("reshape_int8", [x, i64(2, 2, 2, 3)], [x.reshape(2, 2, 2, 3)])

# Transpose
x = f32(2, 3, 4)
case("transpose_default", [x], [x.transpose()])
x = ints(np.int8, 2, 3, 4, 5)
case("transpose_perm", [x], [x.transpose(0, 2, 3, 1)])
x = ints(np.float64, 3, 5)
case("transpose_f64", [x], [x.T])

# Concat
a, b, c = f32(2, 3), f32(2, 1), f32(2, 2)
case("concat_axis1", [a, b, c], [np.concatenate([a, b, c], axis=1)])
a, b = ints(np.int64, 2, 2, 3), ints(np.int64, 2, 1, 3)
case("concat_neg", [a, b], [np.concatenate([a, b], axis=-2)])
a, b = rng.random((3, 2)) > 0.5, rng.random((1, 2)) > 0.5
case("concat_bool", [a, b], [np.concatenate([a, b], axis=0)])

# Slice
x = f32(5, 6)
case("slice_basic", [x, i64(1, 0), i64(4, 6), i64(0, 1), i64(1, 2)], [x[1:4, 0:6:2]])
case("slice_neg_step", [x, i64(-1), i64(-1000), i64(1), i64(-2)], [x[:, -1:-1000:-2]])
case("slice_default_axes", [x, i64(0, 1), i64(I64_MAX, -1)], [x[0:, 1:-1]])
x = ints(np.int32, 4, 5, 6)
case("slice_int32_params", [x, np.array([-3, 10], np.int32), np.array([-1, -10], np.int32),
                            np.array([2, 1], np.int32), np.array([1, -3], np.int32)],
     [x[:, 10:-10:-3, -3:-1]])
case("slice_empty", [x, i64(3), i64(1), i64(0)], [x[3:1]])

# Split
x = f32(3, 6)
case("split_input", [x, i64(2, 4)], [x[:, :2], x[:, 2:]])
x = ints(np.int64, 6, 2)
case("split_equal", [x], [x[0:2], x[2:4], x[4:6]])
x = f32(2, 5)
case("split_attr", [x], [x[:, :1], x[:, 1:5]])

# Squeeze / Unsqueeze
x = f32(1, 3, 1, 2)
case("squeeze_axes", [x, i64(0, -2)], [x.reshape(3, 2)])
case("squeeze_all", [x], [x.reshape(3, 2)])
case("squeeze_attr", [x], [x.reshape(1, 3, 2)])
x = ints(np.int32, 3, 2)
case("unsqueeze_axes", [x, i64(0, -1)], [x.reshape(1, 3, 2, 1)])
case("unsqueeze_attr", [x], [x.reshape(3, 1, 2)])

# Pad
x = f32(2, 3)
case("pad_constant", [x, i64(0, 1, 1, 2), np.array(9.5, np.float32)],
     [pad_np(x, [0, 1, 1, 2], "constant", 9.5)])
case("pad_negative", [x, i64(-1, 1, 0, -1)], [pad_np(x, [-1, 1, 0, -1], "constant")])
x = ints(np.int64, 3, 4)
case("pad_reflect", [x, i64(1, 2, 2, 3)], [pad_np(x, [1, 2, 2, 3], "reflect")])
case("pad_edge", [x, i64(2, 0, 1, 3)], [pad_np(x, [2, 0, 1, 3], "edge")])

# Identity / Dropout
x = ints(np.int32, 2, 3)
case("identity", [x], [x])
x = f32(3, 4)
case("dropout_mask", [x], [x, np.ones((3, 4), dtype=bool)])

# Constant (values set on the C side)
case("constant_floats", [], [np.array([1.5, -2.25, 3.0], np.float32)])
case("constant_int", [], [np.array(7, np.int64)])
case("constant_tensor", [], [np.array([[1, 2], [3, 4]], np.int32)])

# ConstantOfShape
case("cos_default", [i64(2, 3)], [np.zeros((2, 3), np.float32)])
case("cos_int32", [i64(4, 1, 2)], [np.full((4, 1, 2), 5, np.int32)])
case("cos_scalar", [np.zeros((0,), np.int64)], [np.array(5, np.int32)])

# Shape
x = f32(2, 3, 4, 5)
case("shape_full", [x], [i64(2, 3, 4, 5)])
case("shape_start_end", [x], [i64(3, 4)])
case("shape_neg_start", [x], [i64(4, 5)])

# Gather
x = f32(3, 4, 5)
idx = np.array([[0, 2], [-1, 1]], np.int64)
case("gather_axis1", [x, idx], [np.take(x, idx, axis=1)])
x = ints(np.int64, 4, 3)
idx = np.array([-4, 3, 0], np.int32)
case("gather_int32_neg", [x, idx], [np.take(x, idx, axis=0)])
x = ints(np.uint8, 2, 3, 4)
idx = np.array(2, np.int64)
case("gather_scalar_lastaxis", [x, idx], [np.take(x, idx, axis=-1)])

# Cast
x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, 99.9, -100.2, 127.0], np.float32)
case("cast_f32_i32", [x], [x.astype(np.int32)])
case("cast_f32_i8", [x], [x.astype(np.int8)])
case("cast_f32_bool", [x], [x.astype(bool)])
case("cast_f32_f64", [x], [x.astype(np.float64)])
xd = np.array([1.0 / 3.0, 1e30, -2.5, 1e-40], np.float64)
case("cast_f64_f32", [xd], [xd.astype(np.float32)])
xi = np.array([0, 1, -1, 200, -129, 2**40 + 3], np.int64)
case("cast_i64_u8", [xi], [xi.astype(np.uint8)])
case("cast_i64_f32", [xi], [xi.astype(np.float32)])
case("cast_i64_bool", [xi], [xi.astype(bool)])
xb = np.array([True, False, True])
case("cast_bool_f32", [xb], [xb.astype(np.float32)])
xu = np.array([0, 127, 128, 255], np.uint8)
case("cast_u8_i8", [xu], [xu.astype(np.int8)])
case("cast_u8_i64", [xu], [xu.astype(np.int64)])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with np.errstate(all="ignore"):
        for name, (ins, outs) in CASES.items():
            for k, a in enumerate(ins):
                np.save(os.path.join(out, "%s.in%d.npy" % (name, k)), c_order(a))
            for j, a in enumerate(outs):
                np.save(os.path.join(out, "%s.out%d.npy" % (name, j)), c_order(a))
    print("%d cases in %s" % (len(CASES), out))


if __name__ == "__main__":
    main()
