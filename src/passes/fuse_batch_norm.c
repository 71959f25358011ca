/* fuse_batch_norm: fold an inference BatchNorm into the conv, conv_transpose,
 * linear, Gemm or MatMul that produces its input.
 *
 * With s_o = gamma_o / sqrt(var_o + eps) for output channel o:
 *   W'[o, ...] = W[o, ...] * s_o,   b'_o = (b_o - mu_o) * s_o + beta_o
 * computed in double and rounded once to float. Where the output channel
 * sits in W depends on the producer:
 *   conv [O, C/g, k...], linear [O, K], Gemm transB=1 [O, K]   axis 0
 *   conv_transpose [C_in, O/g, k...]    channel g*(O/g) + j is axis 1 inside group g
 *   Gemm transB=0 [K, O]                axis 1
 *   MatMul with a constant [K, O]       axis 1; the node becomes a linear with
 *                                       the transposed weight [O, K] and a bias,
 *                                       the op canonicalize makes of MatMul + Add
 *                                       (one node, and what the quantizer expects).
 * Gemm's alpha and beta are folded as well (W' = alpha*W*s, C' = (beta*C - mu)*s + beta_bn)
 * and both attributes set to 1.
 *
 * Through a weight fake_quant (QAT's finalize, after qat_bn_remove): when the
 * weight of a conv / conv_transpose / linear / Gemm is fake_quant(W) with W a
 * float32 constant, the fake_quant read by this op alone and its buffers
 * constants, W' replaces W as the fake_quant's input and the bias is written
 * as above. W' is then computed in float32 exactly as qat_bn_weight computes
 * W * s during training (std = sqrtf(var + eps), s = gamma / std, W * s: see
 * src/ops/qat/qat_bn.c), so the fake_quant sees after the fold, bit for bit, the
 * weight it saw in training (eval mode). Its qparams then follow PyTorch
 * 1.13's convert of a ConvBn module (_ConvNd.from_float: fuse_conv_bn_weights,
 * then weight_post_process(weight), which moves the observer once with the
 * folded weight when it is enabled, then the observer's qparams): with the
 * node's `observe` = 1, one moving-average update of running_min / max with
 * W' and scale / zero_point recomputed (qf_qparams_torch, as fake_quant.c);
 * with observe = 0 they stay. Gemm needs alpha = 1 there (alpha * W * s would
 * not be what the fake_quant saw).
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/quant_math.h"
#include "bn_math.h"
#include "rewrite.h"
#include "qfold/pass.h"

typedef enum fold_layout {
    FOLD_AXIS0,     /* W [O, ...] */
    FOLD_CONVT,     /* W [C_in, O/g, k...] */
    FOLD_AXIS1,     /* W [K, O] */
    FOLD_TRANSPOSE  /* W [K, O] written as [O, K] (MatMul -> linear) */
} fold_layout;

typedef struct fold {
    qf_node *bn, *prod;
    qf_node *fq;      /* the weight's fake_quant (w is its input), or NULL */
    qf_value *x;      /* producer output = BN input */
    qf_value *w, *b;  /* b: NULL when the producer has no bias */
    fold_layout layout;
    int64_t out_ch;
    int64_t groups;   /* conv_transpose */
    double alpha, beta; /* Gemm; 1 otherwise */
    bool via_transpose; /* MatMul(x, Transpose(W)): w is W [O, K] */
} fold;

/* v = Transpose(W) with W a 2-D constant (perm absent or [1, 0]). */
static bool fold_transposed_weight(const qf_value *v)
{
    const qf_node *t = v->producer;
    if (!t || t->op != QF_OP_TRANSPOSE || t->ninputs < 1 || !qf_value_is_const(t->inputs[0]) ||
        t->inputs[0]->type.ndim != 2)
        return false;
    int np = 0;
    const int64_t *perm = qf_node_attr_ints(t, "perm", &np);
    return np == 0 || (np == 2 && perm[0] == 1 && perm[1] == 0);
}

