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


# The model is train_arch_test.py's "upsample" (defined there, not patched in
# here: the reference cache may compute torch_train in its server process,
# which imports train_arch_test.py alone).
def case_upsample():
    ta.ARGS = ARGS
    ta.run_case("upsample", "sgd")


if __name__ == "__main__":
    sys.exit(ta.qfcli.main("train_resize", globals(), paths=("--work",)))
