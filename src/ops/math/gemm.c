/* qfold's GEMM (gemm.h): the backend's sgemm when one is set, else a
 * portable blocked GEMM (gemm_impl.h, once for float and once for double).
 *
 * The portable micro-kernel is written with vector extensions and compiled
 * three times: for AVX-512, for AVX2 + FMA and for the build's baseline; the
 * CPU picks one at run time (__builtin_cpu_supports), so a generic x86-64
 * build still runs at the width the machine has. This file is compiled with
 * -ffp-contract=fast (CMakeLists.txt) so that a * b + c becomes an FMA.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/math/gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QF_GEMM_X86 1
#else
#define QF_GEMM_X86 0
#endif

/* Rows per micro-tile and per packed block of A (a multiple of QF_GMR). */
#define QF_GMR 6
#define QF_GMC 72

/* Kernels: 0 generic, 1 AVX2 + FMA, 2 AVX-512. The widest this CPU runs is
 * found once: GEMMs start on any thread (plans are built and run by the
 * caller's threads and the pool's), and __builtin_cpu_init writes libgcc's
 * CPU model, so a plain lazy store would be a data race. pthread_once makes
 * the first call do it and every other wait for it. */
static pthread_once_t native_once = PTHREAD_ONCE_INIT;
static int native_isa;

static void gemm_native_init(void)
{
#if QF_GEMM_X86
    __builtin_cpu_init();
    native_isa = __builtin_cpu_supports("avx512f")                                 ? 2
                 : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                                   : 0;
#else
    native_isa = 0;
#endif
}

static int gemm_native_isa(void)
{
    pthread_once(&native_once, gemm_native_init);
    return native_isa;
}

/* What qf_gemm_set_kernel chose, or -1 for the native kernel. Atomic, as
 * every thread that runs a GEMM reads it; it is one value that orders
 * nothing else, so relaxed loads and stores are enough. */
static atomic_int chosen_isa = -1;

static int gemm_isa(void)
{
    int c = atomic_load_explicit(&chosen_isa, memory_order_relaxed);
    return c >= 0 ? c : gemm_native_isa();
}

static const char *const isa_names[] = {"generic", "avx2", "avx512"};

const char *qf_gemm_kernel_name(void) { return isa_names[gemm_isa()]; }

bool qf_gemm_set_kernel(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, isa_names[i]) == 0 && i <= gemm_native_isa()) {
            atomic_store_explicit(&chosen_isa, i, memory_order_relaxed);
            return true;
        }
    return false;
}

/* --- float: 6 x 32 / 6 x 16 / 6 x 8 tiles; packed blocks of 72 x 256 (A, 72 KB)
 * and 256 x 128 (B, 128 KB) */
#define QF_GT float
#define QF_GN(name) sgemm_##name
#define QF_GARGS qf_sgemm_args
#define QF_GKC 256
#define QF_GNC 128
static int sgemm_pick(void (**k)(int64_t, const float *, const float *, float *, int64_t, float, float, int, int));
#include "ops/math/gemm_impl.h"
#undef QF_GT
#undef QF_GN
#undef QF_GARGS
#undef QF_GKC
#undef QF_GNC

/* --- float A B^T read along K (qf_sgemm_serial): with op(A) = A [M, K] and
 * op(B) = B^T, B [N, K], C[i][j] is the dot product of two contiguous rows.
 * Nothing is packed: a 4 x 3 block of dot products keeps 12 vector
 * accumulators in registers over the whole of K, then sums their lanes.
 * For small M and N over a long K (Conv's dW = dY im2col(X)^T: output
 * channels by C/g * taps, K the output plane) this beats transposing B into
 * panels (most of the packed GEMM's time there) and padding N to a panel. */
#define QF_DOT_MR 4
#define QF_DOT_NR 3
#define QF_DOT_DECL_(i) vec c##i##0 = {0}, c##i##1 = {0}, c##i##2 = {0};
#define QF_DOT_FMA_(i)                      \
    {                                       \
        vec ai;                             \
        memcpy(&ai, a[i] + p, sizeof ai);   \
        c##i##0 += ai * b0;                 \
        c##i##1 += ai * b1;                 \
        c##i##2 += ai * b2;                 \
    }
/* The lanes summed pairwise (a tree, not a chain of dependent adds), then
 * the tail of K past the last whole vector. */
