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
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import lib, check, take_text
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
_env = (_lib.EngineEnv * 3)()
for _k in range(lib.qf_engine_environment(_env)):
    os.environ.setdefault(_env[_k].name.decode(), _env[_k].value.decode())


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
    check(lib.qf_set_engine(_ENGINES[name]))


def get_engine() -> str:
    """"ref" or "dnnl": what new plans use."""
    return {1: "ref", 2: "dnnl"}.get(lib.qf_get_engine(), "auto")


def set_threads(n: int) -> None:
    """Threads the kernels use (0: the machine's cores). Before the first run."""
    check(lib.qf_set_threads(int(n)))


def get_threads() -> int:
    return lib.qf_get_threads()


def engine_about() -> str:
    """One phrase on the active kernels ("oneDNN 2.7.3", or why not)."""
    return _s(lib.qf_engine_about())


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

    def __init__(self, graph, name=None, report=None):
        self._g = graph
        self.name = name
        #: what made the model: the pass report (fuse) or the quantize report, as a dict
        self.report = report
        self._plan = None  # (key, graph, plan) of the last run

    # life cycle
    def _drop_plan(self):
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
        check(lib.qf_graph_clone(self._g, ctypes.byref(out)))
        return out

    def _reloaded(self):
        """A graph of its own as it would be read from the model's file: the
        model's bytes loaded again. A rewrite of it writes what the CLI writes
        for the file (a clone numbers the values anew, and the exporter writes
        initializers in value order). A model over 2 GiB, which has no bytes
        in memory, is cloned."""
        try:
            data = self.to_onnx_bytes()
        except InputError:
            return self._clone()
        g = _lib.GRAPH_P()
        check(lib.qf_onnx_load_buffer(data, len(data), _b(self.name) or b"the model", ctypes.byref(g)))
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
        check(lib.qf_onnx_save_buffer(self._g, ctypes.byref(data), ctypes.byref(size)))
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
        check(lib.qf_onnx_save_ex(self._g, _b(path), ctypes.byref(o)))

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
                    check(lib.qf_graph_input_use_default(g, i))
                elif a.dtype == np.int64:  # shape-like: a constant, so that shapes stay static
                    t = _lib.Tensor()
                    dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
                    check(lib.qf_tensor_init(ctypes.byref(t), 7, a.ndim, dims))
                    if a.nbytes:
                        ctypes.memmove(t.data, a.ctypes.data, a.nbytes)
                    check(lib.qf_graph_bind_input(g, i, ctypes.byref(t)))
                else:
                    dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
                    check(lib.qf_graph_set_input_shape(g, i, a.ndim, dims))
            if not simulate:  # a QDQ model runs its int8 groups in integers (as `qfold run`)
                check(lib.qf_quant_lower_int8(g, None, 1 if requant == "onnx" else 0, None))
            check(lib.qf_plan_init(ctypes.byref(plan), g))
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
        if requant not in ("tflite", "onnx"):
            raise InputError("requant is 'tflite' or 'onnx', got %r" % (requant,), "INVALID")
        self._graph  # noqa: B018
        feed = self._feed(arrays, named)
        _, g, plan = self._prepared(feed, simulate, requant)
        keep = [(a, _view(a)) for a in feed if a is not None and a.dtype != np.int64]
        ptrs = (ctypes.POINTER(_lib.Tensor) * max(1, len(keep)))(*[ctypes.pointer(t) for _, t in keep])
        check(lib.qf_plan_run(plan, ptrs, len(keep)))
        outs = []
        gg = g.contents
        for i in range(lib.qf_plan_num_outputs(plan)):
            y = _array_of(lib.qf_plan_output(plan, i).contents)
            if gg.outputs[i].contents.store & 0xFF == _STORE_F16 and y.dtype == np.float32:
                y = y.astype(np.float16)
            outs.append(y)
        return outs


