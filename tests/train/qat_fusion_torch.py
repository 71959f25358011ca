"""QAT's simulated BatchNorm fusion as a whole graph vs PyTorch 1.13.

An ONNX model op -> BatchNormalization [-> Relu] (op: Conv, ConvTranspose,
Gemm) goes through qfold's QAT preparation (canonicalize, the weight
fake-quant of the QAT quantizer, qat_bn_add) and two training steps of the
training plan (tests/train/qf_qat_step.c: no parameter update, loss
sum((y - t)^2)); the same weights, inputs and qparams go through
torch.nn.intrinsic.qat.ConvBn2d / ConvBnReLU2d / LinearBn1d (a per-channel
weight FakeQuantize [-127, 127] for conv, per-tensor for linear: the neutron
profile's weight schemes; averaging constant 0.01). ConvTranspose has no
torch module: its ConvBn formula (_forward_approximate with the scale on the
weight's axis 1) is written out here. Random, never-fresh BatchNorm
statistics, scale and shift.

Per step: the output and the gradients of the input, weight, bias, gamma and
beta within 1e-5 relative (grad_util.compare), the running mean / variance
and the weight fake-quant's scale, zero point and running min / max after
the step within 1e-6. Also with a frozen BatchNorm (freeze_bn_stats(): BN
on its running statistics, qfold's qfold_frozen)."""
import argparse
import os
import sys
import zlib
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
nniqat = torch.nn.intrinsic.qat
tq = torch.ao.quantization
STEPS = 2


def weight_fq(per_channel, axis=0):
    if per_channel:
        return tq.FakeQuantize.with_args(observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-127,
                                         quant_max=127, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                         ch_axis=axis, averaging_constant=0.01)
    return tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=-127, quant_max=127,
                                     dtype=torch.qint8, qscheme=torch.per_tensor_symmetric,
                                     averaging_constant=0.01)


def bn_arrays(rng, c):
    gamma = (rng.uniform(0.5, 1.5, c) * rng.choice([-1.0, 1.0], c)).astype(np.float32)
    beta = rng.uniform(-0.5, 0.5, c).astype(np.float32)
    mean = rng.uniform(-0.5, 0.5, c).astype(np.float32)
    var = rng.uniform(0.3, 2.0, c).astype(np.float32)
    return gamma, beta, mean, var


def onnx_model(cs, w, b, bn, xshape, yshape):
    """op -> BatchNormalization [-> Relu] with initializers w, b, gamma, beta,
    mean, var."""
    gamma, beta, mean, var = bn
    inits = [numpy_helper.from_array(w, "w")]
    op_in = ["x", "w"]
    if b is not None:
        inits.append(numpy_helper.from_array(b, "b"))
        op_in.append("b")
    for name, a in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        inits.append(numpy_helper.from_array(a, name))
    k = cs["kind"]
    if k == "linear":
        op = helper.make_node("Gemm", op_in, ["op_out"], name="op", transB=1)
    else:
        attrs = dict(kernel_shape=list(w.shape[2:]), strides=[cs.get("stride", 1)] * 2,
                     pads=[cs.get("pad", 0)] * 4, group=cs.get("groups", 1))
        op = helper.make_node("Conv" if k == "conv" else "ConvTranspose", op_in, ["op_out"], name="op", **attrs)
    nodes = [op, helper.make_node("BatchNormalization", ["op_out", "gamma", "beta", "mean", "var"],
                                  ["bn_out" if cs.get("relu") else "y"], name="bn", epsilon=cs["eps"],
                                  momentum=0.9)]
    if cs.get("relu"):
        nodes.append(helper.make_node("Relu", ["bn_out"], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(yshape))],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="qat_fusion_torch")


