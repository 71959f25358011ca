/* The TFLite export's operators for the integer nodes of the int8
 * executor's lowering (src/quant/lower.c): QLinearConv -> CONV_2D /
 * DEPTHWISE_CONV_2D / FULLY_CONNECTED (weights OHWI / 1HWO / per tensor;
 * per-channel Linear weights: a 1x1 CONV_2D between RESHAPEs),
 * QLinearMatMul by a constant -> FULLY_CONNECTED, qconv_transpose ->
 * TRANSPOSE_CONV (+ ADD for bias and activation: ArmNN's parser takes three
 * inputs), pools, MEAN, ADD / MUL, CONCATENATION; the fused activation from
 * the lowering's clamp, pads SAME cannot express as a widened SAME kernel.
 * Their rows are in tflite_rows.c; they build on tflite_build.h alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/math/fixed_point.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "tflite_build.h"

/* The fused activation of a lowered node's clamp [lo, hi] in its output's
 * integers (TFLite's CalculateActivationRangeQuantized); -1: none fits. */
static int fused_act(const qf_node *k, qf_tfl_qp y)
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

static qf_status get_geom(qf_tfl_ex *e, const qf_node *n, const qf_tensor *x, const qf_tensor *y, const int64_t *kernel,
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
        if (g->in[i] <= 0 || g->out[i] <= 0) return qf_tfl_refuse(e, n, "spatial size unknown");
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
static qf_status add_pad(qf_tfl_ex *e, const qf_node *n, int xi, const geom *g, int *out)
{
    const qf_tfl_tensor x = e->t[xi];
    int32_t shape[4] = {x.shape[0], x.shape[1] + (int32_t)(g->pb[0] + g->pe[0]),
                        x.shape[2] + (int32_t)(g->pb[1] + g->pe[1]), x.shape[3]};
    char name[512];
    snprintf(name, sizeof name, "%.480s_padded", x.name);
    int pi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 4, shape, NULL, 0, x.nq, x.scale, x.zero_point, 0, false);
    QF_TRY(qf_tfl_need(pi));
    int32_t pads[8] = {0, 0, (int32_t)g->pb[0], (int32_t)g->pe[0], (int32_t)g->pb[1], (int32_t)g->pe[1], 0, 0};
    int ki = qf_tfl_i32_tensor(e, name, "paddings", pads, 8, true);
    QF_TRY(qf_tfl_need(ki));
    qf_tfl_op *op;
    int32_t in[2] = {xi, ki};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_PAD, in, 2, &pi, 1, 0, &op));
    *out = pi;
    return QF_OK;
}

/* A MaxPool's explicit pads and ceil_mode (PyTorch's ResNet stem: 3x3,
 * stride 2, pads 1; GoogLeNet's ceil_mode=True) as a pad by the int8
 * minimum then a VALID MAX_POOL_2D: ONNX's max ignores the padding, and a
 * -128 never wins a window that holds a real element (every window does:
 * it starts before the input's end, and the pads before it are smaller
 * than the kernel). The end pads are those the output size needs (ceil_mode
 * adds some). PAD fills with the zero point: exact when it is -128 (after a
 * Relu, the usual case); otherwise PADV2 with the constant -128. NULL, or why
 * not. */
static const char *max_pool_pad(qf_tfl_ex *e, const qf_node *n, geom *g, int xi, int *out, qf_status *st)
{
    *st = QF_OK;
    for (int i = 0; i < 2; i++) {
        if (g->d[i] != 1) return "dilated";
        if (g->pb[i] >= g->k[i]) return "a pad before the input at least as large as the kernel";
        if ((g->out[i] - 1) * g->s[i] - g->pb[i] >= g->in[i]) return "a window that starts in the end padding";
        int64_t pe = (g->out[i] - 1) * g->s[i] + g->k[i] - g->in[i] - g->pb[i];
        g->pe[i] = pe > 0 ? pe : 0;
        if ((g->in[i] + g->pb[i] + g->pe[i] - g->k[i]) / g->s[i] + 1 != g->out[i])
            return "an output size no padding gives";
    }
    const qf_tfl_tensor x = e->t[xi];
    if (x.nq != 1) return "its input is not per-tensor int8";
    if (x.zero_point[0] == -128) {
        *st = add_pad(e, n, xi, g, out);
        return NULL;
    }
    int32_t shape[4] = {x.shape[0], x.shape[1] + (int32_t)(g->pb[0] + g->pe[0]),
                        x.shape[2] + (int32_t)(g->pb[1] + g->pe[1]), x.shape[3]};
    char name[512];
    snprintf(name, sizeof name, "%.480s_padded", x.name);
    int pi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 4, shape, NULL, 0, x.nq, x.scale, x.zero_point, 0, false);
    int32_t pads[8] = {0, 0, (int32_t)g->pb[0], (int32_t)g->pe[0], (int32_t)g->pb[1], (int32_t)g->pe[1], 0, 0};
    int ki = qf_tfl_i32_tensor(e, name, "paddings", pads, 8, true);
    const int8_t lowest = -128;
    const int32_t scalar[1] = {0}; /* a rank-0 tensor: no dim is read */
    snprintf(name, sizeof name, "%.480s_pad_value", x.name);
    int vi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 0, scalar, &lowest, 1, x.nq, x.scale, x.zero_point, 0, true);
    if (pi < 0 || ki < 0 || vi < 0) {
        *st = QF_ERR_NOMEM;
        return NULL;
    }
    qf_tfl_op *op;
    int32_t in[3] = {xi, ki, vi};
    *st = qf_tfl_add_op(e, n, QF_TFL_PADV2, in, 3, &pi, 1, 0, &op);
    *out = pi;
    return NULL;
}

/* The int32 bias of a conv-like node [m] at scale s_x * s_w[c] (zeros
 * when the node has none). */
