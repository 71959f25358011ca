#!/usr/bin/python3
"""What qfold's PTQ recoveries (issue 31) do on torchvision's mobilenet_v3_small
with random BatchNorm, against PyTorch 1.13 FX PTQ and FX QAT of the same model
with the same data and the Neutron scheme (docs/ACCURACY.md, "Recovering what
PTQ loses"; run by `make accuracy` through scripts/accuracy.sh).

    scripts/recovery_mbv3.py --qfold build/qfold --work DIR [--train 30000] [--epochs 1]
                             [--test 10000] [--qat-train 4000] [--no-fx] [--no-qat]

1. The model: torchvision.models.mobilenet_v3_small(num_classes=10) (width
   1.0: Conv+BN+Hardswish stem, inverted residual blocks with ReLU or
   Hardswish, squeeze-and-excitation blocks (global average pool, two 1x1
   convs, Hardsigmoid, Mul), Conv+BN+Hardswish, global average pool, Flatten,
   Linear, Hardswish, Dropout, Linear), built with torch.manual_seed(0); then
   every BatchNorm's gamma ~ U[0.5, 1.5], beta ~ N(0, 0.2), running mean ~
   N(0, 0.2), running variance ~ U[0.5, 2] (torch.Generator seeded 1), so that
   no BatchNorm is the identity (torchvision's BN momentum is 0.01: the running
   statistics move slowly). Trained in PyTorch (Adam, one-cycle, max lr 4e-3,
   batch 128, seeded order, --epochs over the first --train training images,
   Dropout 0.2 as torchvision has it); then the BatchNorms' running
   statistics recomputed as the mean of the batch statistics over the first
   4,096 training images (with momentum 0.01 and a few hundred steps they
   still lag the weights and the model evaluates at chance). Images: Fashion-MNIST 28x28 in [0, 1],
   resized to 32x32 (bilinear, torch.nn.functional.interpolate,
   align_corners=False), repeated to 3 channels, normalized (x - 0.2860) /
   0.3530. Exported to ONNX (eval, BatchNorm kept, opset 13: Hardswish
   becomes HardSigmoid + Mul, which qfold fuses back) as DIR/float.onnx.
   Cached: the model is trained again only when DIR/model.json's options
   differ.
2. qfold: `qfold quantize float.onnx --calib calib.npy --target neutron`
   (512 calibration images: the first training images) with each recovery
   alone and all together, the default, then `qfold eval` (the integer
   executor) on the first --test test images. Plain PTQ is `--set
   equalize=off --set bias-correction=off --set weight-rounding=nearest`
   (the default turns on equalize=auto only). The exclusion row keeps float the
   layer the plain PTQ's report names worst by local SQNR. `qfold qat` from
   the float model on the first --qat-train training images (the recipe of
   docs/ACCURACY.md's QAT section: SGD lr --qat-lr, momentum 0.5, batch 64, one
   epoch, seed 7, observers calibrated on 256 images, observers and BatchNorm
   frozen after 3/4 of the steps) with and without --bn-reestimate.
3. PyTorch 1.13 FX: PTQ (tests/ref/fx_qat.py's PTQ qconfigs: histogram
   observer, per-channel conv / per-tensor linear weights; the same 512
   calibration images) and QAT (its QAT qconfigs, the same recipe, data and
   batch order as `qfold qat --seed 7`); FX requires its fixed qparams (scale
   1/256 over [0, 1]) for Hardsigmoid. Dropout off in QAT (the ONNX model
   qfold trains has none). Both converted with convert_to_reference_fx and
   evaluated in float (quantize / dequantize simulated).
Prints the Markdown table of docs/ACCURACY.md and writes DIR/results.json.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "fashion_mnist"))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))

import fx_qat  # noqa: E402  (sets torch to one thread, qnnpack)
import train_cli_test as tt  # noqa: E402
from train import load  # noqa: E402

torch = fx_qat.torch
nn = torch.nn
SIZE = 32
MEAN, STD = 0.2860, 0.3530


def prep(x, batch=5000):
    """[N, 1, 28, 28] in [0, 1] -> [N, 3, 32, 32] normalized, float32."""
    out = np.empty((len(x), 3, SIZE, SIZE), np.float32)
    for i in range(0, len(x), batch):
        t = torch.from_numpy(np.ascontiguousarray(x[i:i + batch]))
        t = nn.functional.interpolate(t, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        out[i:i + batch] = ((t - MEAN) / STD).expand(-1, 3, -1, -1).numpy()
    return out


def build():
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(num_classes=10)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
    return model


def train_float(model, x, y, epochs, batch=128, lr=4e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    per_epoch = (len(x) + batch - 1) // batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * per_epoch)
    g = torch.Generator().manual_seed(0)
    model.train()
    for e in range(epochs):
        perm = torch.randperm(len(x), generator=g).numpy()
        for k, i in enumerate(range(0, len(x), batch)):
            idx = perm[i:i + batch]
            loss = nn.functional.cross_entropy(model(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if k % 50 == 0:
                print("train epoch %d step %d/%d loss %.4f" % (e, k, per_epoch, float(loss)), file=sys.stderr)
    # torchvision's BatchNorm momentum is 0.01: after a few hundred steps the
    # running statistics still lag (and hold part of the random ones), and the
    # model evaluates at chance. Recompute them as an average over the batch
    # statistics of the first 4,096 training images (weights fixed,
    # momentum None: the cumulative mean), then put 0.01 back.
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    with torch.no_grad():
        for i in range(0, min(4096, len(x)), batch):
            model(torch.from_numpy(x[i:i + batch]))
    for m in bns:
        m.momentum = 0.01
    model.eval()
    return model


def mapping(qat):
    """fx_qat.py's Neutron qconfigs; Hardsigmoid at FX's fixed qparams (FX
    ignores any other qconfig for it)."""
    from torch.ao.quantization import QConfig
    from torch.ao.quantization import fake_quantize as fq
    from torch.ao.quantization import observer as ob
    m = fx_qat.qat_qconfigs() if qat else fx_qat.ptq_qconfigs()
    fixed = fq.default_fixed_qparams_range_0to1_fake_quant if qat else ob.default_fixed_qparams_range_0to1_observer
    return m.set_object_type(nn.Hardsigmoid, QConfig(activation=fixed, weight=ob.default_weight_observer))


def predict(model, x, batch=1000):
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model(torch.from_numpy(x[i:i + batch])).numpy())
    logits = np.concatenate(out)
    return logits.argmax(1), logits


def sqnr(ref, y):
    """dB of the float logits against the int8 model's."""
    ref, y = ref.astype(np.float64), y.astype(np.float64)
    return float(10 * np.log10((ref ** 2).sum() / ((ref - y) ** 2).sum()))


