/* Backward of Conv and ConvTranspose (float32 reference kernels, training):
 * dX, dW and dB from dY, X and W (bwd_in bits 0 and 1; Y is not read), on
 * the geometry and path the forward's prepare left in qf_conv_state.
 *
 * Conv, per batch item and group g (K = C/g * prod(k), P = output plane):
 *   dW_g (M/g x K) += dY_g (M/g x P) * im2col(X_g)^T    (X_g itself for 1x1)
 *   dX_g            = col2im(W_g^T (K x M/g) * dY_g)     (W_g^T dY_g for 1x1)
 * ConvTranspose (its forward is Conv's dX; K = M/g * prod(k), P = input
 * plane), with col = im2col(dY_g) (K x P) over the geometry with input and
 * output swapped:
 *   dX_g (C/g x P)  = W_g (C/g x K) * col                (a Conv of dY with W)
 *   dW_g (C/g x K) += X_g (C/g x P) * col^T
 * and for both dB = the sum of dY over batch and plane. A depthwise Conv
 * (one input channel per group) runs direct loops instead, as its forward:
 * dX scatters every tap of dY back into the input plane, dW correlates dY
 * with the shifted input; with stride 1 over zero-padded planes, one flat
 * dot (dW) and one flat axpy (dX) per tap (cb_flat_dims).
 *
 * Threads (core/parallel.h): the batch is split into one slot per thread,
 * each with its own column buffer and (past the first slot, which writes
 * into dW / dB themselves) its own partial dW and dB, summed at the end; the
 * products run on the slot's thread (qf_sgemm_serial). Over a short plane a
 * slot keeps its dW transposed (cb_dw_item). A batch too small to split
 * evenly runs item after item, each product threaded by qf_sgemm. The
 * depthwise loops split the input channels (stride 1), or the input planes
 * (dX) and the output channels (dW, dB).
 * Scratch (qf_conv_bwd_scratch, from the thread count at plan build; the
 * kernel uses fewer slots if it was given less) holds the column buffers
 * and partial sums: the kernels never allocate.
 */
#include <string.h>

#include "core/parallel.h"
#include "ops/ref/conv.h"
#include "ops/math/gemm.h"

/* How the work is split and what scratch it takes (floats). */
typedef struct cb_plan {
    bool depthwise;   /* Conv's direct loops */
    bool pointwise;   /* 1x1, stride 1, no pads: no column buffer */
    bool flat;        /* depthwise with stride 1: padded planes, one loop per tap */
    int64_t slots;    /* batch slices (GEMM paths) or channel slices (depthwise dW) */
    int64_t col;      /* floats of one slot's column buffer (depthwise: its tap accumulators) */
    bool wt;          /* partial dW kept transposed, one per slot (see cb_conv_item) */
    int64_t part;     /* floats of one partial dW + dB (slots past the first, every slot with wt) */
    size_t bytes;     /* scratch; SIZE_MAX when it does not fit */
} cb_plan;

static bool cb_is_pointwise(const qf_spatial *l)
{
    for (int i = 0; i < QF_SPATIAL_MAX; i++)
        if (l->kernel[i] != 1 || l->stride[i] != 1 || l->pad_begin[i] != 0 || l->pad_end[i] != 0) return false;
    return true;
}

/* The padded planes of a stride-1 depthwise conv: X with its pads on every
 * axis, (D, H, W) = in + pad_begin + pad_end = out + (k - 1) * dilation, and
 * dY and dX in the same row and plane pitch. Then tap t reads X at one flat
 * offset from each output position, and the positions of one plane are one
 * run of `run` elements (the pitch's extra columns of dY held at zero):
 *   dW[t] = sum_q dYp[q] Xp[q + off_t],   dXp[q + off_t] += W[t] dYp[q].
 * -1 when a size overflows. */
static int64_t cb_flat_dims(const qf_spatial *l, int64_t dims[3])
{
    for (int i = 0; i < QF_SPATIAL_MAX; i++) dims[i] = l->out[i] + (l->kernel[i] - 1) * l->dilation[i];
    int64_t hw, plane;
    if (!qf_i64_mul(dims[1], dims[2], &hw) || !qf_i64_mul(hw, dims[0], &plane)) return -1;
    return plane;
}