def load(source: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> Model:
    """An ONNX model from a file (external data read from its directory) or
    from bytes in memory, as `qfold` reads it: initializers become constants,
    shapes are inferred, the graph verified. InputError for an unreadable,
    malformed or unsupported model (the message names the node)."""
    g = _lib.GRAPH_P()
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = bytes(source)
        check(lib.qf_onnx_load_buffer(buf, len(buf), b"the model", ctypes.byref(g)))
        return Model(g, None)
    check(lib.qf_onnx_load(_b(source), ctypes.byref(g)))
    return Model(g, os.fspath(source))


def _model(m) -> Model:
    if isinstance(m, Model):
        return m
    return load(m)


# --- fuse ---------------------------------------------------------------------

def _register():
    check(lib.qf_quant_register_passes())


def _report_json(report, extra=None):
    import json
    text, size = ctypes.c_void_p(), ctypes.c_size_t()
    check(lib.qf_pass_report_json(report, extra, ctypes.byref(text), ctypes.byref(size)))
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
        check(st)
        report = _report_json(rep)
        out = Model(g, src.name, report)
        g = None
        if verify:
            back = load(out.to_onnx_bytes())
            res = _lib.CompareResult()
            vo = _lib.VerifyOptions(tolerance=tolerance, ref_name=b"original", cand_name=b"fused",
                                    change=b"fusing")
            try:
                check(lib.qf_verify_graphs(orig, back._g, None, ctypes.byref(vo), ctypes.byref(res)))
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
            check(lib.qf_npy_check_finite(what.encode(), _b(p), g.inputs[i], f))
            n0 = lib.qf_npy_info(self._files[0]).contents.dims[0]
            if t.contents.dims[0] != n0:
                raise InputError("%s '%s' holds %d samples, '%s' %d" % (
                    what, os.fspath(p), t.contents.dims[0], os.fspath(paths[0]), n0), "SHAPE")
        npy = ctypes.c_void_p()
        check(lib.qf_npy_source_init(ctypes.byref(npy), files, len(paths)))
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


def quantize(model: Union[Model, str, bytes], calib, target: str = "neutron",
             set: Union[Dict[str, Any], Sequence[str], None] = None, batch: Optional[int] = None,
             count: Optional[int] = None, sqnr_samples: Optional[int] = None, progress=None) -> Tuple[Model, dict]:
    """Post-training int8 quantization, as `qfold quantize`: BatchNorm folded
    (pipeline ptq), the graph annotated with the target's int8 patterns
    (target "neutron" or "generic", rules overridden by `set`, e.g.
    {"equalize": "off"} or ["equalize=off"], the --set keys), calibrated on
    `calib`, converted to ONNX QDQ; per-layer SQNR against the float model.

    calib: an array [N, ...] (one input), a tuple of arrays (one per input),
    an iterable of batches of those (batches may differ in size; they are
    concatenated in memory), or the path (a tuple: one per input) of a .npy
    file, read a batch at a time as the CLI reads it. count: the first
    `count` samples only; batch: samples per calibration run (default 32);
    sqnr_samples: samples of the SQNR measurement (default 128, < 0: none);
    progress(pass, done, total): after each calibration batch.

    Returns (the quantized model, the report as a dict: what `qfold
    quantize --report` writes, with "output" null and the calibration
    "files" null for arrays). The given model is not changed."""
    src = _model(model)
    sets = _sets(set)
    arr = (ctypes.c_char_p * max(1, len(sets)))(*[s.encode() for s in sets])
    prof = ctypes.c_void_p()
    check(lib.qf_quant_profile_make(target.encode(), arr, len(sets), ctypes.byref(prof)))
    g = res = data = None
    try:
        name = _b(src.name) if src.name else b"the model"
        check(lib.qf_quantize_model_check(src._g, name))
        data = _Data(src, calib, "calibration data")
        g = src._reloaded()
        mo = _lib.QuantizeModelOptions()
        mo.quantize.profile = prof
        mo.quantize.batch = int(batch or 0)
        mo.quantize.max_samples = int(count or 0)
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
            cb = _lib.PROGRESS_FN(_progress)
            mo.quantize.progress = cb
        res = _lib.QuantizeModelResult()
        st = lib.qf_quantize_model(g, data.source, ctypes.byref(mo), ctypes.byref(res))
        if errors:
            raise errors[0]
        check(st)
        import json
        files = [_b(p) for p in data.paths]
        info = _lib.QuantizeReportInfo(input=_b(src.name), output=None, sets=arr, nsets=len(sets),
                                       files=(ctypes.c_char_p * max(1, len(files)))(*files), nfiles=len(files))
        text, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.qf_quantize_model_report_json(ctypes.byref(res), prof, ctypes.byref(info), ctypes.byref(text),
                                                ctypes.byref(size)))
        report = json.loads(take_text(text, size.value).decode("utf-8"))
        out = Model(g, src.name, report)
        g = None
        return out, report
    finally:
        if res is not None:
            lib.qf_quantize_model_result_free(ctypes.byref(res))
        if data is not None:
            data.close()
        if g:
            lib.qf_graph_free(g)
        lib.qf_free(prof)


