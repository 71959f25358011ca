/* Private helpers shared by the executor's files (plan.c, fold.c). */
#ifndef QF_EXEC_IMPL_H
#define QF_EXEC_IMPL_H

#include "../ops/op_table.h"
#include "qfold/exec.h"

#include <stdbool.h>
#include <stdint.h>

/* Buffers in the plan's arena (and its scratch) start on this boundary. */
#define QF_EXEC_ALIGN 64

/* Round n up to a multiple of QF_EXEC_ALIGN. */
static inline size_t qf_exec_align(size_t n)
{
    return (n + QF_EXEC_ALIGN - 1) / QF_EXEC_ALIGN * QF_EXEC_ALIGN;
}

/* Run n's forward kernel on prepared tensors. On failure the message names
 * the node: when the kernel's message does not mention it, it is prefixed. */
qf_status qf_exec_node(const qf_kernel_io *io);

/* Scratch bytes n's kernel needs (0 when none), given its prepared state;
 * QF_ERR_SHAPE naming the node when that is more than qfold allocates in one
 * piece (QF_MAX_TENSOR_BYTES: an im2col of a huge kernel over a huge output). */
qf_status qf_exec_scratch(const qf_node *n, const void *state, size_t *bytes);

/* Run the prepare column of io->node (nothing when the op has none) into
 * `state` (the op's state_size bytes, zeroed). io->in / io->out are types:
 * data may be NULL. On failure the message names the node. */
qf_status qf_exec_prepare(const qf_kernel_io *io, void *state);

/* Prefix st's message with "node 'x' (Op): " unless it already names n. */
void qf_exec_name_node(const qf_node *n, qf_status st);

/* Zeroed memory aligned to QF_EXEC_ALIGN through the allocation hook: the
 * raw pointer (for qf_free) goes to *raw, the aligned one is returned. */
void *qf_exec_alloc_aligned(size_t size, void **raw);
/* From this size on (arenas, scratch) the block is marked for huge pages. */
#define QF_EXEC_HUGE_MIN ((size_t)4 << 20)

/* A live buffer while laying out an arena. */
typedef struct qf_block {
    size_t off, size;
    int last; /* index of the last step that reads it */
} qf_block;

/* Best fit: the smallest gap between the live blocks (sorted by offset)
 * that holds `size`, else the end of the highest block; the new block (live
 * until step `last`) goes into `live`, kept sorted. Returns its offset. */
size_t qf_exec_place(qf_block *live, int *nlive, size_t size, int last);

/* Every graph input has a known shape / every node input has data or a
 * producer, every output a dtype and a known shape (messages name them). */
qf_status qf_exec_check_shapes(const qf_graph *g);
qf_status qf_exec_check_values(const qf_graph *g);
/* Tensor t can feed graph input v: data, dtype and shape (message names v). */
qf_status qf_exec_check_input(const qf_value *v, const qf_tensor *t);

/* --- layout planning and post-op fusion (layout.c) -------------------------
 *
 * After backend selection, the plan decides per float 4-D activation whether
 * it is stored NCHW or channels-last (NHWC), and which nodes run inside their
 * producer's backend kernel as post-ops. Values joined by layout-agnostic
 * reference kernels (qf_op_kernels.layouts) share one layout; a group is
 * NHWC when a backend kernel that takes NHWC reads or writes one of its
 * values. A value is converted (one reorder step, after its producer or at
 * the start for a graph input) only where a reader needs the other layout:
 * an NCHW-only kernel, a graph output. Values with 1x1 spatial size are the
 * same bytes either way and never reordered. The channels-last layout is
 * NHWC or, for the whole plan, oneDNN's blocked nChw16c (qf_layout.blocked;
 * then 1x1 values are the same bytes only with whole blocks of channels). */

/* What the plan assumes the backend takes for a node. */
enum { QF_CAP_REF = 0, QF_CAP_PLAIN = 1, QF_CAP_FULL = 2 };