class ConvTBn(torch.nn.Module):
    """ConvTranspose2d + BatchNorm2d with the approximate simulated fusion,
    as ConvBn2d._forward_approximate with the output channel on the
    weight's axis 1 (groups 1)."""

    def __init__(self, w, b, eps, stride, pad):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(w))
        self.bias = torch.nn.Parameter(torch.tensor(b)) if b is not None else None
        self.bn = torch.nn.BatchNorm2d(w.shape[1], eps=eps, momentum=0.1)
        self.weight_fake_quant = weight_fq(True, axis=1)()
        self.stride, self.pad = stride, pad

    def forward(self, x):
        running_std = torch.sqrt(self.bn.running_var + self.bn.eps)
        s = self.bn.weight / running_std
        sw = self.weight_fake_quant(self.weight * s.reshape(1, -1, 1, 1))
        zero = torch.zeros(self.weight.shape[1], dtype=x.dtype)
        y = F.conv_transpose2d(x, sw, zero, self.stride, self.pad)
        y = y / s.reshape(1, -1, 1, 1)
        if self.bias is not None:
            y = y + self.bias.reshape(1, -1, 1, 1)
        return self.bn(y)


class SlowConvBn(torch.nn.Module):
    """The exact simulated fusion: _ConvBnNd._forward_slow of PyTorch 2.x
    (torch.ao.nn.intrinsic.qat.modules.conv_fused; 1.13 has only the
    approximate method), written out for conv, conv_transpose (the scale on
    the weight's axis 1, groups 1) and linear."""

    def __init__(self, kind, w, b, eps, stride=1, pad=0, groups=1):
        super().__init__()
        self.kind, self.stride, self.pad, self.groups = kind, stride, pad, groups
        self.weight = torch.nn.Parameter(torch.tensor(w))
        self.bias = torch.nn.Parameter(torch.tensor(b)) if b is not None else None
        cout = w.shape[1] if kind == "convt" else w.shape[0]
        self.cout = cout
        self.bn = (torch.nn.BatchNorm1d if kind == "linear" else torch.nn.BatchNorm2d)(cout, eps=eps, momentum=0.1)
        self.weight_fake_quant = weight_fq(kind != "linear", axis=1 if kind == "convt" else 0)()

    def op(self, x, w):
        zero = torch.zeros(self.cout, dtype=x.dtype)
        if self.kind == "conv":
            return F.conv2d(x, w, zero, self.stride, self.pad, 1, self.groups)
        if self.kind == "convt":
            return F.conv_transpose2d(x, w, zero, self.stride, self.pad)
        return F.linear(x, w, zero)

    def forward(self, x):
        weight_shape = [1] * self.weight.dim()
        weight_shape[1 if self.kind == "convt" else 0] = -1
        bias_shape = [1] * (2 if self.kind == "linear" else 4)
        bias_shape[1] = -1
        if self.bn.training:
            conv_out = self.op(x, self.weight)
            with torch.no_grad():
                conv_out_bias = conv_out if self.bias is None else conv_out + self.bias.reshape(bias_shape)
                self.bn(conv_out_bias)
            running_std = torch.sqrt(self.bn.running_var + self.bn.eps)
            scale_factor = self.bn.weight / running_std
            scaled_weight = self.weight_fake_quant(self.weight * scale_factor.reshape(weight_shape))
            conv_bn = self.op(x, scaled_weight)
            avg_dims = [0] + list(range(2, len(bias_shape)))
            batch_mean = conv_out.mean(avg_dims)
            batch_var = torch.square(conv_out - batch_mean.reshape(bias_shape)).mean(avg_dims)
            batch_std = torch.sqrt(batch_var + self.bn.eps)
            unscale_factor = running_std / batch_std
            conv_bn *= unscale_factor.reshape(bias_shape)
            fused_mean, fused_std = batch_mean, batch_std
        else:
            running_std = torch.sqrt(self.bn.running_var + self.bn.eps)
            scale_factor = self.bn.weight / running_std
            scaled_weight = self.weight_fake_quant(self.weight * scale_factor.reshape(weight_shape))
            conv_bn = self.op(x, scaled_weight)
            fused_mean = self.bn.running_mean - (self.bias if self.bias is not None else 0)
            fused_std = running_std
        fused_bias = self.bn.bias - self.bn.weight * fused_mean / fused_std
        conv_bn += fused_bias.reshape(bias_shape)
        if self.bias is not None:
            conv_bn += (self.bias - self.bias).reshape(bias_shape)
        return conv_bn


