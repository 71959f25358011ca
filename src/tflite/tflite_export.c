/* int8 TFLite export (include/qfold/tflite.h): a QDQ graph -> the integer
 * nodes of the int8 executor's lowering -> TFLite operators, tensors and
 * buffers -> the flatbuffer (tflite_write.h).
 *
 * The lowering (src/quant/lower.c, TFLite's requantization) already finds
 * every DQ -> op -> [ReLU] -> Q group and resolves its qparams; this file
 * maps each resulting node to a TFLite operator through one table
 * (`qf_tfl_rows`, at the end), plus the few DQ -> op -> Q forms the lowering
 * leaves as they are (Sub, Softmax, Sigmoid, Tanh, HardSwish, and the shape
 * ops Reshape / Flatten / Transpose / Pad, which need no arithmetic).
 *
 * Layout: TFLite's activations are NHWC, qfold's NCHW. Every rank-4 tensor
 * is written NHWC (its shape permuted), constants are permuted at export,
 * axes are mapped (concat, mean, pad, transpose), and a TRANSPOSE is added
 * only where the element order matters: before a Reshape / Flatten of a
 * rank-4 tensor whose NHWC and NCHW orders differ (C > 1 and H * W > 1), and
 * after a Reshape to rank 4 in the same case.
 *
 * Names: a TFLite tensor carries the name of the ONNX value it holds. The
 * lowering replaces each group's Q output by its integer node's output; to
 * keep the Q output's name the export lists every Q output as a graph output
 * of its private copy before lowering (qf_graph_replace_uses then hands the
 * interface name to the replacement) and restores the outputs afterwards. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/strbuf.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "qfold/tflite.h"
#include "tflite_write.h"

#ifndef QF_VERSION
#define QF_VERSION "?"
#endif

/* ---- the export's state ------------------------------------------------------ */

typedef struct tfl_qp {
    float scale;
    int32_t zp;
} tfl_qp;

typedef struct ex {
    qf_graph *g;
    const qf_tflite_options *o;
    void **pool; /* every allocation of the export, freed at the end (or kept by the result) */
    int npool, cpool;
    qf_tfl_tensor *t;
    bool *t_param; /* a weight / bias / constant operand (weight bytes) */
    int nt, ct;
    int32_t *vmap; /* value id -> tensor index + 1 */
    qf_tfl_buffer *b;
    int nb, cb;
    qf_tfl_op *ops;
    qf_tflite_op_info *info;
    int nops, cops;
    bool *skip; /* node id -> consumed by another node's operator */
    int32_t *gin, *gout;
    int ngin, ngout, cgout;
} ex;

static void *ex_alloc(ex *e, size_t n)
{
    if (e->npool == e->cpool) {
        int c = e->cpool ? 2 * e->cpool : 64;
        void **p = qf_realloc(e->pool, sizeof *p * (size_t)c);
        if (!p) return NULL;
        e->pool = p;
        e->cpool = c;
    }
    void *p = qf_calloc(1, n ? n : 1);
    if (p) e->pool[e->npool++] = p;
    return p;
}

static const char *ex_strdup(ex *e, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = ex_alloc(e, n);
    if (p) memcpy(p, s, n);
    return p;
}

/* The ONNX node a lowered node comes from ("<name>_int8" -> "<name>"). */
static const char *node_name(ex *e, const qf_node *n)
{
    size_t len = strlen(n->name);
    if (len > 5 && strcmp(n->name + len - 5, "_int8") == 0) {
        char *p = ex_alloc(e, len - 4);
        if (!p) return n->name;
        memcpy(p, n->name, len - 5);
        return p;
    }
    return n->name;
}

static const qf_node *fc_tail(const qf_node *ql);

/* The ONNX op a (lowered) node comes from, for messages. */
static const char *source_op(const qf_node *n)
{
    switch (n->op) {
    case QF_OP_QLINEAR_CONV: return fc_tail(n) ? "Gemm" : "Conv";
    case QF_OP_QLINEAR_MATMUL: return "MatMul";
    case QF_OP_QCONV_TRANSPOSE: return "ConvTranspose";
    case QF_OP_QADD: return "Add";
    case QF_OP_QMUL: return "Mul";
    case QF_OP_QCONCAT: return "Concat";
    case QF_OP_QAVG_POOL: return "AveragePool";
    case QF_OP_QMEAN: return "ReduceMean / GlobalAveragePool";
    default: return qf_op_label(n);
    }
}

static qf_status refuse(ex *e, const qf_node *n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static qf_status refuse(ex *e, const qf_node *n, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!n) return qf_error(QF_ERR_UNSUPPORTED, "tflite export: %s", why);
    return qf_error(QF_ERR_UNSUPPORTED, "tflite export: node '%s' (%s): %s", node_name(e, n), source_op(n), why);
}

/* ---- layout ------------------------------------------------------------------ */

/* NCHW -> NHWC: physical axis i of a rank-4 tensor holds logical axis
 * qf_tfl_nhwc[i]; the logical axis a is physical qf_tfl_axis(a). */
static const int nhwc_from[4] = {0, 2, 3, 1};
int qf_tfl_phys_axis(int rank, int a);
int qf_tfl_phys_axis(int rank, int a) { return rank == 4 ? (a == 0 ? 0 : a == 1 ? 3 : a - 1) : a; }

/* The TFLite shape of a logical shape (unknown dims, a dynamic batch, as 1). */
static void phys_shape(const qf_tensor *t, int32_t *s)
{
    for (int i = 0; i < t->ndim; i++) {
        int l = t->ndim == 4 ? nhwc_from[i] : i;
        s[i] = t->dims[l] > 0 ? (int32_t)t->dims[l] : 1;
    }
}

/* Permute `n` elements of `es` bytes of a [d0, d1, d2, d3] tensor to the
 * order given by perm (out axis i = in axis perm[i]). */
void qf_tfl_permute4(const void *src, void *dst, const int64_t d[4], const int perm[4], size_t es);
void qf_tfl_permute4(const void *src, void *dst, const int64_t d[4], const int perm[4], size_t es)
{
    int64_t od[4], is[4];
    for (int i = 0; i < 4; i++) od[i] = d[perm[i]];
    is[3] = 1;
    for (int i = 2; i >= 0; i--) is[i] = is[i + 1] * d[i + 1];
    const char *s = src;
    char *o = dst;
    int64_t k = 0;
    for (int64_t a = 0; a < od[0]; a++)
        for (int64_t b = 0; b < od[1]; b++)
            for (int64_t c = 0; c < od[2]; c++)
                for (int64_t x = 0; x < od[3]; x++, k++) {
                    int64_t idx[4] = {0};
                    idx[perm[0]] = a;
                    idx[perm[1]] = b;
                    idx[perm[2]] = c;
                    idx[perm[3]] = x;
                    int64_t off = idx[0] * is[0] + idx[1] * is[1] + idx[2] * is[2] + idx[3] * is[3];
                    memcpy(o + (size_t)k * es, s + (size_t)off * es, es);
                }
}

/* ---- tensors and buffers ------------------------------------------------------ */

static qf_status grow(void **p, int *cap, int need, size_t es)
{
    if (need <= *cap) return QF_OK;
    int c = *cap ? *cap : 32;
    while (c < need) c *= 2;
    void *q = qf_realloc(*p, es * (size_t)c);
    if (!q) return QF_ERR_NOMEM;
    memset((char *)q + es * (size_t)*cap, 0, es * (size_t)(c - *cap));
    *p = q;
    *cap = c;
    return QF_OK;
}

/* A buffer holding a copy of data; its index + 1 (the tensor's buffer). */
static uint32_t add_buffer(ex *e, const void *data, size_t size)
{
    if (grow((void **)&e->b, &e->cb, e->nb + 1, sizeof *e->b) != QF_OK) return 0;
    void *p = ex_alloc(e, size);
    if (!p) return 0;
    if (data) memcpy(p, data, size);
    e->b[e->nb].data = p;
    e->b[e->nb].size = size;
    return (uint32_t)++e->nb;
}

/* A new tensor; its index or -1 (out of memory). data (may be NULL: an
 * activation) of `size` bytes is copied into its own buffer. */
static int add_tensor(ex *e, const char *name, int type, int ndim, const int32_t *shape, const void *data, size_t size,
                      int nq, const float *scale, const int64_t *zp, int qdim, bool param)
{
    int ct = e->ct;
    if (grow((void **)&e->t, &ct, e->nt + 1, sizeof *e->t) != QF_OK) return -1;
    if (grow((void **)&e->t_param, &e->ct, e->nt + 1, sizeof *e->t_param) != QF_OK) return -1;
    qf_tfl_tensor *t = &e->t[e->nt];
    memset(t, 0, sizeof *t);
    t->name = ex_strdup(e, name);
    t->type = type;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int32_t) * (size_t)ndim);
    if (data || size) {
        t->buffer = add_buffer(e, data, size);
        if (!t->buffer) return -1;
    }
    if (nq > 0) {
        float *s = ex_alloc(e, sizeof *s * (size_t)nq);
        int64_t *z = ex_alloc(e, sizeof *z * (size_t)nq);
        if (!s || !z) return -1;
        memcpy(s, scale, sizeof *s * (size_t)nq);
        if (zp) memcpy(z, zp, sizeof *z * (size_t)nq);
        t->nq = nq;
        t->scale = s;
        t->zero_point = z;
        t->qdim = qdim;
    }
    if (!t->name) return -1;
    e->t_param[e->nt] = param;
    return e->nt++;
}

static qf_status need(int ti) { return ti < 0 ? qf_error(QF_ERR_NOMEM, "tflite export: out of memory") : QF_OK; }

/* A per-tensor int8 quantization: scale (f32 scalar) and zero point (i8 scalar). */
static bool qp_from(const qf_value *s, const qf_value *z, tfl_qp *qp)
{
    if (!s || !z || !qf_value_is_const(s) || !qf_value_is_const(z) || s->type.dtype != QF_DTYPE_F32 ||
        z->type.dtype != QF_DTYPE_I8 || qf_tensor_numel(&s->type) != 1 || qf_tensor_numel(&z->type) != 1)
        return false;
    qp->scale = *(const float *)s->type.data;
    qp->zp = *(const int8_t *)z->type.data;
    return qp->scale > 0.0f && isfinite(qp->scale);
}

/* The input slots (scale, zero point) of the output qparams of a lowered node. */
static int out_qp_slot(qf_op op)
{
    switch (op) {
    case QF_OP_QLINEAR_CONV:
    case QF_OP_QLINEAR_MATMUL:
    case QF_OP_QADD:
    case QF_OP_QMUL:
    case QF_OP_QCONV_TRANSPOSE: return 6;
    case QF_OP_QCONCAT: return 0;
    case QF_OP_QAVG_POOL:
    case QF_OP_QMEAN: return 3;
    default: return -1;
    }
}

/* An op that moves int8 values without changing their qparams. */
static bool passes_qp(qf_op op)
{
    return op == QF_OP_MAX_POOL || op == QF_OP_RESHAPE || op == QF_OP_FLATTEN || op == QF_OP_TRANSPOSE ||
           op == QF_OP_SQUEEZE || op == QF_OP_UNSQUEEZE;
}

/* The qparams of an int8 activation: from its producer (a Q, a lowered node,
 * an int8 shape op or max pool: its input's), else from a reader (a DQ, a
 * lowered node: the scale and zero point after the operand, an int8 shape
 * op: its output's). */
