#!/usr/bin/python3
"""Check qfold's exports of the node tests with the onnx checker.

    check_exports.py WORKDIR

node_runner writes qfold's export of each test model next to it
(qf_export.onnx, written at the model's opset). Each one must pass
onnx.checker.check_model with full_check (strict shape inference) and keep
the model's default-domain opset (qfold raises it only where a written op
needs a later one: none of these single-op models).
"""
import os
import sys

import onnx

# onnx 1.12 checks opsets up to 17 (the generator writes no later one).


def default_opset(m):
    return [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]


def main():
    mdir = os.path.join(sys.argv[1], "manifest")
    checked, bad = 0, []
    for name in sorted(os.listdir(mdir)):
        with open(os.path.join(mdir, name)) as f:
            dirs = [line.strip() for line in f if line.strip()]
        for d in dirs:
            path = os.path.join(d, "qf_export.onnx")
            if not os.path.exists(path):
                bad.append(f"{os.path.basename(d)}: no qf_export.onnx (did node_runner run?)")
                continue
            try:
                m = onnx.load(path)
                onnx.checker.check_model(m, full_check=True)
                want = default_opset(onnx.load(os.path.join(d, "model.onnx")))
                if default_opset(m) != max(want, 7):
                    raise ValueError(f"written at opset {default_opset(m)}, the model has {want}")
            except Exception as e:  # noqa: BLE001 - report every failure
                bad.append(f"{os.path.basename(d)}: {str(e).splitlines()[0][:300]}")
            checked += 1
    for b in bad:
        print("FAIL " + b)
    print(f"{checked} exports checked, {len(bad)} failed")
    return 1 if bad or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
