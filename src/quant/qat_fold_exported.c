/* qat_fold_exported: a QAT model as PyTorch 1.13 exports it (prepare_qat_fx
 * with FakeQuantize modules, observers disabled, eval(), opset 13) becomes
 * the folded int8 QDQ form `qfold quantize` writes.
 *
 *   before (ConvBn / ConvBnReLU / LinearBn1d, the simulated fusion):
 *     W*s ─Q─DQ─┐
 *     x ─Q─DQ───┴─Conv / Gemm(zero bias)─Div(s)─[Add(b)]─BatchNormalization─[Relu]─Q─DQ
 *   after:
 *     W' (int8) ─DQ(s_w', axis)─┐
 *     b' (int32) ─DQ(s_in*s_w')─┤
 *     x ─Q─DQ(s_in)─────────────┴─Conv / Gemm─[Relu]─Q─DQ
 *
 * The weights' [qmin, qmax] is int8's [-128, 127] (all a Q/DQ pair can say,
 * and all PyTorch's exporter takes), or the range the session names (the
 * "qfold.weight_range" a `qfold qat --keep-qat` model records: [-127, 127]
 * for the neutron profile), so the int8 values are clamped as in training.
 *
 * also `op(x, QDQ(W)) -> BN` without the Div (s = 1). The chain is folded
 * THROUGH the weight's Q / DQ: with a_c = gamma_c / sqrt(var_c + eps) the
 * op's output channel c is multiplied by f_c = a_c / s_c, so
 *   W'_c = W_c * f_c,   b'_c = c_c * f_c + (b_c - mu_c) * a_c + beta_c
 * (c: the op's own bias, b: the Add's; in double, rounded once), where W_c
 * is what the model computed with: the fake-quantized s_c * q (see
 * fx_fold_weight). f_c is also computed in float32 the way torch computed s
 * (gamma / sqrt(var + eps), float32 ops): where it is exactly 1 (every
 * torch export) the channel keeps its int8 values and the Q's scale, the
 * trained fake-quant grid; a per-channel weight elsewhere keeps its int8
 * values at the scale s_c * |f_c|; a per-tensor one gets a new grid
 * (symmetric, from the new range, over the model's own [qmin, qmax], torch's
 * observer arithmetic). Then every weight under a
 * Q -> DQ pair becomes an int8 initializer (torch's arithmetic: zp +
 * round(x * (1 / scale)), as its fake-quant and quantize_per_channel compute
 * it; ONNX's x / scale can differ at a near-tie), the bias of a conv / Gemm
 * whose input is dequantized an int32 at s_in * s_w, and the uint8
 * activation pairs (torch's FX backends take quint8 activations only) int8
 * pairs: q - 128 with the zero point - 128 is the same grid.
 *
 * Anything the input can get wrong is checked before the first write (a
 * Q / DQ with a non-constant or non-positive scale, asymmetric or uint8
 * weights, Q and DQ of one weight disagreeing, a BN in training mode, a Div by
 * a non-constant, NaN weights, var + eps <= 0): QF_ERR_INVALID / NUMERIC
 * naming the node, the graph unchanged. A chain with extra readers is
 * skipped with the reason (BatchNorm stays float). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/quant_math.h"
#include "../passes/bn_math.h"
#include "../passes/rewrite.h"
#include "op_quant.h"
#include "qdq.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

/* --- constants and qparams --------------------------------------------------------- */

/* v, or the constant an Identity chain forwards; NULL when not a constant. */
static const qf_value *fx_const(const qf_value *v)
{
    while (v && v->producer && v->producer->op == QF_OP_IDENTITY && v->producer->ninputs == 1)
        v = v->producer->inputs[0];
    return v && qf_value_is_const(v) ? v : NULL;
}

static const qf_value *fx_const_f32(const qf_value *v)
{
    v = fx_const(v);
    return v && v->type.dtype == QF_DTYPE_F32 ? v : NULL;
}

/* A Q / DQ node's qparams. */
typedef struct fx_qp {
    const float *scale;
    int64_t n;           /* scales */
    const qf_value *zp;  /* NULL: absent (uint8 0) */
    qf_dtype zdt;
    int axis;            /* -1: per tensor */
} fx_qp;

static int32_t fx_zp(const fx_qp *q, int64_t c)
{
    if (!q->zp) return 0;
    const void *d = q->zp->type.data;
    int64_t k = q->n == 1 ? 0 : c;
    switch (q->zdt) {
    case QF_DTYPE_I8: return ((const int8_t *)d)[k];
    case QF_DTYPE_U8: return ((const uint8_t *)d)[k];
    default: return ((const int32_t *)d)[k];
    }
}

/* The qparams of Q / DQ node n, or QF_ERR_INVALID / NUMERIC naming it. */
static qf_status fx_qparams(const qf_node *n, fx_qp *q)
{
    const char *what = qf_op_label(n);
    const qf_value *s = n->ninputs > 1 ? fx_const_f32(n->inputs[1]) : NULL;
    if (!s) return qf_error(QF_ERR_INVALID, "%s '%s': its scale is not a float32 constant", what, n->name);
    memset(q, 0, sizeof *q);
    q->scale = s->type.data;
    q->n = qf_tensor_numel(&s->type);
    q->zdt = QF_DTYPE_U8;
    if (n->ninputs > 2 && n->inputs[2]) {
        q->zp = fx_const(n->inputs[2]);
        if (!q->zp) return qf_error(QF_ERR_INVALID, "%s '%s': its zero point is not a constant", what, n->name);
        q->zdt = q->zp->type.dtype;
        if (q->zdt != QF_DTYPE_I8 && q->zdt != QF_DTYPE_U8 && q->zdt != QF_DTYPE_I32)
            return qf_error(QF_ERR_UNSUPPORTED, "%s '%s': zero point of type %s", what, n->name,
                            qf_dtype_name(q->zdt));
        if (qf_tensor_numel(&q->zp->type) != q->n)
            return qf_error(QF_ERR_INVALID, "%s '%s': %lld scales but %lld zero points", what, n->name,
                            (long long)q->n, (long long)qf_tensor_numel(&q->zp->type));
    }
    if (q->n < 1) return qf_error(QF_ERR_INVALID, "%s '%s': empty scale", what, n->name);
    for (int64_t c = 0; c < q->n; c++)
        if (!(q->scale[c] > 0.0f) || !isfinite(q->scale[c]))
            return qf_error(QF_ERR_NUMERIC, "%s '%s': scale %lld is %g (must be positive and finite)", what,
                            n->name, (long long)c, (double)q->scale[c]);
    q->axis = -1;
    if (q->n > 1) {
        const qf_value *x = n->inputs[0];
        int rank = x->type.ndim;
        int64_t axis = qf_node_attr_int(n, "axis", 1);
        if (axis < 0) axis += rank;
        if (s->type.ndim != 1 || axis < 0 || axis >= rank || x->type.dims[axis] != q->n)
            return qf_error(QF_ERR_SHAPE, "%s '%s': %lld scales do not fit axis %lld of its input", what, n->name,
                            (long long)q->n, (long long)qf_node_attr_int(n, "axis", 1));
        q->axis = (int)axis;
    }
    return QF_OK;
}