def torch_module(cs, w, b, bn):
    k, eps = cs["kind"], cs["eps"]
    if cs.get("exact"):
        m = SlowConvBn(k, w, b, eps, cs.get("stride", 1), cs.get("pad", 0), cs.get("groups", 1))
    elif k == "conv":
        qc = tq.QConfig(activation=torch.nn.Identity, weight=weight_fq(True))
        cls = nniqat.ConvBnReLU2d if cs.get("relu") else nniqat.ConvBn2d
        m = cls(w.shape[1] * cs.get("groups", 1), w.shape[0], w.shape[2], stride=cs.get("stride", 1),
                padding=cs.get("pad", 0), groups=cs.get("groups", 1), bias=b is not None, eps=eps, momentum=0.1,
                qconfig=qc)
    elif k == "linear":
        qc = tq.QConfig(activation=torch.nn.Identity, weight=weight_fq(False))
        m = nniqat.LinearBn1d(w.shape[1], w.shape[0], bias=b is not None, eps=eps, momentum=0.1, qconfig=qc)
    else:
        m = ConvTBn(w, b, eps, cs.get("stride", 1), cs.get("pad", 0))
    with torch.no_grad():
        m.weight.copy_(torch.tensor(w))
        if b is not None:
            m.bias.copy_(torch.tensor(b))
        gamma, beta, mean, var = bn
        m.bn.weight.copy_(torch.tensor(gamma))
        m.bn.bias.copy_(torch.tensor(beta))
        m.bn.running_mean.copy_(torch.tensor(mean))
        m.bn.running_var.copy_(torch.tensor(var))
    m.train()
    if cs.get("frozen"):
        if k == "convt" or cs.get("exact"):
            m.bn.eval()
        else:
            m.freeze_bn_stats()
    relu = cs.get("relu") and (k != "conv" or cs.get("exact"))
    return (lambda x: torch.relu(m(x))) if relu else m, m


def run_qfold(args, cs, model, xs, ts):
    return gu.qfold_qat_step(args.tool, model, os.path.join(args.work, cs["name"]), cs["passes"], xs, ts,
                             frozen=cs.get("frozen", False))


