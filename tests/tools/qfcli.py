"""The pieces every Python test script that drives the qfold binary shares
(tests/cli/cli_test.py, tests/cli/fault_test.py, tests/quant/quantize_test.py):
the failure type, the check, running qfold with an expected exit status,
reading its one-line error message, and the case runner that ctest calls.
A case that cannot run here raises Skip: the runner exits 77, which ctest
reports as skipped where the test has SKIP_RETURN_CODE 77 (never as passed).

    import qfcli
    ARGS = None                      # set by qfcli.main before the case runs
    def case_something(): ... ARGS.qfold ...
    sys.exit(qfcli.main("cli", globals(), paths=("--examples", "--work")))
"""
import argparse
import os
import subprocess


class Fail(Exception):
    pass


class Skip(Exception):
    """The case cannot run here (the message says why): exit 77."""


def check(cond, what):
    if not cond:
        raise Fail(what)


def run_qfold(binary, argv, expect=None, timeout=120, **kw):
    """Run qfold with argv; return (returncode, stdout, stderr). A run past
    `timeout` seconds (blocked, hung) or with another exit status than
    `expect` (when given) is a failure that shows the command and its output.
    Other keyword arguments go to subprocess.run (env, cwd, preexec_fn)."""
    cmd = [binary] + [str(a) for a in argv]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise Fail("`%s` did not finish within %d s (blocked or hung)" % (" ".join(cmd), timeout))
    if expect is not None and p.returncode != expect:
        raise Fail("`%s` exited %d, expected %d\nstdout:\n%s\nstderr:\n%s"
                   % (" ".join(cmd), p.returncode, expect, p.stdout, p.stderr))
    return p.returncode, p.stdout, p.stderr


def error_line(err, *needles):
    """A failure prints one line 'qfold: <message>' first (usage errors may add
    the usage after it); that line must hold every needle. Returns it."""
    lines = err.strip().splitlines()
    check(lines and lines[0].startswith("qfold: "), "stderr does not start with 'qfold: ':\n" + err)
    for n in needles:
        check(n in lines[0], "error line lacks %r:\n%s" % (n, err))
    return lines[0]


def main(label, namespace, paths=(), options=(), per_case_work=True):
    """Parse --qfold BIN, the path options (made absolute) and other options,
    then the CASE; set namespace["ARGS"] (the script's global) to the parsed
    arguments, run namespace["case_" + CASE]() and print
    "ok <label> <case>", "FAIL <label> <case>: <why>" or "SKIP <label> <case>:
    <why>". Returns the exit status (0 ok, 1 failed, 77 skipped). --work gets a subdirectory per case when
    per_case_work (cases may run in parallel)."""
    cases = {k[5:]: v for k, v in namespace.items() if k.startswith("case_")}
    ap = argparse.ArgumentParser()
    ap.add_argument("--qfold", required=True)
    for p in paths:
        ap.add_argument(p, required=True)
    for o in options:
        ap.add_argument(o, required=True)
    ap.add_argument("case", choices=sorted(cases))
    args = ap.parse_args()
    args.qfold = os.path.abspath(args.qfold)
    for p in paths:
        key = p.lstrip("-").replace("-", "_")
        setattr(args, key, os.path.abspath(getattr(args, key)))
    if getattr(args, "work", None):
        if per_case_work:
            args.work = os.path.join(args.work, args.case)
        os.makedirs(args.work, exist_ok=True)
    namespace["ARGS"] = args
    try:
        cases[args.case]()
    except Fail as e:
        print("FAIL %s %s: %s" % (label, args.case, e))
        return 1
    except Skip as e:
        print("SKIP %s %s: %s" % (label, args.case, e))
        return 77
    print("ok %s %s" % (label, args.case))
    return 0
