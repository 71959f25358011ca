/* split_group_conv_qdq: a grouped convolution of a QDQ model (1 < group,
 * not depthwise) as one convolution per group between a Split and a
 * Concat, in the QDQ form, so that the model `quantize --target neutron`
 * writes has no grouped convolution: the Neutron NPU takes groups 1 and
 * depthwise only (ExecuTorch's NXP backend splits the others with its
 * SplitGroupConvolution aten pass, before quantization).
 *
 *   xq ─DQ─▶ x ─Conv(group g, DQ(Wq), DQ(bq))─▶ [act] ─Q(s_y, z_y)─▶ yq
 * becomes
 *   xq ─Split(axis 1, g)─▶ xq_i ─DQ(s_x, z_x)─▶ Conv_i(DQ(Wq_i), DQ(bq_i)) ─▶ [act_i]
 *        ─Q(s_y, z_y)─DQ─▶ Concat(axis 1) ─Q(s_y, z_y)─▶ yq
 *
 * Exact in int8 and in float: the Split moves the input's integers (ONNX's
 * Split takes int8; the int8 executor and the TFLite export run it as an int8
 * SPLIT), each part is dequantized as the whole input was, each group's
 * output is requantized at the output's qparams, which the Concat's Q applies
 * again (the identity on values of that grid); each Conv_i sums exactly the products the
 * grouped convolution sums for its output channels, with their own
 * per-channel weight scales and bias; the Concat of values on one grid,
 * quantized to that grid, copies them. In float the Conv_i compute the same
 * sums as the grouped kernel per channel.
 *
 * Unlike splitting the float graph before calibration (ExecuTorch's order),
 * no group gets an observer of its own: the grouped output's qparams serve
 * every group, and `qfold run` of the model before and after computes the
 * same integers. The TFLite export splits what is left on its lowered copy
 * (split_group_conv); after this pass nothing is left.
 *
 * Conditions (else a skip with the reason): input a per-tensor DQ (the Split
 * reads its integer input); weight a
 * DQ of an int8 constant [M, C/g, k...] with per-channel (axis 0) or
 * per-tensor constant qparams; bias absent, a DQ of an int32 constant [M] or
 * a float32 constant [M]; the output read only by a QuantizeLinear of
 * per-tensor qparams, directly or through one Relu / Clip; at most 10 groups
 * (ExecuTorch's bound: more stay grouped); nothing on the
 * way a graph output; C, M divisible by g. New nodes: `<conv>_split`,
 * `<conv>_g<i>` (their DQ / Q `<conv>_g<i>_x`, `_w`, `_b`, `_yq`, `_y`); the Concat takes
 * the grouped convolution's name. */
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "qfold/schema.h"
#include "rewrite.h"

/* The most groups split (ExecuTorch's group_conv_convertible_into_multiple_convolutions). */
#define QF_SPLIT_GROUP_MAX 10

typedef struct gq_match {
    qf_node *dx, *dw, *db, *act, *qy; /* db / act NULL when absent */
    int64_t group, m;
} gq_match;

static const qf_node *gq_dq(const qf_value *v)
{
    return v && v->producer && v->producer->op == QF_OP_DEQUANTIZE ? v->producer : NULL;
}

static bool gq_scalar_const(const qf_value *v)
{
    return !v || (qf_value_is_const(v) && qf_tensor_numel(&v->type) == 1);
}

