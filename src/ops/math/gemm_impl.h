/* The portable blocked GEMM of gemm.c for one element type, included once
 * per type with
 *   QF_GT        the element type (float, double)
 *   QF_GN(name)  name with the type's suffix
 *   QF_GARGS     the argument struct (qf_sgemm_args, qf_dgemm_args)
 *   QF_GKC       K block (elements), QF_GNC N block (a multiple of every NR)
 * and QF_GMR / QF_GMC (rows per micro-tile / per A block) from gemm.c.
 *
 * The loops are the BLIS / GotoBLAS ones: for each NC-wide column block and
 * KC-deep slice, op(B) is packed into NR-wide panels (stays in L2/L3); for
 * each MC-tall row block op(A) is packed into MR-tall panels (stays in L2);
 * the micro-kernel runs one MR x NR tile of C over the whole KC slice with
 * its accumulators in registers, reading both panels sequentially.
 */

/* One MR x NR tile over kc: a is an MR-tall packed panel (a[p * MR + i]), b
 * an NR-wide one (b[p * NR + j]); C's mr x nr corner gets alpha * A B +
 * beta * C (C not read when beta is 0). NR is two vectors of VW elements, the
 * target's register width (GCC / Clang vector extensions): 12 accumulators
 * in registers, one broadcast of A and two loads of B per step of p. Wider
 * generic vectors than the target's registers would be kept in memory. */
#define QF_GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define QF_GEMM_KERNEL(fname, attr, VW)                                                                       \
    attr static void fname(int64_t kc, const QF_GT *restrict a, const QF_GT *restrict b, QF_GT *restrict c,  \
                           int64_t ldc, QF_GT alpha, QF_GT beta, int mr, int nr)                              \
    {                                                                                                         \
        typedef QF_GT vec __attribute__((vector_size((VW) * sizeof(QF_GT))));                                 \
        enum { NRV = 2 * (VW) };                                                                              \
        QF_GEMM_ROWS(QF_GEMM_DECL_)                                                                           \
        for (int64_t p = 0; p < kc; p++) {                                                                    \
            vec b0, b1;                                                                                       \
            memcpy(&b0, b + p * NRV, sizeof b0);                                                              \
            memcpy(&b1, b + p * NRV + (VW), sizeof b1);                                                       \
            const QF_GT *ap = a + p * QF_GMR;                                                                 \
            QF_GEMM_ROWS(QF_GEMM_FMA_)                                                                        \
        }                                                                                                     \
        vec acc[2 * QF_GMR] = {c0_0, c0_1, c1_0, c1_1, c2_0, c2_1, c3_0, c3_1, c4_0, c4_1, c5_0, c5_1};       \
        if (nr == NRV) {                                                                                      \
            for (int i = 0; i < mr; i++)                                                                      \
                for (int h = 0; h < 2; h++) {                                                                 \
                    QF_GT *cp = c + i * ldc + h * (VW);                                                       \
                    vec cv = alpha * acc[2 * i + h];                                                          \
                    if (beta != 0) {                                                                          \
                        vec old;                                                                              \
                        memcpy(&old, cp, sizeof old);                                                         \
                        cv += beta * old;                                                                     \
                    }                                                                                         \
                    memcpy(cp, &cv, sizeof cv);                                                               \
                }                                                                                             \
        } else {                                                                                              \
            for (int i = 0; i < mr; i++) {                                                                    \
                QF_GT t[NRV];                                                                                 \
                memcpy(t, &acc[2 * i], sizeof t);                                                             \
                QF_GT *cr = c + i * ldc;                                                                      \
                for (int j = 0; j < nr; j++) cr[j] = beta != 0 ? alpha * t[j] + beta * cr[j] : alpha * t[j]; \
            }                                                                                                 \
        }                                                                                                     \
    }
#define QF_GEMM_DECL_(i) vec c##i##_0 = {0}, c##i##_1 = {0};
#define QF_GEMM_FMA_(i)      \
    c##i##_0 += ap[i] * b0; \
    c##i##_1 += ap[i] * b1;

