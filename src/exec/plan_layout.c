/* Layout planning and post-op fusion for a plan (see exec_impl.h).
 *
 * Backend kernels that take channels-last run several times faster on it,
 * and converting around each call would cost more than the kernel on
 * depthwise / pointwise convs, so the layout is decided for the whole plan:
 *
 *   x(NCHW) ─reorder─▶ x' ─Conv+Relu─▶ a ─Conv─▶ b ─Add(b, x')+Relu─▶ y ─reorder─▶ y(NCHW)
 *                      └──────────────────── NHWC ───────────────────┘
 *
 * 1. Fusion: a backend Conv / ConvTranspose / Gemm / MatMul absorbs the
 *    activations (and a residual Add) that follow it when the value between
 *    has no other reader, is no graph output, is not observed (keep: a
 *    calibration plan's), and qf_backend_can_fuse agrees,
 *    and a SiLU (Sigmoid + Mul, whose Mul reads the value between too);
 *    the absorbed nodes do not run, the producer writes the last one's output.
 * 2. Groups: values joined through a layout-agnostic reference kernel (the
 *    elementwise ones: relu, same-shape add, ...) must share a layout; a
 *    union-find over value ids makes the groups. A group is NHWC when a
 *    backend kernel that takes NHWC reads or writes one of its values.
 * 3. Reorders: a value is written in its group's layout unless its writer
 *    only writes NCHW (a reference kernel that is not agnostic) or it is a
 *    graph input; a reorder step makes the other layout once, after the
 *    writer, when some reader needs it (an NCHW-only kernel, a graph output,
 *    a backend kernel reading an NCHW-made value of an NHWC group).
 * 4. The channels-last layout: NHWC, or oneDNN's blocked nChw16c for the
 *    whole plan (qf_layout.blocked) where that needs no more reorders and
 *    pays (lay_blocked_pays; QFOLD_LAYOUT overrides). A blocked plan has no
 *    layout-agnostic reference kernels (a blocked tensor has no permuted
 *    view) and its first conv reads the NCHW image (lay_plain_first_conv).
 */
#include <stdlib.h>
#include <string.h>

#include "../core/parallel.h"
#include "backend/backend.h"
#include "exec_impl.h"

/* The rule's thresholds (lay_blocked_pays): a 1x1 conv over at least this
 * many pixels per image, reading or writing at most this many channels. */
enum { QF_BLOCKED_MIN_PLANE = 28 * 28, QF_BLOCKED_MAX_CH = 48 };
/* ... or the convs that may run as Winograd ones (qf_backend_conv_winograd:
 * oneDNN has them only on blocked activations) hold at least 1 / this of the
 * plan's conv multiply-adds. */
enum { QF_BLOCKED_WINO_SHARE = 4 };

/* Whether the backend computes follower f as a post-op of producer p. */
static bool lay_can_fuse(const qf_node *p, const qf_node *f) { return qf_backend_can_fuse(p, f); }

/* The dtypes a planned layout covers: float activations, and the integer
 * executor's int8 / uint8 ones (between its oneDNN int8 convs). */
static bool lay_dtype(qf_dtype dt)
{
    return dt == QF_DTYPE_F32 || dt == QF_DTYPE_I8 || dt == QF_DTYPE_U8;
}

static bool lay_eligible(const qf_value *v)
{
    return v && lay_dtype(v->type.dtype) && v->type.ndim == 4 && !v->type.data &&
           (v->producer || v->kind == QF_VALUE_INPUT);
}

static int lay_find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static void lay_union(int *parent, int a, int b)
{
    a = lay_find(parent, a);
    b = lay_find(parent, b);
    if (a != b) parent[a] = b;
}

/* The kernel of plan node i takes the plan's channels-last layout (a
 * backend kernel that says so: NHWC, or blocked in a blocked plan). */
static bool lay_backend_nhwc(const qf_layout *L, int i)
{
    const qf_backend_kernels *k = qf_backend_kernels_get(L->nodes[i]->op);
    return !L->plain && L->np[i].cap == QF_CAP_FULL && k &&
           (k->layouts & (L->blocked ? QF_LAYOUT_BLOCKED : QF_LAYOUT_NHWC));
}

