/* The int8 executor's lowering: recognised DQ -> op -> [ReLU] -> Q groups of
 * a QDQ graph become one integer node, so that `qfold run` computes them as
 * the NPU does (int8 x int8 -> int32, TFLite's fixed-point requantization,
 * the activation as a clamp of the output integers):
 *
 *   before:  xq ─DQ─▶ x ─┐
 *            Wq ─DQ─▶ W ─┼─Conv─▶ y ─Relu─▶ z ─Q─▶ zq
 *            bq ─DQ─▶ b ─┘
 *   after:   QLinearConv(xq, s_x, zp_x, Wq, s_W, zp_W, s_z, zp_z, bq)
 *              {qfold_requant = 1, qfold_clamp = [zp_z, 127]} ─▶ zq
 *
 * Requantization: TFLite's fixed point by default (what a TFLite-based NPU
 * toolchain computes), or ONNX's float definition (what ONNX Runtime's
 * integer kernels compute) on request. The two round differently now and
 * then (1 LSB, ~0.05 % of a layer's outputs); a later layer can amplify such
 * a difference by its gain, so deep models differ by a few LSB between the
 * two, and each matches its own reference.
 *
 * A Gemm group (a Linear layer) becomes the same integer conv, 1x1, between
 * two int8 reshapes. A DQ -> MaxPool -> Q with one set of qparams becomes the
 * MaxPool of the integers (exact). A DQ -> MatMul -> [act] -> Q group (two
 * int8 activations, TFLite's BATCH_MATMUL, or an activation by a constant
 * int8 matrix per tensor or per column, its FULLY_CONNECTED) becomes ONNX's
 * QLinearMatMul with the same two attributes, with either requantization.
 *
 * The rest have no integer op in ONNX, so they are lowered with TFLite's
 * requantization only; with ONNX's (`--requant onnx`, what ONNX Runtime's
 * integer kernels compute) they stay DQ -> float op -> Q. Each becomes one of
 * qfold's internal int8 ops, with TFLite's reference integer arithmetic:
 *   Add / Mul (broadcasting) -> QF_OP_QADD / QF_OP_QMUL (src/ops/qadd.c)
 *   ConvTranspose           -> QF_OP_QCONV_TRANSPOSE (src/ops/qconv_transpose.c;
 *                              weight per channel on axis 1, int32 bias)
 *   AveragePool, one set of qparams -> QF_OP_QAVG_POOL (src/ops/int8/qpool.c)
 *   GlobalAveragePool, ReduceMean over trailing axes -> QF_OP_QMEAN (int8/qpool.c)
 *   Concat                  -> QF_OP_QCONCAT (src/ops/qconcat.c: inputs of the
 *                              output's qparams copied, others requantized)
 *   HardSwish               -> QF_OP_QLUT (src/ops/qlut.c: TFLite's fixed-point
 *                              int8 HardSwish, tabulated)
 *   HardSigmoid (1/6, 1/2)  -> QF_OP_QLUT (the ADD + RELU6, MUL chain the TFLite
 *                              export writes, tabulated; Sigmoid / Tanh /
 *                              Softmax stay DQ -> float -> Q: TFLite's
 *                              interpreter computes their int8 tables in float)
 *   LeakyRelu (alpha >= 0)  -> QF_OP_QLUT (TFLite's int8 LEAKY_RELU: identity
 *                              and alpha multipliers, tabulated)
 * A group is lowered only where its kernel takes it: per-tensor int8
 * activations, constant qparams, every fixed-point multiplier's shift within
 * the accumulator's range (else the kernel's prepare would refuse the node),
 * and for an AveragePool the same qparams in and out (TFLite's has no
 * requantization); otherwise it keeps running as written, as does everything
 * else (DQ -> float op -> Q). The lowered graph is for execution only: the
 * attributes and internal ops are qfold's own and no exporter should see
 * them (`qfold run` lowers its private copy).
 *
 * Which op lowers how is data: each op's quantization row (op_quant.c) holds
 * its entry (`lower`, one qf_lower_<op> below, declared in lower.h with the
 * helpers an entry is written with) and whether it runs with ONNX's
 * requantization too; qf_quant_lower_int8 (lower_pass.c) calls the row's
 * entry for every node.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/fixed_point.h"
#include "ops/math/requant.h"
#include "quant/lower.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

const qf_node *qf_lower_dq_of(const qf_value *v)
{
    return v && v->producer && v->producer->op == QF_OP_DEQUANTIZE ? v->producer : NULL;
}

static bool scalar_const(const qf_value *v, qf_dtype dt)
{
    return v && qf_value_is_const(v) && v->type.dtype == dt && qf_tensor_numel(&v->type) == 1;
}

bool qf_lower_per_tensor_s8(const qf_node *qdq)
{
    return qdq->ninputs == 3 && scalar_const(qdq->inputs[1], QF_DTYPE_F32) &&
           scalar_const(qdq->inputs[2], QF_DTYPE_I8) && qdq->inputs[0]->type.dtype == QF_DTYPE_I8;
}

/* The bias is int32 at scale s_x * s_W (as every QDQ converter writes it). */
static bool bias_fits(const qf_node *dqb, const qf_node *dqx, const qf_node *dqw, int64_t group)
{
    if (!dqb) return true;
    const qf_value *bq = dqb->inputs[0], *sb = dqb->inputs[1];
    if (!qf_value_is_const(bq) || bq->type.dtype != QF_DTYPE_I32 || !qf_value_is_const(sb)) return false;
    float sx = *(const float *)dqx->inputs[1]->type.data;
    const float *sw = dqw->inputs[1]->type.data, *s = sb->type.data;
    int64_t nw = qf_tensor_numel(&dqw->inputs[1]->type), n = qf_tensor_numel(&sb->type);
    /* group > 1: a ConvTranspose's M/group weight scales, repeated per group */
    if (n != nw && n != 1 && !(group > 1 && n == nw * group)) return false;
    for (int64_t c = 0; c < n; c++) {
        float want = sx * sw[nw == 1 ? 0 : c % nw];
        if (fabsf(s[c] - want) > 1e-6f * fabsf(want)) return false;
    }
    return true;
}

