#!/usr/bin/python3
"""ONNX external data (registered by tests/io/extdata.cmake).

    extdata_test.py --qfold BIN --node NODE --ort-run ORT_RUN.js --work DIR CASE

The models are built at test time with onnx.helper and saved by onnx's own
save_model(..., save_as_external_data=True); ONNX Runtime runs every model
read and written; onnx's loader reads what qfold writes. Hostile models: each
exits 2 with one line naming the initializer and the problem, nothing
written, nothing read outside the model's directory.
"""
import glob
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import Fail, Skip, check, error_line  # noqa: E402

ARGS = None


def work(*p):
    return os.path.join(ARGS.work, *p)


def qfold(*argv, expect=0, env=None, cwd=None):
    e = dict(os.environ, **(env or {}))
    _, out, err = qfcli.run_qfold(ARGS.qfold, argv, expect=expect, timeout=60, env=e, cwd=cwd)
    return out, err


def ort(model, inputs, tag):
    d = work(tag + ".ort")
    os.makedirs(d, exist_ok=True)
    p = subprocess.run([ARGS.node, ARGS.ort_run, model, d] + inputs, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "ORT failed on %s:\n%s" % (model, p.stderr))
    return np.load(os.path.join(d, "out0.npy"))


def conv_bn_model(seed=0):
    """Conv -> BN -> Relu -> Conv(no bias) -> BN: float32, weights of several
    KiB (to the side file) and BN vectors below 1 KiB (kept inline by qfold)."""
    g = np.random.default_rng(seed)

    def f(*shape, lo=-1.0, hi=1.0):
        return g.uniform(lo, hi, shape).astype(np.float32)

    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", f(16, 3, 3, 3)), ("b1", f(16)),
        ("s1", f(16, lo=0.5, hi=2)), ("t1", f(16)), ("m1", f(16)), ("v1", f(16, lo=0.5, hi=2)),
        ("w2", f(32, 16, 3, 3)),
        ("s2", f(32, lo=0.5, hi=2)), ("t2", f(32)), ("m2", f(32)), ("v2", f(32, lo=0.5, hi=2))]]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s1", "t1", "m1", "v1"], ["n1"], name="bn1", epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("BatchNormalization", ["c2", "s2", "t2", "m2", "v2"], ["y"], name="bn2"),
    ]
    graph = helper.make_graph(nodes, "extdata", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def save_external(model, path, location, one_file=True, threshold=256):
    """onnx's own writer: the tensors of `threshold` bytes and more in side
    files (on a copy: onnx's writer empties the tensors it moves out)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    model = copy
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=one_file,
                    location=location if one_file else None, size_threshold=threshold)


def make_input(name="x.npy"):
    p = work(name)
    np.save(p, np.random.default_rng(7).standard_normal((1, 3, 12, 12)).astype(np.float32))
    return p


def close(a, b, what, tol=1e-4):
    check(a.shape == b.shape, "%s: shapes %s and %s" % (what, a.shape, b.shape))
    d = float(np.max(np.abs(a.astype(np.float64) - b))) / max(1.0, float(np.max(np.abs(b))))
    check(d <= tol, "%s: relative difference %.3g > %g" % (what, d, tol))


def initializers(path, load_external=True):
    m = onnx.load(path, load_external_data=load_external)
    return {t.name: t for t in m.graph.initializer}


def side_bytes(model_path, t):
    """The bytes of external tensor t as its entries say, read by hand."""
    kv = {e.key: e.value for e in t.external_data}
    with open(os.path.join(os.path.dirname(model_path), kv["location"]), "rb") as f:
        f.seek(int(kv.get("offset", "0")))
        return f.read(int(kv["length"])), kv


def no_temps(d):
    left = [n for n in os.listdir(d) if ".qfold-tmp-" in n]
    check(not left, "temporary files left in %s: %s" % (d, left))


# --- cases ----------------------------------------------------------------------


def case_read_run():
    """qfold run on a model onnx saved with external data (one side file, and
    one file per tensor), against ONNX Runtime on the same files; also from
    the model's own directory with a bare file name."""
    x = make_input()
    m = conv_bn_model()
    for one in (True, False):
        d = work("one" if one else "many")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "m.onnx")
        save_external(m, path, "m.onnx.data", one_file=one)
        sides = [n for n in os.listdir(d) if n != "m.onnx"]
        check(len(sides) == (1 if one else 2), "onnx wrote side files %s" % sides)
        want = ort(path, [x], "ort_" + str(one))
        y = work("y.npy")
        qfold("run", path, "-i", x, "-o", y)
        close(np.load(y), want, "qfold run vs ORT")
        qfold("run", "m.onnx", "-i", x, "-o", y, cwd=d)
        close(np.load(y), want, "qfold run (model in the working directory) vs ORT")


