"""Backward kernels vs PyTorch autograd: build a one-node ONNX model, run it
forward and backward in qfold (the qf_node_grad tool) and in torch on the
same tensors, compare.

    import grad_util as gu
    model = gu.one_node("Conv", inputs=[x, w, b], params=[False, True, True],
                        attrs={"strides": [2, 2], "group": 2}, opset=13)
    outs, dins, after = gu.qfold_grad(tool, model, [x], [dy], work)
    # dins[i]: d loss / d input slot i (None for a non-float slot)

Inputs are numpy arrays; `params[i]` True makes slot i an initializer
(import may then canonicalize the node, e.g. Gemm with a constant B becomes
qfold's linear), False a graph input fed from the array. A slot given as
None is an omitted optional input. dout entries may be None (no gradient on
that output).

Tolerance: compare() is a relative check against the larger magnitude of
the reference, max|a - b| <= rtol * max(1, max|ref|) elementwise over the
tensor, with rtol = 1e-5 by default (the issue's bound): both sides compute
in float32 but sum in different orders, so the bound is relative to the
tensor's scale, not to each element (a near-zero element of a sum of
cancelling terms carries the rounding of the terms).
"""
import os
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
            np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
            np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL,
            np.dtype(np.float64): TensorProto.DOUBLE}


def one_node(op, inputs, params=None, attrs=None, opset=13, noutputs=1, domain=""):
    """A model of one node `op` over `inputs` (numpy arrays or None);
    params[i] True: slot i is an initializer. Outputs y0..y{noutputs-1}."""
    params = params or [False] * len(inputs)
    ginputs, inits, names = [], [], []
    for i, (a, p) in enumerate(zip(inputs, params)):
        if a is None:
            names.append("")
            continue
        name = "x%d" % i
        names.append(name)
        if p:
            inits.append(numpy_helper.from_array(np.asarray(a), name))
        else:
            ginputs.append(helper.make_tensor_value_info(name, _NP2ONNX[np.asarray(a).dtype], list(np.shape(a))))
    outs = ["y%d" % j for j in range(noutputs)]
    node = helper.make_node(op, names, outs, name="n0", domain=domain, **(attrs or {}))
    gouts = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    graph = helper.make_graph([node], "g", ginputs, gouts, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="grad_util")


def qfold_grad(tool, model, feeds, douts, work, training=False, seed=0, passes=()):
    """Run the qf_node_grad tool. feeds: arrays for the graph inputs in
    order; douts: one array (or None) per node output; passes: qfold passes
    run after import (e.g. ["canonicalize"]: Gemm with a constant B becomes
    linear; the node must stay one node with the same input slots). Returns
    (outs, dins, after): outputs, d loss / d input slot (None where not
    float), each slot's data after the run (None for omitted slots)."""
    os.makedirs(work, exist_ok=True)
    for f in os.listdir(work):
        if f.endswith(".npy") or f.endswith(".onnx"):
            os.remove(os.path.join(work, f))
    mpath = os.path.join(work, "model.onnx")
    onnx.save(model, mpath)
    argv = [tool, mpath, work]
    if training:
        argv.append("--training")
    argv += ["--seed", str(seed)]
    for p in passes:
        argv += ["--pass", p]
    for i, f in enumerate(feeds):
        p = os.path.join(work, "feed_%d.npy" % i)
        np.save(p, np.array(f, order="C"))  # ascontiguousarray makes a 0-d array 1-d
        argv += ["-i", p]
    for j, d in enumerate(douts):
        if d is None:
            argv += ["--dout", "-"]
        else:
            p = os.path.join(work, "dout_%d.npy" % j)
            np.save(p, np.array(d, dtype=np.float32, order="C"))
            argv += ["--dout", p]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("qf_node_grad failed (%d): %s" % (r.returncode, r.stderr.strip()))

    def load(prefix, k):
        p = os.path.join(work, "%s_%d.npy" % (prefix, k))
        return np.load(p) if os.path.exists(p) else None

    n_in = len(model.graph.node[0].input)
    outs = [load("out", j) for j in range(len(douts))]
    return outs, [load("din", i) for i in range(n_in)], [load("after", i) for i in range(n_in)]


