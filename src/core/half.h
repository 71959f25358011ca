/* IEEE half precision (float16) and bfloat16 <-> float32, round to nearest
 * even as ONNX Runtime and numpy convert (NaN stays NaN, overflow goes to
 * infinity). qfold holds half-precision tensors as float32 and converts at
 * the edges: import, export, .npy files, Cast to float16 / bfloat16. */
#ifndef QF_HALF_H
#define QF_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t qf_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float qf_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float qf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return qf_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp == 0) {
        /* Zero or subnormal: man * 2^-24, exact in float32. */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return qf_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t qf_f32_to_f16(float f)
{
    uint32_t u = qf_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {
        /* Below the smallest normal half (2^-14): subnormal or zero, in units
         * of 2^-24; the float addition rounds to nearest even. */
        float v = qf_bits_f32(a) + 0.5f; /* 0.5 = 2^-1: aligns 2^-24 units to the mantissa's last bit */
        return (uint16_t)(sign | (qf_f32_bits(v) - 0x3f000000u));
    }
    /* Normal: drop 13 mantissa bits rounding to nearest even, rebias 127 -> 15. */
    uint32_t r = a + 0xfff + ((a >> 13) & 1);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float qf_bf16_to_f32(uint16_t b) { return qf_bits_f32((uint32_t)b << 16); }

static inline uint16_t qf_f32_to_bf16(float f)
{
    uint32_t u = qf_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN, quiet */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* ONNX TensorProto.DataType codes of the two half-precision types. */
#define QF_ONNX_FLOAT16  10
#define QF_ONNX_BFLOAT16 16

/* f rounded to the nearest float16 / bfloat16 (code), as float32. */
static inline float qf_half_round(float f, int code)
{
    return code == QF_ONNX_BFLOAT16 ? qf_bf16_to_f32(qf_f32_to_bf16(f)) : qf_f16_to_f32(qf_f32_to_f16(f));
}

static inline float qf_half_to_f32(uint16_t h, int code)
{
    return code == QF_ONNX_BFLOAT16 ? qf_bf16_to_f32(h) : qf_f16_to_f32(h);
}

static inline uint16_t qf_f32_to_half(float f, int code)
{
    return code == QF_ONNX_BFLOAT16 ? qf_f32_to_bf16(f) : qf_f32_to_f16(f);
}

#endif
