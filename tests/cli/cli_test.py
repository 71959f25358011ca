#!/usr/bin/python3
"""Tests of the qfold command line (registered by tests/cli/cli.cmake).

    cli_test.py --qfold BIN --examples DIR --work DIR --version V CASE

Each CASE is one ctest. A case fails with a message that says which command
ran, what it printed and what was expected.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import Fail, check, error_line as one_error_line  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402

ARGS = None  # set by qfcli.main


def qfold(*argv, expect=0):
    """Run qfold; check the exit status; return (stdout, stderr)."""
    _, out, err = qfcli.run_qfold(ARGS.qfold, argv, expect=expect, timeout=120)
    return out, err


def example(name):
    return os.path.join(ARGS.examples, name)


def work(name):
    return os.path.join(ARGS.work, name)


def rel_error(got, want):
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale


# --- cases ----------------------------------------------------------------------

KERNELS_LINE = re.compile(r"^kernels: (dnnl \(oneDNN \d+\.\d+\.\d+\)|ref \(oneDNN: [^\n]+\)), (\d+) threads?$")


def case_version():
    out, _ = qfold("--version")
    lines = out.split("\n")
    check(len(lines) == 3 and lines[0] == "qfold %s" % ARGS.version and lines[2] == "",
          "--version printed %r" % out)
    check(KERNELS_LINE.match(lines[1]), "--version's second line is %r" % lines[1])


def may_load_onednn(env=None):
    """The environment for a run that may load oneDNN: in the sanitizer build,
    LeakSanitizer's exit-time scan crashes on libgomp's threads (oneDNN is
    not instrumented), so leak checking is off there; other builds ignore
    ASAN_OPTIONS."""
    asan = os.environ.get("ASAN_OPTIONS", "")
    return dict(os.environ, ASAN_OPTIONS=(asan + ":" if asan else "") + "detect_leaks=0", **(env or {}))


def version_kernels(*argv, env=None):
    """(engine, threads) from `qfold [argv] --version`."""
    _, out, _ = qfcli.run_qfold(ARGS.qfold, list(argv) + ["--version"], expect=0, timeout=120,
                                env=may_load_onednn(env))
    m = KERNELS_LINE.match(out.split("\n")[1])
    check(m, "%s --version printed %r" % (" ".join(argv), out))
    return m.group(1).split(" ")[0], int(m.group(2))


def case_engine_threads():
    """--engine and --threads, accepted by every command before or after it."""
    cores = min(os.cpu_count() or 1, 16)
    check(version_kernels("--engine", "ref", "--threads", "1") == ("ref", 1), "--engine ref --threads 1")
    check(version_kernels("--threads=3")[1] == 3, "--threads=3")
    check(version_kernels("--threads", "0")[1] == cores, "--threads 0 is not the %d cores" % cores)
    check(version_kernels(env={"QFOLD_ENGINE": "ref"})[0] == "ref", "QFOLD_ENGINE=ref ignored")
    rc, out, err = qfcli.run_qfold(ARGS.qfold, ["--engine=dnnl", "--version"], env=may_load_onednn())
    if rc == 0:
        check(out.split("\n")[1].startswith("kernels: dnnl (oneDNN "), "--engine dnnl printed %r" % out)
        # The flag wins over the environment.
        check(version_kernels("--engine", "auto", env={"QFOLD_ENGINE": "ref"})[0] == "dnnl",
              "--engine auto did not override QFOLD_ENGINE=ref")
    else:
        check(rc in (1, 2), "--engine dnnl without oneDNN exited %d" % rc)
        one_error_line(err, "engine dnnl")
    # Both engines compute the example like PyTorch, the options after the
    # command or before it.
    want = np.load(example("expected.npy"))
    for i, pre in enumerate((["--engine", "ref", "--threads", "1"], ["--engine=auto", "--threads=2"])):
        out = work("y%d.npy" % i)
        for argv in (pre + ["run", example("tiny_cnn.onnx"), "-i", example("input.npy"), "-o", out],
                     ["run", example("tiny_cnn.onnx")] + pre + ["-i", example("input.npy"), "-o", out]):
            qfcli.run_qfold(ARGS.qfold, argv, expect=0, env=may_load_onednn())
            check(rel_error(np.load(out), want) <= 1e-4, "%s: wrong result" % " ".join(argv))
    qfold("inspect", example("tiny_cnn.onnx"), "--threads", "1")
    # Errors: a usage error (exit 2) naming the option.
    for argv, needle in ((["--engine", "fast"], "--engine 'fast'"), (["--engine"], "--engine needs a value"),
                         (["--threads", "17"], "--threads '17'"), (["--threads", "-1"], "--threads '-1'"),
                         (["--threads", "two"], "--threads 'two'"), (["--threads="], "--threads ''"),
                         (["--threads"], "--threads needs a value")):
        for where in ("before", "after"):
            full = argv + ["--version"] if where == "before" else ["inspect", example("tiny_cnn.onnx")] + argv
            _, _, err = qfcli.run_qfold(ARGS.qfold, full, expect=2)
            one_error_line(err, needle)


def case_help():
    out, _ = qfold("help")
    for cmd in ("inspect", "run"):
        check("\n  %s " % cmd in out, "'qfold help' does not list %s:\n%s" % (cmd, out))
    out2, _ = qfold("--help")
    check(out2 == out, "'qfold --help' differs from 'qfold help'")
    for cmd in ("inspect", "run", "help"):
        a, _ = qfold("help", cmd)
        b, _ = qfold(cmd, "--help")
        check(a.startswith("usage: qfold %s" % cmd), "'qfold help %s' printed:\n%s" % (cmd, a))
        check(a == b, "'qfold help %s' and 'qfold %s --help' differ" % (cmd, cmd))
    _, err = qfold("help", "nosuchcommand", expect=2)
    one_error_line(err, "nosuchcommand")


def onnx_counts():
    """What inspect must report, computed from the .onnx with the onnx package."""
    import onnx
    m = onnx.load(example("tiny_cnn.onnx"))
    params = [t for t in m.graph.initializer if "running_" not in t.name]
    buffers = [t for t in m.graph.initializer if "running_" in t.name]
    size = lambda ts: sum(int(np.prod(t.dims)) for t in ts)
    ops = [n.op_type for n in m.graph.node]
    return m, params, buffers, size, ops


def case_inspect():
    out, _ = qfold("inspect", example("tiny_cnn.onnx"))
    m, params, buffers, size, ops = onnx_counts()
    lines = {l.split()[0]: l for l in out.splitlines() if l and not l.startswith(" ")}
    check("opset" in lines and lines["opset"].split()[1] == "13", "opset line:\n" + out)
    check("  input  float32 [1, 3, 32, 32]" in out, "input line missing:\n" + out)
    check("  logits  float32 [1, 10]" in out, "output line missing:\n" + out)
    check("batch norms 4\n" in out, "batch norm count missing:\n" + out)
    want = "%d tensors, %s values" % (len(params), format(size(params), ","))
    check(want in lines.get("parameters", ""), "parameters: want %r in\n%s" % (want, out))
    want = "%d tensors, %s values" % (len(buffers), format(size(buffers), ","))
    check(want in lines.get("buffers", ""), "buffers: want %r in\n%s" % (want, out))


def case_inspect_plan():
    """--plan: one line per step (kernel, node, layouts, post-ops, reorders)."""
    env = dict(os.environ, QFOLD_ENGINE="ref")
    _, out, _ = qfcli.run_qfold(ARGS.qfold, ["inspect", example("tiny_cnn.onnx"), "--plan"], expect=0,
                                env=env)
    check("\nengine: ref\n" in out, "no engine line:\n" + out)
    plan = out[out.index("\nplan: "):].strip().splitlines()
    head, steps = plan[0], plan[1:]
    n = int(head.split()[1])
    check(len(steps) == n and "0 on dnnl" in head and "0 reorders" in head,
          "ref plan: want %d step lines, no dnnl, no reorders:\n%s" % (n, out))
    check(all(l.split()[1] == "ref" for l in steps), "a ref plan runs another kernel:\n" + out)
    check(any(" Conv " in l and " in nchw,-" in l and " out nchw" in l for l in steps),
          "no Conv step with its layouts:\n" + out)
    env["QFOLD_ENGINE"] = "dnnl"
    rc, out, err = qfcli.run_qfold(ARGS.qfold, ["inspect", example("tiny_cnn.onnx"), "--plan"], env=env)
    _, version, _ = qfcli.run_qfold(ARGS.qfold, ["--version"], expect=0)
    if rc == 0 and "built without oneDNN" not in version:  # oneDNN loaded: channels-last from the input's reorder on
        check("\nengine: dnnl\n" in out and " dnnl " in out and " out nhwc" in out
              and "reorder  'input' nchw -> nhwc" in out, "dnnl plan:\n" + out)
    _, err = qfold("inspect", example("tiny_cnn.onnx"), "--batch", "2", expect=2)
    one_error_line(err, "--batch goes with --plan")
    _, err = qfold("inspect", example("tiny_cnn.onnx"), "--plan", "--json", expect=2)
    one_error_line(err, "--plan and --json do not mix")


def case_inspect_json():
    out, _ = qfold("inspect", example("tiny_cnn.onnx"), "--json")
    try:
        j = json.loads(out)
    except ValueError as e:
        raise Fail("--json output is not JSON (%s):\n%s" % (e, out))
    m, params, buffers, size, ops = onnx_counts()
    check(j["opset"] == 13 and j["producer"] == "pytorch", "opset/producer: %r" % j)
    check(j["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 32, 32]}],
          "inputs: %r" % j["inputs"])
    check(j["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [1, 10]}],
          "outputs: %r" % j["outputs"])
    check(j["batch_norms"] == 4, "batch_norms: %r" % j["batch_norms"])
    check(j["ops"].get("BatchNormalization") == 4 and j["ops"].get("Conv") == 3,
          "ops: %r" % j["ops"])
    check(sum(j["ops"].values()) == j["nodes"], "op histogram does not add up to nodes: %r" % j)
    check(j["parameters"]["tensors"] == len(params)
          and j["parameters"]["elements"] == size(params)
          and j["parameters"]["bytes"] == 4 * size(params), "parameters: %r" % j["parameters"])
    check(j["buffers"]["tensors"] == len(buffers) and j["buffers"]["elements"] == size(buffers),
          "buffers: %r" % j["buffers"])
    # Text and JSON say the same.
    text, _ = qfold("inspect", example("tiny_cnn.onnx"))
    check("ops (%d nodes)" % j["nodes"] in text, "node count differs between text and JSON")


def case_inspect_dot():
    dot = work("tiny_cnn.dot")
    if os.path.exists(dot):
        os.unlink(dot)
    qfold("inspect", example("tiny_cnn.onnx"), "--dot", dot)
    text = open(dot).read()
    check(text.startswith("digraph ") and text.rstrip().endswith("}"), "not a DOT graph:\n" + text)
    check(text.count('label="BatchNormalization\\n') == 4, "DOT lacks the 4 BatchNormalization boxes")
    check(not [f for f in os.listdir(ARGS.work) if ".tmp." in f or ".qfold-tmp-" in f], "a temporary file was left")
    if shutil.which("dot"):
        p = subprocess.run(["dot", "-Tsvg", dot], capture_output=True, text=True)
        check(p.returncode == 0 and "<svg" in p.stdout, "dot -Tsvg rejects the file:\n" + p.stderr)
    # --dot must not overwrite the model.
    _, err = qfold("inspect", example("tiny_cnn.onnx"), "--dot", example("tiny_cnn.onnx"), expect=2)
    one_error_line(err, "overwrite")


def case_inspect_escape():
    """Names with quotes, backslashes, newlines and non-ASCII text must come out
    as valid JSON and valid DOT."""
    import onnx
    from onnx import TensorProto, helper
    x = 'in "x"\\'
    y = "out\ny\t\u00e9"
    g = helper.make_graph([helper.make_node("Relu", [x], ["mid"], name='relu "1"\\'),
                           helper.make_node("Sigmoid", ["mid"], [y], name="sig\n{2}")],
                          'graph "q" \\ \u03b1', [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="t\u00e9st \"p\"")
    m.ir_version = 7
    model = work("escape.onnx")
    onnx.save(m, model)
    out, _ = qfold("inspect", model, "--json")
    try:
        j = json.loads(out)
    except ValueError as e:
        raise Fail("--json output is not JSON (%s):\n%s" % (e, out))
    check(j["name"] == g.name and j["producer"] == m.producer_name, "names: %r" % j)
    check(j["inputs"][0]["name"] == x and j["outputs"][0]["name"] == y, "io names: %r" % j)
    dot = work("escape.dot")
    qfold("inspect", model, "--dot", dot)
    if shutil.which("dot"):
        p = subprocess.run(["dot", "-Tsvg", dot], capture_output=True, text=True)
        check(p.returncode == 0 and "<svg" in p.stdout,
              "dot -Tsvg rejects the file:\n%s\n%s" % (p.stderr, open(dot).read()))


def strict_json(path_or_text, what):
    """The JSON text must be UTF-8 (RFC 8259): decoded strictly, then parsed."""
    raw = path_or_text if isinstance(path_or_text, bytes) else open(path_or_text, "rb").read()
    try:
        return json.loads(raw.decode("utf-8", errors="strict"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise Fail("%s is not UTF-8 JSON (%s):\n%r" % (what, e, raw[:2000]))


def case_report_utf8():
    """Names that are not UTF-8 (an ONNX string field holds bytes; protobuf
    does not check them): the JSON qfold writes (fuse, quantize and export
    reports, inspect --json) stays UTF-8 JSON, each byte that starts no valid
    UTF-8 sequence becoming U+FFFD (src/core/strbuf.h), valid non-ASCII text
    kept as is. `fuse --report` once wrote the raw bytes."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    # Placeholders of the same length as the bytes they become, so that the
    # protobuf lengths stay right when they are replaced in the file.
    bad = {b"conv_@@": b"conv_\xff\xfe", b"bn_@@@": b"bn_\xe2\x82(", b"x@@@": b"x\xc0\xaf\xed"}
    want = {"conv_@@": "conv_\ufffd\ufffd", "bn_@@@": "bn_\ufffd\ufffd(", "x@@@": "x\ufffd\ufffd\ufffd"}
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")]
    for name, v in (("scale", 1.5), ("bias", 0.1), ("mean", 0.2), ("var", 0.9)):
        inits.append(numpy_helper.from_array(np.full(4, v, np.float32), name))
    g = helper.make_graph([helper.make_node("Conv", ["x@@@", "w"], ["c"], name="conv_@@", pads=[1, 1, 1, 1]),
                           helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"],
                                            name="bn_@@@"),
                           helper.make_node("Relu", ["y"], ["z"], name="relu \u00e9")],
                          "g", [helper.make_tensor_value_info("x@@@", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    data = m.SerializeToString()
    for k, v in bad.items():
        check(len(k) == len(v) and data.count(k) >= 1, "placeholder %r" % k)
        data = data.replace(k, v)
    model = work("bad_utf8.onnx")
    with open(model, "wb") as f:
        f.write(data)
    report = work("bad_utf8.report.json")

    def run(*argv):
        """qfold in bytes: its text output prints the names as they are."""
        p = subprocess.run([ARGS.qfold] + list(argv), capture_output=True, timeout=120)
        check(p.returncode == 0, "`qfold %s` exited %d:\n%r" % (" ".join(argv), p.returncode, p.stderr))
        return p.stdout

    run("fuse", model, "-o", work("bad_utf8.fused.onnx"), "--report", report)
    r = strict_json(report, "fuse --report")
    nodes = [e["node"] for p in r["passes"] for key in ("rewritten", "skipped") for e in p[key]]
    check(want["bn_@@@"] in nodes or want["conv_@@"] in nodes,
          "the folded nodes' names (as %r, %r) are not in the report's events %r"
          % (want["conv_@@"], want["bn_@@@"], nodes))
    text = open(report, "rb").read().decode("utf-8")
    check("@" not in text and "\\ufffd" in text, "placeholders or no \\ufffd escape in the report:\n" + text)
    # Keeping the BatchNorm (a pipeline without the fold) lists it by name.
    run("fuse", model, "-o", work("bad_utf8.kept.onnx"), "--report", report, "--passes", "dce")
    r = strict_json(report, "fuse --passes dce --report")
    check(r["batch_norm"]["kept"] == [want["bn_@@@"]], "kept: %r" % r["batch_norm"])
    j = strict_json(run("inspect", model, "--json"), "inspect --json")
    check(j["inputs"][0]["name"] == want["x@@@"], "inspect input name: %r" % j["inputs"])
    # The quantize and export reports carry the names too (and names built from them).

    def strings(v):
        if isinstance(v, dict):
            return [t for k, x in v.items() for t in [k] + strings(x)]
        if isinstance(v, list):
            return [t for x in v for t in strings(x)]
        return [v] if isinstance(v, str) else []

    np.save(work("bad_utf8.calib.npy"), rng.standard_normal((8, 3, 8, 8)).astype(np.float32))
    qmodel, qreport, ereport = work("bad_utf8.int8.onnx"), work("bad_utf8.q.json"), work("bad_utf8.e.json")
    run("quantize", model, "-o", qmodel, "--calib", work("bad_utf8.calib.npy"), "--report", qreport)
    found = strings(strict_json(qreport, "quantize --report"))
    check(want["conv_@@"] in found and want["x@@@"] in found, "quantize report names: %r" % found)
    run("export", qmodel, "-o", work("bad_utf8.tflite"), "--report", ereport)
    found = strings(strict_json(ereport, "export --report"))
    check(want["conv_@@"] in found, "export report names: %r" % found)


def case_run():
    out = work("logits.npy")
    if os.path.exists(out):
        os.unlink(out)
    stdout, _ = qfold("run", example("tiny_cnn.onnx"), "-i", example("input.npy"), "-o", out)
    check("logits" in stdout, "run does not name the output it wrote:\n" + stdout)
    got, want = np.load(out), np.load(example("expected.npy"))
    check(got.dtype == np.float32 and got.shape == want.shape,
          "output is %s %s, expected %s %s" % (got.dtype, got.shape, want.dtype, want.shape))
    err = rel_error(got, want)
    check(err <= 1e-4, "qfold vs PyTorch: relative error %.3g > 1e-4\n%s\n%s" % (err, got, want))
    # Long option spellings and --opt=value.
    qfold("run", example("tiny_cnn.onnx"), "--input=" + example("input.npy"), "--output", out)
    check(rel_error(np.load(out), want) <= 1e-4, "long options gave another result")


def make_two_io_model(path):
    """x: [N, 4], y: [N, 4] -> d = x - y, r = relu(x): order matters both ways,
    and N is a symbolic dim that the .npy binds."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    d = helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Sub", ["x", "y"], ["d"], name="sub"),
                           helper.make_node("Relu", ["x"], ["r"], name="relu")],
                          "two_io", [x, y], [d, r])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="cli_test")
    m.ir_version = 7
    onnx.checker.check_model(m)
    onnx.save(m, path)


def case_run_multi():
    model = work("two_io.onnx")
    make_two_io_model(model)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(work("x.npy"), x)
    np.save(work("y.npy"), y)
    qfold("run", model, "-i", work("x.npy"), "-i", work("y.npy"),
          "-o", work("d.npy"), "-o", work("r.npy"))
    check(np.array_equal(np.load(work("d.npy")), x - y), "output d != x - y")
    check(np.array_equal(np.load(work("r.npy")), np.maximum(x, 0)), "output r != relu(x)")
    # One -i too few: the message says how many and names the inputs.
    _, err = qfold("run", model, "-i", work("x.npy"), "-o", work("d.npy"), "-o", work("r.npy"),
                   expect=2)
    one_error_line(err, "2 inputs", "'x'", "'y'")
    _, err = qfold("run", model, "-i", work("x.npy"), "-i", work("y.npy"), "-o", work("d.npy"),
                   expect=2)
    one_error_line(err, "2 outputs", "'d'", "'r'")
    # The symbolic N binds, the fixed 4 must match.
    np.save(work("x5.npy"), np.zeros((3, 5), np.float32))
    _, err = qfold("run", model, "-i", work("x5.npy"), "-i", work("y.npy"),
                   "-o", work("d.npy"), "-o", work("r.npy"), expect=2)
    one_error_line(err, "input 'x' (%s): expected float32 [?, 4], got float32 [3, 5]" % work("x5.npy"))


def case_run_int64():
    """An int64 input (a Reshape's target shape fed at run time) is bound as a
    constant, so the shapes stay static; the other inputs keep their order."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
                           helper.make_node("Relu", ["r"], ["y"], name="relu")], "i64", [x, shape], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    model = work("i64.onnx")
    onnx.save(m, model)
    xv = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    np.save(work("x.npy"), xv)
    np.save(work("shape.npy"), np.array([3, 4], np.int64))
    qfold("run", model, "-i", work("x.npy"), "-i", work("shape.npy"), "-o", work("y.npy"))
    got = np.load(work("y.npy"))
    check(got.shape == (3, 4) and np.array_equal(got, np.maximum(xv.reshape(3, 4), 0)),
          "reshape by an int64 input gave %s %r" % (got.shape, got))
    # An int64 array where the graph wants float32 is a dtype error, not a binding.
    _, err = qfold("run", model, "-i", work("shape.npy"), "-i", work("shape.npy"), "-o", work("y.npy"),
                   expect=2)
    one_error_line(err, "input 'x'", "expected float32 [2, 6], got int64 [2]")


def case_run_fixed_batch():
    """A model exported with a fixed batch B (PyTorch's default: 1) takes
    k * B samples: k runs, the outputs stacked, equal to k runs of B."""
    model = example("tiny_cnn.onnx")
    x = np.random.default_rng(12).random((5, 3, 32, 32), dtype=np.float32)
    np.save(work("x5.npy"), x)
    stdout, _ = qfold("run", model, "-i", work("x5.npy"), "-o", work("y5.npy"))
    check("[5, 10]" in stdout, "run does not report the stacked shape:\n" + stdout)
    got = np.load(work("y5.npy"))
    for i in range(5):
        np.save(work("one.npy"), x[i:i + 1])
        qfold("run", model, "-i", work("one.npy"), "-o", work("o.npy"))
        check(np.array_equal(got[i:i + 1], np.load(work("o.npy"))), "sample %d: stacked run != single run" % i)
    # Batch fixed at 4: 8 samples run twice and equal the dynamic model's; 10
    # are not a multiple of 4.
    import onnx
    from onnx import TensorProto, helper
    m = onnx.load(example("fashion_mnist/fashion_cnn.onnx"))
    for v in (m.graph.input[0], m.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_value = 4
    onnx.save(m, work("fixed4.onnx"))
    rng = np.random.default_rng(13)
    np.save(work("x8.npy"), rng.random((8, 1, 28, 28), dtype=np.float32))
    np.save(work("x10.npy"), rng.random((10, 1, 28, 28), dtype=np.float32))
    qfold("run", work("fixed4.onnx"), "-i", work("x8.npy"), "-o", work("a.npy"))
    qfold("run", example("fashion_mnist/fashion_cnn.onnx"), "-i", work("x8.npy"), "-o", work("b.npy"))
    check(np.array_equal(np.load(work("a.npy")), np.load(work("b.npy"))), "fixed batch 4, 8 samples != dynamic")
    _, err = qfold("run", work("fixed4.onnx"), "-i", work("x10.npy"), "-o", work("a.npy"), expect=2)
    one_error_line(err, "expected float32 [4, 1, 28, 28], got float32 [10, 1, 28, 28]")
    # An output whose first dimension is not the batch cannot be stacked.
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1])])
    t = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    t.ir_version = 7
    onnx.save(t, work("t.onnx"))
    np.save(work("x3.npy"), np.zeros((3, 4), np.float32))
    _, err = qfold("run", work("t.onnx"), "-i", work("x3.npy"), "-o", work("ty.npy"), expect=2)
    one_error_line(err, "output 'y'", "not the model's fixed batch of 1")
    check(not os.path.exists(work("ty.npy")), "a failed run left an output file")


