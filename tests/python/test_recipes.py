"""The package's qat / finalize / check and quantize's --exclude, --seed,
recovery and accuracy-target options against build/qfold on the same inputs
(bit-identical models, equal reports), Ctrl-C in a long call, threads and
engine per call."""
import json
import os
import signal
import threading

import numpy as np
import pytest

import qfold


def save(work, name, a):
    p = os.path.join(work, name)
    np.save(p, a)
    return p


def read(p):
    with open(p, "rb") as f:
        return f.read()


VOLATILE = {"seconds", "calibrate_ms", "convert_ms", "equalize_ms", "passes_ms", "sqnr_ms", "bc_ms", "adaround_ms",
            "ms"}


def stable(x):
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [stable(v) for v in x]
    return x


@pytest.fixture(scope="module")
def files(work, calib, test_set):
    x, y = test_set
    return {"calib": save(work, "r_calib.npy", calib), "x": save(work, "r_x.npy", x), "y": save(work, "r_y.npy", y),
            "tx": save(work, "r_tx.npy", calib[:40]), "ty": save(work, "r_ty.npy", y)}


def cli_quantize(cli, work, name, model, files, *args):
    out, rep = os.path.join(work, name + ".onnx"), os.path.join(work, name + ".json")
    cli("quantize", model, "-o", out, "--calib", files["calib"], "--report", rep, *args)
    return read(out), json.loads(read(rep))


def same_report(rep, cli_rep, model):
    want = stable(cli_rep)
    want["input"], want["output"], want["calibration"]["files"] = model, None, [None]
    assert stable(rep) == want


# --- quantize: exclude, seed, recovery, accuracy target ---------------------------------

def test_quantize_exclude_against_cli(fashion, calib, work, cli, files):
    data, rep = cli_quantize(cli, work, "r_ex", fashion, files, "--exclude", "/head/head.3/Gemm,Relu",
                             "--set", "equalize=off")
    m, r = qfold.quantize(fashion, calib, exclude=["/head/head.3/Gemm", "Relu"], set={"equalize": "off"})
    assert m.to_onnx_bytes() == data  # the metadata qfold.excluded included
    same_report(r, rep, fashion)
    assert any(x["reason"] == "excluded" for x in r["left_float"])
    m2, _ = qfold.quantize(fashion, calib, exclude="/head/head.3/Gemm,Relu", set={"equalize": "off"})
    assert m2.to_onnx_bytes() == data
    with pytest.raises(qfold.Error) as e:  # a float island: the export refuses it, naming the reason
        qfold.export_tflite(m)
    p = cli("export", os.path.join(work, "r_ex.onnx"), "-o", os.path.join(work, "r_ex.tflite"), ok=False)
    assert p.returncode == e.value.exit_status and str(e.value) in p.stderr
    with pytest.raises(qfold.InputError, match="'Nope' is neither") as e:
        qfold.quantize(fashion, calib, exclude=["Nope"])
    p = cli("quantize", fashion, "-o", os.path.join(work, "x.onnx"), "--calib", files["calib"], "--exclude", "Nope",
            ok=False)
    assert p.returncode == 2 and str(e.value) in p.stderr
    with pytest.raises(qfold.InputError, match="empty"):
        qfold.quantize(fashion, calib, exclude=["a,,b"])


def test_quantize_recovery_against_cli(fashion, calib, work, cli, files):
    sets = {"bias-correction": "empirical", "weight-rounding": "adaround", "adaround-iters": "20",
            "equalize": "off"}
    data, rep = cli_quantize(cli, work, "r_rec", fashion, files, "--seed", "5",
                             *sum([["--set", "%s=%s" % kv] for kv in sets.items()], []))
    m, r = qfold.quantize(fashion, calib, set=sets, seed=5)
    assert m.to_onnx_bytes() == data
    same_report(r, rep, fashion)
    _, r6 = qfold.quantize(fashion, calib, set=sets, seed=6)
    assert r6["adaround"]["seed"] == 6 and r["adaround"]["seed"] == 5  # the seed reaches AdaRound
    with pytest.raises(qfold.InputError, match="seed"):
        qfold.quantize(fashion, calib, seed=-1)


