"""Backward kernels of the activation family vs PyTorch 1.13 autograd: the
same input and upstream gradient through qfold (tests/tools/qf_node_grad)
and torch; d loss / d x within 1e-5 relative (tests/tools/grad_util.py says
how relative)."""
import argparse
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402
import grad_torch_case as gc  # noqa: E402
import refcache  # noqa: E402  (tests/ref, on the path through grad_torch_case)


def case(args, name, op, fn, x, attrs=None, opset=13):
    """FN: a grad_torch_case_torch.FNS name. The upstream gradient is seeded
    by the case's name (crc32: the same in every process; it was Python's
    per-process string hash)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dy = rng.uniform(-1, 1, x.shape).astype(np.float32)
    model = gu.one_node(op, [x], attrs=attrs, opset=opset)
    outs, dins, _ = gu.qfold_grad(args.tool, model, [x], [dy], os.path.join(args.work, name))
    y_ref, (dx_ref,) = refcache.call(gc.torch_vjp_dy, fn, {}, [x], dy)
    ok1, l1 = gu.compare(name + " y", outs[0], y_ref)
    ok2, l2 = gu.compare(name + " dx", dins[0], dx_ref)
    print(l1)
    print(l2)
    return ok1 and ok2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (2, 3, 5, 7)).astype(np.float32)
    x[0, 0, 0, :3] = 0.0  # the kink: torch's gradient there is 0
    ok = True
    ok &= case(args, "relu", "Relu", "relu", x)

    f32 = np.float32

    def with_kinks(scale, kinks, shape=(2, 3, 5, 7)):
        # Kinks at the front: torch's vectorized kernel handles them (a
        # tail of fewer than one vector runs its scalar loop, which differs
        # at some kinks, see hardswish).
        v = rng.uniform(-scale, scale, shape).astype(f32)
        v.reshape(-1)[:len(kinks)] = kinks
        return v

    # relu6: ReLU6 exports as Clip(0, 6) with constant bounds, which
    # canonicalize makes relu6; torch's ReLU6 (hardtanh) has gradient 0 at 0
    # and 6.
    xr = with_kinks(8, [0.0, 6.0, 0.0, 6.0])
    ok &= gc.run(args, "relu6", "Clip", "relu6", [xr, np.array(0, f32), np.array(6, f32)],
                 params=[False, True, True], passes=["canonicalize"])
    # Clip as torch.clamp: gradient passes at the bounds; min / max as graph
    # inputs get theirs (clamp.Tensor's backward), as initializers too.
    xc = with_kinks(3, [-1.0, 2.0, -1.0, 2.0], (3, 4, 5))
    for name, lo, hi, params in [("clip", -1.0, 2.0, [False, False, False]),
                                 ("clip_const", -1.0, 2.0, [False, True, True]),
                                 ("clip_swapped", 1.0, -1.0, [False, False, False])]:
        ok &= gc.run(args, name, "Clip", "clamp",
                     [xc, np.array(lo, f32), np.array(hi, f32)], params=params)
    ok &= gc.run(args, "clip_min_only", "Clip", "clamp_min",
                 [xc, np.array(-1.0, f32)])
    ok &= gc.run(args, "clip_max_only", "Clip", "clamp_max",
                 [xc, None, np.array(2.0, f32)])
    ok &= gc.run(args, "leaky_relu", "LeakyRelu", "leaky_relu", [with_kinks(3, [0.0, 0.0])],
                 attrs={"alpha": 0.1}, kw={"slope": 0.1})
    ok &= gc.run(args, "sigmoid", "Sigmoid", "sigmoid", [rng.uniform(-6, 6, (2, 3, 5, 7)).astype(f32)])
    ok &= gc.run(args, "tanh", "Tanh", "tanh", [rng.uniform(-4, 4, (2, 3, 5, 7)).astype(f32)])
    ok &= gc.run(args, "exp", "Exp", "exp", [rng.uniform(-5, 5, (2, 3, 5, 7)).astype(f32)])
    ok &= gc.run(args, "log", "Log", "log", [rng.uniform(0.05, 20, (2, 3, 5, 7)).astype(f32)])
    # HardSigmoid as torch exports it (alpha 1/6, beta 0.5): gradient 0 at
    # -3 and 3; other alpha / beta as hardtanh(alpha x + beta, 0, 1), whose
    # gradient is also 0 at the bounds.
    ok &= gc.run(args, "hardsigmoid", "HardSigmoid", "hardsigmoid", [with_kinks(5, [-3.0, 3.0, -3.0, 3.0])],
                 attrs={"alpha": 1.0 / 6.0, "beta": 0.5})
    ok &= gc.run(args, "hardsigmoid_onnx", "HardSigmoid", "hardtanh_affine",
                 [with_kinks(5, [-2.5, 2.5])], kw={"alpha": 0.2, "beta": 0.5})
    ok &= gc.run(args, "hardswish", "HardSwish", "hardswish", [with_kinks(5, [-3.0, 3.0, -3.0, 3.0])], opset=14)

    xs = rng.uniform(-3, 3, (2, 3, 4, 5)).astype(f32)
    for axis in (-1, 0, 1, 2, 3):
        ok &= gc.run(args, "softmax_axis%d" % axis, "Softmax", "softmax", [xs],
                     attrs={"axis": axis}, kw={"axis": axis})
        ok &= gc.run(args, "softmax11_axis%d" % axis, "Softmax", "softmax_legacy", [xs],
                     attrs={"axis": axis}, opset=11, kw={"axis": axis % 4})
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