static bool fx_qp_equal(const fx_qp *a, const fx_qp *b)
{
    if (a->n != b->n || a->zdt != b->zdt || a->axis != b->axis) return false;
    for (int64_t c = 0; c < a->n; c++)
        if (a->scale[c] != b->scale[c] || fx_zp(a, c) != fx_zp(b, c)) return false;
    return true;
}

/* --- fake-quantized weights ------------------------------------------------------------ */

static bool fx_is_weighted_op(const qf_node *n)
{
    return n->op == QF_OP_CONV || n->op == QF_OP_CONV_TRANSPOSE || n->op == QF_OP_GEMM;
}

/* W (float constant) -> Q -> DQ -> input 1 of op. */
typedef struct fx_weight {
    qf_node *q, *dq;
    qf_value *w;
    fx_qp qp;
    int out_axis;        /* the op's output-channel axis in W */
    int32_t qmin, qmax;  /* the zero point type's range */
} fx_weight;

/* True when op's weight is a fake-quantized constant (w filled); false when
 * it is something else. *st gets an error when it is one but one qfold does
 * not know (asymmetric, uint8, Q and DQ disagreeing, per channel on another
 * axis, NaN). */
static bool fx_weight_of(const qf_node *op, const qf_quant_finalize_session *s, fx_weight *w, qf_status *st)
{
    *st = QF_OK;
    memset(w, 0, sizeof *w);
    if (!fx_is_weighted_op(op) || op->ninputs < 2 || !op->inputs[1]) return false;
    qf_node *dq = op->inputs[1]->producer;
    if (!dq || dq->op != QF_OP_DEQUANTIZE) return false;
    qf_node *q = dq->inputs[0]->producer;
    if (!q || q->op != QF_OP_QUANTIZE) return false;
    const qf_value *wc = fx_const_f32(q->inputs[0]);
    if (!wc || q->inputs[0] != wc) return false;
    w->q = q;
    w->dq = dq;
    w->w = q->inputs[0];
    fx_qp qdq;
    if ((*st = fx_qparams(q, &w->qp)) != QF_OK || (*st = fx_qparams(dq, &qdq)) != QF_OK) return true;
    if (!fx_qp_equal(&w->qp, &qdq)) {
        *st = qf_error(QF_ERR_INVALID, "weight '%s' of '%s': QuantizeLinear '%s' and DequantizeLinear '%s' have "
                                       "different scales or zero points",
                       w->w->name, op->name, q->name, dq->name);
        return true;
    }
    if (w->qp.zdt != QF_DTYPE_I8) {
        *st = qf_error(QF_ERR_UNSUPPORTED, "weight '%s' of '%s': %s weights (only int8 weights are supported)",
                       w->w->name, op->name, qf_dtype_name(w->qp.zdt));
        return true;
    }
    for (int64_t c = 0; c < w->qp.n; c++)
        if (fx_zp(&w->qp, c) != 0) {
            *st = qf_error(QF_ERR_UNSUPPORTED, "weight '%s' of '%s': zero point %d in channel %lld (only symmetric "
                                               "weights are supported)",
                           w->w->name, op->name, (int)fx_zp(&w->qp, c), (long long)c);
            return true;
        }
    w->qmin = s && s->weight_range ? s->weight_qmin : -128;
    w->qmax = s && s->weight_range ? s->weight_qmax : 127;
    w->out_axis = qf_op_quant_weight_axis(op); /* Conv 0, ConvTranspose 1, Gemm 1 (0 with transB) */
    if (w->w->type.ndim < 2) {
        *st = qf_error(QF_ERR_SHAPE, "weight '%s' of '%s' has rank %d", w->w->name, op->name, w->w->type.ndim);
        return true;
    }
    if (w->qp.axis >= 0 && (w->qp.axis != w->out_axis ||
                            (op->op == QF_OP_CONV_TRANSPOSE && qf_node_attr_int(op, "group", 1) != 1))) {
        *st = qf_error(QF_ERR_UNSUPPORTED, "weight '%s' of '%s': per-channel scales on axis %d, not on the output "
                                           "channels",
                       w->w->name, op->name, w->qp.axis);
        return true;
    }
    *st = qf_rewrite_check_finite(w->w, op);
    return true;
}

/* [outer, channels, inner] of W around axis (out channels). */
static void fx_layout(const qf_tensor *t, int axis, int64_t *outer, int64_t *ch, int64_t *inner)
{
    *outer = *inner = 1;
    *ch = t->dims[axis];
    for (int i = 0; i < axis; i++) *outer *= t->dims[i];
    for (int i = axis + 1; i < t->ndim; i++) *inner *= t->dims[i];
}

/* torch's quantization of a weight: zp + round(x * (1 / scale)), ties to
 * even, clamped (fake_quantize and quantize_per_channel compute it so). */
static int8_t fx_quantize_torch(float x, float scale, int32_t qmin, int32_t qmax)
{
    float inv = 1.0f / scale;
    return (int8_t)qf_saturate_range_f32(qf_round_half_even_f32(x * inv), qmin, qmax, 0);
}

/* --- the session's record ----------------------------------------------------------- */

static qf_status fx_record(qf_quant_finalize_session *s, const char *name, const qf_node *op, const fx_weight *w,
                           int nch, int folded, int kept, int scaled, int requant)
{
    if (!s) return QF_OK;
    if (s->nweights == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        qf_quant_finalize_weight *p = qf_realloc(s->weights, sizeof *p * (size_t)cap);
        if (!p) return QF_ERR_NOMEM;
        s->weights = p;
        s->cap = cap;
    }
    qf_quant_finalize_weight *r = &s->weights[s->nweights];
    memset(r, 0, sizeof *r);
    r->name = qf_strdup(name);
    r->node = qf_strdup(op->name);
    if (!r->name || !r->node) {
        qf_free(r->name);
        qf_free(r->node);
        return QF_ERR_NOMEM;
    }
    s->nweights++;
    r->linear = op->op == QF_OP_GEMM;
    r->nch = nch;
    r->qmin = w->qmin;
    r->qmax = w->qmax;
    r->folded = folded;
    r->grid_kept = kept;
    r->grid_scaled = scaled;
    r->requantized = requant;
    return QF_OK;
}

void qf_quant_finalize_session_free(qf_quant_finalize_session *s)
{
    if (!s) return;
    for (int i = 0; i < s->nweights; i++) {
        qf_free(s->weights[i].name);
        qf_free(s->weights[i].node);
    }
    qf_free(s->weights);
    memset(s, 0, sizeof *s);
}

