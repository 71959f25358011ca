/* int8 TFLite export (include/qfold/tflite.h): a QDQ graph -> the integer
 * nodes of the int8 executor's lowering -> TFLite operators, tensors and
 * buffers -> the flatbuffer (tflite_write.h).
 *
 * The lowering (src/quant/lower.c, TFLite's requantization) already finds
 * every DQ -> op -> [ReLU] -> Q group and resolves its qparams; each
 * resulting node is written by the emitter of its op's row in the op table
 * (`qf_tfl_rows`, tflite_rows.c): tflite_ops.c has those of the integer
 * nodes, tflite_ops_qdq.c those of the few DQ -> op -> Q forms the lowering
 * leaves as they are (Sub, Softmax, Sigmoid, Tanh, HardSwish, and the shape
 * ops Reshape / Flatten / Transpose / Pad, which need no arithmetic). This
 * file holds the driver: the private lowered copy, graph inputs / outputs,
 * each node through its row, the arena plan, the result and the report; the
 * builder every emitter shares is tflite_build.c (tflite_build.h says who has
 * what).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/strbuf.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "qfold/tflite.h"
#include "tflite_build.h"
#include "tflite_write.h"

#ifndef QF_VERSION
#define QF_VERSION "?"
#endif
/* ---- driver ------------------------------------------------------------------- */

/* A graph input: float (its Q makes the int8 input) or int8 already. */
static qf_status emit_inputs(qf_tfl_ex *e)
{
    for (int i = 0; i < e->g->ninputs; i++) {
        qf_value *x = e->g->inputs[i];
        if (qf_value_is_const(x) || x->nuses == 0) continue;
        if (x->type.dtype == QF_DTYPE_I8) {
            int ti;
            QF_TRY(qf_tfl_act_tensor(e, NULL, x, &ti));
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
        QF_TRY(qf_tfl_act_tensor(e, q, q->outputs[0], &qi));
        if (!e->o->float_io) {
            e->gin[e->ngin++] = qi;
            continue;
        }
        int xi;
        QF_TRY(qf_tfl_act_tensor(e, q, x, &xi));
        qf_tfl_op *op;
        QF_TRY(qf_tfl_add_op(e, q, QF_TFL_QUANTIZE, &xi, 1, &qi, 1, 0, &op));
        e->gin[e->ngin++] = xi;
    }
    return QF_OK;
}

static qf_status add_gout(qf_tfl_ex *e, int ti)
{
    for (int i = 0; i < e->ngout; i++)
        if (e->gout[i] == ti) return QF_OK;
    QF_TRY(qf_tfl_grow((void **)&e->gout, &e->cgout, e->ngout + 1, sizeof *e->gout));
    e->gout[e->ngout++] = ti;
    return QF_OK;
}

/* A graph output: the DQ of an int8 tensor (float out), or int8. */
static qf_status emit_outputs(qf_tfl_ex *e)
{
    for (int i = 0; i < e->g->noutputs; i++) {
        qf_value *y = e->g->outputs[i];
        const qf_node *dq = y->producer;
        if (y->type.dtype == QF_DTYPE_I8) {
            int ti;
            QF_TRY(qf_tfl_act_tensor(e, dq, y, &ti));
            QF_TRY(add_gout(e, ti));
            continue;
        }
        if (!dq || dq->op != QF_OP_DEQUANTIZE || dq->inputs[0]->type.dtype != QF_DTYPE_I8)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "tflite export: output '%s' is not the DequantizeLinear of an int8 tensor%s%s%s", y->name,
                            dq ? " (made by node '" : "", dq ? dq->name : "", dq ? "')" : "");
        int qi;
        QF_TRY(qf_tfl_act_tensor(e, dq, dq->inputs[0], &qi));
        if (!e->o->float_io) {
            QF_TRY(add_gout(e, qi));
            continue;
        }
        int yi;
        QF_TRY(qf_tfl_act_tensor(e, dq, y, &yi));
        qf_tfl_op *op;
        QF_TRY(qf_tfl_add_op(e, dq, QF_TFL_DEQUANTIZE, &qi, 1, &yi, 1, 0, &op));
        QF_TRY(add_gout(e, yi));
    }
    return QF_OK;
}