/* The clamp of a ReLU-range activation in the output's integers (TFLite's
 * CalculateActivationRangeQuantized); false for other ops. */
static bool act_clamp(const qf_node *act, float ys, int32_t yz, int64_t *lo, int64_t *hi)
{
    double mn = -INFINITY, mx = INFINITY;
    if (act->op == QF_OP_RELU) {
        mn = 0.0;
    } else if (act->op == QF_OP_RELU6) {
        mn = 0.0;
        mx = 6.0;
    } else if (act->op == QF_OP_CLIP) {
        for (int i = 1; i < act->ninputs && i < 3; i++) {
            const qf_value *b = act->inputs[i];
            if (!b) continue;
            if (!scalar_const(b, QF_DTYPE_F32)) return false;
            if (i == 1) mn = *(const float *)b->type.data;
            else mx = *(const float *)b->type.data;
        }
    } else {
        return false;
    }
    *lo = -128;
    *hi = 127;
    if (isfinite(mn)) {
        double q = yz + nearbyint(mn / ys);
        *lo = q > -128 ? (int64_t)fmin(q, 127) : -128;
    }
    if (isfinite(mx)) {
        double q = yz + nearbyint(mx / ys);
        *hi = q < 127 ? (int64_t)fmax(q, -128) : 127;
    }
    return *lo <= *hi;
}

bool qf_lower_group_tail(const qf_node *n, const qf_node **q_out, const qf_node **act_out, int64_t clamp[2])
{
    const qf_value *y = n->outputs[0];
    if (y->nuses != 1 || y->is_output) return false;
    const qf_node *act = NULL, *q = y->uses[0].node;
    if (q->op != QF_OP_QUANTIZE) {
        act = q;
        const qf_value *z = act->outputs[0];
        if (act->noutputs != 1 || z->nuses != 1 || z->is_output || y->uses[0].slot != 0) return false;
        q = z->uses[0].node;
        if (q->op != QF_OP_QUANTIZE) return false;
    }
    if (q->ninputs != 3 || !scalar_const(q->inputs[1], QF_DTYPE_F32) || !scalar_const(q->inputs[2], QF_DTYPE_I8))
        return false;
    float ys = *(const float *)q->inputs[1]->type.data;
    int32_t yz = *(const int8_t *)q->inputs[2]->type.data;
    clamp[0] = -128;
    clamp[1] = 127;
    if (act && !act_clamp(act, ys, yz, &clamp[0], &clamp[1])) return false;
    *q_out = q;
    *act_out = act;
    return true;
}

/* A constant int8 weight behind a DequantizeLinear, per tensor or per
 * channel on `axis`, with an int8 zero point. */
static bool int8_weight(const qf_node *dqw, int axis)
{
    if (!dqw || dqw->ninputs != 3 || !qf_value_is_const(dqw->inputs[0]) || dqw->inputs[0]->type.dtype != QF_DTYPE_I8 ||
        !qf_value_is_const(dqw->inputs[1]) || !qf_value_is_const(dqw->inputs[2]) ||
        dqw->inputs[2]->type.dtype != QF_DTYPE_I8)
        return false;
    return qf_tensor_numel(&dqw->inputs[1]->type) == 1 || qf_node_attr_int(dqw, "axis", 1) == axis;
}

/* The integer conv of a group: QLinearConv(in) {attrs of `like`, the
 * requantization, the clamp}, output typed `type`. */
static qf_node *int8_conv(qf_graph *g, const char *name, qf_value *const *in, int nin, const qf_node *like,
                          qf_int8_requant_kind rq, const int64_t clamp[2])
{
    qf_node *ql = qf_graph_add_node(g, QF_OP_QLINEAR_CONV, name, nin, in, 1);
    if (!ql) return NULL;
    qf_status st = qf_node_copy_attrs(g, ql, like);
    if (st == QF_OK && rq == QF_REQUANT_FIXED_POINT) st = qf_node_set_attr_int(g, ql, "qfold_requant", 1);
    if (st == QF_OK) st = qf_node_set_attr_ints(g, ql, "qfold_clamp", clamp, 2);
    return st == QF_OK ? ql : NULL;
}