def test_quantize_target_against_cli(fashion, calib, test_set, work, cli, files):
    x, y = test_set
    out, rep = os.path.join(work, "r_tg.onnx"), os.path.join(work, "r_tg.json")
    p = cli("quantize", fashion, "-o", out, "--calib", files["calib"], "--report", rep, "--eval-data", files["x"],
            "--eval-labels", files["y"], "--max-drop", "0", "--max-excluded", "1", "--set", "equalize=off", ok=False)
    trials = []
    if p.returncode == 0:
        m, r = qfold.quantize(fashion, calib, eval_data=x, eval_labels=y, max_drop=0, max_excluded=1,
                              set={"equalize": "off"}, on_trial=trials.append)
        assert m.to_onnx_bytes() == read(out)
        same_report(r, json.loads(read(rep)), fashion)
    else:  # not reached: the CLI exits 1 naming the best trial, and so does the package
        assert p.returncode == 1
        with pytest.raises(qfold.MismatchError) as e:
            qfold.quantize(fashion, calib, eval_data=x, eval_labels=y, max_drop=0, max_excluded=1,
                           set={"equalize": "off"}, on_trial=trials.append)
        assert str(e.value) in p.stderr and e.value.report["accuracy_target"]["met"] is False
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("target trial")]
    assert len(lines) == len(trials) >= 1
    for ln, t in zip(lines, trials):
        assert t["what"] in ln and (t["skipped"] or ("%.2f" % t["top1"]) in ln)
    with pytest.raises(qfold.InputError, match="max_drop needs"):
        qfold.quantize(fashion, calib, max_drop=1)
    with pytest.raises(qfold.InputError, match="go with max_drop"):
        qfold.quantize(fashion, calib, eval_data=x, eval_labels=y)


# --- check ------------------------------------------------------------------------------

def test_check_against_cli(fashion, work, cli):
    for sets in ({}, {"neutron-flow": "sdk2", "num-macs": "16"}):
        out = os.path.join(work, "r_check.json")
        cli("check", fashion, "--json", out, *sum([["--set", "%s=%s" % kv] for kv in sets.items()], []))
        assert qfold.check(fashion, set=sets) == json.loads(read(out))
    r = qfold.check(qfold.load(fashion))
    assert r["from_float"] and r["summary"]["npu_nodes"] > 0
    with pytest.raises(qfold.InputError, match="num-macs|neutron-flow|key"):
        qfold.check(fashion, set={"num-macs": "lots"})
    with pytest.raises(qfold.InputError):
        qfold.check(fashion, target="gpu")


# --- qat, finalize ----------------------------------------------------------------------

QAT_ARGS = ["--epochs", "1", "--batch", "8", "--lr", "0.01", "--seed", "3", "--calib-count", "16"]


@pytest.fixture(scope="module")
def qat_cli(fashion, work, cli, files):
    out, keep = os.path.join(work, "r_qat.onnx"), os.path.join(work, "r_qat_keep.onnx")
    cli("qat", fashion, "-o", out, "--data", files["tx"], "--labels", files["ty"], "--keep-qat", keep,
        "--bn-reestimate", "16", "--exclude", "/head/head.3/Gemm", *QAT_ARGS)
    return out, keep


def test_qat_against_cli(fashion, calib, test_set, qat_cli):
    out, keep = qat_cli
    x, y = calib[:40], test_set[1]
    steps = []
    m, r = qfold.qat(fashion, x, y, epochs=1, batch=8, lr=0.01, seed=3, calib_count=16, bn_reestimate=16,
                     exclude=["/head/head.3/Gemm"], keep_qat=True, on_step=steps.append)
    assert m.to_onnx_bytes() == read(out)
    assert r["qat_model"].to_onnx_bytes() == read(keep)
    assert r["steps"] == 5 == len(steps) and r["calibrated"] == 16 and not r["stopped"]
    assert r["bn_reestimated"]["batchnorms"] == 6 and r["excluded"] == ["/head/head.3/Gemm"]
    assert m.quantized and m.report is r


