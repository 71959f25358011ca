/* The reference executor: a plan (order, shapes, one activation arena laid
 * out by liveness, scratch) built once, then run as often as needed without
 * allocating. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/parallel.h"
#include "backend/backend.h"
#include "exec_impl.h"

/* One step of the plan, with its kernel arguments prebuilt: a node (with
 * the nodes fused into it), or a reorder of one value's layout. */
typedef struct qf_step {
    const qf_node *node;               /* for a reorder: the value's producer (NULL: a graph input) */
    const qf_value *reorder;           /* non-NULL: this step converts that value's layout */
    qf_kernel_io io;
    qf_kernel_fn forward;              /* the reference kernel, the backend's, or the reorder */
    const qf_backend_kernels *backend; /* non-NULL when the backend runs this node */
    uint32_t in_nhwc, out_nhwc;        /* the planned layouts (a reference kernel's io says 0) */
} qf_step;

/* How a node of the plan is prepared: not (fused into another, or not yet),
 * by the reference columns, or by the backend with these layouts and
 * post-ops. A new layout plan re-prepares only the nodes whose line changed. */
typedef enum qf_prep_kind {
    QF_PREP_KIND_NONE = 0, /* zero: a calloc'ed entry is not prepared */
    QF_PREP_KIND_REF,
    QF_PREP_KIND_BACKEND,
} qf_prep_kind;

typedef struct qf_prepared {
    const qf_node *node;
    qf_prep_kind kind;
    uint32_t in_nhwc, out_nhwc;
    bool blocked;
    int nfused;
    const qf_node *fused[QF_FUSE_MAX];
    void *state;
    size_t size;
} qf_prepared;

struct qf_plan {
    qf_graph *g;
    bool plain;               /* no NHWC, no fusion: built for a hook */
    bool stale;               /* a hook was set on a plan with NHWC or fusion: rebuild plain */
    bool blocked;             /* the other layout is blocked (nChw16c), not NHWC (layout.c) */
    int nsteps;
    qf_step *steps;
    int nnodes;
    qf_prepared *prep;        /* per node in plan order */
    const qf_node **fused;    /* the layout plan's fused nodes (steps' io.fused point here) */
    int nvalues;
    qf_tensor *vt;            /* per value id: as written (constants, input views, arena views);
                                 at nvalues + id: the other layout, when a reorder makes it */
    const qf_tensor **outs;   /* per graph output: the NCHW tensor */
    const qf_tensor **in_pool;
    qf_tensor **out_pool;
    const qf_tensor **post_pool;
    int nviews;               /* reference kernels run channels-last see views with */
    qf_tensor *views;         /* dims permuted to N, H, W, C; data from view_src at */
    const qf_tensor **view_src; /* every run */
    void *arena_raw;
    size_t arena_bytes, naive_bytes;
    const qf_node *peak;      /* the node whose output set arena_bytes */
    void *scratch_raw;
    size_t scratch_bytes;
    void *state_raw;          /* every node's prepared state, one allocation */
    qf_plan_hook hook;        /* called after every step (calibration); NULL: none */
    void *hook_ud;
    qf_plan_observer obs;     /* observe != NULL: called for every kept value */
    unsigned char *keep;      /* per value id: obs.wants it (no fusion hides it); NULL: none */
};


