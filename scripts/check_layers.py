#!/usr/bin/python3
"""Check that every #include "..." in the library follows the layer order,
and that no files of the library depend on each other in a circle.

    scripts/check_layers.py [ROOT]      scan ROOT/src and ROOT/include/qfold
    scripts/check_layers.py --cycles OBJECTS
                                        the file-level cycle check on the object
                                        files listed in OBJECTS (one path a line)
    scripts/check_layers.py --self-test build fake trees and objects with
                                        violations and check that they are all
                                        reported

The order (docs/ARCHITECTURE.md, "Layers"):

    core < ir < ops < backend < exec < passes < {quant, train} < io < tflite < cli

A file may include headers of its own layer and of the layers below it.
quant and train sit side by side: neither includes the other (the `qat`
command in cli composes them). The reference kernels (src/ops/) never
include the backend (src/backend/: oneDNN), which sits above them and
points at them. A file's layer is the first directory under src/
(src/ops/ref/conv.c is in ops); a layer may be absent from the tree (a
build without a backend). A public header include/qfold/<topic>.h has the
layer of its topic (PUBLIC below). A header under src/<layer>/ is private
to its layer: only files of that layer may include it, unless the layer
shares it upward (SHARED below: core's arena / string builder / thread pool
/ page discard, and the op table that the executor and the importer read).
A backend may include the ops' private headers (PRIVATE_TO: it computes
the same ops from the same geometry). Includes that resolve to no file of the
tree (generated protobuf code, system headers in quotes) are not checked.
Headers that include each other in a circle (through any number of files)
are reported too, and so is a file name used by two files under src/ (a
name says what its one file holds).

The cycle check (--cycles): file A depends on file B when A's object file
refers to a function or global variable that B's object file defines: `nm`
lists each object's undefined symbols (U) and its global definitions (any
upper-case type but U; static functions and variables are local, lower-case,
and never link two files). Every strongly connected set of two or more files
in that graph is a circle and is reported with the symbols that close it.
CMake writes the list of the library's and the CLI's object files
(tests/layers.cmake), so the check runs on what the build compiled.
KNOWN_CYCLES lists circles that other work is removing: the dependencies
between the files of an entry are left out of the graph until it goes.

Exit status 0 when every include is allowed and no circle is found, 1
otherwise (every offending include or circle is listed), 2 on a usage error.
"""
import os
import re
import subprocess
import sys
import tempfile

ORDER = "core < ir < ops < backend < exec < passes < {quant, train} < io < tflite < cli"
LAYERS = ["core", "ir", "ops", "backend", "exec", "passes", "quant", "train", "io", "tflite", "cli"]
# quant and train have the same rank: neither may include the other.
RANK = {"core": 0, "ir": 1, "ops": 2, "backend": 3, "exec": 4, "passes": 5, "quant": 6, "train": 6, "io": 7,
        "tflite": 8, "target": 9, "cli": 10}
SIDE_BY_SIDE = {"quant", "train"}

# Circles between files that other work is removing (issue 28), each a set
# of files under the root. While listed, the dependencies between files of
# one entry are left out of the cycle check (so a circle through them is not
# seen either); remove the entry with the fix. Temporary: empty once the
# branches of issue 28 are merged.
KNOWN_CYCLES = [
]

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
    "quant_bias.h": "quant",
    "train.h": "train",
    "qat.h": "train",
    "io.h": "io",
    "tflite.h": "tflite",
    "target.h": "target",
}

# A layer whose private headers another layer above it may include as its own:
# a backend computes the ops the reference kernels compute, from the same
# geometry, GEMM and int8 prepare (ops/ref/conv.h, ops/math/*.h,
# ops/int8/qlinear.h), so that both accept and refuse the same nodes.
PRIVATE_TO = {("backend", "ops")}

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
    # splitmix64, the one seeded generator (training order, dropout, AdaRound, compare)
    "core/rand.h",
    "ops/op_table.h",
    # the quantization arithmetic the quant layer shares with the int8 kernels
    "ops/math/quant_math.h",
    "ops/math/requant.h",
    "ops/math/fixed_point.h",
    # the backend layer's interface to the plan and the tape (engine choice,
    # its kernel tables by op); never for src/ops/ (below the backend)
    "backend/backend.h",
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
    if src_layer == "ops" and dst_layer == "backend":
        return "the reference kernels never name the backend: its kernel table points at ops, not the reverse"
    if src_layer in SIDE_BY_SIDE and dst_layer in SIDE_BY_SIDE:
        return "%s and %s never include each other (the cli composes them)" % (src_layer, dst_layer)
    if RANK[dst_layer] > RANK[src_layer]:
        return "%s is below %s: a layer includes only itself and the layers below it" % (src_layer, dst_layer)
    if dst.startswith("src/") and dst[4:] not in SHARED and (src_layer, dst_layer) not in PRIVATE_TO:
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


