/* The oneDNN float forward kernels (src/backend/dnnl/dnnl_<family>.c) and what they
 * share: one primitive per node, built at plan build with its memory objects,
 * run by one generic forward.
 *
 *   qf_dk_prim *p = state;                    // the node's state (state_size)
 *   qf_dk_build b;
 *   QF_TRY(qf_dk_begin(&b, io, p));           // attr: user scratchpad
 *   ... op descriptor over memory descriptors ...
 *   QF_TRY(qf_dk_post_fused(&b, &dst_md));    // io->fused as post-ops
 *   QF_TRY(qf_dk_finish(&b, &op_desc));       // primitive descriptor + primitive
 *   QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC, QF_DK_IN, 0, &src_md));
 *   ...
 *   .forward_f32 = qf_dk_forward, .release = qf_dk_release, .scratch = qf_dk_scratch
 *
 * A prepare that fails (QF_ERR_UNSUPPORTED without a message: the reference
 * kernels run the node) releases what it made first: the plan calls release
 * only after a successful prepare. The memory objects are created once with
 * no data; qf_dk_forward points them at the tensors of the run (activations,
 * post-op operands, the plan's scratch) and executes.
 */
#ifndef QF_BACKEND_DNNL_KERNELS_H
#define QF_BACKEND_DNNL_KERNELS_H

#include "backend/dnnl/dnnl_lib.h"
#include "ops/ref/activation.h"

#if QF_HAVE_DNNL

/* The backend columns defined in dnnl_<family>.c. */
extern const qf_backend_kernels qf_conv_dnnl, qf_conv_transpose_dnnl;
/* Training (the tape): forward in training mode and backward. */
extern const qf_backend_kernels qf_conv_dnnl_train, qf_conv_transpose_dnnl_train;
extern const qf_backend_kernels qf_gemm_dnnl, qf_matmul_dnnl, qf_linear_dnnl;
extern const qf_backend_kernels qf_max_pool_dnnl, qf_avg_pool_dnnl, qf_global_avg_pool_dnnl;
extern const qf_backend_kernels qf_batch_norm_dnnl;
extern const qf_backend_kernels qf_add_dnnl, qf_sub_dnnl, qf_mul_dnnl, qf_div_dnnl;
extern const qf_backend_kernels qf_leaky_relu_dnnl, qf_sigmoid_dnnl, qf_tanh_dnnl,
    qf_hard_swish_dnnl;
/* QLinearConv on oneDNN (dnnl_qlinear.c). */
extern const qf_backend_kernels qf_qlinear_conv_dnnl;
/* Whether that kernel takes `follower` as post-ops: the integer executor's
 * residual qadd of the conv's output and another int8 activation of its
 * shape (qf_dnnl_can_fuse asks for a QLinearConv producer). */
bool qf_qdnnl_can_fuse(const qf_node *producer, const qf_node *follower);

/* The tables the backend layer reads (dnnl_table.c): each op's columns,
 * NULL where the reference kernels run it. */
extern const qf_backend_kernels *const qf_dnnl_table[QF_OP_COUNT];
extern const qf_backend_kernels *const qf_dnnl_train_table[QF_OP_COUNT];

/* Where an argument's data comes from at run time. */
typedef enum qf_dk_source {
    QF_DK_IN,      /* io->in[index]->data */
    QF_DK_OUT,     /* io->out[index]->data */
    QF_DK_POST,    /* io->post_in[index]->data (a binary post-op's operand) */
    QF_DK_SCRATCH, /* io->scratch (the plan's, of qf_dk_scratch bytes) */
    QF_DK_FIXED    /* set at prepare: a constant, or a buffer the state owns */
} qf_dk_source;

#define QF_DK_MAX_ARGS 16

typedef struct qf_dk_arg {
    int arg; /* DNNL_ARG_* */
    qf_dk_source source;
    int index;
    dnnl_memory_t mem;
} qf_dk_arg;

/* A node's prepared primitive: the state of every oneDNN kernel. */
typedef struct qf_dk_prim {
    dnnl_primitive_t prim;
    dnnl_primitive_desc_t pd; /* kept for the memory descriptors it chose */
    size_t scratch;           /* scratchpad bytes (user-managed) */
    int nargs;
    qf_dk_arg args[QF_DK_MAX_ARGS];
    void *owned[2]; /* reordered weights (qf_malloc'ed, aligned inside) */
    int sum_post;   /* 1 + the post_in index added as a sum post-op; 0: none */
    bool serial;    /* built and run on one thread (a tiny node: qf_dk_finish) */
    bool silu_after; /* the fused SiLU runs after the primitive, in place (qf_dk_set_silu_split) */
} qf_dk_prim;

