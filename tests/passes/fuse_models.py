#!/usr/bin/python3
"""`qfold fuse` on small models: canonicalize's rewrites and the command's behaviour.

    fuse_models.py QFOLD NODE ORT_RUN_JS WORKDIR CASE

Model cases (torch exports unless noted):
  linear2d   Linear on 2-D input  -> Gemm(transB=1)          -> linear
  linear3d   Linear on 3-D input  -> MatMul + Add            -> linear
  relu6      Conv + ReLU6         -> Clip(min, max constants) -> relu6
  gemm_attrs Gemm transB=0, alpha, beta, C [1, N] (onnx.helper) -> linear
  passthru   Identity / Dropout (onnx.helper), one Identity feeding a graph
             output, one graph input passed straight to a graph output (kept)
For each: `qfold fuse --verify --report` succeeds, the expected ops are gone,
the report records the rewrites, and the outputs of `qfold run` on the
original, `qfold run` on the fused file and ONNX Runtime on the fused file
equal torch's (or numpy's) within 1e-5 relative.

CLI cases:
  cli_verify_fail  --tolerance far below the fold's rounding: exit 1, the model not written, the report
                   written with the failure
  cli_same_path    -o equal to the input: exit 2, input untouched
  cli_usage        unknown pass / pipeline, --passes with --pipeline: exit 2
  cli_passes       `qfold passes` lists the passes and the ptq pipeline
"""
import hashlib
import json
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from qfref import randomize_bn  # noqa: E402
import refcache  # noqa: E402

QFOLD, NODE, ORT_RUN, WORK, CASE = sys.argv[1:6]
os.makedirs(WORK, exist_ok=True)
RTOL = 1e-5


def fail(msg):
    print(f"FAIL [{CASE}]: {msg}")
    sys.exit(1)


def run(args, expect=0):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != expect:
        fail(f"{' '.join(args)}: exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def close(name, got, want):
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    rel = err / max(1e-6, float(np.max(np.abs(want))))
    print(f"  {name}: max abs {err:.3g}, rel {rel:.3g}")
    if got.shape != want.shape or rel > RTOL:
        fail(f"{name}: shape {got.shape} vs {want.shape}, relative diff {rel:.3g} > {RTOL}")


def torch_model(kind):
    """A torch export of KIND and torch's outputs, through
    tests/ref/refcache.py (computed once per `make test`; a hit imports no
    torch)."""
    path = os.path.join(WORK, f"{kind}.onnx")
    xs, ys = refcache.call(torch_export, kind, path, base=WORK)
    return path, xs, ys


def torch_export(kind, path):
    import torch
    import torch.nn as nn

    torch.manual_seed(7)
    if kind == "linear2d":
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        x = torch.randn(3, 8)
    elif kind == "linear3d":
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        x = torch.randn(2, 5, 8)
    else:
        m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU6(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
        x = torch.randn(2, 3, 6, 6) * 4  # reach both ends of [0, 6]
    m.eval()
    # A dynamic batch: --verify must take unknown dims as 1.
    torch.onnx.export(m, x, path, input_names=["x"], output_names=["y"], opset_version=13,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    with torch.no_grad():
        y = m(x).numpy()
    return [x.numpy()], [y]


def helper_model(kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    if kind == "gemm_attrs":
        b = rng.standard_normal((5, 4)).astype(np.float32)  # [K, N]: transB=0
        c = rng.standard_normal((1, 4)).astype(np.float32)
        alpha, beta = 0.75, -1.5
        nodes = [helper.make_node("Gemm", ["x", "B", "C"], ["g"], name="gemm", alpha=alpha, beta=beta),
                 helper.make_node("Relu", ["g"], ["y"], name="relu")]
        inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(c, "C")]
        ys = [np.maximum(alpha * (x.astype(np.float64) @ b) + beta * c, 0)]
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])]
    else:  # passthru
        w = rng.standard_normal((4, 5)).astype(np.float32)
        nodes = [helper.make_node("Identity", ["x"], ["xi"], name="id_in"),
                 helper.make_node("Gemm", ["xi", "W"], ["g"], name="fc", transB=1),
                 helper.make_node("Dropout", ["g", "ratio"], ["d"], name="drop"),
                 helper.make_node("Relu", ["d"], ["r"], name="relu"),
                 helper.make_node("Identity", ["r"], ["y"], name="id_out"),
                 helper.make_node("Identity", ["x"], ["x_copy"], name="id_io")]
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(0.5, np.float32), "ratio")]
        ys = [np.maximum(x.astype(np.float64) @ w.T, 0), x]
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
                helper.make_tensor_value_info("x_copy", TensorProto.FLOAT, [3, 5])]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])], outs,
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = os.path.join(WORK, f"{kind}.onnx")
    onnx.save(model, path)
    return path, [x], ys


