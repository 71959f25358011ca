#!/usr/bin/python3
"""PyTorch parity: `qfold run` on a model exported by make_models.py against
torch's output on the same input.

    torch_parity.py QFOLD MODELDIR NAME...

Passes when max|qfold - torch| <= 1e-4 * max(1, max|torch|) for every model.
Prints one line per model with the max abs diff.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

from qfref import run_cases


def check(qfold, mdir, name):
    model = os.path.join(mdir, name + ".onnx")
    x = os.path.join(mdir, name + ".in0.npy")
    want = np.load(os.path.join(mdir, name + ".out0.npy"))
    with tempfile.TemporaryDirectory(prefix="qf-parity-") as tmp:
        out = os.path.join(tmp, "out0.npy")
        r = subprocess.run([qfold, "run", model, "-i", x, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            err = r.stderr.strip().replace("\n", " | ")
            return False, f"qfold run exited {r.returncode}: {err}"
        if not os.path.exists(out):
            return False, "qfold run wrote no output"
        got = np.load(out)
    if got.dtype != want.dtype or got.shape != want.shape:
        return False, f"output {got.dtype}{list(got.shape)}, torch {want.dtype}{list(want.shape)}"
    if not np.all(np.isfinite(got)):
        return False, f"{int(np.sum(~np.isfinite(got)))} non-finite outputs"
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    peak = float(np.max(np.abs(want))) if want.size else 0.0
    scale = max(1.0, peak)
    tol = 1e-4 * scale
    worst = float(diff.max()) if diff.size else 0.0
    where = np.unravel_index(int(diff.argmax()), diff.shape) if diff.size else ()
    msg = f"max|qfold - torch| = {worst:.3g} (tolerance {tol:.3g}, max|torch| {peak:.3g})"
    if worst > tol:
        msg += f"; worst at {list(map(int, where))}: qfold {got[where]:.7g}, torch {want[where]:.7g}"
        return False, msg
    return True, msg


def main():
    qfold, mdir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    return run_cases(names, lambda name: check(qfold, mdir, name))


if __name__ == "__main__":
    sys.exit(main())
