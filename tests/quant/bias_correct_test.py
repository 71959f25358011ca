#!/usr/bin/python3
"""Bias correction (`qfold quantize --set bias-correction=...`, src/quant/bias_correct.c).

    bias_correct_test.py --qfold BIN --root DIR --work DIR CASE

The model: a depthwise-separable CNN exported by PyTorch (a stem conv, two
depthwise + pointwise blocks, GlobalAveragePool, a Linear without a bias:
MatMul in the file), its BatchNorms kept in the file for qfold to fold
(TrainingMode.PRESERVE), random BatchNorm statistics with channels scaled
apart by up to 8x, quantized for neutron with per-tensor conv weights and
equalization off (so that the quantized model's layer outputs are the float
model's values under the same names), where PTQ shifts the layer outputs'
means per channel.

Cases:
  means     each layer's output mean per channel, int8 model (as ONNX Runtime
            runs the written QDQ file, the layer outputs added as graph
            outputs) minus float model (ONNX Runtime on the original file,
            BatchNorm unfolded), on the calibration data: without correction
            the largest is large; with bias-correction=empirical every channel
            is within BOUND (of the channel's float std) of float, and the
            largest is at least FACTOR times smaller than without. ONNX
            Runtime runs the corrected file as written, and its outputs are
            closer to float's (SQNR) than the uncorrected file's, on held-out
            data too.
  cli       the three values: off (the default) writes the file the option's
            absence writes and reports null; empirical prints its summary line,
            corrects every Conv / Gemm (the Linear without a bias gets one) and
            reports the figures; auto keeps it exactly when the graph outputs'
            SQNR it reports improved; a bad value exits 2 with one error line
            naming the option and writes nothing.
  analytical  the data-free form, on the model with its BatchNorm statistics
            re-estimated on the calibration data (PyTorch, cumulative
            average), so that they describe the layers' real inputs: every
            layer after a BatchNorm (+ ReLU, + GlobalAveragePool and Flatten
            for the Linear) is corrected, the stem (its input is the data)
            is not; the correction each takes from its int32 bias (the file
            against bias-correction=off's) removes most of the mean output
            error its own weights' rounding causes on the data: (W_q - W)
            applied to the float model's real inputs of the layer, by
            PyTorch's conv2d / matmul (padding included), W the weights of
            `qfold fuse`'s fold. The file runs in ONNX Runtime.
  tflite    the corrected models (empirical, analytical) export to int8
            TFLite (`qfold export`), and `qfold quantize -o X.tflite` with
            the option writes one too; the export changes only int32 biases
            against the uncorrected model's export.
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import qfcli  # noqa: E402
from qfcli import check, run_qfold  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcache  # noqa: E402

ARGS = None
SCHEMA_PY = None
SETS = ["--set", "conv-weights=per-tensor", "--set", "equalize=off"]


def work(*p):
    return os.path.join(ARGS.work, *p)


def export_model(path, calib=None):
    """calib (a .npy file): BatchNorm's statistics re-estimated on it first."""
    import torch
    import torch.nn as nn
    torch.manual_seed(5)

    def bn(c):
        b = nn.BatchNorm2d(c)
        b.running_mean.uniform_(-0.5, 0.5)
        b.running_var.uniform_(0.5, 2)
        b.weight.data = torch.exp(torch.empty(c).uniform_(-np.log(8), np.log(8)))  # spread 8x
        b.bias.data.uniform_(-0.3, 0.6)
        return b

    def block(cin, cout):
        return [nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False), bn(cin), nn.ReLU(),
                nn.Conv2d(cin, cout, 1, bias=False), bn(cout), nn.ReLU()]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), bn(16), nn.ReLU(),
                                          *block(16, 24), *block(24, 32))
            self.fc = nn.Linear(32, 10, bias=False)

        def forward(self, x):
            y = self.features(x)
            return self.fc(nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))

    net = Net().eval()
    if calib:
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.reset_running_stats()
                m.momentum = None  # cumulative average over the batches
        net.train()
        with torch.no_grad():
            net(torch.from_numpy(np.load(calib)))
        net.eval()
    # PRESERVE without constant folding keeps the BatchNorms (eval export would fold them)
    torch.onnx.export(net, torch.zeros(1, 1, 16, 16), path, opset_version=13, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)


