"""Reference results computed once per `make test`, not once per pass.

`make test` runs the whole suite twice (the default engine, then the
sanitizer build on the reference kernels). The PyTorch / ONNX Runtime side of
a test does not depend on qfold's build, so the Makefile points both passes
at one cache directory (environment variable QF_REF_CACHE) and the second
pass reads what the first computed. Without the variable (a lone `ctest`)
nothing is cached and every call computes.

    import refcache
    y = refcache.call(reference_fn, arg1, arg2, base=WORKDIR)

`call` returns reference_fn(*args); the files it wrote under BASE are stored
with the result and written back on a hit, byte for byte. An entry is found
by a key (reference_fn's module and name, the arguments with BASE and the
repository root written as placeholders, the versions of Python, torch,
torchvision, onnx and numpy, the CPU's flags) and then checked: it records
every file the computation read (hashed: Python's own and its packages'
files aside, which the versions cover) and the source of every module of the
repository loaded (the test script, its helpers, modules it imported lazily);
one of them changed, missing or the entry unreadable, it is a miss and the
call computes again and replaces the entry. So a changed input, argument,
script or helper misses; a hit gives the pickled result and files the
computation produced.

What the function must be: a pure function of its arguments and of the
files it reads (seed its own generators; the code after the call must not
depend on the global random state it left); it writes only under BASE (or
a temporary directory it removes); it starts no process, except with
`inputs=` naming every file the processes read (hashed into the key) and
the processes' own programs among them. The result must pickle without torch
(numpy arrays, numbers, strings, lists, dicts); not depend on module
globals set at run time (parsed options: pass them as arguments). PyTorch
computes on one thread during a miss (torch.set_num_threads(1); a torch
first imported by the function stays on one thread afterwards), so the
result does not depend on the thread count of the pass (the sanitizer pass
sets OMP_NUM_THREADS=1) and two tests of a ctest -j2 run do not
oversubscribe the cores.

QF_REF_CACHE_VERIFY=1 computes on every hit too and fails (RuntimeError) if
the result or a file differs from the entry: the check that hits are what
recomputing gives. tests/ref/refcache_test.py tests this module.
"""
import hashlib
import os
import pickle
import sys
import sysconfig
import threading

ENV = "QF_REF_CACHE"
ENV_VERIFY = "QF_REF_CACHE_VERIFY"
ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FORMAT = 1  # bump when the entry layout changes

_PACKAGES = ("torch", "torchvision", "onnx", "numpy")
_IGNORED = None        # path prefixes whose reads are not recorded
_recording = []        # stack of _Recorder, innermost last
_hook_lock = threading.Lock()
_hook_added = False


def enabled():
    return bool(os.environ.get(ENV))


def _ignored_prefixes():
    global _IGNORED
    if _IGNORED is None:
        import site
        dirs = set()
        for k in ("stdlib", "platstdlib", "purelib", "platlib"):
            p = sysconfig.get_paths().get(k)
            if p:
                dirs.add(p)
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
        dirs.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
        _IGNORED = tuple(sorted({os.path.realpath(d) + os.sep for d in dirs if d}) +
                         ["/proc/", "/sys/", "/dev/"])
    return _IGNORED


def _sha_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Placeholders:
    """Paths under BASE or the repository root as '<base>/...' / '<root>/...'
    (the two passes work in different build directories)."""

    def __init__(self, base):
        self.base = os.path.realpath(base) if base else None

    def short(self, path):
        p = os.path.realpath(path)
        if self.base and (p == self.base or p.startswith(self.base + os.sep)):
            return "<base>" + p[len(self.base):]
        if p == ROOT or p.startswith(ROOT + os.sep):
            return "<root>" + p[len(ROOT):]
        return p

    def full(self, short):
        if short.startswith("<base>"):
            return self.base + short[6:]
        if short.startswith("<root>"):
            return ROOT + short[6:]
        return short

    def under_base(self, path):
        return self.base is not None and os.path.realpath(path).startswith(self.base + os.sep)


def _key_value(v, ph, h):
    """Feed argument V into hash H: types that have one meaning only."""
    if v is None or isinstance(v, (bool, int, float)):
        h.update(repr((type(v).__name__, v)).encode())
    elif isinstance(v, str):
        text = ph.short(v) if os.path.isabs(v) else v
        h.update(b"s%d:" % len(text) + text.encode())
    elif isinstance(v, bytes):
        h.update(b"b%d:" % len(v) + v)
    elif isinstance(v, (list, tuple)):
        h.update(b"%s%d[" % (type(v).__name__.encode(), len(v)))
        for x in v:
            _key_value(x, ph, h)
        h.update(b"]")
    elif isinstance(v, dict):
        h.update(b"d%d{" % len(v))
        for k in sorted(v):
            _key_value(k, ph, h)
            _key_value(v[k], ph, h)
        h.update(b"}")
    elif type(v).__module__ == "numpy" and hasattr(v, "tobytes"):
        import numpy as np
        a = np.ascontiguousarray(v)
        h.update(b"a" + repr((a.dtype.str, a.shape)).encode() + a.tobytes())
    else:
        raise TypeError("refcache: argument of type %s has no stable key" % type(v).__name__)