/* Lower conv node n if it heads a DQ -> Conv -> [act] -> Q group. */
qf_status qf_lower_conv(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]), *dqw = qf_lower_dq_of(n->inputs[1]);
    const qf_node *dqb = n->ninputs > 2 && n->inputs[2] ? qf_lower_dq_of(n->inputs[2]) : NULL;
    if (!dqx || !dqw || (n->ninputs > 2 && n->inputs[2] && !dqb)) return QF_OK;
    if (!qf_lower_per_tensor_s8(dqx) || !int8_weight(dqw, 0)) return QF_OK;
    if (!bias_fits(dqb, dqx, dqw, 1)) {
        if (ctx) qf_pass_skip(ctx, n, "bias scale is not s_x * s_W: left as DQ -> Conv -> Q");
        return QF_OK;
    }
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    qf_value *in[9] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], dqw->inputs[0], dqw->inputs[1],
                       dqw->inputs[2], q->inputs[1], q->inputs[2], dqb ? dqb->inputs[0] : NULL};
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_node *ql = int8_conv(g, name, in, dqb ? 9 : 8, n, rq, clamp);
    if (!ql) return QF_ERR_NOMEM;
    ql->outputs[0]->type = q->outputs[0]->type;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 conv (%s%s) -> '%s'", act ? qf_op_name(act->op) : "no activation",
                        dqb ? ", int32 bias" : "", q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], ql->outputs[0]));
    *done = true;
    return QF_OK;
}

/* An int64 shape constant for a Reshape. */
static qf_value *shape_const(qf_graph *g, const char *name, int64_t a, int64_t b, int64_t c, int64_t d, int n)
{
    qf_tensor t;
    int64_t len = n;
    if (qf_tensor_init(&t, QF_DTYPE_I64, 1, &len) != QF_OK) return NULL;
    int64_t v[4] = {a, b, c, d};
    memcpy(t.data, v, sizeof(int64_t) * (size_t)n);
    qf_value *k = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!k) qf_tensor_free(&t);
    return k;
}

/* Lower a Gemm (a Linear layer: x [N, K] times W, bias) heading a
 * DQ -> Gemm -> [act] -> Q group: an integer 1x1 conv between two int8
 * reshapes, [N, K] -> [N, K, 1, 1] -> [N, M, 1, 1] -> [N, M]. The weight
 * becomes [M, K, 1, 1] (transposed when the Gemm's is [K, M]). */
qf_status qf_lower_gemm(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    *done = false;
    /* qfold's own linear (canonicalize: a Gemm or MatMul + Add with a
     * constant weight, [out, in]) is written as Gemm transB=1 when its input
     * is 2-D: lowered as that Gemm, so that a graph in memory runs what its
     * file runs once loaded. */
    bool lin = n->op == QF_OP_LINEAR;
    if (!lin && (qf_node_attr_int(n, "transA", 0) != 0 || qf_node_attr_float(n, "alpha", 1.0f) != 1.0f ||
                 qf_node_attr_float(n, "beta", 1.0f) != 1.0f))
        return QF_OK;
    if (n->inputs[0]->type.ndim != 2) return QF_OK;
    bool tb = lin || qf_node_attr_int(n, "transB", 0) != 0;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]), *dqw = qf_lower_dq_of(n->inputs[1]);
    const qf_node *dqb = n->ninputs > 2 && n->inputs[2] ? qf_lower_dq_of(n->inputs[2]) : NULL;
    if (!dqx || !dqw || (n->ninputs > 2 && n->inputs[2] && !dqb)) return QF_OK;
    if (!qf_lower_per_tensor_s8(dqx) || !int8_weight(dqw, tb ? 0 : 1) || dqw->inputs[0]->type.ndim != 2) return QF_OK;
    if (dqb && dqb->inputs[0]->type.ndim != 1) return QF_OK;
    if (!bias_fits(dqb, dqx, dqw, 1)) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    const qf_tensor *wt = &dqw->inputs[0]->type;
    int64_t K = tb ? wt->dims[1] : wt->dims[0], M = tb ? wt->dims[0] : wt->dims[1];
    char name[512];
    /* W as [M, K, 1, 1] */
    int64_t wd[4] = {M, K, 1, 1};
    qf_tensor w4;
    QF_TRY(qf_tensor_init(&w4, QF_DTYPE_I8, 4, wd));
    const int8_t *src = wt->data;
    int8_t *dst = w4.data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) dst[m * K + k] = tb ? src[m * K + k] : src[k * M + m];
    snprintf(name, sizeof name, "%s_int8_weight", n->name);
    qf_value *w = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &w4);
    if (!w) {
        qf_tensor_free(&w4);
        return QF_ERR_NOMEM;
    }
    snprintf(name, sizeof name, "%s_int8_shape_in", n->name);
    qf_value *s_in = shape_const(g, name, -1, K, 1, 1, 4);
    snprintf(name, sizeof name, "%s_int8_shape_out", n->name);
    qf_value *s_out = shape_const(g, name, -1, M, 0, 0, 2);
    if (!s_in || !s_out) return QF_ERR_NOMEM;
    snprintf(name, sizeof name, "%s_int8_in", n->name);
    qf_value *rin[2] = {dqx->inputs[0], s_in};
    qf_node *r1 = qf_graph_add_node(g, QF_OP_RESHAPE, name, 2, rin, 1);
    if (!r1) return QF_ERR_NOMEM;
    qf_value *in[9] = {r1->outputs[0], dqx->inputs[1], dqx->inputs[2], w, dqw->inputs[1], dqw->inputs[2],
                       q->inputs[1], q->inputs[2], dqb ? dqb->inputs[0] : NULL};
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_node *ql = int8_conv(g, name, in, dqb ? 9 : 8, NULL, rq, clamp);
    if (!ql) return QF_ERR_NOMEM;
    snprintf(name, sizeof name, "%s_int8_out", n->name);
    qf_value *rout[2] = {ql->outputs[0], s_out};
    qf_node *r2 = qf_graph_add_node(g, QF_OP_RESHAPE, name, 2, rout, 1);
    if (!r2) return QF_ERR_NOMEM;
    r2->outputs[0]->type = q->outputs[0]->type;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 linear as a 1x1 conv (%s%s) -> '%s'",
                        act ? qf_op_name(act->op) : "no activation", dqb ? ", int32 bias" : "", q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], r2->outputs[0]));
    *done = true;
    return QF_OK;
}

