/* qfold's GEMM (gemm.h): oneDNN's sgemm when the backend is active, else a
 * portable blocked GEMM (gemm_impl.h, once for float and once for double).
 *
 * The portable micro-kernel is written with vector extensions and compiled
 * three times: for AVX-512, for AVX2 + FMA and for the build's baseline; the
 * CPU picks one at run time (__builtin_cpu_supports), so a generic x86-64
 * build still runs at the width the machine has. This file is compiled with
 * -ffp-contract=fast (CMakeLists.txt) so that a * b + c becomes an FMA.
 */
#include <stdbool.h>
#include <string.h>

#include "core/parallel.h"
#include "dnnl.h"
#include "gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QF_GEMM_X86 1
#else
#define QF_GEMM_X86 0
#endif

/* Rows per micro-tile and per packed block of A (a multiple of QF_GMR). */
#define QF_GMR 6
#define QF_GMC 72

/* 0 generic, 1 AVX2 + FMA, 2 AVX-512: the widest this CPU runs, or what
 * qf_gemm_set_kernel chose. */
static int isa = -1;

static int gemm_native_isa(void)
{
#if QF_GEMM_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f")                                       ? 2
           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                             : 0;
#else
    return 0;
#endif
}

static int gemm_isa(void)
{
    if (isa < 0) isa = gemm_native_isa();
    return isa;
}

static const char *const isa_names[] = {"generic", "avx2", "avx512"};

const char *qf_gemm_kernel_name(void) { return isa_names[gemm_isa()]; }

bool qf_gemm_set_kernel(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, isa_names[i]) == 0 && i <= gemm_native_isa()) {
            isa = i;
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
#include "gemm_impl.h"
#undef QF_GT
#undef QF_GN
#undef QF_GARGS
#undef QF_GKC
#undef QF_GNC

/* --- double: 6 x 16 / 6 x 8 / 6 x 4 tiles; blocks of 72 x 128 and 128 x 64 */
#define QF_GT double
#define QF_GN(name) dgemm_##name
#define QF_GARGS qf_dgemm_args
#define QF_GKC 128
#define QF_GNC 64
static int dgemm_pick(void (**k)(int64_t, const double *, const double *, double *, int64_t, double, double, int, int));
#include "gemm_impl.h"
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

void qf_sgemm_serial(const qf_sgemm_args *g) { sgemm_run_serial(g); }

qf_status qf_sgemm(const qf_node *n, const qf_sgemm_args *g)
{
    if (g->m <= 0 || g->n <= 0) return QF_OK;
#if QF_HAVE_DNNL
    /* oneDNN checks leading dimensions even for empty operands; an empty K
     * is the portable path's (it only scales C). */
    const qf_dnnl_lib *d = qf_dnnl();
    if (d && g->k > 0) {
        dnnl_status_t s = QF_DNNL(sgemm)(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->m, g->n, g->k, g->alpha, g->a,
                                         g->lda, g->b, g->ldb, g->beta, g->c, g->ldc);
        return qf_dnnl_check(n, s, "sgemm");
    }
#else
    (void)n;
#endif
    sgemm_run(g);
    return QF_OK;
}

qf_status qf_dgemm(const qf_node *n, const qf_dgemm_args *g)
{
    (void)n;
    dgemm_run(g);
    return QF_OK;
}
