/* qat_bn_remove: undo qat_bn_add exactly.
 *
 *   before                                                            after
 *
 *   W ─ qat_bn_weight(γ, σ²) ─[fake_quant]─┐                           W ──[fake_quant]──┐
 *   x ──────────────────────────── op(x, ·) ─ qat_bn_output(γ, σ², b) ─ BN    x ──── op(x, W, b) ─ BN ─
 *
 * The simulation's nodes are internal ops that only qat_bn_add makes (no
 * ONNX model can hold one), so a chain of ONNX ops that looks the same is
 * never touched. W, b, γ and σ² were never changed, so the restored graph
 * computes what the original did, bit for bit. A qat_bn_output whose chain
 * does not match (its weight node reads other γ / σ², the op has a bias of
 * its own, the output has other readers) is reported and left.
 *
 * The exact form of qat_bn_add_exact is undone the same way: the
 * qat_bn_exact node becomes the BatchNormalization it was (reading the op's
 * output and σ² again), the op reads [fake_quant](W) and b again, and the
 * op's copy that computed Y0, the qat_bn_stats and the qat_bn_weight go;
 * every link of that chain is checked first (the copy reads the op's x and
 * W, the stats node the BN's μ and b, the weight node γ and σ²').
 */
#include <stdio.h>
#include <string.h>

#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"

typedef struct qat_rm {
    qf_node *out, *prod, *wnode, *fq;
} qat_rm;

/* The op side both forms share: y comes from a conv / conv_transpose /
 * linear read only here, with no bias of its own, whose weight is
 * qat_bn_weight(W, gamma, var) (under at most one fake_quant) read only by
 * it. Fills *prod, *fq (or NULL), *wnode; true with the reason otherwise. */
static bool qat_rm_op(const qf_value *y, const qf_value *gamma, const qf_value *var, qf_node **prod, qf_node **fq,
                      qf_node **wnode, char *why, size_t size)
{
    qf_node *p = y ? y->producer : NULL;
    if (!p || (p->op != QF_OP_CONV && p->op != QF_OP_CONV_TRANSPOSE && p->op != QF_OP_LINEAR))
        return qf_rewrite_why(why, size, "input does not come from a conv / conv_transpose / linear");
    *prod = p;
    if (p->outputs[0]->nuses != 1 || p->outputs[0]->is_output)
        return qf_rewrite_why(why, size, "%s '%s' output has other readers", qf_op_name(p->op), p->name);
    if (p->ninputs > 2 && p->inputs[2])
        return qf_rewrite_why(why, size, "%s '%s' has a bias of its own", qf_op_name(p->op), p->name);
    qf_value *w = p->ninputs > 1 ? p->inputs[1] : NULL;
    qf_node *wn = w ? w->producer : NULL;
    if (wn && wn->op == QF_OP_FAKE_QUANT) {
        *fq = wn;
        wn = wn->inputs[0] ? wn->inputs[0]->producer : NULL;
    }
    if (!wn || wn->op != QF_OP_QAT_BN_WEIGHT)
        return qf_rewrite_why(why, size, "the weight of %s '%s' is not a qat_bn_weight", qf_op_name(p->op), p->name);
    if (wn->inputs[1] != gamma || wn->inputs[2] != var)
        return qf_rewrite_why(why, size, "qat_bn_weight '%s' reads another gamma / running_var", wn->name);
    if (wn->outputs[0]->nuses != 1)
        return qf_rewrite_why(why, size, "qat_bn_weight '%s' has %d readers", wn->name, wn->outputs[0]->nuses);
    *wnode = wn;
    return false;
}

static bool qat_rm_match(qf_node *on, qat_rm *r, char *why, size_t size)
{
    memset(r, 0, sizeof *r);
    r->out = on;
    return qat_rm_op(on->inputs[0], on->inputs[1], on->inputs[2], &r->prod, &r->fq, &r->wnode, why, size);
}

static qf_status qat_rm_apply(qf_graph *g, qf_pass_ctx *ctx, qat_rm *r)
{
    qf_node *p = r->prod, *on = r->out, *wn = r->wnode;
    qf_value *w = wn->inputs[0], *b = on->ninputs > 3 ? on->inputs[3] : NULL;
    if (r->fq)
        QF_TRY(qf_node_set_input(g, r->fq, 0, w));
    else
        QF_TRY(qf_node_set_input(g, p, 1, w));
    if (b) {
        if (p->ninputs > 2)
            QF_TRY(qf_node_set_input(g, p, 2, b));
        else
            QF_TRY(qf_node_add_input(g, p, b));
    }
    qf_pass_rewrite_as(ctx, on, QF_PASS_REMOVED, NULL, "simulated BatchNorm fusion of %s '%s' removed",
                       qf_op_name(p->op), p->name);
    /* The op's output takes over the qat_bn_output's readers (the BN). */
    QF_TRY(qf_graph_replace_uses(g, on->outputs[0], p->outputs[0]));
    qf_graph_remove_node(g, on);
    qf_graph_remove_node(g, wn);
    return QF_OK;
}

/* --- the exact form (qat_bn_add_exact) ---------------------------------------- */

enum { QX_Y = 0, QX_GAMMA, QX_BETA, QX_MEAN, QX_VAR, QX_Y0, QX_BIAS };

typedef struct qat_rm_exact {
    qf_node *ex, *prod, *copy, *stats, *wnode, *fq;
} qat_rm_exact;

