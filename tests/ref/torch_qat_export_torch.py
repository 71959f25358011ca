"""The PyTorch side of tests/ref/torch_qat_export.py: the QAT models trained
with prepare_qat_fx, exported, and converted with convert_fx (the reference
int8 weights, scales and logits); the weights the no-Div fold must give;
a float export. torch_qat_export.py calls these through tests/ref/refcache.py,
so the second pass of `make test` reads them from the cache without
importing torch."""
import copy
import gzip
import os

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import numpy_helper
from torch.ao.quantization import (FakeQuantize, MovingAverageMinMaxObserver,
                                   MovingAveragePerChannelMinMaxObserver, QConfig, QConfigMapping)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_qat_fx

FMNIST = "/usr/share/datasets/fashion-mnist"
N_TRAIN, N_EVAL, STEPS, BATCH = 2048, 1000, 40, 64


def qconfig_mapping():
    act = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                 dtype=torch.quint8, qscheme=torch.per_tensor_affine, averaging_constant=0.01)
    conv_w = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                                    dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)
    lin_w = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                   dtype=torch.qint8, qscheme=torch.per_tensor_symmetric)
    lin = QConfig(activation=act, weight=lin_w)
    # BatchNorm1d takes the linear qconfig: FX fuses Linear + BN1d only when both agree.
    return (QConfigMapping().set_global(QConfig(activation=act, weight=conv_w))
            .set_object_type(nn.Linear, lin).set_object_type(nn.BatchNorm1d, lin))


def conv_bn(cin, cout, stride=1, groups=1, bias=False, relu=True):
    layers = [nn.Conv2d(cin, cout, 3, stride=stride, groups=groups, bias=bias), nn.BatchNorm2d(cout)]
    return layers + ([nn.ReLU()] if relu else [])


def build(case):
    if case == "convbn":
        layers = conv_bn(1, 8, stride=2, relu=False) + [nn.Flatten(), nn.Linear(8 * 13 * 13, 10)]
    elif case == "convbnrelu":
        layers = conv_bn(1, 8, stride=2, bias=True) + conv_bn(8, 16, stride=2) + [nn.Flatten(),
                                                                                 nn.Linear(16 * 6 * 6, 10)]
    elif case == "linearbn":
        layers = [nn.Flatten(), nn.Linear(784, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10)]
    elif case == "depthwise":
        layers = (conv_bn(1, 8, stride=2) + conv_bn(8, 8, stride=2, groups=8) + [nn.Conv2d(8, 16, 1, bias=False),
                                                                                 nn.BatchNorm2d(16), nn.ReLU()] +
                  [nn.Flatten(), nn.Linear(16 * 6 * 6, 10)])
    else:
        raise SystemExit(f"unknown case {case}")
    return nn.Sequential(*layers)


def randomize_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(torch.rand(c, generator=gen) * 1.5 + 0.25)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.2)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(c, generator=gen) * 2.0 + 0.3)


def idx(path, images):
    with gzip.open(path, "rb") as f:
        data = f.read()
    if images:
        return np.frombuffer(data, np.uint8, offset=16).reshape(-1, 1, 28, 28)
    return np.frombuffer(data, np.uint8, offset=8)


