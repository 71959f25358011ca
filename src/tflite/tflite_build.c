/* The TFLite export's builder (tflite_build.h): what the driver
 * (tflite_export.c) and every emitter (tflite_ops.c, tflite_ops_qdq.c, and
 * any emitter a row of the table names) build the model with: the export's
 * memory and messages, the NHWC layout, tensors and buffers, activation
 * qparams, operators, operands, and the DQ -> op -> [act] -> Q groups the
 * lowering leaves. It calls no other file of src/tflite/: the driver and the
 * emitters depend on it, never the other way round. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/io.h"
#include "qfold/quant.h"
#include "qfold/schema.h"
#include "tflite_build.h"

/* ---- memory and messages --------------------------------------------------------- */

void *qf_tfl_ex_alloc(qf_tfl_ex *e, size_t n)
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

const char *qf_tfl_ex_strdup(qf_tfl_ex *e, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = qf_tfl_ex_alloc(e, n);
    if (p) memcpy(p, s, n);
    return p;
}

/* The ONNX node a lowered node comes from ("<name>_int8" -> "<name>"). */
const char *qf_tfl_node_name(qf_tfl_ex *e, const qf_node *n)
{
    size_t len = strlen(n->name);
    if (len > 5 && strcmp(n->name + len - 5, "_int8") == 0) {
        char *p = qf_tfl_ex_alloc(e, len - 4);
        if (!p) return n->name;
        memcpy(p, n->name, len - 5);
        return p;
    }
    return n->name;
}

/* Whether `qfold quantize --exclude` kept node `name` in float: it is in
 * g's metadata QF_QUANT_EXCLUDED_KEY (one name a line), or a piece of such
 * a node (a grouped conv split per group: "<name>_g<k>"). */
static bool tfl_user_excluded(const qf_graph *g, const char *name)
{
    enum { CAP = 1 << 16 };
    char *buf = qf_malloc(CAP);
    bool found = false, hit = false;
    if (buf && qf_onnx_metadata(g, QF_QUANT_EXCLUDED_KEY, buf, CAP, &found) == QF_OK && found) {
        for (char *p = buf; p && !hit;) {
            char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            if (!strncmp(name, p, len)) {
                const char *t = name + len;
                if (!*t) hit = true;
                else if (t[0] == '_' && t[1] == 'g' && t[2]) hit = strspn(t + 2, "0123456789") == strlen(t + 2);
            }
            p = nl ? nl + 1 : NULL;
        }
    }
    qf_free(buf);
    return hit;
}

qf_status qf_tfl_refuse(qf_tfl_ex *e, const qf_node *n, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!n) return qf_error(QF_ERR_UNSUPPORTED, "tflite export: %s", why);
    /* the node being emitted is named by its row's ONNX op (a lowered QLinearConv
     * as "Conv", or as "Gemm" when its emitter finds a Linear layer) */
    const char *op = n == e->node && e->source ? e->source : qf_op_label(n);
    const char *name = qf_tfl_node_name(e, n);
    if (tfl_user_excluded(e->g, name))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "tflite export: node '%s' (%s): %s; it was excluded by the user (the --exclude of "
                        "`qfold quantize` or `qfold qat` kept it in float): quantize without excluding it "
                        "to export",
                        name, op, why);
    return qf_error(QF_ERR_UNSUPPORTED, "tflite export: node '%s' (%s): %s", name, op, why);
}

/* ---- layout ------------------------------------------------------------------ */

/* NCHW -> NHWC: physical axis i of a rank-4 tensor holds logical axis
 * qf_tfl_nhwc[i]; the logical axis a is physical qf_tfl_axis(a). */
const int qf_tfl_nhwc_from[4] = {0, 2, 3, 1};
int qf_tfl_phys_axis(int rank, int a) { return rank == 4 ? (a == 0 ? 0 : a == 1 ? 3 : a - 1) : a; }

