"""BatchNormalization in training mode vs PyTorch 1.13's nn.BatchNorm1d /
BatchNorm2d (train()): 3 training steps, each on a new batch and upstream
gradient, with random gamma, beta and running statistics (never a fresh BN:
that one is the identity). Per step: y, dx, dgamma, dbeta within 1e-5
relative (tests/tools/grad_util.py says how relative) and the running mean /
variance after the step within 1e-6 relative; qfold's running statistics
come from qf_node_grad --training (after_3.npy, after_4.npy) and are fed to
the next step. Momentum 0.1 and 0.01 (ONNX momentum = 1 - torch's), epsilon
1e-5 and 1e-3, inputs [N, C] (BN1d), [N, C, L] (BN1d), [N, C, H, W] (BN2d).
Then one step in eval() mode (frozen BN: the running statistics' affine)."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

STEPS = 4  # 3 in training mode, then one in eval()


def torch_bn(shape, momentum, eps, seed):
    """torch's side of a case: the BN's initial parameters and statistics,
    then per step its batch, upstream gradient, y, dx, dgamma, dbeta and the
    running statistics after it (numpy). The batches and gradients come from
    the case's generator as before; qfold's steps never feed torch's. Called
    through tests/ref/refcache.py (computed once per `make test`; a hit
    imports no torch)."""
    import torch
    rng = np.random.default_rng(seed)
    c = shape[1]
    bn = (torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d)(c, eps=eps, momentum=momentum)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(rng.uniform(0.5, 1.5, c).astype(np.float32)))
        bn.bias.copy_(torch.tensor(rng.uniform(-0.5, 0.5, c).astype(np.float32)))
        bn.running_mean.copy_(torch.tensor(rng.uniform(-0.5, 0.5, c).astype(np.float32)))
        bn.running_var.copy_(torch.tensor(rng.uniform(0.5, 2.0, c).astype(np.float32)))
    init = [bn.weight.detach().numpy().copy(), bn.bias.detach().numpy().copy(), bn.running_mean.numpy().copy(),
            bn.running_var.numpy().copy()]
    cshape = [1, c] + [1] * (len(shape) - 2)
    steps = []
    for step in range(STEPS):
        training = step < 3
        # channels with their own offsets and scales
        x = (rng.normal(0, 1, shape) * rng.uniform(0.5, 3, cshape) + rng.uniform(-2, 2, cshape)).astype(np.float32)
        dy = rng.uniform(-1, 1, shape).astype(np.float32)
        bn.train(training)
        bn.zero_grad()
        xt = torch.tensor(x, requires_grad=True)
        y = bn(xt)
        y.backward(torch.tensor(dy))
        steps.append((x, dy, y.detach().numpy(), xt.grad.numpy(), bn.weight.grad.numpy().copy(),
                      bn.bias.grad.numpy().copy(), bn.running_mean.numpy().copy(), bn.running_var.numpy().copy()))
    return init, steps


def run_case(args, name, shape, momentum, eps, seed):
    (gamma, beta, rmean, rvar), steps = refcache.call(torch_bn, list(shape), momentum, eps, seed)
    ok = True
    for step, (x, dy, y, dx, dgamma, dbeta, t_mean, t_var) in enumerate(steps):
        training = step < 3
        model = gu.one_node("BatchNormalization", [x, gamma, beta, rmean, rvar],
                            params=[False, True, True, True, True],
                            attrs={"epsilon": eps, "momentum": 1.0 - momentum}, opset=15)
        outs, dins, after = gu.qfold_grad(args.tool, model, [x], [dy], os.path.join(args.work, name),
                                          training=training)
        tag = "%s step %d%s" % (name, step + 1, "" if training else " (eval)")
        checks = [gu.compare(tag + " y", outs[0], y),
                  gu.compare(tag + " dx", dins[0], dx),
                  gu.compare(tag + " dgamma", dins[1], dgamma),
                  gu.compare(tag + " dbeta", dins[2], dbeta),
                  gu.compare(tag + " running_mean", after[3], t_mean, rtol=1e-6),
                  gu.compare(tag + " running_var", after[4], t_var, rtol=1e-6)]
        for good, line in checks:
            print(line)
            ok &= good
        rmean, rvar = after[3], after[4]
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    ok = True
    seed = 10
    for shape in ((16, 5), (8, 4, 7), (4, 3, 5, 6)):
        for momentum in (0.1, 0.01):
            for eps in (1e-5, 1e-3):
                seed += 1
                name = "bn%s_m%g_e%g" % ("x".join(map(str, shape)), momentum, eps)
                ok &= run_case(args, name, shape, momentum, eps, seed)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
