/* The integer core of the int8 kernels (int8.h): widening, im2row, the
 * int16 GEMM and the two requantizations. Portable C written so that GCC
 * vectorizes the inner loops (the dot product becomes pmaddwd); no
 * allocation, every buffer is the caller's scratch.
 */
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/int8/int8.h"
#include "ops/math/quant_math.h"
#include "ops/math/requant.h"
#include "ops/math/vector.h"

int32_t qf_int8_range_abs(qf_dtype dt, int32_t zp)
{
    int32_t lo = dt == QF_DTYPE_U8 ? 0 : -128, hi = dt == QF_DTYPE_U8 ? 255 : 127;
    int64_t a = (int64_t)zp - lo, b = (int64_t)hi - zp;
    int64_t m = a > b ? a : b;
    return m < 0 ? 0 : (int32_t)(m > INT32_MAX ? INT32_MAX : m);
}

qf_status qf_int8_check_k(const qf_node *n, int64_t k, int32_t x_abs, int32_t w_abs)
{
    /* |partial sum| <= K * x_abs * w_abs; in int64 the product cannot
     * overflow for any K below 2^31 / 255^2 * 2^32. */
    int64_t per = (int64_t)x_abs * w_abs;
    if (k < 0 || per == 0) return QF_OK;
    int64_t kmax = INT32_MAX / per;
    if (k <= kmax) return QF_OK;
    return qf_error(QF_ERR_UNSUPPORTED,
                    "node '%s' (%s): reduction length K = %lld may overflow the int32 accumulator "
                    "(K * %d * %d > 2^31 - 1; at most K = %lld)",
                    n->name, qf_op_label(n), (long long)k, (int)x_abs, (int)w_abs, (long long)kmax);
}

float qf_int8_combined_scale(float x_scale, float w_scale, float y_scale)
{
    /* float32 throughout, as onnxruntime's QLinearConv / QLinearMatMul:
     * output_scales[i] = X_scale * W_scale[i] / Y_scale. volatile keeps the
     * compiler from contracting or reassociating it. */
    volatile float p = x_scale * w_scale;
    return p / y_scale;
}

qf_status qf_int8_requant_prepare_fixed(const qf_node *n, const double *real, int64_t channels, int64_t acc_bound,
                                        int32_t *multiplier, int32_t *shift)
{
    for (int64_t c = 0; c < channels; c++) {
        double m = real[c];
        if (!(m >= 0.0) || !isfinite(m))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): requantization scale %g of channel %lld is not a "
                            "finite number >= 0", n->name, qf_op_label(n), m, (long long)c);
        int s = 0;
        qf_quantize_multiplier(m, &multiplier[c], &s);
        shift[c] = s;
        if (!qf_requant_shift_fits(s, acc_bound))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): requantization scale %g of channel %lld is too "
                            "large for accumulators up to %lld (the fixed-point path needs |acc| * 2^%d < 2^31)",
                            n->name, qf_op_label(n), m, (long long)c, (long long)acc_bound, s);
    }
    return QF_OK;
}

/* --- requantization ------------------------------------------------------- */

static inline int64_t int8_channel(const qf_int8_requant *rq, int64_t ch0, int64_t r, int64_t c)
{
    if (!rq->per_channel) return 0;
    return rq->per_col ? c : ch0 + r;
}

void qf_int8_requant_float(const qf_int8_requant *rq, int64_t ch0, int64_t rows, int64_t cols, const int32_t *acc,
                           void *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *a = acc + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            int32_t q = qf_int8_requant_one_float(rq, int8_channel(rq, ch0, r, c), a[c]);
            if (rq->dtype == QF_DTYPE_U8) ((uint8_t *)y)[r * cols + c] = (uint8_t)q;
            else ((int8_t *)y)[r * cols + c] = (int8_t)q;
        }
    }
}

void qf_int8_requant_fixed(const qf_int8_requant *rq, int64_t ch0, int64_t rows, int64_t cols, const int32_t *acc,
                           void *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *a = acc + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            int32_t q = qf_int8_requant_one_fixed(rq, int8_channel(rq, ch0, r, c), a[c]);
            if (rq->dtype == QF_DTYPE_U8) ((uint8_t *)y)[r * cols + c] = (uint8_t)q;
            else ((int8_t *)y)[r * cols + c] = (int8_t)q;
        }
    }
}