static bool act_qp_depth(const qf_value *v, tfl_qp *qp, int depth, bool up)
{
    if (!v || depth > 64) return false;
    const qf_node *p = v->producer;
    if (p && p->op == QF_OP_QUANTIZE && p->ninputs == 3) return qp_from(p->inputs[1], p->inputs[2], qp);
    int slot = p ? out_qp_slot(p->op) : -1;
    if (slot >= 0) return qp_from(p->inputs[slot], p->inputs[slot + 1], qp);
    for (int i = 0; i < v->nuses; i++) {
        const qf_node *u = v->uses[i].node;
        const int k = v->uses[i].slot;
        if (u->op == QF_OP_DEQUANTIZE && u->ninputs == 3 && k == 0) return qp_from(u->inputs[1], u->inputs[2], qp);
        /* a lowered node reads each int8 operand followed by its scale and zero point */
        if (out_qp_slot(u->op) >= 0 && k + 2 < u->ninputs && qp_from(u->inputs[k + 1], u->inputs[k + 2], qp))
            return true;
    }
    for (int i = 0; i < v->nuses; i++) {
        const qf_node *u = v->uses[i].node;
        if (v->uses[i].slot == 0 && passes_qp(u->op) && u->outputs[0]->type.dtype == QF_DTYPE_I8 &&
            act_qp_depth(u->outputs[0], qp, depth + 1, false))
            return true;
    }
    if (up && p && p->ninputs >= 1 && passes_qp(p->op)) return act_qp_depth(p->inputs[0], qp, depth + 1, true);
    return false;
}

static bool act_qp(const qf_value *v, tfl_qp *qp) { return act_qp_depth(v, qp, 0, true); }

/* The tensor of an int8 (or, at the boundaries, float) activation value. */
static qf_status act_tensor(ex *e, const qf_node *n, const qf_value *v, int *out)
{
    if (e->vmap[v->id]) {
        *out = e->vmap[v->id] - 1;
        return QF_OK;
    }
    int32_t shape[QF_MAX_DIMS];
    phys_shape(&v->type, shape);
    int ti;
    if (v->type.dtype == QF_DTYPE_F32) {
        ti = add_tensor(e, v->name, QF_TFL_FLOAT32, v->type.ndim, shape, NULL, 0, 0, NULL, NULL, 0, false);
    } else if (v->type.dtype == QF_DTYPE_I8) {
        tfl_qp qp;
        if (!act_qp(v, &qp)) return refuse(e, n, "int8 tensor '%s' has no per-tensor scale and zero point", v->name);
        int64_t zp = qp.zp;
        ti = add_tensor(e, v->name, QF_TFL_INT8, v->type.ndim, shape, NULL, 0, 1, &qp.scale, &zp, 0, false);
    } else {
        return refuse(e, n, "tensor '%s' is %s, not int8", v->name, qf_dtype_name(v->type.dtype));
    }
    QF_TRY(need(ti));
    e->vmap[v->id] = ti + 1;
    *out = ti;
    return QF_OK;
}

/* An int32 constant [n] (shape, axes, permutation) or [n/2, 2] (paddings). */
static int i32_tensor(ex *e, const char *owner, const char *what, const int32_t *v, int n, bool pairs)
{
    char name[512];
    snprintf(name, sizeof name, "%.440s_%.60s", owner, what);
    int32_t shape[2] = {pairs ? n / 2 : n, 2};
    return add_tensor(e, name, QF_TFL_INT32, pairs ? 2 : 1, shape, v, sizeof *v * (size_t)n, 0, NULL, NULL, 0, false);
}

/* ---- operators ---------------------------------------------------------------- */

static const char *tfl_op_name(int code)
{
    switch (code) {
    case QF_TFL_ADD: return "ADD";
    case QF_TFL_AVERAGE_POOL_2D: return "AVERAGE_POOL_2D";
    case QF_TFL_CONCATENATION: return "CONCATENATION";
    case QF_TFL_CONV_2D: return "CONV_2D";
    case QF_TFL_DEPTHWISE_CONV_2D: return "DEPTHWISE_CONV_2D";
    case QF_TFL_DEQUANTIZE: return "DEQUANTIZE";
    case QF_TFL_FULLY_CONNECTED: return "FULLY_CONNECTED";
    case QF_TFL_LOGISTIC: return "LOGISTIC";
    case QF_TFL_MAX_POOL_2D: return "MAX_POOL_2D";
    case QF_TFL_MUL: return "MUL";
    case QF_TFL_RESHAPE: return "RESHAPE";
    case QF_TFL_SOFTMAX: return "SOFTMAX";
    case QF_TFL_TANH: return "TANH";
    case QF_TFL_PAD: return "PAD";
    case QF_TFL_TRANSPOSE: return "TRANSPOSE";
    case QF_TFL_MEAN: return "MEAN";
    case QF_TFL_SUB: return "SUB";
    case QF_TFL_TRANSPOSE_CONV: return "TRANSPOSE_CONV";
    case QF_TFL_QUANTIZE: return "QUANTIZE";
    case QF_TFL_HARD_SWISH: return "HARD_SWISH";
    default: return "?";
    }
}

/* Append an operator; *op gets it to fill the options. */
static qf_status add_op(ex *e, const qf_node *n, int code, const int32_t *in, int nin, const int32_t *out, int nout,
                        int64_t macs, qf_tfl_op **op)
{
    int c = e->cops;
    QF_TRY(grow((void **)&e->ops, &c, e->nops + 1, sizeof *e->ops));
    QF_TRY(grow((void **)&e->info, &e->cops, e->nops + 1, sizeof *e->info));
    int32_t *io = ex_alloc(e, sizeof *io * (size_t)(nin + nout));
    if (!io) return QF_ERR_NOMEM;
    memcpy(io, in, sizeof *io * (size_t)nin);
    memcpy(io + nin, out, sizeof *io * (size_t)nout);
    qf_tfl_op *p = &e->ops[e->nops];
    memset(p, 0, sizeof *p);
    p->code = code;
    p->inputs = io;
    p->ninputs = nin;
    p->outputs = io + nin;
    p->noutputs = nout;
    p->dilation_w = p->dilation_h = 1;
    p->stride_w = p->stride_h = 1;
    p->beta = 1.0f;
    qf_tflite_op_info *f = &e->info[e->nops];
    memset(f, 0, sizeof *f);
    f->op = tfl_op_name(code);
    f->node = ex_strdup(e, node_name(e, n)); /* the result outlives the private graph */
    if (!f->node) return QF_ERR_NOMEM;
    f->output = nout ? e->t[out[0]].name : "";
    f->macs = macs;
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0) continue;
        const qf_tfl_tensor *t = &e->t[in[i]];
        if (t->buffer) {
            if (e->t_param[in[i]]) f->weight_bytes += (int64_t)e->b[t->buffer - 1].size;
            continue;
        }
        if (f->ninputs < QF_TFLITE_MAX_IO) {
            f->in_ndim[f->ninputs] = t->ndim;
            memcpy(f->in_shape[f->ninputs], t->shape, sizeof(int32_t) * (size_t)t->ndim);
        }
        f->ninputs++;
    }
    for (int i = 0; i < nout; i++) {
        const qf_tfl_tensor *t = &e->t[out[i]];
        if (f->noutputs < QF_TFLITE_MAX_IO) {
            f->out_ndim[f->noutputs] = t->ndim;
            memcpy(f->out_shape[f->noutputs], t->shape, sizeof(int32_t) * (size_t)t->ndim);
        }
        f->noutputs++;
    }
    e->nops++;
    *op = p;
    return QF_OK;
}

/* The fused activation of a lowered node's clamp [lo, hi] in its output's
 * integers (TFLite's CalculateActivationRangeQuantized); -1: none fits. */
static int fused_act(const qf_node *k, tfl_qp y)
{
    int count = 0;
    const int64_t *c = qf_node_attr_ints(k, "qfold_clamp", &count);
    if (!c || count != 2 || (c[0] <= -128 && c[1] >= 127)) return QF_TFL_ACT_NONE;
    int64_t relu_lo = y.zp > -128 ? y.zp : -128;
    if (c[0] != relu_lo) return -1;
    if (c[1] >= 127) return QF_TFL_ACT_RELU;
    double q6 = y.zp + round(6.0 / y.scale);
    int64_t hi6 = q6 < 127 ? (int64_t)q6 : 127;
    return c[1] == hi6 ? QF_TFL_ACT_RELU6 : -1;
}

/* Spatial geometry of a conv / pool node on a rank-4 input x, output y:
 * kernel k, strides, dilations, pads (ONNX order: begins, ends). */
typedef struct geom {
    int64_t k[2], s[2], d[2], pb[2], pe[2], in[2], out[2];
} geom;

static qf_status get_geom(ex *e, const qf_node *n, const qf_tensor *x, const qf_tensor *y, const int64_t *kernel,
                          geom *g)
{
    int cnt;
    const int64_t *a;
    for (int i = 0; i < 2; i++) {
        g->k[i] = kernel[i];
        g->s[i] = g->d[i] = 1;
        g->pb[i] = g->pe[i] = 0;
        g->in[i] = x->dims[2 + i];
        g->out[i] = y->dims[2 + i];
        if (g->in[i] <= 0 || g->out[i] <= 0) return refuse(e, n, "spatial size unknown");
    }
    if ((a = qf_node_attr_ints(n, "strides", &cnt)) && cnt == 2) memcpy(g->s, a, sizeof g->s);
    if ((a = qf_node_attr_ints(n, "dilations", &cnt)) && cnt == 2) memcpy(g->d, a, sizeof g->d);
    const char *ap = qf_node_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0) {
        /* SAME_UPPER / SAME_LOWER: the pads they imply */
        for (int i = 0; i < 2; i++) {
            int64_t total = (g->out[i] - 1) * g->s[i] + (g->k[i] - 1) * g->d[i] + 1 - g->in[i];
            if (total < 0) total = 0;
            g->pb[i] = strcmp(ap, "SAME_LOWER") == 0 ? total - total / 2 : total / 2;
            g->pe[i] = total - g->pb[i];
        }
    } else if ((a = qf_node_attr_ints(n, "pads", &cnt)) && cnt == 4) {
        g->pb[0] = a[0];
        g->pb[1] = a[1];
        g->pe[0] = a[2];
        g->pe[1] = a[3];
    }
    return QF_OK;
}

/* TFLite's padding for a conv / pool geometry: SAME, VALID, or -1 (explicit pads). */
static int tfl_padding(const geom *g)
{
    bool valid = true, same = true;
    for (int i = 0; i < 2; i++) {
        int64_t ek = (g->k[i] - 1) * g->d[i] + 1;
        if (g->pb[i] || g->pe[i] || g->out[i] != (g->in[i] - ek) / g->s[i] + 1) valid = false;
        int64_t out = (g->in[i] + g->s[i] - 1) / g->s[i];
        int64_t total = (out - 1) * g->s[i] + ek - g->in[i];
        if (total < 0) total = 0;
        if (g->out[i] != out || g->pb[i] != total / 2 || g->pe[i] != total - total / 2) same = false;
    }
    return valid ? QF_TFL_PAD_VALID : same ? QF_TFL_PAD_SAME : -1;
}

/* Pads SAME cannot express (PyTorch's stride-2 padding 1: one row before,
 * SAME puts it after) as SAME with a larger kernel: the kernel embedded at
 * offset off[i] in k' >= k taps of zeros, so that SAME's pads put the first
 * tap where ONNX's do; the taps SAME adds read zeros (padding) or get weight
 * 0. No PAD op: ArmNN's TfLite parser (20.08) pads an int8 tensor with 0, not
 * with its zero point. Undilated only; g->k gets k'. */
static bool widen_kernel(geom *g, int64_t off[2])
{
    int64_t kk[2];
    for (int i = 0; i < 2; i++) {
        if (g->d[i] != 1 || g->out[i] != (g->in[i] + g->s[i] - 1) / g->s[i]) return false;
        bool ok = false;
        for (int64_t k = g->k[i]; k <= g->k[i] + 2 * (g->pb[i] + g->s[i]) && !ok; k++) {
            int64_t total = (g->out[i] - 1) * g->s[i] + k - g->in[i];
            if (total < 0) total = 0;
            int64_t a = total / 2 - g->pb[i];
            if (a >= 0 && a + g->k[i] <= k) {
                kk[i] = k;
                off[i] = a;
                ok = true;
            }
        }
        if (!ok) return false;
    }
    g->k[0] = kk[0];
    g->k[1] = kk[1];
    return true;
}

