/* 16-bit fixed-point arithmetic of TFLite's int8 element-wise kernels
 * (gemmlowp's int16 SaturatingRoundingDoublingHighMul and
 * RoundingDivideByPOT, TFLite's SaturatingDoublingHighMul and
 * SaturatingLeftShift), and the int8 HARD_SWISH built on them
 * (reference_ops::HardSwish with the HardSwishParams its Prepare computes);
 * the TFLite form of an int8 HardSigmoid (qf_hard_sigmoid_form), and the
 * int8 LEAKY_RELU (qf_leaky_relu_params, at the end), written here from the
 * algorithms' definitions. The 32-bit ones
 * (MultiplyByQuantizedMultiplier and the multiplier's quantization) are in
 * requant.h.
 *
 *   qf_hard_swish_params p;
 *   if (qf_hard_swish_prepare(s_x, zp_x, s_y, zp_y, &p)) ...     // once
 *   int8_t y = qf_hard_swish_int8(&p, x);                         // per value
 *
 * Checked bit for bit against TensorFlow Lite 2.2's interpreter on every
 * int8 input (tests/tflite/armnn_test.py activations_sweep). Static inline,
 * allocation-free.
 */
#ifndef QF_OPS_FIXED_POINT_H
#define QF_OPS_FIXED_POINT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/math/requant.h"

/* a * b / 2^15 rounded to nearest, gemmlowp's way: a nudge of 2^14 (1 - 2^14 below
 * zero) then division truncating toward zero, so ties go up; -32768 * -32768
 * saturates. */
static inline int16_t qf_fp16_sat_round_doubling_high_mul(int16_t a, int16_t b)
{
    if (a == INT16_MIN && b == INT16_MIN) return INT16_MAX;
    const int32_t ab = (int32_t)a * (int32_t)b;
    const int32_t nudge = ab >= 0 ? (1 << 14) : (1 - (1 << 14));
    return (int16_t)((ab + nudge) / (1 << 15)); /* C division truncates toward zero */
}

/* a * b / 2^15 truncated toward zero (no rounding nudge); the one overflow
 * saturates. */
static inline int16_t qf_fp16_sat_doubling_high_mul(int16_t a, int16_t b)
{
    if (a == INT16_MIN && b == INT16_MIN) return INT16_MAX;
    return (int16_t)(((int32_t)a * (int32_t)b) / (1 << 15));
}

/* x / 2^exponent rounded to nearest, ties away from zero; exponent in [0, 15]. */
static inline int16_t qf_fp16_rounding_divide_by_pot(int16_t x, int exponent)
{
    return (int16_t)qf_rounding_divide_by_pot(x, exponent);
}

/* x * 2^amount saturated to int16 (amount in [0, 15]). */
static inline int16_t qf_fp16_sat_left_shift(int16_t x, int amount)
{
    const int32_t r = (int32_t)x * (1 << amount);
    return (int16_t)(r < INT16_MIN ? INT16_MIN : r > INT16_MAX ? INT16_MAX : r);
}

/* A 32-bit multiplier mantissa in [2^30, 2^31) rounded to 16 bits (TFLite's
 * DownScaleInt32ToInt16Multiplier). */
static inline int16_t qf_fp16_multiplier(int32_t m32)
{
    const int32_t offset = 1 << 15;
    if (m32 >= INT32_MAX - offset) return INT16_MAX;
    return (int16_t)((m32 + offset) >> 16);
}

typedef struct qf_hard_swish_params {
    int32_t zp_x, zp_y;
    int16_t out_mult, relu_mult; /* 16-bit mantissas */
    int out_exp, relu_exp;       /* their exponents (out_exp <= 0) */
} qf_hard_swish_params;

/* TFLite's HardSwishPrepare for int8: the input on a "high-resolution"
 * scale s_x / 128; out = s_x / 128 / s_y, relu-ish = (s_x / 128) / (3 /
 * 32768), each formed in float as TFLite does, quantized in double. False
 * when the output multiplier's exponent is positive (TFLite refuses that
 * tensor pair: s_y below s_x / 128), or either exponent is outside the
 * int16 shifts' range (scales 2^16 apart: TFLite's int16 shifts are
 * undefined there). */
