#!/usr/bin/python3
"""QAT's end against PyTorch 1.13 (registered by tests/quant/qat_convert.cmake).

    qat_convert_torch.py --qfold TOOL --root DIR --work DIR CASE

TOOL is tests/quant/qat_state_tool.c's binary. Per case: a
torch.nn.intrinsic.qat ConvBn2d / LinearBn1d with FakeQuantize qconfigs as
qfold's neutron profile (weights symmetric [-127, 127], per channel for conv,
per tensor for linear, moving-average observers; activations int8 affine),
random BN statistics, trained three SGD steps with an input and an output
FakeQuantize. Then:

  - the float model (Conv / Linear + BN with the trained weights and BN
    state) exported to ONNX, prepared by qfold as `qfold qat` does and its
    fake_quant buffers set to torch's (scale, zero point, running min / max);
  - (b) qfold's qat_finalize int8 weights equal torch's convert
    (nnq.Conv2d / nnq.Linear.from_float: fuse_conv_bn_weights, the weight
    observer moved once when enabled, _quantize_weight), its weight scales
    torch's, its int32 bias round(torch's fused float bias / (s_in * s_w))
    within 1;
  - (c) ONNX Runtime runs the qat_finalize output and the qat_export output
    (both pass onnx.checker); the qat_export output equals qfold's inference
    of the internal QAT graph and torch's QAT model in eval (observers off),
    within an output quantization step at a tie; the int8 model is within a
    few output steps of torch's QAT model.
The weight observer is on (obs1: the convert moves it) or off (obs0).
"""
import copy
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import qfcli  # noqa: E402
from qfcli import check  # noqa: E402
from qfref import randomize_bn  # noqa: E402
import refcache  # noqa: E402

ARGS = None


def work(name):
    return os.path.join(ARGS.work, name)


def ort_run(model, x):
    np.save(work("ort_in.npy"), x)
    out = work("ort_out")
    os.makedirs(out, exist_ok=True)
    p = subprocess.run(["node", os.path.join(ARGS.root, "tests", "ref", "ort_run.js"), model, out, work("ort_in.npy")],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, QF_ORT_OPT="disabled"))
    check(p.returncode == 0, "ONNX Runtime could not run %s:\n%s" % (model, p.stderr))
    return np.load(os.path.join(out, "out0.npy"))


