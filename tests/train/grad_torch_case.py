"""One backward-kernel case vs PyTorch 1.13 autograd, shared by the
grad_torch_<family>.py tests: the node through qfold (qf_node_grad, via
tests/tools/grad_util.py) and `fn` through torch autograd on the same
tensors and upstream gradient; the output and the gradient of every float
input slot (graph input or initializer) compared within gu.compare's
relative bound."""
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402


def run(args, name, op, fn, inputs, params=None, attrs=None, opset=13, passes=(), ref_grads=None):
    """inputs: numpy arrays or None (an omitted optional input); params[i]
    True: slot i is an initializer. fn(*tensors) -> y (torch), called with a
    leaf tensor per present input (None for omitted ones). ref_grads, when
    given, maps torch's input gradients to the gradients of qfold's node
    slots (e.g. after canonicalize turned B into linear's W = B^T). True
    when everything matched; prints one line per comparison."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    params = params or [False] * len(inputs)
    ts = [None if x is None else torch.tensor(x, requires_grad=x.dtype == np.float32) for x in inputs]
    y = fn(*ts)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    grads = [None if t is None or t.grad is None else t.grad.numpy() for t in ts]
    if ref_grads:
        grads = ref_grads(grads)
    model = gu.one_node(op, inputs, params=params, attrs=attrs, opset=opset)
    feeds = [x for x, p in zip(inputs, params) if x is not None and not p]
    outs, dins, _ = gu.qfold_grad(args.tool, model, feeds, [dy], os.path.join(args.work, name), passes=passes)
    ok, line = gu.compare(name + " y", outs[0], y.detach().numpy())
    print(line)
    for i, g in enumerate(grads):
        if g is None:
            continue
        o, line = gu.compare("%s d/d input %d" % (name, i), dins[i], g)
        print(line)
        ok = ok and o
    return ok
