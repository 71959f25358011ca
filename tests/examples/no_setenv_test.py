#!/usr/bin/python3
"""The library changes no process environment (qfold/exec.h, "The process
environment"): no object of libqfold.a calls setenv, putenv, unsetenv or
clearenv. The CLI and the example programs set libgomp's environment
themselves, from qf_engine_environment.

    no_setenv_test.py LIBQFOLD.a
"""
import shutil
import subprocess
import sys

FORBIDDEN = {"setenv", "putenv", "unsetenv", "clearenv"}


def main():
    nm = shutil.which("nm")
    if not nm:
        print("SKIP: no nm")
        sys.exit(77)
    out = subprocess.run([nm, "-A", "-u", sys.argv[1]], capture_output=True, text=True, check=True).stdout
    bad = [line for line in out.splitlines() if line.split()[-1] in FORBIDDEN]
    if not out.strip():
        print("FAIL: nm listed no undefined symbol in %s: the check would see nothing" % sys.argv[1])
        sys.exit(1)
    if bad:
        print("FAIL: the library changes the environment:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print("ok: no object of %s calls %s" % (sys.argv[1], ", ".join(sorted(FORBIDDEN))))


if __name__ == "__main__":
    main()