def data(path, n, seed):
    """Images with some structure: smoothed noise plus a per-image offset."""
    r = np.random.RandomState(seed)
    x = r.normal(0, 1, (n, 1, 16, 16))
    x = (x + np.roll(x, 1, 2) + np.roll(x, 1, 3)) / 2 + r.uniform(-0.5, 0.5, (n, 1, 1, 1))
    np.save(path, x.astype(np.float32))
    return path


def setup(estimated=False):
    calib, test = data(work("calib.npy"), 256, 1), data(work("test.npy"), 256, 2)
    src = work("m_est.onnx" if estimated else "m.onnx")
    if estimated:
        refcache.call(export_model, src, calib, base=ARGS.work, inputs=(calib,))
    else:
        refcache.call(export_model, src, base=ARGS.work)
    import onnx
    check(sum(n.op_type == "BatchNormalization" for n in onnx.load(src).graph.node) == 5,
          "the exported model lost its BatchNorms")
    return src, calib, test


def quantize(src, calib, mode, tag=None, expect=0, out=None):
    tag = tag or mode
    rep = work("q_%s.json" % tag)
    out = out or work("q_%s.onnx" % tag)
    argv = ["quantize", src, "-o", out, "--calib", calib, "--report", rep] + SETS
    if mode:
        argv += ["--set", "bias-correction=" + mode]
    _, so, err = run_qfold(ARGS.qfold, argv, expect=expect)
    return out, (json.load(open(rep)) if expect == 0 else None), so, err


def ort(model, x, out):
    os.makedirs(out, exist_ok=True)
    p = subprocess.run(["node", os.path.join(ARGS.root, "tests", "ref", "ort_run.js"), model, out, x],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr))
    k = 0
    outs = []
    while os.path.exists(os.path.join(out, "out%d.npy" % k)):
        outs.append(np.load(os.path.join(out, "out%d.npy" % k)))
        k += 1
    return outs


def layer_outputs(qfile):
    """(name in the QDQ file, name in the float file) of every Conv / Gemm's
    output; a graph output's layer writes <name>_dequantized (its name went
    to the DequantizeLinear after it)."""
    import onnx
    m = onnx.load(qfile)
    outs = {o.name for o in m.graph.output}
    pairs = []
    for n in m.graph.node:
        if n.op_type in ("Conv", "Gemm", "MatMul"):
            y = n.output[0]
            f = y[:-len("_dequantized")] if y.endswith("_dequantized") and y[:-len("_dequantized")] in outs else y
            pairs.append((y, f))
    return pairs


def with_outputs(src, dst, names):
    """src with the values `names` added as graph outputs (after its own)."""
    import onnx
    m = onnx.load(src)
    have = {o.name for o in m.graph.output}
    for nm in names:
        if nm not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(nm, onnx.TensorProto.FLOAT, None))
    onnx.save(m, dst)
    return [o.name for o in m.graph.output]


def channel_means(a):
    return a.astype(np.float64).transpose(1, 0, *range(2, a.ndim)).reshape(a.shape[1], -1).mean(1), \
        a.astype(np.float64).transpose(1, 0, *range(2, a.ndim)).reshape(a.shape[1], -1).std(1)


def mean_errors(src, qfile, x, tag):
    """Per layer: (mean error per channel, float std per channel)."""
    pairs = layer_outputs(qfile)
    fnames = with_outputs(src, work("f_%s.onnx" % tag), [f for _, f in pairs])
    qnames = with_outputs(qfile, work("qx_%s.onnx" % tag), [y for y, _ in pairs])
    fo = dict(zip(fnames, ort(work("f_%s.onnx" % tag), x, work("ort_f_%s" % tag))))
    qo = dict(zip(qnames, ort(work("qx_%s.onnx" % tag), x, work("ort_q_%s" % tag))))
    res = {}
    for y, f in pairs:
        mf, sf = channel_means(fo[f])
        mq, _ = channel_means(qo[y])
        res[y] = (mq - mf, sf)
    return res


def sqnr(ref, got):
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))