static int bias_tensor(qf_tfl_ex *e, const qf_node *n, const qf_value *bq, int64_t m, float sx, const float *sw, int64_t nw)
{
    float *sb = qf_tfl_ex_alloc(e, sizeof *sb * (size_t)m);
    int64_t *zb = qf_tfl_ex_alloc(e, sizeof *zb * (size_t)m);
    if (!sb || !zb) return -1;
    for (int64_t c = 0; c < m; c++) sb[c] = sx * sw[nw == 1 ? 0 : c];
    char name[512];
    snprintf(name, sizeof name, "%.480s_bias", qf_tfl_node_name(e, n));
    int32_t shape[1] = {(int32_t)m};
    const void *data = bq ? bq->type.data : NULL;
    int32_t *zeros = NULL;
    if (!data) {
        zeros = qf_tfl_ex_alloc(e, sizeof *zeros * (size_t)m);
        if (!zeros) return -1;
        data = zeros;
    }
    /* one scale per weight scale: a per-tensor weight's bias has one (ArmNN checks) */
    return qf_tfl_add_tensor(e, bq ? bq->name : name, QF_TFL_INT32, 1, shape, data, sizeof(int32_t) * (size_t)m,
                      nw == 1 ? 1 : (int)m, sb, zb, 0, true);
}

/* Weight scales: per tensor, or per channel (all equal counts as per tensor
 * when `collapse`). Zero points must be 0 (symmetric). */
static qf_status weight_qp(qf_tfl_ex *e, const qf_node *n, const qf_value *s, const qf_value *z, const float **sw, int64_t *nw)
{
    *sw = s->type.data;
    *nw = qf_tensor_numel(&s->type);
    if (s->type.dtype != QF_DTYPE_F32 || z->type.dtype != QF_DTYPE_I8 || qf_tensor_numel(&z->type) != *nw)
        return qf_tfl_refuse(e, n, "weight qparams are not float scales with int8 zero points");
    const int8_t *zp = z->type.data;
    for (int64_t i = 0; i < *nw; i++)
        if (zp[i] != 0) return qf_tfl_refuse(e, n, "weight zero point %d: TFLite's int8 weights are symmetric", zp[i]);
    return QF_OK;
}

/* A weight tensor, data already in TFLite's layout. */
static int weight_tensor(qf_tfl_ex *e, const qf_value *w, int ndim, const int32_t *shape, const void *data, size_t size,
                         const float *sw, int64_t nw, int qdim)
{
    int64_t *zp = qf_tfl_ex_alloc(e, sizeof *zp * (size_t)nw);
    if (!zp) return -1;
    return qf_tfl_add_tensor(e, w->name, QF_TFL_INT8, ndim, shape, data, size, (int)nw, sw, zp, qdim, true);
}

/* A RESHAPE of int8 tensor xi to `shape` (rank r): into tensor *yi when it
 * is >= 0, else into a new tensor <name> with xi's qparams (*yi gets it). */
static qf_status add_reshape(qf_tfl_ex *e, const qf_node *n, int xi, int r, const int32_t *shape, const char *name,
                             int *yi)
{
    if (*yi < 0) {
        *yi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, r, shape, NULL, 0, 1, e->t[xi].scale, e->t[xi].zero_point, 0,
                                false);
        QF_TRY(qf_tfl_need(*yi));
    }
    int si = qf_tfl_i32_tensor(e, e->t[*yi].name, "shape", shape, r, false);
    QF_TRY(qf_tfl_need(si));
    int32_t *ns = qf_tfl_ex_alloc(e, sizeof *ns * (size_t)r);
    if (!ns) return QF_ERR_NOMEM;
    memcpy(ns, shape, sizeof *ns * (size_t)r);
    qf_tfl_op *op;
    int32_t in[2] = {xi, si};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_RESHAPE, in, 2, yi, 1, 0, &op));
    op->new_shape = ns;
    op->new_shape_len = r;
    return QF_OK;
}

/* A fully connected layer with per-channel weights (the generic target's
 * Linear): RESHAPE [N, K] -> [N, 1, 1, K], CONV_2D 1x1 (weights [M, 1, 1, K]
 * OHWI, per channel on 0), RESHAPE [N, 1, 1, M] -> [N, M]. Why not a
 * per-channel FULLY_CONNECTED: ArmNN 20.08's TfLite parser aborts on one
 * (tests/tflite/armnn_test.py pins it) and TFLite 2.2's int8 FULLY_CONNECTED
 * kernel reads one scale only. A 1x1 convolution on a 1x1 image is the same
 * product, and CONV_2D takes per-channel int8 weights in both runtimes with
 * TFLite's per-channel requantization: what qfold's int8 Gemm computes (the
 * lowering runs it as this very 1x1 QLinearConv between two reshapes), so
 * the result is bit-exact and the trained per-channel scales stay. */
static qf_status emit_fc_conv(qf_tfl_ex *e, const qf_node *n, int xi, int yi, const qf_value *w, const int8_t *wdata,
                              int64_t M, int64_t K, const float *sw, int64_t nw, const qf_value *bq, qf_tfl_qp xq,
                              int act)
{
    const int32_t N = e->t[xi].shape[0];
    char name[512];
    int32_t s4[4] = {N, 1, 1, (int32_t)K}, y4[4] = {N, 1, 1, (int32_t)M}, y2[2] = {N, (int32_t)M};
    int x4i = -1, y4i = -1;
    snprintf(name, sizeof name, "%.480s_1x1", e->t[xi].name);
    QF_TRY(add_reshape(e, n, xi, 4, s4, name, &x4i));
    snprintf(name, sizeof name, "%.480s_1x1", e->t[yi].name);
    y4i = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 4, y4, NULL, 0, 1, e->t[yi].scale, e->t[yi].zero_point, 0, false);
    QF_TRY(qf_tfl_need(y4i));
    int32_t wshape[4] = {(int32_t)M, 1, 1, (int32_t)K};
    int wi = weight_tensor(e, w, 4, wshape, wdata, (size_t)(M * K), sw, nw, 0);
    QF_TRY(qf_tfl_need(wi));
    int bi = bias_tensor(e, n, bq, M, xq.scale, sw, nw);
    QF_TRY(qf_tfl_need(bi));
    qf_tfl_op *op;
    int32_t in[3] = {x4i, wi, bi};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_CONV_2D, in, 3, &y4i, 1, (int64_t)N * M * K, &op));
    op->padding = QF_TFL_PAD_VALID;
    op->stride_h = op->stride_w = op->dilation_h = op->dilation_w = 1;
    op->activation = act;
    return add_reshape(e, n, y4i, 2, y2, NULL, &yi);
}

