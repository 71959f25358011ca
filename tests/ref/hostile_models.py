#!/usr/bin/python3
"""Hostile models: ONNX files that parse fine but carry absurd content
(overflowing shapes, huge attributes, extreme indices, NaN where math
depends on it, plans larger than any machine). `qfold run` must give one
clear stderr line naming the node (or value) and the problem, exit with
the status the contract says (2: bad input; 1: a plausible plan that this
machine cannot allocate), not die by a signal, write nothing on stdout and
leave no output file. The 'ok_*' cases are hostile but valid: they must run
and match numpy.

    hostile_models.py QFOLD CASE...   (CASE 'all' runs every case)

Several cases are regression tests for fuzzer findings (fuzz/README.md).
"""
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

I64_MAX = 2**63 - 1
I64_MIN = -2**63


def model(d, nodes, inits=(), x_shape=(1, 3, 4, 4), outputs=("y",), opset=14, x_name="x", x_type=TensorProto.FLOAT):
    """Save m.onnx with graph input x (when x_shape is not None) and write x.npy."""
    ins = []
    if x_shape is not None:
        ins.append(helper.make_tensor_value_info(x_name, x_type, list(x_shape)))
        arr = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), arr)
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    g = helper.make_graph(nodes, "g", ins, outs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(m, os.path.join(d, "m.onnx"))
    args = ["m.onnx"]
    if x_shape is not None:
        args += ["-i", "x.npy"]
    for i in range(len(outputs)):
        args += ["-o", f"y{i}.npy"]
    return args


def i64(name, vals):
    return numpy_helper.from_array(np.array(vals, np.int64), name)


def f32(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def raw(name, dtype, dims, data=b""):
    return helper.make_tensor(name, dtype, dims, data, raw=True)


# Each case returns (argv after "run", expected exit status, key words for the
# stderr line) — or, for ok_* cases, (argv, 0, expected output array).

def case_reshape_overflow(d):
    n = helper.make_node("Reshape", ["x", "s"], ["y"], name="big_reshape")
    return model(d, [n], [i64("s", [2**40, 2**40, 2**40])]), 2, ["big_reshape", "larger than qfold handles"]


def case_reshape_two_unknown(d):
    n = helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")
    return model(d, [n], [i64("s", [-1, -1])]), 2, ["rs", "more than one -1"]


def case_expand_huge(d):
    n = helper.make_node("Expand", ["x", "s"], ["y"], name="big_expand")
    return model(d, [n], [i64("s", [2**40, 1, 1, 1])]), 2, ["big_expand", "larger than qfold handles"]


def case_constant_of_shape_huge(d):
    n = helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")
    return model(d, [n], [i64("s", [2**62, 2**62])], x_shape=None), 2, ["fill", "larger than qfold handles"]


def case_zero_dim_hides_huge(d):
    # numel 0, but Flatten's product of the other dims would overflow int64.
    c = helper.make_node("ConstantOfShape", ["s"], ["e"], name="empty_fill")
    f = helper.make_node("Flatten", ["e"], ["y"], name="flat", axis=1)
    return model(d, [c, f], [i64("s", [0, 2**40, 2**40])], x_shape=None), 2, ["empty_fill", "larger"]


def case_initializer_zero_dim(d):
    w = raw("hollow_weight", TensorProto.FLOAT, [0, 2**40, 2**40])
    n = helper.make_node("Flatten", ["hollow_weight"], ["y"], name="flat", axis=2)
    return model(d, [n], [w], x_shape=None), 2, ["hollow_weight", "larger"]


def case_input_huge(d):
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [2**62, 2**62])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["pixels"], ["y"], name="act")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(d, "m.onnx"))
    np.save(os.path.join(d, "x.npy"), np.zeros((1, 1), np.float32))
    return ["m.onnx", "-i", "x.npy", "-o", "y0.npy"], 2, ["pixels", "larger"]


def case_range_huge(d):
    n = helper.make_node("Range", ["a", "b", "c"], ["y"], name="count_up")
    inits = [i64("a", 0), i64("b", 2**62), i64("c", 1)]
    return model(d, [n], inits, x_shape=None), 2, ["count_up", "Range"]


def case_range_extremes(d):
    # The length computed in double used to overflow the int64 conversion.
    n = helper.make_node("Range", ["a", "b", "c"], ["y"], name="span")
    inits = [i64("a", I64_MIN), i64("b", I64_MAX), i64("c", 1)]
    return model(d, [n], inits, x_shape=None), 2, ["span", "elements"]


