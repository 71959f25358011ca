#!/usr/bin/python3
"""Every model a command writes goes out the same way, and what issue 7 left
open (registered by tests/io/model_outputs.cmake).

    model_outputs_test.py --qfold BIN --node NODE --ort-run ORT_RUN.js --work DIR CASE

- `qfold qat --keep-qat FILE` writes its second model as the first:
  --external-data applies to it (side file FILE.data), the automatic side
  file above the limit (QFOLD_EXTERNAL_DATA_LIMIT lowers it here) is named
  after the final file, never the temporary one, and both models with their
  side files are renamed together or not at all.
- fuse, quantize, finalize and train name their automatic side file after
  the final output too; a fuse whose model is not written (--verify fails,
  --report given) leaves no side file.
- A --keep-qat file records the range its weights were trained with
  (metadata_props "qfold.weight_range"); `qfold finalize` reads it, so a
  neutron-trained file reports no range difference; a PyTorch export (no
  record) still does.
- `fuse --verify` sizes symbolic input dims from the shapes the model
  declares for later values (value_info), and names --verify-data when
  they contradict each other.
Models come from PyTorch 1.13 and onnx.helper; ONNX Runtime runs what qfold
writes; onnx reads the side files.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import check, error_line  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

ARGS = None


def work(*p):
    return os.path.join(ARGS.work, *p)


def qfold(*argv, expect=0, env=None):
    e = dict(os.environ, **(env or {}))
    _, out, err = qfcli.run_qfold(ARGS.qfold, [str(a) for a in argv], expect=expect, timeout=120, env=e,
                                  cwd=ARGS.work)
    return out, err


def ort(model, x, tag):
    import subprocess
    d = work(tag + ".ort")
    os.makedirs(d, exist_ok=True)
    xp = work(tag + ".x.npy")
    np.save(xp, x)
    p = subprocess.run([ARGS.node, ARGS.ort_run, model, d, xp], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "ORT failed on %s:\n%s" % (model, p.stderr))
    return np.load(os.path.join(d, "out0.npy"))


def no_temps():
    left = [n for n in os.listdir(ARGS.work) if ".qfold-tmp-" in n]
    check(not left, "temporary files left: %s" % left)


def locations(path):
    """The side file each external initializer of `path` names."""
    m = onnx.load(path, load_external_data=False)
    return {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}


def torch_setup():
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(1)
    return torch


def float_model():
    """Conv+BN+ReLU, pool, Linear: float.onnx (opset 13, BN kept, dynamic
    batch) with its data; the Linear's weight is 8 KiB float, 2 KiB int8 (both
    go to a side file), the conv's stays inline."""
    refcache.call(float_export, work("float.onnx"), base=ARGS.work)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 1, 8, 8)).astype(np.float32)
    np.save(work("x.npy"), x)
    np.save(work("y.npy"), rng.integers(0, 16, 32).astype(np.int64))
    return x[:4]