/* A fully connected layer: x [N, K] int8 -> y [N, M], weight [M, K] int8
 * (wdata, row-major), bias [M]: FULLY_CONNECTED for per-tensor weights, the
 * 1x1 CONV_2D form above for per-channel ones. */
static qf_status emit_fc(qf_tfl_ex *e, const qf_node *n, const qf_value *x, const qf_value *y, const qf_value *w,
                         const int8_t *wdata, int64_t M, int64_t K, const qf_value *ws, const qf_value *wz,
                         const qf_value *bq, qf_tfl_qp xq, qf_tfl_qp yq, int act)
{
    const float *sw;
    int64_t nw;
    QF_TRY(weight_qp(e, n, ws, wz, &sw, &nw));
    bool per_channel = false;
    for (int64_t c = 1; c < nw; c++) per_channel = per_channel || sw[c] != sw[0];
    if (x->type.ndim != 2) return qf_tfl_refuse(e, n, "a fully connected layer on a rank-%d input", x->type.ndim);
    if (act < 0) return qf_tfl_refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    if (per_channel && nw != M) return qf_tfl_refuse(e, n, "%lld weight scales for %lld outputs", (long long)nw, (long long)M);
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    if (per_channel) return emit_fc_conv(e, n, xi, yi, w, wdata, M, K, sw, nw, bq, xq, act);
    int32_t wshape[2] = {(int32_t)M, (int32_t)K};
    int wi = weight_tensor(e, w, 2, wshape, wdata, (size_t)(M * K), sw, 1, 0);
    QF_TRY(qf_tfl_need(wi));
    int bi = bias_tensor(e, n, bq, M, xq.scale, sw, 1);
    QF_TRY(qf_tfl_need(bi));
    (void)yq;
    int64_t N = x->type.dims[0] > 0 ? x->type.dims[0] : 1;
    qf_tfl_op *op;
    int32_t in[3] = {xi, wi, bi};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_FULLY_CONNECTED, in, 3, &yi, 1, N * M * K, &op));
    op->activation = act;
    return QF_OK;
}

