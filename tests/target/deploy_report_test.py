#!/usr/bin/python3
"""`qfold export --target neutron`: the deployment report with each TFLite
op's placement (src/target/deploy_report.c; registered by
tests/target/report.cmake).

    deploy_report_test.py --qfold BIN --work DIR CASE

The model, built here with onnx.helper and quantized by `qfold quantize
--target neutron`: x [1, 3, 8, 8] -> Conv 3 -> 6, 3x3 (the NPU takes it;
3 and 6 channels are padded to 8 MACs) -> Resize nearest x3 (the NPU
upsamples by 1, 2, 4 or 8 only: the CPU) -> y.

Cases:
  placement   the report's per-op keys (placement, rule, fix, note,
              partition, macs_padded) and its "placement" totals: the conv on
              the NPU with no rule and padded MACs above its MACs, the resize
              on the CPU with a rule; npu_macs + cpu_macs = macs =
              totals.macs = the sum of the ops' MACs; the fractions; the
              summary line `neutron: NPU: 1 of 2 ops, 100.0 % of MACs`.
  unchanged   `export` without --target writes the report it always did:
              no placement key, and the same text byte for byte as the
              --target report with the added members taken out (they are
              insertions only); its stderr summary has no NPU line.
"""
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from qfcli import check, main, run_qfold  # noqa: E402

ARGS = None  # set by qfcli.main


def work(name):
    return os.path.join(ARGS.work, name)


def qfold(*argv, expect=0):
    return run_qfold(ARGS.qfold, argv, expect=expect, timeout=300)


