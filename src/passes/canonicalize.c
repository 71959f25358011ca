/* canonicalize: bring imported ONNX idioms to qfold's canonical ops, so that
 * the folds and the quantizer see one form per concept.
 *
 *   Gemm(A, B const, C?)           -> linear(A, W [out, in], bias [out]?)
 *       any transB / alpha / beta; W = alpha * op(B)^T and bias = beta * C are
 *       computed in double and rounded once. C must be a constant that
 *       broadcasts as a per-output bias ([N], [1, N], [1], scalar).
 *       transA = 1 is skipped (A would need a transpose).
 *   MatMul(x, W const [in, out]) -> Add(bias const [out])
 *                                  -> linear(x, W^T [out, in], bias)
 *       only when the MatMul output has exactly one user (the Add) and is not
 *       a graph output, and the bias broadcasts over the last axis only.
 *       A MatMul with a constant weight and no bias Add is LEFT AS MatMul
 *       (recorded as a skip): fuse_batch_norm folds into MatMul directly and
 *       the exporter then writes back exactly what came in.
 *   Clip(x, 0, 6)                  -> relu6(x)       (min, max constant)
 *   Identity(x)                    -> x              (removed)
 *   Dropout(x) in inference        -> x              (no training_mode input
 *       or a constant false one, mask output unused)
 *
 * Removing an Identity / Dropout whose output is a graph output keeps the
 * graph output's name (qf_graph_replace_uses renames the input value); when
 * the input is itself a graph input, a constant or another graph output the
 * node stays (renaming would change the model's interface) and a skip is
 * recorded. Every rewrite and every candidate left alone is recorded. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"


static void qf_canon_set_f64(qf_tensor *t, int64_t i, double x)
{
    if (t->dtype == QF_DTYPE_F32) ((float *)t->data)[i] = (float)x;
    else ((double *)t->data)[i] = x;
}

/* The one element of a constant with exactly one element. */
static bool qf_const_scalar(const qf_value *v, double *out)
{
    if (!qf_value_is_const(v) || qf_tensor_numel(&v->type) != 1) return false;
    *out = qf_tensor_get_f64(&v->type, 0);
    return true;
}

/* Can a constant of this shape act as a per-output bias of length n for an
 * output of rank `rank`? All dims but the last are 1 and the last is n or 1;
 * its rank must not exceed the output's (or the broadcast would grow it). */
static bool qf_is_bias_shape(const qf_value *c, int64_t n, int rank)
{
    const qf_tensor *t = &c->type;
    if (t->ndim > rank) return false;
    for (int d = 0; d + 1 < t->ndim; d++)
        if (t->dims[d] != 1) return false;
    return t->ndim == 0 || t->dims[t->ndim - 1] == n || t->dims[t->ndim - 1] == 1;
}

/* A new [n] bias constant: scale * c broadcast (c has n or 1 elements). */
static qf_value *qf_make_bias(qf_graph *g, const qf_value *c, int64_t n, double scale, qf_dtype dt)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, 1, &n) != QF_OK) return NULL;
    int64_t cn = qf_tensor_numel(&c->type);
    for (int64_t i = 0; i < n; i++)
        qf_canon_set_f64(&t, i, scale * qf_tensor_get_f64(&c->type, cn == 1 ? 0 : i));
    char name[512];
    snprintf(name, sizeof name, "%.480s_bias", c->name);
    qf_value *v = qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &t);
    if (!v) qf_tensor_free(&t);
    return v;
}

/* The new node's output takes over `from`: same type, every use, the graph
 * output slot and name. Returns the name `to` should get once `from` is gone
 * (NULL when replace_uses already gave it the output's name). */
static qf_status qf_take_over(qf_graph *g, qf_value *from, qf_value *to, const char **rename)
{
    to->type.dtype = from->type.dtype;
    to->type.ndim = from->type.ndim;
    memcpy(to->type.dims, from->type.dims, sizeof to->type.dims);
    *rename = from->is_output ? NULL : from->name; /* arena string: outlives the value */
    return qf_graph_replace_uses(g, from, to);
}

/* --- Gemm -> linear ---------------------------------------------------------------- */

