/* equalize: cross-layer equalization before quantization (Nagel et al.,
 * "Data-Free Quantization Through Weight Equalization and Bias Correction",
 * 2019; AIMET's CLE), on the BatchNorm-folded float graph.
 *
 * Two layers A -> B joined by ops that commute with a positive scale per
 * channel (f(k x) = k f(x) for k > 0: Relu, LeakyRelu, MaxPool, AveragePool,
 * GlobalAveragePool, a Pad with zeros, Flatten) compute the same function when A's output
 * channel c is divided by s_c and B's input channel c multiplied by s_c:
 *
 *   A: W1[c, ...] /= s_c, b1[c] /= s_c        B: W2[:, c, ...] *= s_c
 *
 * With r1_c = max |W1[c, ...]| and r2_c = max |W2[:, c, ...]|, the choice
 * s_c = sqrt(r1_c / r2_c) gives both sides the range sqrt(r1_c r2_c): a
 * per-tensor weight grid (neutron's linear weights) and the per-tensor
 * activation grid between A and B then serve channels of like ranges
 * instead of ranges apart by the product of the two layers' spreads. A
 * model whose channels were scaled apart by training (or by a BN folded
 * into A) loses points to PTQ without it (tests/quant: a Fashion-MNIST
 * head reparametrized by x8 per channel: 1.8 points lost, 0.1 with it).
 *
 * Chains follow the model's order: equalizing (A, B) changes B's rows,
 * which its own pair (B, C) equalizes next, which changes (A, B)'s balance
 * again; like AIMET's, the pass repeats the sweep until every scale is
 * within 1 % of 1 (at most QF_EQ_ROUNDS sweeps). The float function is
 * kept up to float32 rounding (each weight is rounded once per sweep).
 *
 * A: Conv (any groups; ConvTranspose is left alone), linear [out, in] with
 * its bias, MatMul with a constant [in, out] weight and no bias. B: Conv
 * (any groups: input channel c of a grouped conv is column c % (C/g) of its
 * group's filters), linear, MatMul with a constant weight; after a Flatten
 * of an [N, C, H, W] tensor input channel c is the H*W features
 * c*H*W .. c*H*W + H*W - 1. Every value between A and B has one reader and
 * is not a graph output; the weights are float32 constants; a weight read
 * by other nodes too is copied, not changed under them.
 *
 * A may be followed by a BatchNormalization (a graph that keeps its BNs:
 * qat_prepare runs this pass before simulating the fusion): its weight's
 * channel c then counts as W[c] * gamma_c / sqrt(var_c + eps), as the folds
 * make it, and the scale divides gamma_c and beta_c (A's weight and bias
 * stay): the same function, with batch statistics too.
 *
 * Which pairs: the profile's rule, `--set equalize=auto|off|per-tensor|all`.
 * auto, the built-in profiles' default, is decided by the caller on data
 * (qf_quantize, qf_quant_equalize_choose: kept when the int8 outputs are
 * closer to float's with it, then run this pass with per-tensor or
 * off); undecided, this pass takes it as off. Plain off
 * would suit most models (the Neutron quantizer has no such step, and a
 * model trained with BatchNorm usually has balanced channels: on the bundled
 * Fashion-MNIST CNN `per-tensor` cost 0.1-0.5 point of int8 top-1 and `all`
 * 0.1-0.3, by moving the activation's channel ranges apart to bring the
 * weights' together). `per-tensor` balances a pair when one of its two weights
 * is quantized per tensor (neutron's linear layers), where a small channel's
 * range is lost to its neighbours'; `all` every pair. A quant-layer pass: the
 * first of quantize_prepare; run by name without a quantize session it
 * balances every pair. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../passes/rewrite.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

#define QF_EQ_ROUNDS 16
#define QF_EQ_TOL 0.01
#define QF_EQ_SMIN 0x1p-16
#define QF_EQ_SMAX 0x1p16

typedef struct qf_eq_pair {
    qf_node *a, *b;
    qf_node *bn;    /* a BatchNormalization right after A (a graph before the folds: QAT), or NULL */
    int64_t ch;     /* channels between A and B */
    int64_t hw;     /* B reads channel c as hw features c*hw .. (1 after no Flatten) */
} qf_eq_pair;

