/* fuse_linear_add: a constant added to a Linear layer's output becomes part
 * of its bias, as ExecuTorch's NXP backend does (its FuseLinearAndAdd aten
 * pass): the Neutron NPU then runs one FULLY_CONNECTED instead of a
 * FULLY_CONNECTED and an ADD, and the quantized model loses the Add's
 * requantization.
 *
 *   x ─linear(W, b?)─▶ h ─Add(·, c)─▶ y      ->      x ─linear(W, b + c)─▶ y
 *
 * Conditions (otherwise a skip with the reason), as ExecuTorch's: the
 * linear's output has one reader, the Add, and is no graph output; the
 * Add's other operand is a float32 constant that adds one value per output
 * feature: [O], or [1, ..., 1, O] of no higher rank than the output, or one
 * value ([], [1], ...: broadcast to O); an existing bias is a float32
 * constant. ONNX's Add has no alpha, so either operand order is taken.
 * `Gemm` and `MatMul + Add` are `linear` after canonicalize (pipeline ptq,
 * which quantize runs first).
 *
 * b + c is computed in double and rounded once. The function is the same in
 * real arithmetic; in float32 the sums are ordered differently (the kernel
 * starts each row from the bias: (b + c) + x·Wᵀ against (b + x·Wᵀ) + c), so
 * outputs agree within float32 rounding of |b| + |c| + |x·Wᵀ|, not bit for
 * bit. The linear keeps its name and takes the Add's output (name and
 * readers); the Add is removed (QF_PASS_FOLDED). A linear no Add reads is no
 * candidate (no line). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"
#include "rewrite.h"

typedef struct la_match {
    qf_node *add;
    int slot;    /* the linear's output's slot in the Add */
    int64_t out; /* output features */
} la_match;

static bool la_reject(const qf_node *n, la_match *m, char *why, size_t size)
{
    const qf_value *h = n->outputs[0], *w = n->inputs[1];
    qf_node *add = qf_rewrite_sole_user(h, &m->slot);
    if (!add || add->op != QF_OP_ADD)
        return qf_rewrite_why(why, size, "output is %s",
                              h->is_output ? "a graph output"
                              : add        ? "not read by an Add"
                                           : "read more than once");
    if (add->ninputs != 2)
        return qf_rewrite_why(why, size, "Add '%s' has %d inputs", add->name, add->ninputs);
    if (w->type.ndim != 2 || w->type.dims[0] <= 0)
        return qf_rewrite_why(why, size, "weight is not [out, in] with known out");
    m->add = add;
    m->out = w->type.dims[0];
    const qf_value *c = add->inputs[1 - m->slot], *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (!qf_rewrite_is_f32_const(c))
        return qf_rewrite_why(why, size, "Add '%s' adds %s", add->name,
                              qf_value_is_const(c) ? "a constant that is not float32"
                                                   : "a tensor that is not a constant");
    const int64_t cn = qf_tensor_numel(&c->type);
    bool fits = c->type.ndim <= h->type.ndim && (cn == 1 || cn == m->out);
    for (int i = 0; fits && i + 1 < c->type.ndim; i++) fits = c->type.dims[i] == 1;
    if (!fits)
        return qf_rewrite_why(
            why, size,
            "Add '%s' adds a constant of %lld values that is not one per output feature (%lld)",
            add->name, (long long)cn, (long long)m->out);
    if (b && (!qf_rewrite_is_f32_const(b) || qf_tensor_numel(&b->type) != m->out))
        return qf_rewrite_why(why, size, "bias is not a float32 constant of %lld values",
                              (long long)m->out);
    return false;
}

static bool la_want(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g;
    /* a candidate: an Add reads the output (else no line) */
    bool add = false;
    for (int i = 0; i < n->outputs[0]->nuses; i++)
        add |= n->outputs[0]->uses[i].node->op == QF_OP_ADD;
    if (!add) return false;
    char why[256];
    if (!la_reject(n, user, why, sizeof why)) return true;
    qf_pass_skip(ctx, n, "%s", why);
    return false;
}

static qf_status la_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    const la_match *m = user;
    qf_node *add = m->add;
    qf_value *c = add->inputs[1 - m->slot], *y = add->outputs[0];
    const qf_value *b = n->ninputs > 2 ? n->inputs[2] : NULL;
    QF_TRY(qf_rewrite_check_finite(c, add));
    qf_tensor nb;
    QF_TRY(qf_tensor_init(&nb, QF_DTYPE_F32, 1, &m->out));
    const float *cp = c->type.data, *bp = b ? b->type.data : NULL;
    const bool one = qf_tensor_numel(&c->type) == 1;
    float *o = nb.data;
    for (int64_t i = 0; i < m->out; i++)
        o[i] = (float)((bp ? (double)bp[i] : 0.0) + (double)cp[one ? 0 : i]);
    char hint[512];
    snprintf(hint, sizeof hint, "%.480s_bias", n->name);
    qf_pass_rewrite_as(ctx, add, QF_PASS_FOLDED, NULL,
                       "constant Add folded into the bias of linear '%s'%s", n->name,
                       b ? " (added to its bias)" : "");
    QF_TRY(qf_rewrite_install_const(g, n, 2, &nb, hint));
    /* the linear takes the Add's output: a graph output keeps its name */
    const char *rename = y->is_output ? NULL : y->name;
    qf_value *h = n->outputs[0];
    QF_TRY(qf_graph_replace_uses(g, y, h));
    qf_graph_remove_node(g, add);
    qf_rewrite_drop_dead_consts(g, &c, 1);
    if (rename) QF_TRY(qf_graph_rename_value(g, h, rename));
    return QF_OK;
}

static qf_status fuse_linear_add_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    la_match m;
    return qf_pass_for_each_op(g, ctx, QF_OP_LINEAR, la_want, la_apply, &m, changed);
}

const qf_pass qf_pass_fuse_linear_add = {
    .name = "fuse_linear_add",
    .summary =
        "linear(x, W, b) + c (c constant, one value per output feature) -> linear(x, W, b + c)",
    .run = fuse_linear_add_run,
};
