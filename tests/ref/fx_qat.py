#!/usr/bin/python3
"""PyTorch 1.13 FX quantization-aware training of a depthwise-separable
Fashion-MNIST CNN: the reference `qfold qat` must not fall below (issue 10).

    tests/ref/fx_qat.py --out DIR [--state fashion_cnn.pt | --pretrain-epochs 8] [--train 4000]
                        [--test 2000] [--seeds 7,8,9] [--epochs 1] [--batch 64] [--lr 0.01]
                        [--momentum 0.5] [--freeze-bn STEP] [--freeze-observers STEP]
                        [--calib-count N] [--skew S] [--spread S] [--no-ptq]

1. The float model: with --state, the bundled CNN (examples/fashion_mnist,
   class Bundled below) with that state_dict; otherwise DSCNN below
   (Conv+BN+ReLU, depthwise Conv+BN (groups = channels) and pointwise
   Conv+BN+ReLU twice, global average pool, Linear+BN1d+ReLU, Linear) built
   with torch.manual_seed(0) and trained in float (Adam, one-cycle, batch
   128, seeded order) on the first --train training images; either way the
   BatchNorms hold trained, non-trivial statistics.
   With --skew S (S > 1), the head's Linear+BN1d+ReLU is reparametrized
   without changing the float function (skew() below): BN1d's output channel c
   scaled by k_c, log-uniform in [1/S, S] (seeded), the next Linear's column c
   by 1/k_c. A per-tensor weight and activation grid then serves channels whose
   ranges differ by up to S^2: what PTQ loses on such models (the case
   cross-layer equalization exists for), and what QAT can win back.
   With --spread S (S > 1; the bundled CNN only), the same kind of
   reparametrization inside the depthwise-separable blocks (spread() below):
   every BatchNorm2d's output channel c but the last's times k_c
   (log-uniform in [1/S, S], seeded, drawn anew per layer), compensated in
   the conv that reads it (the depthwise conv's filter c, the pointwise
   conv's input column c), the float function unchanged. Per-channel weights
   absorb it; the per-tensor activation grids between the blocks do not, and
   qfold's equalize=auto does not repair it (it weighs only pairs with a
   per-tensor weight): the hard depthwise-separable model of issue 10, where
   both PTQs lose 2-2.7 points (S = 8).
   Written as DIR/float.pt (state_dict) and DIR/float.onnx (opset 13,
   BatchNorm kept, the input for `qfold quantize` and `qfold qat`), with the
   data as .npy: DIR/train_x.npy, train_y.npy (the --train images), test_x.npy,
   test_y.npy (the first --test test images), calib.npy (the first 512 train
   images, as `qfold quantize --calib`).
2. For every seed in --seeds, from the same float weights: prepare_qat_fx with
   the Neutron scheme (below), optional calibration of the observers on the
   first --calib-count training images (eval mode: BatchNorm on running
   statistics, observers on, as `qfold qat --calib-count`), then --epochs of
   SGD (lr, momentum, no weight decay) on batches of --batch in the order of
   `qfold train --seed SEED` (splitmix64 Fisher-Yates, include/qfold/train.h,
   reproduced by tests/train/train_cli_test.py); before optimizer step
   --freeze-bn (0-based: after that many steps) every ConvBn / LinearBn
   switches to running statistics (freeze_bn_stats), before step
   --freeze-observers every observer stops (disable_observer); -1: never.
   Then convert_to_reference_fx (quantize / dequantize in float, as qfold's
   QDQ model) and the int8 top-1 on the test images.
Prints one JSON line: the float top-1, PyTorch FX PTQ's int8 top-1 (the
same scheme with a histogram observer, 512 calibration images:
tests/ref/fx_ptq.py's), and per seed the QAT int8 top-1 and every step's loss.

The Neutron scheme (as qfold's profile, src/quant/profile.c, in QAT mode):
activations int8 affine [-128, 127] per tensor with a moving-average min/max
observer (averaging constant 0.01, scale >= 2^-12); conv weights per-channel
symmetric [-127, 127], linear weights per-tensor symmetric [-127, 127], both
moving-average min/max observers (torch's defaults: averaging constant 0.01).
FX's native backend takes quint8 activations only; int8 affine over
[-128, 127] is the same grid as uint8 over [0, 255] with the zero point moved
by 128 (same scale, same rounding), so activations are quantized as quint8.
prepare_qat_fx swaps Conv+BN(+ReLU) for torch.nn.intrinsic.qat.ConvBn2d /
ConvBnReLU2d and Linear+BN1d for LinearBn1d: the simulated fusion
(W·s fake-quantized, output / s, BatchNorm on batch statistics).
Deterministic: one thread, seeded.
"""
import argparse
import copy
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "fashion_mnist"))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))


