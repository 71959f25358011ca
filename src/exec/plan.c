/* The reference executor: a plan (order, shapes, one activation arena laid
 * out by liveness, scratch) built once, then run as often as needed without
 * allocating. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../ops/dnnl.h"
#include "exec_impl.h"

/* One node of the plan, with its kernel arguments prebuilt. */
typedef struct qf_step {
    const qf_node *node;
    qf_kernel_io io;
    qf_kernel_fn forward;             /* the reference kernel or the backend's */
    const qf_backend_kernels *backend; /* non-NULL when the backend runs this node */
} qf_step;

struct qf_plan {
    qf_graph *g;
    int nsteps;
    qf_step *steps;
    int nvalues;
    qf_tensor *vt;            /* one tensor per value id: constants, input views, arena views */
    const qf_tensor **in_pool;
    qf_tensor **out_pool;
    void *arena_raw;
    size_t arena_bytes, naive_bytes;
    const qf_node *peak;      /* the node whose output set arena_bytes */
    void *scratch_raw;
    size_t scratch_bytes;
    void *state_raw;          /* every node's prepared state, one allocation */
    qf_plan_hook hook;        /* called after every step (calibration); NULL: none */
    void *hook_ud;
};

/* A live buffer while laying out the arena. */
typedef struct qf_block {
    size_t off, size;
    int last; /* index of the last step that reads it */
} qf_block;

/* Run one step's kernel; errors name the node. */
static qf_status qf_exec_step(const qf_step *s)
{
    qf_status st = s->forward(&s->io);
    if (st != QF_OK) qf_exec_name_node(s->node, st);
    return st;
}

qf_status qf_exec_node(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    if (!k->forward_f32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): op has no forward kernel", n->name,
                        qf_op_label(n));
    qf_status st = k->forward_f32(io);
    if (st != QF_OK) qf_exec_name_node(n, st);
    return st;
}

void qf_exec_name_node(const qf_node *n, qf_status st)
{
    /* Every message should name the node; add it when the kernel did not. */
    char quoted[300];
    snprintf(quoted, sizeof quoted, "'%.290s'", n->name);
    if (!strstr(qf_error_message(), quoted)) qf_error_prefix(st, "node '%s' (%s): ", n->name, qf_op_label(n));
}

qf_status qf_exec_scratch(const qf_node *n, const void *state, size_t *bytes)
{
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    *bytes = k->scratch ? k->scratch(n, state) : 0;
    if (*bytes > (uint64_t)QF_MAX_TENSOR_BYTES)
        return qf_error(QF_ERR_SHAPE,
                        "node '%s' (%s): its kernel would need %zu bytes of scratch memory, more than qfold "
                        "handles (%lld bytes)",
                        n->name, qf_op_label(n), *bytes, (long long)QF_MAX_TENSOR_BYTES);
    return QF_OK;
}

void *qf_exec_alloc_aligned(size_t size, void **raw)
{
    *raw = qf_calloc(1, size + QF_EXEC_ALIGN);
    if (!*raw) return NULL;
    uintptr_t p = (uintptr_t)*raw;
    p = (p + QF_EXEC_ALIGN - 1) / QF_EXEC_ALIGN * QF_EXEC_ALIGN;
    return (void *)p;
}

/* Best fit: the smallest gap between live blocks (sorted by offset) that
 * holds `size`, else the end of the highest block. Keeps `live` sorted. */
static size_t qf_place(qf_block *live, int *nlive, size_t size, int last)
{
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, prev_end = 0;
    int best_at = *nlive;
    for (int i = 0; i <= *nlive; i++) {
        if (i == *nlive) {
            if (best == SIZE_MAX) {
                best = prev_end;
                best_at = i;
            }
            break;
        }
        size_t gap = live[i].off - prev_end;
        if (gap >= size && gap < best_gap) {
            best_gap = gap;
            best = prev_end;
            best_at = i;
        }
        prev_end = live[i].off + live[i].size;
    }
    memmove(&live[best_at + 1], &live[best_at], sizeof *live * (size_t)(*nlive - best_at));
    live[best_at] = (qf_block){best, size, last};
    (*nlive)++;
    return best;
}

