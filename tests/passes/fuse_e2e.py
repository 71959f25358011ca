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
"""
import json
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import qfref  # noqa: E402

QFOLD, NODE, ORT_RUN, WORK, REF_MODELS, CASE = sys.argv[1:7]
BN_PASSES = ("fuse_batch_norm", "fuse_batch_norm_forward", "decompose_batch_norm")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def randomize_bn(model, seed=0):
    return qfref.randomize_bn(model, torch.Generator().manual_seed(seed))


def export(model, inputs, path, opset=14, train=False):
    names = ["x"] if len(inputs) == 1 else ["x%d" % i for i in range(len(inputs))]
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.PRESERVE
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset, training=mode,
                      do_constant_folding=False, input_names=names)


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


def save_inputs(tag, arrays):
    paths = []
    for i, a in enumerate(arrays):
        p = os.path.join(WORK, "%s.in%d.npy" % (tag, i))
        np.save(p, np.ascontiguousarray(a, dtype=np.float32))
        paths.append(p)
    return paths


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


def run_case(tag, model, inputs, opset=14, train=False, passes=None, bn_after=0, structure=None,
             skip_reason=None, nout=1, folded=None):
    """The common check: export, fuse, inspect, compare, fuse again."""
    model.eval() if not train else model.train()
    src = os.path.join(WORK, tag + ".onnx")
    dst = os.path.join(WORK, tag + ".fused.onnx")
    report = os.path.join(WORK, tag + ".report.json")
    with torch.no_grad():
        ref = model(*inputs) if not train else None
    export(model, inputs, src, opset=opset, train=train)
    if ref is not None and not isinstance(ref, tuple):
        ref = (ref,)
    in_paths = save_inputs(tag, [t.numpy() for t in inputs])
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
        check_equal("qfold run fused vs torch", q1, [r.numpy() for r in ref], 1e-4)
    o0 = ort_run(src, in_paths, tag + ".orig", nout)
    o1 = ort_run(dst, in_paths, tag + ".fused", nout)
    check_equal("ORT fused vs ORT unfused", o1, o0, 1e-5)
    check_equal("ORT fused vs qfold fused", o1, q1, 1e-5)
    if ref is not None:
        check_equal("ORT fused vs torch", o1, [r.numpy() for r in ref], 1e-4)
    check_idempotent(dst, tag, extra)
    return m


def first(m, op):
    return next(n for n in m.graph.node if n.op_type == op)


def has_bias(op):
    return lambda m: len(first(m, op).input) == 3 and first(m, op).input[2] != ""


def seq(*mods):
    return randomize_bn(nn.Sequential(*mods))


def x4(c, h=9, w=8, n=2):
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(7))


def x3(c, length=11, n=2):
    return torch.randn(n, c, length, generator=torch.Generator().manual_seed(7))


def x2(k, n=4):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(7))


# --- cases -------------------------------------------------------------------
class SkipConn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(self.bn(y)) + y


class ConvIsOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y), y


class WeightInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x, w):
        return self.bn(F.conv2d(x, w))


class MatMulBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x):
        return self.bn(torch.matmul(x, self.w))


def fold_cases():
    torch.manual_seed(3)
    C = {
        "conv2d_bias": lambda: run_case("conv2d_bias", seq(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()),
                                        [x4(3)], structure={"Conv": 1, "bias": has_bias("Conv")}),
        "conv2d_nobias_eps1e-3": lambda: run_case(
            "conv2d_nobias_eps1e-3",
            seq(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8, eps=1e-3)), [x4(3)],
            structure={"Conv": 1, "bias": has_bias("Conv")}),
        "conv2d_grouped_dilated": lambda: run_case(
            "conv2d_grouped_dilated",
            seq(nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2, bias=False), nn.BatchNorm2d(6)), [x4(4)],
            opset=13, structure={"Conv": 1, "bias": has_bias("Conv")}),
        "conv2d_depthwise": lambda: run_case(
            "conv2d_depthwise", seq(nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.BatchNorm2d(6, eps=1e-3), nn.ReLU6()),
            [x4(6)], structure={"Conv": 1, "bias": has_bias("Conv")}),
        "conv1d_bias": lambda: run_case("conv1d_bias", seq(nn.Conv1d(3, 5, 3), nn.BatchNorm1d(5)), [x3(3)],
                                        structure={"Conv": 1, "bias": has_bias("Conv")}),
        "conv1d_depthwise_nobias": lambda: run_case(
            "conv1d_depthwise_nobias", seq(nn.Conv1d(4, 8, 3, groups=4, bias=False, dilation=2), nn.BatchNorm1d(8, eps=1e-3)),
            [x3(4)], opset=13, structure={"Conv": 1, "bias": has_bias("Conv")}),
        "convtranspose2d_groups2": lambda: run_case(
            "convtranspose2d_groups2",
            seq(nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2, bias=False), nn.BatchNorm2d(6)), [x4(4, 5, 4)],
            structure={"ConvTranspose": 1, "bias": has_bias("ConvTranspose")}),
        "convtranspose1d_bias": lambda: run_case(
            "convtranspose1d_bias", seq(nn.ConvTranspose1d(4, 6, 3, groups=2), nn.BatchNorm1d(6, eps=1e-3)), [x3(4)],
            opset=13, structure={"ConvTranspose": 1, "bias": has_bias("ConvTranspose")}),
        "linear_bn1d_bias": lambda: run_case("linear_bn1d_bias", seq(nn.Linear(6, 5), nn.BatchNorm1d(5)), [x2(6)],
                                             structure={"Gemm": 1, "bias": has_bias("Gemm")}),
        "linear_bn1d_nobias": lambda: run_case(
            "linear_bn1d_nobias", seq(nn.Linear(6, 5, bias=False), nn.BatchNorm1d(5, eps=1e-3)), [x2(6)], opset=13,
            structure={"Gemm": 1, "bias": has_bias("Gemm")}),
        "matmul_bn1d": lambda: run_case("matmul_bn1d", randomize_bn(MatMulBN()), [x2(6)],
                                        structure={"MatMul": 0, "Add": 0, "bias": has_bias("Gemm")}),
        "gemm_only_fuse": lambda: run_case(
            "gemm_only_fuse", seq(nn.Linear(6, 5), nn.BatchNorm1d(5)), [x2(6)], passes="fuse_batch_norm",
            structure={"Gemm": 1, "bias": has_bias("Gemm")}),
        "forward_bn_conv": lambda: run_case(
            "forward_bn_conv", seq(nn.BatchNorm2d(3), nn.Conv2d(3, 8, 3, stride=2)), [x4(3)],
            structure={"Conv": 1, "bias": has_bias("Conv")}),
        "forward_bn_depthwise": lambda: run_case(
            "forward_bn_depthwise", seq(nn.BatchNorm2d(4, eps=1e-3), nn.Conv2d(4, 8, (3, 2), groups=4, bias=False)),
            [x4(4)], opset=13, structure={"Conv": 1, "bias": has_bias("Conv")}),
        "forward_padded_kept": lambda: run_case(
            "forward_padded_kept", seq(nn.BatchNorm2d(3), nn.Conv2d(3, 8, 3, padding=1)), [x4(3)], bn_after=1,
            skip_reason="pads its input"),
        "decompose": lambda: run_case(
            "decompose", seq(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.BatchNorm2d(4)), [x4(3)],
            passes="canonicalize,fuse_batch_norm,decompose_batch_norm",
            structure={"Mul": 1, "Add": 1}, skip_reason="BN input comes from relu"),
        "decompose_rank2": lambda: run_case(
            "decompose_rank2", seq(nn.Linear(6, 5), nn.ReLU(), nn.BatchNorm1d(5)), [x2(6)],
            passes="decompose_batch_norm", structure={"Mul": 1, "Add": 1}),
        # --- negative cases: BN kept, reason reported, outputs unchanged ---
        "skip_connection": lambda: run_case("skip_connection", randomize_bn(SkipConn()), [x4(4)], bn_after=1,
                                            skip_reason="conv output has 2 users"),
        "conv_is_output": lambda: run_case("conv_is_output", randomize_bn(ConvIsOutput()), [x4(3)], bn_after=1, nout=2,
                                           skip_reason="conv output is a graph output"),
        "weight_not_const": lambda: run_case(
            "weight_not_const", randomize_bn(WeightInput()),
            [x4(3), torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(1))], bn_after=1,
            skip_reason="weight is not a constant"),
        "training_mode": lambda: run_case(
            "training_mode", seq(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), [x4(3)], train=True, bn_after=1,
            skip_reason="BN is in training mode", nout=1),
    }
    return C


def numeric_case():
    model = seq(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with torch.no_grad():
        model[1].running_var[2] = -model[1].eps - 1.0
    model.eval()
    src = os.path.join(WORK, "numeric.onnx")
    dst = os.path.join(WORK, "numeric.fused.onnx")
    export(model, [x4(3)], src)
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
        import torchvision
        model = getattr(torchvision.models, name)(weights=None)
        randomize_bn(model, seed=11)
        model.eval()
        x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(5))
        src, xin, yref = [os.path.join(WORK, name + s) for s in (".onnx", ".in0.npy", ".out0.npy")]
        export(model, [x], src)
        np.save(xin, x.numpy())
        with torch.no_grad():
            np.save(yref, model(x).numpy())
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
