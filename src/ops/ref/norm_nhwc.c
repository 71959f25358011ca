/* BatchNormalization's channels-last training kernels (the training tape's
 * NHWC chains, see norm.c's header for the formulas): X, Y, dY and dX are
 * [P][C], P = N * spatial. Two splits over the threads, both independent of
 * the thread count: the channels (more than 64; each channel's sums in row
 * order) or, up to 64 channels, fixed chunks of rows. */
#include <string.h>

#include "core/parallel.h"
#include "ops/ref/norm_train.h"
#include "ops/math/vector.h"

/* --- channels-last (the training tape's NHWC chains) ----------------------------
 *
 * X is [P][C]. Each slice takes a range of channels (a multiple of 16 where
 * there are enough: whole cache lines per thread) and walks all P rows,
 * BN_CBLK (16) channels at a time, with one double accumulator per channel: a
 * channel's sum runs over its P values in row order (one chain per channel,
 * the chains of neighbouring channels side by side in a vector). */
#define BN_CBLK 16

static int64_t bn_nhwc_grain(int64_t rows, int64_t c)
{
    int64_t g = bn_grain(rows);
    if (c >= 32) g = (g + 15) / 16 * 16;
    return g;
}

/* One block of w <= BN_CBLK channels from c0. Inlined with w = BN_CBLK for
 * whole blocks, so that the accumulators stay in registers (with a variable
 * w they live on the stack, each row's add waiting on the last one's store). */
static inline __attribute__((always_inline)) void bn_stats_nhwc_block(const bn_job *j, int64_t c0, int64_t w)
{
    const int64_t rows = j->nb * j->inner, c = j->c;
    const double cnt = (double)rows;
    double s[BN_CBLK] = {0}, ss[BN_CBLK] = {0}, mu[BN_CBLK];
    for (int64_t r = 0; r < rows; r++) {
        const float *p = j->x + r * c + c0;
        for (int64_t k = 0; k < w; k++) s[k] += p[k];
    }
    for (int64_t k = 0; k < w; k++) mu[k] = s[k] / cnt;
    for (int64_t r = 0; r < rows; r++) {
        const float *p = j->x + r * c + c0;
        for (int64_t k = 0; k < w; k++) {
            const double d = p[k] - mu[k];
            ss[k] += d * d;
        }
    }
    for (int64_t k = 0; k < w; k++) {
        j->smean[c0 + k] = mu[k];
        j->sinv[c0 + k] = ss[k] / cnt;
    }
}

/* Rows r0..r1-1 of one block's y = x * af + df (relu'd when fused); inlined
 * with w = BN_CBLK and relu constant, as bn_stats_nhwc_block. Shared by the
 * channel split (every row) and the rows split (bn_raffine_block). */
static inline __attribute__((always_inline)) void bn_affine_rows(const bn_job *j, int64_t r0, int64_t r1, int64_t c0,
                                                                 int64_t w, const float *af, const float *df,
                                                                 const bool relu)
{
    const int64_t c = j->c;
    float a[BN_CBLK], d[BN_CBLK];
    for (int64_t k = 0; k < w; k++) {
        a[k] = af[k];
        d[k] = df[k];
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *p = j->x + r * c + c0;
        float *q = j->y + r * c + c0;
        if (relu)
            for (int64_t k = 0; k < w; k++) q[k] = bn_relu(p[k] * a[k] + d[k]);
        else
            for (int64_t k = 0; k < w; k++) q[k] = p[k] * a[k] + d[k];
    }
}

static inline __attribute__((always_inline)) void bn_affine_nhwc_block(const bn_job *j, int64_t c0, int64_t w,
                                                                       const float *af, const float *df,
                                                                       const bool relu)
{
    bn_affine_rows(j, 0, j->nb * j->inner, c0, w, af, df, relu);
}

static inline __attribute__((always_inline)) void bn_affine_nhwc_blocks(const bn_job *j, int64_t c0, int64_t w,
                                                                        const float *af, const float *df)
{
    if (w == BN_CBLK && j->relu)
        bn_affine_nhwc_block(j, c0, BN_CBLK, af, df, true);
    else if (w == BN_CBLK)
        bn_affine_nhwc_block(j, c0, BN_CBLK, af, df, false);
    else
        bn_affine_nhwc_block(j, c0, w, af, df, j->relu);
}

