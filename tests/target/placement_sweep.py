#!/usr/bin/python3
"""Where the torchvision models and the bundled examples run on the Neutron
NPU: `qfold check` on each, a Markdown table of the placements.

    placement_sweep.py QFOLD [--work DIR] [--out FILE] [--flows sdk3,sdk2]
                       [--examples-only] [--timeout S] [MODEL ...]

For each model (default: the bundled examples, examples/tiny_cnn.onnx and
examples/fashion_mnist/fashion_cnn.onnx, then every torchvision model of
tests/ref/arch_sweep.py's SWEEP, built as that script builds them: weights
random, BN statistics randomized, exported with BN kept; --examples-only:
the examples alone; MODEL ...: those, by name) and each rule generation of
--flows, it runs

    qfold check MODEL.onnx --target neutron --set neutron-flow=FLOW --json R.json

on the float model (checked as `quantize --target neutron` would quantize
it) and reads the report: NPU nodes of all, the NPU's share of the MACs,
partitions, NPU <-> CPU transitions, and every CPU node grouped by the rule
that put it there, with the fixes `check` proposes.

The check: every CPU node carries a rule (a non-empty text saying why); a
node on the CPU without one, NPU <-> CPU transitions with no node listed on
the CPU (a CPU placement the node list hides), node counts that disagree
with the summary, a report without the keys the format promises, or `check`
failing on a model is a problem. The table (--out, default
stdout) lists them too. Exit status 1 when any problem was found, else 0; a
model torch itself cannot build or export is listed as skipped (not
qfold's business, as in arch_sweep.py).

`make placement` runs the full sweep and writes docs/NEUTRON_PLACEMENT.md
(not part of `make test`: the torchvision models take minutes); ctest runs
the bundled examples only (tests/target/report.cmake). The torch side goes
through tests/ref/refcache.py (QF_REF_CACHE: computed once, then reused).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.realpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))

EXAMPLES = {
    "tiny_cnn (example)": os.path.join(ROOT, "examples", "tiny_cnn.onnx"),
    "fashion_cnn (example)": os.path.join(ROOT, "examples", "fashion_mnist", "fashion_cnn.onnx"),
}
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
FLOW_NAMES = {"sdk3": "eIQ Neutron SDK 3.x (ExecuTorch HEAD)", "sdk2": "Neutron SW 2.x (ExecuTorch v1.3.0)"}


def md(text):
    """text as a Markdown table cell: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def check_model(qfold, path, flow, work, timeout):
    """Run `qfold check` on path; returns (report dict, None) or (None, error)."""
    out = os.path.join(work, "check.%s.%d.json" % (flow, os.getpid()))
    if os.path.exists(out):
        os.remove(out)
    cmd = [qfold, "check", path, "--target", "neutron", "--set", "neutron-flow=" + flow, "--json", out]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "`qfold check` did not finish within %g s" % timeout
    if p.returncode != 0:
        lines = [ln for ln in (p.stderr or p.stdout).splitlines() if ln.strip()]
        return None, "`qfold check` exited %d: %s" % (p.returncode, lines[0] if lines else "(no message)")
    try:
        with open(out) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        return None, "the --json report cannot be read: %s" % e
    os.remove(out)
    return rep, None


