"""Training: train, qat (the CLI's recipe step by step), finalize."""
import ctypes
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._lib import lib
from ._lib import check as _ok
from .errors import InputError

from ._core import Model, _Call, _Data, _b, _model, _register, _report_json, _s, _view, load
from ._ptq import _cstrings, _excludes, _labels_array, _sets, eval


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
