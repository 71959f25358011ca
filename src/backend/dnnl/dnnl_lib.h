/* The oneDNN kernel backend: the library, loaded at run time, and what every
 * oneDNN kernel file (src/backend/dnnl/dnnl_<family>.c) shares.
 *
 * libdnnl is opened with dlopen on first use, not linked: its OpenMP runtime
 * (libgomp) reads GOMP_SPINCOUNT, OMP_NUM_THREADS and OMP_STACKSIZE once,
 * when it loads, and qfold sets them first (a bounded spin between oneDNN's
 * calls, then sleep, so that its threads never spin for long against qfold's
 * own pool; the thread count of qf_parallel_threads, core/parallel.h). A machine without libdnnl.so.2 runs the reference
 * kernels. Every function qfold calls is one row of QF_DNNL_FUNCS, reached as
 * QF_DNNL(name)(args...).
 *
 *   const qf_dnnl_lib *d = qf_dnnl();          // NULL: backend not active
 *   QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_execute)(prim, d->stream, nargs, args), "conv"));
 *
 * This folder is compiled only with QF_HAVE_DNNL (the dnnl.h headers at build
 * time); without it the backend layer (backend.c) has no tables and the
 * engine is always the reference one.
 */
#ifndef QF_BACKEND_DNNL_LIB_H
#define QF_BACKEND_DNNL_LIB_H

#include "backend/backend.h"
#include "ops/math/gemm.h"
#include "ops/op_table.h"

#if QF_HAVE_DNNL
#include <dnnl.h>

/* The functions of libdnnl qfold calls: X(return type, name without the
 * dnnl_ prefix, parameter list). Add a row to call one more. */
