#!/usr/bin/python3
"""Graphs at scale: import, verify and the passes must be linear (or
n log n) in nodes + edges. Each case writes a generated model and runs
qfold commands on it with a generous time bound (60 s each; 150 s in the
sanitizer build, QF_SANITIZED=1, whose chains have 2 * 10^4 nodes: that pass
checks memory, the first pass the scaling) that the quadratic code could not
meet in the first pass (measured on it: Concat inspect and the chain's quantize still
running after 60 s):

  concat_wide    one Concat of 10^6 copies of x (10^6 edges on one value;
                 the verifier scanned the value's use list per input slot:
                 10^5 copies took 8.9 s, 10^6 would take ~15 min; moving
                 the readers one by one (quantize's Q -> DQ on x) searched
                 the use list from the front: > 120 s, now 1.4 s)
  relu_chain     10^5 Relu nodes in a chain: inspect, fuse, quantize, and
                 export of the int8 model (the TFLite arena plan scanned
                 every tensor at every op: 49 s, now 4 s)
  relu_reversed  the same chain listed in reverse order in the file (the
                 topological sort scanned for the first ready node)

    scale_test.py QFOLD WORKDIR CASE
"""
import os
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

SANITIZED = os.environ.get("QF_SANITIZED") == "1"
BOUND_S = 150.0 if SANITIZED else 60.0
# The sanitizer pass checks the same code for memory errors, not its scaling
# (the first pass's bound does): a fifth of the nodes there (the two chains
# took 83 of its CPU seconds at 10^5).
CHAIN_N = 20_000 if SANITIZED else 100_000


def save(path, nodes):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def chain(n):
    return [helper.make_node("Relu", ["x" if i == 0 else f"t{i}"], [f"t{i + 1}" if i < n - 1 else "y"], name=f"r{i}")
            for i in range(n)]


def run(qfold, args, work):
    t0 = time.monotonic()
    try:
        p = subprocess.run([qfold] + args, cwd=work, capture_output=True, text=True, timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: qfold {' '.join(args)} still running after {BOUND_S:.0f} s (quadratic?)")
    dt = time.monotonic() - t0
    print(f"qfold {' '.join(args)}: exit {p.returncode}, {dt:.2f} s")
    if p.returncode != 0:
        sys.exit(f"FAIL: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def main():
    qfold, work, case = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    work = os.path.join(work, case)
    os.makedirs(work, exist_ok=True)
    m = os.path.join(work, "m.onnx")
    if case == "concat_wide":
        save(m, [helper.make_node("Concat", ["x"] * 1_000_000, ["y"], name="wide", axis=1)])
        out = run(qfold, ["inspect", "m.onnx"], work)
        if "Concat" not in out:
            sys.exit("FAIL: inspect does not list the Concat")
        run(qfold, ["fuse", "m.onnx", "-o", "f.onnx"], work)
        np.save(os.path.join(work, "c.npy"), np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))
        run(qfold, ["quantize", "m.onnx", "-o", "q.onnx", "--calib", "c.npy"], work)
    elif case in ("relu_chain", "relu_reversed"):
        nodes = chain(CHAIN_N)
        if case == "relu_reversed":
            nodes.reverse()
        save(m, nodes)
        out = run(qfold, ["inspect", "m.onnx"], work)
        if str(CHAIN_N) not in out:
            sys.exit(f"FAIL: inspect does not count {CHAIN_N} nodes:\n" + out[:2000])
        run(qfold, ["fuse", "m.onnx", "-o", "f.onnx"], work)
        np.save(os.path.join(work, "c.npy"), np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))
        run(qfold, ["quantize", "m.onnx", "-o", "q.onnx", "--calib", "c.npy"], work)
        if case == "relu_chain":
            run(qfold, ["export", "q.onnx", "-o", "q.tflite"], work)
    else:
        sys.exit(f"unknown case {case}")
    print("ok")


if __name__ == "__main__":
    main()