/* Fill f for bn, or write why it cannot be folded and return true. */
static bool fold_match(const qf_graph *g, qf_node *bn, fold *f, char *why, size_t size)
{
    memset(f, 0, sizeof *f);
    f->bn = bn;
    f->alpha = f->beta = 1.0;
    if (qf_bn_check(g, bn, why, size)) return true;
    qf_value *x = bn->inputs[QF_BN_IN_X];
    qf_node *p = x ? x->producer : NULL;
    if (!p) return qf_rewrite_why(why, size, "BN input '%s' is not produced by a node", x ? x->name : "?");
    const char *pn = qf_op_name(p->op);
    switch (p->op) {
    case QF_OP_CONV: case QF_OP_CONV_TRANSPOSE: case QF_OP_LINEAR: case QF_OP_GEMM: case QF_OP_MATMUL:
        break;
    default:
        return qf_rewrite_why(why, size, "BN input comes from %s, not a conv / conv_transpose / linear / gemm / matmul", pn);
    }
    f->prod = p;
    f->x = x;
    /* The BN output replaces the producer's output: nobody else may see the
     * unnormalized value. */
    if (x->is_output) return qf_rewrite_why(why, size, "%s output is a graph output", pn);
    if (x->nuses != 1) return qf_rewrite_why(why, size, "%s output has %d users", pn, x->nuses);
    if (p->ninputs < 2 || !p->inputs[1]) return qf_rewrite_why(why, size, "%s has no weight input", pn);
    f->w = p->inputs[1];
    /* PyTorch exports a bias-free Linear (opset <= 13) as MatMul(x, Transpose(W))
     * and import keeps the Transpose of a weight: read W [O, K] through it. */
    if (p->op == QF_OP_MATMUL && fold_transposed_weight(f->w)) {
        f->w = f->w->producer->inputs[0];
        f->via_transpose = true;
    }
    /* QAT: fold under the weight's fake_quant (see the header). */
    if (p->op != QF_OP_MATMUL && f->w->producer && f->w->producer->op == QF_OP_FAKE_QUANT) {
        qf_node *fq = f->w->producer;
        if (f->w->nuses != 1 || f->w->is_output)
            return qf_rewrite_why(why, size, "the weight's fake_quant '%s' has %d readers", fq->name,
                                  f->w->nuses + (f->w->is_output ? 1 : 0));
        if (fq->ninputs < 5) return qf_rewrite_why(why, size, "the weight's fake_quant '%s' has no buffers", fq->name);
        for (int i = 1; i < 5; i++)
            if (!qf_rewrite_is_f32_const(fq->inputs[i]))
                return qf_rewrite_why(why, size, "buffer '%s' of the weight's fake_quant '%s' is not a float32 constant",
                                      fq->inputs[i] ? fq->inputs[i]->name : "?", fq->name);
        if (!fq->inputs[0]) return qf_rewrite_why(why, size, "the weight's fake_quant '%s' has no input", fq->name);
        if (p->op == QF_OP_GEMM && qf_node_attr_float(p, "alpha", 1.0f) != 1.0f)
            return qf_rewrite_why(why, size, "gemm alpha %g under the weight's fake_quant '%s'",
                                  qf_node_attr_float(p, "alpha", 1.0f), fq->name);
        if (bn->inputs[QF_BN_IN_SCALE]->type.dtype != QF_DTYPE_F32 || bn->inputs[QF_BN_IN_VAR]->type.dtype != QF_DTYPE_F32)
            return qf_rewrite_why(why, size, "BN scale / var are not float32 (the fold under a fake_quant is float32)");
        f->fq = fq;
        f->w = fq->inputs[0];
    }
    if (!qf_value_is_const(f->w))
        return qf_rewrite_why(why, size, "weight is not a constant ('%s' is %s)", f->w->name,
                           f->w->producer ? "computed by a node" : qf_value_kind_name(f->w->kind));
    if (f->w->type.dtype != QF_DTYPE_F32)
        return qf_rewrite_why(why, size, "weight '%s' is %s; only float32 weights are folded", f->w->name,
                           qf_dtype_name(f->w->type.dtype));
    if (p->op != QF_OP_MATMUL && p->ninputs > 2 && p->inputs[2]) {
        f->b = p->inputs[2];
        if (!qf_value_is_const(f->b)) return qf_rewrite_why(why, size, "bias '%s' is not a constant", f->b->name);
        if (f->b->type.dtype != QF_DTYPE_F32)
            return qf_rewrite_why(why, size, "bias '%s' is %s; only float32 is folded", f->b->name,
                               qf_dtype_name(f->b->type.dtype));
    }
    const qf_tensor *w = &f->w->type;
    int64_t c = qf_tensor_numel(&bn->inputs[QF_BN_IN_SCALE]->type);
    switch (p->op) {
    case QF_OP_CONV:
        if (w->ndim < 3) return qf_rewrite_why(why, size, "conv weight has rank %d", w->ndim);
        f->layout = FOLD_AXIS0;
        f->out_ch = w->dims[0];
        break;
    case QF_OP_CONV_TRANSPOSE: {
        if (w->ndim < 3) return qf_rewrite_why(why, size, "conv_transpose weight has rank %d", w->ndim);
        int64_t grp = qf_node_attr_int(p, "group", 1);
        if (grp < 1 || w->dims[0] % grp)
            return qf_rewrite_why(why, size, "conv_transpose group %" PRId64 " does not divide %" PRId64 " input channels",
                               grp, w->dims[0]);
        f->layout = FOLD_CONVT;
        f->groups = grp;
        f->out_ch = w->dims[1] * grp;
        break;
    }
    case QF_OP_LINEAR: case QF_OP_GEMM: case QF_OP_MATMUL:
        /* BN1d on [N, C]: the channel is the last axis only for rank 2. */
        if (x->type.ndim != 2) return qf_rewrite_why(why, size, "%s output is rank %d", pn, x->type.ndim);
        if (w->ndim != 2) return qf_rewrite_why(why, size, "%s weight is rank %d", pn, w->ndim);
        if (p->op == QF_OP_LINEAR) {
            f->layout = FOLD_AXIS0;
        } else if (p->op == QF_OP_GEMM) {
            f->layout = qf_node_attr_int(p, "transB", 0) ? FOLD_AXIS0 : FOLD_AXIS1;
            f->alpha = qf_node_attr_float(p, "alpha", 1.0f);
            f->beta = qf_node_attr_float(p, "beta", 1.0f);
        } else {
            f->layout = f->via_transpose ? FOLD_AXIS0 : FOLD_TRANSPOSE;
        }
        f->out_ch = f->layout == FOLD_AXIS0 ? w->dims[0] : w->dims[1];
        break;
    default:
        break;
    }
    if (f->out_ch != c)
        return qf_rewrite_why(why, size, "channel counts differ: %s has %" PRId64 " output channels, BN has %" PRId64,
                           pn, f->out_ch, c);
    if (f->b) {
        const qf_tensor *b = &f->b->type;
        if (p->op == QF_OP_GEMM) {
            /* C broadcasts to [M, O]: accept [], [1], [O], [1|M, 1|O]. */
            int64_t cn = b->ndim >= 1 ? b->dims[b->ndim - 1] : 1;
            if (b->ndim > 2 || (cn != 1 && cn != f->out_ch)) {
                char sh[96];
                return qf_rewrite_why(why, size, "gemm C has shape %s", qf_shape_str(b->ndim, b->dims, sh, sizeof sh));
            }
        } else if (b->ndim != 1 || b->dims[0] != f->out_ch) {
            char sh[96];
            return qf_rewrite_why(why, size, "bias has shape %s, expected [%" PRId64 "]",
                               qf_shape_str(b->ndim, b->dims, sh, sizeof sh), f->out_ch);
        }
    }
    return false;
}

