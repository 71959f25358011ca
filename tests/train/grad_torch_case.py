"""One backward-kernel case vs PyTorch 1.13 autograd, shared by the
grad_torch_<family>.py tests: the node through qfold (qf_node_grad, via
tests/tools/grad_util.py) and a torch function through torch autograd on the
same tensors and upstream gradient; the output and the gradient of every
float input slot (graph input or initializer) compared within gu.compare's
relative bound.

A case is data: the torch function is named (grad_torch_case_torch.FNS,
with keyword arguments), so torch's side goes through tests/ref/refcache.py
(computed once per `make test`; a hit imports no torch)."""
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402


class _Seeded:
    """The upstream gradient of a case: uniform in [-1, 1) from a generator
    seeded by the case's name."""

    def __init__(self, name):
        self.name = name

    def __call__(self, shape):
        return np.random.default_rng(zlib.crc32(self.name.encode())).uniform(-1, 1, shape).astype(np.float32)


def torch_vjp(name, fn, kw, inputs):
    """torch's y, the upstream gradient (seeded by NAME) and torch's input
    gradients for the named function FN(**KW) on INPUTS."""
    import grad_torch_case_torch
    return grad_torch_case_torch.vjp(fn, kw, inputs, _Seeded(name))


def torch_vjp_dy(fn, kw, inputs, dy):
    """torch's y and input gradients for FN(**KW) on INPUTS, upstream DY."""
    import grad_torch_case_torch
    y, _, grads = grad_torch_case_torch.vjp(fn, kw, inputs, lambda shape: dy)
    return y, grads


def run(args, name, op, fn, inputs, params=None, attrs=None, opset=13, passes=(), ref_grads=None, kw=None):
    """inputs: numpy arrays or None (an omitted optional input); params[i]
    True: slot i is an initializer. fn: the name of the torch function
    (grad_torch_case_torch.FNS, built with the keyword arguments KW), called
    with a leaf tensor per present input (None for omitted ones). ref_grads,
    when given, maps torch's input gradients to the gradients of qfold's node
    slots (e.g. after canonicalize turned B into linear's W = B^T). True when
    everything matched; prints one line per comparison."""
    params = params or [False] * len(inputs)
    y, dy, grads = refcache.call(torch_vjp, name, fn, kw or {}, list(inputs))
    if ref_grads:
        grads = ref_grads(grads)
    model = gu.one_node(op, inputs, params=params, attrs=attrs, opset=opset)
    feeds = [x for x, p in zip(inputs, params) if x is not None and not p]
    outs, dins, _ = gu.qfold_grad(args.tool, model, feeds, [dy], os.path.join(args.work, name), passes=passes)
    ok, line = gu.compare(name + " y", outs[0], y)
    print(line)
    for i, g in enumerate(grads):
        if g is None:
            continue
        o, line = gu.compare("%s d/d input %d" % (name, i), dins[i], g)
        print(line)
        ok = ok and o
    return ok