def _versions():
    """Versions of the packages references are computed with, without
    importing them (torch alone takes seconds to import)."""
    import importlib.util
    out = [sys.version]
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        text = "absent"
        if spec is not None and spec.origin:
            vfile = os.path.join(os.path.dirname(spec.origin), "version.py")
            try:
                with open(vfile, "rb") as f:
                    text = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                text = spec.origin
        out.append("%s=%s" % (name, text))
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "")
        out.append(flags.strip())
    except OSError:
        pass
    return out


_SERVER = os.path.join(os.path.dirname(os.path.realpath(__file__)), "refserver.py")


def _repo_modules(modules=None):
    """{path: None} of every loaded module (or of MODULES) whose source is in
    the repository (the test script, its helpers, examples/ it imports; not
    the fork server, which computes as the test's own process would)."""
    out = {}
    for m in list(sys.modules.values()) if modules is None else modules:
        f = getattr(m, "__file__", None)
        if not f or not f.endswith(".py"):
            continue
        p = _module_path.get((ROOT, f), False)
        if p is False:  # realpath costs a few system calls per path component: once per module file
            p = os.path.realpath(f)
            p = _module_path[ROOT, f] = p if p.startswith(ROOT + os.sep) and "/node_modules/" not in p else None
        if p and p != _SERVER and os.path.isfile(p):
            out[p] = None
    return out


_module_path = {}  # (ROOT, a module's __file__) -> its real path in the repository, or None


class _Recorder:
    def __init__(self, ph):
        self.ph = ph
        self.read = {}       # path -> sha256 at first read
        self.written = set()  # under the base directory: stored with the result
        self.scratch = set()  # in the temporary directory
        self.bad = []        # what the computation did that a cached entry cannot reproduce
        self.allow_proc = False

    def event(self, name, args):
        if name == "open":
            path, mode, flags = args
            if not isinstance(path, (str, bytes, os.PathLike)):
                return  # a file descriptor
            path = os.fsdecode(path)
            if not os.path.isabs(path):
                path = os.path.abspath(path)
            writes = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags is not None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            real = os.path.realpath(path)
            if writes:
                if os.sep + "__pycache__" + os.sep in real:
                    return  # an import writing its bytecode
                if self.ph.under_base(real):
                    self.written.add(real)
                elif real.startswith(_tmp_prefix()):
                    self.scratch.add(real)
                else:
                    self.bad.append("wrote %s (outside the base directory)" % path)
                return
            if real in self.written or real in self.scratch or real in self.read or real.endswith(".pyc"):
                return
            if real.startswith(_ignored_prefixes()) or not os.path.isfile(real):
                return
            try:
                self.read[real] = _sha_file(real)
            except OSError as e:
                self.bad.append("could not hash %s: %s" % (path, e))
        elif name in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn") and not self.allow_proc:
            self.bad.append("started a process (%s): give its files as inputs=" % name)


_TMP = None


def _tmp_prefix():
    global _TMP
    if _TMP is None:
        import tempfile
        _TMP = os.path.realpath(tempfile.gettempdir()) + os.sep
    return _TMP


_busy = threading.local()


def _hook(name, args):
    if not _recording or getattr(_busy, "on", False):
        return
    if name == "open" or name.startswith(("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn")):
        _busy.on = True  # the recorder opens files itself (hashing)
        try:
            for r in _recording:
                r.event(name, args)
        finally:
            _busy.on = False


def _add_hook():
    global _hook_added
    with _hook_lock:
        if not _hook_added:
            sys.addaudithook(_hook)
            _hook_added = True


def _compute(fn, args, kwargs, ph, allow_proc):
    """Run FN recording what it reads and writes; returns (result, recorder).
    PyTorch on one thread: set here if it is imported, else through
    OMP_NUM_THREADS while FN runs (read when FN imports it; it then stays on
    one thread for the rest of the process)."""
    _add_hook()
    rec = _Recorder(ph)
    rec.allow_proc = allow_proc
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    omp = os.environ.get("OMP_NUM_THREADS")
    if torch:
        torch.set_num_threads(1)
    else:
        os.environ["OMP_NUM_THREADS"] = "1"
    _recording.append(rec)
    try:
        result = fn(*args, **kwargs)
    finally:
        _recording.remove(rec)
        if torch:
            torch.set_num_threads(threads)
        elif omp is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    return result, rec