/* Checks that every shape is known, then gives each activation an offset. */
static qf_status qf_plan_layout(qf_plan *p, size_t *offsets)
{
    qf_graph *g = p->g;
    int n = p->nsteps;
    int *last = qf_malloc(sizeof *last * (size_t)(p->nvalues ? p->nvalues : 1));
    qf_block *live = qf_malloc(sizeof *live * (size_t)(p->nvalues ? p->nvalues : 1));
    uint32_t maxid = 0;
    for (qf_node *x = g->first; x; x = x->next) maxid = x->id > maxid ? x->id : maxid;
    int *pos = qf_malloc(sizeof *pos * ((size_t)maxid + 1));
    qf_status st = QF_OK;
    if (!last || !live || !pos) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < n; i++) pos[p->steps[i].node->id] = i;
    /* Liveness: a buffer lives from its producer's step to its last reader's;
     * graph outputs live to the end (their data is read after the run). */
    for (int i = 0; i < n; i++) {
        const qf_node *nd = p->steps[i].node;
        for (int o = 0; o < nd->noutputs; o++) {
            qf_value *v = nd->outputs[o];
            int l = i;
            for (int u = 0; u < v->nuses; u++) l = pos[v->uses[u].node->id] > l ? pos[v->uses[u].node->id] : l;
            if (v->is_output) l = n;
            last[v->id] = l;
        }
    }
    int nlive = 0;
    size_t top = 0;
    for (int i = 0; i < n; i++) {
        const qf_node *nd = p->steps[i].node;
        for (int o = 0; o < nd->noutputs; o++) {
            qf_value *v = nd->outputs[o];
            size_t sz = qf_exec_align(qf_tensor_nbytes(&v->type));
            p->naive_bytes += sz;
            if (sz == 0) {
                offsets[v->id] = 0;
                continue;
            }
            offsets[v->id] = qf_place(live, &nlive, sz, last[v->id]);
            if (offsets[v->id] + sz > top) {
                top = offsets[v->id] + sz;
                p->peak = nd;
            }
            /* Checked at every step, so offsets stay far from overflowing. */
            if (top > (uint64_t)QF_MAX_TENSOR_BYTES) {
                st = qf_error(QF_ERR_SHAPE,
                              "node '%s' (%s): with output '%s' the live activations need %zu bytes at once, "
                              "more than qfold handles (%lld bytes)",
                              nd->name, qf_op_label(nd), v->name, top, (long long)QF_MAX_TENSOR_BYTES);
                goto done;
            }
        }
        /* Free after the step's outputs are placed: a kernel's output never
         * shares memory with its own inputs. */
        int k = 0;
        for (int b = 0; b < nlive; b++)
            if (live[b].last > i) live[k++] = live[b];
        nlive = k;
    }
    p->arena_bytes = top;
done:
    qf_free(last);
    qf_free(live);
    qf_free(pos);
    return st;
}

/* Every graph input must have a known shape, and inference must then give
 * every activation one. */
static qf_status qf_plan_check_shapes(const qf_graph *g)
{
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        for (int d = 0; d < v->type.ndim; d++)
            if (v->type.dims[d] < 0)
                return qf_error(QF_ERR_SHAPE, "input '%s' has unknown dimension %d: give its shape",
                                v->name, d);
    }
    return QF_OK;
}

