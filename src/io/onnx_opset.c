/* Versioned ONNX ops: opsets 7..21 of the default domain onto qfold's op
 * forms at import, and back to one opset's forms at export.
 *
 * qfold's forms (what src/ops/ reads):
 *   ReduceMean, ReduceSum, ReduceMax, Squeeze, Unsqueeze, Split, Clip,
 *     Dropout: the kernels read both the attribute form (older opsets) and
 *     the input form (newer), so import keeps the node as the file has it. Split's num_outputs (18) is
 *     read by its inference (the last part the smaller one).
 *   Pad, Slice: the input form only: Pad-2's pads / value and Slice-1's
 *     starts / ends / axes attributes become constant inputs at import.
 *   Softmax: the kernels follow g->opset (2-D coercion below 13) or the
 *     qfold_softmax_2d mark, which import sets on an opset < 13 Softmax
 *     whose coercion is not opset 13's single axis, so that raising the
 *     opset later (the quantizer does, to 13) changes nothing; export
 *     writes such a node at 13+ as Flatten -> Softmax -> Reshape.
 *   BatchNormalization: training is training_mode (14+) or, below 14, the
 *     optional outputs (src/passes/bn_math.c). spatial (7, 8) must be 1.
 * Export writes at g->opset, raised to the first opset at which every node
 * can be written (qf_onnx_opset_target), and converts each node to that
 * opset's form (qf_onnx_opset_write). */
#include "onnx_opset.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qfold/schema.h"

/* --- helpers -------------------------------------------------------------------- */

/* Attribute `name` of n, if present, must have type t. */
static qf_status op_attr_type(const qf_node *n, const char *name, qf_attr_type t)
{
    const qf_attr *a = qf_node_attr(n, name);
    if (a && a->type != t)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): attribute '%s' must be %s", n->name,
                        qf_op_label(n), name, qf_attr_type_name(t));
    return QF_OK;
}

/* "<base>_<what>", made unique among values (node == false) or nodes. */
static void op_unique(const qf_graph *g, const char *base, const char *what, bool node, char *buf,
                      size_t size)
{
    snprintf(buf, size, "%.200s_%s", base, what);
    for (unsigned k = 1; node ? qf_graph_find_node(g, buf) != NULL : qf_graph_find_value(g, buf) != NULL;
         k++)
        snprintf(buf, size, "%.200s_%s_%u", base, what, k);
}

/* A new constant named after n: `count` int64 values, 1-D. */
static qf_status op_const_i64(qf_graph *g, const qf_node *n, const char *what, const int64_t *v, int count,
                              qf_value **out)
{
    char name[300];
    op_unique(g, n->name, what, false, name, sizeof name);
    int64_t dims[1] = {count};
    qf_tensor t;
    QF_TRY(qf_tensor_init(&t, QF_DTYPE_I64, 1, dims));
    if (count) memcpy(t.data, v, sizeof *v * (size_t)count);
    *out = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!*out) {
        qf_tensor_free(&t);
        return QF_ERR_NOMEM;
    }
    return QF_OK;
}

/* A constant's int64 entries (at most max); false if v is not a constant of
 * integers or has more. */
static bool op_const_ints(const qf_value *v, int64_t *out, int max, int *count)
{
    if (!v || !qf_value_is_const(v)) return false;
    if (v->type.dtype != QF_DTYPE_I64 && v->type.dtype != QF_DTYPE_I32) return false;
    int64_t k = qf_tensor_numel(&v->type);
    if (k < 0 || k > max) return false;
    for (int64_t i = 0; i < k; i++) out[i] = qf_tensor_get_i64(&v->type, i);
    *count = (int)k;
    return true;
}

static const qf_value *op_in(const qf_node *n, int slot) { return slot < n->ninputs ? n->inputs[slot] : NULL; }

static bool op_used(const qf_value *v) { return v && (v->nuses > 0 || v->is_output); }

/* --- import --------------------------------------------------------------------- */

/* Pad-2 (opsets < 11): pads and value attributes -> pads / constant_value inputs. */
static qf_status imp_pad(qf_graph *g, qf_node *n)
{
    if (n->ninputs != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (Pad): opset < 11 Pad takes one input, not %d", n->name,
                        n->ninputs);
    QF_TRY(op_attr_type(n, "value", QF_ATTR_FLOAT));
    int k;
    const int64_t *p = qf_node_attr_ints(n, "pads", &k);
    if (!p) return qf_error(QF_ERR_INVALID, "node '%s' (Pad): the pads attribute is missing", n->name);
    qf_value *pv;
    QF_TRY(op_const_i64(g, n, "pads", p, k, &pv));
    QF_TRY(qf_node_add_input(g, n, pv));
    float value = qf_node_attr_float(n, "value", 0.0f);
    if (value != 0.0f) {
        /* Pad-2's data is float16 / float / double; qfold reads float32 and
         * float64: a float32 value on a float64 input is refused by the op's
         * inference (constant_value's dtype), never silently cast. */
        char name[300];
        op_unique(g, n->name, "value", false, name, sizeof name);
        qf_tensor t;
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_F32, 0, NULL));
        *(float *)t.data = value;
        qf_value *cv = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
        if (!cv) {
            qf_tensor_free(&t);
            return QF_ERR_NOMEM;
        }
        QF_TRY(qf_node_add_input(g, n, cv));
    }
    qf_node_remove_attr(n, "pads");
    qf_node_remove_attr(n, "value");
    return QF_OK;
}