/* --- writing a weight and its bias -------------------------------------------------------- */

/* Replace W -> Q -> DQ of w by int8 values -> DQ(scale): qv when given
 * (the fold's), else W's own data quantized at `scale` (its per-channel /
 * per-tensor scales); the new initializer is named after W (<W>_quantized). */
static qf_status fx_write_weight(qf_graph *g, fx_weight *w, const int8_t *qv, const float *scale)
{
    const float *data = w->w->type.data;
    const qf_tensor *t = &w->w->type;
    int64_t outer, ch, inner;
    fx_layout(t, w->qp.axis >= 0 ? w->qp.axis : 0, &outer, &ch, &inner);
    if (w->qp.axis < 0) ch = 1, inner = qf_tensor_numel(t), outer = 1;
    qf_tensor qt;
    QF_TRY(qf_tensor_init(&qt, QF_DTYPE_I8, t->ndim, t->dims));
    int8_t *pq = qt.data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < ch; c++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * ch + c) * inner + i;
                pq[k] = qv ? qv[k] : fx_quantize_torch(data[k], scale[c], w->qmin, w->qmax);
            }
    /* The DQ output takes W's name (W becomes <W>_float until it goes), so
     * the names are the PTQ converter's: <W>_quantized, <W>_scale, ... */
    qf_value *dqo = w->dq->outputs[0];
    char name[512], keep[400];
    snprintf(keep, sizeof keep, "%s", w->w->name);
    snprintf(name, sizeof name, "%s_float", keep);
    if (!qf_graph_find_value(g, name) && qf_graph_rename_value(g, w->w, name) == QF_OK)
        (void)qf_graph_rename_value(g, dqo, keep);
    qf_status st = qf_qdq_const(g, dqo, &qt, scale, ch, w->qp.axis);
    if (st != QF_OK) return st;
    /* The old pair reads nothing any more: remove it and its constants. */
    qf_value *ins[6] = {0};
    int nin = 0;
    if (dqo->nuses || dqo->is_output) return QF_OK; /* left to dce */
    for (int i = 0; i < w->dq->ninputs && nin < 3; i++) ins[nin++] = w->dq->inputs[i];
    qf_graph_remove_node(g, w->dq);
    if (!w->q->outputs[0]->nuses && !w->q->outputs[0]->is_output) {
        for (int i = 0; i < w->q->ninputs && nin < 6; i++) ins[nin++] = w->q->inputs[i];
        qf_graph_remove_node(g, w->q);
    }
    qf_rewrite_drop_dead_consts(g, ins, nin);
    return QF_OK;
}

/* The per-tensor scale of the DequantizeLinear feeding op's input 0, or 0. */
static float fx_input_scale(const qf_node *op)
{
    const qf_node *dq = op->inputs[0] ? op->inputs[0]->producer : NULL;
    if (!dq || dq->op != QF_OP_DEQUANTIZE) return 0.0f;
    const qf_value *s = fx_const_f32(dq->inputs[1]);
    return s && qf_tensor_numel(&s->type) == 1 ? *(const float *)s->type.data : 0.0f;
}

/* op's float bias (slot 2) to int32 at s_in * s_w; left float (counted)
 * when op's input is not dequantized or the bias is no 1-D constant. */
static qf_status fx_write_bias(qf_graph *g, qf_pass_ctx *ctx, qf_node *op, const float *sw, int64_t nw,
                               qf_quant_finalize_session *s)
{
    if (op->ninputs < 3 || !op->inputs[2]) return QF_OK;
    qf_value *b = op->inputs[2];
    float s_in = fx_input_scale(op);
    /* A grouped ConvTranspose: M/group weight scales (its weight's axis 1),
     * output channel o of M uses o mod (M/group), as qat_convert.c. */
    float *swx = NULL;
    const int64_t nb = qf_tensor_numel(&b->type);
    if (op->op == QF_OP_CONV_TRANSPOSE && nw > 1 && nb != nw && nb % nw == 0 &&
        nb / nw == qf_node_attr_int(op, "group", 1)) {
        swx = qf_malloc(sizeof *swx * (size_t)nb);
        if (!swx) return QF_ERR_NOMEM;
        for (int64_t o = 0; o < nb; o++) swx[o] = sw[o % nw];
        sw = swx;
        nw = nb;
    }
    if (!qf_rewrite_is_f32_const(b) || b->type.ndim != 1 || s_in == 0.0f ||
        (nw != 1 && qf_tensor_numel(&b->type) != nw)) {
        qf_pass_skip(ctx, op, "bias '%s' left float: %s", b->name,
                     s_in == 0.0f ? "the input is not dequantized (no per-tensor DequantizeLinear before it)"
                                  : "not a 1-D float constant of one entry per output channel");
        if (s) s->float_biases++;
        qf_free(swx);
        return QF_OK;
    }
    qf_status st = qf_rewrite_check_finite(b, op);
    float *scale = st == QF_OK ? qf_malloc(sizeof *scale * (size_t)(nb ? nb : 1)) : NULL;
    if (st == QF_OK && !scale) st = QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_qdq_bias(g, b, s_in, sw, nw, scale);
    qf_free(scale);
    qf_free(swx);
    if (st == QF_OK && s) s->biases++;
    return st;
}

/* --- the BatchNorm chains ------------------------------------------------------------------ */

typedef struct fx_chain {
    qf_node *bn, *add, *div, *op;
    const qf_value *s, *b; /* the Div's and the Add's constants (NULL: absent) */
    fx_weight w;
    int64_t ch;
} fx_chain;

/* A constant of 1 or ch entries that broadcasts along axis 1 of a rank-r
 * output (ch at position 1 once right-aligned, every other dim 1). */
static bool fx_per_channel(const qf_value *v, int64_t ch, int rank)
{
    int64_t n = qf_tensor_numel(&v->type);
    if (n == 1) return true;
    if (n != ch || v->type.ndim > rank) return false;
    int pos = 1 - (rank - v->type.ndim); /* where axis 1 sits in v */
    return pos >= 0 && v->type.dims[pos] == ch;
}

static float fx_at(const qf_value *v, int64_t c)
{
    const float *d = v->type.data;
    return qf_tensor_numel(&v->type) == 1 ? d[0] : d[c];
}

/* Whether v is read only by node `by` (once) and is not a graph output. */
static bool fx_sole(const qf_value *v, const qf_node *by)
{
    return qf_rewrite_sole_user(v, NULL) == by;
}

/* Match the chain ending in bn. Returns QF_OK with *skip set (why filled)
 * when bn is no QAT chain or one left alone, QF_OK with *skip false when it
 * folds, an error naming the node for a chain qfold does not know. */