/* The vector loops run over whole blocks of CB_VEC floats: each padded
 * plane has that much zero slack at its end (dY's reads there add zeros). */
#define CB_VEC 16

/* Floats of one padded plane with its slack, a multiple of CB_VEC. */
static int64_t cb_flat_plane(const qf_spatial *l)
{
    int64_t dims[3], p = cb_flat_dims(l, dims);
    return p < 0 || p > INT64_MAX / 2 ? -1 : (p + 2 * CB_VEC - 1) / CB_VEC * CB_VEC;
}

/* Below this many multiply-adds a thread costs more than it saves. */
#define CB_MIN_WORK 65536

static void cb_plan_make(const qf_conv_geom *cg, qf_conv_path path, int64_t threads, cb_plan *p)
{
    memset(p, 0, sizeof *p);
    if (cg->n < 0 || cg->k < 0 || cg->in_plane < 0 || cg->out_plane < 0 || cg->m < 0 || cg->c < 0) return;
    p->depthwise = !cg->transpose && path == QF_CONV_PATH_DEPTHWISE;
    p->pointwise = cg->transpose ? cb_is_pointwise(&cg->l) : path == QF_CONV_PATH_POINTWISE;
    double work = (double)cg->n * (double)cg->m * (double)cg->out_plane * (double)cg->ksize;
    if (work < CB_MIN_WORK) threads = 1;
    int64_t slots = 1, col = 0, part = 0;
    bool ok = true;
    if (p->depthwise) {
        p->flat = true;
        for (int i = 0; i < QF_SPATIAL_MAX; i++) p->flat = p->flat && cg->l.stride[i] == 1;
        if (p->flat) {
            /* One slot per thread over the input channels; each holds three
             * padded planes (X, dY, dX). */
            slots = threads < cg->c ? threads : cg->c;
            int64_t plane = cb_flat_plane(&cg->l), lanes = 0;
            ok = plane >= 0 && qf_i64_mul(3, plane, &col) && qf_i64_mul(cg->mg * CB_VEC, cg->ksize, &lanes) &&
                 qf_i64_add(col, lanes, &col);
        } else {
            /* One slot per thread over the output channels; each accumulates
             * every tap along one output row. */
            slots = threads < cg->m ? threads : cg->m;
            ok = qf_i64_mul(cg->ksize, cg->l.out[2], &col);
        }
    } else {
        /* An uneven split of a small batch leaves a thread idle most of the
         * time: then each product threads itself instead. */
        slots = threads < cg->n ? threads : cg->n;
        if (slots > 1 && cg->n % slots != 0 && cg->n < 4 * slots) slots = 1;
        if (!p->pointwise) ok = qf_i64_mul(cg->k, cg->transpose ? cg->in_plane : cg->out_plane, &col);
        int64_t wrows = cg->transpose ? cg->c : cg->m;
        ok = ok && qf_i64_mul(wrows, cg->k, &part) && qf_i64_add(part, cg->m, &part);
        p->wt = slots > 1 && (cg->transpose ? cg->in_plane : cg->out_plane) < QF_SGEMM_DOT_MIN_K;
    }
    if (slots < 1) slots = 1;
    int64_t a = 0, b = 0, floats = 0;
    ok = ok && qf_i64_mul(slots, col, &a) && qf_i64_mul(p->wt ? slots : slots - 1, part, &b) &&
         qf_i64_add(a, b, &floats) &&
         floats <= (int64_t)(SIZE_MAX / sizeof(float));
    p->slots = slots;
    p->col = col;
    p->part = part;
    p->bytes = ok ? (size_t)floats * sizeof(float) : SIZE_MAX;
}

size_t qf_conv_bwd_scratch(const qf_node *n, const void *state)
{
    (void)n;
    if (!state) return 0;
    const qf_conv_state *st = state;
    cb_plan p;
    cb_plan_make(&st->geom, st->path, qf_parallel_threads(), &p);
    return p.bytes;
}

/* sum(p[0 .. n-1]): eight float lanes (they vectorize), then double. */
static double cb_sum(const float *restrict p, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += p[i + j];
    double s = 0.0;
    for (; i < n; i++) s += p[i];
    for (int j = 0; j < 8; j++) s += acc[j];
    return s;
}