/* The TFLite shape of a logical shape (unknown dims, a dynamic batch, as 1). */
static void phys_shape(const qf_tensor *t, int32_t *s)
{
    for (int i = 0; i < t->ndim; i++) {
        int l = t->ndim == 4 ? qf_tfl_nhwc_from[i] : i;
        s[i] = t->dims[l] > 0 ? (int32_t)t->dims[l] : 1;
    }
}

/* Permute `n` elements of `es` bytes of a [d0, d1, d2, d3] tensor to the
 * order given by perm (out axis i = in axis perm[i]). */
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

qf_status qf_tfl_grow(void **p, int *cap, int need, size_t es)
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
static uint32_t add_buffer(qf_tfl_ex *e, const void *data, size_t size)
{
    if (qf_tfl_grow((void **)&e->b, &e->cb, e->nb + 1, sizeof *e->b) != QF_OK) return 0;
    void *p = qf_tfl_ex_alloc(e, size);
    if (!p) return 0;
    if (data) memcpy(p, data, size);
    e->b[e->nb].data = p;
    e->b[e->nb].size = size;
    return (uint32_t)++e->nb;
}

/* A new tensor; its index or -1 (out of memory). data (may be NULL: an
 * activation) of `size` bytes is copied into its own buffer. */
int qf_tfl_add_tensor(qf_tfl_ex *e, const char *name, int type, int ndim, const int32_t *shape, const void *data, size_t size,
                      int nq, const float *scale, const int64_t *zp, int qdim, bool param)
{
    int ct = e->ct;
    if (qf_tfl_grow((void **)&e->t, &ct, e->nt + 1, sizeof *e->t) != QF_OK) return -1;
    if (qf_tfl_grow((void **)&e->t_param, &e->ct, e->nt + 1, sizeof *e->t_param) != QF_OK) return -1;
    qf_tfl_tensor *t = &e->t[e->nt];
    memset(t, 0, sizeof *t);
    t->name = qf_tfl_ex_strdup(e, name);
    t->type = type;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int32_t) * (size_t)ndim);
    if (data || size) {
        t->buffer = add_buffer(e, data, size);
        if (!t->buffer) return -1;
    }
    if (nq > 0) {
        float *s = qf_tfl_ex_alloc(e, sizeof *s * (size_t)nq);
        int64_t *z = qf_tfl_ex_alloc(e, sizeof *z * (size_t)nq);
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

qf_status qf_tfl_need(int ti) { return ti < 0 ? qf_error(QF_ERR_NOMEM, "tflite export: out of memory") : QF_OK; }

/* A per-tensor int8 quantization: scale (f32 scalar) and zero point (i8 scalar). */
bool qf_tfl_qp_from(const qf_value *s, const qf_value *z, qf_tfl_qp *qp)
{
    if (!s || !z || !qf_value_is_const(s) || !qf_value_is_const(z) || s->type.dtype != QF_DTYPE_F32 ||
        z->type.dtype != QF_DTYPE_I8 || qf_tensor_numel(&s->type) != 1 || qf_tensor_numel(&z->type) != 1)
        return false;
    qp->scale = *(const float *)s->type.data;
    qp->zp = *(const int8_t *)z->type.data;
    return qp->scale > 0.0f && isfinite(qp->scale);
}

/* The qparams of an int8 activation (which input of an int8 op carries its
 * output's qparams, which ops move int8 values unchanged: the ops'
 * quantization rows, qfold/quant.h): from its producer (a Q, a lowered node,
 * an int8 shape op or max pool: its input's), else from a reader (a DQ, a
 * lowered node: the scale and zero point after the operand, an int8 shape
 * op: its output's). */
static bool act_qp_depth(const qf_value *v, qf_tfl_qp *qp, int depth, bool up)
{
    if (!v || depth > 64) return false;
    const qf_node *p = v->producer;
    if (p && p->op == QF_OP_QUANTIZE && p->ninputs == 3) return qf_tfl_qp_from(p->inputs[1], p->inputs[2], qp);
    int slot = p ? qf_quant_op_out_qparams_slot(p->op) : -1;
    if (slot >= 0) return qf_tfl_qp_from(p->inputs[slot], p->inputs[slot + 1], qp);
    for (int i = 0; i < v->nuses; i++) {
        const qf_node *u = v->uses[i].node;
        const int k = v->uses[i].slot;
        if (u->op == QF_OP_DEQUANTIZE && u->ninputs == 3 && k == 0)
            return qf_tfl_qp_from(u->inputs[1], u->inputs[2], qp);
        /* a lowered node reads each int8 operand followed by its scale and zero point */
        if (qf_quant_op_out_qparams_slot(u->op) >= 0 && k + 2 < u->ninputs && qf_tfl_qp_from(u->inputs[k + 1], u->inputs[k + 2], qp))
            return true;
    }
    for (int i = 0; i < v->nuses; i++) {
        const qf_node *u = v->uses[i].node;
        if (v->uses[i].slot == 0 && qf_quant_op_passes_qparams(u->op) && u->outputs[0]->type.dtype == QF_DTYPE_I8 &&
            act_qp_depth(u->outputs[0], qp, depth + 1, false))
            return true;
    }
    if (up && p && p->ninputs >= 1 && qf_quant_op_passes_qparams(p->op)) return act_qp_depth(p->inputs[0], qp, depth + 1, true);
    return false;
}

bool qf_tfl_act_qp(const qf_value *v, qf_tfl_qp *qp) { return act_qp_depth(v, qp, 0, true); }

/* The tensor of an int8 (or, at the boundaries, float) activation value. */
qf_status qf_tfl_act_tensor(qf_tfl_ex *e, const qf_node *n, const qf_value *v, int *out)
{
    if (e->vmap[v->id]) {
        *out = e->vmap[v->id] - 1;
        return QF_OK;
    }
    int32_t shape[QF_MAX_DIMS];
    phys_shape(&v->type, shape);
    if (e->nlc && e->nlc[v->id] && v->type.ndim == 3) {
        int32_t c = shape[1];
        shape[1] = shape[2];
        shape[2] = c;
    }
    int ti;
    if (v->type.dtype == QF_DTYPE_F32) {
        ti = qf_tfl_add_tensor(e, v->name, QF_TFL_FLOAT32, v->type.ndim, shape, NULL, 0, 0, NULL, NULL, 0, false);
    } else if (v->type.dtype == QF_DTYPE_I8) {
        qf_tfl_qp qp;
        if (!qf_tfl_act_qp(v, &qp))
            return qf_tfl_refuse(e, n, "int8 tensor '%s' has no per-tensor scale and zero point",
                                 v->name);
        int64_t zp = qp.zp;
        ti = qf_tfl_add_tensor(e, v->name, QF_TFL_INT8, v->type.ndim, shape, NULL, 0, 1, &qp.scale, &zp, 0, false);
    } else {
        return qf_tfl_refuse(e, n, "tensor '%s' is %s, not int8", v->name, qf_dtype_name(v->type.dtype));
    }
    QF_TRY(qf_tfl_need(ti));
    e->vmap[v->id] = ti + 1;
    *out = ti;
    return QF_OK;
}

/* An int32 constant [n] (shape, axes, permutation) or [n/2, 2] (paddings). */
int qf_tfl_i32_tensor(qf_tfl_ex *e, const char *owner, const char *what, const int32_t *v, int n, bool pairs)
{
    char name[512];
    snprintf(name, sizeof name, "%.440s_%.60s", owner, what);
    int32_t shape[2] = {pairs ? n / 2 : n, 2};
    return qf_tfl_add_tensor(e, name, QF_TFL_INT32, pairs ? 2 : 1, shape, v, sizeof *v * (size_t)n,
                             0, NULL, NULL, 0, false);
}

/* ---- operators ------------------------------------------------------------------- */

/* Append an operator; *op gets it to fill the options. */
qf_status qf_tfl_add_op(qf_tfl_ex *e, const qf_node *n, int code, const int32_t *in, int nin, const int32_t *out, int nout,
                        int64_t macs, qf_tfl_op **op)
{
    int c = e->cops;
    QF_TRY(qf_tfl_grow((void **)&e->ops, &c, e->nops + 1, sizeof *e->ops));
    QF_TRY(qf_tfl_grow((void **)&e->info, &e->cops, e->nops + 1, sizeof *e->info));
    int32_t *io = qf_tfl_ex_alloc(e, sizeof *io * (size_t)(nin + nout));
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
    f->op = qf_tfl_builtin_name(code);
    f->node = qf_tfl_ex_strdup(e, qf_tfl_node_name(e, n)); /* the result outlives the private graph */
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

/* An operand of an elementwise op of output rank `rank`: an activation's
 * tensor, or a constant int8 (qparams qp) broadcast-expanded to the rank and
 * permuted to NHWC. */
qf_status qf_tfl_operand(qf_tfl_ex *e, const qf_node *n, const qf_value *v, qf_tfl_qp qp, int rank, int *out)
{
    if (!qf_value_is_const(v)) {
        if (v->type.ndim != rank && rank == 4)
            return qf_tfl_refuse(
                e, n, "operand '%s' of rank %d broadcast against rank 4 (NHWC) is not exported",
                v->name, v->type.ndim);
        return qf_tfl_act_tensor(e, n, v, out);
    }
    if (v->type.dtype != QF_DTYPE_I8) return qf_tfl_refuse(e, n, "constant '%s' is not int8", v->name);
    if (e->vmap[v->id]) {
        *out = e->vmap[v->id] - 1;
        return QF_OK;
    }
    int64_t d[QF_MAX_DIMS];
    int k = rank - v->type.ndim;
    if (k < 0) return qf_tfl_refuse(e, n, "constant '%s' has a higher rank than the output", v->name);
    for (int i = 0; i < rank; i++) d[i] = i < k ? 1 : v->type.dims[i - k];
    int64_t numel = qf_tensor_numel(&v->type);
    int8_t *data = qf_tfl_ex_alloc(e, (size_t)numel);
    if (!data) return QF_ERR_NOMEM;
    int32_t shape[QF_MAX_DIMS];
    if (rank == 4) {
        qf_tfl_permute4(v->type.data, data, d, qf_tfl_nhwc_from, 1);
        for (int i = 0; i < 4; i++) shape[i] = (int32_t)d[qf_tfl_nhwc_from[i]];
    } else {
        memcpy(data, v->type.data, (size_t)numel);
        for (int i = 0; i < rank; i++) shape[i] = (int32_t)d[i];
    }
    int64_t zp = qp.zp;
    int ti = qf_tfl_add_tensor(e, v->name, QF_TFL_INT8, rank, shape, data, (size_t)numel, 1, &qp.scale, &zp, 0, true);
    QF_TRY(qf_tfl_need(ti));
    e->vmap[v->id] = ti + 1;
    *out = ti;
    return QF_OK;
}

/* The lowered Gemm form: Reshape([N, K] -> [N, K, 1, 1]) -> QLinearConv 1x1
 * -> Reshape([N, M]); NULL unless ql heads it (the second reshape returned). */
const qf_node *qf_tfl_fc_tail(const qf_node *ql)
{
    if (ql->op != QF_OP_QLINEAR_CONV || qf_node_attr(ql, "kernel_shape")) return NULL;
    const qf_node *r1 = ql->inputs[0]->producer;
    const qf_value *y = ql->outputs[0];
    if (!r1 || r1->op != QF_OP_RESHAPE || r1->inputs[0]->type.ndim != 2 || r1->outputs[0]->nuses != 1) return NULL;
    if (y->nuses != 1 || y->is_output || y->uses[0].node->op != QF_OP_RESHAPE) return NULL;
    const qf_node *r2 = y->uses[0].node;
    return r2->outputs[0]->type.ndim == 2 ? r2 : NULL;
}

/* The lowered Gemm's first reshape: part of the FULLY_CONNECTED. */
bool qf_tfl_fc_head(const qf_node *r)
{
    if (r->op != QF_OP_RESHAPE || r->outputs[0]->nuses != 1) return false;
    const qf_node *u = r->outputs[0]->uses[0].node;
    return r->outputs[0]->uses[0].slot == 0 && qf_tfl_fc_tail(u);
}

/* ---- DQ -> op -> [act] -> Q groups ------------------------------------------------- */

/* Input i of a float op: the int8 value behind its DequantizeLinear (per
 * tensor), or an int8 value read directly (shape ops). */
qf_status qf_tfl_group_in(qf_tfl_ex *e, const qf_node *n, int i, const qf_value **v, qf_tfl_qp *qp)
{
    const qf_value *x = n->inputs[i];
    if (x->type.dtype == QF_DTYPE_I8) {
        *v = x;
        if (qf_value_is_const(x)) return qf_tfl_refuse(e, n, "an int8 constant read without its DequantizeLinear");
        if (!qf_tfl_act_qp(x, qp)) return qf_tfl_refuse(e, n, "int8 input '%s' has no per-tensor qparams", x->name);
        return QF_OK;
    }
    const qf_node *dq = x->producer;
    if (!dq || dq->op != QF_OP_DEQUANTIZE || dq->ninputs != 3 || dq->inputs[0]->type.dtype != QF_DTYPE_I8 ||
        !qf_tfl_qp_from(dq->inputs[1], dq->inputs[2], qp))
        return qf_tfl_refuse(e, n,
                             "input '%s' is not a per-tensor int8 DequantizeLinear (computed in "
                             "float: TFLite's int8 "
                             "ops cannot express it)",
                             x->name);
    *v = dq->inputs[0];
    return QF_OK;
}

/* The output of a float op: its int8 value (shape ops on int8), or the Q
 * that reads it (through a Relu / Relu6 / Clip when `act` is not NULL: the
 * fused activation in *act); the Q and the activation are consumed. */
qf_status qf_tfl_group_out(qf_tfl_ex *e, const qf_node *n, const qf_value **y, qf_tfl_qp *qp, int *act)
{
    const qf_value *v = n->outputs[0];
    if (act) *act = QF_TFL_ACT_NONE;
    if (v->type.dtype == QF_DTYPE_I8) {
        *y = v;
        return qf_tfl_act_qp(v, qp)
                   ? QF_OK
                   : qf_tfl_refuse(e, n, "int8 output '%s' has no per-tensor qparams", v->name);
    }
    const qf_node *u = v->nuses == 1 && !v->is_output ? v->uses[0].node : NULL, *a = NULL;
    if (u && act && (u->op == QF_OP_RELU || u->op == QF_OP_RELU6 || u->op == QF_OP_CLIP) &&
        u->outputs[0]->nuses == 1 && !u->outputs[0]->is_output) {
        a = u;
        u = u->outputs[0]->uses[0].node;
    }
    if (!u || u->op != QF_OP_QUANTIZE || u->ninputs != 3 || !qf_tfl_qp_from(u->inputs[1], u->inputs[2], qp))
        return qf_tfl_refuse(e, n, "output '%s' is not requantized to int8 by one per-tensor QuantizeLinear", v->name);
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
        else return qf_tfl_refuse(e, n, "its activation '%s' is none of RELU, RELU6", a->name);
        e->skip[a->id] = true;
    }
    e->skip[u->id] = true;
    *y = u->outputs[0];
    return QF_OK;
}

/* A layout op on int8 data (reshape, transpose, pad): its input and output,
 * which must carry the same qparams (`what` names the op in the refusal). */
qf_status qf_tfl_group_same_qp(qf_tfl_ex *e, const qf_node *n, const char *what, const qf_value **x, const qf_value **y)
{
    qf_tfl_qp xq, yq;
    *x = *y = NULL;
    QF_TRY(qf_tfl_group_in(e, n, 0, x, &xq));
    QF_TRY(qf_tfl_group_out(e, n, y, &yq, NULL));
    if (xq.scale != yq.scale || xq.zp != yq.zp) return qf_tfl_refuse(e, n, "a %s that changes the qparams", what);
    return QF_OK;
}