def case_run_errors():
    model = example("tiny_cnn.onnx")
    # Wrong shape: the exact message of the contract.
    small = work("small.npy")
    np.save(small, np.zeros((1, 3, 16, 16), np.float32))
    _, err = qfold("run", model, "-i", small, "-o", work("o.npy"), expect=2)
    one_error_line(err, "input 'input' (%s): expected float32 [1, 3, 32, 32], got float32 [1, 3, 16, 16]"
                   % small)
    # Wrong dtype.
    f64 = work("f64.npy")
    np.save(f64, np.zeros((1, 3, 32, 32), np.float64))
    _, err = qfold("run", model, "-i", f64, "-o", work("o.npy"), expect=2)
    one_error_line(err, "expected float32 [1, 3, 32, 32], got float64 [1, 3, 32, 32]")
    # Missing files, a file that is not a model, a file that is not .npy.
    _, err = qfold("run", work("missing.onnx"), "-i", small, "-o", work("o.npy"), expect=2)
    one_error_line(err, "missing.onnx")
    _, err = qfold("run", model, "-i", work("missing.npy"), "-o", work("o.npy"), expect=2)
    one_error_line(err, "missing.npy")
    junk = work("junk.onnx")
    with open(junk, "wb") as f:
        f.write(b"this is not a protobuf \xff\xff\xff\xff")
    _, err = qfold("inspect", junk, expect=2)
    one_error_line(err)
    _, err = qfold("run", model, "-i", junk, "-o", work("o.npy"), expect=2)
    one_error_line(err)
    # Outputs never clobber the model or an input.
    _, err = qfold("run", model, "-i", example("input.npy"), "-o", model, expect=2)
    one_error_line(err, "overwrite")
    _, err = qfold("run", model, "-i", small, "-o", small, expect=2)
    one_error_line(err, "overwrite")
    check(not os.path.exists(work("o.npy")), "a failed run left an output file")