def duplicate_names(root):
    """[(name, [paths])] for every file name used by more than one file under
    src/: a name says what its one file holds (ops/ref/data_movement.c, not a
    second layout.c), and the cycle report and the docs name files by it."""
    where = {}
    for rel in sources(root):
        if rel.startswith("src/"):
            where.setdefault(os.path.basename(rel), []).append(rel)
    for paths in where.values():
        paths.sort()
    return sorted((name, paths) for name, paths in where.items() if len(paths) > 1)


def report(root):
    bad = check(root)
    if not bad:
        print("layers: every include follows " + ORDER)
    else:
        print("layers: %d include%s against the order %s:" % (len(bad), "" if len(bad) == 1 else "s", ORDER))
        for rel, line, inc, reason in bad:
            print('  %s:%d: #include "%s"\n      %s' % (rel, line, inc, reason))
    circles = include_cycles(root)
    for comp in circles:
        print("layers: headers include each other in a circle: %s" % " -> ".join(comp + comp[:1]))
    dups = duplicate_names(root)
    for name, paths in dups:
        print("layers: file name %s used %d times (%s): name each file for what it holds" %
              (name, len(paths), ", ".join(paths)))
    return 1 if bad or circles or dups else 0


def strongly_connected(graph):
    """Strongly connected sets of two or more nodes of graph ({node: set of
    nodes}), each sorted, in sorted order (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def one_circle(graph, comp):
    """One circle through comp's first node inside comp, as a list of nodes."""
    members, first = set(comp), comp[0]
    prev, todo = {first: None}, [first]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == first:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1]
            if w in members and w not in prev:
                prev[w] = v
                todo.append(w)
    return list(comp)


