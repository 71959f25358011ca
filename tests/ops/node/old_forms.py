"""Node tests at older opsets (issue 7): a single-op test model rewritten in
the form of each older opset (>= 7) at which its op had another definition.

onnx 1.12's generators write each test at one opset (mostly the op's latest
definition) and its version_converter has no adapters to go down. So the
forms that changed are rewritten here, following the operator changelog:
inputs that older opsets take as attributes (Clip-6 min / max, Pad-2 pads /
value, Slice-1 starts / ends / axes, Split-2 split, Squeeze / Unsqueeze-1
axes, Dropout-7 ratio) are read from the test's own input data or
initializers and become attributes; attributes an older opset lacks are
dropped when they hold their default (training_mode 0, allowzero 0) and
the variant is skipped when they do not (its meaning does not exist there).
A variant is kept only when onnx.checker (full_check) accepts it at its
opset. The expected outputs stay onnx's own: every rewrite keeps the
semantics, and Softmax below 13 (the 2-D coercion) is kept only where it
equals opset 13's single axis.
"""
import os
import shutil

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

MIN_OPSET = 7

# op -> (input slot -> attribute name, opset from which it is an input)
TO_ATTRS = {
    "Clip": ({1: "min", 2: "max"}, 11),
    "Pad": ({1: "pads", 2: "value"}, 11),
    "Slice": ({1: "starts", 2: "ends", 3: "axes", 4: "steps"}, 10),
    "Split": ({1: "split"}, 13),
    "Squeeze": ({1: "axes"}, 13),
    "Unsqueeze": ({1: "axes"}, 13),
    "Dropout": ({1: "ratio", 2: "training_mode"}, 12),
    "ReduceSum": ({1: "axes"}, 13),
}


def older_opsets(op, opset):
    """Opsets in [MIN_OPSET, opset) at which op had another definition."""
    out, seen = [], {onnx.defs.get_schema(op, opset).since_version}
    for v in range(opset - 1, MIN_OPSET - 1, -1):
        try:
            since = onnx.defs.get_schema(op, v).since_version
        except Exception:  # noqa: BLE001 - the op does not exist yet
            break
        if since not in seen:
            seen.add(since)
            out.append(v)
    return out


def _value(model, inputs, name):
    """The constant behind input `name`: an initializer or the test's data."""
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    return inputs.get(name)


def rewrite(model, inputs, opset):
    """model (one node) in opset's form; inputs: graph input name -> array.
    Returns (model, names of the graph inputs it no longer has) or None."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[0]
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    dropped = []

    def drop_attr(name):
        for i, a in enumerate(node.attribute):
            if a.name == name:
                del node.attribute[i]
                return

    if op in TO_ATTRS and opset < TO_ATTRS[op][1]:
        slots, _ = TO_ATTRS[op]
        ins = list(node.input)
        for slot in sorted(slots, reverse=True):
            if slot >= len(ins) or not ins[slot]:
                continue
            v = _value(m, inputs, ins[slot])
            if v is None:
                return None
            name = slots[slot]
            if name == "training_mode":
                if bool(v):
                    return None
            elif name == "steps":
                if np.any(v != 1):
                    return None
            elif name in ("min", "max", "value", "ratio"):
                node.attribute.append(helper.make_attribute(name, float(v)))
            else:
                node.attribute.append(helper.make_attribute(name, [int(x) for x in v.reshape(-1)]))
            dropped.append(ins[slot])
            ins[slot] = ""
        while ins and not ins[-1]:
            ins.pop()
        if any(not x for x in ins):
            return None  # an omitted input before a present one: no attribute form
        del node.input[:]
        node.input.extend(ins)
        if op == "Dropout":
            drop_attr("seed")
            if opset < 10 and len(node.output) > 1:
                return None  # the mask is a float tensor before 10
    if op == "BatchNormalization" and opset < 14:
        if attrs.get("training_mode", 0) and len(node.output) == 1:
            return None
        drop_attr("training_mode")
    if op == "Reshape" and opset < 14:
        if attrs.get("allowzero", 0):
            return None
        drop_attr("allowzero")
    if op == "Softmax" and opset < 13:
        x = inputs.get(node.input[0])
        axis = attrs.get("axis", -1)
        if x is None or any(d != 1 for d in x.shape[axis % x.ndim + 1:]):
            return None
        drop_attr("axis")
        node.attribute.append(helper.make_attribute("axis", axis % x.ndim))
    if op in ("QuantizeLinear", "DequantizeLinear") and opset < 13:
        scale = _value(m, inputs, node.input[1])
        if scale is None or scale.size != 1:
            return None  # per-axis quantization came with 13 (the checker does not see it)
    if op == "ConvTranspose" and opset < 11 and str(attrs.get("auto_pad", b"NOTSET"), "ascii").startswith("SAME"):
        return None  # ConvTranspose-1 puts the odd padding on the other side (qfold refuses it)
    if op == "Gemm" and opset < 11 and (len(node.input) < 3 or not node.input[2]):
        return None
    # Unused graph inputs and initializers go with the inputs that became attributes.
    keep = [i for i in m.graph.input if i.name not in dropped]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    inits = [t for t in m.graph.initializer if t.name not in dropped]
    del m.graph.initializer[:]
    m.graph.initializer.extend(inits)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception:  # noqa: BLE001 - not expressible at this opset
        return None
    return m, dropped


def make_variants(tdir, model, in_names, outroot):
    """Write the older-opset variants of test tdir under outroot; returns
    [(variant dir, its graph input names)]."""
    if len(model.graph.node) != 1:
        return []
    op = model.graph.node[0].op_type
    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
    data = os.path.join(tdir, "test_data_set_0")
    inputs = {}
    for j, n in enumerate(in_names):
        t = onnx.TensorProto()
        with open(os.path.join(data, f"input_{j}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        inputs[n] = numpy_helper.to_array(t)
    out = []
    for v in older_opsets(op, opset):
        r = rewrite(model, inputs, v)
        if r is None:
            continue
        m, dropped = r
        vdir = os.path.join(outroot, f"{os.path.basename(tdir)}@{v}")
        vdata = os.path.join(vdir, "test_data_set_0")
        os.makedirs(vdata, exist_ok=True)
        onnx.save(m, os.path.join(vdir, "model.onnx"))
        names = [n for n in in_names if n not in dropped]
        for k, n in enumerate(names):
            shutil.copyfile(os.path.join(data, f"input_{in_names.index(n)}.pb"),
                            os.path.join(vdata, f"input_{k}.pb"))
        for f in os.listdir(data):
            if f.startswith("output_"):
                shutil.copyfile(os.path.join(data, f), os.path.join(vdata, f))
        out.append((vdir, names))
    return out
