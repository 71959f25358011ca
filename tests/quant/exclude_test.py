#!/usr/bin/python3
"""`qfold quantize --exclude` and the local SQNR of the per-layer debugger
(registered by tests/quant/exclude.cmake).

    exclude_test.py --qfold BIN --root DIR --work DIR CASE

Cases:
  quantize  the bundled Fashion CNN with one Conv excluded by name and every
            Gemm by op type: in the written file exactly those nodes read
            float weights (an initializer, not a DequantizeLinear) and sit
            between DequantizeLinear and QuantizeLinear, every other Conv /
            Gemm is quantized; the summary, the report's left_float (reason
            "excluded") and the file's metadata qfold.excluded name exactly
            them; ONNX Runtime runs the file and agrees with qfold's run of it
            and with the float model; `qfold export` refuses it naming the
            node and saying the user excluded it.
  errors    an entry that matches nothing, an empty entry and a
            BatchNormalization (folded away before quantization): exit 2, one
            line naming it, nothing written.
  qat       `qfold qat --exclude Gemm` (one short epoch): the Gemms keep float
            weights in the int8 model, the convs are quantized, the metadata
            names them.
  local     a CNN (PyTorch) whose second conv has one huge weight outlier,
            quantized with per-tensor conv weights: that layer's local SQNR is
            the worst of all (first in the summary's "worst local SQNR" and the
            report's worst_local_sqnr), the layers after it keep a good local
            SQNR but a lower cumulative one; its local SQNR equals the one
            computed here in PyTorch from the written file (the layer on the
            float model's input, the file's int8 weights, bias and output
            quantization).
  local_equalized
            the same CNN without the outlier, c1's output channels scaled
            apart (channel c times k_c, log-uniform in [1/16, 16], c2's input
            column c times 1/k_c: the float function unchanged), quantized
            with --set equalize=all, which rebalances c1 / c2 and so rescales
            c1's output channels: the output's SQNR gains over equalize=off,
            and every value's cumulative and local SQNR in the report is at
            least 20 dB (compared with the float model as folded rather than
            as equalized, c1's rescaled output read a few dB).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
from quant_util import fashion_calib  # noqa: E402
from qfcli import Skip, check, error_line, run_qfold  # noqa: E402
import qfcli  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcache  # noqa: E402

ARGS = None  # set by qfcli.main


def work(name):
    return os.path.join(ARGS.work, name)


def root(*parts):
    return os.path.join(ARGS.root, *parts)


def qfold(*argv, expect=0):
    _, out, err = run_qfold(ARGS.qfold, argv, expect=expect, timeout=600)
    return out, err


def need(*modules):
    for m in modules:
        try:
            __import__(m)
        except ImportError as e:
            raise Skip("python module %s missing: %s" % (m, e))


def ort_run(model, x, opt="disabled"):
    """ONNX Runtime's first output of `model` on x (tests/ref/ort_run.js)."""
    np.save(work("ort_in.npy"), x)
    out = work("ort_out")
    os.makedirs(out, exist_ok=True)
    p = subprocess.run(["node", root("tests", "ref", "ort_run.js"), model, out, work("ort_in.npy")],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, QF_ORT_OPT=opt))
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr))
    return np.load(os.path.join(out, "out0.npy"))


def sqnr(ref, x):
    ref, x = ref.astype(np.float64), x.astype(np.float64)
    return 10 * np.log10((ref ** 2).sum() / max(((ref - x) ** 2).sum(), 1e-30))


def layers(model):
    """{node name: (op_type, weight from a DequantizeLinear?, input's producer, output's readers)}
    for every Conv / Gemm of the file; and its metadata_props."""
    import onnx
    m = onnx.load(model)
    onnx.checker.check_model(m)
    prod = {o: n for n in m.graph.node for o in n.output}
    out = {}
    for n in m.graph.node:
        if n.op_type not in ("Conv", "Gemm"):
            continue
        w = prod.get(n.input[1])
        x = prod.get(n.input[0])
        readers = [u.op_type for u in m.graph.node if n.output[0] in u.input]
        out[n.name] = (n.op_type, w is not None and w.op_type == "DequantizeLinear",
                       x.op_type if x is not None else None, readers)
    return out, {p.key: p.value for p in m.metadata_props}