/* acc[r] += the sum of row r of `rows` rows of `plane` floats. */
static void cb_add_row_sums(const float *y, int64_t rows, int64_t plane, float *acc)
{
    for (int64_t r = 0; r < rows; r++) acc[r] += (float)cb_sum(y + r * plane, plane);
}

static void cb_zero(float *p, int64_t n)
{
    if (p && n > 0) memset(p, 0, sizeof *p * (size_t)n);
}

/* --- the GEMM paths (Conv im2col / 1x1, every ConvTranspose) -------------- */

typedef struct cb_job {
    const qf_node *node;
    const qf_conv_geom *cg;
    qf_spatial swapped;   /* cg->l with input and output sizes exchanged */
    bool pointwise, wt;
    const float *x, *w, *dy;
    float *dx, *dw, *db;  /* NULL: not wanted */
    float *scratch;
    int64_t slots, col, part;
    qf_status st;         /* the first qf_sgemm error (one slot only) */
} cb_job;

/* Several slots: each product on its slot's thread; one: qf_sgemm threads it. */
static void cb_gemm(cb_job *j, const qf_sgemm_args *a)
{
    if (j->slots > 1) qf_sgemm_serial(a);
    else if (j->st == QF_OK) j->st = qf_sgemm(j->node, a);
}

/* dW_g of one item into pw (beta 0 for the slot's first item): A (R rows:
 * dY_g for a Conv, X_g for a ConvTranspose) times the column matrix colm (K
 * rows), both along the plane P. Over a long plane, dW_g (R x K) = A colm^T
 * is a set of dot products (qf_sgemm_serial's); over a short one their
 * lane sums would cost more than the products, and with `wt` the slot keeps
 * dW_g^T (K x R) = colm A^T instead, a packed GEMM with full panels (K a
 * multiple of the kernel size, R the channels), transposed once at the
 * end. */
static void cb_dw_item(cb_job *j, const float *a, int64_t R, const float *colm, int64_t K, int64_t P, float *pw,
                       int64_t g, float beta)
{
    if (j->wt)
        cb_gemm(j, &(qf_sgemm_args){.tb = true, .m = K, .n = R, .k = P, .alpha = 1.0f, .a = colm, .lda = P,
                                    .b = a, .ldb = P, .beta = beta, .c = pw + g * K * R, .ldc = R});
    else
        cb_gemm(j, &(qf_sgemm_args){.tb = true, .m = R, .n = K, .k = P, .alpha = 1.0f, .a = a, .lda = P,
                                    .b = colm, .ldb = P, .beta = beta, .c = pw + g * R * K, .ldc = K});
}

/* Conv, batch item bn, group g: dW_g (pw, beta 0 for the slot's first item)
 * and dX_g. */
static void cb_conv_item(cb_job *j, int64_t bn, int64_t g, float *col, float *pw, float beta)
{
    const qf_conv_geom *cg = j->cg;
    const int64_t P = cg->out_plane, K = cg->k, Mg = cg->mg;
    const float *xg = j->x + (bn * cg->c + g * cg->cg) * cg->in_plane;
    const float *dyg = j->dy + (bn * cg->m + g * Mg) * P;
    if (pw) {
        const float *colm = xg;
        if (!j->pointwise) {
            qf_conv_im2col3(xg, cg->cg, &cg->l, col);
            colm = col;
        }
        cb_dw_item(j, dyg, Mg, colm, K, P, pw, g, beta);
    }
    if (j->dx) {
        float *dxg = j->dx + (bn * cg->c + g * cg->cg) * cg->in_plane;
        const float *wg = j->w + g * Mg * K;
        /* 1x1: K = C/g and P is the input plane, so W_g^T dY_g is dX_g. */
        float *dst = j->pointwise ? dxg : col;
        cb_gemm(j, &(qf_sgemm_args){.ta = true, .m = K, .n = P, .k = Mg, .alpha = 1.0f, .a = wg, .lda = K,
                                    .b = dyg, .ldb = P, .c = dst, .ldc = P});
        if (!j->pointwise) {
            cb_zero(dxg, cg->cg * cg->in_plane);
            qf_conv_col2im3(col, cg->cg, &j->swapped, dxg);
        }
    }
}

