#!/usr/bin/python3
"""A classifier head's `x.view(x.size(0), -1)` with a dynamic batch: the
export's Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain is rewritten
at import to Reshape(x, [0, -1]) (src/passes/fold_constants.c,
qf_fold_reshape_dims), so the model loads, runs at any batch, fuses,
quantizes and exports.

    view_batch_test.py --qfold BIN --node NODE --ort-run ORT_RUN.js --tflite-run TFLITE_RUN.py
                         --work DIR CASE

Cases:
  torch13, torch17  PyTorch 1.13's export (opset 13 / 17, dynamic batch) of
                    Conv + BatchNorm + ReLU, AvgPool, x.view(x.size(0), -1),
                    Linear: `qfold run` at batch 1 and 5 equals PyTorch
                    (1e-5 relative); `fuse`'s output passes onnx.checker, has
                    no Shape chain left and ONNX Runtime computes PyTorch's
                    outputs from it at batch 5; the quantized models (both
                    targets) run at batch 5 to what each sample gives alone,
                    and their
                    .tflite export runs on TFLite 2.2 to what `qfold run`
                    computes from the QDQ model (2% of the range).
  slice             the same head written Slice(Shape(x), [0], [1]) (onnx.helper):
                    loads and equals numpy.
  mismatch          Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 1)), [-1])):
                    the dim sits at another position, so the chain is not
                    rewritten and import refuses as before.
  other_tensor      the dim comes from another tensor's Shape: refused too.
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import qfcli  # noqa: E402
from qfcli import Skip, check  # noqa: E402

ARGS = None


def work(*p):
    return os.path.join(ARGS.work, *p)


def qfold(*argv, expect=0):
    _, out, err = qfcli.run_qfold(ARGS.qfold, argv, expect=expect, timeout=300)
    return out, err


def rel(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a - b))) / max(1e-6, float(np.max(np.abs(b))))


def close(a, b, what, tol=1e-5):
    check(a.shape == b.shape, "%s: shapes %s and %s" % (what, a.shape, b.shape))
    d = rel(a, b)
    check(d <= tol, "%s: relative difference %.3g > %g" % (what, d, tol))


def run(model, x, tag):
    xi, yo = work(tag + "_x.npy"), work(tag + "_y.npy")
    np.save(xi, x)
    qfold("run", model, "-i", xi, "-o", yo)
    return np.load(yo)


def ort(model, x, tag):
    d = work(tag + ".ort")
    os.makedirs(d, exist_ok=True)
    xi = work(tag + "_ortx.npy")
    np.save(xi, x)
    p = subprocess.run([ARGS.node, ARGS.ort_run, model, d, xi], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "ORT failed on %s:\n%s" % (model, p.stderr))
    return np.load(os.path.join(d, "out0.npy"))


def torch_case(opset):
    try:
        import onnx
        import torch
        from torch import nn
    except ImportError as e:
        raise Skip("needs torch and onnx: %s" % e)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.pool = nn.AvgPool2d(2)
            self.fc = nn.Linear(8 * 4 * 4, 10)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn(self.conv(x))))
            x = x.view(x.size(0), -1)
            return self.fc(x)

    torch.manual_seed(0)
    m = Net()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.3, 0.3)
    m.eval()
    model = work("view%d.onnx" % opset)
    torch.onnx.export(m, torch.randn(2, 3, 8, 8), model, opset_version=opset,
                      training=torch.onnx.TrainingMode.PRESERVE, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    ops = [n.op_type for n in onnx.load(model).graph.node]
    check("Shape" in ops and "Gather" in ops and "Reshape" in ops and "BatchNormalization" in ops,
          "the export lacks the shape chain or the BatchNorm: %s" % ops)

    rng = np.random.default_rng(opset)
    for b in (1, 5):
        x = rng.standard_normal((b, 3, 8, 8)).astype(np.float32)
        with torch.no_grad():
            ref = m(torch.from_numpy(x)).numpy()
        close(run(model, x, "b%d" % b), ref, "qfold run, batch %d" % b)

    fused = work("fused%d.onnx" % opset)
    qfold("fuse", model, "-o", fused)
    fm = onnx.load(fused)
    onnx.checker.check_model(fm)
    fops = [n.op_type for n in fm.graph.node]
    check(not {"Shape", "Gather", "Unsqueeze", "Concat", "BatchNormalization"} & set(fops),
          "fused model keeps %s" % fops)
    x = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        ref = m(torch.from_numpy(x)).numpy()
    close(ort(fused, x, "fused"), ref, "ORT on the fused model, batch 5")
    close(run(fused, x, "fused_run"), ref, "qfold run of the fused model, batch 5")

    calib = work("calib.npy")
    np.save(calib, rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    xh = work("x5_nhwc.npy")
    np.save(xh, x.transpose(0, 2, 3, 1).copy())  # the .tflite's input is NHWC
    no_tflite = None
    for target in ("neutron", "generic"):
        q = work("q_%s.onnx" % target)
        qfold("quantize", model, "-o", q, "--calib", calib, "--target", target)
        onnx.checker.check_model(onnx.load(q))
        qy = run(q, x, "q_%s" % target)  # the integer path, batch 5
        check(qy.shape == (5, 10), "quantized model's output has shape %s" % (qy.shape,))
        for i in range(5):  # each sample as it computes alone
            close(run(q, x[i:i + 1], "q1_%s_%d" % (target, i)), qy[i:i + 1], "quantized model, sample %d" % i, 0)
        tfl = work("q_%s.tflite" % target)
        qfold("export", q, "-o", tfl, "--float-io")
        p = subprocess.run([sys.executable, ARGS.tflite_run, tfl, xh, work("t_%s.npz" % target)],
                           capture_output=True, text=True, timeout=120)
        if p.returncode == 4:
            no_tflite = p.stderr.strip()
            continue
        check(p.returncode == 0, "TFLite refused %s:\n%s" % (tfl, p.stderr))
        ty = np.load(work("t_%s.npz" % target))["y"].reshape(qy.shape)
        # TFLite's int8 kernels against qfold's model of them: an output LSB at most
        close(ty, qy, "TFLite against qfold run of the QDQ model", 0.02)
    if no_tflite:
        raise Skip("all but the TFLite run checked; its library is missing: %s" % no_tflite)


def case_torch13():
    torch_case(13)


def case_torch17():
    torch_case(17)


def helper_model(name, shape_nodes, extra_inputs=()):
    """x [N, 4, 3] -> Relu -> Reshape(r, s) where shape_nodes compute s."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError as e:
        raise Skip("needs onnx: %s" % e)
    i64 = lambda n, v, dims=None: helper.make_tensor(n, TensorProto.INT64, [len(v)] if dims is None else dims, v)
    inits = [i64("idx0", [0], []), i64("idx1", [1], []), i64("ax0", [0]), i64("m1", [-1]),
             i64("st", [0]), i64("en", [1])]
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu")] + shape_nodes + [
        helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3])] + list(extra_inputs)
    g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    path = work(name + ".onnx")
    onnx.save(m, path)
    return path