def case_usage():
    _, err = qfold(expect=2)
    check("usage: qfold COMMAND" in err, "no-argument usage:\n" + err)
    _, err = qfold("frobnicate", expect=2)
    one_error_line(err, "unknown command 'frobnicate'")
    _, err = qfold("--frobnicate", expect=2)
    one_error_line(err, "unknown option '--frobnicate'")
    _, err = qfold("inspect", expect=2)
    one_error_line(err, "no model")
    _, err = qfold("inspect", example("tiny_cnn.onnx"), "--bogus", expect=2)
    one_error_line(err, "unknown option '--bogus'")
    _, err = qfold("inspect", example("tiny_cnn.onnx"), "extra", expect=2)
    one_error_line(err, "unexpected argument 'extra'")
    _, err = qfold("inspect", example("tiny_cnn.onnx"), "--dot", expect=2)
    one_error_line(err, "'--dot' needs a value")
    _, err = qfold("run", example("tiny_cnn.onnx"), "-i", example("input.npy"), expect=2)
    one_error_line(err, "no output")
    _, err = qfold("run", example("tiny_cnn.onnx"), "-i", expect=2)
    one_error_line(err, "'-i' needs a value")
    _, err = qfold("run", "-i", example("input.npy"), "-o", work("o.npy"), expect=2)
    one_error_line(err, "no model")
    # A known option with a value it does not take: the one line says what it
    # takes, no usage block after it (README: every error is one line).
    m, x = example("fashion_mnist/fashion_cnn.onnx"), example("input.npy")
    for argv, needle in ((("train", m, "-o", work("t.onnx"), "--data", x, "--labels", x, "--batch", "0"),
                          "--batch takes a number"),
                         (("train", m, "-o", work("t.onnx"), "--data", x, "--labels", x, "--lr", "nan"),
                          "--lr takes a learning rate > 0, got 'nan'"),
                         (("train", m, "-o", work("t.onnx"), "--data", x, "--labels", x, "--epochs",
                           "99999999999999"), "--epochs takes a number"),
                         (("fuse", m, "-o", work("t.onnx"), "--external-data=../x"), "expected a file name"),
                         (("quantize", m, "-o", work("t.onnx"), "--calib", x, "--batch", "-1"),
                          "--batch takes a number"),
                         (("--threads", "99", "inspect", m), "expected a number from 0")):
        _, err = qfold(*argv, expect=2)
        one_error_line(err, needle)
        check(len(err.strip().splitlines()) == 1, "%s: more than one line:\n%s" % (" ".join(argv[:1]), err))


