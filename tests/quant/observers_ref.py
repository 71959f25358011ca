#!/usr/bin/python3
"""PyTorch 1.13's observers on a set of tensors: the reference for qfold's
(src/quant/observer.c, checked by tests/quant/test_observers.c).

    observers_ref.py OUTDIR

Writes OUTDIR/<case>_<batch>.npy (float32 batches) and OUTDIR/manifest.txt,
one block per case:
    case NAME KIND SCHEME QMIN QMAX CH_AXIS NBATCHES NCH EXACT
    scale s_0 ... s_{NCH-1}          (float.hex of torch's float32 values)
    zp z_0 ...
    min m_0 ...                      (the range the qparams come from)
    max M_0 ...
KIND is minmax | moving | perchannel | histogram, SCHEME affine | symmetric,
EXACT 1 where qfold must agree to the bit, 0 for the histogram (within one
quantization step).

The histogram cases use torch.ao.quantization.HistogramObserver itself on
single batches whose range lies inside (-1, 1) or has integer ends, where
torch 1.13's int() truncation of the histc range (see observer.c) does not
act, and a subclass whose forward is torch 1.13's with that truncation
removed (what later PyTorch releases do) for multi-batch and wide ranges.
"""
import os
import sys

import numpy as np
import torch
from torch.ao.quantization.observer import (HistogramObserver, MinMaxObserver,
                                            MovingAverageMinMaxObserver,
                                            PerChannelMinMaxObserver)


class UntruncatedHistogramObserver(HistogramObserver):
    """torch 1.13's HistogramObserver.forward with histc given the float range."""

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = x_orig.detach()
        min_val, max_val = self.min_val, self.max_val
        same_values = min_val.item() == max_val.item()
        is_uninitialized = min_val == float("inf") and max_val == float("-inf")
        if is_uninitialized or same_values:
            min_val, max_val = torch.aminmax(x)
            self.min_val.resize_(min_val.shape)
            self.min_val.copy_(min_val)
            self.max_val.resize_(max_val.shape)
            self.max_val.copy_(max_val)
            torch.histc(x, self.bins, min=float(min_val), max=float(max_val), out=self.histogram)
        else:
            new_min, new_max = torch.aminmax(x)
            combined_min = torch.min(new_min, min_val)
            combined_max = torch.max(new_max, max_val)
            combined_min, combined_max, downsample_rate, start_idx = self._adjust_min_max(
                combined_min, combined_max, self.upsample_rate)
            combined_histogram = torch.histc(x, self.bins, min=float(combined_min), max=float(combined_max))
            if combined_min == min_val and combined_max == max_val:
                combined_histogram += self.histogram
            else:
                combined_histogram = self._combine_histograms(
                    combined_histogram, self.histogram, self.upsample_rate, downsample_rate, start_idx, self.bins)
            self.histogram.detach_().resize_(combined_histogram.shape)
            self.histogram.copy_(combined_histogram)
            self.min_val.detach_().resize_(combined_min.shape)
            self.min_val.copy_(combined_min)
            self.max_val.detach_().resize_(combined_max.shape)
            self.max_val.copy_(combined_max)
        return x_orig


def qscheme(kind, scheme):
    per_channel = kind == "perchannel"
    if scheme == "symmetric":
        return torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric
    return torch.per_channel_affine if per_channel else torch.per_tensor_affine


def make_observer(kind, scheme, qmin, qmax, ch_axis, untruncated):
    kw = dict(dtype=torch.qint8, qscheme=qscheme(kind, scheme), quant_min=qmin, quant_max=qmax)
    if kind == "minmax":
        return MinMaxObserver(**kw)
    if kind == "moving":
        return MovingAverageMinMaxObserver(averaging_constant=0.01, **kw)
    if kind == "perchannel":
        return PerChannelMinMaxObserver(ch_axis=ch_axis, **kw)
    cls = UntruncatedHistogramObserver if untruncated else HistogramObserver
    return cls(bins=2048, upsample_rate=128, **kw)


