#!/usr/bin/python3
"""Fault tests of the qfold command line: what a careful user's scripts hit
(registered by tests/cli/cli.cmake, label "cli").

    fault_test.py --qfold BIN --examples DIR --work DIR --source DIR CASE

  aliases        no output may be an input (model, -i, --verify-data, --calib)
                 or another output, compared as files ('./o.onnx' is 'o.onnx')
  output_paths   '', '/', a directory, a missing directory, a FIFO as output:
                 exit 2 before any work (even before the model is read)
  bad_inputs     /dev/zero, a FIFO with no writer, a directory as input: exit 2
                 at once, never blocking or reading until memory runs out
  full_disk      a write that fails (file size limit, ulimit -f: EFBIG, the
                 same path as ENOSPC; a small tmpfs too when we may mount one)
                 exits 1, leaves no temporary file and every old output intact
  all_or_nothing several outputs: a failing one leaves the others untouched
  signals        SIGINT / SIGTERM during a write leave no temporary file;
                 temporary names are hidden and never look like outputs
  kill9          the temporary files of a killed run (kill -9) are removed by
                 the next write to the same path; a live writer's are kept
  memory_cap     QFOLD_MAX_MEMORY caps qfold's own allocations (the library's
                 allocation hook): every command exits 1 promptly, no output
  describes      --help, README and qfold.pc say what exists (no QAT yet)
"""
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import Fail, check, error_line  # noqa: E402

ARGS = None  # set by qfcli.main
TIMEOUT = 60


def run(*argv, expect=None, env=None, preexec=None, cwd=None, timeout=TIMEOUT):
    """Run qfold without the caller's QFOLD_MAX_MEMORY; return (rc, stdout,
    stderr). A hang is a failure."""
    e = dict(os.environ)
    e.pop("QFOLD_MAX_MEMORY", None)
    if env:
        e.update(env)
    return qfcli.run_qfold(ARGS.qfold, argv, expect=expect, timeout=timeout, env=e, preexec_fn=preexec, cwd=cwd)


def example(name):
    return os.path.join(ARGS.examples, name)


def fresh_dir(name):
    d = os.path.join(ARGS.work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def listing(d):
    return sorted(os.listdir(d))


def sentinel(path, text="old"):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def no_temps(d, what):
    left = [f for f in os.listdir(d) if "tmp" in f or "qfold-verify" in f]
    check(not left, "%s: temporary files left in %s: %s" % (what, d, left))


def make_model(path, nodes, inputs, outputs, inits=()):
    import onnx
    from onnx import helper
    g = helper.make_graph(nodes, "fault", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="fault_test")
    m.ir_version = 7
    onnx.save(m, path)


def two_out_model(path, small=4, big=20000):
    """x: [small] -> relu, y: [big] -> relu: two outputs of very different sizes."""
    from onnx import TensorProto, helper
    make_model(path, [helper.make_node("Relu", ["x"], ["rx"], name="rx"),
                      helper.make_node("Relu", ["y"], ["ry"], name="ry")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [small]),
                helper.make_tensor_value_info("y", TensorProto.FLOAT, [big])],
               [helper.make_tensor_value_info("rx", TensorProto.FLOAT, [small]),
                helper.make_tensor_value_info("ry", TensorProto.FLOAT, [big])])


