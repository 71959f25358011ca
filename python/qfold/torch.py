"""PyTorch helpers for qfold (optional: `import qfold` does not import torch;
`import qfold.torch` does).

    import qfold, qfold.torch
    m = qfold.torch.export(net, torch.zeros(1, 1, 28, 28))   # a qfold.Model, in memory
    q, report = qfold.quantize(m, calib=x)

    # QAT in PyTorch (prepare_qat_fx, DDP, ...: the README's recipe), then
    q = qfold.torch.finalize_qat(model, example)             # the int8 QDQ model

The ONNX bytes go from torch.onnx.export to qfold.load through memory: no
temporary file.
"""
import io
from typing import Optional, Sequence

import torch

from . import Model, finalize, load

__all__ = ["export", "export_bytes", "finalize_qat"]


def _names(given, n, stem):
    if given is not None:
        return list(given)
    return [stem] if n == 1 else ["%s%d" % (stem, i) for i in range(n)]


def export_bytes(module: "torch.nn.Module", example, opset: int = 13, input_names: Optional[Sequence[str]] = None,
                 output_names: Optional[Sequence[str]] = None, dynamic_batch: bool = True,
                 keep_batchnorm: bool = True) -> bytes:
    """The ONNX bytes of `module` as qfold expects them: eval mode (the
    module's own mode is put back afterwards), BatchNorm kept as
    BatchNormalization nodes for qfold to fold (training=PRESERVE,
    do_constant_folding=False: PyTorch's exporter would otherwise fold it
    into the conv itself, out of sight of qfold's verify and report), the
    given opset (13: per-channel QDQ), the first dim of every input and
    output dynamic (dynamic_batch). example: a tensor or a tuple of tensors,
    one per input (its batch size does not matter)."""
    args = example if isinstance(example, tuple) else (example,)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            y = module(*args)
        nout = len(y) if isinstance(y, (tuple, list)) else 1
        ins, outs = _names(input_names, len(args), "input"), _names(output_names, nout, "output")
        axes = {n: {0: "N"} for n in ins + outs} if dynamic_batch else None
        buf = io.BytesIO()
        torch.onnx.export(module, args, buf, opset_version=opset, input_names=ins, output_names=outs,
                          dynamic_axes=axes,
                          training=torch.onnx.TrainingMode.PRESERVE if keep_batchnorm else
                          torch.onnx.TrainingMode.EVAL,
                          do_constant_folding=not keep_batchnorm)
        return buf.getvalue()
    finally:
        module.train(was_training)


def export(module: "torch.nn.Module", example, opset: int = 13, input_names: Optional[Sequence[str]] = None,
           output_names: Optional[Sequence[str]] = None, dynamic_batch: bool = True) -> Model:
    """`module` exported to ONNX (export_bytes: eval mode, BatchNorm kept,
    opset 13, dynamic batch) and loaded into qfold in memory: a qfold.Model
    for fuse / quantize / qat / check / run."""
    return load(export_bytes(module, example, opset, input_names, output_names, dynamic_batch))


def finalize_qat(module: "torch.nn.Module", example, target: str = "neutron", opset: int = 13,
                 input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
                 dynamic_batch: bool = True) -> Model:
    """The README's DDP QAT recipe after training, as one call: a module
    prepared with prepare_qat_fx (plain FakeQuantize modules; a
    DistributedDataParallel wrapper is looked through to the module itself)
    gets its observers disabled (torch.ao.quantization.disable_observer:
    they stay disabled), is exported in eval mode at opset 13 (the module's
    mode put back) and finalized by qfold (qfold.finalize, as `qfold
    finalize`): the folded int8 QDQ model, its .report finalize's."""
    from torch.ao.quantization import disable_observer
    inner = module.module if isinstance(module, torch.nn.parallel.DistributedDataParallel) else module
    inner.apply(disable_observer)
    args = example if isinstance(example, tuple) else (example,)
    was_training = inner.training
    inner.eval()
    try:
        buf = io.BytesIO()
        with torch.no_grad():
            y = inner(*args)
        nout = len(y) if isinstance(y, (tuple, list)) else 1
        ins, outs = _names(input_names, len(args), "input"), _names(output_names, nout, "output")
        torch.onnx.export(inner, args, buf, opset_version=opset, input_names=ins, output_names=outs,
                          dynamic_axes={n: {0: "N"} for n in ins + outs} if dynamic_batch else None)
    finally:
        inner.train(was_training)
    return finalize(load(buf.getvalue()), target=target)
