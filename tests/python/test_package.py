"""The qfold package: every function against build/qfold on the same inputs
(bit-identical models, arrays and reports), the library's version and ABI,
the error mapping, ownership of returned arrays, batches of different sizes."""
import gc
import json
import os
import re
import subprocess
import threading
import time

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


# --- the library: version, ABI ---------------------------------------------------

def test_version(root, cli):
    proj = re.search(r"project\(qfold VERSION (\S+)", read(os.path.join(root, "CMakeLists.txt")).decode()).group(1)
    assert qfold.__version__ == proj
    assert qfold.library_version == proj
    assert cli("--version").stdout.splitlines()[0] == "qfold " + proj
    assert os.path.samefile(qfold.library_path, os.environ["QFOLD_LIBRARY"])


def test_abi_layout():
    """Each struct the package mirrors has the C header's size and offsets."""
    import ctypes
    from qfold import _lib
    c = json.loads(subprocess.run([os.environ["QF_TEST_ABI"]], capture_output=True, check=True, text=True).stdout)
    assert set(c) == set(_lib.MIRRORED)
    for name, cls in _lib.MIRRORED.items():
        assert ctypes.sizeof(cls) == c[name]["size"], name
        assert [f[0] for f in cls._fields_] == list(c[name]["fields"]), name
        for field, off in c[name]["fields"].items():
            assert getattr(cls, field).offset == off, "%s.%s" % (name, field)