def torch_setup():
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    torch.backends.quantized.engine = "qnnpack"
    return torch


torch = torch_setup()
nn = torch.nn
from torch.ao.quantization import FakeQuantize, QConfig, QConfigMapping, disable_observer  # noqa: E402
from torch.ao.quantization.observer import (HistogramObserver, MinMaxObserver,  # noqa: E402
                                            MovingAverageMinMaxObserver,
                                            MovingAveragePerChannelMinMaxObserver)
from torch.ao.quantization.quantize_fx import convert_to_reference_fx, prepare_fx, prepare_qat_fx  # noqa: E402

from train import FashionCNN, load  # noqa: E402
import train_cli_test as tt  # noqa: E402


def conv_bn(cin, cout, k, stride=1, groups=1, relu=True):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)] + \
        ([nn.ReLU()] if relu else [])


class DSCNN(nn.Module):
    """A small depthwise-separable CNN (MobileNet's blocks: the depthwise
    Conv+BN without an activation, the pointwise Conv+BN+ReLU after it).
    Its input is the normalized image (normalize() below): FX 1.13 makes a
    multiplication by a scalar share its input's observer, so an in-model
    normalization (examples/fashion_mnist/train.py's Mul + Sub) would be
    quantized on the raw image's range by PyTorch, a loss of its own that is
    not what this comparison measures."""

    def __init__(self, c=8, hidden=32):
        super().__init__()
        self.features = nn.Sequential(
            *conv_bn(1, c, 3),
            *conv_bn(c, c, 3, stride=2, groups=c, relu=False),              # depthwise
            *conv_bn(c, 2 * c, 1),                                          # pointwise
            *conv_bn(2 * c, 2 * c, 3, stride=2, groups=2 * c, relu=False),  # depthwise
            *conv_bn(2 * c, 4 * c, 1),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(4 * c, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.head(self.features(x))


class Bundled(FashionCNN):
    """examples/fashion_mnist/train.py's CNN (Conv+BN+ReLU, depthwise and
    pointwise Conv+BN+ReLU twice, Linear+BN1d+ReLU, Linear; its state_dict
    fashion_cnn.pt, trained on all 60,000 images) on normalized input: the
    same weights without the in-model Mul + Sub (see DSCNN)."""

    def forward(self, x):
        return self.head(self.features(x))


def skew(model, spread, seed=1):
    """Reparametrize model.head (Linear, BatchNorm1d, ReLU, Linear) without
    changing its float function: ReLU(k * z) = k * ReLU(z) for k > 0, so BN1d's
    channel c times k_c and the next Linear's input column c times 1 / k_c."""
    k = torch.from_numpy(np.exp(np.random.RandomState(seed).uniform(
        -np.log(spread), np.log(spread), model.head[1].num_features)).astype(np.float32))
    with torch.no_grad():
        model.head[1].weight.mul_(k)
        model.head[1].bias.mul_(k)
        model.head[3].weight.div_(k[None, :])


# (BatchNorm2d, the conv reading its output, how it reads channel c) in
# Bundled.features: stem -> dw, dw -> pw, pw -> dw, dw -> pw. The last pw's
# output is left alone: it reaches the head's Linear (per-tensor weights),
# a pair qfold's equalize=auto balances, which would make the model hard for
# PyTorch's PTQ only.
SPREAD_PAIRS = ((1, 3, "dw"), (4, 6, "pw"), (7, 9, "dw"), (10, 12, "pw"))


def spread(model, s, seed=1):
    """Spread the channel ranges of the depthwise-separable blocks without
    changing the float function: ReLU(k * z) = k * ReLU(z) for k > 0, and the
    depthwise conv's filter c and the pointwise conv's input column c read
    channel c alone, so BN's channel c times k_c there, divided back by k_c.

    Why a model can come this way: with BatchNorm after every conv, nothing
    in the loss fixes a channel's scale against the next layer's column (the
    function depends on the product), and without weight decay gradient
    descent keeps whatever imbalance it starts from (it conserves
    gamma_c^2 - |W_next[:, c]|^2 per channel): a spread that came from the
    initialization, from a BN folded upstream, from a conversion, pruning or
    a distillation step survives training. Training such CNNs from scratch
    here (Adam 0.01 / 0.03, SGD 0.1 / 0.3 momentum 0.9, no weight decay,
    gamma = 1 or ~ U(0, 1) as PyTorch < 1.2 initialized it; 20,000 images,
    up to 5 epochs) gave PTQ within 0.3 point of float at every epoch but
    one (an unconverged checkpoint: float 81.6 %, PTQ 78.9 %, the next epoch
    81.1 / 81.3 %), so the spread is put in by hand: what a model looks like
    after such a history, not a claim about every training run."""
    rs = np.random.RandomState(seed)
    f = model.features
    with torch.no_grad():
        for bn, nxt, kind in SPREAD_PAIRS:
            k = torch.from_numpy(np.exp(rs.uniform(-np.log(s), np.log(s), f[bn].num_features)).astype(np.float32))
            f[bn].weight.mul_(k)
            f[bn].bias.mul_(k)
            if kind == "dw":
                f[nxt].weight.div_(k[:, None, None, None])
            else:
                f[nxt].weight.div_(k[None, :, None, None])


def normalize(x):
    """Fashion-MNIST images in [0, 1] ([N, 1, 28, 28]) to mean 0, deviation 1."""
    return np.ascontiguousarray((x - np.float32(0.2860)) / np.float32(0.3530), dtype=np.float32)


def qat_qconfigs():
    act = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                 dtype=torch.quint8, qscheme=torch.per_tensor_affine, averaging_constant=0.01,
                                 eps=2 ** -12)
    conv_w = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-127, quant_max=127,
                                    dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0,
                                    averaging_constant=0.01)
    linear_w = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-127, quant_max=127,
                                      dtype=torch.qint8, qscheme=torch.per_tensor_symmetric,
                                      averaging_constant=0.01)
    return mapping(act, conv_w, linear_w)