static qf_status fx_chain_match(const qf_graph *g, const qf_quant_finalize_session *s, qf_node *bn, fx_chain *c,
                                bool *skip, char *why, size_t size)
{
    memset(c, 0, sizeof *c);
    *skip = true;
    c->bn = bn;
    qf_value *x = bn->inputs[0];
    qf_node *p = x ? x->producer : NULL;
    if (p && p->op == QF_OP_ADD) {
        c->add = p;
        int k = fx_const_f32(p->inputs[1]) ? 0 : 1; /* the data input */
        x = p->inputs[k];
        c->b = fx_const_f32(p->inputs[1 - k]);
        p = x ? x->producer : NULL;
    }
    if (p && p->op == QF_OP_DIV) {
        c->div = p;
        c->s = fx_const_f32(p->inputs[1]);
        x = p->inputs[0];
        p = x ? x->producer : NULL;
    }
    qf_status st = QF_OK;
    if (!p || !fx_weight_of(p, s, &c->w, &st)) {
        qf_rewrite_why(why, size, "not after a Conv / ConvTranspose / Gemm with a fake-quantized weight");
        return QF_OK;
    }
    QF_TRY(st);
    c->op = p;
    /* From here on it is a QAT chain: what does not fit is an error. */
    if (qf_bn_is_training(g, bn))
        return qf_error(QF_ERR_INVALID, "BatchNormalization '%s' is in training mode: export the QAT model after "
                                        "model.eval()",
                        bn->name);
    char bwhy[160];
    if (qf_bn_check(g, bn, bwhy, sizeof bwhy)) return qf_error(QF_ERR_INVALID, "BatchNormalization '%s': %s", bn->name, bwhy);
    float eps = qf_node_attr_float(bn, "epsilon", 1e-5f);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return qf_error(QF_ERR_INVALID, "BatchNormalization '%s': epsilon %g is not a non-negative number", bn->name,
                        (double)eps);
    qf_bn_affine a; /* var + eps <= 0, NaN statistics: an error now, before any write */
    QF_TRY(qf_bn_affine_init(&a, bn));
    qf_bn_affine_free(&a);
    c->ch = qf_tensor_numel(&bn->inputs[QF_BN_IN_SCALE]->type);
    int rank = c->op->outputs[0]->type.ndim;
    if (c->add && (!c->b || (fx_const_f32(c->add->inputs[0]) && fx_const_f32(c->add->inputs[1]))))
        return qf_error(QF_ERR_INVALID, "Add '%s' before BatchNormalization '%s' does not add one constant to the "
                                        "%s output",
                        c->add->name, bn->name, qf_op_label(c->op));
    if (c->div && !c->s)
        return qf_error(QF_ERR_INVALID, "Div '%s' before BatchNormalization '%s' divides by a non-constant",
                        c->div->name, bn->name);
    if (c->add && !fx_per_channel(c->b, c->ch, rank))
        return qf_error(QF_ERR_SHAPE, "Add '%s': its constant '%s' is not per channel of the %lld channels",
                        c->add->name, c->b->name, (long long)c->ch);
    if (c->div && !fx_per_channel(c->s, c->ch, rank))
        return qf_error(QF_ERR_SHAPE, "Div '%s': its constant '%s' is not per channel of the %lld channels",
                        c->div->name, c->s->name, (long long)c->ch);
    if (c->add) QF_TRY(qf_rewrite_check_finite(c->b, c->add));
    if (c->div) {
        QF_TRY(qf_rewrite_check_finite(c->s, c->div));
        for (int64_t k = 0; k < c->ch; k++)
            if (fx_at(c->s, k) == 0.0f)
                return qf_error(QF_ERR_NUMERIC, "Div '%s': divides channel %lld by 0", c->div->name, (long long)k);
    }
    if (c->w.w->type.dims[c->w.out_axis] != c->ch)
        return qf_error(QF_ERR_SHAPE, "weight '%s' of '%s' has %lld output channels, BatchNormalization '%s' %lld",
                        c->w.w->name, c->op->name, (long long)c->w.w->type.dims[c->w.out_axis], bn->name,
                        (long long)c->ch);
    /* Chains that are ours but cannot fold here: skipped, BN stays float. */
    if (c->op->op == QF_OP_CONV_TRANSPOSE && qf_node_attr_int(c->op, "group", 1) != 1)
        return qf_rewrite_why(why, size, "grouped ConvTranspose"), QF_OK;
    if (c->op->op == QF_OP_GEMM &&
        (qf_node_attr_int(c->op, "transA", 0) || qf_node_attr_float(c->op, "alpha", 1.0f) != 1.0f ||
         qf_node_attr_float(c->op, "beta", 1.0f) != 1.0f))
        return qf_rewrite_why(why, size, "Gemm with transA, alpha or beta"), QF_OK;
    qf_value *ob = c->op->ninputs > 2 ? c->op->inputs[2] : NULL;
    if (ob && (!qf_rewrite_is_f32_const(ob) || (qf_tensor_numel(&ob->type) != c->ch && qf_tensor_numel(&ob->type) != 1)))
        return qf_rewrite_why(why, size, "the bias of '%s' is not a per-channel constant", c->op->name), QF_OK;
    if (ob) QF_TRY(qf_rewrite_check_finite(ob, c->op));
    if (!fx_sole(c->w.q->outputs[0], c->w.dq) || !fx_sole(c->w.dq->outputs[0], c->op))
        return qf_rewrite_why(why, size, "the weight of '%s' is read by other nodes too", c->op->name), QF_OK;
    const qf_node *chain[3] = {c->div, c->add, bn};
    const qf_value *v = c->op->outputs[0];
    for (int k = 0; k < 3; k++) {
        if (!chain[k]) continue;
        if (!fx_sole(v, chain[k]))
            return qf_rewrite_why(why, size, "'%s' has other readers than '%s'", v->name, chain[k]->name), QF_OK;
        v = chain[k]->outputs[0];
    }
    *skip = false;
    return QF_OK;
}

/* The fold of the weight: what the model computed with it is
 * f_c * DQ(Q(W))_c = f_c * s_c * q (the fake-quantized weight, clamped where
 * training clamped it; W itself may lie outside the trained range when the
 * moving-average observer lagged), so that is what is folded:
 *   f_c == 1 (float32, as torch computed s): q and s_c as trained;
 *   per channel: q * sign(f_c) at scale s_c * |f_c| (in double, rounded once:
 *     the same int8 values, the trained grid scaled);
 *   otherwise (per tensor with factors other than 1, or a channel whose
 *     new scale would be below FLT_EPSILON or whose -q does not fit):
 *     the values f_c * s_c * q on a new symmetric grid (torch's observer
 *     arithmetic over the model's [qmin, qmax], torch's rounding).
 * kept / scaled / requant count the channels of each kind. */
typedef struct fx_wfold {
    int8_t *q;
    float *scale;
    int kept, scaled, requant;
} fx_wfold;