def fashion():
    x = idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"), True)[:N_TRAIN]
    y = idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"), False)[:N_TRAIN]
    xe = idx(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz"), True)[:N_EVAL]
    ye = idx(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz"), False)[:N_EVAL]
    norm = lambda a: ((a.astype(np.float32) / 255.0) - 0.286) / 0.353  # noqa: E731
    return norm(x), y.astype(np.int64), norm(xe), ye.astype(np.int64)


def make(case, work, steps=STEPS):
    """Train, export (WORK/qat.onnx) and convert one model, the eval slice
    saved as WORK/x.npy; returns the int8 model's logits on it, its labels and
    {module name: (int8 weight, weight scales)} of every quantized module. Case
    `nofold` is convbnrelu exported with do_constant_folding=False: the simulated fusion's
    constants then come as nodes (W * Reshape(gamma / Sqrt(var + eps)), Cast, Identity)."""
    fold = case != "nofold"
    case = "convbnrelu" if case == "nofold" else case
    torch.manual_seed(0)
    torch.backends.quantized.engine = "qnnpack"
    gen = torch.Generator().manual_seed(1)
    model = build(case)
    randomize_bn(model, gen)
    x, y, xe, ye = fashion()
    model.train()
    prepared = prepare_qat_fx(model, qconfig_mapping(), (torch.from_numpy(x[:2]),))
    opt = torch.optim.SGD(prepared.parameters(), lr=0.02, momentum=0.9)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        i = rng.choice(N_TRAIN, BATCH, replace=False)
        loss = nn.functional.cross_entropy(prepared(torch.from_numpy(x[i])), torch.from_numpy(y[i]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    prepared.apply(torch.ao.quantization.disable_observer)
    prepared.eval()
    qat_path = os.path.join(work, "qat.onnx")
    with torch.no_grad():
        torch.onnx.export(prepared, torch.from_numpy(xe[:1]), qat_path, opset_version=13, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}},
                          do_constant_folding=fold)
        converted = convert_fx(copy.deepcopy(prepared))
        logits = converted(torch.from_numpy(xe)).numpy()
    np.save(os.path.join(work, "x.npy"), xe)
    weights = {}
    for name, mod in converted.named_modules():
        if not hasattr(mod, "weight") or not callable(mod.weight):
            continue
        qw = mod.weight()
        if qw.qscheme() in (torch.per_channel_symmetric, torch.per_channel_affine):
            ts = qw.q_per_channel_scales().numpy().astype(np.float32)
        else:
            ts = np.array([qw.q_scale()], np.float32)
        weights[name] = (qw.int_repr().numpy(), ts)
    return logits, ye, weights


def no_div_expect(src):
    """What `qfold finalize` must write for the model SRC (op(x, QDQ(W)) ->
    [Add(b)] -> BN, tests/ref/torch_qat_export.py no_div_case): {Conv / Gemm
    name: (int8 weight, scales, int32 bias)}."""
    m = onnx.load(src)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    users = {}
    for n in g.node:
        for name in n.input:
            users.setdefault(name, []).append(n)
    expect = {}
    for op in [n for n in g.node if n.op_type in ("Conv", "Gemm")]:
        nxt = users[op.output[0]][0]
        bn = users[nxt.output[0]][0] if nxt.op_type == "Add" else nxt
        if bn.op_type != "BatchNormalization":
            continue
        b = inits[nxt.input[1]].reshape(-1).astype(np.float64) if nxt.op_type == "Add" else 0.0
        gam, beta, mean, var = (inits[bn.input[k]].astype(np.float64) for k in range(1, 5))
        eps = float(np.float32(next(a.f for a in bn.attribute if a.name == "epsilon")))
        a = gam / np.sqrt(var + eps)
        q_node = producer[producer[op.input[1]].input[0]]
        w = torch.from_numpy(inits[q_node.input[0]])
        s = inits[q_node.input[1]].reshape(-1)
        shape = (-1,) + (1,) * (w.dim() - 1)
        if op.op_type == "Conv":
            q = torch.quantize_per_channel(w, torch.from_numpy(s).double(), torch.zeros(len(s), dtype=torch.long),
                                           0, torch.qint8).int_repr().numpy().astype(np.int32)
            q = (q * np.sign(a).reshape(shape)).astype(np.int32)
            sc = (s.astype(np.float64) * np.abs(a)).astype(np.float32)
        else:
            q = torch.quantize_per_tensor(w, float(s[0]), 0, torch.qint8).int_repr().numpy().astype(np.float64)
            v = torch.from_numpy((a.reshape(shape) * float(s[0]) * q).astype(np.float32))
            obs = torch.ao.quantization.MinMaxObserver(dtype=torch.qint8, quant_min=-128, quant_max=127,
                                                       qscheme=torch.per_tensor_symmetric)
            obs(v)
            scale, _ = obs.calculate_qparams()
            q = torch.quantize_per_tensor(v, float(scale), 0, torch.qint8).int_repr().numpy().astype(np.int32)
            sc = scale.numpy().astype(np.float32)
        s_in = float(inits[producer[op.input[0]].input[1]].reshape(-1)[0])
        bias = ((b - mean) * a + beta).astype(np.float32)
        bscale = (np.float32(s_in) * sc).astype(np.float32)
        bq = np.round(bias.astype(np.float64) / bscale.astype(np.float64)).astype(np.int64)
        expect[op.name] = (q, sc, bq)
    return expect


def export_float(path):
    """A float convbn model (no Q / DQ: not a QAT export) at PATH; seeded,
    so that the file is the same every time (a cached entry must be)."""
    torch.manual_seed(0)
    model = build("convbn").eval()
    randomize_bn(model, torch.Generator().manual_seed(1))
    torch.onnx.export(model, torch.zeros(1, 1, 28, 28), path, opset_version=13)