/* One element of the fold: w' = w * s rounded once; tracks the channel's
 * max |w'|. */
static inline float fold_one(float w, double s, float *r)
{
    float v = (float)((double)w * s), m = fabsf(v);
    if (m > *r) *r = m;
    return v;
}

/* The bits of max(m, |v|) for m >= 0 given as bits: non-negative floats
 * order like their bits; a NaN (bits above Inf's) is passed over, as
 * fold_one's compare passes it over. */
static inline int32_t fold_max_bits(int32_t m, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    int32_t b = (int32_t)(u & 0x7fffffffu);
    b = b <= 0x7f800000 ? b : 0;
    return b > m ? b : m;
}

/* fold_one over one output channel's n weights (dst may be src): the hot
 * loop of every conv, written so that the compiler vectorizes it (the max
 * kept as bits; in place as a loop of its own, since a loop over two
 * pointers that may be equal is only vectorized after a run-time check
 * that fails when they are). Returns the channel's max |w'|. */
static float fold_row(const float *src, float *dst, int64_t n, double s)
{
    int32_t m = 0;
    if (src == dst) {
        for (int64_t k = 0; k < n; k++) {
            dst[k] = (float)((double)dst[k] * s);
            m = fold_max_bits(m, dst[k]);
        }
    } else {
        for (int64_t k = 0; k < n; k++) {
            dst[k] = (float)((double)src[k] * s);
            m = fold_max_bits(m, dst[k]);
        }
    }
    float r;
    memcpy(&r, &m, sizeof r);
    return r;
}

