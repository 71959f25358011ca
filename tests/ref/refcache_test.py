#!/usr/bin/python3
"""Tests of tests/ref/refcache.py (ctest ref_cache, tests/ref.cmake): a hit
gives what the computation returned and wrote, byte for byte, without
computing; a changed argument, input file, helper module or package version
misses; the base directory is a placeholder (two build
directories share entries); what cannot be cached is refused; a miss
computed by the fork server (tests/ref/refserver.py) is what computing here
gives.

    refcache_test.py WORKDIR
"""
import os
import pickle
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import refcache  # noqa: E402

CALLS = []
FAILED = []


def check(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        FAILED.append(what)


def reference(path, scale, out_dir):
    """Reads PATH, writes OUT_DIR/y.bin, returns a float and bytes."""
    CALLS.append(path)
    with open(path, "rb") as f:
        data = f.read()
    os.makedirs(os.path.join(out_dir, "sub"), exist_ok=True)
    with open(os.path.join(out_dir, "sub", "y.bin"), "wb") as f:
        f.write(data[::-1] * scale)
    return {"sum": sum(data) * scale / 3.0, "raw": data}


def reads_helper(path):
    CALLS.append(path)
    import refcache_test_helper  # noqa: F401  (a lazily imported module is a dependency)
    return refcache_test_helper.VALUE


def writes_outside(path):
    with open(path, "wb") as f:
        f.write(b"x")


def starts_process():
    subprocess.run(["true"])


def prints_and_writes(out_dir, n):
    """For the fork server: prints, writes OUT_DIR/z.bin, returns its pid."""
    CALLS.append(n)
    print("computing %d" % n, flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "z.bin"), "wb") as f:
        f.write(bytes(range(n)))
    return {"n": n, "pid": os.getpid()}


def raises(n):
    raise ValueError("no reference for %d" % n)


def server_client(work):
    """Run by tests/ref/refserver.py (server_main): misses go to the server."""
    import refserver
    cache, base = os.path.join(work, "cache"), os.path.join(work, "b")
    os.environ[refcache.ENV] = cache
    r1 = refcache.call(prints_and_writes, os.path.join(base, "out"), 5, base=base)
    check(not CALLS and r1["n"] == 5 and r1["pid"] != os.getpid(), "a miss is computed in the server")
    with open(os.path.join(base, "out", "z.bin"), "rb") as f:
        check(f.read() == bytes(range(5)), "the server's computation writes its files under the base")
    os.remove(os.path.join(base, "out", "z.bin"))
    r2 = refcache.call(prints_and_writes, os.path.join(base, "out"), 5, base=base)
    with open(os.path.join(base, "out", "z.bin"), "rb") as f:
        check(not CALLS and r2 == r1 and f.read() == bytes(range(5)), "then a hit, with its file")
    try:
        refcache.call(raises, 3, base=base)
        check(False, "a failure in the server is raised in the test")
    except ValueError as e:
        check(str(e) == "no reference for 3", "a failure in the server is raised in the test")
    server = os.environ[refserver.ENV]
    os.environ[refserver.ENV] = os.path.join(work, "no-such-socket")
    r3 = refcache.call(prints_and_writes, os.path.join(base, "out"), 6, base=base)
    check(CALLS == [6] and r3["pid"] == os.getpid(), "no server to reach: computed here")
    os.environ[refserver.ENV] = server
    print("%d failed" % len(FAILED))
    return 1 if FAILED else 0


def server_main(work):
    """The fork server (tests/ref/refserver.py) against computing here: the
    same entries, the function's output in the test's."""
    os.makedirs(os.path.join(work, "b"))
    # The same call computed here, into another cache: the entries must be equal.
    os.environ[refcache.ENV] = os.path.join(work, "local")
    refcache.call(prints_and_writes, os.path.join(work, "b", "out"), 5, base=os.path.join(work, "b"))
    CALLS.clear()
    os.environ.pop(refcache.ENV)
    p = subprocess.run([sys.executable, os.path.join(HERE, "refserver.py"), "--no-preload", "--", sys.executable,
                        os.path.abspath(__file__), "--server-client", work], capture_output=True, text=True,
                       timeout=120)
    print(p.stdout + p.stderr, end="")
    check(p.returncode == 0, "the tests run by the server pass (exit status %d)" % p.returncode)
    check("computing 5" in p.stdout and "computing 6" in p.stdout, "the function's output is the test's")
    check("refserver: 2 reference(s) computed" in p.stdout, "the server computed the two misses")

    def entries(cache):
        out = {}
        for d, _, names in os.walk(cache):
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    e = pickle.load(f)
                if e["name"] == "prints_and_writes":
                    out[os.path.basename(d), n] = (e["deps"], e["files"])
        return out
    local, served = entries(os.path.join(work, "local")), entries(os.path.join(work, "cache"))
    check(len(local) == 1 and local.keys() <= served.keys()
          and all(served[k][1] == local[k][1] and served[k][0] == local[k][0] for k in local),
          "an entry computed by the server is the one computed here")