def case_fuse_roundtrip():
    """fuse of an external-data model: inline output and --external-data
    output run in ORT like the original; the side file holds, at page-aligned
    offsets, exactly the bytes onnx's loader reads, the same as the inline
    output's initializers."""
    x = make_input()
    src = work("m.onnx")
    save_external(conv_bn_model(), src, "weights.bin")
    want = ort(src, [x], "orig")
    inline, ext = work("inline.onnx"), work("ext.onnx")
    qfold("fuse", src, "-o", inline)
    check(not os.path.exists(inline + ".data"), "fuse without --external-data wrote a side file")
    qfold("fuse", src, "-o", ext, "--external-data", "--verify")
    check(os.path.exists(ext + ".data"), "fuse --external-data wrote no %s" % (ext + ".data"))
    for p in (inline, ext):
        onnx.checker.check_model(p)
        close(ort(p, [x], os.path.basename(p)), want, "ORT on %s vs ORT on the original" % os.path.basename(p))
    a = initializers(inline)
    raw = initializers(ext, load_external=False)
    loaded = initializers(ext)
    check(sorted(a) == sorted(loaded), "initializers differ: %s vs %s" % (sorted(a), sorted(loaded)))
    next = 0
    for name, t in raw.items():
        want_b = numpy_helper.to_array(a[name]).tobytes()
        check(numpy_helper.to_array(loaded[name]).tobytes() == want_b,
              "initializer %s: onnx reads other bytes from the external-data output" % name)
        size = len(want_b)
        external = t.data_location == TensorProto.EXTERNAL
        check(external == (size >= 1024), "initializer %s (%d bytes): external is %s" % (name, size, external))
        if external:
            next += 1
            got, kv = side_bytes(ext, t)
            check(kv["location"] == "ext.onnx.data", "location %r" % kv["location"])
            check(int(kv["offset"]) % 4096 == 0, "initializer %s at offset %s, not page-aligned" % (name, kv["offset"]))
            check(got == want_b, "initializer %s: side file bytes differ from onnx's" % name)
    check(next == 2, "%d initializers external, expected the two conv weights" % next)
    # A name of its own, and the input's side file name for the output: the
    # old file is replaced by a rename (an open descriptor still reads the
    # input's bytes), never rewritten in place.
    qfold("fuse", src, "-o", work("named.onnx"), "--external-data=named.bin")
    check(os.path.exists(work("named.bin")), "--external-data=named.bin wrote no named.bin")
    close(ort(work("named.onnx"), [x], "named"), want, "ORT on named.onnx")
    with open(work("weights.bin"), "rb") as held:
        before = held.read()
        held.seek(0)
        qfold("fuse", src, "-o", work("over.onnx"), "--external-data=weights.bin")
        check(held.read() == before, "the input's side file was rewritten in place")
    close(ort(work("over.onnx"), [x], "over"), want, "ORT on over.onnx (side file replaced)")
    no_temps(ARGS.work)
    # Usage: a directory in the name, and commands that write no model.
    _, err = qfold("fuse", src, "-o", work("bad.onnx"), "--external-data=sub/w.bin", expect=2)
    error_line(err, "--external-data 'sub/w.bin'")
    _, err = qfold("run", src, "-i", x, "-o", work("y.npy"), "--external-data", expect=2)
    error_line(err, "--external-data")
    check(not os.path.exists(work("bad.onnx")), "a refused command wrote its output")