def case_range_empty_operand(d):
    # start has no element: reading it went past the end of its buffer.
    n = helper.make_node("Range", ["a", "b", "c"], ["y"], name="hollow_range")
    inits = [i64("a", np.zeros(0, np.int64)), i64("b", 4), i64("c", 1)]
    return model(d, [n], inits, x_shape=None), 2, ["hollow_range", "scalar"]


def case_split_overflow(d):
    # The sum of the sizes wrapped around to the axis length.
    n = helper.make_node("Split", ["x", "s"], ["y", "y1", "y2"], name="cut", axis=2)
    return model(d, [n], [i64("s", [I64_MAX, I64_MAX, 6])], outputs=("y", "y1", "y2")), 2, ["cut", "Split"]


def case_pad_beyond_axis(d):
    n = helper.make_node("Pad", ["x", "p"], ["y"], name="crop")
    return model(d, [n], [i64("p", [0, 0, -10, 0, 0, 0, 12, 0])]), 2, ["crop", "do not fit"]


def case_pad_overflow(d):
    n = helper.make_node("Pad", ["x", "p"], ["y"], name="grow")
    return model(d, [n], [i64("p", [0, 0, I64_MAX, 0, 0, 0, I64_MAX, 0])]), 2, ["grow", "Pad"]


def case_pad_extremes(d):
    n = helper.make_node("Pad", ["x", "p"], ["y"], name="shift")
    return model(d, [n], [i64("p", [0, 0, I64_MIN, 0, 0, 0, I64_MAX, 0])]), 2, ["shift", "Pad"]


def conv_w(shape=(2, 3, 3, 3)):
    return f32("w", np.random.default_rng(1).standard_normal(shape))


def case_conv_huge_dilation(d):
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="wide", dilations=[2**40, 1])
    return model(d, [n], [conv_w()]), 2, ["wide", "dilations"]


def case_conv_huge_pads(d):
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="padded", pads=[I64_MAX, 0, I64_MAX, 0])
    return model(d, [n], [conv_w()]), 2, ["padded", "pads"]


def case_conv_huge_stride(d):
    n = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2**40, 1])
    return model(d, [n], [conv_w((3, 2, 3, 3))]), 2, ["up", "strides"]


def case_conv_scratch(d):
    # Output 1 x 1 x 9938 x 9938 floats (395 MB) is fine, but im2col of a 64x64
    # kernel over it would need 1.6 TB of scratch: refused before allocating.
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="im2col_bomb", pads=[5000] * 4)
    return model(d, [n], [conv_w((1, 1, 64, 64))], x_shape=(1, 1, 1, 1)), 2, ["im2col_bomb", "scratch"]


def case_conv_transpose_group(d):
    # 4 x 2^62 output channels: the product overflowed.
    w = raw("w", TensorProto.FLOAT, [0, 4, 3, 3])
    n = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="grouped", group=2**62)
    return model(d, [n], [w], x_shape=(1, 0, 4, 4)), 2, ["grouped", "group"]


def case_arena_over_limit(d):
    # Each Expand is 512 GiB (under the 1 TiB tensor limit), the Add needs three
    # at once: the plan is refused as bad input before anything is allocated.
    # a and b are graph outputs too: else the Add would write over one of them
    # (elementwise arithmetic runs in place over an operand read for the last
    # time) and two buffers, 1 TiB, would pass the limit.
    c = f32("one", [1.0])
    s = i64("s", [2**27, 2**10])
    nodes = [helper.make_node("Expand", ["one", "s"], ["a"], name="ea"),
             helper.make_node("Expand", ["one", "s"], ["b"], name="eb"),
             helper.make_node("Add", ["a", "b"], ["y"], name="sum")]
    return model(d, nodes, [c, s], x_shape=None, outputs=("y", "a", "b")), 2, ["sum", "live activations"]


def case_plan_out_of_memory(d):
    # 256 GiB of activations: plausible, but not on this machine -> exit 1.
    c = f32("one", [1.0])
    s = i64("s", [2**27, 2**9])
    n = helper.make_node("Expand", ["one", "s"], ["y"], name="ea")
    return model(d, [n], [c, s], x_shape=None), 1, ["out of memory", "node 'ea'"]


def case_gather_index_out_of_range(d):
    n = helper.make_node("Gather", ["x", "i"], ["y"], name="pick", axis=1)
    return model(d, [n], [i64("i", [0, I64_MIN])]), 2, ["pick", "out of range"]


