/* The graph: values, nodes, use lists, attributes, rewiring. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "graph_impl.h"
#include "../core/mem.h"

qf_status qf_graph_init(qf_graph **out)
{
    *out = NULL;
    qf_graph *g = qf_calloc(1, sizeof *g);
    if (!g) return QF_ERR_NOMEM;
    g->impl = qf_calloc(1, sizeof *g->impl);
    if (!g->impl) {
        qf_free(g);
        return QF_ERR_NOMEM;
    }
    qf_arena_init(&g->impl->arena);
    g->opset = 17;
    g->ir_version = 8;
    g->name = "qfold";
    *out = g;
    return QF_OK;
}

/* Drop a value's deferred-payload record (deferred.c makes it). Here, with
 * the value's lifetime, so that graph.c needs nothing of deferred.c (which
 * uses graph.c's strdup and set_data): no circle between the two files. */
static void qf_deferred_release(qf_value *v)
{
    if (!v->deferred) return;
    qf_free(v->deferred->scale);
    qf_free(v->deferred);
    v->deferred = NULL;
}

static void qf_value_release(qf_value *v)
{
    qf_free(v->uses);
    v->uses = NULL;
    v->nuses = v->cap_uses = 0;
    qf_tensor_free(&v->type);
    qf_deferred_release(v);
}

static void qf_node_release_attrs(qf_node *n)
{
    for (int i = 0; i < n->nattrs; i++)
        if (n->attrs[i].type == QF_ATTR_TENSOR && n->attrs[i].t) qf_tensor_free(n->attrs[i].t);
    n->nattrs = 0;
}

void qf_graph_free(qf_graph *g)
{
    if (!g) return;
    for (qf_node *n = g->first; n; n = n->next) qf_node_release_attrs(n);
    for (int i = 0; i < g->nvalues; i++)
        if (g->values[i]) qf_value_release(g->values[i]);
    /* Every tensor borrowing from these is gone now. */
    for (qf_graph_buffer *b = g->impl->buffers; b; b = b->next) qf_free(b->data);
    qf_free(g->values);
    qf_free(g->inputs);
    qf_free(g->outputs);
    qf_name_map_free(&g->impl->value_names);
    qf_name_map_free(&g->impl->node_names);
    if (g->impl->has_src) close(g->impl->src_fd);
    qf_arena_free(&g->impl->arena);
    qf_free(g->impl);
    qf_free(g);
}

const char *qf_graph_strdup(qf_graph *g, const char *s)
{
    char *r = qf_arena_strdup(&g->impl->arena, s ? s : "");
    if (!r) qf_error(QF_ERR_NOMEM, "out of memory");
    return r;
}

void *qf_graph_alloc(qf_graph *g, size_t size)
{
    void *p = qf_arena_alloc(&g->impl->arena, size);
    if (!p) qf_error(QF_ERR_NOMEM, "out of memory");
    return p;
}

qf_status qf_graph_adopt_buffer(qf_graph *g, void *buf, size_t size)
{
    qf_graph_buffer *b = qf_graph_alloc(g, sizeof *b);
    if (!b) return QF_ERR_NOMEM;
    b->data = buf;
    b->size = size;
    b->next = g->impl->buffers;
    g->impl->buffers = b;
    return QF_OK;
}

static qf_status qf_grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return QF_OK;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need) ncap *= 2;
    void *p = qf_realloc(*arr, (size_t)ncap * elem);
    if (!p) return QF_ERR_NOMEM;
    *arr = p;
    *cap = ncap;
    return QF_OK;
}

/* A name unique in `map`: `base` itself if free, else base_1, base_2, ... */
static const char *qf_unique_name(qf_graph *g, qf_name_map *map, const char *base)
{
    if (!qf_name_map_get(map, base)) return qf_graph_strdup(g, base);
    char buf[512];
    for (;;) {
        snprintf(buf, sizeof buf, "%.480s_%u", base, ++g->impl->name_counter);
        if (!qf_name_map_get(map, buf)) return qf_graph_strdup(g, buf);
    }
}

