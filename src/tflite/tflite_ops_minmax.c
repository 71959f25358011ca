/* The TFLite export's operators for Max / Min and Abs (rows in
 * tflite_rows.c), on the builder of tflite_build.h. (A PRelu reaches the
 * export lowered to MAXIMUM, MINIMUM, MUL and ADD: src/quant/lower_prelu_minmax.c.)
 *
 *   Max / Min (int8, lowered; or a DQ -> op -> Q group)
 *        -> MAXIMUM / MINIMUM, a chain of them for more than two inputs; an
 *           input on other qparams than the output's is requantized first
 *           (QUANTIZE int8 -> int8; qfold's profiles never make one)
 *   DQ -> Abs -> Q, one set of qparams (s, zp) in and out (the profiles')
 *        -> MAXIMUM(x, SUB(zp, x)): the SUB's int8 arithmetic on one scale is
 *           exact (2 zp - q, saturated), so this is min(|q - zp| + zp, 127),
 *           what DQ -> Abs -> Q computes. TensorFlow Lite 2.2's ABS has no
 *           int8 kernel and ArmNN 20.08's TfLite parser no ABS at all.
 *   DQ -> Abs -> Q on two sets of qparams (another tool's QDQ)
 *        -> DEQUANTIZE -> ABS (float32) -> QUANTIZE: TFLite 2.2 runs it (its
 *           QUANTIZE rounds ties away from zero, ONNX's QuantizeLinear to even:
 *           an exact tie can differ by 1); ArmNN 20.08 refuses it. */
#include <stdio.h>
#include <string.h>

#include "tflite_build.h"

/* A tensor like e->t[like] (shape) with the given type and qparams (NULL
 * qp: none), named "<node>_<what>". */
static int like_tensor(qf_tfl_ex *e, const qf_node *n, int like, const char *what, int type,
                       const qf_tfl_qp *qp)
{
    char name[512];
    snprintf(name, sizeof name, "%.440s_%.60s", qf_tfl_node_name(e, n), what);
    int32_t shape[QF_TFL_MAX_RANK];
    const int nd = e->t[like].ndim;
    memcpy(shape, e->t[like].shape, sizeof(int32_t) * (size_t)nd);
    if (!qp) return qf_tfl_add_tensor(e, name, type, nd, shape, NULL, 0, 0, NULL, NULL, 0, false);
    int64_t zp = qp->zp;
    return qf_tfl_add_tensor(e, name, type, nd, shape, NULL, 0, 1, &qp->scale, &zp, 0, false);
}

qf_status qf_tfl_emit_extreme(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *y;
    qf_tfl_qp yq;
    QF_TRY(qf_tfl_group_out(e, n, &y, &yq, NULL));
    const int rank = y->type.ndim;
    int yi;
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    int32_t in[16];
    if (n->ninputs > 16) return qf_tfl_refuse(e, n, "more than 16 inputs");
    for (int i = 0; i < n->ninputs; i++) {
        const qf_value *v = n->inputs[i];
        qf_tfl_qp q = yq;
        /* the lowered form reads int8 constants directly, on the output's qparams */
        if (!(v->type.dtype == QF_DTYPE_I8 && qf_value_is_const(v)))
            QF_TRY(qf_tfl_group_in(e, n, i, &v, &q));
        QF_TRY(qf_tfl_operand(e, n, v, q, rank, &in[i]));
        if (q.scale != yq.scale || q.zp != yq.zp) {
            char what[32];
            snprintf(what, sizeof what, "in%d_requant", i);
            int ri = like_tensor(e, n, in[i], what, QF_TFL_INT8, &yq);
            QF_TRY(qf_tfl_need(ri));
            qf_tfl_op *op;
            QF_TRY(qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, &in[i], 1, &ri, 1, 0, &op));
            in[i] = ri;
        }
    }
    qf_tfl_op *op;
    if (n->ninputs == 1) /* one input: y = x (a requantization when its qparams differ) */
        return qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, in, 1, &yi, 1, 0, &op);
    int acc = in[0];
    for (int i = 1; i < n->ninputs; i++) {
        int out = yi;
        if (i + 1 < n->ninputs) {
            char what[32];
            snprintf(what, sizeof what, "partial%d", i);
            out = like_tensor(e, n, yi, what, QF_TFL_INT8, &yq);
            QF_TRY(qf_tfl_need(out));
        }
        int32_t pair[2] = {acc, in[i]};
        QF_TRY(qf_tfl_add_op(e, n, row->builtin, pair, 2, &out, 1, 0, &op));
        acc = out;
    }
    return QF_OK;
}

qf_status qf_tfl_emit_abs(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    const qf_value *x, *y;
    qf_tfl_qp xq, yq;
    QF_TRY(qf_tfl_group_in(e, n, 0, &x, &xq));
    QF_TRY(qf_tfl_group_out(e, n, &y, &yq, NULL));
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    qf_tfl_op *op;
    if (xq.scale == yq.scale && xq.zp == yq.zp) {
        /* -x on x's qparams is 2 zp - q: SUB(zp, x), a zero of x's rank */
        const int rank = e->t[xi].ndim;
        int32_t shape[QF_TFL_MAX_RANK];
        for (int i = 0; i < rank; i++) shape[i] = 1;
        const int8_t zero = (int8_t)xq.zp;
        int64_t zp = xq.zp;
        char name[512];
        snprintf(name, sizeof name, "%.480s_zero", qf_tfl_node_name(e, n));
        const int zi = qf_tfl_add_tensor(e, name, QF_TFL_INT8, rank, shape, &zero, 1, 1, &xq.scale,
                                         &zp, 0, true);
        QF_TRY(qf_tfl_need(zi));
        const int ni = like_tensor(e, n, xi, "neg", QF_TFL_INT8, &xq);
        QF_TRY(qf_tfl_need(ni));
        int32_t sub_in[2] = {zi, xi}, max_in[2] = {xi, ni};
        QF_TRY(qf_tfl_add_op(e, n, QF_TFL_SUB, sub_in, 2, &ni, 1, 0, &op));
        op->activation = QF_TFL_ACT_NONE;
        return qf_tfl_add_op(e, n, QF_TFL_MAXIMUM, max_in, 2, &yi, 1, 0, &op);
    }
    const int fi = like_tensor(e, n, xi, "dequantized", QF_TFL_FLOAT32, NULL);
    QF_TRY(qf_tfl_need(fi));
    const int ai = like_tensor(e, n, xi, "abs", QF_TFL_FLOAT32, NULL);
    QF_TRY(qf_tfl_need(ai));
    QF_TRY(qf_tfl_add_op(e, n, QF_TFL_DEQUANTIZE, &xi, 1, &fi, 1, 0, &op));
    QF_TRY(qf_tfl_add_op(e, n, row->builtin, &fi, 1, &ai, 1, 0, &op));
    return qf_tfl_add_op(e, n, QF_TFL_QUANTIZE, &ai, 1, &yi, 1, 0, &op);
}
