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
 */
#include <stdio.h>
#include <string.h>

#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"

typedef struct qat_rm {
    qf_node *out, *prod, *wnode, *fq;
} qat_rm;

static bool qat_rm_match(qf_node *on, qat_rm *r, char *why, size_t size)
{
    memset(r, 0, sizeof *r);
    r->out = on;
    qf_node *p = on->inputs[0] ? on->inputs[0]->producer : NULL;
    if (!p || (p->op != QF_OP_CONV && p->op != QF_OP_CONV_TRANSPOSE && p->op != QF_OP_LINEAR))
        return qf_rewrite_why(why, size, "input does not come from a conv / conv_transpose / linear");
    r->prod = p;
    if (p->outputs[0]->nuses != 1 || p->outputs[0]->is_output)
        return qf_rewrite_why(why, size, "%s '%s' output has other readers", qf_op_name(p->op), p->name);
    if (p->ninputs > 2 && p->inputs[2])
        return qf_rewrite_why(why, size, "%s '%s' has a bias of its own", qf_op_name(p->op), p->name);
    qf_value *w = p->ninputs > 1 ? p->inputs[1] : NULL;
    qf_node *wn = w ? w->producer : NULL;
    if (wn && wn->op == QF_OP_FAKE_QUANT) {
        r->fq = wn;
        wn = wn->inputs[0] ? wn->inputs[0]->producer : NULL;
    }
    if (!wn || wn->op != QF_OP_QAT_BN_WEIGHT)
        return qf_rewrite_why(why, size, "the weight of %s '%s' is not a qat_bn_weight", qf_op_name(p->op), p->name);
    if (wn->inputs[1] != on->inputs[1] || wn->inputs[2] != on->inputs[2])
        return qf_rewrite_why(why, size, "qat_bn_weight '%s' reads another gamma / running_var", wn->name);
    if (wn->outputs[0]->nuses != 1)
        return qf_rewrite_why(why, size, "qat_bn_weight '%s' has %d readers", wn->name, wn->outputs[0]->nuses);
    r->wnode = wn;
    return false;
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
    *changed = false;
    return qf_pass_for_each_op(g, ctx, QF_OP_QAT_BN_OUTPUT, qat_bn_remove_match, qat_bn_remove_apply, &r, changed);
}

const qf_pass qf_pass_qat_bn_remove = {
    "qat_bn_remove",
    "QAT: remove the simulated BatchNorm fusion qat_bn_add made (op(x, W, b) -> BN again, exactly)",
    qat_bn_remove_run,
};
