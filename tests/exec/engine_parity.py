#!/usr/bin/python3
"""`qfold run` with the oneDNN backend against the reference kernels.

    engine_parity.py QFOLD MODELS_DIR NAME WORK_DIR

Runs MODELS_DIR/NAME.onnx (a model of tests/ref/make_models.py, BatchNorm
kept) and its `qfold fuse`d form on NAME.in0.npy, once with --engine ref
and once with --engine dnnl; the outputs must agree within 1e-5 relative
(max |dnnl - ref| / max |ref|). `qfold inspect --plan` of the fused model
under dnnl must show the backend at work on the two torchvision networks:
dnnl steps, fused nodes, and either NHWC with one reorder only (the
input's: the classifier's output is 2-D) or the blocked layout (blk16,
chosen for mobilenet_v2's 16 / 24 / 32-channel 1x1 convs) with none (its
first conv reads the NCHW image). tests/ref/engine_parity.py compares every
reference model per element; this one checks the plan behind it.
Exits 77 (skipped) only when the oneDNN backend cannot be loaded here, as
qfold documents it: `qfold --engine dnnl` exits 2 (1: for want of memory)
with the one line "qfold: engine dnnl: <why>". Any other failure of the
probe (a signal, another exit status, another message) fails the test.

    engine_parity.py --self-test WORK_DIR

checks that decision on stand-in qfold programs (a crash, an unexpected
exit status, the documented refusal, success).
"""
import os
import signal
import subprocess
import sys

import numpy as np


def probe_backend(qfold, model):
    """`qfold --engine dnnl inspect MODEL --plan`: ("ok", plan), ("skip", why)
    for the documented refusal, or ("fail", why) for anything else."""
    argv = [qfold, "--engine", "dnnl", "inspect", model, "--plan"]
    p = subprocess.run(argv, capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    if p.returncode in (1, 2) and len(lines) == 1 and lines[0].startswith("qfold: engine dnnl: "):
        return "skip", lines[0]
    if p.returncode < 0:
        what = "was killed by %s" % signal.Signals(-p.returncode).name
    else:
        what = "exited %d" % p.returncode
    if p.returncode != 0:
        return "fail", "`%s` %s (not the documented refusal: exit 2 or 1 with one line " \
                       "'qfold: engine dnnl: ...'):\n%s" % (" ".join(argv), what, p.stderr)
    if "\nengine: dnnl\n" not in p.stdout:
        return "fail", "`%s` succeeded but does not plan on dnnl:\n%s" % (" ".join(argv), p.stdout)
    return "ok", p.stdout


def self_test(work):
    """probe_backend on stand-ins for qfold: only the documented refusal skips."""
    os.makedirs(work, exist_ok=True)
    cases = {
        "crash": ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "fail"),
        "exit3": ("import sys; sys.exit(3)", "fail"),
        "other_message": ("import sys; print('qfold: cannot read', file=sys.stderr); sys.exit(2)", "fail"),
        "refusal": ("import sys; print('qfold: engine dnnl: oneDNN (libdnnl.so.2) could not be loaded: x',"
                    " file=sys.stderr); sys.exit(2)", "skip"),
        "refusal_nomem": ("import sys; print('qfold: engine dnnl: out of memory: x', file=sys.stderr);"
                          " sys.exit(1)", "skip"),
        "ref_plan": ("print('\\nengine: ref\\nplan: 1 steps')", "fail"),
        "dnnl_plan": ("print('\\nengine: dnnl\\nplan: 1 steps')", "ok"),
    }
    bad = []
    for name, (body, want) in cases.items():
        path = os.path.join(work, "fake_qfold_" + name)
        with open(path, "w") as f:
            f.write("#!%s\n%s\n" % (sys.executable, body))
        os.chmod(path, 0o755)
        got, why = probe_backend(path, "m.onnx")
        print("%s: %s" % (name, got))
        if got != want:
            bad.append("%s: %s, want %s (%s)" % (name, got, want, why))
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


def main():
    if sys.argv[1] == "--self-test":
        return self_test(sys.argv[2])
    qfold, models, name, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(models, name + ".onnx")
    x = os.path.join(models, name + ".in0.npy")
    fused = os.path.join(work, name + ".fused.onnx")
    subprocess.run([qfold, "fuse", model, "-o", fused], check=True, stdout=subprocess.DEVNULL)
    verdict, plan = probe_backend(qfold, fused)
    if verdict == "skip":
        print("skipped: the oneDNN backend is not available here: " + plan)
        return 77
    if verdict == "fail":
        print("FAIL " + plan)
        return 1
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
            subprocess.run([qfold, "--engine", engine, "run", path, "-i", x, "-o", out], check=True,
                           stdout=subprocess.DEVNULL)
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