/* Slice-1 (opsets < 10): starts / ends / axes attributes -> inputs. */
static qf_status imp_slice(qf_graph *g, qf_node *n)
{
    if (n->ninputs != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (Slice): opset < 10 Slice takes one input, not %d", n->name,
                        n->ninputs);
    static const char *const names[3] = {"starts", "ends", "axes"};
    int len[3] = {0, 0, 0};
    const int64_t *v[3];
    for (int i = 0; i < 3; i++) {
        QF_TRY(op_attr_type(n, names[i], QF_ATTR_INTS));
        v[i] = qf_node_attr_ints(n, names[i], &len[i]);
        if (!v[i] && i < 2)
            return qf_error(QF_ERR_INVALID, "node '%s' (Slice): the %s attribute is missing", n->name, names[i]);
    }
    if (len[0] != len[1] || (v[2] && len[2] != len[0]))
        return qf_error(QF_ERR_INVALID, "node '%s' (Slice): starts, ends and axes differ in length", n->name);
    for (int i = 0; i < 3 && v[i]; i++) {
        qf_value *c;
        QF_TRY(op_const_i64(g, n, names[i], v[i], len[i], &c));
        QF_TRY(qf_node_add_input(g, n, c));
    }
    for (int i = 0; i < 3; i++) qf_node_remove_attr(n, names[i]);
    return QF_OK;
}

static qf_status imp_batch_norm(qf_node *n)
{
    QF_TRY(op_attr_type(n, "spatial", QF_ATTR_INT));
    if (qf_node_attr_int(n, "spatial", 1) != 1)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (BatchNormalization): spatial = 0 (statistics per element, not per "
                        "channel) is not supported",
                        n->name);
    /* consumed_inputs (before 6) and is_test (before 7) say nothing the
     * outputs do not: training is marked by the optional outputs. */
    qf_node_remove_attr(n, "spatial");
    qf_node_remove_attr(n, "is_test");
    qf_node_remove_attr(n, "consumed_inputs");
    return QF_OK;
}

static qf_status imp_split(const qf_node *n)
{
    QF_TRY(op_attr_type(n, "num_outputs", QF_ATTR_INT));
    const qf_attr *a = qf_node_attr(n, "num_outputs");
    if (!a) return QF_OK;
    if (op_in(n, 1) || qf_node_attr(n, "split"))
        return qf_error(QF_ERR_INVALID, "node '%s' (Split): both split and num_outputs are given", n->name);
    if (a->i != n->noutputs)
        return qf_error(QF_ERR_INVALID, "node '%s' (Split): num_outputs is %" PRId64 " but the node has %d outputs",
                        n->name, a->i, n->noutputs);
    return QF_OK;
}

/* QuantizeLinear / DequantizeLinear 19 and 21. */
static qf_status imp_quant(qf_node *n)
{
    QF_TRY(op_attr_type(n, "block_size", QF_ATTR_INT));
    QF_TRY(op_attr_type(n, "output_dtype", QF_ATTR_INT));
    QF_TRY(op_attr_type(n, "saturate", QF_ATTR_INT));
    if (qf_node_attr_int(n, "block_size", 0) != 0)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): blocked quantization (block_size) is not supported",
                        n->name, qf_op_label(n));
    int64_t odt = qf_node_attr_int(n, "output_dtype", 0);
    if (odt != 0) {
        /* qfold takes the quantized type from the zero point (uint8 without one). */
        const qf_value *zp = op_in(n, 2);
        int64_t have = zp ? (zp->type.dtype ? (int64_t)zp->type.dtype : -1) : (int64_t)QF_DTYPE_U8;
        if (have != odt)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): output_dtype %" PRId64 " differs from the zero point's type",
                            n->name, qf_op_label(n), odt);
        qf_node_remove_attr(n, "output_dtype");
    }
    /* saturate only concerns float8 outputs, which qfold does not have. */
    qf_node_remove_attr(n, "saturate");
    return QF_OK;
}