def fx_qat_run(model, x, y, a):
    """fx_qat.qat with this model's qconfigs, Dropout off (the ONNX model qfold
    trains has none), observers and BatchNorm frozen together at a.freeze."""
    import types
    m = copy.deepcopy(model)
    for d in m.modules():
        if isinstance(d, nn.Dropout):
            d.p = 0.0
    args = types.SimpleNamespace(calib_count=a.calib_count, batch=a.batch, lr=a.qat_lr, momentum=a.momentum,
                                 epochs=1, freeze_bn=a.freeze, freeze_observers=a.freeze)
    return fx_qat.qat(m, x, y, args, a.seed, qconfigs=mapping(True))


def layer_of(model_path, value, readers=False):
    """The nodes `--exclude` takes for the layer that writes `value`, as
    `quantize --max-drop` picks them (docs/QUANTIZATION.md, "Accuracy target"):
    the producer; a BatchNormalization's conv instead; a Relu / Clip after a
    Conv / Gemm (through a BatchNormalization) with that conv. With readers,
    also every node that reads the value (so that the value itself stays
    float: an excluded node's output is still quantized for a quantized
    reader)."""
    import onnx
    nodes = onnx.load(model_path).graph.node
    prod = {o: n for n in nodes for o in n.output}

    def through_bn(n):
        if n is not None and n.op_type == "BatchNormalization":
            return prod.get(n.input[0])
        return n

    n = through_bn(prod[value])
    names = [n.name]
    if n.op_type in ("Relu", "Clip"):
        c = through_bn(prod.get(n.input[0]))
        if c is not None and c.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            names.insert(0, c.name)
    if readers:
        names += [r.name for r in nodes if value in r.input and r.name not in names]
    return ",".join(names)


