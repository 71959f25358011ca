"""Backward kernels of Conv and ConvTranspose vs PyTorch 1.13 autograd: the
same X, W, B and upstream gradient through qfold (tests/tools/qf_node_grad)
and torch.nn.functional.conv{1,2,3}d / conv_transpose{1,2,3}d; d loss / d X,
W and B within 1e-5 relative (tests/tools/grad_util.py says how relative).

ONNX pads may be asymmetric and torch's are not: a Conv pads X with F.pad
first (its adjoint crops the gradient), a ConvTranspose runs unpadded and
crops its output ([begin, begin + out) on every axis; output_padding lands
at the end, as in ONNX). auto_pad is resolved to explicit pads as ONNX
defines it. The weights are graph inputs in some cases, initializers in the
others."""
import argparse
import zlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402


def case(name, rank, n, c, m, ins, k, transpose=False, group=1, stride=None, dil=None, pads=None, opad=None,
         auto_pad=None, bias=True):
    return dict(name=name, rank=rank, n=n, c=c, m=m, ins=ins, k=k, transpose=transpose, group=group,
                stride=stride or [1] * rank, dil=dil or [1] * rank, pads=pads or [0] * (2 * rank),
                opad=opad or [0] * rank, auto_pad=auto_pad, bias=bias)


# The geometries of test_grad_conv.c, and training-sized ones whose batch
# is split over the threads.
CASES = [
    case("conv2d", 2, 2, 3, 4, [7, 5], [3, 2]),
    case("conv2d_nobias", 2, 2, 3, 4, [6, 5], [3, 3], stride=[1, 2], pads=[1, 0, 0, 2], bias=False),
    case("conv2d_odd", 2, 2, 3, 6, [7, 5], [3, 2], group=3, stride=[2, 2], dil=[2, 2], pads=[1, 0, 2, 1]),
    case("conv2d_groups2", 2, 3, 4, 6, [5, 6], [2, 3], group=2, stride=[1, 2], dil=[1, 2], pads=[0, 2, 1, 1]),
    case("depthwise", 2, 2, 3, 3, [6, 7], [3, 3], group=3, pads=[1, 1, 1, 1]),
    case("depthwise_s2_mult2", 2, 2, 3, 6, [7, 6], [3, 3], group=3, stride=[2, 2], pads=[1, 0, 2, 1]),
    case("depthwise_dil2", 2, 1, 4, 4, [7, 5], [3, 2], group=4, stride=[1, 2], dil=[2, 2], pads=[2, 1, 1, 0],
         bias=False),
    case("depthwise_flat_dil", 2, 2, 3, 6, [7, 6], [3, 2], group=3, dil=[2, 3], pads=[2, 0, 1, 2]),
    case("depthwise_flat_1d", 1, 2, 3, 3, [9], [3], group=3, dil=[2], pads=[0, 3]),
    case("depthwise_flat_3d", 3, 1, 2, 2, [3, 4, 5], [2, 3, 3], group=2, dil=[1, 1, 2], pads=[1, 0, 1, 0, 2, 1]),
    case("train_depthwise_s1", 2, 8, 16, 16, [14, 14], [3, 3], group=16, pads=[1, 1, 1, 1]),
    case("pointwise", 2, 2, 4, 5, [5, 3], [1, 1]),
    case("pointwise_groups2", 2, 2, 4, 6, [3, 5], [1, 1], group=2, bias=False),
    case("pointwise_s2", 2, 2, 3, 4, [5, 6], [1, 1], stride=[2, 2]),
    case("conv1d", 1, 2, 3, 4, [9], [3], stride=[2], dil=[2], pads=[1, 2]),
    case("conv1d_depthwise", 1, 2, 4, 4, [11], [5], group=4, stride=[3], pads=[2, 0]),
    case("conv3d", 3, 1, 2, 3, [4, 5, 3], [2, 3, 2], stride=[1, 2, 1], pads=[1, 0, 1, 0, 1, 0]),
    case("conv3d_groups", 3, 2, 4, 2, [3, 4, 5], [2, 2, 3], group=2, stride=[1, 1, 2], dil=[2, 1, 1],
         pads=[0, 1, 1, 1, 0, 0]),
    case("same_upper", 2, 2, 3, 4, [7, 6], [3, 2], stride=[2, 2], auto_pad="SAME_UPPER"),
    case("same_lower", 2, 2, 2, 4, [6, 7], [2, 3], group=2, stride=[2, 3], auto_pad="SAME_LOWER"),
    case("valid", 2, 2, 3, 2, [7, 6], [3, 2], stride=[2, 1], auto_pad="VALID", bias=False),
    case("conv2d_threads", 2, 8, 8, 8, [12, 12], [3, 3], pads=[1, 1, 1, 1]),
    case("depthwise_threads", 2, 8, 8, 8, [16, 16], [3, 3], group=8, pads=[1, 1, 1, 1]),
    case("train_1to16", 2, 8, 1, 16, [28, 28], [3, 3], pads=[1, 1, 1, 1]),
    case("train_16to32_s2", 2, 6, 16, 32, [14, 14], [3, 3], stride=[2, 2], pads=[1, 1, 1, 1]),
    case("train_pointwise", 2, 4, 16, 24, [10, 10], [1, 1]),
    case("convT2d", 2, 2, 3, 4, [4, 3], [3, 2], transpose=True),
    case("convT2d_odd", 2, 2, 3, 6, [4, 3], [3, 2], transpose=True, group=3, stride=[2, 2], dil=[2, 2],
         pads=[1, 0, 2, 1], opad=[1, 1]),
    case("convT2d_nobias", 2, 2, 4, 6, [3, 4], [2, 3], transpose=True, group=2, stride=[2, 1], dil=[1, 2],
         pads=[0, 2, 1, 0], opad=[1, 0], bias=False),
    case("convT2d_depthwise", 2, 2, 3, 3, [4, 5], [3, 3], transpose=True, group=3, stride=[2, 2],
         pads=[1, 1, 1, 1], opad=[1, 1]),
    case("convT_pointwise", 2, 2, 4, 3, [3, 5], [1, 1], transpose=True),
    case("convT1d", 1, 2, 3, 4, [5], [3], transpose=True, stride=[3], dil=[2], pads=[2, 1], opad=[2]),
    case("convT3d", 3, 1, 2, 4, [2, 3, 3], [2, 2, 3], transpose=True, group=2, stride=[2, 1, 2], dil=[1, 2, 1],
         pads=[1, 0, 1, 0, 1, 0], opad=[1, 0, 1]),
    case("convT2d_threads", 2, 8, 8, 8, [8, 8], [3, 3], transpose=True, group=2, stride=[2, 2],
         pads=[1, 1, 1, 1], opad=[1, 1]),
]