#define QF_DNNL_FUNCS(X)                                                                                   \
    X(const dnnl_version_t *, version, (void))                                                            \
    X(dnnl_status_t, engine_create, (dnnl_engine_t *, dnnl_engine_kind_t, size_t))                        \
    X(dnnl_status_t, engine_destroy, (dnnl_engine_t))                                                     \
    X(dnnl_status_t, stream_create, (dnnl_stream_t *, dnnl_engine_t, unsigned))                           \
    X(dnnl_status_t, stream_wait, (dnnl_stream_t))                                                        \
    X(dnnl_status_t, stream_destroy, (dnnl_stream_t))                                                     \
    X(dnnl_status_t, set_primitive_cache_capacity, (int))                                                 \
    X(dnnl_status_t, memory_desc_init_by_tag,                                                             \
      (dnnl_memory_desc_t *, int, const dnnl_dims_t, dnnl_data_type_t, dnnl_format_tag_t))                \
    X(dnnl_status_t, memory_desc_init_by_strides,                                                         \
      (dnnl_memory_desc_t *, int, const dnnl_dims_t, dnnl_data_type_t, const dnnl_dims_t))                 \
    X(dnnl_status_t, memory_desc_reshape,                                                                 \
      (dnnl_memory_desc_t *, const dnnl_memory_desc_t *, int, const dnnl_dims_t))                          \
    X(int, memory_desc_equal, (const dnnl_memory_desc_t *, const dnnl_memory_desc_t *))                  \
    X(size_t, memory_desc_get_size, (const dnnl_memory_desc_t *))                                         \
    X(dnnl_status_t, memory_create, (dnnl_memory_t *, const dnnl_memory_desc_t *, dnnl_engine_t, void *)) \
    X(dnnl_status_t, memory_set_data_handle, (dnnl_memory_t, void *))                                     \
    X(dnnl_status_t, memory_destroy, (dnnl_memory_t))                                                     \
    X(dnnl_status_t, primitive_attr_create, (dnnl_primitive_attr_t *))                                    \
    X(dnnl_status_t, primitive_attr_destroy, (dnnl_primitive_attr_t))                                     \
    X(dnnl_status_t, primitive_attr_set_scratchpad_mode, (dnnl_primitive_attr_t, dnnl_scratchpad_mode_t)) \
    X(dnnl_status_t, primitive_attr_set_post_ops, (dnnl_primitive_attr_t, const_dnnl_post_ops_t))         \
    X(dnnl_status_t, primitive_attr_set_output_scales,                                                    \
      (dnnl_primitive_attr_t, dnnl_dim_t, int, const float *))                                            \
    X(dnnl_status_t, primitive_attr_set_scales,                                                           \
      (dnnl_primitive_attr_t, int, dnnl_dim_t, int, const float *))                                       \
    X(dnnl_status_t, primitive_attr_set_zero_points,                                                      \
      (dnnl_primitive_attr_t, int, dnnl_dim_t, int, const int32_t *))                                     \
    X(dnnl_status_t, post_ops_create, (dnnl_post_ops_t *))                                                \
    X(dnnl_status_t, post_ops_destroy, (dnnl_post_ops_t))                                                 \
    X(dnnl_status_t, post_ops_append_eltwise, (dnnl_post_ops_t, float, dnnl_alg_kind_t, float, float))    \
    X(dnnl_status_t, post_ops_append_sum, (dnnl_post_ops_t, float))                                       \
    X(dnnl_status_t, post_ops_append_binary, (dnnl_post_ops_t, dnnl_alg_kind_t, const dnnl_memory_desc_t *)) \
    X(dnnl_status_t, primitive_desc_create,                                                               \
      (dnnl_primitive_desc_t *, const_dnnl_op_desc_t, const_dnnl_primitive_attr_t, dnnl_engine_t,        \
       const_dnnl_primitive_desc_t))                                                                      \
    X(dnnl_status_t, primitive_desc_destroy, (dnnl_primitive_desc_t))                                     \
    X(dnnl_status_t, primitive_desc_query, (const_dnnl_primitive_desc_t, dnnl_query_t, int, void *))      \
    X(const dnnl_memory_desc_t *, primitive_desc_query_md,                                                \
      (const_dnnl_primitive_desc_t, dnnl_query_t, int))                                                   \
    X(dnnl_status_t, primitive_create, (dnnl_primitive_t *, const_dnnl_primitive_desc_t))                 \
    X(dnnl_status_t, primitive_execute,                                                                   \
      (const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t *))                              \
    X(dnnl_status_t, primitive_destroy, (dnnl_primitive_t))                                               \
    X(dnnl_status_t, reorder_primitive_desc_create,                                                       \
      (dnnl_primitive_desc_t *, const dnnl_memory_desc_t *, dnnl_engine_t, const dnnl_memory_desc_t *,    \
       dnnl_engine_t, const_dnnl_primitive_attr_t))                                                       \
    X(dnnl_status_t, dilated_convolution_forward_desc_init,                                               \
      (dnnl_convolution_desc_t *, dnnl_prop_kind_t, dnnl_alg_kind_t, const dnnl_memory_desc_t *,          \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,                \
       const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t))                       \
    X(dnnl_status_t, dilated_deconvolution_forward_desc_init,                                             \
      (dnnl_deconvolution_desc_t *, dnnl_prop_kind_t, dnnl_alg_kind_t, const dnnl_memory_desc_t *,        \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,                \
       const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t))                       \
    X(dnnl_status_t, dilated_convolution_backward_data_desc_init,                                         \
      (dnnl_convolution_desc_t *, dnnl_alg_kind_t, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, \
       const dnnl_memory_desc_t *, const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t,               \
       const dnnl_dims_t))                                                                                \
    X(dnnl_status_t, dilated_convolution_backward_weights_desc_init,                                      \
      (dnnl_convolution_desc_t *, dnnl_alg_kind_t, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_dims_t, const dnnl_dims_t,     \
       const dnnl_dims_t, const dnnl_dims_t))                                                             \
    X(dnnl_status_t, dilated_deconvolution_backward_data_desc_init,                                       \
      (dnnl_deconvolution_desc_t *, dnnl_alg_kind_t, const dnnl_memory_desc_t *,                          \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_dims_t, const dnnl_dims_t,     \
       const dnnl_dims_t, const dnnl_dims_t))                                                             \
    X(dnnl_status_t, dilated_deconvolution_backward_weights_desc_init,                                    \
      (dnnl_deconvolution_desc_t *, dnnl_alg_kind_t, const dnnl_memory_desc_t *,                          \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,                \
       const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t))                       \
    X(dnnl_status_t, inner_product_forward_desc_init,                                                     \
      (dnnl_inner_product_desc_t *, dnnl_prop_kind_t, const dnnl_memory_desc_t *,                         \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *))               \
    X(dnnl_status_t, matmul_desc_init,                                                                    \
      (dnnl_matmul_desc_t *, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,                      \
       const dnnl_memory_desc_t *, const dnnl_memory_desc_t *))                                           \
    X(dnnl_status_t, pooling_v2_forward_desc_init,                                                        \
      (dnnl_pooling_v2_desc_t *, dnnl_prop_kind_t, dnnl_alg_kind_t, const dnnl_memory_desc_t *,           \
       const dnnl_memory_desc_t *, const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t,               \
       const dnnl_dims_t, const dnnl_dims_t))                                                             \
    X(dnnl_status_t, batch_normalization_forward_desc_init,                                               \
      (dnnl_batch_normalization_desc_t *, dnnl_prop_kind_t, const dnnl_memory_desc_t *, float, unsigned)) \
    X(dnnl_status_t, eltwise_forward_desc_init,                                                           \
      (dnnl_eltwise_desc_t *, dnnl_prop_kind_t, dnnl_alg_kind_t, const dnnl_memory_desc_t *, float, float)) \
    X(dnnl_status_t, binary_desc_init,                                                                    \
      (dnnl_binary_desc_t *, dnnl_alg_kind_t, const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,     \
       const dnnl_memory_desc_t *))                                                                       \
    X(dnnl_status_t, sgemm,                                                                               \
      (char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float, const float *, dnnl_dim_t, const float *,   \
       dnnl_dim_t, float, float *, dnnl_dim_t))