static bool qf_eq_f32_weight(const qf_node *n, int slot, int min_rank)
{
    const qf_value *w = n->ninputs > slot ? n->inputs[slot] : NULL;
    return qf_rewrite_is_f32_const(w) && w->type.ndim >= min_rank;
}

/* Output channels of a producer A, 0 when A cannot be one. */
static int64_t qf_eq_out_channels(const qf_node *a, char *why, size_t size)
{
    switch (a->op) {
    case QF_OP_CONV:
        if (!qf_eq_f32_weight(a, 1, 3)) return qf_rewrite_why(why, size, "weight is not a float32 constant"), 0;
        return a->inputs[1]->type.dims[0];
    case QF_OP_LINEAR:
        if (!qf_eq_f32_weight(a, 1, 2) || a->inputs[1]->type.ndim != 2)
            return qf_rewrite_why(why, size, "weight is not a float32 [out, in] constant"), 0;
        return a->inputs[1]->type.dims[0];
    case QF_OP_MATMUL:
        if (!qf_eq_f32_weight(a, 1, 2) || a->inputs[1]->type.ndim != 2)
            return qf_rewrite_why(why, size, "weight is not a float32 [in, out] constant"), 0;
        return a->inputs[1]->type.dims[1];
    default:
        return 0;
    }
}

/* The bias of A (conv / linear) when it has one; it must be a float32
 * vector of the output channels. */
static bool qf_eq_bias_bad(const qf_node *a, int64_t ch)
{
    const qf_value *b = a->ninputs > 2 ? a->inputs[2] : NULL;
    if (!b) return false;
    return !qf_rewrite_is_f32_const(b) || qf_tensor_numel(&b->type) != ch;
}

/* A Pad with zeros that adds no channel: constant mode, constant pads zero
 * on axes 0 and 1, no or a zero pad value, no axes input. */
static bool qf_eq_zero_pad(const qf_node *n)
{
    if (strcmp(qf_node_attr_string(n, "mode", "constant"), "constant") != 0) return false;
    const qf_value *pads = n->ninputs > 1 ? n->inputs[1] : NULL;
    if (!pads || !qf_value_is_const(pads) || pads->type.dtype != QF_DTYPE_I64 || pads->type.ndim != 1) return false;
    int64_t np = pads->type.dims[0];
    if (np < 4 || np % 2) return false;
    const int64_t *pv = pads->type.data;
    if (pv[0] || pv[1] || pv[np / 2] || pv[np / 2 + 1]) return false;
    if (n->ninputs > 3 && n->inputs[3]) return false;
    const qf_value *cv = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (!cv) return true;
    if (!qf_value_is_const(cv) || qf_tensor_numel(&cv->type) != 1) return false;
    return qf_tensor_get_f64(&cv->type, 0) == 0.0;
}

/* A BatchNormalization of ch channels with float32 constant parameters
 * whose only used output is its first: A's output channel c leaves it as
 * gamma_c (x - mean) / sqrt(var + eps) + beta_c, so dividing gamma_c and
 * beta_c by s_c divides that channel by s_c, with batch statistics too
 * (training mode, as QAT runs it). */
static bool qf_eq_bn(const qf_node *n, int64_t ch)
{
    if (n->op != QF_OP_BATCH_NORM || n->ninputs < 5) return false;
    for (int i = 1; i < n->noutputs; i++)
        if (n->outputs[i] && n->outputs[i]->nuses) return false;
    for (int i = 1; i < 5; i++)
        if (!qf_rewrite_is_f32_const(n->inputs[i]) || qf_tensor_numel(&n->inputs[i]->type) != ch) return false;
    return true;
}