/* Same bytes in NCHW and the plan's other layout: for NHWC, 1x1 spatial or
 * one channel; for blocked (channels padded to QF_LAYOUT_BLOCK), 1x1
 * spatial with a whole number of blocks of channels. */
static bool lay_free_shape(const qf_layout *L, const qf_tensor *t)
{
    if (t->ndim != 4) return false;
    if (L->blocked) return t->dims[2] * t->dims[3] <= 1 && t->dims[1] % QF_LAYOUT_BLOCK == 0;
    return t->dims[1] <= 1 || t->dims[2] * t->dims[3] <= 1;
}

/* A reference kernel that is layout-agnostic here: an elementwise kernel
 * (qf_op_kernels.layouts) with a 4-D float / int8 output whose inputs are 4-D
 * activations (of the output's shape, or broadcast to it; a QuantizeLinear's
 * may have another dtype than its output), tensors whose bytes are the same
 * in both layouts, or single elements (per-tensor qparams; a per-axis scale
 * is 1-D and keeps the node NCHW). Run channels-last,
 * it gets views with the dims permuted to N, H, W, C, so that its
 * broadcasting follows the memory (plan.c). */
static bool lay_agnostic(const qf_layout *L, int i)
{
    const qf_node *n = L->nodes[i];
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    /* A blocked tensor has no permuted view: in a blocked plan the
     * reference kernels read and write NCHW. */
    if (L->plain || L->blocked || L->np[i].cap != QF_CAP_REF || !(k->layouts & QF_LAYOUT_NHWC) ||
        n->noutputs < 1)
        return false;
    const qf_tensor *o = &n->outputs[0]->type;
    if (o->ndim != 4 || !lay_dtype(o->dtype)) return false;
    for (int j = 0; j < n->ninputs; j++) {
        const qf_value *v = n->inputs[j];
        if (!v || qf_tensor_numel(&v->type) == 1) continue;
        if (!lay_dtype(v->type.dtype) || v->type.ndim != 4) return false;
        if (!lay_eligible(v) && !lay_free_shape(L, &v->type))
            return false; /* a constant stored NCHW */
    }
    return true;
}

/* Input slot j of node n carries activations in the node's layout (data
 * slots), not weights. */
static bool lay_data_slot(const qf_node *n, int j)
{
    return qf_op_input_role(n->op, j) == QF_ROLE_DATA;
}

/* In a blocked plan, a k x k Conv (one group) over fewer channels than a
 * block, a network's first conv over the image's 3 channels, reads its
 * input NCHW: oneDNN 2.6 has a jit kernel for NCHW in, blocked out there
 * and only its reference kernel for such an input blocked (626 ms instead
 * of ~1 ms for EfficientNet-B0's stem at batch 1); the image then needs no
 * reorder. */
static bool lay_plain_first_conv(const qf_layout *L, const qf_node *n, int slot)
{
    if (!L->blocked || n->op != QF_OP_CONV || slot != 0 || n->ninputs < 2 || !n->inputs[0] || !n->inputs[1])
        return false;
    const qf_tensor *x = &n->inputs[0]->type, *w = &n->inputs[1]->type;
    return x->ndim == 4 && w->ndim == 4 && x->dims[1] < QF_LAYOUT_BLOCK && w->dims[1] == x->dims[1] &&
           w->dims[2] * w->dims[3] > 1;
}

/* The plan index of the step that writes v (-1: a graph input or constant). */
static int lay_writer(const qf_layout *L, const qf_value *v)
{
    if (!v->producer) return -1;
    int i = L->pos[v->producer->id];
    return L->np[i].fused_into >= 0 ? L->np[i].fused_into : i;
}

/* A SiLU after the chain's value cur, as PyTorch exports it: s = Sigmoid(cur),
 * y = Mul(cur, s) (either operand order), cur read by those two nodes only, s
 * by the Mul only, neither already fused:
 *
 *   Conv ─cur─┬─ Sigmoid ─s─┐
 *             └─────────── Mul ─y─▶        =   Conv + swish ─y─▶
 *
 * The backend takes the pair as one swish post-op (qf_backend_can_fuse). */