# --- eval ------------------------------------------------------------------------

def fashion_torch(examples):
    """The bundled Fashion-MNIST CNN in PyTorch (its committed state_dict)."""
    import torch
    sys.path.insert(0, os.path.join(examples, "fashion_mnist"))
    from train import FashionCNN
    m = FashionCNN()
    m.load_state_dict(torch.load(os.path.join(examples, "fashion_mnist", "fashion_cnn.pt")))
    return m.eval()


# PyTorch's logits through tests/ref/refcache.py (computed once per `make
# test`; a hit imports no torch).

def fashion_logits(examples, x):
    import torch
    with torch.no_grad():
        return fashion_torch(examples)(torch.from_numpy(x)).numpy()


def fashion_shifted_logits(examples, x):
    """The logits, then those with the classifier's bias 3 raised by 4."""
    import torch
    net = fashion_torch(examples)
    with torch.no_grad():
        a = net(torch.from_numpy(x)).numpy()
        net.head[3].bias[3] += 4.0
        b = net(torch.from_numpy(x)).numpy()
    return a, b


def torch_counts(logits, labels):
    """top-1 and top-5 hits, ties to the lower index as qfold's argmax."""
    order = np.argsort(-logits, axis=1, kind="stable")
    top1 = int((order[:, 0] == labels).sum())
    top5 = int(sum(labels[i] in order[i, :5] for i in range(len(labels))))
    return top1, top5, order[:, 0]