def case_scatter_nd_index_out_of_range(d):
    n = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="put")
    u = f32("u", np.zeros((1, 4, 4)))
    return model(d, [n], [i64("i", [[0, I64_MAX]]), u]), 2, ["put", "out of range"]


def case_slice_step_zero(d):
    n = helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="cut")
    inits = [i64("st", [0]), i64("en", [4]), i64("ax", [2]), i64("sp", [0])]
    return model(d, [n], inits), 2, ["cut", "step 0"]


def case_concat_rank_mismatch(d):
    n = helper.make_node("Concat", ["x", "c"], ["y"], name="join", axis=0)
    return model(d, [n], [f32("c", np.zeros((3, 4)))]), 2, ["join", "Concat"]


def case_axis_out_of_range(d):
    n = helper.make_node("Softmax", ["x"], ["y"], name="norm", axis=I64_MIN)
    return model(d, [n]), 2, ["norm", "axis"]


def case_kernel_shape_wrong_length(d):
    n = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2, 2])
    return model(d, [n]), 2, ["pool", "kernel_shape"]


def case_constant_of_shape_value_wrong_dtype(d):
    v = helper.make_tensor("v", TensorProto.STRING, [1], [b"x"])
    n = helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill", value=v)
    return model(d, [n], [i64("s", [2, 2])], x_shape=None), 2, ["fill", "string"]


def case_attribute_wrong_type(d):
    # pads given as one INT: read as "no pads" before, silently.
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=1)
    return model(d, [n], [conv_w()]), 2, ["conv", "'pads' must be INTS"]


def case_batchnorm_negative_variance(d):
    n = helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], name="bn")
    inits = [f32("g", np.ones(3)), f32("b", np.zeros(3)), f32("m", np.zeros(3)), f32("v", [1.0, -2.0, 1.0])]
    return model(d, [n], inits), 2, ["bn", "variance"]


def case_sigmoid_nan(d):
    # Fuzzer finding: NaN through the vectorized exp converted NaN to int (UB).
    n = helper.make_node("Sigmoid", ["c"], ["y"], name="squash")
    args = model(d, [n], [f32("c", [np.nan, 1.0, -np.inf, np.inf])], x_shape=None)
    return args, 0, 1.0 / (1.0 + np.exp(-np.array([np.nan, 1.0, -np.inf, np.inf], np.float32)))


def case_ok_slice_extreme(d):
    n = helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="cut")
    inits = [i64("st", [I64_MIN, I64_MAX]), i64("en", [I64_MAX, I64_MIN]), i64("ax", [2, 3]),
             i64("sp", [I64_MAX, I64_MIN])]
    args = model(d, [n], inits)
    x = np.load(os.path.join(d, "x.npy"))
    return args, 0, x[:, :, 0:1, 3:4]


def case_ok_range_negative_step(d):
    n = helper.make_node("Range", ["a", "b", "c"], ["r"], name="down")
    cast = helper.make_node("Cast", ["r"], ["y"], name="to_float", to=TensorProto.FLOAT)
    inits = [i64("a", I64_MAX), i64("b", I64_MAX - 10), i64("c", -3)]
    args = model(d, [n, cast], inits, x_shape=None)
    return args, 0, np.arange(I64_MAX, I64_MAX - 10, -3, dtype=np.int64).astype(np.float32)


def case_ok_conv_transpose_empty_input(d):
    # Fuzzer finding: an empty input plane planned no scratch, and col2im did
    # pointer arithmetic on the NULL scratch. Every output is the bias.
    b = f32("b", [1.5, -2.0])
    n = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up")
    args = model(d, [n], [conv_w((1, 2, 3, 3)), b], x_shape=(1, 1, 3, 0))
    return args, 0, np.broadcast_to(np.array([1.5, -2.0], np.float32)[None, :, None, None], (1, 2, 5, 2))


def case_ok_conv_no_channels(d):
    b = f32("b", [0.5, 3.0])
    n = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")
    args = model(d, [n], [raw("w", TensorProto.FLOAT, [2, 0, 3, 3]), b], x_shape=(1, 0, 4, 4))
    return args, 0, np.broadcast_to(np.array([0.5, 3.0], np.float32)[None, :, None, None], (1, 2, 2, 2))