def float_export(path):
    """float_model's network exported by PyTorch to PATH (through
    tests/ref/refcache.py: computed once per `make test`)."""
    torch = torch_setup()
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(1, 8, 3, padding=1)
            self.b = nn.BatchNorm2d(8)
            self.fc = nn.Linear(8 * 4 * 4, 16)

        def forward(self, x):
            x = nn.functional.max_pool2d(torch.relu(self.b(self.c(x))), 2)
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(0)
    m = Net()
    with torch.no_grad():
        m.b.weight.uniform_(0.5, 1.5)
        m.b.bias.uniform_(-0.5, 0.5)
        m.b.running_mean.uniform_(-0.5, 0.5)
        m.b.running_var.uniform_(0.5, 2.0)
    m.eval()
    torch.onnx.export(m, torch.zeros(2, 1, 8, 8), path, opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


QAT = ("float.onnx", "--data", "x.npy", "--labels", "y.npy", "--epochs", 1, "--batch", 16, "--seed", 1)


# --- qat --keep-qat -------------------------------------------------------------------


def case_keep_qat_external():
    """--external-data: the model's side file q.onnx.data (or NAME), the
    training graph's t.onnx.data; onnx reads both models whole, ORT runs
    them. A NAME that is the training graph's side file is refused up front."""
    x = float_model()
    qfold("qat", *QAT, "-o", "q.onnx", "--keep-qat", "t.onnx", "--external-data")
    check(locations(work("q.onnx")) == {"q.onnx.data"}, "q.onnx names %s" % locations(work("q.onnx")))
    check(locations(work("t.onnx")) == {"t.onnx.data"}, "t.onnx names %s" % locations(work("t.onnx")))
    for p in ("q.onnx", "t.onnx"):
        onnx.checker.check_model(onnx.load(work(p)))
        ort(work(p), x, p)
    no_temps()
    qfold("qat", *QAT, "-o", "q2.onnx", "--keep-qat", "t2.onnx", "--external-data=w.bin")
    check(locations(work("q2.onnx")) == {"w.bin"}, "q2.onnx names %s" % locations(work("q2.onnx")))
    check(locations(work("t2.onnx")) == {"t2.onnx.data"}, "t2.onnx names %s" % locations(work("t2.onnx")))
    check(not os.path.exists(work("q2.onnx.data")), "q2.onnx.data written besides w.bin")
    ort(work("t2.onnx"), x, "t2")
    _, err = qfold("qat", *QAT, "-o", "q3.onnx", "--keep-qat", "t3.onnx", "--external-data=t3.onnx.data", expect=2)
    error_line(err, "same file")
    check(not any(os.path.exists(work(n)) for n in ("q3.onnx", "t3.onnx", "t3.onnx.data")), "a refused qat wrote")
    no_temps()


def case_keep_qat_auto():
    """Over the limit, both models go out with external data unasked, each
    side file named after its model's final name."""
    x = float_model()
    qfold("qat", *QAT, "-o", "q.onnx", "--keep-qat", "t.onnx", env={"QFOLD_EXTERNAL_DATA_LIMIT": "1500"})
    for p in ("q.onnx", "t.onnx"):
        check(locations(work(p)) == {p + ".data"}, "%s names %s, expected %s.data" % (p, locations(work(p)), p))
        ort(work(p), x, p)
    no_temps()


def case_keep_qat_all_or_nothing():
    """A failure after the training graph was staged (the model's .tflite
    output takes no --external-data) leaves the old files as they were."""
    float_model()
    qfold("qat", *QAT, "-o", "q.onnx", "--keep-qat", "t.onnx", "--external-data")
    old = {n: open(work(n), "rb").read() for n in ("t.onnx", "t.onnx.data")}
    _, err = qfold("qat", *QAT, "-o", "q.tflite", "--keep-qat", "t.onnx", "--external-data", "--seed", 2, expect=2)
    error_line(err, "q.tflite")
    check({n: open(work(n), "rb").read() for n in old} == old, "the old training graph or its side file changed")
    check(not os.path.exists(work("q.tflite")), "q.tflite written")
    no_temps()
    for n in old:
        os.remove(work(n))
    qfold("qat", *QAT, "-o", "q.tflite", "--keep-qat", "t.onnx", "--external-data", expect=2)
    check(not os.path.exists(work("t.onnx")) and not os.path.exists(work("t.onnx.data")), "a failed qat left t.onnx")
    no_temps()


# --- every model writer -------------------------------------------------------------------


def case_auto_each_command():
    """fuse, quantize, train and finalize over the limit: the side file is
    "<output>.data", named so in the model, no temporary left."""
    x = float_model()
    qfold("qat", *QAT, "-o", "q.onnx", "--keep-qat", "t.onnx")
    np.save(work("calib.npy"), np.load(work("x.npy"))[:8])
    lim = {"QFOLD_EXTERNAL_DATA_LIMIT": "1500"}
    runs = [("fuse.onnx", ("fuse", "float.onnx", "-o", "fuse.onnx", "--verify")),
            ("quant.onnx", ("quantize", "float.onnx", "-o", "quant.onnx", "--calib", "calib.npy")),
            ("train.onnx", ("train", "float.onnx", "-o", "train.onnx", "--data", "x.npy", "--labels", "y.npy",
                            "--epochs", 1, "--batch", 16)),
            ("final.onnx", ("finalize", "t.onnx", "-o", "final.onnx", "--verify"))]
    for out, argv in runs:
        qfold(*argv, env=lim)
        check(locations(work(out)) == {out + ".data"}, "%s: %s names %s" % (argv[0], out, locations(work(out))))
        ort(work(out), x, out)
    no_temps()


def case_fuse_dropped_side():
    """fuse --verify failing with --report: the report is written, neither the
    model nor its side file."""
    float_model()
    _, err = qfold("fuse", "float.onnx", "-o", "o.onnx", "--external-data", "--verify", "--tolerance", "1e-12",
                   "--report", "r.json", expect=1)
    error_line(err, "not written")
    check(os.path.exists(work("r.json")), "no report")
    check(not os.path.exists(work("o.onnx")), "o.onnx written")
    check(not os.path.exists(work("o.onnx.data")), "o.onnx.data written without its model")
    no_temps()


# --- the trained weight range ---------------------------------------------------------------


def finalize_report(model, tag):
    out, _ = qfold("finalize", model, "-o", tag + ".out.onnx", "--report", tag + ".json")
    with open(work(tag + ".json")) as f:
        ws = json.load(f)["weights"]
    check(ws, "%s: no weights in the report" % tag)
    return out, ws


def torch_qat_export():
    """A QAT model as PyTorch 1.13 exports it (weights fake-quantized on
    [-128, 127], the only range its exporter takes) to torch_qat.onnx,
    through tests/ref/refcache.py (computed once per `make test`)."""
    refcache.call(torch_qat_export_to, work("torch_qat.onnx"), base=ARGS.work)


def torch_qat_export_to(path):
    torch = torch_setup()
    import torch.nn as nn
    from torch.ao.quantization import (FakeQuantize, MovingAverageMinMaxObserver,
                                       MovingAveragePerChannelMinMaxObserver, QConfig, QConfigMapping)
    from torch.ao.quantization.quantize_fx import prepare_qat_fx
    act = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                 dtype=torch.quint8, qscheme=torch.per_tensor_affine)
    w = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                               dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)
    torch.manual_seed(0)
    torch.backends.quantized.engine = "qnnpack"
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    x = torch.randn(16, 1, 8, 8)
    model.train()
    prepared = prepare_qat_fx(model, QConfigMapping().set_global(QConfig(activation=act, weight=w)), (x[:2],))
    prepared(x)
    prepared.apply(torch.ao.quantization.disable_observer)
    prepared.eval()
    with torch.no_grad():
        torch.onnx.export(prepared, x[:1], path, opset_version=13, input_names=["x"],
                          output_names=["y"])


