#!/usr/bin/python3
"""Resize exported to TFLite (RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR) and
run by TensorFlow Lite 2.2 and ArmNN 20.08 against qfold's integer reference
(`QFOLD_ENGINE=ref qfold run` of the QDQ model); registered by
tests/tflite/resize.cmake.

    resize_test.py --qfold BIN --root DIR --work DIR --schema-py DIR CASE

- refusals: the forms qfold does not run, each refused naming the node and
  the reason.
- sweep: one DQ -> Resize -> Q per form (nearest and linear, every
  coordinate mode TFLite can express, scales and sizes, up and down, odd
  sizes), random int8 inputs: TFLite 2.2 bit-exact, ArmNN within
  ARMNN_LSB (it computes linear in float from dequantized values and
  rounds); the forms TFLite cannot express refused naming the mode.
- unet_13 / unet_17: a small U-Net (Conv+BN+ReLU, MaxPool, nn.Upsample
  nearest and bilinear with align_corners False and True, Concat skips)
  exported by PyTorch at opset 13 (batch 1) and 17 (dynamic batch),
  quantized for both targets and exported: each op alone on both runtimes,
  the whole model (armnn_test.export_and_check), and ONNX Runtime on the QDQ
  model against qfold's simulation of it.
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, HERE)
from qfcli import check, error_line, run_qfold  # noqa: E402
import armnn_test as at  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import refcache  # noqa: E402

ARGS = None  # set by qfcli.main

# ArmNN 20.08 against qfold's integer reference: nearest copies (exact);
# linear is computed on dequantized floats and rounded to nearest, where
# TFLite 2.2's int8 kernel truncates its float sum toward zero.
ARMNN_LSB = {"nearest": 0, "linear": 1}


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv, expect=0, env=None):
    _, out, err = run_qfold(ARGS.qfold, argv, expect=expect, timeout=600, env=env)
    return out, err


def resize_model(path, shape, attrs, scales=None, sizes=None, q=(0.05, 3), opset=13):
    """x -> Q -> DQ -> Resize -> Q -> DQ -> y (shared qparams q)."""
    import onnx
    from onnx import TensorProto, helper
    init = [helper.make_tensor("s", TensorProto.FLOAT, [], [q[0]]),
            helper.make_tensor("z", TensorProto.INT8, [], [q[1]])]
    ins = ["xd", ""]
    if scales is not None:
        init.append(helper.make_tensor("scales", TensorProto.FLOAT, [len(scales)], scales))
        ins.append("scales")
    else:
        init.append(helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes))
        ins += ["", "sizes"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Resize", ins, ["t"], name="resize", **attrs),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(m, path)


NEAR = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


def lin(coord):
    return {"mode": "linear", "coordinate_transformation_mode": coord}


# (what, attrs, scales, sizes) on x [8, 3, 5, 7]
FORMS = [
    ("nearest x2 (nn.Upsample)", NEAR, [1, 1, 2, 2], None),
    ("nearest x3x2", NEAR, [1, 1, 3, 2], None),
    ("nearest to 9x4", NEAR, None, [8, 3, 9, 4]),
    ("nearest down to 3x4", NEAR, None, [8, 3, 3, 4]),
    ("nearest half_pixel round_prefer_floor x2", {"mode": "nearest"}, [1, 1, 2, 2], None),
    ("linear asymmetric x2", lin("asymmetric"), [1, 1, 2, 2], None),
    ("linear pytorch_half_pixel x2", lin("pytorch_half_pixel"), [1, 1, 2, 2], None),
    ("linear half_pixel to 9x4", lin("half_pixel"), None, [8, 3, 9, 4]),
    ("linear half_pixel down to 3x4", lin("half_pixel"), None, [8, 3, 3, 4]),
    ("linear align_corners to 8x11", lin("align_corners"), None, [8, 3, 8, 11]),
    ("linear align_corners x2", lin("align_corners"), [1, 1, 2, 2], None),
    # opset 18: scales / sizes of the axes given only
    ("linear pytorch_half_pixel x2, axes [2, 3]", dict(lin("pytorch_half_pixel"), axes=[2, 3]), [2, 2], None),
    ("nearest to 9x4, axes [2, 3]", dict(NEAR, axes=[2, 3]), None, [9, 4]),
]

# Forms TFLite 2.2 cannot express: the export refuses them, naming the mode.
REFUSED = [
    ("linear half_pixel_symmetric", lin("half_pixel_symmetric"), [1, 1, 2, 2], None, "half_pixel_symmetric"),
    ("nearest asymmetric ceil", dict(NEAR, nearest_mode="ceil"), [1, 1, 2, 2], None, "nearest_mode 'ceil'"),
    # rounding the half-pixel position differs from floor(x * 5 / 9) at x = 5
    ("nearest half_pixel to 9x4", {"mode": "nearest"}, None, [8, 3, 9, 4], "'half_pixel'"),
    ("linear asymmetric x1.5", lin("asymmetric"), [1, 1, 1.5, 1.5], None, "scale 1.5"),
    # TFLite 2.2's int8 nearest ignores align_corners: it would pick floor(x * in / out)
    ("nearest align_corners round_prefer_ceil to 8x11",
     {"mode": "nearest", "coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"},
     None, [8, 3, 8, 11], "'align_corners'"),
]

# ArmNN 20.08 ignores RESIZE_BILINEAR's half_pixel_centers: on the half-pixel
# forms it computes the asymmetric form (checked against qfold's reference of
# that form, within ARMNN_LSB); TFLite 2.2 honours it.
HALF_PIXEL = ("half_pixel", "pytorch_half_pixel")


def case_sweep():
    rng = np.random.default_rng(29)
    q = (0.05, 3)
    xq = rng.integers(-128, 128, (8, 3, 5, 7)).astype(np.int8)
    x = ((xq.astype(np.float64) - q[1]) * q[0]).astype(np.float32)
    np.save(work("x.npy"), x)
    np.save(work("xq.npy"), at.nhwc(xq))
    jobs, refs, armnn_refs = [], [], []

    def reference(model, tag):
        qfold("run", model, "-i", work("x.npy"), "-o", work(tag + "_y.npy"), env=dict(os.environ, QFOLD_ENGINE="ref"))
        y = np.load(work(tag + "_y.npy"))
        return np.rint(y.astype(np.float64) / q[0] + q[1]).astype(np.int32)

    for k, (what, attrs, scales, sizes) in enumerate(FORMS):
        model, out = work("f%d.onnx" % k), work("f%d.tflite" % k)
        resize_model(model, [8, 3, 5, 7], attrs, scales, sizes, q, opset=18 if "axes" in attrs else 13)
        qfold("export", model, "-o", out)
        at.structure(out)
        refs.append(reference(model, "f%d" % k))
        armnn_refs.append(refs[-1])
        if attrs["mode"] == "linear" and attrs["coordinate_transformation_mode"] in HALF_PIXEL:
            resize_model(work("a%d.onnx" % k), [8, 3, 5, 7], dict(attrs, coordinate_transformation_mode="asymmetric"),
                         scales, sizes, q, opset=18 if "axes" in attrs else 13)
            armnn_refs[-1] = reference(work("a%d.onnx" % k), "a%d" % k)
        jobs.append((out, work("xq.npy")))
    failed = []
    for rt in ("TFLite", "ArmNN"):
        got = at.armnn_many(jobs, rt)
        rows = []
        for (what, attrs, _, _), g, r in zip(FORMS, got, refs if rt == "TFLite" else armnn_refs):
            a = at.nchw(list(g.values())[0]).astype(np.int32)
            check(a.shape == r.shape, "%s %s: shape %s, qfold %s" % (rt, what, a.shape, r.shape))
            d = np.abs(a - r)
            lim = 0 if rt == "TFLite" else ARMNN_LSB[attrs["mode"]]
            rows.append((what, int(d.max()), float((d > 0).mean()), lim))
        print("%s vs qfold's integer reference (max LSB, share differing, allowed):\n  %s"
              % (rt, "\n  ".join("%s: %d %.4f (%d)" % r for r in rows)))
        failed += [(rt,) + r for r in rows if r[1] > r[3]]
    check(not failed, "forms further from qfold's integer reference than allowed: %r" % failed)
    for k, (what, attrs, scales, sizes, why) in enumerate(REFUSED):
        model, out = work("r%d.onnx" % k), work("r%d.tflite" % k)
        resize_model(model, [8, 3, 5, 7], attrs, scales, sizes, q)
        if os.path.exists(out):
            os.remove(out)
        _, _, err = run_qfold(ARGS.qfold, ["export", model, "-o", out], expect=2)
        error_line(err, "'resize'", why)
        check(not os.path.exists(out), "%s: a file was written" % what)
        print("refused: %s: %s" % (what, err.strip().splitlines()[-1]))


def float_model(path, attrs, inputs, opset=13, shape=(1, 2, 4, 4)):
    """x -> Resize(x, *inputs) -> y; inputs: (name, array or None) after X."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    init, names = [], ["x"]
    for name, a in inputs:
        names.append(name if a is not None else "")
        if a is not None:
            init.append(numpy_helper.from_array(np.asarray(a), name))
    node = helper.make_node("Resize", names, ["y"], name="rs", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], init)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)