/* (b) per column, fast: MultiplyByQuantizedMultiplier(v, qm, shift) is
 * RDBP(h, r) of h = SRDHM(v << l, qm) = floor(y + 1/2), y = (v << l) qm /
 * 2^31 (its nudge 1 - 2^30 for a negative product rounds ties up, toward
 * +inf, for either sign), l = max(shift, 0), r = max(-shift, 0); RDBP rounds
 * ties away from zero. Where |v << l| <
 * 2^22 the product (v << l) * (qm 2^-31) is exact in double (at most 53
 * significant bits), so y, its floor and fraction and h are exact in double
 * arithmetic, and RDBP is integer arithmetic: the same integers as
 * requant.h, vectorized (double and int32 lanes; AVX-512 / AVX2 clones).
 * Larger sums (rare: 2^22 is 128 K products at full scale) take
 * qf_int8_requant_one_fixed. real[c] = qm 2^-31 (exact in double). */
void qf_int8_requant_row_prepare(int64_t n, const int32_t *multiplier, double *real)
{
    for (int64_t c = 0; c < n; c++) real[c] = ldexp((double)multiplier[c], -31);
}

#define QF_INT8_REQUANT_ROW_(name, type)                                                                              \
    QF_VECTOR_CLONES static int name(int64_t n, const int32_t *restrict acc, const qf_int8_row_params *p,            \
                                     int32_t zp, int32_t lo, int32_t hi, type *restrict y, uint8_t *restrict exact)   \
    {                                                                                                                 \
        /* restrict, and the columns' arrays read once: the byte stores                                              \
         * may alias anything otherwise, and the loop would not vectorize. */                                         \
        const int32_t *restrict bias = p->bias, *restrict shift = p->shift;                                           \
        const double *restrict real = p->real;                                                                        \
        int any = 0;                                                                                                  \
        for (int64_t c = 0; c < n; c++) {                                                                             \
            const int32_t v = (int32_t)((uint32_t)acc[c] + (uint32_t)bias[c]);                                        \
            const int32_t sh = shift[c], left = sh > 0 ? sh : 0, right = sh > 0 ? 0 : -sh;                            \
            const int32_t vl = (int32_t)((uint32_t)v << left);                                                        \
            const int e = vl >= (1 << 22) || vl <= -(1 << 22);                                                        \
            /* a lane past 2^22 is recomputed in integers: compute 0 there, so   \
             * nothing below overflows */                                                                             \
            const double yv = (double)(e ? 0 : vl) * real[c]; /* exact: |vl| < 2^22, real has 31 bits */              \
            int32_t t = (int32_t)yv; /* toward zero; |yv| < 2^22 */                                                   \
            double fr = yv - (double)t;                                                                               \
            t -= fr < 0.0;                                                                                            \
            fr = fr < 0.0 ? fr + 1.0 : fr; /* floor and fraction, exact */                                            \
            const int32_t h = t + (fr >= 0.5); /* SRDHM: ties up, for either sign */                                  \
            const int32_t mask = (int32_t)((1u << right) - 1u), rem = h & mask, thr = (mask >> 1) + (h < 0);          \
            const int32_t q = (h >> right) + (rem > thr) + zp;                                                        \
            y[c] = (type)(q < lo ? lo : q > hi ? hi : q);                                                             \
            exact[c] = (uint8_t)e;                                                                                    \
            any |= e;                                                                                                 \
        }                                                                                                             \
        return any;                                                                                                   \
    }
QF_INT8_REQUANT_ROW_(int8_requant_row_s8, int8_t)
QF_INT8_REQUANT_ROW_(int8_requant_row_u8, uint8_t)
#undef QF_INT8_REQUANT_ROW_

