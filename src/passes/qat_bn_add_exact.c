/* qat_bn_add_exact: QAT's exact simulated BatchNorm fusion (`--qat-bn
 * exact`), the two-pass method of PyTorch's _ConvBnNd._forward_slow, for a
 * conv, conv_transpose or linear followed by BatchNormalization. Where
 * qat_bn_add divides the op's output by s = γ / sqrt(σ² + ε) (NaN for a
 * channel with γ = 0), this form never divides by s (the ops:
 * src/ops/qat/qat_bn_exact.c).
 *
 *   before
 *
 *   W ──[fake_quant]──┐
 *   x ─────────── op(x, W, b) ─ BN(γ, β, μ, σ²) ─
 *
 *   after
 *
 *      ┌──── op(x, W) ─ Y0 ─┬─ qat_bn_stats(μ, σ², b) ─ σ²' ─┐  (running statistics updated)
 *      │                    │          ┌─────────────────────┤
 *   W ─┴─ qat_bn_weight(γ, σ²') ─[fake_quant]─┐              │
 *   x ─────────────────────────────── op(x, ·) ─ Y ─ qat_bn_exact(γ, β, μ, σ²', Y0, b) ─
 *
 * The BN node itself becomes the qat_bn_exact (same name, output, epsilon
 * and momentum), the op keeps its name and reads the fake-quantized W·s
 * without its bias, and a copy of the op ("<op>_qat_batch") computes Y0 on
 * the float W for the batch statistics. W, b, γ, β, μ and σ² stay the same
 * values; qat_bn_remove puts the original chain back exactly (a running
 * statistic that other nodes read too is first given a copy of its own: the
 * training forward updates it in place).
 * Guards as qat_bn_add's (the op's output has the BN as its one reader and
 * is no graph output, W under at most one fake_quant, W and b float32
 * constants, γ, β, μ, σ² float32 constants of the op's channel count,
 * linear's output is rank 2). A BN that passes them with an epsilon or a
 * momentum that is missing or absurd (epsilon not in (0, 0.5], momentum not
 * in [0, 1]) is an error naming the node: the simulation would train with
 * statistics the model was not built for.
 */
#include <stdio.h>
#include <string.h>

#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"
#include "qfold/schema.h"

typedef qf_bn_qat_chain qat_exact;

static bool qx_f32_vec(const qf_value *v)
{
    return v && v->type.dtype == QF_DTYPE_F32;
}

/* qat_bn_add's chain (qf_bn_qat_match), and a BN with one output whose
 * parameters are float32: it becomes qat_bn_exact. */
static bool qx_match(const qf_graph *g, qf_node *bn, qat_exact *a, char *why, size_t size)
{
    if (qf_bn_qat_match(g, bn, a, why, size)) return true;
    if (bn->noutputs != 1) return qf_rewrite_why(why, size, "BN has %d outputs", bn->noutputs);
    for (int i = QF_BN_IN_SCALE; i <= QF_BN_IN_VAR; i++)
        if (!qx_f32_vec(bn->inputs[i]))
            return qf_rewrite_why(why, size, "BN parameter '%s' is not float32", bn->inputs[i]->name);
    return false;
}

/* epsilon and momentum of a BN the simulation trains: present and sane. */
static qf_status qx_bn_attrs(const qf_node *bn, float *eps, float *momentum)
{
    const qf_attr *e = qf_node_attr(bn, "epsilon"), *m = qf_node_attr(bn, "momentum");
    if (!e || e->type != QF_ATTR_FLOAT)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): no epsilon attribute: QAT needs the epsilon the model was "
                        "trained with", bn->name, qf_op_label(bn));
    if (!m || m->type != QF_ATTR_FLOAT)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): no momentum attribute: QAT needs the momentum of its "
                        "running statistics", bn->name, qf_op_label(bn));
    if (!(e->f > 0.0f && e->f <= 0.5f))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): epsilon %g is not in (0, 0.5]", bn->name, qf_op_label(bn),
                        e->f);
    if (!(m->f >= 0.0f && m->f <= 1.0f))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): momentum %g is not in [0, 1] (ONNX's: 1 - PyTorch's)",
                        bn->name, qf_op_label(bn), m->f);
    *eps = e->f;
    *momentum = m->f;
    return QF_OK;
}

/* Every attribute of `like` but tensors onto n (the op's copy). */
static qf_status qx_copy_attrs(qf_graph *g, qf_node *n, const qf_node *like)
{
    for (int i = 0; i < like->nattrs; i++) {
        const qf_attr *a = &like->attrs[i];
        switch (a->type) {
        case QF_ATTR_INT: QF_TRY(qf_node_set_attr_int(g, n, a->name, a->i)); break;
        case QF_ATTR_FLOAT: QF_TRY(qf_node_set_attr_float(g, n, a->name, a->f)); break;
        case QF_ATTR_STRING: QF_TRY(qf_node_set_attr_string(g, n, a->name, a->s)); break;
        case QF_ATTR_INTS: QF_TRY(qf_node_set_attr_ints(g, n, a->name, a->ints, a->n)); break;
        case QF_ATTR_FLOATS: QF_TRY(qf_node_set_attr_floats(g, n, a->name, a->floats, a->n)); break;
        case QF_ATTR_TENSOR:
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): tensor attribute '%s' cannot be copied",
                            like->name, qf_op_label(like), a->name);
        }
    }
    return QF_OK;
}

