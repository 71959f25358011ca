#!/usr/bin/python3
"""`qfold check` end to end (src/cli/cmd_check.c, src/target/check.c).

    check_test.py --qfold BIN --root SRC --work DIR CASE

Cases:
  float_vs_quantized  the bundled tiny CNN checked as a float model and as
                      `qfold quantize --target neutron`'s output: every node of
                      the QDQ model that the float model has too gets the same
                      placement and rule
  every_node_once     a PyTorch model (Conv + BatchNorm + ReLU, Dropout, erf,
                      Linear): every ONNX node named once, in the file's order,
                      the BatchNorm noted as folded into its conv, the Erf on
                      the CPU with "no Neutron converter for Erf"
  strict              --strict: exit 1 with a CPU node, 0 without (a QDQ model
                      whose only nodes are its float I/O's Q / DQ, not counted)
  dot                 --dot: a Graphviz graph holding every node
  truncated           a truncated model: exit 2, one error line, no report written
  bad_set             an unknown target, key or value: exit 2 naming it
  outputs             all or nothing: an unwritable --dot leaves no --json
                      (exit 2); out of memory (QFOLD_MAX_MEMORY) exits 1
                      with one line and writes nothing, no temporary file left;
                      a float model checks the same with $TMPDIR missing (the
                      quantized model is read back from memory)
  grouped             a Conv of 4 groups (+ BatchNorm + ReLU, made by
                      PyTorch): checked as a float model, one Conv on the NPU
                      with all its MACs and the split noted; its QDQ form
                      (`quantize --target neutron`: the int8 input split,
                      Split -> 4 Conv -> Concat) all on the NPU in one
                      partition, no transition, the same MACs
  linear3d            a Linear (+ ReLU) on a 3-D tensor, which qfold quantizes
                      as Transpose(DQ(W^T)) -> MatMul -> Add(DQ(bias)): the
                      MatMul on the NPU with its bias and ReLU, as a float
                      model and as its QDQ form
  ort_uint8           the QDQ model in ONNX Runtime quantize_static's form
                      (uint8 activations; made with onnx.helper from qfold's
                      int8 model, as no Python onnxruntime is installed here):
                      the same placements as the int8 model's
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import check, error_line, Skip  # noqa: E402

ARGS = None


def qfold(*argv, expect=0):
    return qfcli.run_qfold(ARGS.qfold, argv, expect=expect, timeout=240)


def work(name):
    return os.path.join(ARGS.work, name)


def tiny():
    return os.path.join(ARGS.root, "examples", "tiny_cnn.onnx")


def report(model, *extra):
    out = work(os.path.basename(model) + ".json")
    qfold("check", model, "--json", out, *extra)
    with open(out) as f:
        return json.load(f)


def quantized_tiny():
    q = work("tiny_q.onnx")
    qfold("quantize", tiny(), "-o", q, "--target", "neutron", "--calib",
          os.path.join(ARGS.root, "examples", "input.npy"))
    return q


def case_float_vs_quantized():
    a = report(tiny())
    b = report(quantized_tiny())
    check(a["from_float"] and not b["from_float"], "from_float: %s / %s" % (a["from_float"], b["from_float"]))
    fa = {n["name"]: n for n in a["nodes"]}
    same = 0
    for n in b["nodes"]:
        if n["qdq"] or n["name"] not in fa:
            continue
        m = fa[n["name"]]
        check((m["placement"], m["rule"]) == (n["placement"], n["rule"]),
              "%s: float model %s (%s), quantized %s (%s)" % (n["name"], m["placement"], m["rule"], n["placement"],
                                                            n["rule"]))
        same += 1
    check(same >= 10, "only %d nodes in common" % same)
    for k in ("npu_nodes", "cpu_nodes", "npu_mac_fraction", "transitions"):
        check(k in a["summary"], "summary lacks %s" % k)


def _torch_model(path):
    try:
        import torch
    except ImportError:
        raise Skip("no torch")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(16)
            self.drop = torch.nn.Dropout(0.2)
            self.conv2 = torch.nn.Conv2d(16, 8, 1)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            y = self.drop(y)
            y = torch.erf(self.conv2(y))
            return self.fc(torch.flatten(y, 1))

    torch.manual_seed(0)
    m = M().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.3, 0.3)
        m.bn.running_var.uniform_(0.5, 2.0)
    torch.onnx.export(m, torch.randn(1, 3, 8, 8), path, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False)


def case_every_node_once():
    import onnx
    src = work("m.onnx")
    _torch_model(src)
    names = [n.name for n in onnx.load(src).graph.node]
    r = report(src)
    got = [n["name"] for n in r["nodes"]]
    check(got == names, "nodes %s\nthe model's %s" % (got, names))
    by = {n["name"]: n for n in r["nodes"]}
    bn = [n for n in r["nodes"] if n["op"] == "BatchNormalization"]
    check(len(bn) == 1 and bn[0]["note"] and "folded into" in bn[0]["note"], "BatchNorm: %s" % bn)
    conv = [n for n in r["nodes"] if n["op"] == "Conv"][0]
    check(bn[0]["placement"] == conv["placement"] and bn[0]["macs"] == 0, "BatchNorm placed apart from its conv")
    check(conv["macs"] == 16 * 8 * 8 * 3 * 9, "conv MACs %d" % conv["macs"])
    check(conv["macs_padded"] == 16 * 8 * 8 * 8 * 9, "conv padded MACs %d (Cin 3 -> 8)" % conv["macs_padded"])
    erf = [n for n in r["nodes"] if n["op"] == "Erf"]
    check(len(erf) == 1 and erf[0]["placement"] == "cpu" and erf[0]["rule"] == "no Neutron converter for Erf",
          "Erf: %s" % erf)
    for n in r["nodes"]:
        check(n["placement"] in ("npu", "cpu"), "placement %r" % n["placement"])
        check(n["placement"] == "npu" or n["rule"], "%s on the CPU without a rule" % n["name"])
        check((n["partition"] >= 0) == (n["placement"] == "npu") or n["note"], "%s: partition %d, %s"
              % (n["name"], n["partition"], n["placement"]))
    listed = sorted(x for p in r["partitions"] for x in p)
    check(listed == sorted(n["name"] for n in r["nodes"] if n["partition"] >= 0), "partitions %s" % r["partitions"])
    check(r["summary"]["cpu_nodes"] == sum(1 for n in r["nodes"] if n["placement"] == "cpu" and not n["qdq"]),
          "cpu_nodes")
    check(by and r["target"] == {"name": "neutron", "flow": "sdk3", "num_macs": 8, "num_pipes": 8},
          "target %s" % r["target"])


def _qdq_only(path):
    import onnx
    from onnx import TensorProto, helper
    s = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
    z = helper.make_tensor("z", TensorProto.INT8, [], [0])
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
                           helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["y"], name="dq")], "io",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [s, z])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def case_strict():
    src = work("m.onnx")
    _torch_model(src)  # its Erf runs on the CPU
    _, out, _ = qfold("check", src)
    check("NPU: " in out, "no summary line:\n" + out)
    _, out, _ = qfold("check", src, "--strict", expect=1)
    io = work("io.onnx")
    _qdq_only(io)
    _, out, _ = qfold("check", io, "--strict")
    check("NPU: 0 of 0 ops" in out, "summary:\n" + out)
    r = report(io)
    check([n["qdq"] and n["placement"] == "cpu" for n in r["nodes"]] == [True, True], "I/O Q / DQ: %s" % r["nodes"])


def case_dot():
    d = work("g.dot")
    qfold("check", tiny(), "--dot", d)
    with open(d) as f:
        text = f.read()
    check(text.startswith("digraph") and text.rstrip().endswith("}"), "not a DOT graph")
    import onnx
    for n in onnx.load(tiny()).graph.node:
        if n.op_type == "Constant":  # an initializer once loaded
            continue
        check('"%s\\n' % n.name in text, "node %s not in the graph" % n.name)
    check("fillcolor" in text and "->" in text, "no colours or edges")


def case_truncated():
    with open(tiny(), "rb") as f:
        data = f.read()
    bad = work("cut.onnx")
    with open(bad, "wb") as f:
        f.write(data[: len(data) // 2])
    out = work("cut.json")
    _, _, err = qfold("check", bad, "--json", out, expect=2)
    error_line(err, "cut.onnx")
    check(len(err.strip().splitlines()) == 1, "more than one error line:\n" + err)
    check(not os.path.exists(out), "a report was written for a bad model")


def case_bad_set():
    _, _, err = qfold("check", tiny(), "--set", "num-macs=0", expect=2)
    error_line(err, "num-macs")
    _, _, err = qfold("check", tiny(), "--set", "flow=sdk2", expect=2)
    error_line(err, "unknown key 'flow'")
    _, _, err = qfold("check", tiny(), "--target", "ethos", expect=2)
    error_line(err, "unknown target 'ethos'")
    _, out, _ = qfold("check", tiny(), "--set", "neutron-flow=sdk2", "--set", "num-macs=16")
    check("SDK 2.x flow, 16 MACs" in out, "the parameters are not in the output:\n" + out)


def case_outputs():
    j = work("r.json")
    if os.path.exists(j):  # a previous run's
        os.unlink(j)
    _, _, err = qfold("check", tiny(), "--json", j, "--dot", work("no/such/dir/g.dot"), expect=2)
    error_line(err, "g.dot")
    check(not os.path.exists(j), "--json written though --dot cannot be")
    tmp = work("tmp")
    os.makedirs(tmp, exist_ok=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    env = dict(os.environ, QFOLD_MAX_MEMORY="256K", TMPDIR=tmp)
    rc, _, err = qfcli.run_qfold(ARGS.qfold, ["check", tiny(), "--json", j], env=env, timeout=240)
    check(rc == 1, "exit %d under QFOLD_MAX_MEMORY=256K, expected 1:\n%s" % (rc, err))
    error_line(err, "out of memory")
    check(not os.path.exists(j), "a report written after running out of memory")
    env["QFOLD_MAX_MEMORY"] = "1G"
    qfcli.run_qfold(ARGS.qfold, ["check", tiny(), "--json", j], env=env, expect=0, timeout=240)
    check(os.path.exists(j) and os.listdir(tmp) == [], "temporary files left: %s" % os.listdir(tmp))
    # The quantized model goes through memory, not a file: a $TMPDIR that
    # does not exist changes nothing, the report included.
    with open(j) as f:
        first = f.read()
    os.unlink(j)
    env = dict(os.environ, TMPDIR=work("no/such/tmpdir"))
    _, _, err = qfcli.run_qfold(ARGS.qfold, ["check", tiny(), "--json", j], env=env, expect=0, timeout=240)
    with open(j) as f:
        check(f.read() == first, "another report with TMPDIR missing")


def case_grouped():
    try:
        import torch
    except ImportError:
        raise Skip("no torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1, groups=4), torch.nn.BatchNorm2d(32),
                            torch.nn.ReLU()).eval()
    with torch.no_grad():
        m[1].running_mean.uniform_(-0.3, 0.3)
        m[1].running_var.uniform_(0.5, 2.0)
    src = work("grouped.onnx")
    torch.onnx.export(m, torch.randn(1, 32, 8, 8), src, opset_version=13, input_names=["x"], output_names=["y"])
    macs = 32 * (32 // 4) * 3 * 3 * 8 * 8
    a = report(src)
    convs = [n for n in a["nodes"] if n["op"] == "Conv"]
    check(len(convs) == 1, "float model: %d Conv nodes reported" % len(convs))
    c = convs[0]
    check(c["placement"] == "npu" and c["macs"] == macs and "4 groups" in (c["note"] or ""),
          "float model: the grouped Conv %s" % c)
    check(a["summary"]["transitions"] == 0 and a["summary"]["cpu_nodes"] == 0, "float model: %s" % a["summary"])
    import numpy as np
    x = work("grouped_x.npy")
    np.save(x, np.random.default_rng(0).standard_normal((8, 32, 8, 8)).astype(np.float32))
    q = work("grouped_q.onnx")
    qfold("quantize", src, "-o", q, "--target", "neutron", "--calib", x)
    b = report(q)
    ops = sorted(n["op"] for n in b["nodes"] if not n["qdq"] and n["op"] != "Relu")
    check(ops == ["Concat", "Conv", "Conv", "Conv", "Conv", "Split"], "QDQ model: compute nodes %s" % ops)
    cpu = [(n["name"], n["rule"]) for n in b["nodes"] if n["placement"] == "cpu" and not n["qdq"]]
    check(not cpu, "QDQ model: on the CPU %s" % cpu)
    check(b["summary"]["transitions"] == 0 and len(b["partitions"]) == 1, "QDQ model: %s" % b["summary"])
    check(sum(n["macs"] for n in b["nodes"]) == macs, "QDQ model: MACs %d, want %d" %
          (sum(n["macs"] for n in b["nodes"]), macs))

    # Two grouped convs named '/Conv' and '/Conv_1' (functional calls): the parts of '/Conv_1'
    # ('/Conv_1_g0', ...) are not counted as '/Conv''s.
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.randn(16, 4, 3, 3))
            self.w2 = torch.nn.Parameter(torch.randn(16, 8, 1, 1))

        def forward(self, x):
            y = torch.nn.functional.conv2d(x, self.w1, torch.zeros(16), padding=1, groups=4)
            return torch.nn.functional.conv2d(y, self.w2, torch.zeros(16), groups=2)

    two = work("grouped_two.onnx")
    torch.onnx.export(Two().eval(), torch.randn(1, 16, 8, 8), two, opset_version=13, input_names=["x"],
                      output_names=["y"])
    r = {n["name"]: n for n in report(two)["nodes"]}
    want = {"/Conv": 16 * 4 * 9 * 64, "/Conv_1": 16 * 8 * 64}
    got = {k: r[k]["macs"] if k in r else None for k in want}
    check(got == want, "two grouped convs: MACs %s, want %s" % (got, want))


def case_linear3d():
    try:
        import torch
    except ImportError:
        raise Skip("no torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 8)).eval()
    src = work("linear3d.onnx")
    torch.onnx.export(m, torch.randn(1, 4, 16), src, opset_version=13, input_names=["x"], output_names=["y"])
    import numpy as np
    x = work("linear3d_x.npy")
    np.save(x, np.random.default_rng(0).standard_normal((8, 1, 4, 16)).astype(np.float32)[:, 0])
    q = work("linear3d_q.onnx")
    qfold("quantize", src, "-o", q, "--target", "neutron", "--calib", x)
    import onnx
    ops = [n.op_type for n in onnx.load(q).graph.node]
    check("Transpose" in ops and "Add" in ops, "the QDQ form is not Transpose(DQ(W^T)) -> MatMul -> Add: %s" % ops)
    for path in (src, q):
        r = report(path)
        cpu = [(n["name"], n["rule"]) for n in r["nodes"] if n["placement"] == "cpu" and not n["qdq"]]
        check(not cpu, "%s: on the CPU %s" % (os.path.basename(path), cpu))
        mm = [n for n in r["nodes"] if n["op"] == "MatMul" and not n["qdq"]]
        check(len(mm) == 2 and sum(n["macs"] for n in mm) == 4 * (16 * 24 + 24 * 8),
              "%s: MatMul nodes %s" % (os.path.basename(path), mm))
        check(r["summary"]["transitions"] == 0 and len(r["partitions"]) == 1, "%s: %s" % (path, r["summary"]))


def _uint8_form(src, dst):
    """Activation Q / DQ with int8 zero point z -> uint8 z + 128 (the same real
    values: ONNX Runtime quantize_static's default activations); the int8
    weights stay int8, as quantize_static writes them."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    m = onnx.load(src)
    init = {t.name: t for t in m.graph.initializer}
    new = []
    for n in m.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(n.input) < 3 or n.input[2] not in init:
            continue
        if n.input[0] in init:  # a weight / bias
            continue
        zp = numpy_helper.to_array(init[n.input[2]])
        if zp.dtype != np.int8:
            continue
        new.append(numpy_helper.from_array((zp.astype(np.int32) + 128).astype(np.uint8), n.name + "_zp_u8"))
        n.input[2] = n.name + "_zp_u8"
    m.graph.initializer.extend(new)
    del m.graph.value_info[:]
    onnx.save(m, dst)
    return len(new)


def case_ort_uint8():
    q = quantized_tiny()
    u = work("tiny_u8.onnx")
    check(_uint8_form(q, u) >= 4, "no activation Q / DQ rewritten")
    a, b = report(q), report(u)
    pa = [(n["name"], n["placement"], n["rule"]) for n in a["nodes"]]
    pb = [(n["name"], n["placement"], n["rule"]) for n in b["nodes"]]
    check(pa == pb, "int8 %s\nuint8 %s" % (pa, pb))


if __name__ == "__main__":
    sys.exit(qfcli.main("target_check", globals(), paths=("--root", "--work")))