def shapes(cs):
    k = cs["kind"]
    n, cin, cout = 4, cs.get("cin", 3), cs.get("cout", 6)
    if k == "linear":
        return (n * 2, cin), (cout, cin)
    ks = cs.get("k", 3)
    hw = 6
    if k == "conv":
        return (n, cin, hw, hw), (cout, cin // cs.get("groups", 1), ks, ks)
    return (n, cin, hw, hw), (cin, cout, ks, ks)


def case(args, cs):
    rng = np.random.default_rng(zlib.crc32(cs["name"].encode()))
    xshape, wshape = shapes(cs)
    w = (rng.standard_normal(wshape) * 0.5).astype(np.float32)
    cout = wshape[1] if cs["kind"] == "convt" else wshape[0]
    b = rng.uniform(-0.5, 0.5, cout).astype(np.float32) if cs.get("bias") else None
    bn = bn_arrays(rng, cout)
    for c, v in cs.get("gamma", {}).items():
        bn[0][c] = v
    for c, v in cs.get("var", {}).items():
        bn[3][c] = v
    fwd, m = torch_module(cs, w, b, bn)
    xs = [(rng.standard_normal(xshape) * (1 + 0.5 * k) + 0.2 * k).astype(np.float32) for k in range(STEPS)]
    # The output shape from a plain op (the module's forward would update its state).
    if cs["kind"] == "linear":
        yshape = (xshape[0], cout)
    else:
        probe = (F.conv2d if cs["kind"] == "conv" else F.conv_transpose2d)(
            torch.tensor(xs[0]), torch.tensor(w), None, cs.get("stride", 1), cs.get("pad", 0),
            **({"groups": cs.get("groups", 1)} if cs["kind"] == "conv" else {}))
        yshape = tuple(probe.shape)
    ts = [rng.standard_normal(yshape).astype(np.float32) for _ in range(STEPS)]
    model = onnx_model(cs, w, b, bn, xshape, yshape)
    ok = True
    if cs.get("approx_fails"):
        # The approximate method divides by s = gamma / std: 0 / 0 in a
        # channel with gamma = 0, which BatchNorm's batch statistics refuse.
        try:
            run_qfold(args, dict(cs, name=cs["name"] + "_approx", passes=APPROX), model, xs, ts)
            print("%s: the approximate method ran  FAIL" % cs["name"])
            ok = False
        except RuntimeError as e:
            good = "nan" in str(e)
            print("%s: the approximate method fails: %s%s" % (cs["name"], str(e).split(": ", 2)[-1],
                                                               "" if good else "  FAIL"))
            ok &= good
    load = run_qfold(args, cs, model, xs, ts)
    fq = m.weight_fake_quant
    bn_in = []

    def keep_bn_input(mod, inp, out):
        if inp[0].requires_grad:
            inp[0].retain_grad()
        bn_in.append(inp[0])
    m.bn.register_forward_hook(keep_bn_input)
    for k in range(STEPS):
        for p in m.parameters():
            p.grad = None
        xt = torch.tensor(xs[k], requires_grad=True)
        y = fwd(xt)
        loss = ((y - torch.tensor(ts[k])) ** 2).sum()
        loss.backward()
        obs = fq.activation_post_process
        pairs = [("y", load("out", k), y.detach().numpy(), 1e-5),
                 ("dx", load("grad", k, "x"), xt.grad.numpy(), 1e-5),
                 ("dW", load("grad", k, "w"), m.weight.grad.numpy(), 1e-5),
                 ("dgamma", load("grad", k, "gamma"), m.bn.weight.grad.numpy(), 1e-5),
                 ("dbeta", load("grad", k, "beta"), m.bn.bias.grad.numpy(), 1e-5),
                 ("running_mean", load("buf", k, "mean"), m.bn.running_mean.numpy(), 1e-6),
                 ("running_var", load("buf", k, "var"), m.bn.running_var.numpy(), 1e-6),
                 ("fq scale", load("buf", k, "w_fq_scale"), fq.scale.numpy().astype(np.float32), 1e-6),
                 ("fq zero_point", load("buf", k, "w_fq_zero_point"), fq.zero_point.numpy().astype(np.float32),
                  0.0),
                 ("fq min", load("buf", k, "w_fq_min"), obs.min_val.detach().numpy().reshape(-1), 1e-6),
                 ("fq max", load("buf", k, "w_fq_max"), obs.max_val.detach().numpy().reshape(-1), 1e-6)]
        if b is not None:
            # BN on batch statistics removes the mean: d b is 0 up to the
            # rounding of sum(dL/d BN input), a sum of cancelling terms, so
            # the bound scales with the magnitude of those terms.
            ref = m.bias.grad.numpy()
            tol = 1e-5
            if not cs.get("frozen") and bn_in[-1].grad is not None:
                g = bn_in[-1].grad.abs()
                terms = float(g.sum([d for d in range(g.dim()) if d != 1]).max())
                tol *= max(1.0, terms) / max(1.0, float(abs(ref).max()))
            pairs.append(("db", load("grad", k, "b"), ref, tol))
        if cs.get("exact"):
            pairs.append(("finite", np.isfinite(load("out", k)).all() and np.isfinite(load("grad", k, "w")).all(),
                          True, None))
        for what, got, ref, tol in pairs:
            if tol is None:
                if got != ref:
                    print("%s step %d %s  FAIL" % (cs["name"], k, what))
                    ok = False
                continue
            tag = "%s step %d %s" % (cs["name"], k, what)
            if got is None:
                print("%s: missing  FAIL" % tag)
                ok = False
                continue
            good, line = gu.compare(tag, got.reshape(ref.shape), ref, rtol=tol)
            if not good:
                print(line)
            ok &= good
    print("%s: %s" % (cs["name"], "ok" if ok else "FAILED"))
    return ok


APPROX = ["canonicalize", "@fq_weights", "qat_bn_add"]
EXACT = ["canonicalize", "@fq_weights", "qat_bn_add_exact"]
CASES = [
    dict(name="convbn2d_bias", kind="conv", bias=True, eps=1e-5, pad=1, passes=APPROX),
    dict(name="convbnrelu2d_nobias_eps1e-3", kind="conv", bias=False, eps=1e-3, stride=2, relu=True,
         passes=APPROX),
    dict(name="convbn2d_grouped", kind="conv", bias=True, eps=1e-5, cin=4, groups=2, pad=1, passes=APPROX),
    dict(name="convbnrelu2d_frozen", kind="conv", bias=True, eps=1e-5, relu=True, frozen=True, passes=APPROX),
    dict(name="linearbn1d_bias", kind="linear", bias=True, eps=1e-5, cin=10, cout=7, passes=APPROX),
    dict(name="linearbn1d_nobias_eps1e-3", kind="linear", bias=False, eps=1e-3, cin=10, cout=7, passes=APPROX),
    dict(name="convtbn_bias", kind="convt", bias=True, eps=1e-5, cin=4, cout=5, stride=2, passes=APPROX),
    dict(name="convtbnrelu_nobias_eps1e-3", kind="convt", bias=False, eps=1e-3, cin=4, cout=5, pad=1,
         relu=True, passes=APPROX),
] + [dict(c, name="exact_" + c["name"], passes=EXACT, exact=True) for c in [
    dict(name="convbn2d_bias", kind="conv", bias=True, eps=1e-5, pad=1),
    dict(name="convbnrelu2d_nobias_eps1e-3", kind="conv", bias=False, eps=1e-3, stride=2, relu=True),
    dict(name="convbn2d_grouped", kind="conv", bias=True, eps=1e-5, cin=4, groups=2, pad=1),
    dict(name="convbnrelu2d_frozen", kind="conv", bias=True, eps=1e-5, relu=True, frozen=True),
    dict(name="linearbn1d_bias", kind="linear", bias=True, eps=1e-5, cin=10, cout=7),
    dict(name="linearbn1d_nobias_eps1e-3", kind="linear", bias=False, eps=1e-3, cin=10, cout=7),
    dict(name="convtbn_bias", kind="convt", bias=True, eps=1e-5, cin=4, cout=5, stride=2),
    dict(name="convtbnrelu_nobias_frozen", kind="convt", bias=False, eps=1e-3, cin=4, cout=5, pad=1, relu=True,
         frozen=True),
    # gamma = 0 in channel 0 and a running variance of 1e-12 in channel 2.
    dict(name="convbn2d_dead_channels", kind="conv", bias=True, eps=1e-5, pad=1, gamma={0: 0.0},
         var={2: 1e-12}, approx_fails=True),
    dict(name="linearbn1d_dead_channels", kind="linear", bias=False, eps=1e-3, cin=10, cout=7,
         gamma={1: 0.0, 4: 0.0}, var={3: 1e-12}, approx_fails=True),
    # Running variances 1e-12 and 0 with epsilon 1e-10: s ~ 1e5 gamma. The
    # approximate method stays finite here but is ill-conditioned (qfold's
    # and torch's approximate forwards, which round W*s / s differently,
    # part by 4e-4 in step 1); the exact one matches torch's.
    dict(name="convbn2d_tiny_var_eps1e-10", kind="conv", bias=True, eps=1e-10, pad=1, var={2: 1e-12, 3: 0.0}),
]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    ok = True
    for cs in CASES:
        if args.cases and cs["name"] not in args.cases:
            continue
        ok &= case(args, cs)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