static void int8_row_double(const qf_int8_requant *rq, int64_t n, const int32_t *acc,
                            const qf_int8_row_params *p, void *y)
{
    uint8_t exact[256];
    qf_int8_requant one = *rq;
    one.multiplier = p->multiplier;
    one.shift = p->shift;
    one.per_channel = true;
    for (int64_t c0 = 0; c0 < n; c0 += 256) {
        const int64_t k = n - c0 < 256 ? n - c0 : 256;
        qf_int8_row_params pc = {p->multiplier + c0, p->shift + c0, p->bias + c0, p->real + c0};
        int any = rq->dtype == QF_DTYPE_U8
                      ? int8_requant_row_u8(k, acc + c0, &pc, rq->zp, rq->lo, rq->hi, (uint8_t *)y + c0, exact)
                      : int8_requant_row_s8(k, acc + c0, &pc, rq->zp, rq->lo, rq->hi, (int8_t *)y + c0, exact);
        for (int64_t c = 0; any && c < k; c++) {
            if (!exact[c]) continue;
            const int32_t v = (int32_t)((uint32_t)acc[c0 + c] + (uint32_t)p->bias[c0 + c]);
            const int32_t q = qf_int8_requant_one_fixed(&one, c0 + c, v);
            if (rq->dtype == QF_DTYPE_U8) ((uint8_t *)y)[c0 + c] = (uint8_t)q;
            else ((int8_t *)y)[c0 + c] = (int8_t)q;
        }
    }
}

/* The integer implementations: requant.h's MultiplyByQuantizedMultiplier
 * lane for lane, exact for every int32 sum (no fallback).
 *   - v = acc + bias (wrapping), vl = v << l (as uint32: wrapping, as
 *     requant.h's cast);
 *   - SRDHM(vl, qm) = floor((vl qm + 2^30) / 2^31) (its nudge 1 - 2^30 for a
 *     negative product and the division truncating toward zero give the
 *     same floor); qm >= 0 always (no INT32_MIN * INT32_MIN), and the result
 *     fits int32, so bits 31..62 of the 64-bit sum are it: a logical shift
 *     (AVX2 has no 64-bit arithmetic one) does;
 *   - RDBP as requant.h spells it, with 32-bit variable shifts;
 *   - the clamp before the zero point (to [lo - zp, hi - zp]): h >> r + zp
 *     may pass INT32_MAX where the sum is large, the clamped value cannot.
 * mul_epi32 multiplies the even int32 lanes into 64 bits; the odd ones are
 * moved down first and their results back up (a blend). */
static inline int32_t int8_row_one(int32_t a, int32_t b, int32_t qm, int32_t sh, int32_t zp,
                                   int32_t lo, int32_t hi)
{
    const int32_t v = (int32_t)((uint32_t)a + (uint32_t)b);
    const int64_t q = (int64_t)qf_multiply_by_quantized_multiplier(v, qm, (int)sh) + zp;
    return (int32_t)(q < lo ? lo : q > hi ? hi : q);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QF_INT8_ROW_X86 1

__attribute__((target("avx512f"))) static void int8_row_avx512(int64_t n, const int32_t *acc,
                                                               const qf_int8_row_params *p,
                                                               int32_t zp, int32_t lo, int32_t hi,
                                                               uint8_t *y)
{
    const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
    const __m512i half = _mm512_set1_epi64((int64_t)1 << 30), vzp = _mm512_set1_epi32(zp);
    const __m512i vlo = _mm512_set1_epi32(lo - zp), vhi = _mm512_set1_epi32(hi - zp);
    for (int64_t c = 0; c < n; c += 16) {
        const __mmask16 k = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1u);
        const __m512i sh = _mm512_maskz_loadu_epi32(k, p->shift + c);
        const __m512i qm = _mm512_maskz_loadu_epi32(k, p->multiplier + c);
        __m512i v = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + c),
                                     _mm512_maskz_loadu_epi32(k, p->bias + c));
        const __m512i left = _mm512_max_epi32(sh, zero),
                      right = _mm512_max_epi32(_mm512_sub_epi32(zero, sh), zero);
        v = _mm512_sllv_epi32(v, left);
        const __m512i pe = _mm512_add_epi64(_mm512_mul_epi32(v, qm), half);
        const __m512i po = _mm512_add_epi64(
            _mm512_mul_epi32(_mm512_srli_epi64(v, 32), _mm512_srli_epi64(qm, 32)), half);
        const __m512i h = _mm512_mask_blend_epi32((__mmask16)0xaaaa, _mm512_srli_epi64(pe, 31),
                                                  _mm512_slli_epi64(po, 1));
        const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, right), one);
        const __m512i rem = _mm512_and_si512(h, mask);
        const __m512i thr = _mm512_add_epi32(_mm512_srai_epi32(mask, 1), _mm512_srli_epi32(h, 31));
        __m512i q = _mm512_srav_epi32(h, right);
        q = _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(rem, thr), q, one);
        q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, vlo), vhi), vzp);
        _mm512_mask_cvtepi32_storeu_epi8(y + c, k, q); /* the low byte: int8 or uint8, in range */
    }
}

