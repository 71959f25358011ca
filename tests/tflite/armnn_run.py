"""Run a .tflite on ArmNN's TfLite parser with the CpuRef backend.

  armnn_run.py MODEL.tflite IN.npy OUT.npz

IN.npy holds N samples stacked on axis 0 (int8 for an int8-input model,
float32 with --float-io); the model's input has batch 1 (or N: then one
run). OUT.npz holds every subgraph output, keyed by its tensor name, with the
N results stacked. Run this in a subprocess: ArmNN aborts on some malformed
files. Exit status 3 when the parser or the optimizer refuses the model (the
message on stderr), 0 on success.
"""
import sys

import numpy as np


def main():
    model, inp, out = sys.argv[1:4]
    import io
    import contextlib
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import pyarmnn as ann
    try:
        parser = ann.ITfLiteParser()
        net = parser.CreateNetworkFromBinaryFile(model)
        runtime = ann.IRuntime(ann.CreationOptions())
        opt, msgs = ann.Optimize(net, [ann.BackendId("CpuRef")], runtime.GetDeviceSpec(),
                                 ann.OptimizerOptions())
        net_id, _ = runtime.LoadNetwork(opt)
    except Exception as e:  # the parser's and optimizer's refusals
        print("armnn refused %s: %s" % (model, str(e).splitlines()[0] if str(e) else type(e).__name__),
              file=sys.stderr)
        return 3
    in_names = parser.GetSubgraphInputTensorNames(0)
    out_names = parser.GetSubgraphOutputTensorNames(0)
    if len(in_names) != 1:
        print("armnn_run: %d inputs, one expected" % len(in_names), file=sys.stderr)
        return 2
    ib = parser.GetNetworkInputBindingInfo(0, in_names[0])
    obs = [parser.GetNetworkOutputBindingInfo(0, n) for n in out_names]
    x = np.load(inp)
    shape = tuple(ib[1].GetShape()[i] for i in range(ib[1].GetNumDimensions()))
    per_run = shape[0]
    res = {n: [] for n in out_names}
    for s in range(0, x.shape[0], per_run):
        xs = np.ascontiguousarray(x[s:s + per_run]).reshape(shape)
        it = ann.make_input_tensors([ib], [xs])
        ot = ann.make_output_tensors(obs)
        runtime.EnqueueWorkload(net_id, it, ot)
        for n, r in zip(out_names, ann.workload_tensors_to_ndarray(ot)):
            res[n].append(np.array(r).reshape(tuple(b[1].GetShape()[i] for b in [obs[out_names.index(n)]]
                                                    for i in range(b[1].GetNumDimensions()))))
    np.savez(out, **{n: np.concatenate(v, axis=0) for n, v in res.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
