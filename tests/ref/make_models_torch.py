"""The PyTorch side of tests/ref/make_models.py (called through
tests/ref/refcache.py: computed once per `make test`, a hit imports no torch).
make_all(OUTDIR, NAMES) writes OUTDIR/NAME.onnx, .in0.npy and .out0.npy for
every name (None: every model) and returns the names. All models are built in
one process in a fixed order, from torch's global generator seeded first.
"""
import os
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402

from qfref import randomize_bn  # noqa: E402


class Seq(nn.Sequential):
    pass


class Linear3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.maxp = nn.MaxPool2d(3, stride=2, padding=1)
        self.avgp = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.avgp2 = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = self.conv(x)
        a = self.avgp2(self.maxp(y))
        b = self.avgp2(self.avgp(y))
        return self.gap(a + b).flatten(1)


class FlattenLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


class SiluSE(nn.Module):
    """An EfficientNet MBConv block: expand 1x1 + BN + SiLU, depthwise 3x3 + BN +
    SiLU, squeeze-excite (average pool, 1x1 + SiLU, 1x1 + Sigmoid, scale),
    project 1x1 + BN, residual. SiLU exports as Mul(x, Sigmoid(x)), which the
    oneDNN plan fuses into the conv before it as a swish post-op."""

    def __init__(self):
        super().__init__()
        self.expand = Seq(nn.Conv2d(6, 20, 1, bias=False), nn.BatchNorm2d(20), nn.SiLU())
        self.dw = Seq(nn.Conv2d(20, 20, 3, padding=1, groups=20, bias=False), nn.BatchNorm2d(20), nn.SiLU())
        self.fc1 = nn.Conv2d(20, 5, 1)
        self.fc2 = nn.Conv2d(5, 20, 1)
        self.project = Seq(nn.Conv2d(20, 6, 1, bias=False), nn.BatchNorm2d(6))

    def forward(self, x):
        h = self.dw(self.expand(x))
        s = torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(nn.functional.adaptive_avg_pool2d(h, 1)))))
        return x + self.project(h * s)


def small_models():
    """name -> (module, input shape)."""
    return {
        "tiny_cnn": (Seq(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)), (1, 3, 8, 8)),
        "conv1d_bn": (Seq(nn.Conv1d(4, 8, 3, padding=1), nn.BatchNorm1d(8), nn.ReLU()), (2, 4, 16)),
        "convtranspose_bn": (Seq(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                                    groups=2), nn.BatchNorm2d(6)), (2, 4, 7, 7)),
        "grouped_conv": (Seq(nn.Conv2d(8, 12, 3, padding=1, groups=4), nn.BatchNorm2d(12), nn.ReLU()),
                         (1, 8, 10, 10)),
        "depthwise_conv": (Seq(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False),
                               nn.BatchNorm2d(8), nn.ReLU6()), (2, 8, 9, 9)),
        "linear_bn1d": (Seq(nn.Linear(16, 10), nn.BatchNorm1d(10)), (4, 16)),
        "linear_3d": (Linear3d(), (2, 5, 16)),
        "relu6": (Seq(nn.Conv2d(3, 5, 3), nn.ReLU6()), (1, 3, 8, 8)),
        "hardswish": (Seq(nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5), nn.Hardswish()), (1, 3, 8, 8)),
        "sigmoid": (Seq(nn.Conv2d(3, 5, 1), nn.Sigmoid()), (1, 3, 6, 6)),
        "pools": (Pools(), (2, 3, 12, 12)),
        "flatten_linear": (FlattenLinear(), (3, 3, 9, 9)),
        "softmax": (Seq(nn.Linear(12, 7), nn.Softmax(dim=1)), (3, 12)),
        "silu_se": (SiluSE(), (2, 6, 11, 9)),
    }


# Models added after the first set, seeded after it (in this order) so that
# the others keep their seeds and so their weights.
LATER = ["silu_se"]


def big_models():
    mobilenet = torchvision.models.mobilenet_v2(weights=None)
    # torchvision draws the classifier from N(0, 0.01): logits ~1e-2 would make
    # an absolute tolerance meaningless. nn.Linear's own init gives O(1) logits.
    mobilenet.classifier[1].reset_parameters()
    return {
        "resnet18": (torchvision.models.resnet18(weights=None), (2, 3, 224, 224)),
        "mobilenet_v2": (mobilenet, (1, 3, 224, 224)),
    }


def build(name, module, shape, outdir, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    randomize_bn(module, gen, negative_gamma=name not in ("resnet18", "mobilenet_v2"))
    module.eval()
    x = torch.randn(*shape, generator=gen)
    with torch.no_grad():
        y = module(x)
    path = os.path.join(outdir, name + ".onnx")
    torch.onnx.export(module, (x,), path, input_names=["input"], output_names=["output"],
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    np.save(os.path.join(outdir, name + ".in0.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(outdir, name + ".out0.npy"), y.numpy().astype(np.float32))


def make_all(outdir, names):
    torch.set_num_threads(1)
    # The modules draw their weights from torch's global generator as they are
    # built, before build() seeds it per model; its initial seed is random per
    # process (torch.initial_seed()), so without this the weights were too.
    torch.manual_seed(1000)
    models = {**small_models(), **big_models()}
    names = list(models) if names is None else names
    unknown = sorted(set(names) - set(models))
    if unknown:
        raise ValueError("make_models: unknown model(s) %s" % " ".join(unknown))
    for i, name in enumerate(sorted(set(models) - set(LATER)) + LATER):
        if name in names:
            module, shape = models[name]
            build(name, module, shape, outdir, 1000 + i)
    return sorted(names)
