#!/usr/bin/python3
"""The Neutron rules of src/target/neutron_conv.c and neutron_pool.c through
`qfold check --json`: per rule, a small ONNX model just inside and one just
outside each limit, in the SDK 3.x flow (default) and the SDK 2.x one
(--set neutron-flow=sdk2), and for each the placement of the node under test
and, on the CPU, that the rule text names the limit.

    rules_a_test.py QFOLD WORKDIR [CASE-REGEX]

Float models are quantized by `check` itself; the cases that need exact
qparams (zero points of a batched MatMul, different input / output qparams of
a pool) are written as QDQ models. One process (two qfold runs at a time),
every case; exit 1 listing the failures.
"""
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
RNG = np.random.default_rng(7)


def _vi(name, shape, dt=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def _vis(entries):
    """(name, shape) or (name, shape, dtype) entries as value infos."""
    return [_vi(*e) for e in entries]


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset=OPSET):
    g = helper.make_graph(nodes, "g", _vis(inputs), _vis(outputs),
                          initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="rules_a_test")
    m.ir_version = 7
    return m


def w(*shape):
    return (RNG.standard_normal(shape) * 0.1).astype(np.float32)


def conv(x_shape, w_shape, y_shape, bias=True, name="n", op="Conv", weight_input=False, **attrs):
    inits = []
    ins = [("x", x_shape)]
    if weight_input:
        ins.append(("W", w_shape))
    else:
        inits.append(_init("W", w(*w_shape)))
    args = ["x", "W"]
    if bias:
        cout = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
        inits.append(_init("B", w(cout)))
        args.append("B")
    return model([helper.make_node(op, args, ["y"], name=name, **attrs)], ins, [("y", y_shape)], inits)


def single(op, x_shape, y_shape, name="n", extra_inputs=(), inits=(), outputs=None, opset=OPSET, **attrs):
    outs = outputs or [("y", y_shape)]
    return model([helper.make_node(op, ["x"] + list(extra_inputs), [o[0] for o in outs], name=name, **attrs)],
                 [("x", x_shape)], outs, inits, opset)


def after_conv(op, c, hw, y_shape, name="n", extra_inputs=(), inits=(), **attrs):
    """x -> Conv 1x1 (C -> C) -> op: the op's tensors are channels-first for ExecuTorch."""
    h, wd = hw
    nodes = [helper.make_node("Conv", ["x", "Wc"], ["t"], name="c0"),
             helper.make_node(op, ["t"] + list(extra_inputs), ["y"], name=name, **attrs)]
    return model(nodes, [("x", [1, c, h, wd])], [("y", y_shape)], [_init("Wc", w(c, c, 1, 1))] + list(inits))


# --- QDQ builders (exact qparams) -------------------------------------------------------------


def qdq_pair(src, dst, scale, zp, dt=TensorProto.INT8):
    """src -> QuantizeLinear -> DequantizeLinear -> dst, with its qparam initializers."""
    npdt = np.int8 if dt == TensorProto.INT8 else np.uint8
    s, z = dst + "_s", dst + "_z"
    nodes = [helper.make_node("QuantizeLinear", [src, s, z], [dst + "_q"], name=dst + "_Q"),
             helper.make_node("DequantizeLinear", [dst + "_q", s, z], [dst], name=dst + "_DQ")]
    return nodes, [_init(s, np.float32(scale)), _init(z, npdt(zp))]


def qdq_matmul(a_shape, b_shape, y_shape, zp_a, zp_b):
    nodes, inits = [], []
    for src, dst, zp in (("a", "ad", zp_a), ("b", "bd", zp_b)):
        n, i = qdq_pair(src, dst, 0.05, zp)
        nodes += n
        inits += i
    nodes.append(helper.make_node("MatMul", ["ad", "bd"], ["yf"], name="n"))
    n, i = qdq_pair("yf", "y", 0.1, 0)
    return model(nodes + n, [("a", a_shape), ("b", b_shape)], [("y", y_shape)], inits + i)


def qdq_unary(op, x_shape, y_shape, s_in, s_out, extra_inputs=(), extra_inits=(), **attrs):
    nodes, inits = qdq_pair("x", "xd", s_in, 0)
    nodes.append(helper.make_node(op, ["xd"] + list(extra_inputs), ["yf"], name="n", **attrs))
    n, i = qdq_pair("yf", "y", s_out, 0)
    return model(nodes + n, [("x", x_shape)], [("y", y_shape)], inits + i + list(extra_inits))


def qdq_const(name, arr, scale, dt):
    """A constant stored as dt (int8 weights, int32 bias) behind its DequantizeLinear -> name."""
    q = np.clip(np.round(arr / scale), -127, 127).astype(dt)
    zp = np.zeros((), dt)
    node = helper.make_node("DequantizeLinear", [name + "_q", name + "_s", name + "_z"], [name], name=name + "_DQ")
    return [node], [_init(name + "_q", q), _init(name + "_s", np.float32(scale)), _init(name + "_z", zp)]