/* Between A and B: ops that commute with a positive per-channel scale. */
static bool qf_eq_homogeneous(const qf_node *n)
{
    switch (n->op) {
    case QF_OP_PAD:
        return n->noutputs == 1 && qf_eq_zero_pad(n);
    case QF_OP_RELU:
    case QF_OP_LEAKY_RELU:
    case QF_OP_AVG_POOL:
    case QF_OP_GLOBAL_AVG_POOL:
        return n->noutputs == 1;
    case QF_OP_MAX_POOL: /* its indices output, if any, must be unused */
        return n->noutputs == 1 || (n->noutputs == 2 && (!n->outputs[1] || n->outputs[1]->nuses == 0));
    default:
        return false;
    }
}

/* Walk from A to the B that reads its (transformed) output; true with a
 * reason in why when there is no such B. */
static bool qf_eq_match(qf_node *a, qf_eq_pair *p, char *why, size_t size)
{
    memset(p, 0, sizeof *p);
    p->a = a;
    p->hw = 1;
    p->ch = qf_eq_out_channels(a, why, size);
    if (p->ch <= 0) return true;
    if (qf_eq_bias_bad(a, p->ch)) return qf_rewrite_why(why, size, "bias is not a float32 vector of the outputs");
    bool spatial = a->op == QF_OP_CONV;
    const qf_value *v = a->outputs[0];
    for (int hop = 0; hop < 16; hop++) {
        if (v->is_output) return qf_rewrite_why(why, size, "'%s' is a graph output", v->name);
        int slot = 0;
        qf_node *n = qf_rewrite_sole_user(v, &slot);
        if (!n) return qf_rewrite_why(why, size, "'%s' has %d readers", v->name, v->nuses);
        if (slot != 0) return qf_rewrite_why(why, size, "'%s' is not the data input of '%s'", v->name, n->name);
        if (hop == 0 && qf_eq_bn(n, p->ch)) {
            p->bn = n;
            v = n->outputs[0];
            continue;
        }
        if (qf_eq_homogeneous(n)) {
            if (!spatial && n->op != QF_OP_RELU && n->op != QF_OP_LEAKY_RELU && n->op != QF_OP_PAD)
                return qf_rewrite_why(why, size, "'%s' pools a 2-D tensor", n->name);
            v = n->outputs[0];
            continue;
        }
        if (n->op == QF_OP_FLATTEN && spatial) {
            const qf_tensor *t = &v->type;
            if (qf_node_attr_int(n, "axis", 1) != 1 || t->ndim < 2 || t->dims[1] != p->ch)
                return qf_rewrite_why(why, size, "Flatten '%s' does not keep the channels whole", n->name);
            int64_t hw = 1;
            for (int d = 2; d < t->ndim; d++) {
                if (t->dims[d] <= 0) return qf_rewrite_why(why, size, "'%s' has an unknown dimension", v->name);
                hw *= t->dims[d];
            }
            p->hw = hw;
            spatial = false;
            v = n->outputs[0];
            continue;
        }
        int64_t in = 0;
        if (n->op == QF_OP_CONV && spatial && qf_eq_f32_weight(n, 1, 3))
            in = n->inputs[1]->type.dims[1] * qf_node_attr_int(n, "group", 1);
        else if (n->op == QF_OP_LINEAR && !spatial && qf_eq_f32_weight(n, 1, 2) && n->inputs[1]->type.ndim == 2)
            in = n->inputs[1]->type.dims[1];
        else if (n->op == QF_OP_MATMUL && !spatial && qf_eq_f32_weight(n, 1, 2) && n->inputs[1]->type.ndim == 2)
            in = n->inputs[1]->type.dims[0];
        else
            return qf_rewrite_why(why, size, "'%s' (%s) is not a layer the scale can pass into", n->name,
                                  qf_op_name(n->op));
        if (in != p->ch * p->hw)
            return qf_rewrite_why(why, size, "'%s' reads %" PRId64 " inputs, not %" PRId64 " channels x %" PRId64,
                                  n->name, in, p->ch, p->hw);
        if (n->op == QF_OP_CONV && qf_tensor_numel(&n->inputs[1]->type) == 0)
            return qf_rewrite_why(why, size, "'%s' has an empty weight", n->name);
        p->b = n;
        return false;
    }
    return qf_rewrite_why(why, size, "no layer within 16 ops");
}