qf_value *qf_graph_add_value(qf_graph *g, const char *name, qf_value_kind kind, qf_dtype dt,
                             int ndim, const int64_t *dims)
{
    if (ndim < 0 || ndim > QF_MAX_DIMS) {
        qf_error(QF_ERR_UNSUPPORTED, "value '%s': rank %d (qfold handles 0..%d)", name ? name : "?",
                 ndim, QF_MAX_DIMS);
        return NULL;
    }
    if (qf_grow((void **)&g->values, &g->cap_values, g->nvalues + 1, sizeof *g->values)) return NULL;
    qf_value *v = qf_graph_alloc(g, sizeof *v);
    if (!v) return NULL;
    char gen[32];
    if (!name || !*name) {
        snprintf(gen, sizeof gen, "v%d", g->nvalues);
        name = gen;
    }
    v->name = qf_unique_name(g, &g->impl->value_names, name);
    if (!v->name || qf_name_map_put(&g->impl->value_names, v->name, v)) return NULL;
    v->id = (uint32_t)g->nvalues;
    v->kind = kind;
    v->type.dtype = dt;
    v->type.ndim = ndim;
    for (int i = 0; i < ndim; i++) v->type.dims[i] = dims ? dims[i] : -1;
    g->values[g->nvalues++] = v;
    return v;
}

qf_value *qf_graph_add_input(qf_graph *g, const char *name, qf_dtype dt, int ndim,
                             const int64_t *dims)
{
    if (qf_grow((void **)&g->inputs, &g->cap_inputs, g->ninputs + 1, sizeof *g->inputs)) return NULL;
    qf_value *v = qf_graph_add_value(g, name, QF_VALUE_INPUT, dt, ndim, dims);
    if (v) g->inputs[g->ninputs++] = v;
    return v;
}

qf_value *qf_graph_add_constant(qf_graph *g, const char *name, qf_value_kind kind, qf_tensor *t)
{
    qf_value *v = qf_graph_add_value(g, name, kind, t->dtype, t->ndim, t->dims);
    if (!v) return NULL;
    qf_value_set_data(v, t);
    return v;
}

void qf_value_set_data(qf_value *v, qf_tensor *t)
{
    qf_tensor_free(&v->type);
    qf_deferred_release(v);
    v->type = *t;
    memset(t, 0, sizeof *t);
}

qf_status qf_graph_add_output(qf_graph *g, qf_value *v)
{
    QF_TRY(qf_grow((void **)&g->outputs, &g->cap_outputs, g->noutputs + 1, sizeof *g->outputs));
    g->outputs[g->noutputs++] = v;
    v->is_output = true;
    return QF_OK;
}

qf_status qf_graph_set_input_shape(qf_graph *g, int i, int ndim, const int64_t *dims)
{
    if (i < 0 || i >= g->ninputs) return qf_error(QF_ERR_INVALID, "graph has no input %d", i);
    qf_value *v = g->inputs[i];
    char want[128], got[128];
    if (ndim != v->type.ndim)
        return qf_error(QF_ERR_SHAPE, "input '%s' expects shape %s, got %s", v->name,
                        qf_shape_str(v->type.ndim, v->type.dims, want, sizeof want),
                        qf_shape_str(ndim, dims, got, sizeof got));
    for (int d = 0; d < ndim; d++) {
        if (v->type.dims[d] >= 0 && v->type.dims[d] != dims[d])
            return qf_error(QF_ERR_SHAPE, "input '%s' expects shape %s, got %s", v->name,
                            qf_shape_str(v->type.ndim, v->type.dims, want, sizeof want),
                            qf_shape_str(ndim, dims, got, sizeof got));
    }
    for (int d = 0; d < ndim; d++) v->type.dims[d] = dims[d];
    return QF_OK;
}

