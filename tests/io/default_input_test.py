#!/usr/bin/python3
"""An initializer named like a graph input (issue 33, item 7c): from ONNX IR
version 4 it is that input's default value, which a run may override; below
IR version 4 every initializer had to be listed as an input and the pair is
a constant. ONNX Runtime reads both so (an "overridable initializer": not a
constant for its optimizers, fed or left to its default; IR < 4: a
constant). Registered by tests/io/default_input.cmake.

    default_input_test.py --qfold BIN --node NODE --ort-run ORT_RUN_JS --work DIR CASE

The model: Conv -> BatchNormalization -> Relu, the BatchNormalization's
scale `gamma` an input with a default. ONNX Runtime (tests/ref/ort_run.js)
is the reference: it runs the model with the default; an override is what
it computes on the same model whose initializer holds the fed value (its
node binding feeds only the inputs without a default, by the ONNX meaning of
an override the same thing).

Cases:
- run: `inspect` lists both inputs, `gamma` with its default; `run` fed x
  only uses the default, fed x and gamma uses the fed value (both against
  ONNX Runtime, and they differ); a gamma of the wrong shape is refused; the
  wrong count of -i names the inputs and which have defaults.
- fuse: `fuse` does not fold the BatchNormalization into the Conv (its
  scale is not a constant; the report says so), writes gamma as input and initializer again
  (the round trip: onnx's checker, ir_version >= 4), and the fused model
  runs as the original, fed or not.
- ir3: the same model at IR version 3: gamma is a constant (one input),
  `fuse` folds the BatchNormalization, ONNX Runtime agrees.
- mismatch: an initializer whose shape contradicts its input's declared
  shape is refused at load (exit 2, naming the input).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from qfcli import check, run_qfold  # noqa: E402

ARGS = None  # set by qfcli.main


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv, expect=0):
    return run_qfold(ARGS.qfold, argv, expect=expect, timeout=120)


RNG = np.random.default_rng(33)
W = (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
GAMMA = RNG.uniform(0.5, 1.5, 4).astype(np.float32)
BETA, MEAN = RNG.standard_normal(4).astype(np.float32), (RNG.standard_normal(4) * 0.1).astype(np.float32)
VAR = RNG.uniform(0.5, 2.0, 4).astype(np.float32)
X = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
G2 = np.array([-1.0, 2.0, 0.25, 3.0], np.float32)  # the override: a negative scale flips a ReLU


def model(path, ir_version=8, gamma=GAMMA, declared=(4,)):
    """Conv -> BatchNormalization -> Relu; `gamma` a graph input with that
    initializer (declared: the input's declared shape)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    inits = [nh.from_array(W, "w"), nh.from_array(gamma, "gamma"), nh.from_array(BETA, "beta"),
             nh.from_array(MEAN, "mean"), nh.from_array(VAR, "var")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"], name="bn"),
             h.make_node("Relu", ["b"], ["y"], name="relu")]
    ins = [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 8, 8]),
           h.make_tensor_value_info("gamma", T.FLOAT, list(declared))]
    if ir_version < 4:  # every initializer is an input then
        ins += [h.make_tensor_value_info(t.name, T.FLOAT, list(t.dims)) for t in inits if t.name != "gamma"]
    g = h.make_graph(nodes, "default_input", ins, [h.make_tensor_value_info("y", T.FLOAT, [2, 4, 8, 8])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13 if ir_version >= 7 else 7)])
    m.ir_version = ir_version
    if declared == (4,):
        onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def ort(path, tag):
    """ONNX Runtime's output of `path` fed X (inputs without a default)."""
    d = work("ort_" + tag)
    os.makedirs(d, exist_ok=True)
    np.save(work("x.npy"), X)
    p = subprocess.run([ARGS.node, ARGS.ort_run, path, d, work("x.npy")], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0, "ONNX Runtime on %s: %s" % (path, p.stderr[-2000:]))
    return np.load(os.path.join(d, "out0.npy"))


def run(path, *feeds):
    """`qfold run path` fed X and then `feeds` (arrays), the output."""
    argv = ["run", path, "-i", work("x.npy")]
    np.save(work("x.npy"), X)
    for k, a in enumerate(feeds):
        np.save(work("feed%d.npy" % k), a)
        argv += ["-i", work("feed%d.npy" % k)]
    qfold(*(argv + ["-o", work("y.npy")]))
    return np.load(work("y.npy"))