def qdq_gemm(m, k, n, c_shape, **attrs):
    """A QDQ Gemm exactly as given (a float model's Gemm is normalised by the quantizer: alpha folded)."""
    nodes, inits = qdq_pair("x", "xd", 0.05, 0)
    wn, wi = qdq_const("W", w(n, k), 0.01, np.int8)
    cn, ci = qdq_const("C", w(*c_shape), 0.0005, np.int32)
    nodes += wn + cn
    nodes.append(helper.make_node("Gemm", ["xd", "W", "C"], ["yf"], name="n", transB=1, **attrs))
    yn, yi = qdq_pair("yf", "y", 0.1, 0)
    return model(nodes + yn, [("x", [m, k])], [("y", [m, n])], inits + wi + ci + yi)


def qdq_conv_dynamic_weights():
    """A QDQ Conv whose int8 weights are a graph input (quantized at run time)."""
    nodes, inits = qdq_pair("x", "xd", 0.05, 0)
    wn, wi = qdq_pair("Win", "W", 0.01, 0)
    nodes += wn
    nodes.append(helper.make_node("Conv", ["xd", "W"], ["yf"], name="n"))
    yn, yi = qdq_pair("yf", "y", 0.1, 0)
    return model(nodes + yn, [("x", [1, 8, 4, 4]), ("Win", [8, 8, 1, 1])], [("y", [1, 8, 4, 4])], inits + wi + yi)


SDK2 = ["--set", "neutron-flow=sdk2"]
# A float model quantized without the Neutron passes: a grouped Conv stays one node, judged by
# the Conv row as ExecuTorch's SplitGroupConvolution would split it.
NOPASS = ["--set", "neutron-passes=off"]


def mm_const(a_shape, k, n, opset=OPSET):
    return model([helper.make_node("MatMul", ["x", "W"], ["y"], name="n")], [("x", a_shape)],
                 [("y", a_shape[:-1] + [n])], [_init("W", w(k, n))], opset)


def gemm(m, k, n, c_shape=None, **attrs):
    inits = [_init("W", w(n, k))]
    args = ["x", "W"]
    if c_shape is not None:
        inits.append(_init("C", w(*c_shape)))
        args.append("C")
    return model([helper.make_node("Gemm", args, ["y"], name="n", transB=1, **attrs)], [("x", [m, k])],
                 [("y", [m, n])], inits)


def reduce(op, x_shape, y_shape, axes, keepdims=1, conv_first=False):
    # ReduceSum takes its axes as an input from opset 13; ReduceMean / ReduceMax as an attribute until 18.
    if op == "ReduceSum":
        extra, inits, attrs = ["axes"], [_init("axes", np.array(axes, np.int64))], {}
    else:
        extra, inits, attrs = [], [], {"axes": axes}
    if conv_first:
        return after_conv(op, x_shape[1], x_shape[2:], y_shape, extra_inputs=extra, inits=inits,
                          keepdims=keepdims, **attrs)
    return single(op, x_shape, y_shape, extra_inputs=extra, inits=inits, keepdims=keepdims, **attrs)