qf_status qf_graph_bind_input(qf_graph *g, int i, qf_tensor *t)
{
    if (i < 0 || i >= g->ninputs) return qf_error(QF_ERR_INVALID, "graph has no input %d", i);
    qf_value *v = g->inputs[i];
    if (t->dtype != v->type.dtype)
        return qf_error(QF_ERR_INVALID, "input '%s' expects %s, got %s", v->name,
                        qf_dtype_name(v->type.dtype), qf_dtype_name(t->dtype));
    QF_TRY(qf_graph_set_input_shape(g, i, t->ndim, t->dims));
    memmove(&g->inputs[i], &g->inputs[i + 1], sizeof *g->inputs * (size_t)(g->ninputs - i - 1));
    g->ninputs--;
    v->kind = QF_VALUE_CONSTANT;
    qf_value_set_data(v, t);
    return QF_OK;
}

qf_value *qf_graph_find_value(const qf_graph *g, const char *name)
{
    return qf_name_map_get(&g->impl->value_names, name);
}

qf_status qf_graph_rename_value(qf_graph *g, qf_value *v, const char *name)
{
    qf_value *other = qf_name_map_get(&g->impl->value_names, name);
    if (other == v) return QF_OK;
    if (other) return qf_error(QF_ERR_INVALID, "value name '%s' is already in use", name);
    const char *copy = qf_graph_strdup(g, name);
    if (!copy) return QF_ERR_NOMEM;
    qf_name_map_del(&g->impl->value_names, v->name);
    v->name = copy;
    return qf_name_map_put(&g->impl->value_names, v->name, v);
}

qf_status qf_graph_make_input(qf_graph *g, qf_value *v)
{
    /* A payload still in the file is the caller's to read (qf_value_load):
     * an input's data is in memory, and deferred.c builds on this file. */
    if (v->producer || !v->type.data || v->deferred || !qf_value_is_const(v))
        return qf_error(QF_ERR_INTERNAL,
                        "'%s' is not a constant in memory: it cannot become an input with a default",
                        v->name);
    QF_TRY(qf_grow((void **)&g->inputs, &g->cap_inputs, g->ninputs + 1, sizeof *g->inputs));
    v->kind = QF_VALUE_INPUT;
    g->inputs[g->ninputs++] = v;
    return QF_OK;
}

qf_status qf_graph_input_use_default(qf_graph *g, int i)
{
    if (i < 0 || i >= g->ninputs) return qf_error(QF_ERR_INVALID, "graph has no input %d", i);
    qf_value *v = g->inputs[i];
    if (!v->type.data)
        return qf_error(QF_ERR_INVALID, "input '%s' has no default value: feed it", v->name);
    memmove(&g->inputs[i], &g->inputs[i + 1], sizeof *g->inputs * (size_t)(g->ninputs - i - 1));
    g->ninputs--;
    v->kind = QF_VALUE_CONSTANT;
    return QF_OK;
}

bool qf_value_has_default(const qf_value *v)
{
    return v && v->kind == QF_VALUE_INPUT && v->type.data;
}

bool qf_value_is_const(const qf_value *v)
{
    return v && (v->type.data || v->deferred) && (v->kind == QF_VALUE_CONSTANT || v->kind == QF_VALUE_PARAMETER ||
                                 v->kind == QF_VALUE_BUFFER);
}

/* A removed value's writable slice of an adopted buffer is nobody's any
 * more: its whole pages go back to the system, as an owned payload's memory
 * does when it is freed (checked to lie inside one of g's buffers, since
 * only those are the graph's to discard). */
static void qf_value_discard(qf_graph *g, const qf_value *v)
{
    const qf_tensor *t = &v->type;
    if (t->owns || !t->writable || !t->data) return;
    uintptr_t p = (uintptr_t)t->data;
    size_t n = qf_tensor_nbytes(t);
    for (const qf_graph_buffer *b = g->impl->buffers; b; b = b->next) {
        uintptr_t lo = (uintptr_t)b->data;
        if (p >= lo && p - lo <= b->size && n <= b->size - (p - lo)) {
            qf_mem_discard(t->data, n);
            return;
        }
    }
}

void qf_graph_remove_value(qf_graph *g, qf_value *v)
{
    if (v->producer || v->nuses || v->is_output) return;
    if (v->kind == QF_VALUE_INPUT) {
        int k = 0;
        for (int i = 0; i < g->ninputs; i++)
            if (g->inputs[i] != v) g->inputs[k++] = g->inputs[i];
        g->ninputs = k;
    }
    qf_name_map_del(&g->impl->value_names, v->name);
    g->values[v->id] = NULL;
    qf_value_discard(g, v);
    qf_value_release(v);
}

