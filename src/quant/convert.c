/* Convert an annotated, calibrated graph to ONNX QDQ.
 *
 *   before:  x ──Conv(W, b)──▶ y ──Relu──▶ z
 *   after:   x ─Q─DQ─┐
 *            W_q(int8) ─DQ(axis 0)─┤
 *            b_q(int32) ─DQ(s_x·s_W)─┴─Conv──▶ y ──Relu──▶ z ─Q─DQ─▶
 *
 * Everything that can fail for a reason in the input (NaN weights, a value
 * calibration never saw) is checked before the first write, so a failed
 * convert leaves the graph as it was; only out-of-memory can stop it half
 * way (the caller then drops the graph).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/quant_math.h"
#include "../passes/rewrite.h"
#include "qdq.h"
#include "qfold/quant.h"

/* Where convert lists what it quantized (the report's tensors). */
typedef struct recorder {
    qf_quant_tensor **list;
    int *n;
    int cap;
} recorder;

/* Append one tensor (scale copied); a NULL recorder records nothing. */
static qf_status record(recorder *r, const char *name, qf_qspec_kind kind, const float *scale, int nch, int32_t zp,
                        float min, float max, const char *shares, const qf_node *reader, int zero_channels)
{
    if (!r || !r->list) return QF_OK;
    if (*r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 32;
        qf_quant_tensor *t = qf_realloc(*r->list, sizeof *t * (size_t)cap);
        if (!t) return QF_ERR_NOMEM;
        *r->list = t;
        r->cap = cap;
    }
    qf_quant_tensor *t = &(*r->list)[*r->n];
    memset(t, 0, sizeof *t);
    t->name = qf_strdup(name);
    t->scale = qf_malloc(sizeof *t->scale * (size_t)(nch ? nch : 1));
    t->shares = shares ? qf_strdup(shares) : NULL;
    t->node = reader ? qf_strdup(reader->name) : NULL;
    if (!t->name || !t->scale || (shares && !t->shares) || (reader && !t->node)) {
        qf_free(t->name);
        qf_free(t->scale);
        qf_free(t->shares);
        qf_free(t->node);
        return QF_ERR_NOMEM;
    }
    t->zero_channels = zero_channels;
    (*r->n)++;
    t->kind = kind;
    t->nch = nch;
    memcpy(t->scale, scale, sizeof *t->scale * (size_t)nch);
    t->zero_point = zp;
    t->min = min;
    t->max = max;
    return QF_OK;
}

/* Channel layout of a weight: [outer, channels, inner] around `axis`
 * (axis -1: one channel). */
typedef struct wlayout {
    int64_t outer, channels, inner;
} wlayout;

static wlayout layout_of(const qf_tensor *t, int axis)
{
    wlayout l = {1, 1, 1};
    if (axis < 0) {
        l.inner = qf_tensor_numel(t);
        return l;
    }
    l.channels = t->dims[axis];
    for (int i = 0; i < axis; i++) l.outer *= t->dims[i];
    for (int i = axis + 1; i < t->ndim; i++) l.inner *= t->dims[i];
    return l;
}

/* The first node reading v, for messages. */
static const qf_node *reader_of(const qf_value *v) { return v->nuses ? v->uses[0].node : NULL; }

static qf_value *add_const(qf_graph *g, const char *base, const char *suffix, qf_tensor *t)
{
    char name[512];
    snprintf(name, sizeof name, "%s_%s", base, suffix);
    return qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, t);
}

/* scale (float32) and zero point (dtype zdt) constants of n channels; a
 * scalar when per_tensor. */
