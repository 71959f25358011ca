/* qat_convert: the fake_quants of a trained (and finalized: qat_bn_remove,
 * fuse_batch_norm) QAT graph become the quantizer's QDQ form, as PyTorch's
 * convert makes quantized modules from FakeQuantize ones.
 *
 *   W ─[fake_quant]─┐                       W_quantized(int8) ─ DQ(scale[, axis]) ─┐
 *   x ─[fake_quant]─ op(·, ·, b) ─   ─▶     x ─ Q ─ DQ ─────────────────────── op(·, ·, DQ(b_quantized int32)) ─
 *
 *   - a fake_quant on a float32 constant (a weight): int8 initializer
 *     clamp(round(W / scale), quant_min, quant_max) behind a DequantizeLinear
 *     (per channel along the node's axis when its buffers have several
 *     entries), scale from its scale buffer; its zero point must be 0;
 *   - any other fake_quant (an activation, per tensor): QuantizeLinear ->
 *     DequantizeLinear with its scale and zero point, int8 for the range
 *     [-128, 127], uint8 for [0, 255]; another range has no ONNX type and is
 *     refused naming the node;
 *   - then the float32 bias of every Conv / ConvTranspose / Gemm / linear
 *     whose input is a DequantizeLinear output and whose weight is the
 *     DequantizeLinear of an int8 constant: int32 at s_in * s_w
 *     (qf_qdq_bias), as PTQ's convert writes it.
 * The graph edits are quant/qdq.h's, PTQ's. A fake_quant that never observed
 * anything (running_min still +inf) has no qparams worth writing: an error
 * naming the node, unless its qparams are fixed (the `fixed` attribute
 * qf_quant_qat_insert sets for a fixed-qparams group); so is a simulated
 * fusion node left in the graph. A BatchNormalization the fold left loses
 * its internal `qfold_frozen` attribute. Every check runs
 * before the first write: a refused graph is left as it was. The opset is
 * raised to 13 (DequantizeLinear's axis).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../passes/rewrite.h"
#include "qdq.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

/* A weight fake_quant: the `weight` mark qat_insert sets on the fake_quant
 * of a quantized weight; without the mark (a graph built by other code), a
 * symmetric fake_quant of a float32 constant. A fake_quant of another
 * constant (the Sub / Mul constant of an input normalisation, observed as
 * an activation, affine) is an activation here too: a Q -> DQ pair, as
 * PTQ's convert writes it (it was refused as a weight with a zero point). */
static bool qc_is_weight(const qf_node *fq)
{
    if (qf_node_attr(fq, "weight")) return qf_node_attr_int(fq, "weight", 0) != 0;
    return qf_rewrite_is_f32_const(fq->inputs[0]) && qf_node_attr_int(fq, "symmetric", 0) != 0;
}

/* What the form of fq decides: its inputs, its range, a weight's symmetry and
 * axis, an activation per tensor; with `trained`, also that a weight reads a
 * float32 constant no one else reads (during training qat_bn_add's scaled
 * weight stands between them). QF_OK or an error naming the node. */
