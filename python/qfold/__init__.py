"""qfold from Python: BatchNorm folding, int8 quantization for NXP's Neutron
NPU, evaluation and TFLite export, over the C library (libqfold.so, loaded
through ctypes; numpy arrays in and out, no temporary files).

    import numpy as np, qfold
    m = qfold.load("model.onnx")                  # or qfold.load(onnx_bytes)
    fused = qfold.fuse(m, verify=True)            # BatchNorm folded (pipeline ptq)
    q, report = qfold.quantize(fused, calib=x)    # int8 QDQ for target neutron
    print(qfold.eval(q, x_test, y_test)["top1"])
    open("m.tflite", "wb").write(qfold.export_tflite(q))

Every function does what the qfold command of the same name does, through
the same library calls: the models, arrays and reports are the CLI's, byte
for byte. Failures raise qfold.Error subclasses (qfold.errors) carrying the
library's one-line message: InputError for bad input (the CLI's exit status
2), ProcessingError for a failure of the work (exit status 1).

The library is $QFOLD_LIBRARY, else the one installed with the package,
else the system's libqfold.so.0 (qfold._lib); its version must be
qfold.__version__. Calls release the GIL (ctypes).
"""
import ctypes
import json
import os
import signal
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import lib, take_text
from ._lib import check as _ok
from ._version import __version__
from .errors import (Error, InputError, ProcessingError, MismatchError, Interrupted, DivergedError,
                     LibraryError)

__all__ = ["Model", "TensorInfo", "load", "fuse", "quantize", "eval", "export_tflite", "set_engine", "get_engine",
           "set_threads", "get_threads", "engine_about", "library_path", "library_version", "Error", "InputError",
           "ProcessingError", "MismatchError", "Interrupted", "DivergedError", "LibraryError", "__version__"]

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
                if self.threads is not None:
                    set_threads(self.threads)
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


# --- quantize -----------------------------------------------------------------

def _sets(rules):
    if rules is None:
        return []
    if isinstance(rules, str):
        rules = [rules]
    if isinstance(rules, dict):
        return ["%s=%s" % (k, v) for k, v in rules.items()]
    return [str(r) for r in rules]


def _excludes(exclude):
    """The --exclude entries: a list of names / op types, each may hold
    several separated by commas (as the CLI's value)."""
    if exclude is None:
        return []
    if isinstance(exclude, str):
        exclude = [exclude]
    out = []
    for v in exclude:
        for e in str(v).split(","):
            if not e:
                raise InputError("exclude '%s': an empty node name or op type" % v, "INVALID")
            out.append(e)
    return out


def _cstrings(items):
    """A NULL-terminated char* array (and the list keeping it alive)."""
    enc = [i.encode() if isinstance(i, str) else i for i in items]
    return (ctypes.c_char_p * (len(enc) + 1))(*enc, None)


def _labels_array(labels, samples, what="labels"):
    name = None
    if isinstance(labels, (str, os.PathLike)):
        name = os.fspath(labels)
        labels = np.load(name)
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iub":
        raise InputError("%s: expected integer class indices, got %s" % (what, labels.dtype), "INVALID")
    if labels.ndim != 1 or labels.shape[0] != samples:
        raise InputError("%s%s: expected [%d], got %s" % (what, " '%s'" % name if name else "", samples,
                                                        list(labels.shape)), "SHAPE")
    return np.ascontiguousarray(labels, dtype=np.int64), name


