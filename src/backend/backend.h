/* The kernel backend layer: which engine new plans use, and the backend's
 * kernel columns for each op, which the plan (exec/plan.c, plan_layout.c)
 * and the training tape (exec/grad.c) consult next to the reference columns
 * of ops/op_table.h.
 *
 *   if (qf_backend_engine() == QF_BACKEND_DNNL) {
 *       const qf_backend_kernels *bk = qf_backend_kernels_get(n->op); // NULL: reference only
 *       ...
 *   }
 *
 * Today there is one backend, oneDNN (src/backend/dnnl/), loaded at run time
 * on first use. A build without it (-DQF_ONEDNN=OFF) compiles this file's
 * backend.c and not that folder: every table is empty, can_fuse is false,
 * and the engine is always the reference one. The reference kernels
 * (src/ops/) never name a backend: what a backend needs from them (a
 * geometry, a sgemm hook) they offer through their own headers. */
#ifndef QF_BACKEND_H
#define QF_BACKEND_H

#include <stdbool.h>

#include "ops/op_table.h"

/* Which kernels plans use; the values of qf_engine in qfold/exec.h. */
typedef enum qf_backend_engine_kind {
    QF_BACKEND_AUTO = 0,
    QF_BACKEND_REF = 1,
    QF_BACKEND_DNNL = 2
} qf_backend_engine_kind;

/* Hand the reference kernels what they run on the backend without naming it
 * (ops/math/gemm.h's sgemm hook), loading nothing: the executor calls it
 * before a node runs alone (qf_node_eval); qf_backend_engine does too. */
void qf_backend_attach(void);
/* QF_BACKEND_REF or QF_BACKEND_DNNL: what new plans use. The first call with
 * AUTO or DNNL requested (QFOLD_ENGINE, else AUTO) loads oneDNN. */
int qf_backend_engine(void);
/* AUTO (default: oneDNN when it loads, else the reference kernels), REF, or
 * DNNL (an error when oneDNN cannot be loaded, saying why). */
qf_status qf_backend_set_engine(int engine);
/* Why the oneDNN backend is not active ("" when it is). Starting oneDNN
 * also starts its OpenMP threads, after a check that there is room for
 * them (libgomp would exit the process if it could not create one): without
 * room, the reference kernels run and this says "out of memory: ...". */
const char *qf_backend_why_not(void);
/* "oneDNN 2.6.3" when the backend is active, else "". */
const char *qf_backend_version(void);
/* qf_engine_prefer_training (qfold/exec.h): libgomp's spin count for
 * training, if oneDNN is not loaded yet. */
void qf_backend_prefer_training(void);
/* The OpenMP environment qfold measured oneDNN best with (qf_engine_environment,
 * qfold/exec.h): up to 3 names and values into names / values, the count
 * returned (0 without oneDNN support). The library never sets it itself. */
int qf_backend_environment(const char **names, char (*values)[24]);

/* A kernel backend's columns for one op. The plan calls prepare once per
 * node (its state_size bytes hold what prepare made: primitives, memory
 * descriptors), QF_ERR_UNSUPPORTED with no message means "not this node"
 * (an attribute or dtype the backend does not take) and the reference
 * columns run it; any other error fails the plan. `release` frees what
 * prepare created (called once per successful prepare, at plan free).
 * `scratch` is the backend's scratchpad, allocated by the plan through
 * qfold's allocator (oneDNN's user-managed scratchpad). */
typedef struct qf_backend_kernels {
    qf_prepare_fn prepare;
    size_t state_size;
    void (*release)(void *state);
    qf_scratch_fn scratch;
    qf_kernel_fn
        forward_f32; /* the one forward: float, or integer for the integer ops (QLinearConv) */
    qf_kernel_fn backward_f32;
    unsigned layouts; /* QF_LAYOUT_* the kernels take; 0 = NCHW only */
    /* The fused residual the kernel accumulates into Y: the index j of
     * io->post_in whose operand it adds by copying it into out[0] first
     * (oneDNN's sum post-op), or -1. The plan places Y over that operand's
     * memory when the step reads it for the last time, and the copy goes.
     * NULL: never. */
    int (*dst_post)(const void *state);
    /* Whether the backend takes node n at all, asked before the layouts are
     * planned (NULL: every node). A node it takes may still be declined by
     * prepare, for the layouts or post-ops it was given, then at all. */
    bool (*accepts)(const qf_node *n);
} qf_backend_kernels;

/* The backend's inference columns of op (NULL: the reference kernels only,
 * and always NULL in a build without a backend). Asked by the plan when
 * qf_backend_engine() is QF_BACKEND_DNNL. */
const qf_backend_kernels *qf_backend_kernels_get(qf_op op);
/* Its training columns (the tape, exec/grad.c): prepare with io->training
 * set, forward_f32 in training mode, backward_f32 as the reference backward;
 * NCHW, no post-ops. NULL: the reference kernels. */
const qf_backend_kernels *qf_backend_train_kernels_get(qf_op op);

/* Whether the backend kernel of producer can run follower as a post-op
 * (an activation, a residual Add, a SiLU's Sigmoid + Mul); asked by the plan
 * in chain order. False without a backend. */
bool qf_backend_can_fuse(const qf_node *producer, const qf_node *follower);
/* Whether Conv n may run as a Winograd convolution on the backend (see
 * qf_dnnl_conv_winograd); the plan's layout rule counts these convs. */
bool qf_backend_conv_winograd(const qf_node *n);

#endif