static bool gq_reject(const qf_node *n, gq_match *m, char *why, size_t size)
{
    memset(m, 0, sizeof *m);
    const int64_t group = qf_node_attr_int(n, "group", 1);
    const qf_value *x = n->inputs[0], *w = n->inputs[1], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (x->type.ndim < 3 || x->type.dims[1] <= 0 || w->type.ndim != x->type.ndim)
        return qf_rewrite_why(why, size, "channel counts unknown");
    const int64_t c = x->type.dims[1], mo = w->type.dims[0];
    m->dx = (qf_node *)gq_dq(x);
    m->dw = (qf_node *)gq_dq(w);
    if (!m->dx || !gq_scalar_const(m->dx->inputs[1]) ||
        !gq_scalar_const(m->dx->ninputs > 2 ? m->dx->inputs[2] : NULL))
        return qf_rewrite_why(why, size, "input is not a per-tensor DequantizeLinear");
    if (!m->dw || !qf_value_is_const(m->dw->inputs[0]) ||
        m->dw->inputs[0]->type.dtype != QF_DTYPE_I8)
        return qf_rewrite_why(why, size, "weight is not a DequantizeLinear of an int8 constant");
    for (int i = 1; i < m->dw->ninputs; i++) {
        const qf_value *q = m->dw->inputs[i];
        if (q && (!qf_value_is_const(q) ||
                  (qf_tensor_numel(&q->type) != 1 && qf_tensor_numel(&q->type) != mo)))
            return qf_rewrite_why(
                why, size, "weight qparams are not constants per output channel or per tensor");
    }
    if (m->dw->ninputs > 1 && qf_tensor_numel(&m->dw->inputs[1]->type) > 1 &&
        qf_node_attr_int(m->dw, "axis", 1) != 0)
        return qf_rewrite_why(why, size, "per-channel weight scales not on axis 0");
    if (b) {
        m->db = (qf_node *)gq_dq(b);
        const qf_value *bc = m->db ? m->db->inputs[0] : b;
        if (!qf_value_is_const(bc) || qf_tensor_numel(&bc->type) != mo ||
            (m->db ? bc->type.dtype != QF_DTYPE_I32 : bc->type.dtype != QF_DTYPE_F32))
            return qf_rewrite_why(
                why, size,
                "bias is not an int32 constant under a DequantizeLinear or a float32 "
                "constant of %lld values",
                (long long)mo);
        for (int i = 1; m->db && i < m->db->ninputs; i++) {
            const qf_value *q = m->db->inputs[i];
            if (q && (!qf_value_is_const(q) ||
                      (qf_tensor_numel(&q->type) != 1 && qf_tensor_numel(&q->type) != mo)))
                return qf_rewrite_why(
                    why, size, "bias qparams are not constants per output channel or per tensor");
        }
    }
    /* ExecuTorch's NXP backend splits 2 to 10 groups (an empirical bound on
     * the branches its converter takes); more stay grouped, on the CPU */
    if (group > QF_SPLIT_GROUP_MAX)
        return qf_rewrite_why(why, size,
                              "%lld groups: more than %d (ExecuTorch's NXP backend splits 2 to %d)",
                              (long long)group, QF_SPLIT_GROUP_MAX, QF_SPLIT_GROUP_MAX);
    if (c % group || mo % group)
        return qf_rewrite_why(why, size, "channels do not split into %lld groups",
                              (long long)group);
    const qf_value *y = n->outputs[0];
    qf_node *r = qf_rewrite_sole_user(y, NULL);
    if (r && (r->op == QF_OP_RELU || r->op == QF_OP_RELU6 || r->op == QF_OP_CLIP)) {
        for (int i = 1; i < r->ninputs; i++)
            if (r->inputs[i] && !qf_value_is_const(r->inputs[i]))
                return qf_rewrite_why(why, size, "Clip '%s' bounds are not constants", r->name);
        m->act = r;
        y = r->outputs[0];
        r = qf_rewrite_sole_user(y, NULL);
    }
    if (!r || r->op != QF_OP_QUANTIZE)
        return qf_rewrite_why(why, size, "output is not read by one QuantizeLinear only%s",
                              m->act ? " (after its activation)" : "");
    if (!gq_scalar_const(r->inputs[1]) || !gq_scalar_const(r->ninputs > 2 ? r->inputs[2] : NULL))
        return qf_rewrite_why(why, size, "output QuantizeLinear '%s' is not per tensor", r->name);
    m->qy = r;
    m->group = group;
    m->m = mo;
    return false;
}

static bool gq_want(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g;
    const int64_t group = qf_node_attr_int(n, "group", 1);
    if (group <= 1) return false; /* not a candidate */
    const qf_value *x = n->inputs[0], *w = n->inputs[1];
    if (x->type.ndim >= 3 && group == x->type.dims[1] && w->type.ndim >= 2 && w->type.dims[1] == 1)
        return false; /* depthwise: the NPU's own form */
    char why[320];
    if (!gq_reject(n, user, why, sizeof why)) return true;
    qf_pass_skip(ctx, n, "%s", why);
    return false;
}