QF_VECTOR_CLONES static void bn_affine_nhwc_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_job *j = ctx;
    for (int64_t c0 = lo; c0 < hi; c0 += BN_CBLK) {
        const int64_t w = hi - c0 < BN_CBLK ? hi - c0 : BN_CBLK;
        float af[BN_CBLK], df[BN_CBLK];
        for (int64_t k = 0; k < w; k++) bn_coef(j, c0 + k, &af[k], &df[k]);
        bn_affine_nhwc_blocks(j, c0, w, af, df);
    }
}

/* The training forward in one pass over the threads: each block's
 * statistics, then its affine with the batch statistics while the block's
 * columns of X are still in cache (a block of 16 channels of ds_cnn's
 * 64 x 25 x 5 x 64 activations is 512 KB). smean / sinv get the mean and the
 * biased variance as bn_stats_nhwc_block's; a and d are bn_coef's with
 * sinv = 1/sqrt(var + eps), the expression bn_train_forward stores after
 * (so the same bits as the stats pass followed by the affine pass). A
 * variance + eps <= 0 makes that block's Y garbage; the caller reports it. */
QF_VECTOR_CLONES static void bn_train_nhwc_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_job *j = ctx;
    for (int64_t c0 = lo; c0 < hi; c0 += BN_CBLK) {
        const int64_t w = hi - c0 < BN_CBLK ? hi - c0 : BN_CBLK;
        if (w == BN_CBLK)
            bn_stats_nhwc_block(j, c0, BN_CBLK);
        else
            bn_stats_nhwc_block(j, c0, w);
        float af[BN_CBLK], df[BN_CBLK];
        for (int64_t k = 0; k < w; k++) {
            const int64_t ch = c0 + k;
            const double a = qf_tensor_get_f64(j->scale, ch) * (1.0 / sqrt(j->sinv[ch] + j->eps));
            af[k] = (float)a;
            df[k] = (float)(qf_tensor_get_f64(j->bias, ch) - j->smean[ch] * a);
        }
        bn_affine_nhwc_blocks(j, c0, w, af, df);
    }
}

/* relu: j->relu, as a constant of each inlined copy (with both loops in one
 * body GCC kept the fused loop's accumulators on the stack: each row's adds
 * waited on the last row's stores). */
static inline __attribute__((always_inline)) void bn_backward_nhwc_block(const bn_job *j, int64_t c0, int64_t w,
                                                                         const bool relu)
{
    const int64_t rows = j->nb * j->inner, c = j->c;
    const double cnt = (double)rows;
    double mu[BN_CBLK], inv[BN_CBLK], sum[BN_CBLK] = {0}, dotp[BN_CBLK] = {0};
    float a[BN_CBLK], gm[BN_CBLK], kk[BN_CBLK], muf[BN_CBLK], af[BN_CBLK], df[BN_CBLK];
    for (int64_t k = 0; k < w; k++) {
        const int64_t ch = c0 + k;
        if (relu) bn_coef(j, ch, &af[k], &df[k]);
        if (j->batch) {
            mu[k] = j->smean[ch];
            inv[k] = j->sinv[ch];
        } else {
            mu[k] = qf_tensor_get_f64(j->mean, ch);
            inv[k] = 1.0 / sqrt(qf_tensor_get_f64(j->var, ch) + j->eps);
        }
    }
    if (j->dy && relu)
        for (int64_t r = 0; r < rows; r++) {
            const float *p = j->x + r * c + c0, *g = j->dy + r * c + c0;
            for (int64_t k = 0; k < w; k++) {
                const float gv = g[k], gk = p[k] * af[k] + df[k] > 0.0f ? gv : 0.0f; /* as bn_sum_dot_relu */
                sum[k] += gk;
                dotp[k] += (p[k] - mu[k]) * gk;
            }
        }
    else if (j->dy)
        for (int64_t r = 0; r < rows; r++) {
            const float *p = j->x + r * c + c0, *g = j->dy + r * c + c0;
            for (int64_t k = 0; k < w; k++) {
                sum[k] += g[k];
                dotp[k] += (p[k] - mu[k]) * g[k];
            }
        }
    for (int64_t k = 0; k < w; k++) {
        const int64_t ch = c0 + k;
        const double gamma = qf_tensor_get_f64(j->scale, ch);
        if (j->dbias) j->dbias[ch] = (float)sum[k];
        if (j->dscale) j->dscale[ch] = (float)(dotp[k] * inv[k]);
        if (j->dmean) j->dmean[ch] = j->batch ? 0.0f : (float)(-sum[k] * gamma * inv[k]);
        if (j->dvar) j->dvar[ch] = j->batch ? 0.0f : (float)(-0.5 * dotp[k] * gamma * inv[k] * inv[k] * inv[k]);
        a[k] = (float)(gamma * inv[k]);
        gm[k] = j->batch ? (float)(sum[k] / cnt) : 0.0f;
        kk[k] = j->batch ? (float)(dotp[k] * inv[k] * inv[k] / cnt) : 0.0f;
        muf[k] = (float)mu[k];
    }
    if (!j->dx) return;
    for (int64_t r = 0; r < rows; r++) {
        const float *p = j->x + r * c + c0;
        float *q = j->dx + r * c + c0;
        if (!j->dy) {
            for (int64_t k = 0; k < w; k++) q[k] = 0.0f;
            continue;
        }
        const float *g = j->dy + r * c + c0;
        if (relu && j->batch)
            for (int64_t k = 0; k < w; k++) {
                const float gk = p[k] * af[k] + df[k] > 0.0f ? g[k] : 0.0f;
                q[k] = (gk - gm[k] - (p[k] - muf[k]) * kk[k]) * a[k];
            }
        else if (relu)
            for (int64_t k = 0; k < w; k++) q[k] = (p[k] * af[k] + df[k] > 0.0f ? g[k] : 0.0f) * a[k];
        else if (j->batch)
            for (int64_t k = 0; k < w; k++) q[k] = (g[k] - gm[k] - (p[k] - muf[k]) * kk[k]) * a[k];
        else
            for (int64_t k = 0; k < w; k++) q[k] = g[k] * a[k];
    }
}