static inline bool qf_hard_swish_prepare(float s_x, int32_t zp_x, float s_y, int32_t zp_y, qf_hard_swish_params *p)
{
    const float hires = (1.0f / 128.0f) * s_x;
    const float out_m = hires / s_y, relu_m = hires / (3.0f / 32768.0f);
    int32_t m32;
    p->zp_x = zp_x;
    p->zp_y = zp_y;
    qf_quantize_multiplier((double)out_m, &m32, &p->out_exp);
    p->out_mult = qf_fp16_multiplier(m32);
    qf_quantize_multiplier((double)relu_m, &m32, &p->relu_exp);
    p->relu_mult = qf_fp16_multiplier(m32);
    return p->out_exp <= 0 && p->out_exp > -16 && p->relu_exp < 16 && p->relu_exp > -16;
}

/* reference_ops::HardSwish on one int8 value: x on the high-resolution
 * scale (x - zp) * 2^7; that times the output multiplier (the value for x >=
 * 3); the "relu-ish" factor: x rescaled so that 3.0 is 2^15, saturating,
 * mapped from [-1, 1] to [0, 1]; their product truncated (the non-rounding
 * high mul cancels the rounding bias of the two before), the output shift
 * rounded, the zero point added, clamped to int8. */
static inline int8_t qf_hard_swish_int8(const qf_hard_swish_params *p, int8_t x)
{
    const int16_t v = (int16_t)(x - p->zp_x);
    const int16_t hires = (int16_t)(v * (1 << 7));
    const int16_t pre_out = qf_fp16_sat_round_doubling_high_mul(hires, p->out_mult);
    int16_t relu = hires;
    if (p->relu_exp > 0) relu = qf_fp16_sat_left_shift(relu, p->relu_exp - 1);
    relu = qf_fp16_sat_round_doubling_high_mul(relu, p->relu_mult);
    if (p->relu_exp > 0) relu = qf_fp16_sat_left_shift(relu, 1);
    if (p->relu_exp < 0) relu = qf_fp16_rounding_divide_by_pot(relu, -p->relu_exp);
    relu = (int16_t)(((int32_t)relu + (1 << 15)) >> 1);
    const int16_t pre_shift = qf_fp16_sat_doubling_high_mul(relu, pre_out);
    int32_t y = qf_fp16_rounding_divide_by_pot(pre_shift, -p->out_exp) + p->zp_y;
    return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y);
}

/* int8 HardSigmoid (alpha 1/6, beta 1/2: torch's hardsigmoid = relu6(x + 3)
 * / 6) in the form TFLite runs (it has no HARD_SIGMOID builtin): two
 * operators of its integer arithmetic,
 *   t = ADD(x, C3) with fused RELU6, t's tensor at scale 6 s_y, zero point zp_y
 *   y = MUL(t, C6)                   into s_y, zp_y
 * C3 = 127 at scale 3/127 (the real 3), C6 = 127 at scale 1/762 (the real
 * 1/6), both zero point 0. t's integers are already y's: (x + 3) / (6 s_y)
 * = ((x + 3) / 6) / s_y, and RELU6's range in t's integers, [zp_y, zp_y +
 * round(6 / (6 s_y))], is [0, 1] in y's. The MUL only relabels them: its
 * multiplier 6 s_y * (1/762) / s_y is 1/127 within float32 rounding and
 * (t - zp_y) * 127 * (1/127) lands within 1e-4 of the integer t - zp_y for
 * every |t - zp_y| <= 255, so y = t. qlut.c computes both operators with
 * TFLite's arithmetic (qf_int8_add_prepare / mul, int8.h), the TFLite export
 * writes them with these constants. The scales are float32 as the flatbuffer
 * stores them; RELU6's bound is TFLite's CalculateActivationRangeQuantized:
 * zp + round(6.0f / scale) in float32, ties away from zero. */
typedef struct qf_hard_sigmoid_form {
    float c3_scale, t_scale, c6_scale; /* C3's, t's and C6's scales */
    int8_t c3, c6;                     /* the constants' integers (zero point 0) */
    int32_t t_lo, t_hi;                /* RELU6's range in t's integers */
} qf_hard_sigmoid_form;

