"""qfold.torch: a module exported in memory runs in qfold as in PyTorch;
finalize_qat is `qfold finalize` of the same export; `import qfold` alone
does not import torch."""
import os
import subprocess
import sys

import numpy as np
import pytest

import qfold


def torch_or_skip():
    if os.environ.get("QF_SANITIZED") == "1":
        pytest.skip("PyTorch in a process with ASan's runtime preloaded tests PyTorch, not qfold")
    return pytest.importorskip("torch")


def test_import_qfold_does_not_import_torch():
    code = "import sys, qfold; assert 'torch' not in sys.modules and 'qfold.torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


def small_net(torch):
    nn = torch.nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2),
                        nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    with torch.no_grad():  # running statistics of their own, so the fold does something
        for m in net:
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
    return net


def test_export_runs_as_in_pytorch():
    torch = torch_or_skip()
    import qfold.torch as qt
    net = small_net(torch).train()
    x = torch.rand(5, 1, 14, 14)
    m = qt.export(net, x[:1])
    assert net.training  # the module's mode put back
    assert "BatchNormalization" in m.ops and m.inputs[0].shape == (None, 1, 14, 14)
    net.eval()
    with torch.no_grad():
        want = net(x).numpy()
    (got,) = m.run(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (fused,) = qfold.fuse(m, verify=True).run(x.numpy())
    np.testing.assert_allclose(fused, want, rtol=1e-4, atol=1e-4)
    assert qt.export_bytes(net, x[:1]) == m.to_onnx_bytes() or qfold.load(qt.export_bytes(net, x[:1])).ops == m.ops


def test_finalize_qat_is_cli_finalize(work, cli):
    torch = torch_or_skip()
    import io
    import qfold.torch as qt
    from torch.ao.quantization import (FakeQuantize, MovingAverageMinMaxObserver,
                                       MovingAveragePerChannelMinMaxObserver, QConfig, QConfigMapping)
    from torch.ao.quantization.quantize_fx import prepare_qat_fx
    torch.backends.quantized.engine = "qnnpack"
    act = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, averaging_constant=0.01, dtype=torch.quint8,
                                 quant_min=0, quant_max=255, qscheme=torch.per_tensor_affine)
    conv_w = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, ch_axis=0, dtype=torch.qint8,
                                    quant_min=-128, quant_max=127, qscheme=torch.per_channel_symmetric)
    lin_w = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, dtype=torch.qint8, quant_min=-128,
                                   quant_max=127, qscheme=torch.per_tensor_symmetric)
    qconfig = QConfigMapping().set_global(QConfig(activation=act, weight=conv_w)).set_module_name(
        "7", QConfig(activation=act, weight=lin_w))
    net = small_net(torch)
    example = torch.rand(2, 1, 14, 14)
    model = prepare_qat_fx(net.train(), qconfig, (example,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.rand(8, 1, 14, 14, generator=g), torch.randint(0, 10, (8,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    q = qt.finalize_qat(model, example[:1])
    assert model.training and q.quantized and q.report["folded"] == 2
    # the same export through a file and the CLI
    buf = io.BytesIO()
    model.eval()
    torch.onnx.export(model, (example[:1],), buf, opset_version=13, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    src, out = os.path.join(work, "t_qat.onnx"), os.path.join(work, "t_fin.onnx")
    with open(src, "wb") as f:
        f.write(buf.getvalue())
    cli("finalize", src, "-o", out)
    with open(out, "rb") as f:
        assert q.to_onnx_bytes() == f.read()
    # and it computes what the QAT model computes, within a few int8 steps
    x = torch.rand(4, 1, 14, 14)
    with torch.no_grad():
        want = model(x).numpy()
    (got,) = q.run(x.numpy(), simulate=True)
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max() + 1e-3