def quantize(model: Union[Model, str, bytes], calib, target: str = "neutron",
             set: Union[Dict[str, Any], Sequence[str], None] = None, batch: Optional[int] = None,
             count: Optional[int] = None, sqnr_samples: Optional[int] = None,
             exclude: Union[str, Sequence[str], None] = None, seed: Optional[int] = None,
             eval_data=None, eval_labels=None, max_drop: Optional[float] = None, max_excluded: int = 3,
             progress=None, on_trial=None, threads: Optional[int] = None,
             engine: Optional[str] = None) -> Tuple[Model, dict]:
    """Post-training int8 quantization, as `qfold quantize`: BatchNorm folded
    (pipeline ptq), the graph annotated with the target's int8 patterns
    (target "neutron" or "generic"), calibrated on `calib`, converted to ONNX
    QDQ; per-layer SQNR against the float model.

    set: the target's rules overridden, the CLI's --set (a dict or a list
    of "KEY=VALUE"; `qfold help quantize` lists them), among them the
    recovery options:
        set={"bias-correction": "auto"}      # off | empirical | analytical | auto
        set={"weight-rounding": "adaround", "adaround-iters": 500}
        set={"equalize": "off"}              # auto (default) | off | per-tensor | all
    exclude: nodes kept in float, node names or ONNX op types of the model
    as given (["/head/Gemm"], ["Gemm"], "a,b"): listed in the report's
    left_float with the reason "excluded" and recorded in the model's
    metadata qfold.excluded (export_tflite refuses such a node).
    seed: weight-rounding=adaround's batch order (the same seed, the same
    model byte for byte).

    calib: an array [N, ...] (one input), a tuple of arrays (one per input),
    an iterable of batches of those (batches may differ in size; they are
    concatenated in memory), or the path (a tuple: one per input) of a .npy
    file, read a batch at a time as the CLI reads it. count: the first
    `count` samples only; batch: samples per calibration run (default 32);
    sqnr_samples: samples of the SQNR measurement (default 128, < 0: none);
    progress(pass, done, total): after each calibration batch.

    An accuracy target (--max-drop): with max_drop (top-1 points) and
    labelled eval_data / eval_labels (as eval's data and labels), the int8
    model's top-1 must be at most max_drop points below the float model's:
    quantized as asked, then, while the drop is larger, bias-correction=auto,
    weight-rounding=adaround (each unless set names it) and up to
    max_excluded layers kept in float are tried; on_trial(dict) after each
    trial (what, top1, drop, kept, skipped). The report gets
    "accuracy_target"; a target not reached raises MismatchError (its
    .report the best trial's report, .model its model).

    threads / engine: for this call only (as set_threads / set_engine).
    Ctrl-C stops the call with KeyboardInterrupt.

    Returns (the quantized model, the report as a dict: what `qfold
    quantize --report` writes, with "output" null and the calibration
    "files" null for arrays). The given model is not changed."""
    src = _model(model)
    sets = _sets(set)
    arr = (ctypes.c_char_p * max(1, len(sets)))(*[s.encode() for s in sets])
    entries = _excludes(exclude)
    ex = _cstrings(entries)
    target_mode = max_drop is not None
    if target_mode:
        if eval_data is None or eval_labels is None:
            raise InputError("max_drop needs labelled data: eval_data= and eval_labels=", "INVALID")
        if not (float(max_drop) >= 0 and np.isfinite(max_drop)):
            raise InputError("max_drop takes top-1 points >= 0 (e.g. 1 or 0.5), got %r" % (max_drop,), "INVALID")
        if not 0 <= int(max_excluded) <= 1000:
            raise InputError("max_excluded takes a number from 0 to 1000, got %r" % (max_excluded,), "INVALID")
    elif eval_data is not None or eval_labels is not None:
        raise InputError("eval_data / eval_labels go with max_drop", "INVALID")
    if seed is not None and not 0 <= int(seed) < 2 ** 63:
        raise InputError("seed takes a number from 0 to %d, got %r" % (2 ** 63 - 1, seed), "INVALID")
    prof = ctypes.c_void_p()
    _ok(lib.qf_quant_profile_make(target.encode(), arr, len(sets), ctypes.byref(prof)))
    g = res = data = edata = q = None
    tres = _lib.QuantTargetResult() if target_mode else None
    try:
        name = _b(src.name) if src.name else b"the model"
        _ok(lib.qf_quantize_model_check(src._g, name))
        if entries:  # before the data is read, as the CLI
            names, count_ = ctypes.c_void_p(), ctypes.c_int()
            _ok(lib.qf_quant_exclude_resolve(src._g, ex, len(entries), name, ctypes.byref(names), None,
                                               ctypes.byref(count_)))
            lib.qf_quant_exclude_free(names, None, count_.value)
        data = _Data(src, calib, "calibration data")
        if target_mode:
            edata = _Data(src, eval_data, "eval data")
            lab, _ = _labels_array(eval_labels, edata.samples, "eval labels")
        g = src._reloaded()
        mo = _lib.QuantizeModelOptions()
        mo.quantize.profile = prof
        mo.quantize.batch = int(batch or 0)
        mo.quantize.max_samples = int(count or 0)
        mo.quantize.exclude = ex if entries else None
        mo.quantize.nexclude = len(entries)
        mo.quantize.seed = int(seed or 0)
        mo.sqnr_samples = int(sqnr_samples or 0)
        mo.name = name
        errors = []
        if progress is not None:
            def _progress(ud, pass_, done, total):
                if errors:
                    return
                try:
                    progress(_s(pass_), done, total)
                except BaseException as e:  # raised again after the call
                    errors.append(e)
                    lib.qf_interrupt_request()
            cb = _lib.PROGRESS_FN(_progress)
            mo.quantize.progress = cb
        res = _lib.QuantizeModelResult()
        with _Call(threads, engine):
            if target_mode:
                to = _lib.QuantTargetOptions(model=mo, sets=arr, nsets=len(sets), eval=ctypes.pointer(edata._src),
                                             labels=lab.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                                             max_drop=float(max_drop), max_excluded=int(max_excluded))
                if on_trial is not None:
                    def _trial(ud, t, index):
                        if errors:
                            return
                        try:
                            t = ctypes.cast(t, ctypes.POINTER(_lib.QuantTargetTrial)).contents
                            on_trial(_trial_dict(t, index))
                        except BaseException as e:
                            errors.append(e)
                            lib.qf_interrupt_request()
                    tcb = _lib.TRIAL_FN(_trial)
                    to.trial = tcb
                q = _lib.GRAPH_P()
                st = lib.qf_quantize_to_target(g, data.source, ctypes.byref(to), ctypes.byref(q), ctypes.byref(res),
                                               ctypes.byref(tres))
                lib.qf_graph_free(g)
                g, q = q, None
            else:
                st = lib.qf_quantize_model(g, data.source, ctypes.byref(mo), ctypes.byref(res))
            if errors:
                lib.qf_interrupt_clear()
                raise errors[0]
            _ok(st)
        _ok(lib.qf_onnx_record_excluded(g, ctypes.cast(res.quant.left_float, ctypes.c_void_p),
                                          res.quant.nleft_float))
        files = [_b(p) for p in data.paths]
        info = _lib.QuantizeReportInfo(input=_b(src.name), output=None, sets=arr, nsets=len(sets),
                                       files=(ctypes.c_char_p * max(1, len(files)))(*files), nfiles=len(files))
        rprof = prof
        if target_mode and tres.ntrials:
            info.target = ctypes.cast(ctypes.pointer(tres), ctypes.c_void_p)
            rprof = ctypes.cast(ctypes.pointer(tres.profile), ctypes.c_void_p)
        text, size = ctypes.c_void_p(), ctypes.c_size_t()
        _ok(lib.qf_quantize_model_report_json(ctypes.byref(res), rprof, ctypes.byref(info), ctypes.byref(text),
                                                ctypes.byref(size)))
        report = json.loads(take_text(text, size.value).decode("utf-8"))
        out = Model(g, src.name, report)
        g = None
        if target_mode and not tres.met:
            b = tres.trials[tres.best]
            err = MismatchError(
                "quantize: top-1 drop <= %g points not reached: best int8 top-1 %.2f %% (trial %d, %s), drop %.2f "
                "points from float %.2f %% on %d samples" % (max_drop, b.top1, tres.best, _s(b.what), b.drop,
                                                              tres.float_top1, tres.samples), "MISMATCH")
            err.report, err.model = report, out
            raise err
        return out, report
    finally:
        if res is not None:
            lib.qf_quantize_model_result_free(ctypes.byref(res))
        if tres is not None:
            lib.qf_quant_target_result_free(ctypes.byref(tres))
        if data is not None:
            data.close()
        if edata is not None:
            edata.close()
        if g:
            lib.qf_graph_free(g)
        lib.qf_free(prof)


