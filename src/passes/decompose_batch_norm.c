/* decompose_batch_norm: an inference BatchNorm that no fold removed becomes
 *   Mul(x, scale) -> Add(., shift),   scale_c = s_c, shift_c = beta_c - mu_c s_c
 * with constant tensors shaped [C, 1, ..., 1] (rank of x minus one), which
 * broadcast over the batch and spatial axes. Not in the default pipeline:
 * for targets without a BatchNorm kernel, and for the quantizer, which then
 * sees two ordinary elementwise ops.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"

static bool decompose_match(const qf_graph *g, const qf_node *bn, char *why, size_t size)
{
    if (qf_bn_check(g, bn, why, size)) return true;
    const qf_value *x = bn->inputs[QF_BN_IN_X];
    if (!x || x->type.ndim < 2) return qf_rewrite_why(why, size, "BN input rank %d is not known or below 2", x ? x->type.ndim : 0);
    return false;
}

/* A [C, 1, ...] float32 constant (rank `rank`) holding vals, rounded once. */
static qf_value *decompose_const(qf_graph *g, const char *name, const double *vals, int64_t c, int rank)
{
    int64_t dims[QF_MAX_DIMS];
    dims[0] = c;
    for (int i = 1; i < rank; i++) dims[i] = 1;
    return qf_rewrite_new_const_f32(g, name, QF_VALUE_CONSTANT, vals, rank, dims);
}

static void decompose_set_type(qf_value *dst, const qf_value *like)
{
    dst->type.dtype = like->type.dtype;
    dst->type.ndim = like->type.ndim;
    memcpy(dst->type.dims, like->type.dims, sizeof dst->type.dims);
}

static qf_status decompose_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn)
{
    qf_bn_affine a;
    QF_TRY(qf_bn_affine_init(&a, bn));
    qf_value *x = bn->inputs[QF_BN_IN_X], *y = bn->outputs[0];
    char name[600];
    qf_status st = QF_ERR_NOMEM;
    snprintf(name, sizeof name, "%.560s_scale", bn->name);
    qf_value *scale = decompose_const(g, name, a.scale, a.channels, x->type.ndim - 1);
    snprintf(name, sizeof name, "%.560s_shift", bn->name);
    qf_value *shift = scale ? decompose_const(g, name, a.shift, a.channels, x->type.ndim - 1) : NULL;
    qf_node *mul = NULL, *add = NULL;
    if (shift) {
        qf_value *min[2] = {x, scale};
        snprintf(name, sizeof name, "%.560s_mul", bn->name);
        mul = qf_graph_insert_node(g, bn, false, QF_OP_MUL, name, 2, min, 1);
    }
    if (mul) {
        decompose_set_type(mul->outputs[0], y);
        qf_value *ain[2] = {mul->outputs[0], shift};
        snprintf(name, sizeof name, "%.560s_add", bn->name);
        add = qf_graph_insert_node(g, bn, false, QF_OP_ADD, name, 2, ain, 1);
    }
    if (add) {
        decompose_set_type(add->outputs[0], y);
        char *detail = qf_bn_diag_json(&a, NULL, 0);
        if (detail) {
            qf_pass_rewrite_as(ctx, bn, QF_PASS_DECOMPOSED, detail, "decomposed into %s + %s", mul->name,
                               add->name);
            qf_free(detail);
            st = qf_rewrite_splice_out(g, bn, add->outputs[0]);
        }
    }
    qf_bn_affine_free(&a);
    return st;
}

static bool decompose_batch_norm_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    (void)user;
    char why[256];
    if (decompose_match(g, bn, why, sizeof why)) {
        qf_pass_skip(ctx, bn, "%s", why);
        return false;
    }
    return true;
}

static qf_status decompose_batch_norm_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    (void)user;
    return decompose_apply(g, ctx, bn);
}

static qf_status decompose_batch_norm_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    return qf_pass_for_each_op(g, ctx, QF_OP_BATCH_NORM, decompose_batch_norm_match, decompose_batch_norm_apply, NULL,
                               changed);
}

const qf_pass qf_pass_decompose_batch_norm = {
    "decompose_batch_norm",
    "turn an inference BatchNorm into Mul + Add with constant per-channel scale and shift",
    decompose_batch_norm_run,
};