def quantize(model, out, calib, *extra):
    report = out + ".json"
    stdout, _ = qfold("quantize", model, "-o", out, "--calib", calib, "--report", report, *extra)
    with open(report) as f:
        return stdout, json.load(f)


FASHION_CONV = "/features/features.6/Conv"


def case_quantize():
    need("onnx")
    model = root("examples", "fashion_mnist", "fashion_cnn.onnx")
    np.save(work("calib.npy"), fashion_calib(64, 1))
    out = work("ex.onnx")
    stdout, rep = quantize(model, out, work("calib.npy"), "--exclude", FASHION_CONV, "--exclude", "Gemm")
    want = {FASHION_CONV, "/head/head.0/Gemm", "/head/head.3/Gemm"}
    ls, meta = layers(out)
    check(len(ls) == 7, "layers in the file: %r" % ls)
    floats = {name for name, (_, q, _, _) in ls.items() if not q}
    check(floats == want, "float layers in the file %r, want %r" % (sorted(floats), sorted(want)))
    # QDQ around each excluded node: its input dequantized, its output
    # quantized (the last Gemm writes the graph output in float).
    for name in want:
        op, _, src, readers = ls[name]
        check(src == "DequantizeLinear", "%s reads %s, not a DequantizeLinear" % (name, src))
        check(readers in (["QuantizeLinear"], []), "%s is read by %r" % (name, readers))
    left = {(e["node"], e["reason"]) for e in rep["left_float"]}
    check(left == {(n, "excluded") for n in want}, "report left_float: %r" % rep["left_float"])
    check(set(meta.get("qfold.excluded", "").split("\n")) == want, "metadata: %r" % meta)
    for n in want:
        check("'%s': excluded" % n in stdout, "summary lacks %s:\n%s" % (n, stdout))
    check(rep["counts"]["weights"] == 4, "counts: %r" % rep["counts"])
    # ONNX Runtime runs the file: as written (DQ -> float -> Q) it agrees with
    # qfold's float simulation of it, and both stay close to the float model.
    x = fashion_calib(32, 2)
    ort = ort_run(out, x)
    ort_float = ort_run(model, x)
    np.save(work("x.npy"), x)
    qfold("run", out, "-i", work("x.npy"), "-o", work("y.npy"), "--simulate")
    mine = np.load(work("y.npy"))
    check(sqnr(ort, mine) > 40, "qfold --simulate vs ORT on the QDQ file: %.1f dB" % sqnr(ort, mine))
    check(sqnr(ort_float, ort) > 20, "the int8 file vs the float model (ORT): %.1f dB" % sqnr(ort_float, ort))
    ort_run(out, x, "all")  # and with ORT's integer kernels around the float nodes
    print("ORT: qfold --simulate %.1f dB, vs float %.1f dB" % (sqnr(ort, mine), sqnr(ort_float, ort)))
    # The export keeps no float island: it refuses the node, saying why.
    _, err = qfold("export", out, "-o", work("ex.tflite"), expect=2)
    error_line(err, "'%s'" % FASHION_CONV, "excluded by the user")
    check(not os.path.exists(work("ex.tflite")), "export wrote a file")
    # Without --exclude nothing is left float and nothing recorded.
    _, rep = quantize(model, work("all.onnx"), work("calib.npy"))
    ls, meta = layers(work("all.onnx"))
    check(all(q for _, q, _, _ in ls.values()) and "qfold.excluded" not in meta and not rep["left_float"],
          "without --exclude: %r %r" % (ls, meta))


def case_errors():
    model = root("examples", "fashion_mnist", "fashion_cnn.onnx")
    np.save(work("calib.npy"), fashion_calib(16, 1))
    out = work("e.onnx")
    for entry, needles in (("Conv,NoSuchNode", ["'NoSuchNode'", "neither the name nor the op type"]),
                           ("Gemm,", ["--exclude", "empty"]),
                           ("BatchNormalization", ["'BatchNormalization'", "folded"])):
        _, err = qfold("quantize", model, "-o", out, "--calib", work("calib.npy"), "--exclude", entry, expect=2)
        error_line(err, *needles)
        check(not os.path.exists(out), "--exclude %s: a file was written" % entry)