static bool lay_silu(const qf_layout *L, const qf_value *cur, const qf_node **sg, const qf_node **mul)
{
    if (cur->is_output || cur->nuses != 2) return false;
    for (int u = 0; u < 2; u++) {
        const qf_node *s = cur->uses[u].node, *m = cur->uses[1 - u].node;
        if (s->op != QF_OP_SIGMOID || m->op != QF_OP_MUL || s->noutputs != 1 || m->noutputs != 1 ||
            m->ninputs != 2)
            continue;
        const qf_value *sv = s->outputs[0];
        if (sv->is_output || sv->nuses != 1 || sv->uses[0].node != m) continue;
        if (L->keep && (L->keep[cur->id] || L->keep[sv->id])) continue;
        if (!((m->inputs[0] == cur && m->inputs[1] == sv) || (m->inputs[1] == cur && m->inputs[0] == sv)))
            continue;
        if (L->np[L->pos[s->id]].fused_into >= 0 || L->np[L->pos[m->id]].fused_into >= 0) continue;
        *sg = s;
        *mul = m;
        return true;
    }
    return false;
}

static void lay_fuse(qf_layout *L)
{
    for (int i = 0; i < L->nnodes; i++) {
        qf_node_plan *np = &L->np[i];
        const qf_node *p = L->nodes[i];
        np->first = L->nfused_total;
        if (L->plain || np->cap != QF_CAP_FULL || np->fused_into >= 0 || p->noutputs != 1) continue;
        const qf_value *cur = p->outputs[0];
        while (np->nfused < QF_FUSE_MAX) {
            const qf_node *sg, *mul;
            if (np->nfused + 2 <= QF_FUSE_MAX && lay_silu(L, cur, &sg, &mul)) {
                if (!lay_can_fuse(p, sg) || !lay_can_fuse(p, mul)) break;
                for (int k = 0; k < 2; k++) {
                    const qf_node *f = k ? mul : sg;
                    L->fused[L->nfused_total] = f;
                    L->post[L->nfused_total] = NULL;
                    L->nfused_total++;
                    np->nfused++;
                    L->np[L->pos[f->id]].fused_into = i;
                }
                cur = mul->outputs[0];
                continue;
            }
            if (cur->is_output || cur->nuses != 1) break;
            /* An observed value must be written: it ends the chain. */
            if (L->keep && L->keep[cur->id]) break;
            const qf_node *f = cur->uses[0].node;
            int fi = L->pos[f->id];
            if (L->np[fi].fused_into >= 0 || f->noutputs != 1) break;
            const qf_value *fo = f->outputs[0];
            if (fo->type.dtype != cur->type.dtype ||
                !qf_shape_equal(fo->type.ndim, fo->type.dims, cur->type.ndim, cur->type.dims))
                break;
            /* A binary post-op reads its other operand (post_in): it must be
             * written before the producer runs, with the same shape. A
             * one-element constant (a Clip bound) is read from the node. */
            const qf_value *other = NULL;
            int nact = 0, nother = 0;
            for (int j = 0; j < f->ninputs; j++) {
                const qf_value *v = f->inputs[j];
                if (v == cur)
                    nact++;
                else if (v && !(v->type.data && qf_tensor_numel(&v->type) == 1)) {
                    other = v;
                    nother++;
                }
            }
            if (nact != 1 || nother > 1) break;
            if (other) {
                /* The kernel reads it in its output's layout: a constant
                 * (stored NCHW) only where both layouts are the same bytes. */
                bool constant = !other->producer && other->kind != QF_VALUE_INPUT;
                if (constant && other->type.ndim == 4 && !lay_free_shape(L, &other->type)) break;
                if (other->type.dtype != cur->type.dtype ||
                    !qf_shape_equal(other->type.ndim, other->type.dims, cur->type.ndim,
                                    cur->type.dims))
                    break;
                if (lay_writer(L, other) >= i) break;
            }
            if (!lay_can_fuse(p, f)) break;
            L->fused[L->nfused_total] = f;
            L->post[L->nfused_total] = other;
            L->nfused_total++;
            np->nfused++;
            L->np[fi].fused_into = i;
            cur = fo;
        }
    }
}

