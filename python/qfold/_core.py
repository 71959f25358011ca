"""The package's core: the library's settings, tensors, Model and load, the
data sources, and _Call (the frame of a long call: threads, engine, Ctrl-C)."""
import ctypes
import os
import signal
import threading
from typing import Dict, List, Union

import numpy as np

from . import _lib
from ._lib import lib, take_text
from ._lib import check as _ok
from .errors import InputError, ProcessingError, MismatchError, Interrupted

library_path = _lib.path
library_version = _lib.version

# qf_dtype codes (qfold/tensor.h) <-> numpy.
_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}
_STORE_F16 = 10
_OPAQUE = lib.qf_op_from_name(b"opaque")

# The OpenMP environment oneDNN's threads run best with (qf_engine_environment,
# qfold/exec.h), set before anything loads oneDNN, as the CLI does; a value
# the user set wins.
_ENV_OURS = set()  # the variables the package set (the others are the user's)


def _apply_environment():
    """qf_engine_environment's recommendation for the current thread count
    (again after set_threads: it names OMP_NUM_THREADS), until oneDNN
    loads (the first plan or set_engine); a variable the user set stays."""
    env = (_lib.EngineEnv * 3)()
    for k in range(lib.qf_engine_environment(env)):
        name = env[k].name.decode()
        if name not in os.environ or name in _ENV_OURS:
            os.environ[name] = env[k].value.decode()
            _ENV_OURS.add(name)


_apply_environment()


def _b(s):
    return None if s is None else os.fsencode(s)


def _s(b):
    return None if b is None else b.decode("utf-8", "replace")


# --- engine and threads (process-wide) -------------------------------------

_ENGINES = {"auto": 0, "ref": 1, "dnnl": 2}


def set_engine(name: str) -> None:
    """The kernels new plans use: "auto" (oneDNN where it loads, the
    default), "ref" (qfold's reference kernels only) or "dnnl" (fails when
    oneDNN cannot be loaded). Process-wide, as QFOLD_ENGINE."""
    if name not in _ENGINES:
        raise InputError("unknown engine '%s' (engines: auto, ref, dnnl)" % name, "INVALID")
    _ok(lib.qf_set_engine(_ENGINES[name]))


def get_engine() -> str:
    """"ref" or "dnnl": what new plans use."""
    return {1: "ref", 2: "dnnl"}.get(lib.qf_get_engine(), "auto")


def set_threads(n: int) -> None:
    """Threads the kernels use (0: the machine's cores), process-wide as
    --threads; set it before the first plan, so that OpenMP's environment
    (OMP_NUM_THREADS, read once when oneDNN loads) follows it too."""
    _ok(lib.qf_set_threads(int(n)))
    _apply_environment()


def get_threads() -> int:
    return lib.qf_get_threads()


def engine_about() -> str:
    """One phrase on the active kernels ("oneDNN 2.7.3", or why not)."""
    return _s(lib.qf_engine_about())


class _Call:
    """The frame of a long library call: threads and engine for this call
    only (put back afterwards), and Ctrl-C. While the call runs, SIGINT (on
    the main thread, when Python's default handler has it) asks the library
    to stop (qf_interrupt_catch_sigint): it returns "interrupted" at its next
    check (a plan run, a training step, an AdaRound iteration) and the call
    raises KeyboardInterrupt. Python's own handler would only run once the
    call returned."""

    def __init__(self, threads=None, engine=None):
        self.threads, self.engine = threads, engine

    def __enter__(self):
        self._saved = None
        if self.threads is not None or self.engine is not None:
            self._saved = (lib.qf_get_threads(), lib.qf_get_engine())
            try:
                if self.threads is not None:  # not set_threads: OpenMP's environment stays the process's
                    _ok(lib.qf_set_threads(int(self.threads)))
                if self.engine is not None:
                    set_engine(self.engine)
            except BaseException:
                self._restore()
                raise
        self._caught = False
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            lib.qf_interrupt_clear()
            self._caught = lib.qf_interrupt_catch_sigint() == 0
        return self

    def _restore(self):
        if self._saved is not None:
            lib.qf_set_threads(self._saved[0])
            lib.qf_set_engine(self._saved[1])
            self._saved = None

    def __exit__(self, et, e, tb):
        interrupted = False
        if self._caught:
            lib.qf_interrupt_release_sigint()
            interrupted = lib.qf_interrupt_pending()
            lib.qf_interrupt_clear()
        self._restore()
        if interrupted and (et is None or issubclass(et, (Interrupted, KeyboardInterrupt))):
            raise KeyboardInterrupt
        return False