def case_qat():
    need("onnx")
    model = root("examples", "fashion_mnist", "fashion_cnn.onnx")
    np.save(work("x.npy"), fashion_calib(128, 3))
    np.save(work("y.npy"), np.random.default_rng(3).integers(0, 10, 128).astype(np.int64))
    out = work("qat.onnx")
    stdout, _ = qfold("qat", model, "-o", out, "--data", work("x.npy"), "--labels", work("y.npy"), "--epochs", "1",
                      "--batch", "64", "--calib-count", "64", "--exclude", "Gemm")
    want = {"/head/head.0/Gemm", "/head/head.3/Gemm"}
    ls, meta = layers(out)
    floats = {name for name, (_, q, _, _) in ls.items() if not q}
    check(floats == want and len(ls) == 7, "qat: float layers %r of %r" % (sorted(floats), sorted(ls)))
    check(set(meta.get("qfold.excluded", "").split("\n")) == want, "qat metadata: %r" % meta)
    check("left float (excluded):" in stdout, "qat summary:\n" + stdout)
    _, err = qfold("qat", model, "-o", work("no.onnx"), "--data", work("x.npy"), "--labels", work("y.npy"),
                   "--epochs", "1", "--exclude", "NoSuchNode", expect=2)
    error_line(err, "'NoSuchNode'")
    check(not os.path.exists(work("no.onnx")), "qat --exclude NoSuchNode wrote a file")