def _trial_dict(t, index):
    nan = float("nan")
    return {"index": index, "what": _s(t.what), "skipped": _s(t.skipped),
            "top1": None if t.skipped else t.top1, "drop": None if t.skipped else t.drop, "kept": bool(t.kept)}


# --- eval -----------------------------------------------------------------------

def eval(model: Union[Model, str, bytes], data, labels, batch: int = 64, simulate: bool = False,
         threads: Optional[int] = None, engine: Optional[str] = None) -> dict:
    """Top-1 / top-5 accuracy of a classifier, as `qfold eval`: the model's
    first output holds class scores [N, classes]; data as quantize's calib
    (arrays, batches or .npy paths), labels N class indices (an array or a
    .npy path). A quantized model runs its int8 groups in integers with
    TFLite's requantization (simulate=True: Q / DQ in float). Returns
    {"samples", "classes", "top1", "top5" (5 classes or more): fractions,
    "predictions": each sample's top-1 class}. threads / engine: for this
    call only; Ctrl-C stops it with KeyboardInterrupt."""
    src = _model(model)
    lab_name = None
    if isinstance(labels, (str, os.PathLike)):
        lab_name = os.fspath(labels)
        labels = np.load(lab_name)
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iub":
        raise InputError("labels: expected integer class indices, got %s" % labels.dtype, "INVALID")
    d = _Data(src, data, "data")
    g = None
    r = _lib.ClassifyResult()
    try:
        if labels.ndim != 1 or labels.shape[0] != d.samples:
            raise InputError("labels%s: expected [%d], got %s" % (
                " '%s'" % lab_name if lab_name else "", d.samples, list(labels.shape)), "SHAPE")
        lab = np.ascontiguousarray(labels, dtype=np.int64)
        g = src._clone()
        if not simulate:
            _ok(lib.qf_quant_lower_int8(g, None, 0, None))
        co = _lib.ClassifyOptions(batch=batch, model_name=_b(src.name), labels_name=_b(lab_name))
        with _Call(threads, engine):
            _ok(lib.qf_classify(g, d.source, lab.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.byref(co),
                                  ctypes.byref(r)))
        out = {"samples": r.n, "classes": r.classes, "top1": r.top1 / r.n if r.n else 0.0}
        if r.classes >= 5:
            out["top5"] = r.top5 / r.n if r.n else 0.0
        out["predictions"] = np.ctypeslib.as_array(r.pred, (r.n,)).copy() if r.n else np.empty(0, np.int32)
        return out
    finally:
        lib.qf_classify_result_free(ctypes.byref(r))
        d.close()
        if g:
            lib.qf_graph_free(g)


# --- export ---------------------------------------------------------------------

