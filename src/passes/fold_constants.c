/* fold_constants: evaluate nodes whose inputs are all constants (and Shape
 * of a value whose shape is known) with their own kernels, one node at a
 * time (qf_node_eval), and replace them by constant values that keep the
 * output names.
 *
 *   before:  shape(x) ─Gather(0)─▶ n ─Concat(n, -1)─▶ s ─Reshape(x, s)─▶ y
 *   after:   s = [1, -1] (a constant named as the Concat's output)
 *            x ─Reshape(x, s)─▶ y
 *
 * Import runs it on every model (shape chains must be constants before
 * shapes can be inferred); as a pass it records each folded node. */
#include <stdio.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "qfold/schema.h"

/* Folding a node whose output is much larger than its inputs (ConstantOfShape
 * of a big shape, an Expand) trades a small graph for a big file; only small
 * outputs are folded then. */
#define QF_FOLD_MAX_GROWTH 16
#define QF_FOLD_SMALL_BYTES ((size_t)64 * 1024)
/* And all folds of one graph together may grow its constants by at most
 * this much: without a total, a chain of nodes that each grow 16-fold (a
 * hostile file's Expand after Expand) would multiply memory without bound. */
#define QF_FOLD_GROWTH_BUDGET ((size_t)256 * 1024 * 1024)

/* Whether every input n reads is known at import time. */
static bool qf_fold_inputs_known(const qf_node *n)
{
    if (n->op == QF_OP_OPAQUE) return false; /* no kernel: it cannot be evaluated */
    if (n->op == QF_OP_SHAPE)
        return n->ninputs >= 1 && n->inputs[0] && n->inputs[0]->type.dtype != QF_DTYPE_UNDEFINED &&
               qf_tensor_numel(&n->inputs[0]->type) >= 0; /* undefined: past an opaque node */
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] && !qf_value_is_const(n->inputs[i])) return false;
    return true;
}

/* Evaluate n (shapes inferred, inputs known) and splice constants in. */
/* The model's storage dtype of a folded float32 output (qf_value.store):
 * Cast(to=FLOAT) of a half-precision constant is that constant behind a
 * Cast, which export writes back as it was (so a folded BatchNorm's new
 * weight stays float16 behind its Cast); Cast to float16 / bfloat16 stores
 * that dtype; any other op keeps the storage of its first float input that
 * has one (a Transpose of a float16 weight is float16). */
static int qf_fold_store(const qf_node *n, const qf_value *out)
{
    if (out->type.dtype != QF_DTYPE_F32) return 0;
    if (n->op == QF_OP_CAST) {
        int64_t to = qf_node_attr_int(n, "to", 0);
        if (to == QF_STORE_F16 || to == QF_STORE_BF16) return (int)to;
        const qf_value *x = n->inputs[0];
        return x && (x->store & QF_STORE_DTYPE) ? (x->store & QF_STORE_DTYPE) | QF_STORE_VIA_CAST : 0;
    }
    /* Behind a Cast the values are float32 ones: only ops that move them
     * keep them exactly half-precision values. */
    bool moves = n->op == QF_OP_TRANSPOSE || n->op == QF_OP_RESHAPE || n->op == QF_OP_SQUEEZE ||
                 n->op == QF_OP_UNSQUEEZE || n->op == QF_OP_FLATTEN || n->op == QF_OP_IDENTITY;
    for (int i = 0; i < n->ninputs; i++) {
        const qf_value *x = n->inputs[i];
        if (!x || x->type.dtype != QF_DTYPE_F32 || !x->store) continue;
        return (x->store & QF_STORE_VIA_CAST) && !moves ? 0 : x->store;
    }
    return 0;
}

