#!/usr/bin/python3
"""`qfold quantize` of a model exported with a fixed batch size (PyTorch's
default: the example input's, 1) calibrates, measures SQNR and runs the
equalize trials a batch at a time where that computes what one sample at a
time computes (src/exec/batch_widen.c).

    fixed_batch_test.py --qfold BIN --root DIR --work DIR CASE

Cases (a small DS-CNN keyword-spotting model: Conv2d + BatchNorm + ReLU,
depthwise-separable blocks, AvgPool, flatten, Linear; input 1x1x49x10;
random BatchNorm statistics; 100 calibration samples, so the last batch of
32 is short):
  dynamic   the model exported with batch 1 (torch.flatten) quantizes, on
            both targets, to the model the same export with a dynamic batch
            quantizes to: the files equal but for the batch dim of the
            inputs and outputs, the report's every scale, zero point, range,
            SQNR and equalize figure equal; the summary and report say batch
            32, and the summary's time line has every phase (equalize
            included), adding up to its total.
  view      x.view(x.size(0), -1), which a batch-1 export writes as a
            Reshape to the constant [1, -1]: calibrated in batches of 32 all
            the same (the Reshape copies the batch dim while widened), to the
            qparams of the torch.flatten model with a dynamic batch; the
            written Reshape still has its [1, -1].
  pinned    x.view(C, -1) then a Softmax over that last axis (a per-channel
            spatial softmax) and .view(-1, C, H, W): at batch 32 shapes infer,
            yet the Softmax would mix the samples. The Reshape pins the
            batch, so calibration runs one sample at a time, the summary's
            note and the report name the node, and the result is the one
            `--batch 1` gives.
"""
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from qfcli import Skip, check, run_qfold  # noqa: E402
import qfcli  # noqa: E402

ARGS = None  # set by qfcli.main
SAMPLES = 100


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv):
    _, out, _ = run_qfold(ARGS.qfold, argv, expect=0, timeout=600)
    return out


def torch_or_skip():
    try:
        import torch
        import onnx  # noqa: F401
    except ImportError as e:
        raise Skip("PyTorch / onnx not importable: %s" % e)
    return torch


def export(flat, path, dynamic):
    """The DS-CNN with `flat` ("flatten", "view", "pinned") exported at opset
    13, BatchNorm kept; same weights for every call."""
    torch = torch_or_skip()
    nn = torch.nn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dw, self.bn1 = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c)
            self.pw, self.bn2 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            return torch.relu(self.bn2(self.pw(torch.relu(self.bn1(self.dw(x))))))

    class DSCNN(nn.Module):
        def __init__(self, c=24):
            super().__init__()
            self.c = c
            self.conv, self.bn = nn.Conv2d(1, c, (10, 4), stride=2, padding=(5, 1), bias=False), nn.BatchNorm2d(c)
            self.blocks = nn.Sequential(Block(c), Block(c))
            self.pool, self.fc = nn.AvgPool2d((25, 5)), nn.Linear(c, 12)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x)))
            if flat == "pinned":
                h, w = x.shape[2], x.shape[3]
                x = torch.softmax(x.view(self.c, -1), dim=1).view(-1, self.c, h, w) * (h * w)
            x = self.pool(self.blocks(x))
            x = x.view(x.size(0), -1) if flat in ("view", "pinned") else torch.flatten(x, 1)
            return self.fc(x)

    m = DSCNN()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.3, 0.3)
    m.eval()
    kw = dict(opset_version=13, training=torch.onnx.TrainingMode.PRESERVE, input_names=["x"], output_names=["y"])
    if dynamic:
        kw["dynamic_axes"] = {"x": {0: "batch"}, "y": {0: "batch"}}
    torch.onnx.export(m, torch.randn(1, 1, 49, 10), path, **kw)


def calib():
    path = work("calib.npy")
    if not os.path.exists(path):
        np.save(path, np.random.default_rng(1).standard_normal((SAMPLES, 1, 49, 10)).astype(np.float32))
    return path


def quantize(model, out, *extra):
    stdout = qfold("quantize", model, "-o", out, "--calib", calib(), "--report", out + ".json", *extra)
    with open(out + ".json") as f:
        return stdout, json.load(f)


def without_io_types(path):
    """The model's bytes with the graph inputs' / outputs' / value_info types
    cleared: all that a batch dim of 1 or "batch" changes."""
    import onnx
    m = onnx.load(path)
    for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        v.type.Clear()
    return m.SerializeToString()


def time_phases(stdout):
    """The summary's time line: {phase: ms}, total included."""
    line = [ln for ln in stdout.splitlines() if ln.strip().startswith("time:")]
    check(len(line) == 1, "no time line:\n" + stdout)
    return {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+) ms", line[0])}


def same_report(a, b, what, rename=None):
    """Every tensor's scale, zero point and range, the SQNR figures and the
    equalize trial of reports a and b equal (names through `rename`)."""
    rename = rename or {}
    ta = [dict(t, name=rename.get(t["name"], t["name"])) for t in a["tensors"]]
    for x, y in zip(ta, b["tensors"]):
        check(x == y, "%s: tensor %s differs:\n%r\n%r" % (what, x["name"], x, y))
    check(len(ta) == len(b["tensors"]), "%s: %d tensors against %d" % (what, len(ta), len(b["tensors"])))
    sa = [dict(s, value=rename.get(s["value"], s["value"])) for s in a["sqnr_db"]]
    check(sa == b["sqnr_db"], "%s: SQNR differs:\n%r\n%r" % (what, sa, b["sqnr_db"]))