static qf_status qf_canon_gemm(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_node **next, bool *changed)
{
    qf_value *a = n->inputs[0], *b = n->inputs[1], *c = n->ninputs > 2 ? n->inputs[2] : NULL;
    int64_t trans_a = qf_node_attr_int(n, "transA", 0), trans_b = qf_node_attr_int(n, "transB", 0);
    double alpha = qf_node_attr_float(n, "alpha", 1.0f), beta = qf_node_attr_float(n, "beta", 1.0f);
    if (!qf_value_is_const(b)) {
        qf_pass_skip(ctx, n, "weight B '%s' is not a constant", b->name);
        return QF_OK;
    }
    if (b->type.ndim != 2 || !qf_dtype_is_float(b->type.dtype)) {
        qf_pass_skip(ctx, n, "weight B must be a 2-D float tensor");
        return QF_OK;
    }
    if (trans_a) {
        qf_pass_skip(ctx, n, "transA=1: A would need a transpose before a linear");
        return QF_OK;
    }
    int64_t rows = b->type.dims[0], cols = b->type.dims[1];
    int64_t nout = trans_b ? rows : cols, nin = trans_b ? cols : rows;
    bool has_bias = c && beta != 0.0;
    if (has_bias && !qf_value_is_const(c)) {
        qf_pass_skip(ctx, n, "C '%s' is not a constant", c->name);
        return QF_OK;
    }
    if (has_bias && (!qf_is_bias_shape(c, nout, 2) || !qf_dtype_is_float(c->type.dtype))) {
        char s[128];
        qf_pass_skip(ctx, n, "C has shape %s: not a per-output bias of %" PRId64,
                     qf_shape_str(c->type.ndim, c->type.dims, s, sizeof s), nout);
        return QF_OK;
    }

    /* W[o, i] = alpha * B'[i, o], with B' = B^T when transB. The usual torch
     * export (transB=1, alpha=1) keeps B itself: no copy. */
    qf_value *w = b;
    if (!trans_b || alpha != 1.0) {
        QF_TRY(qf_value_load(g, b)); /* left in the model file (graph.h) */
        qf_tensor t;
        int64_t wd[2] = {nout, nin};
        QF_TRY(qf_tensor_init(&t, b->type.dtype, 2, wd));
        for (int64_t o = 0; o < nout; o++)
            for (int64_t i = 0; i < nin; i++) {
                double x = qf_tensor_get_f64(&b->type, trans_b ? o * nin + i : i * nout + o);
                qf_canon_set_f64(&t, o * nin + i, alpha * x);
            }
        char name[512];
        snprintf(name, sizeof name, "%.480s_linear", b->name);
        w = qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &t);
        if (!w) {
            qf_tensor_free(&t);
            return QF_ERR_NOMEM;
        }
    }
    qf_value *bias = NULL;
    if (has_bias) {
        if (beta == 1.0 && c->type.ndim == 1 && c->type.dims[0] == nout) bias = c;
        else if (!(bias = qf_make_bias(g, c, nout, beta, c->type.dtype))) return QF_ERR_NOMEM;
    }

    char name[512];
    snprintf(name, sizeof name, "%.480s_linear", n->name);
    qf_value *ins[3] = {a, w, bias};
    qf_node *lin = qf_graph_insert_node(g, n, false, QF_OP_LINEAR, name, bias ? 3 : 2, ins, 1);
    if (!lin) return QF_ERR_NOMEM;
    qf_pass_rewrite(ctx, n, NULL, "gemm -> linear (transB=%" PRId64 ", alpha=%g, beta=%g%s)", trans_b, alpha,
                    beta, bias ? "" : ", no bias");
    const char *rename;
    QF_TRY(qf_take_over(g, n->outputs[0], lin->outputs[0], &rename));
    const char *old_name = n->name; /* arena string: outlives the node */
    qf_graph_remove_node(g, n);
    if (rename) QF_TRY(qf_graph_rename_value(g, lin->outputs[0], rename));
    QF_TRY(qf_graph_rename_node(g, lin, old_name));
    *next = lin->next;
    *changed = true;
    return QF_OK;
}

/* --- MatMul + Add -> linear -------------------------------------------------------- */

