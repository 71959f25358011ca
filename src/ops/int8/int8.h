/* The integer core every int8 kernel shares (QLinearConv, QLinearMatMul,
 * ConvInteger, MatMulInteger today; qfold's own int8 executor next):
 * widening with the zero point subtracted, im2row over the conv geometry of
 * conv.h, an int16 x int16 -> int32 GEMM, and the two requantizations from
 * int32 to int8 / uint8.
 *
 *   // prepare: geometry (qf_conv_geometry), the accumulator bound, multipliers
 *   QF_TRY(qf_int8_check_k(n, g.k, qf_int8_range_abs(xdt, x_zp), qf_int8_range_abs(wdt, w_zp)));
 *   QF_TRY(qf_int8_requant_prepare_fixed(n, real_scales, m, bound, multiplier, shift));
 *   // kernel (never allocates: w16, col and acc are scratch)
 *   qf_int8_widen_rows(w, wdt, w_zp, per_channel, g.m, g.k, w16);
 *   qf_int8_conv_group(&g, x, xdt, x_zp, bn, grp, w16, bias, col, acc);
 *   qf_int8_requant_fixed(&rq, grp * g.mg, g.mg, g.out_plane, acc, y_block);
 *
 * Zero points are subtracted exactly: operands are widened to int16 as
 * q - zp (in [-255, 255] for int8 and uint8 alike, so int8 and uint8
 * operands and any zero points mix freely), and the padding of a conv is 0
 * in that domain (the real value 0). The products are summed in int32; the
 * caller bounds K so that no partial sum can overflow (qf_int8_check_k).
 *
 * Requantization (rq describes per-tensor or per-channel parameters and the
 * output's clamp range [lo, hi], the dtype's range narrowed by a fused
 * activation):
 *   (a) qf_int8_requant_float, ONNX's definition as ONNX Runtime computes it
 *       (MlasRequantizeOutput): y = saturate(round_half_even((float)acc *
 *       scale) + zp) with scale = x_scale * w_scale / y_scale, all float32,
 *       multiplied left to right (see qf_int8_combined_scale);
 *   (b) qf_int8_requant_fixed, TFLite's fixed point (requant.h): y =
 *       clamp(MultiplyByQuantizedMultiplier(acc, multiplier, shift) + zp).
 */
#ifndef QF_OPS_INT8_H
#define QF_OPS_INT8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/math/quant_math.h"
#include "ops/math/requant.h"
#include "ops/ref/conv.h"
#include "qfold/graph.h"
#include "qfold/schema.h"

/* Requantization parameters of one output, per tensor or per channel (the
 * arrays then have one entry per channel; CMSIS-NN's cmsis_nn_per_channel_quant_params
 * layout). A requantization reads only the fields of its kind. */
typedef struct qf_int8_requant {
    const float *scale;        /* (a): combined scale per channel (qf_int8_combined_scale) */
    const int32_t *multiplier; /* (b): per channel, from qf_quantize_multiplier */
    const int32_t *shift;      /* (b): per channel */
    bool per_channel;          /* false: every element uses entry 0 */
    bool per_col;              /* channel = column index (MatMul's B columns); else row (conv's M) */
    int32_t zp;                /* output zero point */
    int32_t lo, hi;            /* output clamp, within the dtype's range */
    qf_dtype dtype;            /* QF_DTYPE_I8 or QF_DTYPE_U8 */
} qf_int8_requant;

/* Largest |q - zp| over the values q of dt (int8 or uint8). */
int32_t qf_int8_range_abs(qf_dtype dt, int32_t zp);

/* Accumulator bound: every partial sum of K products (x - x_zp)(w - w_zp)
 * is at most K * x_abs * w_abs in magnitude, which must fit int32 (int8
 * symmetric weights and activations with zero point 0: K * 128 * 128, so
 * K <= 131071). A larger K is refused (QF_ERR_UNSUPPORTED naming n). */
qf_status qf_int8_check_k(const qf_node *n, int64_t k, int32_t x_abs, int32_t w_abs);

/* The combined float scale as ONNX Runtime forms it: (x_scale * w_scale) /
 * y_scale in float32, in that order. */
float qf_int8_combined_scale(float x_scale, float w_scale, float y_scale);

/* (b)'s parameters: multiplier[c], shift[c] = qf_quantize_multiplier(real[c])
 * for `channels` channels. Refuses a scale that is not finite and >= 0, and
 * a multiplier >= 1 whose left shift could overflow an accumulator of
 * magnitude acc_bound (QF_ERR_UNSUPPORTED naming n). */
qf_status qf_int8_requant_prepare_fixed(const qf_node *n, const double *real, int64_t channels, int64_t acc_bound,
                                        int32_t *multiplier, int32_t *shift);

/* One accumulator of channel ch requantized, (a) or (b): the arithmetic of
 * the two loops below, shared with the oneDNN backend's int8 convolution
 * (src/backend/dnnl/dnnl_qlinear.c), which requantizes its int32
 * accumulators with them so that both engines give the same integers. */