int qf_layout_read(const qf_layout *L, int i, int slot)
{
    const qf_node *n = L->nodes[i];
    const qf_value *v = n->inputs[slot];
    if (slot >= 32 || !v || !L->vp[v->id].eligible) return 0;
    const qf_value_plan *vp = &L->vp[v->id];
    if (lay_backend_nhwc(L, i))
        return lay_data_slot(n, slot) && !lay_plain_first_conv(L, n, slot) ? (vp->free ? 1 : vp->group) : 0;
    if (vp->free) return 0;
    if (lay_agnostic(L, i)) return vp->group;
    return 0;
}

int qf_layout_write(const qf_layout *L, int i, const qf_value *v)
{
    const qf_value_plan *vp = &L->vp[v->id];
    if (!vp->eligible) return 0;
    if (lay_backend_nhwc(L, i)) return vp->free ? 1 : vp->group;
    if (vp->free) return 0;
    if (lay_agnostic(L, i)) return vp->group;
    return 0;
}

/* The value step i writes as its output o: with post-ops, output 0 is the
 * last fused node's. */
static const qf_value *lay_out(const qf_layout *L, int i, int o)
{
    const qf_node_plan *np = &L->np[i];
    if (o == 0 && np->nfused) return L->fused[np->first + np->nfused - 1]->outputs[0];
    return L->nodes[i]->outputs[o];
}

/* Values written by no step: the ones inside a fused chain. */
static bool lay_live(const qf_layout *L, const qf_value *v)
{
    if (!v->producer) return true;
    const qf_node_plan *np = &L->np[L->pos[v->producer->id]];
    if (np->nfused > 0) return false;
    if (np->fused_into < 0) return true;
    return lay_out(L, np->fused_into, 0) == v;
}

/* Groups: values an agnostic kernel joins, and a residual with the output
 * of the kernel that adds it; a group is NHWC when a backend kernel that
 * takes NHWC touches one of its values. */
static void lay_groups(qf_layout *L, const qf_graph *g)
{
    const int nv = g->nvalues;
    int *parent = L->parent;
    unsigned char *want = L->want;
    for (int id = 0; id < nv; id++) {
        parent[id] = id;
        want[id] = 0;
    }
    for (int i = 0; i < L->nnodes; i++) {
        const qf_node_plan *np = &L->np[i];
        if (np->fused_into >= 0) continue;
        const qf_node *n = L->nodes[i];
        const qf_value *out0 = lay_out(L, i, 0);
        const qf_value_plan *vo = &L->vp[out0->id];
        if (lay_backend_nhwc(L, i)) {
            for (int j = 0; j < n->ninputs; j++)
                if (n->inputs[j] && lay_data_slot(n, j) && !lay_plain_first_conv(L, n, j))
                    want[n->inputs[j]->id] = 1;
            for (int o = 0; o < n->noutputs; o++) want[lay_out(L, i, o)->id] = 1;
            for (int f = 0; f < np->nfused; f++) {
                const qf_value *b = L->post[np->first + f];
                if (b && L->vp[b->id].eligible && !L->vp[b->id].free && vo->eligible && !vo->free)
                    lay_union(parent, b->id, out0->id);
            }
        } else if (lay_agnostic(L, i) && vo->eligible && !vo->free) {
            for (int j = 0; j < n->ninputs; j++) {
                const qf_value *v = n->inputs[j];
                if (v && L->vp[v->id].eligible && !L->vp[v->id].free)
                    lay_union(parent, v->id, out0->id);
            }
            for (int o = 1; o < n->noutputs; o++) {
                const qf_value *v = n->outputs[o];
                if (L->vp[v->id].eligible && !L->vp[v->id].free) lay_union(parent, v->id, out0->id);
            }
        }
    }
    for (int id = 0; id < nv; id++)
        if (want[id] && L->vp[id].eligible && !L->vp[id].free) want[lay_find(parent, id)] = 1;
    for (int id = 0; id < nv; id++)
        if (L->vp[id].eligible && !L->vp[id].free)
            L->vp[id].group = want[lay_find(parent, id)] ? 1 : 0;
}

