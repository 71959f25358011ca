#!/usr/bin/python3
"""`qfold run` with the oneDNN backend against the reference kernels.

    engine_parity.py QFOLD MODELS_DIR NAME WORK_DIR

Runs MODELS_DIR/NAME.onnx (a model of tests/ref/make_models.py, BatchNorm
kept) and its `qfold fuse`d form on NAME.in0.npy, once with QFOLD_ENGINE=ref
and once with QFOLD_ENGINE=dnnl; the outputs must agree within 1e-5 relative
(max |dnnl - ref| / max |ref|). `qfold inspect --plan` of the fused model
under dnnl must show the backend at work on the two torchvision networks:
dnnl steps, fused nodes, and either NHWC with one reorder only (the
input's: the classifier's output is 2-D) or the blocked layout (blk16,
chosen for mobilenet_v2's 16 / 24 / 32-channel 1x1 convs) with none (its
first conv reads the NCHW image). tests/ref/engine_parity.py compares every
reference model per element; this one checks the plan behind it.
Exits 77 (skipped) when the oneDNN backend cannot be loaded here.
"""
import os
import subprocess
import sys

import numpy as np


def main():
    qfold, models, name, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(models, name + ".onnx")
    x = os.path.join(models, name + ".in0.npy")
    fused = os.path.join(work, name + ".fused.onnx")
    subprocess.run([qfold, "fuse", model, "-o", fused], check=True, stdout=subprocess.DEVNULL)
    probe = subprocess.run([qfold, "inspect", fused, "--plan"], env=dict(os.environ, QFOLD_ENGINE="dnnl"),
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("skipped: the oneDNN backend is not available here:\n" + probe.stderr.strip())
        return 77
    plan = probe.stdout
    fails = []
    convnet = name in ("resnet18", "mobilenet_v2")
    nhwc = "layout nhwc" in plan and " nhwc " in plan and " 1 reorders;" in plan
    blocked = "layout blk16" in plan and " blk16 " in plan and " 0 reorders;" in plan
    if convnet and (" dnnl " not in plan or " + " not in plan or not (nhwc or blocked)):
        fails.append("the dnnl plan of %s: want backend kernels, fused nodes, and NHWC with 1 reorder or "
                     "blocked with none:\n%s" % (fused, plan))
    for label, path in (("bn", model), ("fused", fused)):
        outs = {}
        for engine in ("ref", "dnnl"):
            out = os.path.join(work, "%s.%s.%s.npy" % (name, label, engine))
            subprocess.run([qfold, "run", path, "-i", x, "-o", out], check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, QFOLD_ENGINE=engine))
            outs[engine] = np.load(out).astype(np.float64)
        ref, got = outs["ref"], outs["dnnl"]
        rel = float(np.max(np.abs(got - ref))) / max(float(np.max(np.abs(ref))), 1e-6)
        print("%s %s: dnnl vs ref relative difference %.3g" % (name, label, rel))
        if not rel <= 1e-5:
            fails.append("%s (%s): dnnl vs ref relative difference %.3g > 1e-5" % (name, label, rel))
    for f in fails:
        print("FAIL " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