/* W' = alpha * W * s_o, rounded once; ranges[o] = max |W'| of channel o.
 * One pass over W, in place when only this node reads it. W was checked for
 * NaN / Inf before (fold_apply): nothing here can fail half way through. */
static qf_status fold_weight(qf_graph *g, const fold *f, const qf_bn_affine *a, double *ranges)
{
    const qf_tensor *wt = &f->w->type;
    const float *src = wt->data;
    int64_t numel = qf_tensor_numel(wt), O = f->out_ch;
    qf_tensor fresh;
    memset(&fresh, 0, sizeof fresh);
    float *dst;
    bool in_place = f->layout != FOLD_TRANSPOSE && !f->via_transpose && qf_rewrite_can_write_in_place(f->w, f->prod, 1);
    if (in_place) {
        dst = wt->data;
    } else {
        int64_t tdims[2] = {O, wt->dims[0]};
        if (f->layout == FOLD_TRANSPOSE)
            QF_TRY(qf_tensor_init(&fresh, QF_DTYPE_F32, 2, tdims));
        else
            QF_TRY(qf_tensor_init(&fresh, QF_DTYPE_F32, wt->ndim, wt->dims));
        dst = fresh.data;
    }
    float *rf = qf_calloc((size_t)(O > 0 ? O : 1), sizeof *rf);
    if (!rf) {
        qf_tensor_free(&fresh);
        return QF_ERR_NOMEM;
    }
    switch (f->layout) {
    case FOLD_AXIS0: {
        int64_t inner = O ? numel / O : 0;
        for (int64_t o = 0; o < O; o++)
            rf[o] = fold_row(src + o * inner, dst + o * inner, inner, f->alpha * a->scale[o]);
        break;
    }
    case FOLD_CONVT: {
        /* Input channel c belongs to group c / (C_in/g); inside the group,
         * axis-1 index j is output channel grp*(O/g) + j. */
        int64_t cin = wt->dims[0], og = wt->dims[1], cin_g = cin / f->groups;
        int64_t kk = cin > 0 && og > 0 ? numel / (cin * og) : 0;
        for (int64_t c = 0; c < cin; c++) {
            int64_t grp = c / cin_g;
            for (int64_t j = 0; j < og; j++) {
                int64_t o = grp * og + j, base = (c * og + j) * kk;
                double s = a->scale[o];
                for (int64_t k = base; k < base + kk; k++) dst[k] = fold_one(src[k], s, &rf[o]);
            }
        }
        break;
    }
    case FOLD_AXIS1: case FOLD_TRANSPOSE: {
        int64_t rows = wt->dims[0];
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t o = 0; o < O; o++) {
                float v = fold_one(src[r * O + o], f->alpha * a->scale[o], &rf[o]);
                if (f->layout == FOLD_AXIS1)
                    dst[r * O + o] = v;
                else
                    dst[o * rows + r] = v;
            }
        }
        break;
    }
    }
    for (int64_t o = 0; o < O; o++) ranges[o] = rf[o];
    qf_free(rf);
    if (in_place) return QF_OK;
    char hint[512];
    snprintf(hint, sizeof hint, "%.480s_bnfold", f->w->name);
    return qf_rewrite_install_const(g, f->prod, 1, &fresh, hint);
}