static void lay_plan_once(qf_layout *L, const qf_graph *g)
{
    const int nv = g->nvalues;
    for (int i = 0; i < L->nnodes; i++) {
        L->np[i].fused_into = -1;
        L->np[i].nfused = 0;
        L->np[i].first = 0;
        L->np[i].in_nhwc = L->np[i].out_nhwc = 0;
    }
    L->nfused_total = 0;
    lay_fuse(L);

    memset(L->vp, 0, sizeof *L->vp * (size_t)(nv ? nv : 1));
    for (int id = 0; id < nv; id++) {
        const qf_value *v = g->values[id];
        if (!v) continue;
        qf_value_plan *vp = &L->vp[id];
        vp->live = lay_live(L, v);
        if (!lay_eligible(v) || !vp->live) continue;
        vp->eligible = 1;
        vp->free = lay_free_shape(L, &v->type);
    }
    lay_groups(L, g);

    /* What each step reads and writes, and so which values need the other
     * layout made once by a reorder. */
    for (int i = 0; i < L->nnodes; i++) {
        qf_node_plan *np = &L->np[i];
        if (np->fused_into >= 0) continue;
        const qf_node *n = L->nodes[i];
        for (int j = 0; j < n->ninputs; j++) {
            const qf_value *v = n->inputs[j];
            if (!v) continue;
            int r = qf_layout_read(L, i, j);
            if (r) np->in_nhwc |= 1u << j;
            L->vp[v->id].reads |= (unsigned char)(1u << r);
        }
        for (int o = 0; o < n->noutputs && o < 32; o++) {
            const qf_value *v = lay_out(L, i, o);
            int w = qf_layout_write(L, i, v);
            if (w) np->out_nhwc |= 1u << o;
            L->vp[v->id].made = (unsigned char)w;
        }
        const int w0 = (int)(np->out_nhwc & 1u);
        for (int f = 0; f < np->nfused; f++) {
            const qf_value *b = L->post[np->first + f];
            if (b) L->vp[b->id].reads |= (unsigned char)(1u << w0);
        }
    }
    for (int k = 0; k < g->noutputs; k++) L->vp[g->outputs[k]->id].reads |= 1u;
    for (int id = 0; id < nv; id++) {
        qf_value_plan *vp = &L->vp[id];
        if (!vp->eligible || vp->free) continue;
        vp->alt = (vp->reads >> (vp->made ? 0 : 1)) & 1u;
    }
}

/* The plan's reorder steps, and whether every value kept in the other
 * layout is a float one (a blocked plan's must be). */
static int lay_reorders(const qf_layout *L, const qf_graph *g, bool *all_f32)
{
    int n = 0;
    *all_f32 = true;
    for (int id = 0; id < g->nvalues; id++) {
        const qf_value_plan *vp = &L->vp[id];
        if (!vp->eligible || vp->free) continue;
        n += vp->alt;
        if ((vp->made || vp->group) && g->values[id]->type.dtype != QF_DTYPE_F32) *all_f32 = false;
    }
    return n;
}

/* QFOLD_LAYOUT: "nhwc" never plans blocked, "blocked" always where it can
 * (measuring); anything else (unset): the rule. */
static int lay_env(void)
{
    const char *e = getenv("QFOLD_LAYOUT");
    if (!e) return 0;
    if (!strcmp(e, "nhwc")) return -1;
    if (!strcmp(e, "blocked")) return 1;
    return 0;
}

/* Whether the rule takes the blocked plan B over the NHWC one: no more
 * reorders, and (measured, bench/run.md) oneDNN's jit_1x1 kernels on
 * nChw16c beat its brgconv_1x1 ones on nhwc where a 1x1 conv reads or
 * writes few channels at a large spatial size (QF_BLOCKED_MIN_PLANE,
 * QF_BLOCKED_MAX_CH), or a good share of the work is in 3x3 convs that run
 * as Winograd ones there (QF_BLOCKED_WINO_SHARE: resnet18 0.70x / 0.78x
 * the time at batch 1 / 8, session 14); elsewhere the two are level or
 * blocked loses (resnet18's direct convs at batch 1). */
