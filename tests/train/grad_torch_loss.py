"""The loss ops vs PyTorch 1.13: SoftmaxCrossEntropyLoss against
torch.nn.functional.cross_entropy (reductions mean / sum / none, class
weights, ignore_index, [N, C] and [N, C, d1, d2]; the log_prob output against
log_softmax, its gradient too) through qf_node_grad, and mse_loss against
torch.nn.functional.mse_loss through qf_mse_grad. Loss, log_prob and the
gradients within 1e-5 relative (tests/tools/grad_util.py says how relative)."""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import refcache  # noqa: E402


# torch's side of the cases, through tests/ref/refcache.py (computed once per
# `make test`; a hit imports no torch).

def ce_torch(x, y, w, reduction, ignore_index, dl, dlp):
    """nll_loss(log_softmax(x)) and its gradients for upstream DL (and DLP on
    the log-probabilities when given); whether cross_entropy agrees."""
    import torch
    import torch.nn.functional as F
    xt = torch.tensor(x, requires_grad=True)
    lp = F.log_softmax(xt, dim=1)
    loss = F.nll_loss(lp, torch.tensor(y), weight=None if w is None else torch.tensor(w),
                      ignore_index=-100 if ignore_index is None else ignore_index, reduction=reduction)
    # the same loss through cross_entropy, the function the trainer matches
    ce = F.cross_entropy(torch.tensor(x), torch.tensor(y), weight=None if w is None else torch.tensor(w),
                         ignore_index=-100 if ignore_index is None else ignore_index, reduction=reduction)
    same = bool(torch.allclose(ce, loss, rtol=1e-6, atol=1e-7))
    tensors, grads = [loss], [torch.tensor(dl)]
    if dlp is not None:
        tensors.append(lp)
        grads.append(torch.tensor(dlp))
    torch.autograd.backward(tensors, grads)
    return same, loss.detach().numpy(), xt.grad.numpy(), lp.detach().numpy()


def mse_torch(p, t, dl, reduction):
    import torch
    import torch.nn.functional as F
    pt, tt = torch.tensor(p, requires_grad=True), torch.tensor(t, requires_grad=True)
    loss = F.mse_loss(pt, tt, reduction=reduction)
    loss.backward(torch.tensor(dl))
    return loss.detach().numpy(), pt.grad.numpy(), tt.grad.numpy()


def ce_case(args, name, x, y, w, reduction, ignore_index=None, log_prob=False, seed=0):
    rng = np.random.default_rng(seed)
    lshape = () if reduction != "none" else y.shape
    dl = rng.uniform(-1, 1, lshape).astype(np.float32)
    dlp = rng.uniform(-1, 1, x.shape).astype(np.float32) if log_prob else None
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    inputs = [x, y] + ([w] if w is not None else [])
    model = gu.one_node("SoftmaxCrossEntropyLoss", inputs, attrs=attrs, opset=13, noutputs=2 if log_prob else 1)
    douts = [dl] + ([dlp] if log_prob else [])
    outs, dins, _ = gu.qfold_grad(args.tool, model, inputs, douts, os.path.join(args.work, name), training=True)

    same, loss, dscores, lp = refcache.call(ce_torch, x, y, w, reduction, ignore_index, dl, dlp)
    assert same
    checks = [gu.compare(name + " loss", outs[0], loss),
              gu.compare(name + " dscores", dins[0], dscores)]
    if log_prob:
        checks.append(gu.compare(name + " log_prob", outs[1], lp))
    for _, line in checks:
        print(line)
    return all(ok for ok, _ in checks)


def mse_case(args, name, shape, reduction, seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(-2, 2, shape).astype(np.float32)
    t = rng.uniform(-2, 2, shape).astype(np.float32)
    dl = np.float32(rng.uniform(0.5, 2.0))
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    files = []
    for k, a in (("p", p), ("t", t), ("dl", np.array(dl, dtype=np.float32))):
        files.append(os.path.join(work, k + ".npy"))
        np.save(files[-1], a)
    r = subprocess.run([args.mse_tool, work, reduction] + files, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        print("%s: qf_mse_grad failed: %s" % (name, r.stderr.strip()))
        return False
    loss, dpred, dtarget = refcache.call(mse_torch, p, t, dl, reduction)
    checks = [gu.compare(name + " loss", np.load(os.path.join(work, "out_0.npy")), loss),
              gu.compare(name + " dpred", np.load(os.path.join(work, "din_0.npy")), dpred),
              gu.compare(name + " dtarget", np.load(os.path.join(work, "din_1.npy")), dtarget)]
    for _, line in checks:
        print(line)
    return all(ok for ok, _ in checks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--mse-tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    x2 = rng.uniform(-4, 4, (9, 7)).astype(np.float32)
    y2 = rng.integers(0, 7, (9,)).astype(np.int64)
    w = rng.uniform(0.2, 2.0, (7,)).astype(np.float32)
    y2i = y2.copy()
    y2i[[1, 4]] = 3
    x4 = rng.uniform(-4, 4, (3, 5, 2, 3)).astype(np.float32)
    y4 = rng.integers(0, 5, (3, 2, 3)).astype(np.int64)
    y4[0, 1, 2] = -1
    y4[2, 0, 0] = -1
    ok = True
    for red in ("mean", "sum", "none"):
        ok &= ce_case(args, "ce_%s" % red, x2, y2, None, red, seed=1)
        ok &= ce_case(args, "ce_%s_weight" % red, x2, y2, w, red, seed=2)
        ok &= ce_case(args, "ce_%s_weight_ii" % red, x2, y2i, w, red, ignore_index=3, seed=3)
        ok &= ce_case(args, "ce_%s_4d_ii" % red, x4, y4, w[:5].copy(), red, ignore_index=-1, seed=4)
    ok &= ce_case(args, "ce_mean_logprob", x2, y2i, w, "mean", ignore_index=3, log_prob=True, seed=5)
    ok &= ce_case(args, "ce_none_4d_logprob", x4, y4, None, "none", ignore_index=-1, log_prob=True, seed=6)
    for red in ("mean", "sum"):
        ok &= mse_case(args, "mse_%s" % red, (4, 3, 5), red, seed=8)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
