#!/usr/bin/python3
"""A fork server for tests/ref/refcache.py's misses: PyTorch imported once per
pass, not once per test.

    refserver.py [--no-preload] -- COMMAND...

runs COMMAND (ctest) with QF_REF_SERVER naming the server's socket (in a
fresh temporary directory) in its environment, serves the references its
tests compute until it exits, then exits with its status.

A test's refcache.call that misses sends the call (the function's module and
name, the arguments, and the test process's sys.path, working directory, argv
and environment) to the server. The server forks; the child, which has torch,
torchvision, onnx and numpy imported already (at the first miss), imports the
function's module (a test script's own function: the script, imported under
another name, its `if __name__ == "__main__"` part not run), computes it as
refcache computes in the test's own process (the same recorder, PyTorch on
one thread), and sends back the pickled result, the files it read and wrote,
the repository modules it loaded and what it printed. The test process then
stores the entry as if it had computed it. Importing torch takes ~2.6 CPU s,
a call through the server ~0.1 (MAX_CALLS below).

Nothing else changes: a call goes to the server only on a miss, never for a
hit or QF_REF_CACHE_VERIFY's recomputation; without QF_REF_SERVER, with the
server unreachable or when its answer is not complete, the test computes in
its own process. A failure of the function comes back as the test's own
exception would (its traceback printed, then raised).
"""
import gc
import importlib
import importlib.util
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = "QF_REF_SERVER"


def send_msg(sock, obj):
    data = pickle.dumps(obj, protocol=4)
    sock.sendall(struct.pack("<Q", len(data)) + data)


def recv_msg(sock):
    def exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError("refserver: connection closed")
            buf += chunk
        return bytes(buf)
    (n,) = struct.unpack("<Q", exact(8))
    return pickle.loads(exact(n))


def _function(req):
    """The function REQ names, its module imported as the test process has it."""
    if req["module"] == "__main__":
        spec = importlib.util.spec_from_file_location("__qf_refmain__", req["main"])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["__qf_refmain__"] = mod
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(req["module"])
    fn = mod
    for part in req["qualname"].split("."):
        fn = getattr(fn, part)
    return fn


def _serve_one(conn, loaded):
    """In the forked child: compute one request, answer, exit. LOADED: the
    repository modules the server has loaded (refcache)."""
    # The modules this child imports. Not a scan of sys.modules at the end:
    # that touches every module object, and each touch of a page shared with
    # the server copies it (~0.08 CPU s for torch's ~1,250 modules).
    imported = []
    sys.addaudithook(lambda event, args: imported.append(args[0]) if event == "import" else None)
    req = recv_msg(conn)
    import refcache
    out = tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    reply = {"ok": False, "stage": "setup"}
    try:
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = list(req["argv"])
        sys.path[:] = req["path"]
        fn = _function(req)
        ph = refcache._Placeholders(req["base"])
        reply["stage"] = "call"
        result, rec = refcache._compute(fn, req["args"], req["kwargs"], ph, req["allow_proc"])
        mods = [sys.modules[n] for n in imported if n in sys.modules]
        if req["module"] == "__main__":
            mods.append(sys.modules["__qf_refmain__"])
        reply = {"ok": True, "result": pickle.dumps(result, protocol=4), "read": rec.read,
                 "written": sorted(rec.written), "bad": rec.bad,
                 "modules": sorted(set(loaded) | set(refcache._repo_modules(mods)))}
    except BaseException as e:  # the function's failure: the test's own process raises it
        reply["trace"] = traceback.format_exc()
        try:
            reply["exc"] = pickle.dumps(e, protocol=4)
        except Exception:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    out.seek(0)
    reply["output"] = out.read()
    send_msg(conn, reply)


def _preload(refcache, packages):
    """Import what the children share; the repository modules loaded."""
    if packages:  # not for tests/ref/refcache_test.py's own server (--no-preload)
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import torch
        import torchvision  # noqa: F401
        torch.set_num_threads(1)
    # What every child would compute again: the paths of the modules loaded
    # (thousands, torch's), the prefixes whose reads are not recorded.
    loaded = refcache._repo_modules()
    refcache._ignored_prefixes()
    refcache._tmp_prefix()
    # The forked children share the server's pages until they write to them:
    # keep the collector off the objects loaded so far (it would touch, and so
    # copy, every page holding one).
    gc.freeze()
    return loaded