static bool lay_blocked_pays(const qf_layout *B, const qf_graph *g)
{
    (void)g;
    double macs = 0, wino = 0;
    for (int i = 0; i < B->nnodes; i++) {
        const qf_node *n = B->nodes[i];
        if (n->op != QF_OP_CONV || B->np[i].fused_into >= 0 || !(B->np[i].in_nhwc & 1u) || n->ninputs < 2 ||
            !n->inputs[1] || !n->outputs[0])
            continue;
        const qf_tensor *w = &n->inputs[1]->type, *x = &n->inputs[0]->type, *y = &n->outputs[0]->type;
        if (w->ndim != 4 || x->ndim != 4 || y->ndim != 4) continue;
        /* Multiply-adds per image: M OH OW (C/g) kh kw. */
        const double m = (double)y->dims[1] * (double)y->dims[2] * (double)y->dims[3] * (double)w->dims[1] *
                         (double)w->dims[2] * (double)w->dims[3];
        macs += m;
        if ((B->np[i].out_nhwc & 1u) && qf_backend_conv_winograd(n)) wino += m;
        if (w->dims[2] != 1 || w->dims[3] != 1) continue;
        if (x->dims[2] * x->dims[3] >= QF_BLOCKED_MIN_PLANE &&
            (w->dims[0] <= QF_BLOCKED_MAX_CH || w->dims[1] <= QF_BLOCKED_MAX_CH))
            return true;
    }
    return wino > 0 && wino * QF_BLOCKED_WINO_SHARE >= macs;
}

void qf_layout_plan(qf_layout *L, const qf_graph *g)
{
    L->blocked = false;
    const int env = lay_env();
    if (L->plain || L->keep || L->no_blocked || env < 0) {
        lay_plan_once(L, g);
        return;
    }
    bool f32;
    int nhwc_reorders = 0;
    if (env == 0) {
        lay_plan_once(L, g);
        nhwc_reorders = lay_reorders(L, g, &f32);
    }
    L->blocked = true;
    lay_plan_once(L, g);
    int blk_reorders = lay_reorders(L, g, &f32);
    if (f32 && (env > 0 || (blk_reorders <= nhwc_reorders && lay_blocked_pays(L, g)))) return;
    L->blocked = false;
    lay_plan_once(L, g);
}

/* --- the reorder kernel ---------------------------------------------------- */

typedef struct lay_transpose {
    const void *src;
    void *dst;
    int64_t rows, cols; /* per image: src is rows x cols, dst cols x rows */
    int64_t tiles_r, tiles_c;
    size_t elem; /* 4 (float) or 1 (int8) */
} lay_transpose;

enum { LAY_TILE = 32 };

#define LAY_TILE_LOOP_(T)                                                                    \
    do {                                                                                    \
        const T *s = (const T *)c->src + img * c->rows * c->cols;                           \
        T *d = (T *)c->dst + img * c->rows * c->cols;                                       \
        for (int64_t r = r0; r < r1; r++)                                                   \
            for (int64_t k = c0; k < c1; k++) d[k * c->rows + r] = s[r * c->cols + k];      \
    } while (0)

/* Tile t of the images' rows x cols matrices, transposed: reads and writes
 * both stay within a few cache lines per row of the tile. */
static void lay_transpose_body(void *ctx, int64_t lo, int64_t hi)
{
    const lay_transpose *c = ctx;
    const int64_t per_image = c->tiles_r * c->tiles_c;
    for (int64_t t = lo; t < hi; t++) {
        int64_t img = t / per_image, rem = t % per_image;
        int64_t r0 = rem / c->tiles_c * LAY_TILE, c0 = rem % c->tiles_c * LAY_TILE;
        int64_t r1 = r0 + LAY_TILE < c->rows ? r0 + LAY_TILE : c->rows;
        int64_t c1 = c0 + LAY_TILE < c->cols ? c0 + LAY_TILE : c->cols;
        if (c->elem == 1) LAY_TILE_LOOP_(uint8_t);
        else LAY_TILE_LOOP_(uint32_t);
    }
}
#undef LAY_TILE_LOOP_

/* NCHW <-> nChw16c (float): per image and block of 16 channels, the block's
 * channels interleaved over a run of pixels; the pad channels of the last
 * block written as zeros (oneDNN reads them as such). */
typedef struct lay_block {
    const float *src;
    float *dst;
    int64_t ch, nb, sp, runs; /* channels, blocks, pixels per image, runs per block */
    bool to_blocked;
} lay_block;