__attribute__((target("avx2"))) static void int8_row_avx2(int64_t n, const int32_t *acc,
                                                          const qf_int8_row_params *p, int32_t zp,
                                                          int32_t lo, int32_t hi, uint8_t *y)
{
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    const __m256i half = _mm256_set1_epi64x((int64_t)1 << 30), vzp = _mm256_set1_epi32(zp);
    const __m256i vlo = _mm256_set1_epi32(lo - zp), vhi = _mm256_set1_epi32(hi - zp);
    /* bytes 0, 4, 8, 12 of each 128-bit half: the int32 lanes' low bytes */
    const __m256i low =
        _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        const __m256i sh = _mm256_loadu_si256((const __m256i *)(p->shift + c));
        const __m256i qm = _mm256_loadu_si256((const __m256i *)(p->multiplier + c));
        __m256i v = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(acc + c)),
                                     _mm256_loadu_si256((const __m256i *)(p->bias + c)));
        const __m256i left = _mm256_max_epi32(sh, zero),
                      right = _mm256_max_epi32(_mm256_sub_epi32(zero, sh), zero);
        v = _mm256_sllv_epi32(v, left);
        const __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(v, qm), half);
        const __m256i po = _mm256_add_epi64(
            _mm256_mul_epi32(_mm256_srli_epi64(v, 32), _mm256_srli_epi64(qm, 32)), half);
        const __m256i h =
            _mm256_blend_epi32(_mm256_srli_epi64(pe, 31), _mm256_slli_epi64(po, 1), 0xaa);
        const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, right), one);
        const __m256i rem = _mm256_and_si256(h, mask);
        const __m256i thr = _mm256_add_epi32(_mm256_srai_epi32(mask, 1), _mm256_srli_epi32(h, 31));
        __m256i q = _mm256_srav_epi32(h, right);
        q = _mm256_sub_epi32(q, _mm256_cmpgt_epi32(rem, thr)); /* true is -1 */
        q = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(q, vlo), vhi), vzp);
        const __m256i b = _mm256_shuffle_epi8(q, low);
        const uint32_t b0 = (uint32_t)_mm256_extract_epi32(b, 0),
                       b1 = (uint32_t)_mm256_extract_epi32(b, 4);
        memcpy(y + c, &b0, 4);
        memcpy(y + c + 4, &b1, 4);
    }
    for (; c < n; c++)
        y[c] = (uint8_t)int8_row_one(acc[c], p->bias[c], p->multiplier[c], p->shift[c], zp, lo, hi);
}
#endif

bool qf_int8_requant_row_has(qf_int8_row_isa isa)
{
    switch (isa) {
    case QF_INT8_ROW_BEST:
    case QF_INT8_ROW_DOUBLE: return true;
#ifdef QF_INT8_ROW_X86
    case QF_INT8_ROW_AVX2: return __builtin_cpu_supports("avx2");
    case QF_INT8_ROW_AVX512: return __builtin_cpu_supports("avx512f");
#else
    case QF_INT8_ROW_AVX2:
    case QF_INT8_ROW_AVX512: return false;
#endif
    }
    return false;
}

void qf_int8_requant_fixed_row_isa(qf_int8_row_isa isa, const qf_int8_requant *rq, int64_t n,
                                   const int32_t *acc, const qf_int8_row_params *p, void *y)
{
#ifdef QF_INT8_ROW_X86
    if (isa == QF_INT8_ROW_BEST)
        isa = __builtin_cpu_supports("avx512f") ? QF_INT8_ROW_AVX512
              : __builtin_cpu_supports("avx2")  ? QF_INT8_ROW_AVX2
                                                : QF_INT8_ROW_DOUBLE;
    if (isa == QF_INT8_ROW_AVX512) {
        int8_row_avx512(n, acc, p, rq->zp, rq->lo, rq->hi, y);
        return;
    }
    if (isa == QF_INT8_ROW_AVX2) {
        int8_row_avx2(n, acc, p, rq->zp, rq->lo, rq->hi, y);
        return;
    }
#endif
    int8_row_double(rq, n, acc, p, y);
}