static qf_status add_qparams(qf_graph *g, const char *base, const float *scale, qf_dtype zdt, int64_t n,
                             bool per_tensor, const int32_t *zp, qf_value **vs, qf_value **vz)
{
    qf_tensor ts, tz;
    int64_t dims[1] = {n};
    QF_TRY(qf_tensor_init(&ts, QF_DTYPE_F32, per_tensor ? 0 : 1, dims));
    qf_status st = qf_tensor_init(&tz, zdt, per_tensor ? 0 : 1, dims);
    if (st != QF_OK) {
        qf_tensor_free(&ts);
        return st;
    }
    memcpy(ts.data, scale, sizeof(float) * (size_t)n);
    for (int64_t c = 0; c < n; c++) {
        if (zdt == QF_DTYPE_I8) ((int8_t *)tz.data)[c] = (int8_t)(zp ? zp[c] : 0);
        else if (zdt == QF_DTYPE_U8) ((uint8_t *)tz.data)[c] = (uint8_t)(zp ? zp[c] : 0);
        else ((int32_t *)tz.data)[c] = zp ? zp[c] : 0;
    }
    *vs = add_const(g, base, "scale", &ts);
    *vz = *vs ? add_const(g, base, "zero_point", &tz) : NULL;
    qf_tensor_free(&ts);
    qf_tensor_free(&tz);
    return *vs && *vz ? QF_OK : QF_ERR_NOMEM;
}

/* Every reader of `from` reads `to` instead (graph outputs follow). */
static qf_status reroute(qf_graph *g, qf_value *from, qf_value *to, qf_node *keep)
{
    QF_TRY(qf_graph_replace_uses(g, from, to));
    /* the node that makes `to` from `from` keeps reading `from` */
    if (keep) QF_TRY(qf_node_set_input(g, keep, 0, from));
    return QF_OK;
}

qf_status qf_qdq_const(qf_graph *g, qf_value *orig, qf_tensor *q, const float *scale, int64_t n, int axis)
{
    char base[400];
    snprintf(base, sizeof base, "%s", orig->name);
    const qf_dtype zdt = q->dtype;
    qf_value *vq = add_const(g, base, "quantized", q);
    qf_tensor_free(q);
    if (!vq) return QF_ERR_NOMEM;
    qf_value *vs, *vz;
    QF_TRY(add_qparams(g, base, scale, zdt, n, axis < 0, NULL, &vs, &vz));
    char name[512];
    snprintf(name, sizeof name, "%s_DequantizeLinear", base);
    qf_value *in[3] = {vq, vs, vz};
    qf_node *dq = qf_graph_add_node(g, QF_OP_DEQUANTIZE, name, 3, in, 1);
    if (!dq) return QF_ERR_NOMEM;
    if (axis >= 0) QF_TRY(qf_node_set_attr_int(g, dq, "axis", axis));
    qf_tensor *ot = &dq->outputs[0]->type;
    ot->dtype = QF_DTYPE_F32;
    ot->ndim = orig->type.ndim;
    memcpy(ot->dims, orig->type.dims, sizeof ot->dims);
    snprintf(name, sizeof name, "%s_dequantized", base);
    QF_TRY(qf_graph_rename_value(g, dq->outputs[0], name));
    QF_TRY(reroute(g, orig, dq->outputs[0], NULL));
    qf_rewrite_drop_dead_consts(g, &orig, 1);
    return QF_OK;
}

qf_status qf_qdq_weight(qf_graph *g, qf_value *w, const float *scale, int axis, int32_t qmin, int32_t qmax)
{
    wlayout l = layout_of(&w->type, axis);
    qf_tensor q;
    QF_TRY(qf_tensor_init(&q, QF_DTYPE_I8, w->type.ndim, w->type.dims));
    const float *d = w->type.data;
    int8_t *pq = q.data;
    for (int64_t o = 0; o < l.outer; o++)
        for (int64_t c = 0; c < l.channels; c++)
            for (int64_t i = 0; i < l.inner; i++) {
                int64_t k = (o * l.channels + c) * l.inner + i;
                pq[k] = (int8_t)qf_quantize_range_f32(d[k], scale[c], 0, qmin, qmax);
            }
    return qf_qdq_const(g, w, &q, scale, l.channels, axis);
}