static qf_status qf_canon_matmul(qf_graph *g, qf_pass_ctx *ctx, qf_node *m, qf_node **next, bool *changed)
{
    qf_value *x = m->inputs[0], *w = m->inputs[1], *y = m->outputs[0];
    if (!qf_value_is_const(w)) {
        qf_pass_skip(ctx, m, "weight '%s' is not a constant", w->name);
        return QF_OK;
    }
    if (w->type.ndim != 2 || !qf_dtype_is_float(w->type.dtype)) {
        qf_pass_skip(ctx, m, "weight must be a 2-D float tensor (has rank %d)", w->type.ndim);
        return QF_OK;
    }
    if (x->type.ndim < 2) {
        qf_pass_skip(ctx, m, "input has rank %d: linear needs rank >= 2", x->type.ndim);
        return QF_OK;
    }
    if (y->is_output || y->nuses != 1) {
        qf_pass_skip(ctx, m, "output has %d user%s%s: left as MatMul", y->nuses, y->nuses == 1 ? "" : "s",
                     y->is_output ? " and is a graph output" : "");
        return QF_OK;
    }
    qf_node *add = y->uses[0].node;
    if (add->op != QF_OP_ADD) {
        qf_pass_skip(ctx, m, "no bias Add after it (next op is %s): left as MatMul", qf_op_name(add->op));
        return QF_OK;
    }
    int64_t nin = w->type.dims[0], nout = w->type.dims[1];
    qf_value *c = add->inputs[1 - y->uses[0].slot];
    if (!qf_value_is_const(c)) {
        qf_pass_skip(ctx, m, "the Add's other operand '%s' is not a constant: left as MatMul", c->name);
        return QF_OK;
    }
    if (!qf_is_bias_shape(c, nout, y->type.ndim) || c->type.dtype != w->type.dtype) {
        char s[128];
        qf_pass_skip(ctx, m, "the Add's operand has shape %s: not a per-output bias of %" PRId64,
                     qf_shape_str(c->type.ndim, c->type.dims, s, sizeof s), nout);
        return QF_OK;
    }

    /* linear wants [out, in]: an exact transpose, no arithmetic. */
    QF_TRY(qf_value_load(g, w)); /* left in the model file (graph.h) */
    qf_tensor t;
    int64_t wd[2] = {nout, nin};
    QF_TRY(qf_tensor_init(&t, w->type.dtype, 2, wd));
    size_t es = qf_dtype_size(w->type.dtype);
    for (int64_t o = 0; o < nout; o++)
        for (int64_t i = 0; i < nin; i++)
            memcpy((char *)t.data + (size_t)(o * nin + i) * es, (const char *)w->type.data + (size_t)(i * nout + o) * es, es);
    char name[512];
    snprintf(name, sizeof name, "%.480s_t", w->name);
    qf_value *wt = qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &t);
    if (!wt) {
        qf_tensor_free(&t);
        return QF_ERR_NOMEM;
    }
    qf_value *bias = c;
    if (!(c->type.ndim == 1 && c->type.dims[0] == nout) && !(bias = qf_make_bias(g, c, nout, 1.0, c->type.dtype)))
        return QF_ERR_NOMEM;

    snprintf(name, sizeof name, "%.480s_linear", m->name);
    qf_value *ins[3] = {x, wt, bias};
    qf_node *lin = qf_graph_insert_node(g, m, false, QF_OP_LINEAR, name, 3, ins, 1);
    if (!lin) return QF_ERR_NOMEM;
    qf_pass_rewrite(ctx, m, NULL, "matmul + add '%s' -> linear", add->name);
    const char *rename;
    QF_TRY(qf_take_over(g, add->outputs[0], lin->outputs[0], &rename));
    const char *old_name = m->name; /* arena string: outlives the node */
    qf_graph_remove_node(g, add);
    qf_graph_remove_node(g, m);
    if (rename) QF_TRY(qf_graph_rename_value(g, lin->outputs[0], rename));
    QF_TRY(qf_graph_rename_node(g, lin, old_name));
    *next = lin->next;
    *changed = true;
    return QF_OK;
}

/* --- Clip(0, 6) -> relu6 ---------------------------------------------------------- */

