/* The int8 lowering's entries for Exp, Log, ReduceSum and ReduceMax (their
 * rows in op_quant.c; the helpers of lower.h):
 *   Exp, Log   -> QF_OP_QLUT with qfold_fn "exp" / "log" (src/ops/int8/qlut.c:
 *                 TFLite 2.2's DEQUANTIZE -> EXP / LOG -> QUANTIZE, tabulated)
 *   ReduceSum  -> QF_OP_QSUM (src/ops/int8/qsum.c: TFLite 2.2's int8 SUM)
 *   ReduceMax  -> ReduceMax of the int8 tensor when its input and output
 *                 share their qparams (exact: the largest q is the largest real)
 */
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "qfold/schema.h"
#include "quant/lower.h"

/* Exp / Log between a DQ and a Q (no activation after them). */
static qf_status lower_table(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, const char *fn, bool *done)
{
    qf_node *k;
    QF_TRY(qf_lower_unary(g, ctx, n, QF_OP_QLUT, fn, NULL, &k, done));
    if (*done) QF_TRY(qf_node_set_attr_string(g, k, "qfold_fn", fn));
    return QF_OK;
}

qf_status qf_lower_exp(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                       bool *done)
{
    (void)rq; /* TFLite's float table */
    return lower_table(g, ctx, n, "exp", done);
}

qf_status qf_lower_log(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                       bool *done)
{
    (void)rq; /* TFLite's float table */
    return lower_table(g, ctx, n, "log", done);
}

/* The reduced axes of a ReduceSum / ReduceMax on a rank-`rank` input, in
 * order, non-negative: the attribute or a constant input; none is every
 * axis. False when they are not known constants, are invalid or are none
 * with noop_with_empty_axes (the identity: nothing to lower). */
static bool reduce_axes(const qf_node *n, int rank, int64_t *axes, int *na)
{
    int count = 0;
    const int64_t *a = qf_node_attr_ints(n, "axes", &count);
    int64_t buf[QF_MAX_DIMS];
    if (n->ninputs > 1 && n->inputs[1]) {
        const qf_value *av = n->inputs[1];
        int64_t k = qf_tensor_numel(&av->type);
        if (!qf_value_is_const(av) || k > QF_MAX_DIMS) return false;
        for (int64_t i = 0; i < k; i++) buf[i] = qf_tensor_get_i64(&av->type, i);
        a = buf;
        count = (int)k;
    }
    bool mask[QF_MAX_DIMS] = {false};
    if (count == 0) {
        if (qf_node_attr_int(n, "noop_with_empty_axes", 0)) return false;
        for (int i = 0; i < rank; i++) mask[i] = true;
    }
    for (int i = 0; i < count; i++) {
        int64_t x = a[i] < 0 ? a[i] + rank : a[i];
        if (x < 0 || x >= rank || mask[x]) return false;
        mask[x] = true;
    }
    *na = 0;
    for (int i = 0; i < rank; i++)
        if (mask[i]) axes[(*na)++] = i;
    return true;
}

/* A ReduceSum between a DQ and a Q (no activation after it): qfold's int8
 * Sum (TFLite 2.2's SUM) over known axes of known sizes. */
qf_status qf_lower_reduce_sum(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                              bool *done)
{
    (void)rq; /* TFLite's arithmetic (or none) */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]);
    if (n->noutputs != 1 || !dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    const qf_tensor *x = &dqx->inputs[0]->type;
    int64_t axes[QF_MAX_DIMS], count = 1;
    int na;
    if (!reduce_axes(n, x->ndim, axes, &na)) return QF_OK;
    for (int i = 0; i < na; i++) {
        if (x->dims[axes[i]] < 0) return QF_OK;
        count *= x->dims[axes[i]];
    }
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp) || act) return QF_OK;
    if (count > ((int64_t)1 << 24)) {
        if (ctx)
            qf_pass_skip(ctx, n, "more than 2^24 elements per sum: left as DQ -> ReduceSum -> Q");
        return QF_OK;
    }
    qf_value *in[5] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], q->inputs[1], q->inputs[2]};
    qf_node *k;
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, NULL, QF_OP_QSUM, in, 5, NULL, NULL, "sum", &k));
    QF_TRY(qf_node_set_attr_ints(g, k, "axes", axes, na));
    QF_TRY(qf_node_set_attr_int(g, k, "keepdims", qf_node_attr_int(n, "keepdims", 1) != 0));
    *done = true;
    return QF_OK;
}

/* A ReduceMax between a DQ and a Q of the same per-tensor int8 qparams (the
 * profiles make it share its input's): the ReduceMax of the integers, with
 * the node's attributes and axes input. */
qf_status qf_lower_reduce_max(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                              bool *done)
{
    (void)rq; /* exact: no requantization */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]);
    if (n->noutputs != 1 || !dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    if (n->ninputs > 1 && n->inputs[1] && !qf_value_is_const(n->inputs[1])) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp) || act) return QF_OK;
    if (qf_lower_qscale(dqx) != qf_lower_qscale(q) || qf_lower_qzp(dqx) != qf_lower_qzp(q)) {
        if (ctx)
            qf_pass_skip(ctx, n, "input and output qparams differ: left as DQ -> ReduceMax -> Q");
        return QF_OK;
    }
    qf_value *in[2] = {dqx->inputs[0], n->ninputs > 1 ? n->inputs[1] : NULL};
    const int nin = in[1] ? 2 : 1;
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, NULL, QF_OP_REDUCE_MAX, in, nin, n, NULL, "max",
                                  NULL));
    *done = true;
    return QF_OK;
}
