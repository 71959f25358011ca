/* Running a fixed-batch graph on more samples at once (qfold/exec.h,
 * qf_batch_widen_*): PyTorch exports a model with the batch size of its
 * example input (1) unless told otherwise, and a graph that fixes its batch
 * size ran its calibration, SQNR and equalize trials one sample at a time.
 *
 * A graph may run R samples at once instead of f when every sample's
 * outputs are then computed from that sample alone, as at batch f. Shape
 * inference at batch R alone does not prove it: x.view(C, -1) of a [1, C,
 * H, W] activation infers at any batch ([C, R*H*W]), and a Softmax over
 * that last axis then mixes the samples. So the proof has two parts:
 *
 *  1. Per op (ops_rule): every node that reads a value derived from the
 *     graph inputs is of an op that computes along axis 0 row by row, with
 *     its axis attributes away from axis 0 (a Softmax over axis 0, a Concat
 *     along it, a Transpose moving it, a Reshape whose shape is computed, a
 *     Shape that reads the batch size: refused). An op without a rule here
 *     is refused: the graph runs at its own batch size, as before.
 *  2. Per value (shapes_scale): shapes inferred at batch R; every such value
 *     must then have R / f times its rows on axis 0 and the same other dims.
 *     A Reshape's constant shape that pins axis 0 ([C, -1] above) fails
 *     here; so does every shape the ops' rules let through but that would
 *     not hold a whole number of rows per sample.
 *
 * Row-wise ops on values whose axis 0 holds whole samples in order (rows
 * k*s .. k*s+s-1 are sample k's) give whole samples in order: by
 * induction from the inputs, each sample's rows at batch R are its rows at
 * batch f. A Reshape keeps this when its output passes part 2 (it moves no
 * element, and both sides hold s rows per sample in C order).
 *
 * The one rewrite: a Reshape whose constant shape starts with a literal
 * equal to its input's axis 0 at batch f (PyTorch writes x.view(x.size(0),
 * -1) and x.view(1, -1) of a batch-1 export as the constant [1, -1]) keeps
 * axis 0 as it is, so copying that dim from the input (0, or -1 under
 * allowzero) computes the same at batch f and row by row at any batch. The
 * shape constant's data is swapped for the rewritten one while the batch is
 * widened and put back after (qf_batch_widen_end): the graph is left as it
 * was found. A shape constant that another node reads too is not rewritten
 * unless every reader is such a Reshape. */
#include <stdio.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/schema.h"

/* A Reshape shape constant swapped for its rewritten copy. */
typedef struct widen_swap {
    qf_value *v;
    void *orig;
    int64_t data[QF_MAX_DIMS];
} widen_swap;

struct qf_batch_widen {
    qf_graph *g;
    int64_t fixed;
    bool ok;       /* the ops' rules hold */
    char why[256]; /* when not: the first node refused */
    int nvalues;
    bool *batched; /* by value id: derived from the graph inputs */
    int(*ndim);    /* by value id: shape at batch `fixed` */
    int64_t (*dims)[QF_MAX_DIMS];
    widen_swap *swaps;
    int nswaps;
    bool swapped;
    int64_t (*in_dims)[QF_MAX_DIMS]; /* the inputs' dims as found */
};

/* --- part 1: the ops' rules -------------------------------------------------------- */

static bool widen_in(const qf_batch_widen *w, const qf_node *n, int slot)
{
    return slot < n->ninputs && n->inputs[slot] && w->batched[n->inputs[slot]->id];
}

/* Axis a of a rank-r tensor as 0 .. r-1 (ONNX's negative axes count from
 * the end); -1 when out of range. */
static int widen_axis(int64_t a, int r)
{
    if (a < 0) a += r;
    return a >= 0 && a < r ? (int)a : -1;
}

/* The int64 entries of constant input `slot` (up to QF_MAX_DIMS * 2), or
 * -1: absent, not a constant, or not int64 / int32. */
