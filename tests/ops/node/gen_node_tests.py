#!/usr/bin/python3
"""Generate the ONNX backend node tests offline and select the ones qfold runs.

    gen_node_tests.py OUTDIR EXCLUDED_TXT

Writes OUTDIR/data/node/test_*/ (onnx's own generators, python3-onnx) and
OUTDIR/manifest/<Op>.txt: one selected test directory per line, for each op
of issue 2 (a test belongs to <Op> when its model is that single op;
tests whose model has several nodes, all of them supported ops, go to
OUTDIR/manifest/expanded.txt). Tests named in EXCLUDED_TXT are left out.
Each selected test directory also gets a qf_meta.txt naming its inputs and
outputs in order (input_<j>.pb holds graph input j), which the C runner reads.

Each test runs at the opset its generator declares (qfold imports 7..21;
onnx 1.12 writes up to 17), so the old-opset forms are exercised as they
are. Models declaring an opset below 7 are kept only when every op they use
has the same definition at opset 7; their opset import is then raised to 7
in place, which does not change semantics.
"""
import os
import sys

import numpy as np

# Debian's numpy 1.24 dropped these aliases; onnx 1.12's generators use them.
for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import onnx  # noqa: E402
import onnx.defs  # noqa: E402
from onnx.backend.test import cmd_tools  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import old_forms  # noqa: E402

OPS = """Conv ConvTranspose BatchNormalization Gemm MatMul Add Sub Mul Div Pow Sqrt
Reciprocal Relu Clip LeakyRelu Sigmoid Tanh HardSigmoid HardSwish Softmax MaxPool AveragePool
GlobalAveragePool ReduceMean Flatten Reshape Transpose Concat Slice Split Squeeze Unsqueeze Pad
Identity Dropout Constant ConstantOfShape Shape Gather Cast QuantizeLinear DequantizeLinear
Erf Mod Equal Not Where Expand Range ScatterND LayerNormalization Einsum SoftmaxCrossEntropyLoss
QLinearConv QLinearMatMul ConvInteger MatMulInteger
Exp Log ReduceSum ReduceMax
PRelu Max Min Abs
Resize""".split()

MIN_OPSET = 7
MAX_OPSET = 17


def read_excluded(path):
    """test name -> reason; '#' starts a comment line."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def default_opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o
    return None


def same_at(op, old, new):
    """The op's definition in force at `old` is still the one at `new`."""
    try:
        return onnx.defs.get_schema(op, old).since_version == onnx.defs.get_schema(op, new).since_version
    except Exception:
        return False


def write_meta(tdir, ins, outs):
    with open(os.path.join(tdir, "qf_meta.txt"), "w") as f:
        for j, n in enumerate(ins):
            f.write(f"input {j} {n}\n")
        for j, n in enumerate(outs):
            f.write(f"output {j} {n}\n")


def main():
    outdir, excluded_path = sys.argv[1], sys.argv[2]
    data = os.path.join(outdir, "data")
    sys.argv = ["backend-test-tools", "generate-data", "-o", data]
    cmd_tools.main()

    excluded = read_excluded(excluded_path)
    root = os.path.join(data, "node")
    manifest = {op: [] for op in OPS}
    manifest["expanded"] = []
    seen_excluded = set()
    bumped = []
    variants = 0
    for name in sorted(os.listdir(root)):
        tdir = os.path.join(root, name)
        model_path = os.path.join(tdir, "model.onnx")
        if not os.path.exists(model_path):
            continue
        model = onnx.load(model_path)
        ops = [n.op_type for n in model.graph.node]
        if not ops or any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            continue
        if not set(ops) <= set(OPS):
            continue
        if name in excluded:
            seen_excluded.add(name)
            continue
        ds = default_opset(model)
        if ds is None or ds.version > MAX_OPSET:
            print(f"gen: {name}: opset outside {MIN_OPSET}..{MAX_OPSET} and not excluded", file=sys.stderr)
            return 1
        if ds.version < MIN_OPSET:
            if not all(same_at(op, ds.version, MIN_OPSET) for op in set(ops)):
                print(f"gen: {name}: opset {ds.version} op changed by opset {MIN_OPSET}; "
                      f"add it to excluded.txt", file=sys.stderr)
                return 1
            bumped.append(f"{name} ({ds.version}->{MIN_OPSET})")
            ds.version = MIN_OPSET
            onnx.save(model, model_path)
        init = {i.name for i in model.graph.initializer}
        ins = [i.name for i in model.graph.input if i.name not in init]
        outs = [o.name for o in model.graph.output]
        write_meta(tdir, ins, outs)
        key = ops[0] if len(ops) == 1 else "expanded"
        manifest[key].append(tdir)
        # The same test in the form of each older opset whose definition differs.
        for vdir, vins in old_forms.make_variants(tdir, model, ins, os.path.join(data, "node_old")):
            write_meta(vdir, vins, outs)
            manifest[key].append(vdir)
            variants += 1

    stale = sorted(set(excluded) - seen_excluded)
    if stale:
        print("gen: excluded.txt names tests that are not candidates: " + " ".join(stale), file=sys.stderr)
        return 1
    mdir = os.path.join(outdir, "manifest")
    os.makedirs(mdir, exist_ok=True)
    total = 0
    for key, dirs in manifest.items():
        with open(os.path.join(mdir, key + ".txt"), "w") as f:
            for d in dirs:
                f.write(d + "\n")
        total += len(dirs)
    print(f"gen: {total} node tests selected for {len(OPS)} ops ({variants} of them older-opset forms), "
          f"{len(excluded)} excluded, "
          f"opset raised to {MIN_OPSET} for: {', '.join(bumped) or 'none'}")
    empty = [k for k in OPS if not manifest[k]]
    if empty:
        print("gen: no node test left for " + " ".join(empty), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