def big_model(path, n=4096):
    """x: [1, n] -> MatMul(W [n, n]) -> Relu: a model of n*n*4 bytes (64 MiB)."""
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    make_model(path, [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
                      helper.make_node("Relu", ["h"], ["y"], name="relu")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
               [numpy_helper.from_array(w, "W")])


def fsize_limit(nbytes):
    def f():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return f


# --- cases ------------------------------------------------------------------------

def case_aliases():
    d = fresh_dir("aliases")
    model = os.path.join(d, "m.onnx")
    shutil.copy(example("tiny_cnn.onnx"), model)
    shutil.copy(example("input.npy"), os.path.join(d, "x.npy"))
    x0 = read(os.path.join(d, "x.npy"))
    # --verify-data is an input: neither -o nor --report may replace it.
    _, _, err = run("fuse", "m.onnx", "-o", "x.npy", "--verify-data", "x.npy", expect=2, cwd=d)
    error_line(err, "x.npy", "overwrite")
    _, _, err = run("fuse", "m.onnx", "-o", "o.onnx", "--verify-data", "./x.npy", "--report", "x.npy",
                    expect=2, cwd=d)
    error_line(err, "x.npy", "overwrite")
    check(read(os.path.join(d, "x.npy")) == x0, "the --verify-data file was overwritten")
    # Two outputs that are one file, spelled differently (neither exists yet).
    _, _, err = run("fuse", "m.onnx", "-o", "./o.onnx", "--report", "o.onnx", expect=2, cwd=d)
    error_line(err, "same file")
    os.symlink(".", os.path.join(d, "here"))
    _, _, err = run("fuse", "m.onnx", "-o", "here/o.onnx", "--report", os.path.join(d, "o.onnx"),
                    expect=2, cwd=d)
    error_line(err, "same file")
    two_out_model(os.path.join(d, "two.onnx"))
    np.save(os.path.join(d, "a.npy"), np.ones(4, np.float32))
    np.save(os.path.join(d, "b.npy"), np.ones(20000, np.float32))
    _, _, err = run("run", "two.onnx", "-i", "a.npy", "-i", "b.npy", "-o", "y.npy", "-o", "./y.npy",
                    expect=2, cwd=d)
    error_line(err, "same file")
    # An input through another name: a hard link of the model, a symlink of -i.
    os.link(model, os.path.join(d, "hard.onnx"))
    _, _, err = run("fuse", "m.onnx", "-o", "hard.onnx", expect=2, cwd=d)
    error_line(err, "overwrite")
    os.symlink("a.npy", os.path.join(d, "alink.npy"))
    _, _, err = run("run", "two.onnx", "-i", "a.npy", "-i", "b.npy", "-o", "alink.npy", "-o", "z.npy",
                    expect=2, cwd=d)
    error_line(err, "overwrite")
    # quantize: -o and --report, the calibration data.
    np.save(os.path.join(d, "c.npy"), np.random.default_rng(0).random((4, 1, 28, 28), dtype=np.float32))
    fm = example("fashion_mnist/fashion_cnn.onnx")
    _, _, err = run("quantize", fm, "-o", "./q.onnx", "--calib", "c.npy", "--report", "q.onnx", expect=2, cwd=d)
    error_line(err, "same file")
    _, _, err = run("quantize", fm, "-o", "q.onnx", "--calib", "c.npy", "--report", "./c.npy", expect=2, cwd=d)
    error_line(err, "calibration data")
    # inspect --dot and the model.
    _, _, err = run("inspect", "m.onnx", "--dot", "./m.onnx", expect=2, cwd=d)
    error_line(err, "overwrite")
    for f in ("o.onnx", "y.npy", "z.npy", "q.onnx"):
        check(not os.path.exists(os.path.join(d, f)), "a refused command wrote %s" % f)
    no_temps(d, "aliases")


def case_output_paths():
    d = fresh_dir("output_paths")
    os.mkdir(os.path.join(d, "adir"))
    os.mkfifo(os.path.join(d, "fifo"))
    missing = os.path.join(d, "no_such_model.onnx")  # checked only after the outputs
    bad = [("", "empty"), ("/", "directory"), (os.path.join(d, "adir"), "directory"),
           (os.path.join(d, "adir") + "/", "directory"), (os.path.join(d, "nodir", "o.onnx"), "nodir"),
           (os.path.join(d, "fifo"), "regular file")]
    c = os.path.join(d, "c.npy")
    np.save(c, np.zeros((2, 1, 28, 28), np.float32))
    for path, needle in bad:
        for argv in (["fuse", missing, "-o", path],
                     ["fuse", missing, "-o", os.path.join(d, "o.onnx"), "--report", path],
                     ["run", missing, "-i", example("input.npy"), "-o", path],
                     ["quantize", missing, "-o", path, "--calib", c],
                     ["inspect", missing, "--dot", path]):
            t0 = time.monotonic()
            _, _, err = run(*argv, expect=2, timeout=20)
            line = error_line(err, needle)
            check("no_such_model" not in line, "the model was read before the output path was checked:\n" + err)
            check(time.monotonic() - t0 < 15, "the output check took too long")
    check(stat.S_ISFIFO(os.stat(os.path.join(d, "fifo")).st_mode), "the FIFO was replaced")
    check(listing(os.path.join(d, "adir")) == [], "something was written into the directory")
    no_temps(d, "output_paths")


def case_bad_inputs():
    d = fresh_dir("bad_inputs")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    model = example("tiny_cnn.onnx")
    o = os.path.join(d, "o.npy")
    cases = [(["inspect", "/dev/zero"], "device"),
             (["inspect", fifo], "FIFO"),
             (["inspect", d], "directory"),
             (["run", model, "-i", "/dev/zero", "-o", o], "device"),
             (["run", fifo, "-i", example("input.npy"), "-o", o], "FIFO"),
             (["run", model, "-i", fifo, "-o", o], "FIFO"),
             (["fuse", model, "-o", os.path.join(d, "f.onnx"), "--verify-data", fifo], "FIFO"),
             (["quantize", example("fashion_mnist/fashion_cnn.onnx"), "-o", os.path.join(d, "q.onnx"),
               "--calib", fifo], "FIFO")]
    for argv, needle in cases:
        t0 = time.monotonic()
        _, _, err = run(*argv, expect=2, timeout=20)
        error_line(err, needle)
        check(time.monotonic() - t0 < 15, "`qfold %s` took %.1f s" % (" ".join(argv), time.monotonic() - t0))
    check(listing(d) == ["fifo"], "files left: %s" % listing(d))


def case_full_disk():
    d = fresh_dir("full_disk")
    model = example("tiny_cnn.onnx")  # 13 KB: its write passes a 4 KiB file size limit
    out, rep = os.path.join(d, "o.onnx"), os.path.join(d, "r.json")
    sentinel(out, "old model")
    sentinel(rep, "old report")
    for extra in ([], ["--verify"]):
        _, _, err = run("fuse", model, "-o", out, "--report", rep, *extra, expect=1, preexec=fsize_limit(4096))
        error_line(err, "o.onnx", "File too large")
        check(read(out) == b"old model" and read(rep) == b"old report", "a failed fuse changed the old outputs")
        no_temps(d, "fuse on a full disk")
    c = os.path.join(d, "c.npy")
    np.save(c, np.random.default_rng(0).random((4, 1, 28, 28), dtype=np.float32))
    _, _, err = run("quantize", example("fashion_mnist/fashion_cnn.onnx"), "-o", out, "--calib", c,
                    "--report", rep, expect=1, preexec=fsize_limit(4096))
    error_line(err, "File too large")
    check(read(out) == b"old model" and read(rep) == b"old report", "a failed quantize changed the old outputs")
    # qat, as train and the others: exit 1, naming the output (not its hidden
    # temporary name), the old files kept; also its second model, --keep-qat.
    x, y = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
    rng = np.random.default_rng(0)
    np.save(x, rng.random((32, 1, 28, 28), dtype=np.float32))
    np.save(y, rng.integers(0, 10, 32).astype(np.int64))
    keep = os.path.join(d, "k.onnx")
    sentinel(keep, "old keep")
    for cmd, extra in (("train", []), ("qat", []), ("qat", ["--keep-qat", keep])):
        _, _, err = run(cmd, example("fashion_mnist/fashion_cnn.onnx"), "-o", out, "--data", x, "--labels", y,
                        "--epochs", "1", "--batch", "16", *extra, expect=1, preexec=fsize_limit(4096))
        error_line(err, "'%s'" % (keep if extra else out), "File too large")
        check(read(out) == b"old model" and read(keep) == b"old keep",
              "a failed %s %s changed the old outputs" % (cmd, " ".join(extra)))
        no_temps(d, "%s on a full disk" % cmd)
    dot = os.path.join(d, "g.dot")
    _, _, err = run("inspect", model, "--dot", dot, expect=1, preexec=fsize_limit(512))
    error_line(err, "g.dot")
    check(not os.path.exists(dot), "a failed --dot left a file")
    no_temps(d, "quantize / inspect on a full disk")
    # A real ENOSPC on a small tmpfs, where this process may mount one (root in CI).
    mnt = os.path.join(d, "smallfs")
    os.mkdir(mnt)
    if os.geteuid() == 0 and shutil.which("mount") and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", mnt], capture_output=True).returncode == 0:
        try:
            _, _, err = run("fuse", model, "-o", os.path.join(mnt, "o.onnx"), expect=1)
            error_line(err, "No space left")
            check(listing(mnt) == [], "files left on the full tmpfs: %s" % listing(mnt))
        finally:
            subprocess.run(["umount", mnt])
    else:
        print("note: no tmpfs mounted (not root or no mount permission); EFBIG covered the write failure")


def case_all_or_nothing():
    d = fresh_dir("all_or_nothing")
    model = os.path.join(d, "two.onnx")
    two_out_model(model)
    a, b = os.path.join(d, "a.npy"), os.path.join(d, "b.npy")
    np.save(a, np.ones(4, np.float32))
    np.save(b, np.ones(20000, np.float32))
    o1, o2 = os.path.join(d, "o1.npy"), os.path.join(d, "o2.npy")
    sentinel(o1, "old 1")
    sentinel(o2, "old 2")
    # The first output (144 bytes) fits under the limit, the second (80 KB) does not.
    _, _, err = run("run", model, "-i", a, "-i", b, "-o", o1, "-o", o2, expect=1, preexec=fsize_limit(8192))
    error_line(err, "o2.npy")
    check(read(o1) == b"old 1", "the first output was replaced although the second failed")
    check(read(o2) == b"old 2", "the failed output was changed")
    no_temps(d, "run")
    run("run", model, "-i", a, "-i", b, "-o", o1, "-o", o2, expect=0)
    check(np.load(o1).shape == (4,) and np.load(o2).shape == (20000,), "the outputs of a good run")
    # fuse: the model fails (size limit) -> the report is not replaced either.
    out, rep = os.path.join(d, "f.onnx"), os.path.join(d, "f.json")
    sentinel(out, "old model")
    sentinel(rep, "old report")
    run("fuse", example("tiny_cnn.onnx"), "-o", out, "--report", rep, expect=1, preexec=fsize_limit(8192))
    check(read(out) == b"old model" and read(rep) == b"old report", "fuse: a new report next to the old model")
    no_temps(d, "fuse")


def watch_and_signal(argv, d, sig, before):
    """Start qfold, send sig as soon as a new file shows up in d (a write in
    progress); return (returncode, names seen, whether the signal was sent)."""
    p = subprocess.Popen([ARGS.qfold] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen, sent = set(), False
    deadline = time.monotonic() + TIMEOUT
    while p.poll() is None and time.monotonic() < deadline:
        new = set(os.listdir(d)) - before
        if new:
            seen |= new
            time.sleep(0.002)
            seen |= set(os.listdir(d)) - before
            p.send_signal(sig)
            sent = True
            break
        time.sleep(0.0005)
    try:
        p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Fail("qfold did not end after signal %d" % sig)
    return p.returncode, seen, sent


def temp_names_ok(names, outputs):
    for n in names:
        if n in outputs:
            continue
        check(n.startswith(".") and ".qfold-tmp-" in n,
              "temporary file %r looks like a finished output (want .NAME.qfold-tmp-<pid>-*)" % n)


def case_signals():
    d = fresh_dir("signals")
    model = os.path.join(d, "big.onnx")
    big_model(model)
    before = set(os.listdir(d))
    outputs = {"o.onnx", "r.json"}
    for sig in (signal.SIGINT, signal.SIGTERM):
        for extra in ([], ["--verify"]):
            for attempt in range(8):
                argv = ["fuse", model, "-o", os.path.join(d, "o.onnx"), "--report", os.path.join(d, "r.json")] + extra
                rc, seen, sent = watch_and_signal(argv, d, sig, before)
                left = set(os.listdir(d)) - before
                if rc == 0:  # the signal came after the rename: try again
                    for f in left:
                        os.unlink(os.path.join(d, f))
                    continue
                check(sent and rc == -sig, "fuse %s ended with %d after signal %d" % (extra, rc, sig))
                temp_names_ok(seen, outputs)
                check(not left, "after signal %d during fuse %s: left %s" % (sig, extra, sorted(left)))
                break
            else:
                raise Fail("could not catch fuse during its write in 8 tries")


def case_kill9():
    d = fresh_dir("kill9")
    model = os.path.join(d, "big.onnx")
    big_model(model)
    out = os.path.join(d, "o.onnx")
    before = set(os.listdir(d))
    for attempt in range(8):
        rc, seen, sent = watch_and_signal(["fuse", model, "-o", out, "--verify"], d, signal.SIGKILL, before)
        left = set(os.listdir(d)) - before - {"o.onnx"}
        if rc == -signal.SIGKILL and left:
            break
        for f in set(os.listdir(d)) - before:
            os.unlink(os.path.join(d, f))
    else:
        raise Fail("could not kill fuse during its write in 8 tries")
    temp_names_ok(left, {"o.onnx"})
    # A stale file of a dead process, by name, and one of a live process (this
    # one, standing for a concurrent qfold writing the same path).
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = ".o.onnx.qfold-tmp-%d-abcdef" % dead.pid
    live = ".o.onnx.qfold-tmp-%d-abcdef" % os.getpid()
    sentinel(os.path.join(d, stale))
    sentinel(os.path.join(d, live))
    # The next write to the same path removes the dead runs' files.
    run("fuse", example("tiny_cnn.onnx"), "-o", out, expect=0)
    now = set(os.listdir(d)) - before
    check(now == {"o.onnx", live}, "after the next write: %s (want o.onnx and the live writer's %s)"
          % (sorted(now), live))
    os.unlink(os.path.join(d, live))


def case_memory_cap():
    d = fresh_dir("memory_cap")
    c = os.path.join(d, "c.npy")
    x = np.random.default_rng(0).random((16, 1, 28, 28), dtype=np.float32)
    np.save(c, x)
    np.save(os.path.join(d, "l.npy"), np.zeros(16, np.int64))
    fm, tiny = example("fashion_mnist/fashion_cnn.onnx"), example("tiny_cnn.onnx")
    cmds = {
        "inspect": ["inspect", tiny, "--dot", os.path.join(d, "g.dot")],
        "run": ["run", tiny, "-i", example("input.npy"), "-o", os.path.join(d, "y.npy")],
        "fuse": ["fuse", tiny, "-o", os.path.join(d, "f.onnx"), "--report", os.path.join(d, "f.json"), "--verify"],
        "quantize": ["quantize", fm, "-o", os.path.join(d, "q.onnx"), "--calib", c, "--report",
                     os.path.join(d, "q.json")],
        "eval": ["eval", fm, "--data", c, "--labels", os.path.join(d, "l.npy")],
    }
    keep = set(os.listdir(d))
    for name, argv in cmds.items():
        for cap in ("1K", "16K", "256K", "2M", "16M"):
            t0 = time.monotonic()
            rc, _, err = run(*argv, env={"QFOLD_MAX_MEMORY": cap}, timeout=TIMEOUT)
            took = time.monotonic() - t0
            check(took < 30, "%s under QFOLD_MAX_MEMORY=%s took %.1f s" % (name, cap, took))
            if cap in ("1K", "16K"):
                check(rc == 1, "%s under QFOLD_MAX_MEMORY=%s exited %d, expected 1\n%s" % (name, cap, rc, err))
            check(rc in (0, 1), "%s under QFOLD_MAX_MEMORY=%s exited %d\n%s" % (name, cap, rc, err))
            if rc == 1:
                error_line(err, "out of memory")
                check(set(os.listdir(d)) == keep, "%s failed under %s but left %s" % (name, cap,
                                                                                     set(os.listdir(d)) - keep))
            for f in set(os.listdir(d)) - keep:
                os.unlink(os.path.join(d, f))
        run(*argv, env={"QFOLD_MAX_MEMORY": "1G"}, expect=0)
        for f in set(os.listdir(d)) - keep:
            os.unlink(os.path.join(d, f))
    _, _, err = run("--version", env={"QFOLD_MAX_MEMORY": "lots"}, expect=2)
    error_line(err, "QFOLD_MAX_MEMORY")


def case_describes():
    """The help, qfold.pc and the README's introduction describe only what
    exists: every command the help lists answers --help, and a feature they
    name (QAT, finalize, training, TFLite) has its command."""
    out = run("help", expect=0)[1] + run("--version", expect=0)[1]
    listed = re.findall(r"^  ([a-z]+) {2,}\S", out.split("commands:")[1].split("\n\n")[0], re.M)
    check("quantize" in listed and "eval" in listed, "qfold help lists %s" % listed)
    for cmd in listed:
        run(cmd, "--help", expect=0)
    readme = open(os.path.join(ARGS.source, "README.md")).read()
    pc = open(os.path.join(ARGS.source, "qfold.pc.in")).read()
    intro = readme.split("\n## ")[0]
    claims = ((r"\bQAT\b|quantization-aware", "qat"), (r"\bfinalize\b", "finalize"),
              (r"(?<!post-)\btraining\b|\bqfold train\b", "train"),
              (r"\bTFLite (?:export|flatbuffer|model)|\.tflite\b", "export"))
    for what, text in (("qfold help", out), ("qfold.pc.in", pc), ("README's introduction", intro)):
        for pattern, cmd in claims:
            m = re.search(pattern, text.split("Not yet:")[0])
            check(not m or cmd in listed, "%s names '%s' but qfold has no '%s' command" % (what, m and m.group(0), cmd))
    desc = [line for line in pc.splitlines() if line.startswith("Description:")][0]
    check("BatchNorm" in desc and "quantization" in desc, "qfold.pc: " + desc)
    check("qfold quantize" in intro and "qfold eval" in intro, "README's introduction lacks quantize / eval")


if __name__ == "__main__":
    sys.exit(qfcli.main("fault", globals(), paths=("--examples", "--work", "--source"), per_case_work=False))
