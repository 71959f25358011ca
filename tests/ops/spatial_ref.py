#!/usr/bin/python3
"""Reference cases for the spatial ops (conv, conv_transpose, batch_norm, pools,
reduce_mean), computed with PyTorch (and numpy where ONNX differs from torch).

    spatial_ref.py OUTDIR                    # PyTorch cases
    spatial_ref.py OUTDIR --onnx-node DIR    # also convert ONNX backend node tests
                                             # (DIR/node/test_*) of the spatial ops

Writes OUTDIR/manifest.txt and one raw little-endian file per tensor; the C
test (test_spatial.c) builds a one-node graph per case, runs the op's shape
inference and kernel, and compares. Manifest grammar, one item per line:
    case NAME | op QFNAME | opset N
    attr i NAME V | attr f NAME V | attr s NAME V | attr is NAME V... | attr fs NAME V...
    in NAME DTYPE NDIM DIMS... FILE       (graph input)
    const NAME DTYPE NDIM DIMS... FILE    (initializer)
    none                                  (omitted optional input)
    out NAME DTYPE NDIM DIMS... FILE      (expected output)
    end
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

DT = {np.dtype("float32"): "f32", np.dtype("float64"): "f64", np.dtype("int64"): "i64",
      np.dtype("uint8"): "u8", np.dtype("int8"): "i8"}


class Writer:
    def __init__(self, outdir):
        self.dir = outdir
        os.makedirs(outdir, exist_ok=True)
        self.lines = []
        self.nfiles = 0

    def _tensor(self, kind, name, a):
        a = np.array(a, order="C", copy=False)
        fn = "t%05d.bin" % self.nfiles
        self.nfiles += 1
        a.astype(a.dtype.newbyteorder("<")).tofile(os.path.join(self.dir, fn))
        dims = " ".join(str(d) for d in a.shape)
        self.lines.append("%s %s %s %d %s %s" % (kind, name, DT[a.dtype], a.ndim, dims, fn))

    def case(self, name, op, inputs, outputs, attrs=None, opset=13):
        """inputs: list of (kind, name, array) with kind 'in'/'const', or None."""
        self.lines.append("case " + name)
        self.lines.append("op " + op)
        self.lines.append("opset %d" % opset)
        for k, v in (attrs or {}).items():
            if isinstance(v, str):
                self.lines.append("attr s %s %s" % (k, v))
            elif isinstance(v, float):
                self.lines.append("attr f %s %r" % (k, v))
            elif isinstance(v, (int, np.integer)):
                self.lines.append("attr i %s %d" % (k, v))
            elif len(v) and isinstance(v[0], float):
                self.lines.append("attr fs %s %d %s" % (k, len(v), " ".join(repr(x) for x in v)))
            else:
                self.lines.append("attr is %s %d %s" % (k, len(v), " ".join(str(int(x)) for x in v)))
        for item in inputs:
            if item is None:
                self.lines.append("none")
            else:
                self._tensor(item[0], item[1], item[2])
        for i, o in enumerate(outputs):
            self._tensor("out", "y%d" % i, o)
        self.lines.append("end")

    def close(self):
        with open(os.path.join(self.dir, "manifest.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def rnd(*shape):
    return np.random.randn(*shape).astype(np.float32)


def t(a):
    return torch.from_numpy(a)


def same_pads(size, k, s, d, upper):
    out = -(-size // s)
    total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
    b = total // 2 if upper else total - total // 2
    return b, total - b


def torch_pad(x, pads, value=0.0):
    """ONNX pads [b0, b1, ..., e0, e1, ...] onto the spatial dims of x."""
    r = len(pads) // 2
    fp = []
    for i in reversed(range(r)):
        fp += [pads[i], pads[r + i]]
    return F.pad(x, fp, value=value)


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONVT = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def conv_case(w_, name, xs, ws, bias=True, strides=None, pads=None, dil=None, group=1, auto_pad=None):
    r = len(xs) - 2
    x, w = rnd(*xs), rnd(*ws)
    b = rnd(ws[0]) if bias else None
    strides = strides or [1] * r
    dil = dil or [1] * r
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pp = [same_pads(xs[2 + i], ws[2 + i], strides[i], dil[i], auto_pad == "SAME_UPPER") for i in range(r)]
        p = [a for a, _ in pp] + [e for _, e in pp]
    elif auto_pad == "VALID":
        p = [0] * (2 * r)
    else:
        p = pads or [0] * (2 * r)
    xt = torch_pad(t(x), p)
    y = CONV[r](xt, t(w), None if b is None else t(b), stride=strides, dilation=dil, groups=group).numpy()
    attrs = {"strides": strides, "dilations": dil, "group": group}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    elif pads:
        attrs["pads"] = pads
    ins = [("in", "x", x), ("const", "w", w)] + ([("const", "b", b)] if bias else [])
    w_.case(name, "conv", ins, [y], attrs)


def convt_case(w_, name, xs, ws, bias=True, strides=None, pads=None, dil=None, group=1, opad=None,
               auto_pad=None, output_shape=None):
    r = len(xs) - 2
    x, w = rnd(*xs), rnd(*ws)
    cout = ws[1] * group
    b = rnd(cout) if bias else None
    strides = strides or [1] * r
    dil = dil or [1] * r
    opad = opad or [0] * r
    full = CONVT[r](t(x), t(w), None if b is None else t(b), stride=strides, dilation=dil, groups=group,
                    output_padding=0).numpy()
    # Output sizes and crops as the ONNX spec defines them, applied to the full
    # (unpadded) transposed convolution; output_padding extends the end.
    sl = [slice(None), slice(None)]
    for i in range(r):
        fsize = strides[i] * (xs[2 + i] - 1) + opad[i] + (ws[2 + i] - 1) * dil[i] + 1
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            want = output_shape[i] if output_shape is not None else xs[2 + i] * strides[i]
            total = fsize - want
            if auto_pad == "SAME_UPPER":
                pb = total // 2
            else:
                pb = total - total // 2
        else:
            pb = pads[i] if pads else 0
            want = fsize - pb - (pads[r + i] if pads else 0)
        sl.append((pb, want))
    out = np.zeros([xs[0], cout] + [s[1] for s in sl[2:]], np.float32)
    bias_b = b.reshape([1, cout] + [1] * r) if bias else 0
    out += bias_b
    # copy full[..., pb : pb + want] into out, zero-extended (bias) past the end
    src = [slice(None), slice(None)]
    dst = [slice(None), slice(None)]
    for i in range(r):
        pb, want = sl[2 + i]
        lo, hi = max(pb, 0), min(pb + want, full.shape[2 + i])
        src.append(slice(lo, hi))
        dst.append(slice(lo - pb, hi - pb))
    out[tuple(dst)] = full[tuple(src)]
    attrs = {"strides": strides, "dilations": dil, "group": group, "output_padding": opad}
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    elif pads:
        attrs["pads"] = pads
    if output_shape is not None:
        attrs["output_shape"] = output_shape
    ins = [("in", "x", x), ("const", "w", w)] + ([("const", "b", b)] if bias else [])
    w_.case(name, "conv_transpose", ins, [out], attrs)


MAXP = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVGP = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def maxpool_case(w_, name, xs, k, strides=None, pad=0, dil=1, ceil=False, indices=False, auto_pad=None):
    r = len(xs) - 2
    x = rnd(*xs)
    strides = strides or [1] * r
    attrs = {"kernel_shape": k, "strides": strides}
    if dil != 1:
        attrs["dilations"] = [dil] * r
    if ceil:
        attrs["ceil_mode"] = 1
    xt = t(x)
    tpad = pad
    if auto_pad:
        pp = [same_pads(xs[2 + i], k[i], strides[i], dil, auto_pad == "SAME_UPPER") for i in range(r)]
        xt = torch_pad(xt, [a for a, _ in pp] + [e for _, e in pp], value=-np.inf)
        attrs["auto_pad"] = auto_pad
        tpad = 0
    elif pad:
        attrs["pads"] = [pad] * (2 * r)
    y, idx = MAXP[r](xt, k, strides, tpad, dil, ceil_mode=ceil, return_indices=True)
    outs = [y.numpy()]
    if indices:
        assert not auto_pad
        plane = int(np.prod(xs[2:]))
        planes = np.arange(xs[0] * xs[1]).reshape(xs[0], xs[1], *([1] * r)) * plane
        outs.append((idx.numpy() + planes).astype(np.int64))
    w_.case(name, "max_pool", [("in", "x", x)], outs, attrs)


def avgpool_case(w_, name, xs, k, strides=None, pad=0, ceil=False, include=False):
    r = len(xs) - 2
    x = rnd(*xs)
    strides = strides or [1] * r
    attrs = {"kernel_shape": k, "strides": strides, "count_include_pad": int(include)}
    if pad:
        attrs["pads"] = [pad] * (2 * r)
    if ceil:
        attrs["ceil_mode"] = 1
    y = AVGP[r](t(x), k, strides, pad, ceil_mode=ceil, count_include_pad=include).numpy()
    w_.case(name, "avg_pool", [("in", "x", x)], [y], attrs)


def bn_case(w_, name, xs, eps=1e-5, training=False, momentum=0.9, nout=1, opset=15):
    c = xs[1]
    x = rnd(*xs) * 3 + 1
    g, b, m = rnd(c), rnd(c), rnd(c)
    v = np.random.rand(c).astype(np.float32) + 0.1
    attrs = {"epsilon": eps}
    if training:
        attrs["training_mode"] = 1
        attrs["momentum"] = momentum
        axes = tuple(i for i in range(len(xs)) if i != 1)
        bm = x.astype(np.float64).mean(axis=axes)
        bv = x.astype(np.float64).var(axis=axes)
        sh = [1, c] + [1] * (len(xs) - 2)
        y = ((x - bm.reshape(sh)) / np.sqrt(bv.reshape(sh) + eps) * g.reshape(sh) + b.reshape(sh))
        outs = [y.astype(np.float32)]
        if nout == 3:
            outs += [(m * momentum + bm * (1 - momentum)).astype(np.float32),
                     (v * momentum + bv * (1 - momentum)).astype(np.float32)]
    else:
        y = F.batch_norm(t(x), t(m), t(v), t(g), t(b), training=False, eps=eps).numpy()
        outs = [y]
    ins = [("in", "x", x), ("const", "scale", g), ("const", "B", b), ("const", "mean", m), ("const", "var", v)]
    w_.case(name, "batch_norm", ins, outs, attrs, opset=opset)


def torch_cases(w):
    np.random.seed(1234)
    torch.manual_seed(1234)
    conv_case(w, "conv2d_pad1", [2, 3, 9, 9], [4, 3, 3, 3], pads=[1, 1, 1, 1])
    conv_case(w, "conv2d_asym_stride2", [1, 3, 10, 9], [5, 3, 3, 2], bias=False, strides=[2, 2], pads=[1, 0, 2, 1])
    conv_case(w, "conv2d_group2_dil2_s2", [1, 4, 11, 10], [6, 2, 3, 3], strides=[2, 2], dil=[2, 2], group=2,
              pads=[2, 1, 2, 1])
    conv_case(w, "conv2d_depthwise_s2", [2, 8, 10, 10], [8, 1, 3, 3], strides=[2, 2], group=8, pads=[1, 1, 1, 1])
    conv_case(w, "conv2d_depthwise_mult2", [1, 8, 9, 9], [16, 1, 3, 3], group=8, pads=[1, 1, 1, 1], dil=[1, 2])
    conv_case(w, "conv2d_depthwise_s1", [1, 6, 8, 7], [6, 1, 5, 3], group=6, pads=[2, 1, 2, 1], bias=False)
    conv_case(w, "conv2d_pointwise", [2, 16, 7, 7], [8, 16, 1, 1])
    conv_case(w, "conv2d_pointwise_s2", [1, 16, 7, 8], [8, 16, 1, 1], strides=[2, 2])
    conv_case(w, "conv2d_stem_7x7", [1, 3, 32, 32], [16, 3, 7, 7], strides=[2, 2], pads=[3, 3, 3, 3])
    conv_case(w, "conv2d_same_upper", [1, 3, 10, 9], [4, 3, 4, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    conv_case(w, "conv2d_same_lower", [1, 3, 10, 9], [4, 3, 4, 3], strides=[2, 2], auto_pad="SAME_LOWER")
    conv_case(w, "conv2d_valid", [2, 3, 10, 9], [4, 3, 3, 3], strides=[2, 1], auto_pad="VALID")
    conv_case(w, "conv1d", [2, 3, 20], [5, 3, 4], strides=[2], pads=[1, 2], dil=[2])
    conv_case(w, "conv1d_group", [1, 4, 15], [4, 2, 3], group=2, pads=[1, 1])
    conv_case(w, "conv3d", [1, 2, 6, 7, 8], [4, 2, 3, 3, 3], strides=[1, 2, 1], pads=[1, 1, 1, 1, 1, 1])
    conv_case(w, "conv3d_depthwise", [1, 3, 5, 6, 7], [3, 1, 3, 2, 3], group=3, strides=[2, 1, 2],
              pads=[1, 0, 1, 1, 1, 1])

    convt_case(w, "convt2d_s2_p1_op1", [2, 4, 5, 5], [4, 3, 3, 3], strides=[2, 2], pads=[1, 1, 1, 1], opad=[1, 1])
    convt_case(w, "convt2d_group2_dil2", [1, 4, 5, 6], [4, 3, 3, 3], group=2, dil=[2, 2], bias=False)
    convt_case(w, "convt2d_asym_pads", [1, 2, 4, 5], [2, 3, 4, 3], strides=[2, 3], pads=[1, 0, 2, 1])
    convt_case(w, "convt1d_s3", [2, 3, 7], [3, 2, 4], strides=[3])
    convt_case(w, "convt3d_s2", [1, 2, 3, 4, 5], [2, 3, 2, 3, 3], strides=[2, 2, 2], pads=[0, 1, 1, 0, 1, 0])
    convt_case(w, "convt2d_same_upper", [1, 2, 5, 4], [2, 3, 3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    convt_case(w, "convt2d_same_lower", [1, 2, 5, 4], [2, 3, 3, 3], strides=[2, 2], auto_pad="SAME_LOWER")
    convt_case(w, "convt2d_output_shape", [1, 2, 4, 4], [2, 3, 3, 3], strides=[2, 2], output_shape=[9, 10])
    convt_case(w, "convt2d_depthwise", [1, 4, 5, 5], [4, 1, 4, 4], group=4, strides=[2, 2], pads=[1, 1, 1, 1])

    maxpool_case(w, "maxpool2d_k3s2p1_idx", [2, 3, 11, 11], [3, 3], [2, 2], pad=1, indices=True)
    maxpool_case(w, "maxpool2d_ceil", [1, 2, 10, 9], [3, 3], [2, 2], ceil=True, indices=True)
    maxpool_case(w, "maxpool2d_ceil_pad", [1, 2, 8, 8], [2, 2], [2, 2], pad=1, ceil=True)
    maxpool_case(w, "maxpool2d_dil2", [1, 2, 12, 11], [3, 3], [1, 1], pad=1, dil=2, indices=True)
    maxpool_case(w, "maxpool2d_same_upper", [1, 2, 9, 10], [3, 3], [2, 2], auto_pad="SAME_UPPER")
    maxpool_case(w, "maxpool2d_same_lower", [1, 2, 9, 10], [2, 2], [2, 2], auto_pad="SAME_LOWER")
    maxpool_case(w, "maxpool1d", [2, 3, 17], [4], [3], pad=2, indices=True)
    maxpool_case(w, "maxpool3d", [1, 2, 6, 7, 8], [3, 2, 3], [2, 2, 2], pad=1, indices=True)

    avgpool_case(w, "avgpool2d_k3s2p1_excl", [2, 3, 11, 10], [3, 3], [2, 2], pad=1)
    avgpool_case(w, "avgpool2d_k3s2p1_incl", [2, 3, 11, 10], [3, 3], [2, 2], pad=1, include=True)
    avgpool_case(w, "avgpool2d_ceil_incl", [1, 2, 10, 9], [3, 3], [2, 2], pad=1, ceil=True, include=True)
    avgpool_case(w, "avgpool2d_ceil_excl", [1, 2, 10, 9], [3, 3], [2, 2], pad=1, ceil=True)
    avgpool_case(w, "avgpool2d_k2s2", [1, 4, 8, 8], [2, 2], [2, 2])
    avgpool_case(w, "avgpool1d", [2, 3, 13], [3], [2], pad=1, include=True)
    avgpool_case(w, "avgpool3d", [1, 2, 5, 6, 7], [2, 3, 2], [1, 2, 2], pad=1)

    bn_case(w, "bn2d_eval", [2, 5, 4, 3], eps=1e-3)
    bn_case(w, "bn1d_rank2_eval", [8, 6], opset=13)
    bn_case(w, "bn_rank3_eval", [4, 3, 10], opset=11)
    bn_case(w, "bn2d_train3", [3, 4, 5, 5], training=True, momentum=0.8, nout=3)
    bn_case(w, "bn2d_train1", [3, 4, 5, 5], training=True, nout=1, eps=1e-2)
    bn_case(w, "bn1d_train3", [16, 5], training=True, nout=3, opset=14)

    for name, xs in [("gap2d", [2, 5, 7, 7]), ("gap1d", [2, 3, 9]), ("gap3d", [1, 2, 3, 4, 5])]:
        x = rnd(*xs)
        y = x.astype(np.float64).mean(axis=tuple(range(2, len(xs))), keepdims=True).astype(np.float32)
        w.case(name, "global_avg_pool", [("in", "x", x)], [y])

    for name, xs, axes, keep in [("rmean_hw_keep", [2, 3, 4, 5], [2, 3], 1),
                                 ("rmean_neg_drop", [2, 3, 4, 5], [-1], 0),
                                 ("rmean_all_drop", [2, 3, 4], None, 0),
                                 ("rmean_all_keep", [2, 3, 4], None, 1),
                                 ("rmean_0_2", [3, 4, 5, 2], [0, 2], 1),
                                 ("rmean_1_drop", [3, 4, 5], [1], 0)]:
        x = rnd(*xs)
        ax = tuple(axes) if axes else None
        y = torch.mean(t(x).double(), dim=ax, keepdim=bool(keep)) if ax else \
            (torch.mean(t(x).double()).reshape([1] * len(xs)) if keep else torch.mean(t(x).double()))
        attrs = {"keepdims": keep}
        if axes:
            attrs["axes"] = axes
        w.case(name, "reduce_mean", [("in", "x", x)], [y.numpy().astype(np.float32)], attrs)


ONNX_OPS = {"Conv": "conv", "ConvTranspose": "conv_transpose", "BatchNormalization": "batch_norm",
            "MaxPool": "max_pool", "AveragePool": "avg_pool", "GlobalAveragePool": "global_avg_pool",
            "ReduceMean": "reduce_mean"}


def onnx_cases(w, root):
    import onnx
    from onnx import numpy_helper
    nodedir = os.path.join(root, "node")
    for tname in sorted(os.listdir(nodedir)):
        d = os.path.join(nodedir, tname)
        model = onnx.load(os.path.join(d, "model.onnx"))
        if len(model.graph.node) != 1 or model.graph.node[0].op_type not in ONNX_OPS:
            continue
        node = model.graph.node[0]
        opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        attrs = {}
        for a in node.attribute:
            v = onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list):
                v = [float(x) for x in v] if a.type == onnx.AttributeProto.FLOATS else [int(x) for x in v]
            attrs[a.name] = v
        ds = os.path.join(d, "test_data_set_0")
        ins, outs = [], []
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        gin = [i.name for i in model.graph.input if i.name not in inits]
        k = 0
        for name in node.input:
            if name == "":
                ins.append(None)
                continue
            if name in inits:
                ins.append(("const", name, inits[name]))
                continue
            tp = onnx.TensorProto()
            with open(os.path.join(ds, "input_%d.pb" % gin.index(name)), "rb") as f:
                tp.ParseFromString(f.read())
            arr = numpy_helper.to_array(tp)
            # Weights, biases, BN parameters: initializers in a real model.
            ins.append(("in" if k == 0 else "const", name, arr))
            k += 1
        for j in range(len(node.output)):
            tp = onnx.TensorProto()
            with open(os.path.join(ds, "output_%d.pb" % j), "rb") as f:
                tp.ParseFromString(f.read())
            outs.append(numpy_helper.to_array(tp))
        w.case("onnx:" + tname, ONNX_OPS[node.op_type], ins, outs, attrs, opset=opset)


def main():
    outdir = sys.argv[1]
    w = Writer(outdir)
    torch_cases(w)
    if "--onnx-node" in sys.argv:
        onnx_cases(w, sys.argv[sys.argv.index("--onnx-node") + 1])
    w.close()


if __name__ == "__main__":
    main()