/* ConvTranspose, batch item bn, group g. */
static void cb_convt_item(cb_job *j, int64_t bn, int64_t g, float *col, float *pw, float beta)
{
    const qf_conv_geom *cg = j->cg;
    const int64_t P = cg->in_plane, K = cg->k, Cg = cg->cg, Mg = cg->mg;
    const float *xg = j->x + (bn * cg->c + g * Cg) * P;
    const float *dyg = j->dy + (bn * cg->m + g * Mg) * cg->out_plane;
    /* 1x1: K = M/g and the output plane is P, so dY_g is the column matrix. */
    const float *colm = dyg;
    if (!j->pointwise) {
        qf_conv_im2col3(dyg, Mg, &j->swapped, col);
        colm = col;
    }
    if (pw) cb_dw_item(j, xg, Cg, colm, K, P, pw, g, beta);
    if (j->dx)
        cb_gemm(j, &(qf_sgemm_args){.m = Cg, .n = P, .k = K, .alpha = 1.0f, .a = j->w + g * Cg * K, .lda = K,
                                    .b = colm, .ldb = P, .c = j->dx + (bn * cg->c + g * Cg) * P, .ldc = P});
}

/* Slots lo..hi-1: each its share of the batch, into its own partial sums. */
static void cb_slot(void *ctx, int64_t lo, int64_t hi)
{
    cb_job *j = ctx;
    const qf_conv_geom *cg = j->cg;
    for (int64_t s = lo; s < hi; s++) {
        int64_t b0 = cg->n * s / j->slots, b1 = cg->n * (s + 1) / j->slots;
        float *col = j->scratch ? j->scratch + s * j->col : NULL;
        float *part = s == 0 && !j->wt ? NULL : j->scratch + j->slots * j->col + (j->wt ? s : s - 1) * j->part;
        float *pw = j->dw ? (part ? part : j->dw) : NULL;
        float *pb = j->db ? (part ? part + j->part - cg->m : j->db) : NULL;
        cb_zero(pb, cg->m);
        for (int64_t bn = b0; bn < b1; bn++) {
            float beta = bn == b0 ? 0.0f : 1.0f;
            for (int64_t g = 0; g < cg->group; g++) {
                if (cg->transpose) cb_convt_item(j, bn, g, col, pw, beta);
                else cb_conv_item(j, bn, g, col, pw, beta);
            }
            if (pb) cb_add_row_sums(j->dy + bn * cg->m * cg->out_plane, cg->m, cg->out_plane, pb);
        }
    }
}

static qf_status cb_gemm_paths(cb_job *j, int64_t wsize)
{
    qf_parallel_for(j->slots, 1, cb_slot, j);
    QF_TRY(j->st);
    const qf_conv_geom *cg = j->cg;
    const float *parts = j->scratch + j->slots * j->col;
    if (j->wt) {
        /* Every slot's dW_g^T (K x R), summed and transposed into dW_g. */
        const int64_t R = cg->transpose ? cg->cg : cg->mg, K = cg->k;
        if (j->dw)
            for (int64_t g = 0; g < cg->group; g++)
                for (int64_t r = 0; r < R; r++)
                    for (int64_t kk = 0; kk < K; kk++) {
                        float sum = 0.0f;
                        for (int64_t s = 0; s < j->slots; s++) sum += parts[s * j->part + (g * K + kk) * R + r];
                        j->dw[(g * R + r) * K + kk] = sum;
                    }
        if (j->db)
            for (int64_t i = 0; i < cg->m; i++) {
                float sum = 0.0f;
                for (int64_t s = 0; s < j->slots; s++) sum += parts[s * j->part + j->part - cg->m + i];
                j->db[i] = sum;
            }
        return QF_OK;
    }
    for (int64_t s = 1; s < j->slots; s++) {
        const float *part = parts + (s - 1) * j->part;
        if (j->dw)
            for (int64_t i = 0; i < wsize; i++) j->dw[i] += part[i];
        if (j->db)
            for (int64_t i = 0; i < cg->m; i++) j->db[i] += part[j->part - cg->m + i];
    }
    return QF_OK;
}

/* --- depthwise Conv: direct loops ----------------------------------------- */