qf_status qf_tfl_emit_qconv(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    (void)row; /* CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED, by the node */
    const qf_node *r2 = qf_tfl_fc_tail(n);
    if (r2) e->source = "Gemm";
    qf_tfl_qp xq, yq;
    if (!qf_tfl_qp_from(n->inputs[1], n->inputs[2], &xq) || !qf_tfl_qp_from(n->inputs[6], n->inputs[7], &yq))
        return qf_tfl_refuse(e, n, "activation qparams are not per-tensor int8");
    const qf_value *w = n->inputs[3], *bq = n->ninputs > 8 ? n->inputs[8] : NULL;
    const qf_tensor *wt = &w->type;
    int act = fused_act(n, yq);
    if (r2) {
        /* a Linear layer: FULLY_CONNECTED from the first reshape's input to the second's output */
        e->skip[r2->id] = true;
        return emit_fc(e, n, n->inputs[0]->producer->inputs[0], r2->outputs[0], w, wt->data, wt->dims[0], wt->dims[1],
                       n->inputs[4], n->inputs[5], bq, xq, yq, act);
    }
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    if (x->type.ndim != 4 || wt->ndim != 4)
        return qf_tfl_refuse(e, n, "only 2-D convolutions (rank-4 tensors) have a TFLite form");
    if (act < 0) return qf_tfl_refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    const float *sw;
    int64_t nw;
    QF_TRY(weight_qp(e, n, n->inputs[4], n->inputs[5], &sw, &nw));
    int64_t group = qf_node_attr_int(n, "group", 1), M = wt->dims[0], Cg = wt->dims[1], kh = wt->dims[2],
            kw = wt->dims[3], C = x->type.dims[1];
    bool dw = group > 1 && group == C && Cg == 1 && M % C == 0;
    if (group != 1 && !dw)
        return qf_tfl_refuse(e, n, "group %lld convolution: TFLite has CONV_2D (group 1) and DEPTHWISE_CONV_2D "
                            "(group = channels) only", (long long)group);
    geom g;
    int64_t kern[2] = {kh, kw};
    QF_TRY(get_geom(e, n, &x->type, &y->type, kern, &g));
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
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
        int8_t *big = qf_tfl_ex_alloc(e, (size_t)(M * Cg * kh * kw));
        if (!big) return QF_ERR_NOMEM;
        for (int64_t oc = 0; oc < M * Cg; oc++)
            for (int64_t i = 0; i < wt->dims[2]; i++)
                memcpy(big + (oc * kh + i + off[0]) * kw + off[1], wsrc + (oc * wt->dims[2] + i) * wt->dims[3],
                       (size_t)wt->dims[3]);
        wsrc = big;
    }
    int8_t *wd = qf_tfl_ex_alloc(e, (size_t)(M * Cg * kh * kw));
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
    QF_TRY(qf_tfl_need(wi));
    int bi = bias_tensor(e, n, bq, M, xq.scale, sw, nw);
    QF_TRY(qf_tfl_need(bi));
    int64_t N = x->type.dims[0] > 0 ? x->type.dims[0] : 1;
    int64_t macs = N * g.out[0] * g.out[1] * M * kh * kw * Cg;
    qf_tfl_op *op;
    int32_t in[3] = {xi, wi, bi};
    /* TFLite's int8 DEPTHWISE_CONV_2D (2.2, and its micro kernels) clamps to
     * [-128, 127] whatever its fused activation (their TODO: "use calculated
     * value for clamping"). Where the activation clamps something (a ReLU
     * output whose zero point is above -128: qparams it shares with other
     * values, a Concat's; a ReLU6 below 127), the clamp is a 1x1 MAX_POOL_2D
     * with that activation after a depthwise conv into a tensor of the same
     * qparams: the same integers. */
    const int64_t hi6 = (int64_t)fmin(127.0, yq.zp + round(6.0 / yq.scale));
    if (dw && ((act != QF_TFL_ACT_NONE && yq.zp > -128) || (act == QF_TFL_ACT_RELU6 && hi6 < 127))) {
        const qf_tfl_tensor yt = e->t[yi];
        char name[512];
        snprintf(name, sizeof name, "%.480s_unclamped", yt.name);
        int ui = qf_tfl_add_tensor(e, name, QF_TFL_INT8, yt.ndim, yt.shape, NULL, 0, yt.nq, yt.scale, yt.zero_point,
                                   0, false);
        QF_TRY(qf_tfl_need(ui));
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_DEPTHWISE_CONV_2D, in, 3, &ui, 1, macs, &op));
        op->padding = padding;
        op->stride_h = (int)g.s[0];
        op->stride_w = (int)g.s[1];
        op->dilation_h = (int)g.d[0];
        op->dilation_w = (int)g.d[1];
        op->activation = QF_TFL_ACT_NONE;
        op->depth_multiplier = (int)(M / C);
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_MAX_POOL_2D, &ui, 1, &yi, 1, 0, &op));
        op->padding = QF_TFL_PAD_VALID;
        op->filter_w = op->filter_h = 1;
        op->stride_h = op->stride_w = 1;
        op->activation = act;
        return QF_OK;
    }
    QF_TRY(qf_tfl_add_op(e, n, dw ? QF_TFL_DEPTHWISE_CONV_2D : QF_TFL_CONV_2D, in, 3, &yi, 1, macs, &op));
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
qf_status qf_tfl_emit_qmatmul(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    (void)row; /* FULLY_CONNECTED */
    qf_tfl_qp xq, yq;
    if (!qf_tfl_qp_from(n->inputs[1], n->inputs[2], &xq) || !qf_tfl_qp_from(n->inputs[6], n->inputs[7], &yq))
        return qf_tfl_refuse(e, n, "activation qparams are not per-tensor int8");
    const qf_value *b = n->inputs[3];
    if (!qf_value_is_const(b))
        return qf_tfl_refuse(e, n, "a MatMul of two activations (BATCH_MATMUL) is not in the exported op set");
    const qf_tensor *bt = &b->type;
    int64_t K = bt->dims[0], M = bt->dims[1];
    int8_t *wd = qf_tfl_ex_alloc(e, (size_t)(K * M));
    if (!wd) return QF_ERR_NOMEM;
    const int8_t *src = bt->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) wd[m * K + k] = src[k * M + m];
    return emit_fc(e, n, n->inputs[0], n->outputs[0], b, wd, M, K, n->inputs[4], n->inputs[5], NULL, xq, yq,
                   fused_act(n, yq));
}

/* MAX_POOL_2D (the int8 MaxPool) and AVERAGE_POOL_2D (QAVG_POOL). */
qf_status qf_tfl_emit_pool(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const bool avg = n->op == QF_OP_QAVG_POOL;
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    if (x->type.ndim != 4) return qf_tfl_refuse(e, n, "only 2-D pooling (rank-4 tensors) has a TFLite form");
    int cnt;
    const int64_t *ks = qf_node_attr_ints(n, "kernel_shape", &cnt);
    if (!ks || cnt != 2) return qf_tfl_refuse(e, n, "kernel_shape is not 2-D");
    const int64_t *dl = qf_node_attr_ints(n, "dilations", &cnt);
    for (int i = 0; dl && i < cnt; i++)
        if (dl[i] != 1) return qf_tfl_refuse(e, n, "dilated pooling has no TFLite form");
    geom g;
    QF_TRY(get_geom(e, n, &x->type, &y->type, ks, &g));
    int act = QF_TFL_ACT_NONE;
    if (avg) {
        qf_tfl_qp yq;
        if (!qf_tfl_qp_from(n->inputs[3], n->inputs[4], &yq))
            return qf_tfl_refuse(e, n, "output qparams are not per-tensor int8");
        act = fused_act(n, yq);
        if (act < 0) return qf_tfl_refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    }
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    int padding = tfl_padding(&g);
    if (padding < 0) {
        /* explicit pads: an average that counts them is a PAD (zero point: the
         * real 0) + VALID pool; TFLite's SAME average excludes them */
        const char *why = NULL;
        if (!avg) {
            qf_status st;
            geom gp = g;
            why = max_pool_pad(e, n, &gp, xi, &xi, &st);
            QF_TRY(st);
            if (!why) g = gp;
        }
        if (why || (avg && qf_node_attr_int(n, "count_include_pad", 0) == 0))
            return qf_tfl_refuse(e, n, "pads [%lld, %lld, %lld, %lld]%s are neither SAME nor VALID for TFLite (%s)",
                          (long long)g.pb[0], (long long)g.pb[1], (long long)g.pe[0], (long long)g.pe[1],
                          qf_node_attr_int(n, "ceil_mode", 0) ? " with ceil_mode" : "",
                          avg ? "and the average excludes them" : why);
        if (avg) {
            /* ceil_mode's partial windows divide by fewer elements */
            for (int i = 0; i < 2; i++)
                if ((g.in[i] + g.pb[i] + g.pe[i] - g.k[i]) / g.s[i] + 1 != g.out[i])
                    return qf_tfl_refuse(e, n, "an average with ceil_mode's partial windows has no TFLite form");
            QF_TRY(add_pad(e, n, xi, &g, &xi));
        }
        padding = QF_TFL_PAD_VALID;
    } else if (avg && padding == QF_TFL_PAD_SAME && (g.pb[0] || g.pb[1] || g.pe[0] || g.pe[1]) &&
               qf_node_attr_int(n, "count_include_pad", 0) != 0) {
        return qf_tfl_refuse(e, n, "count_include_pad = 1 with SAME pads (TFLite's average excludes the padding)");
    }
    qf_tfl_op *op;
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, &xi, 1, &yi, 1, 0, &op));
    op->padding = padding;
    op->stride_h = (int)g.s[0];
    op->stride_w = (int)g.s[1];
    op->filter_h = (int)g.k[0];
    op->filter_w = (int)g.k[1];
    op->activation = act;
    return QF_OK;
}

