#!/usr/bin/python3
"""What each of qfold's PTQ recoveries wins back (issue 31), on Fashion-MNIST:
docs/ACCURACY.md's "Recovering what PTQ loses" tables (run by scripts/accuracy.sh).

    scripts/recovery_table.py --qfold BIN --root DIR --work DIR [--models bundled,skew,spread]
                              [--adaround-seeds 0,1,2] [--qat-seeds 7,8,9] [--bn-reestimate 4000]
                              [--train 4000] [--test 10000] [--reuse]

Per model, tests/ref/fx_qat.py (PyTorch 1.13) writes the float model (the bundled
CNN's trained weights, `bundled`; with its head's channels scaled apart, `skew`:
--skew 8; with its depthwise-separable blocks' channels spread apart, `spread`:
--spread 8; the float function unchanged), the data (the first --train training
images, 512 calibration images, the first --test test images, normalized) and
PyTorch's FX PTQ and FX QAT of it with the Neutron scheme (QAT: one epoch on the
--train images, SGD momentum 0.5, batch 64, calibration 256, observers and
BatchNorm frozen after 48 steps, lr 3e-4, 1e-4 on `spread`, per seed of
--qat-seeds). Then qfold, neutron target, on the same files:

  quantize   float.onnx --calib calib.npy (512) with each recovery alone, starting
             from plain PTQ (--set equalize=off; bias-correction=off and
             weight-rounding=nearest are the defaults) and from the default
             (equalize=auto), and all together; AdaRound once per --adaround-seeds
             (`quantize --seed`);
  exclusion  the worst-local-SQNR layer kept float: `quantize --max-drop 0
             --max-excluded 1` with the recoveries refused by --set, whose one
             exclusion trial is that layer (its top-1 on the test images printed
             by the trial, counted as `qfold eval` counts it);
  qat        the recipe above, with and without --bn-reestimate N, from plain
             (equalize=off) and from the default;
and `qfold eval` (the integer executor) of every int8 model on the test images.
Prints per model a Markdown table: each cell the top-1 and, where the column's
PTQ loses half a point or more, the share of that gap to float it closes. --reuse keeps an earlier fx_qat.py run
in DIR/MODEL/ref.json (same arguments). Figures only: nothing is checked.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ARGS = None
MODELS = {  # fx_qat.py arguments, QAT learning rate
    "bundled": ([], 0.0003),
    "skew": (["--skew", "8"], 0.0003),
    "spread": (["--spread", "8"], 0.0001),
}
TITLE = {
    "bundled": "the bundled CNN (examples/fashion_mnist)",
    "skew": "the head's channels scaled apart (fx_qat.py --skew 8)",
    "spread": "the depthwise-separable blocks' channels spread apart (fx_qat.py --spread 8)",
}


def run(argv, timeout=3600, expect=(0,)):
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    if p.returncode not in expect:
        sys.exit("`%s` exited %d:\n%s%s" % (" ".join(map(str, argv)), p.returncode, p.stdout[-3000:],
                                            p.stderr[-3000:]))
    return p


def top1(d, model):
    p = run([ARGS.qfold, "eval", model, "--data", os.path.join(d, "test_x.npy"), "--labels",
             os.path.join(d, "test_y.npy"), "--json"])
    return 100 * json.loads(p.stdout)["models"][0]["top1"]


def quantize(d, tag, sets, seed=None):
    out = os.path.join(d, "q_%s.onnx" % tag)
    argv = [ARGS.qfold, "quantize", os.path.join(d, "float.onnx"), "-o", out, "--calib",
            os.path.join(d, "calib.npy"), "--target", "neutron", "--report", out + ".json"]
    for s in sets:
        argv += ["--set", s]
    if seed is not None:
        argv += ["--seed", seed]
    t0 = time.time()
    run(argv)
    dt = time.time() - t0
    r = top1(d, out)
    print("  quantize %-60s %.2f %%  (%.1f s)" % (" ".join(sets) + ("" if seed is None else " seed %s" % seed), r, dt),
          file=sys.stderr)
    return r


TRIAL = re.compile(r"^target trial (\d+): (.*?): int8 top-1 ([\d.]+) %, drop (-?[\d.]+) points: (kept|not kept)$", re.M)


def exclusion(d, tag, sets):
    """The top-1 with the worst-local-SQNR layer float, and that layer."""
    out = os.path.join(d, "q_%s.onnx" % tag)
    argv = [ARGS.qfold, "quantize", os.path.join(d, "float.onnx"), "-o", out, "--calib", os.path.join(d, "calib.npy"),
            "--target", "neutron", "--eval-data", os.path.join(d, "test_x.npy"), "--eval-labels",
            os.path.join(d, "test_y.npy"), "--max-drop", "0", "--max-excluded", "1", "--set", "bias-correction=off",
            "--set", "weight-rounding=nearest"]
    for s in sets:
        argv += ["--set", s]
    p = run(argv, expect=(0, 1))
    ex = [t for t in TRIAL.findall(p.stdout) if t[1].startswith("exclude ")]
    if not ex:
        return None, "none tried"
    print("  %s: %s %s %%" % (tag, ex[0][1], ex[0][2]), file=sys.stderr)
    return float(ex[0][2]), ex[0][1][len("exclude "):]


def qat(d, lr, seed, sets, bn):
    out = os.path.join(d, "qat_%s_%d_%d.onnx" % ("_".join(sets) or "default", seed, bn))
    argv = [ARGS.qfold, "qat", os.path.join(d, "float.onnx"), "-o", out, "--data", os.path.join(d, "train_x.npy"),
            "--labels", os.path.join(d, "train_y.npy"), "--target", "neutron", "--optimizer", "sgd", "--seed", seed,
            "--epochs", 1, "--batch", 64, "--lr", lr, "--momentum", 0.5, "--calib-count", 256,
            "--freeze-observers", 48, "--freeze-bn", 48]
    for s in sets:
        argv += ["--set", s]
    if bn:
        argv += ["--bn-reestimate", bn]
    run(argv)
    r = top1(d, out)
    print("  qat %s seed %d bn-reestimate %d: %.2f %%" % (" ".join(sets), seed, bn, r), file=sys.stderr)
    return r


def mean(v):
    return sum(v) / len(v)


def cell(v, base, f):
    """`88.59 %` (one figure) or `a / b / c: mean %`, and the share of base's gap to f it closes."""
    if v is None:
        return "—"
    vs = v if isinstance(v, list) else [v]
    m = mean(vs)
    s = ("%.2f %%" % m) if len(vs) == 1 else "%s: %.2f %%" % (" / ".join("%.2f" % x for x in vs), m)
    if base is not None and f - base >= 0.5:  # a share of a smaller gap is a few images
        s += " (%+.0f %%)" % (100 * (m - base) / (f - base))
    return s