static qf_status fx_fold_weight(const fx_weight *w, int64_t ch, const bool *one, const double *f, fx_wfold *out)
{
    const qf_tensor *t = &w->w->type;
    const int64_t nw = qf_tensor_numel(t), nsc = w->qp.n;
    const float *w0 = t->data;
    int64_t outer, wch, inner;
    fx_layout(t, w->out_axis, &outer, &wch, &inner);
    out->q = qf_malloc((size_t)(nw ? nw : 1));
    out->scale = qf_malloc(sizeof *out->scale * (size_t)nsc);
    bool *req = qf_calloc((size_t)ch, sizeof *req);
    double *v = qf_malloc(sizeof *v * (size_t)(nw ? nw : 1));
    if (!out->q || !out->scale || !req || !v) {
        qf_free(req);
        qf_free(v);
        return QF_ERR_NOMEM;
    }
    /* the trained int8 values and what the model computed with them */
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < ch; k++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t j = (o * ch + k) * inner + i;
                float sk = w->qp.scale[nsc == 1 ? 0 : k];
                out->q[j] = fx_quantize_torch(w0[j], sk, w->qmin, w->qmax);
                v[j] = f[k] * (double)sk * (double)out->q[j];
            }
    bool all_one = true;
    for (int64_t k = 0; k < ch; k++) all_one = all_one && one[k];
    if (nsc == 1) {
        if (all_one) {
            out->scale[0] = w->qp.scale[0];
            out->kept = (int)ch;
        } else {
            for (int64_t k = 0; k < ch; k++) req[k] = true;
            out->requant = (int)ch;
        }
    } else {
        for (int64_t k = 0; k < ch; k++) {
            double sc = (double)w->qp.scale[k] * fabs(f[k]);
            bool neg_min = false;
            for (int64_t o = 0; o < outer && f[k] < 0; o++)
                for (int64_t i = 0; i < inner; i++) neg_min = neg_min || -out->q[(o * ch + k) * inner + i] > w->qmax;
            if (one[k]) {
                out->scale[k] = w->qp.scale[k];
                out->kept++;
            } else if (!(sc >= (double)FLT_EPSILON) || !(sc <= (double)FLT_MAX) || neg_min) {
                req[k] = true;
                out->requant++;
            } else {
                out->scale[k] = (float)sc;
                out->scaled++;
                if (f[k] < 0)
                    for (int64_t o = 0; o < outer; o++)
                        for (int64_t i = 0; i < inner; i++) {
                            int8_t *p = &out->q[(o * ch + k) * inner + i];
                            *p = (int8_t)-*p;
                        }
            }
        }
    }
    /* the channels that need a new grid: symmetric from their range */
    if (out->requant) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t k = 0; k < ch; k++) {
            if (!req[k]) continue;
            if (nsc > 1) mn = INFINITY, mx = -INFINITY;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    float x = (float)v[(o * ch + k) * inner + i];
                    mn = x < mn ? x : mn;
                    mx = x > mx ? x : mx;
                }
            if (nsc > 1) {
                int32_t zp;
                qf_qparams_torch(mn, mx, 1, w->qmin, w->qmax, FLT_EPSILON, &out->scale[k], &zp);
            }
        }
        if (nsc == 1) {
            int32_t zp;
            qf_qparams_torch(mn, mx, 1, w->qmin, w->qmax, FLT_EPSILON, &out->scale[0], &zp);
        }
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < ch; k++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t j = (o * ch + k) * inner + i;
                    if (req[k])
                        out->q[j] = fx_quantize_torch((float)v[j], out->scale[nsc == 1 ? 0 : k], w->qmin, w->qmax);
                }
    }
    qf_free(req);
    qf_free(v);
    return QF_OK;
}

/* Fold chain c: the weight (above), the bias, the int8 weight, the int32
 * bias, the chain's nodes out. */
static qf_status fx_chain_apply(qf_graph *g, qf_pass_ctx *ctx, fx_chain *c, qf_quant_finalize_session *s)
{
    qf_bn_affine a;
    QF_TRY(qf_bn_affine_init(&a, c->bn));
    const int64_t ch = c->ch, nsc = c->w.qp.n;
    double *f = qf_malloc(sizeof *f * (size_t)ch);
    bool *one = qf_malloc(sizeof *one * (size_t)ch);
    fx_wfold wf = {0};
    qf_tensor bt = {0};
    qf_status st = f && one ? QF_OK : QF_ERR_NOMEM;
    if (st != QF_OK) goto done;
    /* f_c in float32 as torch computed s (gamma / sqrt(var + eps)), to see
     * where the factor is exactly 1; in double for the fold itself. */
    const float *gam = c->bn->inputs[QF_BN_IN_SCALE]->type.data, *var = c->bn->inputs[QF_BN_IN_VAR]->type.data;
    const float eps = qf_node_attr_float(c->bn, "epsilon", 1e-5f);
    for (int64_t k = 0; k < ch; k++) {
        float s32 = c->s ? fx_at(c->s, k) : 1.0f;
        float a32 = gam[k] / sqrtf(var[k] + eps);
        one[k] = a32 / s32 == 1.0f;
        f[k] = a.scale[k] / (double)s32;
    }
    if ((st = fx_fold_weight(&c->w, ch, one, f, &wf)) != QF_OK) goto done;
    /* b'_c = c_c * f_c + (b_c - mu_c) * a_c + beta_c */
    int64_t bd[1] = {ch};
    if ((st = qf_tensor_init(&bt, QF_DTYPE_F32, 1, bd)) != QF_OK) goto done;
    const qf_value *ob = c->op->ninputs > 2 ? c->op->inputs[2] : NULL;
    for (int64_t k = 0; k < ch; k++) {
        double cb = ob ? (double)fx_at(ob, k) : 0.0, ab = c->b ? (double)fx_at(c->b, k) : 0.0;
        ((float *)bt.data)[k] = (float)(cb * f[k] + (ab - a.mean[k]) * a.scale[k] + a.beta[k]);
    }
    /* The fold's diagnostics (bn_math.h), over the folded int8 weight's
     * per-channel ranges max |s_w' * q|. */
    double *ranges = qf_calloc((size_t)ch, sizeof *ranges);
    char *diag = NULL;
    if (ranges) {
        int64_t outer, wch, inner;
        fx_layout(&c->w.w->type, c->w.out_axis, &outer, &wch, &inner);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < ch; k++)
                for (int64_t i = 0; i < inner; i++) {
                    double r = fabs((double)wf.q[(o * ch + k) * inner + i] * wf.scale[nsc == 1 ? 0 : k]);
                    ranges[k] = r > ranges[k] ? r : ranges[k];
                }
        diag = qf_bn_diag_json(&a, ranges, ch);
    }
    qf_free(ranges);
    const char *how = c->div ? (c->add ? "Div, Add" : "Div") : (c->add ? "Add" : "");
    qf_pass_rewrite_as(ctx, c->bn, QF_PASS_FOLDED, diag,
                       "folded%s%s into '%s' through its weight fake-quant: of %lld channels %d keep the trained "
                       "int8 grid (factor exactly 1), %d its int8 values at a scaled scale, %d a new grid",
                       *how ? " with " : "", how, c->op->name, (long long)ch, wf.kept, wf.scaled, wf.requant);
    qf_free(diag);
    /* The rewrite: BN, Add, Div out (their readers read the op), then the
     * weight and the bias. */
    char wname[400];
    snprintf(wname, sizeof wname, "%s", c->w.w->name);
    qf_node *chain[3] = {c->bn, c->add, c->div};
    for (int k = 0; k < 3 && st == QF_OK; k++)
        if (chain[k]) st = qf_rewrite_splice_out(g, chain[k], chain[k]->inputs[0]);
    if (st == QF_OK) {
        char hint[512];
        snprintf(hint, sizeof hint, "%s_bias", c->op->name);
        st = qf_rewrite_install_const(g, c->op, 2, &bt, hint);
    }
    if (st == QF_OK) st = fx_write_weight(g, &c->w, wf.q, wf.scale);
    if (st == QF_OK) st = fx_record(s, wname, c->op, &c->w, (int)nsc, (int)ch, wf.kept, wf.scaled, wf.requant);
    if (st == QF_OK) st = fx_write_bias(g, ctx, c->op, wf.scale, nsc, s);
    if (st == QF_OK && s) s->folded++;