enum { LAY_RUN = 256 };

static void lay_block_body(void *ctx, int64_t lo, int64_t hi)
{
    const lay_block *c = ctx;
    const int64_t B = QF_LAYOUT_BLOCK;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t img_b = t / c->runs, p0 = t % c->runs * LAY_RUN;
        const int64_t img = img_b / c->nb, b = img_b % c->nb;
        const int64_t p1 = p0 + LAY_RUN < c->sp ? p0 + LAY_RUN : c->sp;
        const int64_t c0 = b * B, nc = c->ch - c0 < B ? c->ch - c0 : B;
        float *blk = NULL;
        const float *cblk = NULL;
        if (c->to_blocked)
            blk = c->dst + (img * c->nb + b) * c->sp * B;
        else
            cblk = c->src + (img * c->nb + b) * c->sp * B;
        const int64_t plane = img * c->ch * c->sp;
        if (c->to_blocked) {
            const float *s = c->src + plane + c0 * c->sp;
            for (int64_t p = p0; p < p1; p++) {
                float *d = blk + p * B;
                int64_t k = 0;
                for (; k < nc; k++) d[k] = s[k * c->sp + p];
                for (; k < B; k++) d[k] = 0.0f;
            }
        } else {
            float *d = c->dst + plane + c0 * c->sp;
            for (int64_t p = p0; p < p1; p++) {
                const float *s = cblk + p * B;
                for (int64_t k = 0; k < nc; k++) d[k * c->sp + p] = s[k];
            }
        }
    }
}

qf_status qf_exec_reorder(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    qf_tensor *y = io->out[0];
    int64_t n = x->dims[0], ch = x->dims[1], sp = 1;
    for (int d = 2; d < x->ndim; d++) sp *= x->dims[d];
    const bool to_nhwc = io->out_nhwc & 1u;
    const size_t elem = qf_dtype_size(x->dtype);
    if (io->blocked && x->ndim == 4 && elem == 4 && (io->in_nhwc & 1u) != (io->out_nhwc & 1u)) {
        lay_block c = {.src = x->data, .dst = y->data, .ch = ch, .sp = sp, .to_blocked = to_nhwc};
        c.nb = (ch + QF_LAYOUT_BLOCK - 1) / QF_LAYOUT_BLOCK;
        c.runs = (sp + LAY_RUN - 1) / LAY_RUN;
        int64_t tiles = n * c.nb * c.runs;
        if (tiles > 0) qf_parallel_for(tiles, 2, lay_block_body, &c);
        return QF_OK;
    }
    if ((io->in_nhwc & 1u) == (io->out_nhwc & 1u) || ch <= 1 || sp <= 1 || (elem != 1 && elem != 4)) {
        memcpy(y->data, x->data, qf_tensor_nbytes(x));
        return QF_OK;
    }
    /* NCHW -> NHWC transposes each image's C x HW matrix, NHWC -> NCHW its
     * HW x C one. */
    lay_transpose c = {.src = x->data,
                       .dst = y->data,
                       .rows = to_nhwc ? ch : sp,
                       .cols = to_nhwc ? sp : ch,
                       .elem = elem};
    c.tiles_r = (c.rows + LAY_TILE - 1) / LAY_TILE;
    c.tiles_c = (c.cols + LAY_TILE - 1) / LAY_TILE;
    int64_t tiles = n * c.tiles_r * c.tiles_c;
    /* With oneDNN loaded, on its OpenMP team (qf_parallel_set_runner). */
    if (tiles > 0) qf_parallel_for(tiles, 4, lay_transpose_body, &c);
    return QF_OK;
}

void qf_exec_copy_nchw(void *dst, const qf_tensor *t, bool nhwc)
{
    if (!nhwc || t->ndim != 4) {
        memcpy(dst, t->data, qf_tensor_nbytes(t));
        return;
    }
    qf_tensor y = *t;
    y.data = dst;
    y.owns = false;
    const qf_tensor *in[1] = {t};
    qf_tensor *out[1] = {&y};
    qf_exec_reorder(&(qf_kernel_io){.nin = 1, .nout = 1, .in = in, .out = out, .in_nhwc = 1});
}