/* A reduction (MEAN, SUM, REDUCE_MAX) of int8 x into y over the NCHW axes
 * `axes` (non-negative), mapped to NHWC. */
static qf_status tfl_reduce(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row, const qf_value *x,
                            const qf_value *y, const int64_t *axes, int cnt)
{
    const int r = x->type.ndim;
    bool red[QF_MAX_DIMS] = {false};
    for (int i = 0; i < cnt; i++) red[qf_tfl_phys_axis(r, (int)axes[i])] = true;
    const bool keep = qf_node_attr_int(n, "keepdims", 1) != 0;
    if (!keep && r == 4) {
        /* the kept axes must come out in the same order in both layouts */
        int last = -1;
        for (int i = 0; i < 4; i++)
            if (!red[i]) {
                if (qf_tfl_nhwc_from[i] < last)
                    return qf_tfl_refuse(e, n,
                                         "a reduction without keepdims that reorders NHWC axes");
                last = qf_tfl_nhwc_from[i];
            }
    }
    int32_t pa[QF_MAX_DIMS];
    int na = 0;
    for (int i = 0; i < r; i++)
        if (red[i]) pa[na++] = i;
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    int ai = qf_tfl_i32_tensor(e, qf_tfl_node_name(e, n), "axes", pa, na, false);
    QF_TRY(qf_tfl_need(ai));
    qf_tfl_op *op;
    int32_t in[2] = {xi, ai};
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, in, 2, &yi, 1, 0, &op));
    op->keep_dims = keep;
    return QF_OK;
}

/* MEAN / SUM over the lowered node's axes (QMEAN, QSUM: non-negative). */
qf_status qf_tfl_emit_qmean(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    int cnt = 0;
    const int64_t *axes = qf_node_attr_ints(n, "axes", &cnt);
    qf_tfl_qp yq;
    if (!qf_tfl_qp_from(n->inputs[3], n->inputs[4], &yq))
        return qf_tfl_refuse(e, n, "output qparams are not per-tensor int8");
    if (fused_act(n, yq) != QF_TFL_ACT_NONE)
        return qf_tfl_refuse(e, n, "TFLite's MEAN has no fused activation");
    /* TFLite 2.2 computes an int8 MEAN in integers (what qmean computes:
     * src/ops/int8/qpool.c) only for a 4-D input reduced over H and W with
     * keep_dims; any other form takes a float path that rounds apart. A mean
     * over W alone of a tensor whose H is 1 (a 1-D model's, conv1d_to_2d), or
     * over H and W without keepdims, is that same mean: MEAN over [1, 2] with
     * keep_dims, then a RESHAPE to the output's shape. */
    const qf_value *x = n->inputs[0];
    const int r = x->type.ndim;
    bool red[4] = {false};
    bool hw = r == 4 && cnt > 0;
    for (int i = 0; hw && i < cnt; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        int p = a >= 0 && a < r ? qf_tfl_phys_axis(r, (int)a) : 0;
        hw = p == 1 || p == 2;
        if (hw) red[p] = true;
    }
    int xi;
    if (hw) {
        QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
        const int32_t *xs = e->t[xi].shape;
        hw = (red[1] || xs[1] == 1) && (red[2] || xs[2] == 1);
    }
    if (!hw || (red[1] && red[2] && qf_node_attr_int(n, "keepdims", 1) != 0))
        return tfl_reduce(e, n, row, x, n->outputs[0], axes, cnt);
    int yi, mi;
    QF_TRY(qf_tfl_act_tensor(e, n, n->outputs[0], &yi));
    const int32_t *xs = e->t[xi].shape;
    int32_t ms[4] = {xs[0], 1, 1, xs[3]};
    char name[512];
    snprintf(name, sizeof name, "%.480s_hw", e->t[yi].name);
    mi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 4, ms, NULL, 0, 1, e->t[yi].scale, e->t[yi].zero_point, 0, false);
    QF_TRY(qf_tfl_need(mi));
    static const int32_t hw_axes[2] = {1, 2};
    int ai = qf_tfl_i32_tensor(e, qf_tfl_node_name(e, n), "axes", hw_axes, 2, false);
    QF_TRY(qf_tfl_need(ai));
    qf_tfl_op *op;
    int32_t in[2] = {xi, ai};
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, in, 2, &mi, 1, 0, &op));
    op->keep_dims = 1;
    return add_reshape(e, n, mi, e->t[yi].ndim, e->t[yi].shape, NULL, &yi);
}

/* REDUCE_MAX of an int8 tensor (a ReduceMax the lowering made int8: input
 * and output share their qparams), axes from the attribute or the constant
 * input. TFLite 2.2's int8 REDUCE_MAX takes the maximum of the integers. */
