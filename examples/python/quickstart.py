#!/usr/bin/python3
"""qfold from Python: train in PyTorch -> fold and quantize in qfold -> evaluate
-> export an int8 TFLite model, without a temporary file.

    examples/python/quickstart.py [--steps 100] [--out DIR]

Fine-tunes the bundled Fashion-MNIST CNN (examples/fashion_mnist: its trained
weights, fashion_cnn.pt) for a few SGD steps, exports it to ONNX in memory as
qfold expects it (qfold.torch.export: eval mode, BatchNorm kept, opset 13),
then in qfold: folds BatchNorm (verified), checks what runs on Neutron's NPU,
quantizes for NXP's Neutron NPU on 256 training images,
compares float and int8 top-1 on 1,000 test images and writes the .tflite
(with --out). Data: Debian's dataset-fashion-mnist; without it, seeded
random images (the steps run the same, the accuracy means nothing).
Needs PYTHONPATH=python and QFOLD_LIBRARY=build/libqfold.so in a source tree.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import qfold
import qfold.torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fashion_mnist"))
from train import FashionCNN, load  # noqa: E402


def data():
    try:
        (xtr, ytr), (xte, yte) = load("train"), load("test")
        return xtr[:4096], ytr[:4096], xte[:1000], yte[:1000], "Fashion-MNIST"
    except OSError:
        rng = np.random.default_rng(0)
        x = rng.random((5096, 1, 28, 28), dtype=np.float32)
        y = rng.integers(0, 10, 5096)
        return x[:4096], y[:4096], x[4096:], y[4096:], "random images (no dataset-fashion-mnist)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", help="directory for fashion_int8.tflite")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    xtr, ytr, xte, yte, what = data()
    print("data: %s; qfold %s (%s)" % (what, qfold.__version__, qfold.engine_about()))

    # 1. PyTorch: a few steps of fine-tuning, then the ONNX model in memory
    model = FashionCNN()
    model.load_state_dict(torch.load(os.path.join(HERE, "..", "fashion_mnist", "fashion_cnn.pt")))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        idx = torch.randint(0, len(xtr), (64,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(xtr[idx])), torch.from_numpy(ytr[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("pytorch: %d SGD steps, last loss %.4f" % (args.steps, loss.item()))
    # the ONNX model in memory, as qfold expects it: eval mode, BatchNorm kept, opset 13
    m = qfold.torch.export(model, torch.zeros(1, 1, 28, 28), input_names=["image"], output_names=["logits"])
    model.eval()

    # 2. qfold: fold BatchNorm (verified), check the placement on Neutron, quantize for it
    i = m.inputs[0]
    print("model: %d nodes, input %s %s %s, ops %s" % (m.nodes, i.name, i.dtype, ["N" if d is None else d for d in i.shape],
                                                      ", ".join("%s %d" % kv for kv in m.ops.items())))
    t = time.perf_counter()
    fused = qfold.fuse(m, verify=True)
    print("fuse: %d BatchNorms folded, verified (max rel diff %.2g) in %.0f ms" % (
        m.ops.get("BatchNormalization", 0), max(o["max_rel"] for o in fused.report["verify"]["outputs"]),
        1e3 * (time.perf_counter() - t)))
    c = qfold.check(m, target="neutron")["summary"]
    print("check: NPU %d of %d ops, %.1f %% of MACs, %d transitions" % (
        c["npu_nodes"], c["npu_nodes"] + c["cpu_nodes"], 100 * c["npu_mac_fraction"], c["transitions"]))
    t = time.perf_counter()
    q, report = qfold.quantize(fused, calib=xtr[:256], target="neutron")
    worst = report["sqnr_db"][0]
    print("quantize: %d activations, %d weights, %d biases on %d samples in %.0f ms; lowest SQNR %s %.1f dB" % (
        report["counts"]["activations"], report["counts"]["weights"], report["counts"]["biases"],
        report["calibration"]["samples"], 1e3 * (time.perf_counter() - t), worst["value"], worst["db"]))

    # 3. evaluate: PyTorch's float model, qfold's float and int8 models
    with torch.no_grad():
        torch_top1 = float((model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean())
    f32, i8 = qfold.eval(fused, xte, yte), qfold.eval(q, xte, yte)
    print("top-1 on %d test images: pytorch %.2f %%, qfold float %.2f %%, qfold int8 %.2f %% (top-5 %.2f %%)" % (
        len(xte), 100 * torch_top1, 100 * f32["top1"], 100 * i8["top1"], 100 * i8["top5"]))
    (logits,) = q.run(xte[:1])
    print("int8 run, first test image: class %d (label %d)" % (logits.argmax(), yte[0]))

    # 4. export the int8 TFLite model
    tfl = qfold.export_tflite(q)
    print("tflite: %d bytes" % len(tfl))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "fashion_int8.tflite")
        with open(path, "wb") as f:
            f.write(tfl)
        print("wrote %s" % path)
    return 0 if abs(f32["top1"] - torch_top1) <= 0.002 else 1


if __name__ == "__main__":
    sys.exit(main())