static qf_status qf_canon_clip(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, bool *changed)
{
    double lo, hi;
    bool has_lo, has_hi;
    if (n->ninputs > 1 || !qf_node_attr(n, "min")) {
        /* opset >= 11: bounds are optional inputs. */
        qf_value *vlo = n->ninputs > 1 ? n->inputs[1] : NULL, *vhi = n->ninputs > 2 ? n->inputs[2] : NULL;
        if ((vlo && !qf_value_is_const(vlo)) || (vhi && !qf_value_is_const(vhi))) {
            qf_pass_skip(ctx, n, "min / max is not a constant");
            return QF_OK;
        }
        has_lo = vlo && qf_const_scalar(vlo, &lo);
        has_hi = vhi && qf_const_scalar(vhi, &hi);
        if ((vlo && !has_lo) || (vhi && !has_hi)) {
            qf_pass_skip(ctx, n, "min / max is not a scalar");
            return QF_OK;
        }
    } else {
        has_lo = true;
        lo = qf_node_attr_float(n, "min", 0.0f);
        has_hi = qf_node_attr(n, "max") != NULL;
        hi = qf_node_attr_float(n, "max", 0.0f);
    }
    if (!has_lo || !has_hi || lo != 0.0 || hi != 6.0) {
        char a[32] = "none", b[32] = "none";
        if (has_lo) snprintf(a, sizeof a, "%g", lo);
        if (has_hi) snprintf(b, sizeof b, "%g", hi);
        qf_pass_skip(ctx, n, "clip(min=%s, max=%s) is not relu6", a, b);
        return QF_OK;
    }
    if (!qf_dtype_is_float(n->inputs[0]->type.dtype)) {
        qf_pass_skip(ctx, n, "input is %s, relu6 is float only", qf_dtype_name(n->inputs[0]->type.dtype));
        return QF_OK;
    }
    char name[512];
    snprintf(name, sizeof name, "%.480s_relu6", n->name);
    qf_node *r = qf_graph_insert_node(g, n, false, QF_OP_RELU6, name, 1, &n->inputs[0], 1);
    if (!r) return QF_ERR_NOMEM;
    qf_pass_rewrite(ctx, n, NULL, "clip(0, 6) -> relu6");
    const char *rename;
    QF_TRY(qf_take_over(g, n->outputs[0], r->outputs[0], &rename));
    const char *old_name = n->name; /* arena string: outlives the node */
    qf_graph_remove_node(g, n);
    if (rename) QF_TRY(qf_graph_rename_value(g, r->outputs[0], rename));
    QF_TRY(qf_graph_rename_node(g, r, old_name));
    *changed = true;
    return QF_OK;
}

/* --- Identity / inference Dropout removed ------------------------------------------ */

static qf_status qf_canon_passthrough(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, bool *changed)
{
    qf_value *in = n->inputs[0], *out = n->outputs[0];
    if (n->op == QF_OP_DROPOUT) {
        qf_value *mode = n->ninputs > 2 ? n->inputs[2] : NULL;
        double m;
        if (mode && !qf_const_scalar(mode, &m)) {
            qf_pass_skip(ctx, n, "training_mode '%s' is not a constant", mode->name);
            return QF_OK;
        }
        if (mode && m != 0.0) {
            qf_pass_skip(ctx, n, "dropout is in training mode");
            return QF_OK;
        }
        if (n->noutputs > 1 && (n->outputs[1]->nuses || n->outputs[1]->is_output)) {
            qf_pass_skip(ctx, n, "its mask output is used");
            return QF_OK;
        }
    }
    if (out->is_output) {
        /* replace_uses gives `in` the output's name: only an activation that
         * is not itself part of the interface may be renamed. */
        const char *why = in->kind == QF_VALUE_INPUT ? "a graph input"
                          : in->is_output            ? "another graph output"
                          : !in->producer            ? "a constant"
                                                     : NULL;
        if (why) {
            qf_pass_skip(ctx, n, "output is a graph output and input '%s' is %s: kept", in->name, why);
            return QF_OK;
        }
    }
    qf_pass_rewrite(ctx, n, NULL, "removed (%s)", n->op == QF_OP_DROPOUT ? "inference dropout" : "identity");
    QF_TRY(qf_graph_replace_uses(g, out, in));
    qf_graph_remove_node(g, n);
    *changed = true;
    return QF_OK;
}

static qf_status qf_canonicalize_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    for (qf_node *n = g->first, *next; n; n = next) {
        next = n->next;
        switch (n->op) {
        case QF_OP_GEMM: QF_TRY(qf_canon_gemm(g, ctx, n, &next, changed)); break;
        case QF_OP_MATMUL: QF_TRY(qf_canon_matmul(g, ctx, n, &next, changed)); break;
        case QF_OP_CLIP: QF_TRY(qf_canon_clip(g, ctx, n, changed)); break;
        case QF_OP_IDENTITY:
        case QF_OP_DROPOUT: QF_TRY(qf_canon_passthrough(g, ctx, n, changed)); break;
        default: break;
        }
    }
    return QF_OK;
}

const qf_pass qf_pass_canonicalize = {
    .name = "canonicalize",
    .summary = "Gemm / MatMul+Add with constant weights -> linear, Clip(0,6) -> relu6, drop Identity and inference Dropout",
    .run = qf_canonicalize_run,
    .deferred = true, /* reads a weight left in the file through qf_value_load */
};