done:
    qf_tensor_free(&bt);
    qf_free(wf.q);
    qf_free(wf.scale);
    qf_free(f);
    qf_free(one);
    qf_bn_affine_free(&a);
    return st;
}

/* --- activations --------------------------------------------------------------------------- */

/* A uint8 Q whose every reader is a DQ with its qparams: both move to int8
 * (zero point - 128, the same grid). Returns whether it did. */
static qf_status fx_pair_to_int8(qf_graph *g, qf_node *q, bool *done)
{
    *done = false;
    fx_qp qp, dp;
    QF_TRY(fx_qparams(q, &qp));
    if (qp.zdt != QF_DTYPE_U8 || !q->outputs[0]->nuses || q->outputs[0]->is_output) return QF_OK;
    for (int i = 0; i < q->outputs[0]->nuses; i++) {
        const qf_node *r = q->outputs[0]->uses[i].node;
        if (r->op != QF_OP_DEQUANTIZE || q->outputs[0]->uses[i].slot != 0) return QF_OK;
        QF_TRY(fx_qparams(r, &dp));
        if (!fx_qp_equal(&qp, &dp)) return QF_OK;
    }
    qf_tensor zt;
    int64_t dims[1] = {qp.n};
    const qf_value *z0 = qp.zp;
    QF_TRY(qf_tensor_init(&zt, QF_DTYPE_I8, z0 ? z0->type.ndim : 0, z0 ? z0->type.dims : dims));
    for (int64_t c = 0; c < qp.n; c++) ((int8_t *)zt.data)[c] = (int8_t)(fx_zp(&qp, c) - 128);
    char name[512];
    snprintf(name, sizeof name, "%s_zero_point_s8", q->name);
    qf_value *zv = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &zt);
    qf_tensor_free(&zt);
    if (!zv) return QF_ERR_NOMEM;
    qf_value *old = q->ninputs > 2 ? q->inputs[2] : NULL;
    if (q->ninputs > 2) QF_TRY(qf_node_set_input(g, q, 2, zv));
    else QF_TRY(qf_node_add_input(g, q, zv));
    for (int i = 0; i < q->outputs[0]->nuses; i++) {
        qf_node *r = q->outputs[0]->uses[i].node;
        qf_value *o = r->ninputs > 2 ? r->inputs[2] : NULL;
        if (r->ninputs > 2) QF_TRY(qf_node_set_input(g, r, 2, zv));
        else QF_TRY(qf_node_add_input(g, r, zv));
        if (o) qf_rewrite_drop_dead_consts(g, &o, 1);
    }
    q->outputs[0]->type.dtype = QF_DTYPE_I8;
    if (old) qf_rewrite_drop_dead_consts(g, &old, 1);
    *done = true;
    return QF_OK;
}

/* --- the pass -------------------------------------------------------------------------------- */

/* The nodes of op `op`, snapshot (the rewrites remove nodes). */
static qf_node **fx_nodes(const qf_graph *g, bool (*want)(const qf_node *), int *count)
{
    int n = 0;
    qf_graph_for_each_node(g, x) n += want(x);
    qf_node **list = qf_malloc(sizeof *list * (size_t)(n ? n : 1));
    if (!list) return NULL;
    n = 0;
    qf_graph_for_each_node(g, x) if (want(x)) list[n++] = x;
    *count = n;
    return list;
}

static bool fx_is_bn(const qf_node *n) { return n->op == QF_OP_BATCH_NORM; }
static bool fx_is_qdq(const qf_node *n) { return n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE; }
static bool fx_is_q(const qf_node *n) { return n->op == QF_OP_QUANTIZE; }

/* A node removed meanwhile is not found under its name any more. */
static bool fx_alive(const qf_graph *g, const qf_node *n)
{
    qf_graph_for_each_node(g, x) if (x == n) return true;
    return false;
}

/* torch.onnx.export(..., do_constant_folding=False) writes the constant
 * computations of the simulated fusion as nodes: W * Reshape(gamma /
 * Sqrt(var + eps)) under the weight's Q, Reshape(...) as the Div's divisor,
 * Cast / Identity before a zero point. Import leaves those reading an
 * initializer that others read too (the BN reads var): fold every node whose
 * inputs are all constants here (not Q / DQ), with qfold's float32 kernels,
 * the arithmetic torch ran, so that W*s and s come out as torch computed
 * them. Semantics-preserving, so done before the checks. */
static qf_status fx_fold_constants(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    bool again = true;
    while (again) {
        again = false;
        qf_graph_for_each_node(g, n) {
            if (n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE || n->ninputs == 0) continue;
            bool all = true;
            for (int i = 0; i < n->ninputs && all; i++) all = !n->inputs[i] || qf_value_is_const(n->inputs[i]);
            if (!all) continue;
            qf_pass_rewrite_as(ctx, n, QF_PASS_FOLDED, NULL, "constant computation folded (an export without "
                                                             "constant folding)");
            QF_TRY(qf_graph_fold_node(g, n));
            *changed = again = true;
            break; /* the node list changed */
        }
    }
    return QF_OK;
}

/* --- what PyTorch's export leaves unquantized, and its [1]-shaped qparams ----------------- */

/* Ops whose every output value is a value of their input, or 0 (a Pad by 0:
 * the real 0, which the zero point represents exactly): on the input's grid. */