/* A primitive under construction. */
typedef struct qf_dk_build {
    const qf_kernel_io *io;
    qf_dk_prim *p;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    int npo; /* post-ops appended so far */
    bool sum_ok; /* the first fused Add may be a sum post-op (set by the caller) */
    bool silu_ok; /* a last fused SiLU may run after the primitive (set by the caller) */
} qf_dk_build;

/* QF_ERR_UNSUPPORTED without a message ("not this node"). */
#define QF_DK_DECLINE QF_ERR_UNSUPPORTED

/* Start: the attributes (user scratchpad) and an empty post-op list. */
qf_status qf_dk_begin(qf_dk_build *b, const qf_kernel_io *io, qf_dk_prim *p);
/* Append an eltwise post-op. */
qf_status qf_dk_post_eltwise(qf_dk_build *b, dnnl_alg_kind_t alg, float alpha, float beta);
/* Append io->fused[0 .. nfused-1] as post-ops of a primitive whose
 * destination is dst_md (binary operands take its layout). With b->sum_ok the
 * first fused Add is a sum post-op instead (qf_dk_forward copies its operand
 * into Y first, unless the plan put Y over it): oneDNN 2.6 runs its brgemm
 * convolutions with a sum, its older jit kernels with a binary add. Declines
 * a fused node the backend cannot take. */
qf_status qf_dk_post_fused(qf_dk_build *b, const dnnl_memory_desc_t *dst_md);
/* The primitive descriptor for op_desc with the attributes, and the
 * primitive; binds the scratchpad. Frees the attributes. */
qf_status qf_dk_finish(qf_dk_build *b, const void *op_desc);
/* Free what a build made when it stops early (the prim's own parts are the
 * caller's qf_dk_release). */
void qf_dk_abort(qf_dk_build *b);

/* A memory object for argument `arg`, with no data until the run (source
 * FIXED: data now). */
qf_status qf_dk_bind(qf_dk_prim *p, int arg, qf_dk_source source, int index,
                     const dnnl_memory_desc_t *md, void *data);
/* The memory descriptor the primitive chose for `what` (dnnl_query_*_md). */
const dnnl_memory_desc_t *qf_dk_query(const qf_dk_prim *p, dnnl_query_t what, int index);
/* A constant's data (user_md, plain) bound to `arg` in the layout the
 * primitive chose (want): used in place when they are the same, else
 * reordered once into a buffer the state owns (slot 0 or 1). */
qf_status qf_dk_bind_const(qf_dk_prim *p, int arg, const dnnl_memory_desc_t *user_md,
                           const void *data, const dnnl_memory_desc_t *want, int slot);

/* Plain row-major descriptor of f32 dims (no qf_tensor needed). */
qf_status qf_dk_md_plain(dnnl_memory_desc_t *md, int ndim, const int64_t *dims);
/* Descriptor with explicit strides. */
qf_status qf_dk_md_strided(dnnl_memory_desc_t *md, int ndim, const int64_t *dims,
                           const int64_t *strides);
/* Descriptor with format_tag_any (the primitive chooses). */
qf_status qf_dk_md_any(dnnl_memory_desc_t *md, int ndim, const int64_t *dims);

/* True when every present input and every output of io is float32 with
 * at most 5 dims and no zero-sized dim, and so is every post-op operand. */
bool qf_dk_all_f32(const qf_kernel_io *io);

/* The generic columns: run the primitive, free it, its scratchpad size. */
qf_status qf_dk_forward(const qf_kernel_io *io);
void qf_dk_release(void *state);
size_t qf_dk_scratch(const qf_node *n, const void *state);
/* qf_backend_kernels.dst_post of these kernels: the sum post-op's operand. */
int qf_dk_dst_post(const void *state);
/* Nodes whose first input, weights and output hold at most `elements`
 * elements together run their primitive on one thread (prepared from then
 * on); < 0: the default, 65536, or 262144 where libgomp's idle threads sleep
 * at once (qf_dnnl_lib.short_wait). Tests set 0 to run the threaded kernels
 * on their small shapes. */
void qf_dk_set_serial_max(int64_t elements);
/* A k x k or depthwise Conv's fused SiLU (Sigmoid + Mul) whose output holds
 * at least `elements` elements runs after the primitive as qfold's own in-place SiLU
 * (qf_silu_f32_inplace_slice, on qf_parallel_for) instead of oneDNN's
 * swish post-op (prepared from then on); < 0: the default, 2^21. Tests set 0
 * to run that path on their small shapes. */
void qf_dk_set_silu_split(int64_t elements);

/* The eltwise algorithm (and alpha, beta) computing unary activation node n
 * exactly as its reference kernel; false when there is none. Clip needs
 * constant bounds. */
bool qf_dk_eltwise_of(const qf_node *n, dnnl_alg_kind_t *alg, float *alpha, float *beta);

#endif /* QF_HAVE_DNNL */
#endif