def test_qat_batches_of_different_sizes(fashion, calib, test_set, qat_cli):
    """(x, y) batches of different sizes are the concatenated set."""
    out, _ = qat_cli
    x, y = calib[:40], test_set[1]
    cuts = [0, 3, 20, 21, 40]
    batches = ((x[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:]))
    m, _ = qfold.qat(fashion, batches, epochs=1, batch=8, lr=0.01, seed=3, calib_count=16, bn_reestimate=16,
                     exclude="/head/head.3/Gemm")
    assert m.to_onnx_bytes() == read(out)


def test_qat_stop_val_and_errors(fashion, calib, test_set, work, cli, files):
    x, y = calib[:40], test_set[1]
    # validation: the top-1 figures `qfold qat --val-data` prints
    p = cli("qat", fashion, "-o", os.path.join(work, "r_qat_val.onnx"), "--data", files["tx"], "--labels",
            files["ty"], "--val-data", files["tx"], "--val-labels", files["ty"], *QAT_ARGS)
    _, rv = qfold.qat(fashion, x, y, epochs=1, batch=8, lr=0.01, seed=3, calib_count=16, val_data=x, val_labels=y)
    assert ("val top-1: float %.2f %% before, int8 %.2f %% after" % (100 * rv["float_top1"], 100 * rv["int8_top1"])
            in p.stdout)
    m, r = qfold.qat(fashion, x, y, batch=8, calib_count=8, on_step=lambda s: s["step"] < 2, val_data=x,
                     val_labels=y)
    assert r["stopped"] and r["steps"] == 2 and m.quantized  # what was trained, finalized
    assert r["int8_top1"] == qfold.eval(m, x, y)["top1"] and r["float_top1"] == qfold.eval(fashion, x, y)["top1"]
    with pytest.raises(qfold.InputError, match="bias correction"):
        qfold.qat(fashion, x, y, set={"bias-correction": "auto"})
    with pytest.raises(qfold.InputError, match="adaround"):
        qfold.qat(fashion, x, y, set={"weight-rounding": "adaround"})
    with pytest.raises(qfold.InputError, match="freeze_bn"):
        qfold.qat(fashion, x, y, freeze_bn="soon")
    with pytest.raises(qfold.InputError, match="qat_bn"):
        qfold.qat(fashion, x, y, qat_bn="fast")


def test_finalize_against_cli(fashion, qat_cli, work, cli):
    _, keep = qat_cli
    for target in ("neutron", "generic"):
        out = os.path.join(work, "r_fin_%s.onnx" % target)
        cli("finalize", keep, "-o", out, "--target", target)
        m = qfold.finalize(qfold.load(keep), target=target)
        assert m.to_onnx_bytes() == read(out) and m.report["folded"] >= 1
    with pytest.raises(qfold.InputError, match="not a QAT model") as e:
        qfold.finalize(fashion)
    p = cli("finalize", fashion, "-o", os.path.join(work, "r_fin_x.onnx"), ok=False)
    assert p.returncode == e.value.exit_status == 2


# --- Ctrl-C, threads, engine --------------------------------------------------------------

def interrupt_after(seconds):
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