/* --- use lists ------------------------------------------------------------- */
static qf_status qf_use_add(qf_value *v, qf_node *n, int slot)
{
    QF_TRY(qf_grow((void **)&v->uses, &v->cap_uses, v->nuses + 1, sizeof *v->uses));
    v->uses[v->nuses++] = (qf_use){n, slot};
    return QF_OK;
}

/* From the end: the callers remove the last use first (replace_uses, a
 * node's inputs from the last slot), so a value with 10^6 readers loses them
 * in linear time, not quadratic. */
static void qf_use_del(qf_value *v, const qf_node *n, int slot)
{
    for (int i = v->nuses - 1; i >= 0; i--) {
        if (v->uses[i].node == n && v->uses[i].slot == slot) {
            memmove(&v->uses[i], &v->uses[i + 1], (size_t)(v->nuses - i - 1) * sizeof *v->uses);
            v->nuses--;
            return;
        }
    }
}

/* --- nodes ----------------------------------------------------------------- */
static void qf_link(qf_graph *g, qf_node *n, qf_node *pos, bool after)
{
    if (!pos) { /* append */
        n->prev = g->last;
        n->next = NULL;
        if (g->last) g->last->next = n; else g->first = n;
        g->last = n;
    } else if (after) {
        n->prev = pos;
        n->next = pos->next;
        if (pos->next) pos->next->prev = n; else g->last = n;
        pos->next = n;
    } else {
        n->next = pos;
        n->prev = pos->prev;
        if (pos->prev) pos->prev->next = n; else g->first = n;
        pos->prev = n;
    }
    g->nnodes++;
}

static void qf_unlink(qf_graph *g, qf_node *n)
{
    if (n->prev) n->prev->next = n->next; else g->first = n->next;
    if (n->next) n->next->prev = n->prev; else g->last = n->prev;
    n->prev = n->next = NULL;
    g->nnodes--;
}

qf_node *qf_graph_insert_node(qf_graph *g, qf_node *pos, bool after, qf_op op, const char *name,
                              int ninputs, qf_value *const *inputs, int noutputs)
{
    qf_node *n = qf_graph_alloc(g, sizeof *n);
    if (!n) return NULL;
    char gen[64];
    if (!name || !*name) {
        snprintf(gen, sizeof gen, "%s_%u", qf_op_name(op), g->next_node_id);
        name = gen;
    }
    n->name = qf_unique_name(g, &g->impl->node_names, name);
    if (!n->name || qf_name_map_put(&g->impl->node_names, n->name, n)) return NULL;
    n->id = g->next_node_id++;
    n->op = op;
    n->inputs = qf_graph_alloc(g, sizeof *n->inputs * (size_t)(ninputs ? ninputs : 1));
    n->outputs = qf_graph_alloc(g, sizeof *n->outputs * (size_t)(noutputs ? noutputs : 1));
    if (!n->inputs || !n->outputs) goto fail;
    for (int i = 0; i < ninputs; i++) {
        if (inputs[i] && qf_use_add(inputs[i], n, i)) goto fail;
        n->inputs[i] = inputs[i];
        n->ninputs = i + 1;
    }
    for (int i = 0; i < noutputs; i++) {
        char vname[600];
        snprintf(vname, sizeof vname, noutputs == 1 ? "%.560s_out" : "%.560s_out%d", n->name, i);
        qf_value *v = qf_graph_add_value(g, vname, QF_VALUE_ACTIVATION, QF_DTYPE_UNDEFINED, 0, NULL);
        if (!v) goto fail;
        v->producer = n;
        v->producer_slot = i;
        n->outputs[i] = v;
        n->noutputs = i + 1;
    }
    qf_link(g, n, pos, after);
    return n;
fail:
    /* Out of memory half way: undo what is already visible from the graph
     * (uses in the inputs, output values, the name), so that a caller that
     * goes on after the error still has a graph that verifies. */
    for (int i = n->ninputs - 1; i >= 0; i--)
        if (n->inputs[i]) qf_use_del(n->inputs[i], n, i);
    for (int i = 0; i < n->noutputs; i++) {
        n->outputs[i]->producer = NULL;
        qf_graph_remove_value(g, n->outputs[i]);
    }
    qf_name_map_del(&g->impl->node_names, n->name);
    return NULL;
}

