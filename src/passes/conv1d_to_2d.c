/* conv1d_to_2d: the int8 1-D convolutions and pools of a lowered graph
 * (rank-3 tensors, N C L) as their 2-D forms with H = 1 (N C 1 L), for
 * targets that have 2-D kernels only (TFLite's CONV_2D, DEPTHWISE_CONV_2D,
 * TRANSPOSE_CONV, the pools; the Neutron NPU: ExecuTorch's NXP backend does
 * the same with its ConvertConv1dToConv2dPass, an unsqueeze / squeeze around
 * each conv).
 *
 * Here a whole run of 1-D ops is lifted at once, so that a Reshape appears
 * only at its edges: the seeds are the 1-D QLinearConv, qconv_transpose,
 * int8 MaxPool and qavg_pool nodes; the ops that do not care about the
 * layout (qadd, qmul, qlut, qconcat, an int8 Split, qmean) join a run when
 * one of their rank-3 activations is in it and all of them are rank 3. Every
 * rank-3 activation a lifted node reads or writes becomes [N, C, 1, L] in
 * place when its producer is lifted (a Reshape back to [N, C, L] for the
 * readers outside the run and a graph output, which keeps its name), or is
 * read through a Reshape to [N, C, 1, L] when it is not (a graph input).
 * Weights [M, C/g, k] get their H axis ([M, C/g, 1, k]), attributes their
 * H entries (kernel 1, stride 1, dilation 1, pads 0), a concat's or split's
 * axis and a mean's axes move past H (a mean also reduces H), a broadcast
 * constant operand gets H = 1. The integers do not change: a Reshape moves
 * none, and the 2-D kernels over H = 1 sum the same products.
 *
 * It runs on the integer executor's lowering (src/quant/lower.c) only; the
 * float ops are left as they are. */
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "qfold/schema.h"

/* The activation inputs of a node the pass handles, as slots. */
static int lf_act_slots(const qf_node *n, int *slots, int cap)
{
    int k = 0;
    switch (n->op) {
    case QF_OP_QADD:
    case QF_OP_QMUL:
        for (int s = 0; s <= 3; s += 3)
            if (!qf_value_is_const(n->inputs[s])) slots[k++] = s;
        break;
    case QF_OP_QCONCAT:
        for (int s = 2; s < n->ninputs && k < cap; s += 3)
            if (!qf_value_is_const(n->inputs[s])) slots[k++] = s;
        break;
    case QF_OP_ADD:
    case QF_OP_SUB:
    case QF_OP_MUL:
        for (int s = 0; s < 2; s++)
            if (!qf_value_is_const(n->inputs[s])) slots[k++] = s;
        break;
    default:
        if (n->ninputs > 0 && n->inputs[0] && !qf_value_is_const(n->inputs[0])) slots[k++] = 0;
        break;
    }
    return k;
}

/* A seed: a 1-D int8 conv / pool. */
static bool lf_seed(const qf_node *n)
{
    const qf_tensor *x = &n->inputs[0]->type;
    if (x->ndim != 3) return false;
    switch (n->op) {
    case QF_OP_QLINEAR_CONV:
    case QF_OP_QCONV_TRANSPOSE: return n->inputs[3]->type.ndim == 3;
    case QF_OP_MAX_POOL: return x->dtype == QF_DTYPE_I8 && n->noutputs == 1;
    case QF_OP_QAVG_POOL: return true;
    default: return false;
    }
}

/* A per-tensor QuantizeLinear / DequantizeLinear inside the graph (the
 * graph's input Q and output DQ stay: the export writes them). */
static bool lf_qdq_inner(const qf_node *n)
{
    if (n->ninputs < 2 || qf_tensor_numel(&n->inputs[1]->type) != 1) return false;
    if (n->op == QF_OP_QUANTIZE) return n->inputs[0]->producer != NULL;
    return !n->outputs[0]->is_output;
}

/* A sink: reads a run's value without being laid out by it (its output
 * is not lifted): Flatten, a Reshape whose shape copies no dim past the
 * channels, a mean without keepdims. */