def export_tflite(model: Union[Model, str, bytes], float_io: bool = False, batch: int = 0,
                  target: Optional[str] = None, report: bool = False):
    """The int8 TFLite flatbuffer of a quantized (QDQ) model, as `qfold
    export`: bytes, or (bytes, the deployment report as a dict) with
    report=True. float_io: float32 inputs and outputs (QUANTIZE / DEQUANTIZE
    at the boundaries); batch: every input's first dim (0: the model's);
    target="neutron": the Neutron-ready QDQ passes first (pipeline
    neutron_qdq). InputError (naming the node) for what TFLite cannot
    express."""
    src = _model(model)
    g = src._clone()
    r = _lib.TfliteResult()
    rep = ctypes.c_void_p()
    try:
        if target is not None:
            if target != "neutron":
                raise InputError("unknown target '%s' (targets: neutron)" % target, "INVALID")
            _register()
            _ok(lib.qf_pipeline_run(g, b"neutron_qdq", ctypes.byref(_lib.PassOptions(verify=True)),
                                      ctypes.byref(rep)))
        o = _lib.TfliteOptions(float_io=float_io, batch=batch)
        _ok(lib.qf_tflite_export(g, ctypes.byref(o), ctypes.byref(r)))
        data = ctypes.string_at(r.data, r.size)
        if not report:
            return data
        import json
        text, size = ctypes.c_void_p(), ctypes.c_size_t()
        _ok(lib.qf_tflite_report_json(ctypes.byref(r), None, ctypes.byref(text), ctypes.byref(size)))
        return data, json.loads(take_text(text, size.value).decode("utf-8"))
    finally:
        lib.qf_tflite_result_free(ctypes.byref(r))
        lib.qf_pass_report_free(rep)
        lib.qf_graph_free(g)


# --- train --------------------------------------------------------------------------

_LOSSES = {"cross_entropy": 0, "mse": 1}


def train(model: Union[Model, str, bytes], data, labels=None, epochs: Optional[int] = None, batch: Optional[int] = None,
          optimizer: Optional[str] = None, lr: Optional[float] = None, momentum: Optional[float] = None,
          weight_decay: Optional[float] = None, nesterov: Optional[bool] = None, loss: str = "cross_entropy",
          seed: Optional[int] = None, shuffle: Optional[bool] = None, clip_norm: Optional[float] = None,
          freeze: Optional[Sequence[str]] = None, on_step=None, schedule: Optional[str] = None,
          step_size: Optional[int] = None, gamma: Optional[float] = None, warmup: Optional[int] = None,
          threads: Optional[int] = None, engine: Optional[str] = None) -> Tuple[Model, dict]:
    """Train a float model, as `qfold train` (PyTorch 1.13's arithmetic:
    torch.optim.SGD / Adam / AdamW): data as quantize's calib (arrays,
    batches or .npy paths), labels int64 class indices [N] (loss
    "cross_entropy") or float32 targets (loss "mse"); or labels None and
    data an iterable of (x, y) batches (of any sizes, concatenated). An
    option left None is the CLI's default (qf_train_defaults). optimizer
    "sgd" | "adam" | "adamw"; freeze: parameter names kept fixed; schedule
    "constant" | "step" (x gamma every step_size steps) | "cosine", after
    warmup steps of a linear ramp (--schedule, --step-size, --gamma,
    --warmup).

    on_step(info) runs after every optimizer step with a dict (epoch, step,
    steps_per_epoch, total_steps, loss, accuracy, lr); returning False stops
    the training there (the result says "stopped": True). An exception in it
    (Ctrl-C's KeyboardInterrupt among them: training checks for it after
    every step) stops the training too and is raised again.

    Returns (the trained model, {"steps", "epochs", "final_loss",
    "parameters", "weights", "stopped"}); the given model is not changed.
    DivergedError when the loss or a gradient goes NaN / Inf. threads /
    engine: for this call only."""
    src = _model(model)
    data, labels = _labelled(data, labels, "training data")
    c = _train_config(lib.qf_train_defaults(), epochs, batch, optimizer, lr, momentum, weight_decay, nesterov, loss,
                      seed, shuffle, clip_norm, schedule, step_size, gamma, warmup)
    frozen = (ctypes.c_char_p * (len(freeze or ()) + 1))(*[f.encode() for f in (freeze or ())], None)
    if freeze:
        c.freeze = frozen
    state = {"stopped": False, "error": None}
    cb = _step_callback(on_step, state)  # also without on_step: Ctrl-C is noticed after each step
    c.on_step = cb
    d = _Data(src, data, "training data")
    g = None
    try:
        lab = np.ascontiguousarray(labels, dtype=np.int64 if loss == "cross_entropy" else np.float32)
        if lab.ndim < 1 or lab.shape[0] != d.samples:
            raise InputError("labels: expected %d, got %s" % (d.samples, list(lab.shape)), "SHAPE")
        lt = _view(lab)
        g = src._reloaded()
        r = _lib.TrainResult()
        with _Call(threads, engine):
            st = lib.qf_train(g, d.source, ctypes.byref(lt), None, None, ctypes.byref(c), ctypes.byref(r))
            if state["error"] is not None:
                raise state["error"]
            if not (st == 10 and state["stopped"]):
                _ok(st)
        out = Model(g, src.name)
        g = None
        result = {"steps": r.steps, "epochs": r.epochs_done, "final_loss": r.final_loss, "parameters": r.nparams,
                  "weights": r.nweights, "stopped": state["stopped"]}
        out.report = result
        return out, result
    finally:
        d.close()
        if g:
            lib.qf_graph_free(g)