static qf_status qf_plan_check_values(const qf_graph *g)
{
    char buf[128];
    for (const qf_node *n = g->first; n; n = n->next) {
        for (int i = 0; i < n->ninputs; i++) {
            const qf_value *v = n->inputs[i];
            if (v && !v->producer && v->kind != QF_VALUE_INPUT && !v->type.data)
                return qf_error(QF_ERR_INVALID, "node '%s' (%s): input '%s' has no data", n->name,
                                qf_op_label(n), v->name);
        }
        /* A shape operand still fed as a graph input leaves shapes unknown. */
        for (int i = 0; i < n->ninputs; i++) {
            const qf_value *v = n->inputs[i];
            if (v && qf_op_input_role(n->op, i) == QF_ROLE_SHAPE && v->kind == QF_VALUE_INPUT && !v->type.data)
                return qf_error(QF_ERR_UNSUPPORTED,
                                "node '%s' (%s): input '%s' gives a shape but is fed at run time "
                                "(dynamic shapes are not supported: bind it as a constant)",
                                n->name, qf_op_label(n), v->name);
        }
        for (int o = 0; o < n->noutputs; o++) {
            const qf_value *v = n->outputs[o];
            if (!qf_dtype_size(v->type.dtype))
                return qf_error(QF_ERR_INVALID, "node '%s' (%s): output '%s' has no dtype", n->name,
                                qf_op_label(n), v->name);
            if (qf_tensor_numel(&v->type) < 0)
                return qf_error(QF_ERR_SHAPE,
                                "node '%s' (%s): output '%s' has unknown shape %s (dynamic shapes are "
                                "not supported)",
                                n->name, qf_op_label(n), v->name,
                                qf_shape_str(v->type.ndim, v->type.dims, buf, sizeof buf));
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        const qf_value *v = g->outputs[i];
        if (!v->producer && v->kind != QF_VALUE_INPUT && !v->type.data)
            return qf_error(QF_ERR_INVALID, "graph output '%s' has no data", v->name);
    }
    return QF_OK;
}

static qf_status qf_plan_build(qf_plan *p)
{
    qf_graph *g = p->g;
    QF_TRY(qf_plan_check_shapes(g));
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    QF_TRY(qf_plan_check_values(g));

    p->nsteps = g->nnodes;
    p->nvalues = g->nvalues;
    int total_in = 0, total_out = 0;
    for (qf_node *n = g->first; n; n = n->next) {
        total_in += n->ninputs;
        total_out += n->noutputs;
    }
    p->steps = qf_calloc((size_t)(p->nsteps ? p->nsteps : 1), sizeof *p->steps);
    p->vt = qf_calloc((size_t)(p->nvalues ? p->nvalues : 1), sizeof *p->vt);
    p->in_pool = qf_calloc((size_t)(total_in ? total_in : 1), sizeof *p->in_pool);
    p->out_pool = qf_calloc((size_t)(total_out ? total_out : 1), sizeof *p->out_pool);
    size_t *offsets = qf_calloc((size_t)(p->nvalues ? p->nvalues : 1), sizeof *offsets);
    if (!p->steps || !p->vt || !p->in_pool || !p->out_pool || !offsets) {
        qf_free(offsets);
        return QF_ERR_NOMEM;
    }
    int k = 0;
    for (qf_node *n = g->first; n; n = n->next) p->steps[k++].node = n;

    /* Prepare every node once (attributes decoded, geometry checked): the
     * states live in one allocation for the plan's life. The kernels' io
     * points at the values' types here; a constant's data is set, an
     * activation's not. When the oneDNN backend is active, a node it has a
     * kernel for is offered to it first (its prepare builds the primitive);
     * a node it declines runs on the reference kernels. */
    const bool dnnl = qf_backend_engine() == QF_BACKEND_DNNL;
    size_t state_bytes = 0;
    for (int i = 0; i < p->nsteps; i++) {
        const qf_op_kernels *kk = qf_op_kernels_get(p->steps[i].node->op);
        size_t size = kk->state_size;
        if (dnnl && kk->dnnl && kk->dnnl->state_size > size) size = kk->dnnl->state_size;
        state_bytes += qf_exec_align(size);
    }
    char *state_mem = NULL;
    if (state_bytes && !(state_mem = qf_exec_alloc_aligned(state_bytes, &p->state_raw))) {
        qf_free(offsets);
        return QF_ERR_NOMEM;
    }
    qf_status st = QF_OK;
    for (int i = 0, ki = 0, ko = 0; i < p->nsteps && st == QF_OK; i++) {
        qf_step *s = &p->steps[i];
        const qf_node *n = s->node;
        const qf_op_kernels *kk = qf_op_kernels_get(n->op);
        for (int j = 0; j < n->ninputs; j++) p->in_pool[ki + j] = n->inputs[j] ? &n->inputs[j]->type : NULL;
        for (int j = 0; j < n->noutputs; j++) p->out_pool[ko + j] = &n->outputs[j]->type;
        size_t size = kk->state_size;
        if (dnnl && kk->dnnl && kk->dnnl->state_size > size) size = kk->dnnl->state_size;
        s->io = (qf_kernel_io){.node = n, .opset = g->opset, .nin = n->ninputs, .nout = n->noutputs,
                               .in = &p->in_pool[ki], .out = &p->out_pool[ko]};
        s->forward = kk->forward_f32;
        if (dnnl && kk->dnnl && kk->dnnl->forward_f32) {
            st = kk->dnnl->prepare(&s->io, state_mem);
            if (st == QF_OK) {
                s->backend = kk->dnnl;
                s->forward = kk->dnnl->forward_f32;
            } else if (st == QF_ERR_UNSUPPORTED) {
                memset(state_mem, 0, size);
                st = QF_OK;
            } else {
                qf_exec_name_node(n, st);
            }
        }
        if (st == QF_OK && !s->backend) {
            if (!s->forward)
                st = qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): op has no forward kernel", n->name,
                              qf_op_label(n));
            else
                st = qf_exec_prepare(&s->io, kk->state_size ? state_mem : NULL);
        }
        s->io.state = size ? state_mem : NULL;
        state_mem += qf_exec_align(size);
        ki += n->ninputs;
        ko += n->noutputs;
    }

    /* Every size first, then the allocations: a plan refused for its size
     * (scratch or arena) has allocated nothing big. */
    size_t scratch = 0;
    for (int i = 0; i < p->nsteps && st == QF_OK; i++) {
        size_t s = 0;
        const qf_step *sp = &p->steps[i];
        if (sp->backend)
            s = sp->backend->scratch ? sp->backend->scratch(sp->node, sp->io.state) : 0;
        else
            st = qf_exec_scratch(sp->node, sp->io.state, &s);
        if (st == QF_OK && s > scratch) scratch = s;
    }
    if (st == QF_OK) st = qf_plan_layout(p, offsets);
    char *arena = NULL;
    if (st == QF_OK) {
        arena = qf_exec_alloc_aligned(p->arena_bytes, &p->arena_raw);
        if (!arena)
            st = qf_error(QF_ERR_NOMEM,
                          "out of memory: the plan's activations need %zu bytes at once (at node '%s')",
                          p->arena_bytes, p->peak ? p->peak->name : "?");
    }
    if (st != QF_OK) {
        qf_free(offsets);
        return st;
    }

    /* Per value: constants point at their payload, inputs get their data at
     * run time, activations point into the arena. */
    for (int i = 0; i < p->nvalues; i++) {
        const qf_value *v = g->values[i];
        if (!v) continue;
        qf_tensor_view(&p->vt[i], v->type.dtype, v->type.ndim, v->type.dims, NULL);
        if (v->producer) p->vt[i].data = arena + offsets[i];
        else if (v->kind != QF_VALUE_INPUT) p->vt[i].data = v->type.data;
    }
    qf_free(offsets);

    p->scratch_bytes = scratch;
    void *scratch_mem = NULL;
    if (scratch) {
        scratch_mem = qf_exec_alloc_aligned(scratch, &p->scratch_raw);
        if (!scratch_mem)
            return qf_error(QF_ERR_NOMEM, "out of memory: the kernels' scratch needs %zu bytes", scratch);
    }

    int ki = 0, ko = 0;
    for (int i = 0; i < p->nsteps; i++) {
        qf_step *s = &p->steps[i];
        const qf_node *n = s->node;
        for (int j = 0; j < n->ninputs; j++) p->in_pool[ki + j] = n->inputs[j] ? &p->vt[n->inputs[j]->id] : NULL;
        for (int j = 0; j < n->noutputs; j++) p->out_pool[ko + j] = &p->vt[n->outputs[j]->id];
        s->io.scratch = scratch_mem;
        s->io.scratch_size = scratch;
        ki += n->ninputs;
        ko += n->noutputs;
    }
    return QF_OK;
}

