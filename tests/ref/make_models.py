#!/usr/bin/python3
"""Build the PyTorch reference models once per ctest run (fixture ref_models).

    make_models.py OUTDIR [NAME...]

For every model NAME writes OUTDIR/NAME.onnx (exported with BatchNorm kept:
training=PRESERVE on an eval model, no constant folding), OUTDIR/NAME.in0.npy
(a random input) and OUTDIR/NAME.out0.npy (torch's output on it, float32).
BatchNorm statistics, gamma and beta are randomized: a freshly built BN is
the identity and would hide every mistake in BN, folding or export.
The PyTorch side is tests/ref/make_models_torch.py, called through
tests/ref/refcache.py (computed once per `make test`: both passes use the
same models, and the second pass imports no torch for them).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refcache  # noqa: E402


def models(outdir, names):
    import make_models_torch
    return make_models_torch.make_all(outdir, names)


def main():
    outdir = os.path.abspath(sys.argv[1])
    os.makedirs(outdir, exist_ok=True)
    names = refcache.call(models, outdir, sorted(set(sys.argv[2:])) or None, base=outdir)
    print("make_models: wrote " + " ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