static qf_status qf_fold_eval(qf_graph *g, qf_node *n)
{
    int nin = n->ninputs, nout = n->noutputs;
    qf_tensor *outs = qf_calloc((size_t)(nout ? nout : 1), sizeof *outs);
    qf_tensor **outp = qf_calloc((size_t)(nout ? nout : 1), sizeof *outp);
    const qf_tensor **inp = qf_calloc((size_t)(nin ? nin : 1), sizeof *inp);
    qf_value **olds = qf_calloc((size_t)(nin ? nin : 1), sizeof *olds);
    qf_value **consts = qf_calloc((size_t)(nout ? nout : 1), sizeof *consts);
    const char **names = qf_calloc((size_t)(nout ? nout : 1), sizeof *names);
    qf_status st = QF_OK;
    if (!outs || !outp || !inp || !olds || !consts || !names) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < nin; i++) {
        olds[i] = n->inputs[i];
        /* A payload left in the model file is read now (graph.h). */
        if (n->inputs[i] && (st = qf_value_load(g, n->inputs[i])) != QF_OK) goto done;
        /* Shape reads only the dims of its input, whose data may be absent. */
        inp[i] = n->inputs[i] ? &n->inputs[i]->type : NULL;
    }
    for (int i = 0; i < nout; i++) {
        const qf_tensor *t = &n->outputs[i]->type;
        st = qf_tensor_init(&outs[i], t->dtype, t->ndim, t->dims);
        if (st != QF_OK) {
            qf_error_prefix(st, "node '%s' (%s): cannot fold: ", n->name, qf_op_label(n));
            goto done;
        }
        outp[i] = &outs[i];
    }
    st = qf_node_eval(n, g->opset, inp, outp);
    if (st != QF_OK) goto done;

    /* Each output becomes a constant under a temporary name; replace_uses
     * swaps names when the output is a graph output, otherwise the constant
     * takes the name once the node (and its output) is gone. */
    for (int i = 0; i < nout; i++) {
        qf_value *v = n->outputs[i];
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%.560s_folded", v->name);
        names[i] = v->name;
        consts[i] = qf_graph_add_constant(g, tmp, QF_VALUE_CONSTANT, &outs[i]);
        if (!consts[i]) {
            st = QF_ERR_NOMEM;
            goto done;
        }
        consts[i]->store = qf_fold_store(n, consts[i]);
        st = qf_graph_replace_uses(g, v, consts[i]);
        if (st != QF_OK) goto done;
    }
    qf_graph_remove_node(g, n);
    for (int i = 0; i < nout; i++) {
        st = qf_graph_rename_value(g, consts[i], names[i]);
        if (st != QF_OK) goto done;
    }
    /* Constants only the folded node read are dead now (graph inputs stay). */
    for (int i = 0; i < nin; i++) {
        qf_value *v = olds[i];
        if (v && g->values[v->id] == v && qf_value_is_const(v) && !v->nuses && !v->is_output)
            qf_graph_remove_value(g, v);
    }
done:
    if (outs)
        for (int i = 0; i < nout; i++) qf_tensor_free(&outs[i]);
    qf_free(outs);
    qf_free(outp);
    qf_free(inp);
    qf_free(olds);
    qf_free(consts);
    qf_free(names);
    return st;
}

qf_status qf_graph_fold_node(qf_graph *g, qf_node *n)
{
    QF_TRY(qf_node_infer(g, n));
    if (!qf_fold_inputs_known(n))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): cannot fold: its inputs are not all constants",
                        n->name, qf_op_label(n));
    return qf_fold_eval(g, n);
}

static size_t qf_fold_bytes(qf_value *const *vs, int count, bool data_only)
{
    size_t total = 0;
    for (int i = 0; i < count; i++)
        if (vs[i] && (!data_only || qf_value_has_data(vs[i]))) total += qf_tensor_nbytes(&vs[i]->type);
    return total;
}

/* --- Reshape by the data's own dims --------------------------------------------
 * torch's `x.view(x.size(0), -1)` with a dynamic batch exports as
 *
 *   Shape(x) ─Gather(0)─▶ Unsqueeze(0) ─┐
 *                          const [-1] ──┴─Concat─▶ s ─Reshape(x, s)─▶ y
 *
 * which cannot fold (x's batch is not known). With allowzero = 0, a 0 in
 * Reshape's shape means "copy the input's dim at this position", so when
 * every piece of the Concat is a constant or dim k of x itself placed at
 * position k, s equals, for every x, the constant with those positions 0:
 * the same tensor, element for element, hence the same Reshape (the -1 is
 * resolved from the same numbers). Any other piece (a dim of another
 * tensor, of x at another position, a computed value) leaves the graph as
 * it is. The Shape chain left unread is removed. */

/* The int64 entries of a small constant (scalar or 1-D). */
static bool qf_fold_small_ints(const qf_graph *g, qf_value *v, int64_t *out, int max, int *count)
{
    if (!v || !qf_value_is_const(v) || v->type.ndim > 1) return false;
    if (v->type.dtype != QF_DTYPE_I64 && v->type.dtype != QF_DTYPE_I32) return false;
    int64_t k = qf_tensor_numel(&v->type);
    if (k < 0 || k > max || qf_value_load(g, v) != QF_OK) return false;
    for (int64_t i = 0; i < k; i++) out[i] = qf_tensor_get_i64(&v->type, i);
    *count = (int)k;
    return true;
}