/* A node of op with inputs in[0..nin) and one output, before pos, with
 * the axis attribute of `axis_of` (a DQ / Q) when given; shapes inferred. */
static qf_status gq_node(qf_graph *g, qf_node *pos, qf_op op, const char *name, qf_value **in,
                         int nin, const qf_node *axis_of, qf_node **out)
{
    qf_node *k = qf_graph_insert_node(g, pos, false, op, name, nin, in, 1);
    if (!k) return QF_ERR_NOMEM;
    const qf_attr *a = axis_of ? qf_node_attr(axis_of, "axis") : NULL;
    if (a) QF_TRY(qf_node_set_attr_int(g, k, "axis", a->i));
    QF_TRY(qf_node_infer(g, k));
    *out = k;
    return QF_OK;
}

/* The qparams inputs (scale, zero point?) of Q / DQ node q into in[1..]. */
static int gq_qp(const qf_node *q, qf_value **in)
{
    in[1] = q->inputs[1];
    if (q->ninputs > 2 && q->inputs[2]) {
        in[2] = q->inputs[2];
        return 3;
    }
    return 2;
}

static qf_status gq_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    const gq_match *m = user;
    const int64_t group = m->group;
    char name[512];
    /* every new node goes right before the output's Q, in the order made:
     * a topological order */
    qf_node *const pos = m->qy;
    snprintf(name, sizeof name, "%.480s_split", n->name);
    /* the Split moves the input's integers (the DQ's input): exact, and the
     * parts need no Q of their own */
    qf_node *sp =
        qf_graph_insert_node(g, pos, false, QF_OP_SPLIT, name, 1, &m->dx->inputs[0], (int)group);
    if (!sp) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_int(g, sp, "axis", 1));
    /* from opset 18 a Split without its `split` input names its part count */
    if (g->opset >= 18) QF_TRY(qf_node_set_attr_int(g, sp, "num_outputs", group));
    QF_TRY(qf_node_infer(g, sp));
    qf_value **cin = qf_graph_alloc(g, sizeof *cin * (size_t)group);
    if (!cin) return QF_ERR_NOMEM;
    for (int64_t i = 0; i < group; i++) {
        qf_value *in[4];
        qf_node *k, *made;
        /* the part's integers dequantized as the whole input was */
        in[0] = sp->outputs[i];
        int nq = gq_qp(m->dx, in);
        snprintf(name, sizeof name, "%.460s_g%lld_x", n->name, (long long)i);
        QF_TRY(gq_node(g, pos, QF_OP_DEQUANTIZE, name, in, nq, NULL, &made));
        qf_value *xi = made->outputs[0];
        /* the group's weight and bias */
        qf_value *win[3] = {0};
        int nw = m->dw->ninputs;
        for (int s = 0; s < nw; s++) QF_TRY(qf_rewrite_const_part(g, m->dw->inputs[s], i, group, &win[s]));
        snprintf(name, sizeof name, "%.460s_g%lld_w", n->name, (long long)i);
        QF_TRY(gq_node(g, pos, QF_OP_DEQUANTIZE, name, win, nw, m->dw, &made));
        qf_value *cv[3] = {xi, made->outputs[0], NULL};
        int nc = 2;
        if (m->db) {
            qf_value *bin[3] = {0};
            int nb = m->db->ninputs;
            for (int s = 0; s < nb; s++) QF_TRY(qf_rewrite_const_part(g, m->db->inputs[s], i, group, &bin[s]));
            snprintf(name, sizeof name, "%.460s_g%lld_b", n->name, (long long)i);
            QF_TRY(gq_node(g, pos, QF_OP_DEQUANTIZE, name, bin, nb, m->db, &made));
            cv[nc++] = made->outputs[0];
        } else if (n->ninputs > 2 && n->inputs[2]) {
            QF_TRY(qf_rewrite_const_part(g, n->inputs[2], i, group, &cv[nc++]));
        }
        snprintf(name, sizeof name, "%.460s_g%lld", n->name, (long long)i);
        k = qf_graph_insert_node(g, pos, false, n->op, name, nc, cv, 1);
        if (!k) return QF_ERR_NOMEM;
        QF_TRY(qf_node_copy_attrs(g, k, n));
        QF_TRY(qf_node_set_attr_int(g, k, "group", 1));
        QF_TRY(qf_node_infer(g, k));
        made = k;
        if (m->act) {
            qf_value *ain[3] = {made->outputs[0], NULL, NULL};
            for (int s = 1; s < m->act->ninputs && s < 3; s++) ain[s] = m->act->inputs[s];
            snprintf(name, sizeof name, "%.460s_g%lld_act", n->name, (long long)i);
            k = qf_graph_insert_node(g, pos, false, m->act->op, name, m->act->ninputs, ain, 1);
            if (!k) return QF_ERR_NOMEM;
            QF_TRY(qf_node_copy_attrs(g, k, m->act));
            QF_TRY(qf_node_infer(g, k));
            made = k;
        }
        /* the group's output on the output's grid */
        in[0] = made->outputs[0];
        nq = gq_qp(m->qy, in);
        snprintf(name, sizeof name, "%.460s_g%lld_yq", n->name, (long long)i);
        QF_TRY(gq_node(g, pos, QF_OP_QUANTIZE, name, in, nq, NULL, &made));
        in[0] = made->outputs[0];
        snprintf(name, sizeof name, "%.460s_g%lld_y", n->name, (long long)i);
        QF_TRY(gq_node(g, pos, QF_OP_DEQUANTIZE, name, in, nq, NULL, &made));
        cin[i] = made->outputs[0];
    }
    snprintf(name, sizeof name, "%.480s_concat", n->name);
    qf_node *cc = qf_graph_insert_node(g, pos, false, QF_OP_CONCAT, name, (int)group, cin, 1);
    if (!cc) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_int(g, cc, "axis", 1));
    QF_TRY(qf_node_infer(g, cc));
    qf_pass_rewrite_as(
        ctx, n, QF_PASS_DECOMPOSED, NULL,
        "%lld groups: Split -> %lld convolutions (group 1) -> Concat, at the grouped one's qparams",
        (long long)group, (long long)group);
    /* the output's Q reads the Concat; the grouped chain goes */
    qf_value *old = m->qy->inputs[0];
    const char *keep = qf_graph_strdup(g, n->name), *vkeep = qf_graph_strdup(g, old->name);
    if (!keep || !vkeep) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_input(g, m->qy, 0, cc->outputs[0]));
    qf_value *dead[8] = {0};
    int nd = 0;
    for (int s = 0; s < m->dw->ninputs && nd < 8; s++) dead[nd++] = m->dw->inputs[s];
    if (m->db)
        for (int s = 0; s < m->db->ninputs && nd < 8; s++) dead[nd++] = m->db->inputs[s];
    else if (n->ninputs > 2 && n->inputs[2] && nd < 8)
        dead[nd++] = n->inputs[2];
    if (m->act) qf_graph_remove_node(g, m->act);
    qf_graph_remove_node(g, n);
    if (m->dw->outputs[0]->nuses == 0 && !m->dw->outputs[0]->is_output)
        qf_graph_remove_node(g, m->dw);
    if (m->db && m->db->outputs[0]->nuses == 0 && !m->db->outputs[0]->is_output)
        qf_graph_remove_node(g, m->db);
    qf_rewrite_drop_dead_consts(g, dead, nd);
    QF_TRY(qf_graph_rename_value(g, cc->outputs[0], vkeep));
    return qf_graph_rename_node(g, cc, keep);
}

static qf_status split_group_conv_qdq_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    gq_match m;
    return qf_pass_for_each_op(g, ctx, QF_OP_CONV, gq_want, gq_apply, &m, changed);
}

const qf_pass qf_pass_split_group_conv_qdq = {
    .name = "split_group_conv_qdq",
    .summary = "a QDQ grouped Conv (1 < group, not depthwise) as Split -> one Conv per group -> "
               "Concat, every "
               "group at the grouped one's qparams (exact in int8)",
    .run = split_group_conv_qdq_run,
};