/* A max pool between a DQ and a Q of the same per-tensor int8 qparams (the
 * profiles give a pool its input's): MaxPool on the integers, which is exact
 * (the largest q gives the largest (q - zp) * s, and Q maps that back to q;
 * the padding is -inf either way). */
qf_status qf_lower_max_pool(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* exact: no requantization */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]);
    if (n->noutputs != 1 || !dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    const qf_value *y = n->outputs[0];
    if (y->nuses != 1 || y->is_output) return QF_OK;
    const qf_node *q = y->uses[0].node;
    if (q->op != QF_OP_QUANTIZE || q->ninputs != 3 || !scalar_const(q->inputs[1], QF_DTYPE_F32) ||
        !scalar_const(q->inputs[2], QF_DTYPE_I8))
        return QF_OK;
    const float sx = *(const float *)dqx->inputs[1]->type.data, sy = *(const float *)q->inputs[1]->type.data;
    const int8_t zx = *(const int8_t *)dqx->inputs[2]->type.data, zy = *(const int8_t *)q->inputs[2]->type.data;
    if (sx != sy || zx != zy) return QF_OK;
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_value *in = dqx->inputs[0];
    qf_node *mp = qf_graph_add_node(g, QF_OP_MAX_POOL, name, 1, &in, 1);
    if (!mp) return QF_ERR_NOMEM;
    QF_TRY(qf_node_copy_attrs(g, mp, n));
    mp->outputs[0]->type = q->outputs[0]->type;
    if (ctx) qf_pass_rewrite(ctx, n, NULL, "int8 max pool -> '%s'", q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], mp->outputs[0]));
    *done = true;
    return QF_OK;
}

/* Whether an int8 linear Resize runs as its kernel runs it: TFLite's
 * RESIZE_BILINEAR (src/ops/ref/resize.c), which needs 4-D data resized on H
 * and W only, a coordinate mode TFLite has and, unless align_corners, scales
 * equal to out / in (TFLite samples at in / out). */
static bool resize_linear_is_tflite(const qf_node *n, const qf_tensor *x, const qf_tensor *y)
{
    const char *c = qf_node_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    bool align = strcmp(c, "align_corners") == 0, torch = strcmp(c, "pytorch_half_pixel") == 0;
    if (!align && !torch && strcmp(c, "half_pixel") != 0 && strcmp(c, "asymmetric") != 0)
        return false;
    if (x->ndim != 4 || y->ndim != 4 || x->dims[0] != y->dims[0] || x->dims[1] != y->dims[1])
        return false;
    if (torch && (y->dims[2] == 1 || y->dims[3] == 1)) return false;
    const qf_value *sv = n->ninputs > 2 ? n->inputs[2] : NULL;
    if (align || !sv || qf_tensor_numel(&sv->type) == 0) return true;
    /* scales of every axis, or of H and W with axes [2, 3] (opset 18) */
    const int first = qf_node_attr(n, "axes") ? -2 : 0;
    if (!qf_value_is_const(sv) || sv->type.dtype != QF_DTYPE_F32 ||
        qf_tensor_numel(&sv->type) != 4 + first)
        return false;
    for (int a = 2; a < 4; a++)
        if (x->dims[a] <= 0 ||
            qf_tensor_get_f64(&sv->type, a + first) != (double)y->dims[a] / (double)x->dims[a])
            return false;
    return true;
}

/* A Resize between a DQ and a Q of the same per-tensor int8 qparams (the
 * profiles give it its input's): Resize on the integers. Nearest copies
 * values, so it is exact; linear computes TFLite's int8 RESIZE_BILINEAR (its
 * float weights, the sum truncated), within 1 of the QDQ graph's rounding. */
qf_status qf_lower_resize(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq,
                          bool *done)
{
    (void)rq; /* no requantization: the output keeps the input's qparams */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]);
    if (!dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    const qf_value *y = n->outputs[0];
    if (y->nuses != 1 || y->is_output) return QF_OK;
    const qf_node *q = y->uses[0].node;
    if (q->op != QF_OP_QUANTIZE || q->ninputs != 3 || !scalar_const(q->inputs[1], QF_DTYPE_F32) ||
        !scalar_const(q->inputs[2], QF_DTYPE_I8))
        return QF_OK;
    if (qf_lower_qscale(dqx) != qf_lower_qscale(q) || qf_lower_qzp(dqx) != qf_lower_qzp(q))
        return QF_OK;
    bool linear = strcmp(qf_node_attr_string(n, "mode", "nearest"), "linear") == 0;
    if (linear && !resize_linear_is_tflite(n, &dqx->inputs[0]->type, &y->type)) {
        if (ctx)
            qf_pass_skip(ctx, n,
                         "int8 linear resize: no TFLite RESIZE_BILINEAR form, left in float");
        return QF_OK;
    }
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_value *in[4] = {dqx->inputs[0]};
    for (int i = 1; i < n->ninputs && i < 4; i++) in[i] = n->inputs[i];
    qf_node *rs = qf_graph_add_node(g, QF_OP_RESIZE, name, n->ninputs < 4 ? n->ninputs : 4, in, 1);
    if (!rs) return QF_ERR_NOMEM;
    QF_TRY(qf_node_copy_attrs(g, rs, n));
    rs->outputs[0]->type = q->outputs[0]->type;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 %s resize -> '%s'", linear ? "linear" : "nearest",
                        q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], rs->outputs[0]));
    *done = true;
    return QF_OK;
}