static bool fx_keeps_grid(const qf_node *n)
{
    switch (n->op) {
    case QF_OP_MAX_POOL:
    case QF_OP_FLATTEN:
    case QF_OP_RESHAPE:
    case QF_OP_TRANSPOSE:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_IDENTITY: return true;
    case QF_OP_PAD: {
        /* edge / reflect repeat input values; constant pads with its value */
        const qf_value *c = n->ninputs > 2 ? n->inputs[2] : NULL;
        if (!c || strcmp(qf_node_attr_string(n, "mode", "constant"), "constant") != 0) return true;
        c = fx_const_f32(c);
        return c && qf_tensor_numel(&c->type) == 1 && *(const float *)c->type.data == 0.0f;
    }
    default: return false;
    }
}

/* A module or function that PyTorch exports as two nodes gets its fake-quant
 * after the second only: AvgPool2d(padding) is Pad -> AveragePool (the Pad
 * by 0, the pool counting the pads) with no Q / DQ between them, and the
 * Pad's float output is read by no int8 kernel and no TFLite op. Where the
 * first node only moves or selects its input's values (fx_keeps_grid), its
 * output is on its input's grid already: a Q -> DQ with the input's DQ's
 * qparams after it changes no value, in float or in int8, and makes the
 * node a layout op between two quantized tensors (TFLite's PAD pads with the
 * zero point). In topological order, so that a chain of such nodes
 * (Pad -> MaxPool) is quantized node by node. A node read by a Q already,
 * or writing a graph output, is left as it is. */
static qf_status fx_share_grid(qf_graph *g, qf_pass_ctx *ctx, qf_quant_finalize_session *s, bool *changed)
{
    QF_TRY(qf_graph_toposort(g));
    int nn = 0;
    qf_node **list = fx_nodes(g, fx_keeps_grid, &nn);
    if (!list) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    for (int i = 0; i < nn && st == QF_OK; i++) {
        qf_node *n = list[i];
        const qf_node *dq = n->inputs[0] ? n->inputs[0]->producer : NULL;
        qf_value *y = n->outputs[0];
        if (!dq || dq->op != QF_OP_DEQUANTIZE || y->type.dtype != QF_DTYPE_F32 || y->is_output || !y->nuses) continue;
        bool read_by_q = false;
        for (int k = 0; k < y->nuses; k++) read_by_q = read_by_q || y->uses[k].node->op == QF_OP_QUANTIZE;
        fx_qp qp;
        if (read_by_q || (st = fx_qparams(dq, &qp)) != QF_OK || qp.n != 1) continue;
        qf_pass_rewrite(ctx, n, NULL, "output '%s' quantized with its input's qparams (PyTorch's export has no "
                                      "Q / DQ after it; its values are on the input's grid)",
                        y->name);
        st = qf_qdq_pair(g, y, qp.scale[0], fx_zp(&qp, 0), qp.zdt == QF_DTYPE_U8 ? QF_DTYPE_U8 : QF_DTYPE_I8);
        if (st == QF_OK && s) s->shared++;
        *changed = true;
    }
    qf_free(list);
    return st;
}

/* PyTorch calls one fake-quant module twice where two readers share it (a
 * ResNet block's identity shortcut: FQ(x) for the block's first conv, FQ(x)
 * again for the Add) and exports both calls: DQ -> Q -> DQ with one set of
 * qparams, which computes nothing (Q(DQ(q)) = q on one grid) but is an
 * int8 -> int8 step no op carries, which export refuses. The second pair
 * goes, its readers read the first DQ. A pair writing a graph output stays. */
static qf_status fx_drop_requote(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    int nq = 0;
    qf_node **qs = fx_nodes(g, fx_is_q, &nq);
    if (!qs) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    for (int i = 0; i < nq && st == QF_OK; i++) {
        qf_node *q = qs[i];
        qf_node *dq = q->inputs[0] ? q->inputs[0]->producer : NULL;
        if (!dq || dq->op != QF_OP_DEQUANTIZE || q->outputs[0]->is_output || !q->outputs[0]->nuses) continue;
        fx_qp a, b, c;
        if ((st = fx_qparams(dq, &a)) != QF_OK || (st = fx_qparams(q, &b)) != QF_OK) break;
        bool same = fx_qp_equal(&a, &b);
        for (int k = 0; k < q->outputs[0]->nuses && same && st == QF_OK; k++) {
            const qf_node *r = q->outputs[0]->uses[k].node;
            same = r->op == QF_OP_DEQUANTIZE && q->outputs[0]->uses[k].slot == 0 && !r->outputs[0]->is_output &&
                   (st = fx_qparams(r, &c)) == QF_OK && fx_qp_equal(&a, &c);
        }
        if (!same || st != QF_OK) continue;
        qf_pass_rewrite(ctx, q, NULL, "a second Q -> DQ with the qparams of DequantizeLinear '%s' before it (one "
                                      "fake-quant called twice): removed",
                        dq->name);
        while (st == QF_OK && q->outputs[0]->nuses)
            st = qf_rewrite_splice_out(g, q->outputs[0]->uses[0].node, dq->outputs[0]);
        if (st != QF_OK) break;
        qf_value *ins[3] = {0};
        int nin = 0;
        for (int k = 1; k < q->ninputs && nin < 3; k++) ins[nin++] = q->inputs[k];
        qf_graph_remove_node(g, q);
        qf_rewrite_drop_dead_consts(g, ins, nin);
        *changed = true;
    }
    qf_free(qs);
    return st;
}

/* PyTorch writes a per-tensor scale and zero point as [1]-shaped tensors.
 * ONNX allows it for QuantizeLinear / DequantizeLinear, but ONNX Runtime's
 * default optimizations fuse the QDQ groups into QLinearAdd and friends,
 * whose type inference wants scalars ("Scale and Zero-point must be a
 * scalar"): every one-element scale and zero point of a Q / DQ becomes a
 * scalar (the same value; a per-channel pair of one channel becomes per
 * tensor, which it is). In place where only Q / DQ qparams read the
 * constant, else a scalar copy. */
static qf_status fx_scalar_qparams(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qf_graph_for_each_node(g, n) {
        if (!fx_is_qdq(n)) continue;
        bool done = false;
        for (int i = 1; i < 3 && i < n->ninputs; i++) {
            qf_value *v = n->inputs[i];
            if (!v || !qf_value_is_const(v) || v->type.ndim == 0 || qf_tensor_numel(&v->type) != 1) continue;
            bool only_qp = !v->is_output;
            for (int k = 0; k < v->nuses && only_qp; k++)
                only_qp = fx_is_qdq(v->uses[k].node) && v->uses[k].slot >= 1;
            if (only_qp) {
                v->type.ndim = 0;
            } else {
                qf_tensor t;
                QF_TRY(qf_tensor_init(&t, v->type.dtype, 0, NULL));
                memcpy(t.data, v->type.data, qf_dtype_size(v->type.dtype));
                char name[512];
                snprintf(name, sizeof name, "%.480s_scalar", v->name);
                qf_value *sv = qf_graph_find_value(g, name);
                if (!sv) sv = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
                qf_tensor_free(&t);
                if (!sv) return QF_ERR_NOMEM;
                QF_TRY(qf_node_set_input(g, n, i, sv));
            }
            if (qf_node_attr(n, "axis")) qf_node_remove_attr(n, "axis");
            done = true;
        }
        if (done) {
            qf_pass_rewrite(ctx, n, NULL, "one-element scale / zero point written as scalars");
            *changed = true;
        }
    }
    return QF_OK;
}