void qf_int8_requant_fixed_row(const qf_int8_requant *rq, int64_t n, const int32_t *acc,
                               const qf_int8_row_params *p, void *y)
{
    qf_int8_requant_fixed_row_isa(QF_INT8_ROW_BEST, rq, n, acc, p, y);
}

/* --- widening ------------------------------------------------------------- */

void qf_int8_widen_rows(const void *src, qf_dtype dt, const int32_t *zp, bool per_row, int64_t rows, int64_t k,
                        int16_t *dst)
{
    for (int64_t r = 0; r < rows; r++) {
        const int16_t z = (int16_t)(zp ? zp[per_row ? r : 0] : 0);
        int16_t *d = dst + r * k;
        if (dt == QF_DTYPE_U8) {
            const uint8_t *s = (const uint8_t *)src + r * k;
            for (int64_t i = 0; i < k; i++) d[i] = (int16_t)(s[i] - z);
        } else {
            const int8_t *s = (const int8_t *)src + r * k;
            for (int64_t i = 0; i < k; i++) d[i] = (int16_t)(s[i] - z);
        }
    }
}

void qf_int8_widen_cols_t(const void *src, qf_dtype dt, const int32_t *zp, bool per_col, int64_t k, int64_t n,
                          int16_t *dst)
{
    for (int64_t j = 0; j < n; j++) {
        const int16_t z = (int16_t)(zp ? zp[per_col ? j : 0] : 0);
        int16_t *d = dst + j * k;
        if (dt == QF_DTYPE_U8) {
            const uint8_t *s = (const uint8_t *)src + j;
            for (int64_t i = 0; i < k; i++) d[i] = (int16_t)(s[i * n] - z);
        } else {
            const int8_t *s = (const int8_t *)src + j;
            for (int64_t i = 0; i < k; i++) d[i] = (int16_t)(s[i * n] - z);
        }
    }
}

/* --- GEMM ----------------------------------------------------------------- */

/* Four dot products of a against b0..b3 at once: a is loaded once for four
 * pmaddwd. No partial sum overflows (the caller checked K). */
static inline void int8_dot4(const int16_t *restrict a, const int16_t *restrict b0, const int16_t *restrict b1,
                             const int16_t *restrict b2, const int16_t *restrict b3, int64_t k, int32_t out[4])
{
    int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < k; i++) {
        int32_t av = a[i];
        s0 += av * b0[i];
        s1 += av * b1[i];
        s2 += av * b2[i];
        s3 += av * b3[i];
    }
    out[0] = s0;
    out[1] = s1;
    out[2] = s2;
    out[3] = s3;
}

static inline int32_t int8_dot(const int16_t *restrict a, const int16_t *restrict b, int64_t k)
{
    int32_t s = 0;
    for (int64_t i = 0; i < k; i++) s += (int32_t)a[i] * b[i];
    return s;
}