def ops(path):
    return [n.op_type for n in onnx.load(path).graph.node]


def model_case(kind, gone, rewrites):
    path, xs, ys = torch_model(kind) if kind in ("linear2d", "linear3d", "relu6") else helper_model(kind)
    fused = os.path.join(WORK, f"{kind}.fused.onnx")
    report = os.path.join(WORK, f"{kind}.report.json")
    for f in (fused, report):
        if os.path.exists(f):
            os.remove(f)
    p = run([QFOLD, "fuse", path, "-o", fused, "--verify", "--report", report])
    print(p.stdout, end="")
    if "verify: output" not in p.stdout:
        fail("--verify printed no comparison")
    m = onnx.load(fused)
    onnx.checker.check_model(m)
    left = [op for op in ops(fused) if op in gone]
    if left:
        fail(f"ops still present after fuse: {left} (all: {ops(fused)})")
    names_in = [o.name for o in onnx.load(path).graph.output]
    names_out = [o.name for o in m.graph.output]
    if names_in != names_out:
        fail(f"graph outputs renamed: {names_in} -> {names_out}")
    rep = json.load(open(report))
    canon = [r for r in rep["passes"] if r["pass"] == "canonicalize"]
    got = sum(r["rewrites"] for r in canon)
    if got != rewrites:
        fail(f"canonicalize recorded {got} rewrites, expected {rewrites}: {canon}")
    if not rep["verify"] or not all(o["ok"] for o in rep["verify"]["outputs"]):
        fail(f"report's verify section: {rep['verify']}")

    ins = []
    for i, x in enumerate(xs):
        ins.append(os.path.join(WORK, f"{kind}.in{i}.npy"))
        np.save(ins[-1], x)
    for label, model in (("qfold original", path), ("qfold fused", fused)):
        outs = [os.path.join(WORK, f"{kind}.{label.split()[1]}.out{j}.npy") for j in range(len(ys))]
        args = [QFOLD, "run", model]
        for f in ins:
            args += ["-i", f]
        for f in outs:
            args += ["-o", f]
        run(args)
        for j, y in enumerate(ys):
            close(f"{label} output {j}", np.load(outs[j]), y)
    ortdir = os.path.join(WORK, f"{kind}.ort")
    os.makedirs(ortdir, exist_ok=True)
    run([NODE, ORT_RUN, fused, ortdir] + ins)
    for j, y in enumerate(ys):
        close(f"onnxruntime fused output {j}", np.load(os.path.join(ortdir, f"out{j}.npy")), y)
    return rep


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def bn_model():
    """Conv + BN with random statistics: folding changes rounding, never 0.
    Exported by torch through tests/ref/refcache.py."""
    path = os.path.join(WORK, "conv_bn.onnx")
    refcache.call(bn_export, path, base=WORK)
    return path


