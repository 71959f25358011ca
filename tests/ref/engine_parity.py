#!/usr/bin/python3
"""Engine parity: `qfold run` with the oneDNN kernels (QFOLD_ENGINE=dnnl)
against the reference kernels (QFOLD_ENGINE=ref), on a model of make_models.py
as exported (BatchNormalization nodes) and after `qfold fuse` (biased convs).

    engine_parity.py QFOLD MODELDIR NAME...

Passes when every output element is within 1e-5 relative of the reference:
|dnnl - ref| <= 1e-5 * max(|ref|, rms(ref)); the rms floor is for elements
that cancel to near 0, whose float rounding is relative to the tensor's scale.
Where oneDNN cannot be loaded, `qfold run` uses the reference kernels for
both and the check is trivially true (the line says so).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

from qfref import run_cases


def qfold_run(qfold, model, x, out, engine):
    env = dict(os.environ, QFOLD_ENGINE=engine)
    r = subprocess.run([qfold, "run", model, "-i", x, "-o", out], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"qfold run ({engine}) exited {r.returncode}: {r.stderr.strip()}")
    return np.load(out)


def compare(qfold, model, x, tmp):
    ref = qfold_run(qfold, model, x, os.path.join(tmp, "ref.npy"), "ref").astype(np.float64)
    got = qfold_run(qfold, model, x, os.path.join(tmp, "dnnl.npy"), "dnnl").astype(np.float64)
    if got.shape != ref.shape:
        return False, f"shape {list(got.shape)}, ref {list(ref.shape)}"
    rms = float(np.sqrt(np.mean(ref * ref))) if ref.size else 0.0
    rel = np.abs(got - ref) / np.maximum(np.maximum(np.abs(ref), rms), 1e-30)
    worst = float(rel.max()) if rel.size else 0.0
    same = bool(np.array_equal(got, ref))
    return worst <= 1e-5, f"worst {worst:.2g} relative{' (bit-identical)' if same else ''}"


def check(qfold, mdir, name):
    model = os.path.join(mdir, name + ".onnx")
    x = os.path.join(mdir, name + ".in0.npy")
    with tempfile.TemporaryDirectory(prefix="qf-engine-") as tmp:
        try:
            ok1, m1 = compare(qfold, model, x, tmp)
            fused = os.path.join(tmp, "fused.onnx")
            r = subprocess.run([qfold, "fuse", model, "-o", fused], capture_output=True, text=True)
            if r.returncode != 0:
                return False, f"qfold fuse exited {r.returncode}: {r.stderr.strip()}"
            ok2, m2 = compare(qfold, fused, x, tmp)
        except RuntimeError as e:
            return False, str(e)
    return ok1 and ok2, f"as exported: {m1}; fused: {m2}"


def main():
    qfold, mdir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    return run_cases(names, lambda name: check(qfold, mdir, name))


if __name__ == "__main__":
    sys.exit(main())