# (name, model, qfold check options, expected placement of node "n", text the rule must hold)
CASES = [
    # Conv: kh*kw*ceil(Cin, num_macs) <= 65535 (convolution_converter, HEAD).
    ("conv_macs_in", lambda: conv([1, 7280, 3, 3], [1, 7280, 3, 3], [1, 1, 1, 1]), [], "npu", None),
    ("conv_macs_out", lambda: conv([1, 7281, 3, 3], [1, 7281, 3, 3], [1, 1, 1, 1]), [], "cpu",
     "kh*kw*ceil(Cin, 8) = 3*3*7288 = 65592 > 65535"),
    ("conv_macs16_in", lambda: conv([1, 7280, 3, 3], [1, 7280, 3, 3], [1, 1, 1, 1]), ["--set", "num-macs=16"], "npu",
     None),
    ("conv_macs16_out", lambda: conv([1, 7281, 3, 3], [1, 7281, 3, 3], [1, 1, 1, 1]), ["--set", "num-macs=16"],
     "cpu", "kh*kw*ceil(Cin, 16) = 3*3*7296 = 65664 > 65535"),
    ("conv_macs_sdk2", lambda: conv([1, 7281, 3, 3], [1, 7281, 3, 3], [1, 1, 1, 1]), SDK2, "npu", None),
    # Grouped: judged per group after SplitGroupConvolution (2 <= groups <= 10).
    ("conv_group_split_in", lambda: conv([1, 14560, 3, 3], [2, 7280, 3, 3], [1, 2, 1, 1], group=2), [], "npu", None),
    ("conv_group_split_out", lambda: conv([1, 14576, 3, 3], [2, 7288, 3, 3], [1, 2, 1, 1], group=2), NOPASS, "cpu",
     "each of the 2 per-group convolutions: kh*kw*ceil(Cin, 8) = 3*3*7288"),
    # ... and as qfold's split_group_conv_qdq writes it (Split -> Conv per group -> Concat, the
    # default for a float model): the part that fails is named.
    ("conv_group_split_out_parts", lambda: conv([1, 14576, 3, 3], [2, 7288, 3, 3], [1, 2, 1, 1], group=2), [],
     "cpu", re.compile(r"its part Conv 'n_g\d' is not delegated: kh\*kw\*ceil\(Cin, 8\) = 3\*3\*7288 = 65592")),
    ("conv_group10_sdk2", lambda: conv([1, 20, 4, 4], [20, 2, 3, 3], [1, 20, 2, 2], group=10), SDK2 + NOPASS, "npu",
     None),
    # Split into parts: the Split is DecomposeSplitToSlices' slices, in SDK 2.x on an axis of a
    # multiple of num_macs elements (80: on the NPU; 20: the Split on the CPU).
    ("conv_group10_sdk2_parts", lambda: conv([1, 80, 4, 4], [80, 8, 3, 3], [1, 80, 2, 2], group=10), SDK2, "npu",
     None),
    ("conv_group10_sdk2_parts_c20", lambda: conv([1, 20, 4, 4], [20, 2, 3, 3], [1, 20, 2, 2], group=10), SDK2, "cpu",
     "its part Split 'n_split' is not delegated: the sliced axis 1 of [1, 20, 4, 4] has 20 elements"),
    ("conv_group11_sdk2", lambda: conv([1, 22, 4, 4], [22, 2, 3, 3], [1, 22, 2, 2], group=11), SDK2, "cpu",
     "groups = 11"),
    ("conv_group_nobias_sdk2", lambda: conv([1, 20, 4, 4], [20, 2, 3, 3], [1, 20, 2, 2], bias=False, group=10),
     SDK2 + NOPASS,
     "cpu", "does not split"),
    ("conv_group11", lambda: conv([1, 22, 4, 4], [22, 2, 3, 3], [1, 22, 2, 2], group=11), [], "npu", None),
    # Depthwise (groups = Cin = Cout): the converter counts every input channel.
    ("conv_depthwise_macs_in", lambda: conv([1, 7280, 3, 3], [7280, 1, 3, 3], [1, 7280, 1, 1], group=7280), [], "npu",
     None),
    ("conv_depthwise_macs_out", lambda: conv([1, 7288, 3, 3], [7288, 1, 3, 3], [1, 7288, 1, 1], group=7288), [],
     "cpu", "kh*kw*ceil(Cin, 8) = 3*3*7288 = 65592 > 65535"),
    # Kernel / stride / dilation <= 4096 (a 1-D conv: kernel 1 x k).
    ("conv1d_kernel_in", lambda: conv([1, 1, 4096], [1, 1, 4096], [1, 1, 1]), [], "npu", None),
    ("conv1d_kernel_out", lambda: conv([1, 1, 4097], [1, 1, 4097], [1, 1, 1]), [], "cpu", "kernel width = 4097 > 4096"),
    ("conv1d_stride_out", lambda: conv([1, 1, 4098], [1, 1, 1], [1, 1, 2], strides=[4097]), [], "cpu",
     "stride W = 4097 > 4096"),
    ("conv1d_stride_in", lambda: conv([1, 1, 4098], [1, 1, 1], [1, 1, 2], strides=[4096]), [], "npu", None),
    ("conv3d", lambda: conv([1, 2, 3, 3, 3], [2, 2, 1, 1, 1], [1, 2, 3, 3, 3]), [], "cpu", "3-D convolution"),
    ("conv3d_sdk2", lambda: conv([1, 2, 3, 3, 3], [2, 2, 1, 1, 1], [1, 2, 3, 3, 3]), SDK2, "cpu", "3-D convolution"),
    ("conv_dynamic_weights", qdq_conv_dynamic_weights, [], "cpu", "the weights are computed at run time"),
    ("conv_dynamic_weights_sdk2", qdq_conv_dynamic_weights, SDK2, "npu", None),
    # SDK 2.x: batch 1.
    ("conv_batch1_sdk2", lambda: conv([1, 8, 4, 4], [8, 8, 1, 1], [1, 8, 4, 4]), SDK2, "npu", None),
    ("conv_batch2_sdk2", lambda: conv([2, 8, 4, 4], [8, 8, 1, 1], [2, 8, 4, 4]), SDK2, "cpu", "batch 2"),
    ("conv_batch_dynamic_sdk2", lambda: conv(["N", 8, 4, 4], [8, 8, 1, 1], ["N", 8, 4, 4]), SDK2, "npu", None),
    ("maxpool_batch_dynamic_sdk2", lambda: single("MaxPool", ["N", 16, 4, 4], ["N", 16, 2, 2], kernel_shape=[2, 2],
                                                  strides=[2, 2]), SDK2, "npu", None),
    ("conv_batch2", lambda: conv([2, 8, 4, 4], [8, 8, 1, 1], [2, 8, 4, 4]), [], "npu", None),
    # ConvTranspose, HEAD: stride <= 2 and <= kernel, pads < kernel, groups 1, no dilation.
    ("convt_stride2_in", lambda: conv([1, 8, 4, 4], [8, 8, 2, 2], [1, 8, 8, 8], op="ConvTranspose", strides=[2, 2]),
     [], "npu", None),
    ("convt_stride3_out", lambda: conv([1, 8, 4, 4], [8, 8, 3, 3], [1, 8, 12, 12], op="ConvTranspose",
                                       strides=[3, 3]), [], "cpu", "must be <= 2"),
    ("convt_stride_gt_kernel", lambda: conv([1, 8, 4, 4], [8, 8, 1, 1], [1, 8, 7, 7], op="ConvTranspose",
                                            strides=[2, 2]), [], "cpu", "stride 2 x 2 > kernel 1 x 1"),
    ("convt_pad_in", lambda: conv([1, 8, 4, 4], [8, 8, 3, 3], [1, 8, 5, 5], op="ConvTranspose", strides=[2, 2],
                                  pads=[2, 2, 2, 2]), [], "npu", None),
    ("convt_pad_out", lambda: conv([1, 8, 4, 4], [8, 8, 3, 3], [1, 8, 3, 5], op="ConvTranspose", strides=[2, 2],
                                   pads=[3, 2, 3, 2]), [], "cpu", "each pad must be < the kernel"),
    ("convt_pad_asym_out", lambda: conv([1, 8, 4, 4], [8, 8, 3, 3], [1, 8, 6, 9], op="ConvTranspose", strides=[2, 2],
                                        pads=[0, 0, 3, 0]), [], "cpu", "bottom 3"),
    ("convt_same_in", lambda: conv([1, 8, 4, 4], [8, 8, 3, 3], [1, 8, 8, 8], op="ConvTranspose", strides=[2, 2],
                                   auto_pad="SAME_UPPER"), [], "npu", None),
    ("convt_dilation", lambda: conv([1, 8, 4, 4], [8, 8, 2, 2], [1, 8, 9, 9], op="ConvTranspose", strides=[2, 2],
                                    dilations=[2, 2]), [], "cpu", "dilation 2 x 2"),
    ("convt_groups", lambda: conv([1, 8, 4, 4], [8, 2, 2, 2], [1, 8, 8, 8], op="ConvTranspose", strides=[2, 2],
                                  group=4), [], "cpu", "groups = 4"),
    # ConvTranspose, SDK 2.x: kh 1, stride W = kw (or kw / 2 with H out 1), C % num_macs, even kw.
    ("convt1d_sdk2_in", lambda: conv([1, 8, 5], [8, 8, 4], [1, 8, 20], op="ConvTranspose", strides=[4]), SDK2,
     "npu", None),
    ("convt1d_half_sdk2_in", lambda: conv([1, 8, 5], [8, 8, 4], [1, 8, 12], op="ConvTranspose", strides=[2]), SDK2,
     "npu", None),
    ("convt1d_cout_sdk2", lambda: conv([1, 8, 5], [8, 12, 4], [1, 12, 20], op="ConvTranspose", strides=[4]), SDK2,
     "cpu", "Cout = 12 is not a multiple of num_macs = 8"),
    ("convt1d_cin_sdk2", lambda: conv([1, 12, 5], [12, 8, 4], [1, 8, 20], op="ConvTranspose", strides=[4]), SDK2,
     "cpu", "Cin = 12 is not a multiple of num_macs = 8"),
    ("convt1d_cout_sdk3", lambda: conv([1, 8, 5], [8, 12, 4], [1, 12, 20], op="ConvTranspose", strides=[4]), [],
     "cpu", "must be <= 2"),
    ("convt2d_sdk2", lambda: conv([1, 8, 4, 4], [8, 8, 2, 2], [1, 8, 8, 8], op="ConvTranspose", strides=[2, 2]), SDK2,
     "cpu", "kernel height 2"),
    # Gemm (addmm / mm): alpha = beta = 1, bias [P] or [1, P].
    ("gemm_in", lambda: gemm(2, 16, 8, [8]), [], "npu", None),
    ("gemm_bias1p_in", lambda: gemm(2, 16, 8, [1, 8]), [], "npu", None),
    ("gemm_qdq_in", lambda: qdq_gemm(2, 16, 8, [8]), [], "npu", None),
    ("gemm_bias_np", lambda: qdq_gemm(2, 16, 8, [2, 8]), [], "cpu", "bias of shape [2, 8]"),
    ("gemm_bias_np_sdk2", lambda: qdq_gemm(2, 16, 8, [2, 8]), SDK2, "npu", None),
    ("gemm_alpha", lambda: qdq_gemm(2, 16, 8, [8], alpha=2.0), [], "cpu", "alpha = 2"),
    ("gemm_beta", lambda: qdq_gemm(2, 16, 8, [8], beta=0.5), [], "cpu", "beta = 0.5"),
    ("gemm_alpha_sdk2", lambda: qdq_gemm(2, 16, 8, [8], alpha=2.0), SDK2, "npu", None),
    # A float Gemm's alpha: `quantize --target neutron` folds it into the weights, so the NPU takes it.
    ("gemm_alpha_float", lambda: gemm(2, 16, 8, [8], alpha=2.0), [], "npu", None),
    # MatMul: mm with a constant rank-2 operand; two activations: mm (rank 2) or bmm (rank >= 3).
    ("matmul_const_in", lambda: mm_const([2, 16], 16, 8), [], "npu", None),
    ("matmul_rank3_const_in", lambda: mm_const([1, 4, 16], 16, 8), [], "npu", None),
    ("matmul_2act_rank2", lambda: qdq_matmul([2, 16], [16, 8], [2, 8], 0, 0), [], "cpu", "computed at run time"),
    ("matmul_2act_rank2_sdk2", lambda: qdq_matmul([2, 16], [16, 8], [2, 8], 0, 0), SDK2, "npu", None),
    ("bmm_zp0_in", lambda: qdq_matmul([1, 8, 16], [1, 16, 8], [1, 8, 8], 0, 0), [], "npu", None),
    ("bmm_zp_out", lambda: qdq_matmul([1, 8, 16], [1, 16, 8], [1, 8, 8], 0, 5), [], "cpu", "zero point 5"),
    ("bmm_rank4_zp0_in", lambda: qdq_matmul([1, 2, 8, 16], [1, 2, 16, 8], [1, 2, 8, 8], 0, 0), [], "npu", None),
    ("bmm_sdk2_in", lambda: qdq_matmul([1, 8, 16], [1, 16, 8], [1, 8, 8], 0, 0), SDK2, "npu", None),
    ("bmm_sdk2_out", lambda: qdq_matmul([1, 6, 16], [1, 16, 8], [1, 6, 8], 0, 0), SDK2, "cpu",
     "M (rows of the first operand) = 6 is not a multiple of num_macs = 8"),
    ("matmul_vector", lambda: qdq_matmul([2, 16], [16], [2], 0, 0), [], "cpu", "vector operand"),
    ("matmul_vector_sdk2", lambda: qdq_matmul([2, 16], [16], [2], 0, 0), SDK2, "cpu", "vector operand"),

    # MaxPool: dilation 1, ceil_mode 0, Indices unused, stride <= 4096; SDK 2.x: batch 1, stride H 1 or 2,
    # C % num_macs, pads <= kernel.
    ("maxpool_in", lambda: single("MaxPool", [1, 8, 4, 4], [1, 8, 2, 2], kernel_shape=[2, 2], strides=[2, 2]), [],
     "npu", None),
    ("maxpool_ceil", lambda: single("MaxPool", [1, 8, 5, 5], [1, 8, 3, 3], kernel_shape=[2, 2], strides=[2, 2],
                                    ceil_mode=1), [], "cpu", "ceil_mode = 1"),
    ("maxpool_ceil_sdk2", lambda: single("MaxPool", [1, 8, 5, 5], [1, 8, 3, 3], kernel_shape=[2, 2],
                                         strides=[2, 2], ceil_mode=1), SDK2, "cpu", "ceil_mode = 1"),
    ("maxpool_dilation", lambda: single("MaxPool", [1, 8, 5, 5], [1, 8, 3, 3], kernel_shape=[2, 2],
                                        dilations=[2, 2]), [], "cpu", "dilation 2 x 2"),
    ("maxpool_indices", lambda: single("MaxPool", [1, 8, 4, 4], None, kernel_shape=[2, 2], strides=[2, 2],
                                       outputs=[("y", [1, 8, 2, 2]), ("i", [1, 8, 2, 2], TensorProto.INT64)]), [], "cpu",
     re.compile(r"Indices|output 'i'")),
    ("maxpool1d_stride_in", lambda: single("MaxPool", [1, 8, 4098], [1, 8, 2], kernel_shape=[1], strides=[4096]),
     [], "npu", None),
    ("maxpool1d_stride_out", lambda: single("MaxPool", [1, 8, 4098], [1, 8, 2], kernel_shape=[1], strides=[4097]),
     [], "cpu", "stride 1 x 4097"),
    ("maxpool_sdk2_in", lambda: single("MaxPool", [1, 16, 4, 4], [1, 16, 2, 2], kernel_shape=[2, 2],
                                       strides=[2, 2]), SDK2, "npu", None),
    ("maxpool_sdk2_c12", lambda: single("MaxPool", [1, 12, 4, 4], [1, 12, 2, 2], kernel_shape=[2, 2],
                                        strides=[2, 2]), SDK2, "cpu", "C = 12 is not a multiple of num_macs = 8"),
    ("maxpool_sdk2_stride3", lambda: single("MaxPool", [1, 8, 6, 6], [1, 8, 2, 2], kernel_shape=[3, 3],
                                            strides=[3, 3]), SDK2, "cpu", "stride H = 3"),
    ("maxpool_sdk2_batch2", lambda: single("MaxPool", [2, 8, 4, 4], [2, 8, 2, 2], kernel_shape=[2, 2],
                                           strides=[2, 2]), SDK2, "cpu", "batch 2"),
    ("maxpool_qparams", lambda: qdq_unary("MaxPool", [1, 8, 4, 4], [1, 8, 2, 2], 0.05, 0.1, kernel_shape=[2, 2],
                                          strides=[2, 2]), [], "cpu", "qparams differ"),
    ("maxpool_qparams_same", lambda: qdq_unary("MaxPool", [1, 8, 4, 4], [1, 8, 2, 2], 0.05, 0.05,
                                               kernel_shape=[2, 2], strides=[2, 2]), [], "npu", None),
    # AveragePool: count_include_pad with pads, ceil_mode 0; HEAD: kernel, stride <= 4096.
    ("avgpool_pad_include_in", lambda: single("AveragePool", [1, 8, 4, 4], [1, 8, 4, 4], kernel_shape=[3, 3],
                                              pads=[1, 1, 1, 1], count_include_pad=1), [], "npu", None),
    ("avgpool_pad_exclude", lambda: single("AveragePool", [1, 8, 4, 4], [1, 8, 4, 4], kernel_shape=[3, 3],
                                           pads=[1, 1, 1, 1]), [], "cpu", "count_include_pad = 0"),
    ("avgpool_pad_exclude_sdk2", lambda: single("AveragePool", [1, 8, 4, 4], [1, 8, 4, 4], kernel_shape=[3, 3],
                                                pads=[1, 1, 1, 1]), SDK2, "cpu", "count_include_pad = 0"),
    ("avgpool_nopad_exclude_in", lambda: single("AveragePool", [1, 8, 4, 4], [1, 8, 2, 2], kernel_shape=[2, 2],
                                                strides=[2, 2]), [], "npu", None),
    ("avgpool_same_exclude", lambda: single("AveragePool", [1, 8, 4, 4], [1, 8, 4, 4], kernel_shape=[3, 3],
                                            auto_pad="SAME_UPPER"), [], "cpu", "count_include_pad = 0"),
    ("avgpool_valid_exclude_in", lambda: single("AveragePool", [1, 8, 4, 4], [1, 8, 2, 2], kernel_shape=[3, 3],
                                                auto_pad="VALID"), [], "npu", None),
    ("avgpool_ceil", lambda: single("AveragePool", [1, 8, 5, 5], [1, 8, 3, 3], kernel_shape=[2, 2], strides=[2, 2],
                                    ceil_mode=1), [], "cpu", "ceil_mode = 1"),
    ("avgpool1d_kernel_in", lambda: single("AveragePool", [1, 8, 4096], [1, 8, 1], kernel_shape=[4096]), [], "npu",
     None),
    ("avgpool1d_kernel_out", lambda: single("AveragePool", [1, 8, 4097], [1, 8, 1], kernel_shape=[4097]), [], "cpu",
     "kernel 1 x 4097"),
    ("avgpool1d_kernel_sdk2", lambda: single("AveragePool", [1, 8, 4097], [1, 8, 1], kernel_shape=[4097]), SDK2,
     "npu", None),
    # GlobalAveragePool (adaptive_avg_pool2d to 1 x 1): H, W <= 4096 at HEAD.
    ("gap_in", lambda: single("GlobalAveragePool", [1, 8, 1, 4096], [1, 8, 1, 1]), [], "npu", None),
    ("gap_out", lambda: single("GlobalAveragePool", [1, 8, 1, 4097], [1, 8, 1, 1]), [], "cpu", "input 1 x 4097"),
    ("gap_sdk2", lambda: single("GlobalAveragePool", [1, 8, 1, 4097], [1, 8, 1, 1]), SDK2, "npu", None),
    ("gap_qparams", lambda: qdq_unary("GlobalAveragePool", [1, 8, 4, 4], [1, 8, 1, 1], 0.05, 0.1), [], "cpu",
     "qparams differ"),
    # ReduceMean (mean.dim); SDK 2.x: rank 4, keepdims, over H, W, C % num_macs.
    ("mean_in", lambda: reduce("ReduceMean", [1, 8, 4, 4], [1, 8, 1, 1], [2, 3], conv_first=True), [], "npu", None),
    ("mean_sdk2_in", lambda: reduce("ReduceMean", [1, 16, 4, 4], [1, 16, 1, 1], [2, 3], conv_first=True), SDK2,
     "npu", None),
    ("mean_sdk2_c12", lambda: reduce("ReduceMean", [1, 12, 4, 4], [1, 12, 1, 1], [2, 3], conv_first=True), SDK2,
     "cpu", "C = 12 is not a multiple of num_macs = 8"),
    ("mean_sdk2_keepdims0", lambda: reduce("ReduceMean", [1, 16, 4, 4], [1, 16], [2, 3], keepdims=0,
                                           conv_first=True), SDK2, "cpu", "keepdims = 0"),
    ("mean_sdk2_axis1", lambda: reduce("ReduceMean", [1, 16, 4, 4], [1, 1, 4, 4], [1], conv_first=True), SDK2,
     "cpu", "H and W only"),
    ("mean_sdk2_rank3", lambda: reduce("ReduceMean", [1, 16, 4], [1, 16, 1], [2]), SDK2, "cpu", "rank 3"),
    ("mean_keepdims0_in", lambda: reduce("ReduceMean", [1, 16, 4, 4], [1, 16], [2, 3], keepdims=0, conv_first=True),
     [], "npu", None),
    # A no-op mean alone in its partition (mean_dim_converter.supports_partitioning_result).
    ("mean_noop_alone", lambda: reduce("ReduceMean", [1, 8, 1, 1], [1, 8, 1, 1], [2, 3]), [], "cpu", "no-op"),
    ("mean_noop_with_conv", lambda: reduce("ReduceMean", [1, 8, 1, 1], [1, 8, 1, 1], [2, 3], conv_first=True), [],
     "npu", None),
    # ReduceSum / ReduceMax: HEAD only (v1.3.0 has no converter).
    ("sum_in", lambda: qdq_unary("ReduceSum", [1, 8, 4, 4], [1, 8, 1, 1], 0.05, 0.05, extra_inputs=["axes"],
                                 extra_inits=[_init("axes", np.array([2, 3], np.int64))]), [], "npu", None),
    ("sum_qparams", lambda: qdq_unary("ReduceSum", [1, 8, 4, 4], [1, 8, 1, 1], 0.05, 0.1, extra_inputs=["axes"],
                                      extra_inits=[_init("axes", np.array([2, 3], np.int64))]), [], "cpu",
     "qparams differ"),
    ("sum_sdk2", lambda: reduce("ReduceSum", [1, 8, 4, 4], [1, 8, 1, 1], [2, 3], conv_first=True), SDK2, "cpu",
     "converter"),
    ("max_in", lambda: reduce("ReduceMax", [1, 8, 4, 4], [1, 8, 1, 1], [2, 3], conv_first=True), [], "npu", None),
    ("max_sdk2", lambda: reduce("ReduceMax", [1, 8, 4, 4], [1, 8, 1, 1], [2, 3], conv_first=True), SDK2, "cpu",
     "converter"),
    ("max_qparams", lambda: qdq_unary("ReduceMax", [1, 8, 4, 4], [1, 8, 1, 1], 0.05, 0.1, axes=[2, 3]), [], "cpu",
     "qparams differ"),
    # Softmax, HEAD: over the channels, C <= 2040, rows <= 4096, C * rows <= 524288.
    ("softmax_c_in", lambda: single("Softmax", [1, 2040], [1, 2040], axis=-1), [], "npu", None),
    ("softmax_c_out", lambda: single("Softmax", [1, 2041], [1, 2041], axis=-1), [], "cpu", "2041 > 2040"),
    ("softmax_rows_in", lambda: single("Softmax", [4096, 8], [4096, 8], axis=-1), [], "npu", None),
    ("softmax_rows_out", lambda: single("Softmax", [4097, 8], [4097, 8], axis=-1), [], "cpu", "4097 > 4096"),
    ("softmax_total_in", lambda: single("Softmax", [512, 1024], [512, 1024], axis=-1), [], "npu", None),
    ("softmax_total_out", lambda: single("Softmax", [512, 1025], [512, 1025], axis=-1), [], "cpu",
     "1025*512 = 524800 > 524288"),
    ("softmax_axis_cf_in", lambda: after_conv("Softmax", 8, (4, 4), [1, 8, 4, 4], axis=1), [], "npu", None),
    ("softmax_axis_cf_out", lambda: after_conv("Softmax", 8, (4, 4), [1, 8, 4, 4], axis=3), [], "cpu",
     "channels-first"),
    # After a 1-D conv (unsqueeze / conv2d / squeeze in ExecuTorch) the tensor is format-less: the last axis.
    ("softmax_conv1d_last_in", lambda: model([helper.make_node("Conv", ["x", "Wc"], ["t"], name="c0"),
                                              helper.make_node("Softmax", ["t"], ["y"], name="n", axis=2)],
                                             [("x", [1, 8, 16])], [("y", [1, 8, 16])], [_init("Wc", w(8, 8, 1))]),
     [], "npu", None),
    ("softmax_conv1d_axis1_out", lambda: model([helper.make_node("Conv", ["x", "Wc"], ["t"], name="c0"),
                                                helper.make_node("Softmax", ["t"], ["y"], name="n", axis=1)],
                                               [("x", [1, 8, 16])], [("y", [1, 8, 16])], [_init("Wc", w(8, 8, 1))]),
     [], "cpu", "softmax over axis 1 of a rank-3 tensor"),
    ("softmax_axis_last_in", lambda: single("Softmax", [1, 8, 4, 4], [1, 8, 4, 4], axis=3), [], "npu", None),
    ("softmax_axis_mid_out", lambda: single("Softmax", [1, 8, 4, 4], [1, 8, 4, 4], axis=1), [], "cpu", "axis 1"),
    # Softmax, SDK 2.x: C % num_macs, C < 4096/num_pipes*4, rows <= 4096, C * rows / num_macs <= 65536, rank >= 2.
    ("softmax_sdk2_in", lambda: single("Softmax", [1, 2040], [1, 2040], axis=-1), SDK2, "npu", None),
    ("softmax_sdk2_c12", lambda: single("Softmax", [1, 12], [1, 12], axis=-1), SDK2, "cpu",
     "= 12 is not a multiple of num_macs = 8"),
    ("softmax_sdk2_c2048", lambda: single("Softmax", [1, 2048], [1, 2048], axis=-1), SDK2, "cpu",
     "2048 >= 4096/num_pipes*4 = 2048"),
    ("softmax_sdk2_pipes4_in", lambda: single("Softmax", [1, 2048], [1, 2048], axis=-1),
     SDK2 + ["--set", "num-pipes=4"], "npu", None),
    ("softmax_sdk2_total_in", lambda: single("Softmax", [4096, 128], [4096, 128], axis=-1), SDK2, "npu", None),
    ("softmax_sdk2_total_out", lambda: single("Softmax", [4096, 136], [4096, 136], axis=-1), SDK2, "cpu",
     "= 69632 > 65536"),
    ("softmax_sdk2_1d", lambda: single("Softmax", [16], [16], axis=0), SDK2, "cpu", "1-D softmax"),
    ("softmax_1d_in", lambda: single("Softmax", [16], [16], axis=0), [], "npu", None),
]


