/* The int8 lowering's entries of PRelu, Max and Min (declared in lower.h,
 * named by their rows in op_quant.c).
 *
 * Max / Min of int8 values on one scale and zero point compute exactly what
 * the QDQ form computes (the largest q has the largest (q - zp) * s, and Q
 * maps that back to q), with either requantization:
 *
 *   DQ(a), DQ(b), ... -> Max -> Q   ->  Max(aq, bq, ...)
 *
 * PRelu: TensorFlow Lite 2.2's PRELU kernel takes float32 and uint8 only
 * (int8 came with 2.3) and ArmNN 20.08's TfLite parser has no PRELU, so the
 * int8 PRelu is the one both run, in the ops the export maps one to one:
 *
 *   DQ(x) -> PRelu(x, DQ(alpha)) -> Q(s_y, zp_y)
 *     ->  p = Max(xq, zp_x)                       x's qparams (exact: relu)
 *         m = Min(xq, zp_x)                       x's qparams (exact: min(x, 0))
 *         t = QMUL(m, alpha_q) -> (s_y, zp_y)     TFLite's int8 MUL
 *         y = QADD(p, t)       -> (s_y, zp_y)     TFLite's int8 ADD
 *
 * alpha * min(x, 0) lies in y's range (it is y where x < 0), so t takes
 * y's qparams. Two roundings where the float form has one: within an LSB
 * or so of ONNX Runtime's run of the QDQ model, and the export's MAXIMUM,
 * MINIMUM, MUL, ADD compute these integers. With TFLite's requantization
 * only (the ONNX form has no integer PRelu). */
#include <stdio.h>

#include "ops/math/requant.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "quant/lower.h"

/* A constant int8 tensor behind a per-tensor DequantizeLinear with an int8
 * zero point. */
static bool const_s8(const qf_node *dq)
{
    return dq && qf_lower_per_tensor_s8(dq) && qf_value_is_const(dq->inputs[0]);
}

/* A node of op over in[0..nin) named "<n>_<what>", its output typed as
 * `like`. */
static qf_node *add_like(qf_graph *g, const qf_node *n, qf_op op, const char *what,
                         qf_value *const *in, int nin, const qf_value *like)
{
    char name[512];
    snprintf(name, sizeof name, "%.400s_%s", n->name, what);
    qf_node *k = qf_graph_add_node(g, op, name, nin, in, 1);
    if (k) k->outputs[0]->type = like->type;
    return k;
}

qf_status qf_lower_prelu(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                         bool *done)
{
    (void)rq; /* TFLite's requantization (ONNX has no integer PRelu) */
    *done = false;
    if (n->ninputs != 2 || n->noutputs != 1) return QF_OK;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]), *dqa = qf_lower_dq_of(n->inputs[1]);
    if (!dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    if (!const_s8(dqa)) {
        if (ctx)
            qf_pass_skip(ctx, n,
                         "slope is not a per-tensor int8 constant: left as DQ -> PRelu -> Q");
        return QF_OK;
    }
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp) || act) return QF_OK;
    /* the int8 Mul's and Add's multipliers (qf_lower_mul's and qf_lower_add's conditions) */
    const double sx = qf_lower_qscale(dqx), sa = qf_lower_qscale(dqa), sy = qf_lower_qscale(q);
    if (!qf_requant_fits(sx * sa / sy, 255 * 255) ||
        !(2.0 * (sx > sy ? sx : sy) / ((double)(1 << 20) * sy) < 1.0)) {
        if (ctx)
            qf_pass_skip(ctx, n,
                         "scales outside TFLite's int8 MUL / ADD: left as DQ -> PRelu -> Q");
        return QF_OK;
    }
    qf_tensor zt;
    QF_TRY(qf_tensor_init(&zt, QF_DTYPE_I8, 1, (const int64_t[]){1}));
    *(int8_t *)zt.data = (int8_t)qf_lower_qzp(dqx);
    char name[512];
    snprintf(name, sizeof name, "%.400s_zero_point", n->name);
    qf_value *zero = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &zt);
    if (!zero) {
        qf_tensor_free(&zt);
        return QF_ERR_NOMEM;
    }
    qf_value *x8 = dqx->inputs[0];
    qf_value *pin[2] = {x8, zero};
    qf_node *p = add_like(g, n, QF_OP_MAX, "relu", pin, 2, x8),
            *m = add_like(g, n, QF_OP_MIN, "negative", pin, 2, x8);
    if (!p || !m) return QF_ERR_NOMEM;
    qf_value *tin[8] = {m->outputs[0],  dqx->inputs[1], dqx->inputs[2], dqa->inputs[0],
                        dqa->inputs[1], dqa->inputs[2], q->inputs[1],   q->inputs[2]};
    qf_node *t = add_like(g, n, QF_OP_QMUL, "scaled", tin, 8, x8);
    if (!t) return QF_ERR_NOMEM;
    qf_value *yin[8] = {p->outputs[0], dqx->inputs[1], dqx->inputs[2], t->outputs[0],
                        q->inputs[1],  q->inputs[2],   q->inputs[1],   q->inputs[2]};
    qf_node *y = add_like(g, n, QF_OP_QADD, "int8", yin, 8, q->outputs[0]);
    if (!y) return QF_ERR_NOMEM;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 prelu (max, min, mul, add) -> '%s'",
                        q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], y->outputs[0]));
    *done = true;
    return QF_OK;
}

qf_status qf_lower_extreme(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                           bool *done)
{
    (void)rq; /* exact: no requantization */
    *done = false;
    if (n->ninputs < 1 || n->ninputs > 16 || n->noutputs != 1) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp) || act) return QF_OK;
    const float sy = qf_lower_qscale(q);
    const int32_t zy = qf_lower_qzp(q);
    qf_value *in[16];
    for (int i = 0; i < n->ninputs; i++) {
        const qf_node *dq = qf_lower_dq_of(n->inputs[i]);
        if (!dq || !qf_lower_per_tensor_s8(dq)) return QF_OK;
        if (qf_lower_qscale(dq) != sy || qf_lower_qzp(dq) != zy) {
            if (ctx)
                qf_pass_skip(ctx, n,
                             "inputs and output on different qparams: left as DQ -> %s -> Q",
                             qf_op_label(n));
            return QF_OK;
        }
        in[i] = dq->inputs[0];
    }
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_node *k = qf_graph_add_node(g, n->op, name, n->ninputs, in, 1);
    if (!k) return QF_ERR_NOMEM;
    k->outputs[0]->type = q->outputs[0]->type;
    if (ctx) qf_pass_rewrite(ctx, n, NULL, "int8 %s -> '%s'", qf_op_label(n), q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], k->outputs[0]));
    *done = true;
    return QF_OK;
}