/* Most post-ops fused into one kernel. */
#define QF_FUSE_MAX 4

typedef struct qf_node_plan {
    int cap;              /* QF_CAP_*: REF runs the reference kernel */
    int fused_into;       /* plan index of the node whose kernel runs this one; -1: none */
    int nfused;           /* nodes fused into this one: fused[first .. first+nfused-1] */
    int first;
    uint32_t in_nhwc, out_nhwc; /* per slot: the layout read / written */
} qf_node_plan;

typedef struct qf_value_plan {
    unsigned char eligible; /* float 4-D activation or graph input */
    unsigned char free;     /* 1x1 spatial: both layouts are the same bytes */
    unsigned char made;     /* layout its writer produces (1 = NHWC) */
    unsigned char alt;      /* a reorder makes the other layout */
    unsigned char live;     /* materialized (not a value inside a fused chain) */
    unsigned char group;    /* layout of its group (1 = NHWC) */
    unsigned char reads;    /* bit 0: read as NCHW, bit 1: read as NHWC */
} qf_value_plan;

typedef struct qf_layout {
    int nnodes;
    const qf_node **nodes;     /* plan order */
    int *pos;                  /* plan index by node id */
    qf_node_plan *np;          /* by plan index */
    qf_value_plan *vp;         /* by value id */
    const qf_node **fused;     /* fused nodes, grouped by the node that runs them */
    const qf_value **post;     /* per fused entry: the binary post-op's other operand, or NULL */
    int nfused_total;
    int *parent;               /* per value id: union-find links (scratch) */
    unsigned char *want;       /* per value id: scratch */
    bool plain;                /* no NHWC, no fusion (plans whose steps a hook observes) */
    bool blocked;              /* set by qf_layout_plan: the other layout is nChw16c, not NHWC */
    bool no_blocked;           /* never blocked (a kernel declined it: the caller sets it) */
    const unsigned char *keep; /* per value id: never inside a fused chain (observed); NULL: none */
} qf_layout;

/* Decides fusion and layouts from np[].cap (set by the caller); fills np
 * (except cap), vp, fused, post. Every array is the caller's (nodes, pos,
 * np, fused, post: one entry per node; vp, parent, want: per value id).
 * Allocates nothing. */
void qf_layout_plan(qf_layout *L, const qf_graph *g);

/* The layout (1 = NHWC) the step of plan node i reads its input `slot` in,
 * and writes value v in (v: an output of the node, or the last fused one's). */
int qf_layout_read(const qf_layout *L, int i, int slot);
int qf_layout_write(const qf_layout *L, int i, const qf_value *v);

/* The reorder kernel: in[0] to out[0], the same logical NCHW dims, from the
 * layout of in_nhwc bit 0 to that of out_nhwc bit 0 (a parallel transpose). */
qf_status qf_exec_reorder(const qf_kernel_io *io);

/* A plan whose steps a hook observes: no NHWC, no fusion, as the reference
 * executor (batch.c builds those when it installs a hook). */
qf_status qf_plan_init_plain(qf_plan **out, qf_graph *g);

/* What one step of a plan runs (tests, qf_plan_print). */
typedef struct qf_plan_step_info {
    const qf_node *node;       /* for a reorder: the value's producer, NULL for a graph input */
    const qf_value *reorder;   /* non-NULL: this step converts the layout of that value */
    bool backend;              /* the backend's kernel (else the reference one) */
    uint32_t in_nhwc, out_nhwc;
    bool blocked;              /* a set bit means blocked (nChw16c), not NHWC */
    int nfused;
    const qf_node *const *fused;
    bool over_post;            /* its output lies over the fused residual it adds (qf_backend_kernels.dst_post) */
} qf_plan_step_info;
int qf_plan_step_count(const qf_plan *p);
void qf_plan_step_get(const qf_plan *p, int i, qf_plan_step_info *info);

#endif