# Strings with a NUL byte: protobuf-c hands ONNX strings over NUL-terminated,
# so each was read cut at the NUL ("Relu\0Evil" ran as Relu, "strides\0x"
# set strides, domain "\0" was the default domain, "w.bin\0../x" read
# w.bin). Refused at import: exit 2 naming the field and the node.

def case_nul_attribute_name(d):
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv_nul")
    n.attribute.append(helper.make_attribute("strides\0x", [2, 2]))
    return model(d, [n], [conv_w()]), 2, ["AttributeProto.name", "conv_nul", "NUL"]


def case_nul_op_type(d):
    n = helper.make_node("Relu\0Evil", ["x"], ["y"], name="evil")
    return model(d, [n]), 2, ["NodeProto.op_type", "evil", "NUL"]


def case_nul_domain(d):
    n = helper.make_node("Relu", ["x"], ["y"], name="dom", domain="\0")
    return model(d, [n]), 2, ["NodeProto.domain", "dom", "NUL"]


def case_nul_value_name(d):
    n = helper.make_node("Relu", ["x"], ["a\0b"], name="r1")
    m = helper.make_node("Relu", ["a\0b"], ["y"], name="r2")
    return model(d, [n, m]), 2, ["NodeProto.output", "r1", "NUL"]


def case_nul_external_location(d):
    w = f32("w", np.ones((2, 3, 3, 3)))
    with open(os.path.join(d, "w.bin"), "wb") as f:
        f.write(w.raw_data)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    e = w.external_data.add()
    e.key, e.value = "location", "w.bin\0../../etc/passwd"
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv_ext")
    return model(d, [n], [w]), 2, ["StringStringEntryProto.value", "tensor 'w'", "NUL"]


def case_external_location_dot(d):
    # "." is the model's directory itself: refused as such (it was reported as
    # leading outside the directory through a symbolic link).
    w = f32("w", np.ones((2, 3, 3, 3)))
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    e = w.external_data.add()
    e.key, e.value = "location", "."
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv_ext")
    return model(d, [n], [w]), 2, ["initializer 'w'", "external data location '.' names the model's directory itself"]


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
# Needs an allocation to fail: safe only where the address space is limited
# (below) and not under a sanitizer, whose allocator reserves differently.
SKIP_UNDER_SANITIZER = {"plan_out_of_memory"}


def limit_memory():
    # 16 GiB of address space: a big allocation fails at once instead of
    # being overcommitted and then touched.
    resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))


def run_case(qfold, name):
    with tempfile.TemporaryDirectory(prefix="qf-hostile-") as d:
        args, want, check = CASES[name](d)
        before = set(os.listdir(d))
        sanitized = os.environ.get("QF_SANITIZED") == "1"
        if name in SKIP_UNDER_SANITIZER and sanitized:
            return True, "skipped under the sanitizer build"
        r = subprocess.run([qfold, "run"] + args, cwd=d, capture_output=True, text=True, timeout=300,
                           preexec_fn=None if sanitized else limit_memory)
        after = set(os.listdir(d))
        lines = r.stderr.splitlines()
        shown = " | ".join(lines[:3]) + (" | ..." if len(lines) > 3 else "")
        if r.returncode < 0:
            return False, f"killed by signal {-r.returncode}; stderr: {shown}"
        if want == 0:
            if r.returncode != 0:
                return False, f"exit {r.returncode}: {shown}"
            y = np.load(os.path.join(d, "y0.npy"))
            if y.shape != check.shape or not np.allclose(y, check, equal_nan=True):
                return False, f"output {y.ravel()[:8]} != expected {check.ravel()[:8]}"
            return True, f"runs, output {list(y.shape)} matches numpy"
        problems = []
        if r.returncode != want:
            problems.append(f"exit status {r.returncode}, expected {want}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, expected 1")
        missing = [w for w in check if w.lower() not in r.stderr.lower()]
        if missing:
            problems.append(f"stderr does not name {missing}")
        if r.stdout:
            problems.append(f"stdout not empty: {r.stdout[:80]!r}")
        if after - before:
            problems.append(f"files left behind: {sorted(after - before)}")
        if problems:
            return False, "; ".join(problems) + f"; stderr: {shown}"
        return True, f"exit {want}: {shown}"


def main():
    qfold, names = sys.argv[1], sys.argv[2:]
    if names == ["all"]:
        names = list(CASES)
    failed = 0
    for name in names:
        ok, msg = run_case(qfold, name)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {msg}")
        failed += not ok
    print(f"{len(names) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