def qfold_grad_op(tool, op, feeds, douts, work, training=False, seed=0, ints=None, floats=None):
    """qfold_grad for qfold's op named `op` (an internal op has no ONNX
    form): one node over graph inputs x0.. fed from `feeds`, attributes from
    the dicts `ints` / `floats`. Returns (outs, dins, after) as qfold_grad."""
    os.makedirs(work, exist_ok=True)
    for f in os.listdir(work):
        if f.endswith(".npy"):
            os.remove(os.path.join(work, f))
    argv = [tool, "op:" + op, work, "--seed", str(seed)] + (["--training"] if training else [])
    for k, v in (ints or {}).items():
        argv += ["--int", "%s=%d" % (k, v)]
    for k, v in (floats or {}).items():
        argv += ["--float", "%s=%r" % (k, float(v))]
    for i, f in enumerate(feeds):
        p = os.path.join(work, "feed_%d.npy" % i)
        np.save(p, np.ascontiguousarray(f))
        argv += ["-i", p]
    for j, d in enumerate(douts):
        p = os.path.join(work, "dout_%d.npy" % j)
        if d is None:
            argv += ["--dout", "-"]
        else:
            np.save(p, np.ascontiguousarray(d, dtype=np.float32))
            argv += ["--dout", p]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("qf_node_grad failed (%d): %s" % (r.returncode, r.stderr.strip()))

    def load(prefix, k):
        p = os.path.join(work, "%s_%d.npy" % (prefix, k))
        return np.load(p) if os.path.exists(p) else None

    return ([load("out", j) for j in range(len(douts))], [load("din", i) for i in range(len(feeds))],
            [load("after", i) for i in range(len(feeds))])


def qfold_qat_step(tool, model, work, passes, xs, ts, frozen=False):
    """Run the qf_qat_step driver (tests/train/qf_qat_step.c): `model`
    after the passes named in `passes`, one training step per (xs[k], ts[k])
    pair. Returns load(kind, k, name=None): the step's array written as
    <kind>_<k>[_<name>].npy (kind out / grad / buf), None if absent."""
    os.makedirs(work, exist_ok=True)
    for f in os.listdir(work):
        os.remove(os.path.join(work, f))
    mpath = os.path.join(work, "model.onnx")
    onnx.save(model, mpath)
    argv = [tool, mpath, work]
    for p in passes:
        argv += ["--pass", p]
    if frozen:
        argv.append("--frozen")
    for k, (x, t) in enumerate(zip(xs, ts)):
        for tag, a in (("i", x), ("t", t)):
            p = os.path.join(work, "%s%d.npy" % ("x" if tag == "i" else "t", k))
            np.save(p, a)
            argv += ["-" + tag, p]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("qf_qat_step failed (%d): %s" % (r.returncode, r.stderr.strip()))

    def load(kind, k, name=None):
        p = os.path.join(work, "%s_%d%s.npy" % (kind, k, "_" + name if name else ""))
        return np.load(p) if os.path.exists(p) else None
    return load


def compare(what, got, ref, rtol=1e-5):
    """(ok, line): got vs ref within rtol * max(1, max|ref|)."""
    ref = np.asarray(ref, dtype=np.float64)
    if got is None:
        return False, "%s: qfold gave no tensor" % what
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return False, "%s: shape %s, torch %s" % (what, got.shape, ref.shape)
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    if not np.all(np.isfinite(got)):
        return False, "%s: non-finite values in qfold's result" % what
    ok = err <= rtol * scale
    return ok, "%s: max|qfold - torch| = %.3g (bound %.3g)%s" % (what, err, rtol * scale, "" if ok else "  FAIL")