static bool qat_rm_exact_match(qf_node *ex, qat_rm_exact *r, char *why, size_t size)
{
    memset(r, 0, sizeof *r);
    r->ex = ex;
    if (ex->ninputs < 6 || ex->noutputs != 1) return qf_rewrite_why(why, size, "not the exact form's 6 or 7 inputs");
    qf_value *b = ex->ninputs > QX_BIAS ? ex->inputs[QX_BIAS] : NULL;
    if (qat_rm_op(ex->inputs[QX_Y], ex->inputs[QX_GAMMA], ex->inputs[QX_VAR], &r->prod, &r->fq, &r->wnode, why,
                  size))
        return true;
    qf_node *p = r->prod;
    qf_value *var1 = ex->inputs[QX_VAR], *y0 = ex->inputs[QX_Y0];
    qf_node *sn = var1 ? var1->producer : NULL;
    if (!sn || sn->op != QF_OP_QAT_BN_STATS)
        return qf_rewrite_why(why, size, "running_var does not come from a qat_bn_stats");
    if (var1->nuses != 2 || var1->is_output)
        return qf_rewrite_why(why, size, "qat_bn_stats '%s' has other readers", sn->name);
    qf_value *sb = sn->ninputs > 3 ? sn->inputs[3] : NULL;
    if (sn->inputs[0] != y0 || sn->inputs[1] != ex->inputs[QX_MEAN] || sb != b)
        return qf_rewrite_why(why, size, "qat_bn_stats '%s' reads another Y0 / running_mean / bias", sn->name);
    r->stats = sn;
    qf_node *cp = y0 ? y0->producer : NULL;
    if (!cp || cp->op != p->op || cp->ninputs < 2 || (cp->ninputs > 2 && cp->inputs[2]) ||
        cp->inputs[0] != p->inputs[0] || cp->inputs[1] != r->wnode->inputs[0])
        return qf_rewrite_why(why, size, "Y0 is not %s '%s' on the float weight", qf_op_name(p->op), p->name);
    if (y0->nuses != 2 || y0->is_output)
        return qf_rewrite_why(why, size, "%s '%s' output has other readers", qf_op_name(cp->op), cp->name);
    r->copy = cp;
    return false;
}

static qf_status qat_rm_exact_apply(qf_graph *g, qf_pass_ctx *ctx, qat_rm_exact *r)
{
    qf_node *p = r->prod, *ex = r->ex;
    qf_value *w = r->wnode->inputs[0], *var = r->stats->inputs[2];
    qf_value *b = ex->ninputs > QX_BIAS ? ex->inputs[QX_BIAS] : NULL;
    if (r->fq)
        QF_TRY(qf_node_set_input(g, r->fq, 0, w));
    else
        QF_TRY(qf_node_set_input(g, p, 1, w));
    if (b) {
        if (p->ninputs > 2)
            QF_TRY(qf_node_set_input(g, p, 2, b));
        else
            QF_TRY(qf_node_add_input(g, p, b));
    }
    qf_pass_rewrite_as(ctx, ex, QF_PASS_REMOVED, NULL, "exact simulated BatchNorm fusion of %s '%s' removed",
                       qf_op_name(p->op), p->name);
    /* The qat_bn_exact becomes the BatchNormalization it was. */
    QF_TRY(qf_node_set_input(g, ex, QX_VAR, var));
    for (int i = ex->ninputs - 1; i >= QX_Y0; i--) QF_TRY(qf_node_set_input(g, ex, i, NULL));
    ex->ninputs = QX_Y0;
    ex->op = QF_OP_BATCH_NORM;
    qf_graph_remove_node(g, r->wnode);
    qf_graph_remove_node(g, r->stats);
    qf_graph_remove_node(g, r->copy);
    return qf_node_infer(g, ex);
}

static bool qat_bn_remove_exact_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *ex, void *user)
{
    (void)g;
    char why[256];
    if (qat_rm_exact_match(ex, user, why, sizeof why)) {
        qf_pass_skip(ctx, ex, "%s", why);
        return false;
    }
    return true;
}

static qf_status qat_bn_remove_exact_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *ex, void *user)
{
    (void)ex;
    return qat_rm_exact_apply(g, ctx, user);
}

static bool qat_bn_remove_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *on, void *user)
{
    (void)g;
    char why[256];
    if (qat_rm_match(on, user, why, sizeof why)) {
        qf_pass_skip(ctx, on, "%s", why);
        return false;
    }
    return true;
}

static qf_status qat_bn_remove_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *on, void *user)
{
    (void)on;
    return qat_rm_apply(g, ctx, user);
}

static qf_status qat_bn_remove_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qat_rm r;
    qat_rm_exact x;
    *changed = false;
    QF_TRY(qf_pass_for_each_op(g, ctx, QF_OP_QAT_BN_OUTPUT, qat_bn_remove_match, qat_bn_remove_apply, &r, changed));
    bool exact = false;
    QF_TRY(qf_pass_for_each_op(g, ctx, QF_OP_QAT_BN_EXACT, qat_bn_remove_exact_match, qat_bn_remove_exact_apply, &x,
                               &exact));
    *changed = *changed || exact;
    return QF_OK;
}

const qf_pass qf_pass_qat_bn_remove = {
    "qat_bn_remove",
    "QAT: remove the simulated BatchNorm fusion qat_bn_add / qat_bn_add_exact made (op(x, W, b) -> BN again, "
    "exactly)",
    qat_bn_remove_run,
};