def torch_qat(kind, bias, observe, wqmin, wd):
    """torch's side of a case, in directory WD: the QAT module trained, its
    float model exported to float.onnx, the fake_quant states under state/;
    returns the input, torch's QAT output in eval and its convert's int8
    weights, scales and bias (numpy). Called through tests/ref/refcache.py
    (computed once per `make test`; a hit imports no torch)."""
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.intrinsic.qat as nniqat
    import torch.nn.quantized as nnq
    from torch.ao.quantization import (FakeQuantize, MovingAverageMinMaxObserver,
                                       MovingAveragePerChannelMinMaxObserver, QConfig)

    torch.backends.quantized.engine = "qnnpack"
    torch.manual_seed(7)
    gen = torch.Generator().manual_seed(11)
    act = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                 dtype=torch.qint8, qscheme=torch.per_tensor_affine, eps=2.0 ** -12)
    if kind == "conv":
        wq = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=wqmin, quant_max=127,
                                    dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)
        qat = nniqat.ConvBn2d(3, 6, 3, padding=1, bias=bias, qconfig=QConfig(activation=act, weight=wq))
        xshape, yshape = (8, 3, 7, 7), (8, 6, 7, 7)
    else:
        wq = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=wqmin, quant_max=127,
                                    dtype=torch.qint8, qscheme=torch.per_tensor_symmetric)
        qat = nniqat.LinearBn1d(10, 6, bias=bias, qconfig=QConfig(activation=act, weight=wq))
        if bias:
            # torch 1.13's LinearBn1d replaces Linear's initialized bias with
            # torch.empty and leaves it so: the reference read whatever the
            # allocator handed out (the same in every fresh process, other
            # values in refserver.py's forked children). Linear's own init.
            with torch.no_grad():
                qat.bias.uniform_(-10 ** -0.5, 10 ** -0.5, generator=gen)
        xshape, yshape = (16, 10), (16, 6)
    randomize_bn(qat, gen)
    in_fq, out_fq = act(), act()
    qat.activation_post_process = out_fq
    opt = torch.optim.SGD(qat.parameters(), lr=0.02, momentum=0.5)
    qat.train()
    for _ in range(3):
        x = torch.randn(*xshape, generator=gen)
        loss = torch.nn.functional.mse_loss(out_fq(qat(in_fq(x))), torch.randn(*yshape, generator=gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
    qat.eval()
    if not observe:
        qat.weight_fake_quant.disable_observer()

    # The float model with the trained state, as torch exports it.
    if kind == "conv":
        fm = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=bias), nn.BatchNorm2d(6, eps=qat.bn.eps))
    else:
        fm = nn.Sequential(nn.Linear(10, 6, bias=bias), nn.BatchNorm1d(6, eps=qat.bn.eps))
    with torch.no_grad():
        fm[0].weight.copy_(qat.weight)
        if bias:
            fm[0].bias.copy_(qat.bias)
    fm[1].load_state_dict(qat.bn.state_dict())
    fm.eval()
    xt = torch.randn(*xshape, generator=gen)
    x = xt.numpy()
    torch.onnx.export(fm, xt, os.path.join(wd, "float.onnx"), input_names=["x"], output_names=["y"],
                      opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE)
    fmod = onnx.load(os.path.join(wd, "float.onnx"))
    op = [n for n in fmod.graph.node if n.op_type in ("Conv", "Gemm")][0]
    wname = op.input[1]

    state = os.path.join(wd, "state")
    os.makedirs(state, exist_ok=True)

    def save_fq(base, fq):
        f32 = lambda t: t.detach().to(torch.float32).numpy().reshape(-1)  # noqa: E731
        np.save(os.path.join(state, base + "_fq_scale.npy"), f32(fq.scale))
        np.save(os.path.join(state, base + "_fq_zero_point.npy"), f32(fq.zero_point))
        np.save(os.path.join(state, base + "_fq_min.npy"), f32(fq.activation_post_process.min_val))
        np.save(os.path.join(state, base + "_fq_max.npy"), f32(fq.activation_post_process.max_val))

    save_fq("x", in_fq)
    save_fq(wname, qat.weight_fake_quant)
    save_fq("y", out_fq)

    # torch's QAT model in eval, observers off (the reference of the exported form).
    ref = copy.deepcopy(qat)
    ref_in, ref_out = copy.deepcopy(in_fq), copy.deepcopy(out_fq)
    for m in (ref, ref_in, ref_out):
        m.apply(torch.ao.quantization.disable_observer)
    with torch.no_grad():
        y_torch = ref_out(ref(ref_in(xt))).numpy()

    # torch's convert (the reference of the int8 weights).
    conv_mod = copy.deepcopy(qat)
    qm = (nnq.Conv2d if kind == "conv" else nnq.Linear).from_float(conv_mod)
    qw = qm.weight()
    t_int8 = qw.int_repr().numpy()
    t_scale = (qw.q_per_channel_scales() if kind == "conv" else torch.tensor([qw.q_scale()])).numpy().astype(np.float32)
    t_bias = qm.bias().detach().numpy() if qm.bias() is not None else None
    return x, wname, y_torch, t_int8, t_scale, t_bias