static inline int32_t qf_int8_requant_one_float(const qf_int8_requant *rq, int64_t ch, int32_t acc)
{
    /* onnxruntime: float(acc) * scale (float32), rounded half to even, + zp,
     * clamped to [lo, hi]. Clamping before or after the rounding is the same
     * (the bounds are integers). */
    float v = qf_round_half_even_f32((float)acc * rq->scale[ch]);
    return qf_saturate_range_f32(v + (float)rq->zp, rq->lo, rq->hi, rq->zp);
}

static inline int32_t qf_int8_requant_one_fixed(const qf_int8_requant *rq, int64_t ch, int32_t acc)
{
    int64_t v = (int64_t)qf_multiply_by_quantized_multiplier(acc, rq->multiplier[ch], (int)rq->shift[ch]) + rq->zp;
    return (int32_t)(v < rq->lo ? rq->lo : v > rq->hi ? rq->hi : v);
}

/* y[r][c] (rows x cols, contiguous) from acc[r][c]; a per-row channel is
 * ch0 + r, a per-column one c. y is int8_t or uint8_t by rq->dtype. */
void qf_int8_requant_float(const qf_int8_requant *rq, int64_t ch0, int64_t rows, int64_t cols, const int32_t *acc,
                           void *y);
void qf_int8_requant_fixed(const qf_int8_requant *rq, int64_t ch0, int64_t rows, int64_t cols, const int32_t *acc,
                           void *y);

/* Per-column parameters of qf_int8_requant_fixed_row, one entry per
 * column (a per-tensor value repeated): (b)'s multiplier and shift, the
 * int32 bias added first (wrapping), and real from
 * qf_int8_requant_row_prepare. */
typedef struct qf_int8_row_params {
    const int32_t *multiplier, *shift, *bias;
    const double *real;
} qf_int8_row_params;

/* real[c] (multiplier[c] 2^-31) of the n columns. */
void qf_int8_requant_row_prepare(int64_t n, const int32_t *multiplier, double *real);

/* One row of n accumulators, channel c at column c: y[c] = clamp(MBQM(acc[c]
 * + bias[c], multiplier[c], shift[c]) + rq->zp, rq->lo, rq->hi), int8 or
 * uint8 by rq->dtype (rq's own arrays are not read). Element for element
 * the integers of qf_int8_requant_one_fixed, vectorized (in double where
 * that is exact: sums below 2^22 after the left shift; the others in
 * requant.h's integers): the oneDNN backend's int8 convolution requantizes
 * its rows with it. */
void qf_int8_requant_fixed_row(const qf_int8_requant *rq, int64_t n, const int32_t *acc,
                               const qf_int8_row_params *p, void *y);

/* The implementations of qf_int8_requant_fixed_row, all giving the same
 * integers: BEST is the widest this CPU runs (what qf_int8_requant_fixed_row
 * uses); DOUBLE the portable one (double lanes, integer fallback past 2^22);
 * AVX2 and AVX512 requant.h's integer arithmetic itself on int32 lanes with
 * 64-bit products (x86-64 only). Tests run each one the CPU has
 * (qf_int8_requant_row_has) against qf_int8_requant_one_fixed. */
typedef enum qf_int8_row_isa {
    QF_INT8_ROW_BEST,
    QF_INT8_ROW_DOUBLE,
    QF_INT8_ROW_AVX2,
    QF_INT8_ROW_AVX512
} qf_int8_row_isa;

bool qf_int8_requant_row_has(qf_int8_row_isa isa);

/* qf_int8_requant_fixed_row with implementation isa, which must be one
 * qf_int8_requant_row_has accepts. */
void qf_int8_requant_fixed_row_isa(qf_int8_row_isa isa, const qf_int8_requant *rq, int64_t n,
                                   const int32_t *acc, const qf_int8_row_params *p, void *y);

/* dst[r][i] = src[r][i] - zp[per_row ? r : 0] for a rows x k int8 / uint8
 * matrix src (dt). zp NULL: 0. */
void qf_int8_widen_rows(const void *src, qf_dtype dt, const int32_t *zp, bool per_row, int64_t rows, int64_t k,
                        int16_t *dst);

/* The transpose: dst[j][i] = src[i][j] - zp[per_col ? j : 0] for a k x n
 * matrix src; dst is n x k. */
void qf_int8_widen_cols_t(const void *src, qf_dtype dt, const int32_t *zp, bool per_col, int64_t k, int64_t n,
                          int16_t *dst);

/* c[i * ldc + j] = bias[i] (0 if bias is NULL) + sum_l a[i * k + l] * bt[j * k + l]
 * for i < m, j < n: A (m x k) times B (k x n) given as B^T, both int16, so
 * the inner loop is a contiguous dot product (GCC turns it into pmaddwd).
 * Threads over j (core/parallel.h); the caller must have checked K
 * (qf_int8_check_k). The bias add wraps like ONNX Runtime's int32 add. */