def build_model(path):
    import onnx
    from onnx import TensorProto, helper
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(6).astype(np.float32) * 0.1
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
             helper.make_tensor("b", TensorProto.FLOAT, b.shape, b),
             helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 3, 3])]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "", "scales"], ["y"], name="up3", mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    g = helper.make_graph(nodes, "conv_up3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 24, 24])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def quantized():
    """The QDQ model (quantize --target neutron on 16 random samples)."""
    f, q, calib = work("conv_up3.onnx"), work("conv_up3.q.onnx"), work("calib.npy")
    build_model(f)
    np.save(calib, np.random.default_rng(1).standard_normal((16, 3, 8, 8)).astype(np.float32))
    qfold("quantize", f, "-o", q, "--calib", calib, "--target", "neutron")
    return q


def export(q, name, *extra):
    rep = work(name + ".json")
    _, _, err = qfold("export", q, "-o", work(name + ".tflite"), "--report", rep, *extra)
    with open(rep) as f:
        text = f.read()
    return text, json.loads(text), err


OP_KEYS = ("placement", "rule", "fix", "note", "partition", "macs_padded")


def case_placement():
    q = quantized()
    _, r, err = export(q, "placed", "--target", "neutron")
    ops = r["ops"]
    for o in ops:
        for k in OP_KEYS:
            check(k in o, "op %d (%s) has no %r: %s" % (o["index"], o["op"], k, o))
        check(o["placement"] in ("npu", "cpu"), "op %d: placement %r" % (o["index"], o["placement"]))
        if o["placement"] == "cpu":
            check(isinstance(o["rule"], str) and o["rule"].strip(), "CPU op %d (%s) without a rule" % (o["index"], o["op"]))
            check(o["partition"] is None and o["macs_padded"] is None, "CPU op %d: %s" % (o["index"], o))
        else:
            check(o["rule"] is None and o["fix"] is None, "NPU op %d carries a rule: %s" % (o["index"], o))
            check(isinstance(o["partition"], int) and o["partition"] >= 0, "NPU op %d: partition %r"
                  % (o["index"], o["partition"]))
            check(o["macs_padded"] >= o["macs"], "NPU op %d: macs_padded %d < macs %d"
                  % (o["index"], o["macs_padded"], o["macs"]))
    by_op = {o["op"]: o for o in ops}
    check(set(by_op) == {"CONV_2D", "RESIZE_NEAREST_NEIGHBOR"}, "ops: %s" % [o["op"] for o in ops])
    conv, up = by_op["CONV_2D"], by_op["RESIZE_NEAREST_NEIGHBOR"]
    check(conv["node"] == "conv" and up["node"] == "up3", "nodes: %s, %s" % (conv["node"], up["node"]))
    check(conv["placement"] == "npu", "the conv is not on the NPU: %s" % conv)
    check(conv["macs"] == 6 * 8 * 8 * 3 * 3 * 3, "conv MACs %d" % conv["macs"])
    check(conv["macs_padded"] > conv["macs"], "3 -> 6 channels pad to 8 MACs: macs_padded %d, macs %d"
          % (conv["macs_padded"], conv["macs"]))
    check(up["placement"] == "cpu", "the x3 resize is not on the CPU: %s" % up)

    p = r["placement"]
    check(p["target"] == {"name": "neutron", "flow": "sdk3", "num_macs": 8, "num_pipes": 8}, "target %s" % p["target"])
    total = sum(o["macs"] for o in ops)
    check(p["macs"] == r["totals"]["macs"] == total, "macs %d, totals %d, ops %d" % (p["macs"], r["totals"]["macs"], total))
    check(p["npu_macs"] + p["cpu_macs"] == p["macs"], "npu %d + cpu %d != %d" % (p["npu_macs"], p["cpu_macs"], p["macs"]))
    check(p["npu_macs"] == sum(o["macs"] for o in ops if o["placement"] == "npu"), "npu_macs %d" % p["npu_macs"])
    check(p["npu_macs_padded"] == sum(o["macs_padded"] for o in ops if o["placement"] == "npu"),
          "npu_macs_padded %d" % p["npu_macs_padded"])
    check(p["padding_macs"] == p["npu_macs_padded"] - p["npu_macs"], "padding_macs %d" % p["padding_macs"])
    check(abs(p["npu_mac_utilisation"] - p["npu_macs"] / p["npu_macs_padded"]) < 1e-12,
          "utilisation %r" % p["npu_mac_utilisation"])
    check(abs(p["npu_mac_fraction"] - p["npu_macs"] / p["macs"]) < 1e-12, "fraction %r" % p["npu_mac_fraction"])
    check((p["ops"], p["npu_ops"], p["cpu_ops"]) == (2, 1, 1), "ops %d / npu %d / cpu %d"
          % (p["ops"], p["npu_ops"], p["cpu_ops"]))
    for k in ("from_float", "npu_nodes", "cpu_nodes", "partitions", "transitions"):
        check(k in p["check"], "placement.check has no %r" % k)
    check(p["check"]["from_float"] is False, "a QDQ model checked as float")

    # the two tflite lines, then the placement's (the --target passes' lines may follow)
    lines = err.strip().splitlines()
    check(len(lines) >= 3 and lines[0].startswith("tflite: ") and lines[1].startswith("tflite: "),
          "stderr: %r" % err)
    want = "neutron: NPU: 1 of 2 ops, %.1f %% of MACs" % (100 * p["npu_mac_fraction"])
    check(lines[2].startswith(want), "summary line %r, expected it to start with %r" % (lines[2], want))


# The members deploy_report.c adds: at the end of each op object, and one
# top-level object after "ops".
OP_EXTRA = re.compile(r', "placement": "(?:npu|cpu)", "rule": .*?, "macs_padded": (?:null|\d+)(?=\}(?:,|\n))')
TOP_EXTRA = re.compile(r',\n  "placement": \{.*\}\n\}\n$', re.S)


def case_unchanged():
    q = quantized()
    plain_text, plain, err = export(q, "plain")
    placed_text, _, _ = export(q, "placed", "--target", "neutron")
    check("placement" not in plain and all("placement" not in o for o in plain["ops"]),
          "the report without --target has placement keys")
    check(not any("NPU" in ln for ln in err.splitlines()), "summary without --target: %r" % err)
    check(len(OP_EXTRA.findall(placed_text)) == len(plain["ops"]), "not every op of the --target report has "
          "its placement members at the end")
    stripped = TOP_EXTRA.sub("\n}\n", OP_EXTRA.sub("", placed_text))
    check(stripped == plain_text, "the --target report is not the plain one plus members:\n%s\n---\n%s"
          % (stripped, plain_text))


if __name__ == "__main__":
    sys.exit(main("target_report", globals(), paths=("--work",)))