static int widen_const_ints(const qf_node *n, int slot, int64_t *out)
{
    if (slot >= n->ninputs || !n->inputs[slot]) return -1;
    const qf_value *v = n->inputs[slot];
    if (!qf_value_is_const(v) || !v->type.data || v->type.ndim > 1) return -1;
    int64_t k = qf_tensor_numel(&v->type);
    if (k < 0 || k > 2 * QF_MAX_DIMS) return -1;
    for (int64_t i = 0; i < k; i++) {
        if (v->type.dtype == QF_DTYPE_I64)
            out[i] = ((const int64_t *)v->type.data)[i];
        else if (v->type.dtype == QF_DTYPE_I32)
            out[i] = ((const int32_t *)v->type.data)[i];
        else
            return -1;
    }
    return (int)k;
}

/* The axes of n (attribute "axes", or its constant input `slot`), -1 when
 * they are computed; 0 entries when neither gives any. */
static int widen_axes(const qf_node *n, int slot, int64_t *out)
{
    int k = 0;
    const int64_t *a = qf_node_attr_ints(n, "axes", &k);
    if (a) {
        if (k > 2 * QF_MAX_DIMS) return -1;
        memcpy(out, a, sizeof *a * (size_t)k);
        return k;
    }
    if (slot < n->ninputs && n->inputs[slot]) return widen_const_ints(n, slot, out);
    return 0;
}

/* Does any of the k axes name axis 0 of a rank-r tensor? (true on one out
 * of range: inference refuses those anyway) */
static bool widen_axes_touch0(const int64_t *axes, int k, int r)
{
    for (int i = 0; i < k; i++)
        if (widen_axis(axes[i], r) <= 0) return true;
    return false;
}

static int widen_rank(const qf_batch_widen *w, const qf_value *v) { return w->ndim[v->id]; }

/* A Reshape whose constant shape starts with a literal equal to its
 * input's axis 0: its rewritten shape into out (the dims, copied), or
 * false. */
static bool widen_reshape_keeps0(const qf_batch_widen *w, const qf_node *n, int64_t *out, int *k)
{
    if (n->op != QF_OP_RESHAPE || n->ninputs < 2 || !n->inputs[0] || !n->inputs[1]) return false;
    *k = widen_const_ints(n, 1, out);
    if (*k < 1 || n->inputs[1]->type.dtype != QF_DTYPE_I64) return false;
    const qf_value *x = n->inputs[0], *y = n->outputs[0];
    if (w->ndim[x->id] < 1 || w->ndim[y->id] < 1 || out[0] <= 0 || out[0] != w->dims[x->id][0] ||
        w->dims[y->id][0] != w->dims[x->id][0])
        return false;
    bool allowzero = qf_node_attr_int(n, "allowzero", 0) != 0, minus = false;
    for (int i = 1; i < *k; i++) minus |= out[i] == -1;
    if (allowzero && minus) return false;
    out[0] = allowzero ? -1 : 0;
    return true;
}

/* The rewrite of Reshape n's shape constant, if every reader of it is a
 * Reshape that keeps axis 0 (then the same rewrite serves them all). */
static void widen_reshape_swap(qf_batch_widen *w, const qf_node *n)
{
    int64_t shape[2 * QF_MAX_DIMS];
    int k = 0;
    if (!widen_reshape_keeps0(w, n, shape, &k) || k > QF_MAX_DIMS) return;
    qf_value *s = n->inputs[1];
    for (int i = 0; i < w->nswaps; i++)
        if (w->swaps[i].v == s) return;
    for (int u = 0; u < s->nuses; u++) {
        int64_t other[2 * QF_MAX_DIMS];
        int ko = 0;
        if (s->uses[u].slot != 1 || !widen_reshape_keeps0(w, s->uses[u].node, other, &ko)) return;
    }
    widen_swap *sw = &w->swaps[w->nswaps++];
    sw->v = s;
    sw->orig = s->type.data;
    memcpy(sw->data, shape, sizeof *shape * (size_t)k);
}