def run(kind, bias, observe, wqmin=-127):
    import onnx
    from onnx import numpy_helper

    state = work("state")
    os.makedirs(state, exist_ok=True)
    for f in os.listdir(state):
        os.remove(os.path.join(state, f))
    x, wname, y_torch, t_int8, t_scale, t_bias = refcache.call(torch_qat, kind, bias, observe, wqmin, ARGS.work,
                                                              base=ARGS.work)
    np.save(work("x.npy"), x)
    p = subprocess.run([ARGS.qfold, work("float.onnx"), state, "1" if observe else "0", work("x.npy"),
                        work("qat.onnx"), work("final.onnx"), work("y_internal.npy"), str(wqmin)],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "qat_state_tool failed:\n%s%s" % (p.stdout, p.stderr))
    check("12 state tensors loaded" in p.stdout, "state not loaded:\n" + p.stdout)

    # (b) int8 weights, scales, bias against torch's convert.
    final = onnx.load(work("final.onnx"))
    onnx.checker.check_model(final)
    inits = {i.name: numpy_helper.to_array(i) for i in final.graph.initializer}
    prod = {o: n for n in final.graph.node for o in n.output}
    fop = [n for n in final.graph.node if n.op_type in ("Conv", "Gemm")][0]
    wdq = prod[fop.input[1]]
    check(wdq.op_type == "DequantizeLinear", "weight is not dequantized")
    q_int8 = inits[wdq.input[0]]
    q_scale = inits[wdq.input[1]].reshape(-1)
    check(q_int8.dtype == np.int8, "weight dtype %s" % q_int8.dtype)
    check(q_int8.shape == t_int8.shape, "weight shape %s vs torch %s" % (q_int8.shape, t_int8.shape))
    rel = np.max(np.abs(q_scale - t_scale) / t_scale)
    check(rel <= 2e-7, "weight scales differ from torch's convert: max rel %.3g\n%s\n%s" % (rel, q_scale, t_scale))
    bad = int(np.sum(q_int8 != t_int8))
    check(bad == 0, "%d of %d int8 weights differ from torch's convert" % (bad, t_int8.size))
    # The fold makes a bias when the op had none (as fuse_conv_bn_weights).
    bdq = prod[fop.input[2]]
    q_b = inits[bdq.input[0]].astype(np.int64)
    s_b = inits[bdq.input[1]].reshape(-1)
    s_in = inits[prod[fop.input[0]].input[1]].reshape(-1)[0]
    check(q_b.dtype == np.int64 and inits[bdq.input[0]].dtype == np.int32, "bias is not int32")
    want = np.round(t_bias.astype(np.float64) / (np.float32(s_in) * t_scale).astype(np.float64))
    nb = int(np.max(np.abs(q_b - want)))
    check(nb <= 1, "int32 bias differs from round(torch bias / (s_in s_w)) by %d" % nb)
    check(np.allclose(s_b, np.float32(s_in) * t_scale, rtol=2e-7, atol=0), "bias scales are not s_in * s_w")


    # (c) ONNX Runtime on both files.
    qatm = onnx.load(work("qat.onnx"))
    onnx.checker.check_model(qatm)
    ops = [n.op_type for n in qatm.graph.node]
    want_ops = {"QuantizeLinear", "DequantizeLinear", "Div", "BatchNormalization", "Conv" if kind == "conv" else "Gemm"}
    check(want_ops <= set(ops), "qat_export ops: %s" % ops)
    check(("Add" in ops) == bias, "qat_export ops: %s (bias %s)" % (ops, bias))
    check(all(a.name != "qfold_frozen" for n in qatm.graph.node for a in n.attribute), "qfold_frozen written")
    step = float(np.load(os.path.join(state, "y_fq_scale.npy"))[0])
    y_internal = np.load(work("y_internal.npy"))
    y_qat = ort_run(work("qat.onnx"), x)
    y_final = ort_run(work("final.onnx"), x)

    def steps(a, b):
        d = np.abs(a.astype(np.float64) - b)
        return float(d.max()) / step, float(np.mean(d > 1e-5))

    # The exported form equals the internal graph where Q/DQ can say what the
    # weight fake_quant did: a weight trained on [-127, 127] that rounds below
    # -127 (the moving-average range lags the weights) is clamped to -127 by
    # the fake_quant, to -128 by QuantizeLinear (qat_export's header). Those
    # cases check the difference is only that: the file's weights with the
    # trained clamp give the internal output again.
    s0, f0 = steps(y_internal, y_torch)
    check(s0 == 0.0, "qfold internal vs torch QAT eval: %.2f steps, %.3f%% off" % (s0, 100 * f0))
    below = 0
    if wqmin == -127:
        inits_q = {i.name: numpy_helper.to_array(i) for i in qatm.graph.initializer}
        q = [n for n in qatm.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in inits_q][0]
        w, s = inits_q[q.input[0]], inits_q[q.input[1]]
        s = s.reshape([-1] + [1] * (w.ndim - 1)) if s.size > 1 else s
        r = np.round(w.astype(np.float32) / s.astype(np.float32))
        below = int(np.sum(r < -127))
        if below:
            clamped = onnx.load(work("qat.onnx"))
            for init in clamped.graph.initializer:
                if init.name == q.input[0]:
                    fixed = np.where(r < -127, np.float32(-127) * s, w).astype(np.float32)
                    init.CopyFrom(numpy_helper.from_array(fixed, init.name))
            onnx.save(clamped, work("qat_clamped.onnx"))
            y_clamped = ort_run(work("qat_clamped.onnx"), x)
            sc, fc = steps(y_clamped, y_internal)
            check(sc <= 1.0 + 1e-3 and fc <= 0.01, "qat_export with the trained clamp (ORT) vs qfold internal: %.2f steps, "
                  "%.3f%% off" % (sc, 100 * fc))
    s1, f1 = steps(y_qat, y_internal)
    if not below:
        check(s1 <= 1.0 + 1e-3 and f1 <= 0.01, "qat_export (ORT) vs qfold internal: %.2f steps, %.3f%% off" % (s1, 100 * f1))
    s2, f2 = steps(y_qat, y_torch)
    if not below:
        check(s2 <= 1.0 + 1e-3 and f2 <= 0.01, "qat_export (ORT) vs torch QAT eval: %.2f steps, %.3f%% off" % (s2, 100 * f2))
    s3, _ = steps(y_final, y_torch)
    check(s3 <= 4.0 + 1e-3, "qat_finalize (ORT) vs torch QAT eval: %.2f steps" % s3)
    print("int8 weights == torch convert (%d), scales max rel %.2g, int32 bias within %d; ORT: export vs internal %.2f"
          " steps (%.2f%% > 1e-5; %d weights at -128 in the file), vs torch %.2f steps; finalized vs torch %.2f steps"
          % (t_int8.size, rel, nb, s1, 100 * f1, below, s2, s3))