/* A PAD of tensor xi (NHWC, int8) by g's pads: the padded tensor's index.
 * TFLite's int8 PAD fills with the zero point (the real value 0). */
static qf_status add_pad(ex *e, const qf_node *n, int xi, const geom *g, int *out)
{
    const qf_tfl_tensor x = e->t[xi];
    int32_t shape[4] = {x.shape[0], x.shape[1] + (int32_t)(g->pb[0] + g->pe[0]),
                        x.shape[2] + (int32_t)(g->pb[1] + g->pe[1]), x.shape[3]};
    char name[512];
    snprintf(name, sizeof name, "%.480s_padded", x.name);
    int pi = add_tensor(e, name, QF_TFL_INT8, 4, shape, NULL, 0, x.nq, x.scale, x.zero_point, 0, false);
    QF_TRY(need(pi));
    int32_t pads[8] = {0, 0, (int32_t)g->pb[0], (int32_t)g->pe[0], (int32_t)g->pb[1], (int32_t)g->pe[1], 0, 0};
    int ki = i32_tensor(e, name, "paddings", pads, 8, true);
    QF_TRY(need(ki));
    qf_tfl_op *op;
    int32_t in[2] = {xi, ki};
    QF_TRY(add_op(e, n, QF_TFL_PAD, in, 2, &pi, 1, 0, &op));
    *out = pi;
    return QF_OK;
}

/* The int32 bias of a conv-like node [m] at scale s_x * s_w[c] (zeros
 * when the node has none). */
static int bias_tensor(ex *e, const qf_node *n, const qf_value *bq, int64_t m, float sx, const float *sw, int64_t nw)
{
    float *sb = ex_alloc(e, sizeof *sb * (size_t)m);
    int64_t *zb = ex_alloc(e, sizeof *zb * (size_t)m);
    if (!sb || !zb) return -1;
    for (int64_t c = 0; c < m; c++) sb[c] = sx * sw[nw == 1 ? 0 : c];
    char name[512];
    snprintf(name, sizeof name, "%.480s_bias", node_name(e, n));
    int32_t shape[1] = {(int32_t)m};
    const void *data = bq ? bq->type.data : NULL;
    int32_t *zeros = NULL;
    if (!data) {
        zeros = ex_alloc(e, sizeof *zeros * (size_t)m);
        if (!zeros) return -1;
        data = zeros;
    }
    /* one scale per weight scale: a per-tensor weight's bias has one (ArmNN checks) */
    return add_tensor(e, bq ? bq->name : name, QF_TFL_INT32, 1, shape, data, sizeof(int32_t) * (size_t)m,
                      nw == 1 ? 1 : (int)m, sb, zb, 0, true);
}

/* Weight scales: per tensor, or per channel (all equal counts as per tensor
 * when `collapse`). Zero points must be 0 (symmetric). */
static qf_status weight_qp(ex *e, const qf_node *n, const qf_value *s, const qf_value *z, const float **sw, int64_t *nw)
{
    *sw = s->type.data;
    *nw = qf_tensor_numel(&s->type);
    if (s->type.dtype != QF_DTYPE_F32 || z->type.dtype != QF_DTYPE_I8 || qf_tensor_numel(&z->type) != *nw)
        return refuse(e, n, "weight qparams are not float scales with int8 zero points");
    const int8_t *zp = z->type.data;
    for (int64_t i = 0; i < *nw; i++)
        if (zp[i] != 0) return refuse(e, n, "weight zero point %d: TFLite's int8 weights are symmetric", zp[i]);
    return QF_OK;
}

/* A weight tensor, data already in TFLite's layout. */
static int weight_tensor(ex *e, const qf_value *w, int ndim, const int32_t *shape, const void *data, size_t size,
                         const float *sw, int64_t nw, int qdim)
{
    int64_t *zp = ex_alloc(e, sizeof *zp * (size_t)nw);
    if (!zp) return -1;
    return add_tensor(e, w->name, QF_TFL_INT8, ndim, shape, data, size, (int)nw, sw, zp, qdim, true);
}

/* A fully connected layer: x [N, K] int8 -> y [N, M], weight [M, K] int8 per
 * tensor (wdata, row-major), bias [M]. */
static qf_status emit_fc(ex *e, const qf_node *n, const qf_value *x, const qf_value *y, const qf_value *w,
                         const int8_t *wdata, int64_t M, int64_t K, const qf_value *ws, const qf_value *wz,
                         const qf_value *bq, tfl_qp xq, tfl_qp yq, int act)
{
    const float *sw;
    int64_t nw;
    QF_TRY(weight_qp(e, n, ws, wz, &sw, &nw));
    for (int64_t c = 1; c < nw; c++)
        if (sw[c] != sw[0])
            return refuse(e, n, "per-channel Linear weights: ArmNN's TfLite parser rejects a per-channel "
                                "FULLY_CONNECTED; quantize its weights per tensor (the neutron target does)");
    if (x->type.ndim != 2) return refuse(e, n, "a fully connected layer on a rank-%d input", x->type.ndim);
    if (act < 0) return refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    int32_t wshape[2] = {(int32_t)M, (int32_t)K};
    int wi = weight_tensor(e, w, 2, wshape, wdata, (size_t)(M * K), sw, 1, 0);
    QF_TRY(need(wi));
    int bi = bias_tensor(e, n, bq, M, xq.scale, sw, 1);
    QF_TRY(need(bi));
    (void)yq;
    int64_t N = x->type.dims[0] > 0 ? x->type.dims[0] : 1;
    qf_tfl_op *op;
    int32_t in[3] = {xi, wi, bi};
    QF_TRY(add_op(e, n, QF_TFL_FULLY_CONNECTED, in, 3, &yi, 1, N * M * K, &op));
    op->activation = act;
    return QF_OK;
}

/* The lowered Gemm form: Reshape([N, K] -> [N, K, 1, 1]) -> QLinearConv 1x1
 * -> Reshape([N, M]); NULL unless ql heads it (the second reshape returned). */
static const qf_node *fc_tail(const qf_node *ql)
{
    if (ql->op != QF_OP_QLINEAR_CONV || qf_node_attr(ql, "kernel_shape")) return NULL;
    const qf_node *r1 = ql->inputs[0]->producer;
    const qf_value *y = ql->outputs[0];
    if (!r1 || r1->op != QF_OP_RESHAPE || r1->inputs[0]->type.ndim != 2 || r1->outputs[0]->nuses != 1) return NULL;
    if (y->nuses != 1 || y->is_output || y->uses[0].node->op != QF_OP_RESHAPE) return NULL;
    const qf_node *r2 = y->uses[0].node;
    return r2->outputs[0]->type.ndim == 2 ? r2 : NULL;
}

static qf_status emit_qconv(ex *e, qf_node *n)
{
    tfl_qp xq, yq;
    if (!qp_from(n->inputs[1], n->inputs[2], &xq) || !qp_from(n->inputs[6], n->inputs[7], &yq))
        return refuse(e, n, "activation qparams are not per-tensor int8");
    const qf_value *w = n->inputs[3], *bq = n->ninputs > 8 ? n->inputs[8] : NULL;
    const qf_tensor *wt = &w->type;
    int act = fused_act(n, yq);
    const qf_node *r2 = fc_tail(n);
    if (r2) {
        /* a Linear layer: FULLY_CONNECTED from the first reshape's input to the second's output */
        e->skip[r2->id] = true;
        return emit_fc(e, n, n->inputs[0]->producer->inputs[0], r2->outputs[0], w, wt->data, wt->dims[0], wt->dims[1],
                       n->inputs[4], n->inputs[5], bq, xq, yq, act);
    }
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    if (x->type.ndim != 4 || wt->ndim != 4) return refuse(e, n, "only 2-D convolutions (rank-4 tensors) have a TFLite form");
    if (act < 0) return refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    const float *sw;
    int64_t nw;
    QF_TRY(weight_qp(e, n, n->inputs[4], n->inputs[5], &sw, &nw));
    int64_t group = qf_node_attr_int(n, "group", 1), M = wt->dims[0], Cg = wt->dims[1], kh = wt->dims[2],
            kw = wt->dims[3], C = x->type.dims[1];
    bool dw = group > 1 && group == C && Cg == 1 && M % C == 0;
    if (group != 1 && !dw)
        return refuse(e, n, "group %lld convolution: TFLite has CONV_2D (group 1) and DEPTHWISE_CONV_2D "
                            "(group = channels) only", (long long)group);
    geom g;
    int64_t kern[2] = {kh, kw};
    QF_TRY(get_geom(e, n, &x->type, &y->type, kern, &g));
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    int padding = tfl_padding(&g);
    int64_t off[2] = {0, 0};
    if (padding < 0 && widen_kernel(&g, off)) {
        padding = QF_TFL_PAD_SAME;
        kh = g.k[0];
        kw = g.k[1];
    } else if (padding < 0) {
        QF_TRY(add_pad(e, n, xi, &g, &xi));
        padding = QF_TFL_PAD_VALID;
    }
    /* Weights (embedded in the widened kernel, if any): OIHW -> OHWI
     * (CONV_2D, per channel on 0) or [M, 1, kh, kw] -> [1, kh, kw, M]
     * (DEPTHWISE_CONV_2D, per channel on 3). */
    const int64_t wdims[4] = {M, Cg, kh, kw};
    const int8_t *wsrc = wt->data;
    if (kh != wt->dims[2] || kw != wt->dims[3]) {
        int8_t *big = ex_alloc(e, (size_t)(M * Cg * kh * kw));
        if (!big) return QF_ERR_NOMEM;
        for (int64_t oc = 0; oc < M * Cg; oc++)
            for (int64_t i = 0; i < wt->dims[2]; i++)
                memcpy(big + (oc * kh + i + off[0]) * kw + off[1], wsrc + (oc * wt->dims[2] + i) * wt->dims[3],
                       (size_t)wt->dims[3]);
        wsrc = big;
    }
    int8_t *wd = ex_alloc(e, (size_t)(M * Cg * kh * kw));
    if (!wd) return QF_ERR_NOMEM;
    static const int ohwi[4] = {0, 2, 3, 1}, ihwo[4] = {1, 2, 3, 0};
    qf_tfl_permute4(wsrc, wd, wdims, dw ? ihwo : ohwi, 1);
    int32_t wshape[4];
    if (dw) {
        wshape[0] = 1, wshape[1] = (int32_t)kh, wshape[2] = (int32_t)kw, wshape[3] = (int32_t)M;
    } else {
        wshape[0] = (int32_t)M, wshape[1] = (int32_t)kh, wshape[2] = (int32_t)kw, wshape[3] = (int32_t)Cg;
    }
    int wi = weight_tensor(e, w, 4, wshape, wd, (size_t)(M * Cg * kh * kw), sw, nw, dw ? 3 : 0);
    QF_TRY(need(wi));
    int bi = bias_tensor(e, n, bq, M, xq.scale, sw, nw);
    QF_TRY(need(bi));
    int64_t N = x->type.dims[0] > 0 ? x->type.dims[0] : 1;
    int64_t macs = N * g.out[0] * g.out[1] * M * kh * kw * Cg;
    qf_tfl_op *op;
    int32_t in[3] = {xi, wi, bi};
    QF_TRY(add_op(e, n, dw ? QF_TFL_DEPTHWISE_CONV_2D : QF_TFL_CONV_2D, in, 3, &yi, 1, macs, &op));
    op->padding = padding;
    op->stride_h = (int)g.s[0];
    op->stride_w = (int)g.s[1];
    op->dilation_h = (int)g.d[0];
    op->dilation_w = (int)g.d[1];
    op->activation = act;
    op->depth_multiplier = dw ? (int)(M / C) : 0;
    return QF_OK;
}

/* A fully connected layer from an int8 MatMul by a constant [K, M] (per
 * tensor): the weight transposed to [M, K]. */