/* The int8 operands of dqa and dqb broadcast (numpy's rules, aligned at
 * the last axis: equal sizes or one of them 1; an unknown size, a dynamic
 * batch, only against the same unknown size or 1) as the int8 Add / Mul take
 * them. */
static bool broadcasts(const qf_node *dqa, const qf_node *dqb)
{
    const qf_tensor *ta = &dqa->inputs[0]->type, *tb = &dqb->inputs[0]->type;
    for (int i = 1; i <= ta->ndim && i <= tb->ndim; i++) {
        int64_t a = ta->dims[ta->ndim - i], b = tb->dims[tb->ndim - i];
        if (a != b && a != 1 && b != 1) return false;
    }
    return true;
}

/* An Add of two per-tensor int8 tensors that broadcast heading a
 * DQ -> Add -> [act] -> Q group: qfold's int8 Add (QF_OP_QADD, TFLite's
 * integer arithmetic, src/ops/qadd.c); with TFLite's requantization only. Left in float when its multipliers
 * would not be below 1 (an output scale below max(s_a, s_b) / 2^19). */
qf_status qf_lower_add(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's requantization (or none) */
    *done = false;
    const qf_node *dqa = qf_lower_dq_of(n->inputs[0]), *dqb = qf_lower_dq_of(n->inputs[1]);
    if (!dqa || !dqb || !qf_lower_per_tensor_s8(dqa) || !qf_lower_per_tensor_s8(dqb)) return QF_OK;
    if (!broadcasts(dqa, dqb)) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    const double sa = *(const float *)dqa->inputs[1]->type.data, sb = *(const float *)dqb->inputs[1]->type.data,
                 sy = *(const float *)q->inputs[1]->type.data;
    const double twice_max = 2.0 * (sa > sb ? sa : sb);
    if (!(sa > 0.0 && sb > 0.0 && twice_max / ((double)(1 << 20) * sy) < 1.0)) return QF_OK;
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_value *in[8] = {dqa->inputs[0], dqa->inputs[1], dqa->inputs[2], dqb->inputs[0],
                       dqb->inputs[1], dqb->inputs[2], q->inputs[1],   q->inputs[2]};
    qf_node *qa = qf_graph_add_node(g, QF_OP_QADD, name, 8, in, 1);
    if (!qa) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_ints(g, qa, "qfold_clamp", clamp, 2));
    qa->outputs[0]->type = q->outputs[0]->type;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 add (%s) -> '%s'", act ? qf_op_name(act->op) : "no activation",
                        q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], qa->outputs[0]));
    *done = true;
    return QF_OK;
}

float qf_lower_qscale(const qf_node *qdq) { return *(const float *)qdq->inputs[1]->type.data; }
int32_t qf_lower_qzp(const qf_node *qdq) { return *(const int8_t *)qdq->inputs[2]->type.data; }

qf_status qf_lower_replace_group(qf_graph *g, qf_pass_ctx *ctx, const qf_node *n, const qf_node *q,
                                 const qf_node *act, qf_op op, qf_value *const *in, int nin, const qf_node *like,
                                 const int64_t *clamp, const char *what, qf_node **out)
{
    char name[512];
    snprintf(name, sizeof name, "%s_int8", n->name);
    qf_node *k = qf_graph_add_node(g, op, name, nin, in, 1);
    if (!k) return QF_ERR_NOMEM;
    QF_TRY(qf_node_copy_attrs(g, k, like));
    if (clamp) QF_TRY(qf_node_set_attr_ints(g, k, "qfold_clamp", clamp, 2));
    k->outputs[0]->type = q->outputs[0]->type;
    if (ctx)
        qf_pass_rewrite(ctx, n, NULL, "int8 %s (%s) -> '%s'", what, act ? qf_op_name(act->op) : "no activation",
                        q->outputs[0]->name);
    QF_TRY(qf_graph_replace_uses(g, q->outputs[0], k->outputs[0]));
    if (out) *out = k;
    return QF_OK;
}

/* A ConvTranspose group, as a Conv group but for the weight [C, M/group,
 * k...], per channel on axis 1: qfold's int8 ConvTranspose
 * (src/ops/qconv_transpose.c); TFLite's requantization only (ONNX has no
 * integer ConvTranspose). */