/* Why node n, reading a value derived from the graph inputs, does not let
 * the batch grow; NULL when it does (part 1 only). */
static const char *widen_op_rule(qf_batch_widen *w, const qf_node *n, char *buf, size_t size)
{
    const qf_value *x = n->inputs[0];
    int r = x ? widen_rank(w, x) : 0;
    int64_t axes[2 * QF_MAX_DIMS];
    int k;
    switch (n->op) {
    /* Element by element, with broadcasting: a value of the batch must
     * have the output's rank (its axis 0 is then the output's). */
    case QF_OP_ADD:
    case QF_OP_SUB:
    case QF_OP_MUL:
    case QF_OP_DIV:
    case QF_OP_POW:
    case QF_OP_SQRT:
    case QF_OP_RECIPROCAL:
    case QF_OP_NEG:
    case QF_OP_MOD:
    case QF_OP_EQUAL:
    case QF_OP_NOT:
    case QF_OP_WHERE:
    case QF_OP_RELU:
    case QF_OP_RELU6:
    case QF_OP_CLIP:
    case QF_OP_LEAKY_RELU:
    case QF_OP_SIGMOID:
    case QF_OP_TANH:
    case QF_OP_ERF:
    case QF_OP_HARD_SIGMOID:
    case QF_OP_HARD_SWISH:
    case QF_OP_PRELU:
    case QF_OP_MAX:
    case QF_OP_MIN:
    case QF_OP_ABS:
    case QF_OP_EXP:
    case QF_OP_LOG:
    case QF_OP_IDENTITY:
    case QF_OP_DROPOUT:
    case QF_OP_CAST:
    case QF_OP_EXPAND:
    case QF_OP_QUANTIZE:
    case QF_OP_DEQUANTIZE:
        for (int i = 0; i < n->ninputs; i++)
            if (widen_in(w, n, i) && widen_rank(w, n->inputs[i]) != widen_rank(w, n->outputs[0]))
                return "broadcasts a value of the batch to a higher rank";
        if ((n->op == QF_OP_EXPAND || n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE) &&
            (widen_in(w, n, 1) || widen_in(w, n, 2)))
            return "its shape / scale / zero point depend on the data";
        /* Per-axis scales along axis 0 would give each row its own. */
        if ((n->op == QF_OP_QUANTIZE || n->op == QF_OP_DEQUANTIZE) && n->ninputs > 1 &&
            n->inputs[1] && qf_tensor_numel(&n->inputs[1]->type) > 1 &&
            widen_axis(qf_node_attr_int(n, "axis", 1), r) == 0)
            return "quantizes per row of axis 0";
        return NULL;
    /* Each sample on its own along axis 0; the other inputs (weights,
     * statistics) must not come from the batch. */
    case QF_OP_CONV:
    case QF_OP_CONV_TRANSPOSE:
    case QF_OP_AVG_POOL:
    case QF_OP_MAX_POOL:
    case QF_OP_GLOBAL_AVG_POOL:
    case QF_OP_BATCH_NORM:
    case QF_OP_LINEAR:
    case QF_OP_GEMM:
    case QF_OP_LAYER_NORM:
        for (int i = 1; i < n->ninputs; i++)
            if (widen_in(w, n, i)) return "a weight or statistic input depends on the data";
        if (!widen_in(w, n, 0) || r < 2) return "its data input is not a batch of rows";
        if (n->op == QF_OP_GEMM && qf_node_attr_int(n, "transA", 0))
            return "transposes its data input (transA)";
        /* Training-mode BatchNormalization (batch statistics) and MaxPool's
         * indices (flat over the whole batch) see across samples. */
        if (n->op == QF_OP_BATCH_NORM && n->noutputs > 1)
            return "computes batch statistics (training mode)";
        if (n->op == QF_OP_MAX_POOL && n->noutputs > 1 && n->outputs[1] && n->outputs[1]->nuses)
            return "its indices output counts across the batch";
        if (n->op == QF_OP_LAYER_NORM && widen_axis(qf_node_attr_int(n, "axis", -1), r) < 1)
            return "normalizes over axis 0";
        return NULL;
    case QF_OP_MATMUL:
        if (widen_in(w, n, 1) && !(widen_in(w, n, 0) && r >= 3 && widen_rank(w, n->inputs[1]) == r))
            return "its second operand depends on the data";
        if (widen_in(w, n, 0) && r < 2) return "multiplies a 1-D value of the batch";
        return NULL;
    /* Along one axis (or the dims from it on): away from axis 0. */
    case QF_OP_SOFTMAX:
        return widen_axis(qf_node_attr_int(n, "axis", -1), r) < 1 ? "normalizes over axis 0" : NULL;
    case QF_OP_FLATTEN: {
        /* axis in [-r, r]: the rows are the dims before it */
        int64_t a = qf_node_attr_int(n, "axis", 1);
        return (a < 0 ? a + r : a) < 1 ? "flattens axis 0 into the rows" : NULL;
    }
    case QF_OP_CONCAT:
        return widen_axis(qf_node_attr_int(n, "axis", 0), r) == 0 ? "concatenates along axis 0"
                                                                  : NULL;
    case QF_OP_SPLIT:
        if (widen_in(w, n, 1)) return "its split sizes depend on the data";
        return widen_axis(qf_node_attr_int(n, "axis", 0), r) == 0 ? "splits along axis 0" : NULL;
    case QF_OP_GATHER:
        if (widen_in(w, n, 1)) return "its indices depend on the data";
        return widen_axis(qf_node_attr_int(n, "axis", 0), r) == 0 ? "gathers along axis 0" : NULL;
    case QF_OP_TRANSPOSE: {
        const int64_t *perm = qf_node_attr_ints(n, "perm", &k);
        return perm && k >= 1 && perm[0] == 0 ? NULL : "moves axis 0";
    }
    case QF_OP_REDUCE_MEAN:
    case QF_OP_REDUCE_SUM:
    case QF_OP_REDUCE_MAX:
        k = widen_axes(n, 1, axes);
        if (k < 0) return "its axes depend on the data";
        if (k == 0)
            return qf_node_attr_int(n, "noop_with_empty_axes", 0) ? NULL
                                                                  : "reduces over every axis";
        return widen_axes_touch0(axes, k, r) ? "reduces over axis 0" : NULL;
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
        k = widen_axes(n, 1, axes);
        if (k <= 0) return "its axes are not constant";
        return widen_axes_touch0(axes, k, n->op == QF_OP_SQUEEZE ? r : widen_rank(w, n->outputs[0]))
                   ? "squeezes or unsqueezes axis 0"
                   : NULL;
    case QF_OP_SLICE: {
        /* starts, ends, axes, steps: constants; axis 0 only taken whole
         * (start 0, step 1: the end is checked by the shapes). */
        int64_t st[2 * QF_MAX_DIMS], ax[2 * QF_MAX_DIMS], sp[2 * QF_MAX_DIMS];
        int ns = widen_const_ints(n, 1, st), ne = widen_const_ints(n, 2, axes);
        int na = n->ninputs > 3 && n->inputs[3] ? widen_const_ints(n, 3, ax) : ns;
        int np = n->ninputs > 4 && n->inputs[4] ? widen_const_ints(n, 4, sp) : ns;
        if (ns < 0 || ne != ns || na != ns || np != ns) return "its bounds are not constant";
        for (int i = 0; i < ns; i++) {
            int a = widen_axis(n->ninputs > 3 && n->inputs[3] ? ax[i] : i, r);
            bool step1 = !(n->ninputs > 4 && n->inputs[4]) || sp[i] == 1;
            if (a == 0 && (st[i] != 0 || !step1)) return "slices axis 0";
        }
        return NULL;
    }
    case QF_OP_PAD: {
        int64_t pads[2 * QF_MAX_DIMS];
        int np = 0;
        const int64_t *pa = qf_node_attr_ints(n, "pads", &np);
        if (pa && np <= 2 * QF_MAX_DIMS)
            memcpy(pads, pa, sizeof *pa * (size_t)np);
        else
            np = widen_const_ints(n, 1, pads);
        if (np != 2 * r || (n->ninputs > 3 && n->inputs[3]) || widen_in(w, n, 2))
            return "its pads are not constant";
        return pads[0] || pads[r] ? "pads axis 0" : NULL;
    }
    case QF_OP_RESHAPE: {
        if (widen_in(w, n, 1)) return "its shape is computed from the data";
        widen_reshape_swap(w, n);
        return NULL; /* the shapes check the rest (part 2) */
    }
    case QF_OP_RESIZE:
        /* roi, scales, sizes: constants (a scale or size of axis 0 other
         * than the batch's own is caught by the shapes, part 2) */
        for (int i = 1; i < n->ninputs; i++)
            if (widen_in(w, n, i)) return "its scales or sizes are computed from the data";
        return NULL;
    case QF_OP_SHAPE: return "reads the batch size";
    default: break;
    }
    snprintf(buf, size, "no rule says %s computes each sample on its own", qf_op_label(n));
    return buf;
}

