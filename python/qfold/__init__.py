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
from . import _lib  # noqa: F401 (qfold._lib: the binding, for the tests)
from ._version import __version__
from .errors import (Error, InputError, ProcessingError, MismatchError, Interrupted, DivergedError,
                     LibraryError)
from ._core import (Model, TensorInfo, load, fuse, set_engine, get_engine, set_threads, get_threads, engine_about,
                    library_path, library_version)
from ._ptq import quantize, eval, export_tflite, check
from ._training import train, qat, finalize

__all__ = ["Model", "TensorInfo", "load", "fuse", "quantize", "eval", "export_tflite", "check", "train", "qat",
           "finalize", "set_engine", "get_engine", "set_threads", "get_threads", "engine_about", "library_path",
           "library_version", "Error", "InputError", "ProcessingError", "MismatchError", "Interrupted",
           "DivergedError", "LibraryError", "__version__"]
