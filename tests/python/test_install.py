"""The package installed: by pip from a copy of python/ into a venv (offline,
Debian's pip and setuptools, numpy from the system: --system-site-packages),
and by `make install` (cmake --install) next to the library it loads."""
import os
import shutil
import subprocess
import sys

import pytest

import qfold

PROBE = "import qfold, numpy; print(qfold.__file__); print(qfold.__version__, qfold.library_path); " \
        "m = qfold.load(%r); print(m.run(numpy.zeros((2, 1, 28, 28), numpy.float32))[0].shape)"


def run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, "%s exited %d:\n%s%s" % (" ".join(argv), p.returncode, p.stdout, p.stderr)
    return p.stdout


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QFOLD_LIBRARY")}
    env.update(extra)
    return env


def test_pip_install_venv(root, work, fashion):
    if subprocess.run([sys.executable, "-c", "import ensurepip"], capture_output=True).returncode:
        pytest.skip("python3-venv is not installed (scripts/deps.sh installs it)")
    src, venv = os.path.join(work, "pip_src"), os.path.join(work, "venv")
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(venv, ignore_errors=True)
    # a copy, as a clean clone has it: pip's build writes next to the sources
    shutil.copytree(os.path.join(root, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", "_install.py"))
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    py = os.path.join(venv, "bin", "python")
    # Debian's pip (the system one, run by the venv's interpreter), offline
    run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "-q", src],
        env=clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1"))
    out = run([py, "-c", PROBE % fashion], cwd=work, env=clean_env(QFOLD_LIBRARY=os.environ["QFOLD_LIBRARY"]))
    path, ver, shape = out.splitlines()
    assert path.startswith(os.path.realpath(venv)) or path.startswith(venv)
    assert ver.split()[0] == qfold.__version__ and shape == "(2, 10)"
    # without a library to load: LibraryError, naming QFOLD_LIBRARY
    p = subprocess.run([py, "-c", "import qfold"], capture_output=True, text=True, cwd=work,
                       env=clean_env(QFOLD_LIBRARY=os.path.join(work, "no-such-lib.so")))
    assert p.returncode != 0 and "LibraryError" in p.stderr and "QFOLD_LIBRARY" in p.stderr


def test_make_install(root, work, fashion):
    build = os.path.dirname(os.environ["QF_TEST_QFOLD"])
    prefix = os.path.join(work, "prefix")
    shutil.rmtree(prefix, ignore_errors=True)
    run(["cmake", "--install", build, "--prefix", prefix])
    pkgs = [d for d in (os.path.join(prefix, "lib", "python%d.%d" % sys.version_info[:2], "dist-packages"),)
            if os.path.isdir(os.path.join(d, "qfold"))]
    assert pkgs, "no qfold package under %s" % prefix
    out = run([sys.executable, "-c", PROBE % fashion], cwd=work, env=clean_env(PYTHONPATH=pkgs[0]))
    path, ver, shape = out.splitlines()
    assert path.startswith(pkgs[0]) and ver.split()[1].startswith(prefix) and shape == "(2, 10)"
