"""`qfold train` on architectures beyond the small CNN of train_cli_test.py,
each against PyTorch 1.13 from the same weights, data and order (as the
issue's held-out check does): a residual block, squeeze-excite with
HardSwish / HardSigmoid, a MobileNet-style depthwise block with ReLU6 and a
Linear + BatchNorm1d head, a two-branch net with Concat / Transpose /
Reshape / Sigmoid / Tanh / LeakyReLU, and ConvTranspose with a ceil-mode
MaxPool and a mean over the spatial dims. Random BatchNorm statistics,
scale and shift everywhere. Per step the loss within 1e-4 relative, the
final weights (BN running statistics included) within 1e-4.

The AdamW cases have no conv bias right before a BatchNorm (as such models
are built): that bias's gradient is zero in exact arithmetic, and Adam's
normalized step turns the rounding noise of either framework into
full-size, random-sign updates, so no two implementations agree on it.

    train_arch_test.py --qfold BIN --work DIR CASE
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import check, run_qfold  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

ARGS = None
STEPS_SAMPLES, BATCH, EPOCHS = 24, 8, 3


def torch_mod():
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    return torch


def randomize_bn(model):
    torch = torch_mod()
    with torch.no_grad():
        for m in model.modules():
            if "BatchNorm" in type(m).__name__:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


def models():
    torch = torch_mod()
    nn = torch.nn

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.c1, self.b1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8, eps=1e-3)
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            x = self.stem(x)
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(x + y), 1), 1))

    class SE(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.b = nn.Conv2d(3, 12, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(12)
            self.s1, self.s2 = nn.Conv2d(12, 4, 1), nn.Conv2d(4, 12, 1)
            self.fc = nn.Linear(12, 5)

        def forward(self, x):
            x = nn.functional.hardswish(self.b(self.c(x)))
            s = nn.functional.hardsigmoid(self.s2(torch.relu(self.s1(nn.functional.adaptive_avg_pool2d(x, 1)))))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x * s, 1), 1))

    class Mobile(nn.Module):
        def __init__(self):
            super().__init__()
            self.pw1, self.b1 = nn.Conv2d(3, 16, 1, bias=False), nn.BatchNorm2d(16)
            self.dw, self.b2 = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16, bias=False), nn.BatchNorm2d(16)
            self.pw2, self.b3 = nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8, momentum=0.01)
            self.pool = nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False)
            self.fc1, self.bn1 = nn.Linear(8 * 3 * 3, 16), nn.BatchNorm1d(16)
            self.fc2 = nn.Linear(16, 5)

        def forward(self, x):
            x = nn.functional.relu6(self.b1(self.pw1(x)))
            x = nn.functional.relu6(self.b2(self.dw(x)))
            x = self.pool(self.b3(self.pw2(x)))
            return self.fc2(torch.relu(self.bn1(self.fc1(torch.flatten(x, 1)))))

    class Branches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.ba = nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
            self.b = nn.Conv2d(3, 4, (1, 3), padding=(0, 1))
            self.fc = nn.Linear(8 * 10, 5)

        def forward(self, x):
            a = torch.sigmoid(self.ba(self.a(x)))
            b = torch.tanh(self.b(x))
            y = nn.functional.leaky_relu(torch.cat([a, b], 1), 0.1)       # [N, 8, 10, 12]
            y = torch.flatten(y.mean(dim=3).transpose(1, 2), 1)                # [N, 80]
            return self.fc(y)

    class Deconv(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.b = nn.Conv2d(3, 6, 3, stride=2), nn.BatchNorm2d(6)
            self.t, self.bt = nn.ConvTranspose2d(6, 4, 3, stride=2, output_padding=1), nn.BatchNorm2d(4)
            self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
            self.fc = nn.Linear(4, 5)

        def forward(self, x):
            x = torch.relu(self.bt(self.t(torch.relu(self.b(self.c(x))))))
            return self.fc(self.pool(x).mean(dim=(2, 3)))

    class Upsample(nn.Module):  # train_resize_test.py's case
        def __init__(self):
            super().__init__()
            self.a, self.ba = nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6)
            self.b = nn.Conv2d(6, 8, 3, padding=1)
            self.c, self.bc = nn.Conv2d(14, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6)
            self.up_near = nn.Upsample(scale_factor=2, mode="nearest")
            self.up_lin = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.fc = nn.Linear(6, 5)

        def forward(self, x):
            a = torch.relu(self.ba(self.a(x)))                                   # [N, 6, 10, 12]
            b = torch.relu(self.b(nn.functional.max_pool2d(a, 2)))               # [N, 8, 5, 6]
            y = torch.relu(self.bc(self.c(torch.cat([self.up_near(b), a], 1))))  # [N, 6, 10, 12]
            y = nn.functional.interpolate(self.up_lin(y), size=(7, 9), mode="bilinear", align_corners=True)
            return self.fc(y.mean(dim=(2, 3)))

    return {"upsample": Upsample, "resblock": Res, "se_hardswish": SE, "mobile_linear_bn": Mobile, "branches": Branches,
            "deconv_pool_mean": Deconv}


def work(*p):
    return os.path.join(ARGS.work, *p)


def torch_train(name, optimizer, path):
    """PyTorch's side of a case: the model exported to PATH, then trained on
    the case's data as `qfold train` is; returns the data, the step losses
    and the final state (numpy, num_batches_tracked left out). Called through
    tests/ref/refcache.py (computed once per `make test`; a hit imports no
    torch)."""
    torch = torch_mod()
    torch.manual_seed(3)
    model = randomize_bn(models()[name]())
    model.eval()
    torch.onnx.export(model, torch.zeros(2, 3, 10, 12), path, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    rng = np.random.default_rng(11)
    x = rng.standard_normal((STEPS_SAMPLES, 3, 10, 12)).astype(np.float32)
    y = rng.integers(0, 5, STEPS_SAMPLES).astype(np.int64)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
    model.train()
    losses = []
    for _ in range(EPOCHS):
        for i in range(0, STEPS_SAMPLES, BATCH):
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x[i:i + BATCH])),
                                                     torch.from_numpy(y[i:i + BATCH]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    state = {k: v.detach().numpy() for k, v in model.state_dict().items() if "num_batches" not in k}
    return x, y, losses, state


def run_case(name, optimizer):
    path = work("init.onnx")
    x, y, losses, state = refcache.call(torch_train, name, optimizer, path, base=ARGS.work)
    np.save(work("x.npy"), x)
    np.save(work("y.npy"), y)
    if optimizer == "sgd":
        opt_args = ["--optimizer", "sgd", "--lr", 0.05, "--momentum", 0.9, "--weight-decay", 1e-4]
    else:
        opt_args = ["--optimizer", "adamw", "--lr", 2e-3, "--weight-decay", 1e-2]
    run_qfold(ARGS.qfold, ["train", path, "-o", work("out.onnx"), "--data", work("x.npy"), "--labels",
                           work("y.npy"), "--epochs", EPOCHS, "--batch", BATCH, "--shuffle", "off", "--log",
                           work("log.csv"), *opt_args], expect=0, timeout=300)
    import csv
    with open(work("log.csv")) as f:
        got = [float(r["loss"]) for r in csv.DictReader(f) if r["kind"] == "step"]
    check(len(got) == len(losses), "%d steps logged, torch ran %d" % (len(got), len(losses)))
    for k, (a, b) in enumerate(zip(got, losses)):
        check(abs(a - b) <= 1e-4 * abs(b), "%s step %d: loss %.8g, torch %.8g" % (name, k + 1, a, b))
    import onnx
    from onnx import numpy_helper
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(work("out.onnx")).graph.initializer}
    for k, ref in state.items():
        check(k in w, "the trained model lacks '%s'" % k)
        d = float(np.abs(w[k] - ref).max())
        check(d <= 1e-4 * max(1.0, float(np.abs(ref).max())), "%s: '%s' differs by %.3g" % (name, k, d))
    print("%s (%s): %d steps, losses %.5f .. %.5f equal to torch's" % (name, optimizer, len(got), got[0], got[-1]))


def case_resblock():
    run_case("resblock", "sgd")


def case_se_hardswish():
    run_case("se_hardswish", "adamw")


def case_mobile_linear_bn():
    run_case("mobile_linear_bn", "sgd")


def case_branches():
    run_case("branches", "adamw")


def case_deconv_pool_mean():
    run_case("deconv_pool_mean", "sgd")


if __name__ == "__main__":
    sys.exit(qfcli.main("train_arch", globals(), paths=("--work",)))
