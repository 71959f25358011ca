#!/usr/bin/python3
"""Run the Python package's pytest tests (tests/python/test_*.py) for ctest.

    run_pytest.py TESTDIR

Exit 77 (skipped, with the reason) when pytest is missing or, in the
sanitizer pass, when ASan's runtime cannot be preloaded into python3 (a
ctypes-loaded sanitized libqfold.so needs it first in the process). In that
pass the script runs itself again with LD_PRELOAD set to it and
LeakSanitizer off (the interpreter's own allocations at exit are not
qfold's)."""
import os
import sys


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(77)


def main():
    test_dir = sys.argv[1]
    if os.environ.get("QF_SANITIZED") == "1" and not os.environ.get("QF_PY_PRELOADED"):
        asan = os.environ.get("QF_LIBASAN", "")
        if not os.path.isabs(asan) or not os.path.isfile(asan):
            skip("the sanitized libqfold.so needs ASan's runtime preloaded into python3, and the compiler "
                 "names none ('%s')" % asan)
        env = dict(os.environ, QF_PY_PRELOADED="1",
                   LD_PRELOAD=(asan + " " + os.environ.get("LD_PRELOAD", "")).strip())
        opts = [o for o in env.get("ASAN_OPTIONS", "").split(":") if o and not o.startswith("detect_leaks=")]
        env["ASAN_OPTIONS"] = ":".join(opts + ["detect_leaks=0"])
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    try:
        import pytest
    except ImportError:
        skip("pytest is not installed (python3-pytest: scripts/deps.sh installs it)")
    rc = pytest.main([test_dir, "-q", "-p", "no:cacheprovider", "-rs"])
    sys.exit(1 if rc == 5 else int(rc))  # 5: no tests collected is a failure


if __name__ == "__main__":
    main()