static void widen_free_arrays(qf_batch_widen *w)
{
    qf_free(w->batched);
    qf_free(w->ndim);
    qf_free(w->dims);
    qf_free(w->swaps);
    qf_free(w->in_dims);
}

void qf_batch_widen_free(qf_batch_widen *w)
{
    if (!w) return;
    qf_batch_widen_end(w);
    widen_free_arrays(w);
    qf_free(w);
}

qf_status qf_batch_widen_init(qf_batch_widen **out, qf_graph *g)
{
    *out = NULL;
    if (g->ninputs < 1 || g->inputs[0]->type.ndim < 1 || g->inputs[0]->type.dims[0] < 1)
        return qf_error(QF_ERR_INVALID, "the graph does not fix its batch size");
    qf_batch_widen *w = qf_calloc(1, sizeof *w);
    if (!w) return QF_ERR_NOMEM;
    w->g = g;
    w->fixed = g->inputs[0]->type.dims[0];
    w->nvalues = g->nvalues;
    size_t nv = (size_t)(g->nvalues ? g->nvalues : 1);
    w->batched = qf_calloc(nv, sizeof *w->batched);
    w->ndim = qf_calloc(nv, sizeof *w->ndim);
    w->dims = qf_calloc(nv, sizeof *w->dims);
    w->swaps = qf_calloc((size_t)(g->nnodes ? g->nnodes : 1), sizeof *w->swaps);
    w->in_dims = qf_calloc((size_t)g->ninputs, sizeof *w->in_dims);
    qf_status st =
        w->batched && w->ndim && w->dims && w->swaps && w->in_dims ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_graph_toposort(g);
    if (st == QF_OK) st = qf_graph_infer_shapes(g);
    if (st != QF_OK) {
        widen_free_arrays(w);
        qf_free(w);
        return st;
    }
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v) continue;
        w->ndim[i] = v->type.ndim;
        memcpy(w->dims[i], v->type.dims, sizeof w->dims[i]);
    }
    w->ok = true;
    for (int i = 0; i < g->ninputs && w->ok; i++) {
        const qf_value *v = g->inputs[i];
        memcpy(w->in_dims[i], v->type.dims, sizeof w->in_dims[i]);
        w->batched[v->id] = true;
        if (v->type.data) {
            snprintf(w->why, sizeof w->why,
                     "input '%s' has a default value (an initializer) of a fixed shape", v->name);
            w->ok = false;
        } else if (v->type.ndim < 1 || v->type.dims[0] != w->fixed) {
            snprintf(w->why, sizeof w->why, "input '%s' does not have the first input's batch size",
                     v->name);
            w->ok = false;
        }
    }
    char buf[160];
    for (const qf_node *n = g->first; n && w->ok; n = n->next) {
        bool any = false;
        for (int i = 0; i < n->ninputs; i++) any |= widen_in(w, n, i);
        if (!any) continue;
        const char *why = widen_op_rule(w, n, buf, sizeof buf);
        if (why) {
            snprintf(w->why, sizeof w->why, "node '%s' (%s) %s", n->name, qf_op_label(n), why);
            w->ok = false;
        }
        for (int i = 0; i < n->noutputs; i++)
            if (n->outputs[i]) w->batched[n->outputs[i]->id] = true;
    }
    *out = w;
    return QF_OK;
}

