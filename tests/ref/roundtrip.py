#!/usr/bin/python3
"""ONNX import / export round trip: qfold loads a torch-exported model and
saves it again; the saved model must pass onnx.checker, keep the graph
input / output names, the initializer names and the opset, and ONNX Runtime
must give the same outputs on both (|a - b| <= 1e-6 * max(1, max|a|)).

    roundtrip.py QF_ROUNDTRIP NODE ORT_RUN_JS MODELDIR NAME...
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.checker

from qfref import run_cases


def default_opset(m):
    return {o.domain or "ai.onnx": o.version for o in m.opset_import}.get("ai.onnx")


def interface(m):
    init = {i.name for i in m.graph.initializer}
    ins = [i.name for i in m.graph.input if i.name not in init]
    outs = [o.name for o in m.graph.output]
    return ins, outs, init


def ort(node, script, model, inp, outdir):
    os.makedirs(outdir, exist_ok=True)
    r = subprocess.run([node, script, model, outdir, inp], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().replace("\n", " | "))
    outs = sorted(f for f in os.listdir(outdir) if f.startswith("out"))
    return [np.load(os.path.join(outdir, f)) for f in outs]


def check(tool, node, script, mdir, name):
    src = os.path.join(mdir, name + ".onnx")
    inp = os.path.join(mdir, name + ".in0.npy")
    with tempfile.TemporaryDirectory(prefix="qf-roundtrip-") as tmp:
        dst = os.path.join(tmp, name + ".qfold.onnx")
        r = subprocess.run([tool, src, dst], capture_output=True, text=True)
        if r.returncode != 0:
            return False, f"qf_roundtrip exited {r.returncode}: {r.stderr.strip()}"
        leftovers = sorted(set(os.listdir(tmp)) - {os.path.basename(dst)})
        if leftovers:
            return False, f"temporary files left next to the export: {leftovers}"
        try:
            exported = onnx.load(dst)
            onnx.checker.check_model(exported)
        except Exception as e:  # the checker's exceptions vary by version
            return False, f"onnx.checker rejects the export: {str(e).splitlines()[0]}"
        orig = onnx.load(src)
        oi, oo, oinit = interface(orig)
        ei, eo, einit = interface(exported)
        if (oi, oo) != (ei, eo):
            return False, f"interface changed: inputs {oi} -> {ei}, outputs {oo} -> {eo}"
        # Initializers the model actually uses must keep their names (an
        # importer may drop unused ones, and may turn Constant nodes into
        # initializers, so only the original set is required).
        used = {x for n in orig.graph.node for x in n.input}
        missing = sorted((oinit & used) - einit)
        if missing:
            return False, f"initializers lost or renamed: {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        if default_opset(orig) != default_opset(exported):
            return False, f"opset {default_opset(orig)} -> {default_opset(exported)}"
        try:
            a = ort(node, script, src, inp, os.path.join(tmp, "a"))
            b = ort(node, script, dst, inp, os.path.join(tmp, "b"))
        except RuntimeError as e:
            return False, f"onnxruntime: {e}"
    worst = 0.0
    for j, (x, y) in enumerate(zip(a, b)):
        if x.dtype != y.dtype or x.shape != y.shape:
            return False, f"output {j}: {y.dtype}{list(y.shape)} vs {x.dtype}{list(x.shape)}"
        d = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
        tol = 1e-6 * max(1.0, float(np.max(np.abs(x))) if x.size else 0.0)
        worst = max(worst, d)
        if d > tol:
            return False, f"output {j}: ORT(original) vs ORT(qfold export) differ by {d:.3g} > {tol:.3g}"
    return True, (f"checker ok, {len(ei)} inputs / {len(eo)} outputs / {len(oinit & used)} initializers "
                  f"kept, opset {default_opset(exported)}, ORT max diff {worst:.3g}")


def main():
    tool, node, script, mdir, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    return run_cases(names, lambda name: check(tool, node, script, mdir, name))


if __name__ == "__main__":
    sys.exit(main())
