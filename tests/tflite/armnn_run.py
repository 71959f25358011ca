"""Run .tflite files on ArmNN's TfLite parser with the CpuRef backend.

  armnn_run.py MODEL.tflite IN OUT.npz [MODEL2.tflite IN2 OUT2.npz ...]

IN is a .npy (the model's one input) or a .npz (every input, keyed by its
tensor name); each holds N samples stacked on axis 0 (int8 for an int8-input
model, float32 with --float-io). The model's inputs have batch 1 (or N: then
one run). OUT.npz gets every subgraph output, keyed by its tensor name, the N
results stacked. Several triples run in one process (pyarmnn loads once).
Run this in a subprocess: ArmNN aborts on some malformed files. Exit status
3 when the parser or the optimizer refuses a model (the message on stderr),
0 on success.
"""
import contextlib
import io
import sys

import numpy as np

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    import pyarmnn as ann


def dims(info):
    return tuple(info.GetShape()[i] for i in range(info.GetNumDimensions()))


def run(model, inp, out):
    try:
        parser = ann.ITfLiteParser()
        net = parser.CreateNetworkFromBinaryFile(model)
        runtime = ann.IRuntime(ann.CreationOptions())
        opt, _ = ann.Optimize(net, [ann.BackendId("CpuRef")], runtime.GetDeviceSpec(), ann.OptimizerOptions())
        net_id, _ = runtime.LoadNetwork(opt)
    except Exception as e:  # the parser's and optimizer's refusals
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print("armnn refused %s: %s" % (model, msg), file=sys.stderr)
        return 3
    in_names = parser.GetSubgraphInputTensorNames(0)
    out_names = parser.GetSubgraphOutputTensorNames(0)
    ibs = [parser.GetNetworkInputBindingInfo(0, n) for n in in_names]
    obs = [parser.GetNetworkOutputBindingInfo(0, n) for n in out_names]
    if inp.endswith(".npz"):
        with np.load(inp) as z:
            xs = [z[n] for n in in_names]
    else:
        if len(in_names) != 1:
            print("armnn_run: %s has %d inputs: give a .npz" % (model, len(in_names)), file=sys.stderr)
            return 2
        xs = [np.load(inp)]
    per_run = dims(ibs[0][1])[0]
    res = {n: [] for n in out_names}
    for s in range(0, xs[0].shape[0], per_run):
        feed = [np.ascontiguousarray(x[s:s + per_run]).reshape(dims(b[1])) for x, b in zip(xs, ibs)]
        it = ann.make_input_tensors(ibs, feed)
        ot = ann.make_output_tensors(obs)
        runtime.EnqueueWorkload(net_id, it, ot)
        for n, b, r in zip(out_names, obs, ann.workload_tensors_to_ndarray(ot)):
            res[n].append(np.array(r).reshape(dims(b[1])))
    np.savez(out, **{n: np.concatenate(v, axis=0) for n, v in res.items()})
    runtime.UnloadNetwork(net_id)
    return 0


def main():
    args = sys.argv[1:]
    if not args or len(args) % 3:
        print(__doc__, file=sys.stderr)
        return 2
    for k in range(0, len(args), 3):
        rc = run(*args[k:k + 3])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