typedef struct cb_dw_job {
    const qf_conv_geom *cg;
    const float *x, *w, *dy;
    float *dx, *dw, *db;
    float *scratch;
    int64_t slots, col;
} cb_dw_job;

/* The flat loops, compiled for AVX-512, AVX2 and the baseline and picked
 * at run time as gemm.c does (GCC / Clang vector extensions); n is a
 * multiple of CB_VEC. dot: lanes[l] += the sum of a[i] b[i] over the i of
 * lane l (the lanes are summed once, after the whole batch); axpy: y[i] +=
 * alpha x[i]. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CB_X86 1
#else
#define CB_X86 0
#endif
#define CB_FLAT_KERNELS(sfx, attr, VW)                                                      \
    attr static void cb_dot_##sfx(float *restrict lanes, const float *restrict a, const float *restrict b, int64_t n) \
    {                                                                                       \
        typedef float vec __attribute__((vector_size((VW) * sizeof(float))));               \
        vec s0 = {0}, s1 = {0};                                                             \
        int64_t i = 0;                                                                      \
        for (; i + 2 * (VW) <= n; i += 2 * (VW)) {                                          \
            vec a0, a1, b0, b1;                                                             \
            memcpy(&a0, a + i, sizeof a0);                                                  \
            memcpy(&a1, a + i + (VW), sizeof a1);                                           \
            memcpy(&b0, b + i, sizeof b0);                                                  \
            memcpy(&b1, b + i + (VW), sizeof b1);                                           \
            s0 += a0 * b0;                                                                  \
            s1 += a1 * b1;                                                                  \
        }                                                                                   \
        for (; i < n; i += (VW)) {                                                          \
            vec a0, b0;                                                                     \
            memcpy(&a0, a + i, sizeof a0);                                                  \
            memcpy(&b0, b + i, sizeof b0);                                                  \
            s0 += a0 * b0;                                                                  \
        }                                                                                   \
        vec acc;                                                                            \
        memcpy(&acc, lanes, sizeof acc);                                                    \
        acc += s0 + s1;                                                                     \
        memcpy(lanes, &acc, sizeof acc);                                                    \
    }                                                                                       \
    attr static void cb_axpy_##sfx(float *restrict y, float alpha, const float *restrict x, int64_t n) \
    {                                                                                       \
        for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];                               \
    }
#if CB_X86
CB_FLAT_KERNELS(avx512, __attribute__((target("avx512f"))), 16)
CB_FLAT_KERNELS(avx2, __attribute__((target("avx2,fma"))), 8)
#endif
CB_FLAT_KERNELS(generic, , 4)
#undef CB_FLAT_KERNELS

typedef struct cb_flat_fns {
    void (*dot)(float *restrict, const float *restrict, const float *restrict, int64_t);
    void (*axpy)(float *restrict, float, const float *restrict, int64_t);
} cb_flat_fns;

static cb_flat_fns cb_flat_pick(void)
{
#if CB_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return (cb_flat_fns){cb_dot_avx512, cb_axpy_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return (cb_flat_fns){cb_dot_avx2, cb_axpy_avx2};
#endif
    return (cb_flat_fns){cb_dot_generic, cb_axpy_generic};
}

/* The rows of plane `small` (dims ds) into the padded plane `big` (dims
 * dp) at offset `at`. */
static void cb_flat_in(float *restrict big, const int64_t dp[3], const int64_t at[3], const float *restrict small,
                       const int64_t ds[3])
{
    for (int64_t z = 0; z < ds[0]; z++)
        for (int64_t y = 0; y < ds[1]; y++)
            qf_conv_copy_row(big + ((z + at[0]) * dp[1] + y + at[1]) * dp[2] + at[2], small + (z * ds[1] + y) * ds[2], ds[2]);
}

/* The other way: the block of `big` at `at` out into `small`. */
static void cb_flat_out(const float *restrict big, const int64_t dp[3], const int64_t at[3], float *restrict small,
                        const int64_t ds[3])
{
    for (int64_t z = 0; z < ds[0]; z++)
        for (int64_t y = 0; y < ds[1]; y++)
            qf_conv_copy_row(small + (z * ds[1] + y) * ds[2], big + ((z + at[0]) * dp[1] + y + at[1]) * dp[2] + at[2], ds[2]);
}