def eval_json(*argv):
    out, _ = qfold("eval", *argv, "--json")
    return json.loads(out)


def case_eval():
    """Top-1 / top-5 against PyTorch on the same samples and labels, over
    batches of 64 (the last one shorter: a second plan)."""
    rng = np.random.default_rng(7)
    x = rng.random((300, 1, 28, 28), dtype=np.float32)
    logits = refcache.call(fashion_logits, ARGS.examples, x)
    # Labels: the true class for some samples, a random one for the rest.
    labels = np.where(rng.random(300) < 0.5, logits.argmax(1), rng.integers(0, 10, 300)).astype(np.int64)
    np.save(work("x.npy"), x)
    np.save(work("y.npy"), labels)
    top1, top5, _ = torch_counts(logits, labels)
    r = eval_json(example("fashion_mnist/fashion_cnn.onnx"), "--data", work("x.npy"), "--labels", work("y.npy"))
    check(r["samples"] == 300 and r["classes"] == 10, "eval: %r" % r)
    m = r["models"][0]
    # A near tie may rank differently in float: at most one sample apart.
    check(abs(m["top1"] * 300 - top1) <= 1 and abs(m["top5"] * 300 - top5) <= 1,
          "eval top-1 %.4f top-5 %.4f, torch %d / %d of 300" % (m["top1"], m["top5"], top1, top5))
    # uint8 labels of shape [N, 1] are read the same; batch 7 gives the same figures.
    np.save(work("y8.npy"), labels.astype(np.uint8).reshape(300, 1))
    r2 = eval_json(example("fashion_mnist/fashion_cnn.onnx"), "--data", work("x.npy"), "--labels", work("y8.npy"),
                   "--batch", "7")
    check(r2["models"][0] == m, "batch 7 / uint8 labels give %r, batch 64 %r" % (r2["models"][0], m))
    out, _ = qfold("eval", example("fashion_mnist/fashion_cnn.onnx"), "--data", work("x.npy"), "--labels",
                   work("y.npy"))
    check("samples  300, 10 classes" in out and "top-5" in out, "eval text output:\n" + out)