static bool lf_sink(const qf_node *n)
{
    if (n->op == QF_OP_FLATTEN) return true;
    if (n->op == QF_OP_QMEAN) return qf_node_attr_int(n, "keepdims", 1) == 0;
    if (n->op != QF_OP_RESHAPE || !qf_value_is_const(n->inputs[1])) return false;
    for (int64_t i = 2; i < qf_tensor_numel(&n->inputs[1]->type); i++)
        if (qf_tensor_get_i64(&n->inputs[1]->type, i) == 0) return false;
    return true;
}

/* A layout-agnostic node that may join a run: every activation rank 3
 * (a sink's output excepted). */
static bool lf_joins(const qf_node *n)
{
    int slots[QF_MAX_DIMS * 8];
    switch (n->op) {
    case QF_OP_QADD:
    case QF_OP_QMUL:
    case QF_OP_QLUT:
    case QF_OP_QMEAN:
    case QF_OP_ADD:
    case QF_OP_SUB:
    case QF_OP_MUL:
    case QF_OP_RELU:
    case QF_OP_RELU6:
    case QF_OP_CLIP:
    case QF_OP_SIGMOID:
    case QF_OP_TANH:
    case QF_OP_HARD_SWISH:
    case QF_OP_HARD_SIGMOID:
    case QF_OP_LEAKY_RELU:
    case QF_OP_FLATTEN:
    case QF_OP_RESHAPE: break;
    case QF_OP_QCONCAT:
        if ((n->ninputs - 2) / 3 > QF_MAX_DIMS * 8) return false;
        break;
    case QF_OP_SPLIT:
        if (n->ninputs > 1 && n->inputs[1] && !qf_value_is_const(n->inputs[1])) return false;
        break;
    case QF_OP_PAD:
        if (n->ninputs < 2 || !qf_value_is_const(n->inputs[1]) ||
            qf_tensor_numel(&n->inputs[1]->type) != 6 || (n->ninputs > 3 && n->inputs[3]))
            return false;
        break;
    case QF_OP_QUANTIZE:
    case QF_OP_DEQUANTIZE:
        if (!lf_qdq_inner(n)) return false;
        break;
    default: return false;
    }
    if (n->op == QF_OP_RESHAPE && !lf_sink(n)) return false;
    int k = lf_act_slots(n, slots, QF_MAX_DIMS * 8);
    if (k == 0) return false;
    for (int i = 0; i < k; i++)
        if (n->inputs[slots[i]]->type.ndim != 3) return false;
    for (int i = 0; i < n->noutputs && !lf_sink(n); i++)
        if (n->outputs[i]->type.ndim != 3) return false;
    /* constant operands broadcast from the right: at most rank 3 */
    for (int s = 0; s < n->ninputs; s++)
        if ((n->op == QF_OP_QADD || n->op == QF_OP_QMUL || n->op == QF_OP_ADD ||
             n->op == QF_OP_SUB || n->op == QF_OP_MUL) &&
            n->inputs[s] && qf_value_is_const(n->inputs[s]) && n->inputs[s]->type.ndim > 3)
            return false;
    return true;
}

/* The outputs of a lifted node that are lifted with it: not a sink's. */
static bool lf_out_lifted(const qf_node *n, int i)
{
    return !lf_sink(n) && n->outputs[i]->type.ndim == 3;
}

/* [a, b, c] -> [a, b, 1, c]. */
static void lf_dims4(const int64_t *d3, int64_t *d4)
{
    d4[0] = d3[0];
    d4[1] = d3[1];
    d4[2] = 1;
    d4[3] = d3[2];
}

/* An INTS attribute of 1-D entries with its H entry `h` put first (pads:
 * begins and ends, each with its H entry). */
static qf_status lf_attr_h(qf_graph *g, qf_node *n, const char *name, int64_t h)
{
    int cnt = 0;
    const int64_t *a = qf_node_attr_ints(n, name, &cnt);
    if (!a) return QF_OK;
    int64_t v[4];
    if (strcmp(name, "pads") == 0 && cnt == 2) {
        v[0] = 0, v[1] = a[0], v[2] = 0, v[3] = a[1];
        return qf_node_set_attr_ints(g, n, name, v, 4);
    }
    if (cnt != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s has %d entries for a 1-D op", n->name,
                        qf_op_label(n), name, cnt);
    v[0] = h, v[1] = a[0];
    return qf_node_set_attr_ints(g, n, name, v, 2);
}

