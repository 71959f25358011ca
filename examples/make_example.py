#!/usr/bin/python3
"""Regenerate the bundled example: examples/tiny_cnn.onnx, input.npy, expected.npy.

    /usr/bin/python3 examples/make_example.py [OUTDIR]

A small CNN with every pattern qfold folds: Conv2d+BatchNorm2d+ReLU, a
depthwise Conv2d+BatchNorm2d+ReLU6, pooling, Flatten, Linear+BatchNorm1d,
Linear. The BatchNorm statistics, gamma and beta are randomized: a fresh BN is
the identity (gamma 1, beta 0, mean 0, var 1), which hides every folding bug.
Exported in eval mode with TrainingMode.PRESERVE and no constant folding, so
the BatchNormalization nodes stay in the graph. Deterministic (fixed seed).
Needs torch 1.13 and numpy (Debian's python3-torch).
"""
import os
import sys

import numpy as np
import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.relu6 = nn.ReLU6()
        self.pw = nn.Conv2d(16, 32, 1)
        self.bn3 = nn.BatchNorm2d(32)
        self.relu3 = nn.ReLU()
        self.pool2 = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(32, 24)
        self.bn4 = nn.BatchNorm1d(24)
        self.relu4 = nn.ReLU()
        self.fc2 = nn.Linear(24, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
        x = self.relu6(self.bn2(self.dw(x)))
        x = self.relu3(self.bn3(self.pw(x)))
        x = self.flatten(self.pool2(x))
        x = self.relu4(self.bn4(self.fc1(x)))
        return self.fc2(x)


def randomize_bn(model, gen):
    """Non-trivial BN: gamma in [0.5, 1.5], beta in [-0.5, 0.5], mean in
    [-0.5, 0.5], var in [0.5, 2.0], eps 1e-5 (the node carries it)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                c = m.num_features
                m.weight.copy_(0.5 + torch.rand(c, generator=gen))
                m.bias.copy_(torch.rand(c, generator=gen) - 0.5)
                m.running_mean.copy_(torch.rand(c, generator=gen) - 0.5)
                m.running_var.copy_(0.5 + 1.5 * torch.rand(c, generator=gen))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    model = TinyCNN()
    randomize_bn(model, gen)
    model.eval()

    x = torch.randn(1, 3, 32, 32, generator=gen)
    with torch.no_grad():
        y = model(x)

    path = os.path.join(out, "tiny_cnn.onnx")
    torch.onnx.export(model, x, path, opset_version=13, input_names=["input"],
                      output_names=["logits"], training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)
    np.save(os.path.join(out, "input.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(out, "expected.npy"), y.numpy().astype(np.float32))

    import onnx  # only to check what we wrote
    m = onnx.load(path)
    onnx.checker.check_model(m)
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("BatchNormalization") == 4, ops
    print("wrote %s (%d bytes, %d nodes: %s)" % (path, os.path.getsize(path), len(ops),
                                                 ", ".join(sorted(set(ops)))))


if __name__ == "__main__":
    main()
