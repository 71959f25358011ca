#!/usr/bin/python3
"""The integer executor on both engines (registered by tests/quant/int8_engines.cmake).

    int8_engines.py --qfold BIN --root DIR --work DIR CASE

`qfold run` runs the integer path of a quantized model (QDQ groups lowered
to integer convs) with QFOLD_ENGINE=ref (qfold's exact integer kernels, the
reference) and with the default engine (the int8 convolutions on oneDNN,
src/backend/dnnl/dnnl_qlinear.c, which hands its int32 accumulators to
qfold's requantization), and the outputs are compared in steps (LSB) of the
output's scale.

  onnx    the bundled Fashion-MNIST CNN, `qfold quantize` (both targets),
          --requant onnx: every output equal.
  tflite  the same with the default requantization (TFLite's fixed point):
          every output equal (the default engine computes what the .tflite
          computes).
  models  a sweep of quantized models (both targets, batch 7, odd sizes):
          a ResNet-8-like net with residual Adds, a depthwise-separable net,
          pools and a Gemm head, a convolution whose accumulators pass 2^24;
          every output of the default engine bit-identical to the reference.
  fast    QFOLD_INT8=fast (opt-in: oneDNN requantizes in float, 1 LSB apart
          on ~0.1 % of a layer's outputs, which the Fashion CNN's depthwise
          layers amplify, see quantize_test.py's case_fashion): top-1
          agreement >= 98 %, outputs within 1 LSB on >= 75 %, never more
          than 16 LSB apart; and it must differ somewhere (so that the exact
          cases compare oneDNN's kernels, not the reference twice).
Registered only in builds with oneDNN; a case whose runs could not load
oneDNN reports skipped.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from quant_util import fashion_calib, output_scale  # noqa: E402
from qfcli import Skip, check, run_qfold  # noqa: E402

ARGS = None  # set by qfcli.main


def work(name):
    return os.path.join(ARGS.work, name)


def engine_env(engine, fast=False):
    """The environment of a run: QFOLD_ENGINE=ref, or the default engine
    (QFOLD_ENGINE unset), with QFOLD_INT8=fast or not."""
    env = {k: v for k, v in os.environ.items() if k not in ("QFOLD_ENGINE", "QFOLD_INT8")}
    if engine == "ref":
        env["QFOLD_ENGINE"] = "ref"
    if fast:
        env["QFOLD_INT8"] = "fast"
    # LeakSanitizer's exit-time scan crashes on libgomp's threads (sanitizer build).
    asan = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_leaks=0"
    return env


def need_onednn():
    _, out, _ = run_qfold(ARGS.qfold, ["--version"], expect=0, env=engine_env("default"))
    if "kernels: dnnl" not in out:
        raise Skip("the default engine is not oneDNN here: %r" % out)


def run_both(q, x, name, extra=(), fast=False):
    """{engine: output} of `qfold run` on the reference and default engines."""
    y = {}
    for engine in ("ref", "default"):
        out = work("y_%s_%s.npy" % (name, engine))
        run_qfold(ARGS.qfold, ["run", q, "-i", x, "-o", out] + list(extra), expect=0, timeout=300,
                  env=engine_env(engine, fast and engine == "default"))
        y[engine] = np.load(out)
    return y


def engines_agree(requant, fast=False):
    need_onednn()
    model = os.path.join(ARGS.root, "examples", "fashion_mnist", "fashion_cnn.onnx")
    np.save(work("calib.npy"), fashion_calib(64, 1))
    np.save(work("x.npy"), fashion_calib(200, 2))
    differ = 0
    for target in ("neutron", "generic"):
        q = work("fq_%s.onnx" % target)
        run_qfold(ARGS.qfold, ["quantize", model, "-o", q, "--calib", work("calib.npy"), "--target", target,
                               "--batch", "16"], expect=0, timeout=300)
        y = run_both(q, work("x.npy"), target, ["--requant", requant], fast)
        d = np.abs(y["default"] - y["ref"]) / output_scale(q)
        within1, worst = float(np.mean(d <= 1.001)), float(d.max())
        top1 = float(np.mean(y["default"].argmax(1) == y["ref"].argmax(1)))
        differ += int(np.sum(d > 0.5))
        print("%s, --requant %s%s: %.2f%% within 1 LSB, %.2f%% equal, max %.0f LSB, top-1 agreement %.1f%%"
              % (target, requant, ", QFOLD_INT8=fast" if fast else "", 100 * within1,
                 100 * float(np.mean(d < 0.5)), worst, 100 * top1))
        if not fast:
            check(np.array_equal(y["default"], y["ref"]),
                  "%s, --requant %s: default engine vs ref %.4f within 1 LSB, %.4f equal, max %.1f LSB"
                  % (target, requant, within1, float(np.mean(d < 0.5)), worst))
        else:
            check(top1 >= 0.98 and within1 >= 0.75 and worst <= 16.001,
                  "%s: QFOLD_INT8=fast vs ref top-1 agreement %.3f, %.4f within 1 LSB, max %.1f LSB"
                  % (target, top1, within1, worst))
    if fast:
        check(differ > 0, "QFOLD_INT8=fast computed every output as the reference: oneDNN's int8 convolution "
                          "did not run (the exact cases would compare the reference with itself)")


def case_onnx():
    engines_agree("onnx")


def case_tflite():
    engines_agree("tflite")


def case_fast():
    engines_agree("tflite", fast=True)


def models_export(path):
    """The sweep's networks, exported by PyTorch (opset 13, dynamic batch)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def bn(c, seed):
        b = nn.BatchNorm2d(c)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            b.running_mean.uniform_(-0.5, 0.5, generator=g)
            b.running_var.uniform_(0.5, 2.0, generator=g)
            b.weight.uniform_(0.5, 1.5, generator=g)
            b.bias.uniform_(-0.5, 0.5, generator=g)
        return b

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, seed):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), bn(cout, seed)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), bn(cout, seed + 1)
            self.sc = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout, seed + 2))

        def forward(self, x):
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            return F.relu(y + (x if self.sc is None else self.sc(x)))

    class ResNet8(nn.Module):  # MLPerf Tiny's image classification net, narrower
        def __init__(self):
            super().__init__()
            self.c, self.b = nn.Conv2d(3, 16, 3, 1, 1, bias=False), bn(16, 1)
            self.s = nn.Sequential(Block(16, 16, 1, 10), Block(16, 32, 2, 20), Block(32, 64, 2, 30))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.s(F.relu(self.b(self.c(x))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class DSCNN(nn.Module):  # keyword spotting: depthwise-separable blocks
        def __init__(self):
            super().__init__()
            self.c, self.b = nn.Conv2d(1, 24, (5, 3), (2, 1), (2, 1)), bn(24, 2)
            layers = []
            for i in range(3):
                layers += [nn.Conv2d(24, 24, 3, 1, 1, groups=24), bn(24, 40 + i), nn.ReLU(),
                           nn.Conv2d(24, 24, 1), bn(24, 50 + i), nn.ReLU()]
            self.ds = nn.Sequential(*layers)
            self.fc = nn.Linear(24, 12)

        def forward(self, x):
            x = self.ds(F.relu(self.b(self.c(x))))
            return self.fc(torch.flatten(F.avg_pool2d(x, (13, 11)), 1))  # the whole 13 x 11 map

    class Pools(nn.Module):  # max / average pools, a strided conv, a two-Gemm head
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 12, 3, 1, 1), bn(12, 3)
            self.c2 = nn.Conv2d(12, 20, 3, 2, 0)
            self.f1, self.f2 = nn.Linear(20 * 2 * 2, 33), nn.Linear(33, 7)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 3, 2, 1)
            x = F.avg_pool2d(F.relu6(self.c2(x)), 2)
            return self.f2(F.relu(self.f1(torch.flatten(x, 1))))

    class Wide(nn.Module):  # 3x3 over 384 channels of one sign: accumulators past 2^24
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 384, 1), nn.Conv2d(384, 9, 3, 1, 1)
            with torch.no_grad():
                self.c1.weight.abs_()
                self.c1.bias.fill_(0.1)
                self.c2.weight.uniform_(0.5, 1.0)

        def forward(self, x):
            return self.c2(F.relu(self.c1(x)))

    torch.manual_seed(0)
    nets = {"resnet8": (ResNet8(), (3, 17, 17)), "dscnn": (DSCNN(), (1, 25, 11)),
            "pools": (Pools(), (3, 19, 17)), "wide": (Wide(), (3, 7, 9))}
    for name, (net, shape) in nets.items():
        net.eval()
        torch.onnx.export(net, torch.zeros(1, *shape), os.path.join(path, name + ".onnx"), opset_version=13,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return {name: shape for name, (_, shape) in nets.items()}


def case_models():
    need_onednn()
    shapes = models_export(ARGS.work)
    rng = np.random.default_rng(5)
    fast_differ = 0
    for name, shape in shapes.items():
        calib = work(name + "_calib.npy")
        c = rng.standard_normal((32,) + shape).astype(np.float32)
        x = rng.standard_normal((7,) + shape).astype(np.float32)
        if name == "wide":
            # Positive inputs: the 3x3 conv's int8 activations (zero point
            # -128 after the ReLU) and weights are mostly large and of one
            # sign, its int32 sums past 2^24 (up to 1.5 2^24 on this data).
            c, x = np.abs(c) * 4.0, np.abs(x) * 4.0
        np.save(calib, c)
        np.save(work(name + "_x.npy"), x)
        for target in ("generic", "neutron"):
            q = work("%s_%s.onnx" % (name, target))
            run_qfold(ARGS.qfold, ["quantize", work(name + ".onnx"), "-o", q, "--calib", calib, "--target", target],
                      expect=0, timeout=300)
            y = run_both(q, work(name + "_x.npy"), "%s_%s" % (name, target))
            d = np.abs(y["default"].astype(np.float64) - y["ref"]) / output_scale(q)
            yf = run_both(q, work(name + "_x.npy"), "%s_%s_fast" % (name, target), fast=True)["default"]
            df = np.abs(yf.astype(np.float64) - y["ref"]) / output_scale(q)
            fast_differ += int(np.sum(df > 0.5))
            print("%s, %s, batch 7: default engine max %.0f LSB from ref (%d of %d outputs differ); "
                  "QFOLD_INT8=fast max %.0f LSB (%d differ)"
                  % (name, target, d.max(), int(np.sum(d > 0.5)), d.size, df.max(), int(np.sum(df > 0.5))))
            check(np.array_equal(y["default"], y["ref"]),
                  "%s, %s: the default engine is %.0f LSB from the reference kernels (%d outputs differ)"
                  % (name, target, d.max(), int(np.sum(d > 0.5))))
    check(fast_differ > 0, "QFOLD_INT8=fast computed every output as the reference: oneDNN's int8 convolution "
                           "did not run")


if __name__ == "__main__":
    import qfcli
    sys.exit(qfcli.main("int8_engines", globals(), paths=("--root", "--work")))