/* Whether s is Shape(x) (whole, or [start, end) at opset 15+); *first and
 * *len say which dims of x it lists. */
static bool qf_fold_shape_of(const qf_value *s, const qf_value *x, int64_t *first, int64_t *len)
{
    const qf_node *n = s ? s->producer : NULL;
    if (!n || n->op != QF_OP_SHAPE || n->ninputs < 1 || n->inputs[0] != x) return false;
    if (x->type.dtype == QF_DTYPE_UNDEFINED) return false; /* past an opaque node: rank unknown */
    int64_t r = x->type.ndim;
    int64_t a = qf_node_attr_int(n, "start", 0), b = qf_node_attr_int(n, "end", r);
    if (a < 0) a += r;
    if (b < 0) b += r;
    a = a < 0 ? 0 : a > r ? r : a;
    b = b < 0 ? 0 : b > r ? r : b;
    *first = a;
    *len = b > a ? b - a : 0;
    return true;
}

/* The dims of x that piece p lists, in order: x dims [*first, *first +
 * *len). False when p is not Shape(x), Gather(Shape(x), const i) with
 * Unsqueeze(axes 0) on a scalar index, or Slice(Shape(x)) with step 1. */
static bool qf_fold_dims_piece(const qf_graph *g, const qf_value *p, const qf_value *x,
                               int64_t *first, int64_t *len)
{
    const qf_node *n = p->producer;
    if (!n) return false;
    int64_t s0, sl, v[QF_MAX_DIMS];
    int c;
    if (n->op == QF_OP_SHAPE) return qf_fold_shape_of(p, x, first, len);
    if (n->op == QF_OP_UNSQUEEZE) {
        /* a scalar made a 1-element vector: axes [0] or [-1] */
        const qf_value *in = n->inputs[0];
        if (!in || in->type.ndim != 0) return false;
        const int64_t *ax = qf_node_attr_ints(n, "axes", &c);
        if (n->ninputs > 1 && n->inputs[1]) {
            if (!qf_fold_small_ints(g, n->inputs[1], v, QF_MAX_DIMS, &c)) return false;
            ax = v;
        }
        if (!ax || c != 1 || (ax[0] != 0 && ax[0] != -1)) return false;
        n = in->producer;
        if (!n || n->op != QF_OP_GATHER) return false;
    }
    if (n->op == QF_OP_GATHER) {
        /* a scalar index (after the Unsqueeze above) or a 1-element one */
        if (n->ninputs < 2 || qf_node_attr_int(n, "axis", 0) != 0) return false;
        if (!qf_fold_shape_of(n->inputs[0], x, &s0, &sl)) return false;
        if (n->inputs[1]->type.ndim > (p->producer->op == QF_OP_GATHER ? 1 : 0)) return false;
        if (!qf_fold_small_ints(g, n->inputs[1], v, 1, &c) || c != 1) return false;
        int64_t i = v[0] < 0 ? v[0] + sl : v[0];
        if (i < 0 || i >= sl) return false;
        *first = s0 + i;
        *len = 1;
        return true;
    }
    if (n->op == QF_OP_SLICE) {
        /* Slice(Shape(x), starts, ends[, axes [0][, steps [1]]]) */
        if (n->ninputs < 3 || !qf_fold_shape_of(n->inputs[0], x, &s0, &sl)) return false;
        int64_t st, en;
        if (!qf_fold_small_ints(g, n->inputs[1], v, 1, &c) || c != 1) return false;
        st = v[0];
        if (!qf_fold_small_ints(g, n->inputs[2], v, 1, &c) || c != 1) return false;
        en = v[0];
        if (n->ninputs > 3 && n->inputs[3] &&
            (!qf_fold_small_ints(g, n->inputs[3], v, 1, &c) || c != 1 || (v[0] != 0 && v[0] != -1)))
            return false;
        if (n->ninputs > 4 && n->inputs[4] &&
            (!qf_fold_small_ints(g, n->inputs[4], v, 1, &c) || c != 1 || v[0] != 1))
            return false;
        if (st < 0) st += sl;
        if (en < 0) en += sl;
        st = st < 0 ? 0 : st > sl ? sl : st;
        en = en < 0 ? 0 : en > sl ? sl : en;
        *first = s0 + st;
        *len = en > st ? en - st : 0;
        return true;
    }
    return false;
}

