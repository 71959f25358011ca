#!/usr/bin/python3
"""AdaRound (src/quant/adaround.c): `qfold quantize --set weight-rounding=adaround`.

    adaround_test.py --qfold BIN --root DIR --work DIR CASE

Cases:
  layers  a small PyTorch CNN (Conv -> Relu, ConvTranspose -> Relu, Conv,
          Flatten, Gemm -> Relu, Gemm; no BatchNorm, so that the float model
          is the file PyTorch wrote) quantized for neutron with
          weight-rounding=nearest and =adaround (twice with one seed): the two runs with one seed write byte-identical
          models; every weight differs from nearest rounding by at most one
          step, every layer by at least one weight, and nothing else in the
          file differs (scales, biases, activations' qparams); the report and
          the progress lines give each layer's reconstruction error, AdaRound's
          below nearest's. Then ONNX Runtime, independently: each layer's
          output on the calibration samples, its input as the AdaRounded model
          computes it, with AdaRound's int8 weights and with nearest's, against
          the float model's output of that layer (after the fused Relu):
          AdaRound's squared error is below nearest's on every layer. The
          written model runs in ONNX Runtime, its outputs' SQNR against float
          not below nearest rounding's by more than 0.5 dB.
  errors  bad values of weight-rounding, adaround-iters, adaround-reg and
          --seed exit 2 with one line naming the option; `qfold qat` refuses
          weight-rounding=adaround (exit 2) before any work.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import qfcli  # noqa: E402
from qfcli import check, error_line, run_qfold  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcache  # noqa: E402

ARGS = None
ITERS = 300      # Adam steps per layer: enough to move every layer, seconds in all
SAMPLES = 128


def work(*p):
    return os.path.join(ARGS.work, *p)


def export_model(path):
    import torch
    import torch.nn as nn
    torch.manual_seed(7)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.t2 = nn.ConvTranspose2d(8, 6, 2, stride=2)
            self.c3 = nn.Conv2d(6, 8, 3, stride=2, padding=1)
            self.fc1 = nn.Linear(8 * 6 * 6, 24)
            self.fc2 = nn.Linear(24, 10)

            # He-initialized (variance kept through each Relu): activations of
            # the order of 1, as in a trained, BatchNorm-folded network (the
            # reconstruction loss and the regulariser then balance as AIMET's
            # defaults assume)
            for mod in (self.c1, self.t2, self.c3, self.fc1, self.fc2):
                nn.init.kaiming_normal_(mod.weight, nonlinearity="relu")
                nn.init.uniform_(mod.bias, -0.5, 0.5)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            y = torch.relu(self.t2(y))
            y = self.c3(y)
            y = torch.relu(self.fc1(torch.flatten(y, 1)))
            return self.fc2(y)

    torch.onnx.export(Net().eval(), torch.zeros(1, 3, 12, 12), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}})


def calib_data():
    rng = np.random.RandomState(11)
    return rng.uniform(-1, 1, (SAMPLES, 3, 12, 12)).astype(np.float32)


def ort(model, x, out, nout):
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "x.npy"), x)
    p = subprocess.run(["node", os.path.join(ARGS.root, "tests", "ref", "ort_run.js"), model, out,
                        os.path.join(out, "x.npy")], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr))
    return [np.load(os.path.join(out, "out%d.npy" % i)) for i in range(nout)]


def with_outputs(src, dst, names, replace=None):
    """src with `names` as graph outputs (after its own) and the initializers
    in `replace` ({name: array}) replaced, into dst."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(src)
    for n in names:
        m.graph.output.append(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    for i, init in enumerate(m.graph.initializer):
        if replace and init.name in replace:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(replace[init.name], init.name))
    onnx.save(m, dst)
    return len(m.graph.output)


