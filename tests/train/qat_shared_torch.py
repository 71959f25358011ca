"""A shared-qparams group in QAT vs PyTorch 1.13 FX QAT.

FX gives the members of such a group (an activation and the MaxPool /
Flatten outputs that share its qparams) one FakeQuantize module, called once
per member: each call observes its own tensor, moving the running range and
so the scale, and quantizes with the scale as it is then; autograd keeps each
call's clamp mask for its backward. qfold's QAT quantizer (profile neutron,
the qf_qat_step driver's `@fq_all`) gives the group's fake_quants one set of
buffers. The model Conv -> MaxPool -> Flatten -> Gemm has no Relu, so the
pool's observe raises the running min the conv output set and the scale
shrinks between the first member's forward and its backward: masking there
with the moved scale (recomputing from X) zeroes the gradient of the conv
output's smallest values, which torch passes.

Two training steps (no update, loss sum((y - t)^2)) through qf_qat_step and
the same modules written out in torch (the FX graph of this model:
fq_x(x) -> conv(fq_w(W)) -> fq_c -> maxpool -> fq_c -> flatten -> fq_c ->
linear(fq_w2(W2)) -> fq_y; bias not fake-quantized). Per step: the output
and the gradients of x, W, B, W2, B2 within 1e-5 relative, every
fake-quant's scale / zero point / running range within 1e-6."""
import argparse
import os
import sys
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch.ao.quantization import FakeQuantize, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
STEPS = 2


def act_fq():
    return FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
                        qscheme=torch.per_tensor_affine, averaging_constant=0.01)


def weight_fq(per_channel):
    if per_channel:
        return FakeQuantize(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-127, quant_max=127,
                            dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0,
                            averaging_constant=0.01)
    return FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=-127, quant_max=127, dtype=torch.qint8,
                        qscheme=torch.per_tensor_symmetric, averaging_constant=0.01)


def onnx_model(w, b, w2, b2, xshape, yshape):
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (b, "B"), (w2, "W2"), (b2, "B2"))]
    g = helper.make_graph(nodes, "qat_shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, yshape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def case(args, name, n, cin, cout, hw, classes):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    w = (rng.standard_normal((cout, cin, 3, 3)) * 0.4).astype(np.float32)
    b = rng.uniform(-0.3, 0.3, cout).astype(np.float32)
    feat = cout * ((hw - 2) // 2) ** 2
    w2 = (rng.standard_normal((classes, feat)) * 0.3).astype(np.float32)
    b2 = rng.uniform(-0.3, 0.3, classes).astype(np.float32)
    xs = [(rng.standard_normal((n, cin, hw, hw)) * (1 + 0.5 * k) + 0.2 * k).astype(np.float32)
          for k in range(STEPS)]
    ts = [rng.standard_normal((n, classes)).astype(np.float32) for _ in range(STEPS)]
    load = gu.qfold_qat_step(args.tool, onnx_model(w, b, w2, b2, [n, cin, hw, hw], [n, classes]),
                             os.path.join(args.work, name), ["canonicalize", "@fq_all"], xs, ts)

    fq = {"x": act_fq(), "W": weight_fq(True), "c": act_fq(), "W2": weight_fq(False), "y": act_fq()}
    for m in fq.values():
        m.train()
    params = {k: torch.tensor(a, requires_grad=True) for k, a in (("W", w), ("B", b), ("W2", w2), ("B2", b2))}
    ok, shrunk = True, False
    for k in range(STEPS):
        for p in params.values():
            p.grad = None
        xt = torch.tensor(xs[k], requires_grad=True)
        c = F.conv2d(fq["x"](xt), fq["W"](params["W"]), params["B"])
        c = fq["c"](c)
        before = float(fq["c"].scale)
        p = fq["c"](F.max_pool2d(c, 2, 2))
        shrunk |= float(fq["c"].scale) < before
        f = fq["c"](torch.flatten(p, 1))
        y = fq["y"](F.linear(f, fq["W2"](params["W2"]), params["B2"]))
        ((y - torch.tensor(ts[k])) ** 2).sum().backward()
        pairs = [("y", load("out", k), y.detach().numpy(), 1e-5), ("dx", load("grad", k, "x"), xt.grad.numpy(), 1e-5)]
        pairs += [("d" + n_, load("grad", k, n_), t.grad.numpy(), 1e-5) for n_, t in params.items()]
        for key, m in fq.items():
            obs = m.activation_post_process
            base = key + "_fq_"  # qfold names a group's buffers after the value its first member reads
            pairs += [(base + "scale", load("buf", k, base + "scale"), m.scale.numpy().astype(np.float32), 1e-6),
                      (base + "zero_point", load("buf", k, base + "zero_point"),
                       m.zero_point.numpy().astype(np.float32), 0.0),
                      (base + "min", load("buf", k, base + "min"), obs.min_val.detach().numpy().reshape(-1), 1e-6),
                      (base + "max", load("buf", k, base + "max"), obs.max_val.detach().numpy().reshape(-1), 1e-6)]
        for what, got, ref, tol in pairs:
            if got is None:
                print("%s step %d %s: qfold wrote nothing  FAIL" % (name, k, what))
                ok = False
                continue
            good, line = gu.compare("%s step %d %s" % (name, k, what), got.reshape(ref.shape), ref, rtol=tol)
            if tol == 0.0:
                good = np.array_equal(got.reshape(ref.shape), ref)
                line = "%s step %d %s: %s" % (name, k, what, "equal" if good else "DIFFERS  FAIL")
            if not good:
                print(line)
            ok &= good
    # The case must exercise what it is about: the group's scale moves
    # between its first member's forward and backward.
    if not shrunk:
        print("%s: the pool's observe did not move the group's scale: the case tests nothing  FAIL" % name)
        ok = False
    print("%s: %s" % (name, "ok" if ok else "FAILED"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    ok = case(args, "shared_small", 2, 3, 4, 8, 5)
    ok &= case(args, "shared_wide", 3, 5, 16, 12, 7)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
