/* qat_export: the internal QAT graph (qat_prepare's, trained or not) in the
 * form PyTorch 1.13 exports a QAT model to ONNX (prepare_qat_fx with
 * FakeQuantize modules, observers disabled, eval(), opset 13), which `qfold
 * finalize` reads back: what `qfold qat --keep-qat` writes.
 *
 *   internal                                                   exported
 *   W ─ qat_bn_weight(γ, σ²) ─[fq]─┐                           W·s (float32) ─ Q ─ DQ ─┐
 *   x ─────────────── op(x, ·) ─ qat_bn_output(γ, σ², b) ─ BN   x ── op(x, ·, 0) ─ Div(s) ─ [Add(b)] ─ BN
 *
 *   - ConvBn (conv, conv_transpose): the weight initializer is W·s computed
 *     in float32 as qat_bn_weight does (so its Q/DQ sees what the weight
 *     fake_quant saw), the op gets a zero bias (ConvBn2d's
 *     _forward_approximate convolves with zeros_like(bias)), then Div by s
 *     ([1, O, 1, ...]), Add of the original bias when there is one, then the
 *     BatchNormalization (inference, its internal `qfold_frozen` dropped);
 *   - LinearBn1d (linear): no bias on the op (torch's F.linear(x, W·s)),
 *     then Div, Add, BN; export writes the linear as Gemm;
 *   - every fake_quant becomes QuantizeLinear -> DequantizeLinear with its
 *     current scale and zero point (per channel with axis for a weight):
 *     int8 for a range inside [-128, 127], uint8 inside [0, 255].
 * The simulation's Div is y / s in float32, as qat_bn_output computes it,
 * and Add adds b after it: the exported graph computes in inference what
 * the internal one does, but for the Q/DQ pairs below.
 *
 * Differences from the fake_quant the model trained with, in what ONNX can
 * say: QuantizeLinear saturates to the whole int8 (uint8) range, so a weight
 * fake_quant trained on [-127, 127] (the neutron profile) is written with
 * int8's [-128, 127] (PyTorch's exporter accepts only that range as well):
 * a weight that rounds to -128 (|w| above 127.5 scales, which the fake_quant
 * clamped to -127) is not clamped in the file; `qfold qat --keep-qat`
 * records the trained range in metadata_props "qfold.weight_range", and
 * `finalize` clamps to it when it reads the model back. QuantizeLinear divides by the scale
 * where the fake_quant multiplies by 1 / scale (as torch's): the two can
 * round a value lying on a tie to different neighbours.
 * Every check runs before the first write; a chain the pass cannot write
 * (a qat_bn_output not made by qat_bn_add, a range without an ONNX type) is
 * an error naming the node.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../passes/rewrite.h"
#include "qdq.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

typedef struct qe_chain {
    qf_node *out, *prod, *wnode, *fq; /* qat_bn_output, conv / linear, qat_bn_weight, the weight fake_quant */
} qe_chain;

/* The chain of qat_bn_output `on`, or an error naming it. */
static qf_status qe_match(qf_node *on, qe_chain *c)
{
    memset(c, 0, sizeof *c);
    c->out = on;
    qf_node *p = on->inputs[0] ? on->inputs[0]->producer : NULL;
    if (!p || (p->op != QF_OP_CONV && p->op != QF_OP_CONV_TRANSPOSE && p->op != QF_OP_LINEAR))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (qat_bn_output): its input does not come from a conv / "
                        "conv_transpose / linear", on->name);
    if (p->outputs[0]->nuses != 1 || p->outputs[0]->is_output || (p->ninputs > 2 && p->inputs[2]))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (qat_bn_output): %s '%s' has other readers or a bias of its own",
                        on->name, qf_op_name(p->op), p->name);
    qf_node *wn = p->ninputs > 1 && p->inputs[1] ? p->inputs[1]->producer : NULL;
    if (wn && wn->op == QF_OP_FAKE_QUANT) {
        c->fq = wn;
        wn = wn->inputs[0] ? wn->inputs[0]->producer : NULL;
    }
    if (!wn || wn->op != QF_OP_QAT_BN_WEIGHT || wn->inputs[1] != on->inputs[1] || wn->inputs[2] != on->inputs[2] ||
        wn->outputs[0]->nuses != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (qat_bn_output): the weight of %s '%s' is not its qat_bn_weight",
                        on->name, qf_op_name(p->op), p->name);
    for (int i = 0; i < 3; i++)
        if (!qf_rewrite_is_f32_const(wn->inputs[i]))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (qat_bn_weight): input '%s' is not a float32 constant",
                            wn->name, wn->inputs[i] ? wn->inputs[i]->name : "?");
    if (on->ninputs > 3 && on->inputs[3] && !qf_rewrite_is_f32_const(on->inputs[3]))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (qat_bn_output): bias '%s' is not a float32 constant", on->name,
                        on->inputs[3]->name);
    c->prod = p;
    c->wnode = wn;
    return QF_OK;
}

