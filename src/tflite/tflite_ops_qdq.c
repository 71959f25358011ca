/* The TFLite export's operators for what the lowering leaves as DQ -> op ->
 * [act] -> Q (SUB, ADD / MUL it declined, LOGISTIC, TANH, SOFTMAX,
 * HARD_SWISH; a QUANTIZE after a fixed-qparams op whose qparams are not
 * TFLite's), a lone activation (the fused activation of an op computing
 * nothing else), and the layout ops (RESHAPE with a TRANSPOSE where NHWC and
 * NCHW orders differ, TRANSPOSE, PAD). Their rows are in tflite_rows.c;
 * they build on tflite_build.h alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/math/quant_math.h"
#include "ops/math/requant.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "tflite_build.h"

/* ---- int8 -> int8 requantization ------------------------------------------------- */

/* Whether TFLite's int8 -> int8 QUANTIZE (reference_ops::Requantize:
 * MultiplyByQuantizedMultiplier(q - zp_x, s_x / s_y) + zp_y, saturated)
 * gives, for every int8 q, what the QDQ model computes: DequantizeLinear then
 * QuantizeLinear in float32 ((q - zp_x) * s_x, then / s_y rounded half to
 * even, + zp_y, saturated: qfold's kernels, ONNX's definition). The two
 * round apart only near a tie; 256 inputs, so every one is checked, and a
 * pair of qparams where they differ is refused rather than written 1 LSB off. */
static bool requant_exact(qf_tfl_qp x, qf_tfl_qp y)
{
    const double m = (double)x.scale / (double)y.scale;
    if (!qf_requant_fits(m, 255)) return false;
    int32_t qm;
    int shift;
    qf_quantize_multiplier(m, &qm, &shift);
    for (int q = -128; q < 128; q++) {
        int32_t t = qf_multiply_by_quantized_multiplier(q - x.zp, qm, shift) + y.zp;
        t = t < -128 ? -128 : t > 127 ? 127 : t;
        if (t != qf_quantize_range_f32((float)(q - x.zp) * x.scale, y.scale, y.zp, -128, 127)) return false;
    }
    return true;
}

/* A QuantizeLinear of a DequantizeLinear (int8 to int8, no op between:
 * PyTorch's export of a module with a fake-quant of its own that computes
 * nothing in eval, nn.Dropout): the same tensor when the qparams agree, else
 * an int8 -> int8 QUANTIZE where that is exact (requant_exact). */
qf_status qf_tfl_emit_requant(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_node *dq = n->inputs[0] ? n->inputs[0]->producer : NULL;
    const qf_value *x = NULL, *y = n->outputs[0];
    qf_tfl_qp xq, yq;
    if (!dq || dq->op != QF_OP_DEQUANTIZE || y->type.dtype != QF_DTYPE_I8)
        return qf_tfl_refuse(e, n, "computed in float (not a quantized DQ -> op -> Q group TFLite's int8 ops can "
                                   "express)");
    QF_TRY(qf_tfl_group_in(e, n, 0, &x, &xq));
    if (n->ninputs != 3 || !qf_tfl_qp_from(n->inputs[1], n->inputs[2], &yq))
        return qf_tfl_refuse(e, n, "not a per-tensor int8 QuantizeLinear");
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    if (xq.scale == yq.scale && xq.zp == yq.zp && !y->is_output) {
        e->vmap[y->id] = xi + 1; /* Q(DQ(q)) = q */
        return QF_OK;
    }
    if (!requant_exact(xq, yq))
        return qf_tfl_refuse(e, n, "an int8 requantization (scale %g, zero point %d to %g, %d) that TFLite's "
                                   "fixed point rounds apart from QuantizeLinear for some input",
                             (double)xq.scale, (int)xq.zp, (double)yq.scale, (int)yq.zp);
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    return qf_tfl_add_op(e, n, row->builtin, &xi, 1, &yi, 1, 0, &op);
}

/* ---- DQ -> op -> [act] -> Q forms the lowering leaves -------------------------- */

/* SUB, ADD, MUL (left in float by the lowering), LOGISTIC, TANH,
 * HARD_SWISH, SOFTMAX between DQs and a Q. */
