"""What the quantizer's Python tests share (tests/quant/*.py)."""
import numpy as np

from qfcli import check


def fashion_calib(n, seed):
    """Images shaped as Fashion-MNIST's: blurred blobs in [0, 1] (not real data)."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 1, 28, 28), dtype=np.float32) ** 3
    return x


def output_scale(model):
    """The scale of the DequantizeLinear that produces the model's first output."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(model)
    inits = {i.name: i for i in m.graph.initializer}
    name = m.graph.output[0].name
    dq = [n for n in m.graph.node if name in n.output][0]
    check(dq.op_type == "DequantizeLinear", "output '%s' comes from %s, not DequantizeLinear" % (name, dq.op_type))
    return float(numpy_helper.to_array(inits[dq.input[1]]))
