/* The int8 executor's lowering: recognised DQ -> Conv -> [ReLU] -> Q groups of
 * a QDQ graph become one integer node, so that `qfold run` computes them as
 * the NPU does (int8 x int8 -> int32, TFLite's fixed-point requantization,
 * the activation as a clamp of the output integers):
 *
 *   before:  xq ─DQ─▶ x ─┐
 *            Wq ─DQ─▶ W ─┼─Conv─▶ y ─Relu─▶ z ─Q─▶ zq
 *            bq ─DQ─▶ b ─┘
 *   after:   QLinearConv(xq, s_x, zp_x, Wq, s_W, zp_W, s_z, zp_z, bq)
 *              {qfold_requant = 1, qfold_clamp = [zp_z, 127]} ─▶ zq
 *
 * Requantization: TFLite's fixed point by default (what a TFLite-based NPU
 * toolchain computes), or ONNX's float definition (what ONNX Runtime's
 * integer kernels compute) on request. The two round differently now and
 * then (1 LSB, ~0.05 % of a layer's outputs); a later layer can amplify such
 * a difference by its gain, so deep models differ by a few LSB between the
 * two, and each matches its own reference.
 *
 * Everything else keeps running as written (DQ -> float op -> Q). The
 * lowered graph is for execution only: the two attributes are qfold's own
 * and no exporter should see them (`qfold run` lowers its private copy).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "qfold/quant.h"

/* A DequantizeLinear node producing v, or NULL. */
static const qf_node *dq_of(const qf_value *v)
{
    return v && v->producer && v->producer->op == QF_OP_DEQUANTIZE ? v->producer : NULL;
}

static bool scalar_const(const qf_value *v, qf_dtype dt)
{
    return v && qf_value_is_const(v) && v->type.dtype == dt && qf_tensor_numel(&v->type) == 1;
}

/* A per-tensor int8 quantization (scale and int8 zero point constants). */
static bool per_tensor_s8(const qf_node *qdq)
{
    return qdq->ninputs == 3 && scalar_const(qdq->inputs[1], QF_DTYPE_F32) &&
           scalar_const(qdq->inputs[2], QF_DTYPE_I8) && qdq->inputs[0]->type.dtype == QF_DTYPE_I8;
}

/* The bias is int32 at scale s_x * s_W (as every QDQ converter writes it). */
static bool bias_fits(const qf_node *dqb, const qf_node *dqx, const qf_node *dqw)
{
    if (!dqb) return true;
    const qf_value *bq = dqb->inputs[0], *sb = dqb->inputs[1];
    if (!qf_value_is_const(bq) || bq->type.dtype != QF_DTYPE_I32 || !qf_value_is_const(sb)) return false;
    float sx = *(const float *)dqx->inputs[1]->type.data;
    const float *sw = dqw->inputs[1]->type.data, *s = sb->type.data;
    int64_t nw = qf_tensor_numel(&dqw->inputs[1]->type), n = qf_tensor_numel(&sb->type);
    if (n != nw && n != 1) return false;
    for (int64_t c = 0; c < n; c++) {
        float want = sx * sw[nw == 1 ? 0 : c];
        if (fabsf(s[c] - want) > 1e-6f * fabsf(want)) return false;
    }
    return true;
}

/* The clamp of a ReLU-range activation in the output's integers (TFLite's
 * CalculateActivationRangeQuantized); false for other ops. */
static bool act_clamp(const qf_node *act, float ys, int32_t yz, int64_t *lo, int64_t *hi)
{
    double mn = -INFINITY, mx = INFINITY;
    if (act->op == QF_OP_RELU) {
        mn = 0.0;
    } else if (act->op == QF_OP_RELU6) {
        mn = 0.0;
        mx = 6.0;
    } else if (act->op == QF_OP_CLIP) {
        for (int i = 1; i < act->ninputs && i < 3; i++) {
            const qf_value *b = act->inputs[i];
            if (!b) continue;
            if (!scalar_const(b, QF_DTYPE_F32)) return false;
            if (i == 1) mn = *(const float *)b->type.data;
            else mx = *(const float *)b->type.data;
        }
    } else {
        return false;
    }
    *lo = -128;
    *hi = 127;
    if (isfinite(mn)) {
        double q = yz + nearbyint(mn / ys);
        *lo = q > -128 ? (int64_t)fmin(q, 127) : -128;
    }
    if (isfinite(mx)) {
        double q = yz + nearbyint(mx / ys);
        *hi = q < 127 ? (int64_t)fmax(q, -128) : 127;
    }
    return *lo <= *hi;
}