/* s_c = gamma_c / sqrtf(var_c + eps), float32 as src/ops/qat.c. */
static float qe_scale(const qf_node *n, int64_t ch)
{
    const float eps = qf_node_attr_float(n, "epsilon", 1e-5f);
    const float gamma = ((const float *)n->inputs[1]->type.data)[ch], var = ((const float *)n->inputs[2]->type.data)[ch];
    return gamma / sqrtf(var + eps);
}

/* A float32 constant named after base + suffix; takes t. */
static qf_value *qe_const(qf_graph *g, const char *base, const char *suffix, qf_tensor *t)
{
    char name[512];
    snprintf(name, sizeof name, "%.400s_%s", base, suffix);
    qf_value *v = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, t);
    if (!v) qf_tensor_free(t);
    return v;
}

/* One ConvBn / LinearBn chain to op(x, DQ(Q(W·s)), 0) -> Div -> [Add] -> BN. */
static qf_status qe_chain_write(qf_graph *g, qf_pass_ctx *ctx, const qe_chain *c)
{
    qf_node *p = c->prod, *on = c->out, *wn = c->wnode;
    qf_value *w = wn->inputs[0], *b = on->ninputs > 3 ? on->inputs[3] : NULL;
    const qf_tensor *wt = &w->type, *yt = &on->outputs[0]->type;
    const int64_t axis = qf_node_attr_int(wn, "axis", 0), group = qf_node_attr_int(wn, "group", 1);
    const int64_t O = axis == 0 ? wt->dims[0] : group * wt->dims[1];
    /* W·s as qat_bn_weight's forward (axis 1: conv_transpose's [C_in, O/g, k...]). */
    qf_tensor ws;
    QF_TRY(qf_tensor_init(&ws, QF_DTYPE_F32, wt->ndim, wt->dims));
    const int64_t numel = qf_tensor_numel(wt);
    const int64_t per = axis == 0 ? 1 : O / group, rows = axis == 0 ? O : wt->dims[0];
    const int64_t inner = rows > 0 && per > 0 ? numel / (rows * per) : 0;
    const float *src = wt->data;
    float *dst = ws.data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < per; j++) {
            const int64_t ch = axis == 0 ? r : (r / (rows / group)) * per + j;
            const float s = qe_scale(wn, ch);
            const int64_t o = (r * per + j) * inner;
            for (int64_t i = 0; i < inner; i++) dst[o + i] = src[o + i] * s;
        }
    qf_value *wsv = qe_const(g, w->name, "bn_scaled", &ws);
    if (!wsv) return QF_ERR_NOMEM;
    /* s and b along Y's dim 1: [1, O, 1, ...] as torch's bias_shape. */
    int64_t sd[QF_MAX_DIMS];
    for (int d = 0; d < yt->ndim; d++) sd[d] = d == 1 ? O : 1;
    qf_tensor ts, tb;
    QF_TRY(qf_tensor_init(&ts, QF_DTYPE_F32, yt->ndim, sd));
    for (int64_t ch = 0; ch < O; ch++) ((float *)ts.data)[ch] = qe_scale(wn, ch);
    qf_value *sv = qe_const(g, on->name, "scale_factor", &ts), *bv = NULL;
    if (!sv) return QF_ERR_NOMEM;
    if (b) {
        QF_TRY(qf_tensor_init(&tb, QF_DTYPE_F32, yt->ndim, sd));
        memcpy(tb.data, b->type.data, sizeof(float) * (size_t)O);
        bv = qe_const(g, b->name, "reshaped", &tb);
        if (!bv) return QF_ERR_NOMEM;
    }
    /* The weight: W·s under the fake_quant (or read by the op). */
    if (c->fq)
        QF_TRY(qf_node_set_input(g, c->fq, 0, wsv));
    else
        QF_TRY(qf_node_set_input(g, p, 1, wsv));
    qf_value *wdead[1] = {w};
    qf_graph_remove_node(g, wn);
    qf_rewrite_drop_dead_consts(g, wdead, 1);
    /* conv / conv_transpose: a zero bias, as ConvBn2d convolves. */
    if (p->op != QF_OP_LINEAR) {
        qf_tensor tz;
        QF_TRY(qf_tensor_init(&tz, QF_DTYPE_F32, 1, &O));
        qf_value *zv = qe_const(g, p->name, "zero_bias", &tz);
        if (!zv) return QF_ERR_NOMEM;
        if (p->ninputs > 2)
            QF_TRY(qf_node_set_input(g, p, 2, zv));
        else
            QF_TRY(qf_node_add_input(g, p, zv));
    }
    /* qat_bn_output -> Div(s) [-> Add(b)]. */
    char name[512];
    snprintf(name, sizeof name, "%.480s_Div", on->name);
    qf_value *din[2] = {p->outputs[0], sv};
    qf_node *div = qf_graph_insert_node(g, on, false, QF_OP_DIV, name, 2, din, 1);
    if (!div) return QF_ERR_NOMEM;
    QF_TRY(qf_node_infer(g, div));
    qf_value *last = div->outputs[0];
    if (bv) {
        snprintf(name, sizeof name, "%.480s_Add", on->name);
        qf_value *ain[2] = {last, bv};
        qf_node *add = qf_graph_insert_node(g, on, false, QF_OP_ADD, name, 2, ain, 1);
        if (!add) return QF_ERR_NOMEM;
        QF_TRY(qf_node_infer(g, add));
        last = add->outputs[0];
    }
    qf_pass_rewrite(ctx, on, NULL, "simulated fusion of %s '%s' as PyTorch exports it: W*s%s, Div%s", qf_op_name(p->op),
                    p->name, c->fq ? " under Q/DQ" : "", bv ? ", Add" : "");
    return qf_rewrite_splice_out(g, on, last);
}