static qf_status imp_node(qf_graph *g, qf_node *n, int64_t opset)
{
    switch (n->op) {
    case QF_OP_PAD:
        if (opset < 11) return imp_pad(g, n);
        return QF_OK;
    case QF_OP_SLICE:
        if (opset < 10) return imp_slice(g, n);
        return QF_OK;
    case QF_OP_RESIZE:
        /* Resize-10 takes (X, scales) and rounds nearest otherwise: not qfold's form. */
        if (opset < 11)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (Resize): Resize-10 is not supported (opset 11+ is)",
                            n->name);
        return QF_OK;
    case QF_OP_BATCH_NORM: return imp_batch_norm(n);
    case QF_OP_SOFTMAX:
        /* The 2-D coercion (before 13) is settled once shapes are known
         * (qf_onnx_opset_finish); the axis default changes at 13. */
        if (opset < 13) {
            if (!qf_node_attr(n, "axis")) QF_TRY(qf_node_set_attr_int(g, n, "axis", 1));
            QF_TRY(qf_node_set_attr_int(g, n, QF_ONNX_SOFTMAX_2D, 1));
        }
        return QF_OK;
    case QF_OP_CLIP:
        QF_TRY(op_attr_type(n, "min", QF_ATTR_FLOAT));
        return op_attr_type(n, "max", QF_ATTR_FLOAT);
    case QF_OP_DROPOUT:
        QF_TRY(op_attr_type(n, "ratio", QF_ATTR_FLOAT));
        qf_node_remove_attr(n, "is_test");
        if (opset < 10 && n->noutputs > 1 && op_used(n->outputs[1]))
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (Dropout): the mask output of opset < 10 is a float tensor; qfold's "
                            "is bool",
                            n->name);
        return QF_OK;
    case QF_OP_CONV_TRANSPOSE: {
        const char *ap = qf_node_attr_string(n, "auto_pad", "NOTSET");
        /* ConvTranspose-1 puts the odd padding on the other side than 11. */
        if (opset < 11 && strncmp(ap, "SAME_", 5) == 0)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (ConvTranspose): auto_pad %s before opset 11 pads the other side "
                            "than opset 11; not supported",
                            n->name, ap);
        return QF_OK;
    }
    case QF_OP_SPLIT: return imp_split(n);
    case QF_OP_QUANTIZE:
    case QF_OP_DEQUANTIZE: return imp_quant(n);
    case QF_OP_GEMM:
        /* Gemm-6's broadcast flag: from 7 on C always broadcasts one way. */
        qf_node_remove_attr(n, "broadcast");
        return QF_OK;
    case QF_OP_ADD:
    case QF_OP_SUB:
    case QF_OP_MUL:
    case QF_OP_DIV:
        /* Before 7, broadcast = 1 aligned B at `axis`; from 7 on, numpy rules. */
        if (qf_node_attr_int(n, "broadcast", 0) != 0 && qf_node_attr(n, "axis"))
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): broadcast with an axis (opset < 7 broadcasting) is not supported",
                            n->name, qf_op_label(n));
        qf_node_remove_attr(n, "broadcast");
        return QF_OK;
    case QF_OP_CAST:
        QF_TRY(op_attr_type(n, "saturate", QF_ATTR_INT));
        qf_node_remove_attr(n, "saturate"); /* float8 only */
        return QF_OK;
    default: return QF_OK;
    }
}

qf_status qf_onnx_opset_import(qf_graph *g, int64_t opset)
{
    qf_graph_for_each_node(g, n) QF_TRY(imp_node(g, n, opset));
    return QF_OK;
}

/* Opset < 13 Softmax on x with axis a normalises rows of
 * [prod(dims[:a]), prod(dims[a:])]: opset 13's softmax along a when the
 * dims after a multiply to 1 (then the mark goes: raising the opset changes
 * nothing). Otherwise the mark stays, the kernels keep the 2-D coercion and
 * export writes it at 13+ as Flatten -> Softmax -> Reshape. */
static bool op_single_axis(const qf_tensor *x, int64_t a);

qf_status qf_onnx_opset_finish(qf_graph *g, bool *changed)
{
    *changed = false;
    for (qf_node *n = g->first; n; n = n->next)
        if (n->op == QF_OP_SOFTMAX && qf_node_attr(n, QF_ONNX_SOFTMAX_2D) &&
            op_single_axis(&n->inputs[0]->type, qf_node_attr_int(n, "axis", 1)))
            qf_node_remove_attr(n, QF_ONNX_SOFTMAX_2D);
    return QF_OK;
}

/* --- export: the opset a node needs --------------------------------------------- */

