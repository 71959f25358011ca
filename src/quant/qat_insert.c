/* QAT's fake-quantization: the QAT annotation (qf_quant_annotate_qat) made
 * into fake_quant nodes, as prepare_qat_fx / the Neutron quantizer's QAT
 * prepare insert FakeQuantize modules.
 *
 *      x ─[fq]─ Conv(W─[fq]─, b) ─ BN ─ Relu ─[fq]─ MaxPool ─[fq*]─ linear(W─[fq]─) ─[fq]─
 *
 * Every activation with a qspec (observed, shared, fixed; graph inputs
 * included) gets a fake_quant after it that all its readers (and the graph
 * output) read instead; the members of a shared-qparams group read one set
 * of buffers (scale, zero point, running min / max: [fq*] above updates the
 * same ones as the MaxPool input's), as torch shares one observer; a fixed
 * group's fake_quant does not observe (and carries `fixed` = 1: qat_convert
 * accepts its never-observed running range). Activations: the profile's
 * activation format, per tensor, moving-average min / max with averaging
 * constant 0.01, the profile's min_scale as the smallest scale. Weights: a
 * fake_quant per channel (the qspec's axis) or per tensor, symmetric, the
 * profile's weight range, its own running range (moving average as well:
 * torch's default per-channel weight fake-quant), marked `weight` = 1 for
 * qat_convert. Biases are not fake-quantized (torch's QAT neither); convert
 * makes them int32.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/quant.h"
#include "qfold/schema.h"

#define QAT_AVERAGING 0.01f

typedef struct qat_bufs {
    qf_value *scale, *zp, *min, *max;
} qat_bufs;

static qf_value *qat_vec(qf_graph *g, const char *base, const char *what, int64_t n, float v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, 1, &n) != QF_OK) return NULL;
    for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = v;
    char name[600];
    snprintf(name, sizeof name, "%.500s_fq_%s", base, what);
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_BUFFER, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

static qf_status qat_make_bufs(qf_graph *g, const char *base, int64_t n, float scale, float zp, qat_bufs *b)
{
    b->scale = qat_vec(g, base, "scale", n, scale);
    b->zp = b->scale ? qat_vec(g, base, "zero_point", n, zp) : NULL;
    b->min = b->zp ? qat_vec(g, base, "min", n, INFINITY) : NULL;
    b->max = b->min ? qat_vec(g, base, "max", n, -INFINITY) : NULL;
    return b->max ? QF_OK : QF_ERR_NOMEM;
}

/* A fake_quant of v over buffers b, placed after v's producer (or first,
 * for a graph input or a constant); every reader of v but the new node
 * (and the graph output) reads its output. */
static qf_status qat_insert(qf_graph *g, qf_value *v, const qat_bufs *b, const qf_qformat *f, int axis, float eps,
                            bool observe, qf_node **made)
{
    char name[600];
    snprintf(name, sizeof name, "%.500s_fq", v->name);
    qf_value *in[5] = {v, b->scale, b->zp, b->min, b->max};
    qf_node *fq = v->producer ? qf_graph_insert_node(g, v->producer, true, QF_OP_FAKE_QUANT, name, 5, in, 1)
                  : g->first  ? qf_graph_insert_node(g, g->first, false, QF_OP_FAKE_QUANT, name, 5, in, 1)
                              : qf_graph_add_node(g, QF_OP_FAKE_QUANT, name, 5, in, 1);
    if (!fq) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_attr_int(g, fq, "quant_min", f->qmin));
    QF_TRY(qf_node_set_attr_int(g, fq, "quant_max", f->qmax));
    QF_TRY(qf_node_set_attr_int(g, fq, "symmetric", f->scheme == QF_QSCHEME_SYMMETRIC));
    QF_TRY(qf_node_set_attr_int(g, fq, "axis", axis < 0 ? 0 : axis));
    QF_TRY(qf_node_set_attr_float(g, fq, "averaging_constant", QAT_AVERAGING));
    QF_TRY(qf_node_set_attr_float(g, fq, "eps", eps));
    QF_TRY(qf_node_set_attr_int(g, fq, "observe", observe));
    QF_TRY(qf_node_infer(g, fq));
    /* Readers (and a graph output) move to the fake-quantized value; the
     * fake_quant itself reads v again. */
    QF_TRY(qf_graph_replace_uses(g, v, fq->outputs[0]));
    QF_TRY(qf_node_set_input(g, fq, 0, v));
    *made = fq;
    return QF_OK;
}