qf_status qf_lower_conv_transpose(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's requantization (or none) */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]), *dqw = qf_lower_dq_of(n->inputs[1]);
    const qf_node *dqb = n->ninputs > 2 && n->inputs[2] ? qf_lower_dq_of(n->inputs[2]) : NULL;
    if (!dqx || !dqw || (n->ninputs > 2 && n->inputs[2] && !dqb)) return QF_OK;
    if (!qf_lower_per_tensor_s8(dqx) || !int8_weight(dqw, 1) || dqw->inputs[0]->type.ndim < 3) return QF_OK;
    const int64_t group = qf_node_attr_int(n, "group", 1), nw = qf_tensor_numel(&dqw->inputs[1]->type);
    /* One scale per output channel of a group, the same in every group (the
     * bias has one per output channel: M = W's axis 1 times group). */
    if (nw != 1 && nw != dqw->inputs[0]->type.dims[1]) return QF_OK;
    if (!bias_fits(dqb, dqx, dqw, group)) {
        if (ctx) qf_pass_skip(ctx, n, "bias scale is not s_x * s_W: left as DQ -> ConvTranspose -> Q");
        return QF_OK;
    }
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    /* The accumulator: C/group * prod(k) products of |x - zp| <= 255 and
     * |w - zp| <= 255; each multiplier's shift must fit it. */
    const qf_tensor *wt = &dqw->inputs[0]->type;
    int64_t terms = wt->dims[0] / (group > 0 ? group : 1);
    for (int i = 2; i < wt->ndim; i++) terms *= wt->dims[i];
    if (terms > INT32_MAX / (255 * 255)) return QF_OK;
    const float *ws = dqw->inputs[1]->type.data;
    for (int64_t c = 0; c < nw; c++)
        if (!qf_requant_fits((double)qf_lower_qscale(dqx) * ws[c] / qf_lower_qscale(q), terms * 255 * 255)) return QF_OK;
    qf_value *in[9] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], dqw->inputs[0], dqw->inputs[1],
                       dqw->inputs[2], q->inputs[1],   q->inputs[2],   dqb ? dqb->inputs[0] : NULL};
    qf_node *k;
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, act, QF_OP_QCONV_TRANSPOSE, in, dqb ? 9 : 8, n, clamp, "conv transpose", &k));
    QF_TRY(qf_node_set_attr_int(g, k, "qfold_requant", 1));
    *done = true;
    return QF_OK;
}

/* A MatMul group: A an int8 activation, B an int8 activation (TFLite's
 * BATCH_MATMUL) or a constant int8 matrix per tensor or per column (its
 * FULLY_CONNECTED): ONNX's QLinearMatMul with qfold's requantization and
 * clamp attributes, so with either requantization. */
qf_status qf_lower_matmul(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    *done = false;
    const qf_node *dqa = qf_lower_dq_of(n->inputs[0]), *dqb = qf_lower_dq_of(n->inputs[1]);
    if (!dqa || !dqb || !qf_lower_per_tensor_s8(dqa)) return QF_OK;
    const bool weight = qf_value_is_const(dqb->inputs[0]);
    if (weight ? !int8_weight(dqb, 1) || dqb->inputs[0]->type.ndim != 2 : !qf_lower_per_tensor_s8(dqb)) return QF_OK;
    const qf_tensor *ta = &dqa->inputs[0]->type;
    const int64_t K = ta->ndim ? ta->dims[ta->ndim - 1] : -1;
    if (K < 0 || K > INT32_MAX / (255 * 255)) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    const float *sb = dqb->inputs[1]->type.data;
    const int64_t nb = qf_tensor_numel(&dqb->inputs[1]->type);
    for (int64_t c = 0; rq == QF_REQUANT_FIXED_POINT && c < nb; c++)
        if (!qf_requant_fits((double)qf_lower_qscale(dqa) * sb[c] / qf_lower_qscale(q), K * 255 * 255)) return QF_OK;
    qf_value *in[8] = {dqa->inputs[0], dqa->inputs[1], dqa->inputs[2], dqb->inputs[0],
                       dqb->inputs[1], dqb->inputs[2], q->inputs[1],   q->inputs[2]};
    qf_node *k;
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, act, QF_OP_QLINEAR_MATMUL, in, 8, NULL, clamp,
                         weight ? "matmul by a constant" : "matmul of two activations", &k));
    if (rq == QF_REQUANT_FIXED_POINT) QF_TRY(qf_node_set_attr_int(g, k, "qfold_requant", 1));
    *done = true;
    return QF_OK;
}

/* A Mul of two per-tensor int8 tensors that broadcast: qfold's int8 Mul
 * (src/ops/qadd.c, TFLite's integer Mul), when its one multiplier
 * s_a * s_b / s_y fits the product's range. */
qf_status qf_lower_mul(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's requantization (or none) */
    *done = false;
    const qf_node *dqa = qf_lower_dq_of(n->inputs[0]), *dqb = qf_lower_dq_of(n->inputs[1]);
    if (!dqa || !dqb || !qf_lower_per_tensor_s8(dqa) || !qf_lower_per_tensor_s8(dqb)) return QF_OK;
    if (!broadcasts(dqa, dqb)) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    const double sa = qf_lower_qscale(dqa), sb = qf_lower_qscale(dqb), sy = qf_lower_qscale(q);
    if (!(sa > 0.0 && sb > 0.0 && sy > 0.0) || !qf_requant_fits(sa * sb / sy, 255 * 255)) return QF_OK;
    qf_value *in[8] = {dqa->inputs[0], dqa->inputs[1], dqa->inputs[2], dqb->inputs[0],
                       dqb->inputs[1], dqb->inputs[2], q->inputs[1],   q->inputs[2]};
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, act, QF_OP_QMUL, in, 8, NULL, clamp, "mul", NULL));
    *done = true;
    return QF_OK;
}

/* A Concat of per-tensor int8 tensors into a Q (no activation: TFLite's
 * CONCATENATION has none): qfold's int8 Concat (src/ops/qconcat.c), which
 * copies the inputs of the output's qparams and requantizes the others. */