qf_status qf_tfl_emit_reduce_max(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    if (x->type.dtype != QF_DTYPE_I8)
        return qf_tfl_refuse(e, n, "not an int8 ReduceMax (its input and output qparams differ)");
    const int r = x->type.ndim;
    int cnt = 0;
    const int64_t *a = qf_node_attr_ints(n, "axes", &cnt);
    int64_t axes[QF_MAX_DIMS];
    if (n->ninputs > 1 && n->inputs[1]) {
        const qf_tensor *at = &n->inputs[1]->type;
        if (!qf_value_is_const(n->inputs[1]) || qf_tensor_numel(at) > QF_MAX_DIMS)
            return qf_tfl_refuse(e, n, "its axes are not a constant");
        cnt = (int)qf_tensor_numel(at);
        for (int i = 0; i < cnt; i++) axes[i] = qf_tensor_get_i64(at, i);
    } else {
        for (int i = 0; i < cnt; i++) axes[i] = a[i];
    }
    if (cnt == 0) {
        if (qf_node_attr_int(n, "noop_with_empty_axes", 0))
            return qf_tfl_refuse(e, n, "a ReduceMax of no axes (noop_with_empty_axes)");
        for (int i = 0; i < r; i++) axes[i] = i;
        cnt = r;
    }
    for (int i = 0; i < cnt; i++) {
        if (axes[i] < 0) axes[i] += r;
        if (axes[i] < 0 || axes[i] >= r) return qf_tfl_refuse(e, n, "axis out of range");
    }
    return tfl_reduce(e, n, row, x, y, axes, cnt);
}

/* ADD / MUL from the lowered QADD / QMUL. */
qf_status qf_tfl_emit_qbinary(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    qf_tfl_qp aq, bq, yq;
    if (!qf_tfl_qp_from(n->inputs[1], n->inputs[2], &aq) || !qf_tfl_qp_from(n->inputs[4], n->inputs[5], &bq) ||
        !qf_tfl_qp_from(n->inputs[6], n->inputs[7], &yq))
        return qf_tfl_refuse(e, n, "qparams are not per-tensor int8");
    int act = fused_act(n, yq);
    if (act < 0) return qf_tfl_refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    const int rank = n->outputs[0]->type.ndim;
    int ai, bi, yi;
    QF_TRY(qf_tfl_operand(e, n, n->inputs[0], aq, rank, &ai));
    QF_TRY(qf_tfl_operand(e, n, n->inputs[3], bq, rank, &bi));
    QF_TRY(qf_tfl_act_tensor(e, n, n->outputs[0], &yi));
    qf_tfl_op *op;
    int32_t in[2] = {ai, bi};
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, in, 2, &yi, 1, 0, &op));
    op->activation = act;
    return QF_OK;
}

/* Tensor xi requantized to qparams yq by an int8 -> int8 QUANTIZE (TFLite's
 * Requantize, as qconcat.c computes it), named after node n and the input
 * slot; xi itself when it has them. */
static qf_status requant_to(qf_tfl_ex *e, const qf_node *n, int slot, int xi, qf_tfl_qp yq, int *out)
{
    const qf_tfl_tensor *t = &e->t[xi];
    if (t->nq == 1 && t->scale[0] == yq.scale && t->zero_point[0] == yq.zp) {
        *out = xi;
        return QF_OK;
    }
    const char *nn = qf_tfl_node_name(e, n);
    size_t len = strlen(nn) + sizeof "_in_requant" + 12;
    char *name = qf_tfl_ex_alloc(e, len);
    if (!name) return QF_ERR_NOMEM;
    snprintf(name, len, "%s_in%d_requant", nn, slot);
    int32_t shape[QF_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int32_t) * (size_t)t->ndim);
    int64_t zp = yq.zp;
    int ri = qf_tfl_add_tensor(e, name, QF_TFL_INT8, e->t[xi].ndim, shape, NULL, 0, 1, &yq.scale, &zp, 0, false);
    QF_TRY(qf_tfl_need(ri));
    qf_tfl_op *op;
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, &xi, 1, &ri, 1, 0, &op));
    *out = ri;
    return QF_OK;
}

/* CONCATENATION from the lowered QCONCAT (inputs: s_y, zp_y, then x, s, zp
 * each). TFLite's int8 CONCATENATION (2.2 and today's) refuses an input whose
 * qparams are not the output's (its Prepare checks scale and zero point):
 * such an input is requantized first by a QUANTIZE, as TFLite's converter
 * does. */
qf_status qf_tfl_emit_qconcat(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *y = n->outputs[0];
    const int rank = y->type.ndim, k = (n->ninputs - 2) / 3;
    int64_t axis = qf_node_attr_int(n, "axis", 0);
    if (axis < 0) axis += rank;
    qf_tfl_qp yq;
    if (!qf_tfl_qp_from(n->inputs[0], n->inputs[1], &yq))
        return qf_tfl_refuse(e, n, "output qparams are not per-tensor int8");
    int32_t *in = qf_tfl_ex_alloc(e, sizeof *in * (size_t)(k > 0 ? k : 1));
    if (!in) return QF_ERR_NOMEM;
    for (int i = 0; i < k; i++) {
        const qf_value *x = n->inputs[2 + 3 * i];
        qf_tfl_qp xq;
        if (!qf_tfl_qp_from(n->inputs[3 + 3 * i], n->inputs[4 + 3 * i], &xq))
            return qf_tfl_refuse(e, n, "input qparams are not per-tensor int8");
        int xi;
        QF_TRY(qf_tfl_operand(e, n, x, xq, rank, &xi));
        QF_TRY(requant_to(e, n, i, xi, yq, &in[i]));
    }
    int yi;
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, in, k, &yi, 1, 0, &op));
    op->axis = qf_tfl_phys_axis(rank, (int)axis);
    op->activation = QF_TFL_ACT_NONE;
    return QF_OK;
}

/* A tensor named <node>_<what> of x's shape (every dim 1 when ones), int8 at
 * (scale, zp); data (one value, or NULL: an activation). */