qf_status qf_quant_qat_insert(qf_graph *g, qf_quant_annotation *a, const qf_quant_profile *p, int *count)
{
    const int nv = a->nvalues;
    qat_bufs *group = qf_calloc((size_t)(nv ? nv : 1), sizeof *group);
    if (!group) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    int made = 0;
    for (int id = 0; id < nv && st == QF_OK; id++) {
        qf_value *v = g->values[id];
        const qf_qspec *s = &a->spec[id];
        if (!v || s->kind == QF_QSPEC_FLOAT || s->kind == QF_QSPEC_BIAS) continue;
        qf_node *fq = NULL;
        if (s->kind == QF_QSPEC_WEIGHT) {
            const int64_t n = s->axis >= 0 ? v->type.dims[s->axis] : 1;
            qat_bufs b;
            st = qat_make_bufs(g, v->name, n, 1.0f, 0.0f, &b);
            if (st == QF_OK) st = qat_insert(g, v, &b, &s->format, s->axis, FLT_EPSILON, true, &fq);
            /* qat_convert: an int8 constant behind a DequantizeLinear. Any
             * other fake_quant, also one on a constant (the operand of the
             * input normalisation's Sub / Mul, an activation to the
             * annotation), becomes a Q -> DQ pair, as PTQ writes it. */
            if (st == QF_OK) st = qf_node_set_attr_int(g, fq, "weight", 1);
        } else {
            const uint32_t r = qf_quant_group(a, (uint32_t)id);
            const qf_qspec *rs = &a->spec[r];
            const bool fixed = rs->kind == QF_QSPEC_FIXED;
            if (!group[r].scale)
                st = qat_make_bufs(g, g->values[r]->name, 1, fixed ? rs->fixed.scale : 1.0f,
                                   fixed ? (float)rs->fixed.zero_point : 0.0f, &group[r]);
            /* the group's format (a MatMul's input: symmetric), one for all its members */
            const qf_qformat *f = s->kind == QF_QSPEC_FIXED ? &p->activation : &s->format;
            if (st == QF_OK) st = qat_insert(g, v, &group[r], f, -1, p->min_scale, !fixed, &fq);
            /* qat_convert: its qparams are given, not observed. */
            if (st == QF_OK && fixed) st = qf_node_set_attr_int(g, fq, "fixed", 1);
        }
        if (st == QF_OK) made++;
    }
    qf_free(group);
    if (count) *count = made;
    return st;
}

/* --- the pass ------------------------------------------------------------------ */

/* quant_qat_insert: the QAT annotation and its fake_quants, for the
 * session's profile (qf_pass_options.user, as quant_annotate). A model in
 * which the profile quantizes nothing is refused: QAT would train a float
 * model and finalize could write no int8 model from it. */
static qf_status quant_qat_insert_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    qf_quant_session *s = qf_pass_user(ctx);
    if (!s || !s->profile)
        return qf_error(QF_ERR_INVALID, "pass 'quant_qat_insert' needs a quantization session (qfold qat)");
    qf_quant_annotation_free(s->annotation);
    s->annotation = NULL;
    QF_TRY(qf_quant_annotate_ex(
        g, s->profile, &(qf_quant_annotate_options){.qat = true, .exclude = s->exclude, .nexclude = s->nexclude},
        &s->annotation));
    qf_quant_annotation *a = s->annotation;
    for (int i = 0; i < a->nskips; i++) qf_pass_skip(ctx, a->skips[i].node, "left in float: %s", a->skips[i].reason);
    int made = 0;
    QF_TRY(qf_quant_qat_insert(g, a, s->profile, &made));
    /* What qat_convert refuses whatever training does is refused now, not
     * after an hour of training. */
    QF_TRY(qf_quant_qat_convert_check(g));
    if (!made || !a->nquantized) {
        if (a->nskips)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): left in float (%s), and nothing else in the model is "
                            "quantized for target '%s': nothing to train for QAT",
                            a->skips[0].node->name, qf_op_label(a->skips[0].node), a->skips[0].reason, s->profile->name);
        return qf_error(QF_ERR_UNSUPPORTED, "the model has nothing target '%s' quantizes (no conv, linear or "
                        "activation pattern): nothing to train for QAT", s->profile->name);
    }
    /* One report line per fake_quant made, on the node it was made as. */
    qf_graph_for_each_node(g, n)
    {
        if (n->op != QF_OP_FAKE_QUANT || !n->inputs[0]) continue;
        const qf_value *v = n->inputs[0];
        bool weight = qf_node_attr_int(n, "weight", 0) != 0;
        qf_pass_rewrite(ctx, n, NULL, "fake_quant on %s '%s'%s", weight ? "weight" : "activation", v->name,
                        qf_tensor_numel(&n->inputs[1]->type) > 1 ? " (per channel)" : "");
    }
    *changed = true;
    return QF_OK;
}

const qf_pass qf_pass_quant_qat_insert = {
    .name = "quant_qat_insert",
    .summary = "QAT: annotate for the target (BatchNorm inside its conv / linear's pattern) and insert fake_quants "
               "with moving-average observers",
    .run = quant_qat_insert_run,
};