/* The opset that introduced ops newer than 7. */
static int64_t op_since(qf_op op)
{
    switch (op) {
    case QF_OP_EXPAND: return 8;
    case QF_OP_WHERE:
    case QF_OP_ERF:
    case QF_OP_CONSTANT_OF_SHAPE: return 9;
    case QF_OP_MOD:
    case QF_OP_QUANTIZE:
    case QF_OP_DEQUANTIZE:
    case QF_OP_QLINEAR_CONV:
    case QF_OP_CONV_INTEGER:
    case QF_OP_QLINEAR_MATMUL:
    case QF_OP_MATMUL_INTEGER: return 10;
    case QF_OP_RANGE:
    case QF_OP_SCATTER_ND: return 11;
    case QF_OP_EINSUM:
    case QF_OP_SOFTMAX_CE_LOSS: return 12;
    case QF_OP_HARD_SWISH: return 14;
    case QF_OP_LAYER_NORM: return 17;
    default: return 7;
    }
}

static bool op_all_ones(const int64_t *v, int k)
{
    for (int i = 0; i < k; i++)
        if (v && v[i] != 1) return false;
    return true;
}

/* Product of x's dims after axis a is 1 (known). */
static bool op_single_axis(const qf_tensor *x, int64_t a)
{
    int r = x->ndim;
    if (a < -r || a >= r) return false;
    if (a < 0) a += r;
    for (int i = (int)a + 1; i < r; i++)
        if (x->dims[i] != 1) return false;
    return true;
}

static bool op_nonconst(const qf_node *n, int slot)
{
    const qf_value *v = op_in(n, slot);
    return v && !qf_value_is_const(v);
}

/* Split's part sizes are not all equal (or not known). */
static bool op_split_uneven(const qf_node *n)
{
    const qf_tensor *x = &n->inputs[0]->type;
    int64_t a = qf_node_attr_int(n, "axis", 0);
    if (a < 0) a += x->ndim;
    if (a < 0 || a >= x->ndim) return true;
    for (int i = 0; i < n->noutputs; i++)
        if (n->outputs[i]->type.dims[a] < 0 || n->outputs[i]->type.dims[a] != n->outputs[0]->type.dims[a])
            return true;
    return false;
}

static int64_t op_max(int64_t a, int64_t b) { return a > b ? a : b; }