def case_eval_compare():
    """--compare: the fused model agrees everywhere; a model with a changed
    classifier bias agrees exactly as often as PyTorch says."""
    import onnx
    from onnx import numpy_helper
    rng = np.random.default_rng(8)
    x = rng.random((200, 1, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, 200).astype(np.int64)
    np.save(work("x.npy"), x)
    np.save(work("y.npy"), labels)
    model = example("fashion_mnist/fashion_cnn.onnx")
    qfold("fuse", model, "-o", work("fused.onnx"))
    r = eval_json(model, "--data", work("x.npy"), "--labels", work("y.npy"), "--compare", work("fused.onnx"))
    check(r["top1_agreement"] == 1.0 and r["models"][0]["top1"] == r["models"][1]["top1"],
          "fused model: %r" % r)
    # Shift the last layer's bias: some predictions move.
    m = onnx.load(model)
    last = [n for n in m.graph.node if n.op_type == "Gemm"][-1]
    for init in m.graph.initializer:
        if init.name == last.input[2]:
            b = numpy_helper.to_array(init).copy()
            b[3] += 4.0
            init.CopyFrom(numpy_helper.from_array(b, init.name))
    onnx.save(m, work("shifted.onnx"))
    a, b = refcache.call(fashion_shifted_logits, ARGS.examples, x)
    agree = int((a.argmax(1) == b.argmax(1)).sum())
    check(agree < 200, "the shifted bias changes no prediction: the case tests nothing")
    r = eval_json(model, "--data", work("x.npy"), "--labels", work("y.npy"), "--compare", work("shifted.onnx"))
    check(abs(r["top1_agreement"] * 200 - agree) <= 1, "agreement %r, torch %d of 200" % (r["top1_agreement"], agree))
    out, _ = qfold("eval", model, "--data", work("x.npy"), "--labels", work("y.npy"), "--compare",
                   work("shifted.onnx"))
    check("top-1 agreement" in out and "shifted.onnx" in out, "compare text output:\n" + out)


def case_eval_fixed_batch():
    """A model whose batch is fixed at 1 runs one sample at a time, whatever
    --batch says; the figures match its run outputs."""
    x = np.random.default_rng(9).random((5, 3, 32, 32), dtype=np.float32)
    np.save(work("x.npy"), x)
    preds = []
    for i in range(5):
        np.save(work("one.npy"), x[i:i + 1])
        qfold("run", example("tiny_cnn.onnx"), "-i", work("one.npy"), "-o", work("o.npy"))
        preds.append(int(np.load(work("o.npy")).argmax()))
    labels = np.array([preds[0], preds[1], (preds[2] + 1) % 10, preds[3], (preds[4] + 2) % 10], np.int64)
    np.save(work("y.npy"), labels)
    r = eval_json(example("tiny_cnn.onnx"), "--data", work("x.npy"), "--labels", work("y.npy"), "--batch", "4")
    check(abs(r["models"][0]["top1"] - 0.6) < 1e-9, "fixed batch: %r (predictions %r)" % (r, preds))
    # Batch fixed at 4 with 10 samples: the last batch is padded, its extra
    # rows ignored; the same figures as the dynamic-batch model.
    import onnx
    m = onnx.load(example("fashion_mnist/fashion_cnn.onnx"))
    for v in (m.graph.input[0], m.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_value = 4
    onnx.save(m, work("fixed4.onnx"))
    rng = np.random.default_rng(10)
    np.save(work("x10.npy"), rng.random((10, 1, 28, 28), dtype=np.float32))
    np.save(work("y10.npy"), rng.integers(0, 10, 10).astype(np.int64))
    a = eval_json(work("fixed4.onnx"), "--data", work("x10.npy"), "--labels", work("y10.npy"),
                  "--compare", example("fashion_mnist/fashion_cnn.onnx"))
    check(a["top1_agreement"] == 1.0 and a["models"][0]["top1"] == a["models"][1]["top1"]
          and a["models"][0]["top5"] == a["models"][1]["top5"], "fixed batch 4: %r" % a)


def case_eval_errors():
    model = example("fashion_mnist/fashion_cnn.onnx")
    x = np.zeros((4, 1, 28, 28), np.float32)
    np.save(work("x.npy"), x)
    np.save(work("y.npy"), np.array([0, 1, 2, 3], np.int64))
    np.save(work("y3.npy"), np.array([0, 1, 2], np.int64))
    _, err = qfold("eval", model, "--data", work("x.npy"), "--labels", work("y3.npy"), expect=2)
    one_error_line(err, "y3.npy", "expected [4]")
    np.save(work("ybad.npy"), np.array([0, 1, 10, 3], np.int64))
    _, err = qfold("eval", model, "--data", work("x.npy"), "--labels", work("ybad.npy"), expect=2)
    one_error_line(err, "ybad.npy", "label 10 of sample 2 is out of range", "10 classes")
    np.save(work("yf.npy"), np.zeros(4, np.float32))
    _, err = qfold("eval", model, "--data", work("x.npy"), "--labels", work("yf.npy"), expect=2)
    one_error_line(err, "yf.npy", "float32")
    np.save(work("xs.npy"), np.zeros((4, 1, 27, 28), np.float32))
    _, err = qfold("eval", model, "--data", work("xs.npy"), "--labels", work("y.npy"), expect=2)
    one_error_line(err, "xs.npy", "input 'image'", "[?, 1, 28, 28]", "[4, 1, 27, 28]")
    np.save(work("xi.npy"), np.zeros((4, 1, 28, 28), np.int32))
    _, err = qfold("eval", model, "--data", work("xi.npy"), "--labels", work("y.npy"), expect=2)
    one_error_line(err, "xi.npy", "input 'image'", "[?, 1, 28, 28]", "int32")
    # Without its batch axis the data is refused as data, not as 1 sample
    # whose 4 labels do not match.
    np.save(work("xr.npy"), np.zeros((1, 28, 28), np.float32))
    _, err = qfold("eval", model, "--data", work("xr.npy"), "--labels", work("y.npy"), expect=2)
    one_error_line(err, "xr.npy", "input 'image'", "[?, 1, 28, 28]", "[1, 28, 28]")
    xn = np.zeros((4, 1, 28, 28), np.float32)
    xn[3, 0, 2, 1] = np.nan
    np.save(work("xn.npy"), xn)
    _, err = qfold("eval", model, "--data", work("xn.npy"), "--labels", work("y.npy"), expect=2)
    one_error_line(err, "xn.npy", "input 'image'", "[?, 1, 28, 28]",
                   "element %d (sample 3, at [0, 2, 1]) is NaN" % (3 * 784 + 2 * 28 + 1))
    xn[3, 0, 2, 1] = -np.inf
    np.save(work("xn.npy"), xn)
    _, err = qfold("eval", model, "--data", work("xn.npy"), "--labels", work("y.npy"), expect=2)
    one_error_line(err, "xn.npy", "infinite")
    _, err = qfold("eval", model, "--data", work("x.npy"), "--data", work("x.npy"), "--labels", work("y.npy"),
                   expect=2)
    one_error_line(err, "1 input", "got 2")
    np.save(work("x0.npy"), np.zeros((0, 1, 28, 28), np.float32))
    _, err = qfold("eval", model, "--data", work("x0.npy"), "--labels", work("y.npy"), expect=2)
    one_error_line(err, "holds no samples")
    _, err = qfold("eval", model, "--data", work("x.npy"), "--labels", work("y.npy"), "--batch", "0", expect=2)
    one_error_line(err, "--batch")
    _, err = qfold("eval", model, "--data", work("x.npy"), "--labels", work("y.npy"), "--requant", "gemmlowp",
                   expect=2)
    one_error_line(err, "--requant takes tflite or onnx")
    _, err = qfold("eval", model, "--data", work("x.npy"), expect=2)
    one_error_line(err, "no labels")
    _, err = qfold("eval", model, "--labels", work("y.npy"), expect=2)
    one_error_line(err, "no data")
    _, err = qfold("eval", model, "--data", work("x.npy"), "--labels", work("y.npy"), "--compare",
                   work("missing.onnx"), expect=2)
    one_error_line(err, "missing.onnx")


if __name__ == "__main__":
    # Paths as given (messages quote them): only --qfold is made absolute.
    sys.exit(qfcli.main("cli", globals(), options=("--examples", "--work", "--version")))