static qf_status hs_tensor(qf_tfl_ex *e, const qf_node *n, int xi, const char *what, bool ones, float scale,
                           int32_t zp, const int8_t *data, int *out)
{
    const char *nn = qf_tfl_node_name(e, n);
    size_t len = strlen(nn) + strlen(what) + 2;
    char *name = qf_tfl_ex_alloc(e, len);
    if (!name) return QF_ERR_NOMEM;
    snprintf(name, len, "%s_%s", nn, what);
    const qf_tfl_tensor *t = &e->t[xi];
    int32_t shape[QF_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) shape[i] = ones ? 1 : t->shape[i];
    int64_t z = zp;
    *out = qf_tfl_add_tensor(e, name, QF_TFL_INT8, t->ndim, shape, data, data ? 1 : 0, 1, &scale, &z, 0, data != NULL);
    return qf_tfl_need(*out);
}

/* HardSigmoid (alpha 1/6, beta 1/2) from the lowered QLUT: TFLite has no
 * HARD_SIGMOID, so ADD(x, 3) with RELU6 into a tensor at 6 s_y, then MUL by
 * 1/6 into s_y (qf_hard_sigmoid_form, fixed_point.h: the integers qlut.c
 * computes). The constants are [1, ..., 1] of x's rank (ArmNN broadcasts
 * operands of equal rank). */
static qf_status emit_hard_sigmoid(qf_tfl_ex *e, qf_node *n, qf_tfl_qp yq)
{
    qf_hard_sigmoid_form f;
    qf_hard_sigmoid_form_of(yq.scale, yq.zp, &f);
    int xi, yi, c3, c6, ti;
    QF_TRY(qf_tfl_act_tensor(e, n, n->inputs[0], &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, n->outputs[0], &yi));
    QF_TRY(hs_tensor(e, n, xi, "three", true, f.c3_scale, 0, &f.c3, &c3));
    QF_TRY(hs_tensor(e, n, xi, "sixth", true, f.c6_scale, 0, &f.c6, &c6));
    QF_TRY(hs_tensor(e, n, xi, "relu6", false, f.t_scale, yq.zp, NULL, &ti));
    qf_tfl_op *op;
    int32_t add_in[2] = {xi, c3}, mul_in[2] = {ti, c6};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_ADD, add_in, 2, &ti, 1, 0, &op));
    op->activation = QF_TFL_ACT_RELU6;
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_MUL, mul_in, 2, &yi, 1, 0, &op));
    op->activation = QF_TFL_ACT_NONE;
    return QF_OK;
}

/* HARD_SWISH, LEAKY_RELU (alpha in its options: TFLite's int8 kernel is
 * the table qlut.c computes), or a HardSigmoid's ADD and MUL, from the
 * lowered QLUT (inputs: x, s_x, zp_x, s_y, zp_y; qfold_fn names the
 * function). */
qf_status qf_tfl_emit_qlut(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    qf_tfl_qp xq, yq;
    const char *fn = qf_node_attr_string(n, "qfold_fn", "");
    const bool flt = strcmp(fn, "exp") == 0 || strcmp(fn, "log") == 0;
    const bool sigmoid = strcmp(fn, "hard_sigmoid") == 0, leaky = strcmp(fn, "leaky_relu") == 0;
    if ((!flt && !sigmoid && !leaky && strcmp(fn, "hard_swish") != 0) ||
        !qf_tfl_qp_from(n->inputs[1], n->inputs[2], &xq) || !qf_tfl_qp_from(n->inputs[3], n->inputs[4], &yq))
        return qf_tfl_refuse(e, n, "not an int8 HardSwish, HardSigmoid, LeakyRelu, Exp or Log of per-tensor qparams");
    if (sigmoid) {
        e->source = "HardSigmoid";
        return emit_hard_sigmoid(e, n, yq);
    }
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, n->inputs[0], &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, n->outputs[0], &yi));
    qf_tfl_op *op;
    if (leaky) {
        e->source = "LeakyRelu";
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_LEAKY_RELU, &xi, 1, &yi, 1, 0, &op));
        op->alpha = qf_node_attr_float(n, "alpha", 0.01f);
        return QF_OK;
    }
    if (!flt) return qf_tfl_add_op(e, n, row->builtin, &xi, 1, &yi, 1, 0, &op);
    /* TFLite 2.2 has no int8 EXP / LOG: DEQUANTIZE -> float op -> QUANTIZE,
     * which the int8 table computes (src/ops/int8/qlut.c) */
    int fi[2];
    for (int k = 0; k < 2; k++) {
        char name[512];
        snprintf(name, sizeof name, "%.480s_%s", n->outputs[0]->name, k ? "float_out" : "float_in");
        fi[k] = qf_tfl_add_tensor(e, name, QF_TFL_FLOAT32, e->t[yi].ndim, e->t[yi].shape, NULL, 0,
                                  0, NULL, NULL, 0, false);
        QF_TRY(qf_tfl_need(fi[k]));
    }
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_DEQUANTIZE, &xi, 1, &fi[0], 1, 0, &op));
    QF_TRY(
        qf_tfl_add_op(e, n, fn[0] == 'e' ? QF_TFL_EXP : QF_TFL_LOG, &fi[0], 1, &fi[1], 1, 0, &op));
    return qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, &fi[1], 1, &yi, 1, 0, &op);
}

/* TRANSPOSE_CONV from the lowered QCONV_TRANSPOSE: weights [C, M, kh, kw]
 * -> [M, kh, kw, C] (OHWI, per channel on 0), output_shape an input. TFLite
 * crops total/2 at the start (SAME) or nothing (VALID); other pads are refused. */