/* Run one step's kernel; errors name the node. */
static qf_status qf_exec_step(const qf_step *s)
{
    qf_status st = s->forward(&s->io);
    if (st != QF_OK && s->node) qf_exec_name_node(s->node, st);
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

qf_status qf_exec_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    if (!k->prepare) return QF_OK;
    qf_status st = k->prepare(io, state);
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

/* Zeroing a large block is its first touch: every page faults in (and the
 * kernel clears it) in the thread that writes it first. In slices on the
 * threads, those faults run side by side instead of on the calling thread
 * alone while the others wait (a calibration or batch plan's arena is
 * hundreds of MiB: ~10 % of a resnet18 calibration of 64 images). */
#define QF_EXEC_ZERO_GRAIN ((size_t)4 << 20)

typedef struct exec_zero_job {
    char *p;
    size_t n;
} exec_zero_job;

static void qf_exec_zero_slices(void *ctx, int64_t lo, int64_t hi)
{
    const exec_zero_job *j = ctx;
    size_t a = (size_t)lo * QF_EXEC_ZERO_GRAIN, b = (size_t)hi * QF_EXEC_ZERO_GRAIN;
    if (b > j->n) b = j->n;
    memset(j->p + a, 0, b - a);
}

static void qf_exec_zero(void *p, size_t n)
{
    if (n < 2 * QF_EXEC_ZERO_GRAIN || qf_parallel_threads() < 2) {
        memset(p, 0, n);
        return;
    }
    exec_zero_job j = {p, n};
    qf_parallel_for((int64_t)((n + QF_EXEC_ZERO_GRAIN - 1) / QF_EXEC_ZERO_GRAIN), 1, qf_exec_zero_slices, &j);
}

void *qf_exec_alloc_aligned(size_t size, void **raw)
{
    if (size > SIZE_MAX - QF_EXEC_ALIGN) {
        qf_error(QF_ERR_NOMEM, "out of memory (%zu bytes)", size);
        return NULL;
    }
    *raw = qf_malloc(size + QF_EXEC_ALIGN);
    if (!*raw) return NULL;
    /* Marked before the zeroing, which is the first touch of its pages. */
    if (size >= QF_EXEC_HUGE_MIN) qf_mem_hugepages(*raw, size + QF_EXEC_ALIGN);
    qf_exec_zero(*raw, size + QF_EXEC_ALIGN);
    uintptr_t p = (uintptr_t)*raw;
    p = (p + QF_EXEC_ALIGN - 1) / QF_EXEC_ALIGN * QF_EXEC_ALIGN;
    return (void *)p;
}

/* Best fit: the smallest gap between live blocks (sorted by offset) that
 * holds `size`, else the end of the highest block. Keeps `live` sorted. */
size_t qf_exec_place(qf_block *live, int *nlive, size_t size, int last)
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

/* The fused operand step s's backend kernel accumulates into Y (its
 * dst_post column: oneDNN's sum post-op), as an index of io.post_in, or -1. */
static int qf_step_dst_post(const qf_step *s)
{
    const int j = s->backend && s->backend->dst_post && s->io.nfused && s->io.nout == 1
                      ? s->backend->dst_post(s->io.state)
                      : -1;
    return j >= 0 && j < s->io.nfused && s->io.post_in[j] ? j : -1;
}

/* The bytes of tensor t stored in the plan's other layout (alt) or NCHW: a
 * blocked plan pads the channels of a 4-D float tensor to whole blocks. */
static size_t qf_plan_bytes(const qf_plan *p, const qf_tensor *t, bool alt)
{
    if (!alt || !p->blocked || t->ndim != 4) return qf_tensor_nbytes(t);
    const int64_t c = (t->dims[1] + QF_LAYOUT_BLOCK - 1) / QF_LAYOUT_BLOCK * QF_LAYOUT_BLOCK;
    return (size_t)t->dims[0] * (size_t)c * (size_t)t->dims[2] * (size_t)t->dims[3] * qf_dtype_size(t->dtype);
}

/* For the output t of a step whose kernel may run in place
 * (qf_op_kernels.inplace): the live block of an input with t's size and dtype
 * that this step reads for the last time (its memory becomes t's), else -1.
 * The reference kernels take any such input; a backend kernel only its first
 * one (oneDNN's binary primitive computes in place over src0, which is the
 * first operand of Y's shape) in Y's layout. */
static int qf_plan_inplace(const qf_plan *p, const qf_step *sp, const qf_tensor *t, const int *last,
                           const size_t *offsets, int nlive, const qf_block *live)
{
    const int i = (int)(sp - p->steps);
    /* A backend kernel that adds a fused residual by accumulating into Y
     * (qf_backend_kernels.dst_post: oneDNN's sum post-op) gets Y over that
     * operand when this step reads it for the last time and does not also
     * read it as an input (it would overwrite its own source); else the
     * kernel copies the operand into Y first. */
    const int jr = qf_step_dst_post(sp);
    if (jr >= 0) {
        const qf_tensor *r = sp->io.post_in[jr];
        bool read = false;
        for (int k = 0; k < sp->io.nin; k++) read |= sp->io.in[k] == r;
        const bool alt = sp->out_nhwc & 1u;
        if (read || r->dtype != t->dtype || qf_plan_bytes(p, r, alt) != qf_plan_bytes(p, t, alt) || r < p->vt ||
            r >= p->vt + 2 * p->nvalues || last[r - p->vt] != i ||
            !(p->g->values[(r - p->vt) % p->nvalues]->producer || r - p->vt >= p->nvalues))
            return -1;
        for (int b = 0; b < nlive; b++)
            if (live[b].last == i && live[b].off == offsets[r - p->vt]) return b;
        return -1;
    }
    if (sp->reorder || sp->io.nout != 1 || sp->io.nfused || !qf_op_kernels_get(sp->node->op)->inplace) return -1;
    for (int j = 0; j < sp->io.nin; j++) {
        const qf_tensor *x = sp->io.in[j];
        if (!x || x->dtype != t->dtype ||
            qf_plan_bytes(p, x, (sp->in_nhwc >> j) & 1u) != qf_plan_bytes(p, t, sp->out_nhwc & 1u))
            continue;
        int found = -1;
        if (x >= p->vt && x < p->vt + 2 * p->nvalues && last[x - p->vt] == i &&
            (p->g->values[(x - p->vt) % p->nvalues]->producer || x - p->vt >= p->nvalues)) /* not a graph input */
            for (int b = 0; b < nlive && found < 0; b++)
                if (live[b].last == i && live[b].off == offsets[x - p->vt]) found = b;
        if (sp->backend) return ((sp->io.in_nhwc >> j) & 1u) == (sp->io.out_nhwc & 1u) ? found : -1;
        if (found >= 0) return found;
    }
    return -1;
}

/* Gives every buffer a step writes an offset in the arena. A buffer (a
 * slot of vt) lives from the step that writes it to the last step that reads
 * it; graph outputs live to the end (their data is read after the run). */
static qf_status qf_plan_arena(qf_plan *p, size_t *offsets)
{
    const int n = p->nsteps, nslots = 2 * p->nvalues;
    int *last = qf_malloc(sizeof *last * (size_t)(nslots ? nslots : 1));
    qf_block *live = qf_malloc(sizeof *live * (size_t)(nslots ? nslots : 1));
    qf_status st = QF_OK;
    if (!last || !live) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    for (int k = 0; k < nslots; k++) last[k] = -1;
    for (int i = 0; i < n; i++) {
        const qf_kernel_io *io = &p->steps[i].io;
        for (int j = 0; j < io->nin; j++)
            if (io->in[j]) last[io->in[j] - p->vt] = i;
        for (int j = 0; j < io->nfused; j++)
            if (io->post_in[j]) last[io->post_in[j] - p->vt] = i;
        for (int o = 0; o < io->nout; o++)
            if (last[io->out[o] - p->vt] < i) last[io->out[o] - p->vt] = i;
    }
    for (int k = 0; k < p->g->noutputs; k++) last[p->outs[k] - p->vt] = n;
    int nlive = 0;
    size_t top = 0;
    for (int i = 0; i < n; i++) {
        const qf_step *sp = &p->steps[i];
        for (int o = 0; o < sp->io.nout; o++) {
            const qf_tensor *t = sp->io.out[o];
            const int slot = (int)(t - p->vt);
            size_t sz = qf_exec_align(qf_plan_bytes(p, t, o < 32 && ((sp->out_nhwc >> o) & 1u)));
            p->naive_bytes += sz;
            if (sz == 0) {
                offsets[slot] = 0;
                continue;
            }
            int reuse = qf_plan_inplace(p, sp, t, last, offsets, nlive, live);
            if (reuse >= 0) {
                /* The input's block lives on as the output's. */
                offsets[slot] = live[reuse].off;
                live[reuse].last = last[slot];
                continue;
            }
            offsets[slot] = qf_exec_place(live, &nlive, sz, last[slot]);
            if (offsets[slot] + sz > top) {
                top = offsets[slot] + sz;
                p->peak = sp->node;
            }
            /* Checked at every step, so offsets stay far from overflowing. */
            if (top > (uint64_t)QF_MAX_TENSOR_BYTES) {
                const qf_value *v = p->g->values[slot % p->nvalues];
                if (sp->node)
                    st = qf_error(QF_ERR_SHAPE,
                                  "node '%s' (%s): with output '%s' the live activations need %zu bytes at "
                                  "once, more than qfold handles (%lld bytes)",
                                  sp->node->name, qf_op_label(sp->node), v->name, top,
                                  (long long)QF_MAX_TENSOR_BYTES);
                else
                    st = qf_error(QF_ERR_SHAPE,
                                  "input '%s': the live activations need %zu bytes at once, more than qfold "
                                  "handles (%lld bytes)",
                                  v->name, top, (long long)QF_MAX_TENSOR_BYTES);
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
    return st;
}

qf_status qf_exec_check_input(const qf_value *v, const qf_tensor *t)
{
    char want[128], got[128];
    if (!t || (!t->data && qf_tensor_nbytes(t))) return qf_error(QF_ERR_INVALID, "input '%s': no data given", v->name);
    if (t->dtype != v->type.dtype)
        return qf_error(QF_ERR_INVALID, "input '%s' expects %s, got %s", v->name, qf_dtype_name(v->type.dtype),
                        qf_dtype_name(t->dtype));
    if (!qf_shape_equal(t->ndim, t->dims, v->type.ndim, v->type.dims))
        return qf_error(QF_ERR_SHAPE, "input '%s' expects shape %s, got %s", v->name,
                        qf_shape_str(v->type.ndim, v->type.dims, want, sizeof want),
                        qf_shape_str(t->ndim, t->dims, got, sizeof got));
    return QF_OK;
}

/* Every graph input must have a known shape, and inference must then give
 * every activation one. */
qf_status qf_exec_check_shapes(const qf_graph *g)
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

qf_status qf_exec_check_values(const qf_graph *g)
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

/* The tensor step i of the layout plan reads v through, in layout `lay`:
 * the value as written, or the copy a reorder makes in the other layout. */
static const qf_tensor *qf_plan_view(qf_plan *p, const qf_layout *L, const qf_value *v, int lay)
{
    if (!v) return NULL;
    const qf_value_plan *vp = &L->vp[v->id];
    if (vp->eligible && !vp->free && lay != vp->made) return &p->vt[p->nvalues + v->id];
    return &p->vt[v->id];
}

/* Node i's kernel arguments under layout plan L, in its slice of the pools. */
static qf_kernel_io qf_plan_node_io(qf_plan *p, const qf_layout *L, int i, int ki, int ko)
{
    const qf_node *n = L->nodes[i];
    const qf_node_plan *np = &L->np[i];
    for (int j = 0; j < n->ninputs; j++) p->in_pool[ki + j] = qf_plan_view(p, L, n->inputs[j], qf_layout_read(L, i, j));
    for (int o = 0; o < n->noutputs; o++) {
        const qf_value *v = o == 0 && np->nfused ? L->fused[np->first + np->nfused - 1]->outputs[0] : n->outputs[o];
        p->out_pool[ko + o] = &p->vt[v->id];
    }
    for (int f = 0; f < np->nfused; f++)
        p->post_pool[np->first + f] = qf_plan_view(p, L, L->post[np->first + f], (int)(np->out_nhwc & 1u));
    return (qf_kernel_io){.node = n, .opset = p->g->opset, .nin = n->ninputs, .nout = n->noutputs,
                          .in = &p->in_pool[ki], .out = &p->out_pool[ko], .in_nhwc = np->in_nhwc,
                          .out_nhwc = np->out_nhwc, .blocked = L->blocked, .nfused = np->nfused,
                          .fused = np->nfused ? &L->fused[np->first] : NULL,
                          .post_in = np->nfused ? &p->post_pool[np->first] : NULL};
}

static void qf_plan_unprepare(qf_prepared *pr, const qf_backend_kernels *b)
{
    if (pr->kind == QF_PREP_KIND_BACKEND && b && b->release) b->release(pr->state);
    if (pr->size) memset(pr->state, 0, pr->size);
    pr->kind = QF_PREP_KIND_NONE;
}

/* A reference kernel planned channels-last (an elementwise one, whose
 * operands may broadcast) gets its 4-D tensors as views with the dims
 * permuted to N, H, W, C: its indexing then follows the memory. */
static qf_status qf_plan_views(qf_plan *p)
{
    if (!p->nviews) return QF_OK;
    p->views = qf_calloc((size_t)p->nviews, sizeof *p->views);
    p->view_src = qf_calloc((size_t)p->nviews, sizeof *p->view_src);
    if (!p->views || !p->view_src) return QF_ERR_NOMEM;
    int k = 0;
    for (int i = 0; i < p->nsteps; i++) {
        qf_step *s = &p->steps[i];
        if (s->backend || s->reorder || !(s->out_nhwc & 1u)) continue;
        const qf_tensor **in = &p->in_pool[s->io.in - p->in_pool];
        qf_tensor **out = &p->out_pool[s->io.out - p->out_pool];
        for (int j = 0; j < s->io.nin + s->io.nout; j++) {
            const qf_tensor **slot = j < s->io.nin ? &in[j] : (const qf_tensor **)&out[j - s->io.nin];
            const qf_tensor *t = *slot;
            if (!t || t->ndim != 4) continue;
            qf_tensor *v = &p->views[k];
            p->view_src[k++] = t;
            *v = *t;
            v->owns = false;
            v->dims[1] = t->dims[2];
            v->dims[2] = t->dims[3];
            v->dims[3] = t->dims[1];
            *slot = v;
        }
    }
    p->nviews = k;
    return QF_OK;
}

/* Prepares every node under the layout plan; when the backend declines a
 * node (with its layouts and post-ops, then at all), the node's cap goes down
 * and the layouts are planned again: only nodes whose line changed are
 * prepared again. */
static qf_status qf_plan_prepare(qf_plan *p, qf_layout *L, const int *ki, const int *ko)
{
    for (;;) {
        qf_layout_plan(L, p->g);
        int declined = -1;
        for (int i = 0; i < L->nnodes && declined < 0; i++) {
            const qf_node *n = L->nodes[i];
            const qf_op_kernels *kk = qf_op_kernels_get(n->op);
            const qf_node_plan *np = &L->np[i];
            qf_prepared *pr = &p->prep[i];
            qf_prep_kind kind = np->fused_into >= 0     ? QF_PREP_KIND_NONE
                                : np->cap == QF_CAP_REF ? QF_PREP_KIND_REF
                                                        : QF_PREP_KIND_BACKEND;
            if (kind == pr->kind && (kind != QF_PREP_KIND_BACKEND ||
                                     (pr->in_nhwc == np->in_nhwc && pr->out_nhwc == np->out_nhwc &&
                                      pr->blocked == L->blocked && pr->nfused == np->nfused &&
                                      !memcmp(pr->fused, &L->fused[np->first],
                                              sizeof *pr->fused * (size_t)np->nfused))))
                continue;
            qf_plan_unprepare(pr, qf_backend_kernels_get(pr->node->op));
            if (kind == QF_PREP_KIND_NONE) continue;
            qf_kernel_io io = qf_plan_node_io(p, L, i, ki[i], ko[i]);
            qf_status st;
            if (kind == QF_PREP_KIND_BACKEND) {
                st = qf_backend_kernels_get(pr->node->op)->prepare(&io, pr->state);
                if (st == QF_ERR_UNSUPPORTED) {
                    memset(pr->state, 0, pr->size);
                    declined = i;
                    /* Declined in a blocked plan: the plan goes NHWC,
                     * where the node is offered again. */
                    if (L->blocked && (np->in_nhwc || np->out_nhwc)) {
                        L->no_blocked = true;
                        continue;
                    }
                    L->np[i].cap = (np->cap == QF_CAP_FULL && (np->in_nhwc || np->out_nhwc || np->nfused))
                                       ? QF_CAP_PLAIN
                                       : QF_CAP_REF;
                    continue;
                }
                if (st != QF_OK) {
                    qf_exec_name_node(n, st);
                    return st;
                }
                pr->in_nhwc = np->in_nhwc;
                pr->out_nhwc = np->out_nhwc;
                pr->blocked = L->blocked;
                pr->nfused = np->nfused;
                memcpy(pr->fused, &L->fused[np->first], sizeof *pr->fused * (size_t)np->nfused);
            } else {
                if (!kk->forward_f32)
                    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): op has no forward kernel", n->name,
                                    qf_op_label(n));
                QF_TRY(qf_exec_prepare(&io, kk->state_size ? pr->state : NULL));
            }
            pr->kind = kind;
        }
        if (declined < 0) return QF_OK;
    }
}

static qf_status qf_plan_build(qf_plan *p)
{
    qf_graph *g = p->g;
    QF_TRY(qf_exec_check_shapes(g));
    QF_TRY(qf_graph_toposort(g));
    QF_TRY(qf_graph_infer_shapes(g));
    QF_TRY(qf_exec_check_values(g));

    const int nn = g->nnodes, nv = g->nvalues;
    p->nnodes = nn;
    p->nvalues = nv;
    int total_in = 0, total_out = 0;
    uint32_t maxid = 0;
    for (qf_node *n = g->first; n; n = n->next) {
        total_in += n->ninputs;
        total_out += n->noutputs;
        maxid = n->id > maxid ? n->id : maxid;
    }
    const size_t nn1 = (size_t)(nn ? nn : 1), nv1 = (size_t)(nv ? nv : 1);
    /* The layout plan's arrays and the per-node pool offsets: one block,
     * freed at the end of the build. */
    qf_layout L = {.nnodes = nn, .plain = p->plain, .keep = p->keep};
    L.nodes = qf_calloc(nn1, sizeof *L.nodes);
    L.pos = qf_calloc((size_t)maxid + 1, sizeof *L.pos);
    L.np = qf_calloc(nn1, sizeof *L.np);
    L.vp = qf_calloc(nv1, sizeof *L.vp);
    L.post = qf_calloc(nn1, sizeof *L.post);
    L.parent = qf_calloc(nv1, sizeof *L.parent);
    L.want = qf_calloc(nv1, 1);
    int *ki = qf_calloc(nn1, sizeof *ki), *ko = qf_calloc(nn1, sizeof *ko);
    size_t *offsets = qf_calloc(2 * nv1, sizeof *offsets);
    p->fused = L.fused = qf_calloc(nn1, sizeof *L.fused);
    p->prep = qf_calloc(nn1, sizeof *p->prep);
    p->vt = qf_calloc(2 * nv1, sizeof *p->vt);
    p->outs = qf_calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof *p->outs);
    p->in_pool = qf_calloc((size_t)(total_in ? total_in : 1) + nv1, sizeof *p->in_pool);
    p->out_pool = qf_calloc((size_t)(total_out ? total_out : 1) + nv1, sizeof *p->out_pool);
    p->post_pool = qf_calloc(nn1, sizeof *p->post_pool);
    qf_status st = QF_OK;
    if (!L.nodes || !L.pos || !L.np || !L.vp || !L.post || !L.parent || !L.want || !ki || !ko || !offsets ||
        !L.fused || !p->prep || !p->vt || !p->outs || !p->in_pool || !p->out_pool || !p->post_pool) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    int k = 0, ti = 0, to = 0;
    for (qf_node *n = g->first; n; n = n->next, k++) {
        L.nodes[k] = n;
        L.pos[n->id] = k;
        ki[k] = ti;
        ko[k] = to;
        ti += n->ninputs;
        to += n->noutputs;
    }
    /* Views of every value (and of its other layout): constants point at
     * their payload, inputs get their data at run time, activations point
     * into the arena once it is laid out. The kernels' prepare sees them
     * with data NULL for activations. */
    for (int i = 0; i < nv; i++) {
        const qf_value *v = g->values[i];
        if (!v) continue;
        qf_tensor_view(&p->vt[i], v->type.dtype, v->type.ndim, v->type.dims, NULL);
        qf_tensor_view(&p->vt[nv + i], v->type.dtype, v->type.ndim, v->type.dims, NULL);
        if (!v->producer && v->kind != QF_VALUE_INPUT) p->vt[i].data = v->type.data;
    }

    /* Prepare every node once (attributes decoded, geometry checked): the
     * states live in one allocation for the plan's life. When the oneDNN
     * backend is active, a node it has a kernel for is offered to it first,
     * with the layouts and post-ops the layout plan gives it (its prepare
     * builds the primitive); a node it declines runs on the reference
     * kernels. */
    const bool dnnl = qf_backend_engine() == QF_BACKEND_DNNL;
    size_t state_bytes = 0;
    for (int i = 0; i < nn; i++) {
        const qf_op_kernels *kk = qf_op_kernels_get(L.nodes[i]->op);
        size_t size = kk->state_size;
        const qf_backend_kernels *bk = dnnl ? qf_backend_kernels_get(L.nodes[i]->op) : NULL;
        if (bk && bk->state_size > size) size = bk->state_size;
        p->prep[i].size = size;
        p->prep[i].node = L.nodes[i];
        state_bytes += qf_exec_align(size);
        L.np[i].cap = bk && bk->forward_f32 && (!bk->accepts || bk->accepts(L.nodes[i])) ? QF_CAP_FULL : QF_CAP_REF;
    }
    char *state_mem = NULL;
    if (state_bytes && !(state_mem = qf_exec_alloc_aligned(state_bytes, &p->state_raw))) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    /* Advance only past a state that exists: with no state at all state_mem
     * is NULL, and NULL + 0 is undefined behaviour (clang's UBSan stops). */
    for (int i = 0; i < nn; i++) {
        p->prep[i].state = NULL;
        if (!p->prep[i].size) continue;
        p->prep[i].state = state_mem;
        state_mem += qf_exec_align(p->prep[i].size);
    }
    if ((st = qf_plan_prepare(p, &L, ki, ko)) != QF_OK) goto done;
    p->blocked = L.blocked;

    /* The steps: each node that is not fused into another, each followed by
     * the reorders of its outputs that some reader needs in the other
     * layout; graph inputs' reorders first. */
    int nreorders = 0, nsteps = 0;
    for (int i = 0; i < nv; i++) nreorders += L.vp[i].alt;
    for (int i = 0; i < nn; i++) nsteps += L.np[i].fused_into < 0;
    p->steps = qf_calloc((size_t)(nsteps + nreorders ? nsteps + nreorders : 1), sizeof *p->steps);
    if (!p->steps) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    int ri = total_in, ro = total_out; /* reorders' slices of the pools */
    for (int pass = 0; pass <= nn; pass++) {
        const qf_value *const *vals;
        int nvals;
        if (pass == 0) {
            vals = (const qf_value *const *)g->inputs;
            nvals = g->ninputs;
        } else {
            int i = pass - 1;
            if (L.np[i].fused_into >= 0) continue;
            const qf_node *n = L.nodes[i];
            qf_step *s = &p->steps[p->nsteps++];
            s->node = n;
            s->io = qf_plan_node_io(p, &L, i, ki[i], ko[i]);
            s->io.state = p->prep[i].state;
            const qf_op_kernels *kk = qf_op_kernels_get(n->op);
            s->backend = p->prep[i].kind == QF_PREP_KIND_BACKEND ? qf_backend_kernels_get(n->op) : NULL;
            s->forward = s->backend ? s->backend->forward_f32 : kk->forward_f32;
            s->in_nhwc = s->io.in_nhwc;
            s->out_nhwc = s->io.out_nhwc;
            if (!s->backend) {
                s->io.in_nhwc = s->io.out_nhwc = 0;
                if (s->out_nhwc & 1u) p->nviews += n->ninputs + n->noutputs;
            }
            vals = (const qf_value *const *)n->outputs;
            nvals = n->noutputs;
            if (L.np[i].nfused) {
                vals = (const qf_value *const *)&L.fused[L.np[i].first + L.np[i].nfused - 1]->outputs[0];
                nvals = 1;
            }
        }
        for (int o = 0; o < nvals; o++) {
            const qf_value *v = vals[o];
            if (!L.vp[v->id].alt) continue;
            qf_step *s = &p->steps[p->nsteps++];
            s->node = v->producer;
            s->reorder = v;
            s->forward = qf_exec_reorder;
            p->in_pool[ri] = &p->vt[v->id];
            p->out_pool[ro] = &p->vt[nv + v->id];
            s->io = (qf_kernel_io){.node = v->producer, .opset = g->opset, .nin = 1, .nout = 1,
                                   .in = &p->in_pool[ri++], .out = &p->out_pool[ro++],
                                   .in_nhwc = L.vp[v->id].made, .out_nhwc = !L.vp[v->id].made,
                                   .blocked = L.blocked};
            s->in_nhwc = s->io.in_nhwc;
            s->out_nhwc = s->io.out_nhwc;
        }
    }
    for (int k2 = 0; k2 < g->noutputs; k2++) p->outs[k2] = qf_plan_view(p, &L, g->outputs[k2], 0);

    /* Every size first, then the allocations: a plan refused for its size
     * (scratch or arena) has allocated nothing big. */
    size_t scratch = 0;
    for (int i = 0; i < p->nsteps && st == QF_OK; i++) {
        size_t sz = 0;
        const qf_step *sp = &p->steps[i];
        if (sp->reorder) continue;
        if (sp->backend)
            sz = sp->backend->scratch ? sp->backend->scratch(sp->node, sp->io.state) : 0;
        else
            st = qf_exec_scratch(sp->node, sp->io.state, &sz);
        if (st == QF_OK && sz > scratch) scratch = sz;
    }
    if (st == QF_OK) st = qf_plan_arena(p, offsets);
    char *arena = NULL;
    if (st == QF_OK) {
        arena = qf_exec_alloc_aligned(p->arena_bytes, &p->arena_raw);
        if (!arena)
            st = qf_error(QF_ERR_NOMEM,
                          "out of memory: the plan's activations need %zu bytes at once (at node '%s')",
                          p->arena_bytes, p->peak ? p->peak->name : "?");
    }
    if (st != QF_OK) goto done;
    for (int i = 0; i < p->nsteps; i++)
        for (int o = 0; o < p->steps[i].io.nout; o++) {
            qf_tensor *t = p->steps[i].io.out[o];
            t->data = arena + offsets[t - p->vt];
        }

    if ((st = qf_plan_views(p)) != QF_OK) goto done;

    p->scratch_bytes = scratch;
    void *scratch_mem = NULL;
    if (scratch) {
        scratch_mem = qf_exec_alloc_aligned(scratch, &p->scratch_raw);
        if (!scratch_mem) {
            st = qf_error(QF_ERR_NOMEM, "out of memory: the kernels' scratch needs %zu bytes", scratch);
            goto done;
        }
    }
    for (int i = 0; i < p->nsteps; i++) {
        p->steps[i].io.scratch = scratch_mem;
        p->steps[i].io.scratch_size = scratch;
    }
done:
    qf_free(L.nodes);
    qf_free(L.pos);
    qf_free(L.np);
    qf_free(L.vp);
    qf_free(L.post);
    qf_free(L.parent);
    qf_free(L.want);
    qf_free(ki);
    qf_free(ko);
    qf_free(offsets);
    return st;
}

/* Frees everything the build made, keeping the graph, the hook and the
 * plain choice. */
static void qf_plan_clear(qf_plan *p)
{
    for (int i = 0; p->prep && i < p->nnodes; i++)
        if (p->prep[i].kind == QF_PREP_KIND_BACKEND)
            qf_plan_unprepare(&p->prep[i], qf_backend_kernels_get(p->prep[i].node->op));
    qf_free(p->steps);
    qf_free(p->prep);
    qf_free(p->fused);
    qf_free(p->vt);
    qf_free(p->outs);
    qf_free(p->in_pool);
    qf_free(p->out_pool);
    qf_free(p->post_pool);
    qf_free(p->views);
    qf_free(p->view_src);
    qf_free(p->arena_raw);
    qf_free(p->scratch_raw);
    qf_free(p->state_raw);
    *p = (qf_plan){.g = p->g, .plain = p->plain, .stale = p->stale, .hook = p->hook, .hook_ud = p->hook_ud,
                   .obs = p->obs, .keep = p->keep};
}

static qf_status qf_plan_make(qf_plan **out, qf_graph *g, bool plain, const qf_plan_observer *obs)
{
    *out = NULL;
    /* Kernels read weights in memory: payloads left in the model file
     * (graph.h) are read first. */
    QF_TRY(qf_graph_load_all(g));
    QF_TRY(qf_graph_check_runnable(g));
    qf_stack_reserve();
    qf_plan *p = qf_calloc(1, sizeof *p);
    if (!p) return QF_ERR_NOMEM;
    p->g = g;
    p->plain = plain;
    if (obs) {
        /* The values observed, asked once: the layout plan keeps them out
         * of fused chains, the run hands them to obs->observe. */
        p->obs = *obs;
        p->keep = qf_calloc((size_t)(g->nvalues ? g->nvalues : 1), 1);
        if (!p->keep) {
            qf_free(p);
            return QF_ERR_NOMEM;
        }
        for (int i = 0; i < g->nvalues; i++)
            p->keep[i] = g->values[i] && g->values[i]->producer && obs->wants(obs->ud, g->values[i]);
    }
    qf_status st = qf_plan_build(p);
    if (st != QF_OK) {
        qf_plan_free(p);
        return st;
    }
    *out = p;
    return QF_OK;
}

qf_status qf_plan_init(qf_plan **out, qf_graph *g) { return qf_plan_make(out, g, false, NULL); }

qf_status qf_plan_init_plain(qf_plan **out, qf_graph *g) { return qf_plan_make(out, g, true, NULL); }

qf_status qf_plan_init_observed(qf_plan **out, qf_graph *g, const qf_plan_observer *obs)
{
    return qf_plan_make(out, g, false, obs);
}

void qf_plan_free(qf_plan *p)
{
    if (!p) return;
    qf_plan_clear(p);
    qf_free(p->keep);
    qf_free(p);
}

/* The kept values step s wrote, to the observer: each as written (its
 * primary slot, in the layout the plan made it). */
static qf_status qf_plan_observe(qf_plan *p, const qf_step *s)
{
    const qf_node *n = s->node;
    for (int o = 0; o < n->noutputs; o++) {
        const qf_value *v = o == 0 && s->io.nfused ? s->io.fused[s->io.nfused - 1]->outputs[0] : n->outputs[o];
        if (!p->keep[v->id]) continue;
        bool nhwc = o < 32 && ((s->out_nhwc >> o) & 1u);
        qf_status st = p->obs.observe(p->obs.ud, v, &p->vt[v->id], nhwc);
        if (st != QF_OK) return st;
    }
    return QF_OK;
}

qf_status qf_plan_run(qf_plan *p, const qf_tensor *const *inputs, int ninputs)
{
    const qf_graph *g = p->g;
    QF_TRY(qf_interrupt_check());
    if (p->stale) {
        /* The hook must see every node's output as the reference executor
         * writes it: the plan is built again without NHWC and fusion. */
        qf_plan_clear(p);
        p->plain = true;
        QF_TRY(qf_plan_build(p));
        p->stale = false;
    }
    if (ninputs != g->ninputs)
        return qf_error(QF_ERR_INVALID, "graph has %d input%s, got %d", g->ninputs,
                        g->ninputs == 1 ? "" : "s", ninputs);
    for (int i = 0; i < ninputs; i++) {
        const qf_value *v = g->inputs[i];
        /* NULL: an input with a default (an ONNX initializer listed as a
         * graph input) takes it. */
        const qf_tensor *t = inputs[i] ? inputs[i] : qf_value_has_default(v) ? &v->type : NULL;
        if (!t)
            return qf_error(QF_ERR_INVALID, "input '%s' is not given and has no default", v->name);
        QF_TRY(qf_exec_check_input(v, t));
        /* A view on the caller's data: the kernels only read it. */
        p->vt[v->id].data = t->data;
    }
    for (int k = 0; k < p->nviews; k++) p->views[k].data = p->view_src[k]->data;
    for (int i = 0; i < p->nsteps; i++) {
        const qf_step *s = &p->steps[i];
        QF_TRY(qf_exec_step(s));
        if (p->hook && !s->reorder)
            QF_TRY(p->hook(p->hook_ud, s->node, (const qf_tensor *const *)s->io.out, s->io.nout));
        if (p->keep && !s->reorder) QF_TRY(qf_plan_observe(p, s));
    }
    return QF_OK;
}

void qf_plan_set_hook(qf_plan *p, qf_plan_hook hook, void *ud)
{
    p->hook = hook;
    p->hook_ud = ud;
    if (!hook || p->plain) return;
    /* The hook sees node outputs: with NHWC or fused steps the next run
     * builds the plan again without them. */
    for (int i = 0; i < p->nsteps && !p->stale; i++) {
        const qf_step *s = &p->steps[i];
        p->stale = s->reorder || s->in_nhwc || s->out_nhwc || s->io.nfused;
    }
}

int qf_plan_num_outputs(const qf_plan *p) { return p->g->noutputs; }

const qf_tensor *qf_plan_output(const qf_plan *p, int i)
{
    if (i < 0 || i >= p->g->noutputs || !p->outs) return NULL;
    return p->outs[i];
}

size_t qf_plan_arena_bytes(const qf_plan *p) { return p->arena_bytes; }

size_t qf_plan_naive_bytes(const qf_plan *p) { return p->naive_bytes; }

int qf_plan_step_count(const qf_plan *p) { return p->nsteps; }

void qf_plan_step_get(const qf_plan *p, int i, qf_plan_step_info *info)
{
    const qf_step *s = &p->steps[i];
    *info = (qf_plan_step_info){.node = s->node, .reorder = s->reorder, .backend = s->backend != NULL,
                                .in_nhwc = s->in_nhwc, .out_nhwc = s->out_nhwc, .blocked = p->blocked,
                                .nfused = s->io.nfused,
                                .fused = s->io.fused};
    const int j = qf_step_dst_post(s);
    info->over_post = j >= 0 && s->io.post_in[j]->data == s->io.out[0]->data;
}

/* Per slot: "nhwc" / "nchw" for a 4-D activation, "-" for anything else
 * (weights, constants, other ranks). */
static void qf_plan_print_slots(FILE *f, const qf_value *const *vs, int n, uint32_t bits, const char *alt)
{
    for (int j = 0; j < n; j++) {
        const qf_value *v = vs[j];
        bool act = v && v->type.ndim == 4 && (v->producer || v->kind == QF_VALUE_INPUT);
        fprintf(f, "%s%s", j ? "," : "", !act ? "-" : j < 32 && ((bits >> j) & 1u) ? alt : "nchw");
    }
}

void qf_plan_print(const qf_plan *p, FILE *f)
{
    int nback = 0, nref = 0, nreo = 0, nfused = 0;
    for (int i = 0; i < p->nsteps; i++) {
        const qf_step *s = &p->steps[i];
        if (s->reorder) nreo++;
        else if (s->backend) nback++;
        else nref++;
        nfused += s->io.nfused;
    }
    /* blk16: oneDNN's blocked nChw16c (the plan's channels-last layout when
     * p->blocked). */
    const char *alt = p->blocked ? "blk16" : "nhwc";
    fprintf(f, "plan: %d steps: %d on dnnl, %d on ref, %d reorders; %d nodes fused; arena %.1f MiB; layout %s\n",
            p->nsteps, nback, nref, nreo, nfused, (double)p->arena_bytes / (1024.0 * 1024.0), alt);
    for (int i = 0; i < p->nsteps; i++) {
        const qf_step *s = &p->steps[i];
        if (s->reorder) {
            fprintf(f, "  %3d  reorder  '%s' %s -> %s\n", i, s->reorder->name, s->in_nhwc ? alt : "nchw",
                    s->out_nhwc ? alt : "nchw");
            continue;
        }
        fprintf(f, "  %3d  %-7s  %s '%s' in ", i, s->backend ? "dnnl" : "ref", qf_op_label(s->node), s->node->name);
        const qf_node *n = s->node;
        qf_plan_print_slots(f, (const qf_value *const *)n->inputs, n->ninputs, s->in_nhwc, alt);
        fprintf(f, " out ");
        const qf_value *outs[1] = {s->io.nfused ? s->io.fused[s->io.nfused - 1]->outputs[0] : NULL};
        qf_plan_print_slots(f, s->io.nfused ? outs : (const qf_value *const *)n->outputs, s->io.nfused ? 1 : n->noutputs,
                            s->out_nhwc, alt);
        for (int k = 0; k < s->io.nfused; k++)
            fprintf(f, " + %s '%s'", qf_op_label(s->io.fused[k]), s->io.fused[k]->name);
        fputc('\n', f);
    }
}