# After the correction a channel's mean error is what the int32 bias cannot
# hold, its rounding (at most half of its scale s_b = s_x * s_W), plus where
# ONNX Runtime's run differs from qfold's simulation of the QDQ file (where
# the error was measured): ONNX Runtime runs the QDQ groups it fuses with its
# int8 kernels (QLinearGlobalAveragePool before the Linear), which round some
# ties the other way, shifting an input's mean by a fraction of its LSB,
# which moves output channel c by up to that fraction times s_x sum |W_q[c]|;
# and float summation order. The bound per channel: 0.5 s_b + TIES s_x
# sum |W_q[c]| + SUM_TOL of the float std. Measured (calibration data): the
# convs, which ONNX Runtime runs as the simulation does, stay within
# 0.97-1.0 of 0.5 s_b; the Linear exceeds it by 5.5e-4 of an input LSB
# (TIES: 9x that); the rms of mean error / std over the channels above 100
# bias LSBs of std drops 243x (FACTOR 20).
TIES = 5e-3
SUM_TOL = 1e-5
FACTOR = 20.0

# The analytical correction assumes each BatchNorm output normal with the
# BatchNorm's beta and gamma and ignores padding: measured on the model with
# statistics re-estimated on the calibration data, the rms over channels of
# the weights' mean error left after it is at most 15 % of the error before
# (per layer; 2 % to 15 %): the bound leaves room for a 3x worse fit.
RESIDUAL = 0.5