/* Slots lo..hi-1 of the stride-1 depthwise backward: every gradient of
 * their share of the input channels (dX planes, and dW / dB of the output
 * channels reading them), over padded planes. */
static void cb_dw_flat_slot(void *ctx, int64_t lo, int64_t hi)
{
    const cb_dw_job *j = ctx;
    const qf_conv_geom *cg = j->cg;
    const qf_spatial *l = &cg->l;
    int64_t dp[3];
    cb_flat_dims(l, dp);
    const int64_t plane = cb_flat_plane(l);
    const cb_flat_fns fn = cb_flat_pick();
    const int64_t din[3] = {l->in[0], l->in[1], l->in[2]}, dout[3] = {l->out[0], l->out[1], l->out[2]};
    const int64_t pb[3] = {l->pad_begin[0], l->pad_begin[1], l->pad_begin[2]}, zero[3] = {0, 0, 0};
    /* The positions of a plane, to whole vectors: past the last one dY is
     * zero (slack), so the extra products add nothing. */
    int64_t run = ((dout[0] - 1) * dp[1] + dout[1] - 1) * dp[2] + dout[2];
    run = (run + CB_VEC - 1) / CB_VEC * CB_VEC;
    for (int64_t s = lo; s < hi; s++) {
        float *xp = j->scratch + s * j->col, *yp = xp + plane, *dxp = yp + plane, *lanes = dxp + plane;
        /* The pads of X and the pitch columns of dY stay zero: only the
         * interiors are copied over. */
        memset(xp, 0, sizeof *xp * (size_t)(2 * plane));
        for (int64_t c = cg->c * s / j->slots; c < cg->c * (s + 1) / j->slots; c++) {
            const int64_t co0 = c * cg->mg;
            if (j->dw) cb_zero(lanes, cg->mg * cg->ksize * CB_VEC);
            if (j->db)
                for (int64_t i = 0; i < cg->mg; i++) j->db[co0 + i] = 0.0f;
            for (int64_t bn = 0; bn < cg->n; bn++) {
                if (j->dw) cb_flat_in(xp, dp, pb, j->x + (bn * cg->c + c) * cg->in_plane, din);
                if (j->dx) memset(dxp, 0, sizeof *dxp * (size_t)plane);
                for (int64_t co = co0; co < co0 + cg->mg; co++) {
                    const float *dyc = j->dy + (bn * cg->m + co) * cg->out_plane;
                    cb_flat_in(yp, dp, zero, dyc, dout);
                    const float *wk = j->w + co * cg->ksize;
                    float *lk = j->dw ? lanes + (co - co0) * cg->ksize * CB_VEC : NULL;
                    int64_t t = 0;
                    for (int64_t kd = 0; kd < l->kernel[0]; kd++)
                        for (int64_t kh = 0; kh < l->kernel[1]; kh++)
                            for (int64_t kw = 0; kw < l->kernel[2]; kw++, t++) {
                                int64_t o = ((kd * l->dilation[0]) * dp[1] + kh * l->dilation[1]) * dp[2] +
                                            kw * l->dilation[2];
                                if (lk) fn.dot(lk + t * CB_VEC, yp, xp + o, run);
                                if (j->dx) fn.axpy(dxp + o, wk[t], yp, run);
                            }
                    if (j->db) j->db[co] += (float)cb_sum(dyc, cg->out_plane);
                }
                if (j->dx) cb_flat_out(dxp, dp, pb, j->dx + (bn * cg->c + c) * cg->in_plane, din);
            }
            if (j->dw)
                for (int64_t i = 0; i < cg->mg * cg->ksize; i++)
                    j->dw[co0 * cg->ksize + i] = (float)cb_sum(lanes + i * CB_VEC, CB_VEC);
        }
    }
}

/* dxp += every tap of wk times dyp, scattered back to the input positions it
 * read (the adjoint of the forward's dw_plane). */