/* Constant v with an H axis of 1 (rank 3 after broadcasting from the right,
 * then [a, b, 1, c]); scalars stay as they are. *out: the new constant. */
static qf_status lf_const4(qf_graph *g, qf_value *v, qf_value **out)
{
    const qf_tensor *t = &v->type;
    if (t->ndim == 0) {
        *out = v;
        return QF_OK;
    }
    int64_t d3[3], d4[4];
    for (int i = 0; i < 3; i++) d3[i] = i < 3 - t->ndim ? 1 : t->dims[i - (3 - t->ndim)];
    lf_dims4(d3, d4);
    qf_tensor p;
    QF_TRY(qf_tensor_init(&p, t->dtype, 4, d4));
    memcpy(p.data, t->data, (size_t)qf_tensor_numel(t) * qf_dtype_size(t->dtype));
    char name[512];
    snprintf(name, sizeof name, "%.480s_h1", v->name);
    *out = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &p);
    if (!*out) {
        qf_tensor_free(&p);
        return QF_ERR_NOMEM;
    }
    return QF_OK;
}

/* A rank-3 axis past the H axis: 0, 1 stay, 2 becomes 3. */
static int64_t lf_axis(int64_t a)
{
    return (a < 0 ? a + 3 : a) >= 2 ? (a < 0 ? a + 3 : a) + 1 : (a < 0 ? a + 3 : a);
}

/* Node n's attributes and constants in the 2-D form. */
static qf_status lf_node(qf_graph *g, qf_node *n)
{
    switch (n->op) {
    case QF_OP_QLINEAR_CONV:
    case QF_OP_QCONV_TRANSPOSE: {
        qf_value *w;
        QF_TRY(lf_const4(g, n->inputs[3], &w));
        QF_TRY(qf_node_set_input(g, n, 3, w));
        int64_t kernel = w->type.dims[3];
        if (qf_node_attr(n, "kernel_shape")) {
            int64_t k2[2] = {1, kernel};
            QF_TRY(qf_node_set_attr_ints(g, n, "kernel_shape", k2, 2));
        }
        QF_TRY(lf_attr_h(g, n, "strides", 1));
        QF_TRY(lf_attr_h(g, n, "dilations", 1));
        QF_TRY(lf_attr_h(g, n, "pads", 0));
        QF_TRY(lf_attr_h(g, n, "output_padding", 0));
        return lf_attr_h(g, n, "output_shape", 1);
    }
    case QF_OP_MAX_POOL:
    case QF_OP_QAVG_POOL:
        QF_TRY(lf_attr_h(g, n, "kernel_shape", 1));
        QF_TRY(lf_attr_h(g, n, "strides", 1));
        QF_TRY(lf_attr_h(g, n, "dilations", 1));
        return lf_attr_h(g, n, "pads", 0);
    case QF_OP_ADD:
    case QF_OP_SUB:
    case QF_OP_MUL:
    case QF_OP_QADD:
    case QF_OP_QMUL:
        for (int s = 0; s < n->ninputs && s <= 3;
             s += n->op == QF_OP_QADD || n->op == QF_OP_QMUL ? 3 : 1)
            if (n->inputs[s] && qf_value_is_const(n->inputs[s])) {
                qf_value *c;
                QF_TRY(lf_const4(g, n->inputs[s], &c));
                QF_TRY(qf_node_set_input(g, n, s, c));
            }
        return QF_OK;
    case QF_OP_FLATTEN:
        return qf_node_set_attr_int(g, n, "axis", lf_axis(qf_node_attr_int(n, "axis", 1)));
    case QF_OP_PAD: {
        /* [b0, b1, b2, e0, e1, e2] -> [b0, b1, 0, b2, e0, e1, 0, e2] */
        const qf_tensor *p = &n->inputs[1]->type;
        int64_t len = 8, v[8];
        for (int i = 0; i < 2; i++) {
            v[4 * i] = qf_tensor_get_i64(p, 3 * i);
            v[4 * i + 1] = qf_tensor_get_i64(p, 3 * i + 1);
            v[4 * i + 2] = 0;
            v[4 * i + 3] = qf_tensor_get_i64(p, 3 * i + 2);
        }
        qf_tensor t;
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_I64, 1, &len));
        memcpy(t.data, v, sizeof v);
        char name[512];
        snprintf(name, sizeof name, "%.480s_h1", n->inputs[1]->name);
        qf_value *k = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
        if (!k) {
            qf_tensor_free(&t);
            return QF_ERR_NOMEM;
        }
        return qf_node_set_input(g, n, 1, k);
    }
    case QF_OP_QCONCAT:
    case QF_OP_SPLIT:
        return qf_node_set_attr_int(
            g, n, "axis", lf_axis(qf_node_attr_int(n, "axis", n->op == QF_OP_SPLIT ? 0 : 1)));
    case QF_OP_QMEAN: {
        /* the axes past H, and H itself: the 2-D mean of the same values */
        int cnt = 0;
        const int64_t *a = qf_node_attr_ints(n, "axes", &cnt);
        int64_t v[QF_MAX_DIMS];
        int k = 0;
        bool h = false;
        for (int i = 0; a && i < cnt && k < QF_MAX_DIMS - 1; i++) {
            v[k] = lf_axis(a[i]);
            h |= v[k] == 2;
            k++;
        }
        if (!a) return qf_error(QF_ERR_INVALID, "node '%s' (%s): no axes", n->name, qf_op_label(n));
        if (!h) v[k++] = 2;
        /* sorted: the TFLite export and the kernel read them in order */
        for (int i = 1; i < k; i++)
            for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
                int64_t t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
        return qf_node_set_attr_ints(g, n, "axes", v, k);
    }
    default: return QF_OK;
    }
}