def include_cycles(root):
    """Circles of #include between files of the tree, one per strongly
    connected set (include guards make them compile; they still tie the
    files together)."""
    graph = {}
    for rel in sources(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        graph[rel] = {d for d in (resolve(root, rel, m.group(1)) for m in INCLUDE_RE.finditer(text)) if d}
    return [one_circle(graph, comp) for comp in strongly_connected(graph)]


def source_of(obj):
    """The source path (src/exec/plan.c) CMake compiled obj from: the part of
    its path after <target>.dir/, without the object suffix."""
    rel = obj.replace(os.sep, "/")
    rel = rel.split(".dir/", 1)[1] if ".dir/" in rel else os.path.basename(rel)
    return rel[:-2] if rel.endswith(".o") else rel


def parse_nm(text):
    """(defined, undefined) global symbols of `nm -P` output for one object."""
    defined, undefined = set(), set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or len(parts[1]) != 1:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() or kind in "ui":
            defined.add(name)
    return defined, undefined


def read_objects(listing):
    """{source: (defined, undefined)} for the object files listed (one a line),
    from one `nm -P -A` over them all (each line: "<object>: <symbol> <type> ...")."""
    with open(listing, encoding="utf-8") as fh:
        objs = [line.strip() for line in fh if line.strip()]
    for obj in objs:
        if not os.path.isfile(obj):
            raise FileNotFoundError("object file %s is missing: build the library first" % obj)
    nm = subprocess.run(["nm", "-P", "-A"] + objs, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True)
    if nm.returncode != 0:
        raise OSError("nm failed: %s" % nm.stderr.strip())
    return split_nm(nm.stdout, objs)


def split_nm(text, objs):
    """{source: (defined, undefined)} from `nm -P -A` output over objs."""
    lines = {obj: [] for obj in objs}
    for line in text.splitlines():
        obj, sep, rest = line.partition(": ")
        if sep and obj in lines:
            lines[obj].append(rest)
    return {source_of(obj): parse_nm("\n".join(text)) for obj, text in lines.items()}


def symbol_graph(units):
    """{a: {b: sorted symbols}}: file a refers to symbols file b defines."""
    definer = {}
    for src, (defined, _) in units.items():
        for sym in defined:
            definer.setdefault(sym, []).append(src)
    deps = {src: {} for src in units}
    for a, (_, undefined) in units.items():
        for sym in undefined:
            for b in definer.get(sym, ()):
                if b != a:
                    deps[a].setdefault(b, []).append(sym)
    for a in deps:
        for b in deps[a]:
            deps[a][b].sort()
    return deps


def file_cycles(units, known=KNOWN_CYCLES):
    """(circles, known_found, stale): the strongly connected sets of files
    once the dependencies inside each known entry are left out, each with
    its circle and its dependencies inside the set; the known entries whose
    files are in a circle of the whole graph; the known entries whose files
    are not (the entry can go)."""
    deps = symbol_graph(units)

    def known_pair(a, b):
        return any(a in group and b in group for group in known)

    graph = {a: {b for b in deps[a] if not known_pair(a, b)} for a in deps}
    circles = []
    for comp in strongly_connected(graph):
        edges = [(a, b, deps[a][b]) for a in comp for b in comp if b in graph[a]]
        circles.append((one_circle(graph, comp), edges))
    whole = strongly_connected({a: set(deps[a]) for a in deps})
    live = [group for group in known if any(len(group & set(comp)) >= 2 for comp in whole)]
    stale = [group for group in known if group not in live]
    return circles, sorted(sorted(g) for g in live), sorted(sorted(g) for g in stale)


def report_cycles(listing, known=KNOWN_CYCLES):
    try:
        units = read_objects(listing)
    except (OSError, FileNotFoundError) as e:
        print("cycles: %s" % e)
        return 1
    circles, live, stale = file_cycles(units, known)
    for group in live:
        print("cycles: known circle, allowed until its fix lands (KNOWN_CYCLES): %s" % " <-> ".join(group))
    for group in stale:
        print("cycles: KNOWN_CYCLES lists %s, in no circle now: remove the entry" % " <-> ".join(group))
    if not circles:
        print("cycles: no circle between the %d files of the library and the CLI" % len(units))
        return 0
    print("cycles: %d circle%s between files (A -> B: A uses a function or global B defines):"
          % (len(circles), "" if len(circles) == 1 else "s"))
    for circle, edges in circles:
        print("  " + " -> ".join(circle + circle[:1]))
        for a, b, syms in edges:
            more = ", ..." if len(syms) > 4 else ""
            print("      %s uses %s%s of %s" % (a, ", ".join(syms[:4]), more, b))
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
        "src/exec/plan.c": '#include "../ops/op_table.h"\n#include "qfold/exec.h"\n#include "backend/backend.h"\n',
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
        # the backend layer: above ops, below exec
        "src/backend/backend.h": "",
        "src/backend/dnnl/dnnl_conv.h": '#include "../../ops/op_table.h"\n',
        "src/backend/dnnl/dnnl_conv.c": '#include "dnnl_conv.h"\n#include "qfold/exec.h"\n',           # up: bad
        "src/ops/ref/conv.c": '#include "../op_table.h"\n#include "../../backend/dnnl/dnnl_conv.h"\n',  # ops: bad
        "src/ops/int8/qlinear.c": '#include "backend/backend.h"\n',            # shared, but not to ops: bad
        # headers in a circle (allowed by the order, reported by include_cycles)
        "src/ir/cyc_a.h": '#include "cyc_b.h"\n',
        "src/ir/cyc_b.h": '#include "cyc_c.h"\n',
        "src/ir/cyc_c.h": '#include "cyc_a.h"\n',
        # one file name in two layers (reported by duplicate_names)
        "src/quant/qat.c": "",
        "src/train/qat.c": "",
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
        ("src/backend/dnnl/dnnl_conv.c", "qfold/exec.h"),
        ("src/ops/ref/conv.c", "../../backend/dnnl/dnnl_conv.h"),
        ("src/ops/int8/qlinear.c", "backend/backend.h"),
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        found = check(root)
        got = {(rel, inc) for rel, _, inc, _ in found}
        ok = True
        for rel, _, inc, reason in found:
            if rel.startswith("src/ops/") and "backend" in inc and "never name the backend" not in reason:
                print("self-test: FAIL: %s includes %s: reason does not say the kernels never name the backend: %s"
                      % (rel, inc, reason))
                ok = False
        circles = include_cycles(root)
        if circles != [["include/qfold/io.h", "include/qfold/pass.h"],
                       ["src/ir/cyc_a.h", "src/ir/cyc_b.h", "src/ir/cyc_c.h"]]:
            print("self-test: FAIL: include circles %s, expected io.h <-> pass.h and cyc_a.h -> cyc_b.h -> "
                  "cyc_c.h" % circles)
            ok = False
        if duplicate_names(root) != [("qat.c", ["src/quant/qat.c", "src/train/qat.c"])]:
            print("self-test: FAIL: duplicate names %s, expected qat.c twice" % duplicate_names(root))
            ok = False
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
    ok = self_test_cycles() and ok
    print("self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def self_test_cycles():
    """The cycle check on made-up `nm -P -A` output (a two-file circle, a
    three-file one through a variable, one-way uses, a static symbol of the
    same name, a known pair, a stale known pair), then on two objects
    compiled here that call each other."""
    objs = ["b/CMakeFiles/lib.dir/src/x/%s.c.o" % f for f in "abcdefgh"] + ["b/CMakeFiles/cli.dir/src/cli/k1.c.o",
                                                                         "b/CMakeFiles/cli.dir/src/cli/k2.c.o"]
    nm = {
        "a": "a_fn T 0 10\nb_fn U\nshared_name t 10 4\n",   # a <-> b
        "b": "b_fn T 0 10\na_fn U\n",
        "c": "c_table D 0 8\nd_fn U\n",                      # c -> d -> e -> c
        "d": "d_fn T 0 4\ne_fn U\n",
        "e": "e_fn T 0 4\nc_table U\n",
        "f": "a_fn U\nb_fn U\nf_fn T 0 4\n",                # uses a and b, nothing uses f
        "g": "shared_name t 0 4\nf_fn U\n",                  # g -> f only: its shared_name is static
        "h": "shared_name U\nh_fn T 0 4\n",                  # no file defines shared_name globally
        "k1": "k1_fn T 0 4\nk2_fn U\n",                      # known pair
        "k2": "k2_fn T 0 4\nk1_fn U\n",
    }
    text = "".join("%s: %s\n" % (o, line) for o in objs for line in nm[o.split("/")[-1][:-4]].splitlines())
    units = split_nm(text, objs)
    known = [frozenset(("src/cli/k1.c", "src/cli/k2.c")), frozenset(("src/x/a.c", "src/x/h.c"))]
    circles, live, stale = file_cycles(units, known)
    got = sorted(sorted({a for a, _, _ in edges} | {b for _, b, _ in edges}) for _, edges in circles)
    ok = True
    expect = [["src/x/a.c", "src/x/b.c"], ["src/x/c.c", "src/x/d.c", "src/x/e.c"]]
    if got != expect:
        print("self-test: FAIL: file circles %s, expected %s" % (got, expect))
        ok = False
    if live != [["src/cli/k1.c", "src/cli/k2.c"]] or stale != [["src/x/a.c", "src/x/h.c"]]:
        print("self-test: FAIL: known circles %s and stale entries %s" % (live, stale))
        ok = False
    for circle, edges in circles:
        if set(circle) == {"src/x/a.c", "src/x/b.c"} and ("src/x/a.c", "src/x/b.c", ["b_fn"]) not in edges:
            print("self-test: FAIL: the a <-> b circle does not name b_fn: %s" % edges)
            ok = False
    # Real objects: nm's output as this machine's nm writes it.
    with tempfile.TemporaryDirectory() as tmp:
        cc = os.environ.get("CC", "cc")
        srcs = {"one.c": "int two(void);\nstatic int helper(void) { return 1; }\n"
                         "int one(void) { return two() + helper(); }\n",
                "two.c": "int one(void);\nint two_state = 3;\nint two(void) { return two_state ? 0 : one(); }\n",
                "three.c": "int one(void);\nextern int two_state;\nint three(void) { return one() + two_state; }\n"}
        listing = os.path.join(tmp, "objects.txt")
        with open(listing, "w", encoding="utf-8") as lf:
            for name, code in srcs.items():
                src = os.path.join(tmp, "src", name)
                obj = os.path.join(tmp, "t.dir", "src", name + ".o")
                os.makedirs(os.path.dirname(src), exist_ok=True)
                os.makedirs(os.path.dirname(obj), exist_ok=True)
                with open(src, "w", encoding="utf-8") as fh:
                    fh.write(code)
                try:
                    subprocess.run([cc, "-c", "-o", obj, src], check=True)
                except (OSError, subprocess.CalledProcessError) as e:
                    print("self-test: FAIL: cannot compile the objects of the nm case with %s: %s" % (cc, e))
                    return False
                lf.write(obj + "\n")
        circles, _, _ = file_cycles(read_objects(listing), [])
        got = [sorted(c) for c, _ in circles]
        if got != [["src/one.c", "src/two.c"]]:
            print("self-test: FAIL: circles between compiled objects %s, expected one.c <-> two.c" % got)
            ok = False
        if report_cycles(listing, []) != 1:
            print("self-test: FAIL: report_cycles passed objects in a circle")
            ok = False
    return ok


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) == 3 and argv[1] == "--cycles":
        return report_cycles(argv[2])
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return report(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