/* Remove n if nothing reads its outputs, then its producers likewise, and
 * the constants only it read. */
static void qf_fold_prune(qf_graph *g, qf_node *n)
{
    for (int i = 0; i < n->noutputs; i++)
        if (n->outputs[i]->nuses || n->outputs[i]->is_output) return;
    qf_value *ins[QF_MAX_DIMS + 8];
    int nin =
        n->ninputs < (int)(sizeof ins / sizeof *ins) ? n->ninputs : (int)(sizeof ins / sizeof *ins);
    for (int i = 0; i < nin; i++) ins[i] = n->inputs[i];
    qf_graph_remove_node(g, n);
    for (int i = 0; i < nin; i++) {
        qf_value *v = ins[i];
        if (!v || g->values[v->id] != v || v->nuses || v->is_output) continue;
        if (v->producer)
            qf_fold_prune(g, v->producer);
        else if (qf_value_is_const(v))
            qf_graph_remove_value(g, v);
    }
}

/* Rewrite n = Reshape(x, Concat(pieces)) as described above when it is exact. */
static qf_status qf_fold_reshape_dims(qf_graph *g, qf_node *n)
{
    if (n->ninputs < 2 || !n->inputs[0] || !n->inputs[1]) return QF_OK;
    if (qf_node_attr_int(n, "allowzero", 0) != 0) return QF_OK; /* 0 would mean a 0 dim */
    qf_value *x = n->inputs[0], *s = n->inputs[1];
    qf_node *cat = s->producer;
    if (!cat || cat->op != QF_OP_CONCAT || s->type.dtype != QF_DTYPE_I64) return QF_OK;
    int64_t axis = qf_node_attr_int(cat, "axis", 0);
    if (axis != 0 && axis != -1) return QF_OK;
    int64_t dims[QF_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < cat->ninputs; i++) {
        qf_value *p = cat->inputs[i];
        if (!p || p->type.dtype != QF_DTYPE_I64 || p->type.ndim != 1) return QF_OK;
        int c;
        int64_t first, len;
        if (qf_value_is_const(p)) {
            if (!qf_fold_small_ints(g, p, dims + k, QF_MAX_DIMS - k, &c)) return QF_OK;
            k += c;
        } else if (qf_fold_dims_piece(g, p, x, &first, &len)) {
            /* x's dims [first, first + len) at positions [k, k + len): exact
             * only when they line up (0 copies the dim at its own position) */
            if (first != k || len > QF_MAX_DIMS - k || p->type.dims[0] != len) return QF_OK;
            for (int64_t j = 0; j < len; j++) dims[k++] = 0;
        } else {
            return QF_OK;
        }
    }
    qf_tensor t;
    int64_t kk = k;
    QF_TRY(qf_tensor_init(&t, QF_DTYPE_I64, 1, &kk));
    memcpy(t.data, dims, sizeof *dims * (size_t)k);
    char name[600], tmp[640];
    snprintf(name, sizeof name, "%s", s->name);
    snprintf(tmp, sizeof tmp, "%.560s_dims", s->name);
    qf_value *c = qf_graph_add_constant(g, tmp, QF_VALUE_CONSTANT, &t);
    qf_tensor_free(&t);
    if (!c) return QF_ERR_NOMEM;
    QF_TRY(qf_node_set_input(g, n, 1, c));
    qf_fold_prune(g, cat);
    /* The constant keeps the Concat's output name when that is gone. */
    if (!qf_graph_find_value(g, name)) QF_TRY(qf_graph_rename_value(g, c, name));
    return QF_OK;
}

/* weight[id]: value id is a float initializer (or a fold of one). */
typedef struct qf_fold_weights {
    bool *is;
    int n;
    size_t grown; /* bytes the folds so far added over their inputs */
} qf_fold_weights;

static bool qf_fold_weight(const qf_fold_weights *w, const qf_value *v)
{
    return v && (int)v->id < w->n && w->is[v->id];
}

static qf_status qf_fold_mark(qf_fold_weights *w, const qf_value *v)
{
    if ((int)v->id >= w->n) {
        int nn = (int)v->id + 1;
        bool *p = qf_realloc(w->is, sizeof *p * (size_t)nn);
        if (!p) return QF_ERR_NOMEM;
        memset(p + w->n, 0, sizeof *p * (size_t)(nn - w->n));
        w->is = p;
        w->n = nn;
    }
    w->is[v->id] = true;
    return QF_OK;
}

