"""Run .tflite files on TensorFlow Lite 2.2's interpreter (the prebuilt C
library that the npm package node-tflite 0.0.2 ships; scripts/deps.sh puts it
in tests/node_modules), through its C API with ctypes.

  tflite_run.py [--version] MODEL.tflite IN OUT.npz [MODEL2.tflite IN2 OUT2.npz ...]

Same contract as tests/tflite/armnn_run.py: IN is a .npy (the model's one
input) or a .npz (every input, keyed by its tensor name), N samples stacked
on axis 0; the model's inputs have batch 1 (or N: then one run); OUT.npz gets
every subgraph output keyed by its tensor name, the N results stacked.
Exit status 3 when the library refuses a model (its own message is on
stderr), 4 when the library is missing, 0 on success. Run it in a
subprocess: a malformed file can crash the interpreter. One thread: the
kernels TFLite's interpreter picks by default (its optimized ones), as a
device build would run them.
"""
import ctypes
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(HERE, "..", "node_modules", "node-tflite", "tflite", "linux_x86_64",
                   "libtensorflowlite_c.so")

# TfLiteType (tensorflow/lite/c/common.h of the package)
DTYPES = {1: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16, 9: np.int8,
          10: np.float16}


def load(path=LIB):
    if not os.path.exists(path):
        print("tflite_run: %s missing (run scripts/deps.sh)" % path, file=sys.stderr)
        sys.exit(4)
    lib = ctypes.CDLL(path)
    p, i32, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_size_t
    sig = {
        "TfLiteVersion": (ctypes.c_char_p, []),
        "TfLiteModelCreateFromFile": (p, [ctypes.c_char_p]),
        "TfLiteModelDelete": (None, [p]),
        "TfLiteInterpreterOptionsCreate": (p, []),
        "TfLiteInterpreterOptionsDelete": (None, [p]),
        "TfLiteInterpreterOptionsSetNumThreads": (None, [p, i32]),
        "TfLiteInterpreterCreate": (p, [p, p]),
        "TfLiteInterpreterDelete": (None, [p]),
        "TfLiteInterpreterGetInputTensorCount": (i32, [p]),
        "TfLiteInterpreterGetInputTensor": (p, [p, i32]),
        "TfLiteInterpreterAllocateTensors": (ctypes.c_int, [p]),
        "TfLiteInterpreterInvoke": (ctypes.c_int, [p]),
        "TfLiteInterpreterGetOutputTensorCount": (i32, [p]),
        "TfLiteInterpreterGetOutputTensor": (p, [p, i32]),
        "TfLiteTensorType": (ctypes.c_int, [p]),
        "TfLiteTensorNumDims": (i32, [p]),
        "TfLiteTensorDim": (i32, [p, i32]),
        "TfLiteTensorByteSize": (sz, [p]),
        "TfLiteTensorName": (ctypes.c_char_p, [p]),
        "TfLiteTensorCopyFromBuffer": (ctypes.c_int, [p, p, sz]),
        "TfLiteTensorCopyToBuffer": (ctypes.c_int, [p, p, sz]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def tensor_info(lib, t):
    shape = tuple(lib.TfLiteTensorDim(t, d) for d in range(lib.TfLiteTensorNumDims(t)))
    return lib.TfLiteTensorName(t).decode(), shape, DTYPES[lib.TfLiteTensorType(t)]


def run(lib, model, inp, out):
    m = lib.TfLiteModelCreateFromFile(model.encode())
    if not m:
        print("tflite refused %s: the model did not load" % model, file=sys.stderr)
        return 3
    opts = lib.TfLiteInterpreterOptionsCreate()
    lib.TfLiteInterpreterOptionsSetNumThreads(opts, 1)
    it = lib.TfLiteInterpreterCreate(m, opts)
    try:
        if not it or lib.TfLiteInterpreterAllocateTensors(it) != 0:
            print("tflite refused %s: no interpreter / AllocateTensors failed" % model, file=sys.stderr)
            return 3
        ins = [lib.TfLiteInterpreterGetInputTensor(it, k)
               for k in range(lib.TfLiteInterpreterGetInputTensorCount(it))]
        outs = [lib.TfLiteInterpreterGetOutputTensor(it, k)
                for k in range(lib.TfLiteInterpreterGetOutputTensorCount(it))]
        iinfo = [tensor_info(lib, t) for t in ins]
        oinfo = [tensor_info(lib, t) for t in outs]
        if inp.endswith(".npz"):
            with np.load(inp) as z:
                xs = [z[n] for n, _, _ in iinfo]
        else:
            if len(ins) != 1:
                print("tflite_run: %s has %d inputs: give a .npz" % (model, len(ins)), file=sys.stderr)
                return 2
            xs = [np.load(inp)]
        per_run = iinfo[0][1][0] if iinfo[0][1] else 1
        res = {n: [] for n, _, _ in oinfo}
        for s in range(0, xs[0].shape[0], per_run):
            # Asked again every run: an Invoke may add tensors (TFLite 2.2's
            # CONV_2D its temporaries on the first run) and move the array
            # the earlier pointers point into.
            ins = [lib.TfLiteInterpreterGetInputTensor(it, k) for k in range(len(ins))]
            for x, t, (n, shape, dt) in zip(xs, ins, iinfo):
                a = np.ascontiguousarray(x[s:s + per_run], dtype=dt).reshape(shape)
                if lib.TfLiteTensorCopyFromBuffer(t, a.ctypes.data, a.nbytes) != 0:
                    print("tflite_run: %s: input %s does not take %d bytes" % (model, n, a.nbytes), file=sys.stderr)
                    return 2
            if lib.TfLiteInterpreterInvoke(it) != 0:
                print("tflite refused %s: Invoke failed" % model, file=sys.stderr)
                return 3
            outs = [lib.TfLiteInterpreterGetOutputTensor(it, k) for k in range(len(outs))]
            for t, (n, shape, dt) in zip(outs, oinfo):
                a = np.empty(shape, dtype=dt)
                lib.TfLiteTensorCopyToBuffer(t, a.ctypes.data, a.nbytes)
                res[n].append(a)
        np.savez(out, **{n: np.concatenate(v, axis=0) for n, v in res.items()})
        return 0
    finally:
        if it:
            lib.TfLiteInterpreterDelete(it)
        lib.TfLiteInterpreterOptionsDelete(opts)
        lib.TfLiteModelDelete(m)


def main():
    args = sys.argv[1:]
    lib = load()
    if args == ["--version"]:
        print(lib.TfLiteVersion().decode())
        return 0
    if not args or len(args) % 3:
        print(__doc__, file=sys.stderr)
        return 2
    for k in range(0, len(args), 3):
        rc = run(lib, *args[k:k + 3])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