qf_status qf_tfl_emit_float(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const int code = row->builtin;
    const bool binary = code == QF_TFL_SUB || code == QF_TFL_ADD || code == QF_TFL_MUL;
    const qf_value *y;
    qf_tfl_qp yq;
    int act;
    QF_TRY(qf_tfl_group_out(e, n, &y, &yq, binary ? &act : NULL));
    /* TFLite's int8 kernels fix these outputs' qparams (qfold's profiles
     * give them these); other qparams (another tool's) get a QUANTIZE
     * (int8 -> int8 requantization) after the op */
    qf_tfl_qp fixed = {0.0f, 0};
    if (code == QF_TFL_LOGISTIC || code == QF_TFL_SOFTMAX) fixed = (qf_tfl_qp){1.0f / 256, -128};
    if (code == QF_TFL_TANH) fixed = (qf_tfl_qp){1.0f / 128, 0};
    const bool requant = fixed.scale > 0.0f && (yq.scale != fixed.scale || yq.zp != fixed.zp);
    const int rank = y->type.ndim;
    if (code == QF_TFL_SOFTMAX) {
        int64_t axis = qf_node_attr_int(n, "axis", e->g->opset >= 13 ? -1 : 1);
        if (axis < 0) axis += rank;
        if (qf_tfl_phys_axis(rank, (int)axis) != rank - 1 || (e->g->opset < 13 && axis != rank - 1))
            return qf_tfl_refuse(e, n, "a softmax over axis %lld, not the last NHWC axis", (long long)axis);
    }
    int32_t in[2];
    for (int i = 0; i < (binary ? 2 : 1); i++) {
        const qf_value *x = NULL;
        qf_tfl_qp xq;
        QF_TRY(qf_tfl_group_in(e, n, i, &x, &xq));
        QF_TRY(qf_tfl_operand(e, n, x, xq, rank, &in[i]));
    }
    int yi;
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    int oi = yi;
    if (requant) {
        char name[512];
        snprintf(name, sizeof name, "%.480s_fixed", y->name);
        int64_t zp = fixed.zp;
        oi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, e->t[yi].ndim, e->t[yi].shape, NULL, 0, 1,
                               &fixed.scale, &zp, 0, false);
        QF_TRY(qf_tfl_need(oi));
    }
    QF_TRY(qf_tfl_add_op(e, n, code, in, binary ? 2 : 1, &oi, 1, 0, &op));
    if (binary) op->activation = act;
    if (requant) QF_TRY(qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, &oi, 1, &yi, 1, 0, &op));
    return QF_OK;
}

/* A Relu / Relu6 / Clip(0, 6) / Clip(0, inf) between a DQ and a Q (one
 * the lowering did not fuse into the op before it): TFLite has no such op in
 * the exported set, so it is the fused activation of an op that computes
 * nothing else: a 1x1 MAX_POOL_2D when the qparams are the same (exact), else
 * an ADD of an int8 zero (TFLite's requantization of x to the output's
 * qparams). */
qf_status qf_tfl_emit_act(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    (void)row; /* MAX_POOL_2D or ADD: the fused activation of an op computing nothing else */
    const qf_value *x = NULL, *y = NULL;
    qf_tfl_qp xq, yq;
    QF_TRY(qf_tfl_group_in(e, n, 0, &x, &xq));
    QF_TRY(qf_tfl_group_out(e, n, &y, &yq, NULL));
    int act = n->op == QF_OP_RELU ? QF_TFL_ACT_RELU : n->op == QF_OP_RELU6 ? QF_TFL_ACT_RELU6 : -1;
    if (n->op == QF_OP_CLIP) {
        const qf_value *mn = n->ninputs > 1 ? n->inputs[1] : NULL, *mx = n->ninputs > 2 ? n->inputs[2] : NULL;
        bool okmn = mn && qf_value_is_const(mn) && mn->type.dtype == QF_DTYPE_F32;
        bool okmx = !mx || (qf_value_is_const(mx) && mx->type.dtype == QF_DTYPE_F32);
        float lo = okmn ? *(const float *)mn->type.data : NAN,
              hi = mx && okmx ? *(const float *)mx->type.data : INFINITY;
        if (lo == 0.0f && isinf(hi) && hi > 0) act = QF_TFL_ACT_RELU;
        else if (lo == 0.0f && hi == 6.0f) act = QF_TFL_ACT_RELU6;
    }
    if (act < 0) return qf_tfl_refuse(e, n, "a clip other than [0, 6] or [0, inf) has no TFLite int8 form here");
    const int rank = x->type.ndim;
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    if (xq.scale == yq.scale && xq.zp == yq.zp && rank == 4) {
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_MAX_POOL_2D, &xi, 1, &yi, 1, 0, &op));
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
    snprintf(name, sizeof name, "%.480s_zero", qf_tfl_node_name(e, n));
    int zi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, rank, shape, &zero, 1, 1, &xq.scale, &zp, 0, true);
    QF_TRY(qf_tfl_need(zi));
    int32_t in[2] = {xi, zi};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_ADD, in, 2, &yi, 1, 0, &op));
    op->activation = act;
    return QF_OK;
}