# --- tensors ------------------------------------------------------------------

class TensorInfo(tuple):
    """A graph input or output: name, dtype (a numpy dtype), shape (None for
    an unknown dim) and whether the input has a default value."""
    __slots__ = ()

    def __new__(cls, name, dtype, shape, default=False):
        return tuple.__new__(cls, (name, dtype, shape, default))

    name = property(lambda self: self[0])
    dtype = property(lambda self: self[1])
    shape = property(lambda self: self[2])
    default = property(lambda self: self[3])

    def __repr__(self):
        return "TensorInfo(name=%r, dtype=%s, shape=%r%s)" % (self[0], np.dtype(self[1]).name, self[2],
                                                           ", default=True" if self[3] else "")


def _info(v):
    t = v.type
    shape = tuple(None if t.dims[k] < 0 else int(t.dims[k]) for k in range(t.ndim))
    dt = _DTYPES.get(t.dtype)
    if v.store & 0xFF == _STORE_F16:
        dt = np.float16
    return TensorInfo(_s(v.name), np.dtype(dt) if dt else None, shape, bool(lib.qf_value_has_default(ctypes.byref(v))))


def _view(arr):
    """A qf_tensor borrowing arr's memory (arr: C-contiguous, kept alive by the caller)."""
    code = _CODES.get(arr.dtype)
    if code is None:
        raise InputError("arrays of dtype %s are not supported (float32, float64, int8, uint8, int32, int64, "
                         "bool)" % arr.dtype, "UNSUPPORTED")
    if arr.ndim > _lib.QF_MAX_DIMS:
        raise InputError("arrays of rank %d are not supported (at most %d)" % (arr.ndim, _lib.QF_MAX_DIMS),
                         "SHAPE")
    t = _lib.Tensor()
    t.dtype, t.ndim = code, arr.ndim
    for k, d in enumerate(arr.shape):
        t.dims[k] = d
    t.data = arr.ctypes.data
    return t


def _array_of(t):
    """A numpy copy of qf_tensor t (C memory that goes away with its owner)."""
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise ProcessingError("output of dtype code %d has no numpy dtype" % t.dtype, "UNSUPPORTED")
    out = np.empty(tuple(t.dims[k] for k in range(t.ndim)), dtype=dt)
    if out.nbytes:
        ctypes.memmove(out.ctypes.data, t.data, out.nbytes)
    return out


# --- models -------------------------------------------------------------------