/* Visit every element of A's weight in output channel c (f(ctx, &w)). */
#define QF_EQ_FOR_A(a, c, w, body)                                                      \
    do {                                                                                \
        const qf_tensor *t_ = &(a)->inputs[1]->type;                                    \
        float *d_ = t_->data;                                                           \
        if ((a)->op == QF_OP_MATMUL) {                                                  \
            int64_t rows_ = t_->dims[0], cols_ = t_->dims[1];                           \
            for (int64_t r_ = 0; r_ < rows_; r_++) { float *w = &d_[r_ * cols_ + (c)]; body; } \
        } else {                                                                        \
            int64_t per_ = qf_tensor_numel(t_) / t_->dims[0];                           \
            for (int64_t k_ = 0; k_ < per_; k_++) { float *w = &d_[(c) * per_ + k_]; body; } \
        }                                                                               \
    } while (0)

/* Every element of B's weight that multiplies A's channel c. */
#define QF_EQ_FOR_B(p, c, w, body)                                                      \
    do {                                                                                \
        const qf_node *b_ = (p)->b;                                                     \
        const qf_tensor *t_ = &b_->inputs[1]->type;                                     \
        float *d_ = t_->data;                                                           \
        if (b_->op == QF_OP_CONV) {                                                     \
            int64_t o_ = t_->dims[0], cpg_ = t_->dims[1];                               \
            int64_t g_ = qf_node_attr_int(b_, "group", 1), og_ = o_ / g_;               \
            int64_t kk_ = qf_tensor_numel(t_) / (o_ * cpg_);                            \
            int64_t grp_ = (c) / cpg_, l_ = (c) % cpg_;                                 \
            for (int64_t oo_ = grp_ * og_; oo_ < (grp_ + 1) * og_; oo_++)               \
                for (int64_t k_ = 0; k_ < kk_; k_++) {                                  \
                    float *w = &d_[(oo_ * cpg_ + l_) * kk_ + k_];                       \
                    body;                                                               \
                }                                                                       \
        } else if (b_->op == QF_OP_LINEAR) {                                            \
            int64_t rows_ = t_->dims[0], cols_ = t_->dims[1];                           \
            for (int64_t r_ = 0; r_ < rows_; r_++)                                      \
                for (int64_t j_ = 0; j_ < (p)->hw; j_++) {                              \
                    float *w = &d_[r_ * cols_ + (c) * (p)->hw + j_];                    \
                    body;                                                               \
                }                                                                       \
        } else {                                                                        \
            int64_t cols_ = t_->dims[1];                                                \
            for (int64_t j_ = 0; j_ < (p)->hw; j_++)                                    \
                for (int64_t k_ = 0; k_ < cols_; k_++) {                                \
                    float *w = &d_[((c) * (p)->hw + j_) * cols_ + k_];                  \
                    body;                                                               \
                }                                                                       \
        }                                                                               \
    } while (0)

/* Make input `slot` of n a constant n alone may write: its own payload, or
 * a copy installed for n (a tied weight keeps its value for its other readers). */
static qf_status qf_eq_own(qf_graph *g, qf_node *n, int slot)
{
    qf_value *v = n->inputs[slot];
    if (qf_rewrite_can_write_in_place(v, n, slot)) return QF_OK;
    qf_tensor t;
    QF_TRY(qf_tensor_init(&t, QF_DTYPE_F32, v->type.ndim, v->type.dims));
    memcpy(t.data, v->type.data, (size_t)qf_tensor_numel(&t) * sizeof(float));
    char hint[512];
    snprintf(hint, sizeof hint, "%.480s_eq", v->name);
    qf_status st = qf_rewrite_install_const(g, n, slot, &t, hint);
    qf_tensor_free(&t);
    return st;
}