QF_VECTOR_CLONES static void bn_backward_nhwc_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_job *j = ctx;
    for (int64_t c0 = lo; c0 < hi; c0 += BN_CBLK) {
        if (hi - c0 >= BN_CBLK && j->relu)
            bn_backward_nhwc_block(j, c0, BN_CBLK, true);
        else if (hi - c0 >= BN_CBLK)
            bn_backward_nhwc_block(j, c0, BN_CBLK, false);
        else if (j->relu)
            bn_backward_nhwc_block(j, c0, hi - c0, true);
        else
            bn_backward_nhwc_block(j, c0, hi - c0, false);
    }
}

/* --- channels-last with up to 64 channels: split the rows --------------------
 *
 * A channel split there gives each thread 32 channels or fewer: below 32,
 * fewer than 16 channels a block, every thread reading every cache line of X
 * (fashion_cnn's 16-channel 28x28 layers: 3.2 MB at batch 64); at 64
 * (ds_cnn's layers, 2 MB a tensor) each thread walks a column of 64 bytes
 * of every 256-byte row, twice for the backward's sums and d X, and the
 * column of X and dY (1 MB a block) does not stay in a 1 MB L2: the first
 * pass's loads stalled (perf: a third of bn_backward_nhwc_slice's samples on
 * one load). These split the rows instead: the sums run over BN_RCHUNKS
 * fixed chunks of rows (a fixed count, so the results do not depend on the
 * thread count), each chunk's partial sums per channel in double in row
 * order (a chunk's rows stay in L2 between its 16-channel blocks), the
 * chunks' sums added in chunk order; the elementwise passes (the affine,
 * d X) take contiguous ranges of rows. */
#define BN_RCHUNKS 16
#define BN_RMAXC 64

typedef struct bn_rjob {
    const bn_job *j;
    int64_t rows, nch;
    int pass; /* bn_rsum_slice: 0 sum x and the chunk's sum (x - chunk mean)^2, 2 sum g and sum (x - mu) g */
    double part[BN_RCHUNKS][2][BN_RMAXC];
    double mu[BN_RMAXC], inv[BN_RMAXC];
    float af[BN_RMAXC], df[BN_RMAXC], a[BN_RMAXC], gm[BN_RMAXC], kk[BN_RMAXC], muf[BN_RMAXC];
} bn_rjob;