typedef struct qf_dnnl_lib {
#define QF_DNNL_FIELD_(ret, name, params) ret(*name) params;
    QF_DNNL_FUNCS(QF_DNNL_FIELD_)
#undef QF_DNNL_FIELD_
    dnnl_engine_t engine;  /* the CPU engine */
    dnnl_stream_t stream;  /* its stream (plans run one at a time on it) */
    int threads;           /* OpenMP threads oneDNN runs on */
    void (*omp_set_threads)(int); /* libgomp's omp_set_num_threads; NULL: another runtime */
    int (*omp_max_threads)(void); /* libgomp's omp_get_max_threads */
    bool short_wait;       /* libgomp's idle threads sleep at once (busy machine's spin, passive) */
} qf_dnnl_lib;

/* The loaded library when the oneDNN backend is active (qf_backend_engine()
 * is QF_BACKEND_DNNL), else NULL. */
const qf_dnnl_lib *qf_dnnl(void);

/* A loaded function: QF_DNNL(memory_create)(&m, &md, d->engine, ptr). Only
 * after qf_dnnl() returned non-NULL. */
extern qf_dnnl_lib qf_dnnl_lib_;
#define QF_DNNL(name) (qf_dnnl_lib_.name)

/* QF_OK for dnnl_success; otherwise an error naming n (may be NULL) and what
 * failed: out of memory -> QF_ERR_NOMEM "out of memory", unimplemented ->
 * QF_ERR_UNSUPPORTED, anything else -> QF_ERR_INTERNAL. */
qf_status qf_dnnl_check(const qf_node *n, dnnl_status_t s, const char *what);

/* dnnl_unimplemented from a descriptor / primitive-descriptor creation means
 * "not this node": QF_ERR_UNSUPPORTED without recording a message (the
 * plan falls back to the reference kernels); other failures as qf_dnnl_check. */
qf_status qf_dnnl_try(const qf_node *n, dnnl_status_t s, const char *what);

/* dnnl_primitive_create behind a check that the address space has room for
 * what it allocates (JIT code and buffers: oneDNN does not survive running
 * out there — it calls the failed JIT buffer, SIGSEGV): QF_ERR_NOMEM "out of
 * memory" naming n when it has not. */