@pytest.mark.parametrize("what", ["quantize", "qat", "eval"])
def test_ctrl_c(what, fashion, calib, test_set):
    """SIGINT from a timer while the library works: KeyboardInterrupt, and
    the next call runs as usual."""
    x, y = calib, test_set[1]
    big = np.concatenate([calib] * 40)
    calls = {
        "quantize": lambda: qfold.quantize(fashion, calib, set={"weight-rounding": "adaround",
                                                               "adaround-iters": "100000"}),
        "qat": lambda: qfold.qat(fashion, big, np.resize(y, len(big)), epochs=50, batch=8),
        "eval": lambda: [qfold.eval(fashion, np.concatenate([big] * 10), np.zeros(len(big) * 10, np.int64),
                                    batch=1) for _ in range(100)],
    }
    t = interrupt_after(1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            calls[what]()
    finally:
        t.cancel()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    r = qfold.eval(fashion, x[:40], y)  # the library is usable again, the request gone
    assert r["samples"] == 40


def test_threads_engine_per_call(fashion, calib, test_set):
    x, y = calib[:40], test_set[1]
    threads, engine = qfold.get_threads(), qfold.get_engine()
    r1 = qfold.eval(fashion, x, y, threads=1, engine="ref")
    assert (qfold.get_threads(), qfold.get_engine()) == (threads, engine)
    r2 = qfold.eval(fashion, x, y)
    assert r1["top1"] == r2["top1"]
    m1, _ = qfold.quantize(fashion, calib, threads=1, engine="ref", set={"equalize": "off"})
    assert (qfold.get_threads(), qfold.get_engine()) == (threads, engine) and m1.quantized
    with pytest.raises(qfold.InputError, match="unknown engine"):
        qfold.eval(fashion, x, y, engine="gpu")
    with pytest.raises(qfold.InputError, match="threads"):
        qfold.eval(fashion, x, y, threads=99)
    assert (qfold.get_threads(), qfold.get_engine()) == (threads, engine)


def test_run_fast_path(fashion, calib, work, cli):
    """Repeated runs of one shape (the cached path) give what a first run
    and `qfold run` give, in arrays of their own."""
    m = qfold.load(fashion)
    x1, x2 = calib[:1].copy(), calib[1:2].copy()
    (a,) = m.run(x1)
    (b,) = m.run(x2)
    (c,) = m.run(x1)
    assert m._fast is not None
    assert np.array_equal(a, c) and not np.array_equal(a, b) and a is not c
    a_before = a.copy()
    m.run(x2)
    assert np.array_equal(a, a_before)  # not a view of the plan's memory
    (d,) = m.run(calib[:3])  # another shape: a new plan
    assert np.array_equal(d[:1], a) or np.allclose(d[:1], a, rtol=1e-5, atol=1e-6)
    xp, yp = save(work, "r_fast_x.npy", x2), os.path.join(work, "r_fast_y.npy")
    cli("run", fashion, "-i", xp, "-o", yp)
    (e,) = m.run(x2)
    (e2,) = m.run(np.asfortranarray(x2))  # a non-contiguous layout is copied in the same
    assert e.tobytes() == np.load(yp).tobytes() == e2.tobytes()
    with pytest.raises(qfold.InputError, match="expects float32"):
        m.run(x2.astype(np.float64))
    m.close()
    assert m._fast is None


def test_callbacks_take_the_gil(fashion, calib, test_set):
    """A Python callback from the library (qat's on_step, on the calling
    thread) runs while another Python thread keeps running during the call:
    the GIL is released by the call and taken back by the callback."""
    import time
    x, y = calib[:40], test_set[1]
    ticks, steps = [], []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(threading.get_ident())
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    try:
        qfold.qat(fashion, x, y, batch=4, calib_count=8,
                  on_step=lambda s: steps.append((s["step"], threading.get_ident(), len(ticks))) or True)
    finally:
        done.set()
        t.join()
    assert len(steps) == 10 and all(s[1] == threading.get_ident() for s in steps)
    assert steps[-1][2] > steps[0][2]  # the other thread ran between the steps


def test_train_batches_of_pairs(fashion, calib, test_set, work, cli):
    """train takes an iterator of (x, y) batches of different sizes too."""
    x, y = calib[:40], test_set[1]
    a, _ = qfold.train(fashion, x, y, epochs=1, batch=8, seed=2)
    b, _ = qfold.train(fashion, ((x[i:j], y[i:j]) for i, j in ((0, 7), (7, 8), (8, 40))), epochs=1, batch=8, seed=2)
    assert a.to_onnx_bytes() == b.to_onnx_bytes()


def test_train_schedule_against_cli(fashion, calib, test_set, work, cli, files):
    out = os.path.join(work, "r_sched.onnx")
    cli("train", fashion, "-o", out, "--data", files["tx"], "--labels", files["ty"], "--epochs", "2", "--batch", "8",
        "--schedule", "step", "--step-size", "3", "--gamma", "0.5", "--warmup", "2", "--lr", "0.05", "--seed", "4")
    lrs = []
    m, _ = qfold.train(fashion, calib[:40], test_set[1], epochs=2, batch=8, schedule="step", step_size=3, gamma=0.5,
                       warmup=2, lr=0.05, seed=4, on_step=lambda s: lrs.append(s["lr"]))
    assert m.to_onnx_bytes() == read(out) and len(set(lrs)) > 2
    with pytest.raises(qfold.InputError, match="step_size"):
        qfold.train(fashion, calib[:40], test_set[1], schedule="step")
