#!/usr/bin/python3
"""Push torchvision architectures through `qfold run` and `qfold fuse`.

    arch_sweep.py QFOLD [--work DIR] [--opset N] [--size S] [--node NODE | --no-ort]
                        [--strict] [--keep] [--list] [--tflite TARGET] [MODEL ...]

A manual sweep tool (tests/arch.cmake runs a few cheap models with --strict).
For each MODEL (default: every model of SWEEP below) it

1. builds the torchvision model with weights=None, randomizes every BatchNorm's
   running statistics, gamma and beta (a fresh BN is the identity and hides
   bugs), puts it in eval() and exports it with training=PRESERVE (BN kept),
   do_constant_folding=False, opset 14 (--opset);
2. runs `qfold run` and compares with torch:
   max|qfold - torch| <= 1e-4 * max(1, max|torch|);
3. runs `qfold fuse`, counts the BatchNormalization nodes before / after and
   the ones that MUST fold (the BN's input comes from Conv / ConvTranspose /
   Gemm / MatMul-with-rank-2-output with a constant weight, that output has
   the BN as its only user and is not a graph output); checks that every
   must-fold BN is gone and that onnx.checker accepts the fused file;
4. runs the fused file with ONNX Runtime (tests/ref/ort_run.js) and compares
   with torch at the same tolerance;
5. with --tflite TARGET: quantizes for TARGET (the one input as calibration
   data) and exports to .tflite, printing 'ok', the ops left float, or the
   command's refusal (a coverage census; not part of --strict).

Prints one table row per model. With --strict the exit status is 1 when any
model fails a check (used by ctest), else 0. Step 1 runs through
tests/ref/refcache.py (computed once per `make test`; a hit imports no
torch).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import refcache  # noqa: E402
from qfref import randomize_bn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-4
OPSET = 14

# name -> (constructor kwargs, input side). 64x64 where the model allows it;
# the models whose adaptive pooling would not divide evenly (vgg, alexnet) or
# whose blocks need a fixed grid (maxvit) take their native size.
SWEEP = {
    "resnet18": ({}, 64),
    "resnet34": ({}, 64),
    "resnet50": ({}, 64),
    "resnext50_32x4d": ({}, 64),
    "wide_resnet50_2": ({}, 64),
    "mobilenet_v2": ({}, 64),
    "mobilenet_v3_small": ({}, 64),
    "mobilenet_v3_large": ({}, 64),
    "efficientnet_b0": ({}, 64),
    "efficientnet_b1": ({}, 64),
    "efficientnet_v2_s": ({}, 64),
    "regnet_x_400mf": ({}, 64),
    "regnet_y_400mf": ({}, 64),
    "regnet_x_800mf": ({}, 64),
    "shufflenet_v2_x0_5": ({}, 64),
    "shufflenet_v2_x1_0": ({}, 64),
    "mnasnet0_5": ({}, 64),
    "mnasnet1_0": ({}, 64),
    "densenet121": ({}, 64),
    "googlenet": ({"aux_logits": False, "init_weights": True}, 64),
    "inception_v3": ({"aux_logits": False, "init_weights": True}, 96),
    "squeezenet1_0": ({}, 64),
    "squeezenet1_1": ({}, 64),
    "vgg11_bn": ({}, 224),
    "alexnet": ({}, 224),
    "convnext_tiny": ({}, 64),
    "vit_b_16": ({"image_size": 64}, 64),
    "swin_t": ({}, 64),
    "maxvit_t": ({}, 224),
    "swin_v2_t": ({}, 64),
    "vit_b_32": ({"image_size": 64}, 64),
}


def randomize_zero_weights(model, gen):
    """Weights that start all zero (ViT's head and class token) would make
    the output constant: give them small random values."""
    import torch
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not torch.any(p):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


def build(name, work, opset, size=None):
    """Export NAME; returns (onnx path, input .npy path, torch output array)."""
    path = os.path.join(work, name + ".onnx")
    xin = os.path.join(work, name + ".in0.npy")
    y, err = refcache.call(export, name, path, xin, opset, size, base=work)
    if err is not None:
        raise ExportFailed(err)
    return path, xin, y


class ExportFailed(Exception):
    pass


def export(name, path, xin, opset, size):
    """build's PyTorch side: the model exported to PATH, its input saved to
    XIN; returns (torch's output, None), or (None, the first line of the
    error) when torch cannot build, run or export the model."""
    try:
        return export_model(name, path, xin, opset, size), None
    except Exception as e:
        return None, str(e).splitlines()[0][:140] if str(e) else type(e).__name__


def export_model(name, path, xin, opset, size):
    import torch
    import torchvision
    kwargs, side = SWEEP.get(name, ({}, 64))
    if size:
        side = size
        if "image_size" in kwargs:
            kwargs = dict(kwargs, image_size=size)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    model = getattr(torchvision.models, name)(weights=None, **kwargs)
    randomize_bn(model, gen)
    randomize_zero_weights(model, gen)
    model.eval()
    x = torch.randn(1, 3, side, side, generator=gen)
    with torch.no_grad():
        y = model(x)
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                      opset_version=opset, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)
    np.save(xin, x.numpy().astype(np.float32))
    return y.numpy().astype(np.float32)


def const_names(graph):
    names = {i.name for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant":
            names.update(n.output)
    return names


def bn_census(path):
    """(BN count, names of the BNs that must fold)."""
    model = onnx.load(path)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:
        pass
    g = model.graph
    consts = const_names(g)
    producer = {o: n for n in g.node for o in n.output}
    users = {}
    for n in g.node:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    outputs = {o.name for o in g.output}
    rank = {}
    for vi in list(g.value_info) + list(g.output):
        if vi.type.tensor_type.HasField("shape"):
            rank[vi.name] = len(vi.type.tensor_type.shape.dim)
    bns = [n for n in g.node if n.op_type == "BatchNormalization"]
    must = set()
    for bn in bns:
        x = bn.input[0]
        p = producer.get(x)
        if p is None or users.get(x, 0) != 1 or x in outputs:
            continue
        if any(a.name == "training_mode" and a.i for a in bn.attribute) or len(bn.output) > 1:
            continue
        if not all(i in consts for i in bn.input[1:]):
            continue
        if p.op_type in ("Conv", "ConvTranspose", "Gemm"):
            ok = p.input[1] in consts
        elif p.op_type == "MatMul":
            ok = p.input[1] in consts and rank.get(x) == 2
        else:
            ok = False
        if ok:
            must.add(bn.name or bn.output[0])
    return len(bns), must


def run(cmd, timeout):
    t0 = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return r.returncode, (r.stderr or r.stdout).decode(errors="replace").strip(), time.time() - t0


def maxdiff(a, b):
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def first_line(msg):
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "?"


def sweep_one(name, args):
    row = {"model": name, "amax": "-", "run": "-", "bn": "-", "ort": "-", "ok": False, "why": ""}
    work = args.work
    try:
        path, xin, ref = build(name, work, args.opset, args.size)
    except ExportFailed as e:  # the model itself does not export: not qfold's business
        row["why"] = f"export: {e}"
        row["ok"] = None
        return row
    bound = TOL * max(1.0, float(np.max(np.abs(ref))))
    row["amax"] = f"{float(np.max(np.abs(ref))):.2e}"
    problems = []

    out = os.path.join(work, name + ".qfold.npy")
    rc, msg, dt = run([args.qfold, "run", path, "-i", xin, "-o", out], args.timeout)
    if rc != 0:
        problems.append(f"run: exit {rc}: {first_line(msg)}")
    else:
        d = maxdiff(np.load(out), ref)
        row["run"] = f"{d:.2e}"
        if not d <= bound:
            problems.append(f"run: diff {d:.3g} > {bound:.3g}")

    fused = os.path.join(work, name + ".fused.onnx")
    nbn, must = bn_census(path)
    rc, msg, dt = run([args.qfold, "fuse", path, "-o", fused], args.timeout)
    if rc != 0:
        problems.append(f"fuse: exit {rc}: {first_line(msg)}")
        row["bn"] = f"{nbn}/-/{len(must)}"
    else:
        nafter, _ = bn_census(fused)
        left = onnx.load(fused)
        left_names = {n.name or n.output[0] for n in left.graph.node if n.op_type == "BatchNormalization"}
        row["bn"] = f"{nbn}/{nafter}/{len(must)}"
        stuck = sorted(must & left_names)
        if stuck or nafter > nbn - len(must):
            problems.append(f"fuse: {len(stuck) or nafter - (nbn - len(must))} must-fold BN left "
                            f"({', '.join(stuck[:3])})")
        try:
            onnx.checker.check_model(left)
        except Exception as e:
            problems.append(f"checker: {str(e).splitlines()[0][:140]}")
        if args.node:
            odir = os.path.join(work, name + ".ort")
            os.makedirs(odir, exist_ok=True)
            rc, msg, dt = run([args.node, os.path.join(HERE, "ort_run.js"), fused, odir, xin], args.timeout)
            if rc != 0:
                problems.append(f"ort: exit {rc}: {first_line(msg)}")
            else:
                d = maxdiff(np.load(os.path.join(odir, "out0.npy")), ref)
                row["ort"] = f"{d:.2e}"
                if not d <= bound:
                    problems.append(f"ort: diff {d:.3g} > {bound:.3g}")
    if args.tflite:
        row["tflite"] = tflite_step(name, path, xin, args)
    row["ok"] = not problems
    row["why"] = "; ".join(problems)
    if not args.keep:
        for f in (path, fused, out, xin):
            if os.path.exists(f):
                os.remove(f)
    return row


def tflite_step(name, path, xin, args):
    """--tflite: `quantize --target T` (the sweep's one input as calibration
    data: a smoke test of coverage, not of accuracy), then `export`. Returns
    'ok', 'quantize: <error>', 'export: <error>' or 'float: <ops left
    float>'."""
    q = os.path.join(args.work, name + ".q.onnx")
    t = os.path.join(args.work, name + ".tflite")
    rep = os.path.join(args.work, name + ".q.json")
    try:
        rc, msg, _ = run([args.qfold, "quantize", path, "-o", q, "--target", args.tflite, "--calib", xin,
                          "--report", rep], args.timeout)
    except subprocess.TimeoutExpired:
        return "quantize: did not finish within %g s" % args.timeout
    if rc != 0:
        return "quantize: " + first_line(msg)
    import json
    left = json.load(open(rep))["left_float"]
    rc, msg, _ = run([args.qfold, "export", q, "-o", t], args.timeout)
    for f in (q, t, rep):
        if os.path.exists(f) and not args.keep:
            os.remove(f)
    if rc != 0:
        return "export: " + first_line(msg)
    if left:
        ops = sorted({o["op"] for o in left})
        return "ok, %d float (%s)" % (len(left), ", ".join(ops))
    return "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("qfold")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "qfold-arch-sweep"))
    ap.add_argument("--node", default=None, help="node binary (ORT check); default: node on PATH")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--strict", action="store_true", help="exit 1 when any model fails")
    ap.add_argument("--keep", action="store_true", help="keep the exported and fused files")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--opset", type=int, default=OPSET, help=f"export opset (default {OPSET})")
    ap.add_argument("--size", type=int, default=None, help="input side for every model (default: per model)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--tflite", metavar="TARGET", default=None,
                    help="also quantize for TARGET (neutron / generic) and export to .tflite; a TFLite column")
    args = ap.parse_intermixed_args()
    if args.list:
        print("\n".join(SWEEP))
        return 0
    if args.no_ort:
        args.node = None
    elif args.node is None:
        from shutil import which
        args.node = which("node")
    os.makedirs(args.work, exist_ok=True)
    names = args.models or list(SWEEP)
    hdr = f"{'model':<20} {'max|torch|':>10} {'run diff':>9} {'BN b/a/must':>12} {'ORT diff':>9}  status"
    print(hdr)
    print("-" * len(hdr))
    failed = skipped = 0
    for name in names:
        t0 = time.time()
        row = sweep_one(name, args)
        status = "ok" if row["ok"] else ("SKIP " + row["why"] if row["ok"] is None else "FAIL " + row["why"])
        failed += row["ok"] is False
        skipped += row["ok"] is None
        print(f"{name:<20} {row['amax']:>10} {row['run']:>9} {row['bn']:>12} {row['ort']:>9}  {status} ({time.time() - t0:.0f}s)",
              flush=True)
        if "tflite" in row:
            print(f"{'':<20} tflite ({args.tflite}): {row['tflite']}", flush=True)
    print(f"{len(names) - failed - skipped} pass, {failed} fail, {skipped} skipped (torch cannot export them)")
    return 1 if (args.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