def _train_config(c, epochs, batch, optimizer, lr, momentum, weight_decay, nesterov, loss, seed, shuffle,
                  clip_norm, schedule=None, step_size=None, gamma=None, warmup=None):
    """qf_train_config c with the options given (None: c's), checked as the
    CLI checks them."""
    if schedule is not None:
        k = ctypes.c_int()
        if lib.qf_sched_parse(str(schedule).encode(), ctypes.byref(k)):
            raise InputError("schedule takes constant, step or cosine, got %r" % (schedule,), "INVALID")
        c.sched.kind = k.value
    if step_size is not None:
        if int(step_size) < 1:
            raise InputError("step_size takes a number of steps >= 1, got %r" % (step_size,), "INVALID")
        c.sched.step_size = int(step_size)
    if gamma is not None:
        if not float(gamma) > 0:
            raise InputError("gamma takes a factor > 0, got %r" % (gamma,), "INVALID")
        c.sched.gamma = float(gamma)
    if warmup is not None:
        if int(warmup) < 0:
            raise InputError("warmup takes a number of steps >= 0, got %r" % (warmup,), "INVALID")
        c.sched.warmup = int(warmup)
    if c.sched.kind == 1 and c.sched.step_size <= 0:
        raise InputError("schedule step needs step_size (steps between rate changes)", "INVALID")

    if epochs is not None:
        c.epochs = int(epochs)
    if batch is not None:
        c.batch = int(batch)
    if optimizer is not None:
        k = ctypes.c_int()
        _ok(lib.qf_optim_parse(optimizer.encode(), ctypes.byref(k)))
        c.optim.kind = k.value
    for name, v in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay), ("clip_norm", clip_norm)):
        if v is not None:
            setattr(c.optim if name != "clip_norm" else c, name, float(v))
    if nesterov is not None:
        c.optim.nesterov = bool(nesterov)
    if loss not in _LOSSES:
        raise InputError("unknown loss '%s' (losses: cross_entropy, mse)" % loss, "INVALID")
    c.loss = _LOSSES[loss]
    if seed is not None:
        c.seed = int(seed)
    if shuffle is not None:
        c.shuffle = bool(shuffle)
    return c


def _step_callback(on_step, state):
    def _step(ud, info):
        try:
            i = info.contents
            if on_step is not None and on_step({"epoch": i.epoch, "step": i.step,
                                                "steps_per_epoch": i.steps_per_epoch,
                                                "total_steps": i.total_steps, "loss": i.loss,
                                                "accuracy": i.accuracy, "lr": i.lr}) is False:
                state["stopped"] = True
                return 10  # QF_ERR_INTERRUPTED
            return 0
        except BaseException as e:  # KeyboardInterrupt too: stop here, raise it after the call
            state["error"] = e
            return 10

    return _lib.STEP_FN(_step)


__all__ += ["train"]


# --- check ----------------------------------------------------------------------------

def check(model: Union[Model, str, bytes], target: str = "neutron",
          set: Union[Dict[str, Any], Sequence[str], None] = None) -> dict:
    """What of a model runs on the target's NPU and what on the CPU, with
    the rule that failed and a fix, as `qfold check --json` writes it:
    {"target", "from_float", "nodes": [{"name", "op", "placement", "rule",
    "fix", "note", "partition", "macs", ...}], "partitions", "summary":
    {"npu_nodes", "cpu_nodes", "npu_mac_fraction", "transitions", ...}}.
    A float model is checked as quantize(target=...) would quantize it, a
    QDQ model as it is. set: the target's parameters, e.g.
    {"neutron-flow": "sdk2", "num-macs": 16}."""
    src = _model(model)
    src._graph  # noqa: B018 (closed check)
    t = _lib.TargetSpec()
    _ok(lib.qf_target_spec_init(ctypes.byref(t), target.encode()))
    for rule in _sets(set):
        _ok(lib.qf_target_spec_set(ctypes.byref(t), rule.encode()))
    r = _lib.CheckResult()
    try:
        with _Call():
            _ok(lib.qf_target_check(src._g, ctypes.byref(t), ctypes.byref(r)))
        text, size = ctypes.c_void_p(), ctypes.c_size_t()
        _ok(lib.qf_check_report_json(ctypes.byref(r), ctypes.byref(text), ctypes.byref(size)))
        return json.loads(take_text(text, size.value).decode("utf-8"))
    finally:
        lib.qf_check_result_free(ctypes.byref(r))


# --- finalize -------------------------------------------------------------------------