def _entry_dir(cache, key):
    """The entries of KEY: one file each, named by the hash of what it was
    checked against (the same call on other input files, e.g. one path
    holding different models in two tests, keeps an entry of its own)."""
    return os.path.join(cache, key[:2], key)


def _load(directory, ph):
    """A valid entry of DIRECTORY, else None."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    for name in names:
        if name.endswith(".pickle"):
            entry = _load_one(os.path.join(directory, name), ph)
            if entry is not None:
                return entry
    return None


def _load_one(path, ph):
    """The entry at PATH if it is still valid, else None."""
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    for short, sha in entry["deps"].items():
        try:
            if _sha_file(ph.full(short)) != sha:
                return None
        except OSError:
            return None
    return entry


def _store(directory, entry):
    name = hashlib.sha256(repr(sorted(entry["deps"].items())).encode()).hexdigest()[:32]
    path = os.path.join(directory, name + ".pickle")
    os.makedirs(directory, exist_ok=True)
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), threading.get_ident())
    with open(tmp, "wb") as f:
        pickle.dump(entry, f, protocol=4)
    os.replace(tmp, path)


def _restore(entry, ph):
    for short, data in entry["files"].items():
        p = ph.full(short)
        try:
            with open(p, "rb") as f:
                if f.read() == data:
                    continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)


def _remote(fn, args, kwargs, base, allow_proc):
    """A miss computed by the fork server (tests/ref/refserver.py), which has
    torch imported already, when QF_REF_SERVER names one; None: compute here."""
    if not os.environ.get("QF_REF_SERVER"):
        return None
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import refserver
    return refserver.compute(fn, args, kwargs, base, allow_proc)


def call(fn, *args, base=None, inputs=(), **kwargs):
    """fn(*args, **kwargs), from the cache when QF_REF_CACHE names one and
    an entry is valid (see the module's text). BASE: the directory the
    computation writes into (its files are stored and written back); INPUTS:
    files read by processes the computation starts (hashed into the key;
    naming them allows starting processes)."""
    if getattr(fn, "__closure__", None) or not hasattr(fn, "__qualname__") or fn.__name__ == "<lambda>":
        raise TypeError("refcache: give a module-level function (a closure's or lambda's captured values "
                        "would not be in the key)")
    cache = os.environ.get(ENV)
    if not cache:
        return fn(*args, **kwargs)
    ph = _Placeholders(base)
    h = hashlib.sha256()
    _key_value([FORMAT, getattr(fn, "__module__", "?"), fn.__qualname__], ph, h)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    _key_value(ph.short(main) if main else "", ph, h)
    mod = sys.modules.get(getattr(fn, "__module__", ""))
    if getattr(mod, "__file__", None):
        _key_value(ph.short(mod.__file__), ph, h)
    _key_value(list(args), ph, h)
    _key_value(kwargs, ph, h)
    _key_value(_versions(), ph, h)
    for p in inputs:
        _key_value([ph.short(p), _sha_file(p)], ph, h)
    key = h.hexdigest()
    directory = _entry_dir(cache, key)
    entry = _load(directory, ph)
    verify = os.environ.get(ENV_VERIFY) == "1"
    if entry is not None and not verify:
        _restore(entry, ph)
        return pickle.loads(entry["result"])

    remote = _remote(fn, args, kwargs, base, bool(inputs)) if entry is None else None
    if remote is not None:
        result, blob, read, written, bad, modules = remote
    else:
        result, rec = _compute(fn, args, kwargs, ph, allow_proc=bool(inputs))
        blob, read, written, bad, modules = None, rec.read, rec.written, rec.bad, ()
    if bad:
        raise RuntimeError("refcache: %s cannot be cached: %s" % (fn.__qualname__, "; ".join(bad)))
    if blob is None:
        blob = pickle.dumps(result, protocol=4)
    files = {}
    for p in sorted(written):
        if os.path.isfile(p):
            with open(p, "rb") as f:
                files[ph.short(p)] = f.read()
    if entry is not None:  # verifying a hit
        diff = [k for k in set(files) | set(entry["files"]) if files.get(k) != entry["files"].get(k)]
        if blob != entry["result"] or diff:
            raise RuntimeError("refcache: %s: recomputing differs from the cached entry (%s)"
                               % (fn.__qualname__, "result" if blob != entry["result"] else ", ".join(sorted(diff))))
        return result
    deps = {ph.short(p): sha for p, sha in read.items()}
    for p in set(_repo_modules()) | set(modules):
        deps[ph.short(p)] = _sha_file(p)
    _store(directory, {"format": FORMAT, "name": fn.__qualname__, "deps": deps, "files": files, "result": blob})
    return result