/* The first opset at which n can be written. */
static int64_t node_min_opset(const qf_graph *g, const qf_node *n)
{
    int64_t v = op_since(n->op);
    int k;
    const int64_t *p;
    switch (n->op) {
    case QF_OP_REDUCE_MEAN:
    case QF_OP_REDUCE_MAX:
    case QF_OP_REDUCE_SUM: {
        /* axes became an input at 13 (ReduceSum) or 18 (the others), and
         * noop_with_empty_axes came with it */
        const int64_t form = n->op == QF_OP_REDUCE_SUM ? 13 : 18;
        if (op_nonconst(n, 1)) v = form;
        if (qf_node_attr_int(n, "noop_with_empty_axes", 0) && !qf_node_attr(n, "axes")) {
            int64_t tmp[QF_MAX_DIMS];
            int c = 0;
            if (!op_in(n, 1) || (op_const_ints(op_in(n, 1), tmp, QF_MAX_DIMS, &c) && c == 0)) v = form;
        }
        break;
    }
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
        if (op_nonconst(n, 1)) v = 13;
        break;
    case QF_OP_SPLIT:
        if (op_nonconst(n, 1)) v = 13;
        if (!op_in(n, 1) && !qf_node_attr(n, "split") && qf_node_attr(n, "num_outputs") && op_split_uneven(n)) {
            /* An uneven num_outputs split: explicit sizes need known dims. */
            const qf_tensor *x = &n->inputs[0]->type;
            int64_t a = qf_node_attr_int(n, "axis", 0);
            if (a < 0) a += x->ndim;
            for (int i = 0; i < n->noutputs; i++)
                if (a < 0 || a >= x->ndim || n->outputs[i]->type.dims[a] < 0) v = 18;
        }
        break;
    case QF_OP_CLIP:
        if (op_nonconst(n, 1) || op_nonconst(n, 2)) v = 11;
        if (!qf_dtype_is_float(n->inputs[0]->type.dtype)) v = op_max(v, 12);
        break;
    case QF_OP_DROPOUT:
        if (op_nonconst(n, 1) || op_in(n, 2)) v = 12;
        if (n->noutputs > 1) v = op_max(v, 10);
        break;
    case QF_OP_PAD:
        /* Pad-2: constant pads and value, float data only. */
        if (op_nonconst(n, 1) || op_nonconst(n, 2) || !qf_dtype_is_float(n->inputs[0]->type.dtype)) v = 11;
        if (op_nonconst(n, 3)) v = 18;
        if (strcmp(qf_node_attr_string(n, "mode", "constant"), "wrap") == 0) v = 19;
        break;
    case QF_OP_RESIZE:
        /* roi / scales optional from 13; axes, keep_aspect_ratio_policy, antialias from 18 */
        v = 11;
        if (op_in(n, 1) == NULL || op_in(n, 2) == NULL) v = 13;
        if (qf_node_attr(n, "axes") || qf_node_attr(n, "keep_aspect_ratio_policy") || qf_node_attr(n, "antialias"))
            v = 18;
        break;
    case QF_OP_SLICE: {
        int64_t st[QF_MAX_DIMS];
        int c = 0;
        for (int s = 1; s < 4; s++)
            if (op_nonconst(n, s)) v = 10;
        if (op_in(n, 4) && !(op_const_ints(op_in(n, 4), st, QF_MAX_DIMS, &c) && op_all_ones(st, c))) v = 10;
        break;
    }
    case QF_OP_SOFTMAX:
        if (g->opset >= 13 && !op_single_axis(&n->inputs[0]->type, qf_node_attr_int(n, "axis", -1))) v = 13;
        break;
    case QF_OP_BATCH_NORM:
        if (qf_node_attr_int(n, "training_mode", 0) != 0 && n->noutputs == 1) v = 14;
        break;
    case QF_OP_MAX_POOL:
        p = qf_node_attr_ints(n, "dilations", &k);
        if (qf_node_attr_int(n, "ceil_mode", 0) != 0 || !op_all_ones(p, p ? k : 0)) v = 10;
        if (qf_node_attr_int(n, "storage_order", 0) != 0 || n->noutputs > 1) v = op_max(v, 8);
        break;
    case QF_OP_AVG_POOL:
        p = qf_node_attr_ints(n, "dilations", &k);
        if (qf_node_attr_int(n, "ceil_mode", 0) != 0) v = 10;
        if (!op_all_ones(p, p ? k : 0)) v = 19;
        break;
    case QF_OP_RESHAPE:
        if (qf_node_attr_int(n, "allowzero", 0) != 0) v = 14;
        break;
    case QF_OP_SHAPE:
        if (qf_node_attr(n, "start") || qf_node_attr(n, "end")) v = 15;
        break;
    case QF_OP_GEMM:
        if (!op_in(n, 2)) v = 11;
        break;
    case QF_OP_LINEAR:
        if (n->inputs[0]->type.ndim == 2 && !op_in(n, 2)) v = 11; /* Gemm without C */
        break;
    case QF_OP_CONSTANT:
        if (!qf_node_attr(n, "value")) v = 12; /* value_float, value_ints, ... */
        break;
    case QF_OP_QUANTIZE:
    case QF_OP_DEQUANTIZE:
        if (qf_node_attr(n, "axis") || (op_in(n, 1) && qf_tensor_numel(&n->inputs[1]->type) != 1)) v = 13;
        break;
    case QF_OP_SCATTER_ND: {
        const char *r = qf_node_attr_string(n, "reduction", "none");
        if (strcmp(r, "none") != 0) v = strcmp(r, "add") == 0 || strcmp(r, "mul") == 0 ? 16 : 18;
        break;
    }
    case QF_OP_POW:
        if (n->inputs[1]->type.dtype != n->inputs[0]->type.dtype) v = 12;
        break;
    case QF_OP_EQUAL:
        if (qf_dtype_is_float(n->inputs[0]->type.dtype)) v = 11;
        break;
    case QF_OP_CONV_TRANSPOSE:
        if (strncmp(qf_node_attr_string(n, "auto_pad", "NOTSET"), "SAME_", 5) == 0) v = 11;
        break;
    default: break;
    }
    return v;
}

qf_status qf_onnx_opset_target(const qf_graph *g, int64_t *opset)
{
    /* A graph built in code may carry no opset: qfold's op forms are 17's. */
    int64_t v = g->opset > 0 ? g->opset : 17;
    if (v < QF_ONNX_OPSET_MIN || v > QF_ONNX_OPSET_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "the graph has opset %" PRId64 "; qfold writes opsets %d to %d", v,
                        QF_ONNX_OPSET_MIN, QF_ONNX_OPSET_MAX);
    for (const qf_node *n = g->first; n; n = n->next) v = op_max(v, node_min_opset(g, n));
    *opset = v;
    return QF_OK;
}

bool qf_onnx_opset_softmax_2d(const qf_node *n, int64_t opset)
{
    return n->op == QF_OP_SOFTMAX && opset >= 13 && qf_node_attr_int(n, QF_ONNX_SOFTMAX_2D, 0) != 0 &&
           !op_single_axis(&n->inputs[0]->type, qf_node_attr_int(n, "axis", 1));
}

int64_t qf_onnx_opset_ir_version(int64_t opset)
{
    static const int64_t ir[] = {3, 3, 3, 4, 5, 6, 7, 7, 7, 8, 8, 8, 8, 9, 9, 10}; /* opsets 6..21 */
    if (opset < 6) return 3;
    return opset - 6 < (int64_t)(sizeof ir / sizeof ir[0]) ? ir[opset - 6] : 10;
}

/* --- export: one node in an opset's form ---------------------------------------- */