def bn_export(path):
    import torch
    import torch.nn as nn

    torch.manual_seed(11)
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    randomize_bn(m, torch.Generator().manual_seed(11))
    m.eval()
    torch.onnx.export(m, torch.randn(1, 3, 8, 8), path, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


def no_leftovers(directory, stem):
    junk = [f for f in os.listdir(directory) if f.startswith(stem)]
    if junk:
        fail(f"files left behind: {junk}")


def main():
    if CASE == "linear2d":
        model_case("linear2d", set(), 2)  # linear exports back as Gemm(transB=1)
    elif CASE == "linear3d":
        model_case("linear3d", set(), 2)  # ... and as MatMul + Add on 3-D input
    elif CASE == "relu6":
        model_case("relu6", set(), 2)  # Clip -> relu6 and Gemm -> linear; relu6 exports as Clip
    elif CASE == "gemm_attrs":
        model_case("gemm_attrs", set(), 1)
    elif CASE == "passthru":
        rep = model_case("passthru", {"Dropout"}, 4)
        m = onnx.load(os.path.join(WORK, "passthru.fused.onnx"))
        idents = [n.name for n in m.graph.node if n.op_type == "Identity"]
        if idents != ["id_io"]:
            fail(f"Identity nodes left: {idents} (only the input -> output one must stay)")
        skips = [s for r in rep["passes"] if r["pass"] == "canonicalize" for s in r["skipped"]]
        if not any(s["node"] == "id_io" and "graph input" in s["reason"] for s in skips):
            fail(f"no skip reason for id_io: {skips}")
    elif CASE == "cli_verify_fail":
        src = bn_model()
        out = os.path.join(WORK, "vf_out.onnx")
        rep = os.path.join(WORK, "vf_out.report.json")
        for f in (out, rep):
            if os.path.exists(f):
                os.remove(f)
        p = run([QFOLD, "fuse", src, "-o", out, "--verify", "--tolerance", "1e-15", "--report", rep], expect=1)
        if "FAILED" not in p.stdout or "tolerance" not in p.stderr:
            fail(f"no verification message:\n{p.stdout}\n{p.stderr}")
        # The model is not written; the report is, with the failure in it (issue 7).
        if os.path.exists(out):
            fail("the model was written although verification failed")
        if not os.path.exists(rep):
            fail("no report although --report was given")
        else:
            v = json.load(open(rep))["verify"]
            if v.get("ok") is not False or "tolerance" not in v.get("error", "") or not v["outputs"]:
                fail(f"the report does not say verification failed: {v}")
            os.remove(rep)
        no_leftovers(WORK, "vf_out")
        # The same with the default tolerance passes and writes both.
        run([QFOLD, "fuse", src, "-o", out, "--verify", "--report", rep])
        if not os.path.exists(out) or not os.path.exists(rep):
            fail("nothing written with the default tolerance")
        if "BatchNormalization" in ops(out):
            fail("BN not folded")
        # --verify renames its checked temporary file into place: it must get
        # the mode a plain write gives (mkstemp's 0600 made it private).
        plain = os.path.join(WORK, "vf_plain.onnx")
        for f in (out, plain):
            if os.path.exists(f):
                os.remove(f)
        run([QFOLD, "fuse", src, "-o", out, "--verify"])
        run([QFOLD, "fuse", src, "-o", plain])
        m_verify, m_plain = (os.stat(f).st_mode & 0o777 for f in (out, plain))
        if m_verify != m_plain:
            fail(f"--verify wrote mode {m_verify:o}, a plain write {m_plain:o}")
        # --verify-data: a given array of the input's shape.
        x = os.path.join(WORK, "vf_x.npy")
        np.save(x, np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32))
        run([QFOLD, "fuse", src, "-o", out, "--verify-data", x])
        np.save(x, np.zeros((2, 2), np.float32))
        run([QFOLD, "fuse", src, "-o", out, "--verify-data", x], expect=2)
    elif CASE == "cli_same_path":
        src = bn_model()
        before = sha(src)
        p = run([QFOLD, "fuse", src, "-o", src], expect=2)
        if "input" not in p.stderr:
            fail(f"message does not say why: {p.stderr}")
        link = os.path.join(WORK, "conv_bn_link.onnx")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(src, link)
        run([QFOLD, "fuse", src, "-o", link], expect=2)
        run([QFOLD, "fuse", src, "-o", os.path.join(WORK, "x.onnx"), "--report", src], expect=2)
        if sha(src) != before:
            fail("the input model changed")
    elif CASE == "cli_usage":
        src = bn_model()
        out = os.path.join(WORK, "usage_out.onnx")
        run([QFOLD, "fuse", src, "-o", out, "--passes", "canonicalize,nope"], expect=2)
        run([QFOLD, "fuse", src, "-o", out, "--pipeline", "nope"], expect=2)
        run([QFOLD, "fuse", src, "-o", out, "--pipeline", "ptq", "--passes", "dce"], expect=2)
        run([QFOLD, "fuse", src], expect=2)
        run([QFOLD, "fuse", src, "-o", out, "--tolerance", "-1"], expect=2)
        run([QFOLD, "fuse", os.path.join(WORK, "missing.onnx"), "-o", out], expect=2)
        # Only canonicalize: the BN stays, the summary says so.
        p = run([QFOLD, "fuse", src, "-o", out, "--passes", "canonicalize"])
        if "BatchNormalization" not in ops(out) or "1 before, 1 after" not in p.stdout:
            fail(f"--passes canonicalize folded the BN?\n{p.stdout}")
    elif CASE == "cli_passes":
        p = run([QFOLD, "passes"])
        for word in ("canonicalize", "fuse_batch_norm", "fuse_batch_norm_forward", "decompose_batch_norm", "dce",
                     "ptq"):
            if word not in p.stdout:
                fail(f"`qfold passes` does not list {word}")
    else:
        fail("unknown case")
    print(f"ok [{CASE}]")


if __name__ == "__main__":
    main()