qf_node *qf_graph_add_node(qf_graph *g, qf_op op, const char *name, int ninputs,
                           qf_value *const *inputs, int noutputs)
{
    return qf_graph_insert_node(g, NULL, true, op, name, ninputs, inputs, noutputs);
}

qf_node *qf_graph_find_node(const qf_graph *g, const char *name)
{
    return qf_name_map_get(&g->impl->node_names, name);
}

qf_status qf_graph_rename_node(qf_graph *g, qf_node *n, const char *name)
{
    qf_node *other = qf_name_map_get(&g->impl->node_names, name);
    if (other == n) return QF_OK;
    if (other) return qf_error(QF_ERR_INVALID, "node name '%s' is already in use", name);
    const char *copy = qf_graph_strdup(g, name);
    if (!copy) return QF_ERR_NOMEM;
    qf_name_map_del(&g->impl->node_names, n->name);
    n->name = copy;
    return qf_name_map_put(&g->impl->node_names, n->name, n);
}

qf_status qf_node_set_input(qf_graph *g, qf_node *n, int slot, qf_value *v)
{
    (void)g;
    if (slot < 0 || slot >= n->ninputs)
        return qf_error(QF_ERR_INTERNAL, "node '%s': input slot %d out of range", n->name, slot);
    if (n->inputs[slot]) qf_use_del(n->inputs[slot], n, slot);
    n->inputs[slot] = v;
    if (v) QF_TRY(qf_use_add(v, n, slot));
    return QF_OK;
}

qf_status qf_node_add_input(qf_graph *g, qf_node *n, qf_value *v)
{
    qf_value **in = qf_graph_alloc(g, sizeof *in * (size_t)(n->ninputs + 1));
    if (!in) return QF_ERR_NOMEM;
    memcpy(in, n->inputs, sizeof *in * (size_t)n->ninputs);
    in[n->ninputs] = v;
    n->inputs = in;
    n->ninputs++;
    if (v) QF_TRY(qf_use_add(v, n, n->ninputs - 1));
    return QF_OK;
}

qf_status qf_graph_replace_uses(qf_graph *g, qf_value *from, qf_value *to)
{
    if (from == to) return QF_OK;
    while (from->nuses) {
        qf_use u = from->uses[from->nuses - 1];
        QF_TRY(qf_node_set_input(g, u.node, u.slot, to));
    }
    if (from->is_output) {
        for (int i = 0; i < g->noutputs; i++)
            if (g->outputs[i] == from) g->outputs[i] = to;
        from->is_output = false;
        to->is_output = true;
        /* The output keeps the model's dtype (a float16 output stays one). */
        if (!to->store) to->store = from->store & QF_STORE_DTYPE;
        /* The graph's interface keeps its name: swap the two names. */
        const char *fname = from->name, *tname = to->name;
        qf_name_map_del(&g->impl->value_names, fname);
        qf_name_map_del(&g->impl->value_names, tname);
        from->name = tname;
        to->name = fname;
        QF_TRY(qf_name_map_put(&g->impl->value_names, to->name, to));
        QF_TRY(qf_name_map_put(&g->impl->value_names, from->name, from));
    }
    return QF_OK;
}

void qf_graph_remove_node(qf_graph *g, qf_node *n)
{
    for (int i = n->ninputs - 1; i >= 0; i--)
        if (n->inputs[i]) qf_use_del(n->inputs[i], n, i);
    for (int i = 0; i < n->noutputs; i++) {
        qf_value *v = n->outputs[i];
        v->producer = NULL;
        qf_graph_remove_value(g, v);
    }
    qf_node_release_attrs(n);
    qf_name_map_del(&g->impl->node_names, n->name);
    qf_unlink(g, n);
}