def outlier_export(path):
    """PATH: case_local's model (computed once per `make test`: refcache)."""
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1)
            self.c2 = nn.Conv2d(16, 16, 3, padding=1)
            self.c3 = nn.Conv2d(16, 16, 3, padding=1)
            self.c4 = nn.Conv2d(16, 16, 1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = torch.relu(self.c2(x))
            x = torch.relu(self.c3(x))
            x = torch.relu(self.c4(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():
        # one weight of one output channel 60x the layer's largest: with a
        # per-tensor scale every other weight of c2 gets a few int8 steps
        net.c2.weight[5, 3, 1, 1] = 60 * net.c2.weight.abs().max()
    net.eval()
    torch.onnx.export(net, torch.zeros(1, 3, 12, 12), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


def skewed_export(path):
    """PATH: case_local_equalized's model (refcache)."""
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1)
            self.c2 = nn.Conv2d(16, 16, 3, padding=1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = torch.relu(self.c2(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    net = Net()
    k = torch.exp(torch.empty(16).uniform_(-np.log(16), np.log(16)))
    with torch.no_grad():
        net.c1.weight.mul_(k[:, None, None, None])
        net.c1.bias.mul_(k)
        net.c2.weight.div_(k[None, :, None, None])
    net.eval()
    torch.onnx.export(net, torch.zeros(1, 3, 12, 12), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})


def case_local_equalized():
    need("torch", "onnx")
    model = work("skewed.onnx")
    refcache.call(skewed_export, model, base=ARGS.work)
    x = np.random.default_rng(0).standard_normal((64, 3, 12, 12)).astype(np.float32)
    np.save(work("calib_eq.npy"), x)
    figures = {}
    for rule in ("off", "all"):
        stdout, rep = quantize(model, work("q_eq_%s.onnx" % rule), work("calib_eq.npy"), "--set", "equalize=" + rule)
        print(stdout)
        by = {e["value"]: e for e in rep["sqnr_db"]}
        check("y" in by, "no SQNR of the graph output: %r" % sorted(by))
        figures[rule] = by
    # Balanced, every value of the equalized model is within 20 dB of float
    # (off: 15.6 dB at c2's output, the skewed grid's loss; compared with the
    # float model as folded, c1's equalized output read 0-5 dB).
    for v, e in figures["all"].items():
        for key in ("db", "local_db"):
            if e.get(key) is not None:
                check(e[key] >= 20, "equalize=all: %s's %s %.1f dB (want >= 20): %r" % (v, key, e[key], e))
    # equalize=all changed the model (c1's weights in the file differ) and
    # the output's SQNR (it balances the pair: more, not less)
    check(figures["all"]["y"]["db"] > figures["off"]["y"]["db"] + 3,
          "equalize=all: output SQNR %.1f dB, off %.1f dB" % (figures["all"]["y"]["db"], figures["off"]["y"]["db"]))


def case_local():
    need("torch", "onnx")
    import onnx
    import torch
    from onnx import numpy_helper

    model = work("outlier.onnx")
    refcache.call(outlier_export, model, base=ARGS.work)
    x = np.random.default_rng(0).standard_normal((64, 3, 12, 12)).astype(np.float32)
    np.save(work("calib.npy"), x)
    out = work("q.onnx")
    stdout, rep = quantize(model, out, work("calib.npy"), "--set", "conv-weights=per-tensor",
                           "--set", "equalize=off")
    print(stdout)
    # The written file: each conv's int8 weights, bias and the Q after its Relu.
    m = onnx.load(out)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    prod = {o: n for n in m.graph.node for o in n.output}
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    check(len(convs) == 4, "convs: %r" % [n.name for n in convs])

    def deq(v):
        dq = prod[v]
        q, s = inits[dq.input[0]].astype(np.float64), inits[dq.input[1]].astype(np.float64)
        z = inits[dq.input[2]].astype(np.float64) if len(dq.input) > 2 else 0.0
        return ((q - z) * s).astype(np.float32)

    outs = []  # per conv: the value its Relu writes (what SQNR is reported on)
    for n in convs:
        relu = [u for u in m.graph.node if n.output[0] in u.input][0]
        check(relu.op_type == "Relu", "%s is read by %s" % (n.name, relu.op_type))
        outs.append(relu.output[0])
    by = {s["value"]: s for s in rep["sqnr_db"]}
    check(all(o in by for o in outs), "sqnr entries %r lack %r" % (sorted(by), outs))
    local = [by[o]["local_db"] for o in outs]
    cum = [by[o]["db"] for o in outs]
    print("cumulative %s\nlocal      %s" % (cum, local))
    # The culprit, c2: the worst local SQNR of all, named first.
    finite = [s["local_db"] for s in rep["sqnr_db"] if s["local_db"] is not None]
    check(local[1] == min(finite), "c2's local SQNR %.1f is not the worst: %r" % (local[1], rep["sqnr_db"]))
    check(rep["worst_local_sqnr"][0] == outs[1] and len(rep["worst_local_sqnr"]) == 3,
          "worst_local_sqnr %r, want %s first" % (rep["worst_local_sqnr"], outs[1]))
    check(("worst local SQNR: %s" % outs[1]) in stdout, "summary:\n" + stdout)
    # Its heirs: a good local SQNR (>= 10 dB above c2's), yet a cumulative one
    # far below it: the loss comes from c2.
    for k in (2, 3):
        check(local[k] >= local[1] + 10 and cum[k] <= local[k] - 10,
              "conv %d: local %.1f, cumulative %.1f (c2 local %.1f)" % (k + 1, local[k], cum[k], local[1]))
    # c2's local SQNR from the file, in PyTorch: the float model's input to
    # c2, the file's dequantized weights and bias, ReLU, the file's output
    # quantization (round half to even, int8), against the float output.
    # (the float weights from the float file: the reference cache restores
    # only the file the export wrote)
    fm = onnx.load(model)
    sd = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in fm.graph.initializer}
    check(all(k in sd for k in ("c1.weight", "c1.bias", "c2.weight", "c2.bias")),
          "the float model's initializers: %r" % sorted(sd))
    xt = torch.from_numpy(x)
    with torch.no_grad():
        a1 = torch.relu(torch.nn.functional.conv2d(xt, sd["c1.weight"], sd["c1.bias"], padding=1))
        a2 = torch.relu(torch.nn.functional.conv2d(a1, sd["c2.weight"], sd["c2.bias"], padding=1))
        c2 = convs[1]
        w, b = torch.from_numpy(deq(c2.input[1])), torch.from_numpy(deq(c2.input[2]))
        y = torch.relu(torch.nn.functional.conv2d(a1, w, b, padding=1)).numpy().astype(np.float64)
    qn = [u for u in m.graph.node if u.op_type == "QuantizeLinear" and u.input[0] == outs[1]][0]
    s, z = float(inits[qn.input[1]]), float(inits[qn.input[2]])
    yq = (np.clip(np.round(y / s) + z, -128, 127) - z) * s
    ref = sqnr(a2.numpy(), yq)
    print("c2 local SQNR: qfold %.3f dB, PyTorch from the file %.3f dB" % (local[1], ref))
    check(abs(ref - local[1]) < 0.05, "c2 local SQNR %.3f dB, PyTorch %.3f dB" % (local[1], ref))


if __name__ == "__main__":
    sys.exit(qfcli.main("exclude", globals(), paths=("--root", "--work")))