def case_auto():
    """A model over the limit goes out with external data unasked (protobuf's
    2 GiB in real use; lowered through QFOLD_EXTERNAL_DATA_LIMIT here, a 2 GiB
    model being too big for CI)."""
    x = make_input()
    src = work("m.onnx")
    onnx.save(conv_bn_model(), src)
    want = ort(src, [x], "orig")
    out = work("auto.onnx")
    qfold("fuse", src, "-o", out, env={"QFOLD_EXTERNAL_DATA_LIMIT": "100000"})
    check(not os.path.exists(out + ".data"), "a model under the limit got a side file")
    qfold("fuse", src, "-o", out, "--verify", env={"QFOLD_EXTERNAL_DATA_LIMIT": "2000"})
    check(os.path.exists(out + ".data"), "a model over the limit was written without external data")
    check(os.path.getsize(out) < 2000, "the model is %d bytes, over the limit" % os.path.getsize(out))
    close(ort(out, [x], "auto"), want, "ORT on the automatically external model")
    y = work("y.npy")
    qfold("run", out, "-i", x, "-o", y)
    close(np.load(y), want, "qfold run on the automatically external model")
    # Every model writer takes the option and the automatic switch the same
    # way: quantize (a QDQ model) as an example of the others.
    calib = work("calib.npy")
    np.save(calib, np.random.default_rng(3).standard_normal((4, 3, 12, 12)).astype(np.float32))
    q = work("q.onnx")
    qfold("quantize", src, "-o", q, "--calib", calib, "--external-data")
    check(os.path.exists(q + ".data"), "quantize --external-data wrote no side file")
    ort(q, [x], "q")
    fin = work("fin.onnx")
    qfold("finalize", q, "-o", fin, "--external-data=fin.bin")
    check(os.path.exists(work("fin.bin")), "finalize --external-data=fin.bin wrote no side file")
    ort(fin, [x], "fin")
    no_temps(ARGS.work)


def case_all_or_nothing():
    """A failure after both files were staged (--verify past a tolerance no
    fold meets) leaves the old model and its old side file as they were,
    and no temporary file."""
    src = work("m.onnx")
    save_external(conv_bn_model(), src, "m.data")
    out = work("out.onnx")
    qfold("fuse", src, "-o", out, "--external-data")
    old = (open(out, "rb").read(), open(out + ".data", "rb").read())
    _, err = qfold("fuse", src, "-o", out, "--external-data", "--verify", "--tolerance", "1e-12", expect=1)
    error_line(err, "nothing written")
    check((open(out, "rb").read(), open(out + ".data", "rb").read()) == old, "the old output files changed")
    no_temps(ARGS.work)
    os.remove(out + ".data")
    os.remove(out)
    qfold("fuse", src, "-o", out, "--external-data", "--verify", "--tolerance", "1e-12", expect=1)
    check(not os.path.exists(out) and not os.path.exists(out + ".data"), "a failed fuse left an output")
    no_temps(ARGS.work)


HOSTILE = {
    # name: (location, offset, length, needles)
    "dotdot": ("../outside.bin", None, None, ["'../outside.bin'", "'..' component"]),
    "dotdot_inner": ("sub/../../outside.bin", None, None, ["'..' component"]),
    "absolute": ("ABS", None, None, ["absolute path"]),
    "symlink": ("link.bin", None, None, ["'link.bin'", "leads outside the model's directory"]),
    "fifo": ("fifo.bin", None, None, ["'fifo.bin'", "FIFO"]),
    "directory": ("dir.bin", None, None, ["'dir.bin'", "directory"]),
    "device": ("dev.bin", None, None, ["'dev.bin'", "device"]),
    "missing": ("nothere.bin", None, None, ["'nothere.bin'", "No such file"]),
    "offset_past_end": ("w.bin", "100000", None, ["past the end of 'w.bin'"]),
    "offset_overflow": ("w.bin", "18446744073709551615", None, ["past the end of 'w.bin'"]),
    "offset_too_big": ("w.bin", "99999999999999999999999", None, ["offset '99999999999999999999999'"]),
    "offset_negative": ("w.bin", "-4", None, ["offset '-4' is not a number"]),
    "length_mismatch": ("w.bin", None, "12", ["length 12", "needs 1728 bytes"]),
    "no_location": (None, None, None, ["without a 'location'"]),
}