/* A rank-4 tensor whose NHWC and NCHW element orders are the same. */
static bool order_same(const qf_tensor *t)
{
    return t->ndim != 4 || t->dims[1] == 1 || (t->dims[2] == 1 && t->dims[3] == 1);
}

/* TRANSPOSE of tensor xi by perm into a new tensor named `name` of shape. */
static qf_status add_transpose(qf_tfl_ex *e, const qf_node *n, int xi, const int32_t perm[4], const char *name,
                               const int32_t *shape, int *out)
{
    const qf_tfl_tensor x = e->t[xi];
    int ti = qf_tfl_add_tensor(e, name, x.type, 4, shape, NULL, 0, x.nq, x.scale, x.zero_point, 0, false);
    QF_TRY(qf_tfl_need(ti));
    int pi = qf_tfl_i32_tensor(e, name, "perm", perm, 4, false);
    QF_TRY(qf_tfl_need(pi));
    qf_tfl_op *op;
    int32_t in[2] = {xi, pi};
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_TRANSPOSE, in, 2, &ti, 1, 0, &op));
    *out = ti;
    return QF_OK;
}

/* RESHAPE (Reshape, Flatten, Squeeze, Unsqueeze) on int8 data, with a
 * TRANSPOSE to NCHW before / to NHWC after where the orders differ. */
qf_status qf_tfl_emit_reshape(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    /* qparams changed across it (PyTorch: an nn.Flatten with a fake-quant of
     * its own): the reshape on x's qparams, then an int8 -> int8 QUANTIZE,
     * where that is exact */
    const qf_value *x = NULL, *y = NULL;
    qf_tfl_qp xq, yq;
    QF_TRY(qf_tfl_group_in(e, n, 0, &x, &xq));
    QF_TRY(qf_tfl_group_out(e, n, &y, &yq, NULL));
    const bool requant = xq.scale != yq.scale || xq.zp != yq.zp;
    if (requant && !requant_exact(xq, yq))
        return qf_tfl_refuse(e, n, "a reshape that changes the qparams (scale %g, zero point %d to %g, %d) where "
                                   "TFLite's int8 requantization rounds apart from QuantizeLinear for some input",
                             (double)xq.scale, (int)xq.zp, (double)yq.scale, (int)yq.zp);
    int xi, yi, fin;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    char name[512];
    fin = yi;
    if (requant) {
        int64_t zp = xq.zp;
        snprintf(name, sizeof name, "%.480s_requant", y->name);
        fin = qf_tfl_add_tensor(e, name, QF_TFL_INT8, e->t[yi].ndim, e->t[yi].shape, NULL, 0, 1, &xq.scale, &zp, 0,
                                false);
        QF_TRY(qf_tfl_need(fin));
    }
    static const int32_t to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
    /* a channels-last rank-3 interface tensor [N, L, C] has the element
     * order of NHWC [N, 1, L, C]: one RESHAPE to or from it */
    const bool x_nlc = e->nlc && e->nlc[x->id], y_nlc = e->nlc && e->nlc[y->id];
    if (!order_same(&x->type) && !y_nlc) {
        int32_t s[4];
        for (int i = 0; i < 4; i++) s[i] = x->type.dims[i] > 0 ? (int32_t)x->type.dims[i] : 1;
        snprintf(name, sizeof name, "%.480s_nchw", x->name);
        QF_TRY(add_transpose(e, n, xi, to_nchw, name, s, &xi));
    }
    const bool after = !order_same(&y->type) && !x_nlc;
    int32_t ls[QF_MAX_DIMS];
    const int r = y->type.ndim;
    for (int i = 0; i < r; i++) ls[i] = y->type.dims[i] > 0 ? (int32_t)y->type.dims[i] : 1;
    const int32_t *shape = after ? ls : e->t[yi].shape;
    int ri = fin;
    if (after) {
        snprintf(name, sizeof name, "%.480s_nchw", y->name);
        ri = qf_tfl_add_tensor(e, name, QF_TFL_INT8, r, ls, NULL, 0, 1, e->t[fin].scale, e->t[fin].zero_point, 0,
                               false);
        QF_TRY(qf_tfl_need(ri));
    }
    int si = qf_tfl_i32_tensor(e, e->t[ri].name, "shape", shape, r, false);
    QF_TRY(qf_tfl_need(si));
    int32_t *ns = qf_tfl_ex_alloc(e, sizeof *ns * (size_t)r);
    if (!ns) return QF_ERR_NOMEM;
    memcpy(ns, shape, sizeof *ns * (size_t)r);
    qf_tfl_op *op;
    int32_t in[2] = {xi, si};
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, in, 2, &ri, 1, 0, &op));
    op->new_shape = ns;
    op->new_shape_len = r;
    if (after) {
        /* the transpose writes y's own tensor */
        int pi = qf_tfl_i32_tensor(e, y->name, "perm", to_nhwc, 4, false);
        QF_TRY(qf_tfl_need(pi));
        int32_t tin[2] = {ri, pi};
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_TRANSPOSE, tin, 2, &fin, 1, 0, &op));
    }
    if (requant) QF_TRY(qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, &fin, 1, &yi, 1, 0, &op));
    return QF_OK;
}

