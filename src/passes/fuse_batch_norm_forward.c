/* fuse_batch_norm_forward: fold an inference BatchNorm into the conv that
 * reads its output (BN -> conv), the case fuse_batch_norm cannot reach
 * (a BN at the model's input, or after an op with no weights).
 *
 * BN is x_i -> a_i x_i + d_i per input channel i of the conv, with
 * a_i = s_i = gamma_i / sqrt(var_i + eps) and d_i = beta_i - mu_i s_i, so
 *   W'[o, i, k] = W[o, i, k] * a_i,   b'_o = b_o + sum_{i,k} W[o, i, k] * d_i.
 * The bias term assumes every tap of the kernel reads a BN output: exact
 * only without padding (a padded conv would see zeros where the unfolded
 * graph saw d_i). Strides and dilations do not matter. For groups > 1 the
 * input channel of W[o, i] is (o / (O/g)) * (C/g) + i; we fold groups = 1 and
 * depthwise (g = C), the two layouts the Neutron backend folds.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"

typedef struct ffold {
    qf_node *bn, *conv;
    qf_value *w, *b;
    int64_t groups, out_ch, in_ch;
} ffold;

static bool ffold_match(const qf_graph *g, qf_node *bn, ffold *f, char *why, size_t size)
{
    memset(f, 0, sizeof *f);
    f->bn = bn;
    if (qf_bn_check(g, bn, why, size)) return true;
    qf_value *y = bn->outputs[0];
    if (y->is_output) return qf_rewrite_why(why, size, "BN output is a graph output");
    if (y->nuses == 0) return qf_rewrite_why(why, size, "BN output is not used");
    if (y->nuses != 1) return qf_rewrite_why(why, size, "BN output has %d users", y->nuses);
    qf_node *c = y->uses[0].node;
    if (c->op != QF_OP_CONV) return qf_rewrite_why(why, size, "BN output feeds %s, not a conv", qf_op_name(c->op));
    if (y->uses[0].slot != 0) return qf_rewrite_why(why, size, "BN output is not the conv's data input");
    f->conv = c;
    const char *ap = qf_node_attr_string(c, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0)
        return qf_rewrite_why(why, size, "conv '%s' pads its input (auto_pad %s)", c->name, ap);
    int npads = 0;
    const int64_t *pads = qf_node_attr_ints(c, "pads", &npads);
    for (int i = 0; i < npads; i++)
        if (pads[i] != 0) return qf_rewrite_why(why, size, "conv '%s' pads its input (pads[%d] = %" PRId64 ")", c->name, i, pads[i]);
    f->w = c->ninputs > 1 ? c->inputs[1] : NULL;
    if (!f->w || !qf_value_is_const(f->w)) return qf_rewrite_why(why, size, "weight is not a constant");
    if (f->w->type.dtype != QF_DTYPE_F32)
        return qf_rewrite_why(why, size, "weight '%s' is %s; only float32 weights are folded", f->w->name,
                         qf_dtype_name(f->w->type.dtype));
    if (f->w->type.ndim < 3) return qf_rewrite_why(why, size, "conv weight has rank %d", f->w->type.ndim);
    if (c->ninputs > 2 && c->inputs[2]) {
        f->b = c->inputs[2];
        if (!qf_value_is_const(f->b)) return qf_rewrite_why(why, size, "bias '%s' is not a constant", f->b->name);
        if (f->b->type.dtype != QF_DTYPE_F32 || f->b->type.ndim != 1 || f->b->type.dims[0] != f->w->type.dims[0])
            return qf_rewrite_why(why, size, "bias '%s' is not a float32 vector of the output channels", f->b->name);
    }
    int64_t ch = qf_tensor_numel(&bn->inputs[QF_BN_IN_SCALE]->type);
    f->groups = qf_node_attr_int(c, "group", 1);
    f->out_ch = f->w->type.dims[0];
    f->in_ch = f->w->type.dims[1] * f->groups;
    if (f->in_ch != ch)
        return qf_rewrite_why(why, size, "channel counts differ: conv '%s' reads %" PRId64 " channels, BN has %" PRId64,
                         c->name, f->in_ch, ch);
    if (f->groups != 1 && f->groups != ch)
        return qf_rewrite_why(why, size, "conv '%s' has groups %" PRId64 " (only 1 or depthwise are folded)", c->name,
                         f->groups);
    if (f->out_ch % f->groups)
        return qf_rewrite_why(why, size, "conv '%s': %" PRId64 " output channels in %" PRId64 " groups", c->name,
                         f->out_ch, f->groups);
    return false;
}

static qf_status ffold_apply(qf_graph *g, qf_pass_ctx *ctx, ffold *f)
{
    qf_node *bn = f->bn, *c = f->conv;
    /* Payloads left in the model file are read first (graph.h). */
    QF_TRY(qf_value_load(g, f->w));
    if (f->b) QF_TRY(qf_value_load(g, f->b));
    qf_bn_affine a;
    QF_TRY(qf_bn_affine_init(&a, bn));
    const qf_tensor *wt = &f->w->type;
    int64_t O = f->out_ch, cg = wt->dims[1], og = O / f->groups;
    int64_t kk = O > 0 && cg > 0 ? qf_tensor_numel(wt) / (O * cg) : 0;
    double *ranges = qf_malloc((size_t)(O > 0 ? O : 1) * sizeof *ranges);
    char *detail = NULL;
    qf_tensor bias, wnew;
    memset(&bias, 0, sizeof bias);
    memset(&wnew, 0, sizeof wnew);
    qf_status st = ranges ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_rewrite_check_finite(f->w, c);
    if (st == QF_OK && f->b) st = qf_rewrite_check_finite(f->b, c);
    if (st == QF_OK) st = qf_tensor_init(&bias, QF_DTYPE_F32, 1, &O);
    bool in_place = qf_rewrite_can_write_in_place(f->w, c, 1);
    if (st == QF_OK && !in_place) st = qf_tensor_init(&wnew, QF_DTYPE_F32, wt->ndim, wt->dims);
    if (st == QF_OK) {
        const float *src = wt->data;
        float *dst = in_place ? wt->data : wnew.data;
        float *bd = bias.data;
        for (int64_t o = 0; o < O; o++) {
            /* The bias sum reads W before it is scaled (in place or not). */
            double acc = f->b ? qf_tensor_get_f64(&f->b->type, o) : 0.0, r = 0;
            int64_t ch0 = (o / og) * cg;
            for (int64_t i = 0; i < cg; i++) {
                int64_t ch = ch0 + i, base = (o * cg + i) * kk;
                double sum = 0;
                for (int64_t k = base; k < base + kk; k++) {
                    sum += (double)src[k];
                    float v = (float)((double)src[k] * a.scale[ch]);
                    dst[k] = v;
                    r = fmax(r, fabs((double)v));
                }
                acc += sum * a.shift[ch];
            }
            bd[o] = (float)acc;
            ranges[o] = r;
        }
    }
    char hint[512];
    if (st == QF_OK && !in_place) {
        snprintf(hint, sizeof hint, "%.480s_bnfold", f->w->name);
        st = qf_rewrite_install_const(g, c, 1, &wnew, hint);
    }
    if (st == QF_OK) {
        if (f->b)
            snprintf(hint, sizeof hint, "%.480s_bnfold", f->b->name);
        else
            snprintf(hint, sizeof hint, "%.480s_bias", c->name);
        st = qf_rewrite_install_const(g, c, 2, &bias, hint);
    }
    if (st == QF_OK) {
        detail = qf_bn_diag_json(&a, ranges, O);
        if (!detail) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) {
        qf_pass_rewrite_as(ctx, bn, QF_PASS_FOLDED, detail, "folded into the following conv '%s'", c->name);
        /* The conv, the BN output's only reader, reads the BN input. */
        st = qf_rewrite_splice_out(g, bn, bn->inputs[QF_BN_IN_X]);
    }
    qf_tensor_free(&bias);
    qf_tensor_free(&wnew);
    qf_free(detail);
    qf_free(ranges);
    qf_bn_affine_free(&a);
    return st;
}

static bool fuse_batch_norm_forward_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    char why[256];
    if (ffold_match(g, bn, user, why, sizeof why)) {
        qf_pass_skip(ctx, bn, "%s", why);
        return false;
    }
    return true;
}

static qf_status fuse_batch_norm_forward_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    (void)bn; /* ffold_match stored it in the ffold */
    return ffold_apply(g, ctx, user);
}

static qf_status fuse_batch_norm_forward_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    ffold f;
    *changed = false;
    return qf_pass_for_each_op(g, ctx, QF_OP_BATCH_NORM, fuse_batch_norm_forward_match, fuse_batch_norm_forward_apply,
                               &f, changed);
}

const qf_pass qf_pass_fuse_batch_norm_forward = {
    "fuse_batch_norm_forward",
    "fold inference BatchNorm into the unpadded conv (groups 1 or depthwise) that reads it",
    fuse_batch_norm_forward_run,
    .deferred = true,
};
