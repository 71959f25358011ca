"""The PyTorch side of tests/passes/fuse_e2e.py: each case's model (random
BatchNorm statistics, gamma and beta), its inputs, the model's outputs and
its ONNX export. fuse_e2e.py calls reference() through tests/ref/refcache.py,
so the second pass of `make test` reads them from the cache without
importing torch."""
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import qfref  # noqa: E402


def randomize_bn(model, seed=0):
    return qfref.randomize_bn(model, torch.Generator().manual_seed(seed))


def export(model, inputs, path, opset=14, train=False):
    names = ["x"] if len(inputs) == 1 else ["x%d" % i for i in range(len(inputs))]
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.PRESERVE
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset, training=mode,
                      do_constant_folding=False, input_names=names)


def save_inputs(work, tag, arrays):
    for i, a in enumerate(arrays):
        np.save(os.path.join(work, "%s.in%d.npy" % (tag, i)), np.ascontiguousarray(a, dtype=np.float32))


def seq(*mods):
    return randomize_bn(nn.Sequential(*mods))


def x4(c, h=9, w=8, n=2):
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(7))


def x3(c, length=11, n=2):
    return torch.randn(n, c, length, generator=torch.Generator().manual_seed(7))


def x2(k, n=4):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(7))


class SkipConn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(self.bn(y)) + y


class ConvIsOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y), y


class WeightInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x, w):
        return self.bn(F.conv2d(x, w))


class MatMulBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x):
        return self.bn(torch.matmul(x, self.w))


# name -> (model and inputs, export opset, exported in training mode)
MODELS = {
    "conv2d_bias": (lambda: (seq(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()), [x4(3)]), 14, False),
    "conv2d_nobias_eps1e-3": (lambda: (seq(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8, eps=1e-3)),
                                       [x4(3)]), 14, False),
    "conv2d_grouped_dilated": (lambda: (seq(nn.Conv2d(4, 6, 3, padding=2, dilation=2, groups=2, bias=False),
                                            nn.BatchNorm2d(6)), [x4(4)]), 13, False),
    "conv2d_depthwise": (lambda: (seq(nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.BatchNorm2d(6, eps=1e-3),
                                      nn.ReLU6()), [x4(6)]), 14, False),
    "conv1d_bias": (lambda: (seq(nn.Conv1d(3, 5, 3), nn.BatchNorm1d(5)), [x3(3)]), 14, False),
    "conv1d_depthwise_nobias": (lambda: (seq(nn.Conv1d(4, 8, 3, groups=4, bias=False, dilation=2),
                                             nn.BatchNorm1d(8, eps=1e-3)), [x3(4)]), 13, False),
    "convtranspose2d_groups2": (lambda: (seq(nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2, bias=False),
                                             nn.BatchNorm2d(6)), [x4(4, 5, 4)]), 14, False),
    "convtranspose1d_bias": (lambda: (seq(nn.ConvTranspose1d(4, 6, 3, groups=2), nn.BatchNorm1d(6, eps=1e-3)),
                                      [x3(4)]), 13, False),
    "linear_bn1d_bias": (lambda: (seq(nn.Linear(6, 5), nn.BatchNorm1d(5)), [x2(6)]), 14, False),
    "linear_bn1d_nobias": (lambda: (seq(nn.Linear(6, 5, bias=False), nn.BatchNorm1d(5, eps=1e-3)), [x2(6)]), 13,
                           False),
    "matmul_bn1d": (lambda: (randomize_bn(MatMulBN()), [x2(6)]), 14, False),
    "gemm_only_fuse": (lambda: (seq(nn.Linear(6, 5), nn.BatchNorm1d(5)), [x2(6)]), 14, False),
    "forward_bn_conv": (lambda: (seq(nn.BatchNorm2d(3), nn.Conv2d(3, 8, 3, stride=2)), [x4(3)]), 14, False),
    "forward_bn_depthwise": (lambda: (seq(nn.BatchNorm2d(4, eps=1e-3), nn.Conv2d(4, 8, (3, 2), groups=4, bias=False)),
                                      [x4(4)]), 13, False),
    "forward_padded_kept": (lambda: (seq(nn.BatchNorm2d(3), nn.Conv2d(3, 8, 3, padding=1)), [x4(3)]), 14, False),
    "decompose": (lambda: (seq(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.BatchNorm2d(4)), [x4(3)]), 14, False),
    "decompose_rank2": (lambda: (seq(nn.Linear(6, 5), nn.ReLU(), nn.BatchNorm1d(5)), [x2(6)]), 14, False),
    "skip_connection": (lambda: (randomize_bn(SkipConn()), [x4(4)]), 14, False),
    "conv_is_output": (lambda: (randomize_bn(ConvIsOutput()), [x4(3)]), 14, False),
    "weight_not_const": (lambda: (randomize_bn(WeightInput()),
                                  [x4(3), torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(1))]), 14,
                         False),
    "training_mode": (lambda: (seq(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), [x4(3)]), 14, True),
}


def reference(case, work):
    """Case CASE's model exported to WORK/CASE.onnx, its inputs saved as
    WORK/CASE.in<i>.npy; returns (number of inputs, the model's outputs as
    numpy arrays, None when it is exported in training mode)."""
    torch.manual_seed(3)  # the layers' initial weights
    build, opset, train = MODELS[case]
    model, inputs = build()
    model.eval() if not train else model.train()
    with torch.no_grad():
        ref = model(*inputs) if not train else None
    export(model, inputs, os.path.join(work, case + ".onnx"), opset=opset, train=train)
    save_inputs(work, case, [t.numpy() for t in inputs])
    if ref is not None:
        ref = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
    return len(inputs), ref


def reference_numeric(work):
    """A Conv + BN whose channel 2 has running_var < -eps, exported to
    WORK/numeric.onnx."""
    torch.manual_seed(3)
    model = seq(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with torch.no_grad():
        model[1].running_var[2] = -model[1].eps - 1.0
    model.eval()
    export(model, [x4(3)], os.path.join(work, "numeric.onnx"))


def reference_big(name, work):
    """A torchvision NAME with random BN statistics, exported to WORK (when
    the ref fixture's models are missing); returns the paths."""
    import torchvision
    torch.manual_seed(3)
    model = getattr(torchvision.models, name)(weights=None)
    randomize_bn(model, seed=11)
    model.eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(5))
    src, xin, yref = [os.path.join(work, name + s) for s in (".onnx", ".in0.npy", ".out0.npy")]
    export(model, [x], src)
    np.save(xin, x.numpy())
    with torch.no_grad():
        np.save(yref, model(x).numpy())
    return src, xin, yref