const char *qf_batch_widen_why(const qf_batch_widen *w) { return w->why[0] ? w->why : NULL; }

void qf_batch_widen_end(qf_batch_widen *w)
{
    if (!w || !w->swapped) return;
    for (int i = 0; i < w->nswaps; i++) w->swaps[i].v->type.data = w->swaps[i].orig;
    for (int i = 0; i < w->g->ninputs; i++)
        memcpy(w->g->inputs[i]->type.dims, w->in_dims[i], sizeof w->in_dims[i]);
    w->swapped = false;
}

/* --- part 2: the shapes at `rows` ---------------------------------------------------- */

static bool widen_shapes_scale(qf_batch_widen *w, int64_t rows)
{
    const qf_graph *g = w->g;
    for (int i = 0; i < g->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v || !w->batched[i]) continue;
        const int64_t *a = w->dims[i], *b = v->type.dims;
        bool same = v->type.ndim == w->ndim[i] && w->ndim[i] >= 1 && a[0] % w->fixed == 0 &&
                    b[0] == a[0] / w->fixed * rows;
        for (int d = 1; same && d < w->ndim[i]; d++) same = a[d] == b[d];
        if (same) continue;
        char sa[128], sb[128], who[160] = "";
        const qf_node *p = v->producer;
        if (p) snprintf(who, sizeof who, "node '%s' (%s): ", p->name, qf_op_label(p));
        snprintf(w->why, sizeof w->why, "%svalue '%s' is %s at batch %lld but %s at batch %lld",
                 who, v->name, qf_shape_str(w->ndim[i], a, sa, sizeof sa), (long long)w->fixed,
                 qf_shape_str(v->type.ndim, b, sb, sizeof sb), (long long)rows);
        return false;
    }
    return true;
}

qf_status qf_batch_widen_begin(qf_batch_widen *w, int64_t rows, bool *ok)
{
    *ok = false;
    qf_batch_widen_end(w);
    if (!w->ok) return QF_OK;
    qf_graph *g = w->g;
    for (int i = 0; i < w->nswaps; i++) w->swaps[i].v->type.data = w->swaps[i].data;
    for (int i = 0; i < g->ninputs; i++) g->inputs[i]->type.dims[0] = rows;
    w->swapped = true;
    qf_status st = qf_graph_infer_shapes(g);
    if (st != QF_OK) {
        snprintf(w->why, sizeof w->why, "shape inference at batch %lld fails: %s", (long long)rows,
                 qf_error_message());
        qf_error_clear();
    }
    if (st == QF_OK && widen_shapes_scale(w, rows)) {
        *ok = true;
        return QF_OK;
    }
    /* Refused at this size (the ops' rules still hold: another size may
     * pass): everything as found. The graph inferred at its own batch
     * before, so it does again. */
    qf_batch_widen_end(w);
    return qf_graph_infer_shapes(g);
}
