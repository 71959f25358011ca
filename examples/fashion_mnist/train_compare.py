#!/usr/bin/python3
"""The bundled Fashion-MNIST CNN trained from scratch by `qfold train` and by
PyTorch 1.13 with the same recipe, side by side (scripts/accuracy.sh, `make
accuracy`; docs/ACCURACY.md holds the last figures).

    examples/fashion_mnist/train_compare.py QFOLD OUTDIR [--train 60000] [--epochs 2] [--seed 7]

Both start from the same freshly initialized weights (torch.manual_seed(3),
exported with BatchNorm kept and without the exporter's merging of equal
initializers) and see the same batches: the order of `qfold train --seed S`
(splitmix64 Fisher-Yates, reproduced in Python by tests/train/train_cli_test.py),
batch 64, SGD lr 0.01 momentum 0.9. Prints one Markdown table row: training
images, epochs, qfold's and torch's top-1 on the 10,000 test images, their
difference.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "train"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "tools"))
from train import FashionCNN, load  # noqa: E402
import train_cli_test as tt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("qfold")
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=60000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch = tt.torch_setup()

    def path(name):
        return os.path.join(args.out, name)

    torch.manual_seed(3)
    model = FashionCNN()
    tt.export(model, path("train_init.onnx"), (1, 28, 28))
    xtr, ytr = load("train")
    xte, yte = load("test")
    xtr, ytr = np.ascontiguousarray(xtr[:args.train]), ytr[:args.train]
    np.save(path("train_x.npy"), xtr)
    np.save(path("train_y.npy"), ytr)
    np.save(path("test_x.npy"), np.ascontiguousarray(xte))
    np.save(path("test_y.npy"), yte)
    t0 = time.time()
    subprocess.run([args.qfold, "train", path("train_init.onnx"), "-o", path("trained.onnx"), "--data",
                    path("train_x.npy"), "--labels", path("train_y.npy"), "--epochs", str(args.epochs), "--batch",
                    "64", "--lr", "0.01", "--momentum", "0.9", "--seed", str(args.seed), "--log",
                    path("train_log.csv")], check=True, stdout=subprocess.DEVNULL)
    t1 = time.time()
    tt.torch_train(model, xtr, ytr, 64, tt.qfold_orders(len(xtr), args.epochs, args.seed),
                   lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))
    t2 = time.time()
    q = subprocess.run([args.qfold, "eval", path("trained.onnx"), "--data", path("test_x.npy"), "--labels",
                        path("test_y.npy"), "--json"], check=True, capture_output=True, text=True).stdout
    qt = json.loads(q)["models"][0]["top1"]
    with torch.no_grad():
        hits = sum(int((model(torch.from_numpy(xte[i:i + 1000])).argmax(1).numpy() == yte[i:i + 1000]).sum())
                   for i in range(0, len(xte), 1000))
    pt = hits / len(xte)
    print("| %d train images | %d | %.2f %% | %.2f %% | %+.2f |"
          % (len(xtr), args.epochs, 100 * qt, 100 * pt, 100 * (qt - pt)))
    print("(training time: qfold %.0f s on its default threads, torch %.0f s on 1 thread)" % (t1 - t0, t2 - t1),
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
