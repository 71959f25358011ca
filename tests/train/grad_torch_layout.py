"""Backward kernels of the layout ops, Dropout in training mode and
QuantizeLinear as fake-quant vs PyTorch 1.13: the same input and upstream
gradient through qfold (tests/tools/qf_node_grad) and torch autograd;
results within 1e-5 relative (tests/tools/grad_util.py says how relative).

Dropout cannot draw torch's mask, so it is checked by its definition and
against torch's semantics: every output element is 0 or x / (1 - p), the
kept fraction is near 1 - p, dx = mask / (1 - p) * dy (the mask output),
the same seed gives the same mask and another seed another one, and torch's
own dropout satisfies the same relations with the same scale.

QuantizeLinear's gradient is the one of torch.fake_quantize_per_tensor_affine
/ per_channel_affine (the Q -> DQ pair qfold trains through: DQ passes its
gradient through unchanged, test_grad_layout.c), on values at, around and
beyond the clamp edges."""
import argparse
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402

ARGS = None


def torch_vjp(fn, xs, dys):
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    ys = fn(*ts)
    ys = list(ys) if isinstance(ys, (tuple, list)) else [ys]
    torch.autograd.backward(ys, [torch.tensor(d) for d in dys])
    return [y.detach().numpy() for y in ys], [t.grad.numpy() for t in ts]


def case(name, op, fn, xs, attrs=None, consts=None, opset=13, nout=1):
    """xs: graph inputs (float); consts: further node inputs as initializers
    (None: an omitted optional input)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    with torch.no_grad():
        ys = fn(*[torch.tensor(x) for x in xs])
    ys = list(ys) if isinstance(ys, (tuple, list)) else [ys]
    dys = [rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32) for y in ys]
    consts = consts or []
    model = gu.one_node(op, list(xs) + consts, params=[False] * len(xs) + [True] * len(consts), attrs=attrs,
                        opset=opset, noutputs=nout)
    outs, dins, _ = gu.qfold_grad(ARGS.tool, model, xs, dys, os.path.join(ARGS.work, name))
    y_ref, dx_ref = torch_vjp(fn, xs, dys)
    ok = True
    for j in range(len(ys)):
        o, line = gu.compare("%s y%d" % (name, j), outs[j], y_ref[j])
        print(line)
        ok &= o
    for i in range(len(xs)):
        o, line = gu.compare("%s dx%d" % (name, i), dins[i], dx_ref[i])
        print(line)
        ok &= o
    return ok


def slice_index(d, s, e, st):
    return np.arange(d)[slice(s, e, st)]


def torch_slice(t, starts, ends, axes, steps):
    """ONNX Slice through index_select (torch's slicing takes no negative
    steps): the indices numpy's slicing picks, which clamp as ONNX does."""
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = t.shape[a]
        s = max(min(s, 2**62), -2**62)
        e = max(min(e, 2**62), -2**62)
        idx = slice_index(d, s, e, st)
        t = torch.index_select(t, a, torch.tensor(idx.copy(), dtype=torch.int64))
    return t


def torch_pad_args(pads, rank):
    """ONNX pads [b0, b1, ..., e0, e1, ...] as F.pad's (last axis first)."""
    out = []
    for a in reversed(range(rank)):
        out += [pads[a], pads[a + rank]]
    return out