/* One sweep over a pair: the largest |log s_c| applied. */
static qf_status qf_eq_apply(qf_graph *g, const qf_eq_pair *p, double *s, double *worst)
{
    *worst = 0;
    for (int64_t c = 0; c < p->ch; c++) {
        double r1 = 0, r2 = 0;
        QF_EQ_FOR_A(p->a, c, w, r1 = fmax(r1, fabs((double)*w)));
        if (p->bn) {
            /* A's weight as the folds (and QAT's simulated fusion) make it */
            const float *gam = p->bn->inputs[1]->type.data, *var = p->bn->inputs[4]->type.data;
            double eps = qf_node_attr_float(p->bn, "epsilon", 1e-5f);
            double d = (double)var[c] + eps;
            r1 = d > 0 ? r1 * fabs((double)gam[c]) / sqrt(d) : 0.0;
        }
        QF_EQ_FOR_B(p, c, w, r2 = fmax(r2, fabs((double)*w)));
        double sc = r1 > 0 && r2 > 0 ? sqrt(r1 / r2) : 1.0;
        s[c] = fmin(fmax(sc, QF_EQ_SMIN), QF_EQ_SMAX);
        *worst = fmax(*worst, fabs(log(s[c])));
    }
    if (*worst <= log1p(QF_EQ_TOL)) return QF_OK;
    QF_TRY(qf_eq_own(g, p->b, 1));
    float *gd = NULL, *bd = NULL;
    if (p->bn) { /* the scale goes into the BatchNorm's gamma and beta; A keeps its weights */
        QF_TRY(qf_eq_own(g, p->bn, 1));
        QF_TRY(qf_eq_own(g, p->bn, 2));
        gd = p->bn->inputs[1]->type.data;
        bd = p->bn->inputs[2]->type.data;
    } else {
        QF_TRY(qf_eq_own(g, p->a, 1));
        bool bias = p->a->op != QF_OP_MATMUL && p->a->ninputs > 2 && p->a->inputs[2];
        if (bias) QF_TRY(qf_eq_own(g, p->a, 2));
        bd = bias ? p->a->inputs[2]->type.data : NULL;
    }
    for (int64_t c = 0; c < p->ch; c++) {
        double sc = s[c];
        if (sc == 1.0) continue;
        if (gd) gd[c] = (float)((double)gd[c] / sc);
        else QF_EQ_FOR_A(p->a, c, w, *w = (float)((double)*w / sc));
        QF_EQ_FOR_B(p, c, w, *w = (float)((double)*w * sc));
        if (bd) bd[c] = (float)((double)bd[c] / sc);
    }
    return QF_OK;
}

/* The session's profile (NULL outside a quantize session: every pair). */
static const qf_quant_profile *qf_eq_profile(const qf_pass_ctx *ctx)
{
    const qf_quant_session *s = qf_pass_user(ctx);
    return s ? s->profile : NULL;
}

static bool qf_eq_per_channel(const qf_quant_profile *p, const qf_node *n)
{
    return n->op == QF_OP_CONV ? p->conv_weight.per_channel : p->linear_weight.per_channel;
}