def finalize(model: Union[Model, str, bytes], target: str = "neutron") -> Model:
    """A QAT model exported from PyTorch (Q/DQ pairs on the weights, the
    simulated Conv + BatchNorm chains) -> the folded int8 QDQ model, as
    `qfold finalize`: the weights' trained range from metadata
    "qfold.weight_range" when the model has it (`qat(keep_qat=True)` /
    `qfold qat --keep-qat`), target "neutron" (the Neutron-ready passes) or
    "generic". Returns a new model whose .report is the pass report with
    the counts of `qfold finalize --report`: "folded" (BatchNorms),
    "biases" (written as int32), "float_biases", "activations" (uint8
    pairs made int8), "shared" (outputs given their input's qparams)."""
    src = _model(model)
    prof = lib.qf_quant_profile_find(target.encode())
    if not prof:
        raise InputError("unknown target '%s' (targets: neutron, generic)" % target, "INVALID")
    p = ctypes.cast(prof, ctypes.POINTER(_lib.QuantProfile)).contents
    if not src.quantized:
        raise InputError("'%s' has no QuantizeLinear / DequantizeLinear: not a QAT model (a float model goes through "
                         "`qfold quantize` or `qfold qat`)" % (src.name or "the model"), "INVALID")
    fs = _lib.FinalizeSession()
    g = src._reloaded()
    rep = ctypes.c_void_p()
    try:
        buf = ctypes.create_string_buffer(64)
        found = ctypes.c_bool()
        st = lib.qf_onnx_metadata(g, b"qfold.weight_range", buf, 64, ctypes.byref(found))
        if st:
            raise _lib.error_for(st, "%s: %s" % (src.name or "the model", _lib.message()))
        if found.value:
            v = buf.value.decode()
            try:
                lo, hi = (int(x) for x in v.split(","))
                ok = -128 <= lo <= 0 < hi <= 127
            except ValueError:
                ok = False
            if not ok:
                raise InputError("%s: metadata_props 'qfold.weight_range' is '%s': expected \"QMIN,QMAX\" within "
                                 "int8's [-128, 127], QMIN <= 0 < QMAX" % (src.name or "the model", v), "INVALID")
            fs.weight_range, fs.weight_qmin, fs.weight_qmax = True, lo, hi
        _register()
        opt = _lib.PassOptions(verify=True, user=ctypes.cast(ctypes.pointer(fs), ctypes.c_void_p))
        with _Call():
            _ok(lib.qf_pipeline_run(g, b"finalize_neutron" if p.neutron_passes else b"finalize", ctypes.byref(opt),
                                      ctypes.byref(rep)))
            _ok(lib.qf_graph_verify_shapes(g))
        report = _report_json(rep)
        report.update(folded=fs.folded, biases=fs.biases, float_biases=fs.float_biases,
                      activations=fs.activations, shared=fs.shared)
        out = Model(g, src.name, report)
        g = None
        return out
    finally:
        lib.qf_pass_report_free(rep)
        lib.qf_quant_finalize_session_free(ctypes.byref(fs))
        if g:
            lib.qf_graph_free(g)


# --- qat ------------------------------------------------------------------------------

def _when(v, what):
    """A QAT schedule switch: None / "never", an int (optimizer steps), "500", "2ep"."""
    w = _lib.QatWhen()
    if v is None:
        return w
    st = lib.qf_qat_when_parse(str(v).encode(), ctypes.byref(w))
    if st:
        raise InputError("%s takes optimizer steps (500), epochs (2ep) or never, got %r" % (what, v), "INVALID")
    return w


def _labelled(data, labels, what):
    """(data, labels): labels given, or data an iterable of (x, y) batches
    (x an array or a tuple of arrays, one per input), concatenated."""
    if labels is not None:
        return data, labels
    xs, ys = [], []
    for b in data:
        if not isinstance(b, tuple) or len(b) != 2:
            raise InputError("%s without labels: expected batches (x, y), got %s" % (what, type(b).__name__),
                             "INVALID")
        xs.append(b[0])
        ys.append(np.asarray(b[1]))
    if not xs:
        raise InputError("%s: no batches" % what, "INVALID")
    return xs, np.concatenate(ys, axis=0)


_EQ_NAMES = {0: "off", 1: "per-tensor", 2: "all"}