# --- cases -------------------------------------------------------------------------

def case_dynamic():
    fixed, dyn = work("ds_b1.onnx"), work("ds_dyn.onnx")
    export("flatten", fixed, dynamic=False)
    export("flatten", dyn, dynamic=True)
    for target in ("neutron", "generic"):
        out_f, rep_f = quantize(fixed, work("q_b1_%s.onnx" % target), "--target", target)
        out_d, rep_d = quantize(dyn, work("q_dyn_%s.onnx" % target), "--target", target)
        same_report(rep_f, rep_d, target)
        check(rep_f["equalize"] == rep_d["equalize"], "equalize: %r / %r" % (rep_f["equalize"], rep_d["equalize"]))
        check(without_io_types(work("q_b1_%s.onnx" % target)) == without_io_types(work("q_dyn_%s.onnx" % target)),
              "%s: the quantized models differ beyond their batch dim" % target)
        for out, rep in ((out_f, rep_f), (out_d, rep_d)):
            check("%d calibration samples, batch 32)" % SAMPLES in out, "summary:\n" + out)
            check(rep["calibration"].get("batch") == 32 and rep["calibration"].get("batch_note") is None,
                  "report: %r" % rep["calibration"])
            check("fixes its batch size" not in out, "a note on a batch that grew:\n" + out)
        # The time line: every phase, the trials' own time among them, adding
        # up to the total (each phase is one stretch of the same clock).
        t = time_phases(out_f)
        phases = ("load", "passes", "calibrate", "equalize", "convert", "adaround", "sqnr", "save")
        check(all(p in t for p in phases) and "total" in t, "time line lacks a phase: %r" % t)
        if rep_f["equalize"] is not None:
            check(t["equalize"] > 0, "an equalize trial ran, yet the time line gives it 0 ms: %r" % t)
        s = sum(t[p] for p in phases)
        check(abs(s - t["total"]) <= 0.02 * t["total"] + 5.0, "phases add up to %.1f ms of %.1f: %r" % (s, t["total"], t))


def case_view():
    fixed, dyn = work("view_b1.onnx"), work("flat_dyn.onnx")
    export("view", fixed, dynamic=False)
    export("flatten", dyn, dynamic=True)
    import onnx
    from onnx import numpy_helper
    m = onnx.load(fixed)
    shapes = [numpy_helper.to_array(a.t).tolist() for n in m.graph.node if n.op_type == "Constant"
              for a in n.attribute if a.name == "value" and len(a.t.dims) == 1 and a.t.data_type == 7]
    check([1, -1] in shapes, "the batch-1 export has no Reshape to [1, -1]: %r" % shapes)
    # equalize off: per-tensor equalization takes a Flatten before a Gemm,
    # not a Reshape, so the two models' trials differ by design.
    out, rep = quantize(fixed, work("q_view.onnx"), "--set", "equalize=off")
    _, rep_d = quantize(dyn, work("q_flat.onnx"), "--set", "equalize=off")
    flat_out = [t["name"] for t in rep_d["tensors"] if "Flatten" in t["name"]]
    view_out = [t["name"] for t in rep["tensors"] if "Reshape" in t["name"]]
    check(len(flat_out) == 1 and len(view_out) == 1, "flatten outputs: %r %r" % (flat_out, view_out))
    same_report(rep, rep_d, "view vs flatten", rename={view_out[0]: flat_out[0]})
    check("%d calibration samples, batch 32)" % SAMPLES in out and rep["calibration"].get("batch") == 32,
          "not calibrated in batches:\n" + out)
    q = onnx.load(work("q_view.onnx"))
    consts = {i.name: numpy_helper.to_array(i).tolist() for i in q.graph.initializer}
    for n in q.graph.node:
        if n.op_type == "Reshape":
            check(consts.get(n.input[1]) == [1, -1], "the written Reshape's shape is %r" % consts.get(n.input[1]))


def case_pinned():
    fixed = work("pinned_b1.onnx")
    export("pinned", fixed, dynamic=False)
    out, rep = quantize(fixed, work("q_pinned.onnx"))
    _, rep_1 = quantize(fixed, work("q_pinned_1.onnx"), "--batch", "1")
    cal = rep["calibration"]
    check(cal.get("batch") == 1 and cal.get("batch_note") and "Reshape" in cal["batch_note"],
          "the pinned batch did not fall back with its reason: %r" % cal)
    check("the model fixes its batch size at 1 and node '" in out and "calibrated 1 sample at a time" in out,
          "no note in the summary:\n" + out)
    check(rep_1["calibration"].get("batch") == 1, "--batch 1: %r" % rep_1["calibration"])
    same_report(rep, rep_1, "pinned vs --batch 1")
    check(rep["equalize"] == rep_1["equalize"], "equalize: %r / %r" % (rep["equalize"], rep_1["equalize"]))
    with open(work("q_pinned.onnx"), "rb") as a, open(work("q_pinned_1.onnx"), "rb") as b:
        check(a.read() == b.read(), "the pinned model quantizes otherwise than with --batch 1")


if __name__ == "__main__":
    sys.exit(qfcli.main("fixed_batch", globals(), paths=("--root", "--work")))