/* bias + dot, wrapping as an int32 add in two's complement (no UB). */
static inline int32_t int8_add_wrap(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

typedef struct int8_gemm_job {
    int64_t m, k, ldc;
    const int16_t *a, *bt;
    const int32_t *bias;
    int32_t *c;
} int8_gemm_job;

/* Columns lo..hi-1: in blocks of 4 columns of B^T (each block a few KB, kept
 * in L1 while every row of A streams past it). */
static void int8_gemm_slice(void *ctx, int64_t lo, int64_t hi)
{
    const int8_gemm_job *jb = ctx;
    const int64_t k = jb->k;
    int64_t j = lo;
    for (; j + 4 <= hi; j += 4) {
        const int16_t *b0 = jb->bt + j * k;
        for (int64_t i = 0; i < jb->m; i++) {
            int32_t s[4];
            int8_dot4(jb->a + i * k, b0, b0 + k, b0 + 2 * k, b0 + 3 * k, k, s);
            int32_t bias = jb->bias ? jb->bias[i] : 0;
            int32_t *ci = jb->c + i * jb->ldc + j;
            for (int q = 0; q < 4; q++) ci[q] = int8_add_wrap(bias, s[q]);
        }
    }
    for (; j < hi; j++)
        for (int64_t i = 0; i < jb->m; i++)
            jb->c[i * jb->ldc + j] = int8_add_wrap(jb->bias ? jb->bias[i] : 0, int8_dot(jb->a + i * k, jb->bt + j * k, k));
}

void qf_int8_gemm_nt(int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *bt, const int32_t *bias,
                     int32_t *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    int8_gemm_job jb = {m, k, ldc, a, bt, bias, c};
    /* About 64k multiply-adds per slice at least, in whole blocks of 4. */
    int64_t per_col = m * (k > 0 ? k : 1);
    int64_t grain = 65536 / per_col + 1;
    grain = (grain + 3) / 4 * 4;
    qf_parallel_for(n, grain, int8_gemm_slice, &jb);
}

/* --- im2row / conv -------------------------------------------------------- */

size_t qf_int8_conv_col_bytes(const qf_conv_geom *cg)
{
    if (cg->k < 0 || cg->out_plane < 0) return 0;
    int64_t elems, bytes;
    if (!qf_i64_mul(cg->k, cg->out_plane, &elems) || !qf_i64_mul(elems, (int64_t)sizeof(int16_t), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)bytes;
}

/* One im2row body per input type: T is int8_t or uint8_t. */
#define QF_INT8_IM2ROW(NAME, T)                                                                              \
    static void NAME(const T *x, int32_t zp, int64_t channels, const qf_spatial *l, int16_t *col)            \
    {                                                                                                        \
        const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];                                           \
        const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2];                                        \
        const int64_t KD = l->kernel[0], KH = l->kernel[1], KW = l->kernel[2];                               \
        const int64_t K = channels * KD * KH * KW, sw = l->stride[2];                                        \
        const int16_t z = (int16_t)zp;                                                                       \
        for (int64_t od = 0; od < OD; od++)                                                                  \
            for (int64_t oh = 0; oh < OH; oh++) {                                                            \
                int16_t *base = col + (od * OH + oh) * OW * K;                                               \
                int64_t k = 0;                                                                               \
                for (int64_t c = 0; c < channels; c++)                                                       \
                    for (int64_t kd = 0; kd < KD; kd++) {                                                    \
                        int64_t id = od * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];              \
                        for (int64_t kh = 0; kh < KH; kh++) {                                                \
                            int64_t ih = oh * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];          \
                            bool in = id >= 0 && id < ID && ih >= 0 && ih < IH;                              \
                            const T *row = in ? x + ((c * ID + id) * IH + ih) * IW : NULL;                   \
                            for (int64_t kw = 0; kw < KW; kw++, k++) {                                       \
                                int16_t *d = base + k;                                                       \
                                if (!in) {                                                                   \
                                    for (int64_t ow = 0; ow < OW; ow++) d[ow * K] = 0;                       \
                                    continue;                                                                \
                                }                                                                            \
                                int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;                \
                                qf_conv_tap_range(offw, sw, IW, OW, &lo, &hi);                               \
                                for (int64_t ow = 0; ow < lo; ow++) d[ow * K] = 0;                           \
                                for (int64_t ow = lo; ow < hi; ow++)                                         \
                                    d[ow * K] = (int16_t)(row[ow * sw + offw] - z);                          \
                                for (int64_t ow = hi; ow < OW; ow++) d[ow * K] = 0;                          \
                            }                                                                                \
                        }                                                                                    \
                    }                                                                                        \
            }                                                                                                \
    }

QF_INT8_IM2ROW(int8_im2row_s8, int8_t)
QF_INT8_IM2ROW(int8_im2row_u8, uint8_t)
#undef QF_INT8_IM2ROW

void qf_int8_im2row3(const void *x, qf_dtype dt, int32_t zp, int64_t channels, const qf_spatial *l, int16_t *col)
{
    if (dt == QF_DTYPE_U8) int8_im2row_u8(x, zp, channels, l, col);
    else int8_im2row_s8(x, zp, channels, l, col);
}