qf_status qf_qdq_bias(qf_graph *g, qf_value *b, float s_in, const float *sw, int64_t nw, float *scale)
{
    const int64_t n = qf_tensor_numel(&b->type);
    if (nw != 1 && nw != n)
        return qf_error(QF_ERR_SHAPE, "bias '%s' has %lld entries, its weight %lld channels", b->name, (long long)n,
                        (long long)nw);
    qf_tensor q;
    QF_TRY(qf_tensor_init(&q, QF_DTYPE_I32, b->type.ndim, b->type.dims));
    const float *d = b->type.data;
    int32_t *pq = q.data;
    for (int64_t c = 0; c < n; c++) {
        /* float32 product, as ONNX Runtime's and PyTorch's converters */
        scale[c] = s_in * sw[nw == 1 ? 0 : c];
        pq[c] = qf_saturate_s32_f64(qf_round_half_even_f64((double)d[c] / (double)scale[c]));
    }
    /* per-tensor weight: one scale for the whole bias */
    return qf_qdq_const(g, b, &q, scale, nw == 1 ? 1 : n, nw == 1 ? -1 : 0);
}

qf_status qf_qdq_pair_axis(qf_graph *g, qf_value *v, const float *scale, const int32_t *zero_point, int64_t n,
                           int axis, qf_dtype qdt)
{
    char base[400], name[512];
    snprintf(base, sizeof base, "%s", v->name);
    qf_value *vs, *vz;
    QF_TRY(add_qparams(g, base, scale, qdt, n, axis < 0, zero_point, &vs, &vz));
    snprintf(name, sizeof name, "%s_QuantizeLinear", base);
    qf_value *qin[3] = {v, vs, vz};
    qf_node *q = qf_graph_add_node(g, QF_OP_QUANTIZE, name, 3, qin, 1);
    if (!q) return QF_ERR_NOMEM;
    if (axis >= 0) QF_TRY(qf_node_set_attr_int(g, q, "axis", axis));
    q->outputs[0]->type.dtype = qdt;
    q->outputs[0]->type.ndim = v->type.ndim;
    memcpy(q->outputs[0]->type.dims, v->type.dims, sizeof v->type.dims);
    snprintf(name, sizeof name, "%s_quantized", base);
    QF_TRY(qf_graph_rename_value(g, q->outputs[0], name));
    snprintf(name, sizeof name, "%s_DequantizeLinear", base);
    qf_value *dqin[3] = {q->outputs[0], vs, vz};
    qf_node *dq = qf_graph_add_node(g, QF_OP_DEQUANTIZE, name, 3, dqin, 1);
    if (!dq) return QF_ERR_NOMEM;
    if (axis >= 0) QF_TRY(qf_node_set_attr_int(g, dq, "axis", axis));
    dq->outputs[0]->type = v->type;
    dq->outputs[0]->type.data = NULL;
    dq->outputs[0]->type.owns = false;
    dq->outputs[0]->type.writable = false;
    snprintf(name, sizeof name, "%s_dequantized", base);
    QF_TRY(qf_graph_rename_value(g, dq->outputs[0], name));
    return reroute(g, v, dq->outputs[0], q);
}

qf_status qf_qdq_pair(qf_graph *g, qf_value *v, float scale, int32_t zero_point, qf_dtype qdt)
{
    return qf_qdq_pair_axis(g, v, &scale, &zero_point, 1, -1, qdt);
}

/* A weight: per-channel (or per-tensor) symmetric int8; scales kept in
 * wscale[v] for the biases that follow. */
static qf_status convert_weight(qf_graph *g, qf_value *w, const qf_qspec *s, float **wscale, int64_t *wn,
                                qf_quant_convert_stats *stats, recorder *rec)
{
    wlayout l = layout_of(&w->type, s->axis);
    float *scale = qf_malloc(sizeof *scale * (size_t)l.channels);
    if (!scale) return QF_ERR_NOMEM;
    const float *d = w->type.data;
    int zero = 0;
    for (int64_t c = 0; c < l.channels; c++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t o = 0; o < l.outer; o++)
            for (int64_t i = 0; i < l.inner; i++) {
                float v = d[(o * l.channels + c) * l.inner + i];
                mn = v < mn ? v : mn;
                mx = v > mx ? v : mx;
            }
        if (l.outer * l.inner == 0) mn = mx = 0.0f;
        if (mn == 0.0f && mx == 0.0f) zero++;
        scale[c] = qf_qparams_from_range(mn, mx, s->format.scheme, s->format.qmin, s->format.qmax, FLT_EPSILON).scale;
    }
    wscale[w->id] = scale;
    wn[w->id] = l.channels;
    stats->weights++;
    /* All-zero weights quantize exactly (to zeros, at the smallest scale),
     * but a layer that computes nothing is worth a line in the report. */
    if (zero) stats->zero_weights++;
    QF_TRY(record(rec, w->name, QF_QSPEC_WEIGHT, scale, (int)l.channels, 0, 0.0f, 0.0f, NULL, reader_of(w), zero));
    return qf_qdq_weight(g, w, scale, s->axis, s->format.qmin, s->format.qmax);
}