typedef struct qf_wr {
    const qf_node *n;
    qf_onnx_alloc_fn alloc;
    void *ud;
    qf_onnx_written *w;
} qf_wr;

static void wr_init(qf_wr *r)
{
    const qf_node *n = r->n;
    qf_onnx_written *w = r->w;
    memset(w, 0, sizeof *w);
    w->nin = n->ninputs;
    for (int i = 0; i < n->ninputs; i++) w->in[i] = n->inputs[i];
    w->nattrs = n->nattrs;
    for (int i = 0; i < n->nattrs; i++) w->attrs[i] = n->attrs[i];
}

static void wr_drop_attr(qf_wr *r, const char *name)
{
    qf_onnx_written *w = r->w;
    for (int i = 0; i < w->nattrs; i++) {
        if (strcmp(w->attrs[i].name, name) != 0) continue;
        memmove(&w->attrs[i], &w->attrs[i + 1], sizeof *w->attrs * (size_t)(w->nattrs - i - 1));
        w->nattrs--;
        return;
    }
}

static qf_attr *wr_attr(qf_wr *r, const char *name, qf_attr_type t)
{
    wr_drop_attr(r, name);
    qf_attr *a = &r->w->attrs[r->w->nattrs++];
    memset(a, 0, sizeof *a);
    a->name = name;
    a->type = t;
    return a;
}

static qf_status wr_attr_ints(qf_wr *r, const char *name, const int64_t *v, int count)
{
    int64_t *c = r->alloc(r->ud, sizeof *c * (size_t)(count ? count : 1));
    if (!c) return QF_ERR_NOMEM;
    if (count) memcpy(c, v, sizeof *c * (size_t)count);
    qf_attr *a = wr_attr(r, name, QF_ATTR_INTS);
    a->ints = c;
    a->n = count;
    return QF_OK;
}

static void wr_attr_int(qf_wr *r, const char *name, int64_t v) { wr_attr(r, name, QF_ATTR_INT)->i = v; }
static void wr_attr_float(qf_wr *r, const char *name, float v) { wr_attr(r, name, QF_ATTR_FLOAT)->f = v; }

static void wr_input(qf_wr *r, int slot, const qf_value *v)
{
    qf_onnx_written *w = r->w;
    while (w->nin <= slot) {
        w->in[w->nin] = NULL;
        w->made[w->nin++] = NULL;
    }
    w->in[slot] = v;
    w->made[slot] = NULL;
    while (w->nin > 0 && !w->in[w->nin - 1] && !w->made[w->nin - 1]) w->nin--;
}

/* A constant made for input `slot`: dtype, 1-D of `count` (or a scalar,
 * count < 0), entries from i64 or f64. */
static qf_status wr_made(qf_wr *r, int slot, const char *name, qf_dtype dt, int count, const int64_t *i64,
                         const double *f64)
{
    qf_tensor *t = r->alloc(r->ud, sizeof *t);
    if (!t) return QF_ERR_NOMEM;
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = count < 0 ? 0 : 1;
    t->dims[0] = count < 0 ? 1 : count;
    int64_t k = count < 0 ? 1 : count;
    t->data = r->alloc(r->ud, qf_dtype_size(dt) * (size_t)(k ? k : 1));
    if (!t->data) return QF_ERR_NOMEM;
    for (int64_t i = 0; i < k; i++) {
        switch (dt) {
        case QF_DTYPE_I64: ((int64_t *)t->data)[i] = i64[i]; break;
        case QF_DTYPE_F64: ((double *)t->data)[i] = f64[i]; break;
        case QF_DTYPE_F32: ((float *)t->data)[i] = (float)f64[i]; break;
        default: return qf_error(QF_ERR_INTERNAL, "node '%s': no constant of %s", r->n->name, qf_dtype_name(dt));
        }
    }
    wr_input(r, slot, NULL);
    qf_onnx_written *w = r->w;
    while (w->nin <= slot) w->in[w->nin++] = NULL;
    w->made[slot] = t;
    w->made_name[slot] = name;
    return QF_OK;
}

static qf_status wr_cannot(const qf_node *n, int64_t opset, const char *what)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s cannot be written at opset %" PRId64, n->name,
                    qf_op_label(n), what, opset);
}

/* An axes-like list: attribute `name` <-> input `slot`, the input form from
 * opset `since`. */
static qf_status wr_list(qf_wr *r, int64_t opset, int64_t since, int slot, const char *name, int max)
{
    const qf_node *n = r->n;
    const qf_value *in = op_in(n, slot);
    int k;
    if (opset >= since) {
        const int64_t *a = qf_node_attr_ints(n, name, &k);
        if (!a) return QF_OK;
        wr_drop_attr(r, name);
        return wr_made(r, slot, name, QF_DTYPE_I64, k, a, NULL);
    }
    if (!in) return QF_OK;
    int64_t v[64];
    if (max > 64) max = 64;
    if (!op_const_ints(in, v, max, &k)) return wr_cannot(n, opset, name);
    wr_input(r, slot, NULL);
    return wr_attr_ints(r, name, v, k);
}