/* Is node n one the export leaves out: a DQ (of a weight, or one a group
 * reads: groups take its int8 input), a graph output's DQ (emit_outputs)? */
static bool passive(const qf_node *n) { return n->op == QF_OP_DEQUANTIZE; }

static qf_status emit_ops(qf_tfl_ex *e)
{
    for (qf_node *n = e->g->first; n; n = n->next) {
        if (e->skip[n->id] || passive(n)) continue;
        if (n->op == QF_OP_RESHAPE && qf_tfl_fc_head(n)) continue;
        const qf_tfl_row *r = &qf_tfl_rows[n->op];
        e->node = n;
        e->source = r->source;
        if (!r->emit) {
            bool float_in = false;
            for (int i = 0; i < n->ninputs; i++)
                if (n->inputs[i] && !qf_value_is_const(n->inputs[i]) && n->inputs[i]->type.dtype == QF_DTYPE_F32)
                    float_in = true;
            return qf_tfl_refuse(
                e, n,
                float_in ? "computed in float (not a quantized DQ -> op -> Q group TFLite's int8 "
                           "ops can express)"
                         : "no TFLite int8 form");
        }
        QF_TRY(r->emit(e, n, r));
    }
    return QF_OK;
}

static qf_status arena_plan(qf_tfl_ex *e, qf_tflite_result *r);

/* Reshape node r between rank-3 [N, C, L] (slot 0 or its output, `in`) and
 * [N, C, 1, L]: a lift / unlift of conv1d_to_2d. */
static bool h1_reshape(const qf_node *r, bool in)
{
    if (!r || r->op != QF_OP_RESHAPE) return false;
    const qf_tensor *a = &r->inputs[0]->type, *b = &r->outputs[0]->type;
    if (!in) {
        const qf_tensor *t = a;
        a = b;
        b = t;
    }
    return a->ndim == 3 && b->ndim == 4 && b->dims[2] == 1 && a->dims[0] == b->dims[0] &&
           a->dims[1] == b->dims[1] && a->dims[2] == b->dims[3];
}

/* The rank-3 interface tensors of 1-D runs, written channels-last [N, L, C]
 * (as a rank-4 one is NHWC): an input whose int8 value only Reshapes to
 * [N, C, 1, L] read, an output whose int8 value a Reshape from it writes
 * and only the output's DequantizeLinear reads. */
static void mark_nlc(qf_tfl_ex *e)
{
    for (int i = 0; i < e->g->ninputs; i++) {
        qf_value *x = e->g->inputs[i], *q = x;
        if (qf_value_is_const(x) || x->type.ndim != 3 || x->nuses == 0) continue;
        if (x->type.dtype != QF_DTYPE_I8) {
            if (x->nuses != 1 || x->uses[0].node->op != QF_OP_QUANTIZE) continue;
            q = x->uses[0].node->outputs[0];
        }
        bool all = q->nuses > 0;
        for (int u = 0; u < q->nuses; u++)
            all &= q->uses[u].slot == 0 && h1_reshape(q->uses[u].node, true);
        if (all) e->nlc[x->id] = e->nlc[q->id] = true;
    }
    for (int i = 0; i < e->g->noutputs; i++) {
        qf_value *y = e->g->outputs[i], *v = y;
        if (y->type.ndim != 3) continue;
        if (y->type.dtype != QF_DTYPE_I8) {
            if (!y->producer || y->producer->op != QF_OP_DEQUANTIZE) continue;
            v = y->producer->inputs[0];
        }
        bool only = h1_reshape(v->producer, false);
        for (int u = 0; u < v->nuses; u++)
            only &=
                v->uses[u].node->op == QF_OP_DEQUANTIZE && v->uses[u].node->outputs[0]->is_output;
        if (only) e->nlc[y->id] = e->nlc[v->id] = true;
    }
}