qf_status qf_lower_concat(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's requantization (or none) */
    *done = false;
    enum { MAX_IN = 64 };
    if (n->ninputs < 1 || n->ninputs > MAX_IN) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp) || act) return QF_OK;
    qf_value *in[2 + 3 * MAX_IN] = {q->inputs[1], q->inputs[2]};
    for (int i = 0; i < n->ninputs; i++) {
        const qf_node *dq = qf_lower_dq_of(n->inputs[i]);
        if (!dq || !qf_lower_per_tensor_s8(dq)) return QF_OK;
        if ((qf_lower_qscale(dq) != qf_lower_qscale(q) || qf_lower_qzp(dq) != qf_lower_qzp(q)) &&
            !qf_requant_fits((double)qf_lower_qscale(dq) / qf_lower_qscale(q), 255))
            return QF_OK;
        for (int j = 0; j < 3; j++) in[2 + 3 * i + j] = dq->inputs[j];
    }
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, NULL, QF_OP_QCONCAT, in, 2 + 3 * n->ninputs, n, NULL, "concat", NULL));
    *done = true;
    return QF_OK;
}

/* An AveragePool between a DQ and a Q of the same per-tensor int8 qparams
 * (TFLite's int8 AveragePool does not requantize): qfold's int8 AveragePool
 * (src/ops/int8/qpool.c). Other qparams stay in float. */
qf_status qf_lower_avg_pool(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's requantization (or none) */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]);
    if (!dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    if (qf_lower_qscale(dqx) != qf_lower_qscale(q) || qf_lower_qzp(dqx) != qf_lower_qzp(q)) {
        if (ctx) qf_pass_skip(ctx, n, "input and output qparams differ: left as DQ -> AveragePool -> Q");
        return QF_OK;
    }
    qf_value *in[5] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], q->inputs[1], q->inputs[2]};
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, act, QF_OP_QAVG_POOL, in, 5, n, clamp, "average pool", NULL));
    *done = true;
    return QF_OK;
}

/* A GlobalAveragePool, or a ReduceMean over trailing axes of known sizes:
 * qfold's int8 Mean (src/ops/int8/qpool.c, TFLite's integer Mean), when its
 * multiplier s_x / s_y fits the sum's range. */
qf_status qf_lower_mean(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's requantization (or none) */
    *done = false;
    const qf_node *dqx = qf_lower_dq_of(n->inputs[0]);
    if (!dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    const qf_tensor *x = &dqx->inputs[0]->type;
    const int rank = x->ndim;
    bool mask[QF_MAX_DIMS] = {false};
    int64_t keep = 1;
    if (n->op == QF_OP_GLOBAL_AVG_POOL) {
        if (rank < 3) return QF_OK;
        for (int i = 2; i < rank; i++) mask[i] = true;
    } else {
        int count = 0;
        const int64_t *axes = qf_node_attr_ints(n, "axes", &count);
        int64_t from_input[QF_MAX_DIMS];
        if (n->ninputs > 1 && n->inputs[1]) {
            const qf_value *av = n->inputs[1];
            int64_t na = qf_tensor_numel(&av->type);
            if (!qf_value_is_const(av) || na > QF_MAX_DIMS) return QF_OK;
            for (int64_t i = 0; i < na; i++) from_input[i] = qf_tensor_get_i64(&av->type, i);
            axes = from_input;
            count = (int)na;
        }
        if (count == 0) return QF_OK; /* all axes, or none: not a trailing mean worth an op */
        for (int i = 0; i < count; i++) {
            int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
            if (a < 0 || a >= rank || mask[a]) return QF_OK;
            mask[a] = true;
        }
        keep = qf_node_attr_int(n, "keepdims", 1) != 0;
    }
    int64_t axes[QF_MAX_DIMS], inner = 1;
    int na = 0;
    for (int i = 0; i < rank; i++) {
        if (!mask[i]) {
            if (na) return QF_OK; /* not trailing */
            continue;
        }
        if (x->dims[i] <= 0) return QF_OK;
        inner *= x->dims[i];
        axes[na++] = i;
    }
    if (inner > INT32_MAX / 255) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp)) return QF_OK;
    if (!qf_requant_fits((double)qf_lower_qscale(dqx) / qf_lower_qscale(q), 255 * inner)) return QF_OK;
    qf_value *in[5] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], q->inputs[1], q->inputs[2]};
    qf_node *k;
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, act, QF_OP_QMEAN, in, 5, NULL, clamp, "mean", &k));
    QF_TRY(qf_node_set_attr_ints(g, k, "axes", axes, na));
    QF_TRY(qf_node_set_attr_int(g, k, "keepdims", keep));
    *done = true;
    return QF_OK;
}

qf_status qf_lower_unary(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_op op, const char *what,
                         qf_lower_accept_fn accept, qf_node **out, bool *done)
{
    *done = false;
    if (out) *out = NULL;
    const qf_node *dqx = n->ninputs >= 1 ? qf_lower_dq_of(n->inputs[0]) : NULL;
    if (n->noutputs != 1 || !dqx || !qf_lower_per_tensor_s8(dqx)) return QF_OK;
    const qf_node *q, *act;
    int64_t clamp[2];
    if (!qf_lower_group_tail(n, &q, &act, clamp) || act) return QF_OK;
    const char *why = "";
    if (accept && !accept(qf_lower_qscale(dqx), qf_lower_qzp(dqx), qf_lower_qscale(q), qf_lower_qzp(q), &why)) {
        if (ctx) qf_pass_skip(ctx, n, "%s: left as DQ -> %s -> Q", why, qf_op_label(n));
        return QF_OK;
    }
    qf_value *in[5] = {dqx->inputs[0], dqx->inputs[1], dqx->inputs[2], q->inputs[1], q->inputs[2]};
    QF_TRY(qf_lower_replace_group(g, ctx, n, q, NULL, op, in, 5, n, NULL, what, out));
    *done = true;
    return QF_OK;
}