def save_case(work, name, build):
    m = build()
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(work, name + ".onnx"))


def run_case(qfold, work, name, build, opts, want, text):
    path = os.path.join(work, name + ".onnx")
    rep = os.path.join(work, name + ".json")
    if os.path.exists(rep):
        os.remove(rep)
    p = subprocess.run([qfold, "check", path, "--json", rep] + opts, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not os.path.exists(rep):
        return "qfold check exited %d: %s" % (p.returncode, (p.stderr or p.stdout).strip()[-400:])
    with open(rep) as f:
        r = json.load(f)
    nodes = [n for n in r["nodes"] if n["name"] == "n"]
    if len(nodes) != 1:
        return "node 'n' not in the report (%s)" % [n["name"] for n in r["nodes"]]
    n = nodes[0]
    if n["placement"] != want:
        return "placement %s, expected %s (rule: %s; fix: %s)" % (n["placement"], want, n.get("rule"), n.get("fix"))
    rule = n.get("rule") or ""
    if hasattr(text, "search") and not text.search(rule):
        return "rule %r does not match %r" % (rule, text.pattern)
    if isinstance(text, str) and text not in rule:
        return "rule %r does not contain %r" % (rule, text)
    return None


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    qfold, work = sys.argv[1], sys.argv[2]
    pat = re.compile(sys.argv[3]) if len(sys.argv) > 3 else None
    os.makedirs(work, exist_ok=True)
    cases = [c for c in CASES if not pat or pat.search(c[0])]
    for c in cases:  # the models first, in order (one random generator)
        save_case(work, c[0], c[1])
    # Two qfold processes at a time (each check of a float model calibrates
    # on synthetic data: a few tenths of a second).
    with ThreadPoolExecutor(max_workers=2) as pool:
        errs = list(pool.map(lambda c: run_case(qfold, work, *c), cases))
    fails = 0
    for (name, _, opts, _, _), err in zip(cases, errs):
        if err:
            fails += 1
            print("FAIL %s %s: %s" % (name, " ".join(opts), err))
        else:
            print("ok   %s %s" % (name, " ".join(opts)))
    ran = len(cases)
    print("%d of %d cases passed" % (ran - fails, ran))
    return 1 if fails or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