/* The ONNX type of a fake_quant's range, or an error naming it. */
static qf_status qe_fq_type(const qf_node *fq, qf_dtype *qdt)
{
    const int64_t qmin = qf_node_attr_int(fq, "quant_min", -128), qmax = qf_node_attr_int(fq, "quant_max", 127);
    if (qmin >= -128 && qmax <= 127) *qdt = QF_DTYPE_I8;
    else if (qmin >= 0 && qmax <= 255) *qdt = QF_DTYPE_U8;
    else
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (fake_quant): range [%lld, %lld] fits neither int8 nor uint8",
                        fq->name, (long long)qmin, (long long)qmax);
    if (fq->ninputs < 5) return qf_error(QF_ERR_INVALID, "node '%s' (fake_quant): inputs missing", fq->name);
    for (int i = 1; i < 3; i++)
        if (!qf_rewrite_is_f32_const(fq->inputs[i]))
            return qf_error(QF_ERR_INVALID, "node '%s' (fake_quant): buffer '%s' is not a float32 constant", fq->name,
                            fq->inputs[i] ? fq->inputs[i]->name : "?");
    return QF_OK;
}

/* A fake_quant to Q -> DQ with its current qparams. */
static qf_status qe_fq_write(qf_graph *g, qf_pass_ctx *ctx, qf_node *fq)
{
    qf_dtype qdt;
    QF_TRY(qe_fq_type(fq, &qdt));
    qf_value *x = fq->inputs[0];
    const int64_t n = qf_tensor_numel(&fq->inputs[1]->type);
    float *scale = qf_malloc(sizeof *scale * (size_t)n);
    int32_t *zp = qf_malloc(sizeof *zp * (size_t)n);
    if (!scale || !zp) {
        qf_free(scale);
        qf_free(zp);
        return QF_ERR_NOMEM;
    }
    memcpy(scale, fq->inputs[1]->type.data, sizeof *scale * (size_t)n);
    for (int64_t c = 0; c < n; c++) zp[c] = (int32_t)((const float *)fq->inputs[2]->type.data)[c];
    int axis = -1;
    if (n > 1) {
        const int64_t a = qf_node_attr_int(fq, "axis", 0);
        axis = (int)(a < 0 ? a + x->type.ndim : a);
    }
    qf_pass_rewrite(ctx, fq, NULL, "QuantizeLinear -> DequantizeLinear on '%s'%s", x->name,
                    n > 1 ? " per channel" : "");
    qf_status st = qf_rewrite_splice_out(g, fq, x);
    if (st == QF_OK) st = qf_qdq_pair_axis(g, x, scale, zp, n, axis, qdt);
    qf_free(scale);
    qf_free(zp);
    return st;
}