qf_status qf_plan_init(qf_plan **out, qf_graph *g)
{
    *out = NULL;
    qf_plan *p = qf_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->g = g;
    qf_status st = qf_plan_build(p);
    if (st != QF_OK) {
        qf_plan_free(p);
        return st;
    }
    *out = p;
    return QF_OK;
}

void qf_plan_free(qf_plan *p)
{
    if (!p) return;
    /* Steps past a failed prepare have no backend set. */
    for (int i = 0; p->steps && i < p->nsteps; i++)
        if (p->steps[i].backend && p->steps[i].backend->release)
            p->steps[i].backend->release((void *)p->steps[i].io.state);
    qf_free(p->steps);
    qf_free(p->vt);
    qf_free(p->in_pool);
    qf_free(p->out_pool);
    qf_free(p->arena_raw);
    qf_free(p->scratch_raw);
    qf_free(p->state_raw);
    qf_free(p);
}

qf_status qf_plan_run(qf_plan *p, const qf_tensor *const *inputs, int ninputs)
{
    const qf_graph *g = p->g;
    if (ninputs != g->ninputs)
        return qf_error(QF_ERR_INVALID, "graph has %d input%s, got %d", g->ninputs,
                        g->ninputs == 1 ? "" : "s", ninputs);
    for (int i = 0; i < ninputs; i++) {
        const qf_value *v = g->inputs[i];
        const qf_tensor *t = inputs[i];
        char want[128], got[128];
        if (!t || (!t->data && qf_tensor_nbytes(t)))
            return qf_error(QF_ERR_INVALID, "input '%s': no data given", v->name);
        if (t->dtype != v->type.dtype)
            return qf_error(QF_ERR_INVALID, "input '%s' expects %s, got %s", v->name,
                            qf_dtype_name(v->type.dtype), qf_dtype_name(t->dtype));
        if (!qf_shape_equal(t->ndim, t->dims, v->type.ndim, v->type.dims))
            return qf_error(QF_ERR_SHAPE, "input '%s' expects shape %s, got %s", v->name,
                            qf_shape_str(v->type.ndim, v->type.dims, want, sizeof want),
                            qf_shape_str(t->ndim, t->dims, got, sizeof got));
        /* A view on the caller's data: the kernels only read it. */
        p->vt[v->id].data = t->data;
    }
    for (int i = 0; i < p->nsteps; i++) {
        const qf_kernel_io *io = &p->steps[i].io;
        QF_TRY(qf_exec_step(&p->steps[i]));
        if (p->hook) QF_TRY(p->hook(p->hook_ud, io->node, (const qf_tensor *const *)io->out, io->nout));
    }
    return QF_OK;
}

void qf_plan_set_hook(qf_plan *p, qf_plan_hook hook, void *ud)
{
    p->hook = hook;
    p->hook_ud = ud;
}

int qf_plan_num_outputs(const qf_plan *p) { return p->g->noutputs; }

const qf_tensor *qf_plan_output(const qf_plan *p, int i)
{
    if (i < 0 || i >= p->g->noutputs) return NULL;
    return &p->vt[p->g->outputs[i]->id];
}

size_t qf_plan_arena_bytes(const qf_plan *p) { return p->arena_bytes; }

size_t qf_plan_naive_bytes(const qf_plan *p) { return p->naive_bytes; }