static qf_status fx_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qf_quant_finalize_session *s = qf_pass_user(ctx);
    int nbn = 0, nqdq = 0, nop = 0, nq = 0;
    qf_node **bns = NULL, **qdqs = NULL, **ops = NULL, **qs = NULL;
    fx_chain *chains = NULL;
    bool *skip = NULL;
    qf_status st = QF_OK;
    *changed = false;
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(fx_fold_constants(g, ctx, changed));
    if (!(bns = fx_nodes(g, fx_is_bn, &nbn)) || !(qdqs = fx_nodes(g, fx_is_qdq, &nqdq)) ||
        !(ops = fx_nodes(g, fx_is_weighted_op, &nop))) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    chains = qf_calloc((size_t)(nbn ? nbn : 1), sizeof *chains);
    skip = qf_calloc((size_t)(nbn ? nbn : 1), sizeof *skip);
    if (!chains || !skip) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    /* Every check before the first write. */
    for (int i = 0; i < nqdq && st == QF_OK; i++) {
        fx_qp qp;
        st = fx_qparams(qdqs[i], &qp);
    }
    for (int i = 0; i < nop && st == QF_OK; i++) {
        fx_weight w;
        fx_weight_of(ops[i], s, &w, &st);
    }
    char why[256];
    for (int i = 0; i < nbn && st == QF_OK; i++) {
        st = fx_chain_match(g, s, bns[i], &chains[i], &skip[i], why, sizeof why);
        if (st == QF_OK && skip[i]) qf_pass_skip(ctx, bns[i], "%s", why);
    }
    if (st != QF_OK) goto done;
    /* The chains, then the weights of every other conv / Gemm, then any
     * other weight under a Q -> DQ pair, then the activation pairs. */
    for (int i = 0; i < nbn && st == QF_OK; i++)
        if (!skip[i]) {
            st = fx_chain_apply(g, ctx, &chains[i], s);
            *changed = true;
        }
    for (int i = 0; i < nop && st == QF_OK; i++) {
        fx_weight w;
        qf_status wst;
        if (!fx_alive(g, ops[i]) || !fx_weight_of(ops[i], s, &w, &wst)) continue;
        if ((st = wst) != QF_OK) break;
        char wname[400];
        snprintf(wname, sizeof wname, "%s", w.w->name);
        float *scale = qf_malloc(sizeof *scale * (size_t)w.qp.n);
        if (!scale) {
            st = QF_ERR_NOMEM;
            break;
        }
        memcpy(scale, w.qp.scale, sizeof *scale * (size_t)w.qp.n);
        int64_t n = w.qp.n;
        qf_pass_rewrite(ctx, ops[i], NULL, "weight '%s' to int8 on its trained grid (no BatchNorm to fold)", wname);
        st = fx_write_weight(g, &w, NULL, scale);
        if (st == QF_OK) st = fx_record(s, wname, ops[i], &w, (int)n, 0, 0, 0, 0);
        if (st == QF_OK) st = fx_write_bias(g, ctx, ops[i], scale, n, s);
        qf_free(scale);
        *changed = true;
    }
    if (st != QF_OK) goto done;
    if (!(qs = fx_nodes(g, fx_is_q, &nq))) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < nq && st == QF_OK; i++) {
        if (!fx_alive(g, qs[i])) continue;
        qf_node *q = qs[i];
        bool done = false;
        if (qf_rewrite_is_f32_const(q->inputs[0])) {
            /* a constant under Q -> DQ other than a conv / Gemm weight:
             * its int8 values behind the DQ, when the pair is one. */
            fx_qp qp;
            st = fx_qparams(q, &qp);
            const qf_node *dq = qf_rewrite_sole_user(q->outputs[0], NULL);
            if (st != QF_OK || !dq || dq->op != QF_OP_DEQUANTIZE || qp.zdt != QF_DTYPE_I8) continue;
            bool zero = true;
            for (int64_t c = 0; c < qp.n; c++) zero = zero && fx_zp(&qp, c) == 0;
            fx_qp dp;
            if (!zero || fx_qparams(dq, &dp) != QF_OK || !fx_qp_equal(&qp, &dp)) continue;
            fx_weight w = {.q = q, .dq = (qf_node *)dq, .w = q->inputs[0], .qp = qp, .qmin = -128, .qmax = 127};
            qf_pass_rewrite(ctx, q, NULL, "constant '%s' to int8", w.w->name);
            st = fx_write_weight(g, &w, NULL, qp.scale);
            *changed = true;
            continue;
        }
        st = fx_pair_to_int8(g, q, &done);
        if (st == QF_OK && done) {
            qf_pass_rewrite(ctx, q, NULL, "uint8 activation pair to int8 (zero point - 128, the same grid)");
            if (s) s->activations++;
            *changed = true;
        }
    }
    if (st == QF_OK) st = fx_drop_requote(g, ctx, changed);
    if (st == QF_OK) st = fx_share_grid(g, ctx, s, changed);
    if (st == QF_OK) st = fx_scalar_qparams(g, ctx, changed);
    if (st == QF_OK && *changed && g->opset < 13) g->opset = 13;
    if (st == QF_OK) st = qf_graph_toposort(g);
done:
    qf_free(bns);
    qf_free(qdqs);
    qf_free(ops);
    qf_free(qs);
    qf_free(chains);
    qf_free(skip);
    return st;
}

const qf_pass qf_pass_qat_fold_exported = {
    .name = "qat_fold_exported",
    .summary = "QAT model exported by PyTorch: fold Div / Add / BatchNorm through the weight fake-quant, int8 "
               "weights, int32 biases",
    .run = fx_run,
};

static const char *const fx_finalize_passes[] = {"qat_fold_exported", "dce", NULL};
static const qf_pipeline fx_finalize = {
    .name = "finalize",
    .summary = "a QAT model exported by PyTorch (or qfold qat --keep-qat) to the folded int8 QDQ form",
    .passes = fx_finalize_passes,
};

qf_status qf_quant_finalize_register(void)
{
    static const qf_pass *const passes[] = {&qf_pass_qat_fold_exported};
    static const qf_pipeline *const pipelines[] = {&fx_finalize};
    return qf_pass_register(passes, 1, pipelines, 1);
}
