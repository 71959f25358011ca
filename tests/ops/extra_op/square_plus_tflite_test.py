#!/usr/bin/python3
"""The made-up op square_plus's TFLite mapping, read back (registered by
tests/ops/extra_op.cmake).

    square_plus_tflite_test.py --exe TEST_EXTRA_OP_TFLITE --reader DIR --work DIR

Runs the C test (it exports DQ -> SquarePlus -> Q from a graph of the
extra-op build) and reads the .tflite it wrote with the Python reader flatc
generates from the vendored schema (--reader: the build tree's gen/tflite_py),
independent of the C++ writer: one operator code CUSTOM (32) with custom_code
"SquarePlus", one operator from the int8 input tensor to the int8 output
tensor (NHWC shapes, the graph's qparams, the subgraph's input and output),
no builtin options, its custom options the FlexBuffers map {"bias": 0.5}.
Exits 77 (skipped) when the FlatBuffers Python package is missing.
"""
import argparse
import os
import subprocess
import sys

CUSTOM, INT8 = 32, 9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", required=True)
    ap.add_argument("--reader", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    try:
        from flatbuffers import flexbuffers
    except ImportError:
        print("SKIP: the flatbuffers Python package is missing")
        return 77
    sys.path.insert(0, args.reader)
    from tflite.Model import Model

    os.makedirs(args.work, exist_ok=True)
    path = os.path.join(args.work, "square_plus.tflite")
    if os.path.exists(path):
        os.remove(path)
    subprocess.run([args.exe, path], check=True, timeout=60)

    fails = []

    def check(cond, what):
        if not cond:
            fails.append(what)
            print("FAIL: " + what)

    buf = open(path, "rb").read()
    check(buf[4:8] == b"TFL3", "identifier %r" % buf[4:8])
    m = Model.GetRootAs(buf, 0)
    check(m.OperatorCodesLength() == 1, "%d operator codes" % m.OperatorCodesLength())
    c = m.OperatorCodes(0)
    check(c.BuiltinCode() == CUSTOM and c.DeprecatedBuiltinCode() == CUSTOM,
          "operator code %d / %d, not CUSTOM" % (c.BuiltinCode(), c.DeprecatedBuiltinCode()))
    check(c.CustomCode() == b"SquarePlus", "custom_code %r" % c.CustomCode())
    sg = m.Subgraphs(0)
    check(sg.OperatorsLength() == 1, "%d operators" % sg.OperatorsLength())
    op = sg.Operators(0)
    ins, outs = list(op.InputsAsNumpy()), list(op.OutputsAsNumpy())
    check(op.OpcodeIndex() == 0, "opcode index %d" % op.OpcodeIndex())
    check(len(ins) == 1 and len(outs) == 1, "inputs %r outputs %r" % (ins, outs))
    check(list(sg.InputsAsNumpy()) == ins and list(sg.OutputsAsNumpy()) == outs,
          "subgraph inputs %r outputs %r" % (list(sg.InputsAsNumpy()), list(sg.OutputsAsNumpy())))
    check(op.BuiltinOptionsType() == 0, "builtin options type %d" % op.BuiltinOptionsType())
    check(op.CustomOptionsFormat() == 0, "custom options format %d (not FLEXBUFFERS)" % op.CustomOptionsFormat())
    opts = flexbuffers.Loads(bytes(op.CustomOptionsAsNumpy())) if op.CustomOptionsLength() else None
    check(opts == {"bias": 0.5}, "custom options %r" % (opts,))
    # tensors: int8 activations, NHWC, the graph's per-tensor qparams and names
    want = {ins[0]: (b"x_q", 0.05, -3), outs[0]: (b"y_q", 0.1, -100)}
    check(sg.TensorsLength() == 2, "%d tensors" % sg.TensorsLength())
    for ti, (name, scale, zp) in want.items():
        t = sg.Tensors(ti)
        q = t.Quantization()
        check(t.Name() == name, "tensor %d named %r, not %r" % (ti, t.Name(), name))
        check(t.Type() == INT8 and t.Buffer() == 0, "%r: type %d buffer %d" % (name, t.Type(), t.Buffer()))
        check(list(t.ShapeAsNumpy()) == [1, 2, 2, 3], "%r: shape %r, not NHWC [1, 2, 2, 3]"
              % (name, list(t.ShapeAsNumpy())))
        check(q is not None and q.ScaleLength() == 1 and abs(q.Scale(0) - scale) < 1e-7 and
              q.ZeroPointLength() == 1 and q.ZeroPoint(0) == zp, "%r: qparams" % name)
    print("square_plus: %d check(s) failed" % len(fails) if fails else "square_plus: CUSTOM SquarePlus read back")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
