"""Helpers shared by the Python reference scripts (tests/ref, tests/passes,
bench).

Scripts outside tests/ref import it by putting tests/ref on sys.path relative
to their own location, e.g. from tests/passes:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
    from qfref import randomize_bn  # noqa: E402

torch is imported lazily, so scripts that only need run_cases do not pay for it.
"""


def randomize_bn(model, gen, negative_gamma=True):
    """Give every BatchNorm of MODEL random statistics, in place; returns MODEL.

    A freshly built BN is the identity (mean 0, var 1, gamma 1, beta 0) and
    would hide every mistake in BN, folding or export. Per BN layer with C
    channels, drawn in this order from the torch.Generator GEN (so the result
    is deterministic given GEN's seed and the order of model.modules()):

        s     ~ U(0.1, 0.5)        one scale per layer
        mean  ~ N(0, s)            running_mean
        var   ~ U(0.5, 2)          running_var
        gamma ~ U(0.5, 1.5)        weight; when NEGATIVE_GAMMA, each channel's
                                   sign is flipped with probability 0.3
        beta  ~ N(0, 0.1)          bias

    gamma and beta are drawn only for affine BNs (others have no weight/bias).
    """
    import torch
    import torch.nn as nn

    for m in model.modules():
        if not isinstance(m, nn.modules.batchnorm._BatchNorm):
            continue
        c = m.num_features
        s = float(torch.empty(1).uniform_(0.1, 0.5, generator=gen))
        with torch.no_grad():
            m.running_mean.copy_(torch.randn(c, generator=gen) * s)
            m.running_var.copy_(torch.empty(c).uniform_(0.5, 2.0, generator=gen))
            if m.affine:
                g = torch.empty(c).uniform_(0.5, 1.5, generator=gen)
                if negative_gamma:
                    g = g * torch.where(torch.rand(c, generator=gen) < 0.3, -1.0, 1.0)
                m.weight.copy_(g)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
    return model


def run_cases(names, fn):
    """Run FN(name) -> (ok, message) for every name in NAMES, printing one
    "PASS name: message" / "FAIL name: message" line each and then
    "N passed, M failed". Returns the process exit code: 1 if any failed, else 0."""
    failed = 0
    for name in names:
        ok, msg = fn(name)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {msg}", flush=True)
        failed += not ok
    print(f"{len(names) - failed} passed, {failed} failed")
    return 1 if failed else 0