/* The pending-scale axis of a fold whose layout is FOLD_AXIS0 or FOLD_CONVT. */
static qf_scale_axis fold_scale_axis(const fold *f)
{
    return f->layout == FOLD_AXIS0 ? QF_SCALE_AXIS0 : QF_SCALE_CONVT;
}

/* A weight left in the model file (graph.h): the fold's checks and ranges
 * from one pass over the file through a small buffer, nothing rewritten;
 * then (fold_weight_pending) the scale recorded on the weight, which the
 * exporter (or whoever loads the payload) applies with the same float
 * operation as fold_row. The NaN / Inf check is qf_rewrite_check_finite's. */
static qf_status fold_scan_deferred(const qf_graph *g, const fold *f, const double *s, double *ranges)
{
    const qf_tensor *wt = &f->w->type;
    int64_t numel = qf_tensor_numel(wt), O = f->out_ch;
    int32_t *mb = qf_calloc((size_t)(O > 0 ? O : 1), sizeof *mb);
    if (!mb) return QF_ERR_NOMEM;
    enum { CHUNK = 16384 };
    float buf[CHUNK];
    qf_status st = QF_OK;
    for (int64_t e0 = 0; e0 < numel && st == QF_OK; e0 += CHUNK) {
        int64_t n = numel - e0 < CHUNK ? numel - e0 : CHUNK;
        st = qf_value_read(g, f->w, (size_t)e0 * sizeof(float), buf, (size_t)n * sizeof(float), false);
        /* Any NaN / Inf (all exponent bits set) in one branch-free loop that
         * vectorizes; the first one's index only when there is one. */
        uint32_t bad = 0;
        for (int64_t k = 0; k < n; k++) {
            uint32_t u;
            memcpy(&u, &buf[k], sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        for (int64_t k = 0; bad && k < n && st == QF_OK; k++)
            if (!isfinite(buf[k]))
                st = qf_error(QF_ERR_NUMERIC, "node '%s' (%s): tensor '%s' holds %s at index %" PRId64,
                              f->prod->name, qf_op_name(f->prod->op), f->w->name, isnan(buf[k]) ? "NaN" : "Inf",
                              e0 + k);
        for (int64_t e = e0; e < e0 + n && st == QF_OK;) {
            int64_t end;
            int64_t o = qf_scale_channel(wt, fold_scale_axis(f), f->groups, e, &end);
            if (end > e0 + n) end = e0 + n;
            double so = s[o];
            int32_t m = mb[o];
            for (int64_t k = e; k < end; k++) m = fold_max_bits(m, (float)((double)buf[k - e0] * so));
            mb[o] = m;
            e = end;
        }
    }
    for (int64_t o = 0; o < O && st == QF_OK; o++) {
        float r;
        memcpy(&r, &mb[o], sizeof r);
        ranges[o] = r;
    }
    qf_free(mb);
    return st;
}

/* Under a fake_quant: W' = W * s in float32 as qat_bn_weight computes it
 * (std = sqrtf(var + eps), s = gamma / std), for the fake_quant to see the
 * weight it saw in training, bit for bit. ranges as fold_weight. */
static qf_status fold_weight_fq(qf_graph *g, const fold *f, double *ranges)
{
    const qf_node *bn = f->bn;
    const float eps = qf_node_attr_float(bn, "epsilon", 1e-5f);
    const float *gamma = bn->inputs[QF_BN_IN_SCALE]->type.data, *var = bn->inputs[QF_BN_IN_VAR]->type.data;
    const qf_tensor *wt = &f->w->type;
    const int64_t numel = qf_tensor_numel(wt), O = f->out_ch;
    float *s = qf_malloc((size_t)(O > 0 ? O : 1) * sizeof *s);
    if (!s) return QF_ERR_NOMEM;
    for (int64_t o = 0; o < O; o++) {
        s[o] = gamma[o] / sqrtf(var[o] + eps);
        ranges[o] = 0.0;
    }
    qf_tensor fresh;
    memset(&fresh, 0, sizeof fresh);
    const bool in_place = qf_rewrite_can_write_in_place(f->w, f->fq, 0);
    if (!in_place) {
        qf_status st = qf_tensor_init(&fresh, QF_DTYPE_F32, wt->ndim, wt->dims);
        if (st != QF_OK) {
            qf_free(s);
            return st;
        }
    }
    const float *src = wt->data;
    float *dst = in_place ? wt->data : fresh.data;
    /* The output channel of element k (the layouts of fold_match). */
    const int64_t inner = O ? numel / O : 0, og = wt->ndim > 1 ? wt->dims[1] : 1;
    const int64_t kk = f->layout == FOLD_CONVT && wt->dims[0] > 0 && og > 0 ? numel / (wt->dims[0] * og) : 1;
    const int64_t cin_g = f->layout == FOLD_CONVT ? wt->dims[0] / f->groups : 1;
    for (int64_t k = 0; k < numel; k++) {
        int64_t o;
        if (f->layout == FOLD_AXIS0) o = k / inner;
        else if (f->layout == FOLD_AXIS1) o = k % O;
        else o = (k / (og * kk)) / cin_g * og + (k / kk) % og;
        const float v = src[k] * s[o];
        dst[k] = v;
        if (fabsf(v) > ranges[o]) ranges[o] = fabsf(v);
    }
    qf_free(s);
    if (in_place) return QF_OK;
    char hint[512];
    snprintf(hint, sizeof hint, "%.480s_bnfold", f->w->name);
    return qf_rewrite_install_const(g, f->fq, 0, &fresh, hint);
}

/* The fake_quant's qparams after the fold, as PyTorch's convert: with
 * observe = 1, the observer moves once with W' (the first observation
 * assigns) and scale / zero point are its qparams; observe = 0 keeps them.
 * New buffer payloads are installed (in place when only fq reads them). */
static qf_status fold_fq_qparams(qf_graph *g, qf_node *fq)
{
    if (!qf_node_attr_int(fq, "observe", 1)) return QF_OK;
    const qf_tensor *x = &fq->inputs[0]->type;
    const int64_t nel = qf_tensor_numel(&fq->inputs[1]->type);
    int64_t outer = 1, ch = 1, inner = qf_tensor_numel(x);
    if (nel > 1) {
        int64_t axis = qf_node_attr_int(fq, "axis", 0);
        if (axis < 0) axis += x->ndim;
        if (axis < 0 || axis >= x->ndim || x->dims[axis] != nel)
            return qf_error(QF_ERR_SHAPE, "node '%s' (fake_quant): %lld qparams for axis %lld of a rank-%d weight",
                            fq->name, (long long)nel, (long long)axis, x->ndim);
        ch = nel;
        inner = 1;
        for (int64_t d = 0; d < axis; d++) outer *= x->dims[d];
        for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    }
    if (qf_tensor_numel(x) == 0) return QF_OK;
    const int32_t qmin = (int32_t)qf_node_attr_int(fq, "quant_min", -128);
    const int32_t qmax = (int32_t)qf_node_attr_int(fq, "quant_max", 127);
    const float c = qf_node_attr_float(fq, "averaging_constant", 0.01f), eps = qf_node_attr_float(fq, "eps", FLT_EPSILON);
    const int symmetric = qf_node_attr_int(fq, "symmetric", 0) != 0;
    qf_tensor t[4];
    memset(t, 0, sizeof t);
    qf_status st = QF_OK;
    for (int i = 0; i < 4 && st == QF_OK; i++) {
        const qf_tensor *b = &fq->inputs[1 + i]->type;
        st = qf_tensor_init(&t[i], QF_DTYPE_F32, b->ndim, b->dims);
        if (st == QF_OK) memcpy(t[i].data, b->data, qf_tensor_nbytes(b));
    }
    if (st != QF_OK) {
        for (int i = 0; i < 4; i++) qf_tensor_free(&t[i]);
        return st;
    }
    float *scale = t[0].data, *zp = t[1].data, *rmin = t[2].data, *rmax = t[3].data;
    const float *w = x->data;
    for (int64_t k = 0; k < ch; k++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t o = 0; o < outer; o++) {
            const float *p = w + (o * ch + k) * inner;
            for (int64_t i = 0; i < inner; i++) {
                mn = p[i] < mn ? p[i] : mn;
                mx = p[i] > mx ? p[i] : mx;
            }
        }
        /* fake_quant.c's observer step, verbatim in its arithmetic. */
        if (rmin[k] == INFINITY && rmax[k] == -INFINITY) {
            rmin[k] = mn;
            rmax[k] = mx;
        } else {
            rmin[k] = rmin[k] + c * (mn - rmin[k]);
            rmax[k] = rmax[k] + c * (mx - rmax[k]);
        }
        int32_t z;
        qf_qparams_torch(rmin[k], rmax[k], symmetric, qmin, qmax, eps, &scale[k], &z);
        zp[k] = (float)z;
    }
    static const char *const what[4] = {"scale", "zero_point", "min", "max"};
    for (int i = 0; i < 4; i++) {
        char hint[512];
        snprintf(hint, sizeof hint, "%.480s_%s", fq->name, what[i]);
        qf_status s2 = qf_rewrite_install_const(g, fq, 1 + i, &t[i], hint);
        if (st == QF_OK) st = s2;
    }
    return st;
}

/* b'_o = (beta_gemm * b_o - mu_o) * s_o + beta_o (b = 0 when absent). */
static qf_status fold_bias(qf_graph *g, const fold *f, const qf_bn_affine *a)
{
    int64_t O = f->out_ch, rows = 1, cn = O;
    const qf_tensor *bt = f->b ? &f->b->type : NULL;
    if (bt && f->prod->op == QF_OP_GEMM) {
        /* Gemm's C may broadcast along either axis: keep its rows, widen its columns. */
        rows = bt->ndim == 2 ? bt->dims[0] : 1;
        cn = bt->ndim >= 1 ? bt->dims[bt->ndim - 1] : 1;
    }
    qf_tensor t;
    int64_t dims[2] = {rows, O};
    if (rows > 1)
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_F32, 2, dims));
    else
        QF_TRY(qf_tensor_init(&t, QF_DTYPE_F32, 1, &O));
    float *dst = t.data;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t o = 0; o < O; o++) {
            double b = bt ? f->beta * qf_tensor_get_f64(bt, r * cn + (cn == 1 ? 0 : o)) : 0.0;
            dst[r * O + o] = (float)((b - a->mean[o]) * a->scale[o] + a->beta[o]);
        }
    }
    char hint[512];
    if (f->b)
        snprintf(hint, sizeof hint, "%.480s_bnfold", f->b->name);
    else
        snprintf(hint, sizeof hint, "%.480s_bias", f->prod->name);
    return qf_rewrite_install_const(g, f->prod, 2, &t, hint);
}

