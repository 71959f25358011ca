"""qfold's fake_quant op vs PyTorch 1.13's FakeQuantize module (the QAT
fake-quant with moving-average min/max observers): three training steps on
the same inputs, feeding qfold's updated buffers back as the module keeps
its own; per step the output, d x, scale, zero point and the running
min / max must be equal (outputs and gradients bit for bit: the same
float32 formula; the observer's moving average within 1 ulp). Per tensor
(affine and symmetric, int8 and the neutron weight range [-127, 127]) and
per channel (axis 0 and 1), on tensors of one and of several threaded
pieces."""
import argparse
import os
import sys
import zlib

import numpy as np
import torch
from torch.ao.quantization import (FakeQuantize, MovingAverageMinMaxObserver,
                                   MovingAveragePerChannelMinMaxObserver)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402


def case(args, name, shape, qmin, qmax, symmetric, axis=None, eps=None):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if axis is None:
        obs = MovingAverageMinMaxObserver
        qscheme = torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine
        kw = {}
        nq = 1
    else:
        obs = MovingAveragePerChannelMinMaxObserver
        qscheme = torch.per_channel_symmetric if symmetric else torch.per_channel_affine
        kw = {"ch_axis": axis}
        nq = shape[axis]
    if eps is not None:
        kw["eps"] = eps
    fq = FakeQuantize(observer=obs, quant_min=qmin, quant_max=qmax, dtype=torch.qint8, qscheme=qscheme,
                      averaging_constant=0.01, **kw)
    fq.train()
    scale = np.ones(nq, np.float32)
    zp = np.zeros(nq, np.float32)
    rmin = np.full(nq, np.inf, np.float32)
    rmax = np.full(nq, -np.inf, np.float32)
    ints = {"quant_min": qmin, "quant_max": qmax, "symmetric": int(symmetric), "axis": axis or 0}
    floats = {"averaging_constant": 0.01}
    if eps is not None:
        floats["eps"] = eps
    ok = True
    for step in range(3):
        x = (rng.standard_normal(shape) * (1.0 + step) + 0.3 * step).astype(np.float32)
        dy = rng.uniform(-1, 1, shape).astype(np.float32)
        outs, dins, after = gu.qfold_grad_op(args.tool, "fake_quant", [x, scale, zp, rmin, rmax], [dy],
                                             os.path.join(args.work, name), training=True, ints=ints,
                                             floats=floats)
        xt = torch.tensor(x, requires_grad=True)
        y = fq(xt)
        y.backward(torch.tensor(dy))
        scale, zp, rmin, rmax = after[1], after[2], after[3], after[4]
        tscale = fq.scale.detach().numpy().astype(np.float32).reshape(-1)
        tzp = fq.zero_point.detach().numpy().astype(np.float32).reshape(-1)
        o = fq.activation_post_process
        tmin = o.min_val.detach().numpy().reshape(-1)
        tmax = o.max_val.detach().numpy().reshape(-1)
        checks = [("y", outs[0], y.detach().numpy(), 0.0), ("dx", dins[0], xt.grad.numpy(), 0.0),
                  ("scale", scale, tscale, 1e-6), ("zero point", zp, tzp, 0.0),
                  ("running min", rmin, tmin, 1e-6), ("running max", rmax, tmax, 1e-6)]
        for what, got, ref, tol in checks:
            err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
            bound = tol * max(1.0, float(np.max(np.abs(ref))))
            good = got.shape == ref.reshape(got.shape).shape and err <= bound
            if not good:
                print("%s step %d %s: max diff %.3g (bound %.3g)  FAIL" % (name, step, what, err, bound))
            ok &= good
    print("%s: %s" % (name, "ok" if ok else "FAILED"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    ok = True
    ok &= case(args, "per_tensor_affine", (4, 3, 5, 6), -128, 127, False)
    ok &= case(args, "per_tensor_symmetric", (4, 7), -128, 127, True)
    # More than one piece of the threaded per-tensor kernels (16384
    # elements), the last one partial.
    ok &= case(args, "per_tensor_affine_pieces", (5, 7, 31, 33), -128, 127, False)
    ok &= case(args, "per_tensor_neutron_scale_floor", (2, 3, 4, 4), -128, 127, False, eps=2.0 ** -12)
    ok &= case(args, "per_channel_symmetric_axis0", (6, 3, 3, 3), -127, 127, True, axis=0)
    ok &= case(args, "per_channel_affine_axis1", (3, 5, 4), -128, 127, False, axis=1)
    # Per channel over several threaded slices (rows of 437 and 533 elements),
    # batch 1 and 3, channels not a multiple of 16, an element count not a
    # multiple of 32.
    ok &= case(args, "per_channel_symmetric_axis0_pieces", (40, 3, 19, 23), -127, 127, True, axis=0)
    ok &= case(args, "per_channel_affine_axis1_pieces", (3, 37, 13, 41), -128, 127, False, axis=1)
    ok &= case(args, "per_tensor_affine_batch1_odd", (1, 17, 9, 7), -128, 127, False)
    ok &= case(args, "per_tensor_affine_batch3_pieces", (3, 33, 19, 11), -128, 127, False)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