/* A bias: int32 with scale s_in * s_w (per channel where the weight is). */
static qf_status convert_bias(qf_graph *g, qf_value *b, const qf_qspec *s, const qf_quant_calib *cal,
                              float *const *wscale, const int64_t *wn, qf_quant_convert_stats *stats, recorder *rec)
{
    const qf_qparams *in = qf_quant_calib_qparams(cal, s->bias_input);
    const float *sw = wscale[s->bias_weight];
    int64_t nw = wn[s->bias_weight];
    const int64_t n = qf_tensor_numel(&b->type);
    if (!in || !sw) return qf_error(QF_ERR_INTERNAL, "bias '%s': its input or weight was not quantized", b->name);
    const qf_node *reader = reader_of(b);
    /* A grouped ConvTranspose's weight is [C, M/group, k...]: its per-channel
     * scales (axis 1) are M/group, output channel o of its M uses scale
     * o mod (M/group), as qat_convert.c writes it. */
    float *swx = NULL;
    if (reader && reader->op == QF_OP_CONV_TRANSPOSE && nw > 1 && nw != n && n % nw == 0 &&
        n / nw == qf_node_attr_int(reader, "group", 1)) {
        swx = qf_malloc(sizeof *swx * (size_t)n);
        if (!swx) return QF_ERR_NOMEM;
        for (int64_t o = 0; o < n; o++) swx[o] = sw[o % nw];
        sw = swx;
        nw = n;
    }
    float *scale = qf_malloc(sizeof *scale * (size_t)(n ? n : 1));
    /* recorded before the bias is replaced (its name goes with it) */
    char *name = scale ? qf_strdup(b->name) : NULL;
    qf_status st = name ? qf_qdq_bias(g, b, in->scale, sw, nw, scale) : QF_ERR_NOMEM;
    if (st == QF_OK) {
        stats->biases++;
        st = record(rec, name, QF_QSPEC_BIAS, scale, (int)(nw == 1 ? 1 : n), 0, 0.0f, 0.0f, NULL, reader, 0);
    }
    qf_free(name);
    qf_free(scale);
    qf_free(swx);
    return st;
}

/* QuantizeLinear -> DequantizeLinear after activation v. */
static qf_status convert_activation(qf_graph *g, qf_value *v, const qf_qspec *s, const qf_quant_calib *cal,
                                    qf_quant_convert_stats *stats, recorder *rec)
{
    const qf_qparams *qp = qf_quant_calib_qparams(cal, v->id);
    float mn = 0.0f, mx = 0.0f;
    QF_TRY(qf_quant_calib_range(cal, v->id, &mn, &mx));
    QF_TRY(record(rec, v->name, s->kind, &qp->scale, 1, qp->zero_point, mn, mx,
                  s->kind == QF_QSPEC_SHARE ? g->values[s->share]->name : NULL, NULL, 0));
    stats->activations++;
    return qf_qdq_pair(g, v, qp->scale, qp->zero_point, QF_DTYPE_I8);
}

