#!/usr/bin/python3
"""End-to-end tests of `qfold fuse` (issue 3) on PyTorch models.

    fuse_e2e.py QFOLD NODE ORT_RUN_JS WORKDIR REF_MODELS CASE

Every case exports a small torch model with BatchNorm kept (an eval model
exported with training=PRESERVE and do_constant_folding=False, opset 13 or
14), with RANDOM running statistics, gamma (some negative) and beta, then:
  - runs `qfold fuse IN -o OUT --report R.json` (default pipeline `ptq`,
    or the case's --passes),
  - checks the written model with python onnx (onnx.checker, BN count, the
    expected structure) and the report (rewrites, skip reasons),
  - compares `qfold run` on the fused model with `qfold run` on the original
    (1e-5 relative) and with torch (1e-4), and ONNX Runtime on the written
    file with ONNX Runtime on the original (1e-5) and torch (1e-4),
  - fuses the fused model again: no BN pass may rewrite anything.
resnet18 / mobilenet_v2 reuse the models of the ref fixture (REF_MODELS) and
build their own when those are missing. Relative difference = max|a-b| / max|ref|.
The PyTorch side (models, inputs, outputs, exports) is tests/passes/fuse_e2e_torch.py,
called through tests/ref/refcache.py (computed once per `make test`).
"""
import json
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

QFOLD, NODE, ORT_RUN, WORK, REF_MODELS, CASE = sys.argv[1:7]
BN_PASSES = ("fuse_batch_norm", "fuse_batch_norm_forward", "decompose_batch_norm")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def rel(a, ref):
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a.shape != ref.shape:
        return float("inf")
    return float(np.max(np.abs(a - ref)) / max(np.max(np.abs(ref)), 1e-12))