class Model:
    """An ONNX model in qfold's graph (the C library's qf_graph, owned by
    this object and freed with it). Made by qfold.load, fuse, quantize.

    inputs / outputs: TensorInfo lists; ops: {op: count}, most frequent
    first (as `qfold inspect`); to_onnx_bytes(); save(path); run(...)."""

    def __init__(self, graph, name=None, report=None, source=None):
        self._g = graph
        self.name = name
        self._source = source  # what load() read (a path or bytes): the graph as read from it
        #: what made the model: the pass report (fuse) or the quantize report, as a dict
        self.report = report
        self._plan = None  # (key, graph, plan) of the last run
        self._fast = None  # _Fast: run()'s state for the next call of the same kind

    # life cycle
    def _drop_plan(self):
        self._fast = None  # its views point into the plan
        if self._plan is not None:
            _, g, p = self._plan
            self._plan = None
            lib.qf_plan_free(p)
            lib.qf_graph_free(g)

    def close(self) -> None:
        """Free the C graph now (also done when the object goes away)."""
        self._drop_plan()
        if self._g:
            lib.qf_graph_free(self._g)
            self._g = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def _graph(self):
        if not self._g:
            raise InputError("the model was closed", "INVALID")
        return self._g.contents

    def _clone(self):
        out = _lib.GRAPH_P()
        self._graph  # noqa: B018 (closed check)
        _ok(lib.qf_graph_clone(self._g, ctypes.byref(out)))
        return out

    def _reloaded(self):
        """A graph of its own as it would be read from the model's file: the
        model's bytes loaded again. A rewrite of it writes what the CLI writes
        for the file (a clone numbers the values anew, and the exporter writes
        initializers in value order). A model that load() read is read again
        from its file or bytes (as the CLI reads it: import folds and orders
        what a rewrite would write otherwise). A model over 2 GiB, which has
        no bytes in memory, is cloned."""
        self._graph  # noqa: B018 (closed check)
        if self._source is not None:
            g = _lib.GRAPH_P()
            if isinstance(self._source, bytes):
                _ok(lib.qf_onnx_load_buffer(self._source, len(self._source), b"the model", ctypes.byref(g)))
            else:
                _ok(lib.qf_onnx_load(_b(self._source), ctypes.byref(g)))
            return g
        try:
            data = self.to_onnx_bytes()
        except InputError:
            return self._clone()
        g = _lib.GRAPH_P()
        _ok(lib.qf_onnx_load_buffer(data, len(data), _b(self.name) or b"the model", ctypes.byref(g)))
        return g

    def copy(self) -> "Model":
        """A deep copy (a graph of its own)."""
        return Model(self._clone(), self.name, self.report)

    # description
    @property
    def inputs(self) -> List[TensorInfo]:
        g = self._graph
        return [_info(g.inputs[i].contents) for i in range(g.ninputs)]

    @property
    def outputs(self) -> List[TensorInfo]:
        g = self._graph
        return [_info(g.outputs[i].contents) for i in range(g.noutputs)]

    @property
    def ops(self) -> Dict[str, int]:
        """Nodes per op (ONNX op_type; qfold's name for its internal ops; an
        op qfold does not know as "domain.op_type"), most frequent first, then
        by name, as `qfold inspect --json` lists them."""
        counts = {}
        n = self._graph.first
        while n:
            node = n.contents
            if node.op == _OPAQUE:
                dom = _s(lib.qf_node_attr_string(n, b"domain", b""))
                op = _s(lib.qf_node_attr_string(n, b"op_type", b"?"))
                key = "%s.%s" % (dom, op) if dom else op
            else:
                key = _s(lib.qf_op_onnx_name(node.op) or lib.qf_op_name(node.op))
            counts[key] = counts.get(key, 0) + 1
            n = node.next
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].encode())))

    @property
    def nodes(self) -> int:
        return self._graph.nnodes

    @property
    def opset(self) -> int:
        return self._graph.opset

    @property
    def quantized(self) -> bool:
        """Whether the model has QuantizeLinear / DequantizeLinear nodes."""
        self._graph  # noqa: B018
        return bool(lib.qf_graph_is_quantized(self._g))

    def __repr__(self):
        if not self._g:
            return "<qfold.Model (closed)>"
        return "<qfold.Model %s: %d nodes, inputs %s, outputs %s>" % (
            self.name or "(in memory)", self.nodes, [i.name for i in self.inputs], [o.name for o in self.outputs])

    # files
    def to_onnx_bytes(self) -> bytes:
        """The model as ONNX bytes: what `qfold` writes to a file for it."""
        self._graph  # noqa: B018
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _ok(lib.qf_onnx_save_buffer(self._g, ctypes.byref(data), ctypes.byref(size)))
        return take_text(data, size.value)

    def save(self, path, external_data: Union[bool, str, os.PathLike, None] = None) -> None:
        """Write the model to `path` (all or nothing: a temporary file renamed
        into place). external_data: None (a side file "<path>.data" only for a
        model over protobuf's 2 GiB), True (the initializers of 1 KiB and more
        in "<path>.data"), or the side file's path."""
        self._graph  # noqa: B018
        o = _lib.OnnxSaveOptions()
        if external_data is True:
            o.always = True
        elif external_data not in (None, False):
            o.always, o.external_data = True, _b(external_data)
        _ok(lib.qf_onnx_save_ex(self._g, _b(path), ctypes.byref(o)))

    # running
    def _feed(self, arrays, named):
        ins = self.inputs
        if len(arrays) > len(ins):
            raise InputError("the model has %d input%s (%s), got %d arrays" % (
                len(ins), "" if len(ins) == 1 else "s", ", ".join(i.name for i in ins), len(arrays)), "INVALID")
        feed = list(arrays) + [None] * (len(ins) - len(arrays))
        index = {i.name: k for k, i in enumerate(ins)}
        for name, a in named.items():
            if name not in index:
                raise InputError("the model has no input '%s' (inputs: %s)" % (
                    name, ", ".join(i.name for i in ins)), "INVALID")
            if feed[index[name]] is not None:
                raise InputError("input '%s' given twice" % name, "INVALID")
            feed[index[name]] = a
        out = []
        for info, a in zip(ins, feed):
            if a is None:
                if not info.default:
                    raise InputError("input '%s' (%s %s) is not given" % (info.name, np.dtype(info.dtype).name,
                                                                         list(info.shape)), "INVALID")
                out.append(None)
                continue
            want = np.dtype(np.float32 if info.dtype == np.float16 else info.dtype)
            if not isinstance(a, np.ndarray):
                a = np.asarray(a, dtype=want)
            if a.dtype != want:
                raise InputError("input '%s' expects %s, got an array of %s" % (info.name, want.name, a.dtype.name),
                                 "INVALID")
            if a.ndim != len(info.shape) or any(d is not None and d != s for d, s in zip(info.shape, a.shape)):
                raise InputError("input '%s' expects shape %s, got %s" % (
                    info.name, [("?" if d is None else d) for d in info.shape], list(a.shape)), "SHAPE")
            a = np.ascontiguousarray(a)
            if info.dtype == np.float16:  # the model sees float16 values (as `qfold run`)
                a = a.astype(np.float16).astype(np.float32)
            out.append(a)
        return out

    def _prepared(self, feed, simulate, requant):
        key = (simulate, requant) + tuple(
            None if a is None else (a.dtype.str, a.shape, a.tobytes() if a.dtype == np.int64 else None)
            for a in feed)
        if self._plan is not None and self._plan[0] == key:
            return self._plan
        self._drop_plan()
        g = self._clone()
        plan = ctypes.c_void_p()
        try:
            for i in range(len(feed) - 1, -1, -1):  # binding removes an input: last first
                a = feed[i]
                if a is None:
                    _ok(lib.qf_graph_input_use_default(g, i))
                elif a.dtype == np.int64:  # shape-like: a constant, so that shapes stay static
                    t = _lib.Tensor()
                    dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
                    _ok(lib.qf_tensor_init(ctypes.byref(t), 7, a.ndim, dims))
                    if a.nbytes:
                        ctypes.memmove(t.data, a.ctypes.data, a.nbytes)
                    _ok(lib.qf_graph_bind_input(g, i, ctypes.byref(t)))
                else:
                    dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
                    _ok(lib.qf_graph_set_input_shape(g, i, a.ndim, dims))
            if not simulate:  # a QDQ model runs its int8 groups in integers (as `qfold run`)
                _ok(lib.qf_quant_lower_int8(g, None, 1 if requant == "onnx" else 0, None))
            _ok(lib.qf_plan_init(ctypes.byref(plan), g))
        except BaseException:
            lib.qf_graph_free(g)
            raise
        self._plan = (key, g, plan)
        return self._plan

    def run(self, *arrays, simulate: bool = False, requant: str = "tflite", **named) -> List[np.ndarray]:
        """Run the model on numpy arrays, one per graph input, in order or by
        name (an input with a default may be left out); returns the outputs
        as new numpy arrays (copies: they outlive the model). A quantized
        (QDQ) model runs its int8 groups in integers with TFLite's
        requantization, as `qfold run` does (requant="onnx": ONNX Runtime's;
        simulate=True: Q / DQ in float, every op as written). The plan is kept
        for the next call with the same shapes."""
        f = self._fast
        if f is not None and not named and len(arrays) == f.n and simulate is f.simulate and requant == f.requant:
            # the fast path: the arrays of the last call's kind, copied into the
            # plan's own input buffers; no allocation but the outputs
            for a, b in zip(arrays, f.bufs):
                if type(a) is not np.ndarray or a.shape != b.shape or a.dtype != b.dtype:
                    break
            else:
                for a, b in zip(arrays, f.bufs):
                    np.copyto(b, a)
                st = _plan_run(f.plan, f.ptrs, f.n)
                if st:
                    _ok(st)
                if all(d.value == a for d, a in zip(f.out_data, f.out_addr)):
                    return [v.copy() for v in f.views]
                self._fast = None  # the plan moved its outputs: read them the long way
                return self._outputs(self._plan[1], self._plan[2])
        if requant not in ("tflite", "onnx"):
            raise InputError("requant is 'tflite' or 'onnx', got %r" % (requant,), "INVALID")
        self._graph  # noqa: B018
        feed = self._feed(arrays, named)
        _, g, plan = self._prepared(feed, simulate, requant)
        keep = [(a, _view(a)) for a in feed if a is not None and a.dtype != np.int64]
        ptrs = (ctypes.POINTER(_lib.Tensor) * max(1, len(keep)))(*[ctypes.pointer(t) for _, t in keep])
        _ok(lib.qf_plan_run(plan, ptrs, len(keep)))
        outs = self._outputs(g, plan)
        if all(a is not None and a.dtype != np.int64 for a in feed) and len(arrays) == len(feed) and not named \
                and all(o.dtype != np.float16 for o in outs):
            self._fast = _Fast(feed, plan, simulate, requant)
        return outs

    @staticmethod
    def _outputs(g, plan):
        outs = []
        gg = g.contents
        for i in range(lib.qf_plan_num_outputs(plan)):
            y = _array_of(lib.qf_plan_output(plan, i).contents)
            if gg.outputs[i].contents.store & 0xFF == _STORE_F16 and y.dtype == np.float32:
                y = y.astype(np.float16)
            outs.append(y)
        return outs


