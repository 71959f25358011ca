/* Quantization arithmetic shared by QuantizeLinear / DequantizeLinear, the
 * fake-quant simulation and the int8 kernels, so that all of them round and
 * saturate identically (a QAT model and its converted form must agree bit for
 * bit where they should).
 *
 *   q = qf_quantize_s8(x, scale, zp);       // saturate(round_half_even(x / scale) + zp)
 *   x = qf_dequantize_f32(q, scale, zp);    // (q - zp) * scale
 *
 * Conventions (ONNX QuantizeLinear, PyTorch quantize_per_tensor):
 *  - x / scale is computed in float32 (a division, not a multiplication by a
 *    precomputed 1 / scale: the two differ in the last bit near ties);
 *  - rounding is half to even (2.5 -> 2, -2.5 -> -2, 3.5 -> 4), done explicitly
 *    so it does not depend on the floating-point environment's rounding mode;
 *  - the zero point is added after rounding, then the result is saturated to
 *    the integer type's range; NaN saturates to the zero point (as if x were 0).
 * Everything here is `static inline` and allocation-free.
 */
#ifndef QF_OPS_QUANT_MATH_H
#define QF_OPS_QUANT_MATH_H

#include <math.h>
#include <stdint.h>

/* Round to the nearest integer, ties to even. Exact for every float:
 * v - floor(v) is exact, and |v| >= 2^23 is already an integer (frac 0). */
static inline float qf_round_half_even_f32(float v)
{
    float r = floorf(v);
    float frac = v - r;
    if (frac > 0.5f) return r + 1.0f;
    if (frac < 0.5f) return r;
    /* A tie: pick the even neighbour (r is an integer below 2^24 here).
     * NaN and +-Inf also land here (frac is NaN) and come back unchanged. */
    return fmodf(r, 2.0f) == 0.0f ? r : r + 1.0f;
}

static inline double qf_round_half_even_f64(double v)
{
    double r = floor(v);
    double frac = v - r;
    if (frac > 0.5) return r + 1.0;
    if (frac < 0.5) return r;
    return fmod(r, 2.0) == 0.0 ? r : r + 1.0;
}

/* PyTorch 1.13's qparams for an observed range [min, max]
 * (ObserverBase._calculate_qparams, float32 arithmetic as torch does it):
 * the range is widened to include 0; symmetric: scale = max(-lo, hi) /
 * ((qmax - qmin) / 2), zero point 0 for a signed range (128 for quint8, the
 * rounded-down midpoint of another unsigned range); affine: scale =
 * (hi - lo) / (qmax - qmin), zero point qmin - round(lo / scale) clamped to
 * [qmin, qmax]; scale at least eps. Nothing observed (min > max, NaN):
 * scale 1, zero point 0. */
static inline void qf_qparams_torch(float min, float max, int symmetric, int32_t qmin, int32_t qmax, float eps,
                                    float *scale, int32_t *zero_point)
{
    *scale = 1.0f;
    *zero_point = 0;
    if (!(min <= max)) return;
    float lo = min < 0.0f ? min : 0.0f;
    float hi = max > 0.0f ? max : 0.0f;
    if (symmetric) {
        float m = -lo > hi ? -lo : hi;
        *scale = m / ((float)(qmax - qmin) / 2.0f);
        if (*scale < eps) *scale = eps;
        if (qmin >= 0) *zero_point = (qmin == 0 && qmax == 255) ? 128 : (qmin + qmax) / 2;
    } else {
        *scale = (hi - lo) / (float)(qmax - qmin);
        if (*scale < eps) *scale = eps;
        float zp = (float)qmin - qf_round_half_even_f32(lo / *scale);
        *zero_point = zp < (float)qmin ? qmin : zp > (float)qmax ? qmax : (int32_t)zp;
    }
}

/* Clamp an already rounded value to a range and convert. NaN -> `nan_value`. */
static inline int32_t qf_saturate_range_f32(float v, int32_t lo, int32_t hi, int32_t nan_value)
{
    if (v != v) return nan_value;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int32_t)v;
}

/* Saturate an integer-valued float to int8 [-128, 127] / uint8 [0, 255];
 * NaN -> 0. */
static inline int8_t qf_saturate_s8(float v) { return (int8_t)qf_saturate_range_f32(v, -128, 127, 0); }
static inline uint8_t qf_saturate_u8(float v) { return (uint8_t)qf_saturate_range_f32(v, 0, 255, 0); }

/* Saturate a 32-bit accumulator / integer to int8 / uint8 / [lo, hi]. */
static inline int32_t qf_clamp_s32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }
static inline int8_t qf_saturate_s8_i32(int32_t v) { return (int8_t)qf_clamp_s32(v, -128, 127); }
static inline uint8_t qf_saturate_u8_i32(int32_t v) { return (uint8_t)qf_clamp_s32(v, 0, 255); }

/* Saturate a double to int32 (the int32 bias of a converted conv / linear). */
static inline int32_t qf_saturate_s32_f64(double v)
{
    if (v != v) return 0;
    if (v <= -2147483648.0) return INT32_MIN;
    if (v >= 2147483647.0) return INT32_MAX;
    return (int32_t)v;
}

/* saturate(round_half_even(x / scale) + zp) into [lo, hi]. The rounded value
 * is added to zp in float: exact while |round(x / scale)| < 2^24, and beyond
 * that the result saturates anyway. NaN x gives zp. */
static inline int32_t qf_quantize_range_f32(float x, float scale, int32_t zp, int32_t lo, int32_t hi)
{
    float r = qf_round_half_even_f32(x / scale);
    if (r != r) return qf_clamp_s32(zp, lo, hi);
    return qf_saturate_range_f32(r + (float)zp, lo, hi, zp);
}

/* qf_quantize_range_f32 in a form compilers vectorize (no calls, no
 * branches), with the same result for every float x, NaN and +-Inf included:
 * x / scale is clamped to +-2^22 first (where every result saturates: zp is
 * an int8 / uint8 value, so zp +- 2^22 is outside [lo, hi]), NaN taken as 0;
 * then the truncation t and the exact remainder frac = v - t give the
 * rounding half to even. For a loop over many elements of one scale. */
static inline int32_t qf_quantize_range_vec_f32(float x, float scale, int32_t zp, int32_t lo, int32_t hi)
{
    float v = x / scale;
    v = v != v ? 0.0f : v;
    v = v < -4194304.0f ? -4194304.0f : v;
    v = v > 4194304.0f ? 4194304.0f : v;
    int32_t t = (int32_t)v;
    float frac = v - (float)t;
    int32_t odd = t & 1;
    int32_t r = t + ((frac > 0.5f) | ((frac == 0.5f) & odd)) - ((frac < -0.5f) | ((frac == -0.5f) & odd)) + zp;
    return r < lo ? lo : r > hi ? hi : r;
}

/* QuantizeLinear to int8 [-128, 127] / uint8 [0, 255]. */
static inline int8_t qf_quantize_s8(float x, float scale, int32_t zp)
{
    return (int8_t)qf_quantize_range_f32(x, scale, zp, -128, 127);
}
static inline uint8_t qf_quantize_u8(float x, float scale, int32_t zp)
{
    return (uint8_t)qf_quantize_range_f32(x, scale, zp, 0, 255);
}

/* DequantizeLinear: (q - zp) * scale, the subtraction in int64 (exact: an
 * int32 input and zero point, as a file may give, can overflow int32), the
 * product in float32. */
static inline float qf_dequantize_f32(int32_t q, float scale, int32_t zp)
{
    return (float)((int64_t)q - zp) * scale;
}

#endif