static qf_status emit_qmatmul(ex *e, qf_node *n)
{
    tfl_qp xq, yq;
    if (!qp_from(n->inputs[1], n->inputs[2], &xq) || !qp_from(n->inputs[6], n->inputs[7], &yq))
        return refuse(e, n, "activation qparams are not per-tensor int8");
    const qf_value *b = n->inputs[3];
    if (!qf_value_is_const(b))
        return refuse(e, n, "a MatMul of two activations (BATCH_MATMUL) is not in the exported op set");
    const qf_tensor *bt = &b->type;
    int64_t K = bt->dims[0], M = bt->dims[1];
    int8_t *wd = ex_alloc(e, (size_t)(K * M));
    if (!wd) return QF_ERR_NOMEM;
    const int8_t *src = bt->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) wd[m * K + k] = src[k * M + m];
    return emit_fc(e, n, n->inputs[0], n->outputs[0], b, wd, M, K, n->inputs[4], n->inputs[5], NULL, xq, yq,
                   fused_act(n, yq));
}

/* MAX_POOL_2D (the int8 MaxPool) and AVERAGE_POOL_2D (QAVG_POOL). */
static qf_status emit_pool(ex *e, qf_node *n)
{
    const bool avg = n->op == QF_OP_QAVG_POOL;
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    if (x->type.ndim != 4) return refuse(e, n, "only 2-D pooling (rank-4 tensors) has a TFLite form");
    int cnt;
    const int64_t *ks = qf_node_attr_ints(n, "kernel_shape", &cnt);
    if (!ks || cnt != 2) return refuse(e, n, "kernel_shape is not 2-D");
    const int64_t *dl = qf_node_attr_ints(n, "dilations", &cnt);
    for (int i = 0; dl && i < cnt; i++)
        if (dl[i] != 1) return refuse(e, n, "dilated pooling has no TFLite form");
    geom g;
    QF_TRY(get_geom(e, n, &x->type, &y->type, ks, &g));
    int act = QF_TFL_ACT_NONE;
    if (avg) {
        tfl_qp yq;
        if (!qp_from(n->inputs[3], n->inputs[4], &yq)) return refuse(e, n, "output qparams are not per-tensor int8");
        act = fused_act(n, yq);
        if (act < 0) return refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    }
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    int padding = tfl_padding(&g);
    if (padding < 0) {
        /* explicit pads: an average that counts them is a PAD (zero point: the
         * real 0) + VALID pool; TFLite's SAME average excludes them */
        if (!avg || qf_node_attr_int(n, "count_include_pad", 0) == 0)
            return refuse(e, n, "pads [%lld, %lld, %lld, %lld] are neither SAME nor VALID for TFLite%s",
                          (long long)g.pb[0], (long long)g.pb[1], (long long)g.pe[0], (long long)g.pe[1],
                          avg ? " (and the average excludes them)" : "");
        QF_TRY(add_pad(e, n, xi, &g, &xi));
        padding = QF_TFL_PAD_VALID;
    } else if (avg && padding == QF_TFL_PAD_SAME && (g.pb[0] || g.pb[1] || g.pe[0] || g.pe[1]) &&
               qf_node_attr_int(n, "count_include_pad", 0) != 0) {
        return refuse(e, n, "count_include_pad = 1 with SAME pads (TFLite's average excludes the padding)");
    }
    qf_tfl_op *op;
    QF_TRY(add_op(e, n, avg ? QF_TFL_AVERAGE_POOL_2D : QF_TFL_MAX_POOL_2D, &xi, 1, &yi, 1, 0, &op));
    op->padding = padding;
    op->stride_h = (int)g.s[0];
    op->stride_w = (int)g.s[1];
    op->filter_h = (int)g.k[0];
    op->filter_w = (int)g.k[1];
    op->activation = act;
    return QF_OK;
}

/* MEAN over the lowered node's axes (non-negative), mapped to NHWC. */
static qf_status emit_qmean(ex *e, qf_node *n)
{
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    int cnt = 0;
    const int64_t *axes = qf_node_attr_ints(n, "axes", &cnt);
    const int r = x->type.ndim;
    bool red[QF_MAX_DIMS] = {false};
    for (int i = 0; i < cnt; i++) red[qf_tfl_phys_axis(r, (int)axes[i])] = true;
    const bool keep = qf_node_attr_int(n, "keepdims", 1) != 0;
    if (!keep && r == 4) {
        /* the kept axes must come out in the same order in both layouts */
        int last = -1;
        for (int i = 0; i < 4; i++)
            if (!red[i]) {
                if (nhwc_from[i] < last) return refuse(e, n, "a mean without keepdims that reorders NHWC axes");
                last = nhwc_from[i];
            }
    }
    tfl_qp yq;
    if (!qp_from(n->inputs[3], n->inputs[4], &yq)) return refuse(e, n, "output qparams are not per-tensor int8");
    if (fused_act(n, yq) != QF_TFL_ACT_NONE) return refuse(e, n, "TFLite's MEAN has no fused activation");
    int32_t pa[QF_MAX_DIMS];
    int na = 0;
    for (int i = 0; i < r; i++)
        if (red[i]) pa[na++] = i;
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    int ai = i32_tensor(e, node_name(e, n), "axes", pa, na, false);
    QF_TRY(need(ai));
    qf_tfl_op *op;
    int32_t in[2] = {xi, ai};
    QF_TRY(add_op(e, n, QF_TFL_MEAN, in, 2, &yi, 1, 0, &op));
    op->keep_dims = keep;
    return QF_OK;
}

/* An operand of an elementwise op of output rank `rank`: an activation's
 * tensor, or a constant int8 (qparams qp) broadcast-expanded to the rank and
 * permuted to NHWC. */
static qf_status operand(ex *e, const qf_node *n, const qf_value *v, tfl_qp qp, int rank, int *out)
{
    if (!qf_value_is_const(v)) {
        if (v->type.ndim != rank && rank == 4)
            return refuse(e, n, "operand '%s' of rank %d broadcast against rank 4 (NHWC) is not exported", v->name,
                          v->type.ndim);
        return act_tensor(e, n, v, out);
    }
    if (v->type.dtype != QF_DTYPE_I8) return refuse(e, n, "constant '%s' is not int8", v->name);
    if (e->vmap[v->id]) {
        *out = e->vmap[v->id] - 1;
        return QF_OK;
    }
    int64_t d[QF_MAX_DIMS];
    int k = rank - v->type.ndim;
    if (k < 0) return refuse(e, n, "constant '%s' has a higher rank than the output", v->name);
    for (int i = 0; i < rank; i++) d[i] = i < k ? 1 : v->type.dims[i - k];
    int64_t numel = qf_tensor_numel(&v->type);
    int8_t *data = ex_alloc(e, (size_t)numel);
    if (!data) return QF_ERR_NOMEM;
    int32_t shape[QF_MAX_DIMS];
    if (rank == 4) {
        qf_tfl_permute4(v->type.data, data, d, nhwc_from, 1);
        for (int i = 0; i < 4; i++) shape[i] = (int32_t)d[nhwc_from[i]];
    } else {
        memcpy(data, v->type.data, (size_t)numel);
        for (int i = 0; i < rank; i++) shape[i] = (int32_t)d[i];
    }
    int64_t zp = qp.zp;
    int ti = add_tensor(e, v->name, QF_TFL_INT8, rank, shape, data, (size_t)numel, 1, &qp.scale, &zp, 0, true);
    QF_TRY(need(ti));
    e->vmap[v->id] = ti + 1;
    *out = ti;
    return QF_OK;
}

/* ADD / MUL from the lowered QADD / QMUL. */
static qf_status emit_qbinary(ex *e, qf_node *n)
{
    tfl_qp aq, bq, yq;
    if (!qp_from(n->inputs[1], n->inputs[2], &aq) || !qp_from(n->inputs[4], n->inputs[5], &bq) ||
        !qp_from(n->inputs[6], n->inputs[7], &yq))
        return refuse(e, n, "qparams are not per-tensor int8");
    int act = fused_act(n, yq);
    if (act < 0) return refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    const int rank = n->outputs[0]->type.ndim;
    int ai, bi, yi;
    QF_TRY(operand(e, n, n->inputs[0], aq, rank, &ai));
    QF_TRY(operand(e, n, n->inputs[3], bq, rank, &bi));
    QF_TRY(act_tensor(e, n, n->outputs[0], &yi));
    qf_tfl_op *op;
    int32_t in[2] = {ai, bi};
    QF_TRY(add_op(e, n, n->op == QF_OP_QADD ? QF_TFL_ADD : QF_TFL_MUL, in, 2, &yi, 1, 0, &op));
    op->activation = act;
    return QF_OK;
}