def one_model(name):
    d = os.path.join(ARGS.work, name)
    os.makedirs(d, exist_ok=True)
    extra, lr = MODELS[name]
    ref_args = ["--state", os.path.join(ARGS.root, "examples", "fashion_mnist", "fashion_cnn.pt"), "--train",
                ARGS.train, "--test", ARGS.test, "--seeds", ARGS.qat_seeds, "--momentum", 0.5, "--calib-count", 256,
                "--freeze-observers", 48, "--freeze-bn", 48, "--lr", lr] + extra
    ref_path = os.path.join(d, "ref.json")
    key = " ".join(map(str, ref_args))
    ref = None
    if ARGS.reuse and os.path.exists(ref_path):
        with open(ref_path) as f:
            ref = json.load(f)
        if ref.get("args", key) != key or not os.path.exists(os.path.join(d, "float.onnx")):
            ref = None
    t0 = time.time()
    if ref is None:
        p = run(["/usr/bin/python3", os.path.join(ARGS.root, "tests", "ref", "fx_qat.py"), "--out", d] + ref_args,
                timeout=7200)
        ref = json.loads(p.stdout.strip().splitlines()[-1])
        ref["args"] = key
        with open(ref_path, "w") as f:
            json.dump(ref, f)
    print("%s: PyTorch %.0f s" % (name, time.time() - t0), file=sys.stderr)
    f = top1(d, os.path.join(d, "float.onnx"))
    seeds = [int(s) for s in ARGS.adaround_seeds.split(",")]
    qseeds = [int(s) for s in ARGS.qat_seeds.split(",")]
    col = {"plain": ["equalize=off"], "default": []}
    rows = []  # (label, plain value, default value)
    base = {k: quantize(d, k, v) for k, v in col.items()}
    rows.append(("nothing (plain PTQ: `--set equalize=off`; the default: `equalize=auto`)", base["plain"],
                 base["default"]))
    rows.append(("`equalize=auto` (the default's only recovery)", quantize(d, "eq_auto", ["equalize=auto"]), None))
    rows.append(("`equalize=all`", quantize(d, "eq_all", ["equalize=all"]), None))
    for rule in ("bias-correction=empirical", "bias-correction=analytical"):
        tag = rule.split("=")[1]
        rows.append(("`%s`" % rule, quantize(d, "plain_" + tag, col["plain"] + [rule]),
                     quantize(d, "default_" + tag, [rule])))
    ada = ["weight-rounding=adaround"]
    rows.append(("`weight-rounding=adaround` (`--seed` %s)" % " / ".join(map(str, seeds)),
                 [quantize(d, "plain_ada%d" % s, col["plain"] + ada, s) for s in seeds],
                 [quantize(d, "default_ada%d" % s, ada, s) for s in seeds]))
    xp, lp = exclusion(d, "plain_excl", col["plain"])
    xd, ld = exclusion(d, "default_excl", [])
    rows.append(("the worst-local-SQNR layer kept float (plain: `%s`; default: `%s`)" % (lp, ld), xp, xd))
    allr = ["bias-correction=empirical", "weight-rounding=adaround"]
    rows.append(("empirical bias correction + AdaRound (`--seed` %d)" % seeds[0],
                 quantize(d, "plain_all", col["plain"] + allr, seeds[0]), quantize(d, "default_all", allr, seeds[0])))
    rows.append(("all together: `equalize=all` + empirical + AdaRound (`--seed` %d)" % seeds[0],
                 quantize(d, "all_all", ["equalize=all"] + allr, seeds[0]), None))
    qrows = []
    for bn in (0, ARGS.bn_reestimate):
        qrows.append(("qfold qat%s (seeds %s)" % (" `--bn-reestimate %d`" % bn if bn else "", ARGS.qat_seeds),
                      [qat(d, lr, s, col["plain"], bn) for s in qseeds], [qat(d, lr, s, [], bn) for s in qseeds]))
    tq = [r["int8_top1"] * 100 for r in ref["qat"]]
    print()
    print("**%s**: float %.2f %% (PyTorch: %.2f %%), PyTorch FX PTQ %.2f %%, PyTorch FX QAT %s (seeds %s, "
          "lr %g); %d test images" % (TITLE[name], f, 100 * ref["float_top1"], 100 * ref["ptq_top1"],
                                      cell(tq, 100 * ref["ptq_top1"], f), ARGS.qat_seeds, lr, ref["test"]))
    print()
    print("| qfold, neutron | from plain PTQ | from the default |")
    print("| --- | --- | --- |")
    for label, p, dv in rows + qrows:
        print("| %s | %s | %s |" % (label, cell(p, base["plain"], f), cell(dv, base["default"], f)))
    sys.stdout.flush()


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qfold", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="bundled,skew,spread")
    ap.add_argument("--adaround-seeds", default="0,1,2")
    ap.add_argument("--qat-seeds", default="7,8,9")
    ap.add_argument("--bn-reestimate", type=int, default=4000)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=10000)
    ap.add_argument("--reuse", action="store_true")
    ARGS = ap.parse_args()
    for k in ("qfold", "root", "work"):
        setattr(ARGS, k, os.path.abspath(getattr(ARGS, k)))
    print("Cells: int8 top-1 (and the share of the column's PTQ gap to float it closes).")
    for m in ARGS.models.split(","):
        one_model(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