static qf_status wr_reduce(qf_wr *r, int64_t opset)
{
    const int64_t form = r->n->op == QF_OP_REDUCE_SUM ? 13 : 18; /* axes an input from */
    QF_TRY(wr_list(r, opset, form, 1, "axes", QF_MAX_DIMS));
    if (opset < form) wr_drop_attr(r, "noop_with_empty_axes");
    return QF_OK;
}

static qf_status wr_split(qf_wr *r, int64_t opset)
{
    const qf_node *n = r->n;
    QF_TRY(wr_list(r, opset, 13, 1, "split", 64));
    bool given = op_in(n, 1) || qf_node_attr(n, "split");
    if (given) {
        wr_drop_attr(r, "num_outputs");
        return QF_OK;
    }
    if (opset >= 18) {
        wr_attr_int(r, "num_outputs", n->noutputs);
        return QF_OK;
    }
    wr_drop_attr(r, "num_outputs");
    if (!qf_node_attr(n, "num_outputs") || !op_split_uneven(n)) return QF_OK;
    /* num_outputs with a smaller last part: the sizes, explicitly. */
    const qf_tensor *x = &n->inputs[0]->type;
    int64_t a = qf_node_attr_int(n, "axis", 0);
    if (a < 0) a += x->ndim;
    if (n->noutputs > 64) return wr_cannot(n, opset, "an uneven split");
    int64_t sizes[64];
    for (int i = 0; i < n->noutputs; i++) {
        sizes[i] = n->outputs[i]->type.dims[a];
        if (sizes[i] < 0) return wr_cannot(n, opset, "an uneven split of unknown size");
    }
    if (opset >= 13) return wr_made(r, 1, "split", QF_DTYPE_I64, n->noutputs, sizes, NULL);
    return wr_attr_ints(r, "split", sizes, n->noutputs);
}

static qf_status wr_clip(qf_wr *r, int64_t opset)
{
    const qf_node *n = r->n;
    static const char *const names[2] = {"min", "max"};
    if (opset >= 11) {
        qf_dtype dt = n->inputs[0]->type.dtype;
        for (int i = 0; i < 2; i++) {
            const qf_attr *a = qf_node_attr(n, names[i]);
            if (!a || op_in(n, i + 1)) continue;
            double v = a->f;
            wr_drop_attr(r, names[i]);
            QF_TRY(wr_made(r, i + 1, names[i], dt, -1, NULL, &v));
        }
        return QF_OK;
    }
    for (int i = 0; i < 2; i++) {
        const qf_value *v = op_in(n, i + 1);
        if (!v) continue;
        if (!qf_value_is_const(v) || qf_tensor_numel(&v->type) != 1) return wr_cannot(n, opset, names[i]);
        wr_input(r, i + 1, NULL);
        wr_attr_float(r, names[i], (float)qf_tensor_get_f64(&v->type, 0));
    }
    return QF_OK;
}

static qf_status wr_dropout(qf_wr *r, int64_t opset)
{
    const qf_node *n = r->n;
    if (opset >= 12) {
        const qf_attr *a = qf_node_attr(n, "ratio");
        if (!a) return QF_OK;
        wr_drop_attr(r, "ratio");
        if (op_in(n, 1)) return QF_OK;
        double v = a->f;
        return wr_made(r, 1, "ratio", QF_DTYPE_F32, -1, NULL, &v);
    }
    wr_drop_attr(r, "seed");
    const qf_value *v = op_in(n, 1);
    if (!v) return QF_OK;
    if (!qf_value_is_const(v) || qf_tensor_numel(&v->type) != 1) return wr_cannot(n, opset, "ratio");
    wr_input(r, 1, NULL);
    wr_attr_float(r, "ratio", (float)qf_tensor_get_f64(&v->type, 0));
    return QF_OK;
}