def inits(path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    return m, {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def quantize(model, out, *extra):
    rep = out + ".json"
    _, so, se = run_qfold(ARGS.qfold, ["quantize", model, "-o", out, "--calib", work("calib.npy"), "--report", rep]
                          + list(extra), expect=0, timeout=600)
    return so, se, json.load(open(rep))


def snr(ref, y):
    return 10 * np.log10(float((ref.astype(np.float64) ** 2).sum()) / max(1e-30, float(((ref - y) ** 2).sum())))


def need_torch_onnx():
    import importlib.util
    for mod in ("torch", "onnx"):
        if importlib.util.find_spec(mod) is None:
            raise qfcli.Skip("%s is not installed" % mod)


def case_layers():
    need_torch_onnx()
    model = work("m.onnx")
    refcache.call(export_model, model, base=ARGS.work)
    np.save(work("calib.npy"), calib_data())
    base = ["--set", "equalize=off", "--batch", "32"]
    ada = base + ["--set", "weight-rounding=adaround", "--set", "adaround-iters=%d" % ITERS]
    _, _, rn = quantize(model, work("near.onnx"), *base)
    so, se, ra = quantize(model, work("ada.onnx"), *(ada + ["--seed", "5"]))
    quantize(model, work("ada2.onnx"), *(ada + ["--seed", "5"]))
    print(se.strip())
    check(rn["weight_rounding"] == "nearest" and rn["adaround"] is None, "nearest report: %r" % rn["adaround"])
    # Reproducible for a seed: the same bytes.
    a1, a2 = open(work("ada.onnx"), "rb").read(), open(work("ada2.onnx"), "rb").read()
    check(a1 == a2, "two runs with --seed 5 wrote different models")

    # The report and the progress lines: every layer rounded, its error lower.
    layers = ra["adaround"]["layers"]
    check(ra["weight_rounding"] == "adaround" and ra["adaround"]["iterations"] == ITERS, "report: %r" % ra["adaround"])
    check(len(layers) == 5, "AdaRound layers: %r" % [l["node"] for l in layers])
    lines = [l for l in se.splitlines() if l.startswith("adaround ")]
    check(len(lines) == 5, "progress lines:\n" + se)
    for l, line in zip(layers, lines):
        check("skipped" not in l and l["iterations"] == ITERS and l["samples"] == SAMPLES, "layer %r" % l)
        check(l["error_adaround"] < l["error_nearest"] and l["kept"],
              "%s: AdaRound's error %.6g is not below nearest's %.6g" % (l["node"], l["error_adaround"],
                                                                         l["error_nearest"]))
        m = re.search(r"reconstruction error (\S+) -> (\S+) ", line)
        check(l["node"] in line and m and "%d iterations" % ITERS in line, "progress line: %s" % line)
        check(np.isclose(float(m.group(1)), l["error_nearest"], rtol=1e-3)
              and np.isclose(float(m.group(2)), l["error_adaround"], rtol=1e-3), "progress line: %s" % line)
    check("adaround    5 of 5 layers rounded by AdaRound" in so, "summary:\n" + so)
    # The summary's time line: AdaRound's phase, the phases adding up to the total.
    m = re.search(r"time: (.*)", so)
    check(m, "no time line:\n" + so)
    t = dict((k, float(v)) for k, v in re.findall(r"([a-z]+) ([0-9.]+) ms", m.group(1)))
    phases = ("load", "passes", "calibrate", "equalize", "convert", "adaround", "sqnr", "save")
    check(all(p in t for p in phases) and t["adaround"] > 0, "time line: %r" % t)
    check(abs(sum(t[p] for p in phases) - t["total"]) <= 0.02 * t["total"] + 5.0, "phases: %r" % t)

    # The files: only the int8 weights differ, each by at most one step.
    _, wn = inits(work("near.onnx"))
    ma, wa = inits(work("ada.onnx"))
    check(sorted(wn) == sorted(wa), "the two models' initializers differ in names")
    qweights = {l["weight"] for l in layers}
    for name in wn:
        if name in qweights:
            check(wa[name].dtype == np.int8, "%s is %s" % (name, wa[name].dtype))
            d = wa[name].astype(np.int32) - wn[name].astype(np.int32)
            check(np.abs(d).max() <= 1, "%s: a weight moved %d steps from nearest" % (name, np.abs(d).max()))
            changed = int((d != 0).sum())
            rec = [l for l in layers if l["weight"] == name][0]
            check(changed >= 1 and changed == rec["changed"],
                  "%s: %d weights changed, the report says %d" % (name, changed, rec["changed"]))
            print("%-34s %5d of %5d weights rounded the other way; error %.5g -> %.5g"
                  % (name, changed, d.size, rec["error_nearest"], rec["error_adaround"]))
        else:
            check(np.array_equal(wn[name], wa[name]), "initializer %s differs from nearest's" % name)

    # ONNX Runtime, independently: per layer, the same input (the AdaRounded
    # model's), AdaRound's weights vs nearest's, against the float layer.
    layer_nodes = [n for n in ma.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm")]
    check(len(layer_nodes) == 5, "layers in the file: %r" % [n.name for n in layer_nodes])
    users = {}
    for n in ma.graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)

    def compared(n):
        """The value AdaRound compares: the layer's output, after a fused Relu."""
        u = users.get(n.output[0], [])
        return u[0].output[0] if len(u) == 1 and u[0].op_type == "Relu" else n.output[0]

    x = calib_data()
    fm = onnx_nodes(model)
    targets, names_f = {}, []
    for n in layer_nodes:
        f = fm[n.name]
        fu = [m for m in onnx_nodes(model).values() if f.output[0] in m.input]
        names_f.append(fu[0].output[0] if compared(n) != n.output[0] else f.output[0])
    k = with_outputs(model, work("f_out.onnx"), names_f)
    outs = ort(model, x, work("ort_f0"), 1)
    fo = ort(work("f_out.onnx"), x, work("ort_f"), k)
    for n, v in zip(layer_nodes, fo[k - len(names_f):]):
        targets[n.name] = v
    names_q = [compared(n) for n in layer_nodes]
    k = with_outputs(work("ada.onnx"), work("a_out.onnx"), names_q)
    ao = ort(work("a_out.onnx"), x, work("ort_a"), k)
    y_ada = ao[0]
    ya = dict(zip([n.name for n in layer_nodes], ao[k - len(names_q):]))
    for n in layer_nodes:
        wname = [m for m in ma.graph.node if m.output[0] == n.input[1]][0].input[0]
        k = with_outputs(work("ada.onnx"), work("n_out.onnx"), [compared(n)], {wname: wn[wname]})
        yn = ort(work("n_out.onnx"), x, work("ort_n_" + re.sub(r"\W", "_", n.name)), k)[-1]
        t = targets[n.name]
        e_ada, e_near = float(((ya[n.name] - t) ** 2).mean()), float(((yn - t) ** 2).mean())
        rec = [l for l in layers if l["node"] == n.name][0]
        print("ORT %-28s squared error nearest %.5g, AdaRound %.5g (qfold: %.5g -> %.5g)"
              % (n.name, e_near, e_ada, rec["error_nearest"], rec["error_adaround"]))
        check(e_ada < e_near, "%s: in ONNX Runtime AdaRound's error %.6g is not below nearest's %.6g"
              % (n.name, e_ada, e_near))
        # qfold measured the same thing (its kernels against ORT's: float rounding)
        check(np.isclose(e_near, rec["error_nearest"], rtol=2e-2) and np.isclose(e_ada, rec["error_adaround"],
                                                                                 rtol=2e-2),
              "%s: ORT's errors %.6g / %.6g, qfold's %.6g / %.6g" % (n.name, e_near, e_ada, rec["error_nearest"],
                                                                    rec["error_adaround"]))
    # The whole model in ONNX Runtime.
    y_near = ort(work("near.onnx"), x, work("ort_near"), 1)[0]
    check(np.all(np.isfinite(y_ada)), "ONNX Runtime: non-finite outputs")
    s_ada, s_near = snr(outs[0], y_ada), snr(outs[0], y_near)
    print("outputs' SQNR against float: nearest %.2f dB, AdaRound %.2f dB" % (s_near, s_ada))
    check(s_ada >= s_near - 0.5, "AdaRound's outputs: SQNR %.2f dB, nearest's %.2f dB" % (s_ada, s_near))


def onnx_nodes(path):
    import onnx
    return {n.name: n for n in onnx.load(path).graph.node}


def case_errors():
    need_torch_onnx()
    model = work("m.onnx")
    refcache.call(export_model, model, base=ARGS.work)
    np.save(work("calib.npy"), calib_data())
    base = ["quantize", model, "-o", work("bad.onnx"), "--calib", work("calib.npy")]
    for argv, needle in ((["--set", "weight-rounding=up"], "weight-rounding"),
                         (["--set", "adaround-iters=0"], "adaround-iters"),
                         (["--set", "adaround-iters=ten"], "adaround-iters"),
                         (["--set", "adaround-reg=-1"], "adaround-reg"),
                         (["--set", "adaround-reg=nan"], "adaround-reg"),
                         (["--seed", "-3"], "--seed"),
                         (["--seed", "x"], "--seed")):
        _, so, se = run_qfold(ARGS.qfold, base + argv, expect=2)
        error_line(se, needle)
        check(not os.path.exists(work("bad.onnx")), "a model was written for %r" % argv)
    data = work("labels.npy")
    np.save(data, np.zeros(SAMPLES, dtype=np.int64))
    _, _, se = run_qfold(ARGS.qfold, ["qat", model, "-o", work("bad.onnx"), "--data", work("calib.npy"),
                                      "--labels", data, "--set", "weight-rounding=adaround"], expect=2)
    error_line(se, "weight-rounding=adaround")
    check(not os.path.exists(work("bad.onnx")), "qat wrote a model")


if __name__ == "__main__":
    sys.exit(qfcli.main("adaround", globals(), paths=("--root", "--work")))
