"""Backward kernels of PRelu, Max, Min and Abs vs PyTorch 1.13 autograd
(tests/train/grad_torch_case.py): nn.PReLU's per-channel slope ([C, 1, 1],
an initializer, as torch exports it) and one shared slope, a slope of X's
shape and one along the last axis (ONNX's broadcasting); torch.maximum /
torch.minimum on two inputs with ties (each side gets half the gradient),
broadcast either way, three inputs (a chain of two calls, as PyTorch writes
it), one input; torch.abs with zeros (gradient 0 there). Inputs carry exact
zeros and ties on purpose."""
import argparse
import sys

import numpy as np

import grad_torch_case as gc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(29)
    f32 = np.float32
    ok = True

    x = rng.uniform(-2, 2, (2, 3, 4, 5)).astype(f32)
    x.reshape(-1)[:4] = 0.0  # the kink: x = 0 takes the slope's branch in torch
    slope_c = rng.uniform(0.05, 0.4, (3, 1, 1)).astype(f32)
    ok &= gc.run(args, "prelu_channel", "PRelu", "prelu_channel", [x, slope_c], params=[False, True])
    ok &= gc.run(args, "prelu_channel_input", "PRelu", "prelu_channel", [x, slope_c])
    ok &= gc.run(args, "prelu_one", "PRelu", "prelu_channel", [x, np.array([0.25], f32)], params=[False, True])
    ok &= gc.run(args, "prelu_same_shape", "PRelu", "prelu_where",
                 [x, rng.uniform(-0.5, 0.5, x.shape).astype(f32)], params=[False, True])
    ok &= gc.run(args, "prelu_last_axis", "PRelu", "prelu_where",
                 [x, rng.uniform(0, 0.5, (5,)).astype(f32)], params=[False, True])

    a = rng.integers(-3, 4, (2, 3, 4)).astype(f32) * 0.5  # few values: many ties
    b = rng.integers(-3, 4, (2, 3, 4)).astype(f32) * 0.5
    c = rng.integers(-3, 4, (3, 1)).astype(f32) * 0.5
    for op, fn in (("Max", "maximum"), ("Min", "minimum")):
        lo = op.lower()
        ok &= gc.run(args, lo + "_ties", op, fn, [a, b])
        ok &= gc.run(args, lo + "_bcast", op, fn, [a, c])
        ok &= gc.run(args, lo + "_bcast_first", op, fn, [c, a], params=[True, False])
        ok &= gc.run(args, lo + "_three", op, fn + "3", [a, b, c])
        ok &= gc.run(args, lo + "_three_same", op, fn + "3", [a, a, a])
        ok &= gc.run(args, lo + "_one", op, "identity", [a])

    xa = rng.uniform(-2, 2, (3, 4, 5)).astype(f32)
    xa.reshape(-1)[:5] = 0.0
    ok &= gc.run(args, "abs", "Abs", "abs", [xa])
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