#define QF_DOT_OUT_(i)                                                          \
    {                                                                           \
        vec r[QF_DOT_NR] = {c##i##0, c##i##1, c##i##2};                         \
        for (int j = 0; j < QF_DOT_NR; j++) {                                   \
            float t[sizeof(vec) / sizeof(float)];                               \
            memcpy(t, &r[j], sizeof t);                                         \
            for (int w = (int)(sizeof t / sizeof t[0]) / 2; w >= 1; w /= 2)     \
                for (int l = 0; l < w; l++) t[l] += t[l + w];                   \
            float s = t[0];                                                     \
            for (int64_t q = p; q < k; q++) s += a[i][q] * b[j][q];             \
            out[i][j] = s;                                                      \
        }                                                                       \
    }
#define QF_DOT_KERNEL(fname, attr, VW)                                                                   \
    attr static void fname(int64_t k, const float *const *a, const float *const *b,                      \
                           float out[QF_DOT_MR][QF_DOT_NR])                                             \
    {                                                                                                    \
        typedef float vec __attribute__((vector_size((VW) * sizeof(float))));                            \
        QF_DOT_DECL_(0) QF_DOT_DECL_(1) QF_DOT_DECL_(2) QF_DOT_DECL_(3)                                 \
        int64_t p = 0;                                                                                   \
        for (; p + (VW) <= k; p += (VW)) {                                                               \
            vec b0, b1, b2;                                                                              \
            memcpy(&b0, b[0] + p, sizeof b0);                                                            \
            memcpy(&b1, b[1] + p, sizeof b1);                                                            \
            memcpy(&b2, b[2] + p, sizeof b2);                                                            \
            QF_DOT_FMA_(0) QF_DOT_FMA_(1) QF_DOT_FMA_(2) QF_DOT_FMA_(3)                                 \
        }                                                                                                \
        QF_DOT_OUT_(0) QF_DOT_OUT_(1) QF_DOT_OUT_(2) QF_DOT_OUT_(3)                                     \
    }
typedef void (*sdot_kernel_fn)(int64_t, const float *const *, const float *const *, float[QF_DOT_MR][QF_DOT_NR]);
#if QF_GEMM_X86
QF_DOT_KERNEL(sdot_kernel_avx512, __attribute__((target("avx512f"))), 16)
QF_DOT_KERNEL(sdot_kernel_avx2, __attribute__((target("avx2,fma"))), 8)
#endif
QF_DOT_KERNEL(sdot_kernel_generic, , 4)
#undef QF_DOT_KERNEL
#undef QF_DOT_DECL_
#undef QF_DOT_FMA_
#undef QF_DOT_OUT_

static void sgemm_dot(const qf_sgemm_args *g)
{
    sdot_kernel_fn kernel = sdot_kernel_generic;
#if QF_GEMM_X86
    switch (gemm_isa()) {
    case 2: kernel = sdot_kernel_avx512; break;
    case 1: kernel = sdot_kernel_avx2; break;
    default: break;
    }
#endif
    /* A's rows outside (four of them stay in L1), B's inside (streamed
     * from L2: three loads of it per twelve products). Rows past the edge
     * repeat the last one; their results are dropped. */
    for (int64_t i0 = 0; i0 < g->m; i0 += QF_DOT_MR) {
        const float *a[QF_DOT_MR];
        int mr = g->m - i0 < QF_DOT_MR ? (int)(g->m - i0) : QF_DOT_MR;
        for (int i = 0; i < QF_DOT_MR; i++) a[i] = g->a + (i0 + (i < mr ? i : mr - 1)) * g->lda;
        for (int64_t j0 = 0; j0 < g->n; j0 += QF_DOT_NR) {
            const float *b[QF_DOT_NR];
            int nr = g->n - j0 < QF_DOT_NR ? (int)(g->n - j0) : QF_DOT_NR;
            for (int j = 0; j < QF_DOT_NR; j++) b[j] = g->b + (j0 + (j < nr ? j : nr - 1)) * g->ldb;
            float out[QF_DOT_MR][QF_DOT_NR];
            kernel(g->k, a, b, out);
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++) {
                    float *c = g->c + (i0 + i) * g->ldc + j0 + j;
                    *c = g->beta != 0 ? g->alpha * out[i][j] + g->beta * *c : g->alpha * out[i][j];
                }
        }
    }
}

/* --- double: 6 x 16 / 6 x 8 / 6 x 4 tiles; blocks of 72 x 128 and 128 x 64 */
#define QF_GT double
#define QF_GN(name) dgemm_##name
#define QF_GARGS qf_dgemm_args
#define QF_GKC 128
#define QF_GNC 64
static int dgemm_pick(void (**k)(int64_t, const double *, const double *, double *, int64_t, double, double, int, int));
#include "ops/math/gemm_impl.h"
#undef QF_GT
#undef QF_GN
#undef QF_GARGS
#undef QF_GKC
#undef QF_GNC

/* The kernel for this CPU and its NR. */
static int sgemm_pick(sgemm_kernel_fn *k)
{
#if QF_GEMM_X86
    switch (gemm_isa()) {
    case 2: *k = sgemm_kernel_avx512; return 32;
    case 1: *k = sgemm_kernel_avx2; return 16;
    default: break;
    }
#endif
    *k = sgemm_kernel_generic;
    return 8;
}

static int dgemm_pick(dgemm_kernel_fn *k)
{
#if QF_GEMM_X86
    switch (gemm_isa()) {
    case 2: *k = dgemm_kernel_avx512; return 16;
    case 1: *k = dgemm_kernel_avx2; return 8;
    default: break;
    }
#endif
    *k = dgemm_kernel_generic;
    return 4;
}

void qf_sgemm_ref(const qf_sgemm_args *g) { sgemm_run(g); }

void qf_sgemm_serial(const qf_sgemm_args *g)
{
    /* A B^T over a K long enough to pay for the lane sums: dot products. */
    if (!g->ta && g->tb && g->m > 0 && g->n > 0 && g->k >= QF_SGEMM_DOT_MIN_K) sgemm_dot(g);
    else sgemm_run_serial(g);
}

/* Kernels call qf_sgemm from any thread while the backend layer may set it. */
static _Atomic(qf_sgemm_backend_fn) sgemm_backend;

void qf_sgemm_set_backend(qf_sgemm_backend_fn fn) { atomic_store_explicit(&sgemm_backend, fn, memory_order_release); }

qf_status qf_sgemm(const qf_node *n, const qf_sgemm_args *g)
{
    if (g->m <= 0 || g->n <= 0) return QF_OK;
    /* oneDNN checks leading dimensions even for empty operands; an empty K
     * is the portable path's (it only scales C). */
    qf_sgemm_backend_fn be = atomic_load_explicit(&sgemm_backend, memory_order_acquire);
    qf_status st;
    if (be && g->k > 0 && be(n, g, &st)) return st;
    sgemm_run(g);
    return QF_OK;
}

qf_status qf_dgemm(const qf_node *n, const qf_dgemm_args *g)
{
    (void)n;
    dgemm_run(g);
    return QF_OK;
}