def main():
    if sys.argv[1] == "--server-client":
        return server_client(sys.argv[2])
    os.environ.pop("QF_REF_SERVER", None)  # make test's server: this test counts its computations itself
    os.environ.pop(refcache.ENV_VERIFY, None)  # a suite run with it: this test turns it on itself
    work = os.path.abspath(sys.argv[1])
    refcache._TMP = os.path.join(work, "tmp") + os.sep  # WORK may be in the system's temporary directory
    shutil.rmtree(work, ignore_errors=True)
    cache = os.path.join(work, "cache")
    a, b = os.path.join(work, "a"), os.path.join(work, "b")  # two "build directories"
    for d in (a, b):
        os.makedirs(d)
    inp = os.path.join(work, "in.bin")
    with open(inp, "wb") as f:
        f.write(bytes(range(7)) * 5)
    # First, while this process has loaded no module of WORK (the helper
    # below is one when WORK is in the repository's build directory).
    server_main(os.path.join(work, "server"))

    os.environ.pop(refcache.ENV, None)
    r0 = refcache.call(reference, inp, 2, os.path.join(a, "out"), base=a)
    check(len(CALLS) == 1, "no cache without %s: computes" % refcache.ENV)
    with open(os.path.join(a, "out", "sub", "y.bin"), "rb") as f:
        y0 = f.read()

    os.environ[refcache.ENV] = cache
    CALLS.clear()
    r1 = refcache.call(reference, inp, 2, os.path.join(a, "out"), base=a)
    check(len(CALLS) == 1, "empty cache: computes")
    r2 = refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 1, "the same call from another base directory: a hit")
    check(pickle.dumps(r2) == pickle.dumps(r1) == pickle.dumps(r0), "a hit returns the computed result")
    with open(os.path.join(b, "out", "sub", "y.bin"), "rb") as f:
        check(f.read() == y0, "a hit writes the computed file, byte for byte, under its base")

    refcache.call(reference, inp, 3, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 2, "another argument: a miss")
    with open(inp, "ab") as f:
        f.write(b"\x01")
    r3 = refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 3 and r3["raw"] != r1["raw"], "a changed input file: a miss")
    refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 3, "then a hit again")
    # One path holding either of two files (two tests' models): each keeps
    # its entry.
    with open(inp, "rb") as f:
        second = f.read()
    for data in (bytes(range(7)) * 5, second, bytes(range(7)) * 5, second):
        with open(inp, "wb") as f:
            f.write(data)
        r = refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
        check(r["raw"] == data, "an input file's content gives its own result")
    check(len(CALLS) == 3, "the same call on either of two contents of a file (both computed above): hits")

    # A module imported inside the computation is a dependency.
    helper = os.path.join(work, "mods", "refcache_test_helper.py")
    os.makedirs(os.path.dirname(helper))
    with open(helper, "w") as f:
        f.write("VALUE = 1\n")
    sys.path.insert(0, os.path.dirname(helper))
    # Modules outside the repository are not tracked as modules, but read
    # files are: the helper's source is read at import (no .pyc yet).
    sys.dont_write_bytecode = True
    CALLS.clear()
    v1 = refcache.call(reads_helper, "h", base=b)
    v2 = refcache.call(reads_helper, "h", base=b)
    check(v1 == v2 == 1 and len(CALLS) == 1, "a computation importing a module: computed once")
    with open(helper, "w") as f:
        f.write("VALUE = 2\n")
    del sys.modules["refcache_test_helper"]
    v3 = refcache.call(reads_helper, "h", base=b)
    check(v3 == 2 and len(CALLS) == 2, "the imported module changed: a miss")

    # Modules of the repository are dependencies even when their .pyc is
    # what the import reads (ROOT pointed at the helper's directory here).
    sys.dont_write_bytecode = False
    with open(helper, "w") as f:
        f.write("VALUE = 3\n")
    del sys.modules["refcache_test_helper"]
    root = refcache.ROOT
    refcache.ROOT = os.path.dirname(helper)
    import importlib
    importlib.invalidate_caches()
    import refcache_test_helper  # noqa: F401  (writes its .pyc)
    del sys.modules["refcache_test_helper"]
    CALLS.clear()
    v4 = refcache.call(reads_helper, "h", base=b)
    with open(helper, "w") as f:
        f.write("VALUE = 4   # another size, so the .pyc is stale\n")
    del sys.modules["refcache_test_helper"]
    v5 = refcache.call(reads_helper, "h", base=b)
    check(v4 == 3 and v5 == 4 and len(CALLS) == 2, "a repository module changed (imported from its .pyc): a miss")
    refcache.ROOT = root

    # A changed package version misses (the key holds the versions).
    real = refcache._versions
    refcache._versions = lambda: real() + ["torch=other"]
    CALLS.clear()
    refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 1, "another package version: a miss")
    refcache._versions = real

    # A damaged entry is a miss, not an error.
    for d, _, names in os.walk(cache):
        for n in names:
            with open(os.path.join(d, n), "r+b") as f:
                f.truncate(10)
    CALLS.clear()
    r4 = refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 1 and r4 == r3, "a damaged entry: computed again")

    # Verify mode recomputes on a hit and compares.
    os.environ[refcache.ENV_VERIFY] = "1"
    CALLS.clear()
    refcache.call(reference, inp, 2, os.path.join(b, "out"), base=b)
    check(len(CALLS) == 1, "%s=1: a hit is computed again and compared" % refcache.ENV_VERIFY)
    del os.environ[refcache.ENV_VERIFY]

    def refused(what, fn, *args, **kw):
        try:
            refcache.call(fn, *args, **kw)
        except (RuntimeError, TypeError) as e:
            check(True, "refused: %s (%s)" % (what, str(e)[:90]))
            return
        check(False, "refused: %s" % what)

    outside = os.path.join(work, "outside")
    os.makedirs(outside)
    refused("writing outside the base directory", writes_outside, os.path.join(outside, "f"), base=b)
    refused("starting a process without inputs=", starts_process, base=b)
    refused("a lambda (captured values are not in the key)", lambda: 1, base=b)
    refused("an argument without a stable key", reference, object(), 1, b, base=b)
    print("%d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