def dropout_checks(rng):
    ok = True
    x = rng.uniform(0.5, 2.0, (8, 16, 33)).astype(np.float32)
    dy = rng.uniform(-1, 1, x.shape).astype(np.float32)
    masks = {}
    for p in (0.5, 0.2, 0.75):
        for seed in (1, 2):
            model = gu.one_node("Dropout", [x, np.array(p, np.float32)], params=[False, True], opset=13,
                                noutputs=2)
            outs, dins, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy, None],
                                          os.path.join(ARGS.work, "dropout"), training=True, seed=seed)
            y, mask, dx = outs[0], outs[1].astype(bool), dins[0]
            masks[(p, seed)] = mask
            scale = np.float32(1.0 / (1.0 - p))
            # torch's own dropout on the same x: the kept elements' factor
            xt = torch.tensor(x, requires_grad=True)
            yt = F.dropout(xt, p, training=True)
            yt.backward(torch.tensor(dy))
            kt = (yt != 0).detach().numpy()
            torch_scale = (yt.detach().numpy()[kt] / x[kt])
            torch_grad_ok = np.allclose(xt.grad.numpy(), kt * dy * scale, rtol=1e-6, atol=0)
            checks = [
                ("elements are 0 or x / (1 - p)", np.allclose(y, np.where(mask, x * scale, 0), rtol=1e-6, atol=0)
                 and np.all((y == 0) | mask)),
                ("kept fraction %.4f vs %.4f" % (mask.mean(), 1 - p), abs(mask.mean() - (1 - p)) < 0.02),
                ("dx = mask / (1 - p) * dy", gu.compare("dx", dx, mask * dy * scale)[0]),
                ("torch's kept factor is qfold's", np.allclose(torch_scale, scale, rtol=1e-6, atol=0)),
                ("torch's dx = mask / (1 - p) * dy too", torch_grad_ok),
            ]
            for what, good in checks:
                print("dropout p %g seed %d: %s%s" % (p, seed, what, "" if good else "  FAIL"))
                ok &= bool(good)
            # same seed, same mask
            outs2, _, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy, None], os.path.join(ARGS.work, "dropout"),
                                        training=True, seed=seed)
            same = np.array_equal(outs2[1], outs[1]) and np.array_equal(outs2[0], y)
            print("dropout p %g seed %d: rerun gives the same mask and output%s" % (p, seed, "" if same else "  FAIL"))
            ok &= same
        diff = (masks[(p, 1)] != masks[(p, 2)]).mean()
        expect = 2 * p * (1 - p)  # two independent masks differ there
        good = abs(diff - expect) < 0.03
        print("dropout p %g: seeds 1 and 2 differ in %.3f of the elements (independent: %.3f)%s"
              % (p, diff, expect, "" if good else "  FAIL"))
        ok &= good
    # inference (no --training): the identity, gradient passed through
    model = gu.one_node("Dropout", [x, np.array(0.5, np.float32)], params=[False, True], opset=13)
    outs, dins, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy], os.path.join(ARGS.work, "dropout_inf"))
    good = np.array_equal(outs[0], x) and np.array_equal(dins[0], dy)
    print("dropout inference: identity%s" % ("" if good else "  FAIL"))
    return ok and good


def edge_values(scale, zp, lo, hi, rng, n_rand):
    """x around both clamp edges (exactly on them, half-way points, a few
    steps in and out), far beyond, zero and random values."""
    v = []
    for edge in (lo, hi):
        for off in np.arange(-3, 3.25, 0.25):
            v.append((edge - zp + off) * scale)
    v += [1e6 * scale, -1e6 * scale, 0.0]
    v += list(rng.uniform((lo - zp - 8) * scale, (hi - zp + 8) * scale, n_rand))
    return np.array(v, np.float32)