static qf_status qat_export_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    int nn = 0;
    qf_graph_for_each_node(g, n) nn++;
    qf_node **list = qf_malloc(sizeof *list * (size_t)(nn ? nn : 1));
    qe_chain *chains = qf_malloc(sizeof *chains * (size_t)(nn ? nn : 1));
    if (!list || !chains) {
        qf_free(list);
        qf_free(chains);
        return QF_ERR_NOMEM;
    }
    int k = 0, nc = 0;
    qf_status st = QF_OK;
    qf_graph_for_each_node(g, n) list[k++] = n;
    /* Checks first. */
    for (int i = 0; i < nn && st == QF_OK; i++) {
        qf_node *n = list[i];
        qf_dtype qdt;
        if (n->op == QF_OP_QAT_BN_OUTPUT) st = qe_match(n, &chains[nc++]);
        else if (n->op == QF_OP_FAKE_QUANT) st = qe_fq_type(n, &qdt);
    }
    for (int i = 0; i < nn && st == QF_OK; i++)
        if (list[i]->op == QF_OP_QAT_BN_WEIGHT) {
            bool owned = false;
            for (int j = 0; j < nc; j++) owned = owned || chains[j].wnode == list[i];
            if (!owned)
                st = qf_error(QF_ERR_UNSUPPORTED, "node '%s' (qat_bn_weight): not part of a simulated fusion",
                              list[i]->name);
        }
    for (int i = 0; i < nc && st == QF_OK; i++) {
        st = qe_chain_write(g, ctx, &chains[i]);
        *changed = true;
    }
    /* Every fake_quant (the chains kept theirs). */
    for (int i = 0; i < nn && st == QF_OK; i++)
        if (list[i]->op == QF_OP_FAKE_QUANT) {
            st = qe_fq_write(g, ctx, list[i]);
            *changed = true;
        }
    /* BatchNormalization's internal attribute has no ONNX meaning. */
    for (int i = 0; i < nn && st == QF_OK; i++)
        if (list[i]->op == QF_OP_BATCH_NORM && qf_node_attr(list[i], "qfold_frozen")) {
            qf_node_remove_attr(list[i], "qfold_frozen");
            *changed = true;
        }
    qf_free(list);
    qf_free(chains);
    if (st == QF_OK && *changed && g->opset < 13) g->opset = 13;
    if (st == QF_OK && *changed) st = qf_graph_toposort(g);
    return st;
}

const qf_pass qf_pass_qat_export = {
    .name = "qat_export",
    .summary = "QAT: the training graph as PyTorch 1.13 exports a QAT model (W*s under Q/DQ, Div, Add, BN)",
    .run = qat_export_run,
};