# --- eval -----------------------------------------------------------------------

def eval(model: Union[Model, str, bytes], data, labels, batch: int = 64, simulate: bool = False) -> dict:
    """Top-1 / top-5 accuracy of a classifier, as `qfold eval`: the model's
    first output holds class scores [N, classes]; data as quantize's calib
    (arrays, batches or .npy paths), labels N class indices (an array or a
    .npy path). A quantized model runs its int8 groups in integers with
    TFLite's requantization (simulate=True: Q / DQ in float). Returns
    {"samples", "classes", "top1", "top5" (5 classes or more): fractions,
    "predictions": each sample's top-1 class}."""
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
            check(lib.qf_quant_lower_int8(g, None, 0, None))
        co = _lib.ClassifyOptions(batch=batch, model_name=_b(src.name), labels_name=_b(lab_name))
        check(lib.qf_classify(g, d.source, lab.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.byref(co),
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
            check(lib.qf_pipeline_run(g, b"neutron_qdq", ctypes.byref(_lib.PassOptions(verify=True)),
                                      ctypes.byref(rep)))
        o = _lib.TfliteOptions(float_io=float_io, batch=batch)
        check(lib.qf_tflite_export(g, ctypes.byref(o), ctypes.byref(r)))
        data = ctypes.string_at(r.data, r.size)
        if not report:
            return data
        import json
        text, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.qf_tflite_report_json(ctypes.byref(r), None, ctypes.byref(text), ctypes.byref(size)))
        return data, json.loads(take_text(text, size.value).decode("utf-8"))
    finally:
        lib.qf_tflite_result_free(ctypes.byref(r))
        lib.qf_pass_report_free(rep)
        lib.qf_graph_free(g)


# --- train --------------------------------------------------------------------------

_LOSSES = {"cross_entropy": 0, "mse": 1}


def train(model: Union[Model, str, bytes], data, labels, epochs: Optional[int] = None, batch: Optional[int] = None,
          optimizer: Optional[str] = None, lr: Optional[float] = None, momentum: Optional[float] = None,
          weight_decay: Optional[float] = None, nesterov: Optional[bool] = None, loss: str = "cross_entropy",
          seed: Optional[int] = None, shuffle: Optional[bool] = None, clip_norm: Optional[float] = None,
          freeze: Optional[Sequence[str]] = None, on_step=None) -> Tuple[Model, dict]:
    """Train a float model, as `qfold train` (PyTorch 1.13's arithmetic:
    torch.optim.SGD / Adam / AdamW): data as quantize's calib (arrays,
    batches or .npy paths), labels int64 class indices [N] (loss
    "cross_entropy") or float32 targets (loss "mse"). An option left None is
    the CLI's default (qf_train_defaults). optimizer "sgd" | "adam" |
    "adamw"; freeze: parameter names kept fixed.

    on_step(info) runs after every optimizer step with a dict (epoch, step,
    steps_per_epoch, total_steps, loss, accuracy, lr); returning False stops
    the training there (the result says "stopped": True). An exception in it
    (Ctrl-C's KeyboardInterrupt among them: training checks for it after
    every step) stops the training too and is raised again.

    Returns (the trained model, {"steps", "epochs", "final_loss",
    "parameters", "weights", "stopped"}); the given model is not changed.
    DivergedError when the loss or a gradient goes NaN / Inf."""
    src = _model(model)
    c = lib.qf_train_defaults()
    if epochs is not None:
        c.epochs = int(epochs)
    if batch is not None:
        c.batch = int(batch)
    if optimizer is not None:
        k = ctypes.c_int()
        check(lib.qf_optim_parse(optimizer.encode(), ctypes.byref(k)))
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
    frozen = (ctypes.c_char_p * (len(freeze or ()) + 1))(*[f.encode() for f in (freeze or ())], None)
    if freeze:
        c.freeze = frozen
    state = {"stopped": False, "error": None}

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

    cb = _lib.STEP_FN(_step)  # also without on_step: Ctrl-C is noticed after each step
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
        st = lib.qf_train(g, d.source, ctypes.byref(lt), None, None, ctypes.byref(c), ctypes.byref(r))
        if state["error"] is not None:
            raise state["error"]
        if not (st == 10 and state["stopped"]):
            check(st)
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


__all__ += ["train"]