def case_convtbn():
    """ConvTranspose2d + BN (torch 1.13 has no QAT module for it): qfold's
    qat_finalize / qat_export on observer states made by torch's observers
    (input, W*s per channel along axis 1, output), run by ONNX Runtime; the
    references are qfold's internal graph (export) and the QAT output
    (int8 model, within a few output steps)."""
    import onnx
    import torch
    import torch.nn as nn
    from torch.ao.quantization import MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver

    torch.manual_seed(5)
    gen = torch.Generator().manual_seed(13)
    fm = nn.Sequential(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, bias=True), nn.BatchNorm2d(6))
    randomize_bn(fm, gen)
    fm.eval()
    xt = torch.randn(4, 4, 5, 5, generator=gen)
    torch.onnx.export(fm, xt, work("float.onnx"), input_names=["x"], output_names=["y"], opset_version=13,
                      training=torch.onnx.TrainingMode.PRESERVE)
    wname = [n for n in onnx.load(work("float.onnx")).graph.node if n.op_type == "ConvTranspose"][0].input[1]
    bn = fm[1]
    ws = fm[0].weight.detach() * (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().reshape(1, -1, 1, 1)
    obs = {"x": MovingAverageMinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_affine, quant_min=-128,
                                            quant_max=127, eps=2.0 ** -12),
           wname: MovingAveragePerChannelMinMaxObserver(ch_axis=1, dtype=torch.qint8, quant_min=-127, quant_max=127,
                                                        qscheme=torch.per_channel_symmetric),
           "y": MovingAverageMinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_affine, quant_min=-128,
                                            quant_max=127, eps=2.0 ** -12)}
    with torch.no_grad():
        for _ in range(2):
            xb = torch.randn(4, 4, 5, 5, generator=gen)
            obs["x"](xb)
            obs[wname](ws)
            obs["y"](fm(xb))
    state = work("state")
    os.makedirs(state, exist_ok=True)
    for name, o in obs.items():
        sc, zp = o.calculate_qparams()
        for what, t in (("scale", sc), ("zero_point", zp), ("min", o.min_val), ("max", o.max_val)):
            np.save(os.path.join(state, "%s_fq_%s.npy" % (name, what)), t.detach().to(torch.float32).numpy().reshape(-1))
    x = xt.numpy()
    np.save(work("x.npy"), x)
    p = subprocess.run([ARGS.qfold, work("float.onnx"), state, "1", work("x.npy"), work("qat.onnx"),
                        work("final.onnx"), work("y_internal.npy"), "-128"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "qat_state_tool failed:\n%s%s" % (p.stdout, p.stderr))
    check("12 state tensors loaded" in p.stdout, "state not loaded:\n" + p.stdout)
    for f in ("qat.onnx", "final.onnx"):
        onnx.checker.check_model(onnx.load(work(f)))
    final = onnx.load(work("final.onnx"))
    ct = [n for n in final.graph.node if n.op_type == "ConvTranspose"][0]
    prod = {o: n for n in final.graph.node for o in n.output}
    check(all(prod[ct.input[i]].op_type == "DequantizeLinear" for i in range(3)), "ConvTranspose inputs not all DQ")
    step = float(np.load(os.path.join(state, "y_fq_scale.npy"))[0])
    y_internal = np.load(work("y_internal.npy"))
    d_exp = np.abs(ort_run(work("qat.onnx"), x) - y_internal)
    d_fin = np.abs(ort_run(work("final.onnx"), x) - y_internal)
    check(d_exp.max() <= step * 1.001 and np.mean(d_exp > 1e-5) <= 0.01,
          "qat_export (ORT) vs qfold internal: %.2f steps, %.3f%% off" % (d_exp.max() / step, 100 * np.mean(d_exp > 1e-5)))
    check(d_fin.max() <= 4 * step * 1.001, "qat_finalize (ORT) vs qfold internal: %.2f steps" % (d_fin.max() / step))
    print("ConvTranspose: ORT export vs internal %.2f steps (%.2f%% > 1e-5), finalized vs internal %.2f steps"
          % (d_exp.max() / step, 100 * np.mean(d_exp > 1e-5), d_fin.max() / step))


def case_convbn_obs1():
    run("conv", True, True)


def case_convbn_nobias_obs1():
    run("conv", False, True)


def case_convbn_obs0():
    run("conv", True, False)


def case_convbn_w128_obs1():
    run("conv", True, True, -128)


def case_linearbn_w128_obs0():
    run("linear", True, False, -128)


def case_linearbn_obs1():
    run("linear", True, True)


def case_linearbn_obs0():
    run("linear", True, False)


if __name__ == "__main__":
    sys.exit(qfcli.main("qat_convert_torch", globals(), paths=("--root", "--work")))