def case_refusals():
    """What qfold does not run is refused with the node and the reason (exit 2)."""
    roi, sc = ("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))
    sizes = ("sizes", np.array([1, 2, 8, 8], np.int64))
    cases = [
        ("cubic", {"mode": "cubic"}, [roi, sc], 13, "mode 'cubic' is not supported"),
        ("crop", {"coordinate_transformation_mode": "tf_crop_and_resize"}, [roi, sc], 13, "tf_crop_and_resize"),
        ("antialias", {"mode": "linear", "antialias": 1}, [roi, sc], 18, "antialias=1 is not supported"),
        ("keep_aspect", {"keep_aspect_ratio_policy": "not_larger"}, [roi, ("scales", None), sizes], 18,
         "keep_aspect_ratio_policy 'not_larger'"),
        ("resize10", {}, [("scales", sc[1])], 10, "Resize-10 is not supported"),
        ("both", {}, [roi, sc, sizes], 13, "both scales and sizes are given"),
        ("neither", {}, [roi], 13, "neither scales nor sizes is given"),
        ("bad_scale", {}, [roi, ("scales", np.array([1, 1, 0, 2], np.float32))], 13, "is not a positive number"),
        ("nearest_mode", {"nearest_mode": "odd"}, [roi, sc], 13, "nearest_mode 'odd'"),
    ]
    np.save(work("x.npy"), np.zeros((1, 2, 4, 4), np.float32))
    for name, attrs, inputs, opset, why in cases:
        model = work(name + ".onnx")
        float_model(model, attrs, inputs, opset)
        _, _, err = run_qfold(ARGS.qfold, ["run", model, "-i", work("x.npy"), "-o", work("y.npy")], expect=2)
        line = error_line(err, why)
        print("%s: %s" % (name, line))


# --- the U-Net ----------------------------------------------------------------------

def net_unet():
    import torch
    import torch.nn as nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.e3 = block(3, 8), block(8, 12), block(12, 16)
            self.pool = nn.MaxPool2d(2)
            self.up_near = nn.Upsample(scale_factor=2, mode="nearest")
            self.up_lin = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.d2, self.d1 = block(16 + 12, 12), block(12 + 8, 8)
            self.head = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            a = self.e1(x)
            b = self.e2(self.pool(a))
            c = self.e3(self.pool(b))
            b2 = self.d2(torch.cat([self.up_near(c), b], 1))
            a2 = self.d1(torch.cat([self.up_lin(b2), a], 1))
            a2 = a2 + nn.functional.interpolate(a2, scale_factor=1.0, mode="bilinear", align_corners=True)
            return self.head(nn.functional.interpolate(a2, size=(12, 12), mode="bilinear", align_corners=True))

    torch.manual_seed(3)
    net = UNet()
    for i, m in enumerate(x for x in net.modules() if isinstance(x, nn.BatchNorm2d)):
        at.bn_init(m, i)
    return net


def torch_export_unet(opset, batch1, path):
    import torch
    net = net_unet()
    net.eval()
    torch.onnx.export(net, torch.zeros(1, 3, 16, 16), path, opset_version=opset, input_names=["x"],
                      output_names=["y"], training=torch.onnx.TrainingMode.PRESERVE,
                      dynamic_axes=None if batch1 else {"x": {0: "N"}, "y": {0: "N"}})


def ort_run(model, x):
    out = work("ort")
    os.makedirs(out, exist_ok=True)
    np.save(work("ort_x.npy"), x)
    p = subprocess.run(["node", os.path.join(HERE, "..", "ref", "ort_run.js"), model, out, work("ort_x.npy")],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "ONNX Runtime failed: %s" % p.stderr[-2000:])
    return np.load(os.path.join(out, "out0.npy"))


def unet_tflite(qdq, x):
    """The export on both runtimes: each op alone against qfold's integer
    reference (TFLite 2.2 bit-exact; ArmNN within 1 LSB but RESIZE_BILINEAR,
    whose half_pixel_centers ArmNN 20.08 ignores: printed), and the whole
    model on TFLite 2.2 equal to `QFOLD_ENGINE=ref qfold run`."""
    out, dbg = work("m.tflite"), work("dbg.tflite")
    rep, _ = qfold("export", qdq, "-o", out)
    print(rep.strip().splitlines()[0] if rep.strip() else "")
    at.structure(out)
    qfold("export", qdq, "-o", dbg, "--all-outputs")
    at.structure(dbg)
    (si, zi), (so, zo) = at.io_qparams(out)
    xq = at.nhwc(at.quantize_input(x, si, zi))
    sg = at.tfl().Model.Model.GetRootAs(open(dbg, "rb").read(), 0).Subgraphs(0)
    in_name = sg.Tensors(sg.Inputs(0)).Name().decode()
    chained = at.armnn(dbg, xq, "TFLite")
    ref = at.int8_reference(qdq, x, list(chained) + [in_name])
    for rt in ("TFLite", "ArmNN"):
        alone = at.per_op(dbg, ref, {in_name: xq}, rt)
        print("each op alone on %s vs qfold's integer reference (max LSB, share differing): %s"
              % (rt, ", ".join("%s %d %.4f" % v for v in alone.values())))
        check(any(v[0] == "RESIZE_BILINEAR" for v in alone.values()) and
              any(v[0] == "RESIZE_NEAREST_NEIGHBOR" for v in alone.values()), "no resize op was compared")
        lim = (lambda op: 0) if rt == "TFLite" else (lambda op: 1 if op != "RESIZE_BILINEAR" else 255)
        bad = {k: v for k, v in alone.items() if v[1] > lim(v[0])}
        check(not bad, "%s: ops further from qfold's integer reference than allowed: %r" % (rt, bad))
    np.save(work("x.npy"), x)
    qfold("run", qdq, "-i", work("x.npy"), "-o", work("q.npy"), env=dict(os.environ, QFOLD_ENGINE="ref"))
    yq = np.load(work("q.npy"))
    y = at.nchw(list(at.armnn(out, xq, "TFLite").values())[0])
    d = np.abs((y.astype(np.float64) - zo) * so - yq.reshape(y.shape)) / so
    print("whole model on TFLite 2.2 vs QFOLD_ENGINE=ref qfold run: max %.4f LSB" % d.max())
    check(d.max() <= 1e-3, "TFLite 2.2 whole model differs from qfold's int8 run: max %.3f LSB" % d.max())


def simulate(qdq, x):
    np.save(work("sim_x.npy"), x)
    qfold("run", qdq, "--simulate", "-i", work("sim_x.npy"), "-o", work("sim.npy"))
    return np.load(work("sim.npy"))


def unet(opset, batch1):
    import onnx
    model = work("unet.onnx")
    refcache.call(torch_export_unet, opset, batch1, model, base=ARGS.work)
    ops = {n.op_type for n in onnx.load(model).graph.node}
    check("Resize" in ops, "the export has no Resize: %r" % sorted(ops))
    rng = np.random.default_rng(opset)
    calib = work("calib.npy")
    np.save(calib, rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    x = rng.standard_normal((8 if batch1 else 24, 3, 16, 16)).astype(np.float32)
    for target in ("neutron", "generic"):
        print("--- opset %d%s, target %s" % (opset, ", batch 1" if batch1 else "", target))
        qdq = work("unet_%s.onnx" % target)
        out, _ = qfold("quantize", model, "-o", qdq, "--calib", calib, "--target", target)
        print(out.strip().splitlines()[-1] if out.strip() else "")
        g = onnx.load(qdq).graph
        made = {o: n.op_type for n in g.node for o in n.output}
        rs = [n for n in g.node if n.op_type == "Resize"]
        check(rs and all(made.get(n.input[0]) == "DequantizeLinear" for n in rs),
              "%s: a Resize is not quantized (its input is not a DequantizeLinear)" % target)
        # a batch-1 model runs one sample a `qfold run` (each op alone still sees every pixel)
        unet_tflite(qdq, x[:1] if batch1 else x)
        # ONNX Runtime on the QDQ model against qfold's float simulation of it
        sim = np.concatenate([simulate(qdq, x[i:i + 1]) for i in range(len(x))]) if batch1 else simulate(qdq, x)
        ort = np.concatenate([ort_run(qdq, x[i:i + 1]) for i in range(len(x))]) if batch1 else ort_run(qdq, x)
        d = np.abs(ort - sim)
        top = float((ort.reshape(len(x), 4, -1).argmax(1) == sim.reshape(len(x), 4, -1).argmax(1)).mean())
        print("ONNX Runtime vs qfold --simulate on the QDQ model: max %.4g, mean %.4g; per-pixel top-1 agreement "
              "%.4f" % (d.max(), d.mean(), top))
        check(top >= 0.98, "ORT vs qfold per-pixel top-1 agreement %.4f < 0.98" % top)


def case_unet_13():
    unet(13, True)


def case_unet_17():
    unet(17, False)


if __name__ == "__main__":
    import qfcli
    ns = globals()

    def shared(fn):
        # armnn_test's helpers read their own ARGS: the same arguments
        def run():
            at.ARGS = ns["ARGS"]
            fn()
        return run
    ns.update({k: shared(v) for k, v in list(ns.items()) if k.startswith("case_")})
    sys.exit(qfcli.main("tflite_resize", ns, paths=("--root", "--work", "--schema-py")))