# qf_plan_run without argument conversion (the fast path passes ctypes objects of the right types)
_plan_run = ctypes.CDLL(_lib.path).qf_plan_run
_plan_run.restype = ctypes.c_int
_DATA_OFFSET = _lib.Tensor.data.offset


class _Fast:
    """Model.run's state for the next call with arrays of the same shapes
    and dtypes: input buffers of its own (the arrays are copied in: cheaper
    than asking numpy for an array's address), their qf_tensors and pointer
    array, and views of the plan's outputs (copied out on every call; the
    address of each output's data is checked first)."""
    __slots__ = ("n", "simulate", "requant", "plan", "bufs", "tensors", "ptrs", "views", "out_data", "out_addr")

    def __init__(self, feed, plan, simulate, requant):
        self.n, self.simulate, self.requant, self.plan = len(feed), simulate, requant, ctypes.c_void_p(plan.value)
        self.bufs = [np.empty_like(a, order="C") for a in feed]
        self.tensors = [_view(b) for b in self.bufs]
        self.ptrs = (ctypes.POINTER(_lib.Tensor) * max(1, self.n))(*[ctypes.pointer(t) for t in self.tensors])
        self.views, self.out_data, self.out_addr = [], [], []
        for i in range(lib.qf_plan_num_outputs(plan)):
            tp = lib.qf_plan_output(plan, i)
            t = tp.contents
            dt = np.dtype(_DTYPES[t.dtype])
            shape = tuple(t.dims[k] for k in range(t.ndim))
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            addr = t.data or 0
            buf = (ctypes.c_char * max(1, nbytes)).from_address(addr) if addr else bytearray(max(1, nbytes))
            self.views.append(np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize).reshape(shape))
            self.out_data.append(ctypes.c_void_p.from_address(ctypes.addressof(t) + _DATA_OFFSET))
            self.out_addr.append(addr)


