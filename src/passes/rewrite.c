/* Generic rewrite helpers (rewrite.h) and the node walk the rewrites share
 * (qf_pass_for_each_op, declared in qfold/pass.h). */
#include "rewrite.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "qfold/pass.h"

bool qf_rewrite_why(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
    return true;
}

bool qf_rewrite_is_f32_const(const qf_value *v)
{
    return v && qf_value_is_const(v) && v->type.dtype == QF_DTYPE_F32;
}

/* Elements per block of the finite scans below. */
#define QF_FINITE_BLOCK 4096

/* The index of the first NaN or Inf in p[0, n), or n. Each block is first
 * scanned without a branch (exponent bits all ones = NaN or Inf: a loop the
 * compiler vectorizes, where an early exit would keep it scalar), and only a
 * block that holds one is searched element by element. */
static int64_t qf_first_nonfinite_f32(const float *p, int64_t n)
{
    for (int64_t b = 0; b < n; b += QF_FINITE_BLOCK) {
        int64_t e = n - b < QF_FINITE_BLOCK ? n : b + QF_FINITE_BLOCK;
        uint32_t any = 0;
        for (int64_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &p[i], sizeof u);
            any |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (any)
            for (int64_t i = b; i < e; i++)
                if (!isfinite(p[i])) return i;
    }
    return n;
}

static int64_t qf_first_nonfinite_f64(const double *p, int64_t n)
{
    const uint64_t exp = 0x7ff0000000000000u;
    for (int64_t b = 0; b < n; b += QF_FINITE_BLOCK) {
        int64_t e = n - b < QF_FINITE_BLOCK ? n : b + QF_FINITE_BLOCK;
        uint64_t any = 0;
        for (int64_t i = b; i < e; i++) {
            uint64_t u;
            memcpy(&u, &p[i], sizeof u);
            any |= (u & exp) == exp;
        }
        if (any)
            for (int64_t i = b; i < e; i++)
                if (!isfinite(p[i])) return i;
    }
    return n;
}

qf_status qf_rewrite_check_finite(const qf_value *v, const qf_node *n)
{
    const qf_tensor *t = &v->type;
    int64_t count = qf_tensor_numel(t), i = count;
    double bad = 0.0;
    if (t->dtype == QF_DTYPE_F32) {
        i = qf_first_nonfinite_f32(t->data, count);
        if (i < count) bad = ((const float *)t->data)[i];
    } else if (t->dtype == QF_DTYPE_F64) {
        i = qf_first_nonfinite_f64(t->data, count);
        if (i < count) bad = ((const double *)t->data)[i];
    }
    if (i < count)
        return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): tensor '%s' holds %s at index %" PRId64,
                        n->name, qf_op_name(n->op), v->name, isnan(bad) ? "NaN" : "Inf", i);
    return QF_OK;
}

qf_node *qf_rewrite_sole_user(const qf_value *v, int *slot)
{
    if (!v || v->is_output || v->nuses != 1) return NULL;
    if (slot) *slot = v->uses[0].slot;
    return v->uses[0].node;
}

bool qf_rewrite_can_write_in_place(const qf_value *v, const qf_node *n, int slot)
{
    return v && qf_value_is_const(v) && (v->type.owns || v->type.writable) && !v->is_output &&
           v->nuses == 1 && v->uses[0].node == n && v->uses[0].slot == slot;
}

qf_status qf_rewrite_install_const(qf_graph *g, qf_node *n, int slot, qf_tensor *t,
                                   const char *name_hint)
{
    qf_value *old = slot < n->ninputs ? n->inputs[slot] : NULL;
    /* A constant that only this node reads may change in place; one shared
     * with another node (tied weights) must keep its value for that node. */
    if (old && qf_value_is_const(old) && !old->is_output && old->nuses == 1 &&
        old->uses[0].node == n && old->uses[0].slot == slot) {
        qf_value_set_data(old, t);
        return QF_OK;
    }
    qf_value_kind kind = old && qf_value_is_const(old) ? old->kind : QF_VALUE_PARAMETER;
    /* a float32 replacement of a half-precision weight is written as the
     * model had it (graph.h: store) */
    int store = old && qf_value_is_const(old) && t->dtype == QF_DTYPE_F32 ? old->store : 0;
    qf_value *v = qf_graph_add_constant(g, name_hint, kind, t);
    if (!v) {
        qf_tensor_free(t);
        return QF_ERR_NOMEM;
    }
    v->store = store;
    while (n->ninputs < slot) QF_TRY(qf_node_add_input(g, n, NULL));
    if (slot == n->ninputs)
        QF_TRY(qf_node_add_input(g, n, v));
    else
        QF_TRY(qf_node_set_input(g, n, slot, v));
    if (old && qf_value_is_const(old) && !old->nuses && !old->is_output)
        qf_graph_remove_value(g, old);
    return QF_OK;
}