def hexs(vals):
    return " ".join(float(v).hex() for v in vals)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(1234)

    def normal(*shape, s=1.0, m=0.0):
        return torch.randn(*shape, generator=g) * s + m

    def uniform(lo, hi, *shape):
        return torch.rand(*shape, generator=g) * (hi - lo) + lo

    def heavy(*shape):
        t = normal(*shape, s=0.3)
        idx = torch.randint(0, t.numel(), (max(1, t.numel() // 500),), generator=g)
        t.view(-1)[idx] = normal(idx.numel(), s=6.0)   # a few outliers
        return t

    def inside_unit(*shape):
        return torch.tanh(normal(*shape, s=0.8)) * 0.95

    def integer_ends(*shape):
        t = normal(*shape, s=1.0).clamp(-3.0, 4.0)
        t.view(-1)[0], t.view(-1)[1] = -3.0, 4.0
        return t

    relu = lambda *shape: torch.relu(normal(*shape, s=2.0))
    batches_of = {
        "normal": [normal(8, 16, 6, 6, s=1.5, m=0.2)],
        "normal4": [normal(4, 8, 5, 5, s=0.5 + i, m=0.1 * i) for i in range(4)],
        "relu": [relu(4, 8, 7, 7) for _ in range(3)],
        "uniform": [uniform(-0.3, 2.7, 2, 32, 4, 4)],
        "heavy": [heavy(16, 1000)],
        "heavy3": [heavy(4, 2000) for _ in range(3)],
        "growing": [normal(2, 500, s=0.1 * 3 ** i) for i in range(4)],
        "shrinking": [normal(2, 500, s=3.0 / 2 ** i) for i in range(4)],
        "shifted": [normal(2, 400, s=0.2, m=-5.0 + 3 * i) for i in range(4)],
        "positive": [uniform(0.5, 3.0, 3, 300)],
        "negative": [uniform(-2.0, -0.25, 3, 300)],
        "inside_unit": [inside_unit(4, 16, 8, 8)],
        "integer_ends": [integer_ends(4, 16, 8, 8)],
        "constant": [torch.full((3, 10), 0.75), torch.full((3, 10), 0.75)],
        "weights": [normal(24, 8, 3, 3, s=0.2) * torch.linspace(0.1, 3.0, 24).view(24, 1, 1, 1)],
        "linear_w": [normal(10, 64, s=0.05)],
        "convT_w": [normal(8, 12, 3, 3, s=0.1) * torch.linspace(0.5, 2.0, 12).view(1, 12, 1, 1)],
    }
    cases = []
    for data in ["normal", "normal4", "relu", "uniform", "heavy", "shifted", "positive", "negative", "constant"]:
        for scheme, (qmin, qmax) in [("affine", (-128, 127)), ("symmetric", (-127, 127)),
                                     ("symmetric", (-128, 127))]:
            cases.append((f"minmax_{data}_{scheme}{qmin}", "minmax", scheme, qmin, qmax, 0, data, False))
            cases.append((f"moving_{data}_{scheme}{qmin}", "moving", scheme, qmin, qmax, 0, data, False))
    for data, axis in [("weights", 0), ("linear_w", 0), ("convT_w", 1), ("normal", 1), ("relu", 1)]:
        for scheme, (qmin, qmax) in [("symmetric", (-127, 127)), ("affine", (-128, 127))]:
            cases.append((f"perchannel_{data}_{axis}_{scheme}", "perchannel", scheme, qmin, qmax, axis, data, False))
    for data in ["inside_unit", "integer_ends"]:
        for scheme, (qmin, qmax) in [("affine", (-128, 127)), ("symmetric", (-127, 127))]:
            cases.append((f"histogram_torch_{data}_{scheme}", "histogram", scheme, qmin, qmax, 0, data, False))
    for data in ["normal", "normal4", "relu", "uniform", "heavy", "heavy3", "growing", "shrinking", "shifted",
                 "positive", "constant"]:
        for scheme, (qmin, qmax) in [("affine", (-128, 127)), ("symmetric", (-127, 127))]:
            cases.append((f"histogram_{data}_{scheme}", "histogram", scheme, qmin, qmax, 0, data, True))

    lines = []
    for name, kind, scheme, qmin, qmax, axis, data, untrunc in cases:
        obs = make_observer(kind, scheme, qmin, qmax, axis, untrunc)
        batches = batches_of[data]
        for b, t in enumerate(batches):
            obs(t)
            np.save(os.path.join(out, f"{name}_{b}.npy"), t.numpy().astype(np.float32))
        scale, zp = obs.calculate_qparams()
        scale, zp = scale.reshape(-1), zp.reshape(-1)
        if kind == "histogram":
            mn, mx = obs._non_linear_param_search()
            mn, mx = mn.reshape(-1), mx.reshape(-1)
        else:
            mn, mx = obs.min_val.reshape(-1), obs.max_val.reshape(-1)
        lines.append(f"case {name} {kind} {scheme} {qmin} {qmax} {axis} {len(batches)} {scale.numel()} "
                     f"{0 if kind == 'histogram' else 1}")
        lines.append("scale " + hexs(scale.tolist()))
        lines.append("zp " + " ".join(str(int(z)) for z in zp.tolist()))
        lines.append("min " + hexs(mn.tolist()))
        lines.append("max " + hexs(mx.tolist()))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(cases)} observer cases written to {out}")


if __name__ == "__main__":
    main()
