"""PyTorch's side of tests/train/grad_torch_case.py: the functions the
grad_torch_<family>.py cases name, and torch autograd on them. Imported by
grad_torch_case's reference functions only, on a refcache miss (a hit does
not import torch)."""
import numpy as np
import torch

F = torch.nn.functional


def _gemm(ta, tb, alpha, beta):
    def fn(a, b, c=None):
        y = alpha * ((a.t() if ta else a) @ (b.t() if tb else b))
        return y + beta * c if c is not None else y
    return fn


def _softmax_legacy(axis):
    """Softmax of opset < 13: over the input flattened to 2-D at AXIS."""
    def fn(x_):
        shape = x_.shape
        return torch.softmax(x_.reshape(int(np.prod(shape[:axis])), -1), 1).reshape(shape)
    return fn


def _max_pool(rank, k, s, p, d, ceil):
    f = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[rank]
    return lambda t: f(t, k, stride=s, padding=p, dilation=d, ceil_mode=bool(ceil))


def _avg_pool(rank, k, s, p, ceil, inc):
    f = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[rank]
    return lambda t: f(t, k, stride=s, padding=p, ceil_mode=bool(ceil), count_include_pad=bool(inc))


def _gap(rank):
    f = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[rank]
    return lambda t: f(t, 1)


# name -> (keyword arguments) -> the function of the node's input tensors
FNS = {
    "relu": lambda: torch.relu,
    "add": lambda: torch.add,
    "sub": lambda: torch.sub,
    "mul": lambda: torch.mul,
    "div": lambda: torch.div,
    "relu6": lambda: (lambda x_, lo_, hi_: F.relu6(x_)),
    "clamp": lambda: (lambda x_, lo_, hi_: torch.clamp(x_, lo_, hi_)),
    "clamp_min": lambda: (lambda x_, lo_: torch.clamp(x_, min=lo_)),
    "clamp_max": lambda: (lambda x_, lo_, hi_: torch.clamp(x_, max=hi_)),
    "leaky_relu": lambda slope: (lambda x_: F.leaky_relu(x_, slope)),
    "sigmoid": lambda: torch.sigmoid,
    "tanh": lambda: torch.tanh,
    "hardsigmoid": lambda: F.hardsigmoid,
    "hardtanh_affine": lambda alpha, beta: (lambda x_: F.hardtanh(alpha * x_ + beta, 0.0, 1.0)),
    "hardswish": lambda: F.hardswish,
    "softmax": lambda axis: (lambda x_: torch.softmax(x_, axis)),
    "softmax_legacy": _softmax_legacy,
    "gemm": _gemm,
    "linear": lambda: F.linear,
    "matmul_add": lambda: (lambda x_, b_, c_: x_ @ b_ + c_),
    "matmul": lambda: torch.matmul,
    "max_pool": _max_pool,
    "max_pool2d": lambda k, s, p, ceil=False: (lambda t: F.max_pool2d(t, k, stride=s, padding=p, ceil_mode=ceil)),
    "avg_pool": _avg_pool,
    "gap": _gap,
    "mean": lambda dims, keep: (lambda t: torch.mean(t, dim=dims, keepdim=bool(keep))),
    "sum": lambda dims, keep: (lambda t: torch.sum(t, dim=dims, keepdim=bool(keep))),
    "amax": lambda dims, keep: (lambda t: torch.amax(t, dim=dims, keepdim=bool(keep))),
    "exp": lambda: torch.exp,
    "log": lambda: torch.log,
    # PRelu, Max, Min, Abs (grad_torch_newops.py)
    "prelu_channel": lambda: (lambda x_, s_: F.prelu(x_, s_.reshape(-1))),
    "prelu_where": lambda: (lambda x_, s_: torch.where(x_ > 0, x_, s_ * x_)),
    "maximum": lambda: torch.maximum,
    "minimum": lambda: torch.minimum,
    "maximum3": lambda: (lambda a_, b_, c_: torch.maximum(torch.maximum(a_, b_), c_)),
    "minimum3": lambda: (lambda a_, b_, c_: torch.minimum(torch.minimum(a_, b_), c_)),
    "identity": lambda: (lambda a_: a_ * 1.0),
    "abs": lambda: torch.abs,
}


def vjp(fn, kw, inputs, dy_of_shape):
    """y = FNS[fn](**kw) on leaf tensors of INPUTS (None for an omitted
    one; gradients for the float ones), then y.backward(dy) with dy =
    dy_of_shape(y.shape); returns y, dy and the input gradients (numpy)."""
    ts = [None if x is None else torch.tensor(x, requires_grad=x.dtype == np.float32) for x in inputs]
    y = FNS[fn](**kw)(*ts)
    dy = dy_of_shape(tuple(y.shape))
    y.backward(torch.tensor(dy))
    grads = [None if t is None or t.grad is None else t.grad.numpy() for t in ts]
    return y.detach().numpy(), dy, grads