qf_status qf_tfl_emit_qconv_transpose(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    (void)row; /* TRANSPOSE_CONV (+ ADD) */
    qf_tfl_qp xq, yq;
    if (!qf_tfl_qp_from(n->inputs[1], n->inputs[2], &xq) || !qf_tfl_qp_from(n->inputs[6], n->inputs[7], &yq))
        return qf_tfl_refuse(e, n, "activation qparams are not per-tensor int8");
    const qf_value *x = n->inputs[0], *y = n->outputs[0], *w = n->inputs[3], *bq = n->ninputs > 8 ? n->inputs[8] : NULL;
    const qf_tensor *wt = &w->type;
    if (x->type.ndim != 4 || wt->ndim != 4)
        return qf_tfl_refuse(e, n, "only 2-D transposed convolutions have a TFLite form");
    if (qf_node_attr_int(n, "group", 1) != 1) return qf_tfl_refuse(e, n, "a grouped ConvTranspose has no TFLite form");
    int cnt;
    const int64_t *a = qf_node_attr_ints(n, "dilations", &cnt);
    for (int i = 0; a && i < cnt; i++)
        if (a[i] != 1) return qf_tfl_refuse(e, n, "a dilated ConvTranspose has no TFLite form");
    int act = fused_act(n, yq);
    if (act < 0) return qf_tfl_refuse(e, n, "its activation is none of NONE, RELU, RELU6");
    const float *sw;
    int64_t nw;
    QF_TRY(weight_qp(e, n, n->inputs[4], n->inputs[5], &sw, &nw));
    int64_t C = wt->dims[0], M = wt->dims[1], k[2] = {wt->dims[2], wt->dims[3]}, s[2] = {1, 1}, pb[2] = {0, 0};
    if ((a = qf_node_attr_ints(n, "strides", &cnt)) && cnt == 2) memcpy(s, a, sizeof s);
    if ((a = qf_node_attr_ints(n, "pads", &cnt)) && cnt == 4) pb[0] = a[0], pb[1] = a[1];
    if (strcmp(qf_node_attr_string(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
        return qf_tfl_refuse(e, n, "auto_pad on a ConvTranspose is not exported");
    /* TFLite crops nothing (VALID) or, SAME, total/2 at the start where total
     * = (ceil(out/s) - 1) * s + k - out. Other crops (PyTorch's padding 1 with
     * output_padding 1) as SAME with the kernel embedded at offset off in k'
     * >= k taps (zeros elsewhere), so that SAME's crop lands where ONNX's does. */
    bool valid = true, same = true;
    int64_t kk[2] = {k[0], k[1]}, off[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        int64_t in = x->type.dims[2 + i], out = y->type.dims[2 + i];
        if (in <= 0 || out <= 0) return qf_tfl_refuse(e, n, "spatial size unknown");
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
        return qf_tfl_refuse(e, n, "pads / output_padding TFLite's TRANSPOSE_CONV cannot express (it crops total/2 "
                            "at the start, SAME, or nothing, VALID)");
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    const int64_t wn = C * M * kk[0] * kk[1], wdims[4] = {C, M, kk[0], kk[1]};
    const int8_t *wsrc = wt->data;
    if (kk[0] != k[0] || kk[1] != k[1]) {
        int8_t *big = qf_tfl_ex_alloc(e, (size_t)wn);
        if (!big) return QF_ERR_NOMEM;
        for (int64_t cm = 0; cm < C * M; cm++)
            for (int64_t i = 0; i < k[0]; i++)
                memcpy(big + (cm * kk[0] + i + off[0]) * kk[1] + off[1], wsrc + (cm * k[0] + i) * k[1], (size_t)k[1]);
        wsrc = big;
        k[0] = kk[0];
        k[1] = kk[1];
    }
    int8_t *wd = qf_tfl_ex_alloc(e, (size_t)wn);
    if (!wd) return QF_ERR_NOMEM;
    static const int mhwc[4] = {1, 2, 3, 0};
    qf_tfl_permute4(wsrc, wd, wdims, mhwc, 1);
    int32_t wshape[4] = {(int32_t)M, (int32_t)k[0], (int32_t)k[1], (int32_t)C};
    int wi = weight_tensor(e, w, 4, wshape, wd, (size_t)wn, sw, nw, 0);
    QF_TRY(qf_tfl_need(wi));
    int oi = qf_tfl_i32_tensor(e, qf_tfl_node_name(e, n), "output_shape", e->t[yi].shape, 4, false);
    QF_TRY(qf_tfl_need(oi));
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
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_TRANSPOSE_CONV, in, 3, &yi, 1, macs, &op));
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
    int ti = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 4, e->t[yi].shape, NULL, 0, 1, &ts, &tz, 0, false);
    QF_TRY(qf_tfl_need(ti));
    int32_t in[3] = {oi, wi, xi};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_TRANSPOSE_CONV, in, 3, &ti, 1, macs, &op));
    op->padding = valid ? QF_TFL_PAD_VALID : QF_TFL_PAD_SAME;
    op->stride_h = (int)s[0];
    op->stride_w = (int)s[1];
    /* the bias as an int8 constant [1, 1, 1, M] */
    float bs = fmaxf(fabsf(bmin), fabsf(bmax)) / 127.0f;
    if (!(bs > 0.0f)) bs = 1.0f;
    int8_t *bv = qf_tfl_ex_alloc(e, (size_t)M);
    if (!bv) return QF_ERR_NOMEM;
    for (int64_t c = 0; c < M; c++) {
        double q = nearbyint((double)bd[c] * xq.scale * sw[nw == 1 ? 0 : c] / bs);
        bv[c] = (int8_t)(q < -127 ? -127 : q > 127 ? 127 : q);
    }
    int64_t bz = 0;
    int32_t bshape[4] = {1, 1, 1, (int32_t)M};
    snprintf(name, sizeof name, "%.480s_bias_int8", qf_tfl_node_name(e, n));
    int bi2 = qf_tfl_add_tensor(e, name, QF_TFL_INT8, 4, bshape, bv, (size_t)M, 1, &bs, &bz, 0, true);
    QF_TRY(qf_tfl_need(bi2));
    int32_t ain[2] = {ti, bi2};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_ADD, ain, 2, &yi, 1, 0, &op));
    op->activation = act;
    return QF_OK;
}