#if QF_GEMM_X86
QF_GEMM_KERNEL(QF_GN(kernel_avx512), __attribute__((target("avx512f"))), 64 / sizeof(QF_GT))
QF_GEMM_KERNEL(QF_GN(kernel_avx2), __attribute__((target("avx2,fma"))), 32 / sizeof(QF_GT))
#endif
QF_GEMM_KERNEL(QF_GN(kernel_generic), , 16 / sizeof(QF_GT))
#undef QF_GEMM_KERNEL
#undef QF_GEMM_ROWS
#undef QF_GEMM_DECL_
#undef QF_GEMM_FMA_

typedef void (*QF_GN(kernel_fn))(int64_t, const QF_GT *, const QF_GT *, QF_GT *, int64_t, QF_GT, QF_GT, int, int);

/* op(A)[i0 .. i0+mc, p0 .. p0+kc] into MR-tall panels, the last one padded
 * with zero rows. */
static void QF_GN(pack_a)(const QF_GARGS *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, QF_GT *restrict dst)
{
    for (int64_t ir = 0; ir < mc; ir += QF_GMR) {
        int64_t mr = mc - ir < QF_GMR ? mc - ir : QF_GMR;
        QF_GT *d = dst + ir * kc;
        if (!g->ta) {
            for (int64_t i = 0; i < mr; i++) {
                const QF_GT *s = g->a + (i0 + ir + i) * g->lda + p0;
                for (int64_t p = 0; p < kc; p++) d[p * QF_GMR + i] = s[p];
            }
            for (int64_t i = mr; i < QF_GMR; i++)
                for (int64_t p = 0; p < kc; p++) d[p * QF_GMR + i] = 0;
        } else {
            /* A stored [K, M]: each p reads mr adjacent elements. */
            for (int64_t p = 0; p < kc; p++) {
                const QF_GT *s = g->a + (p0 + p) * g->lda + i0 + ir;
                QF_GT *dp = d + p * QF_GMR;
                for (int64_t i = 0; i < mr; i++) dp[i] = s[i];
                for (int64_t i = mr; i < QF_GMR; i++) dp[i] = 0;
            }
        }
    }
}

/* op(B)[p0 .. p0+kc, j0 .. j0+nc] into nrv-wide panels, the last one padded
 * with zero columns. */
static void QF_GN(pack_b)(const QF_GARGS *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int nrv,
                          QF_GT *restrict dst)
{
    for (int64_t jr = 0; jr < nc; jr += nrv) {
        int64_t nr = nc - jr < nrv ? nc - jr : nrv;
        QF_GT *d = dst + jr * kc;
        if (!g->tb) {
            for (int64_t p = 0; p < kc; p++) {
                const QF_GT *s = g->b + (p0 + p) * g->ldb + j0 + jr;
                QF_GT *dp = d + p * nrv;
                for (int64_t j = 0; j < nr; j++) dp[j] = s[j];
                for (int64_t j = nr; j < nrv; j++) dp[j] = 0;
            }
        } else {
            for (int64_t j = 0; j < nrv; j++) {
                if (j >= nr) {
                    for (int64_t p = 0; p < kc; p++) d[p * nrv + j] = 0;
                    continue;
                }
                const QF_GT *s = g->b + (j0 + jr + j) * g->ldb + p0;
                for (int64_t p = 0; p < kc; p++) d[p * nrv + j] = s[p];
            }
        }
    }
}

/* C[m0 .. m1, n0 .. n1] of the product, on the calling thread, with packing
 * buffers on its stack. */