def hostile(name):
    """One hostile model: weight w1 of conv_bn_model in side file `location`;
    run and fuse exit 2 naming initializer 'w1' and the problem, write
    nothing, and read nothing outside the model's directory."""
    loc, off, length, needles = HOSTILE[name]
    d = work("model")
    os.makedirs(d, exist_ok=True)
    secret = work("outside.bin")
    m = conv_bn_model()
    w1 = next(t for t in m.graph.initializer if t.name == "w1")
    payload = w1.raw_data
    with open(secret, "wb") as f:
        f.write(payload)  # a valid payload: reading it would make the model run
    with open(os.path.join(d, "w.bin"), "wb") as f:
        f.write(payload)
    os.symlink(secret, os.path.join(d, "link.bin"))
    os.mkfifo(os.path.join(d, "fifo.bin"))
    os.mkdir(os.path.join(d, "dir.bin"))
    if name == "device":
        try:
            os.mknod(os.path.join(d, "dev.bin"), 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
        except OSError as e:
            raise Skip("cannot create a device node here (%s)" % e)
    w1.ClearField("raw_data")
    w1.data_location = TensorProto.EXTERNAL
    entries = []
    if loc is not None:
        entries.append(("location", secret if loc == "ABS" else loc))
    if off is not None:
        entries.append(("offset", off))
    if length is not None:
        entries.append(("length", length))
    for k, v in entries:
        e = w1.external_data.add()
        e.key, e.value = k, v
    path = os.path.join(d, "m.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    x = make_input()
    before = sorted(os.listdir(d))
    y, out = work("y.npy"), os.path.join(d, "out.onnx")
    for argv in (["run", path, "-i", x, "-o", y], ["fuse", path, "-o", out], ["inspect", path]):
        _, err = qfold(*argv, expect=2)
        error_line(err, "initializer 'w1'", *needles)
        check(len(err.strip().splitlines()) == 1, "more than one line:\n%s" % err)
    check(not os.path.exists(y) and not os.path.exists(out), "a refused model wrote an output")
    check(sorted(os.listdir(d)) == before, "files appeared: %s" % sorted(set(os.listdir(d)) - set(before)))


for _n in HOSTILE:
    globals()["case_hostile_" + _n] = (lambda n: lambda: hostile(n))(_n)


def case_from_memory_and_inline_mix():
    """A model whose side file vanished: exit 2 naming it; a model with some
    tensors inline and some external runs as ORT."""
    x = make_input()
    src = work("m.onnx")
    save_external(conv_bn_model(), src, "w.data", threshold=2048)
    raw = initializers(src, load_external=False)
    check(sum(t.data_location == TensorProto.EXTERNAL for t in raw.values()) == 1, "expected one external tensor")
    y = work("y.npy")
    qfold("run", src, "-i", x, "-o", y)
    close(np.load(y), ort(src, [x], "mix"), "qfold run vs ORT (mixed)")
    os.remove(work("w.data"))
    _, err = qfold("run", src, "-i", x, "-o", y, expect=2)
    error_line(err, "initializer 'w2'", "'w.data'")


def _fresh(case):
    """Each case starts in an empty work directory (a rerun finds none of the
    last run's files)."""
    def run():
        for n in os.listdir(ARGS.work):
            p = work(n)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.remove(p)
        case()
    return run


for _k in [k for k in globals() if k.startswith("case_")]:
    globals()[_k] = _fresh(globals()[_k])

if __name__ == "__main__":
    sys.exit(qfcli.main("extdata", globals(), paths=("--work",), options=("--node", "--ort-run")))