/* TRANSPOSE with the permutation mapped to NHWC. */
qf_status qf_tfl_emit_transpose(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *x, *y;
    QF_TRY(qf_tfl_group_same_qp(e, n, "transpose", &x, &y));
    const int r = x->type.ndim;
    int cnt = 0;
    const int64_t *perm = qf_node_attr_ints(n, "perm", &cnt);
    int32_t p[QF_MAX_DIMS];
    for (int k = 0; k < r; k++) {
        int l = r == 4 ? qf_tfl_nhwc_from[k] : k;               /* output physical k holds logical l */
        int src = perm && cnt == r ? (int)perm[l] : r - 1 - l; /* which logical input axis */
        p[k] = qf_tfl_phys_axis(r, src);
    }
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    int pi = qf_tfl_i32_tensor(e, y->name, "perm", p, r, false);
    QF_TRY(qf_tfl_need(pi));
    qf_tfl_op *op;
    int32_t in[2] = {xi, pi};
    return qf_tfl_add_op(e, n, row->builtin, in, 2, &yi, 1, 0, &op);
}

/* PAD (constant mode, value 0: TFLite pads int8 with the zero point). */
qf_status qf_tfl_emit_pad_node(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *x, *y;
    QF_TRY(qf_tfl_group_same_qp(e, n, "pad", &x, &y));
    if (strcmp(qf_node_attr_string(n, "mode", "constant"), "constant") != 0)
        return qf_tfl_refuse(e, n, "only constant padding has a TFLite form (PAD)");
    const int r = x->type.ndim;
    int64_t pads[2 * QF_MAX_DIMS];
    const qf_value *pv = n->ninputs > 1 ? n->inputs[1] : NULL;
    if (!pv || !qf_value_is_const(pv) || qf_tensor_numel(&pv->type) != 2 * r)
        return qf_tfl_refuse(e, n, "pads are not a constant of 2 x rank values");
    for (int i = 0; i < 2 * r; i++) pads[i] = qf_tensor_get_i64(&pv->type, i);
    if (n->ninputs > 2 && n->inputs[2]) {
        const qf_value *cv = n->inputs[2];
        const qf_node *dq = cv->producer;
        bool zero = false;
        if (qf_value_is_const(cv) && cv->type.dtype == QF_DTYPE_F32) zero = *(const float *)cv->type.data == 0.0f;
        else if (dq && dq->op == QF_OP_DEQUANTIZE && qf_value_is_const(dq->inputs[0]) && dq->ninputs == 3 &&
                 qf_value_is_const(dq->inputs[2]))
            zero = *(const int8_t *)dq->inputs[0]->type.data == *(const int8_t *)dq->inputs[2]->type.data;
        if (!zero) return qf_tfl_refuse(e, n, "a pad value other than 0 (TFLite's int8 PAD fills with the zero point)");
    }
    int32_t pp[2 * QF_MAX_DIMS];
    for (int k = 0; k < r; k++) {
        int l = r == 4 ? qf_tfl_nhwc_from[k] : k;
        if (pads[l] < 0 || pads[l + r] < 0) return qf_tfl_refuse(e, n, "negative pads (a crop) are not exported");
        pp[2 * k] = (int32_t)pads[l];
        pp[2 * k + 1] = (int32_t)pads[l + r];
    }
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    bool zero = true;
    for (int i = 0; i < 2 * r; i++) zero &= pp[i] == 0;
    if (zero && !y->is_output) {
        /* a Pad by nothing (PyTorch's avg_pool2d writes one): y is x */
        e->vmap[y->id] = xi + 1;
        return QF_OK;
    }
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    int pi = qf_tfl_i32_tensor(e, y->name, "paddings", pp, 2 * r, true);
    QF_TRY(qf_tfl_need(pi));
    qf_tfl_op *op;
    int32_t in[2] = {xi, pi};
    return qf_tfl_add_op(e, n, row->builtin, in, 2, &yi, 1, 0, &op);
}