static void cb_dw_scatter(const qf_conv_geom *cg, const float *restrict dyp, const float *restrict wk,
                          float *restrict dxp)
{
    const qf_spatial *l = &cg->l;
    const int64_t IH = l->in[1], IW = l->in[2];
    const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2], sw = l->stride[2];
    for (int64_t kd = 0; kd < l->kernel[0]; kd++)
        for (int64_t kh = 0; kh < l->kernel[1]; kh++)
            for (int64_t kw = 0; kw < l->kernel[2]; kw++) {
                const float wv = *wk++;
                int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;
                qf_conv_tap_range(offw, sw, IW, OW, &lo, &hi);
                for (int64_t od = 0; od < OD; od++) {
                    int64_t id = od * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];
                    if (id < 0 || id >= l->in[0]) continue;
                    for (int64_t oh = 0; oh < OH; oh++) {
                        int64_t ih = oh * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];
                        if (ih < 0 || ih >= IH) continue;
                        float *restrict xr = dxp + (id * IH + ih) * IW + offw;
                        const float *restrict yr = dyp + (od * OH + oh) * OW;
                        if (sw == 1) {
                            for (int64_t ow = lo; ow < hi; ow++) xr[ow] += wv * yr[ow];
                        } else {
                            for (int64_t ow = lo; ow < hi; ow++) xr[ow * sw] += wv * yr[ow];
                        }
                    }
                }
            }
}

/* Input planes lo..hi-1 of the flattened (batch, input channel) index. */
static void cb_dw_dx_slice(void *ctx, int64_t lo, int64_t hi)
{
    const cb_dw_job *j = ctx;
    const qf_conv_geom *cg = j->cg;
    for (int64_t p = lo; p < hi; p++) {
        int64_t bn = p / cg->c, c = p % cg->c;
        float *dxp = j->dx + p * cg->in_plane;
        cb_zero(dxp, cg->in_plane);
        for (int64_t co = c * cg->mg; co < (c + 1) * cg->mg; co++)
            cb_dw_scatter(cg, j->dy + (bn * cg->m + co) * cg->out_plane, j->w + co * cg->ksize, dxp);
    }
}

/* acc[tap][ow] += dY row times the input row that tap read: every tap's
 * products along the output rows, summed into dW once at the end. */
static void cb_dw_taps(const qf_conv_geom *cg, const float *restrict xp, const float *restrict dyp,
                       float *restrict acc)
{
    const qf_spatial *l = &cg->l;
    const int64_t IH = l->in[1], IW = l->in[2];
    const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2], sw = l->stride[2];
    for (int64_t kd = 0; kd < l->kernel[0]; kd++)
        for (int64_t kh = 0; kh < l->kernel[1]; kh++)
            for (int64_t kw = 0; kw < l->kernel[2]; kw++, acc += OW) {
                int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;
                qf_conv_tap_range(offw, sw, IW, OW, &lo, &hi);
                for (int64_t od = 0; od < OD; od++) {
                    int64_t id = od * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];
                    if (id < 0 || id >= l->in[0]) continue;
                    for (int64_t oh = 0; oh < OH; oh++) {
                        int64_t ih = oh * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];
                        if (ih < 0 || ih >= IH) continue;
                        const float *restrict xr = xp + (id * IH + ih) * IW + offw;
                        const float *restrict yr = dyp + (od * OH + oh) * OW;
                        if (sw == 1) {
                            for (int64_t ow = lo; ow < hi; ow++) acc[ow] += yr[ow] * xr[ow];
                        } else {
                            for (int64_t ow = lo; ow < hi; ow++) acc[ow] += yr[ow] * xr[ow * sw];
                        }
                    }
                }
            }
}

/* Slots lo..hi-1: dW and dB of their share of the output channels. */
static void cb_dw_dw_slot(void *ctx, int64_t lo, int64_t hi)
{
    const cb_dw_job *j = ctx;
    const qf_conv_geom *cg = j->cg;
    const int64_t OW = cg->l.out[2];
    for (int64_t s = lo; s < hi; s++) {
        float *acc = j->scratch + s * j->col;
        for (int64_t co = cg->m * s / j->slots; co < cg->m * (s + 1) / j->slots; co++) {
            const int64_t c = co / cg->mg;
            if (j->dw) {
                cb_zero(acc, j->col);
                for (int64_t bn = 0; bn < cg->n; bn++)
                    cb_dw_taps(cg, j->x + (bn * cg->c + c) * cg->in_plane, j->dy + (bn * cg->m + co) * cg->out_plane,
                               acc);
                for (int64_t t = 0; t < cg->ksize; t++) j->dw[co * cg->ksize + t] = (float)cb_sum(acc + t * OW, OW);
            }
            if (j->db) {
                double sum = 0.0;
                for (int64_t bn = 0; bn < cg->n; bn++)
                    sum += cb_sum(j->dy + (bn * cg->m + co) * cg->out_plane, cg->out_plane);
                j->db[co] = (float)sum;
            }
        }
    }
}

