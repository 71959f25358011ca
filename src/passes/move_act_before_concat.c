/* move_act_before_concat: an activation after a concatenation of
 * convolution / linear outputs moves before it, one copy per input, as
 * ExecuTorch's NXP backend does (its MoveActivationBeforeConcat aten pass):
 * each conv / linear then absorbs its activation (the Neutron NPU fuses
 * Relu, Relu6, Sigmoid and Tanh into the layer), and the quantizer puts one
 * observer on each fused output instead of an unfused layer output and an
 * activation of its own. The pattern comes from separable convolutions.
 *
 *   conv_1 ─┐                        conv_1 ─act─┐
 *   ...     ├─Concat─▶ c ─act─▶ y ->  ...         ├─Concat─▶ y
 *   conv_k ─┘                        conv_k ─act─┘
 *
 * Exact in float, bit for bit: the activation is element-wise, so applying
 * it to every piece and concatenating computes the same numbers.
 * Conditions (otherwise a skip on the Concat with the reason), as
 * ExecuTorch's: the Concat's only reader is a Relu, Relu6 (Clip(0, 6) after
 * canonicalize), Sigmoid or Tanh (the activations the NPU fuses) and its
 * output is no graph output; every input of the Concat is the output of a
 * 2-D convolution (rank 4) or a linear / Gemm with a rank-2 output, read by
 * the Concat alone (once) and no graph output. The copies are named
 * `<act>_<i>`; the Concat takes the activation's output (name and readers),
 * the activation is removed (QF_PASS_FOLDED, recorded on it). A Concat no
 * activation reads is no candidate (no line). */
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "rewrite.h"

static bool ma_fused_act(qf_op op)
{
    return op == QF_OP_RELU || op == QF_OP_RELU6 || op == QF_OP_SIGMOID || op == QF_OP_TANH;
}

/* A Concat is a candidate when an activation reads it: one the NPU fuses,
 * or another (then the skip says why); a Concat read by anything else is
 * no candidate and gets no line. */
static bool ma_candidate(const qf_node *n)
{
    for (int i = 0; i < n->outputs[0]->nuses; i++) {
        const qf_op op = n->outputs[0]->uses[i].node->op;
        if (ma_fused_act(op) || op == QF_OP_LEAKY_RELU || op == QF_OP_CLIP ||
            op == QF_OP_HARD_SWISH || op == QF_OP_HARD_SIGMOID)
            return true;
    }
    return false;
}

/* True, with the reason, when Concat n is not taken; else *act its activation. */
static bool ma_reject(const qf_node *n, qf_node **act, char *why, size_t size)
{
    const qf_value *c = n->outputs[0];
    qf_node *a = qf_rewrite_sole_user(c, NULL);
    if (!a)
        return qf_rewrite_why(why, size, "output is %s",
                              c->is_output ? "a graph output" : "not read by exactly one node");
    if (!ma_fused_act(a->op))
        return qf_rewrite_why(
            why, size,
            "read by %s '%s', not an activation the NPU fuses (Relu, Relu6, Sigmoid, Tanh)",
            qf_op_name(a->op), a->name);
    for (int i = 0; i < n->ninputs; i++) {
        const qf_value *v = n->inputs[i];
        const qf_node *p = v ? v->producer : NULL;
        const bool conv = p && p->op == QF_OP_CONV && v->type.ndim == 4;
        const bool lin = p && (p->op == QF_OP_LINEAR || p->op == QF_OP_GEMM) && v->type.ndim == 2;
        if (!conv && !lin)
            return qf_rewrite_why(
                why, size, "input %d is not a 2-D convolution's or a rank-2 linear's output", i);
        if (qf_rewrite_sole_user(v, NULL) != n)
            return qf_rewrite_why(why, size, "input %d ('%s') has other readers", i, v->name);
    }
    *act = a;
    return false;
}

static bool ma_want(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g;
    if (!ma_candidate(n)) return false;
    char why[320];
    if (!ma_reject(n, user, why, sizeof why)) return true;
    qf_pass_skip(ctx, n, "%s", why);
    return false;
}

static qf_status ma_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    qf_node *act = *(qf_node **)user;
    qf_value *y = act->outputs[0];
    char name[512];
    for (int i = 0; i < n->ninputs; i++) {
        qf_value *v = n->inputs[i];
        snprintf(name, sizeof name, "%.480s_%d", act->name, i);
        qf_node *k = qf_graph_insert_node(g, v->producer, true, act->op, name, 1, &v, 1);
        if (!k) return QF_ERR_NOMEM;
        QF_TRY(qf_node_copy_attrs(g, k, act));
        QF_TRY(qf_node_infer(g, k));
        QF_TRY(qf_node_set_input(g, n, i, k->outputs[0]));
    }
    qf_pass_rewrite_as(ctx, act, QF_PASS_FOLDED, NULL,
                       "moved before Concat '%s' (%d copies, one per input)", n->name, n->ninputs);
    const char *rename = y->is_output ? NULL : y->name;
    qf_value *c = n->outputs[0];
    QF_TRY(qf_graph_replace_uses(g, y, c));
    qf_graph_remove_node(g, act);
    if (rename) QF_TRY(qf_graph_rename_value(g, c, rename));
    return QF_OK;
}

static qf_status move_act_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qf_node *act = NULL;
    return qf_pass_for_each_op(g, ctx, QF_OP_CONCAT, ma_want, ma_apply, &act, changed);
}

const qf_pass qf_pass_move_act_before_concat = {
    .name = "move_act_before_concat",
    .summary = "Concat of conv / linear outputs -> Relu/Relu6/Sigmoid/Tanh: the activation on "
               "every input instead",
    .run = move_act_run,
    .deferred = true, /* reads no payload */
};
