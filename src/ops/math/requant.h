/* Fixed-point requantization, as TFLite's reference integer kernels do it
 * (quantization_util.cc QuantizeMultiplier, common.h
 * MultiplyByQuantizedMultiplier; gemmlowp's SaturatingRoundingDoublingHighMul
 * and RoundingDivideByPOT), so an int8 model run by qfold gives the integers a
 * TFLite-based NPU toolchain gives.
 *
 *   int32_t qm; int shift;
 *   qf_quantize_multiplier(s_in * s_w / s_out, &qm, &shift);   // once, in prepare
 *   int32_t y = qf_multiply_by_quantized_multiplier(acc, qm, shift) + zp_out;
 *
 * A real multiplier m > 0 is held as qm * 2^(shift - 31) with qm in
 * [2^30, 2^31): 31 significant bits. Everything is static inline and
 * allocation-free; shared by the int8 kernels and the fake-quant paths.
 */
#ifndef QF_OPS_REQUANT_H
#define QF_OPS_REQUANT_H

#include <math.h>
#include <stdint.h>

/* m -> (qm, shift) with m ~= qm * 2^(shift - 31). Edge cases as TFLite:
 * m == 0 gives (0, 0); a mantissa that rounds up to 2^31 is halved and the
 * shift raised; a shift below -31 would shift every bit out, so it becomes
 * (0, 0). m must be finite and >= 0 (callers check scales before). */
static inline void qf_quantize_multiplier(double m, int32_t *qm, int *shift)
{
    if (m == 0.0) {
        *qm = 0;
        *shift = 0;
        return;
    }
    int e = 0;
    double q = frexp(m, &e); /* q in [0.5, 1) */
    int64_t fixed = (int64_t)round(q * 2147483648.0); /* round half away from zero, as std::round */
    if (fixed == ((int64_t)1 << 31)) {
        fixed /= 2;
        e++;
    }
    if (e < -31) {
        e = 0;
        fixed = 0;
    }
    *qm = (int32_t)fixed;
    *shift = e;
}

/* Whether the real multiplier m (finite, >= 0) can requantize accumulators
 * of magnitude up to acc_bound: a positive shift is applied to the
 * accumulator before the multiplication (qf_multiply_by_quantized_multiplier
 * below), so acc * 2^shift must fit int32. The int8 kernels refuse such a
 * multiplier; the integer executor's lowering asks first. */
static inline int qf_requant_shift_fits(int shift, int64_t acc_bound)
{
    return shift <= 0 || (shift < 31 && acc_bound <= (INT32_MAX >> shift));
}

static inline int qf_requant_fits(double m, int64_t acc_bound)
{
    if (!(m >= 0.0) || !isfinite(m)) return 0;
    int32_t qm;
    int shift = 0;
    qf_quantize_multiplier(m, &qm, &shift);
    return qf_requant_shift_fits(shift, acc_bound);
}

/* gemmlowp SaturatingRoundingDoublingHighMul: round(a * b / 2^31), ties up
 * (toward +inf: the nudge 1 - 2^30 of a negative product, then a division
 * truncating toward zero, rounds -42.5 to -42); the one overflow
 * (INT32_MIN * INT32_MIN) saturates. */
static inline int32_t qf_sat_round_doubling_high_mul(int32_t a, int32_t b)
{
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    int64_t ab = (int64_t)a * (int64_t)b;
    int64_t nudge = ab >= 0 ? ((int64_t)1 << 30) : (1 - ((int64_t)1 << 30));
    /* C division truncates toward zero, as gemmlowp relies on. */
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31));
}

/* gemmlowp RoundingDivideByPOT: x / 2^exponent rounded to nearest, ties
 * away from zero; exponent in [0, 31]. Right shift of a negative int32 is
 * arithmetic on every compiler qfold supports (checked in a test). */
static inline int32_t qf_rounding_divide_by_pot(int32_t x, int exponent)
{
    const int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* TFLite MultiplyByQuantizedMultiplier: x * qm * 2^(shift - 31), rounded.
 * A positive shift is applied to x first (x * 2^shift must fit int32:
 * TFLite's kernels guarantee it for real multipliers below 2^shift's range;
 * qfold's prepare refuses multipliers >= 2^31 / max|acc|). */
static inline int32_t qf_multiply_by_quantized_multiplier(int32_t x, int32_t qm, int shift)
{
    int left = shift > 0 ? shift : 0;
    int right = shift > 0 ? 0 : -shift;
    return qf_rounding_divide_by_pot(qf_sat_round_doubling_high_mul((int32_t)((uint32_t)x << left), qm), right);
}

#endif