def case_finalize_range():
    """finalize of a --keep-qat file (neutron: trained at [-127, 127]) reports
    no weight differing from the target; of the same file without the record,
    and of a PyTorch export, every weight at [-128, 127] differs."""
    float_model()
    qfold("qat", *QAT, "-o", "q.onnx", "--keep-qat", "t.onnx")
    meta = {p.key: p.value for p in onnx.load(work("t.onnx")).metadata_props}
    check(meta.get("qfold.weight_range") == "-127,127", "t.onnx metadata_props: %s" % meta)
    out, ws = finalize_report("t.onnx", "keep")
    check(" 0 of %d weights differ" % len(ws) in out, "finalize of the keep-qat file:\n" + out)
    check(all(w["range"] == [-127, 127] and not w["differs_from_target"] for w in ws), "keep-qat report: %s" % ws)
    m = onnx.load(work("t.onnx"))
    del m.metadata_props[:]
    onnx.save(m, work("norecord.onnx"))
    out, ws = finalize_report("norecord.onnx", "norecord")
    check(all(w["range"] == [-128, 127] and w["differs_from_target"] for w in ws), "no record: %s" % ws)
    torch_qat_export()
    out, ws = finalize_report("torch_qat.onnx", "torch")
    check("%d of %d weights differ" % (len(ws), len(ws)) in out, "finalize of the torch export:\n" + out)
    check(all(w["range"] == [-128, 127] and w["differs_from_target"] for w in ws), "torch report: %s" % ws)
    for bad in ("-200,127", "-127", "abc", "1,127", "-127,127,1"):
        m = onnx.load(work("t.onnx"))
        m.metadata_props[0].value = bad
        onnx.save(m, work("bad.onnx"))
        _, err = qfold("finalize", "bad.onnx", "-o", "bad.out.onnx", expect=2)
        error_line(err, "qfold.weight_range", "'%s'" % bad)
        check(not os.path.exists(work("bad.out.onnx")), "finalize of a bad record wrote its output")