static qf_status wr_pad(qf_wr *r, int64_t opset)
{
    const qf_node *n = r->n;
    const qf_value *av = op_in(n, 3);
    if (opset >= 18 || (opset >= 11 && !av)) return QF_OK;
    int rank = n->inputs[0]->type.ndim;
    int64_t p[2 * QF_MAX_DIMS], ax[QF_MAX_DIMS], full[2 * QF_MAX_DIMS] = {0};
    int np = 0, na = 0;
    if (!op_const_ints(op_in(n, 1), p, 2 * QF_MAX_DIMS, &np)) return wr_cannot(n, opset, "pads");
    if (av) {
        if (!op_const_ints(av, ax, QF_MAX_DIMS, &na) || np != 2 * na) return wr_cannot(n, opset, "axes");
        for (int i = 0; i < na; i++) {
            int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
            if (a < 0 || a >= rank) return wr_cannot(n, opset, "axes");
            full[a] = p[i];
            full[a + rank] = p[i + na];
        }
        np = 2 * rank;
    } else {
        memcpy(full, p, sizeof *p * (size_t)np);
    }
    wr_input(r, 3, NULL);
    if (opset >= 11) return wr_made(r, 1, "pads", QF_DTYPE_I64, np, full, NULL);
    const qf_value *cv = op_in(n, 2);
    wr_input(r, 2, NULL);
    wr_input(r, 1, NULL);
    QF_TRY(wr_attr_ints(r, "pads", full, np));
    if (cv) {
        if (!qf_value_is_const(cv) || qf_tensor_numel(&cv->type) != 1) return wr_cannot(n, opset, "constant_value");
        wr_attr_float(r, "value", (float)qf_tensor_get_f64(&cv->type, 0));
    }
    return QF_OK;
}

static qf_status wr_slice(qf_wr *r, int64_t opset)
{
    const qf_node *n = r->n;
    if (opset >= 10) return QF_OK;
    static const char *const names[3] = {"starts", "ends", "axes"};
    for (int i = 0; i < 3; i++) {
        const qf_value *v = op_in(n, i + 1);
        if (!v) continue;
        int64_t buf[QF_MAX_DIMS];
        int k;
        if (!op_const_ints(v, buf, QF_MAX_DIMS, &k)) return wr_cannot(n, opset, names[i]);
        QF_TRY(wr_attr_ints(r, names[i], buf, k));
    }
    for (int i = 4; i >= 1; i--) wr_input(r, i, NULL);
    return QF_OK;
}

qf_status qf_onnx_opset_write(const qf_graph *g, const qf_node *n, int64_t opset, qf_onnx_alloc_fn alloc,
                              void *ud, qf_onnx_written *w, bool *converted)
{
    *converted = false;
    qf_wr r = {n, alloc, ud, w};
    switch (n->op) {
    case QF_OP_REDUCE_MEAN:
    case QF_OP_REDUCE_SUM:
    case QF_OP_REDUCE_MAX:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_SPLIT:
    case QF_OP_CLIP:
    case QF_OP_DROPOUT:
    case QF_OP_PAD:
    case QF_OP_SLICE:
    case QF_OP_SOFTMAX:
    case QF_OP_BATCH_NORM:
    case QF_OP_RESHAPE: break;
    default: return QF_OK;
    }
    if (n->ninputs > QF_ONNX_WRITE_IN || n->nattrs > QF_ONNX_WRITE_ATTRS - 4)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): too many inputs or attributes", n->name,
                        qf_op_label(n));
    wr_init(&r);
    switch (n->op) {
    case QF_OP_REDUCE_MEAN:
    case QF_OP_REDUCE_SUM:
    case QF_OP_REDUCE_MAX: QF_TRY(wr_reduce(&r, opset)); break;
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE: QF_TRY(wr_list(&r, opset, 13, 1, "axes", QF_MAX_DIMS)); break;
    case QF_OP_SPLIT: QF_TRY(wr_split(&r, opset)); break;
    case QF_OP_CLIP: QF_TRY(wr_clip(&r, opset)); break;
    case QF_OP_DROPOUT: QF_TRY(wr_dropout(&r, opset)); break;
    case QF_OP_PAD: QF_TRY(wr_pad(&r, opset)); break;
    case QF_OP_SLICE: QF_TRY(wr_slice(&r, opset)); break;
    case QF_OP_SOFTMAX:
        wr_drop_attr(&r, QF_ONNX_SOFTMAX_2D);
        if (qf_onnx_opset_softmax_2d(n, opset))
            return qf_error(QF_ERR_INTERNAL, "node '%s' (Softmax): the 2-D form is written by export", n->name);
        if (opset >= 13 && g->opset < 13) {
            /* The graph's Softmax follows the 2-D coercion: written at 13+,
             * it must be the same as one axis (import makes it so). */
            int64_t a = qf_node_attr_int(n, "axis", 1);
            if (!op_single_axis(&n->inputs[0]->type, a))
                return wr_cannot(n, opset, "a Softmax coerced to 2-D (opset < 13)");
            wr_attr_int(&r, "axis", a);
        }
        break;
    case QF_OP_BATCH_NORM:
        if (opset >= 14 && g->opset < 14 && n->noutputs > 1) wr_attr_int(&r, "training_mode", 1);
        if (opset < 14) wr_drop_attr(&r, "training_mode");
        break;
    case QF_OP_RESHAPE:
        if (opset < 14) wr_drop_attr(&r, "allowzero");
        break;
    default: break;
    }
    *converted = true;
    return QF_OK;
}
