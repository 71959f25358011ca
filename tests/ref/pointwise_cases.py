#!/usr/bin/python3
"""Extra single-op ONNX cases for the pointwise / linear / quant kernels, in
the layout of the ONNX backend node tests, with outputs from numpy / PyTorch.

    pointwise_cases.py OUTDIR

Writes OUTDIR/<case>/{model.onnx, qf_meta.txt, test_data_set_0/{input,output}_<j>.pb}
and OUTDIR/manifest.txt (one case directory per line) for tests/ops/node/node_runner.
They cover what the onnx node tests do not: batch-broadcast MatMul and 1-D
operands, per-channel / two-sided broadcasting, integer Div truncation,
Softmax before and after opset 13 on 4-D input, Einsum in float32, Gemm with a column bias,
per-axis quantization with exact ties, Clip with only a max.
Random data with a fixed seed.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(20240611)

NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
           np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
           np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def write_case(root, name, op, inputs, outputs, attrs=None, opset=13, consts=None):
    """inputs: list of (name, array or None for an omitted optional input);
    consts: names among inputs to store as initializers instead of graph inputs."""
    consts = consts or ()
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    node = helper.make_node(op, [n if a is not None else "" for n, a in inputs], [n for n, _ in outputs],
                            **(attrs or {}))
    g_in = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype], a.shape) for n, a in inputs
            if a is not None and n not in consts]
    g_out = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype], a.shape) for n, a in outputs]
    inits = [numpy_helper.from_array(a, n) for n, a in inputs if n in consts]
    graph = helper.make_graph([node], name, g_in, g_out, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "qf_meta.txt"), "w") as f:
        j = 0
        for n, a in inputs:
            if a is None or n in consts:
                continue
            f.write("input %d %s\n" % (j, n))
            with open(os.path.join(d, "test_data_set_0", "input_%d.pb" % j), "wb") as t:
                t.write(numpy_helper.from_array(a, n).SerializeToString())
            j += 1
        for j, (n, a) in enumerate(outputs):
            f.write("output %d %s\n" % (j, n))
            with open(os.path.join(d, "test_data_set_0", "output_%d.pb" % j), "wb") as t:
                t.write(numpy_helper.from_array(a, n).SerializeToString())
    return d


def main():
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    dirs = []

    def case(*args, **kw):
        dirs.append(write_case(root, *args, **kw))

    # MatMul: numpy semantics, checked against torch.matmul too.
    for name, sa, sb in (("matmul_batch_bcast", (3, 1, 2, 4), (5, 4, 3)),
                         ("matmul_1d_left", (4,), (2, 4, 5)),
                         ("matmul_1d_right", (2, 3, 4), (4,)),
                         ("matmul_1d_both", (6,), (6,)),
                         ("matmul_b_leading_ones", (3, 4), (1, 1, 4, 2))):
        a, b = rand(*sa), rand(*sb)
        y = np.matmul(a, b)
        assert np.allclose(y, torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy(), atol=1e-5)
        case(name, "MatMul", [("a", a), ("b", b)], [("y", y)])
    a, b = rand(2, 3, 4), rand(4, 5)
    case("matmul_const_weight", "MatMul", [("a", a), ("w", b)], [("y", a @ b)], consts=("w",))

    # Einsum beyond the five onnx node tests (all float64): float32, the
    # batched-GEMM path with transposed / packed operands and a permuted
    # output, ellipsis broadcasting, diagonals, implicit output, 3 operands.
    for k, (eq, shapes) in enumerate((("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),
                                      ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)]),
                                      ("bji,bjk->bik", [(3, 5, 4), (3, 5, 2)]),
                                      ("ibj,bkj->bki", [(4, 3, 5), (3, 2, 5)]),
                                      ("abcd,cdbe->ea", [(2, 3, 4, 5), (4, 5, 3, 6)]),
                                      ("...ij,...jk->...ik", [(2, 1, 4, 5), (3, 5, 2)]),
                                      ("ij,jk", [(4, 5), (5, 3)]),
                                      ("Ab,bA->Ab", [(3, 4), (4, 3)]),
                                      ("iij->j", [(3, 3, 2)]),
                                      ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
                                      ("b...d,b...d->b...", [(2, 3, 4, 5), (2, 3, 4, 5)]),
                                      ("ij,jk->ki", [(4, 0), (0, 3)]))):
        xs = [rand(*sh) for sh in shapes]
        y = np.einsum(eq, *xs).astype(np.float32)
        assert np.allclose(y, torch.einsum(eq, *[torch.from_numpy(x) for x in xs]).numpy(), atol=1e-5)
        case("einsum_%d" % k, "Einsum", [("x%d" % i, x) for i, x in enumerate(xs)], [("y", y)],
             attrs={"equation": eq})

    # Broadcasting arithmetic.
    x, c = rand(2, 3, 4, 5), rand(1, 3, 1, 1)
    case("add_per_channel", "Add", [("x", x), ("c", c)], [("y", x + c)])
    x, c = rand(2, 3, 4, 5), rand(3, 1, 1)
    case("mul_per_channel_rank3", "Mul", [("x", x), ("c", c)], [("y", x * c)])
    a, b = rand(4, 1), rand(1, 5)
    case("sub_two_sided", "Sub", [("a", a), ("b", b)], [("y", a - b)])
    a, b = rand(3, 4), np.array(0.75, dtype=np.float32)
    case("div_scalar", "Div", [("a", a), ("b", b)], [("y", a / b)])
    a = RNG.integers(-100, 100, (3, 4)).astype(np.int32)
    b = RNG.integers(1, 9, (4,)).astype(np.int32) * np.array([1, -1, 1, -1], dtype=np.int32)
    case("div_int32_truncates", "Div", [("a", a), ("b", b)], [("y", np.fix(a / b).astype(np.int32))])
    a = RNG.integers(-60, 60, (2, 3)).astype(np.int64)
    b = RNG.integers(-60, 60, (3,)).astype(np.int64)
    case("mul_int64_bcast", "Mul", [("a", a), ("b", b)], [("y", a * b)])

    # Softmax: opset 11 flattens at axis, opset 13 normalises along axis.
    x = rand(2, 3, 4, 5, scale=3)
    flat = x.reshape(2, -1)
    y11 = torch.softmax(torch.from_numpy(flat), dim=1).numpy().reshape(x.shape)
    case("softmax_opset11_axis1", "Softmax", [("x", x)], [("y", y11)], attrs={"axis": 1}, opset=11)
    y13 = torch.softmax(torch.from_numpy(x), dim=1).numpy()
    case("softmax_opset13_axis1", "Softmax", [("x", x)], [("y", y13)], attrs={"axis": 1}, opset=13)
    x = rand(3, 7, scale=40)
    case("softmax_large", "Softmax", [("x", x)], [("y", torch.softmax(torch.from_numpy(x), -1).numpy())])

    # Gemm: transA, alpha, beta and a column bias [M, 1].
    a, b, c = rand(4, 3), rand(4, 5), rand(3, 1)
    case("gemm_col_bias", "Gemm", [("a", a), ("b", b), ("c", c)], [("y", (0.5 * a.T @ b + 2.0 * c).astype(np.float32))],
         attrs={"transA": 1, "alpha": 0.5, "beta": 2.0})

    # Activations against torch.
    x = rand(4, 30, scale=5)
    t = torch.from_numpy(x)
    case("hardswish_torch", "HardSwish", [("x", x)], [("y", torch.nn.functional.hardswish(t).numpy())], opset=14)
    case("leakyrelu_torch", "LeakyRelu", [("x", x)], [("y", torch.nn.functional.leaky_relu(t, 0.1).numpy())],
         attrs={"alpha": 0.1})
    x40 = rand(4, 30, scale=40)
    case("sigmoid_torch", "Sigmoid", [("x", x40)], [("y", torch.sigmoid(torch.from_numpy(x40)).numpy())])
    hi = np.array(0.5, dtype=np.float32)
    case("clip_max_only", "Clip", [("x", x), ("lo", None), ("hi", hi)], [("y", np.minimum(x, hi))])

    # Per-axis QuantizeLinear with exact ties (x / scale = k + 0.5).
    scale = np.array([0.5, 0.25, 0.125, 1.0], dtype=np.float32)
    zp = np.array([0, -3, 7, 127], dtype=np.int8)
    k = RNG.integers(-300, 300, (4, 3, 2, 2)).astype(np.float32) + 0.5
    x = (k * scale.reshape(4, 1, 1, 1)).astype(np.float32)
    q = np.clip(np.rint(x / scale.reshape(4, 1, 1, 1)) + zp.reshape(4, 1, 1, 1).astype(np.float32), -128, 127)
    case("quantize_axis0_ties", "QuantizeLinear", [("x", x), ("s", scale), ("z", zp)], [("y", q.astype(np.int8))],
         attrs={"axis": 0})
    xq = RNG.integers(0, 256, (2, 3, 4)).astype(np.uint8)
    s3 = np.array([0.1, 0.02, 0.3], dtype=np.float32)
    z3 = np.array([128, 0, 255], dtype=np.uint8)
    yd = ((xq.astype(np.int32) - z3.reshape(1, 3, 1)).astype(np.float32) * s3.reshape(1, 3, 1)).astype(np.float32)
    case("dequantize_axis1_u8", "DequantizeLinear", [("x", xq), ("s", s3), ("z", z3)], [("y", yd)])

    with open(os.path.join(root, "manifest.txt"), "w") as f:
        for d in dirs:
            f.write(d + "\n")
    print("pointwise_cases: %d cases in %s" % (len(dirs), root))


if __name__ == "__main__":
    main()
