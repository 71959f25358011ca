"""`qfold train` through Resize against PyTorch 1.13 (train_arch_test.py's
harness: the same weights, data and order; per step the loss within 1e-4
relative, the final weights within 1e-4): a small U-Net-style net with
MaxPool, nn.Upsample nearest and bilinear (align_corners False), a Concat
skip and F.interpolate to a size with align_corners True.

    train_resize_test.py --qfold BIN --work DIR CASE
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_arch_test as ta  # noqa: E402

ARGS = None
_arch_models = ta.models


def models():
    torch = ta.torch_mod()
    nn = torch.nn

    class Upsample(nn.Module):
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

    return dict(_arch_models(), upsample=Upsample)


ta.models = models


def case_upsample():
    ta.ARGS = ARGS
    ta.run_case("upsample", "sgd")


if __name__ == "__main__":
    sys.exit(ta.qfcli.main("train_resize", globals(), paths=("--work",)))