def mapping(act, conv_w, linear_w):
    # Linear and the BatchNorm1d fused with it must have the same qconfig.
    linear = QConfig(activation=act, weight=linear_w)
    return QConfigMapping().set_global(QConfig(activation=act, weight=conv_w)) \
        .set_object_type(nn.Linear, linear).set_object_type(nn.BatchNorm1d, linear)


def ptq_qconfigs():
    act = HistogramObserver.with_args(dtype=torch.quint8, qscheme=torch.per_tensor_affine, quant_min=0,
                                      quant_max=255, eps=2 ** -12)
    from torch.ao.quantization.observer import PerChannelMinMaxObserver
    conv_w = PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                                quant_min=-127, quant_max=127)
    linear_w = MinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric, quant_min=-127,
                                        quant_max=127)
    return mapping(act, conv_w, linear_w)


def top1(model, x, y, batch=1000):
    model.eval()
    hits = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            hits += int((model(torch.from_numpy(x[i:i + batch])).argmax(1).numpy() == y[i:i + batch]).sum())
    return hits / len(x)


def pretrain(x, y, epochs, batch=128, lr=4e-3):
    torch.manual_seed(0)
    model = DSCNN()
    if epochs == 0:
        return model
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    per_epoch = (len(x) + batch - 1) // batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * per_epoch)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g).numpy()
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            loss = nn.functional.cross_entropy(model(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    return model


def freeze_bn(model):
    import torch.nn.intrinsic.qat as nniqat
    for m in model.modules():
        if isinstance(m, (nniqat.ConvBn2d, nniqat.ConvBnReLU2d, nniqat.LinearBn1d)):
            m.freeze_bn_stats()


def qat(model, x, y, args, seed, qconfigs=None):
    """FX QAT of `model` in qfold train's batch order for `seed`; `qconfigs`:
    the Neutron scheme's (qat_qconfigs()) unless given."""
    example = (torch.from_numpy(x[:2]),)
    prepared = prepare_qat_fx(copy.deepcopy(model).train(), qconfigs or qat_qconfigs(), example)
    if args.calib_count > 0:
        prepared.eval()
        with torch.no_grad():
            for i in range(0, args.calib_count, args.batch):
                prepared(torch.from_numpy(x[i:min(i + args.batch, args.calib_count)]))
    prepared.train()
    opt = torch.optim.SGD(prepared.parameters(), lr=args.lr, momentum=args.momentum)
    losses, done = [], 0
    for order in tt.qfold_orders(len(x), args.epochs, seed):
        for i in range(0, len(order), args.batch):
            if done == args.freeze_bn:
                freeze_bn(prepared)
            if done == args.freeze_observers:
                prepared.apply(disable_observer)
            idx = order[i:i + args.batch]
            loss = nn.functional.cross_entropy(prepared(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
            done += 1
    prepared.eval()
    return convert_to_reference_fx(prepared), losses


def ptq(model, calib, batch=32, qconfigs=None):
    """FX PTQ of `model` calibrated on `calib`; `qconfigs`: ptq_qconfigs()
    unless given."""
    example = (torch.from_numpy(calib[:1]),)
    prepared = prepare_fx(copy.deepcopy(model).eval(), qconfigs or ptq_qconfigs(), example)
    with torch.no_grad():
        for i in range(0, len(calib), batch):
            prepared(torch.from_numpy(calib[i:i + batch]))
    return convert_to_reference_fx(prepared)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--pretrain-epochs", type=int, default=8)
    ap.add_argument("--seeds", default="7")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.5)
    ap.add_argument("--freeze-bn", type=int, default=-1)
    ap.add_argument("--freeze-observers", type=int, default=-1)
    ap.add_argument("--calib-count", type=int, default=0)
    ap.add_argument("--state", help="start from this state_dict of the bundled CNN "
                    "(examples/fashion_mnist/fashion_cnn.pt) instead of pretraining DSCNN")
    ap.add_argument("--skew", type=float, default=0.0, help="reparametrize the head (see above); 0: no")
    ap.add_argument("--spread", type=float, default=0.0,
                    help="spread the depthwise-separable blocks' channel ranges (see above); 0: no")
    ap.add_argument("--no-ptq", action="store_true", help="skip PyTorch's PTQ figure")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    def path(name):
        return os.path.join(args.out, name)

    xtr, ytr = load("train")
    xte, yte = load("test")
    x, y = normalize(xtr[:args.train]), ytr[:args.train]
    xt, yt = normalize(xte[:args.test]), yte[:args.test]
    calib = normalize(xtr[:512])
    for name, a in (("train_x", x), ("train_y", y), ("test_x", xt), ("test_y", yt), ("calib", calib)):
        np.save(path(name + ".npy"), a)
    t0 = time.time()
    if args.state:
        model = Bundled()
        model.load_state_dict(torch.load(args.state))
        model.eval()
        args.pretrain_epochs = 0
    else:
        model = pretrain(x, y, args.pretrain_epochs)
    if args.skew > 1:
        skew(model, args.skew)
    if args.spread > 1:
        if not args.state:
            ap.error("--spread needs --state (the bundled CNN's layer order)")
        spread(model, args.spread)
    torch.save(model.state_dict(), path("float.pt"))
    tt.export(model, path("float.onnx"), (1, 28, 28))
    out = {"train": len(x), "test": len(xt), "pretrain_epochs": args.pretrain_epochs, "epochs": args.epochs,
           "batch": args.batch, "lr": args.lr, "momentum": args.momentum, "freeze_bn": args.freeze_bn,
           "freeze_observers": args.freeze_observers, "calib_count": args.calib_count, "skew": args.skew,
           "spread": args.spread,
           "float_top1": top1(model, xt, yt), "pretrain_seconds": time.time() - t0}
    if not args.no_ptq:
        out["ptq_top1"] = top1(ptq(model, calib), xt, yt)
    out["qat"] = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        t0 = time.time()
        q, losses = qat(model, x, y, args, seed)
        out["qat"].append({"seed": seed, "int8_top1": top1(q, xt, yt), "losses": losses,
                           "seconds": time.time() - t0})
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
