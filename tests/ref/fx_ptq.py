#!/usr/bin/python3
"""PyTorch 1.13 FX post-training quantization of the bundled Fashion-MNIST CNN:
the reference qfold's `quantize` must not fall below (issue: quantizer).

    tests/ref/fx_ptq.py --state examples/fashion_mnist/fashion_cnn.pt --data DIR [--scheme neutron|generic]

DIR holds calib.npy, test.npy, test_labels.npy (examples/fashion_mnist/make_data.py).
Prints the float and the int8 (simulated: convert_to_reference_fx,
quantize / dequantize in float) top-1 on the test slice, as JSON.

Schemes, as qfold's profiles (src/quant/profile.c):
  neutron  activations int8 affine, histogram observer, scale >= 2^-12;
           conv weights per-channel symmetric [-127, 127], linear weights
           per-tensor symmetric [-127, 127]
  generic  activations int8 affine, min/max observer; every weight
           per-channel symmetric [-127, 127]
FX's native backend takes quint8 activations only; int8 affine over
[-128, 127] is the same grid as uint8 over [0, 255] with the zero point moved
by 128 (same scale, same rounding), so activations are observed as quint8.
prepare_fx folds Conv+BN(+ReLU) and Linear+BN1d itself, as qfold's ptq pipeline.
"""
import argparse
import copy
import json
import os
import sys

import numpy as np
import torch
from torch.ao.quantization import QConfig, QConfigMapping
from torch.ao.quantization.observer import (HistogramObserver, MinMaxObserver,
                                            PerChannelMinMaxObserver)
from torch.ao.quantization.quantize_fx import convert_to_reference_fx, prepare_fx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "fashion_mnist"))
from train import FashionCNN  # noqa: E402


def qconfigs(scheme):
    if scheme == "neutron":
        act = HistogramObserver.with_args(dtype=torch.quint8, qscheme=torch.per_tensor_affine,
                                          quant_min=0, quant_max=255, eps=2 ** -12)
    else:
        act = MinMaxObserver.with_args(dtype=torch.quint8, qscheme=torch.per_tensor_affine,
                                       quant_min=0, quant_max=255)
    per_channel = PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                                     quant_min=-127, quant_max=127)
    per_tensor = MinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric,
                                          quant_min=-127, quant_max=127)
    conv = QConfig(activation=act, weight=per_channel)
    linear = QConfig(activation=act, weight=per_tensor if scheme == "neutron" else per_channel)
    return QConfigMapping().set_global(conv).set_object_type(torch.nn.Linear, linear)


def top1(model, x, y, batch=1000):
    hits = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            hits += int((model(torch.from_numpy(x[i:i + batch])).argmax(1).numpy() == y[i:i + batch]).sum())
    return hits / len(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--state", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--scheme", default="neutron", choices=["neutron", "generic"])
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    torch.backends.quantized.engine = "qnnpack"
    torch.manual_seed(0)
    model = FashionCNN()
    model.load_state_dict(torch.load(args.state))
    model.eval()
    calib = np.load(os.path.join(args.data, "calib.npy"))
    x = np.load(os.path.join(args.data, "test.npy"))
    y = np.load(os.path.join(args.data, "test_labels.npy"))
    prepared = prepare_fx(copy.deepcopy(model), qconfigs(args.scheme), (torch.zeros(1, 1, 28, 28),))
    with torch.no_grad():
        for i in range(0, len(calib), args.batch):
            prepared(torch.from_numpy(calib[i:i + args.batch]))
    quantized = convert_to_reference_fx(prepared)
    out = {"scheme": args.scheme, "calibration": len(calib), "test": len(x),
           "float_top1": top1(model, x, y), "int8_top1": top1(quantized, x, y)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