static qf_status qx_apply(qf_graph *g, qf_pass_ctx *ctx, qat_exact *a)
{
    qf_node *bn = a->bn, *p = a->prod;
    float eps = 0.0f, momentum = 0.0f;
    QF_TRY(qx_bn_attrs(bn, &eps, &momentum));
    for (int i = 0; i < p->nattrs; i++)
        if (p->attrs[i].type == QF_ATTR_TENSOR)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): tensor attribute '%s' cannot be copied", p->name,
                            qf_op_label(p), p->attrs[i].name);
    char name[512];
    /* Training updates mean and var in place: each must be a buffer that
     * the BN alone reads (torch.onnx.export merges equal initializers: a
     * fresh BN's running variance may be its scale as well). A shared one
     * gets a copy of its own, as the trainer gives a plain BN. */
    for (int i = QF_BN_IN_MEAN; i <= QF_BN_IN_VAR; i++) {
        qf_value *v = bn->inputs[i];
        if (v->nuses == 1 && !v->is_output) continue;
        qf_tensor t;
        QF_TRY(qf_tensor_copy(&t, &v->type));
        snprintf(name, sizeof name, "%.480s_%s", bn->name, i == QF_BN_IN_MEAN ? "running_mean" : "running_var");
        qf_value *own = qf_graph_add_constant(g, name, QF_VALUE_BUFFER, &t);
        if (!own) {
            qf_tensor_free(&t);
            return QF_ERR_NOMEM;
        }
        QF_TRY(qf_node_set_input(g, bn, i, own));
    }
    qf_value *gamma = bn->inputs[QF_BN_IN_SCALE], *mean = bn->inputs[QF_BN_IN_MEAN], *var = bn->inputs[QF_BN_IN_VAR];
    /* Y0 = op(x, W): the batch statistics' pass, on the float weight. */
    snprintf(name, sizeof name, "%.480s_qat_batch", p->name);
    qf_value *pin[2] = {p->inputs[0], a->w};
    qf_node *p0 = qf_graph_insert_node(g, p, false, p->op, name, 2, pin, 1);
    if (!p0) return QF_ERR_NOMEM;
    QF_TRY(qx_copy_attrs(g, p0, p));
    QF_TRY(qf_node_infer(g, p0));
    snprintf(name, sizeof name, "%.480s_qat_stats", bn->name);
    qf_value *sin[4] = {p0->outputs[0], mean, var, a->b};
    qf_node *sn = qf_graph_insert_node(g, p0, true, QF_OP_QAT_BN_STATS, name, a->b ? 4 : 3, sin, 1);
    if (!sn) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_float(g, sn, "momentum", momentum));
    QF_TRY(qf_node_infer(g, sn));
    qf_value *var1 = sn->outputs[0];
    snprintf(name, sizeof name, "%.480s_qat_weight", p->name);
    qf_value *win[3] = {a->w, gamma, var1};
    qf_node *wn = qf_graph_insert_node(g, sn, true, QF_OP_QAT_BN_WEIGHT, name, 3, win, 1);
    if (!wn) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_float(g, wn, "epsilon", eps));
    QF_TRY(qf_node_set_attr_int(g, wn, "axis", a->axis));
    QF_TRY(qf_node_set_attr_int(g, wn, "group", a->group));
    QF_TRY(qf_node_infer(g, wn));
    /* Rewire: the weight (or its fake_quant) reads W * s, the op has no
     * bias; the BN becomes qat_bn_exact over Y, Y0 and the updated var. */
    if (a->fq)
        QF_TRY(qf_node_set_input(g, a->fq, 0, wn->outputs[0]));
    else
        QF_TRY(qf_node_set_input(g, p, 1, wn->outputs[0]));
    if (a->b) QF_TRY(qf_node_set_input(g, p, 2, NULL));
    QF_TRY(qf_node_set_input(g, bn, QF_BN_IN_VAR, var1));
    QF_TRY(qf_node_add_input(g, bn, p0->outputs[0]));
    if (a->b) QF_TRY(qf_node_add_input(g, bn, a->b));
    qf_pass_rewrite(ctx, bn, NULL, "exact simulated fusion with %s '%s'%s (epsilon %g, momentum %g)",
                    qf_op_name(p->op), p->name, a->fq ? " under its weight fake_quant" : "", eps, momentum);
    bn->op = QF_OP_QAT_BN_EXACT;
    QF_TRY(qf_node_infer(g, bn));
    /* The fake_quant of a constant weight may sit at the head of the node
     * list, before the new weight node: restore the order. */
    return qf_graph_toposort(g);
}

static bool qat_bn_add_exact_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    char why[256];
    if (qx_match(g, bn, user, why, sizeof why)) {
        qf_pass_skip(ctx, bn, "%s", why);
        return false;
    }
    return true;
}

static qf_status qat_bn_add_exact_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    (void)bn;
    return qx_apply(g, ctx, user);
}

static qf_status qat_bn_add_exact_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qat_exact a;
    *changed = false;
    return qf_pass_for_each_op(g, ctx, QF_OP_BATCH_NORM, qat_bn_add_exact_match, qat_bn_add_exact_apply, &a,
                               changed);
}

const qf_pass qf_pass_qat_bn_add_exact = {
    "qat_bn_add_exact",
    "QAT: exact simulated fusion of BatchNorm into the conv / conv_transpose / linear before it (PyTorch's "
    "two-pass _forward_slow: batch statistics from op(x, W), W*s under the weight fake-quant, no division by s)",
    qat_bn_add_exact_run,
};