/* CONCATENATION from the lowered QCONCAT (inputs: s_y, zp_y, then x, s, zp each). */
static qf_status emit_qconcat(ex *e, qf_node *n)
{
    const qf_value *y = n->outputs[0];
    const int rank = y->type.ndim, k = (n->ninputs - 2) / 3;
    int64_t axis = qf_node_attr_int(n, "axis", 0);
    if (axis < 0) axis += rank;
    int32_t *in = ex_alloc(e, sizeof *in * (size_t)(k > 0 ? k : 1));
    if (!in) return QF_ERR_NOMEM;
    for (int i = 0; i < k; i++) {
        const qf_value *x = n->inputs[2 + 3 * i];
        tfl_qp xq;
        if (!qp_from(n->inputs[3 + 3 * i], n->inputs[4 + 3 * i], &xq))
            return refuse(e, n, "input qparams are not per-tensor int8");
        int xi;
        QF_TRY(operand(e, n, x, xq, rank, &xi));
        in[i] = xi;
    }
    int yi;
    QF_TRY(act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    QF_TRY(add_op(e, n, QF_TFL_CONCATENATION, in, k, &yi, 1, 0, &op));
    op->axis = qf_tfl_phys_axis(rank, (int)axis);
    op->activation = QF_TFL_ACT_NONE;
    return QF_OK;
}

/* TRANSPOSE_CONV from the lowered QCONV_TRANSPOSE: weights [C, M, kh, kw]
 * -> [M, kh, kw, C] (OHWI, per channel on 0), output_shape an input. TFLite
 * crops total/2 at the start (SAME) or nothing (VALID); other pads are refused. */
static qf_status emit_qconv_transpose(ex *e, qf_node *n)
{
    tfl_qp xq, yq;
    if (!qp_from(n->inputs[1], n->inputs[2], &xq) || !qp_from(n->inputs[6], n->inputs[7], &yq))
        return refuse(e, n, "activation qparams are not per-tensor int8");
    const qf_value *x = n->inputs[0], *y = n->outputs[0], *w = n->inputs[3], *bq = n->ninputs > 8 ? n->inputs[8] : NULL;
    const qf_tensor *wt = &w->type;
    if (x->type.ndim != 4 || wt->ndim != 4) return refuse(e, n, "only 2-D transposed convolutions have a TFLite form");
    if (qf_node_attr_int(n, "group", 1) != 1) return refuse(e, n, "a grouped ConvTranspose has no TFLite form");
    int cnt;
    const int64_t *a = qf_node_attr_ints(n, "dilations", &cnt);
    for (int i = 0; a && i < cnt; i++)
        if (a[i] != 1) return refuse(e, n, "a dilated ConvTranspose has no TFLite form");
    int act = fused_act(n, yq);
    if (act < 0) return refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    const float *sw;
    int64_t nw;
    QF_TRY(weight_qp(e, n, n->inputs[4], n->inputs[5], &sw, &nw));
    int64_t C = wt->dims[0], M = wt->dims[1], k[2] = {wt->dims[2], wt->dims[3]}, s[2] = {1, 1}, pb[2] = {0, 0};
    if ((a = qf_node_attr_ints(n, "strides", &cnt)) && cnt == 2) memcpy(s, a, sizeof s);
    if ((a = qf_node_attr_ints(n, "pads", &cnt)) && cnt == 4) pb[0] = a[0], pb[1] = a[1];
    if (strcmp(qf_node_attr_string(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
        return refuse(e, n, "auto_pad on a ConvTranspose is not exported");
    /* TFLite crops nothing (VALID) or, SAME, total/2 at the start where total
     * = (ceil(out/s) - 1) * s + k - out. Other crops (PyTorch's padding 1 with
     * output_padding 1) as SAME with the kernel embedded at offset off in k'
     * >= k taps (zeros elsewhere), so that SAME's crop lands where ONNX's does. */
    bool valid = true, same = true;
    int64_t kk[2] = {k[0], k[1]}, off[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        int64_t in = x->type.dims[2 + i], out = y->type.dims[2 + i];
        if (in <= 0 || out <= 0) return refuse(e, n, "spatial size unknown");
        if (pb[i] != 0 || out != (in - 1) * s[i] + k[i]) valid = false;
        if ((out + s[i] - 1) / s[i] != in) same = false;
        bool found = false;
        for (int64_t kw2 = k[i]; kw2 <= k[i] + 2 * (pb[i] + s[i]) && same && !found; kw2++) {
            int64_t total = (in - 1) * s[i] + kw2 - out;
            if (total < 0) total = 0;
            int64_t at = total / 2 - pb[i];
            if (at >= 0 && at + k[i] <= kw2) {
                kk[i] = kw2;
                off[i] = at;
                found = true;
            }
        }
        if (!found) same = false;
    }
    if (valid) kk[0] = k[0], kk[1] = k[1], off[0] = off[1] = 0;
    if (!valid && !same)
        return refuse(e, n, "pads / output_padding TFLite's TRANSPOSE_CONV cannot express (it crops total/2 "
                            "at the start, SAME, or nothing, VALID)");
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    const int64_t wn = C * M * kk[0] * kk[1], wdims[4] = {C, M, kk[0], kk[1]};
    const int8_t *wsrc = wt->data;
    if (kk[0] != k[0] || kk[1] != k[1]) {
        int8_t *big = ex_alloc(e, (size_t)wn);
        if (!big) return QF_ERR_NOMEM;
        for (int64_t cm = 0; cm < C * M; cm++)
            for (int64_t i = 0; i < k[0]; i++)
                memcpy(big + (cm * kk[0] + i + off[0]) * kk[1] + off[1], wsrc + (cm * k[0] + i) * k[1], (size_t)k[1]);
        wsrc = big;
        k[0] = kk[0];
        k[1] = kk[1];
    }
    int8_t *wd = ex_alloc(e, (size_t)wn);
    if (!wd) return QF_ERR_NOMEM;
    static const int mhwc[4] = {1, 2, 3, 0};
    qf_tfl_permute4(wsrc, wd, wdims, mhwc, 1);
    int32_t wshape[4] = {(int32_t)M, (int32_t)k[0], (int32_t)k[1], (int32_t)C};
    int wi = weight_tensor(e, w, 4, wshape, wd, (size_t)wn, sw, nw, 0);
    QF_TRY(need(wi));
    int oi = i32_tensor(e, node_name(e, n), "output_shape", e->t[yi].shape, 4, false);
    QF_TRY(need(oi));
    int64_t N = x->type.dims[0] > 0 ? x->type.dims[0] : 1;
    const int64_t macs = N * x->type.dims[2] * x->type.dims[3] * C * k[0] * k[1] * M;
    /* TFLite's TRANSPOSE_CONV takes a bias (4th input) and a fused activation
     * only in its later versions; ArmNN's TfLite parser (20.08) takes neither.
     * So the op is written with three inputs and no activation; a non-zero
     * bias or an activation follows as an ADD of the bias (int8, per tensor)
     * with the fused activation. The intermediate int8 tensor covers the
     * output's range minus the bias (and, under an activation, as much below
     * zero, so that what saturates there still ends at or below zero). */
    float bmin = 0.0f, bmax = 0.0f;
    const int32_t *bd = bq ? bq->type.data : NULL;
    for (int64_t c = 0; bd && c < M; c++) {
        float b = (float)bd[c] * xq.scale * sw[nw == 1 ? 0 : c];
        bmin = b < bmin ? b : bmin;
        bmax = b > bmax ? b : bmax;
    }
    qf_tfl_op *op;
    if (bmin == 0.0f && bmax == 0.0f && act == QF_TFL_ACT_NONE) {
        int32_t in[3] = {oi, wi, xi};
        QF_TRY(add_op(e, n, QF_TFL_TRANSPOSE_CONV, in, 3, &yi, 1, macs, &op));
        op->padding = valid ? QF_TFL_PAD_VALID : QF_TFL_PAD_SAME;
        op->stride_h = (int)s[0];
        op->stride_w = (int)s[1];
        return QF_OK;
    }
    const double yhi = (127.0 - yq.zp) * yq.scale, ylo = act == QF_TFL_ACT_NONE ? (-128.0 - yq.zp) * yq.scale : -yhi;
    const double lo = fmin(ylo - bmax, 0.0), hi = fmax(yhi - bmin, 0.0);
    float ts = (float)((hi - lo) / 255.0);
    int64_t tz = (int64_t)nearbyint(-128.0 - lo / ts);
    tz = tz < -128 ? -128 : tz > 127 ? 127 : tz;
    char name[512];
    snprintf(name, sizeof name, "%.480s_nobias", y->name);
    int ti = add_tensor(e, name, QF_TFL_INT8, 4, e->t[yi].shape, NULL, 0, 1, &ts, &tz, 0, false);
    QF_TRY(need(ti));
    int32_t in[3] = {oi, wi, xi};
    QF_TRY(add_op(e, n, QF_TFL_TRANSPOSE_CONV, in, 3, &ti, 1, macs, &op));
    op->padding = valid ? QF_TFL_PAD_VALID : QF_TFL_PAD_SAME;
    op->stride_h = (int)s[0];
    op->stride_w = (int)s[1];
    /* the bias as an int8 constant [1, 1, 1, M] */
    float bs = fmaxf(fabsf(bmin), fabsf(bmax)) / 127.0f;
    if (!(bs > 0.0f)) bs = 1.0f;
    int8_t *bv = ex_alloc(e, (size_t)M);
    if (!bv) return QF_ERR_NOMEM;
    for (int64_t c = 0; c < M; c++) {
        double q = nearbyint((double)bd[c] * xq.scale * sw[nw == 1 ? 0 : c] / bs);
        bv[c] = (int8_t)(q < -127 ? -127 : q > 127 ? 127 : q);
    }
    int64_t bz = 0;
    int32_t bshape[4] = {1, 1, 1, (int32_t)M};
    snprintf(name, sizeof name, "%.480s_bias_int8", node_name(e, n));
    int bi2 = add_tensor(e, name, QF_TFL_INT8, 4, bshape, bv, (size_t)M, 1, &bs, &bz, 0, true);
    QF_TRY(need(bi2));
    int32_t ain[2] = {ti, bi2};
    QF_TRY(add_op(e, n, QF_TFL_ADD, ain, 2, &yi, 1, 0, &op));
    op->activation = act;
    return QF_OK;
}

/* ---- DQ -> op -> [act] -> Q forms the lowering leaves -------------------------- */

/* Input i of a float op: the int8 value behind its DequantizeLinear (per
 * tensor), or an int8 value read directly (shape ops). */
static qf_status group_in(ex *e, const qf_node *n, int i, const qf_value **v, tfl_qp *qp)
{
    const qf_value *x = n->inputs[i];
    if (x->type.dtype == QF_DTYPE_I8) {
        *v = x;
        if (qf_value_is_const(x)) return refuse(e, n, "an int8 constant read without its DequantizeLinear");
        if (!act_qp(x, qp)) return refuse(e, n, "int8 input '%s' has no per-tensor qparams", x->name);
        return QF_OK;
    }
    const qf_node *dq = x->producer;
    if (!dq || dq->op != QF_OP_DEQUANTIZE || dq->ninputs != 3 || dq->inputs[0]->type.dtype != QF_DTYPE_I8 ||
        !qp_from(dq->inputs[1], dq->inputs[2], qp))
        return refuse(e, n, "input '%s' is not a per-tensor int8 DequantizeLinear (computed in float: TFLite's int8 "
                            "ops cannot express it)", x->name);
    *v = dq->inputs[0];
    return QF_OK;
}

/* The output of a float op: its int8 value (shape ops on int8), or the Q
 * that reads it (through a Relu / Relu6 / Clip when `act` is not NULL: the
 * fused activation in *act); the Q and the activation are consumed. */
static qf_status group_out(ex *e, const qf_node *n, const qf_value **y, tfl_qp *qp, int *act)
{
    const qf_value *v = n->outputs[0];
    if (act) *act = QF_TFL_ACT_NONE;
    if (v->type.dtype == QF_DTYPE_I8) {
        *y = v;
        return act_qp(v, qp) ? QF_OK : refuse(e, n, "int8 output '%s' has no per-tensor qparams", v->name);
    }
    const qf_node *u = v->nuses == 1 && !v->is_output ? v->uses[0].node : NULL, *a = NULL;
    if (u && act && (u->op == QF_OP_RELU || u->op == QF_OP_RELU6 || u->op == QF_OP_CLIP) &&
        u->outputs[0]->nuses == 1 && !u->outputs[0]->is_output) {
        a = u;
        u = u->outputs[0]->uses[0].node;
    }
    if (!u || u->op != QF_OP_QUANTIZE || u->ninputs != 3 || !qp_from(u->inputs[1], u->inputs[2], qp))
        return refuse(e, n, "output '%s' is not requantized to int8 by one per-tensor QuantizeLinear", v->name);
    if (a) {
        double lo = 0.0, hi = INFINITY;
        if (a->op == QF_OP_RELU6) hi = 6.0;
        if (a->op == QF_OP_CLIP) {
            const qf_value *mn = a->ninputs > 1 ? a->inputs[1] : NULL, *mx = a->ninputs > 2 ? a->inputs[2] : NULL;
            lo = mn && qf_value_is_const(mn) ? *(const float *)mn->type.data : -INFINITY;
            hi = mx && qf_value_is_const(mx) ? *(const float *)mx->type.data : INFINITY;
        }
        if (lo == 0.0 && isinf(hi)) *act = QF_TFL_ACT_RELU;
        else if (lo == 0.0 && hi == 6.0) *act = QF_TFL_ACT_RELU6;
        else return refuse(e, n, "its activation '%s' is none of RELU, RELU6", a->name);
        e->skip[a->id] = true;
    }
    e->skip[u->id] = true;
    *y = u->outputs[0];
    return QF_OK;
}

/* SUB, ADD, MUL (left in float by the lowering), LOGISTIC, TANH,
 * HARD_SWISH, SOFTMAX between DQs and a Q. */
static qf_status emit_float(ex *e, qf_node *n)
{
    int code;
    switch (n->op) {
    case QF_OP_SUB: code = QF_TFL_SUB; break;
    case QF_OP_ADD: code = QF_TFL_ADD; break;
    case QF_OP_MUL: code = QF_TFL_MUL; break;
    case QF_OP_SIGMOID: code = QF_TFL_LOGISTIC; break;
    case QF_OP_TANH: code = QF_TFL_TANH; break;
    case QF_OP_HARD_SWISH: code = QF_TFL_HARD_SWISH; break;
    default: code = QF_TFL_SOFTMAX; break;
    }
    const bool binary = code == QF_TFL_SUB || code == QF_TFL_ADD || code == QF_TFL_MUL;
    const qf_value *y;
    tfl_qp yq;
    int act;
    QF_TRY(group_out(e, n, &y, &yq, binary ? &act : NULL));
    /* TFLite's int8 kernels fix these outputs' qparams (qfold's profiles
     * give them these); other qparams (another tool's) get a QUANTIZE
     * (int8 -> int8 requantization) after the op */
    tfl_qp fixed = {0.0f, 0};
    if (code == QF_TFL_LOGISTIC || code == QF_TFL_SOFTMAX) fixed = (tfl_qp){1.0f / 256, -128};
    if (code == QF_TFL_TANH) fixed = (tfl_qp){1.0f / 128, 0};
    const bool requant = fixed.scale > 0.0f && (yq.scale != fixed.scale || yq.zp != fixed.zp);
    const int rank = y->type.ndim;
    if (code == QF_TFL_SOFTMAX) {
        int64_t axis = qf_node_attr_int(n, "axis", e->g->opset >= 13 ? -1 : 1);
        if (axis < 0) axis += rank;
        if (qf_tfl_phys_axis(rank, (int)axis) != rank - 1 || (e->g->opset < 13 && axis != rank - 1))
            return refuse(e, n, "a softmax over axis %lld, not the last NHWC axis", (long long)axis);
    }
    int32_t in[2];
    for (int i = 0; i < (binary ? 2 : 1); i++) {
        const qf_value *x;
        tfl_qp xq;
        QF_TRY(group_in(e, n, i, &x, &xq));
        QF_TRY(operand(e, n, x, xq, rank, &in[i]));
    }
    int yi;
    QF_TRY(act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    int oi = yi;
    if (requant) {
        char name[512];
        snprintf(name, sizeof name, "%.480s_fixed", y->name);
        int64_t zp = fixed.zp;
        oi = add_tensor(e, name, QF_TFL_INT8, e->t[yi].ndim, e->t[yi].shape, NULL, 0, 1, &fixed.scale, &zp, 0, false);
        QF_TRY(need(oi));
    }
    QF_TRY(add_op(e, n, code, in, binary ? 2 : 1, &oi, 1, 0, &op));
    if (binary) op->activation = act;
    if (requant) QF_TRY(add_op(e, n, QF_TFL_QUANTIZE, &oi, 1, &yi, 1, 0, &op));
    return QF_OK;
}

/* A Relu / Relu6 / Clip(0, 6) / Clip(0, inf) between a DQ and a Q (one
 * the lowering did not fuse into the op before it): TFLite has no such op in
 * the exported set, so it is the fused activation of an op that computes
 * nothing else: a 1x1 MAX_POOL_2D when the qparams are the same (exact), else
 * an ADD of an int8 zero (TFLite's requantization of x to the output's
 * qparams). */
static qf_status emit_act(ex *e, qf_node *n)
{
    const qf_value *x, *y;
    tfl_qp xq, yq;
    QF_TRY(group_in(e, n, 0, &x, &xq));
    QF_TRY(group_out(e, n, &y, &yq, NULL));
    int act = n->op == QF_OP_RELU ? QF_TFL_ACT_RELU : n->op == QF_OP_RELU6 ? QF_TFL_ACT_RELU6 : -1;
    if (n->op == QF_OP_CLIP) {
        const qf_value *mn = n->ninputs > 1 ? n->inputs[1] : NULL, *mx = n->ninputs > 2 ? n->inputs[2] : NULL;
        bool okmn = mn && qf_value_is_const(mn) && mn->type.dtype == QF_DTYPE_F32;
        bool okmx = !mx || (qf_value_is_const(mx) && mx->type.dtype == QF_DTYPE_F32);
        float lo = okmn ? *(const float *)mn->type.data : NAN, hi = mx && okmx ? *(const float *)mx->type.data : INFINITY;
        if (lo == 0.0f && isinf(hi) && hi > 0) act = QF_TFL_ACT_RELU;
        else if (lo == 0.0f && hi == 6.0f) act = QF_TFL_ACT_RELU6;
    }
    if (act < 0) return refuse(e, n, "a clip other than [0, 6] or [0, inf) has no TFLite int8 form here");
    const int rank = x->type.ndim;
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    if (xq.scale == yq.scale && xq.zp == yq.zp && rank == 4) {
        QF_TRY(add_op(e, n, QF_TFL_MAX_POOL_2D, &xi, 1, &yi, 1, 0, &op));
        op->padding = QF_TFL_PAD_VALID;
        op->filter_w = op->filter_h = 1;
        op->activation = act;
        return QF_OK;
    }
    int32_t shape[QF_MAX_DIMS];
    for (int i = 0; i < rank; i++) shape[i] = 1;
    int8_t zero = 0;
    int64_t zp = 0;
    char name[512];
    snprintf(name, sizeof name, "%.480s_zero", node_name(e, n));
    int zi = add_tensor(e, name, QF_TFL_INT8, rank, shape, &zero, 1, 1, &xq.scale, &zp, 0, true);
    QF_TRY(need(zi));
    int32_t in[2] = {xi, zi};
    QF_TRY(add_op(e, n, QF_TFL_ADD, in, 2, &yi, 1, 0, &op));
    op->activation = act;
    return QF_OK;
}

/* A rank-4 tensor whose NHWC and NCHW element orders are the same. */
static bool order_same(const qf_tensor *t)
{
    return t->ndim != 4 || t->dims[1] == 1 || (t->dims[2] == 1 && t->dims[3] == 1);
}

/* TRANSPOSE of tensor xi by perm into a new tensor named `name` of shape. */
static qf_status add_transpose(ex *e, const qf_node *n, int xi, const int32_t perm[4], const char *name,
                               const int32_t *shape, int *out)
{
    const qf_tfl_tensor x = e->t[xi];
    int ti = add_tensor(e, name, x.type, 4, shape, NULL, 0, x.nq, x.scale, x.zero_point, 0, false);
    QF_TRY(need(ti));
    int pi = i32_tensor(e, name, "perm", perm, 4, false);
    QF_TRY(need(pi));
    qf_tfl_op *op;
    int32_t in[2] = {xi, pi};
    QF_TRY(add_op(e, n, QF_TFL_TRANSPOSE, in, 2, &ti, 1, 0, &op));
    *out = ti;
    return QF_OK;
}

/* RESHAPE (Reshape, Flatten, Squeeze, Unsqueeze) on int8 data, with a
 * TRANSPOSE to NCHW before / to NHWC after where the orders differ. */
static qf_status emit_reshape(ex *e, qf_node *n)
{
    const qf_value *x, *y;
    tfl_qp xq, yq;
    QF_TRY(group_in(e, n, 0, &x, &xq));
    QF_TRY(group_out(e, n, &y, &yq, NULL));
    if (xq.scale != yq.scale || xq.zp != yq.zp) return refuse(e, n, "a reshape that changes the qparams");
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    char name[512];
    static const int32_t to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
    if (!order_same(&x->type)) {
        int32_t s[4];
        for (int i = 0; i < 4; i++) s[i] = x->type.dims[i] > 0 ? (int32_t)x->type.dims[i] : 1;
        snprintf(name, sizeof name, "%.480s_nchw", x->name);
        QF_TRY(add_transpose(e, n, xi, to_nchw, name, s, &xi));
    }
    const bool after = !order_same(&y->type);
    int32_t ls[QF_MAX_DIMS];
    const int r = y->type.ndim;
    for (int i = 0; i < r; i++) ls[i] = y->type.dims[i] > 0 ? (int32_t)y->type.dims[i] : 1;
    const int32_t *shape = after ? ls : e->t[yi].shape;
    int ri = yi;
    if (after) {
        snprintf(name, sizeof name, "%.480s_nchw", y->name);
        ri = add_tensor(e, name, QF_TFL_INT8, r, ls, NULL, 0, 1, e->t[yi].scale, e->t[yi].zero_point, 0, false);
        QF_TRY(need(ri));
    }
    int si = i32_tensor(e, e->t[ri].name, "shape", shape, r, false);
    QF_TRY(need(si));
    int32_t *ns = ex_alloc(e, sizeof *ns * (size_t)r);
    if (!ns) return QF_ERR_NOMEM;
    memcpy(ns, shape, sizeof *ns * (size_t)r);
    qf_tfl_op *op;
    int32_t in[2] = {xi, si};
    QF_TRY(add_op(e, n, QF_TFL_RESHAPE, in, 2, &ri, 1, 0, &op));
    op->new_shape = ns;
    op->new_shape_len = r;
    if (after) {
        /* the transpose writes y's own tensor */
        int pi = i32_tensor(e, y->name, "perm", to_nhwc, 4, false);
        QF_TRY(need(pi));
        int32_t tin[2] = {ri, pi};
        QF_TRY(add_op(e, n, QF_TFL_TRANSPOSE, tin, 2, &yi, 1, 0, &op));
    }
    return QF_OK;
}

/* TRANSPOSE with the permutation mapped to NHWC. */
static qf_status emit_transpose(ex *e, qf_node *n)
{
    const qf_value *x, *y;
    tfl_qp xq, yq;
    QF_TRY(group_in(e, n, 0, &x, &xq));
    QF_TRY(group_out(e, n, &y, &yq, NULL));
    if (xq.scale != yq.scale || xq.zp != yq.zp) return refuse(e, n, "a transpose that changes the qparams");
    const int r = x->type.ndim;
    int cnt = 0;
    const int64_t *perm = qf_node_attr_ints(n, "perm", &cnt);
    int32_t p[QF_MAX_DIMS];
    for (int k = 0; k < r; k++) {
        int l = r == 4 ? nhwc_from[k] : k;               /* output physical k holds logical l */
        int src = perm && cnt == r ? (int)perm[l] : r - 1 - l; /* which logical input axis */
        p[k] = qf_tfl_phys_axis(r, src);
    }
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    QF_TRY(act_tensor(e, n, y, &yi));
    int pi = i32_tensor(e, y->name, "perm", p, r, false);
    QF_TRY(need(pi));
    qf_tfl_op *op;
    int32_t in[2] = {xi, pi};
    return add_op(e, n, QF_TFL_TRANSPOSE, in, 2, &yi, 1, 0, &op);
}

/* PAD (constant mode, value 0: TFLite pads int8 with the zero point). */
static qf_status emit_pad_node(ex *e, qf_node *n)
{
    const qf_value *x, *y;
    tfl_qp xq, yq;
    QF_TRY(group_in(e, n, 0, &x, &xq));
    QF_TRY(group_out(e, n, &y, &yq, NULL));
    if (xq.scale != yq.scale || xq.zp != yq.zp) return refuse(e, n, "a pad that changes the qparams");
    if (strcmp(qf_node_attr_string(n, "mode", "constant"), "constant") != 0)
        return refuse(e, n, "only constant padding has a TFLite form (PAD)");
    const int r = x->type.ndim;
    int64_t pads[2 * QF_MAX_DIMS];
    const qf_value *pv = n->ninputs > 1 ? n->inputs[1] : NULL;
    if (!pv || !qf_value_is_const(pv) || qf_tensor_numel(&pv->type) != 2 * r)
        return refuse(e, n, "pads are not a constant of 2 x rank values");
    for (int i = 0; i < 2 * r; i++) pads[i] = qf_tensor_get_i64(&pv->type, i);
    if (n->ninputs > 2 && n->inputs[2]) {
        const qf_value *cv = n->inputs[2];
        const qf_node *dq = cv->producer;
        bool zero = false;
        if (qf_value_is_const(cv) && cv->type.dtype == QF_DTYPE_F32) zero = *(const float *)cv->type.data == 0.0f;
        else if (dq && dq->op == QF_OP_DEQUANTIZE && qf_value_is_const(dq->inputs[0]) && dq->ninputs == 3 &&
                 qf_value_is_const(dq->inputs[2]))
            zero = *(const int8_t *)dq->inputs[0]->type.data == *(const int8_t *)dq->inputs[2]->type.data;
        if (!zero) return refuse(e, n, "a pad value other than 0 (TFLite's int8 PAD fills with the zero point)");
    }
    int32_t pp[2 * QF_MAX_DIMS];
    for (int k = 0; k < r; k++) {
        int l = r == 4 ? nhwc_from[k] : k;
        if (pads[l] < 0 || pads[l + r] < 0) return refuse(e, n, "negative pads (a crop) are not exported");
        pp[2 * k] = (int32_t)pads[l];
        pp[2 * k + 1] = (int32_t)pads[l + r];
    }
    int xi, yi;
    QF_TRY(act_tensor(e, n, x, &xi));
    bool zero = true;
    for (int i = 0; i < 2 * r; i++) zero &= pp[i] == 0;
    if (zero && !y->is_output) {
        /* a Pad by nothing (PyTorch's avg_pool2d writes one): y is x */
        e->vmap[y->id] = xi + 1;
        return QF_OK;
    }
    QF_TRY(act_tensor(e, n, y, &yi));
    int pi = i32_tensor(e, y->name, "paddings", pp, 2 * r, true);
    QF_TRY(need(pi));
    qf_tfl_op *op;
    int32_t in[2] = {xi, pi};
    return add_op(e, n, QF_TFL_PAD, in, 2, &yi, 1, 0, &op);
}

/* The lowered Gemm's first reshape: part of the FULLY_CONNECTED. */
static bool fc_head(const qf_node *r)
{
    if (r->op != QF_OP_RESHAPE || r->outputs[0]->nuses != 1) return false;
    const qf_node *u = r->outputs[0]->uses[0].node;
    return r->outputs[0]->uses[0].slot == 0 && fc_tail(u);
}

/* ---- driver ------------------------------------------------------------------- */

typedef qf_status (*emit_fn)(ex *e, qf_node *n);

/* One row per node kind of the lowered graph: its TFLite form. */
typedef struct tfl_row {
    qf_op op;
    emit_fn emit;
} tfl_row;

static const tfl_row qf_tfl_rows[] = {
    /* integer nodes of the lowering (src/quant/lower.c) */
    {QF_OP_QLINEAR_CONV, emit_qconv},             /* CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED (Gemm) */
    {QF_OP_QLINEAR_MATMUL, emit_qmatmul},         /* FULLY_CONNECTED (MatMul by a constant) */
    {QF_OP_QCONV_TRANSPOSE, emit_qconv_transpose}, /* TRANSPOSE_CONV */
    {QF_OP_MAX_POOL, emit_pool},                  /* MAX_POOL_2D (int8 in and out) */
    {QF_OP_QAVG_POOL, emit_pool},                 /* AVERAGE_POOL_2D */
    {QF_OP_QMEAN, emit_qmean},                    /* MEAN (GlobalAveragePool, ReduceMean) */
    {QF_OP_QADD, emit_qbinary},                   /* ADD */
    {QF_OP_QMUL, emit_qbinary},                   /* MUL */
    {QF_OP_QCONCAT, emit_qconcat},                /* CONCATENATION */
    /* DQ -> op -> [act] -> Q groups the lowering leaves */
    {QF_OP_SUB, emit_float},                      /* SUB */
    {QF_OP_ADD, emit_float},                      /* ADD (qparams the lowering declined) */
    {QF_OP_MUL, emit_float},                      /* MUL */
    {QF_OP_SIGMOID, emit_float},                  /* LOGISTIC */
    {QF_OP_TANH, emit_float},                     /* TANH */
    {QF_OP_HARD_SWISH, emit_float},               /* HARD_SWISH */
    {QF_OP_SOFTMAX, emit_float},                  /* SOFTMAX */
    {QF_OP_RELU, emit_act},                       /* a fused RELU / RELU6 of a 1x1 MAX_POOL_2D or an ADD of 0 */
    {QF_OP_RELU6, emit_act},
    {QF_OP_CLIP, emit_act},
    /* layout ops, on int8 data or between a DQ and a Q of the same qparams */
    {QF_OP_RESHAPE, emit_reshape},                /* RESHAPE (+ TRANSPOSE where NHWC order differs) */
    {QF_OP_FLATTEN, emit_reshape},
    {QF_OP_SQUEEZE, emit_reshape},
    {QF_OP_UNSQUEEZE, emit_reshape},
    {QF_OP_TRANSPOSE, emit_transpose},            /* TRANSPOSE */
    {QF_OP_PAD, emit_pad_node},                   /* PAD */
};

static const tfl_row *row_of(qf_op op)
{
    for (size_t i = 0; i < sizeof qf_tfl_rows / sizeof qf_tfl_rows[0]; i++)
        if (qf_tfl_rows[i].op == op) return &qf_tfl_rows[i];
    return NULL;
}

/* A graph input: float (its Q makes the int8 input) or int8 already. */
static qf_status emit_inputs(ex *e)
{
    for (int i = 0; i < e->g->ninputs; i++) {
        qf_value *x = e->g->inputs[i];
        if (qf_value_is_const(x) || x->nuses == 0) continue;
        if (x->type.dtype == QF_DTYPE_I8) {
            int ti;
            QF_TRY(act_tensor(e, NULL, x, &ti));
            e->gin[e->ngin++] = ti;
            continue;
        }
        if (x->nuses != 1 || x->uses[0].node->op != QF_OP_QUANTIZE || x->uses[0].slot != 0)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "tflite export: node '%s' (%s) reads input '%s' in float, not through one "
                            "QuantizeLinear: not an int8 QDQ model (quantize it first: qfold quantize)",
                            x->uses[0].node->name, qf_op_label(x->uses[0].node), x->name);
        qf_node *q = x->uses[0].node;
        e->skip[q->id] = true;
        int qi;
        QF_TRY(act_tensor(e, q, q->outputs[0], &qi));
        if (!e->o->float_io) {
            e->gin[e->ngin++] = qi;
            continue;
        }
        int xi;
        QF_TRY(act_tensor(e, q, x, &xi));
        qf_tfl_op *op;
        QF_TRY(add_op(e, q, QF_TFL_QUANTIZE, &xi, 1, &qi, 1, 0, &op));
        e->gin[e->ngin++] = xi;
    }
    return QF_OK;
}

static qf_status add_gout(ex *e, int ti)
{
    for (int i = 0; i < e->ngout; i++)
        if (e->gout[i] == ti) return QF_OK;
    QF_TRY(grow((void **)&e->gout, &e->cgout, e->ngout + 1, sizeof *e->gout));
    e->gout[e->ngout++] = ti;
    return QF_OK;
}

/* A graph output: the DQ of an int8 tensor (float out), or int8. */
static qf_status emit_outputs(ex *e)
{
    for (int i = 0; i < e->g->noutputs; i++) {
        qf_value *y = e->g->outputs[i];
        const qf_node *dq = y->producer;
        if (y->type.dtype == QF_DTYPE_I8) {
            int ti;
            QF_TRY(act_tensor(e, dq, y, &ti));
            QF_TRY(add_gout(e, ti));
            continue;
        }
        if (!dq || dq->op != QF_OP_DEQUANTIZE || dq->inputs[0]->type.dtype != QF_DTYPE_I8)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "tflite export: output '%s' is not the DequantizeLinear of an int8 tensor%s%s%s", y->name,
                            dq ? " (made by node '" : "", dq ? dq->name : "", dq ? "')" : "");
        int qi;
        QF_TRY(act_tensor(e, dq, dq->inputs[0], &qi));
        if (!e->o->float_io) {
            QF_TRY(add_gout(e, qi));
            continue;
        }
        int yi;
        QF_TRY(act_tensor(e, dq, y, &yi));
        qf_tfl_op *op;
        QF_TRY(add_op(e, dq, QF_TFL_DEQUANTIZE, &qi, 1, &yi, 1, 0, &op));
        QF_TRY(add_gout(e, yi));
    }
    return QF_OK;
}

/* Is node n one the export leaves out: a DQ (of a weight, or one a group
 * reads: groups take its int8 input), a graph output's DQ (emit_outputs)? */
static bool passive(const qf_node *n) { return n->op == QF_OP_DEQUANTIZE; }

static qf_status emit_ops(ex *e)
{
    for (qf_node *n = e->g->first; n; n = n->next) {
        if (e->skip[n->id] || passive(n)) continue;
        if (n->op == QF_OP_RESHAPE && fc_head(n)) continue;
        const tfl_row *r = row_of(n->op);
        if (!r) {
            bool float_in = false;
            for (int i = 0; i < n->ninputs; i++)
                if (n->inputs[i] && !qf_value_is_const(n->inputs[i]) && n->inputs[i]->type.dtype == QF_DTYPE_F32)
                    float_in = true;
            return refuse(e, n, float_in ? "computed in float (not a quantized DQ -> op -> Q group TFLite's int8 "
                                           "ops can express)"
                                         : "no TFLite int8 form");
        }
        QF_TRY(r->emit(e, n));
    }
    return QF_OK;
}

static qf_status arena_plan(ex *e, qf_tflite_result *r);

static void ex_free(ex *e)
{
    for (int i = 0; i < e->npool; i++) qf_free(e->pool[i]);
    qf_free(e->pool);
    qf_free(e->t);
    qf_free(e->t_param);
    qf_free(e->vmap);
    qf_free(e->b);
    qf_free(e->ops);
    qf_free(e->info);
    qf_free(e->skip);
    qf_free(e->gin);
    qf_free(e->gout);
    if (e->g) qf_graph_free(e->g);
}

typedef struct result_impl {
    void **pool;
    int npool;
} result_impl;

/* A QuantizeLinear of constants (a constant operand: Mul by 2, Add 0.5)
 * becomes the int8 constant it computes, with the Q output's name. */
static qf_status fold_const_q(qf_graph *c)
{
    qf_node *next;
    for (qf_node *n = c->first; n; n = next) {
        next = n->next;
        if (n->op != QF_OP_QUANTIZE || n->outputs[0]->is_output) continue;
        bool all = true;
        for (int i = 0; i < n->ninputs; i++) all &= !n->inputs[i] || qf_value_is_const(n->inputs[i]);
        if (!all) continue;
        qf_value *y = n->outputs[0];
        qf_tensor t;
        QF_TRY(qf_tensor_init(&t, y->type.dtype, y->type.ndim, y->type.dims));
        const qf_tensor *in[3] = {NULL, NULL, NULL};
        for (int i = 0; i < n->ninputs && i < 3; i++) in[i] = n->inputs[i] ? &n->inputs[i]->type : NULL;
        qf_tensor *outs[1] = {&t};
        qf_status st = qf_node_eval(n, c->opset, in, outs);
        char name[512];
        snprintf(name, sizeof name, "%.480s_tflite_folded", y->name);
        qf_value *k = st == QF_OK ? qf_graph_add_constant(c, name, QF_VALUE_CONSTANT, &t) : NULL;
        if (!k) {
            qf_tensor_free(&t);
            return st != QF_OK ? st : QF_ERR_NOMEM;
        }
        const char *keep = qf_graph_strdup(c, y->name);
        if (!keep) return QF_ERR_NOMEM;
        QF_TRY(qf_graph_replace_uses(c, y, k));
        qf_graph_remove_node(c, n);
        QF_TRY(qf_graph_rename_value(c, k, keep));
    }
    return QF_OK;
}

/* qfold's internal `linear` (x W^T + b, what the passes make of a Gemm) on
 * a 2-D input back to the Gemm (transB = 1) the lowering recognises, as ONNX
 * export writes it; an in-memory graph (quantize / qat / finalize writing a
 * .tflite) has them. */
static qf_status linear_to_gemm(qf_graph *c)
{
    qf_node *next;
    for (qf_node *n = c->first; n; n = next) {
        next = n->next;
        if (n->op != QF_OP_LINEAR || n->inputs[0]->type.ndim != 2) continue;
        char name[512];
        snprintf(name, sizeof name, "%.480s_tflite_gemm", n->name);
        qf_node *gm = qf_graph_insert_node(c, n, false, QF_OP_GEMM, name, n->ninputs, n->inputs, 1);
        if (!gm) return QF_ERR_NOMEM;
        QF_TRY(qf_node_set_attr_int(c, gm, "transB", 1));
        gm->outputs[0]->type = n->outputs[0]->type;
        gm->outputs[0]->type.data = NULL;
        gm->outputs[0]->type.owns = false;
        const char *keep = qf_graph_strdup(c, n->name), *vkeep = qf_graph_strdup(c, n->outputs[0]->name);
        if (!keep || !vkeep) return QF_ERR_NOMEM;
        QF_TRY(qf_graph_replace_uses(c, n->outputs[0], gm->outputs[0]));
        qf_graph_remove_node(c, n);
        QF_TRY(qf_graph_rename_node(c, gm, keep));
        if (strcmp(gm->outputs[0]->name, vkeep) != 0) QF_TRY(qf_graph_rename_value(c, gm->outputs[0], vkeep));
    }
    return QF_OK;
}

/* The private copy of g, lowered, every Q output's name kept (see the top). */
static qf_status lower_copy(const qf_graph *g, qf_graph **out)
{
    qf_graph *c;
    QF_TRY(qf_graph_clone(g, &c));
    qf_status st = fold_const_q(c);
    if (st == QF_OK) st = linear_to_gemm(c);
    int n0 = c->noutputs;
    for (qf_node *n = c->first; n && st == QF_OK; n = n->next)
        if (n->op == QF_OP_QUANTIZE && !n->outputs[0]->is_output) st = qf_graph_add_output(c, n->outputs[0]);
    if (st == QF_OK) st = qf_graph_toposort(c);
    if (st == QF_OK) st = qf_graph_infer_shapes(c);
    if (st == QF_OK) st = qf_quant_lower_int8(c, NULL, QF_REQUANT_FIXED_POINT, NULL);
    if (st == QF_OK) {
        for (int i = n0; i < c->noutputs; i++) c->outputs[i]->is_output = false;
        for (int i = 0; i < n0; i++) c->outputs[i]->is_output = true;
        c->noutputs = n0;
        qf_graph_dce(c);
        st = qf_graph_toposort(c);
    }
    if (st != QF_OK) {
        qf_graph_free(c);
        return st;
    }
    *out = c;
    return QF_OK;
}

qf_status qf_tflite_export(const qf_graph *g, const qf_tflite_options *o, qf_tflite_result *r)
{
    static const qf_tflite_options dflt = {0};
    memset(r, 0, sizeof *r);
    if (!o) o = &dflt;
    ex e = {0};
    e.o = o;
    qf_status st = lower_copy(g, &e.g);
    if (st == QF_OK) {
        e.vmap = qf_calloc((size_t)e.g->nvalues + 1, sizeof *e.vmap);
        e.skip = qf_calloc((size_t)e.g->next_node_id + 1, sizeof *e.skip);
        e.gin = qf_calloc((size_t)e.g->ninputs + 1, sizeof *e.gin);
        if (!e.vmap || !e.skip || !e.gin) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) st = emit_inputs(&e);
    if (st == QF_OK) st = emit_ops(&e);
    if (st == QF_OK) st = emit_outputs(&e);
    if (st == QF_OK && o->all_outputs)
        for (int i = 0; i < e.nt && st == QF_OK; i++)
            if (!e.t[i].buffer && e.t[i].type == QF_TFL_INT8) {
                bool produced = false;
                for (int k = 0; k < e.nops && !produced; k++)
                    for (int j = 0; j < e.ops[k].noutputs; j++) produced |= e.ops[k].outputs[j] == i;
                if (produced) st = add_gout(&e, i);
            }
    char desc[128];
    snprintf(desc, sizeof desc, "qfold %s int8 export", QF_VERSION);
    if (st == QF_OK) {
        qf_tfl_model m = {.tensors = e.t,
                          .ntensors = e.nt,
                          .buffers = e.b,
                          .nbuffers = e.nb,
                          .ops = e.ops,
                          .nops = e.nops,
                          .inputs = e.gin,
                          .ninputs = e.ngin,
                          .outputs = e.gout,
                          .noutputs = e.ngout,
                          .name = e.g->name && *e.g->name ? e.g->name : "main",
                          .description = o->description ? o->description : desc};
        st = qf_tfl_serialize(&m, &r->data, &r->size);
    }
    if (st == QF_OK) st = arena_plan(&e, r);
    if (st == QF_OK) {
        result_impl *ri = qf_calloc(1, sizeof *ri);
        if (!ri) {
            st = QF_ERR_NOMEM;
        } else {
            /* the result keeps the op infos and the strings they point at */
            r->ops = e.info;
            r->nops = e.nops;
            e.info = NULL;
            ri->pool = e.pool;
            ri->npool = e.npool;
            e.pool = NULL;
            e.npool = 0;
            r->impl = ri;
            r->ntensors = e.nt;
            for (int i = 0; i < e.nt; i++)
                if (e.t[i].buffer && e.t_param[i]) r->weight_bytes += (int64_t)e.b[e.t[i].buffer - 1].size;
            for (int i = 0; i < r->nops; i++) r->macs += r->ops[i].macs;
        }
    }
    ex_free(&e);
    if (st == QF_ERR_NOMEM && !*qf_error_message()) qf_error(QF_ERR_NOMEM, "tflite export: out of memory");
    return st;
}

/* Peak activation memory: a first-fit arena plan over the op order. Every
 * activation tensor (no buffer) lives from the op that writes it (the
 * subgraph's inputs from the start) to the last op that reads it (the
 * subgraph's outputs to the end); at each op its outputs are placed at the
 * lowest offset where they fit among the live tensors (16-byte aligned),
 * then the tensors it read for the last time are freed. */
static qf_status arena_plan(ex *e, qf_tflite_result *r)
{
    int nt = e->nt;
    int *first = qf_malloc(sizeof *first * (size_t)(nt + 1)), *last = qf_malloc(sizeof *last * (size_t)(nt + 1));
    int64_t *off = qf_malloc(sizeof *off * (size_t)(nt + 1)), *size = qf_malloc(sizeof *size * (size_t)(nt + 1));
    if (!first || !last || !off || !size) {
        qf_free(first), qf_free(last), qf_free(off), qf_free(size);
        return QF_ERR_NOMEM;
    }
    for (int i = 0; i < nt; i++) {
        first[i] = last[i] = -2;
        off[i] = -1;
        int64_t s = e->t[i].type == QF_TFL_INT8 ? 1 : 4;
        for (int d = 0; d < e->t[i].ndim; d++) s *= e->t[i].shape[d];
        size[i] = (s + 15) / 16 * 16;
    }
    for (int i = 0; i < e->ngin; i++) first[e->gin[i]] = last[e->gin[i]] = -1;
    for (int k = 0; k < e->nops; k++) {
        for (int j = 0; j < e->ops[k].noutputs; j++) {
            int t = e->ops[k].outputs[j];
            if (first[t] == -2) first[t] = last[t] = k;
        }
        for (int j = 0; j < e->ops[k].ninputs; j++) {
            int t = e->ops[k].inputs[j];
            if (t >= 0 && !e->t[t].buffer && last[t] < k) last[t] = k;
        }
    }
    for (int i = 0; i < e->ngout; i++) last[e->gout[i]] = e->nops;
    int64_t peak = 0;
    r->activation_bytes = 0;
    for (int k = -1; k < e->nops; k++) {
        for (int t = 0; t < nt; t++) {
            if (e->t[t].buffer || first[t] != k) continue;
            r->activation_bytes += size[t];
            /* lowest offset clear of every live tensor */
            int64_t at = 0;
            for (bool moved = true; moved;) {
                moved = false;
                for (int u = 0; u < nt; u++)
                    if (off[u] >= 0 && u != t && last[u] >= k && off[u] < at + size[t] && at < off[u] + size[u]) {
                        at = off[u] + size[u];
                        moved = true;
                    }
            }
            off[t] = at;
            if (at + size[t] > peak) peak = at + size[t];
        }
        for (int t = 0; t < nt; t++)
            if (off[t] >= 0 && last[t] == k) off[t] = -1;
    }
    r->peak_activation_bytes = peak;
    qf_free(first), qf_free(last), qf_free(off), qf_free(size);
    return QF_OK;
}

void qf_tflite_result_free(qf_tflite_result *r)
{
    if (!r) return;
    qf_free(r->data);
    qf_free(r->ops);
    result_impl *ri = r->impl;
    if (ri) {
        for (int i = 0; i < ri->npool; i++) qf_free(ri->pool[i]);
        qf_free(ri->pool);
        qf_free(ri);
    }
    memset(r, 0, sizeof *r);
}

qf_status qf_tflite_save(const qf_graph *g, const char *path, const qf_tflite_options *o, qf_tflite_result *r)
{
    qf_tflite_result local;
    if (!r) r = &local;
    qf_status st = qf_tflite_export(g, o, r);
    if (st == QF_OK) st = qf_file_write_atomic(path, r->data, r->size);
    qf_free(r->data);
    r->data = NULL;
    if (r == &local) qf_tflite_result_free(r);
    return st;
}

/* ---- the report ----------------------------------------------------------------- */

static void json_shape(qf_strbuf *b, int ndim, const int32_t *s)
{
    qf_strbuf_puts(b, "[");
    for (int i = 0; i < ndim; i++) qf_strbuf_printf(b, "%s%d", i ? ", " : "", (int)s[i]);
    qf_strbuf_puts(b, "]");
}

qf_status qf_tflite_report_json(const qf_tflite_result *r, const double *max_lsb, char **json, size_t *len)
{
    qf_strbuf b = {0};
    qf_strbuf_printf(&b,
                     "{\n  \"format\": \"tflite\",\n  \"schema_version\": 3,\n  \"totals\": {\"model_bytes\": %zu, "
                     "\"weight_bytes\": %lld, \"macs\": %lld, \"peak_activation_bytes\": %lld, "
                     "\"activation_bytes_no_reuse\": %lld, \"ops\": %d, \"tensors\": %d,\n    \"arena\": "
                     "\"first-fit in op order, each tensor live from its writer to its last reader, 16-byte aligned\"},"
                     "\n  \"ops\": [",
                     r->size, (long long)r->weight_bytes, (long long)r->macs, (long long)r->peak_activation_bytes,
                     (long long)r->activation_bytes, r->nops, r->ntensors);
    for (int i = 0; i < r->nops; i++) {
        const qf_tflite_op_info *f = &r->ops[i];
        qf_strbuf_printf(&b, "%s\n    {\"index\": %d, \"op\": ", i ? "," : "", i);
        qf_strbuf_json_string(&b, f->op);
        qf_strbuf_puts(&b, ", \"node\": ");
        qf_strbuf_json_string(&b, f->node);
        qf_strbuf_puts(&b, ", \"output\": ");
        qf_strbuf_json_string(&b, f->output);
        qf_strbuf_puts(&b, ", \"inputs\": [");
        for (int j = 0; j < f->ninputs && j < QF_TFLITE_MAX_IO; j++) {
            if (j) qf_strbuf_puts(&b, ", ");
            json_shape(&b, f->in_ndim[j], f->in_shape[j]);
        }
        qf_strbuf_puts(&b, "], \"outputs\": [");
        for (int j = 0; j < f->noutputs && j < QF_TFLITE_MAX_IO; j++) {
            if (j) qf_strbuf_puts(&b, ", ");
            json_shape(&b, f->out_ndim[j], f->out_shape[j]);
        }
        qf_strbuf_printf(&b, "], \"macs\": %lld, \"weight_bytes\": %lld, \"max_lsb\": ", (long long)f->macs,
                         (long long)f->weight_bytes);
        if (max_lsb && isfinite(max_lsb[i])) qf_strbuf_printf(&b, "%.17g}", max_lsb[i]);
        else qf_strbuf_puts(&b, "null}");
    }
    qf_strbuf_puts(&b, "\n  ]\n}\n");
    *json = qf_strbuf_take(&b, len);
    return *json ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory writing the export report");
}

void qf_tflite_report_print(const qf_tflite_result *r, FILE *f)
{
    int counts[128] = {0};
    const char *names[128] = {0};
    int nn = 0;
    for (int i = 0; i < r->nops; i++) {
        int k = 0;
        while (k < nn && strcmp(names[k], r->ops[i].op) != 0) k++;
        if (k == nn && nn < 128) names[nn++] = r->ops[i].op;
        if (k < 128) counts[k]++;
    }
    fprintf(f, "tflite: %d ops (", r->nops);
    for (int k = 0; k < nn; k++) fprintf(f, "%s%d %s", k ? ", " : "", counts[k], names[k]);
    fprintf(f, "), %d tensors\n", r->ntensors);
    fprintf(f, "tflite: model %zu bytes, weights %lld bytes, peak activations %lld bytes (arena plan), %.3f MMAC "
               "per inference\n",
            r->size, (long long)r->weight_bytes, (long long)r->peak_activation_bytes, (double)r->macs / 1e6);
}