def test_version_mismatch(root, tmp_path):
    """A package of another version refuses the library, naming both."""
    import shutil
    pkg = tmp_path / "qfold"
    shutil.copytree(os.path.join(root, "python", "qfold"), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "_version.py").write_text('__version__ = "9.9.9"\n')
    p = subprocess.run(["/usr/bin/python3", "-c", "import qfold"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert p.returncode != 0
    assert "LibraryError" in p.stderr and "9.9.9" in p.stderr and qfold.__version__ in p.stderr, p.stderr


# --- load, describe, save ----------------------------------------------------------

def test_load_describe(fashion, cli):
    m = qfold.load(fashion)
    info = json.loads(cli("inspect", fashion, "--json").stdout)
    assert [(i.name, i.dtype.name, [d if d is not None else None for d in i.shape]) for i in m.inputs] == \
        [(i["name"], i["dtype"], i["shape"]) for i in info["inputs"]]
    assert [(o.name, o.dtype.name, list(o.shape)) for o in m.outputs] == \
        [(o["name"], o["dtype"], o["shape"]) for o in info["outputs"]]
    assert list(m.ops.items()) == list(info["ops"].items())
    assert m.nodes == info["nodes"] and m.opset == info["opset"]
    assert m.inputs[0].shape[0] is None and not m.quantized


def test_bytes_and_save(fashion, work, cli):
    m = qfold.load(fashion)
    data = m.to_onnx_bytes()
    assert qfold.load(data).to_onnx_bytes() == data
    assert qfold.load(bytearray(data)).to_onnx_bytes() == data
    p = os.path.join(work, "saved.onnx")
    m.save(p)
    assert read(p) == data
    # what `qfold fuse --passes dce` writes for a model dce leaves alone is the model as loaded
    ext = os.path.join(work, "ext.onnx")
    m.save(ext, external_data=True)
    assert os.path.getsize(ext + ".data") > 0 and os.path.getsize(ext) < len(data)
    assert qfold.load(ext).to_onnx_bytes() == data


# --- run ----------------------------------------------------------------------------

def test_run_against_cli_and_torch(root, tiny, work, cli):
    x = np.load(os.path.join(root, "examples", "input.npy"))
    m = qfold.load(tiny)
    (y,) = m.run(x)
    out = os.path.join(work, "tiny_out.npy")
    cli("run", tiny, "-i", os.path.join(root, "examples", "input.npy"), "-o", out)
    ref = np.load(out)
    assert y.dtype == ref.dtype and y.shape == ref.shape and y.tobytes() == ref.tobytes()
    # PyTorch's output for the same input (examples/make_example.py wrote it)
    np.testing.assert_allclose(y, np.load(os.path.join(root, "examples", "expected.npy")), rtol=1e-4, atol=1e-5)
    assert m.run(input=x)[0].tobytes() == y.tobytes()  # by name; the kept plan gives the same


def test_run_dynamic_batch(fashion, calib, work, cli):
    m = qfold.load(fashion)
    for n in (1, 5, 1):  # the plan is rebuilt when the batch changes
        (y,) = m.run(calib[:n])
        p = save(work, "b%d.npy" % n, calib[:n])
        cli("run", fashion, "-i", p, "-o", os.path.join(work, "b%d_out.npy" % n))
        assert y.tobytes() == np.load(os.path.join(work, "b%d_out.npy" % n)).tobytes()


def test_arrays_outlive_model(fashion, calib):
    m = qfold.load(fashion)
    (y,) = m.run(calib[:3])
    keep = y.copy()
    data = m.to_onnx_bytes()
    info = m.inputs
    del m
    gc.collect()
    junk = [qfold.load(data).run(calib[3:6]) for _ in range(3)]  # reuse the freed memory
    assert y.tobytes() == keep.tobytes() and y.flags.owndata
    assert info[0].name == "image" and len(junk) == 3
    q = qfold.load(data)
    q.close()
    with pytest.raises(qfold.InputError, match="closed"):
        q.run(calib[:1])


# --- fuse -----------------------------------------------------------------------------

def test_fuse_against_cli(fashion, work, cli):
    out = os.path.join(work, "fused_cli.onnx")
    rep = os.path.join(work, "fused_cli.json")
    cli("fuse", fashion, "-o", out, "--report", rep)
    f = qfold.fuse(qfold.load(fashion))
    assert f.to_onnx_bytes() == read(out)
    assert "BatchNormalization" not in f.ops
    cli_rep = json.loads(read(rep))
    strip = lambda r: [(p["pass"], p["changed"], p["rewrites"]) for p in r["passes"]]  # noqa: E731
    assert strip(f.report) == strip(cli_rep)
    v = qfold.fuse(fashion, verify=True)  # a path works too
    assert v.to_onnx_bytes() == read(out) and v.report["verify"]["ok"]


def test_fuse_verify_mismatch(fashion):
    try:
        qfold.fuse(fashion, verify=True, tolerance=1e-30)
    except qfold.MismatchError as e:
        assert e.exit_status == 1 and isinstance(e, qfold.ProcessingError) and "tolerance" in str(e)
    else:  # the fold changed no output by a single rounding: nothing to refuse
        pytest.skip("the folded model's outputs equal the original's exactly")


# --- quantize, eval, export -------------------------------------------------------

VOLATILE = {"seconds", "calibrate_ms", "convert_ms", "equalize_ms", "passes_ms", "sqnr_ms"}


def stable(x):
    """A report without its timings."""
    if isinstance(x, dict):
        return {k: stable(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [stable(v) for v in x]
    return x


@pytest.fixture(scope="module")
def quantized(fashion, calib, work, cli):
    fused = os.path.join(work, "q_fused.onnx")
    cli("fuse", fashion, "-o", fused)
    cp = save(work, "calib.npy", calib)
    q = os.path.join(work, "q_cli.onnx")
    rep = os.path.join(work, "q_cli.json")
    cli("quantize", fused, "-o", q, "--calib", cp, "--report", rep, "--set", "equalize=off")
    return fused, cp, q, json.loads(read(rep))


def test_quantize_against_cli(quantized, calib):
    fused, cp, q, cli_rep = quantized
    m, rep = qfold.quantize(qfold.load(fused), calib=calib, set={"equalize": "off"})
    assert m.to_onnx_bytes() == read(q)
    assert rep is m.report and m.quantized
    want = stable(cli_rep)
    want["input"], want["output"], want["calibration"]["files"] = fused, None, [None]
    assert stable(rep) == want
    # from the .npy file, read a batch at a time as the CLI reads it: the report names it
    m2, rep2 = qfold.quantize(fused, calib=cp, set=["equalize=off"])
    assert m2.to_onnx_bytes() == read(q)
    want["calibration"]["files"] = [cp]
    assert stable(rep2) == want


def test_quantize_batches(quantized, calib):
    """An iterable of batches of different sizes is the concatenated set."""
    fused, _, q, _ = quantized
    sizes = [5, 17, 1, 25]
    assert sum(sizes) == len(calib)
    cuts = np.cumsum([0] + sizes)
    gen = (calib[a:b] for a, b in zip(cuts[:-1], cuts[1:]))
    m, rep = qfold.quantize(fused, calib=gen, set={"equalize": "off"})
    assert m.to_onnx_bytes() == read(q) and rep["calibration"]["samples"] == len(calib)
    seen = []
    m3, _ = qfold.quantize(fused, calib=[(b,) for b in np.array_split(calib, 3)], set={"equalize": "off"},
                           batch=7, progress=lambda p, done, total: seen.append((done, total)))
    assert seen[-1] == (len(calib), len(calib)) and len(seen) == 7  # 48 samples, 7 at a time


def test_eval_against_cli(quantized, test_set, work, cli):
    _, _, q, _ = quantized
    x, y = test_set
    xp, yp = save(work, "test.npy", x), save(work, "labels.npy", y)
    ref = json.loads(cli("eval", q, "--data", xp, "--labels", yp, "--json").stdout)
    r = qfold.eval(qfold.load(q), x, y)
    assert r["samples"] == ref["samples"] and r["classes"] == ref["classes"]
    assert "%.6f" % r["top1"] == "%.6f" % ref["models"][0]["top1"]
    assert "%.6f" % r["top5"] == "%.6f" % ref["models"][0]["top5"]
    # the predictions are the int8 run's argmax
    (scores,) = qfold.load(q).run(x)
    assert np.array_equal(r["predictions"], scores.argmax(axis=1))
    r2 = qfold.eval(q, xp, yp)  # files, as the CLI reads them
    assert (r2["top1"], r2["top5"]) == (r["top1"], r["top5"])


def test_export_against_cli(quantized, work, cli):
    _, _, q, _ = quantized
    out = os.path.join(work, "q_cli.tflite")
    cli("export", q, "-o", out)
    data = qfold.export_tflite(qfold.load(q))
    assert isinstance(data, bytes) and data == read(out) and data[4:8] == b"TFL3"
    data2, rep = qfold.export_tflite(q, report=True)
    assert data2 == data and rep["format"] == "tflite" and len(rep["ops"]) > 5


def test_run_quantized_against_cli(quantized, calib, work, cli):
    _, cp, q, _ = quantized
    m = qfold.load(q)
    for simulate in (False, True):
        out = os.path.join(work, "qrun_%d.npy" % simulate)
        cli("run", q, "-i", cp, "-o", out, *(["--simulate"] if simulate else []))
        (y,) = m.run(calib, simulate=simulate)
        assert y.tobytes() == np.load(out).tobytes()


# --- errors -------------------------------------------------------------------------

def cli_message(p):
    """The CLI's one-line error ("qfold: <message>") without the prefix."""
    line = p.stderr.strip().splitlines()[-1]
    return line.split(": ", 1)[1] if line.startswith("qfold") else line


def test_errors_against_cli(quantized, work, cli, calib):
    fused, cp, q, _ = quantized
    bad = os.path.join(work, "bad.onnx")
    with open(bad, "wb") as f:
        f.write(b"\x08\x07\x12\xffnot a model")
    p = cli("inspect", bad, ok=False)
    with pytest.raises(qfold.InputError) as e:
        qfold.load(bad)
    assert p.returncode == e.value.exit_status == 2 and e.value.status == "PARSE"
    assert str(e.value) == cli_message(p)
    with pytest.raises(qfold.InputError) as e:
        qfold.load(os.path.join(work, "missing.onnx"))
    assert e.value.status == "IO" and "missing.onnx" in str(e.value)
    with pytest.raises(qfold.InputError) as e:
        qfold.load(b"\x08\x07\x12\xffnot a model")
    assert e.value.status == "PARSE"
    # an already quantized model
    p = cli("quantize", q, "-o", os.path.join(work, "qq.onnx"), "--calib", cp, ok=False)
    with pytest.raises(qfold.InputError) as e:
        qfold.quantize(q, calib=cp)
    assert p.returncode == 2 and str(e.value) == cli_message(p)
    # a rule the profile does not know: the library's message (the CLI adds "--set: ")
    p = cli("quantize", fused, "-o", os.path.join(work, "qq.onnx"), "--calib", cp, "--set", "bogus=1", ok=False)
    with pytest.raises(qfold.InputError) as e:
        qfold.quantize(fused, calib=calib, set={"bogus": 1})
    assert p.returncode == 2 and cli_message(p) == "--set: " + str(e.value)
    with pytest.raises(qfold.InputError, match="unknown target 'npu'"):
        qfold.quantize(fused, calib=calib, target="npu")
    # calibration data of the wrong shape / with a NaN
    with pytest.raises(qfold.InputError) as e:
        qfold.quantize(fused, calib=calib[:, :, :14])
    assert e.value.status == "SHAPE" and "image" in str(e.value)
    nan = calib.copy()
    nan[3, 0, 1, 2] = np.nan
    with pytest.raises(qfold.InputError, match="sample 3") as e:
        qfold.quantize(fused, calib=nan)
    # run: a wrong dtype or shape names the input
    m = qfold.load(fused)
    with pytest.raises(qfold.InputError, match="image"):
        m.run(calib.astype(np.float64))
    with pytest.raises(qfold.InputError, match="image"):
        m.run(calib[:, :, :3])
    with pytest.raises(qfold.InputError, match="no input 'x'"):
        m.run(x=calib)
    # a model TFLite cannot take: the float one
    with pytest.raises(qfold.Error) as e:
        qfold.export_tflite(m)
    p = cli("export", fused, "-o", os.path.join(work, "f.tflite"), ok=False)
    assert p.returncode == e.value.exit_status and str(e.value) == cli_message(p)


def test_gil_released(quantized, calib):
    """Another Python thread runs while the library calibrates."""
    fused = quantized[0]
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    t.start()
    big = np.concatenate([calib] * 4)
    t0 = time.perf_counter()
    qfold.quantize(fused, calib=big, set={"equalize": "off"}, sqnr_samples=-1, batch=8)
    elapsed = time.perf_counter() - t0
    done.set()
    t.join()
    # with the GIL held through the call the ticker would not run at all until it returns
    assert len(ticks) >= 10, (len(ticks), elapsed)


def test_engine_settings():
    assert qfold.get_engine() in ("ref", "dnnl")
    with pytest.raises(qfold.InputError, match="unknown engine"):
        qfold.set_engine("gpu")
    assert isinstance(qfold.engine_about(), str)


# --- train ----------------------------------------------------------------------------

def test_train_against_cli(fashion, calib, test_set, work, cli):
    x, y = calib[:40], test_set[1]
    xp, yp = save(work, "train_x.npy", x), save(work, "train_y.npy", y)
    out = os.path.join(work, "trained_cli.onnx")
    cli("train", fashion, "-o", out, "--data", xp, "--labels", yp, "--epochs", "2", "--batch", "8", "--lr", "0.05",
        "--optimizer", "adam", "--seed", "7")
    steps = []
    t, r = qfold.train(qfold.load(fashion), x, y, epochs=2, batch=8, lr=0.05, optimizer="adam", seed=7,
                       on_step=steps.append)
    assert t.to_onnx_bytes() == read(out)
    assert r["steps"] == 10 and len(steps) == 10 and not r["stopped"] and r["epochs"] == 2
    assert [s["step"] for s in steps] == list(range(1, 11)) and steps[-1]["loss"] == r["final_loss"]
    assert all(s["lr"] == 0.05 for s in steps)
    # batches of different sizes are the same set
    t2, _ = qfold.train(fashion, [x[:3], x[3:30], x[30:]], y, epochs=2, batch=8, lr=0.05, optimizer="adam", seed=7)
    assert t2.to_onnx_bytes() == read(out)


def test_train_stop_and_ctrl_c(fashion, calib, test_set):
    import signal
    x, y = calib[:40], test_set[1]
    t, r = qfold.train(fashion, x, y, batch=4, on_step=lambda s: s["step"] < 3)
    assert r["stopped"] and r["steps"] == 3
    seen = []

    def ctrl_c(s):
        seen.append(s["step"])
        if s["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: Python raises KeyboardInterrupt here
    with pytest.raises(KeyboardInterrupt):
        qfold.train(fashion, x, y, batch=4, on_step=ctrl_c)
    assert seen == [1, 2]
    with pytest.raises(qfold.InputError, match="unknown optimizer|optimizer"):
        qfold.train(fashion, x, y, optimizer="lion")
