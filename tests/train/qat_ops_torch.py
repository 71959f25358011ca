"""QAT's simulated-fusion ops (src/ops/qat/qat_bn.c) vs PyTorch 1.13 autograd on the
formulas of torch.nn.intrinsic.qat.ConvBn2d._forward_approximate:
    s = gamma / sqrt(running_var + eps)
    qat_bn_weight(W) = W * s (along W's output channel)
    qat_bn_output(Y) = Y / s (+ b) (along Y's dim 1)
outputs bit for bit (the same float32 operations), gradients of W / Y, gamma
and b within 1e-5 relative (gu.compare). Random, never-fresh BN statistics."""
import argparse
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402


def bn_params(rng, c):
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32) * rng.choice([-1, 1], c).astype(np.float32)
    var = rng.uniform(0.1, 2.0, c).astype(np.float32)
    return gamma, var


def scale_t(gamma, var, eps):
    return gamma / torch.sqrt(var + eps)


def check(name, pairs):
    ok = True
    for what, got, ref, tol in pairs:
        good, line = gu.compare(name + " " + what, got, ref, rtol=tol)
        if tol == 0.0:
            good = got is not None and got.shape == ref.shape and np.array_equal(got, ref)
            line = "%s %s: %s" % (name, what, "bit-identical" if good else "DIFFERS  FAIL")
        print(line)
        ok &= good
    return ok


def weight_case(args, name, wshape, axis, group, eps):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    w = rng.standard_normal(wshape).astype(np.float32)
    c = wshape[0] if axis == 0 else group * wshape[1]
    gamma, var = bn_params(rng, c)
    dy = rng.uniform(-1, 1, wshape).astype(np.float32)
    outs, dins, _ = gu.qfold_grad_op(args.tool, "qat_bn_weight", [w, gamma, var], [dy],
                                     os.path.join(args.work, name), training=True,
                                     ints={"axis": axis, "group": group}, floats={"epsilon": eps})
    wt, gt, vt = (torch.tensor(a, requires_grad=r) for a, r in ((w, True), (gamma, True), (var, False)))
    s = scale_t(gt, vt, eps)
    if axis == 0:
        y = wt * s.reshape([-1] + [1] * (len(wshape) - 1))
    else:  # [C_in, O/g, k...]: rows of group g scale by s[g*(O/g) + j]
        cin, per = wshape[0], wshape[1]
        sg = s.reshape(group, 1, per).expand(group, cin // group, per).reshape(cin, per)
        y = wt * sg.reshape([cin, per] + [1] * (len(wshape) - 2))
    y.backward(torch.tensor(dy))
    return check(name, [("y", outs[0], y.detach().numpy(), 0.0), ("dW", dins[0], wt.grad.numpy(), 1e-5),
                        ("dgamma", dins[1], gt.grad.numpy(), 1e-5)])


def output_case(args, name, yshape, bias, eps):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.standard_normal(yshape).astype(np.float32)
    c = yshape[1]
    gamma, var = bn_params(rng, c)
    b = rng.standard_normal(c).astype(np.float32)
    dy = rng.uniform(-1, 1, yshape).astype(np.float32)
    feeds = [x, gamma, var] + ([b] if bias else [])
    outs, dins, _ = gu.qfold_grad_op(args.tool, "qat_bn_output", feeds, [dy], os.path.join(args.work, name),
                                     training=True, floats={"epsilon": eps})
    xt, gt, vt, bt = (torch.tensor(a, requires_grad=r) for a, r in ((x, True), (gamma, True), (var, False),
                                                                   (b, True)))
    shape = [1, c] + [1] * (len(yshape) - 2)
    y = xt / scale_t(gt, vt, eps).reshape(shape)
    if bias:
        y = y + bt.reshape(shape)
    y.backward(torch.tensor(dy))
    pairs = [("y", outs[0], y.detach().numpy(), 0.0), ("dY", dins[0], xt.grad.numpy(), 1e-5),
             ("dgamma", dins[1], gt.grad.numpy(), 1e-5)]
    if bias:
        pairs.append(("db", dins[3], bt.grad.numpy(), 1e-5))
    return check(name, pairs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    ok = True
    ok &= weight_case(args, "weight_conv", (6, 3, 3, 3), 0, 1, 1e-5)
    ok &= weight_case(args, "weight_linear", (7, 5), 0, 1, 1e-3)
    ok &= weight_case(args, "weight_convt", (4, 6, 3, 2), 1, 1, 1e-5)
    ok &= weight_case(args, "weight_convt_grouped", (6, 3, 2, 2), 1, 2, 1e-3)
    ok &= output_case(args, "output_conv_bias", (3, 6, 5, 4), True, 1e-5)
    ok &= output_case(args, "output_conv", (2, 4, 3, 3), False, 1e-3)
    ok &= output_case(args, "output_linear_bias", (5, 7), True, 1e-5)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