def sh(cmd, expect_rc=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if expect_rc is not None and p.returncode != expect_rc:
        fail("%s\nexit %d (expected %d)\nstdout: %s\nstderr: %s" %
             (" ".join(cmd), p.returncode, expect_rc, p.stdout, p.stderr))
    return p


def torch_reference(case, work):
    import fuse_e2e_torch
    return fuse_e2e_torch.reference(case, work)


def torch_reference_numeric(work):
    import fuse_e2e_torch
    return fuse_e2e_torch.reference_numeric(work)


def qfold_run(model, inputs, tag, nout):
    outs = [os.path.join(WORK, "%s.q%d.npy" % (tag, j)) for j in range(nout)]
    cmd = [QFOLD, "run", model]
    for p in inputs:
        cmd += ["-i", p]
    for p in outs:
        cmd += ["-o", p]
    sh(cmd)
    return [np.load(p) for p in outs]


def ort_run(model, inputs, tag, nout):
    d = os.path.join(WORK, tag + ".ort")
    os.makedirs(d, exist_ok=True)
    sh([NODE, ORT_RUN, model, d] + inputs)
    return [np.load(os.path.join(d, "out%d.npy" % j)) for j in range(nout)]


def fuse(src, dst, report, extra=(), expect_rc=0):
    if os.path.exists(dst):
        os.remove(dst)
    return sh([QFOLD, "fuse", src, "-o", dst, "--report", report] + list(extra), expect_rc)


def ops(model):
    counts = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def pass_results(report_path, name):
    with open(report_path) as f:
        rep = json.load(f)
    return [p for p in rep["passes"] if p["pass"] == name]


def check_equal(what, got, ref, tol):
    for j, (a, b) in enumerate(zip(got, ref)):
        d = rel(a, b)
        print("  %-38s output %d: relative difference %.3g (tolerance %g)" % (what, j, d, tol))
        if not d <= tol:
            fail("%s: output %d differs by %.3g relative" % (what, j, d))


def check_idempotent(fused, tag, extra=()):
    again = os.path.join(WORK, tag + ".fused2.onnx")
    rep = os.path.join(WORK, tag + ".report2.json")
    fuse(fused, again, rep, extra)
    for name in BN_PASSES:
        for r in pass_results(rep, name):
            if r["rewrites"]:
                fail("fusing the fused model again: %s made %d rewrites" % (name, r["rewrites"]))
    if open(fused, "rb").read() != open(again, "rb").read():
        fail("fusing the fused model again changed the file")
    print("  idempotence: 0 BN rewrites; output byte-identical")


def run_case(tag, passes=None, bn_after=0, structure=None, skip_reason=None, nout=1, folded=None):
    """The common check: export, fuse, inspect, compare, fuse again."""
    src = os.path.join(WORK, tag + ".onnx")
    dst = os.path.join(WORK, tag + ".fused.onnx")
    report = os.path.join(WORK, tag + ".report.json")
    n_in, ref = refcache.call(torch_reference, tag, WORK, base=WORK)
    in_paths = [os.path.join(WORK, "%s.in%d.npy" % (tag, i)) for i in range(n_in)]
    bn_before = ops(onnx.load(src)).get("BatchNormalization", 0)
    extra = ["--passes", passes] if passes else []
    p = fuse(src, dst, report, extra)
    print("  qfold fuse:", (p.stdout + p.stderr).strip().replace("\n", "\n    "))
    m = onnx.load(dst)
    onnx.checker.check_model(m)
    got_ops = ops(m)
    print("  ops before: BatchNormalization x%d; after: %s" % (bn_before, got_ops))
    if got_ops.get("BatchNormalization", 0) != bn_after:
        fail("expected %d BatchNormalization after fuse, found %d" % (bn_after, got_ops.get("BatchNormalization", 0)))
    for op, want in (structure or {}).items():
        if callable(want):
            if not want(m):
                fail("structure check '%s' failed" % op)
        elif got_ops.get(op, 0) != want:
            fail("expected %d %s after fuse, found %d" % (want, op, got_ops.get(op, 0)))
    rewrites = sum(r["rewrites"] for name in BN_PASSES for r in pass_results(report, name))
    want_folded = bn_before - bn_after if folded is None else folded
    if rewrites != want_folded:
        fail("report: %d BN rewrites, expected %d" % (rewrites, want_folded))
    if skip_reason:
        reasons = [s["reason"] for name in BN_PASSES for r in pass_results(report, name) for s in r["skipped"]]
        print("  skip reasons:", reasons)
        if not any(skip_reason in s for s in reasons):
            fail("report has no skip with reason '%s' (got %s)" % (skip_reason, reasons))
    q0 = qfold_run(src, in_paths, tag + ".orig", nout)
    q1 = qfold_run(dst, in_paths, tag + ".fused", nout)
    check_equal("qfold run fused vs unfused", q1, q0, 1e-5)
    if ref is not None:
        check_equal("qfold run fused vs torch", q1, ref, 1e-4)
    o0 = ort_run(src, in_paths, tag + ".orig", nout)
    o1 = ort_run(dst, in_paths, tag + ".fused", nout)
    check_equal("ORT fused vs ORT unfused", o1, o0, 1e-5)
    check_equal("ORT fused vs qfold fused", o1, q1, 1e-5)
    if ref is not None:
        check_equal("ORT fused vs torch", o1, ref, 1e-4)
    check_idempotent(dst, tag, extra)
    return m


def first(m, op):
    return next(n for n in m.graph.node if n.op_type == op)


def has_bias(op):
    return lambda m: len(first(m, op).input) == 3 and first(m, op).input[2] != ""


# --- cases (the models: fuse_e2e_torch.MODELS) ---------------------------------
def fold_cases():
    conv = {"Conv": 1, "bias": has_bias("Conv")}
    convt = {"ConvTranspose": 1, "bias": has_bias("ConvTranspose")}
    gemm = {"Gemm": 1, "bias": has_bias("Gemm")}
    C = {
        "conv2d_bias": dict(structure=conv),
        "conv2d_nobias_eps1e-3": dict(structure=conv),
        "conv2d_grouped_dilated": dict(structure=conv),
        "conv2d_depthwise": dict(structure=conv),
        "conv1d_bias": dict(structure=conv),
        "conv1d_depthwise_nobias": dict(structure=conv),
        "convtranspose2d_groups2": dict(structure=convt),
        "convtranspose1d_bias": dict(structure=convt),
        "linear_bn1d_bias": dict(structure=gemm),
        "linear_bn1d_nobias": dict(structure=gemm),
        "matmul_bn1d": dict(structure={"MatMul": 0, "Add": 0, "bias": has_bias("Gemm")}),
        "gemm_only_fuse": dict(passes="fuse_batch_norm", structure=gemm),
        "forward_bn_conv": dict(structure=conv),
        "forward_bn_depthwise": dict(structure=conv),
        "forward_padded_kept": dict(bn_after=1, skip_reason="pads its input"),
        "decompose": dict(passes="canonicalize,fuse_batch_norm,decompose_batch_norm", structure={"Mul": 1, "Add": 1},
                          skip_reason="BN input comes from relu"),
        "decompose_rank2": dict(passes="decompose_batch_norm", structure={"Mul": 1, "Add": 1}),
        # --- negative cases: BN kept, reason reported, outputs unchanged ---
        "skip_connection": dict(bn_after=1, skip_reason="conv output has 2 users"),
        "conv_is_output": dict(bn_after=1, nout=2, skip_reason="conv output is a graph output"),
        "weight_not_const": dict(bn_after=1, skip_reason="weight is not a constant"),
        "training_mode": dict(bn_after=1, skip_reason="BN is in training mode", nout=1),
    }
    return {k: (lambda k=k, v=v: run_case(k, **v)) for k, v in C.items()}


def numeric_case():
    src = os.path.join(WORK, "numeric.onnx")
    dst = os.path.join(WORK, "numeric.fused.onnx")
    refcache.call(torch_reference_numeric, WORK, base=WORK)
    bn = first(onnx.load(src), "BatchNormalization").name
    p = fuse(src, dst, os.path.join(WORK, "numeric.report.json"), expect_rc=2)
    print("  stderr:", p.stderr.strip())
    if bn not in p.stderr or "channel 2" not in p.stderr:
        fail("the message does not name BN node '%s' and channel 2" % bn)
    if os.path.exists(dst):
        fail("an output file was written despite the error")


def big_case(name, n_bn):
    src = os.path.join(REF_MODELS, name + ".onnx")
    xin = os.path.join(REF_MODELS, name + ".in0.npy")
    yref = os.path.join(REF_MODELS, name + ".out0.npy")
    if not (os.path.exists(src) and os.path.exists(xin) and os.path.exists(yref)):
        import fuse_e2e_torch
        src, xin, yref = fuse_e2e_torch.reference_big(name, WORK)
    dst = os.path.join(WORK, name + ".fused.onnx")
    report = os.path.join(WORK, name + ".report.json")
    bn_before = ops(onnx.load(src)).get("BatchNormalization", 0)
    if bn_before != n_bn:
        fail("%s has %d BatchNormalization, expected %d" % (name, bn_before, n_bn))
    p = fuse(src, dst, report)
    print("  qfold fuse:", (p.stdout + p.stderr).strip().replace("\n", "\n    "))
    m = onnx.load(dst)
    onnx.checker.check_model(m)
    got = ops(m)
    print("  ops after:", got)
    if got.get("BatchNormalization", 0):
        fail("%d BatchNormalization left" % got["BatchNormalization"])
    folded = sum(r["rewrites"] for r in pass_results(report, "fuse_batch_norm"))
    if folded != n_bn:
        fail("fuse_batch_norm folded %d, expected %d" % (folded, n_bn))
    ref = [np.load(yref)]
    q = qfold_run(dst, [xin], name + ".fused", 1)
    check_equal("qfold run fused vs torch", q, ref, 1e-4)
    o = ort_run(dst, [xin], name + ".fused", 1)
    check_equal("ORT fused vs torch", o, ref, 1e-4)
    check_idempotent(dst, name)


def main():
    os.makedirs(WORK, exist_ok=True)
    cases = fold_cases()
    if CASE in cases:
        cases[CASE]()
    elif CASE == "numeric_error":
        numeric_case()
    elif CASE == "resnet18":
        big_case("resnet18", 20)
    elif CASE == "mobilenet_v2":
        big_case("mobilenet_v2", 52)
    elif CASE == "list":
        print(" ".join(list(cases) + ["numeric_error", "resnet18", "mobilenet_v2"]))
        return
    else:
        fail("unknown case " + CASE)
    print("PASS", CASE)


if __name__ == "__main__":
    main()