/* A Reshape of `from` to dims (rank nd) named <base><suffix>, linked before
 * `pos` (NULL: at the head of the graph); its output. */
static qf_value *lf_reshape(qf_graph *g, qf_node *pos, bool after, qf_value *from,
                            const int64_t *dims, int nd, const char *suffix)
{
    char name[512];
    snprintf(name, sizeof name, "%.480s%s", from->name, suffix);
    qf_tensor t;
    int64_t len = nd;
    if (qf_tensor_init(&t, QF_DTYPE_I64, 1, &len) != QF_OK) return NULL;
    int64_t *d = t.data;
    for (int i = 0; i < nd; i++) d[i] = i == 0 ? 0 : dims[i]; /* 0: the batch, copied */
    char kname[560];
    snprintf(kname, sizeof kname, "%s_shape", name);
    qf_value *k = qf_graph_add_constant(g, kname, QF_VALUE_CONSTANT, &t);
    if (!k) {
        qf_tensor_free(&t);
        return NULL;
    }
    qf_value *in[2] = {from, k};
    qf_node *r = pos ? qf_graph_insert_node(g, pos, after, QF_OP_RESHAPE, name, 2, in, 1)
                     : qf_graph_insert_node(g, g->first, false, QF_OP_RESHAPE, name, 2, in, 1);
    if (!r) return NULL;
    qf_value *y = r->outputs[0];
    y->type.dtype = from->type.dtype;
    y->type.ndim = nd;
    memcpy(y->type.dims, dims, sizeof(int64_t) * (size_t)nd);
    return y;
}