qf_status qf_dnnl_primitive_create(const qf_node *n, dnnl_primitive_t *prim, const_dnnl_primitive_desc_t pd,
                                   const char *what);

/* A memory descriptor for a qfold tensor's dims (and dtype): ncX (fmt 0),
 * nXc (channels-last, fmt 1) or float nChw16c (fmt 2, QF_LAYOUT_BLOCKED: 4-D
 * only) for the rank 3..5. */
qf_status qf_dnnl_md(const qf_node *n, dnnl_memory_desc_t *md, const qf_tensor *t, int fmt);

/* The fmt of qf_dnnl_md for a tensor of io whose layout bit is `bit`. */
static inline int qf_dnnl_fmt(const qf_kernel_io *io, uint32_t bit)
{
    return bit ? (io->blocked ? 2 : 1) : 0;
}

/* Whether the int8 kernels may requantize approximately: the environment
 * variable QFOLD_INT8=fast, read at each call (plans read it when they are
 * built). By default (unset, or any other value) the int8 convolution hands
 * its int32 sums to qfold's own requantization, so that every engine
 * computes the reference kernels' integers (TFLite's, bit for bit); "fast"
 * lets oneDNN requantize in float with its output scales and fuse a
 * residual int8 Add, up to a few LSB apart (dnnl_qlinear.c). */
bool qf_dnnl_int8_fast(void);

/* --- the loader, driven by the backend layer (backend.c) ------------------ */

/* Load libdnnl and start its threads, once (later calls return the first
 * answer). Called with the backend's lock held. False: qf_dnnl_why_not()
 * says why, qf_dnnl_out_of_memory() whether for want of memory. */
bool qf_dnnl_load(void);
const char *qf_dnnl_why_not(void);
bool qf_dnnl_out_of_memory(void);
/* "oneDNN 2.6.3" once loaded, else "". */
const char *qf_dnnl_version(void);
/* libgomp's spin count for training (read when the library loads). */
void qf_dnnl_prefer_training(void);
/* qf_backend_environment's answer for oneDNN's libgomp. */
int qf_dnnl_environment(const char **names, char (*values)[24]);
/* Whether the loaded backend is the active engine: qf_dnnl() returns the
 * library only while it is (the backend layer's sgemm hook asks the engine,
 * then runs qf_dnnl_sgemm). */
void qf_dnnl_activate(bool on);
/* qf_sgemm on oneDNN (the hook of ops/math/gemm.h; K > 0). */
qf_status qf_dnnl_sgemm(const qf_node *n, const qf_sgemm_args *g);

/* Whether the oneDNN kernel of `producer` (Conv, ConvTranspose, Gemm, MatMul,
 * linear) takes `follower` as a post-op: a unary activation oneDNN computes
 * exactly as the reference (Relu, relu6, Clip with constant bounds,
 * LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish) reading the producer's
 * output or the previous fused node's, an Add of a float32 operand of the
 * same shape (a residual: the kernel gets it as post_in), or the Mul of a
 * SiLU, Mul(v, Sigmoid(v)) with v that output (the plan fuses the Sigmoid
 * and the Mul together, in that order: one swish post-op); for an int8
 * QLinearConv, the integer executor's residual qadd (qf_qdnnl_can_fuse).
 * Asked by the plan (qf_backend_can_fuse) in chain order. */
bool qf_dnnl_can_fuse(const qf_node *producer, const qf_node *follower);

/* Whether Conv n may run as a Winograd convolution on oneDNN (dnnl_conv.c):
 * float32, 2-D, 3x3, stride 1, no dilation, one group, pads of at most 1,
 * an output plane of at least 14x14 per image (QF_WINO_MIN_PLANE), and
 * Winograd not turned off (QFOLD_WINOGRAD=0). oneDNN runs it so only
 * between blocked activations, and may still decline (then the direct
 * kernel runs). The plan's layout rule counts these convs (layout.c). */
bool qf_dnnl_conv_winograd(const qf_node *n);
/* False when the environment has QFOLD_WINOGRAD=0. */
bool qf_dnnl_winograd_enabled(void);

#endif /* QF_HAVE_DNNL */

#endif
