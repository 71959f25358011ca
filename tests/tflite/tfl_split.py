"""One-op models cut out of a .tflite (flatc --python --gen-object-api code
of the vendored schema), so that each op can be run on exactly the inputs
the integer reference gave it: an op checked this way is judged alone, not
with the 1-LSB flips of the ops before it amplified.

  split(path, tfl) -> [(k, op name, model bytes, [input names], [output names])]
"""
import copy
import importlib

import flatbuffers


def split(path, tfl):
    Model = importlib.import_module(tfl.__name__ + ".Model")
    BO = importlib.import_module(tfl.__name__ + ".BuiltinOperator").BuiltinOperator
    names = {v: k for k, v in vars(BO).items() if not k.startswith("_")}
    buf = open(path, "rb").read()
    m = Model.ModelT.InitFromObj(Model.Model.GetRootAs(buf, 0))
    g = m.subgraphs[0]

    def const(t):
        b = g.tensors[t].buffer
        return b > 0 and m.buffers[b].data is not None and len(m.buffers[b].data) > 0

    def name(t):
        n = g.tensors[t].name
        return n.decode() if isinstance(n, bytes) else n

    out = []
    for k, op in enumerate(g.operators):
        ins = [int(t) for t in op.inputs if t >= 0 and not const(t)]
        # Only the op's own tensors and buffers (renumbered; buffer 0 stays
        # the empty one): a copy of every tensor and weight per op made this
        # quadratic in the model (27 s of mobilenet_v3_small's 47).
        used = sorted({int(t) for t in list(op.inputs) + list(op.outputs) if t >= 0})
        remap = {t: i for i, t in enumerate(used)}
        bufs, tensors = [m.buffers[0]], []
        for t in used:
            tt = copy.copy(g.tensors[t])
            if tt.buffer > 0:
                bufs.append(m.buffers[tt.buffer])
                tt.buffer = len(bufs) - 1
            tensors.append(tt)
        o = copy.copy(op)
        o.inputs = [remap[int(t)] if t >= 0 else -1 for t in op.inputs]
        o.outputs = [remap[int(t)] for t in op.outputs]
        one = copy.copy(m)
        sg = copy.copy(g)
        sg.tensors = tensors
        sg.operators = [o]
        sg.inputs = [remap[t] for t in ins]
        sg.outputs = list(o.outputs)
        one.subgraphs = [sg]
        one.buffers = bufs
        one.metadata = None  # its entries name buffers by index
        one.signatureDefs = None
        b = flatbuffers.Builder(1024)
        b.Finish(one.Pack(b), file_identifier=b"TFL3")
        out.append((k, names.get(m.operatorCodes[op.opcodeIndex].builtinCode, "?"), bytes(b.Output()),
                    [name(t) for t in ins], [name(int(t)) for t in op.outputs]))
    return out