def bias_scales(qfile):
    """Per layer (by output name): the int32 bias scale per output channel,
    and s_x * sum |W_q| per output channel (what a mean shift of one LSB of
    every input would move the output's mean by)."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(qfile)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    res = {}
    for n in m.graph.node:
        if n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 2:
            _, q, sb = qdq_weight(m, inits, n.input[2])
            w, _, _ = qdq_weight(m, inits, n.input[1])
            sx = next(float(inits[d.input[1]]) for d in m.graph.node
                      if d.op_type == "DequantizeLinear" and d.output[0] == n.input[0])
            w1 = np.abs(w).sum(axis=tuple(range(1, w.ndim))) if n.op_type == "Conv" else np.abs(w).sum(axis=0)
            res[n.output[0]] = (np.broadcast_to(sb.reshape(-1), q.shape).astype(np.float64), sx * w1)
    return res


def case_means():
    src, calib, test = setup()
    q0, _, _, _ = quantize(src, calib, "off")
    q1, r1, _, _ = quantize(src, calib, "empirical")
    e0, e1 = mean_errors(src, q0, calib, "off"), mean_errors(src, q1, calib, "emp")
    check(set(e0) == set(e1) and len(e1) == 6, "layers: %s / %s" % (sorted(e0), sorted(e1)))
    sb = bias_scales(q1)
    # the rms of mean error / std over the channels whose std is above 100
    # bias LSBs (one the float model keeps nearly constant, a dead ReLU's
    # reader, keeps its bias rounding, which the bound above covers)
    def rms(errs):
        r = np.concatenate([(e / s)[s > 100 * sb[y][0]] for y, (e, s) in errs.items()])
        return float(np.sqrt(np.mean(r ** 2)))
    worst0, worst1 = rms(e0), rms(e1)
    lsb = 0.0
    for y in sorted(e1):
        e, s = e1[y]
        live = s > 0
        before = float(np.max(np.abs(e0[y][0][live]) / e0[y][1][live]))
        b, lsb_in = sb[y]
        bound = 0.5 * b + TIES * lsb_in + SUM_TOL * s
        need = float(np.max(np.maximum(np.abs(e) - 0.5 * b, 0) / lsb_in))
        lsb = max(lsb, need)
        print("  %-50s max |mean error| / std: %.2e before, %.2e after (%.2f of half the bias scale; "
              "beyond it, %.1e of an input LSB)" % (y, before, float(np.max(np.abs(e[live]) / s[live])),
                                                     float(np.max(np.abs(e) / (0.5 * b))), need))
        bad = np.nonzero(np.abs(e) > bound)[0]
        check(not len(bad), "%s: channels %s off the float mean by %s (bound %s: half the bias scale + %g of an "
              "input LSB + %g of std)" % (y, bad.tolist(), e[bad].tolist(), bound[bad].tolist(), TIES, SUM_TOL))
    print("  rms |mean error| / std %.3g before, %.3g after (%.0fx); beyond the bias rounding, at most %.1e "
          "of an input LSB" % (worst0, worst1, worst0 / worst1, lsb))
    check(worst0 >= FACTOR * worst1, "bias correction: rms mean error %.3g of std before, %.3g after" %
          (worst0, worst1))
    check(r1["bias_correction"]["layers"] == 6, "report: %r" % r1["bias_correction"])
    # ONNX Runtime runs the corrected file as written (its int8 kernels where
    # it fuses the QDQ groups): closer to float than the uncorrected one.
    for x, what in ((calib, "calibration"), (test, "held-out")):
        f = ort(src, x, work("ort_src_" + what))[0]
        a = ort(q0, x, work("ort_q0_" + what))[0]
        b = ort(q1, x, work("ort_q1_" + what))[0]
        s0, s1 = sqnr(f, a), sqnr(f, b)
        print("  ONNX Runtime, %s data: output SQNR %.2f dB without, %.2f dB with" % (what, s0, s1))
        check(s1 > s0, "%s data: output SQNR %.2f dB with bias correction, %.2f without" % (what, s1, s0))


def grouped_model(path):
    """x -> Conv(group 2): the neutron target splits the grouped conv in two
    after the conversion, so bias correction finds no layer it can compare
    with float (the pieces' outputs have no float counterpart): both forms
    correct nothing and auto keeps neither."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.RandomState(3)
    w = numpy_helper.from_array(r.normal(0, 0.3, (4, 2, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(r.normal(0, 0.1, (4,)).astype(np.float32), "b")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def summary_line(so):
    line = [ln for ln in so.splitlines() if ln.strip().startswith("bias correction")]
    check(len(line) == 1, "summary: %r" % so)
    return line[0]


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(a))


def case_cli():
    src, calib, _ = setup()
    qd, rd, so_d, _ = quantize(src, calib, None, "default")
    q0, r0, so0, _ = quantize(src, calib, "off")
    check(open(qd, "rb").read() == open(q0, "rb").read(), "bias-correction=off wrote another file than the default")
    check(rd["bias_correction"] is None and r0["bias_correction"] is None,
          "off: report %r / %r" % (rd["bias_correction"], r0["bias_correction"]))
    check("bias correction" not in so0 and "bias correction" not in so_d, "off printed a bias correction line")
    q1, r1, so1, _ = quantize(src, calib, "empirical")
    bc = r1["bias_correction"]
    check(bc is not None and bc["rule"] == "empirical" and bc["form"] == "empirical" and bc["kept"] is True and
          bc["layers"] == 6 and bc["biases_added"] == 1 and bc["layers_skipped"] == 0 and bc["passes"] == 6 and
          bc["samples"] == 256 and bc["other"] is None, "empirical: report %r" % bc)
    db = bc["output_sqnr_db"]
    line = summary_line(so1)
    check(("%.1f -> %.1f dB (kept)" % (db["without"], db["with"])) in line and "empirical, 6 layers" in line,
          "empirical: summary %r" % line)
    check(db["with"] > db["without"], "empirical: output SQNR %r" % db)
    check(open(q1, "rb").read() != open(q0, "rb").read(), "empirical wrote the uncorrected file")
    import onnx
    m = onnx.load(q1)
    gemm = [n for n in m.graph.node if n.op_type == "Gemm"]
    check(len(gemm) == 1 and len(gemm[0].input) == 3 and not [n for n in m.graph.node if n.op_type == "MatMul"],
          "the Linear without a bias (a MatMul) did not become a Gemm with one: %r" % gemm)
    # analytical: the five layers after a BatchNorm; the stem reads the data
    qa, ra, soa, _ = quantize(src, calib, "analytical")
    an = ra["bias_correction"]
    check(an["rule"] == "analytical" and an["form"] == "analytical" and an["kept"] is True and an["layers"] == 5 and
          an["layers_skipped"] == 1 and an["passes"] == 0 and an["biases_added"] == 1, "analytical: report %r" % an)
    check("analytical, 5 layers" in summary_line(soa), "analytical: summary %r" % summary_line(soa))
    # auto: both tried on the same data, the better kept when it beats without
    q2, r2, so2, _ = quantize(src, calib, "auto")
    a = r2["bias_correction"]
    de, da = db["with"], an["output_sqnr_db"]["with"]
    best, other = ("analytical", "empirical") if da > de else ("empirical", "analytical")
    want = max(de, da) > db["without"]
    check(a["rule"] == "auto" and a["form"] == best and a["kept"] == want and close(a["output_sqnr_db"]["without"],
          db["without"]) and close(a["output_sqnr_db"]["with"], max(de, da)) and a["other"]["form"] == other and
          close(a["other"]["output_sqnr_db"], min(de, da)), "auto: report %r (empirical %r, analytical %r)"
          % (a, de, da))
    kept_file = {"empirical": q1, "analytical": qa}[best] if want else q0
    check(open(q2, "rb").read() == open(kept_file, "rb").read(),
          "auto (kept %r, %s) wrote another file than %s" % (want, best, kept_file))
    line = summary_line(so2)
    check(line.split("bias correction", 1)[1].strip().startswith("auto: %s, " % best) and
          ("(kept;" if want else "(not kept;") in line and ("%s: " % other) in line, "auto: summary %r" % line)
    print("  " + line.strip())
    # auto with nothing to correct: not kept, the file the option's absence writes
    gsrc = work("grouped.onnx")
    grouped_model(gsrc)
    gcal = work("gcalib.npy")
    np.save(gcal, np.random.RandomState(4).normal(0, 1, (64, 4, 8, 8)).astype(np.float32))
    g0, _, _, _ = quantize(gsrc, gcal, "off", "g_off")
    g2, rg, sog, _ = quantize(gsrc, gcal, "auto", "g_auto")
    ga = rg["bias_correction"]
    check(ga["kept"] is False and ga["layers"] == 0 and ga["layers_skipped"] == 2, "grouped auto: report %r" % ga)
    check("(not kept;" in summary_line(sog), "grouped auto: summary %r" % summary_line(sog))
    check(open(g2, "rb").read() == open(g0, "rb").read(), "auto, not kept, wrote another file than off")
    print("  " + summary_line(sog).strip())
    # a bad value: exit 2, one line naming the option and the values, nothing written
    _, _, _, err = quantize(src, calib, "maybe", expect=2, out=work("bad.onnx"))
    qfcli.error_line(err, "bias-correction", "off|empirical|analytical|auto")
    check(len(err.strip().splitlines()) == 1, "more than one error line:\n" + err)
    check(not os.path.exists(work("bad.onnx")), "a model was written on a bad --set")
    # qat refuses it (post-training only): exit 2, one line
    p = subprocess.run([ARGS.qfold, "qat", src, "-o", work("qat.onnx"), "--data", calib, "--labels", calib,
                        "--set", "bias-correction=empirical"], capture_output=True, text=True, timeout=120)
    check(p.returncode == 2, "qat --set bias-correction=empirical: exit %d\n%s" % (p.returncode, p.stderr))
    qfcli.error_line(p.stderr, "bias-correction", "qat")
    check(len(p.stderr.strip().splitlines()) == 1, "qat: more than one error line:\n" + p.stderr)
    check(not os.path.exists(work("qat.onnx")), "qat wrote a model")


def fused_weights(src):
    """The float weights of every Conv / Gemm / MatMul after qfold's BatchNorm fold, by output name."""
    import onnx
    from onnx import numpy_helper
    out = work("fused.onnx")
    run_qfold(ARGS.qfold, ["fuse", src, "-o", out], expect=0)
    m = onnx.load(out)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    return {n.output[0]: (n, inits[n.input[1]]) for n in m.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}


def qdq_weight(m, inits, name):
    """The dequantized weight behind DequantizeLinear output `name`, and the int32 bias of a node."""
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == name:
            q = inits[n.input[0]].astype(np.float64)
            s = inits[n.input[1]].astype(np.float64)
            z = inits[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2] else 0 * s
            if s.size > 1:
                ax = [1] * q.ndim
                axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
                ax[axis] = -1
                s, z = s.reshape(ax), z.reshape(ax)
            return (q - z) * s, inits[n.input[0]], s
    raise KeyError(name)


def case_analytical():
    import onnx
    import torch
    from onnx import numpy_helper
    src, calib, _ = setup(estimated=True)
    q0, _, _, _ = quantize(src, calib, "off")
    qa, ra, so, _ = quantize(src, calib, "analytical")
    an = ra["bias_correction"]
    check(an["layers"] == 5 and an["layers_skipped"] == 1, "analytical: report %r" % an)
    fw = fused_weights(src)
    m0, ma = onnx.load(q0), onnx.load(qa)
    i0 = {t.name: numpy_helper.to_array(t) for t in m0.graph.initializer}
    ia = {t.name: numpy_helper.to_array(t) for t in ma.graph.initializer}
    nodes0 = {n.output[0]: n for n in m0.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    nodesa = {n.output[0]: n for n in ma.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    check(set(nodes0) == set(nodesa) and len(nodesa) == 6, "layers %s / %s" % (sorted(nodes0), sorted(nodesa)))
    # the float model's real inputs of every layer (ONNX Runtime on the file)
    ins = {}
    for y, n in nodesa.items():
        x = n.input[0]
        ins[y] = x[:-len("_dequantized")] if x.endswith("_dequantized") else x
    fnames = with_outputs(src, work("f_in.onnx"), sorted(set(ins.values())))
    fo = dict(zip(fnames, ort(work("f_in.onnx"), calib, work("ort_f_in"))))
    corrected = 0
    for y in sorted(nodesa):
        n, n0 = nodesa[y], nodes0[y]
        fy = y[:-len("_dequantized")] if y.endswith("_dequantized") else y
        key = fy if fy in fw else y
        fnode, w = fw[key]
        wq, _, _ = qdq_weight(ma, ia, n.input[1])
        dw = torch.from_numpy(wq - w.astype(np.float64))
        x = torch.from_numpy(fo[ins[y]].astype(np.float64))
        if n.op_type == "Conv":
            at = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            pads = at.get("pads", [0, 0, 0, 0])
            e = torch.nn.functional.conv2d(x, dw, stride=at.get("strides", [1, 1]), padding=(pads[0], pads[1]),
                                           groups=at.get("group", 1))
        else:
            e = x @ dw  # [N, K] x [K, O]: the MatMul's weight, as the Gemm it becomes keeps it
        e = e.numpy()
        true_err = e.transpose(1, 0, *range(2, e.ndim)).reshape(e.shape[1], -1).mean(1)
        # the correction taken: the int32 bias's change times its scale
        ba, _, sb = qdq_weight(ma, ia, n.input[2]) if len(n.input) > 2 else (None, None, None)
        if len(n0.input) > 2:
            b0, _, _ = qdq_weight(m0, i0, n0.input[2])
        else:
            b0 = 0 * ba if ba is not None else None
        if ba is None or np.array_equal(ba, b0):
            check(n.name.startswith("/features/features.0/"), "%s (%s): not corrected" % (n.name, y))
            print("  %-42s not corrected (its input is the data)" % y)
            continue
        corrected += 1
        taken = (b0 - ba).reshape(-1)
        resid = true_err - taken
        ratio = float(np.sqrt(np.sum(resid ** 2) / np.sum(true_err ** 2)))
        print("  %-42s weight rounding's mean error %.2e (rms over channels), after the analytical "
              "correction %.2e (%.0f %%)" % (y, np.sqrt(np.mean(true_err ** 2)), np.sqrt(np.mean(resid ** 2)),
                                             100 * ratio))
        check(ratio < RESIDUAL, "%s: the analytical correction leaves %.0f %% of the weights' mean error "
              "(bound %.0f %%)" % (y, 100 * ratio, 100 * RESIDUAL))
    check(corrected == 5, "%d layers corrected" % corrected)
    out = ort(qa, calib, work("ort_qa"))
    check(out and np.all(np.isfinite(out[0])), "ONNX Runtime: the analytical model's output")


def tfl_tensors(path):
    sys.path.insert(0, SCHEMA_PY)
    import importlib
    Model = importlib.import_module("tflite.Model").Model
    TT = importlib.import_module("tflite.TensorType").TensorType
    buf = open(path, "rb").read()
    m = Model.GetRootAs(buf, 0)
    sg = m.Subgraphs(0)
    res = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        b = m.Buffers(t.Buffer())
        data = b.DataAsNumpy().tobytes() if b.DataLength() else b""
        q = t.Quantization()
        qp = (q.ScaleAsNumpy().tobytes() if q and q.ScaleLength() else b"",
              q.ZeroPointAsNumpy().tobytes() if q and q.ZeroPointLength() else b"")
        res.append((t.Name().decode(), t.Type(), tuple(t.ShapeAsNumpy()) if t.ShapeLength() else (), qp, data))
    ops = [(sg.Operators(k).OpcodeIndex(), tuple(sg.Operators(k).InputsAsNumpy()),
            tuple(sg.Operators(k).OutputsAsNumpy())) for k in range(sg.OperatorsLength())]
    return res, ops, TT.INT32


def case_tflite():
    if not SCHEMA_PY or not os.path.isdir(SCHEMA_PY):
        raise qfcli.Skip("no flatc --python reader of the TFLite schema")
    src, calib, _ = setup()
    # the uncorrected model's Linear as the corrected one's: a Gemm with a bias of zeros
    # (so the two exports have the same ops and tensors)
    q0, _, _, _ = quantize(src, calib, "off")
    for form in ("empirical", "analytical"):
        q1, _, _, _ = quantize(src, calib, form)
        run_qfold(ARGS.qfold, ["export", q1, "-o", work("bc_%s.tflite" % form)], expect=0)
        t1, ops1, i32 = tfl_tensors(work("bc_%s.tflite" % form))
        check(t1 and ops1, "%s: an empty TFLite file" % form)
        sys.path.insert(0, os.path.join(HERE, "..", "tflite"))
        import tfl_check
        probs = tfl_check.check(work("bc_%s.tflite" % form), tfl_check.load_generated(SCHEMA_PY))
        check(not probs, "%s: TFLite structure: %s" % (form, probs))
        print("  %s: %d tensors, %d ops, structure ok" % (form, len(t1), len(ops1)))
    # against the uncorrected export: same ops and tensors, only int32 data differs
    # (compared where both have the Linear's bias: bias-correction=empirical with
    # no samples' difference is not available, so compare analytical with empirical:
    # both correct every layer with a bias, the Linear's included)
    te, ope, _ = tfl_tensors(work("bc_empirical.tflite"))
    ta, opa, _ = tfl_tensors(work("bc_analytical.tflite"))
    check(ope == opa and len(te) == len(ta), "the two corrected exports differ in their ops or tensor count")
    changed = 0
    for a, b in zip(te, ta):
        check(a[:4] == b[:4], "tensor %s: type, shape or qparams differ between the corrected exports" % a[0])
        if a[4] != b[4]:
            check(a[1] == i32, "tensor %s (type %d): data differs, not an int32 bias" % (a[0], a[1]))
            changed += 1
    check(changed >= 4, "only %d int32 biases differ between the two corrections" % changed)
    print("  empirical vs analytical exports: %d int32 biases differ, nothing else" % changed)
    # the TFLite runtimes (TFLite 2.2, ArmNN) against qfold's integer reference on the corrected model
    sys.path.insert(0, os.path.join(HERE, "..", "tflite"))
    import armnn_test as at
    ARGS.schema_py = SCHEMA_PY
    at.ARGS = ARGS
    x = np.load(calib)[:64]
    q1, _, _, _ = quantize(src, calib, "empirical")
    at.export_and_check(q1, x, calib, min_top1=0.9)
    run_qfold(ARGS.qfold, ["quantize", src, "-o", work("bc2.tflite"), "--calib", calib, "--set",
                           "bias-correction=empirical"] + SETS, expect=0)
    check(open(work("bc2.tflite"), "rb").read() == open(work("bc_empirical.tflite"), "rb").read(),
          "quantize -o X.tflite wrote another file than quantize + export")


if __name__ == "__main__":
    # --schema-py DIR (the flatc --python reader; the tflite case only)
    SCHEMA_PY = None
    if "--schema-py" in sys.argv:
        k = sys.argv.index("--schema-py")
        SCHEMA_PY = os.path.abspath(sys.argv[k + 1])
        del sys.argv[k:k + 2]
    sys.exit(qfcli.main("bias_correct", globals(), paths=("--root", "--work")))