static bool bn_rows_split(const bn_job *j)
{
    return j->c <= BN_RMAXC;
}

/* Chunk ch's sums over the channels c0..c0+w-1 (inlined with w = BN_CBLK:
 * the accumulators in registers, as bn_stats_nhwc_block). */
static inline __attribute__((always_inline)) void bn_rsum_block(bn_rjob *t, int64_t ch, int64_t c0, int64_t w,
                                                                const int pass, const bool relu)
{
    const bn_job *j = t->j;
    const int64_t c = j->c, r0 = t->rows * ch / t->nch, r1 = t->rows * (ch + 1) / t->nch;
    double s[BN_CBLK] = {0}, s2[BN_CBLK] = {0}, mu[BN_CBLK];
    float af[BN_CBLK], df[BN_CBLK];
    for (int64_t k = 0; k < w; k++) {
        mu[k] = t->mu[c0 + k];
        af[k] = t->af[c0 + k];
        df[k] = t->df[c0 + k];
    }
    if (pass == 0) {
        /* The chunk's sum, then its rows again (from L1: 64 bytes a row) for
         * the squares about the chunk's own mean (bn_rstats combines them). */
        for (int64_t r = r0; r < r1; r++) {
            const float *p = j->x + r * c + c0;
            for (int64_t k = 0; k < w; k++) s[k] += p[k];
        }
        for (int64_t k = 0; k < w; k++) mu[k] = s[k] / (double)(r1 - r0);
        for (int64_t r = r0; r < r1; r++) {
            const float *p = j->x + r * c + c0;
            for (int64_t k = 0; k < w; k++) {
                const double d = p[k] - mu[k];
                s2[k] += d * d;
            }
        }
    } else
        for (int64_t r = r0; r < r1; r++) {
            const float *p = j->x + r * c + c0, *g = j->dy + r * c + c0;
            for (int64_t k = 0; k < w; k++) {
                const float gv = g[k], gk = relu ? (p[k] * af[k] + df[k] > 0.0f ? gv : 0.0f) : gv;
                s[k] += gk;
                s2[k] += (p[k] - mu[k]) * gk;
            }
        }
    for (int64_t k = 0; k < w; k++) {
        t->part[ch][0][c0 + k] = s[k];
        t->part[ch][1][c0 + k] = s2[k];
    }
}

static inline __attribute__((always_inline)) void bn_rsum_chunk(bn_rjob *t, int64_t ch, const int pass, const bool relu)
{
    const int64_t c = t->j->c;
    for (int64_t c0 = 0; c0 < c; c0 += BN_CBLK) {
        if (c - c0 >= BN_CBLK)
            bn_rsum_block(t, ch, c0, BN_CBLK, pass, relu);
        else
            bn_rsum_block(t, ch, c0, c - c0, pass, relu);
    }
}

QF_VECTOR_CLONES static void bn_rsum_slice(void *ctx, int64_t lo, int64_t hi)
{
    bn_rjob *t = ctx;
    for (int64_t ch = lo; ch < hi; ch++) {
        if (t->pass == 0)
            bn_rsum_chunk(t, ch, 0, false);
        else if (t->j->relu)
            bn_rsum_chunk(t, ch, 2, true);
        else
            bn_rsum_chunk(t, ch, 2, false);
    }
}

/* One pass of sums over the chunks; the totals (chunk order) into s and s2. */
static void bn_rsum(bn_rjob *t, int pass, double *s, double *s2)
{
    const int64_t c = t->j->c;
    t->pass = pass;
    const int64_t per = (t->rows / t->nch) * c;
    qf_parallel_for(t->nch, per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1), bn_rsum_slice, t);
    for (int64_t k = 0; k < c; k++) {
        double a = 0.0, b = 0.0;
        for (int64_t ch = 0; ch < t->nch; ch++) {
            a += t->part[ch][0][k];
            b += t->part[ch][1][k];
        }
        s[k] = a;
        if (s2) s2[k] = b;
    }
}

static void bn_rjob_init(bn_rjob *t, const bn_job *j)
{
    memset(t, 0, sizeof *t);
    t->j = j;
    t->rows = j->nb * j->inner;
    t->nch = t->rows < BN_RCHUNKS ? (t->rows > 0 ? t->rows : 1) : BN_RCHUNKS;
}