def quant_checks(rng):
    ok = True
    for qdt, lo, hi, zps in ((np.int8, -128, 127, (-3, 0, 17)), (np.uint8, 0, 255, (128, 0, 3))):
        scales = (0.05, 0.1, 0.0371)
        # per tensor
        s, z = np.float32(scales[0]), zps[0]
        x = edge_values(s, z, lo, hi, rng, 200).reshape(1, -1)
        dy = rng.uniform(-1, 1, x.shape).astype(np.float32)
        model = gu.one_node("QuantizeLinear", [x, np.array(s, np.float32), np.array(z, qdt)],
                            params=[False, True, True], opset=13)
        outs, dins, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy], os.path.join(ARGS.work, "q_tensor"))
        xt = torch.tensor(x, requires_grad=True)
        torch.fake_quantize_per_tensor_affine(xt, float(s), int(z), lo, hi).backward(torch.tensor(dy))
        o, line = gu.compare("fake_quant per tensor %s dx" % np.dtype(qdt).name, dins[0], xt.grad.numpy(), rtol=0)
        print(line + "  (mask passes %d of %d)" % (int((xt.grad.numpy() != 0).sum()), x.size))
        ok &= o
        # per channel, axis 1 of [2, 3, n]
        rows = [edge_values(np.float32(scales[c]), zps[c], lo, hi, rng, 40) for c in range(3)]
        x = np.stack([np.stack(rows)] * 2).astype(np.float32)
        x[1] = x[1][:, ::-1]
        dy = rng.uniform(-1, 1, x.shape).astype(np.float32)
        model = gu.one_node("QuantizeLinear", [x, np.array(scales, np.float32), np.array(zps, qdt)],
                            params=[False, True, True], attrs={"axis": 1}, opset=13)
        outs, dins, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy], os.path.join(ARGS.work, "q_channel"))
        xt = torch.tensor(x, requires_grad=True)
        torch.fake_quantize_per_channel_affine(xt, torch.tensor(scales, dtype=torch.float32),
                                               torch.tensor(zps, dtype=torch.int32), 1, lo,
                                               hi).backward(torch.tensor(dy))
        o, line = gu.compare("fake_quant per channel %s dx" % np.dtype(qdt).name, dins[0], xt.grad.numpy(), rtol=0)
        print(line + "  (mask passes %d of %d)" % (int((xt.grad.numpy() != 0).sum()), x.size))
        ok &= o
    return ok


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ARGS = ap.parse_args()
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (2, 3, 5, 7)).astype(np.float32)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    ok = True
    for axis in (0, 1, 2, 3, 4, -1):
        a = axis % 4 if axis < 0 else axis
        ok &= case("flatten_%d" % axis, "Flatten",
                   lambda t, a=a: t.reshape(int(np.prod(t.shape[:a])), -1), [x], {"axis": axis})
    ok &= case("reshape", "Reshape", lambda t: t.reshape(3, -1, 7), [x], consts=[i64(3, -1, 7)])
    ok &= case("reshape0", "Reshape", lambda t: t.reshape(2, -1), [x], consts=[i64(0, -1)])
    for perm in ((0, 2, 3, 1), (3, 1, 0, 2), None):
        ok &= case("transpose_%s" % (perm,), "Transpose",
                   lambda t, p=perm: t.permute(*(p or (3, 2, 1, 0))), [x], {"perm": list(perm)} if perm else None)
    xs = rng.uniform(-3, 3, (2, 1, 5, 1)).astype(np.float32)
    ok &= case("squeeze", "Squeeze", lambda t: t.squeeze(3).squeeze(1), [xs], consts=[i64(1, -1)])
    ok &= case("squeeze_all", "Squeeze", lambda t: t.squeeze(), [xs])
    ok &= case("unsqueeze", "Unsqueeze", lambda t: t.unsqueeze(0).unsqueeze(-1), [xs], consts=[i64(0, -1)])
    ok &= case("identity", "Identity", lambda t: t * 1.0, [x])
    a = rng.uniform(-3, 3, (2, 3, 4)).astype(np.float32)
    b = rng.uniform(-3, 3, (2, 1, 4)).astype(np.float32)
    c = rng.uniform(-3, 3, (2, 5, 4)).astype(np.float32)
    ok &= case("concat_1", "Concat", lambda *t: torch.cat(t, 1), [a, b, c], {"axis": 1})
    ok &= case("concat_m2", "Concat", lambda *t: torch.cat(t, -2), [a, b, c], {"axis": -2})
    ok &= case("split", "Split", lambda t: torch.split(t, [2, 1, 2], 1), [c], {"axis": 1}, consts=[i64(2, 1, 2)],
               nout=3)
    ok &= case("split_eq", "Split", lambda t: torch.split(t, 2, -1), [c], {"axis": -1}, nout=2)
    # Slice: negative steps, clamped ends, negative axes, steps past the axis
    big, small = 2**63 - 1, -2**63
    for k, (st, en, ax, sp) in enumerate((([1, 0], [3, 5], [0, 1], [1, 1]),
                                          ([-1, 6], [small, -100], [-2, -1], [-1, -2]),
                                          ([0, -1], [big, small], [1, 3], [2, -3]),
                                          ([4, 1], [1, 100], [2, 0], [-3, 5]),
                                          ([-3], [big], [3], [1]))):
        ok &= case("slice_%d" % k, "Slice", lambda t, st=st, en=en, ax=ax, sp=sp: torch_slice(t, st, en, ax, sp),
                   [x], consts=[i64(*st), i64(*en), i64(*ax), i64(*sp)])
    # Pad: constant (any axes, crops too), reflect and edge on the spatial axes
    for k, pads in enumerate(([0, 1, 2, 3, 1, 0, 4, 2], [0, 0, -1, 2, 0, 0, 3, -2])):
        ok &= case("pad_constant_%d" % k, "Pad",
                   lambda t, p=pads: F.pad(t, torch_pad_args(p, 4), value=0.25), [x],
                   {"mode": "constant"}, consts=[i64(*pads), np.array(0.25, np.float32)])
    for mode, tmode in (("reflect", "reflect"), ("edge", "replicate")):
        for k, pads in enumerate(([0, 0, 2, 3, 0, 0, 4, 1], [0, 0, 0, 6, 0, 0, 1, 0])):
            if mode == "reflect" and k == 1:
                pads = [0, 0, 0, 4, 0, 0, 1, 0]  # torch: a reflect pad stays below the axis size
            ok &= case("pad_%s_%d" % (mode, k), "Pad",
                       lambda t, p=pads, m=tmode: F.pad(t, torch_pad_args(p, 4)[:4], mode=m), [x],
                       {"mode": mode}, consts=[i64(*pads)])
    ok &= dropout_checks(rng)
    ok &= quant_checks(rng)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
