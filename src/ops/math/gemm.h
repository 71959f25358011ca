/* qfold's GEMM: row-major C = alpha * op(A) op(B) + beta * C, float and
 * double, the one matrix product the kernels call (Conv's im2col, Gemm /
 * MatMul / linear, Einsum).
 *
 *   QF_TRY(qf_sgemm(n, &(qf_sgemm_args){.m = M, .n = N, .k = K, .alpha = 1, .a = w, .lda = K,
 *                                         .b = col, .ldb = N, .c = y, .ldc = N}));
 *
 * op(A) is M x K: A stored [M, lda] (ta false) or [K, lda] (ta true); op(B)
 * is K x N: B stored [K, ldb] or [N, ldb] (tb true); C is [M, ldc]. With beta
 * 0, C is not read (it may hold garbage, even NaN).
 *
 * When a backend has set its sgemm hook (qf_sgemm_set_backend) and takes the
 * product (oneDNN's sgemm while that engine is active), qf_sgemm runs it for
 * K > 0; oneDNN's allocates internally: its out of memory comes back as
 * QF_ERR_NOMEM naming the node n. Otherwise, and always for double, a
 * portable blocked GEMM (gemm.c) runs on qfold's thread pool
 * (core/parallel.h); it never allocates (its packing buffers are a fixed
 * block of about 200 KB on each thread's stack) and never fails. Not to be
 * called from inside a qf_parallel_for body.
 */
#ifndef QF_OPS_GEMM_H
#define QF_OPS_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/graph.h"

typedef struct qf_sgemm_args {
    bool ta, tb;          /* transpose A / B */
    int64_t m, n, k;      /* op(A) is m x k, op(B) k x n, C m x n */
    float alpha, beta;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
} qf_sgemm_args;

typedef struct qf_dgemm_args {
    bool ta, tb;
    int64_t m, n, k;
    double alpha, beta;
    const double *a;
    int64_t lda;
    const double *b;
    int64_t ldb;
    double *c;
    int64_t ldc;
} qf_dgemm_args;

/* n (may be NULL) names the node in error messages. */
qf_status qf_sgemm(const qf_node *n, const qf_sgemm_args *g);
qf_status qf_dgemm(const qf_node *n, const qf_dgemm_args *g);

/* The portable float GEMM alone (whatever the backend): for tests and
 * bench/gemm. */
void qf_sgemm_ref(const qf_sgemm_args *g);

/* The portable float GEMM on the calling thread alone (whatever the
 * backend), for kernels that split their work over qf_parallel_for slices
 * themselves: unlike qf_sgemm, it may be called inside a slice body. Never
 * allocates, never fails. A B^T (ta false, tb true) with k >=
 * QF_SGEMM_DOT_MIN_K runs as dot products of A's and B's rows (nothing
 * packed; each result sums its vector lanes once, which a shorter k would
 * not pay for). */
#define QF_SGEMM_DOT_MIN_K 256
void qf_sgemm_serial(const qf_sgemm_args *g);

/* The inner kernel the portable GEMM picked for this CPU ("avx512", "avx2",
 * "generic"). */
const char *qf_gemm_kernel_name(void);
/* Tests: run a narrower kernel than the CPU's (false if it cannot run it).
 * Call it between GEMMs, not during one (a GEMM picks its kernel in more
 * than one place); the choice is atomic, so other threads read it without
 * a data race. */
bool qf_gemm_set_kernel(const char *name);

/* A backend's sgemm hook, offered every product with K > 0 first: true when
 * it computed it (*st is then qf_sgemm's status), false to let the portable
 * GEMM run. Set once by the backend layer (src/backend/backend.c), which
 * asks its engine at the call, as the kernels' first GEMM may be what loads
 * it: the reference kernels call qf_sgemm and never name a backend. */
typedef bool (*qf_sgemm_backend_fn)(const qf_node *n, const qf_sgemm_args *g, qf_status *st);
void qf_sgemm_set_backend(qf_sgemm_backend_fn fn);

#endif