static void ex_free(qf_tfl_ex *e)
{
    for (int i = 0; i < e->npool; i++) qf_free(e->pool[i]);
    qf_free(e->pool);
    qf_free(e->t);
    qf_free(e->t_param);
    qf_free(e->vmap);
    qf_free(e->nlc);
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
static qf_status lower_copy(const qf_graph *g, int batch, qf_graph **out)
{
    qf_graph *c;
    QF_TRY(qf_graph_clone(g, &c));
    qf_status st = qf_tfl_uint8_to_int8(c);
    /* A Shape node reads the batch (PyTorch's Resize sizes of a dynamic
     * batch): the batch the export writes (a dynamic one as 1) is set here,
     * so that its chain folds to a constant. */
    bool shapes = false;
    for (const qf_node *n = c->first; n; n = n->next) shapes |= n->op == QF_OP_SHAPE;
    /* --batch: every input's first dim (a dynamic one exports as 1) */
    for (int i = 0; i < c->ninputs && st == QF_OK && (batch > 0 || shapes); i++) {
        qf_value *x = c->inputs[i];
        if (qf_value_is_const(x) || x->type.ndim < 1 || (batch <= 0 && x->type.dims[0] >= 0)) continue;
        int64_t d[QF_MAX_DIMS];
        memcpy(d, x->type.dims, sizeof(int64_t) * (size_t)x->type.ndim);
        d[0] = batch > 0 ? batch : 1;
        st = qf_graph_set_input_shape(c, i, x->type.ndim, d);
    }
    if (st == QF_OK && shapes) st = qf_graph_fold_constants(c, NULL);
    if (st == QF_OK) st = fold_const_q(c);
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
    /* TFLite has no grouped convolution (1 < group < channels) and no 1-D
     * one: a group per CONV_2D / TRANSPOSE_CONV between a SPLIT and a
     * CONCATENATION, 1-D runs as 2-D with H = 1 (src/passes/: the same
     * integers as the lowered graph `qfold run` computes) */
    if (st == QF_OK) {
        static const char *const passes[] = {"split_group_conv", "conv1d_to_2d", NULL};
        qf_pass_report *rep = NULL;
        st = qf_passes_run(c, passes, &(qf_pass_options){.verify = false}, &rep);
        qf_pass_report_free(rep);
        if (st == QF_OK) st = qf_graph_toposort(c);
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
    qf_tfl_ex e = {0};
    e.o = o;
    if (o->batch < 0 || o->batch > 65536)
        return qf_error(QF_ERR_INVALID, "tflite export: batch %d is not in [1, 65536]", o->batch);
    qf_status st = lower_copy(g, o->batch, &e.g);
    if (st == QF_OK) {
        e.vmap = qf_calloc((size_t)e.g->nvalues + 1, sizeof *e.vmap);
        e.skip = qf_calloc((size_t)e.g->next_node_id + 1, sizeof *e.skip);
        e.gin = qf_calloc((size_t)e.g->ninputs + 1, sizeof *e.gin);
        e.nlc = qf_calloc((size_t)e.g->nvalues + 1, sizeof *e.nlc);
        if (!e.vmap || !e.skip || !e.gin || !e.nlc) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) mark_nlc(&e);
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
 * then the tensors it read for the last time are freed.
 *
 * The tensors are bucketed by the op that places them and the op that frees
 * them, and the placement looks at the live tensors only: linear in ops +
 * tensors for a bounded number of live tensors (a scan of every tensor at
 * every op made a 10^5-op chain take 49 s). The offset found is the same:
 * the lowest one clear of every live tensor, whatever their order. */
static qf_status arena_plan(qf_tfl_ex *e, qf_tflite_result *r)
{
    const int nt = e->nt, nk = e->nops + 2; /* steps -1 .. nops, bucket k + 1 */
    int *first = qf_malloc(sizeof *first * (size_t)(nt + 1)), *last = qf_malloc(sizeof *last * (size_t)(nt + 1));
    int64_t *off = qf_malloc(sizeof *off * (size_t)(nt + 1)), *size = qf_malloc(sizeof *size * (size_t)(nt + 1));
    int *place_at = qf_calloc((size_t)nk + 1, sizeof *place_at),
        *free_at = qf_calloc((size_t)nk + 1, sizeof *free_at);
    int *placed = qf_malloc(sizeof *placed * (size_t)(nt + 1)),
        *freed = qf_malloc(sizeof *freed * (size_t)(nt + 1));
    int *live = qf_malloc(sizeof *live * (size_t)(nt + 1)),
        *live_pos = qf_malloc(sizeof *live_pos * (size_t)(nt + 1));
    qf_status st = QF_OK;
    if (!first || !last || !off || !size || !place_at || !free_at || !placed || !freed || !live ||
        !live_pos) {
        st = QF_ERR_NOMEM;
        goto done;
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
    /* Buckets (counting sort, tensors in index order within a step): the
     * tensors placed at step k, and those freed after it. */
    for (int t = 0; t < nt; t++) {
        if (e->t[t].buffer || first[t] < -1 || first[t] >= e->nops) continue;
        place_at[first[t] + 2]++;
        if (last[t] >= -1 && last[t] < e->nops) free_at[last[t] + 2]++;
    }
    for (int k = 1; k <= nk; k++) {
        place_at[k] += place_at[k - 1];
        free_at[k] += free_at[k - 1];
    }
    for (int t = 0; t < nt; t++) {
        if (e->t[t].buffer || first[t] < -1 || first[t] >= e->nops) continue;
        placed[place_at[first[t] + 1]++] = t;
        if (last[t] >= -1 && last[t] < e->nops) freed[free_at[last[t] + 1]++] = t;
    }
    /* place_at[k + 1] is now the end of step k's run, place_at[k] its start. */
    int64_t peak = 0;
    int nlive = 0;
    r->activation_bytes = 0;
    for (int k = -1; k < e->nops; k++) {
        for (int i = k + 1 > 0 ? place_at[k] : 0; i < place_at[k + 1]; i++) {
            const int t = placed[i];
            r->activation_bytes += size[t];
            /* lowest offset clear of every live tensor */
            int64_t at = 0;
            for (bool moved = true; moved;) {
                moved = false;
                for (int l = 0; l < nlive; l++) {
                    const int u = live[l];
                    if (off[u] < at + size[t] && at < off[u] + size[u]) {
                        at = off[u] + size[u];
                        moved = true;
                    }
                }
            }
            off[t] = at;
            live_pos[t] = nlive;
            live[nlive++] = t;
            if (at + size[t] > peak) peak = at + size[t];
        }
        for (int i = k + 1 > 0 ? free_at[k] : 0; i < free_at[k + 1]; i++) {
            const int t = freed[i];
            if (off[t] < 0) continue;
            off[t] = -1;
            const int moved_t = live[--nlive];
            live[live_pos[t]] = moved_t;
            live_pos[moved_t] = live_pos[t];
        }
    }
    r->peak_activation_bytes = peak;
done:
    qf_free(first), qf_free(last), qf_free(off), qf_free(size);
    qf_free(place_at), qf_free(free_at), qf_free(placed), qf_free(freed), qf_free(live),
        qf_free(live_pos);
    return st;
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
    return qf_tflite_report_json_extra(r, max_lsb, NULL, json, len);
}

qf_status qf_tflite_report_json_extra(const qf_tflite_result *r, const double *max_lsb,
                                      const qf_tflite_report_extra *x, char **json, size_t *len)
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
        if (max_lsb && isfinite(max_lsb[i])) qf_strbuf_printf(&b, "%.17g", max_lsb[i]);
        else qf_strbuf_puts(&b, "null");
        if (x && x->op && x->op[i]) {
            qf_strbuf_puts(&b, ", ");
            qf_strbuf_puts(&b, x->op[i]);
        }
        qf_strbuf_puts(&b, "}");
    }
    qf_strbuf_puts(&b, "\n  ]");
    if (x && x->top) {
        qf_strbuf_puts(&b, ",\n  ");
        qf_strbuf_puts(&b, x->top);
    }
    qf_strbuf_puts(&b, "\n}\n");
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