def qat(model: Union[Model, str, bytes], data, labels=None, target: str = "neutron",
        set: Union[Dict[str, Any], Sequence[str], None] = None, exclude: Union[str, Sequence[str], None] = None,
        epochs: Optional[int] = None, batch: Optional[int] = None, optimizer: Optional[str] = None,
        lr: Optional[float] = None, momentum: Optional[float] = None, weight_decay: Optional[float] = None,
        nesterov: Optional[bool] = None, seed: Optional[int] = None, shuffle: Optional[bool] = None,
        clip_norm: Optional[float] = None, calib_count: Optional[int] = None, freeze_bn=None,
        freeze_observers=None, qat_bn: str = "approx", bn_reestimate: Optional[int] = None,
        schedule: Optional[str] = None, step_size: Optional[int] = None, gamma: Optional[float] = None,
        warmup: Optional[int] = None,
        val_data=None, val_labels=None, keep_qat: bool = False, on_step=None,
        threads: Optional[int] = None, engine: Optional[str] = None) -> Tuple[Model, dict]:
    """Quantization-aware training of a float classifier with BatchNorm, as
    `qfold qat`: fake_quants for the target (set: its rules, as quantize's;
    not bias-correction nor weight-rounding=adaround), every BatchNorm
    simulated as folded into its conv / linear (qat_bn "approx": PyTorch's
    ConvBn2d; "exact"), the observers calibrated on the first calib_count
    samples (default 256), training with train's options, then the int8
    QDQ model with BatchNorm folded through the weight fake-quants.

    data / labels: as train's (arrays, a tuple of arrays per input, .npy
    paths); or labels None and data an iterable of (x, y) batches (sizes may
    differ; concatenated in memory). exclude: nodes kept in float (as
    quantize's). freeze_bn / freeze_observers: when BatchNorm switches to
    its running statistics / the observers stop: an int (optimizer steps),
    "2ep" (epochs), "never" (default). bn_reestimate=N: after training,
    every BatchNorm's statistics re-estimated on the first N samples (AIMET's
    reestimate_bn_stats). val_data / val_labels: the result gets the float
    model's top-1 before ("float_top1") and the int8 model's after
    ("int8_top1"), as eval computes them.

    on_step(info) after every optimizer step (as train's): returning False
    stops training, and the model trained so far is finalized ("stopped":
    True). Ctrl-C raises KeyboardInterrupt. keep_qat=True: the result's
    "qat_model" is the training graph in PyTorch's exported QAT form (what
    --keep-qat writes; qfold.finalize makes the int8 model of it).

    Returns (the int8 QDQ model, {"steps", "epochs", "final_loss",
    "fake_quants", "calibrated", "bn_reestimated", "excluded", "equalize",
    "stopped", ...}); the given model is not changed."""
    src = _model(model)
    data, labels = _labelled(data, labels, "training data")
    if val_data is not None and val_labels is None:
        val_data, val_labels = _labelled(val_data, None, "validation data")
    sets = _sets(set)
    arr = (ctypes.c_char_p * max(1, len(sets)))(*[s.encode() for s in sets])
    if qat_bn not in ("approx", "exact"):
        raise InputError("qat_bn takes approx or exact, got %r" % (qat_bn,), "INVALID")
    if calib_count is not None and int(calib_count) < 0:
        raise InputError("calib_count takes a number of samples >= 0, got %r" % (calib_count,), "INVALID")
    if bn_reestimate is not None and int(bn_reestimate) < 1:
        raise InputError("bn_reestimate takes a number of samples >= 1, got %r" % (bn_reestimate,), "INVALID")
    q = lib.qf_qat_defaults()
    _train_config(q.train, epochs, batch, optimizer, lr, momentum, weight_decay, nesterov, "cross_entropy", seed,
                  shuffle, clip_norm, schedule, step_size, gamma, warmup)
    q.freeze_bn = _when(freeze_bn, "freeze_bn")
    q.freeze_observers = _when(freeze_observers, "freeze_observers")
    if calib_count is not None:
        q.calib_count = int(calib_count)
    profp = ctypes.c_void_p()
    _ok(lib.qf_quant_profile_make(target.encode(), arr, len(sets), ctypes.byref(profp)))
    prof = ctypes.cast(profp, ctypes.POINTER(_lib.QuantProfile)).contents
    entries = _excludes(exclude)
    ex = _cstrings(entries)
    sess = _lib.QuantSession()
    eq = _lib.QuantizeResult()
    names, nnames = ctypes.c_void_p(), ctypes.c_int()
    prep_rep, fin_rep = ctypes.c_void_p(), ctypes.c_void_p()
    d = vd = g = None
    try:
        if prof.bias_correction != 0:
            raise InputError("set bias-correction: qat does not apply bias correction (its training adapts the "
                             "biases to the quantization); use it with quantize", "INVALID")
        if prof.weight_rounding != 0:
            raise InputError("set weight-rounding=adaround is for quantize: QAT learns its weights' rounding by "
                             "training", "INVALID")
        _register()
        exact = qat_bn == "exact"
        prepare = b"qat_prepare_exact" if exact else b"qat_prepare"
        finalize_p = q.finalize
        if prof.neutron_passes:
            prepare = b"qat_prepare_exact_neutron" if exact else b"qat_prepare_neutron"
            finalize_p = b"qat_finalize_neutron"
        for pl in (prepare, finalize_p):
            if not lib.qf_pipeline_find(pl):
                raise InputError("qat needs the pipeline '%s', which this build of qfold does not have" % _s(pl),
                                 "UNSUPPORTED")
        q.prepare, q.finalize = prepare, finalize_p
        sess.profile = profp
        q.passes.user = ctypes.cast(ctypes.pointer(sess), ctypes.c_void_p)
        state = {"stopped": False, "error": None}
        cb = _step_callback(on_step, state)
        q.train.on_step = cb
        d = _Data(src, data, "training data")
        lab, _ = _labels_array(labels, d.samples, "labels")
        lt = _view(lab)
        vlt = None
        result = {}
        if val_data is not None:
            result["float_top1"] = eval(src, val_data, val_labels, batch=int(q.train.batch))["top1"]
            vd = _Data(src, val_data, "validation data")
            vlab, _ = _labels_array(val_labels, vd.samples, "validation labels")
            vlt = _view(vlab)
        g = src._reloaded()
        name = _b(src.name) or b"the model"
        with _Call(threads, engine):
            _ok(lib.qf_quant_exclude_resolve(g, ex, len(entries), name, ctypes.byref(names), None,
                                               ctypes.byref(nnames)))
            sess.exclude = ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p))
            sess.nexclude = nnames.value
            e = ctypes.c_int(prof.equalize)
            st = lib.qf_quant_equalize_choose(g, d.source, q.calib_count if q.calib_count > 0 else 256, profp,
                                              ctypes.byref(e), ctypes.byref(eq))
            if st == 7:  # QF_ERR_NOMEM
                _ok(st)
            prof.equalize = e.value if st == 0 else 0  # a model PTQ cannot take: no equalization
            _ok(lib.qf_qat_prepare(g, ctypes.byref(q), ctypes.byref(prep_rep)))
            nfq = sum(1 for _ in _nodes_of(g, "fake_quant"))
            calibrated = ctypes.c_int64()
            _ok(lib.qf_qat_calibrate(g, d.source, ctypes.byref(lt), ctypes.byref(q), ctypes.byref(calibrated)))
            r = _lib.TrainResult()
            st = lib.qf_qat_train(g, d.source, ctypes.byref(lt), vd.source if vd else None,
                                  ctypes.byref(vlt) if vlt is not None else None, ctypes.byref(q), ctypes.byref(r))
            if state["error"] is not None:
                raise state["error"]
            if not (st == 10 and state["stopped"]):
                _ok(st)
            bns, reest = ctypes.c_int(), ctypes.c_int64()
            if bn_reestimate:
                _ok(lib.qf_qat_bn_reestimate(g, d.source, ctypes.byref(lt), ctypes.byref(q), int(bn_reestimate),
                                               ctypes.byref(bns), ctypes.byref(reest)))
            if keep_qat:
                result["qat_model"] = _qat_export(g, prof)
            _ok(lib.qf_qat_finalize(g, ctypes.byref(q), ctypes.byref(fin_rep)))
        # the excluded nodes the int8 model still has (a BatchNormalization folds away)
        excluded = [_s(ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p))[i]) for i in range(nnames.value)]
        left = [n for n in excluded if lib.qf_graph_find_node(g, n.encode())]
        nodes = (_lib.QuantFloatNode * max(1, len(left)))(
            *[_lib.QuantFloatNode(n.encode(), None, b"excluded") for n in left])
        _ok(lib.qf_onnx_record_excluded(g, ctypes.cast(nodes, ctypes.c_void_p), len(left)))
        out = Model(g, src.name)
        g = None
        result.update({"steps": r.steps, "epochs": r.epochs_done, "final_loss": r.final_loss,
                       "fake_quants": nfq, "calibrated": calibrated.value, "stopped": state["stopped"],
                       "bn_reestimated": {"batchnorms": bns.value, "samples": reest.value} if bn_reestimate else None,
                       "excluded": excluded, "equalize": _EQ_NAMES.get(prof.equalize, str(prof.equalize)),
                       "prepare": _report_json(prep_rep), "finalize": _report_json(fin_rep)})
        if val_data is not None:
            result["int8_top1"] = eval(out, val_data, val_labels, batch=int(q.train.batch))["top1"]
        out.report = result
        return out, result
    finally:
        lib.qf_quant_exclude_free(names, None, nnames.value)
        lib.qf_quant_annotation_free(sess.annotation)
        lib.qf_quantize_result_free(ctypes.byref(eq))
        lib.qf_pass_report_free(prep_rep)
        lib.qf_pass_report_free(fin_rep)
        lib.qf_free(profp)
        for x in (d, vd):
            if x is not None:
                x.close()
        if g:
            lib.qf_graph_free(g)