static qf_status qc_check_form(const qf_node *fq, bool trained)
{
    if (fq->ninputs < 5 || !fq->inputs[0])
        return qf_error(QF_ERR_INVALID, "node '%s' (fake_quant): inputs missing", fq->name);
    for (int i = 1; i < 5; i++)
        if (!qf_rewrite_is_f32_const(fq->inputs[i]))
            return qf_error(QF_ERR_INVALID, "node '%s' (fake_quant): buffer '%s' is not a float32 constant", fq->name,
                            fq->inputs[i] ? fq->inputs[i]->name : "?");
    const int64_t qmin = qf_node_attr_int(fq, "quant_min", -128), qmax = qf_node_attr_int(fq, "quant_max", 127);
    const int64_t n = qf_tensor_numel(&fq->inputs[1]->type);
    if (qc_is_weight(fq)) {
        if (trained && !qf_rewrite_is_f32_const(fq->inputs[0]))
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (fake_quant): weight '%s' is not a float32 constant",
                            fq->name, fq->inputs[0]->name);
        if (qmin < -128 || qmax > 127)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (fake_quant): weight range [%lld, %lld] does not fit int8", fq->name,
                            (long long)qmin, (long long)qmax);
        if (!qf_node_attr_int(fq, "symmetric", 0))
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (fake_quant): affine weight quantization (only symmetric "
                            "int8 weights convert)",
                            fq->name);
        const qf_value *w = fq->inputs[0];
        if (trained && (w->nuses != 1 || w->is_output))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (fake_quant): weight '%s' has other readers", fq->name,
                            w->name);
        if (n > 1) {
            int64_t axis = qf_node_attr_int(fq, "axis", 0);
            if (axis < 0) axis += w->type.ndim;
            if (axis < 0 || axis >= w->type.ndim || w->type.dims[axis] != n)
                return qf_error(QF_ERR_SHAPE, "node '%s' (fake_quant): %lld scales for axis %lld of weight '%s'",
                                fq->name, (long long)n, (long long)qf_node_attr_int(fq, "axis", 0), w->name);
        }
        return QF_OK;
    }
    if (n != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (fake_quant): a per-channel activation fake_quant", fq->name);
    if (!((qmin == -128 && qmax == 127) || (qmin == 0 && qmax == 255)))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (fake_quant): activation range [%lld, %lld] is neither int8 [-128, 127] nor "
                        "uint8 [0, 255]",
                        fq->name, (long long)qmin, (long long)qmax);
    return QF_OK;
}

qf_status qf_quant_qat_convert_check(const qf_graph *g)
{
    qf_graph_for_each_node(g, n) if (n->op == QF_OP_FAKE_QUANT) QF_TRY(qc_check_form(n, false));
    return QF_OK;
}

/* Why fq cannot be converted (message naming the node), or QF_OK: its form,
 * then the qparams training left. */
static qf_status qc_check(const qf_node *fq)
{
    QF_TRY(qc_check_form(fq, true));
    const int64_t qmin = qf_node_attr_int(fq, "quant_min", -128),
                  qmax = qf_node_attr_int(fq, "quant_max", 127);
    const int64_t n = qf_tensor_numel(&fq->inputs[1]->type);
    const float *scale = fq->inputs[1]->type.data, *zp = fq->inputs[2]->type.data,
                *mn = fq->inputs[3]->type.data;
    const bool fixed = qf_node_attr_int(fq, "fixed", 0) != 0;
    for (int64_t c = 0; c < n; c++) {
        if (!fixed && mn[c] == INFINITY)
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (fake_quant): nothing observed yet (running_min is +inf%s): "
                            "calibrate or "
                            "train first",
                            fq->name, n > 1 ? " in a channel" : "");
        if (!(scale[c] > 0.0f) || !isfinite(scale[c]))
            return qf_error(QF_ERR_NUMERIC,
                            "node '%s' (fake_quant): scale %g is not a positive number", fq->name,
                            scale[c]);
        if (zp[c] != nearbyintf(zp[c]) || zp[c] < (float)qmin || zp[c] > (float)qmax)
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (fake_quant): zero point %g outside [%lld, %lld]", fq->name,
                            zp[c], (long long)qmin, (long long)qmax);
    }
    if (qc_is_weight(fq)) {
        for (int64_t c = 0; c < n; c++)
            if (zp[c] != 0.0f)
                return qf_error(QF_ERR_UNSUPPORTED,
                                "node '%s' (fake_quant): weight zero point %g (only symmetric int8 "
                                "weights convert)",
                                fq->name, zp[c]);
        return qf_rewrite_check_finite(fq->inputs[0], fq);
    }
    return QF_OK;
}

/* The scale of a DequantizeLinear's output (its float32 constant input 1),
 * or NULL; *n gets its length. */
static const float *qc_dq_scale(const qf_value *v, int64_t *n)
{
    const qf_node *dq = v ? v->producer : NULL;
    if (!dq || dq->op != QF_OP_DEQUANTIZE || dq->ninputs < 2 || !qf_rewrite_is_f32_const(dq->inputs[1])) return NULL;
    *n = qf_tensor_numel(&dq->inputs[1]->type);
    return dq->inputs[1]->type.data;
}

