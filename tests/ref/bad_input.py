#!/usr/bin/python3
"""Bad input to `qfold run`: every case must exit with status 2, print
exactly one line on stderr that names the problem (checked by key words),
nothing on stdout, not die by a signal, and leave no output file behind.

    bad_input.py QFOLD REAL_MODEL.onnx CASE...   (CASE 'all' runs every case)

REAL_MODEL is a real torch-exported model (truncated for one case). The
'control' case runs the same small model on good input and must succeed, so
that the other cases fail for the defect they inject and nothing else.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qfref import run_cases


def relu_model(path):
    """pixels [1, 3, 4, 4] -> Relu (node 'act') -> scores."""
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, 4, 4])
    g = helper.make_graph([helper.make_node("Relu", ["pixels"], ["scores"], name="act")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)


def good_input(path):
    np.save(path, np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32))


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


# Each case: (files to create in a fresh directory, argv after "run", key words
# that must all appear in the stderr line (case-insensitive)).

def case_control(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    good_input(os.path.join(d, "x.npy"))
    return ["m.onnx", "-i", "x.npy", "-o", "y.npy"], None


def case_empty_model(d, real):
    write_bytes(os.path.join(d, "empty.onnx"), b"")
    good_input(os.path.join(d, "x.npy"))
    return ["empty.onnx", "-i", "x.npy", "-o", "y.npy"], ["empty.onnx"]


def case_truncated_model(d, real):
    with open(real, "rb") as f:
        data = f.read()
    write_bytes(os.path.join(d, "cut.onnx"), data[: len(data) * 2 // 3])
    good_input(os.path.join(d, "x.npy"))
    return ["cut.onnx", "-i", "x.npy", "-o", "y.npy"], ["cut.onnx"]


def case_random_bytes(d, real):
    write_bytes(os.path.join(d, "noise.onnx"), np.random.default_rng(1).bytes(4096))
    good_input(os.path.join(d, "x.npy"))
    return ["noise.onnx", "-i", "x.npy", "-o", "y.npy"], ["noise.onnx"]


def case_missing_model(d, real):
    good_input(os.path.join(d, "x.npy"))
    return ["nowhere.onnx", "-i", "x.npy", "-o", "y.npy"], ["nowhere.onnx"]


def case_cycle(d, real):
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, 4, 4])
    nodes = [helper.make_node("Add", ["pixels", "loop_b"], ["loop_a"], name="cyc_add"),
             helper.make_node("Relu", ["loop_a"], ["loop_b"], name="cyc_relu"),
             helper.make_node("Relu", ["loop_a"], ["scores"], name="out_relu")]
    g = helper.make_graph(nodes, "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(d, "cyc.onnx"))
    good_input(os.path.join(d, "x.npy"))
    return ["cyc.onnx", "-i", "x.npy", "-o", "y.npy"], ["cycle", "cyc_"]


def case_missing_initializer(d, real):
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 4, 4])
    b = numpy_helper.from_array(np.zeros(2, np.float32), "conv_bias")
    node = helper.make_node("Conv", ["pixels", "conv_weight_gone", "conv_bias"], ["scores"], name="conv0",
                            kernel_shape=[1, 1])
    g = helper.make_graph([node], "g", [x], [y], initializer=[b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(d, "noinit.onnx"))
    good_input(os.path.join(d, "x.npy"))
    return ["noinit.onnx", "-i", "x.npy", "-o", "y.npy"], ["conv_weight_gone"]


def case_unsupported_op(d, real):
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, 4, 4])
    node = helper.make_node("Hardmax", ["pixels"], ["scores"], name="max_it", axis=-1)
    g = helper.make_graph([node], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), os.path.join(d, "hardmax.onnx"))
    good_input(os.path.join(d, "x.npy"))
    return ["hardmax.onnx", "-i", "x.npy", "-o", "y.npy"], ["Hardmax", "max_it"]


def case_custom_domain_op(d, real):
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 3, 4, 4])
    node = helper.make_node("FancyOp", ["pixels"], ["scores"], name="fancy0", domain="com.example")
    g = helper.make_graph([node], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.example", 1)])
    onnx.save(m, os.path.join(d, "custom.onnx"))
    good_input(os.path.join(d, "x.npy"))
    return ["custom.onnx", "-i", "x.npy", "-o", "y.npy"], ["FancyOp", "fancy0"]


def case_wrong_shape(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    np.save(os.path.join(d, "x.npy"), np.ones((1, 3, 4, 5), np.float32))
    return ["m.onnx", "-i", "x.npy", "-o", "y.npy"], ["pixels", "1, 3, 4, 5"]


def case_wrong_rank(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    np.save(os.path.join(d, "x.npy"), np.ones((3, 4, 4), np.float32))
    return ["m.onnx", "-i", "x.npy", "-o", "y.npy"], ["pixels", "[3, 4, 4]"]


def case_wrong_dtype(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    np.save(os.path.join(d, "x.npy"), np.ones((1, 3, 4, 4), np.float64))
    return ["m.onnx", "-i", "x.npy", "-o", "y.npy"], ["pixels", "float64"]


def case_corrupt_npy(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    write_bytes(os.path.join(d, "x.npy"), b"\x93NUMPY\x01\x00\x30\x00{'descr': '<f4', 'fortran_order': Fa")
    return ["m.onnx", "-i", "x.npy", "-o", "y.npy"], ["x.npy"]


def case_truncated_npy(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    good_input(os.path.join(d, "x.npy"))
    with open(os.path.join(d, "x.npy"), "rb") as f:
        data = f.read()
    write_bytes(os.path.join(d, "x.npy"), data[:-20])
    return ["m.onnx", "-i", "x.npy", "-o", "y.npy"], ["x.npy"]


def case_too_many_inputs(d, real):
    relu_model(os.path.join(d, "m.onnx"))
    good_input(os.path.join(d, "x.npy"))
    return ["m.onnx", "-i", "x.npy", "-i", "x.npy", "-o", "y.npy"], ["input"]


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def run_case(qfold, real, name):
    with tempfile.TemporaryDirectory(prefix="qf-bad-") as d:
        args, words = CASES[name](d, real)
        before = set(os.listdir(d))
        r = subprocess.run([qfold, "run"] + args, cwd=d, capture_output=True, text=True, timeout=120)
        after = set(os.listdir(d))
        lines = r.stderr.splitlines()
        if r.returncode < 0:
            return False, f"killed by signal {-r.returncode}; stderr: {' | '.join(lines[:5])}"
        if words is None:  # control: must succeed
            if r.returncode != 0:
                return False, f"good input failed with exit {r.returncode}: {' | '.join(lines[:3])}"
            if "y.npy" not in after:
                return False, "good input wrote no output"
            return True, "good input runs"
        problems = []
        if r.returncode != 2:
            problems.append(f"exit status {r.returncode}, expected 2")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, expected 1")
        text = r.stderr.lower()
        missing = [w for w in words if w.lower() not in text]
        if missing:
            problems.append(f"stderr does not name {missing}")
        if r.stdout:
            problems.append(f"stdout not empty: {r.stdout[:80]!r}")
        if after - before:
            problems.append(f"files left behind: {sorted(after - before)}")
        shown = " | ".join(lines[:3]) + (" | ..." if len(lines) > 3 else "")
        if problems:
            return False, "; ".join(problems) + f"; stderr: {shown}"
        return True, f"exit 2: {shown}"


def main():
    qfold, real, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    if names == ["all"]:
        names = list(CASES)
    return run_cases(names, lambda name: run_case(qfold, real, name))


if __name__ == "__main__":
    sys.exit(main())
