"""Optimizers, schedules and clipping vs PyTorch 1.13: the same parameters
and the same 20-step gradient sequences through qfold (the qf_optim_run
driver: qf_optim_step, qf_schedule_lr, qf_clip_grad_norm) and through
torch.optim.SGD / Adam / AdamW, torch.optim.lr_scheduler and
torch.nn.utils.clip_grad_norm_. Parameters within 1e-6 relative after every
step (tests/tools/grad_util.py says how relative); learning rates within
1e-12 relative over 100 steps."""
import argparse
import os
import subprocess
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import grad_util as gu  # noqa: E402

warnings.filterwarnings("ignore")
SHAPES = [(5, 3), (7,), (2, 3, 2, 2)]


def qfold_run(args, name, params, grads, opts):
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    for f in os.listdir(work):
        os.remove(os.path.join(work, f))
    for i, p in enumerate(params):
        np.save(os.path.join(work, "p_%d.npy" % i), p)
    for s, gs in enumerate(grads):
        for i, g in enumerate(gs):
            if g is not None:
                np.save(os.path.join(work, "g_%d_%d.npy" % (s, i)), g)
    argv = [args.tool, work, "--nparams", str(len(params)), "--steps", str(len(grads))]
    for k, v in opts.items():
        argv += ["--" + k] if v is True else ["--" + k, str(v)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("qf_optim_run failed: " + r.stderr.strip())
    qs = [[np.load(os.path.join(work, "q_%d_%d.npy" % (s, i))) for i in range(len(params))]
          for s in range(len(grads))]
    return qs, np.load(os.path.join(work, "lr.npy")), np.load(os.path.join(work, "norm.npy"))


def torch_run(params, grads, make_opt, make_sched=None, clip=0.0):
    ps = [torch.nn.Parameter(torch.tensor(p)) for p in params]
    opt = make_opt(ps)
    sched = make_sched(opt) if make_sched else None
    out, lrs, norms = [], [], []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = None if g is None else torch.tensor(g)
        norms.append(float(torch.nn.utils.clip_grad_norm_([p for p in ps if p.grad is not None], clip))
                     if clip > 0 else 0.0)
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out, np.array(lrs), np.array(norms)


def data(seed, steps=20, frozen=False):
    rng = np.random.default_rng(seed)
    params = [rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES]
    grads = [[rng.normal(0, 0.5, s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
    if frozen:  # parameter 1 has no gradient at steps 0-2 and 7 (its state starts late)
        for s in (0, 1, 2, 7):
            grads[s][1] = None
    return params, grads


def compare_run(name, q, t, rtol=1e-6):
    ok = True
    worst = (0.0, "")
    for s, (qs, ts) in enumerate(zip(q, t)):
        for i, (a, b) in enumerate(zip(qs, ts)):
            good, line = gu.compare("%s step %d param %d" % (name, s + 1, i), a, b, rtol=rtol)
            err = float(np.max(np.abs(a.astype(np.float64) - b)))
            if err >= worst[0]:
                worst = (err, line)
            if not good:
                print(line)
                ok = False
    print("%s: worst %s" % (name, worst[1]))
    return ok


def optim_case(args, name, opts, make_opt, seed, clip=0.0, frozen=False):
    params, grads = data(seed, frozen=frozen)
    if clip:
        opts = dict(opts, clip=clip)
    q, _, qn = qfold_run(args, name, params, grads, opts)
    t, _, tn = torch_run(params, grads, make_opt, clip=clip)
    ok = compare_run(name, q, t)
    if clip:
        good, line = gu.compare(name + " norms", qn, tn, rtol=1e-6)
        print(line)
        ok &= good
    return ok


def sched_case(args, name, opts, make_sched, lr, steps=100):
    params = [np.zeros(3, np.float32)]
    grads = [[np.zeros(3, np.float32)] for _ in range(steps)]
    _, ql, _ = qfold_run(args, name, params, grads, dict(opts, lr=lr))
    _, tl, _ = torch_run(params, grads, lambda ps: torch.optim.SGD(ps, lr=lr), make_sched)
    rel = np.abs(ql - tl) / np.maximum(np.abs(tl), 1e-300)
    rel[(ql == 0) & (tl == 0)] = 0.0
    ok = bool(np.all(rel <= 1e-12))
    print("%s: max relative |qfold - torch| lr = %.3g over %d steps (bound 1e-12)%s" %
          (name, float(np.max(rel)), steps, "" if ok else "  FAIL"))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    ok = True
    O = torch.optim
    ok &= optim_case(args, "sgd", {"optim": "sgd", "lr": 0.1}, lambda ps: O.SGD(ps, lr=0.1), 1)
    ok &= optim_case(args, "sgd_momentum_wd", {"optim": "sgd", "lr": 0.05, "momentum": 0.9, "wd": 5e-4},
                     lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4), 2)
    ok &= optim_case(args, "sgd_nesterov_wd", {"optim": "sgd", "lr": 0.05, "momentum": 0.9, "wd": 5e-4, "nesterov": True},
                     lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True), 3)
    ok &= optim_case(args, "sgd_dampening", {"optim": "sgd", "lr": 0.05, "momentum": 0.9, "dampening": 0.3},
                     lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, dampening=0.3), 4, frozen=True)
    ok &= optim_case(args, "adam", {"optim": "adam", "lr": 1e-3}, lambda ps: O.Adam(ps, lr=1e-3), 5)
    ok &= optim_case(args, "adam_wd_betas", {"optim": "adam", "lr": 3e-3, "wd": 1e-2, "beta1": 0.8, "beta2": 0.99,
                                             "eps": 1e-6},
                     lambda ps: O.Adam(ps, lr=3e-3, weight_decay=1e-2, betas=(0.8, 0.99), eps=1e-6), 6, frozen=True)
    ok &= optim_case(args, "adamw", {"optim": "adamw", "lr": 1e-3, "wd": 1e-2},
                     lambda ps: O.AdamW(ps, lr=1e-3, weight_decay=1e-2), 7)
    ok &= optim_case(args, "adamw_frozen", {"optim": "adamw", "lr": 1e-2, "wd": 1e-2},
                     lambda ps: O.AdamW(ps, lr=1e-2, weight_decay=1e-2), 8, frozen=True)
    ok &= optim_case(args, "sgd_momentum_clip", {"optim": "sgd", "lr": 0.05, "momentum": 0.9},
                     lambda ps: O.SGD(ps, lr=0.05, momentum=0.9), 9, clip=2.0)
    ok &= optim_case(args, "adam_clip", {"optim": "adam", "lr": 1e-3}, lambda ps: O.Adam(ps, lr=1e-3), 10, clip=1.5)

    S = torch.optim.lr_scheduler
    ok &= sched_case(args, "steplr", {"sched": "step", "step-size": 7, "gamma": 0.5},
                     lambda o: S.StepLR(o, step_size=7, gamma=0.5), 0.1)
    ok &= sched_case(args, "steplr_default_gamma", {"sched": "step", "step-size": 30},
                     lambda o: S.StepLR(o, step_size=30), 0.1)
    ok &= sched_case(args, "cosine", {"sched": "cosine", "total": 100},
                     lambda o: S.CosineAnnealingLR(o, T_max=100), 0.05)
    ok &= sched_case(args, "cosine_eta_min", {"sched": "cosine", "total": 100, "min-lr": 1e-4},
                     lambda o: S.CosineAnnealingLR(o, T_max=100, eta_min=1e-4), 0.05)
    ok &= sched_case(args, "cosine_past_tmax", {"sched": "cosine", "total": 40, "min-lr": 1e-3},
                     lambda o: S.CosineAnnealingLR(o, T_max=40, eta_min=1e-3), 0.05)
    # warm-up: torch's LinearLR from 1/W over W - 1 steps, then the schedule
    ok &= sched_case(args, "warmup_constant", {"sched": "constant", "warmup": 5},
                     lambda o: S.LinearLR(o, start_factor=1 / 5, total_iters=4), 0.1)
    ok &= sched_case(args, "warmup_cosine", {"sched": "cosine", "warmup": 5, "total": 95},
                     lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=1 / 5, total_iters=4),
                                                  S.CosineAnnealingLR(o, T_max=95)], milestones=[5]), 0.1)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