void qf_int8_conv_group(const qf_conv_geom *cg, const void *x, qf_dtype xdt, int32_t x_zp, int64_t bn, int64_t g,
                        const int16_t *w16, const int32_t *bias, int16_t *col, int32_t *acc)
{
    size_t es = xdt == QF_DTYPE_U8 ? sizeof(uint8_t) : sizeof(int8_t);
    const char *xg = (const char *)x + (size_t)((bn * cg->c + g * cg->cg) * cg->in_plane) * es;
    qf_int8_im2row3(xg, xdt, x_zp, cg->cg, &cg->l, col);
    qf_int8_gemm_nt(cg->mg, cg->out_plane, cg->k, w16 + g * cg->mg * cg->k, col, bias ? bias + g * cg->mg : NULL,
                    acc, cg->out_plane);
}

void qf_int8_col2im3(const int32_t *col, int64_t channels, const qf_spatial *l, int32_t *y)
{
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];
    const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2];
    const int32_t *src = col;
    for (int64_t c = 0; c < channels; c++) {
        int32_t *yc = y + c * OD * OH * OW;
        for (int64_t kd = 0; kd < l->kernel[0]; kd++)
            for (int64_t kh = 0; kh < l->kernel[1]; kh++)
                for (int64_t kw = 0; kw < l->kernel[2]; kw++) {
                    int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;
                    qf_conv_tap_range(offw, l->stride[2], OW, IW, &lo, &hi);
                    for (int64_t id = 0; id < ID; id++) {
                        int64_t od = id * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];
                        for (int64_t ih = 0; ih < IH; ih++, src += IW) {
                            int64_t oh = ih * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];
                            if (od < 0 || od >= OD || oh < 0 || oh >= OH) continue;
                            int32_t *row = yc + (od * OH + oh) * OW + offw;
                            for (int64_t iw = lo; iw < hi; iw++)
                                row[iw * l->stride[2]] = int8_add_wrap(row[iw * l->stride[2]], src[iw]);
                        }
                    }
                }
    }
}

/* --- internal int8 ops ---------------------------------------------------- */

qf_status qf_int8_qparams(const qf_node *n, const qf_tensor *scale, const qf_tensor *zp, const char *what, float *s,
                          int32_t *z)
{
    if (!scale || !zp || scale->dtype != QF_DTYPE_F32 || zp->dtype != QF_DTYPE_I8 || qf_tensor_numel(scale) != 1 ||
        qf_tensor_numel(zp) != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s's scale and zero point must be one float32 and one "
                        "int8 value", n->name, qf_op_label(n), what);
    if (!scale->data || !zp->data)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s's scale and zero point must be constants", n->name,
                        qf_op_label(n), what);
    *s = *(const float *)scale->data;
    *z = *(const int8_t *)zp->data;
    if (!(*s > 0.0f) || !isfinite(*s))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s's scale %g is not a finite number > 0", n->name,
                        qf_op_label(n), what, (double)*s);
    return QF_OK;
}

qf_status qf_int8_clamp_range(const qf_node *n, int32_t min, int32_t max, int32_t *lo,
                              int32_t *hi)
{
    *lo = min;
    *hi = max;
    int nc = 0;
    const int64_t *clamp = qf_node_attr_ints(n, "qfold_clamp", &nc);
    if (!clamp) return QF_OK;
    if (nc != 2)
        return qf_error(QF_ERR_INVALID,
                        "node '%s' (%s): qfold_clamp must be [lo, hi] inside [%d, %d], it has %d "
                        "value%s",
                        n->name, qf_op_label(n), (int)min, (int)max, nc, nc == 1 ? "" : "s");
    if (clamp[0] > clamp[1] || clamp[0] < min || clamp[1] > max)
        return qf_error(QF_ERR_INVALID,
                        "node '%s' (%s): qfold_clamp [%lld, %lld] is not a range [lo, hi] inside "
                        "[%d, %d]",
                        n->name, qf_op_label(n), (long long)clamp[0], (long long)clamp[1],
                        (int)min, (int)max);
    *lo = (int32_t)clamp[0];
    *hi = (int32_t)clamp[1];
    return QF_OK;
}

qf_status qf_int8_clamp_attr(const qf_node *n, int32_t *lo, int32_t *hi)
{
    return qf_int8_clamp_range(n, -128, 127, lo, hi);
}
