"""Backward kernels of the activation family vs PyTorch 1.13 autograd: the
same input and upstream gradient through qfold (tests/tools/qf_node_grad)
and torch; d loss / d x within 1e-5 relative (tests/tools/grad_util.py says
how relative)."""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402


def torch_vjp(fn, xs, dy):
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    y = fn(*ts)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def case(args, name, op, fn, x, attrs=None, opset=13):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    dy = rng.uniform(-1, 1, x.shape).astype(np.float32)
    model = gu.one_node(op, [x], attrs=attrs, opset=opset)
    outs, dins, _ = gu.qfold_grad(args.tool, model, [x], [dy], os.path.join(args.work, name))
    y_ref, (dx_ref,) = torch_vjp(fn, [x], dy)
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
    ok &= case(args, "relu", "Relu", torch.relu, x)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