/* SPLIT into equal parts, the axis mapped to NHWC: of int8 data (a grouped
 * conv's input: the pass split_group_conv) or in QDQ form (DQ -> Split -> a
 * Q per part); every part keeps the input's qparams (TFLite's int8 SPLIT
 * copies). */
qf_status qf_tfl_emit_split(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *x;
    qf_tfl_qp xq, yq;
    if (n->inputs[0]->type.dtype != QF_DTYPE_I8 && n->inputs[0]->type.dtype != QF_DTYPE_F32)
        return qf_tfl_refuse(e, n, "a Split of %s data (only int8 is exported)",
                             qf_dtype_name(n->inputs[0]->type.dtype));
    QF_TRY(qf_tfl_group_in(e, n, 0, &x, &xq));
    const int r = x->type.ndim;
    int64_t axis = qf_node_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    int32_t *out = qf_tfl_ex_alloc(e, sizeof *out * (size_t)n->noutputs);
    if (!out) return QF_ERR_NOMEM;
    for (int i = 0; i < n->noutputs; i++) {
        const qf_value *y = n->outputs[i];
        if (y->type.dims[axis] != n->outputs[0]->type.dims[axis])
            return qf_tfl_refuse(e, n, "parts of unequal sizes (TFLite's SPLIT makes equal ones)");
        const qf_node *q = NULL;
        if (y->type.dtype != QF_DTYPE_I8) {
            /* a float part: requantized by one per-tensor QuantizeLinear */
            q = y->nuses == 1 && !y->is_output ? y->uses[0].node : NULL;
            if (!q || q->op != QF_OP_QUANTIZE || q->ninputs != 3 ||
                !qf_tfl_qp_from(q->inputs[1], q->inputs[2], &yq))
                return qf_tfl_refuse(
                    e, n, "part '%s' is not requantized to int8 by one per-tensor QuantizeLinear",
                    y->name);
            y = q->outputs[0];
        } else if (!qf_tfl_act_qp(y, &yq))
            return qf_tfl_refuse(e, n, "int8 part '%s' has no per-tensor qparams", y->name);
        if (yq.scale != xq.scale || yq.zp != xq.zp)
            return qf_tfl_refuse(e, n, "a part '%s' of other qparams than the input's", y->name);
        if (q) e->skip[q->id] = true;
        QF_TRY(qf_tfl_act_tensor(e, n, y, &out[i]));
    }
    int xi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    int32_t a = qf_tfl_phys_axis(r, (int)axis);
    char name[512];
    snprintf(name, sizeof name, "%.480s_axis", qf_tfl_node_name(e, n));
    const int32_t scalar[1] = {0}; /* a 0-D tensor: no dims */
    int ai =
        qf_tfl_add_tensor(e, name, QF_TFL_INT32, 0, scalar, &a, sizeof a, 0, NULL, NULL, 0, false);
    QF_TRY(qf_tfl_need(ai));
    qf_tfl_op *op;
    int32_t in[2] = {ai, xi};
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, in, 2, out, n->noutputs, 0, &op));
    op->num_splits = n->noutputs;
    return QF_OK;
}