/* Fold one node if the rules allow; *done says whether it was folded. */
static qf_status qf_fold_try(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, qf_fold_weights *wts, bool *done)
{
    *done = false;
    /* The QDQ structure is the quantized model: it must survive. */
    if (n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE) return QF_OK;
    if (!qf_fold_inputs_known(n)) return QF_OK;
    for (int i = 0; i < n->noutputs; i++)
        if (qf_tensor_numel(&n->outputs[i]->type) < 0) return QF_OK;
    size_t in_bytes = qf_fold_bytes(n->inputs, n->ninputs, true);
    size_t out_bytes = qf_fold_bytes(n->outputs, n->noutputs, false);
    if (out_bytes >= QF_FOLD_SMALL_BYTES && out_bytes > QF_FOLD_MAX_GROWTH * in_bytes) return QF_OK;
    size_t growth = out_bytes > in_bytes ? out_bytes - in_bytes : 0;
    if (growth > QF_FOLD_GROWTH_BUDGET - wts->grown) return QF_OK;
    /* Float initializers are weights. A node that re-lays one out (a torch
     * export's Transpose(fc.weight) before MatMul) folds only when it is the
     * weight's sole reader; the result then takes the weight's name, so the
     * parameter survives import under the name the model gave it. Nodes that
     * mix several weights, or share one, stay. */
    const qf_value *w = NULL;
    int nw = 0;
    for (int i = 0; i < n->ninputs; i++)
        if (qf_fold_weight(wts, n->inputs[i])) {
            nw++;
            w = n->inputs[i];
        }
    if (nw > 1 || (nw == 1 && (w->nuses != 1 || w->is_output || n->noutputs != 1 ||
                                n->outputs[0]->is_output)))
        return QF_OK;
    const char *wname = w ? w->name : NULL, *oname = n->outputs[0]->name;
    /* Recorded first: the node is gone once folded (a failed fold fails
     * the pass, report and all). */
    if (ctx) qf_pass_rewrite_as(ctx, n, QF_PASS_FOLDED, NULL, "evaluated to a constant");
    QF_TRY(qf_fold_eval(g, n));
    *done = true;
    wts->grown += growth;
    if (wname) {
        qf_value *c = qf_graph_find_value(g, oname);
        if (!c) return qf_error(QF_ERR_INTERNAL, "fold: value '%s' vanished", oname);
        QF_TRY(qf_graph_rename_value(g, c, wname));
        QF_TRY(qf_fold_mark(wts, c));
    }
    return QF_OK;
}

/* The walk, recording each fold in ctx when there is one. */
static qf_status fold_all(qf_graph *g, qf_pass_ctx *ctx, int *count)
{
    int folded = 0;
    if (count) *count = 0;
    qf_fold_weights wts = {qf_calloc((size_t)(g->nvalues ? g->nvalues : 1), sizeof(bool)), g->nvalues, 0};
    if (!wts.is) return QF_ERR_NOMEM;
    for (int i = 0; i < wts.n; i++) {
        const qf_value *v = g->values[i];
        wts.is[i] = v && !v->producer && qf_value_is_const(v) && qf_dtype_is_float(v->type.dtype);
    }
    qf_status st = QF_OK;
    for (qf_node *n = g->first, *next; n; n = next) {
        next = n->next;
        if (n->op == QF_OP_RESHAPE && (st = qf_fold_reshape_dims(g, n)) != QF_OK) break;
        st = qf_node_infer(g, n);
        if (st != QF_OK) break;
        bool done;
        st = qf_fold_try(g, ctx, n, &wts, &done);
        if (st != QF_OK) break;
        if (done && count) *count = ++folded;
    }
    qf_free(wts.is);
    return st;
}

qf_status qf_graph_fold_constants(qf_graph *g, int *count) { return fold_all(g, NULL, count); }

static qf_status fold_constants_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    int count = 0;
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(fold_all(g, ctx, &count));
    *changed = count > 0;
    return QF_OK;
}

const qf_pass qf_pass_fold_constants = {
    .name = "fold_constants",
    .summary = "evaluate nodes whose inputs are all constants and store the results as constants",
    .run = fold_constants_run,
};