static inline void qf_hard_sigmoid_form_of(float s_y, int32_t zp_y, qf_hard_sigmoid_form *f)
{
    f->c3 = 127;
    f->c3_scale = 3.0f / 127.0f;
    f->c6 = 127;
    f->c6_scale = 1.0f / 762.0f;
    f->t_scale = 6.0f * s_y;
    /* zp_y >= -128, so a bound of 255 or more is past 127 (and the cast
     * of a huge float would be undefined) */
    const float r = roundf(6.0f / f->t_scale);
    f->t_lo = zp_y > -128 ? zp_y : -128;
    f->t_hi = !(r < 255.0f) ? 127 : zp_y + (int32_t)r < 127 ? zp_y + (int32_t)r : 127;
}

/* Whether TFLite's ADD takes the form's scales for input scale s_x: its
 * output multiplier 2 max(s_x, s_C3) / (2^20 s_t) must be below 1 (the
 * others are below 1 for any positive scales). */
static inline bool qf_hard_sigmoid_form_ok(float s_x, float s_y)
{
    if (!(s_x > 0.0f) || !(s_y > 0.0f) || !isfinite(s_x) || !isfinite(s_y)) return false;
    qf_hard_sigmoid_form f;
    qf_hard_sigmoid_form_of(s_y, 0, &f);
    const double m = s_x > f.c3_scale ? s_x : f.c3_scale;
    return isfinite(f.t_scale) && 2.0 * m / ((double)(1 << 20) * f.t_scale) < 1.0;
}

/* int8 LeakyRelu as TFLite's LEAKY_RELU computes it (LeakyReluPrepare and
 * reference_ops::QuantizeLeakyRelu, the kernel its int8 path calls from 2.3
 * on, TFLite Micro's too; 2.2's LEAKY_RELU has no int8 path): two requantizations of v = x - zp_x, the identity s_x / s_y for v
 * >= 0 and alpha s_x / s_y for v < 0, each MultiplyByQuantizedMultiplier
 * (requant.h), + zp_y, clamped to int8. Prepare forms both multipliers in
 * float32 as TFLite does (s_x * alpha / s_y, left to right, then widened to
 * double for QuantizeMultiplier): a multiplier formed in double would differ
 * in its last mantissa bit now and then, and so would an output.
 *
 *   qf_leaky_relu_params p;
 *   if (qf_leaky_relu_prepare(s_x, zp_x, s_y, zp_y, alpha, &p)) ...   // once
 *   int8_t y = qf_leaky_relu_int8(&p, x);                               // per value
 */
typedef struct qf_leaky_relu_params {
    int32_t zp_x, zp_y;
    int32_t id_mult, alpha_mult; /* Q31 mantissas (requant.h) */
    int id_shift, alpha_shift;
} qf_leaky_relu_params;

/* False (no int8 form) for scales that are not positive and finite, an alpha
 * that is negative or not finite (TFLite's Prepare would take a negative
 * one, but qf_quantize_multiplier is defined for m >= 0 only), or a
 * multiplier whose positive shift would overflow v * 2^shift for |v| <= 255
 * (a multiplier of 2^23 or more: scales no calibration gives). */
static inline bool qf_leaky_relu_prepare(float s_x, int32_t zp_x, float s_y, int32_t zp_y, float alpha,
                                         qf_leaky_relu_params *p)
{
    if (!(s_x > 0.0f) || !(s_y > 0.0f) || !isfinite(s_x) || !isfinite(s_y) || !(alpha >= 0.0f) || !isfinite(alpha))
        return false;
    const float id = s_x / s_y, am = s_x * alpha / s_y;
    if (!isfinite(id) || !isfinite(am)) return false;
    p->zp_x = zp_x;
    p->zp_y = zp_y;
    qf_quantize_multiplier((double)id, &p->id_mult, &p->id_shift);
    qf_quantize_multiplier((double)am, &p->alpha_mult, &p->alpha_shift);
    return qf_requant_shift_fits(p->id_shift, 255) && qf_requant_shift_fits(p->alpha_shift, 255);
}

static inline int8_t qf_leaky_relu_int8(const qf_leaky_relu_params *p, int8_t x)
{
    const int32_t v = (int32_t)x - p->zp_x;
    const int32_t y = p->zp_y + (v >= 0 ? qf_multiply_by_quantized_multiplier(v, p->id_mult, p->id_shift)
                                        : qf_multiply_by_quantized_multiplier(v, p->alpha_mult, p->alpha_shift));
    return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y);
}

#endif