/* TFLite's int8 HardSwish takes the scales its Prepare takes. */
static bool hard_swish_accepts(float sx, int32_t zx, float sy, int32_t zy, const char **why)
{
    qf_hard_swish_params p;
    *why = "scales outside TFLite's int8 HardSwish";
    return qf_hard_swish_prepare(sx, zx, sy, zy, &p);
}

/* A HardSwish between a DQ and a Q (no activation after it): qfold's int8
 * table op (QF_OP_QLUT, src/ops/qlut.c) with TFLite's fixed-point int8
 * HardSwish, where its Prepare takes the scales. */
qf_status qf_lower_hard_swish(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's fixed point, tabulated */
    qf_node *k;
    QF_TRY(qf_lower_unary(g, ctx, n, QF_OP_QLUT, "hard swish", hard_swish_accepts, &k, done));
    if (*done) QF_TRY(qf_node_set_attr_string(g, k, "qfold_fn", "hard_swish"));
    return QF_OK;
}

static bool hard_sigmoid_accepts(float sx, int32_t zx, float sy, int32_t zy, const char **why)
{
    (void)zx;
    (void)zy;
    *why = "scales outside TFLite's int8 ADD (an output scale under max(input scale, 3/127) / (3 * 2^19))";
    return qf_hard_sigmoid_form_ok(sx, sy);
}

/* A HardSigmoid of torch's constants (alpha 1/6, beta 1/2) between a DQ and
 * a Q: QF_OP_QLUT computing the ADD + RELU6 and MUL the TFLite export writes
 * for it (qf_hard_sigmoid_form, fixed_point.h), with TFLite's arithmetic.
 * Other constants stay DQ -> HardSigmoid -> Q (TFLite has no form for them). */
qf_status qf_lower_hard_sigmoid(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's fixed point, tabulated */
    *done = false;
    const double alpha = qf_node_attr_float(n, "alpha", 0.2f), beta = qf_node_attr_float(n, "beta", 0.5f);
    if (fabs(alpha - 1.0 / 6.0) > 4e-7 / 6.0 || fabs(beta - 0.5) > 4e-7 * 0.5) {
        if (ctx && qf_lower_dq_of(n->inputs[0]))
            qf_pass_skip(ctx, n, "alpha %g, beta %g: only torch's 1/6, 1/2 has an int8 form; left as DQ -> %s -> Q",
                         alpha, beta, qf_op_label(n));
        return QF_OK;
    }
    qf_node *k;
    QF_TRY(qf_lower_unary(g, ctx, n, QF_OP_QLUT, "hard sigmoid", hard_sigmoid_accepts, &k, done));
    if (*done) QF_TRY(qf_node_set_attr_string(g, k, "qfold_fn", "hard_sigmoid"));
    return QF_OK;
}

/* A LeakyRelu between a DQ and a Q (no activation after it): QF_OP_QLUT
 * with TFLite's int8 LEAKY_RELU (qf_leaky_relu_int8, fixed_point.h:
 * identity and alpha multipliers, each MultiplyByQuantizedMultiplier),
 * tabulated; alpha is written on the node (ONNX's default 0.01 when the
 * model has none). A negative alpha or scales whose multipliers reach 2^23
 * stay DQ -> LeakyRelu -> Q (a skip). */
qf_status qf_lower_leaky_relu(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_int8_requant_kind rq, bool *done)
{
    (void)rq; /* TFLite's fixed point, tabulated */
    *done = false;
    const float alpha = qf_node_attr_float(n, "alpha", 0.01f);
    const qf_node *dqx = n->ninputs >= 1 ? qf_lower_dq_of(n->inputs[0]) : NULL;
    const qf_node *q, *act;
    int64_t clamp[2];
    /* the group qf_lower_unary takes, its qparams checked first with alpha */
    if (n->noutputs != 1 || !dqx || !qf_lower_per_tensor_s8(dqx) || !qf_lower_group_tail(n, &q, &act, clamp) || act)
        return QF_OK;
    qf_leaky_relu_params p;
    if (!qf_leaky_relu_prepare(qf_lower_qscale(dqx), qf_lower_qzp(dqx), qf_lower_qscale(q), qf_lower_qzp(q), alpha,
                               &p)) {
        if (ctx)
            qf_pass_skip(ctx, n,
                         "alpha %g with scales %g -> %g: outside TFLite's int8 LeakyRelu (alpha >= 0, "
                         "multipliers below 2^23); left as DQ -> %s -> Q",
                         (double)alpha, (double)qf_lower_qscale(dqx), (double)qf_lower_qscale(q), qf_op_label(n));
        return QF_OK;
    }
    qf_node *k;
    QF_TRY(qf_lower_unary(g, ctx, n, QF_OP_QLUT, "leaky relu", NULL, &k, done));
    if (*done) {
        QF_TRY(qf_node_set_attr_string(g, k, "qfold_fn", "leaky_relu"));
        QF_TRY(qf_node_set_attr_float(g, k, "alpha", alpha));
    }
    return QF_OK;
}