def load(source: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> Model:
    """An ONNX model from a file (external data read from its directory) or
    from bytes in memory, as `qfold` reads it: initializers become constants,
    shapes are inferred, the graph verified. InputError for an unreadable,
    malformed or unsupported model (the message names the node)."""
    g = _lib.GRAPH_P()
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = bytes(source)
        _ok(lib.qf_onnx_load_buffer(buf, len(buf), b"the model", ctypes.byref(g)))
        return Model(g, None, source=buf)
    _ok(lib.qf_onnx_load(_b(source), ctypes.byref(g)))
    return Model(g, os.fspath(source), source=os.path.abspath(os.fspath(source)))


def _model(m) -> Model:
    if isinstance(m, Model):
        return m
    return load(m)


# --- fuse ---------------------------------------------------------------------

def _register():
    _ok(lib.qf_quant_register_passes())


def _report_json(report, extra=None):
    import json
    text, size = ctypes.c_void_p(), ctypes.c_size_t()
    _ok(lib.qf_pass_report_json(report, extra, ctypes.byref(text), ctypes.byref(size)))
    return json.loads(take_text(text, size.value).decode("utf-8"))


def fuse(model: Union[Model, str, bytes], verify: bool = False, tolerance: float = 1e-4,
         pipeline: str = "ptq") -> Model:
    """Fold BatchNorm into the convolutions and linear layers before them
    (pipeline ptq, the graph verified after every pass), as `qfold fuse`.
    Returns a new model (the given one is not changed) whose .report is the
    pass report as a dict. verify=True: the model written and read back runs
    against the original on the same inputs (synthesized, as `qfold fuse
    --verify`); MismatchError when an output differs past `tolerance`
    (relative to the output's largest value)."""
    src = _model(model)
    _register()
    g = src._reloaded()
    orig = src._clone() if verify else None
    rep = ctypes.c_void_p()
    try:
        opt = _lib.PassOptions(verify=True)
        st = lib.qf_pipeline_run(g, pipeline.encode(), ctypes.byref(opt), ctypes.byref(rep))
        _ok(st)
        report = _report_json(rep)
        out = Model(g, src.name, report)
        g = None
        if verify:
            back = load(out.to_onnx_bytes())
            res = _lib.CompareResult()
            vo = _lib.VerifyOptions(tolerance=tolerance, ref_name=b"original", cand_name=b"fused",
                                    change=b"fusing")
            try:
                _ok(lib.qf_verify_graphs(orig, back._g, None, ctypes.byref(vo), ctypes.byref(res)))
                report["verify"] = {"ok": bool(res.ok), "tolerance": tolerance, "outputs": [
                    {"name": _s(res.outputs[i].name), "max_abs": res.outputs[i].max_abs,
                     "max_rel": res.outputs[i].max_rel, "ok": bool(res.outputs[i].ok)}
                    for i in range(res.noutputs)]}
                if not res.ok:
                    raise MismatchError("the fused model's outputs differ from the original's past the tolerance "
                                        "%g: %s" % (tolerance, "; ".join(
                                            "output '%s' max rel diff %.3g" % (o["name"], o["max_rel"])
                                            for o in report["verify"]["outputs"] if not o["ok"])), "MISMATCH")
            finally:
                lib.qf_compare_result_free(ctypes.byref(res))
                back.close()
        return out
    finally:
        lib.qf_pass_report_free(rep)
        if g:
            lib.qf_graph_free(g)
        if orig:
            lib.qf_graph_free(orig)


# --- data ---------------------------------------------------------------------

class _Data:
    """A qf_data_source over the calibration / evaluation data: numpy arrays
    (one per graph input, [N, ...]) or .npy files read a batch at a time."""

    def __init__(self, model, data, what):
        self._files, self._npy, self._keep = [], None, []
        self.paths = []
        g = model._graph
        n = g.ninputs
        try:
            if isinstance(data, (str, os.PathLike)):
                data = (data,)
            if isinstance(data, tuple) and data and all(isinstance(d, (str, os.PathLike)) for d in data):
                self._open_files(model, data, what)
            else:
                self._arrays(model, self._collect(data, n, what), what)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _collect(data, n, what):
        """One array per input: an array (one input), a tuple of arrays (one
        per input), or any other iterable of batches of those (concatenated
        along the first axis; batches may differ in size)."""
        if isinstance(data, np.ndarray):
            return [data]
        if isinstance(data, tuple):
            return list(data)
        batches = []
        for b in data:
            b = (b,) if isinstance(b, np.ndarray) else tuple(b)
            if batches and len(b) != len(batches[0]):
                raise InputError("%s: batch %d holds %d arrays, the first %d" % (what, len(batches), len(b),
                                                                                len(batches[0])), "INVALID")
            batches.append(b)
        if not batches:
            raise InputError("%s: no batches" % what, "INVALID")
        return [np.concatenate([np.asarray(b[k]) for b in batches], axis=0) for k in range(len(batches[0]))]

    def _arrays(self, model, arrays, what):
        g = model._graph
        if len(arrays) != g.ninputs:
            raise InputError("the model has %d input%s: give %s one array per input, got %d" % (
                g.ninputs, "" if g.ninputs == 1 else "s", what, len(arrays)), "INVALID")
        tensors = []
        for i, a in enumerate(arrays):
            a = np.ascontiguousarray(a)
            v = g.inputs[i].contents
            t = _view(a)
            st = lib.qf_data_check(g.inputs[i], ctypes.byref(t))
            if st:
                raise _lib.error_for(st, "%s for input '%s': %s" % (what, _s(v.name), _lib.message()))
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                k = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
                raise InputError("%s for input '%s': element %d (sample %d) is %s" % (
                    what, _s(v.name), k, k // max(1, a[0].size), a.reshape(-1)[k]), "NUMERIC")
            if tensors and a.shape[0] != arrays[0].shape[0]:
                raise InputError("%s for input '%s' holds %d samples, for '%s' %d" % (
                    what, _s(v.name), a.shape[0], _s(g.inputs[0].contents.name), arrays[0].shape[0]), "SHAPE")
            self._keep.append(a)
            tensors.append(t)
        self._tensors = tensors
        self._ptrs = (ctypes.POINTER(_lib.Tensor) * len(tensors))(*[ctypes.pointer(t) for t in tensors])
        self._src = lib.qf_data_source_tensors(self._ptrs, len(tensors))
        self.samples = arrays[0].shape[0]
        self.paths = [None] * len(arrays)

    def _open_files(self, model, paths, what):
        g = model._graph
        if len(paths) != g.ninputs:
            raise InputError("the model has %d input%s: give %s one file per input, got %d" % (
                g.ninputs, "" if g.ninputs == 1 else "s", what, len(paths)), "INVALID")
        files = (ctypes.c_void_p * len(paths))()
        for i, p in enumerate(paths):
            f = ctypes.c_void_p()
            st = lib.qf_npy_open(_b(p), ctypes.byref(f))
            if st:
                raise _lib.error_for(st, "%s '%s': %s" % (what, os.fspath(p), _lib.message()))
            self._files.append(f)
            files[i] = f
            t = lib.qf_npy_info(f)
            st = lib.qf_data_check(g.inputs[i], t)
            if st:
                raise _lib.error_for(st, "%s '%s': %s" % (what, os.fspath(p), _lib.message()))
            _ok(lib.qf_npy_check_finite(what.encode(), _b(p), g.inputs[i], f))
            n0 = lib.qf_npy_info(self._files[0]).contents.dims[0]
            if t.contents.dims[0] != n0:
                raise InputError("%s '%s' holds %d samples, '%s' %d" % (
                    what, os.fspath(p), t.contents.dims[0], os.fspath(paths[0]), n0), "SHAPE")
        npy = ctypes.c_void_p()
        _ok(lib.qf_npy_source_init(ctypes.byref(npy), files, len(paths)))
        self._npy = npy
        self._src = lib.qf_npy_source_get(npy).contents
        self.samples = lib.qf_npy_info(self._files[0]).contents.dims[0]
        self.paths = [os.fspath(p) for p in paths]

    @property
    def source(self):
        return ctypes.byref(self._src)

    def close(self):
        if self._npy:
            lib.qf_npy_source_free(self._npy)
            self._npy = None
        for f in self._files:
            lib.qf_npy_close(f)
        self._files = []