/* The bias of op n at s_in * s_w, when its input and weight are DQ outputs
 * (the weight of an int8 constant). Returns QF_OK also when n does not fit
 * (its bias stays float). */
static qf_status qc_bias(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, bool *changed)
{
    if (n->ninputs < 3 || !n->inputs[2] || !qf_rewrite_is_f32_const(n->inputs[2])) return QF_OK;
    int64_t nin = 0, nw = 0;
    const float *s_in = qc_dq_scale(n->inputs[0], &nin), *sw = qc_dq_scale(n->inputs[1], &nw);
    const qf_node *wdq = n->inputs[1] ? n->inputs[1]->producer : NULL;
    if (!s_in || nin != 1 || !sw || !wdq->inputs[0] || !qf_value_is_const(wdq->inputs[0]) ||
        wdq->inputs[0]->type.dtype != QF_DTYPE_I8)
        return QF_OK;
    qf_value *b = n->inputs[2];
    const int64_t nb = qf_tensor_numel(&b->type);
    if (n->op == QF_OP_GEMM &&
        (qf_node_attr_float(n, "alpha", 1.0f) != 1.0f || qf_node_attr_float(n, "beta", 1.0f) != 1.0f || b->type.ndim != 1)) {
        qf_pass_skip(ctx, n, "bias '%s' left float: gemm alpha / beta are not 1 or C is not a vector", b->name);
        return QF_OK;
    }
    if (b->nuses != 1 || b->is_output) {
        qf_pass_skip(ctx, n, "bias '%s' left float: %d readers", b->name, b->nuses);
        return QF_OK;
    }
    /* ConvTranspose per channel with groups: the weight's axis 1 holds O/g
     * channels, output channel o uses scale o mod (O/g). */
    float *swx = NULL;
    if (nw > 1 && nw != nb && n->op == QF_OP_CONV_TRANSPOSE && nb % nw == 0) {
        swx = qf_malloc(sizeof *swx * (size_t)nb);
        if (!swx) return QF_ERR_NOMEM;
        for (int64_t o = 0; o < nb; o++) swx[o] = sw[o % nw];
        sw = swx;
        nw = nb;
    }
    if (nw != 1 && nw != nb) {
        qf_free(swx);
        qf_pass_skip(ctx, n, "bias '%s' left float: %lld entries, %lld weight scales", b->name, (long long)nb,
                     (long long)nw);
        return QF_OK;
    }
    float *scale = qf_malloc(sizeof *scale * (size_t)(nb ? nb : 1));
    qf_status st = scale ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_rewrite_check_finite(b, n);
    if (st == QF_OK) {
        qf_pass_rewrite(ctx, n, NULL, "bias '%s' to int32 at input scale %g x weight scale", b->name, s_in[0]);
        st = qf_qdq_bias(g, b, s_in[0], sw, nw, scale);
        *changed = true;
    }
    qf_free(scale);
    qf_free(swx);
    return st;
}

/* One fake_quant to its QDQ form (checked by qc_check). */
static qf_status qc_convert(qf_graph *g, qf_pass_ctx *ctx, qf_node *fq)
{
    const int32_t qmin = (int32_t)qf_node_attr_int(fq, "quant_min", -128);
    const int32_t qmax = (int32_t)qf_node_attr_int(fq, "quant_max", 127);
    const int64_t n = qf_tensor_numel(&fq->inputs[1]->type);
    const float *sbuf = fq->inputs[1]->type.data;
    qf_value *x = fq->inputs[0];
    if (qc_is_weight(fq)) {
        float *scale = qf_malloc(sizeof *scale * (size_t)n);
        if (!scale) return QF_ERR_NOMEM;
        memcpy(scale, sbuf, sizeof *scale * (size_t)n);
        int axis = -1;
        if (n > 1) {
            int64_t a = qf_node_attr_int(fq, "axis", 0);
            axis = (int)(a < 0 ? a + x->type.ndim : a);
        }
        qf_pass_rewrite(ctx, fq, NULL, "weight '%s' to int8 [%d, %d]%s behind a DequantizeLinear", x->name, qmin,
                        qmax, n > 1 ? " per channel" : "");
        qf_status st = qf_qdq_weight(g, x, scale, axis, qmin, qmax);
        qf_free(scale);
        QF_TRY(st);
        /* qf_qdq_weight moved the fake_quant onto the DQ output: drop it. */
        return qf_rewrite_splice_out(g, fq, fq->inputs[0]);
    }
    const float scale = sbuf[0];
    const int32_t zp = (int32_t)((const float *)fq->inputs[2]->type.data)[0];
    const qf_dtype qdt = qmin == 0 ? QF_DTYPE_U8 : QF_DTYPE_I8;
    qf_pass_rewrite(ctx, fq, NULL, "QuantizeLinear -> DequantizeLinear (%s, scale %g, zero point %d) on '%s'",
                    qdt == QF_DTYPE_U8 ? "uint8" : "int8", scale, zp, x->name);
    QF_TRY(qf_rewrite_splice_out(g, fq, x));
    return qf_qdq_pair(g, x, scale, zp, qdt);
}

