/* Fixed-point requantization (src/ops/math/requant.h): TFLite's edge cases, and
 * the result against the exact rational product on many random cases. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <float.h>

#include "ops/math/quant_math.h"
#include "ops/math/requant.h"
#include "tools/qf_check.h"

static void test_quantize_multiplier_edges(void)
{
    int32_t qm;
    int shift;
    qf_quantize_multiplier(0.0, &qm, &shift);
    CHECK(qm == 0 && shift == 0);
    qf_quantize_multiplier(0.5, &qm, &shift);
    CHECK(qm == (1 << 30) && shift == 0);
    qf_quantize_multiplier(1.0, &qm, &shift);
    CHECK(qm == (1 << 30) && shift == 1);
    qf_quantize_multiplier(0.25, &qm, &shift);
    CHECK(qm == (1 << 30) && shift == -1);
    /* A mantissa that rounds up to 2^31 is renormalised. */
    qf_quantize_multiplier(nextafter(1.0, 0.0), &qm, &shift);
    CHECK(qm == (1 << 30) && shift == 1);
    /* Below 2^-32 every bit would be shifted out: (0, 0). */
    qf_quantize_multiplier(ldexp(1.0, -40), &qm, &shift);
    CHECK(qm == 0 && shift == 0);
    qf_quantize_multiplier(ldexp(0.75, -31), &qm, &shift);
    CHECK(qm == (int32_t)(0.75 * 2147483648.0) && shift == -31);
}

static void test_high_mul_and_pot(void)
{
    CHECK(qf_sat_round_doubling_high_mul(INT32_MIN, INT32_MIN) == INT32_MAX);
    CHECK(qf_sat_round_doubling_high_mul(1 << 30, 1 << 30) == 1 << 29);
    /* gemmlowp's nudge: a positive tie rounds up (1.5 -> 2), a negative one
     * toward zero (-1.5 -> -1: the nudge is 1 - 2^30, then C truncates). */
    CHECK(qf_sat_round_doubling_high_mul(3, 1 << 30) == 2);
    CHECK(qf_sat_round_doubling_high_mul(-3, 1 << 30) == -1);
    CHECK(qf_sat_round_doubling_high_mul(-5, 1 << 30) == -2);
    CHECK(qf_rounding_divide_by_pot(5, 1) == 3);   /* 2.5 -> 3 */
    CHECK(qf_rounding_divide_by_pot(-5, 1) == -3); /* -2.5 -> -3 */
    CHECK(qf_rounding_divide_by_pot(-4, 1) == -2);
    CHECK(qf_rounding_divide_by_pot(7, 2) == 2);   /* 1.75 -> 2 */
    CHECK(qf_rounding_divide_by_pot(-7, 2) == -2);
    CHECK(qf_rounding_divide_by_pot(INT32_MAX, 31) == 1);
    CHECK(qf_rounding_divide_by_pot(INT32_MIN, 31) == -1);
    CHECK((-8 >> 1) == -4); /* arithmetic right shift, which the kernels assume */
}

/* round(num / 2^k), ties away from zero, exactly. */
static int64_t exact_round(__int128 num, int k)
{
    __int128 d = (__int128)1 << k;
    __int128 q = num / d, r = num % d;
    if (r < 0) r = -r;
    if (2 * r >= d) q += num < 0 ? -1 : 1;
    return (int64_t)q;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* x * qm * 2^(shift - 31): off by at most 1 from the exact rounding (the
 * two-step rounding of gemmlowp, ~2 % of random cases here, as in TFLite),
 * and equal to it otherwise. */
static void test_against_exact(void)
{
    long n = 0, exact = 0, off = 0;
    for (int i = 0; i < 200000; i++) {
        double m = ldexp((double)(rng() % 1000000 + 1) / 1000000.0, -(int)(rng() % 20)); /* (0, 1] scaled down */
        int32_t qm;
        int shift;
        qf_quantize_multiplier(m, &qm, &shift);
        /* the multiplier round-trips to 31 bits */
        double back = ldexp((double)qm, shift - 31);
        if (fabs(back - m) > ldexp(m, -30)) off++;
        int32_t x = (int32_t)(rng() % 2000001) - 1000000; /* |acc| up to 1e6 */
        int32_t got = qf_multiply_by_quantized_multiplier(x, qm, shift);
        int64_t want = exact_round((__int128)x * qm, 31 - shift);
        n++;
        if (got == want) exact++;
        else if (llabs((long long)(got - want)) > 1) off++;
    }
    printf("  %ld cases: %ld exact (%.3f%%), %ld off by more than 1 or badly quantized\n", n, exact,
           100.0 * (double)exact / (double)n, off);
    CHECK(off == 0);
    CHECK(exact >= n * 95 / 100);
}

/* The vectorizable QuantizeLinear (qf_quantize_range_vec_f32) against the
 * scalar one on ties, values near ties, every magnitude, NaN and +-Inf, for
 * int8 and uint8 ranges and several zero points and scales. */
static void test_quantize_vec(void)
{
    const float scales[] = {1.0f, 0.5f, 0.0173f, 3.0e-4f, 7.0f, 1.0e-12f};
    const int32_t zps[][3] = {{0, -128, 127}, {-9, -128, 127}, {127, -128, 127}, {-128, -128, 127},
                              {0, 0, 255}, {131, 0, 255}, {255, 0, 255}};
    uint32_t st = 99u;
    long bad = 0, n = 0;
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
        for (size_t zi = 0; zi < sizeof zps / sizeof zps[0]; zi++) {
            const float s = scales[si];
            const int32_t zp = zps[zi][0], lo = zps[zi][1], hi = zps[zi][2];
            for (int i = 0; i < 40000; i++) {
                float x;
                if (i < 1200) {
                    x = ((float)(i - 600) * 0.5f) * s;                         /* ties and integers */
                } else if (i < 2400) {
                    x = nextafterf(((float)(i - 1800) * 0.5f) * s, i & 1 ? INFINITY : -INFINITY);
                } else if (i < 2410) {
                    const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, FLT_MAX, -FLT_MAX,
                                        4194304.5f, -8388609.0f};
                    x = sp[i - 2400];
                } else {
                    st = st * 1664525u + 1013904223u;
                    uint32_t bits = st;
                    memcpy(&x, &bits, sizeof x);                                /* any float */
                    if (i & 1) x = (float)((int32_t)(st >> 8) % 4000) * 0.125f * s; /* near the range */
                }
                int32_t a = qf_quantize_range_f32(x, s, zp, lo, hi);
                int32_t b = qf_quantize_range_vec_f32(x, s, zp, lo, hi);
                if (a != b && bad++ < 5)
                    FAIL("x = %a, scale %g, zp %d: vec %d, scalar %d", (double)x, (double)s, (int)zp, (int)b, (int)a);
                n++;
            }
        }
    CHECKF(bad == 0, "%ld of %ld quantizations differ", bad, n);
}

int main(void)
{
    RUN(test_quantize_vec);
    RUN(test_quantize_multiplier_edges);
    RUN(test_high_mul_and_pot);
    RUN(test_against_exact);
    return qf_check_report();
}
