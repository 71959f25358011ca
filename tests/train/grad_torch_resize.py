"""Resize forward and backward vs PyTorch 1.13: F.interpolate (nn.Upsample)
nearest and bilinear, align_corners True and False, by scale factor and by
size, up and down, against one ONNX Resize node in the form torch's exporter
writes for each (asymmetric + floor for nearest, pytorch_half_pixel /
half_pixel for bilinear, align_corners), run through qf_node_grad: the same
input and upstream gradient, results within 1e-5 relative
(tests/tools/grad_util.py says how relative). Also the 1-D and 3-D spatial
forms (linear / trilinear) and the opset-18 axes attribute."""
import argparse
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402

ARGS = None


def case(name, fn, x, attrs, scales=None, sizes=None, opset=13):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    xt = torch.tensor(x, requires_grad=True)
    y = fn(xt)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy))
    consts = [np.zeros(0, np.float32), np.asarray(scales, np.float32) if scales is not None else np.zeros(0, np.float32)]
    if sizes is not None:
        consts.append(np.asarray(sizes, np.int64))
    model = gu.one_node("Resize", [x] + consts, params=[False] + [True] * len(consts), attrs=attrs, opset=opset)
    outs, dins, _ = gu.qfold_grad(ARGS.tool, model, [x], [dy], os.path.join(ARGS.work, name))
    ok = True
    for what, got, ref in (("y", outs[0], y.detach().numpy()), ("dx", dins[0], xt.grad.numpy())):
        good, line = gu.compare("%s %s" % (name, what), got, ref)
        print(line)
        ok &= good
    return ok


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ARGS = ap.parse_args()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    ok = True
    near = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    for s in (2, 3):
        ok &= case("nearest_x%d" % s, lambda t, s=s: F.interpolate(t, scale_factor=s, mode="nearest"), x, near,
                   scales=[1, 1, s, s])
    ok &= case("nearest_x2x3", lambda t: F.interpolate(t, scale_factor=(2, 3), mode="nearest"), x, near,
               scales=[1, 1, 2, 3])
    ok &= case("nearest_size", lambda t: F.interpolate(t, size=(8, 11), mode="nearest"), x, near,
               sizes=[2, 3, 8, 11])
    ok &= case("nearest_down", lambda t: F.interpolate(t, size=(3, 4), mode="nearest"), x, near,
               sizes=[2, 3, 3, 4])
    for align in (False, True):
        coord = "align_corners" if align else "pytorch_half_pixel"
        lin = {"mode": "linear", "coordinate_transformation_mode": coord}
        tag = "ac" if align else "hp"
        ok &= case("bilinear_x2_" + tag,
                   lambda t, a=align: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=a), x, lin,
                   scales=[1, 1, 2, 2])
        ok &= case("bilinear_size_" + tag,
                   lambda t, a=align: F.interpolate(t, size=(9, 4), mode="bilinear", align_corners=a), x, lin,
                   sizes=[2, 3, 9, 4])
        ok &= case("bilinear_down_" + tag,
                   lambda t, a=align: F.interpolate(t, size=(2, 3), mode="bilinear", align_corners=a), x, lin,
                   sizes=[2, 3, 2, 3])
        # to an output size 1, ONNX's pytorch_half_pixel samples at 0 but torch
        # 1.13 at the centre, as half_pixel does (ONNX Runtime follows ONNX)
        ok &= case("bilinear_to1_" + tag,
                   lambda t, a=align: F.interpolate(t, size=(1, 6), mode="bilinear", align_corners=a), x,
                   lin if align else dict(lin, coordinate_transformation_mode="half_pixel"), sizes=[2, 3, 1, 6])
    # half_pixel is pytorch_half_pixel wherever the output size is above 1
    ok &= case("bilinear_x2_half_pixel", lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), x,
               {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, scales=[1, 1, 2, 2])
    x1 = rng.standard_normal((2, 3, 6)).astype(np.float32)
    ok &= case("linear_1d", lambda t: F.interpolate(t, scale_factor=2, mode="linear"), x1,
               {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, scales=[1, 1, 2])
    x3 = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    ok &= case("trilinear", lambda t: F.interpolate(t, size=(5, 7, 4), mode="trilinear", align_corners=True), x3,
               {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, sizes=[1, 2, 5, 7, 4])
    ok &= case("nearest_3d", lambda t: F.interpolate(t, scale_factor=2, mode="nearest"), x3, near,
               scales=[1, 1, 2, 2, 2])
    # opset 18: sizes for the axes given only
    ok &= case("bilinear_axes_18", lambda t: F.interpolate(t, size=(9, 4), mode="bilinear"), x,
               {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel", "axes": [2, 3]},
               sizes=[9, 4], opset=18)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