static qf_status qat_convert_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    int nfq = 0;
    qf_graph_for_each_node(g, n) nfq += n->op == QF_OP_FAKE_QUANT;
    qf_node **fqs = qf_malloc(sizeof *fqs * (size_t)(nfq ? nfq : 1));
    bool *weight = qf_malloc(sizeof *weight * (size_t)(nfq ? nfq : 1));
    if (!fqs || !weight) {
        qf_free(fqs);
        qf_free(weight);
        return QF_ERR_NOMEM;
    }
    int k = 0;
    qf_status st = QF_OK;
    qf_graph_for_each_node(g, n) {
        if (n->op == QF_OP_FAKE_QUANT) fqs[k++] = n;
        /* The simulation has no ONNX form: qat_bn_remove must have taken it out. */
        if (st == QF_OK && (n->op == QF_OP_QAT_BN_WEIGHT || n->op == QF_OP_QAT_BN_OUTPUT ||
                            n->op == QF_OP_QAT_BN_STATS || n->op == QF_OP_QAT_BN_EXACT))
            st = qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): the simulated BatchNorm fusion is still in the graph "
                          "(run qat_bn_remove first)", n->name, qf_op_name(n->op));
    }
    for (int i = 0; i < nfq && st == QF_OK; i++) {
        st = qc_check(fqs[i]);
        weight[i] = qc_is_weight(fqs[i]);
    }
    /* Weights first, then activations (the order of PTQ's convert); a
     * converted fake_quant is gone from the graph: its kind was noted. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nfq && st == QF_OK; i++)
            if (weight[i] == (pass == 0)) {
                st = qc_convert(g, ctx, fqs[i]);
                *changed = true;
            }
    qf_free(fqs);
    qf_free(weight);
    if (st == QF_OK && *changed) {
        /* Only nodes that exist now; qc_bias appends DQ nodes. */
        int nops = 0;
        qf_graph_for_each_node(g, n) nops++;
        qf_node **ops = qf_malloc(sizeof *ops * (size_t)(nops ? nops : 1));
        if (!ops) return QF_ERR_NOMEM;
        k = 0;
        qf_graph_for_each_node(g, n) ops[k++] = n;
        for (int i = 0; i < nops && st == QF_OK; i++) {
            qf_op op = ops[i]->op;
            if (op == QF_OP_CONV || op == QF_OP_CONV_TRANSPOSE || op == QF_OP_GEMM || op == QF_OP_LINEAR)
                st = qc_bias(g, ctx, ops[i], changed);
        }
        qf_free(ops);
    }
    /* A BatchNormalization left unfolded keeps no internal attribute. */
    qf_graph_for_each_node(g, n) if (st == QF_OK && n->op == QF_OP_BATCH_NORM && qf_node_attr(n, "qfold_frozen")) {
        qf_node_remove_attr(n, "qfold_frozen");
        *changed = true;
    }
    if (st == QF_OK && *changed && g->opset < 13) g->opset = 13;
    if (st == QF_OK && *changed) st = qf_graph_toposort(g);
    return st;
}

const qf_pass qf_pass_qat_convert = {
    .name = "qat_convert",
    .summary = "QAT: fake_quants to ONNX QDQ (int8 weights per their qparams, Q/DQ pairs, int32 bias)",
    .run = qat_convert_run,
};
