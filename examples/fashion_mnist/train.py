#!/usr/bin/python3
"""Train the bundled Fashion-MNIST CNN (float) and export it to ONNX with its
BatchNorms kept: the model that `make demo` folds, quantizes and evaluates,
and the one the quantizer's accuracy test uses.

    examples/fashion_mnist/train.py [--epochs 5] [--out examples/fashion_mnist/fashion_cnn.onnx]

Also writes the PyTorch state_dict next to it (fashion_cnn.pt).

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
The network has what the Neutron flow must handle: Conv+BN+ReLU, depthwise
Conv+BN+ReLU, pointwise Conv+BN+ReLU, a global average pool and Linear+BN1d.
The input is the raw image scaled to [0, 1] ([N, 1, 28, 28] float32); the
normalization is the model's first two ops. Deterministic (seeded, one
thread): the committed file is what this script writes.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))


def load_idx(name):
    """An IDX file (images [N, 28, 28] or labels [N]) as a numpy array."""
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    prefix = "train" if split == "train" else "t10k"
    x = load_idx(f"{prefix}-images-idx3-ubyte.gz").astype(np.float32)[:, None] / 255.0
    y = load_idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return x, y


def conv_bn(cin, cout, k, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU()]


class FashionCNN(nn.Module):
    MEAN, STD = 0.2860, 0.3530

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            *conv_bn(1, 16, 3),
            *conv_bn(16, 16, 3, stride=2, groups=16),   # depthwise
            *conv_bn(16, 32, 1),                        # pointwise
            *conv_bn(32, 32, 3, stride=2, groups=32),   # depthwise
            *conv_bn(32, 64, 1),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        # Mul + Sub (not Sub + Div): both have an int8 form in every profile.
        return self.head(self.features(x * (1.0 / self.STD) - self.MEAN / self.STD))


def accuracy(model, x, y, batch=1000):
    model.eval()
    hits = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            hits += (model(torch.from_numpy(x[i:i + batch])).argmax(1).numpy() == y[i:i + batch]).sum()
    return hits / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "fashion_cnn.onnx"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    xtr, ytr = load("train")
    xte, yte = load("test")
    model = FashionCNN()
    opt = torch.optim.Adam(model.parameters(), lr=4e-3)
    steps = args.epochs * (len(xtr) // 128)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=steps)
    g = torch.Generator().manual_seed(0)
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=g).numpy()
        for i in range(0, len(xtr) - 127, 128):
            idx = perm[i:i + 128]
            loss = nn.functional.cross_entropy(model(torch.from_numpy(xtr[idx])), torch.from_numpy(ytr[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        print(f"epoch {epoch + 1}: test top-1 {100 * accuracy(model, xte, yte):.2f} %", flush=True)
    model.eval()
    torch.onnx.export(model, torch.zeros(1, 1, 28, 28), args.out, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
    # The same weights for PyTorch's own quantization flows (tests/ref/fx_ptq.py).
    torch.save(model.state_dict(), os.path.splitext(args.out)[0] + ".pt")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes) and its state_dict")


if __name__ == "__main__":
    sys.exit(main())