def qfold(a, *args, check=True):
    t0 = time.time()
    p = subprocess.run([a.qfold] + [str(s) for s in args], capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit("qfold %s failed (%d):\n%s%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qfold", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--train", type=int, default=30000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--test", type=int, default=10000)
    ap.add_argument("--calib", type=int, default=512)
    ap.add_argument("--qat-train", type=int, default=4000)
    ap.add_argument("--qat-lr", type=float, default=3e-4)
    ap.add_argument("--momentum", type=float, default=0.5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--calib-count", type=int, default=256)
    ap.add_argument("--bn-reestimate", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's threads for the float training")
    ap.add_argument("--no-fx", action="store_true", help="skip PyTorch's FX PTQ and QAT")
    ap.add_argument("--no-qat", action="store_true", help="skip both QATs")
    ap.add_argument("--only", help="comma-separated qfold rows to run (names of the table's first column)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)

    def path(name):
        return os.path.join(a.work, name)

    steps = (a.qat_train + a.batch - 1) // a.batch
    a.freeze = steps * 3 // 4
    xtr, ytr = load("train")
    xte, yte = load("test")
    xt, yt = prep(xte[:a.test]), yte[:a.test]
    calib = prep(xtr[:a.calib])
    xq, yq = prep(xtr[:a.qat_train]), ytr[:a.qat_train]
    for name, arr in (("test_x", xt), ("test_y", yt), ("calib", calib), ("qat_x", xq), ("qat_y", yq)):
        np.save(path(name + ".npy"), arr)

    key = {"train": a.train, "epochs": a.epochs, "size": SIZE, "version": 2}
    stamp = path("model.json")
    model = build()
    if os.path.exists(stamp) and os.path.exists(path("float.pt")) and json.load(open(stamp)).get("key") == key:
        model.load_state_dict(torch.load(path("float.pt")))
        model.eval()
        info = json.load(open(stamp))
    else:
        torch.set_num_threads(a.threads)
        t0 = time.time()
        train_float(model, prep(xtr[:a.train]), ytr[:a.train], a.epochs)
        torch.set_num_threads(1)
        torch.save(model.state_dict(), path("float.pt"))
        tt.export(model, path("float.onnx"), (3, SIZE, SIZE))
        info = {"key": key, "train_seconds": time.time() - t0}
        json.dump(info, open(stamp, "w"))
    res = {"float_torch": fx_qat.top1(model, xt, yt), "train_seconds": info["train_seconds"], "rows": []}
    import onnx
    res["onnx_ops"] = sorted({n.op_type for n in onnx.load(path("float.onnx")).graph.node})
    print("float (PyTorch) top-1 %.4f, trained in %.0f s, ONNX ops %s"
          % (res["float_torch"], info["train_seconds"], " ".join(res["onnx_ops"])), file=sys.stderr)

    def evaluate(model_path):
        """(int8 top-1, top-1 agreement with the float model) by `qfold eval`
        (its integer executor)."""
        p, _ = qfold(a, "eval", path("float.onnx"), "--compare", model_path, "--data", path("test_x.npy"),
                     "--labels", path("test_y.npy"), "--json")
        j = json.loads(p.stdout)
        res["float_qfold"] = j["models"][0]["top1"]
        logits = run(model_path)
        preds[model_path] = logits.argmax(1)
        return j["models"][1]["top1"], j["top1_agreement"], sqnr(float_logits, logits)

    def run(model_path):
        qfold(a, "run", model_path, "-i", path("test_x.npy"), "-o", path("logits.npy"))
        return np.load(path("logits.npy"))

    preds = {}
    float_logits = run(path("float.onnx"))
    float_pred, torch_logits = predict(model, xt)
    plain = ["--set", "equalize=off", "--set", "bias-correction=off", "--set", "weight-rounding=nearest"]

    def without(rule):
        out = []
        for i in range(0, len(plain), 2):
            if not plain[i + 1].startswith(rule + "="):
                out += plain[i:i + 2]
        return out

    rows = [
        ("plain PTQ", plain),
        ("equalize=auto", without("equalize") + ["--set", "equalize=auto"]),
        ("equalize=all", without("equalize") + ["--set", "equalize=all"]),
        ("bias-correction=empirical", without("bias-correction") + ["--set", "bias-correction=empirical"]),
        ("bias-correction=analytical", without("bias-correction") + ["--set", "bias-correction=analytical"]),
        ("weight-rounding=adaround", without("weight-rounding") + ["--set", "weight-rounding=adaround"]),
        ("exclude worst local SQNR", plain + ["--exclude", None]),
        ("exclude worst local SQNR and its readers", plain + ["--exclude", "readers"]),
        ("all together", ["--set", "equalize=auto", "--set", "bias-correction=auto",
                          "--set", "weight-rounding=adaround", "--exclude", None]),
        ("default (--target neutron)", []),
    ]
    only = set(a.only.split(",")) if a.only else None
    worst = worst_readers = worst_value = None  # set by the first row, plain PTQ
    for name, extra in rows:
        if only and name not in only and name != "plain PTQ":
            continue
        tag = "_".join(name.split(" ")[:2]).replace("=", "_").replace("-", "_")
        tag += "_readers" if "readers" in name else ""
        if "--exclude" in extra:
            extra = list(extra)
            i = extra.index("--exclude") + 1
            extra[i] = worst_readers if extra[i] == "readers" else worst
        out = path("q_%s.onnx" % tag)
        p, secs = qfold(a, "quantize", path("float.onnx"), "-o", out, "--calib", path("calib.npy"),
                        "--target", "neutron", "--report", path("q_%s.json" % tag), *extra)
        rep = json.load(open(path("q_%s.json" % tag)))
        if name == "plain PTQ":
            worst_value = rep["worst_local_sqnr"][0]
            worst = layer_of(path("float.onnx"), worst_value)
            worst_readers = layer_of(path("float.onnx"), worst_value, readers=True)
        top1, agree, db = evaluate(out)
        row = {"name": name, "args": " ".join(s for s in extra), "top1": top1, "agreement": agree, "sqnr": db,
               "pred": preds[out],
               "seconds": secs,
               "summary": [ln for ln in p.stdout.splitlines() if ln.strip().startswith(
                   ("equalize", "bias correction", "adaround", "worst local", "left float", "excluded"))]}
        res["rows"].append(row)
        print("%-28s %.4f  (%.0f s) %s" % (name, top1, secs, row["args"]), file=sys.stderr)
        for ln in row["summary"]:
            print("    " + ln.strip(), file=sys.stderr)
    res["worst_local"] = {"value": worst_value, "exclude": worst}

    if not a.no_qat:
        common = ["--data", path("qat_x.npy"), "--labels", path("qat_y.npy"), "--target", "neutron",
                  "--optimizer", "sgd", "--lr", a.qat_lr, "--momentum", a.momentum, "--batch", a.batch,
                  "--epochs", 1, "--seed", a.seed, "--calib-count", a.calib_count,
                  "--freeze-observers", a.freeze, "--freeze-bn", a.freeze]
        for name, extra in (("qfold qat", []), ("qfold qat --bn-reestimate %d" % a.bn_reestimate,
                                                 ["--bn-reestimate", a.bn_reestimate])):
            out = path("qat%s.onnx" % ("_bnr" if extra else ""))
            p, secs = qfold(a, "qat", path("float.onnx"), "-o", out, *common, *extra)
            top1, agree, db = evaluate(out)
            res["rows"].append({"name": name, "args": " ".join(map(str, common[6:] + extra)),
                                "top1": top1, "agreement": agree, "sqnr": db, "seconds": secs, "pred": preds[out]})
            print("%-28s %.4f  (%.0f s)" % (name, res["rows"][-1]["top1"], secs), file=sys.stderr)

    if not a.no_fx:
        t0 = time.time()
        pr, lg = predict(fx_qat.ptq(model, calib, qconfigs=mapping(False)), xt)
        res["rows"].append({"name": "PyTorch FX PTQ", "top1": float((pr == yt).mean()), "pred": pr,
                            "sqnr": sqnr(torch_logits, lg),
                            "agreement": float((pr == float_pred).mean()), "seconds": time.time() - t0})
        print("FX PTQ %.4f (%.0f s)" % (res["rows"][-1]["top1"], res["rows"][-1]["seconds"]), file=sys.stderr)
        if not a.no_qat:
            t0 = time.time()
            q, losses = fx_qat_run(model, xq, yq, a)
            pr, lg = predict(q, xt)
            res["rows"].append({"name": "PyTorch FX QAT", "top1": float((pr == yt).mean()), "pred": pr,
                                "sqnr": sqnr(torch_logits, lg),
                                "agreement": float((pr == float_pred).mean()), "seconds": time.time() - t0,
                                "mean_loss": float(np.mean(losses))})
            print("FX QAT %.4f (%.0f s)" % (res["rows"][-1]["top1"], res["rows"][-1]["seconds"]), file=sys.stderr)
    base = res["rows"][0]["pred"] == yt
    fhit = float_logits.argmax(1) == yt
    res["float_won"], res["float_lost"] = int((fhit & ~base).sum()), int((base & ~fhit).sum())
    for r in res["rows"]:
        hit = r.pop("pred") == yt
        r["won"], r["lost"] = int((hit & ~base).sum()), int((base & ~hit).sum())
    json.dump(res, open(path("results.json"), "w"), indent=1)

    f = res["float_qfold"]
    plain_top1 = res["rows"][0]["top1"]
    print("| model | top-1 (%d test images) | vs float (points) | share of plain PTQ's loss recovered "
          "| images won / lost against plain PTQ | top-1 agreement with float | logits' SQNR (dB) | seconds |" % a.test)
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print("| float (PyTorch %.2f %%) | %.2f %% | | | %d / %d | | | %.0f (training) |"
          % (100 * res["float_torch"], 100 * f, res["float_won"], res["float_lost"], info["train_seconds"]))
    for r in res["rows"]:
        t = r["top1"]
        rec = "%.0f %%" % (100 * (t - plain_top1) / (f - plain_top1)) if f - plain_top1 > 0.0005 else "-"
        name = r["name"] if r["name"].startswith(("qfold", "PyTorch")) else "qfold " + r["name"]
        print("| %s | %.2f %% | %+.2f | %s | %d / %d | %.2f %% | %.1f | %.0f |"
              % (name, 100 * t, 100 * (t - f), rec, r["won"], r["lost"], 100 * r["agreement"], r["sqnr"],
                 r["seconds"]))


if __name__ == "__main__":
    sys.exit(main())
