#!/usr/bin/env python3
"""The Neutron rules of the element-wise, activation and shape ops and the
partition rules (src/target/neutron_binary.c, neutron_act.c,
neutron_shape.c) through `qfold check --json`.

Every case is a small QDQ model written with the onnx package (float input ->
QuantizeLinear -> DequantizeLinear -> op -> QuantizeLinear ->
DequantizeLinear -> float output), so the quantization the rules read is the
one the case sets. Each numeric limit has a case just inside and one just
outside, per rule generation (--set neutron-flow=sdk3|sdk2); a CPU placement
must carry the rule's words (and the fix where the case names one).

  rules_b_test.py --qfold build/qfold --work DIR
Exit 0 all passed, 1 a case failed (each printed), 77 skipped (no onnx
package, or a qfold without `check`).
"""
import argparse
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:  # pragma: no cover - the reference tools are missing
    print(f"skipped: {e}")
    sys.exit(77)

OPSET = 13


class G:
    """A QDQ graph under construction: every tensor an op reads comes from a
    DequantizeLinear, every tensor it writes goes to a QuantizeLinear."""

    def __init__(self):
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.k = 0

    def _name(self, s):
        self.k += 1
        return f"{s}_{self.k}"

    def _qparams(self, scale, zp, axis=None, dtype=TensorProto.INT8):
        s = self._name("s")
        z = self._name("z")
        np_t = np.int8 if dtype == TensorProto.INT8 else np.uint8
        self.inits.append(numpy_helper.from_array(np.asarray(scale, np.float32), s))
        self.inits.append(numpy_helper.from_array(np.asarray(zp, np_t), z))
        return s, z

    def qdq(self, x, scale, zp, axis=None, dtype=TensorProto.INT8):
        """x -> Q -> DQ; returns the DQ's output."""
        s, z = self._qparams(scale, zp, axis, dtype)
        q, d = self._name("q"), self._name("dq")
        attrs = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [q], name=q, **attrs))
        self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [d], name=d, **attrs))
        return d

    def input(self, shape, scale=0.05, zp=0, axis=None):
        x = self._name("x")
        self.inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, shape))
        return self.qdq(x, scale, zp, axis)

    def const(self, arr, scale=0.05, zp=0):
        """A constant as int8 behind a DequantizeLinear."""
        arr = np.asarray(arr, np.float32)
        q = np.clip(np.round(arr / scale) + zp, -128, 127).astype(np.int8)
        c = self._name("c")
        self.inits.append(numpy_helper.from_array(q, c))
        s, z = self._qparams(scale, zp)
        d = self._name("dq")
        self.nodes.append(helper.make_node("DequantizeLinear", [c, s, z], [d], name=d))
        return d

    def ints(self, vals):
        c = self._name("i")
        self.inits.append(numpy_helper.from_array(np.asarray(vals, np.int64), c))
        return c

    def floats(self, vals):
        c = self._name("f")
        self.inits.append(numpy_helper.from_array(np.asarray(vals, np.float32), c))
        return c

    def op(self, op_type, inputs, name=None, scale=0.05, zp=0, q=True, nout=1, **attrs):
        """The node; with q its outputs go through Q -> DQ (returned)."""
        name = name or self._name(op_type.lower())
        outs = [f"{name}_y{i}" for i in range(nout)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        if not q:
            return outs[0] if nout == 1 else outs
        r = [self.qdq(o, scale, zp) for o in outs]
        return r[0] if nout == 1 else r

    def output(self, *xs):
        for x in xs:
            self.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))

    def save(self, path):
        g = helper.make_graph(self.nodes, "rules_b", self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 7
        onnx.save(m, path)


# --- the cases: (name, builder, [(flow, sets, placement, rule words, fix words)]) ---
# A builder returns G with the node under test named "target".
CASES = []


def case(name, checks):
    def reg(fn):
        CASES.append((name, fn, checks))
        return fn
    return reg


NPU, CPU = "npu", "cpu"


def s3(p, rule=None, fix=None, sets=()):
    return ("sdk3", sets, p, rule, fix)


def s2(p, rule=None, fix=None, sets=()):
    return ("sdk2", sets, p, rule, fix)


def binary(op, sa, sb, **kw):
    g = G()
    a, b = g.input(sa), g.input(sb)
    g.output(g.op(op, [a, b], name="target", **kw))
    return g


# Add / Sub / Mul: SDK 3.x broadcasts one input when another has the
# output's element count; SDK 2.x does not broadcast; SDK 2.x Mul needs a
# dimension % 8 == 0.
@case("add_broadcast_one", [s3(NPU), s2(CPU, "are broadcast: SDK 2.x takes Add only on equal shapes")])
def _():
    return binary("Add", [1, 8, 4, 4], [1, 8, 1, 1])


@case("sub_broadcast_both", [s3(CPU, "both inputs are broadcast", "full shape")])
def _():
    return binary("Sub", [1, 8, 4, 1], [1, 1, 1, 4])


@case("mul_no_dim_of_8", [s3(NPU), s2(CPU, "no dimension of the output [1, 3, 5, 5] is a multiple of 8")])
def _():
    return binary("Mul", [1, 3, 5, 5], [1, 3, 5, 5])


@case("mul_dim_of_8", [s2(NPU)])
def _():
    return binary("Mul", [1, 8, 5, 5], [1, 8, 5, 5])


# Div: a constant divisor becomes a multiplication (ConvertDivToMul).
@case("div_by_scalar", [s3(NPU), s2(NPU)])
def _():
    g = G()
    x = g.input([1, 8, 4, 4])
    g.output(g.op("Div", [x, g.const(np.float32(2.0), scale=0.02)], name="target"))
    return g


# A divisor tensor of shape [1] stays a broadcast multiplier (SDK 2.x: no).
@case("div_by_tensor_1", [s3(NPU), s2(CPU, "are broadcast")])
def _():
    g = G()
    x = g.input([1, 8, 4, 4])
    g.output(g.op("Div", [x, g.const(np.full([1], 2.0), scale=0.02)], name="target"))
    return g


@case("div_by_zero", [s3(CPU, "the constant divisor holds 0")])
def _():
    g = G()
    x = g.input([1, 8, 4, 4])
    g.output(g.op("Div", [x, g.const(np.float32(0.0), scale=0.02)], name="target"))
    return g


@case("div_by_tensor", [s3(CPU, "divides by a tensor computed at run time"),
                        s2(CPU, "divides by a tensor computed at run time")])
def _():
    return binary("Div", [1, 8, 4, 4], [1, 8, 4, 4])


# Max / Min: SDK 3.x only; every input quantized like the output.
@case("max_same_qparams", [s3(NPU), s2(CPU, "no Neutron converter")])
def _():
    return binary("Max", [1, 8, 4, 4], [1, 8, 4, 4])


@case("min_other_qparams", [s3(CPU, "Min needs its inputs quantized like its output", "one scale and zero point")])
def _():
    g = G()
    a, b = g.input([1, 8, 4, 4]), g.input([1, 8, 4, 4], scale=0.1)
    g.output(g.op("Min", [a, b], name="target"))
    return g


@case("max_three_inputs", [s3(CPU, "Max of 3 inputs", "chain two-input")])
def _():
    g = G()
    a, b, c = (g.input([1, 8, 4, 4]) for _ in range(3))
    g.output(g.op("Max", [a, b, c], name="target"))
    return g


# Concat: inputs quantized like the output (both); SDK 2.x channels % num_macs
# unless equal shapes joined along the channels. The channels of a 4-D tensor
# are dim 1 when a Conv touches it (ExecuTorch's format inference), else the
# last dim: these models start with a Conv.
def concat_after_conv(c1, c2, axis=1):
    g = G()
    x = g.input([1, 4, 6, 6])
    w1 = g.const(np.full([c1, 4, 1, 1], 0.1), scale=0.01)
    w2 = g.const(np.full([c2, 4, 1, 1], 0.1), scale=0.01)
    a = g.op("Conv", [x, w1])
    b = g.op("Conv", [x, w2])
    g.output(g.op("Concat", [a, b], name="target", axis=axis))
    return g


@case("concat_channels_16_8", [s3(NPU), s2(NPU), s2(CPU, "num_macs = 16", "multiple of 16", sets=("num-macs=16",))])
def _():
    return concat_after_conv(16, 8)


@case("concat_channels_12_8", [s3(NPU), s2(CPU, "input 0 has 12 channels, not a multiple of num_macs = 8", "of input 0 to 16 ")])
def _():
    return concat_after_conv(12, 8)


@case("concat_equal_shapes_along_channels", [s2(NPU)])
def _():
    return concat_after_conv(4, 4)


@case("concat_equal_shapes_along_h", [s2(CPU, "4 channels, not a multiple of num_macs = 8")])
def _():
    return concat_after_conv(4, 4, axis=2)


# SDK 2.x's cat partition rule: inputs from outside the partition need a
# dimension other than 1 before the joined one.
@case("concat_model_inputs_all_ones_before", [s3(NPU), s2(CPU, "outside its NPU partition")])
def _():
    g = G()
    a, b = g.input([1, 1, 1, 8]), g.input([1, 1, 1, 8])
    g.output(g.op("Concat", [a, b], name="target", axis=3))
    return g


@case("concat_model_inputs_h_before", [s2(NPU)])
def _():
    g = G()
    a, b = g.input([1, 1, 2, 8]), g.input([1, 1, 2, 8])
    g.output(g.op("Concat", [a, b], name="target", axis=3))
    return g


def unary(op, shape=(1, 8, 4, 4), scale=0.05, zp=0, oscale=None, ozp=None, **attrs):
    g = G()
    x = g.input(list(shape), scale=scale, zp=zp)
    g.output(g.op(op, [x], name="target", scale=oscale or scale, zp=zp if ozp is None else ozp, **attrs))
    return g


# Relu / clamp partition rules: alone in its partition a Relu whose input
# is never negative (zero point -128) changes nothing in int8: CPU (SDK 3.x);
# SDK 2.x: alone needs channels % num_macs.
@case("relu_alone_input_nonnegative", [s3(CPU, "range [0, 12.75] holds no negative value", "remove it")])
def _():
    return unary("Relu", zp=-128, ozp=-128)


@case("relu_alone_input_signed", [s3(NPU)])
def _():
    return unary("Relu")


@case("relu_after_add_nonnegative", [s3(NPU)])
def _():
    g = G()
    a, b = g.input([1, 8, 4, 4], zp=-128), g.input([1, 8, 4, 4], zp=-128)
    s = g.op("Add", [a, b], zp=-128)
    g.output(g.op("Relu", [s], name="target", zp=-128))
    return g


# A Relu after a Conv with a QuantizeLinear between them (so not fused): in
# the Conv's partition when the Conv is on the NPU (kept), alone when it is
# not (then its non-negative input makes it a no-op: CPU). WITH_CONV: the
# placement follows the node "conv".
WITH_CONV = "follows conv"


@case("relu_after_conv_nonnegative", [s3(WITH_CONV, "holds no negative value")])
def _():
    g = G()
    x = g.input([1, 8, 6, 6])
    y = g.op("Conv", [x, g.const(np.full([8, 8, 1, 1], 0.1), scale=0.01)], name="conv", zp=-128)
    g.output(g.op("Relu", [y], name="target", zp=-128))
    return g


@case("relu_alone_12_channels", [s2(CPU, "its 12 channels to be a multiple of num_macs = 8", "pad the channels to 16")])
def _():
    return unary("Relu", shape=(1, 4, 4, 12))


@case("relu_alone_16_channels", [s2(NPU)])
def _():
    return unary("Relu", shape=(1, 4, 4, 16))


@case("relu_after_add_12_channels", [s2(NPU)])
def _():
    g = G()
    a, b = g.input([1, 4, 4, 12]), g.input([1, 4, 4, 12])
    g.output(g.op("Relu", [g.op("Add", [a, b])], name="target"))
    return g


def clip(lo, hi, scale=0.05, zp=0, oscale=None):
    g = G()
    x = g.input([1, 4, 4, 8], scale=scale, zp=zp)
    ins = [x, g.floats(lo) if lo is not None else "", g.floats(hi) if hi is not None else ""]
    g.output(g.op("Clip", ins, name="target", scale=oscale or scale, zp=zp))
    return g


@case("clip_minmax_same_qparams", [s3(NPU), s2(CPU, "SDK 2.x takes only the ReLU forms")])
def _():
    return clip(-2.0, 2.0)


@case("clip_minmax_other_qparams", [s3(CPU, "Clip(-2, 2) is not a ReLU form", "input's scale")])
def _():
    return clip(-2.0, 2.0, oscale=0.02)


@case("clip_relu6_other_qparams", [s3(NPU), s2(NPU)])
def _():
    # (0, 6) is Neutron's Relu6: no shared qparams needed. Input range
    # [-6.4, 6.35] keeps both hinges.
    return clip(0.0, 6.0, oscale=6 / 255)


# A lone (0, 6) clamp whose input range is [0, 6] exactly (scale 6/255, zp
# -128): both hinges at the ends of the int8 range, a no-op.
@case("clip_relu6_alone_noop", [s3(CPU, "outside the input's quantized range [0, 6]", "remove it")])
def _():
    return clip(0.0, 6.0, scale=6 / 255, zp=-128)


@case("clip_wide_alone_noop", [s3(CPU, "Clip(-100, 100)", "remove it")])
def _():
    return clip(-100.0, 100.0)


@case("exp", [s3(NPU), s2(CPU, "no Neutron converter for")])
def _():
    return unary("Exp")


@case("hardswish", [s3(NPU), s2(CPU, "no Neutron converter for")])
def _():
    return unary("HardSwish")


@case("sigmoid", [s3(NPU), s2(NPU)])
def _():
    return unary("Sigmoid", oscale=1 / 256, ozp=-128)


@case("leaky_relu", [s3(NPU), s2(NPU)])
def _():
    return unary("LeakyRelu", alpha=0.1)


@case("hard_sigmoid", [s3(CPU, "HardSigmoid has no Neutron converter", "Clip(x * 0.2 + 0.5, 0, 1)"),
                       s2(CPU, "HardSigmoid has no Neutron converter")])
def _():
    return unary("HardSigmoid")


@case("rsqrt_pair", [s3(NPU), s2(CPU, "no Neutron converter for")])
def _():
    g = G()
    x = g.input([1, 8, 4, 4], zp=-128)
    s = g.op("Sqrt", [x], name="target", zp=-128)
    g.output(g.op("Reciprocal", [s], name="recip", zp=-128))
    return g


@case("sqrt_alone", [s3(CPU, "Neutron has no square root", "Reciprocal(Sqrt(x))")])
def _():
    return unary("Sqrt", zp=-128)


@case("neg_per_channel", [s3(CPU, "quantized per channel", "per tensor"), s2(CPU, "quantized per channel")])
def _():
    g = G()
    x = g.input([1, 4, 4, 4], scale=[0.05, 0.04, 0.03, 0.02], zp=[0, 0, 0, 0], axis=1)
    g.output(g.op("Neg", [x], name="target"))
    return g


def prelu(shape, nslope=None):
    g = G()
    x = g.input(list(shape))
    slope = g.const(np.full([nslope or shape[-1]], 0.25), scale=0.01)
    g.output(g.op("PRelu", [x, slope], name="target"))
    return g


# SDK 3.x PRelu: a per-channel slope on a rank > 2 tensor only channels
# first. SDK 2.x PRelu: 4-D, channels % num_macs, H*W <= 4096 (formatless:
# channels last).
@case("prelu_12_channels", [s3(CPU, "slope per channel on [1, 2, 2, 12]", "one slope"),
                            s2(CPU, "12 channels are not a multiple of num_macs = 8")])
def _():
    return prelu((1, 2, 2, 12))


@case("prelu_one_slope", [s3(NPU)])
def _():
    return prelu((1, 2, 2, 12), nslope=1)


@case("prelu_after_conv", [s3(NPU), s2(CPU, "12 channels are not a multiple of num_macs = 8")])
def _():
    g = G()
    x = g.input([1, 4, 6, 6])
    y = g.op("Conv", [x, g.const(np.full([12, 4, 1, 1], 0.1), scale=0.01)])
    slope = g.const(np.full([12, 1, 1], 0.25), scale=0.01)
    g.output(g.op("PRelu", [y, slope], name="target"))
    return g


@case("prelu_hw_4096", [s2(NPU)])
def _():
    return prelu((1, 64, 64, 8))


@case("prelu_hw_4160", [s2(CPU, "H*W = 4160 > 4096")])
def _():
    return prelu((1, 65, 64, 8))


# Reshape: rank < 8; alone in its partition a no-op (CPU).
def reshape_after_add(shape):
    g = G()
    a, b = g.input([1, 8, 4, 4]), g.input([1, 8, 4, 4])
    s = g.op("Add", [a, b])
    g.output(g.op("Reshape", [s, g.ints(shape)], name="target"))
    return g


@case("reshape_rank7", [s3(NPU), s2(NPU)])
def _():
    return reshape_after_add([1, 2, 2, 2, 2, 2, 4])


@case("reshape_rank8", [s3(CPU, "rank 8", "rank 7"), s2(CPU, "rank 8")])
def _():
    return reshape_after_add([1, 2, 2, 2, 2, 2, 2, 2])


@case("reshape_alone", [s3(CPU, "nothing to compute"), s2(CPU, "nothing to compute")])
def _():
    g = G()
    x = g.input([1, 8, 4, 4])
    g.output(g.op("Reshape", [x, g.ints([1, 128])], name="target"))
    return g


@case("identity_alone", [s3(CPU, "Identity alone in its NPU partition", "remove it")])
def _():
    return unary("Identity")


@case("identity_after_add", [s3(NPU), s2(NPU)])
def _():
    g = G()
    a, b = g.input([1, 8, 4, 4]), g.input([1, 8, 4, 4])
    g.output(g.op("Identity", [g.op("Add", [a, b])], name="target"))
    return g


# Transpose: anything on Neutron-C in SDK 3.x; SDK 2.x NHWC <-> NCHW with C,
# H*W multiples of num_macs and batch 1 only.
@case("transpose_nhwc_to_nchw_c12", [s3(NPU), s2(CPU, "C = 12 is not a multiple of num_macs = 8")])
def _():
    return unary("Transpose", shape=(1, 4, 4, 12), perm=[0, 3, 1, 2])


@case("transpose_nhwc_to_nchw_c16", [s2(NPU)])
def _():
    return unary("Transpose", shape=(1, 4, 4, 16), perm=[0, 3, 1, 2])


@case("transpose_other_qparams", [s3(CPU, "Transpose needs its output quantized like its input")])
def _():
    return unary("Transpose", shape=(1, 4, 4, 16), perm=[0, 3, 1, 2], oscale=0.1)


# Slice: step 1, non-empty (both); SDK 2.x slices the channels only, their
# count % num_macs.
def slice_(shape, starts, ends, axes, steps=None):
    g = G()
    x = g.input(list(shape))
    ins = [x, g.ints(starts), g.ints(ends), g.ints(axes)] + ([g.ints(steps)] if steps else [])
    g.output(g.op("Slice", ins, name="target"))
    return g


@case("slice_last_dim_12", [s3(NPU), s2(CPU, "the sliced axis 3 of [1, 4, 4, 12] has 12 elements", "(16)")])
def _():
    return slice_([1, 4, 4, 12], [0], [4], [3])


@case("slice_last_dim_16", [s3(NPU), s2(NPU)])
def _():
    return slice_([1, 4, 4, 16], [0], [8], [3])


# SDK 2.x (ExecuTorch v1.3.0) does not wrap a negative end: 0:-8 is empty there.
@case("slice_negative_end", [s3(NPU), s2(CPU, "SDK 2.x reads a negative index as 0", "positive indices (0:8)")])
def _():
    return slice_([1, 4, 4, 16], [0], [-8], [3])


@case("slice_step2", [s3(CPU, "step 2 on axis 3"), s2(CPU, "step 2 on axis 3")])
def _():
    return slice_([1, 4, 4, 16], [0], [16], [3], [2])


@case("slice_h_axis", [s3(NPU), s2(CPU, "SDK 2.x slices only the channels")])
def _():
    return slice_([1, 4, 4, 16], [0], [2], [1])


@case("split_last_dim", [s3(NPU), s2(NPU)])
def _():
    g = G()
    x = g.input([1, 4, 4, 16])
    a, b = g.op("Split", [x, g.ints([8, 8])], name="target", nout=2, axis=3)
    g.output(a, b)
    return g


@case("split_last_dim_12", [s3(NPU), s2(CPU, "has 12 elements, not a multiple of num_macs = 8")])
def _():
    g = G()
    x = g.input([1, 4, 4, 12])
    a, b = g.op("Split", [x, g.ints([6, 6])], name="target", nout=2, axis=3)
    g.output(a, b)
    return g


# Pad: constant (shared qparams) or reflect in SDK 3.x; SDK 2.x constant
# only, never the channels.
def pad(pads, mode="constant", oscale=None, shape=(1, 4, 4, 8)):
    g = G()
    x = g.input(list(shape))
    g.output(g.op("Pad", [x, g.ints(pads)], name="target", mode=mode, scale=oscale or 0.05))
    return g


@case("pad_h", [s3(NPU), s2(NPU)])
def _():
    return pad([0, 1, 0, 0, 0, 1, 0, 0])


@case("pad_channels", [s3(NPU), s2(CPU, "pads the channels (axis 3) by 0 + 2")])
def _():
    return pad([0, 0, 0, 0, 0, 0, 0, 2])


@case("pad_reflect", [s3(NPU), s2(CPU, "no Neutron converter for reflect padding")])
def _():
    return pad([0, 1, 0, 0, 0, 1, 0, 0], mode="reflect")


@case("pad_edge", [s3(CPU, "Pad mode 'edge'", "constant or reflect"), s2(CPU, "Pad mode 'edge'")])
def _():
    return pad([0, 1, 0, 0, 0, 1, 0, 0], mode="edge")


@case("pad_other_qparams", [s3(CPU, "Pad needs its output quantized like its input")])
def _():
    return pad([0, 1, 0, 0, 0, 1, 0, 0], oscale=0.1)


# Resize: SDK 3.x H and W scales each in {1, 2, 4, 8}; SDK 2.x x2 or x4 in
# both, channels % num_macs.
def resize(sh, sw, c=8, mode="nearest", h=4, w=4):
    g = G()
    x = g.input([1, c, h, w])
    attrs = {"mode": mode}
    if mode == "nearest":
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    g.output(g.op("Resize", [x, "", g.floats([1, 1, sh, sw])], name="target", **attrs))
    return g


@case("resize_x2", [s3(NPU), s2(NPU)])
def _():
    return resize(2, 2)


@case("resize_x8", [s3(NPU), s2(CPU, "scale 8 x 8", "resize by 4, then by 2")])
def _():
    return resize(8, 8)


@case("resize_x3", [s3(CPU, "H scale 3 (4 -> 12) is not 1, 2, 4 or 8", "x3 cannot be made of"),
                    s2(CPU, "scale 3 x 3", "x3 cannot be made of x2 and x4")])
def _():
    return resize(3, 3)


@case("resize_x16", [s3(CPU, "H scale 16", "x8 x2")])
def _():
    return resize(16, 16, h=2, w=2)


@case("resize_x2_x4", [s3(NPU), s2(CPU, "scale 2 x 4", "one scale for H and W")])
def _():
    return resize(2, 4)


@case("resize_bilinear_x4_c12", [s3(NPU), s2(CPU, "Resize of 12 channels, not a multiple of num_macs = 8", "(16)")])
def _():
    g = G()
    x = g.input([1, 12, 4, 4])
    g.output(g.op("Resize", [x, "", g.floats([1, 1, 4, 4])], name="target", mode="linear",
                  coordinate_transformation_mode="half_pixel"))
    return g


@case("resize_x1_alone", [s3(CPU, "Resize by 1 alone in its NPU partition", "remove it")])
def _():
    return resize(1, 1)


# Item 4: a model quantized by another tool whose Concat inputs carry their
# own scales: written with shared scales, then one input's scale edited.
def concat_shared():
    g = G()
    a, b = g.input([1, 4, 4, 8], scale=0.05), g.input([1, 4, 4, 8], scale=0.05)
    g.output(g.op("Concat", [a, b], name="target", scale=0.05, axis=3))
    return g


@case("concat_shared_qparams", [s3(NPU), s2(NPU)])
def _():
    return concat_shared()


@case("concat_edited_qparams", [s3(CPU, "Concat input 1 has scale 0.08", "output's scale"),
                                s2(CPU, "Concat input 1 has scale 0.08")])
def _():
    return concat_shared()


def edit_second_input_scale(path):
    """The onnx-package edit of case concat_edited_qparams: the scale of the
    second input's Q / DQ pair becomes 0.08."""
    m = onnx.load(path)
    inputs = [i.name for i in m.graph.input]
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == inputs[1])
    for init in m.graph.initializer:
        if init.name == q.input[1]:
            init.CopyFrom(numpy_helper.from_array(np.asarray(0.08, np.float32), init.name))
    onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qfold", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("only", nargs="*", help="case names (all by default)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    h = subprocess.run([a.qfold, "check", "--help"], capture_output=True, text=True)
    if h.returncode != 0 and "unknown command" in (h.stdout + h.stderr):
        print("skipped: this qfold has no `check` command")
        return 77
    failures, runs = [], 0
    for name, build, checks in CASES:
        if a.only and name not in a.only:
            continue
        path = os.path.join(a.work, f"{name}.onnx")
        build().save(path)
        if name == "concat_edited_qparams":
            edit_second_input_scale(path)
        for flow, sets, want, rule, fix in checks:
            out = os.path.join(a.work, f"{name}.{flow}.{'_'.join(sets) or 'default'}.json")
            cmd = [a.qfold, "check", path, "--json", out, "--set", f"neutron-flow={flow}"]
            for s in sets:
                cmd += ["--set", s]
            p = subprocess.run(cmd, capture_output=True, text=True)
            runs += 1
            label = f"{name} [{flow}{' ' + ' '.join(sets) if sets else ''}]"
            if p.returncode != 0:
                failures.append(f"{label}: qfold check exited {p.returncode}: {p.stderr.strip()}")
                continue
            with open(out) as f:
                rep = json.load(f)
            node = next((n for n in rep["nodes"] if n["name"] == "target"), None)
            if node is None:
                failures.append(f"{label}: no node 'target' in the report")
                continue
            got, got_rule, got_fix = node["placement"], node.get("rule") or "", node.get("fix") or ""
            if want == WITH_CONV:
                conv = next(n for n in rep["nodes"] if n["name"] == "conv")
                want = NPU if conv["placement"] == NPU else CPU
                label += f" (conv on the {conv['placement']})"
            problems = []
            if got != want:
                problems.append(f"placement {got}, want {want}")
            if want == CPU and rule and rule not in got_rule:
                problems.append(f"rule {got_rule!r} lacks {rule!r}")
            if want == CPU and fix and fix not in got_fix:
                problems.append(f"fix {got_fix!r} lacks {fix!r}")
            if problems:
                failures.append(f"{label}: " + "; ".join(problems) + f" (rule: {got_rule!r})")
    for f in failures:
        print("FAIL", f)
    print(f"{runs - len(failures)} of {runs} checks passed ({len(CASES)} models)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
