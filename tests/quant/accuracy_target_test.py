#!/usr/bin/python3
"""`qfold quantize --max-drop` (the accuracy target; registered by
tests/quant/accuracy_target.cmake).

    accuracy_target_test.py --qfold BIN --work DIR CASE

The model (PyTorch, made here): three 3x3 convs with ReLU and a linear
layer on 3x8x8 inputs; c1's output channel 3 is dead (bias -100: always 0
after the ReLU) and c2 reads it with one weight 100x its largest other one.
The float model never sees that weight; with per-tensor conv weights
(--set conv-weights=per-tensor) it sets c2's scale, every other weight of c2
keeps about one int8 step, and the int8 model loses top-1: c2 is the layer
to keep float. The labels are PyTorch's float top-1 on 256 random inputs
(the float model scores 100 %).

Cases:
  easy        --max-drop 100: trial 0 (as asked) meets it: one trial line,
              the model and the report written, the report's accuracy_target
              has that one trial, met, float top-1 100 (PyTorch's labels).
  exclusion   --max-drop 0.5, the recoveries refused by the user's --set
              (bias-correction=off, weight-rounding=nearest: listed as not
              tried), up to 3 exclusions: trial 0 drops more than 0.5 points,
              the first exclusion is c2 with its ReLU, kept, and meets the
              target; the written file keeps /c2/Conv float (its weight an
              initializer) and every other conv int8; `qfold eval` of the
              written file gives the top-1 the trial printed.
  impossible  --max-drop 0 --max-excluded 0 with the recoveries on
              (adaround-iters=20): trials 0, 1, 2, none at 0 drop: exit 1, one
              line with the best top-1, its drop and trial, no model and no
              report written.
  recovery    a recovery, not an exclusion, reaches the target: the bundled
              Fashion-MNIST CNN with its head's channels scaled apart
              (tests/ref/fx_qat.py --skew 8: float unchanged; PTQ with
              per-tensor linear weights and activations loses points there),
              128 calibration images, the first 1,000 test images, every
              option as plain as it gets (equalize=off) but the target
              --max-drop 1 --max-excluded 0: trial 0 drops more than a point,
              trial 1 (bias-correction=auto) is kept and meets it; the
              report's float top-1 is PyTorch's on those images, its
              bias_correction kept, no layer left float; the written file
              scores what the trial printed in `qfold eval`, and ONNX Runtime
              runs it to the top-1 of `qfold eval --requant onnx` (its
              requantization) within 0.2 point, within the target too.
  errors      --max-drop -1, nan, x; --max-excluded -1; --max-drop without
              --eval-data; --eval-data without --max-drop; labels of another
              count: exit 2, one line naming the option or file, nothing
              written.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from qfcli import Skip, check, error_line, run_qfold  # noqa: E402
import qfcli  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcache  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))

ARGS = None  # set by qfcli.main
PER_TENSOR = ("--set", "conv-weights=per-tensor", "--set", "equalize=off")


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv, expect=0):
    return run_qfold(ARGS.qfold, argv, expect=expect, timeout=600)


def make_model():
    """The model, calibration data, eval data and PyTorch's labels."""
    try:
        import torch
        import torch.nn as nn
    except ImportError as e:
        raise Skip("python module torch missing: %s" % e)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.c3 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = torch.relu(self.c2(x))
            x = torch.relu(self.c3(x))
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        net.c1.bias[3] = -100.0
        net.c2.weight[5, 3, 1, 1] = 100 * net.c2.weight.abs().max()
    net.eval()
    model = work("outlier.onnx")
    torch.onnx.export(net, torch.zeros(1, 3, 8, 8), model, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    rng = np.random.default_rng(0)
    np.save(work("calib.npy"), rng.standard_normal((64, 3, 8, 8)).astype(np.float32))
    x = rng.standard_normal((256, 3, 8, 8)).astype(np.float32)
    np.save(work("eval.npy"), x)
    with torch.no_grad():
        y = net(torch.from_numpy(x)).argmax(1).numpy().astype(np.int64)
    np.save(work("labels.npy"), y)
    return model


def target(model, out, *extra, expect=0):
    return qfold("quantize", model, "-o", out, "--calib", work("calib.npy"), "--eval-data", work("eval.npy"),
                 "--eval-labels", work("labels.npy"), "--report", out + ".json", *extra, expect=expect)


TRIAL = re.compile(r"^target trial (\d+): (.*?): (?:int8 top-1 ([\d.]+) %, drop (-?[\d.]+) points: (kept|not kept)"
                   r"|not tried \((.*)\))$", re.M)


def trials(stdout):
    return [(int(m[0]), m[1], float(m[2]) if m[2] else None, float(m[3]) if m[3] else None, m[4] == "kept",
             m[5] or None) for m in TRIAL.findall(stdout)]


def case_easy():
    model = make_model()
    out = work("easy.onnx")
    _, stdout, _ = target(model, out, "--max-drop", "100", *PER_TENSOR)
    print(stdout)
    t = trials(stdout)
    check(len(t) == 1 and t[0][1] == "as asked" and t[0][4], "trials: %r" % t)
    check("target: reached at trial 0 (as asked)" in stdout, stdout)
    check(os.path.exists(out), "no model written")
    with open(out + ".json") as f:
        rep = json.load(f)["accuracy_target"]
    check(rep["met"] and rep["best"] == 0 and len(rep["trials"]) == 1, "report: %r" % rep)
    check(rep["float_top1"] == 100.0 and rep["samples"] == 256, "float top-1 %r on %r samples, want 100 (PyTorch's "
          "labels)" % (rep["float_top1"], rep["samples"]))
    check(abs(rep["trials"][0]["top1"] - t[0][2]) < 0.006 and rep["max_drop"] == 100, "report: %r" % rep)


def case_exclusion():
    model = make_model()
    out = work("excl.onnx")
    _, stdout, _ = target(model, out, "--max-drop", "0.5", *PER_TENSOR, "--set", "bias-correction=off",
                          "--set", "weight-rounding=nearest")
    print(stdout)
    t = trials(stdout)
    check(len(t) == 4, "trials: %r" % t)
    check(t[0][1] == "as asked" and t[0][3] > 0.5, "trial 0 meets the target already: %r" % (t[0],))
    check(t[1][1] == "bias-correction=auto" and t[1][5] == "the user's --set stands", "trial 1: %r" % (t[1],))
    check(t[2][1] == "weight-rounding=adaround" and t[2][5] == "the user's --set stands", "trial 2: %r" % (t[2],))
    check(t[3][1] == "exclude /c2/Conv,/Relu_1" and t[3][4] and t[3][3] <= 0.5, "trial 3: %r" % (t[3],))
    check("target: reached at trial 3" in stdout, stdout)
    with open(out + ".json") as f:
        rep = json.load(f)
    at = rep["accuracy_target"]
    check(at["met"] and at["best"] == 3 and at["excluded"] == ["/c2/Conv", "/Relu_1"], "report: %r" % at)
    check([tr["skipped"] is not None for tr in at["trials"]] == [False, True, True, False], "report: %r" % at)
    left = {(e["node"], e["reason"]) for e in rep["left_float"]}
    check(("/c2/Conv", "excluded") in left, "left_float: %r" % rep["left_float"])
    try:
        import onnx
    except ImportError as e:
        raise Skip("python module onnx missing: %s" % e)
    m = onnx.load(out)
    inits = {i.name for i in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        w = n.input[1]
        is_float = w in inits
        check(is_float == (n.name == "/c2/Conv"), "%s: weight %s" % (n.name, "float" if is_float else
                                                                     prod[w].op_type))
    # The written file, evaluated by `qfold eval`, scores what the trial printed.
    _, ev, _ = qfold("eval", out, "--data", work("eval.npy"), "--labels", work("labels.npy"), "--json")
    top1 = json.loads(ev)["models"][0]["top1"] * 100
    check(abs(top1 - t[3][2]) < 0.006, "qfold eval %.2f %%, trial 3 printed %.2f %%" % (top1, t[3][2]))


def case_impossible():
    model = make_model()
    out = work("imp.onnx")
    _, stdout, err = target(model, out, "--max-drop", "0", "--max-excluded", "0", *PER_TENSOR, "--set",
                            "adaround-iters=20", expect=1)
    print(stdout, err)
    t = trials(stdout)
    check([x[1] for x in t] == ["as asked", "bias-correction=auto", "weight-rounding=adaround"], "trials: %r" % t)
    check(all(x[3] > 0 for x in t), "a trial met drop 0: %r" % t)
    best = max(t, key=lambda x: (x[2], -x[0]))
    # AdaRound's progress lines come first; the error is the last line.
    line = error_line(err.strip().splitlines()[-1], "not reached", "best int8 top-1 %.2f %%" % best[2], "(trial %d, %s)" % (best[0], best[1]),
                      "drop %.2f points" % best[3], "nothing written")
    check(all(x.startswith("adaround ") for x in err.strip().splitlines()[:-1]), "other lines:\n" + err)
    print(line)
    check(not os.path.exists(out) and not os.path.exists(out + ".json"), "something was written")
    check(not [f for f in os.listdir(ARGS.work) if f.startswith("imp.onnx")], "files left: %r" % os.listdir(ARGS.work))


def skew_export(base):
    """BASE/skew.onnx (fx_qat.py --skew 8 of the bundled CNN), BASE/calib.npy
    (128 normalized training images), BASE/eval.npy, labels.npy (the first
    1,000 test images); returns PyTorch's float top-1 (percent) on them.
    Computed once per `make test` (refcache)."""
    import fx_qat
    import torch
    xtr, _ = fx_qat.load("train")
    xte, yte = fx_qat.load("test")
    x, y = fx_qat.normalize(xte[:1000]), yte[:1000]
    np.save(os.path.join(base, "calib.npy"), fx_qat.normalize(xtr[:128]))
    np.save(os.path.join(base, "eval.npy"), x)
    np.save(os.path.join(base, "labels.npy"), y)
    model = fx_qat.Bundled()
    model.load_state_dict(torch.load(os.path.join(ROOT, "examples", "fashion_mnist", "fashion_cnn.pt")))
    model.eval()
    fx_qat.skew(model, 8)
    fx_qat.tt.export(model, os.path.join(base, "skew.onnx"), (1, 28, 28))
    return 100 * fx_qat.top1(model, x, y)


def case_recovery():
    try:
        import onnx
        import torch  # noqa: F401
    except ImportError as e:
        raise Skip("python module missing: %s" % e)
    try:
        ref_top1 = refcache.call(skew_export, ARGS.work, base=ARGS.work)
    except FileNotFoundError as e:
        raise Skip("the Fashion-MNIST data is not installed: %s" % e)
    out = work("rec.onnx")
    _, stdout, _ = qfold("quantize", work("skew.onnx"), "-o", out, "--calib", work("calib.npy"), "--eval-data",
                         work("eval.npy"), "--eval-labels", work("labels.npy"), "--report", out + ".json",
                         "--max-drop", "1", "--max-excluded", "0", "--set", "equalize=off")
    print(stdout)
    t = trials(stdout)
    check(len(t) == 2, "trials: %r (want trial 0 and bias correction only)" % t)
    check(t[0][1] == "as asked" and t[0][3] > 1, "trial 0 meets the target already: %r" % (t[0],))
    check(t[1][1] == "bias-correction=auto" and t[1][4] and t[1][3] <= 1, "trial 1: %r" % (t[1],))
    check("target: reached at trial 1 (bias-correction=auto)" in stdout, stdout)
    with open(out + ".json") as f:
        rep = json.load(f)
    at = rep["accuracy_target"]
    check(at["met"] and at["best"] == 1 and not at.get("excluded"), "report: %r" % at)
    check(abs(at["float_top1"] - ref_top1) < 0.006 and at["samples"] == 1000,
          "float top-1 %r on %r samples, PyTorch %.2f %%" % (at["float_top1"], at["samples"], ref_top1))
    bc = rep["bias_correction"]
    check(bc.get("kept") is True, "report's bias_correction: %r" % bc)
    check(not rep["left_float"], "left float: %r" % rep["left_float"])
    m = onnx.load(out)
    inits = {i.name for i in m.graph.initializer}
    layers = [n for n in m.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    check(len(layers) == 7 and all(n.input[1] not in inits for n in layers),
          "layers with float weights: %r" % [n.name for n in layers if n.input[1] in inits])
    _, ev, _ = qfold("eval", out, "--data", work("eval.npy"), "--labels", work("labels.npy"), "--json")
    top1 = json.loads(ev)["models"][0]["top1"] * 100
    check(abs(top1 - t[1][2]) < 0.006, "qfold eval %.2f %%, trial 1 printed %.2f %%" % (top1, t[1][2]))
    # ONNX Runtime runs the written model (tests/ref/ort_run.js); it
    # requantizes in float, as `qfold eval --requant onnx` does.
    ort_dir = work("ort_out")
    os.makedirs(ort_dir, exist_ok=True)
    p = subprocess.run(["node", os.path.join(ROOT, "tests", "ref", "ort_run.js"), out, ort_dir, work("eval.npy")],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (out, p.stderr))
    y = np.load(work("labels.npy"))
    ort = 100 * float((np.load(os.path.join(ort_dir, "out0.npy")).argmax(1) == y).mean())
    _, ev, _ = qfold("eval", out, "--data", work("eval.npy"), "--labels", work("labels.npy"), "--json",
                     "--requant", "onnx")
    qo = json.loads(ev)["models"][0]["top1"] * 100
    print("ONNX Runtime %.2f %%, qfold eval --requant onnx %.2f %%, float (PyTorch) %.2f %%" % (ort, qo, ref_top1))
    check(abs(ort - qo) <= 0.2, "ONNX Runtime %.2f %%, qfold eval --requant onnx %.2f %%" % (ort, qo))
    check(ref_top1 - ort <= 1, "ONNX Runtime's top-1 %.2f %% drops more than 1 point from float %.2f %%"
          % (ort, ref_top1))


def case_errors():
    model = make_model()
    np.save(work("labels_short.npy"), np.zeros(10, np.int64))
    out = work("err.onnx")
    base = ("quantize", model, "-o", out, "--calib", work("calib.npy"))
    ev = ("--eval-data", work("eval.npy"), "--eval-labels", work("labels.npy"))
    for argv, needle in [
            (base + ev + ("--max-drop", "-1"), "--max-drop"),
            (base + ev + ("--max-drop", "nan"), "--max-drop"),
            (base + ev + ("--max-drop", "x"), "--max-drop"),
            (base + ev + ("--max-drop", "1", "--max-excluded", "-1"), "--max-excluded"),
            (base + ("--max-drop", "1"), "--eval-data"),
            (base + ev, "--max-drop"),
            (base + ("--eval-data", work("eval.npy"), "--eval-labels", work("labels_short.npy"), "--max-drop", "1"),
             "labels_short.npy")]:
        _, _, err = qfold(*argv, expect=2)
        error_line(err, needle)
        check(not os.path.exists(out), "written after: %s" % " ".join(argv))


if __name__ == "__main__":
    sys.exit(qfcli.main("accuracy_target", globals(), paths=("--work",)))