def resolve_pads(cs):
    """Explicit (begins, ends) for a Conv, auto_pad resolved as ONNX does."""
    r = cs["rank"]
    if not cs["auto_pad"]:
        return cs["pads"][:r], cs["pads"][r:]
    if cs["auto_pad"] == "VALID":
        return [0] * r, [0] * r
    b, e = [], []
    for i in range(r):
        s, d, size, kk = cs["stride"][i], cs["dil"][i], cs["ins"][i], cs["k"][i]
        out = -(-size // s)
        total = max(0, (out - 1) * s + (kk - 1) * d + 1 - size)
        small = total // 2
        first = small if cs["auto_pad"] == "SAME_UPPER" else total - small
        b.append(first)
        e.append(total - first)
    return b, e


def torch_forward(cs, x, w, b):
    import torch.nn.functional as F
    CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
    CONVT = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
    r = cs["rank"]
    pb, pe = resolve_pads(cs)
    if not cs["transpose"]:
        padarg = []
        for i in reversed(range(r)):
            padarg += [pb[i], pe[i]]
        xp = F.pad(x, padarg)
        return CONV[r](xp, w, b, stride=cs["stride"], dilation=cs["dil"], groups=cs["group"])
    y = CONVT[r](x, w, None, stride=cs["stride"], padding=0, output_padding=cs["opad"], groups=cs["group"],
                 dilation=cs["dil"])
    index = [slice(None), slice(None)]
    for i in range(r):
        full = y.shape[2 + i]
        index.append(slice(pb[i], full - pe[i]))
    y = y[tuple(index)]
    if b is not None:
        y = y + b.view([1, -1] + [1] * r)
    return y


def torch_case(cs):
    """The case's tensors (seeded by its name), torch's output for them, the
    upstream gradient and torch's input gradients (numpy). Called through
    tests/ref/refcache.py (computed once per `make test`; a hit imports no
    torch)."""
    import torch
    torch.set_num_threads(1)
    rng = np.random.default_rng(zlib.crc32(cs["name"].encode()))
    g = cs["group"]
    x = rng.uniform(-1, 1, [cs["n"], cs["c"]] + cs["ins"]).astype(np.float32)
    wshape = [cs["c"], cs["m"] // g] if cs["transpose"] else [cs["m"], cs["c"] // g]
    w = rng.uniform(-1, 1, wshape + cs["k"]).astype(np.float32)
    b = rng.uniform(-1, 1, [cs["m"]]).astype(np.float32) if cs["bias"] else None

    ts = [torch.tensor(a, requires_grad=True) if a is not None else None for a in (x, w, b)]
    y = torch_forward(cs, *ts)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    return x, w, b, dy, y.detach().numpy(), [t.grad.numpy() if t is not None else None for t in ts]


def run_case(args, cs, initializers):
    x, w, b, dy, y, grads = refcache.call(torch_case, cs)
    g = cs["group"]

    attrs = {}
    if cs["auto_pad"]:
        attrs["auto_pad"] = cs["auto_pad"]
    elif any(cs["pads"]):
        attrs["pads"] = cs["pads"]
    if any(s != 1 for s in cs["stride"]):
        attrs["strides"] = cs["stride"]
    if any(d != 1 for d in cs["dil"]):
        attrs["dilations"] = cs["dil"]
    if g > 1:
        attrs["group"] = g
    if any(cs["opad"]):
        attrs["output_padding"] = cs["opad"]
    inputs = [x, w] + ([b] if b is not None else [])
    params = [False] + [initializers] * (len(inputs) - 1)
    model = gu.one_node("ConvTranspose" if cs["transpose"] else "Conv", inputs, params=params, attrs=attrs,
                        opset=13)
    feeds = [a for a, p in zip(inputs, params) if not p]
    outs, dins, _ = gu.qfold_grad(args.tool, model, feeds, [dy], os.path.join(args.work, cs["name"]))
    where = "initializers" if initializers else "inputs"
    name = "%s (W, B %s)" % (cs["name"], where)
    checks = [(name + " y", outs[0], y)]
    for i, what in enumerate(["dX", "dW", "dB"][:len(inputs)]):
        checks.append((name + " " + what, dins[i], grads[i]))
    ok = True
    for what, got, ref in checks:
        good, line = gu.compare(what, got, ref)
        print(line)
        ok = ok and good
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    ok = True
    for i, cs in enumerate(CASES):
        ok &= run_case(args, cs, initializers=i % 2 == 1)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
