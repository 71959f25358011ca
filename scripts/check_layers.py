#!/usr/bin/python3
"""Check that every #include "..." in the library follows the layer order.

    scripts/check_layers.py [ROOT]      scan ROOT/src and ROOT/include/qfold
    scripts/check_layers.py --self-test build a fake tree with violations and
                                        check that they are all reported

The order (docs/ARCHITECTURE.md, "Layers"):

    core < ir < ops < exec < passes < {quant, train} < io < tflite < cli

A file may include headers of its own layer and of the layers below it.
quant and train sit side by side: neither includes the other (the `qat`
command in cli composes them). A file's layer is its directory under src/;
a public header include/qfold/<topic>.h has the layer of its topic (PUBLIC
below). A header under src/<layer>/ is private to its layer: only files of
that layer may include it, unless the layer shares it upward (SHARED below:
core's arena / string builder / thread pool / page discard, and the op table that the
executor and the importer read). Includes that resolve to no file of the
tree (generated protobuf code, system headers in quotes) are not checked.

Exit status 0 when every include is allowed, 1 otherwise (every offending
include is listed), 2 on a usage error.
"""
import os
import re
import sys
import tempfile

LAYERS = ["core", "ir", "ops", "exec", "passes", "quant", "train", "io", "tflite", "cli"]
# quant and train have the same rank: neither may include the other.
RANK = {"core": 0, "ir": 1, "ops": 2, "exec": 3, "passes": 4, "quant": 5, "train": 5, "io": 6, "tflite": 7, "cli": 8}
SIDE_BY_SIDE = {"quant", "train"}

# include/qfold/<topic>.h -> layer
PUBLIC = {
    "status.h": "core",
    "tensor.h": "core",
    "graph.h": "ir",
    "op.h": "ir",
    "schema.h": "ir",
    "exec.h": "exec",
    "pass.h": "passes",
    "quant.h": "quant",
    "train.h": "train",
    "qat.h": "train",
    "io.h": "io",
    "tflite.h": "tflite",
}

# Private headers (paths under src/) that their layer shares with the layers
# above it. Every other header under src/<layer>/ is for that layer only.
SHARED = {
    # notes a graph carries for its file format (the ONNX importer / exporter keep
    # doc strings, metadata, value_info there)
    "ir/graph_notes.h",
    # problems found at import, collected for `qfold inspect`
    "io/onnx_problems.h",
    "core/arena.h",
    "core/strbuf.h",
    "core/parallel.h",
    # the one monotonic clock (pass times, calibration, training, the CLI's summaries)
    "core/clock.h",
    # pages handed back: the graph discards a removed weight's slice of its model buffer
    "core/mem.h",
    # float16 / bfloat16 conversions: the Cast kernel, ONNX import / export, .npy
    "core/half.h",
    "ops/op_table.h",
    # the quantization arithmetic the quant layer shares with the int8 kernels
    "ops/quant_math.h",
    "ops/requant.h",
    "ops/fixed_point.h",
    # the backend choice (engine, threads) the executor exposes
    "ops/dnnl.h",
    # graph-rewrite helpers: every rewrite uses them (quant's convert too)
    "passes/rewrite.h",
    # the BatchNorm math (checks, s and shift in double, diagnostics): the fold of a
    # PyTorch-exported QAT model (quant/qat_fold_exported.c) folds BN with it too
    "passes/bn_math.h",
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel):
    """Layer of a file given by its path relative to the root, or None."""
    parts = rel.split("/")
    if len(parts) == 3 and parts[0] == "include" and parts[1] == "qfold":
        return PUBLIC.get(parts[2], "?")
    if len(parts) >= 3 and parts[0] == "src":
        return parts[1] if parts[1] in RANK else "?"
    return None


def resolve(root, rel, name):
    """Path (relative to root) an include of `name` in file `rel` reads, as
    the compiler would: the includer's directory, then src/ and include/."""
    for base in (os.path.dirname(rel), "src", "include"):
        cand = os.path.normpath(os.path.join(base, name))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand.replace(os.sep, "/")
    return None


def sources(root):
    for top, exts in (("src", (".c", ".h", ".cc")), (os.path.join("include", "qfold"), (".h",))):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(exts):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def why_not(src_layer, dst, dst_layer):
    """None when a file of src_layer may include dst, else the reason."""
    if dst_layer == "?":
        return "'%s' belongs to no known layer (add it to PUBLIC or LAYERS in scripts/check_layers.py)" % dst
    if src_layer == dst_layer:
        return None
    if src_layer in SIDE_BY_SIDE and dst_layer in SIDE_BY_SIDE:
        return "%s and %s never include each other (the cli composes them)" % (src_layer, dst_layer)
    if RANK[dst_layer] > RANK[src_layer]:
        return "%s is below %s: a layer includes only itself and the layers below it" % (src_layer, dst_layer)
    if dst.startswith("src/") and dst[4:] not in SHARED:
        return "'%s' is private to layer %s (a header %s shares upward is listed in SHARED in " \
               "scripts/check_layers.py; otherwise use the public API)" % (dst, dst_layer, dst_layer)
    return None