def case_slice():
    from onnx import helper
    path = helper_model("slice", [
        helper.make_node("Shape", ["r"], ["sh"], name="shape"),
        helper.make_node("Slice", ["sh", "st", "en"], ["d0"], name="slice"),
        helper.make_node("Concat", ["d0", "m1"], ["s"], name="concat", axis=0)])
    x = np.random.default_rng(3).standard_normal((5, 4, 3)).astype(np.float32)
    close(run(path, x, "slice"), np.maximum(x, 0).reshape(5, -1), "qfold run of Slice(Shape) head", 0)


def case_mismatch():
    from onnx import helper
    path = helper_model("mismatch", [
        helper.make_node("Shape", ["r"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "idx1"], ["g"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["g", "ax0"], ["u"], name="unsq"),
        helper.make_node("Concat", ["u", "m1"], ["s"], name="concat", axis=0)])
    _, err = qfold("inspect", path, expect=2)
    qfcli.error_line(err, "node 'reshape' (Reshape): shape 's' is not a constant (dynamic shapes are not supported)")


def case_other_tensor():
    from onnx import TensorProto, helper
    path = helper_model("other", [
        helper.make_node("Shape", ["z"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "idx0"], ["g"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["g", "ax0"], ["u"], name="unsq"),
        helper.make_node("Concat", ["u", "m1"], ["s"], name="concat", axis=0)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["M", 2])])
    _, err = qfold("inspect", path, expect=2)
    qfcli.error_line(err, "node 'reshape' (Reshape): shape 's' is not a constant (dynamic shapes are not supported)")


if __name__ == "__main__":
    sys.exit(qfcli.main("view_batch", globals(), paths=("--work", "--ort-run", "--tflite-run"), options=("--node",)))