static qf_status lf_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
/* a node of a run (the Reshapes the pass adds have later ids: none is) */
#define LF_IN_RUN(node) ((node)->id < (uint32_t)nn && ln[(node)->id])
    *changed = false;
    const int nv = g->nvalues, nn = (int)g->next_node_id;
    bool *lv = qf_calloc((size_t)nv + 1, sizeof *lv), *ln = qf_calloc((size_t)nn + 1, sizeof *ln);
    qf_status st = lv && ln ? QF_OK : QF_ERR_NOMEM;
    int nlifted = 0;
    int slots[QF_MAX_DIMS * 8];
    /* the runs: seeds, then the agnostic nodes touching them, to a fixpoint */
    for (bool more = true; st == QF_OK && more;) {
        more = false;
        qf_graph_for_each_node(g, n)
        {
            if (ln[n->id]) continue;
            bool seed = lf_seed(n), touch = false;
            if (!seed && !lf_joins(n)) continue;
            int k = lf_act_slots(n, slots, QF_MAX_DIMS * 8);
            for (int i = 0; i < k; i++) touch |= lv[n->inputs[slots[i]]->id];
            for (int i = 0; i < n->noutputs; i++)
                touch |= lf_out_lifted(n, i) && lv[n->outputs[i]->id];
            if (!seed && !touch) continue;
            /* a sink joins a run it reads, never pulls its input in */
            if (lf_sink(n) && !lv[n->inputs[0]->id]) continue;
            ln[n->id] = true;
            nlifted++;
            more = true;
            for (int i = 0; i < k; i++) lv[n->inputs[slots[i]]->id] = true;
            for (int i = 0; i < n->noutputs; i++)
                if (lf_out_lifted(n, i)) lv[n->outputs[i]->id] = true;
        }
    }
    if (st != QF_OK || nlifted == 0) goto done;
    /* the values first (the nodes' inputs are about to change) */
    for (int id = 0; id < nv && st == QF_OK; id++) {
        qf_value *v = g->values[id];
        if (!v || !lv[id]) continue;
        int64_t d4[4];
        lf_dims4(v->type.dims, d4);
        qf_node *p = v->producer;
        if (p && LF_IN_RUN(p)) {
            /* written by the run: [N, C, 1, L] in place; a Reshape back for
             * readers outside it and for a graph output */
            bool outside = v->is_output;
            for (int u = 0; u < v->nuses; u++) outside |= !LF_IN_RUN(v->uses[u].node);
            int64_t d3[3] = {v->type.dims[0], v->type.dims[1], v->type.dims[2]};
            v->type.ndim = 4;
            memcpy(v->type.dims, d4, sizeof d4);
            if (!outside) continue;
            qf_value *r = lf_reshape(g, p, true, v, d3, 3, "_nch");
            if (!r) {
                st = QF_ERR_NOMEM;
                break;
            }
            if (v->is_output) {
                /* the output (and its name) moves to r; the run keeps reading v */
                st = qf_graph_replace_uses(g, v, r);
                for (int u = r->nuses - 1; u >= 0 && st == QF_OK; u--) {
                    qf_node *un = r->uses[u].node;
                    if (LF_IN_RUN(un) || un == r->producer)
                        st = qf_node_set_input(g, un, r->uses[u].slot, v);
                }
            } else {
                for (int u = v->nuses - 1; u >= 0 && st == QF_OK; u--) {
                    qf_node *un = v->uses[u].node;
                    if (!LF_IN_RUN(un) && un != r->producer)
                        st = qf_node_set_input(g, un, v->uses[u].slot, r);
                }
            }
        } else {
            /* read by the run, written outside it: a Reshape in */
            qf_value *r = lf_reshape(g, p, true, v, d4, 4, "_h1");
            if (!r) {
                st = QF_ERR_NOMEM;
                break;
            }
            for (int u = v->nuses - 1; u >= 0 && st == QF_OK; u--) {
                qf_node *un = v->uses[u].node;
                if (LF_IN_RUN(un)) st = qf_node_set_input(g, un, v->uses[u].slot, r);
            }
        }
    }
    qf_graph_for_each_node(g, n)
    {
        if (st != QF_OK) break;
        if (n->id >= (uint32_t)nn || !ln[n->id]) continue;
        st = lf_node(g, n);
        if (st == QF_OK) qf_pass_rewrite(ctx, n, NULL, "1-D as 2-D with H = 1");
    }
    *changed = true;
done:
    qf_free(lv);
    qf_free(ln);
    return st;
#undef LF_IN_RUN
}

const qf_pass qf_pass_conv1d_to_2d = {
    .name = "conv1d_to_2d",
    .summary = "int8 1-D convs and pools (N C L) as 2-D with H = 1, Reshapes only at the edges of "
               "each run",
    .run = lf_run,
};
