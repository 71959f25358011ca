#!/usr/bin/env python3
"""qfold under an address-space limit (`ulimit -v`, RLIMIT_AS), at every level
from one where it can barely start to one where everything fits: it must
exit 0, or exit 1 with "out of memory" in its message, within a few seconds:
never hang (OpenBLAS used to retry a failed buffer allocation forever), never
die inside a library (libgomp's exit(1) when it cannot create a thread,
oneDNN's uncaught std::bad_alloc, a crash).

    memlimit_test.py --qfold BIN --models DIR --work DIR CASE

CASE: version (`qfold --version`), run (`run` on mobilenet_v2, both engines),
fuse (`fuse --verify` on mobilenet_v2). Skipped (exit 77) in the sanitizer
build: ASan reserves terabytes of shadow memory and cannot run under a limit.
"""
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qfcli  # noqa: E402
from qfcli import Fail, check  # noqa: E402

ARGS = None
# Levels in MB: tight ones where loading libraries or the model fails, and
# the range where oneDNN, the plan and the verification each start to fit.
LEVELS = list(range(20, 200, 10)) + list(range(200, 401, 25)) + [450, 500, 600]
TIMEOUT = 10  # seconds per run; a healthy run takes well under 2 s here


def limited(mb):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
    return set_limit


def sweep(name, argv, env=None):
    """Run argv at every level; return the levels that succeeded."""
    ok_levels = []
    for mb in LEVELS:
        cmd = [ARGS.qfold] + argv
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=limited(mb),
                               env=dict(os.environ, **(env or {})))
        except subprocess.TimeoutExpired:
            raise Fail("%s under a %d MB limit did not finish within %d s (hung)" % (name, mb, TIMEOUT))
        except OSError as e:
            # The kernel could not even start the program at this level.
            print("%s at %d MB: could not start (%s)" % (name, mb, e))
            continue
        took = time.monotonic() - t0
        line = p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""
        print("%s at %4d MB: exit %d in %.2f s %s" % (name, mb, p.returncode, took, line[:110]))
        check(p.returncode in (0, 1), "%s under a %d MB limit exited %d (died inside a library?)\nstderr:\n%s"
              % (name, mb, p.returncode, p.stderr))
        if p.returncode == 1:
            check("out of memory" in p.stderr, "%s under a %d MB limit exited 1 without 'out of memory':\n%s"
                  % (name, mb, p.stderr))
        else:
            ok_levels.append(mb)
    check(LEVELS[-1] in ok_levels, "%s failed even with %d MB" % (name, LEVELS[-1]))
    return ok_levels


def model(name):
    return os.path.join(ARGS.models, name)


def case_version():
    ok = sweep("--version", ["--version"])
    check(ok, "--version never succeeded")


def case_run():
    out = os.path.join(ARGS.work, "y.npy")
    argv = ["run", model("mobilenet_v2.onnx"), "-i", model("mobilenet_v2.in0.npy"), "-o", out]
    sweep("run", argv)
    sweep("run --engine ref", ["--engine", "ref"] + argv)


def case_fuse():
    out = os.path.join(ARGS.work, "f.onnx")
    sweep("fuse --verify", ["fuse", model("mobilenet_v2.onnx"), "-o", out, "--verify"])


if __name__ == "__main__":
    if os.environ.get("QF_SANITIZED") == "1":
        print("skipped: the sanitizer build cannot run under an address-space limit")
        sys.exit(77)
    sys.exit(qfcli.main("memlimit", globals(), paths=("--models", "--work")))