qf_value *qf_rewrite_new_const_f32(qf_graph *g, const char *name, qf_value_kind kind,
                                   const double *vals, int ndim, const int64_t *dims)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) return NULL;
    float *p = t.data;
    int64_t n = qf_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) p[i] = (float)vals[i];
    qf_value *v = qf_graph_add_constant(g, name, kind, &t);
    if (!v) qf_tensor_free(&t);
    return v;
}

void qf_rewrite_drop_dead_consts(qf_graph *g, qf_value *const *vals, int n)
{
    for (int i = 0; i < n; i++) {
        qf_value *v = vals[i];
        /* The same constant may fill two slots (gamma and var both 1s):
         * qf_graph_remove_value tolerates only live values, so skip repeats. */
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= vals[j] == v;
        if (!seen && v && qf_value_is_const(v) && !v->nuses && !v->is_output)
            qf_graph_remove_value(g, v);
    }
}

/* Inputs of a node kept on the stack up to this many; more go to the heap. */
#define QF_REWRITE_INLINE_INPUTS 16

qf_status qf_rewrite_splice_out(qf_graph *g, qf_node *n, qf_value *with)
{
    /* The inputs are read before the node goes: its input array goes with it. */
    qf_value *local[QF_REWRITE_INLINE_INPUTS];
    qf_value **ins = local;
    if (n->ninputs > QF_REWRITE_INLINE_INPUTS) {
        ins = qf_malloc(sizeof *ins * (size_t)n->ninputs);
        if (!ins) return QF_ERR_NOMEM;
    }
    int nin = n->ninputs;
    for (int i = 0; i < nin; i++) ins[i] = n->inputs[i];
    /* The readers keep the name they read: `with` takes the spliced
     * output's name when it is a node's output (as ONNX Runtime's fusions
     * do, the folded Conv writes the BatchNorm's output), so that a node
     * qfold keeps without knowing it (src/ops/ref/opaque.c) and the model's
     * value_info still name what they named. */
    const char *old = n->outputs[0]->name;
    bool rename = with->producer && !with->is_output && !n->outputs[0]->is_output;
    qf_status st = qf_graph_replace_uses(g, n->outputs[0], with);
    if (st == QF_OK) {
        qf_graph_remove_node(g, n);
        qf_rewrite_drop_dead_consts(g, ins, nin);
        /* old stays readable: removed values' names stay in the arena. */
        if (rename && !qf_graph_find_value(g, old)) st = qf_graph_rename_value(g, with, old);
    }
    if (ins != local) qf_free(ins);
    return st;
}

/* --- the walk ------------------------------------------------------------- */

qf_status qf_pass_for_each_op(qf_graph *g, qf_pass_ctx *ctx, qf_op op, qf_pass_match_fn match,
                              qf_pass_apply_fn apply, void *user, bool *changed)
{
    /* Snapshot the nodes first: apply may remove the node it is given,
     * insert nodes anywhere and remove others, which a walk that follows
     * ->next could step onto. A node removed meanwhile is no longer found
     * under its name (removed nodes stay allocated in the graph's arena,
     * so reading the name is safe). */
    int count = 0;
    qf_graph_for_each_node(g, n) count += n->op == op;
    if (!count) return QF_OK;
    qf_node **nodes = qf_malloc(sizeof *nodes * (size_t)count);
    if (!nodes) return qf_error(QF_ERR_NOMEM, "out of memory");
    int k = 0;
    qf_graph_for_each_node(g, n) if (n->op == op) nodes[k++] = n;
    qf_status st = QF_OK;
    for (int i = 0; i < count && st == QF_OK; i++) {
        qf_node *n = nodes[i];
        if (qf_graph_find_node(g, n->name) != n || n->op != op) continue;
        if (!match(g, ctx, n, user)) continue;
        st = apply(g, ctx, n, user);
        if (st == QF_OK && changed) *changed = true;
    }
    qf_free(nodes);
    return st;
}

qf_status qf_rewrite_const_part(qf_graph *g, qf_value *v, int64_t i, int64_t parts, qf_value **out)
{
    *out = v;
    if (!v || qf_tensor_numel(&v->type) == 1) return QF_OK;
    const qf_tensor *t = &v->type;
    int64_t dims[QF_MAX_DIMS];
    memcpy(dims, t->dims, sizeof dims);
    dims[0] /= parts;
    qf_tensor p;
    QF_TRY(qf_tensor_init(&p, t->dtype, t->ndim, dims));
    const size_t bytes = (size_t)qf_tensor_numel(&p) * qf_dtype_size(t->dtype);
    memcpy(p.data, (const char *)t->data + (size_t)i * bytes, bytes);
    char name[512];
    snprintf(name, sizeof name, "%.480s_g%lld", v->name, (long long)i);
    *out = qf_graph_add_constant(g, name, v->kind, &p);
    if (!*out) {
        qf_tensor_free(&p);
        return QF_ERR_NOMEM;
    }
    return QF_OK;
}