def same(a, b, what):
    check(a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-4),
          "%s: max |diff| %s" % (what, np.abs(a - b).max() if a.shape == b.shape else (a.shape, b.shape)))


def inputs_of(path):
    """(name, has a default) of each input, as `qfold inspect --json` lists them."""
    info = json.loads(qfold("inspect", path, "--json")[1])
    return [(i["name"], bool(i.get("default"))) for i in info["inputs"]]


def case_run():
    m = model(work("m.onnx"))
    got = inputs_of(m)
    check(got == [("x", False), ("gamma", True)], "inspect lists inputs %r, expected x and gamma (default)" % got)
    text = qfold("inspect", m)[1]
    check("gamma" in text and "default" in text, "inspect's text does not show gamma's default:\n" + text)
    ref = ort(m, "default")
    y = run(m)
    same(y, ref, "run fed x only vs ONNX Runtime (gamma's default)")
    ref2 = ort(model(work("m_g2.onnx"), gamma=G2), "override")
    y2 = run(m, G2)
    same(y2, ref2, "run fed x and gamma vs ONNX Runtime on the overriding value")
    check(not np.allclose(y, y2), "feeding gamma changes nothing")
    # the override with the wrong shape, and a wrong count of -i
    np.save(work("bad.npy"), np.ones(3, np.float32))
    _, _, err = qfold("run", m, "-i", work("x.npy"), "-i", work("bad.npy"), "-o", work("y.npy"), expect=2)
    check("gamma" in err, "a gamma of 3 values: %r" % err)
    _, _, err = qfold("run", m, "-o", work("y.npy"), expect=2)
    check("'x'" in err and "'gamma'" in err and "default" in err, "no -i: the message %r" % err)


def case_fuse():
    import onnx
    m = model(work("m.onnx"))
    f = work("fused.onnx")
    out = qfold("fuse", m, "-o", f)[1]
    check("'gamma' is a graph input with a default" in out, "fuse does not say why the BN is kept:\n" + out)
    fm = onnx.load(f)
    onnx.checker.check_model(fm)
    check(fm.ir_version >= 4, "fuse wrote ir_version %d: below 4 gamma would be a constant" % fm.ir_version)
    check([i.name for i in fm.graph.input] == ["x", "gamma"], "fused inputs %r" % [i.name for i in fm.graph.input])
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in fm.graph.initializer}
    check("gamma" in inits and np.array_equal(inits.get("gamma"), GAMMA),
          "the fused model lost gamma's default (initializers %r)" % sorted(inits))
    ops = [n.op_type for n in fm.graph.node]
    check("BatchNormalization" in ops, "fuse folded a BatchNormalization whose scale is an input: %r" % ops)
    same(run(f), run(m), "fused vs original, gamma's default")
    same(run(f, G2), run(m, G2), "fused vs original, gamma fed")
    same(ort(f, "fused"), ort(m, "orig"), "ONNX Runtime: fused vs original")


def case_ir3():
    import onnx
    m = model(work("m3.onnx"), ir_version=3)
    got = inputs_of(m)
    check(got == [("x", False)], "IR 3: inspect lists inputs %r, expected x only (initializers are constants)" % got)
    same(run(m), ort(m, "ir3"), "IR 3: run vs ONNX Runtime")
    f = work("fused3.onnx")
    qfold("fuse", m, "-o", f)
    ops = [n.op_type for n in onnx.load(f).graph.node]
    check("BatchNormalization" not in ops, "IR 3: fuse kept the BatchNormalization of constants: %r" % ops)
    same(run(f), ort(m, "ir3b"), "IR 3: fused vs ONNX Runtime on the original")


def case_mismatch():
    m = model(work("bad.onnx"), declared=(5,))
    _, _, err = qfold("inspect", m, expect=2)
    check("gamma" in err and "initializer" in err, "a default of shape [4] for an input of [5]: %r" % err)


if __name__ == "__main__":
    import qfcli
    sys.exit(qfcli.main("io_default_input", globals(), paths=("--work", "--ort-run"), options=("--node",)))