static void QF_GN(block)(const QF_GARGS *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    _Alignas(64) QF_GT apack[QF_GMC * QF_GKC];
    _Alignas(64) QF_GT bpack[QF_GKC * QF_GNC];
    QF_GN(kernel_fn) kernel;
    int nrv = QF_GN(pick)(&kernel);
    for (int64_t jc = n0; jc < n1; jc += QF_GNC) {
        int64_t nc = n1 - jc < QF_GNC ? n1 - jc : QF_GNC;
        for (int64_t pc = 0; pc < g->k; pc += QF_GKC) {
            int64_t kc = g->k - pc < QF_GKC ? g->k - pc : QF_GKC;
            /* Later K slices add to what the first one wrote. */
            QF_GT beta = pc == 0 ? g->beta : 1;
            QF_GN(pack_b)(g, pc, kc, jc, nc, nrv, bpack);
            for (int64_t ic = m0; ic < m1; ic += QF_GMC) {
                int64_t mc = m1 - ic < QF_GMC ? m1 - ic : QF_GMC;
                QF_GN(pack_a)(g, ic, mc, pc, kc, apack);
                for (int64_t jr = 0; jr < nc; jr += nrv) {
                    int nr = (int)(nc - jr < nrv ? nc - jr : nrv);
                    for (int64_t ir = 0; ir < mc; ir += QF_GMR) {
                        int mr = (int)(mc - ir < QF_GMR ? mc - ir : QF_GMR);
                        kernel(kc, apack + ir * kc, bpack + jr * kc, g->c + (ic + ir) * g->ldc + jc + jr, g->ldc,
                               g->alpha, beta, mr, nr);
                    }
                }
            }
        }
    }
}

/* A qf_parallel_for slice: units lo..hi-1 of rows (MR each) or columns (NR
 * each). */
typedef struct QF_GN(job) {
    const QF_GARGS *g;
    bool split_n;
    int64_t unit;
} QF_GN(job);

static void QF_GN(slice)(void *ctx, int64_t lo, int64_t hi)
{
    const QF_GN(job) *j = ctx;
    const QF_GARGS *g = j->g;
    if (j->split_n) {
        int64_t n1 = hi * j->unit < g->n ? hi * j->unit : g->n;
        QF_GN(block)(g, 0, g->m, lo * j->unit, n1);
    } else {
        int64_t m1 = hi * j->unit < g->m ? hi * j->unit : g->m;
        QF_GN(block)(g, lo * j->unit, m1, 0, g->n);
    }
}

/* An empty K only scales C (true: nothing left to do). */
static bool QF_GN(trivial)(const QF_GARGS *g)
{
    if (g->m <= 0 || g->n <= 0) return true;
    if (g->k > 0) return false;
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            QF_GT *c = g->c + i * g->ldc + j;
            *c = g->beta != 0 ? g->beta * *c : 0;
        }
    return true;
}

/* The whole product on the calling thread (inline: the double one is unused). */
static inline void QF_GN(run_serial)(const QF_GARGS *g)
{
    if (!QF_GN(trivial)(g)) QF_GN(block)(g, 0, g->m, 0, g->n);
}

static void QF_GN(run)(const QF_GARGS *g)
{
    if (QF_GN(trivial)(g)) return;
    QF_GN(kernel_fn) kernel;
    int nrv = QF_GN(pick)(&kernel);
    /* Threads split C along N (each packs all of A, a small share when N is
     * wide) or, when N has too few panels to go round, along M (each packs
     * all of B). A slice is at least ~2 MFLOP: less does not pay for waking
     * a thread. */
    int threads = qf_parallel_threads();
    int64_t npanels = (g->n + nrv - 1) / nrv, mpanels = (g->m + QF_GMR - 1) / QF_GMR;
    QF_GN(job) job = {g, npanels >= 4 * threads || npanels >= mpanels, 0};
    job.unit = job.split_n ? nrv : QF_GMR;
    int64_t units = job.split_n ? npanels : mpanels;
    double unit_flops = 2.0 * (double)g->k * (double)job.unit * (double)(job.split_n ? g->m : g->n);
    int64_t grain = (int64_t)(2e6 / unit_flops) + 1;
    qf_parallel_for(units, grain, QF_GN(slice), &job);
}
