"""Post-training: fuse, quantize (with the accuracy target), eval, export_tflite, check."""
import ctypes
import json
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import lib, take_text
from ._lib import check as _ok
from .errors import InputError, MismatchError

from ._core import Model, _Call, _Data, _b, _model, _register, _s


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