static qf_status qf_eq_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    const qf_quant_profile *prof = qf_eq_profile(ctx);
    if (prof && (prof->equalize == QF_QEQ_OFF || prof->equalize == QF_QEQ_AUTO)) return QF_OK;
    int n = 0;
    int64_t maxch = 1;
    char why[256];
    qf_graph_for_each_node(g, a) n++;
    qf_eq_pair *pairs = qf_calloc((size_t)(n ? n : 1), sizeof *pairs);
    if (!pairs) return QF_ERR_NOMEM;
    int np = 0;
    qf_graph_for_each_node(g, a)
    {
        if (a->op != QF_OP_CONV && a->op != QF_OP_LINEAR && a->op != QF_OP_MATMUL) continue;
        if (qf_eq_match(a, &pairs[np], why, sizeof why)) {
            qf_pass_skip(ctx, a, "not equalized: %s", why);
            continue;
        }
        if (prof && prof->equalize == QF_QEQ_PER_TENSOR && qf_eq_per_channel(prof, a) &&
            qf_eq_per_channel(prof, pairs[np].b)) {
            qf_pass_skip(ctx, a, "not equalized with '%s': both weights per channel in %s (--set equalize=all)",
                         pairs[np].b->name, prof->name);
            continue;
        }
        maxch = pairs[np].ch > maxch ? pairs[np].ch : maxch;
        np++;
    }
    double *s = qf_malloc((size_t)maxch * sizeof *s), *first = qf_calloc((size_t)(np ? np : 1), sizeof *first);
    int *rounds = qf_calloc((size_t)(np ? np : 1), sizeof *rounds);
    qf_status st = s && first && rounds ? QF_OK : QF_ERR_NOMEM;
    for (int i = 0; st == QF_OK && i < np; i++) {
        /* Check every weight before the first write. */
        st = qf_rewrite_check_finite(pairs[i].a->inputs[1], pairs[i].a);
        for (int k = 1; st == QF_OK && pairs[i].bn && k < 5; k++)
            st = qf_rewrite_check_finite(pairs[i].bn->inputs[k], pairs[i].bn);
        if (st == QF_OK) st = qf_rewrite_check_finite(pairs[i].b->inputs[1], pairs[i].b);
    }
    for (int r = 0; st == QF_OK && r < QF_EQ_ROUNDS; r++) {
        double sweep = 0;
        for (int i = 0; st == QF_OK && i < np; i++) {
            double worst = 0;
            st = qf_eq_apply(g, &pairs[i], s, &worst);
            if (r == 0) first[i] = worst;
            if (worst > log1p(QF_EQ_TOL)) rounds[i] = r + 1;
            sweep = fmax(sweep, worst);
        }
        if (sweep <= log1p(QF_EQ_TOL)) break;
    }
    for (int i = 0; st == QF_OK && i < np; i++) {
        if (!rounds[i]) {
            qf_pass_skip(ctx, pairs[i].a, "not equalized with '%s': channel ranges already balanced",
                         pairs[i].b->name);
            continue;
        }
        char detail[128];
        snprintf(detail, sizeof detail, "{\"channels\": %" PRId64 ", \"max_scale\": %.6g, \"sweeps\": %d}",
                 pairs[i].ch, exp(first[i]), rounds[i]);
        qf_pass_rewrite(ctx, pairs[i].a, detail, "equalized with '%s' (%" PRId64 " channels, first scales up to x%.3g)",
                        pairs[i].b->name, pairs[i].ch, exp(first[i]));
        *changed = true;
    }
    qf_free(rounds);
    qf_free(first);
    qf_free(s);
    qf_free(pairs);
    return st;
}

bool qf_quant_equalize_candidates(const qf_graph *g, const qf_quant_profile *p)
{
    qf_eq_pair pair;
    char why[256];
    qf_graph_for_each_node(g, a)
    {
        if (a->op != QF_OP_CONV && a->op != QF_OP_LINEAR && a->op != QF_OP_MATMUL) continue;
        if (qf_eq_match(a, &pair, why, sizeof why)) continue;
        if (p->equalize == QF_QEQ_PER_TENSOR && qf_eq_per_channel(p, a) && qf_eq_per_channel(p, pair.b)) continue;
        return true;
    }
    return false;
}

const qf_pass qf_pass_quant_equalize = {
    "equalize",
    "cross-layer equalization: balance channel ranges between two layers joined by Relu / pools (profile rule)",
    qf_eq_run,
};