def check(root):
    """List of (file, line, include, reason) for every include against the order."""
    bad = []
    for rel in sources(root):
        src_layer = layer_of(rel)
        if src_layer == "?":
            bad.append((rel, 0, "", "file belongs to no known layer (directories: %s)" % ", ".join(LAYERS)))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for m in INCLUDE_RE.finditer(text):
            dst = resolve(root, rel, m.group(1))
            if dst is None:
                continue  # generated (onnx.pb-c.h) or outside the tree
            dst_layer = layer_of(dst)
            if dst_layer is None:
                continue
            reason = why_not(src_layer, dst, dst_layer)
            if reason:
                line = text.count("\n", 0, m.start()) + 1
                bad.append((rel, line, m.group(1), "%s (%s) includes %s (%s): %s" %
                            (rel, src_layer, dst, dst_layer, reason)))
    return bad


def report(root):
    bad = check(root)
    if not bad:
        print("layers: every include follows core < ir < ops < exec < passes < {quant, train} < io < tflite < cli")
        return 0
    print("layers: %d include%s against the order core < ir < ops < exec < passes < {quant, train} < io < tflite < cli:"
          % (len(bad), "" if len(bad) == 1 else "s"))
    for rel, line, inc, reason in bad:
        print('  %s:%d: #include "%s"\n      %s' % (rel, line, inc, reason))
    return 1


def self_test():
    """A fake tree with one allowed include of each kind and one violation of
    each kind: check() must report exactly the violations."""
    files = {
        "include/qfold/status.h": "",
        "include/qfold/graph.h": '#include "qfold/status.h"\n',
        "include/qfold/exec.h": '#include "qfold/graph.h"\n',
        "include/qfold/pass.h": '#include "qfold/graph.h"\n#include "qfold/io.h"\n',       # up: bad
        "include/qfold/io.h": '#include "qfold/pass.h"\n',
        "src/core/arena.h": "",
        "src/core/alloc.c": '#include "arena.h"\n#include "qfold/status.h"\n',
        "src/ir/graph_impl.h": '#include "../core/arena.h"\n',
        "src/ir/graph.c": '#include "graph_impl.h"\n#include "qfold/graph.h"\n',
        "src/ir/order.c": '#include "../ops/op_table.h"\n',                                  # up: bad
        "src/ops/op_table.h": '#include "qfold/graph.h"\n',
        "src/ops/kernels.h": "",
        "src/exec/plan.c": '#include "../ops/op_table.h"\n#include "qfold/exec.h"\n',
        "src/exec/fold.c": '#include "../ir/graph_impl.h"\n',                                 # private: bad
        "src/exec/run.c": '#include "../ops/kernels.h"\n',                                    # private: bad
        "src/passes/dce.c": '#include "qfold/pass.h"\n#include "core/arena.h"\n',
        "src/quant/observe.c": '#include "../train/sgd.h"\n#include "qfold/pass.h"\n',       # side: bad
        "src/train/sgd.h": "",
        "src/train/loop.c": '#include "sgd.h"\n#include "qfold/quant.h"\n',                  # side: bad
        "include/qfold/quant.h": "",
        "src/io/onnx.c": '#include "onnx.pb-c.h"\n#include "qfold/io.h"\n#include "../cli/cli.h"\n',  # up: bad
        "src/cli/cli.h": '#include "qfold/io.h"\n#include "qfold/exec.h"\n',
        "src/cli/main.c": '#include "cli.h"\n#include "core/arena.h"\n#include "../passes/bn.h"\n',  # private: bad
        "src/passes/bn.h": "",
        "src/extra/x.c": "",                                                                  # unknown layer
    }
    expect = {
        ("include/qfold/pass.h", "qfold/io.h"),
        ("src/ir/order.c", "../ops/op_table.h"),
        ("src/exec/fold.c", "../ir/graph_impl.h"),
        ("src/exec/run.c", "../ops/kernels.h"),
        ("src/quant/observe.c", "../train/sgd.h"),
        ("src/train/loop.c", "qfold/quant.h"),
        ("src/io/onnx.c", "../cli/cli.h"),
        ("src/cli/main.c", "../passes/bn.h"),
        ("src/extra/x.c", ""),
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        got = {(rel, inc) for rel, _, inc, _ in check(root)}
        ok = True
        for miss in sorted(expect - got):
            print("self-test: FAIL: not reported: %s includes %s" % miss)
            ok = False
        for extra in sorted(got - expect):
            print("self-test: FAIL: reported but allowed: %s includes %s" % extra)
            ok = False
        rc = report(root)
        if rc != 1:
            print("self-test: FAIL: exit status %d on a tree with violations" % rc)
            ok = False
    print("self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return report(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