def serve(cmd, preload=True):
    tmp = tempfile.mkdtemp(prefix="qf-refserver-")  # short: a socket's path has 107 bytes at most
    path = os.path.join(tmp, "socket")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    env = dict(os.environ)
    env[ENV] = path
    proc = subprocess.Popen(cmd, env=env)
    sys.path.insert(0, HERE)
    import refcache
    loaded = None
    children = set()
    served = 0
    try:
        while proc.poll() is None:
            ready, _, _ = select.select([srv], [], [], 0.5)
            if ready:
                conn, _ = srv.accept()
                if loaded is None:  # the first miss (the sanitizer pass may have none)
                    loaded = _preload(refcache, preload)
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        srv.close()
                        _serve_one(conn, loaded)
                    except BaseException:
                        code = 1
                    finally:
                        os._exit(code)
                conn.close()
                children.add(pid)
                served += 1
            for pid in list(children):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
    finally:
        srv.close()
        os.unlink(path)
        os.rmdir(tmp)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pid in children:  # nobody waits for these any more (a test killed at its timeout)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)
    print("refserver: %d reference(s) computed" % served, flush=True)
    return proc.returncode


# A call through the server costs ~0.1 CPU s (the fork, the pages the child
# copies, the round trip), a torch import ~2.6: a test process sends its first
# MAX_CALLS misses, then imports torch and computes the rest itself (the
# gradient checks make dozens of small calls each).
MAX_CALLS = 8
_calls = 0


def compute(fn, args, kwargs, base, allow_proc):
    """Client side (refcache.call on a miss): (result, its pickle, read,
    written, bad, modules) computed by the server, or None to compute here."""
    global _calls
    path = os.environ.get(ENV)
    if not path or _calls >= MAX_CALLS or "torch" in sys.modules:
        return None
    mod = sys.modules.get(getattr(fn, "__module__", ""))
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if fn.__module__ == "__main__":
        # The script is imported in the server: only one that runs nothing then.
        try:
            with open(main, encoding="utf-8") as f:
                if "\nif __name__ == \"__main__\":" not in f.read():
                    return None
        except (OSError, TypeError):
            return None
    elif not getattr(mod, "__file__", None):
        return None
    req = {"module": fn.__module__, "qualname": fn.__qualname__, "main": main, "args": list(args),
           "kwargs": kwargs, "base": base, "allow_proc": allow_proc, "cwd": os.getcwd(), "argv": list(sys.argv),
           "env": dict(os.environ), "path": list(sys.path)}
    _calls += 1
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            send_msg(s, req)
            reply = recv_msg(s)
    except (OSError, EOFError, pickle.PickleError):
        return None
    if not reply["ok"] and reply.get("stage") != "call":
        return None  # the server could not set the call up: compute here
    out = reply.get("output", b"")
    if out:
        sys.stdout.flush()
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
    if not reply["ok"]:
        sys.stderr.write("refserver: %s raised (in the server):\n%s" % (fn.__qualname__, reply["trace"]))
        exc = reply.get("exc")
        if exc is not None:
            try:
                exc = pickle.loads(exc)
            except Exception:
                exc = None
        if isinstance(exc, BaseException):
            raise exc
        raise RuntimeError("refserver: %s failed" % fn.__qualname__)
    return (pickle.loads(reply["result"]), reply["result"], reply["read"], set(reply["written"]), reply["bad"],
            reply["modules"])


def main():
    argv = sys.argv[1:]
    preload = argv[:1] != ["--no-preload"]
    if not preload:
        argv = argv[1:]
    if len(argv) < 2 or argv[0] != "--":
        sys.stderr.write(__doc__)
        return 2
    return serve(argv[1:], preload)


if __name__ == "__main__":
    sys.exit(main())