void qf_int8_gemm_nt(int64_t m, int64_t n, int64_t k, const int16_t *a, const int16_t *bt, const int32_t *bias,
                     int32_t *c, int64_t ldc);

/* Bytes of the int16 column matrix qf_int8_conv_group needs: out_plane x K
 * (SIZE_MAX if it does not fit). */
size_t qf_int8_conv_col_bytes(const qf_conv_geom *cg);

/* Column matrix, transposed ("im2row"), of `channels` planes of x (dt):
 * col[p][k], p = (od, oh, ow), k = (c, kd, kh, kw), holds
 * X[c, od*sd - pd + kd*dd, ...] - zp, or 0 in the padding. */
void qf_int8_im2row3(const void *x, qf_dtype dt, int32_t zp, int64_t channels, const qf_spatial *l, int16_t *col);

/* One group of one batch item of a (non-transposed) conv: acc[r][p] (mg x
 * out_plane) = bias[g*mg + r] + sum_k (W[g*mg + r][k] - w_zp) * (col[p][k]),
 * from x (the whole [N, C, ...] input, dt xdt, zero point x_zp) and w16, the
 * whole weight widened by qf_int8_widen_rows ([M][K]). col is scratch of
 * qf_int8_conv_col_bytes. bias may be NULL. */
void qf_int8_conv_group(const qf_conv_geom *cg, const void *x, qf_dtype xdt, int32_t x_zp, int64_t bn, int64_t g,
                        const int16_t *w16, const int32_t *bias, int16_t *col, int32_t *acc);

/* The adjoint of im2row for a transposed conv, in int32: column matrix col
 * (rows (c, kd, kh, kw) of `channels` output planes, columns the input
 * positions (id, ih, iw)) added into y[c, id*sd - pd + kd*dd, ...] where that
 * lies in the output (conv.h's qf_conv_col2im3 on integers; the caller
 * bounded the sums). Additions wrap as int32 two's complement. */
void qf_int8_col2im3(const int32_t *col, int64_t channels, const qf_spatial *l, int32_t *y);

/* --- qfold's internal int8 ops (the integer executor, src/quant/lower.c) -- */

/* A per-tensor int8 quantization of an internal int8 op: scale a float32
 * constant > 0, zero point an int8 constant, one value each (`what` names
 * the tensor in the message). */
qf_status qf_int8_qparams(const qf_node *n, const qf_tensor *scale, const qf_tensor *zp, const char *what, float *s,
                          int32_t *z);

/* The output range [lo, hi] of n inside [min, max] (its output type's
 * range): its qfold_clamp attribute (a fused activation's range in the
 * output's integers) or [min, max]. QF_ERR_INVALID naming the node when the
 * attribute is not two values lo <= hi inside [min, max]. */
qf_status qf_int8_clamp_range(const qf_node *n, int32_t min, int32_t max, int32_t *lo, int32_t *hi);
/* The same for an int8 output: [min, max] = [-128, 127]. */
qf_status qf_int8_clamp_attr(const qf_node *n, int32_t *lo, int32_t *hi);

/* TFLite's int8 ADD and MUL on one pair of int8 values (reference
 * integer_ops add.h / mul.h, see qadd.c): the parameters once, then
 * qf_int8_binary_eval per pair (clamped to [lo, hi], a fused activation's
 * range inside [-128, 127]). The prepares refuse, naming n, the scales
 * TFLite's Prepare refuses (an Add multiplier outside (0, 1), a Mul shift
 * that could overflow). qadd.c's QADD / QMUL tabulate it; qlut.c's
 * HardSigmoid chains an ADD and a MUL of it. */
typedef struct qf_int8_binary {
    bool mul;
    int32_t zp_a, zp_b, zp_y, lo, hi;
    int32_t mult_a, mult_b, mult_y; /* Add: both inputs' and the output's; Mul: mult_y only */
    int32_t shift_a, shift_b, shift_y;
} qf_int8_binary;
qf_status qf_int8_add_prepare(const qf_node *n, float sa, int32_t zp_a, float sb, int32_t zp_b, float sy,
                              int32_t zp_y, int32_t lo, int32_t hi, qf_int8_binary *p);
qf_status qf_int8_mul_prepare(const qf_node *n, float sa, int32_t zp_a, float sb, int32_t zp_b, float sy,
                              int32_t zp_y, int32_t lo, int32_t hi, qf_int8_binary *p);
int8_t qf_int8_binary_eval(const qf_int8_binary *p, int32_t a, int32_t b);

/* acc / count rounded to nearest, ties away from zero, as TFLite's integer
 * AveragePool and Mean divide (count > 0). */
static inline int64_t qf_int8_div_round_away(int64_t acc, int64_t count)
{
    return acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
}

#endif
