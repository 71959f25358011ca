#!/usr/bin/env python3
"""Any ONNX model in, the same model out (issue 7, items 4-6): ops qfold does
not know pass through `fuse` as opaque nodes, byte for byte; inspect lists
every problem at once; metadata, doc strings, dim names and value_info survive
`fuse`; `fuse --verify` sizes dynamic dims from the model.

Models are made here with onnx.helper; ONNX Runtime (tests/ref/ort_run.js)
runs the originals and qfold's outputs, the onnx package checks them field by
field.

  keep_test.py QFOLD NODE ORT_RUN_JS WORKDIR CASE
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

QFOLD, NODE, ORT_RUN, WORK, CASE = sys.argv[1:6]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def qfold(*args, expect=0):
    p = subprocess.run([QFOLD] + list(args), capture_output=True, text=True, cwd=WORK)
    if p.returncode != expect:
        print(p.stdout, p.stderr)
    check(p.returncode == expect, "qfold %s: exit %d, expected %d" % (" ".join(args), p.returncode, expect))
    return p


def ort(model, inputs, tag):
    """Outputs of `model` in ONNX Runtime on the arrays `inputs`."""
    d = os.path.join(WORK, tag)
    os.makedirs(d, exist_ok=True)
    paths = []
    for i, x in enumerate(inputs):
        paths.append(os.path.join(d, "in%d.npy" % i))
        np.save(paths[-1], x)
    p = subprocess.run([NODE, ORT_RUN, model, d] + paths, capture_output=True, text=True)
    check(p.returncode == 0, "ORT on %s: %s" % (model, p.stderr.strip()))
    outs, j = [], 0
    while os.path.exists(os.path.join(d, "out%d.npy" % j)):
        outs.append(np.load(os.path.join(d, "out%d.npy" % j)))
        os.remove(os.path.join(d, "out%d.npy" % j))
        j += 1
    return outs


def close(a, b, what, tol=1e-4):
    ok = len(a) == len(b) and all(x.shape == y.shape and np.allclose(x, y, rtol=tol, atol=tol) for x, y in zip(a, b))
    check(ok, what)


RNG = np.random.default_rng(7)


def conv_bn(p, cin, cout, x, out=None):
    """Conv(3x3, pad 1) + BatchNormalization; returns nodes, initializers, output name."""
    f = lambda *s: RNG.standard_normal(s).astype(np.float32)
    inits = [nh.from_array(f(cout, cin, 3, 3) * 0.3, p + "w"), nh.from_array(f(cout), p + "b"),
             nh.from_array(RNG.uniform(0.5, 1.5, cout).astype(np.float32), p + "scale"),
             nh.from_array(f(cout), p + "shift"), nh.from_array(f(cout) * 0.1, p + "mean"),
             nh.from_array(RNG.uniform(0.5, 2.0, cout).astype(np.float32), p + "var")]
    y = out or p + "y"
    nodes = [h.make_node("Conv", [x, p + "w", p + "b"], [p + "c"], name=p + "conv", pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", [p + "c", p + "scale", p + "shift", p + "mean", p + "var"], [y],
                         name=p + "bn", epsilon=1e-5)]
    return nodes, inits, y


def save(model, name):
    onnx.checker.check_model(model)
    path = os.path.join(WORK, name)
    onnx.save(model, path)
    return path


def sub_model(m, nodes, inputs, outputs):
    """The part of m made of `nodes`, fed by `inputs` (name, shape), read at `outputs`."""
    used = {i for n in nodes for i in n.input}
    g = h.make_graph(nodes, "part", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                     [h.make_tensor_value_info(o, T.FLOAT, [None] * 4) for o in outputs],
                     [t for t in m.graph.initializer if t.name in used])
    return h.make_model(g, opset_imports=[o for o in m.opset_import if o.domain in ("", "ai.onnx")])


def custom_model(value_info=True):
    """Conv+BN -> vendor.x.Foo (attributes of every kind, an omitted input and
    output) -> Conv+BN, with dynamic batch / H / W."""
    n1, i1, y1 = conv_bn("a_", 3, 4, "x")
    foo = h.make_node("Foo", [y1, "", "a_b"], ["f", ""], name="foo1", domain="vendor.x", doc_string="made up",
                      alpha=0.5, mode="fast", ks=[1, 2, 3], fs=[0.25, 2.0],
                      t=nh.from_array(np.arange(3, dtype=np.int64), "tt"))
    n2, i2, y2 = conv_bn("b_", 4, 2, "f")
    vi = [h.make_tensor_value_info("f", T.FLOAT, ["batch", 4, "H", "W"])] if value_info else []
    g = h.make_graph(n1 + [foo] + n2, "custom", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 3, "H", "W"])],
                     [h.make_tensor_value_info(y2, T.FLOAT, ["batch", 2, "H", "W"])], i1 + i2, value_info=vi)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("vendor.x", 1)])


def node_named(m, name):
    return [n for n in m.graph.node if n.name == name]


def case_opaque_fold():
    """Both BNs around a made-up op fold; the op is byte-identical; each Conv
    block computes what the Conv+BN block did (ORT on the model cut at it)."""
    for vi in (True, False):
        tag = "custom_vi" if vi else "custom"
        m = custom_model(vi)
        src = save(m, tag + ".onnx")
        qfold("fuse", tag + ".onnx", "-o", tag + ".fused.onnx")
        out = onnx.load(os.path.join(WORK, tag + ".fused.onnx"))
        onnx.checker.check_model(out)
        ops = [n.op_type for n in out.graph.node]
        check(ops == ["Conv", "Foo", "Conv"], "%s: fused ops %s" % (tag, ops))
        a, b = node_named(m, "foo1"), node_named(out, "foo1")
        check(len(b) == 1 and a[0].SerializeToString() == b[0].SerializeToString(),
              "%s: the custom node is not byte-identical:\n%s" % (tag, b))
        check([(o.domain, o.version) for o in out.opset_import] == [("", 13), ("vendor.x", 1)],
              "%s: opset imports %s" % (tag, out.opset_import))
        check(out.graph.output == m.graph.output, "%s: graph output changed: %s" % (tag, out.graph.output))
        x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
        # Block a: x -> a_y, before and after.
        ra = sub_model(m, m.graph.node[:2], [("x", ["n", 3, "h", "w"])], ["a_y"])
        fa = sub_model(out, out.graph.node[:1], [("x", ["n", 3, "h", "w"])], ["a_y"])
        ya = ort(save(ra, tag + ".a.ref.onnx"), [x], tag + "_a_ref")
        close(ya, ort(save(fa, tag + ".a.fused.onnx"), [x], tag + "_a_fused"), tag + ": block a differs")
        f = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32)
        rb = sub_model(m, m.graph.node[3:], [("f", ["n", 4, "h", "w"])], ["b_y"])
        fb = sub_model(out, out.graph.node[2:], [("f", ["n", 4, "h", "w"])], ["b_y"])
        yb = ort(save(rb, tag + ".b.ref.onnx"), [f], tag + "_b_ref")
        close(yb, ort(save(fb, tag + ".b.fused.onnx"), [f], tag + "_b_fused"), tag + ": block b differs")
        del src


def case_opaque_ort():
    """A com.microsoft op ORT implements (Gelu) between two Conv+BN blocks:
    ORT runs the original and the fused model whole."""
    n1, i1, y1 = conv_bn("a_", 3, 4, "x")
    gelu = h.make_node("Gelu", [y1], ["g"], name="gelu", domain="com.microsoft")
    n2, i2, y2 = conv_bn("b_", 4, 2, "g")
    g = h.make_graph(n1 + [gelu] + n2, "gelu", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 8, 8])],
                     [h.make_tensor_value_info(y2, T.FLOAT, ["N", 2, 8, 8])], i1 + i2)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)])
    src = save(m, "gelu.onnx")
    qfold("fuse", "gelu.onnx", "-o", "gelu.fused.onnx")
    dst = os.path.join(WORK, "gelu.fused.onnx")
    out = onnx.load(dst)
    check([n.op_type for n in out.graph.node] == ["Conv", "Gelu", "Conv"], "gelu: ops %s" % out.graph.node)
    check(node_named(out, "gelu")[0].SerializeToString() == gelu.SerializeToString(), "gelu: node changed")
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    close(ort(src, [x], "gelu_ref"), ort(dst, [x], "gelu_fused"), "gelu: fused model differs in ORT")
    # run refuses it, naming node, op and domain; --verify cannot verify it.
    np.save(os.path.join(WORK, "gelu_x.npy"), x)
    p = qfold("run", "gelu.onnx", "-i", "gelu_x.npy", "-o", "gelu_y.npy", expect=2)
    err = p.stderr.strip().splitlines()
    check(len(err) == 1 and "'gelu'" in err[0] and "'Gelu'" in err[0] and "com.microsoft" in err[0],
          "run: message %r" % p.stderr)
    check(not os.path.exists(os.path.join(WORK, "gelu_y.npy")), "run wrote an output")
    p = qfold("fuse", "gelu.onnx", "-o", "gelu.v.onnx", "--verify", "--report", "gelu.json", expect=1)
    check("cannot verify" in p.stderr and "'gelu'" in p.stderr, "fuse --verify: message %r" % p.stderr)
    check(not os.path.exists(os.path.join(WORK, "gelu.v.onnx")), "fuse --verify wrote the model")
    import json
    rep = json.load(open(os.path.join(WORK, "gelu.json")))
    check(rep["verify"]["ok"] is False and "cannot verify" in rep["verify"]["error"], "report: %s" % rep["verify"])


def case_inspect_grouped():
    """inspect lists every unknown op at once, grouped with counts, exit 2."""
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 4])
    w = nh.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [h.make_node("FusedGemm", ["x" if i == 0 else "g%d" % (i - 1), "w"], ["g%d" % i], name=n,
                         domain="com.microsoft", alpha=1.0) for i, n in enumerate(["a", "b", "c"])]
    nodes.append(h.make_node("Relu", ["g2"], ["r"], name="relu"))
    nodes.append(h.make_node("Foo", ["r"], ["y"], name="d"))
    # An op with subgraphs cannot even be kept: fuse refuses it, inspect lists it with the rest.
    branch = lambda v: h.make_graph([h.make_node("Constant", [], ["o"], value=nh.from_array(
        np.full((1, 4), v, np.float32)))], "b%d" % v, [], [h.make_tensor_value_info("o", T.FLOAT, [1, 4])])
    nodes.append(h.make_node("If", ["cond"], ["iy"], name="e", then_branch=branch(1), else_branch=branch(0)))
    g = h.make_graph(nodes, "many", [x, h.make_tensor_value_info("cond", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4]), h.make_tensor_value_info("iy", T.FLOAT, [1, 4])],
                     [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)])
    onnx.save(m, os.path.join(WORK, "many.onnx"))  # Foo is in no schema: the checker would refuse it
    p = qfold("inspect", "many.onnx", expect=2)
    want = "  unsupported ops: 3 x com.microsoft.FusedGemm (nodes a, b, c), 1 x Foo (node d), 1 x If (node e)"
    check(want in p.stderr.splitlines(), "inspect: stderr %r" % p.stderr)
    f = qfold("fuse", "many.onnx", "-o", "many.fused.onnx", expect=2)
    check("'e'" in f.stderr and "subgraph" in f.stderr and len(f.stderr.splitlines()) == 1, "fuse If: %r" % f.stderr)
    check("com.microsoft.FusedGemm  3" in p.stdout and "Relu" in p.stdout, "inspect: stdout %r" % p.stdout)
    p = qfold("inspect", "many.onnx", "--json", expect=2)
    check('"com.microsoft.FusedGemm": 3' in p.stdout, "inspect --json: %r" % p.stdout)


def meta_model():
    """No BatchNorm: every field qfold must keep."""
    w = nh.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], doc_string="the conv"),
             h.make_node("Relu", ["c"], ["r"], name="relu", doc_string="the relu"),
             h.make_node("Add", ["r", "z"], ["y"], name="add")]
    z = h.make_tensor_value_info("z", T.FLOAT, ["batch", 4, "height", "width"])
    z.doc_string = "second input"
    x = h.make_tensor_value_info("x", T.FLOAT, ["batch", 3, "height", "width"])
    y = h.make_tensor_value_info("y", T.FLOAT, ["batch", 4, "height", None])  # an unnamed unknown dim
    g = h.make_graph(nodes, "meta", [x, z], [y], [w], doc_string="graph doc",
                     value_info=[h.make_tensor_value_info("c", T.FLOAT, ["batch", 4, "height", "width"]),
                                 h.make_tensor_value_info("r", T.FLOAT, ["batch", 4, "height", "width"])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)],
                     producer_name="maker", producer_version="1.2.3", domain="org.example", model_version=42,
                     doc_string="model doc")
    h.set_model_props(m, {"author": "someone", "license": "MIT", "empty": ""})
    return m


def case_metadata_kept():
    m = meta_model()
    src = save(m, "meta.onnx")
    qfold("fuse", "meta.onnx", "-o", "meta.fused.onnx")
    dst = os.path.join(WORK, "meta.fused.onnx")
    out = onnx.load(dst)
    onnx.checker.check_model(out)
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        check(getattr(out, f) == getattr(m, f), "%s: %r, was %r" % (f, getattr(out, f), getattr(m, f)))
    check(list(out.metadata_props) == list(m.metadata_props), "metadata_props: %s" % out.metadata_props)
    check(list(out.opset_import) == list(m.opset_import), "opset_import: %s" % out.opset_import)
    check(out.graph.doc_string == m.graph.doc_string and out.graph.name == m.graph.name, "graph name / doc")
    check(list(out.graph.input) == list(m.graph.input), "inputs (dim names, doc):\n%s" % out.graph.input)
    check(list(out.graph.output) == list(m.graph.output), "outputs (dim names):\n%s" % out.graph.output)
    check(list(out.graph.value_info) == list(m.graph.value_info), "value_info:\n%s" % out.graph.value_info)
    check([(n.name, n.op_type, n.doc_string) for n in out.graph.node] ==
          [(n.name, n.op_type, n.doc_string) for n in m.graph.node], "nodes: %s" % out.graph.node)
    check(list(out.graph.node) == list(m.graph.node), "nodes differ field by field")
    check(list(out.graph.initializer) == list(m.graph.initializer), "initializers differ")
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    z = RNG.standard_normal((2, 4, 5, 7)).astype(np.float32)
    close(ort(src, [x, z], "meta_ref"), ort(dst, [x, z], "meta_fused"), "meta: outputs differ in ORT", tol=0)


def case_verify_dynamic():
    """--verify on dynamic H/W behind a 5x5 pooling window, and an int64
    shape input bound per input with --verify-data NAME=X.npy."""
    n1, i1, y1 = conv_bn("a_", 3, 4, "x")
    pool = h.make_node("MaxPool", [y1], ["p"], name="pool", kernel_shape=[5, 5])
    g = h.make_graph(n1 + [pool], "dyn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])],
                     [h.make_tensor_value_info("p", T.FLOAT, ["N", 4, None, None])], i1)
    save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), "dyn.onnx")
    p = qfold("fuse", "dyn.onnx", "-o", "dyn.fused.onnx", "--verify")
    check("ok" in p.stdout, "dyn: %r" % p.stdout)
    # With an int64 shape input nothing generated can stand in for it.
    rs = h.make_node("Reshape", ["p", "shape"], ["y"], name="reshape")
    g = h.make_graph(n1 + [pool, rs], "dyn2", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"]),
                                               h.make_tensor_value_info("shape", T.INT64, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [None, None])], i1)
    save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), "dyn2.onnx")
    p = qfold("fuse", "dyn2.onnx", "-o", "dyn2.fused.onnx", "--verify", "--report", "dyn2.json", expect=1)
    check("--verify-data" in p.stderr, "dyn2: message %r" % p.stderr)
    check(not os.path.exists(os.path.join(WORK, "dyn2.fused.onnx")), "dyn2: model written")
    check(os.path.exists(os.path.join(WORK, "dyn2.json")), "dyn2: no report")
    np.save(os.path.join(WORK, "shape.npy"), np.array([1, -1], np.int64))
    # The input x sized by the user, H and W tied by name to nothing else.
    np.save(os.path.join(WORK, "x.npy"), RNG.standard_normal((1, 3, 7, 9)).astype(np.float32))
    p = qfold("fuse", "dyn2.onnx", "-o", "dyn2.fused.onnx", "--verify", "--verify-data", "shape=shape.npy")
    check("ok" in p.stdout, "dyn2 with shape: %r" % p.stdout)
    p = qfold("fuse", "dyn2.onnx", "-o", "dyn2.fused.onnx", "--verify", "--verify-data", "shape=shape.npy",
              "--verify-data", "x=x.npy", "--report", "dyn2.json")
    check("ok" in p.stdout, "dyn2 with both: %r" % p.stdout)
    # Dims tied by name: y's H / W are x's, given 7 x 9 (no power of two matches them).
    n3, i3, y3 = conv_bn("c_", 3, 4, "x")
    add = h.make_node("Add", [y3, "z"], ["s"], name="add")
    pool = h.make_node("MaxPool", ["s"], ["q"], name="pool", kernel_shape=[5, 5])
    g = h.make_graph(n3 + [add, pool], "dyn3", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"]),
                                                 h.make_tensor_value_info("z", T.FLOAT, ["N", 4, "H", "W"])],
                     [h.make_tensor_value_info("q", T.FLOAT, ["N", 4, None, None])], i3)
    save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), "dyn3.onnx")
    p = qfold("fuse", "dyn3.onnx", "-o", "dyn3.fused.onnx", "--verify", "--verify-data", "x=x.npy")
    check("ok" in p.stdout, "dyn3 tied dims: %r" % p.stdout)
    p = qfold("fuse", "dyn2.onnx", "-o", "dyn2.fused.onnx", "--verify", "--verify-data", "nope=x.npy", expect=2)
    check("no input 'nope'" in p.stderr, "dyn2 bad name: %r" % p.stderr)


CASES = {
    "opaque_fold": case_opaque_fold,
    "opaque_ort": case_opaque_ort,
    "inspect_grouped": case_inspect_grouped,
    "metadata_kept": case_metadata_kept,
    "verify_dynamic": case_verify_dynamic,
}

if __name__ == "__main__":
    WORK = os.path.join(WORK, CASE)
    shutil.rmtree(WORK, ignore_errors=True)  # "not written" checks need a clean directory
    os.makedirs(WORK)
    CASES[CASE]()
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("ok")
