"""Backward kernels of the pools (MaxPool, AveragePool, GlobalAveragePool,
ReduceMean, ReduceSum, ReduceMax) vs PyTorch 1.13 autograd: the same input and upstream gradient
through qfold (tests/tools/qf_node_grad) and torch; outputs and d loss / d x
within 1e-5 relative (tests/tools/grad_util.py says how relative).

MaxPool inputs are drawn from a few integers, so windows hold tied maxima:
the gradient must go where torch sends it (the first maximum in scan
order); a NaN case checks that a NaN wins its window, as in torch.
ReduceMax follows torch.amax, which splits the gradient evenly among tied
maxima: its inputs are drawn from a few integers too."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402
import grad_torch_case as gc  # noqa: E402
import refcache  # noqa: E402  (tests/ref, on the path through grad_torch_case)

ARGS = None


def case(name, op, fn, x, attrs=None, opset=13, extra=None, check_y=True, kw=None):
    """extra: more node inputs after x, as initializers. fn: the name of the
    torch function (grad_torch_case_torch.FNS, built with KW); torch's side
    through tests/ref/refcache.py (grad_torch_case.torch_vjp). The upstream
    gradient is seeded by the case's name (crc32: the same in every process;
    it was Python's per-process string hash)."""
    y_ref, dy, (dx_ref,) = refcache.call(gc.torch_vjp, name, fn, kw or {}, [x])
    inputs = [x] + (extra or [])
    model = gu.one_node(op, inputs, params=[False] + [True] * len(extra or []), attrs=attrs, opset=opset)
    outs, dins, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy], os.path.join(ARGS.work, name))
    ok = True
    if check_y == "exact":  # -inf outputs: compare() wants finite values
        ok1 = np.array_equal(outs[0], y_ref)
        l1 = "%s y: %s" % (name, "equal" if ok1 else "DIFFERENT  FAIL")
        print(l1)
        ok &= ok1
    elif check_y:
        ok1, l1 = gu.compare(name + " y", outs[0], y_ref)
        print(l1)
        ok &= ok1
    ok2, l2 = gu.compare(name + " dx", dins[0], dx_ref)
    print(l2)
    return ok and ok2


def onnx_pads(p, rank):
    return [p] * (2 * rank)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ARGS = ap.parse_args()
    rng = np.random.default_rng(3)
    ok = True

    # --- MaxPool: ties everywhere (values from 5 integers), every attribute
    shapes = {1: (2, 3, 13), 2: (2, 3, 9, 11), 3: (1, 2, 7, 6, 9)}
    n = 0
    for rank in (1, 2, 3):
        for k, s, p, d, ceil in ((3, 2, 1, 1, 0), (3, 2, 1, 1, 1), (2, 2, 0, 1, 1), (3, 1, 1, 2, 0),
                                 (2, 3, 1, 2, 1), (3, 3, 0, 1, 1)):
            x = rng.integers(-2, 3, shapes[rank]).astype(np.float32)
            attrs = {"kernel_shape": [k] * rank, "strides": [s] * rank, "pads": onnx_pads(p, rank),
                     "dilations": [d] * rank, "ceil_mode": ceil}
            ok &= case("maxpool%dd_%d" % (rank, n), "MaxPool", "max_pool", x, attrs,
                       kw={"rank": rank, "k": k, "s": s, "p": p, "d": d, "ceil": ceil})
            n += 1
    # smooth values too (no ties), non-square kernel and stride
    x = rng.uniform(-3, 3, (2, 3, 10, 7)).astype(np.float32)
    ok &= case("maxpool_rect", "MaxPool", "max_pool2d", x,
               {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 0], "ceil_mode": 1},
               kw={"k": (3, 2), "s": (2, 1), "p": (1, 0), "ceil": True})
    # all-equal windows and a window holding -inf only
    x = np.full((1, 2, 5, 5), 1.5, np.float32)
    x[0, 1, :2, :2] = -np.inf
    ok &= case("maxpool_flat", "MaxPool", "max_pool2d", x,
               {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}, check_y="exact",
               kw={"k": 2, "s": 2, "p": 1})
    # NaN: torch's output is NaN there (qfold's forward keeps ONNX Runtime's
    # choice); the gradient goes to the NaN in both
    x = rng.uniform(-3, 3, (1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 4, 2] = np.nan
    x[0, 1, 4, 3] = np.nan
    ok &= case("maxpool_nan", "MaxPool", "max_pool2d", x,
               {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, check_y=False,
               kw={"k": 3, "s": 2, "p": 1})

    # --- AveragePool: count_include_pad, ceil_mode, pads
    n = 0
    for rank in (1, 2, 3):
        for k, s, p, ceil in ((3, 2, 1, 0), (3, 2, 1, 1), (2, 2, 1, 1), (3, 1, 0, 0), (4, 3, 2, 1)):
            for inc in (0, 1):
                x = rng.uniform(-3, 3, shapes[rank]).astype(np.float32)
                attrs = {"kernel_shape": [k] * rank, "strides": [s] * rank, "pads": onnx_pads(p, rank),
                         "ceil_mode": ceil, "count_include_pad": inc}
                ok &= case("avgpool%dd_%d" % (rank, n), "AveragePool", "avg_pool", x, attrs,
                           kw={"rank": rank, "k": k, "s": s, "p": p, "ceil": ceil, "inc": inc})
                n += 1

    # --- GlobalAveragePool = adaptive_avg_pool(1)
    for rank in (1, 2, 3):
        x = rng.uniform(-3, 3, shapes[rank]).astype(np.float32)
        ok &= case("gap%dd" % rank, "GlobalAveragePool", "gap", x, kw={"rank": rank})

    # --- ReduceMean = mean(dim, keepdim)
    x = rng.uniform(-3, 3, (2, 3, 5, 7)).astype(np.float32)
    n = 0
    for axes in ([2, 3], [1], [-1, 0], [0, 1, 2, 3], None):
        for keep in (0, 1):
            dims = tuple(axes) if axes else (0, 1, 2, 3)
            attrs = {"keepdims": keep}
            if axes:
                attrs["axes"] = axes
            ok &= case("mean_attr_%d" % n, "ReduceMean", "mean", x, attrs, kw={"dims": dims, "keep": keep})
            n += 1
    # --- ReduceSum = sum(dim, keepdim): axes an attribute (opset 11) or an
    # input (13); ReduceMax = amax(dim, keepdim), ties split evenly
    xt = rng.integers(-2, 3, (2, 3, 5, 7)).astype(np.float32)
    n = 0
    for axes in ([2, 3], [1], [-1, 0], [0, 1, 2, 3], None):
        for keep in (0, 1):
            dims = tuple(axes) if axes else (0, 1, 2, 3)
            attrs = {"keepdims": keep}
            if axes:
                attrs["axes"] = axes
            ok &= case("sum_attr_%d" % n, "ReduceSum", "sum", x, attrs, opset=11, kw={"dims": dims, "keep": keep})
            extra = [np.array(axes, np.int64)] if axes else None
            ok &= case("sum_input_%d" % n, "ReduceSum", "sum", x, {"keepdims": keep}, opset=13, extra=extra,
                       kw={"dims": dims, "keep": keep})
            ok &= case("amax_ties_%d" % n, "ReduceMax", "amax", xt, attrs, kw={"dims": dims, "keep": keep})
            ok &= case("amax_%d" % n, "ReduceMax", "amax", x, attrs, kw={"dims": dims, "keep": keep})
            n += 1
    # (axes as an input and noop_with_empty_axes are opset 18, which qfold's
    # import does not take yet: test_grad_pool.c checks them)

    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