/* Checks before the first write. */
static qf_status convert_check(const qf_graph *g, const qf_quant_annotation *a, const qf_quant_calib *c)
{
    for (int i = 0; i < a->nvalues; i++) {
        const qf_value *v = g->values[i];
        const qf_qspec *s = &a->spec[i];
        if (!v || s->kind == QF_QSPEC_FLOAT) continue;
        if (s->kind == QF_QSPEC_WEIGHT || s->kind == QF_QSPEC_BIAS) {
            if (!qf_rewrite_is_f32_const(v))
                return qf_error(QF_ERR_INTERNAL, "'%s' is annotated as a weight but is not a float32 constant",
                                v->name);
            const qf_node *n = reader_of(v);
            if (n) QF_TRY(qf_rewrite_check_finite(v, n));
            if (s->kind == QF_QSPEC_WEIGHT && s->axis >= v->type.ndim)
                return qf_error(QF_ERR_SHAPE, "weight '%s' of rank %d has no channel axis %d", v->name, v->type.ndim,
                                s->axis);
        } else if (!qf_quant_calib_qparams(c, (uint32_t)i)) {
            return qf_error(QF_ERR_INVALID, "value '%s' has no calibrated qparams", v->name);
        }
    }
    return QF_OK;
}

qf_status qf_quant_convert(qf_graph *g, const qf_quant_annotation *a, const qf_quant_calib *c,
                           qf_quant_convert_stats *stats, qf_quant_tensor **tensors, int *ntensors)
{
    recorder rec = {tensors, ntensors, 0}, *rp = tensors && ntensors ? &rec : NULL;
    if (rp) rec.cap = *ntensors; /* appending to a list of that many (no spare room) */
    qf_quant_convert_stats local = {0};
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (a->nvalues > g->nvalues) return qf_error(QF_ERR_INTERNAL, "annotation is for another graph");
    QF_TRY(convert_check(g, a, c));
    int nv = a->nvalues;
    float **wscale = qf_calloc((size_t)(nv ? nv : 1), sizeof *wscale);
    int64_t *wn = qf_calloc((size_t)(nv ? nv : 1), sizeof *wn);
    qf_status st = wscale && wn ? QF_OK : QF_ERR_NOMEM;
    /* Weights first (biases need their scales), then biases, then the
     * activations. Only values that exist before convert are visited. */
    for (int pass = 0; pass < 3 && st == QF_OK; pass++)
        for (int i = 0; i < nv && st == QF_OK; i++) {
            qf_value *v = g->values[i];
            const qf_qspec *s = &a->spec[i];
            if (!v) continue;
            if (pass == 0 && s->kind == QF_QSPEC_WEIGHT) st = convert_weight(g, v, s, wscale, wn, stats, rp);
            if (pass == 1 && s->kind == QF_QSPEC_BIAS) st = convert_bias(g, v, s, c, wscale, wn, stats, rp);
            if (pass == 2 && (s->kind == QF_QSPEC_OBSERVE || s->kind == QF_QSPEC_SHARE || s->kind == QF_QSPEC_FIXED))
                st = convert_activation(g, v, s, c, stats, rp);
        }
    for (int i = 0; wscale && i < nv; i++) qf_free(wscale[i]);
    qf_free(wscale);
    qf_free(wn);
    if (st == QF_OK && g->opset < 13) g->opset = 13;
    if (st == QF_OK) st = qf_graph_toposort(g);
    return st;
}

/* --- the quant_convert pass ------------------------------------------------------------ */

static qf_status quant_convert_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    qf_quant_session *s = qf_pass_user(ctx);
    if (!s || !s->annotation || !s->calib)
        return qf_error(QF_ERR_INVALID,
                        "pass 'quant_convert' needs an annotated and calibrated quantization session (qfold quantize)");
    uint32_t first_new = g->next_node_id;
    QF_TRY(qf_quant_convert(g, s->annotation, s->calib, &s->stats, &s->tensors, &s->ntensors));
    /* One line per node the conversion made. */
    for (const qf_node *n = g->first; n; n = n->next)
        if (n->id >= first_new) {
            qf_pass_rewrite(ctx, n, NULL, n->op == QF_OP_QUANTIZE ? "quantizes '%s'" : "dequantizes '%s'",
                            n->inputs[0]->name);
            *changed = true;
        }
    return QF_OK;
}

const qf_pass qf_pass_quant_convert = {
    .name = "quant_convert",
    .summary = "quantizer: rewrite the annotated, calibrated graph to ONNX QDQ (int8 weights, int32 bias)",
    .run = quant_convert_run,
};