static int64_t bn_rgrain(const bn_job *j)
{
    return 16384 / j->c + 1;
}

/* Rows lo..hi-1 of y = x * af + df (relu'd when fused). */
static inline __attribute__((always_inline)) void bn_raffine_block(const bn_rjob *t, int64_t lo, int64_t hi,
                                                                   int64_t c0, int64_t w, const bool relu)
{
    bn_affine_rows(t->j, lo, hi, c0, w, t->af + c0, t->df + c0, relu);
}

QF_VECTOR_CLONES static void bn_raffine_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_rjob *t = ctx;
    const int64_t c = t->j->c;
    for (int64_t c0 = 0; c0 < c; c0 += BN_CBLK) {
        const bool whole = c - c0 >= BN_CBLK;
        if (whole && t->j->relu)
            bn_raffine_block(t, lo, hi, c0, BN_CBLK, true);
        else if (whole)
            bn_raffine_block(t, lo, hi, c0, BN_CBLK, false);
        else if (t->j->relu)
            bn_raffine_block(t, lo, hi, c0, c - c0, true);
        else
            bn_raffine_block(t, lo, hi, c0, c - c0, false);
    }
}

/* The affine pass, rows split (a and d from bn_coef, as bn_affine_nhwc_slice). */
static void bn_raffine(const bn_job *j)
{
    bn_rjob t;
    bn_rjob_init(&t, j);
    for (int64_t ch = 0; ch < j->c; ch++) bn_coef(j, ch, &t.af[ch], &t.df[ch]);
    qf_parallel_for(t.rows, bn_rgrain(j), bn_raffine_slice, &t);
}

/* The batch mean into smean, the biased variance into sinv (as bn_stats_nhwc_block). */
static void bn_rstats(const bn_job *j)
{
    bn_rjob t;
    bn_rjob_init(&t, j);
    const double cnt = (double)t.rows;
    double s[BN_RMAXC];
    bn_rsum(&t, 0, s, NULL);
    /* One read of X: each chunk's sum of squares about its own mean m_k,
     * combined as sum_k (M2_k + n_k (m_k - mean)^2) (Chan, Golub and
     * LeVeque's pairwise update, exact in exact arithmetic; the chunk order
     * fixed), instead of a second pass over X about the batch mean. */
    for (int64_t k = 0; k < j->c; k++) {
        const double mu = s[k] / cnt;
        double m2 = 0.0;
        for (int64_t ch = 0; ch < t.nch; ch++) {
            const double n = (double)(t.rows * (ch + 1) / t.nch - t.rows * ch / t.nch), d = t.part[ch][0][k] / n - mu;
            m2 += t.part[ch][1][k] + n * d * d;
        }
        j->smean[k] = mu;
        j->sinv[k] = m2 / cnt;
    }
}

/* Rows lo..hi-1 of d X (as bn_backward_nhwc_block's last loop). */
static inline __attribute__((always_inline)) void bn_rdx_block(const bn_rjob *t, int64_t lo, int64_t hi, int64_t c0,
                                                               int64_t w, const bool relu, const bool batch)
{
    const bn_job *j = t->j;
    const int64_t c = j->c;
    float af[BN_CBLK], df[BN_CBLK], a[BN_CBLK], gm[BN_CBLK], kk[BN_CBLK], muf[BN_CBLK];
    for (int64_t k = 0; k < w; k++) {
        af[k] = t->af[c0 + k];
        df[k] = t->df[c0 + k];
        a[k] = t->a[c0 + k];
        gm[k] = t->gm[c0 + k];
        kk[k] = t->kk[c0 + k];
        muf[k] = t->muf[c0 + k];
    }
    for (int64_t r = lo; r < hi; r++) {
        const float *p = j->x + r * c + c0, *g = j->dy + r * c + c0;
        float *q = j->dx + r * c + c0;
        if (relu && batch)
            for (int64_t k = 0; k < w; k++) {
                const float gk = p[k] * af[k] + df[k] > 0.0f ? g[k] : 0.0f;
                q[k] = (gk - gm[k] - (p[k] - muf[k]) * kk[k]) * a[k];
            }
        else if (relu)
            for (int64_t k = 0; k < w; k++) q[k] = (p[k] * af[k] + df[k] > 0.0f ? g[k] : 0.0f) * a[k];
        else if (batch)
            for (int64_t k = 0; k < w; k++) q[k] = (g[k] - gm[k] - (p[k] - muf[k]) * kk[k]) * a[k];
        else
            for (int64_t k = 0; k < w; k++) q[k] = g[k] * a[k];
    }
}

