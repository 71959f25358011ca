"""Fixtures of the Python package's tests (run by run_pytest.py under ctest:
tests/python/python.cmake sets the environment below)."""
import os
import shutil
import subprocess

import numpy as np
import pytest


def env(name):
    v = os.environ.get(name)
    if not v:
        pytest.fail("%s is not set: run these tests through ctest (tests/python/python.cmake)" % name)
    return v


@pytest.fixture(scope="session")
def root():
    return env("QF_TEST_ROOT")


@pytest.fixture(scope="session")
def work():
    w = env("QF_TEST_WORK")
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    return w


class Cli:
    """build/qfold, run on files."""

    def __init__(self, exe):
        self.exe = exe

    def __call__(self, *args, ok=True):
        p = subprocess.run([self.exe] + [str(a) for a in args], capture_output=True, text=True, timeout=300)
        if ok and p.returncode != 0:
            pytest.fail("qfold %s exited %d:\n%s%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
        return p


@pytest.fixture(scope="session")
def cli():
    return Cli(env("QF_TEST_QFOLD"))


@pytest.fixture(scope="session")
def fashion(root):
    return os.path.join(root, "examples", "fashion_mnist", "fashion_cnn.onnx")


@pytest.fixture(scope="session")
def tiny(root):
    return os.path.join(root, "examples", "tiny_cnn.onnx")


@pytest.fixture(scope="session")
def calib():
    """Seeded Fashion-MNIST-like images (the comparisons hold for any data)."""
    rng = np.random.default_rng(32)
    return (rng.random((48, 1, 28, 28), dtype=np.float32) ** 3).astype(np.float32)


@pytest.fixture(scope="session")
def test_set():
    rng = np.random.default_rng(33)
    x = (rng.random((40, 1, 28, 28), dtype=np.float32) ** 3).astype(np.float32)
    return x, rng.integers(0, 10, 40).astype(np.int64)