/* Lower conv node n if it heads a DQ -> Conv -> [act] -> Q group. */
static qf_status lower_conv(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    *done = false;
    const qf_node *dqx = dq_of(n->inputs[0]), *dqw = dq_of(n->inputs[1]);
    const qf_node *dqb = n->ninputs > 2 && n->inputs[2] ? dq_of(n->inputs[2]) : NULL;
    if (!dqx || !dqw || (n->ninputs > 2 && n->inputs[2] && !dqb)) return QF_OK;
    if (!per_tensor_s8(dqx) || dqw->ninputs != 3 || !qf_value_is_const(dqw->inputs[0]) ||
        dqw->inputs[0]->type.dtype != QF_DTYPE_I8 || !qf_value_is_const(dqw->inputs[1]) ||
        !qf_value_is_const(dqw->inputs[2]) || dqw->inputs[2]->type.dtype != QF_DTYPE_I8)
        return QF_OK;
    if (qf_tensor_numel(&dqw->inputs[1]->type) > 1 && qf_node_attr_int(dqw, "axis", 1) != 0) return QF_OK;
    if (!bias_fits(dqb, dqx, dqw)) {
        if (ctx) qf_pass_skip(ctx, n, "bias scale is not s_x * s_W: left as DQ -> Conv -> Q");
        return QF_OK;
    }
    /* y -> [act ->] Q, each link the only reader. */
    const qf_value *y = n->outputs[0];
    if (y->nuses != 1 || y->is_output) return QF_OK;
    const qf_node *act = NULL, *q = y->uses[0].node;
    if (q->op != QF_OP_QUANTIZE) {
        act = q;
        const qf_value *z = act->outputs[0];
        if (act->noutputs != 1 || z->nuses != 1 || z->is_output || y->uses[0].slot != 0) return QF_OK;
        q = z->uses[0].node;
        if (q->op != QF_OP_QUANTIZE) return QF_OK;
    }
    /* The Q: a per-tensor scale and an int8 zero point (its input is float). */
    if (q->ninputs != 3 || !scalar_const(q->inputs[1], QF_DTYPE_F32) || !scalar_const(q->inputs[2], QF_DTYPE_I8))
        return QF_OK;
    float ys = *(const float *)q->inputs[1]->type.data;
    int32_t yz = *(const int8_t *)q->inputs[2]->type.data;
    int64_t clamp[2] = {-128, 127};
    if (act && !act_clamp(act, ys, yz, &clamp[0], &clamp[1])) return QF_OK;

    qf_value *in[9] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], dqw->inputs[0], dqw->inputs[1],
                       dqw->inputs[2], q->inputs[1], q->inputs[2], dqb ? dqb->inputs[0] : NULL};
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_node *ql = qf_graph_add_node(g, QF_OP_QLINEAR_CONV, name, dqb ? 9 : 8, in, 1);
    if (!ql) return QF_ERR_NOMEM;
    for (int i = 0; i < n->nattrs; i++) {
        const qf_attr *a = &n->attrs[i];
        qf_status st = QF_OK;
        if (a->type == QF_ATTR_INT) st = qf_node_set_attr_int(g, ql, a->name, a->i);
        else if (a->type == QF_ATTR_INTS) st = qf_node_set_attr_ints(g, ql, a->name, a->ints, a->n);
        else if (a->type == QF_ATTR_STRING) st = qf_node_set_attr_string(g, ql, a->name, a->s);
        QF_TRY(st);
    }
    if (rq == QF_REQUANT_FIXED_POINT) QF_TRY(qf_node_set_attr_int(g, ql, "qfold_requant", 1));
    QF_TRY(qf_node_set_attr_ints(g, ql, "qfold_clamp", clamp, 2));
    ql->outputs[0]->type = q->outputs[0]->type;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 conv (%s%s) -> '%s'", act ? qf_op_name(act->op) : "no activation",
                        dqb ? ", int32 bias" : "", q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], ql->outputs[0]));
    *done = true;
    return QF_OK;
}

qf_status qf_quant_lower_int8(qf_graph *g, qf_pass_ctx *ctx, qf_int8_requant_kind rq, int *count)
{
    int k = 0;
    for (qf_node *n = g->first; n; n = n->next) {
        if (n->op != QF_OP_CONV) continue;
        bool done;
        QF_TRY(lower_conv(g, ctx, n, rq, &done));
        k += done;
    }
    if (count) *count = k;
    if (k) {
        qf_graph_dce(g);
        QF_TRY(qf_graph_toposort(g));
        QF_TRY(qf_graph_infer_shapes(g));
    }
    return QF_OK;
}

static qf_status quant_lower_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    int k = 0;
    QF_TRY(qf_quant_lower_int8(g, ctx, QF_REQUANT_FIXED_POINT, &k));
    *changed = k > 0;
    return QF_OK;
}

const qf_pass qf_pass_quant_lower_int8 = {
    .name = "quant_lower_int8",
    .summary = "int8 executor: DQ -> Conv -> [ReLU] -> Q groups become integer convs (for running, not export)",
    .run = quant_lower_run,
};