# --- fuse --verify sized by declared shapes ------------------------------------------------


def reshape_model(path, declared, extra=()):
    """x [N, 3, H, W] -> Conv 3x3 (no pads) -> BN -> Relu r -> Reshape to [1, 64]:
    only H = W = 6 fits the Reshape (no power of two does), which r's
    value_info [1, 4, 4, 4] says."""
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    inits = [nh.from_array(f(4, 3, 3, 3), "w"), nh.from_array(f(4), "b"),
             nh.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "sc"), nh.from_array(f(4), "sh"),
             nh.from_array(f(4) * 0.1, "mu"), nh.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
             nh.from_array(np.array([1, 64], np.int64), "shape")]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             h.make_node("BatchNormalization", ["c", "sc", "sh", "mu", "var"], ["n"], name="bn"),
             h.make_node("Relu", ["n"], ["r"], name="relu"), h.make_node("Reshape", ["r", "shape"], ["y"], name="rs")]
    vi = [h.make_tensor_value_info("r", T.FLOAT, declared)] + list(extra)
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 64])], inits, value_info=vi)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, work(path))


def case_verify_declared():
    """The sizes the value_info pins (H = W = 6) verify the fold; without it
    no size tried fits (exit 1); value_info contradicting itself (r = Relu(n)
    declared 4x4 and 5x5) is exit 1 naming --verify-data, the report written."""
    reshape_model("rs.onnx", [1, 4, 4, 4])
    out, _ = qfold("fuse", "rs.onnx", "-o", "rs.f.onnx", "--verify")
    check("ok" in out and "FAILED" not in out, "rs: %s" % out)
    y = ort(work("rs.f.onnx"), np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32), "rs")
    check(y.shape == (1, 64), "ORT on the fused model: %s" % (y.shape,))
    reshape_model("free.onnx", [1, 4, "h", "w"])
    _, err = qfold("fuse", "free.onnx", "-o", "free.f.onnx", "--verify", expect=1)
    error_line(err, "--verify-data")
    reshape_model("bad.onnx", [1, 4, 4, 4], [h.make_tensor_value_info("n", T.FLOAT, [1, 4, 5, 5])])
    _, err = qfold("fuse", "bad.onnx", "-o", "bad.f.onnx", "--verify", "--report", "bad.json", expect=1)
    error_line(err, "--verify-data", "declare")
    check(not os.path.exists(work("bad.f.onnx")), "bad: model written")
    with open(work("bad.json")) as f:
        rep = json.load(f)["verify"]
    check(rep.get("ok") is False and "declare" in rep.get("error", ""), "bad: report %s" % rep)


if __name__ == "__main__":
    sys.exit(qfcli.main("model_outputs", globals(), paths=("--work",), options=("--node", "--ort-run")))