def _nodes_of(g, opname):
    op = lib.qf_op_from_name(opname.encode())
    n = g.contents.first
    while n:
        if n.contents.op == op:
            yield n
        n = n.contents.next


def _qat_export(g, prof):
    """The training graph in PyTorch's exported QAT form (the pass
    qat_export on a copy), the weights' trained range in metadata
    "qfold.weight_range", as `qfold qat --keep-qat` writes it."""
    copy = _lib.GRAPH_P()
    _ok(lib.qf_graph_clone(g, ctypes.byref(copy)))
    rep = ctypes.c_void_p()
    try:
        _ok(lib.qf_graph_toposort(copy))
        _ok(lib.qf_graph_infer_shapes(copy))
        _ok(lib.qf_passes_run(copy, _cstrings(["qat_export"]), ctypes.byref(_lib.PassOptions(verify=True)),
                              ctypes.byref(rep)))
        cw, lw = prof.conv_weight, prof.linear_weight
        if cw.qmin == lw.qmin and cw.qmax == lw.qmax:
            _ok(lib.qf_onnx_metadata_set(copy, b"qfold.weight_range", b"%d,%d" % (cw.qmin, cw.qmax)))
        out = Model(copy, None)
        copy = None
        return load(out.to_onnx_bytes())
    finally:
        lib.qf_pass_report_free(rep)
        if copy:
            lib.qf_graph_free(copy)


__all__ += ["check", "finalize", "qat"]