static void cb_depthwise(const cb_dw_job *j, bool flat)
{
    const qf_conv_geom *cg = j->cg;
    if (flat) {
        qf_parallel_for(j->slots, 1, cb_dw_flat_slot, (void *)j);
        return;
    }
    if (j->dx) {
        int64_t per_plane = cg->out_plane * cg->ksize * cg->mg;
        int64_t grain = per_plane > 0 ? 16384 / per_plane + 1 : 1;
        qf_parallel_for(cg->n * cg->c, grain, cb_dw_dx_slice, (void *)j);
    }
    if (j->dw || j->db) qf_parallel_for(j->slots, 1, cb_dw_dw_slot, (void *)j);
}

/* --- the kernels ---------------------------------------------------------- */

static float *cb_din(const qf_kernel_io *io, int i)
{
    return i < io->nin && io->din[i] ? io->din[i]->data : NULL;
}

static qf_status cb_backward(const qf_kernel_io *io)
{
    const qf_conv_state *st = io->state;
    const qf_conv_geom *cg = &st->geom;
    float *dx = cb_din(io, 0), *dw = cb_din(io, 1), *db = cb_din(io, 2);
    if (!dx && !dw && !db) return QF_OK;
    const int64_t xsize = cg->n * cg->c * cg->in_plane;
    const int64_t wsize = (cg->transpose ? cg->c : cg->m) * cg->k;
    const float *dy = io->dout[0] ? io->dout[0]->data : NULL;
    /* No gradient reaches Y, or an empty operand: every product is empty,
     * and dB is what dY sums to. */
    if (!dy || cg->n == 0 || cg->out_plane == 0 || cg->m == 0 || cg->k == 0 || cg->in_plane == 0 || cg->cg == 0) {
        cb_zero(dx, xsize);
        cb_zero(dw, wsize);
        cb_zero(db, cg->m);
        if (dy && db)
            for (int64_t bn = 0; bn < cg->n; bn++) cb_add_row_sums(dy + bn * cg->m * cg->out_plane, cg->m, cg->out_plane, db);
        return QF_OK;
    }
    /* The most slots the scratch holds (it was sized for the thread count
     * at plan build). */
    cb_plan p;
    for (int64_t t = qf_parallel_threads();; t--) {
        cb_plan_make(cg, st->path, t, &p);
        if (p.bytes <= io->scratch_size || t <= 1) break;
    }
    if (p.bytes > io->scratch_size)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): backward scratch of %zu bytes, the kernel needs %zu",
                        io->node->name, qf_op_label(io->node), io->scratch_size, p.bytes);
    const float *x = io->in[0]->data, *w = io->in[1]->data;
    if (p.depthwise) {
        cb_dw_job j = {cg, x, w, dy, dx, dw, db, io->scratch, p.slots, p.col};
        cb_depthwise(&j, p.flat);
        return QF_OK;
    }
    cb_job j = {.node = io->node, .cg = cg, .swapped = cg->l, .pointwise = p.pointwise, .wt = p.wt, .x = x, .w = w, .dy = dy,
                .dx = dx, .dw = dw, .db = db, .scratch = io->scratch, .slots = p.slots, .col = p.col,
                .part = p.part};
    for (int i = 0; i < QF_SPATIAL_MAX; i++) {
        j.swapped.in[i] = cg->l.out[i];
        j.swapped.out[i] = cg->l.in[i];
    }
    return cb_gemm_paths(&j, wsize);
}

/* dX [N, C, in...], dW [M, C/g, k...], dB [M] of a Conv. */
qf_status qf_conv_backward_f32(const qf_kernel_io *io) { return cb_backward(io); }

/* dX [N, C, in...], dW [C, M/g, k...], dB [M] of a ConvTranspose. */
qf_status qf_conv_transpose_backward_f32(const qf_kernel_io *io) { return cb_backward(io); }