def summarize(rep):
    """The row of one report, and its problems (a list of texts)."""
    problems = []
    for key in ("target", "nodes", "partitions", "summary"):
        if key not in rep:
            problems.append("the report has no %r" % key)
    if problems:
        return None, problems
    s = rep["summary"]
    for key in ("npu_nodes", "cpu_nodes", "npu_mac_fraction", "transitions"):
        if key not in s:
            problems.append("the report's summary has no %r" % key)
    if problems:
        return None, problems
    groups = {}  # rule -> {"nodes": [...], "fixes": [...]}
    order = []
    npu = cpu = 0
    for n in rep["nodes"]:
        place = n.get("placement")
        if place not in ("npu", "cpu"):
            problems.append("node %r: placement %r is neither npu nor cpu" % (n.get("name"), place))
            continue
        if n.get("qdq", n.get("op") in QDQ_OPS):
            continue  # placed with the node it quantizes; not counted (as the summary)
        if place == "npu":
            npu += 1
            continue
        cpu += 1
        rule = n.get("rule")
        if not isinstance(rule, str) or not rule.strip():
            problems.append("node %r (%s) is on the CPU with no rule" % (n.get("name"), n.get("op")))
            rule = "(no rule)"
        # One group per rule, whatever node names and numbers it quotes
        # ("runs with Conv '/layer1/conv' (on the CPU: ...)" is one rule for
        # every node fused into a refused conv, "Concat input 1 has scale
        # 0.0149 ..." one for every such Concat); the group shows the first
        # node's text and says when the numbers differ.
        key = re.sub(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", unnamed(rule))
        if key not in groups:
            groups[key] = {"rule": rule, "texts": set(), "nodes": [], "fixes": []}
            order.append(key)
        gr = groups[key]
        gr["texts"].add(rule)
        gr["nodes"].append("%s (%s)" % (n.get("name"), n.get("op")))
        fix = unnamed(n.get("fix") or "")
        if fix and fix not in gr["fixes"] and len(gr["fixes"]) < 3:
            gr["fixes"].append(fix)
    # A transition is an edge between an NPU node and a CPU one: with no CPU
    # node listed, the CPU placements are in nodes the list does not show
    # (ones qfold's passes made), and so unexplained.
    if cpu == 0 and s["transitions"] > 0:
        problems.append("%d NPU <-> CPU transitions but no node listed on the CPU: the CPU placements are "
                        "in nodes the report does not list" % s["transitions"])
    if (npu, cpu) != (s["npu_nodes"], s["cpu_nodes"]):
        problems.append("the nodes list %d NPU / %d CPU compute nodes, the summary %d / %d"
                        % (npu, cpu, s["npu_nodes"], s["cpu_nodes"]))
    row = {
        "npu": s["npu_nodes"], "all": s["npu_nodes"] + s["cpu_nodes"], "macs": s["npu_mac_fraction"],
        "partitions": len(rep["partitions"]), "transitions": s["transitions"],
        "groups": [(group_title(groups[k]), groups[k]) for k in order],
    }
    return row, problems


def unnamed(text):
    """text with the node names it quotes left out."""
    return re.sub(r"'[^']*'", "'…'", text)


def group_title(g):
    """The rule text of a group: the text itself when every node has it, the
    text without node names when only those differ, else the first text and
    how many others (other numbers) the group holds."""
    if len(g["texts"]) == 1:
        return g["rule"]
    forms = {unnamed(t) for t in g["texts"]}
    if len(forms) == 1:
        return unnamed(g["rule"])
    return "%s (and %d more with other numbers)" % (unnamed(g["rule"]), len(forms) - 1)


def build_torchvision(name, work):
    """(path, None), or (None, why) when torch cannot build or export it."""
    import arch_sweep
    try:
        path, _, _ = arch_sweep.build(name, work, arch_sweep.OPSET)
    except arch_sweep.ExportFailed as e:
        return None, "torch cannot export it: %s" % e
    return path, None


def write_table(f, results, flows):
    f.write("# Where the models run on the Neutron NPU\n\n")
    f.write("Written by `make placement` (tests/target/placement_sweep.py): `qfold check --target neutron` on "
            "the bundled examples and the torchvision models of tests/ref/arch_sweep.py (random weights, BN "
            "kept, float models checked as `quantize --target neutron` would quantize them), Neutron-C with "
            "8 MACs per pipe and 8 pipes (the i.MX RT700), for each rule generation: %s.\n\n"
            % "; ".join("`%s` %s" % (fl, FLOW_NAMES[fl]) for fl in flows))
    f.write("NPU ops: compute nodes placed on the NPU of all compute nodes (Quantize / DequantizeLinear not "
            "counted). MACs: the NPU's share of the multiply-accumulates. Partitions: the contiguous NPU "
            "subgraphs ExecuTorch's partitioner would delegate. Transitions: NPU <-> CPU edges.\n\n")
    f.write("| model | flow | NPU ops / all | NPU MAC share | partitions | transitions | CPU nodes |\n")
    f.write("| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
    for name, flow, row, why in results:
        if row is None:
            f.write("| %s | %s | - | - | - | - | %s |\n" % (md(name), flow, md(why)))
            continue
        ncpu = row["all"] - row["npu"]
        f.write("| %s | %s | %d / %d | %.1f %% | %d | %d | %s |\n"
                % (md(name), flow, row["npu"], row["all"], 100.0 * row["macs"], row["partitions"],
                   row["transitions"], "none" if not ncpu else "%d, %d rule%s (below)"
                   % (ncpu, len(row["groups"]), "" if len(row["groups"]) == 1 else "s")))
    f.write("\n## The CPU nodes, by the rule that put them there\n")
    for name, flow, row, why in results:
        if row is None or not row["groups"]:
            continue
        f.write("\n### %s, %s\n\n" % (name, flow))
        f.write("| rule | fix | nodes |\n| --- | --- | --- |\n")
        for rule, g in row["groups"]:
            f.write("| %s | %s | %s |\n" % (md(rule), md("; ".join(g["fixes"]) or "-"),
                                            md(", ".join(g["nodes"]))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("qfold")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "qfold-placement-sweep"))
    ap.add_argument("--out", default=None, help="the Markdown table (default: stdout)")
    ap.add_argument("--flows", default="sdk3,sdk2")
    ap.add_argument("--examples-only", action="store_true")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    flows = [f for f in args.flows.split(",") if f]
    for fl in flows:
        if fl not in FLOW_NAMES:
            ap.error("unknown flow %r (sdk3, sdk2)" % fl)
    os.makedirs(args.work, exist_ok=True)
    qfold = os.path.abspath(args.qfold)
    if args.models:
        names = args.models
    else:
        names = list(EXAMPLES)
        if not args.examples_only:
            import arch_sweep
            names += list(arch_sweep.SWEEP)

    results, problems, skipped = [], [], 0
    for name in names:
        t0 = time.time()
        if name in EXAMPLES:
            path, why = EXAMPLES[name], None
        elif os.path.exists(name):
            path, why = os.path.abspath(name), None
        else:
            path, why = build_torchvision(name, args.work)
        if path is None:
            skipped += 1
            for fl in flows:
                results.append((name, fl, None, "skipped: " + why))
            print("%-24s SKIP %s" % (name, why), file=sys.stderr, flush=True)
            continue
        for fl in flows:
            rep, err = check_model(qfold, path, fl, args.work, args.timeout)
            row, probs = (None, [err]) if rep is None else summarize(rep)
            for p in probs:
                problems.append("%s (%s): %s" % (name, fl, p))
            results.append((name, fl, row, "; ".join(probs) if row is None else None))
            state = "ok" if not probs else "PROBLEM " + "; ".join(probs[:3])
            print("%-24s %s %s (%.0f s)" % (name, fl, state, time.time() - t0), file=sys.stderr, flush=True)
        if path.startswith(args.work) and os.path.exists(path):
            os.remove(path)

    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            write_table(f, results, flows)
            if problems:
                f.write("\n## Problems\n\n" + "".join("- %s\n" % md(p) for p in problems))
        os.replace(tmp, args.out)
    else:
        write_table(sys.stdout, results, flows)
        if problems:
            sys.stdout.write("\n## Problems\n\n" + "".join("- %s\n" % md(p) for p in problems))
    for p in problems:
        print("PROBLEM " + p, file=sys.stderr)
    print("%d models, %d skipped (torch cannot export them), %d problems"
          % (len(names), skipped, len(problems)), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
