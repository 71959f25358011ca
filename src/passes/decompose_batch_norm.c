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
#include "qfold/pass.h"

static bool decompose_match(const qf_graph *g, const qf_node *bn, char *why, size_t size)
{
    if (qf_bn_check(g, bn, why, size)) return true;
    const qf_value *x = bn->inputs[QF_BN_IN_X];
    if (!x || x->type.ndim < 2) return qf_bn_why(why, size, "BN input rank %d is not known or below 2", x ? x->type.ndim : 0);
    return false;
}

/* A [C, 1, ...] float32 constant (rank `rank`) holding vals, rounded once. */
static qf_value *decompose_const(qf_graph *g, const char *name, const double *vals, int64_t c, int rank)
{
    int64_t dims[QF_MAX_DIMS];
    dims[0] = c;
    for (int i = 1; i < rank; i++) dims[i] = 1;
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, rank, dims) != QF_OK) return NULL;
    float *p = t.data;
    for (int64_t i = 0; i < c; i++) p[i] = (float)vals[i];
    qf_value *v = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!v) qf_tensor_free(&t);
    return v;
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
            qf_pass_rewrite(ctx, bn, detail, "decomposed into %s + %s", mul->name, add->name);
            qf_free(detail);
            qf_value *params[4] = {bn->inputs[1], bn->inputs[2], bn->inputs[3], bn->inputs[4]};
            st = qf_graph_replace_uses(g, y, add->outputs[0]);
            if (st == QF_OK) {
                qf_graph_remove_node(g, bn);
                qf_bn_drop_unused_params(g, params);
            }
        }
    }
    qf_bn_affine_free(&a);
    return st;
}

static qf_status decompose_batch_norm_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    for (qf_node *n = g->first, *next; n; n = next) {
        next = n->next;
        if (n->op != QF_OP_BATCH_NORM) continue;
        char why[256];
        if (decompose_match(g, n, why, sizeof why)) {
            qf_pass_skip(ctx, n, "%s", why);
            continue;
        }
        QF_TRY(decompose_apply(g, ctx, n));
        *changed = true;
    }
    return QF_OK;
}

const qf_pass qf_pass_decompose_batch_norm = {
    "decompose_batch_norm",
    "turn an inference BatchNorm into Mul + Add with constant per-channel scale and shift",
    decompose_batch_norm_run,
};