static qf_status fold_apply(qf_graph *g, qf_pass_ctx *ctx, fold *f)
{
    qf_node *bn = f->bn, *p = f->prod;
    qf_bn_affine a;
    QF_TRY(qf_bn_affine_init(&a, bn));
    double *ranges = NULL, *pend = NULL;
    char *detail = NULL;
    /* A weight left in the model file (graph.h) keeps the fold as a pending
     * scale when it is this node's alone and has none yet; otherwise it is
     * read first, and so is anything else left there. */
    bool pending = f->w->deferred && !f->w->deferred->scale && !f->fq && !f->via_transpose &&
                   (f->layout == FOLD_AXIS0 || f->layout == FOLD_CONVT) && !f->w->is_output && f->w->nuses == 1 &&
                   f->w->uses[0].node == p && f->w->uses[0].slot == 1;
    qf_status st = pending ? QF_OK : qf_value_load(g, f->w);
    if (st == QF_OK && f->b) st = qf_value_load(g, f->b);
    if (st == QF_OK) {
        ranges = qf_malloc((size_t)(f->out_ch > 0 ? f->out_ch : 1) * sizeof *ranges);
        if (!ranges) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK && pending) {
        pend = qf_malloc((size_t)(f->out_ch > 0 ? f->out_ch : 1) * sizeof *pend);
        if (!pend) st = QF_ERR_NOMEM;
        for (int64_t o = 0; st == QF_OK && o < f->out_ch; o++)
            pend[o] = f->layout == FOLD_AXIS0 ? f->alpha * a.scale[o] : a.scale[o];
    }
    /* Every check before the first write: a fold that fails leaves the
     * graph as it was (the bias is installed before the weight is scaled). */
    if (st == QF_OK) st = pending ? fold_scan_deferred(g, f, pend, ranges) : qf_rewrite_check_finite(f->w, p);
    if (st == QF_OK && f->b) st = qf_rewrite_check_finite(f->b, p);
    /* The bias reads only b, so its order with the weight does not matter. */
    if (st == QF_OK) st = fold_bias(g, f, &a);
    if (st == QF_OK && pending)
        st = qf_value_defer_scale(f->w, fold_scale_axis(f), f->layout == FOLD_CONVT ? f->groups : 1, pend,
                                  f->out_ch);
    else if (st == QF_OK)
        st = f->fq ? fold_weight_fq(g, f, ranges) : fold_weight(g, f, &a, ranges);
    if (st == QF_OK && f->fq) st = fold_fq_qparams(g, f->fq);
    if (st == QF_OK && p->op == QF_OP_GEMM) {
        if (qf_node_attr(p, "alpha")) st = qf_node_set_attr_float(g, p, "alpha", 1.0f);
        if (st == QF_OK && qf_node_attr(p, "beta")) st = qf_node_set_attr_float(g, p, "beta", 1.0f);
    }
    if (st == QF_OK && p->op == QF_OP_MATMUL) p->op = QF_OP_LINEAR;
    if (st == QF_OK) {
        detail = qf_bn_diag_json(&a, ranges, f->out_ch);
        if (!detail) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) {
        const char *pn = f->layout == FOLD_TRANSPOSE || f->via_transpose ? "matmul (now linear)" : qf_op_name(p->op);
        if (f->fq)
            qf_pass_rewrite_as(ctx, bn, QF_PASS_FOLDED, detail, "folded into %s '%s' through its weight fake_quant '%s'%s",
                               pn, p->name, f->fq->name,
                               qf_node_attr_int(f->fq, "observe", 1) ? " (observer moved, qparams recomputed)" : "");
        else
            qf_pass_rewrite_as(ctx, bn, QF_PASS_FOLDED, detail, "folded into %s '%s'", pn, p->name);
        /* The producer's output takes over the BN output's readers (and its
         * name, when the BN output is a graph output). */
        st = qf_rewrite_splice_out(g, bn, f->x);
    }
    qf_free(detail);
    qf_free(ranges);
    qf_free(pend);
    qf_bn_affine_free(&a);
    return st;
}

static bool fuse_batch_norm_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    char why[256];
    if (fold_match(g, bn, user, why, sizeof why)) {
        qf_pass_skip(ctx, bn, "%s", why);
        return false;
    }
    return true;
}

static qf_status fuse_batch_norm_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *bn, void *user)
{
    (void)bn; /* fold_match stored it in the fold */
    return fold_apply(g, ctx, user);
}

static qf_status fuse_batch_norm_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    fold f;
    *changed = false;
    return qf_pass_for_each_op(g, ctx, QF_OP_BATCH_NORM, fuse_batch_norm_match, fuse_batch_norm_apply, &f, changed);
}

const qf_pass qf_pass_fuse_batch_norm = {
    "fuse_batch_norm",
    "fold inference BatchNorm into the conv / conv_transpose / linear / gemm / matmul before it",
    fuse_batch_norm_run,
    .deferred = true,
};