static inline __attribute__((always_inline)) void bn_rdx_blocks(const bn_rjob *t, int64_t lo, int64_t hi,
                                                                const bool relu, const bool batch)
{
    const int64_t c = t->j->c;
    for (int64_t c0 = 0; c0 < c; c0 += BN_CBLK) {
        if (c - c0 >= BN_CBLK)
            bn_rdx_block(t, lo, hi, c0, BN_CBLK, relu, batch);
        else
            bn_rdx_block(t, lo, hi, c0, c - c0, relu, batch);
    }
}

QF_VECTOR_CLONES static void bn_rdx_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_rjob *t = ctx;
    if (t->j->relu && t->j->batch)
        bn_rdx_blocks(t, lo, hi, true, true);
    else if (t->j->relu)
        bn_rdx_blocks(t, lo, hi, true, false);
    else if (t->j->batch)
        bn_rdx_blocks(t, lo, hi, false, true);
    else
        bn_rdx_blocks(t, lo, hi, false, false);
}

/* The backward, rows split (the same formulas as bn_backward_nhwc_block). */
static void bn_rbackward(const bn_job *j)
{
    bn_rjob t;
    bn_rjob_init(&t, j);
    const double cnt = (double)t.rows;
    for (int64_t ch = 0; ch < j->c; ch++) {
        if (j->relu) bn_coef(j, ch, &t.af[ch], &t.df[ch]);
        if (j->batch) {
            t.mu[ch] = j->smean[ch];
            t.inv[ch] = j->sinv[ch];
        } else {
            t.mu[ch] = qf_tensor_get_f64(j->mean, ch);
            t.inv[ch] = 1.0 / sqrt(qf_tensor_get_f64(j->var, ch) + j->eps);
        }
    }
    double sum[BN_RMAXC] = {0}, dotp[BN_RMAXC] = {0};
    if (j->dy) bn_rsum(&t, 2, sum, dotp);
    for (int64_t ch = 0; ch < j->c; ch++) {
        const double gamma = qf_tensor_get_f64(j->scale, ch), inv = t.inv[ch];
        if (j->dbias) j->dbias[ch] = (float)sum[ch];
        if (j->dscale) j->dscale[ch] = (float)(dotp[ch] * inv);
        if (j->dmean) j->dmean[ch] = j->batch ? 0.0f : (float)(-sum[ch] * gamma * inv);
        if (j->dvar) j->dvar[ch] = j->batch ? 0.0f : (float)(-0.5 * dotp[ch] * gamma * inv * inv * inv);
        t.a[ch] = (float)(gamma * inv);
        t.gm[ch] = j->batch ? (float)(sum[ch] / cnt) : 0.0f;
        t.kk[ch] = j->batch ? (float)(dotp[ch] * inv * inv / cnt) : 0.0f;
        t.muf[ch] = (float)t.mu[ch];
    }
    if (!j->dx) return;
    if (!j->dy) {
        memset(j->dx, 0, (size_t)(t.rows * j->c) * sizeof(float));
        return;
    }
    qf_parallel_for(t.rows, bn_rgrain(j), bn_rdx_slice, &t);
}


bool bn_nhwc_train(const bn_job *j)
{
    if (bn_rows_split(j)) {
        bn_rstats(j);
        return false;
    }
    qf_parallel_for(j->c, bn_nhwc_grain(j->nb * j->inner, j->c), bn_train_nhwc_slice, (void *)j);
    return true;
}

void bn_nhwc_affine(const bn_job *j)
{
    if (bn_rows_split(j))
        bn_raffine(j);
    else
        qf_parallel_for(j->c, bn_nhwc_grain(j->nb * j->inner, j->c), bn_affine_nhwc_slice, (void *)j);
}

void bn_nhwc_backward(const bn_job *j)
{
    if (bn_rows_split(j))
        bn_rbackward(j);
    else
        qf_parallel_for(j->c, bn_nhwc_grain(j->nb * j->inner, j->c), bn_backward_nhwc_slice, (void *)j);
}