int qf_graph_dce(qf_graph *g) { return qf_graph_dce_ex(g, NULL, NULL); }

int qf_graph_dce_ex(qf_graph *g, void (*removed_fn)(void *ud, const qf_node *n), void *ud)
{
    int removed = 0;
    /* Walk backwards: removing a node can make its producers dead. */
    for (qf_node *n = g->last; n;) {
        qf_node *prev = n->prev;
        bool live = false;
        for (int i = 0; i < n->noutputs && !live; i++)
            live = n->outputs[i]->nuses > 0 || n->outputs[i]->is_output;
        if (!live) {
            if (removed_fn) removed_fn(ud, n);
            qf_graph_remove_node(g, n);
            removed++;
        }
        n = prev;
    }
    for (int i = 0; i < g->nvalues; i++) {
        qf_value *v = g->values[i];
        if (v && !v->producer && v->kind != QF_VALUE_INPUT && v->kind != QF_VALUE_ACTIVATION &&
            !v->nuses && !v->is_output)
            qf_graph_remove_value(g, v);
    }
    return removed;
}

/* --- attributes ------------------------------------------------------------ */
const qf_attr *qf_node_attr(const qf_node *n, const char *name)
{
    for (int i = 0; i < n->nattrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t qf_node_attr_int(const qf_node *n, const char *name, int64_t dflt)
{
    const qf_attr *a = qf_node_attr(n, name);
    return a && a->type == QF_ATTR_INT ? a->i : dflt;
}

float qf_node_attr_float(const qf_node *n, const char *name, float dflt)
{
    const qf_attr *a = qf_node_attr(n, name);
    return a && a->type == QF_ATTR_FLOAT ? a->f : dflt;
}

const char *qf_node_attr_string(const qf_node *n, const char *name, const char *dflt)
{
    const qf_attr *a = qf_node_attr(n, name);
    return a && a->type == QF_ATTR_STRING ? a->s : dflt;
}

const int64_t *qf_node_attr_ints(const qf_node *n, const char *name, int *count)
{
    const qf_attr *a = qf_node_attr(n, name);
    if (!a || a->type != QF_ATTR_INTS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->ints;
}

const float *qf_node_attr_floats(const qf_node *n, const char *name, int *count)
{
    const qf_attr *a = qf_node_attr(n, name);
    if (!a || a->type != QF_ATTR_FLOATS) {
        *count = 0;
        return NULL;
    }
    *count = a->n;
    return a->floats;
}

/* The slot for `name`: the existing attribute (cleared) or a new one. */
static qf_attr *qf_attr_slot(qf_graph *g, qf_node *n, const char *name, qf_attr_type type)
{
    qf_attr *a = (qf_attr *)qf_node_attr(n, name);
    if (a) {
        if (a->type == QF_ATTR_TENSOR && a->t) qf_tensor_free(a->t);
    } else {
        if (n->nattrs == n->cap_attrs) {
            int ncap = n->cap_attrs ? n->cap_attrs * 2 : 4;
            qf_attr *na = qf_graph_alloc(g, sizeof *na * (size_t)ncap);
            if (!na) return NULL;
            if (n->nattrs) memcpy(na, n->attrs, sizeof *na * (size_t)n->nattrs);
            n->attrs = na;
            n->cap_attrs = ncap;
        }
        a = &n->attrs[n->nattrs++];
        a->name = qf_graph_strdup(g, name);
        if (!a->name) {
            n->nattrs--;
            return NULL;
        }
    }
    const char *keep = a->name;
    memset(a, 0, sizeof *a);
    a->name = keep;
    a->type = type;
    return a;
}

qf_status qf_node_set_attr_int(qf_graph *g, qf_node *n, const char *name, int64_t v)
{
    qf_attr *a = qf_attr_slot(g, n, name, QF_ATTR_INT);
    if (!a) return QF_ERR_NOMEM;
    a->i = v;
    return QF_OK;
}

qf_status qf_node_set_attr_float(qf_graph *g, qf_node *n, const char *name, float v)
{
    qf_attr *a = qf_attr_slot(g, n, name, QF_ATTR_FLOAT);
    if (!a) return QF_ERR_NOMEM;
    a->f = v;
    return QF_OK;
}

qf_status qf_node_set_attr_string(qf_graph *g, qf_node *n, const char *name, const char *v)
{
    qf_attr *a = qf_attr_slot(g, n, name, QF_ATTR_STRING);
    if (!a) return QF_ERR_NOMEM;
    a->s = qf_graph_strdup(g, v);
    return a->s ? QF_OK : QF_ERR_NOMEM;
}

qf_status qf_node_set_attr_ints(qf_graph *g, qf_node *n, const char *name, const int64_t *v, int count)
{
    qf_attr *a = qf_attr_slot(g, n, name, QF_ATTR_INTS);
    if (!a) return QF_ERR_NOMEM;
    a->ints = qf_graph_alloc(g, sizeof *a->ints * (size_t)(count ? count : 1));
    if (!a->ints) return QF_ERR_NOMEM;
    if (count) memcpy(a->ints, v, sizeof *a->ints * (size_t)count);
    a->n = count;
    return QF_OK;
}

qf_status qf_node_set_attr_floats(qf_graph *g, qf_node *n, const char *name, const float *v, int count)
{
    qf_attr *a = qf_attr_slot(g, n, name, QF_ATTR_FLOATS);
    if (!a) return QF_ERR_NOMEM;
    a->floats = qf_graph_alloc(g, sizeof *a->floats * (size_t)(count ? count : 1));
    if (!a->floats) return QF_ERR_NOMEM;
    if (count) memcpy(a->floats, v, sizeof *a->floats * (size_t)count);
    a->n = count;
    return QF_OK;
}

qf_status qf_node_copy_attrs(qf_graph *g, qf_node *n, const qf_node *like)
{
    qf_status st = QF_OK;
    for (int i = 0; like && i < like->nattrs && st == QF_OK; i++) {
        const qf_attr *a = &like->attrs[i];
        if (a->type == QF_ATTR_INT)
            st = qf_node_set_attr_int(g, n, a->name, a->i);
        else if (a->type == QF_ATTR_INTS)
            st = qf_node_set_attr_ints(g, n, a->name, a->ints, a->n);
        else if (a->type == QF_ATTR_FLOAT)
            st = qf_node_set_attr_float(g, n, a->name, a->f);
        else if (a->type == QF_ATTR_FLOATS)
            st = qf_node_set_attr_floats(g, n, a->name, a->floats, a->n);
        else if (a->type == QF_ATTR_STRING)
            st = qf_node_set_attr_string(g, n, a->name, a->s);
    }
    return st;
}

qf_status qf_node_set_attr_tensor(qf_graph *g, qf_node *n, const char *name, qf_tensor *t)
{
    qf_attr *a = qf_attr_slot(g, n, name, QF_ATTR_TENSOR);
    if (!a) return QF_ERR_NOMEM;
    a->t = qf_graph_alloc(g, sizeof *a->t);
    if (!a->t) return QF_ERR_NOMEM;
    *a->t = *t;
    memset(t, 0, sizeof *t);
    return QF_OK;
}

void qf_node_remove_attr(qf_node *n, const char *name)
{
    for (int i = 0; i < n->nattrs; i++) {
        if (strcmp(n->attrs[i].name, name) != 0) continue;
        if (n->attrs[i].type == QF_ATTR_TENSOR && n->attrs[i].t) qf_tensor_free(n->attrs[i].t);
        memmove(&n->attrs[i], &n->attrs[i + 1], sizeof *n->attrs * (size_t)(n->nattrs - i - 1));
        n->nattrs--;
        return;
    }
}

const char *qf_value_kind_name(qf_value_kind k)
{
    switch (k) {
    case QF_VALUE_ACTIVATION: return "activation";
    case QF_VALUE_INPUT: return "input";
    case QF_VALUE_CONSTANT: return "constant";
    case QF_VALUE_PARAMETER: return "parameter";
    case QF_VALUE_BUFFER: return "buffer";
    }
    return "?";
}
