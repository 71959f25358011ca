/* qfold's int8 element-wise functions with TFLite's integer arithmetic
 * (internal op QF_OP_QLUT, never exported): the integer executor's lowering
 * (src/quant/lower.c) makes one of a DQ -> f -> Q group of per-tensor int8
 * tensors whose TFLite int8 kernel is fixed point:
 *
 *   inputs  X, X_scale, X_zp, Y_scale, Y_zp   (constant qparams)
 *   attr    qfold_fn: "hard_swish" (reference_ops::HardSwish, fixed_point.h),
 *                     "hard_sigmoid" (alpha 1/6, beta 1/2: the ADD + RELU6 and
 *                     MUL of qf_hard_sigmoid_form, fixed_point.h, each with
 *                     TFLite's int8 arithmetic, qf_int8_binary of qadd.c),
 *                     "exp", "log" (TFLite 2.2's DEQUANTIZE -> EXP / LOG -> QUANTIZE),
 *                     "leaky_relu" (reference_ops::QuantizeLeakyRelu, fixed_point.h;
 *                     attribute alpha, ONNX's default 0.01)
 *
 * Prepare tabulates f for the 256 int8 inputs; the kernel looks each value
 * up. (TFLite's LOGISTIC, TANH and SOFTMAX int8 kernels of its interpreter,
 * 2.2's and today's, compute their tables in float: qfold's DQ -> float -> Q
 * run gives their integers, checked bit for bit, so they stay unlowered.)
 *
 * TFLite 2.2 has no int8 EXP or LOG ("Type 9 is currently not supported"):
 * qfold exports them as DEQUANTIZE -> float EXP / LOG -> QUANTIZE and
 * tabulates exactly what those three compute (qlut_float_fn). Later TFLite
 * versions' int8 EXP / LOG fill a table in float too, but multiply by
 * 1 / s_y where QUANTIZE divides by s_y: a rounding apart, not checked here.
 */
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/math/fixed_point.h"
#include "ops/int8/int8.h"
#include "ops/kernels.h"

typedef struct qlut_state {
    int8_t table[256]; /* [(uint8_t)x] */
} qlut_state;

static const char *const qlut_names[5] = {"X", "X_scale", "X_zero_point", "Y_scale", "Y_zero_point"};

static qf_status qlut_check(const qf_node *n, const qf_tensor *const *in)
{
    char s[128];
    for (int i = 0; i < 5; i++) {
        const qf_tensor *t = in[i];
        qf_dtype want = i == 1 || i == 3 ? QF_DTYPE_F32 : QF_DTYPE_I8;
        if (t->dtype != want)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected %s", n->name,
                            qf_op_label(n), qlut_names[i], qf_dtype_name(t->dtype), qf_dtype_name(want));
        if (i > 0 && qf_shape_numel(t->ndim, t->dims) != 1)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has shape %s; only one value is supported",
                            n->name, qf_op_label(n), qlut_names[i], qf_shape_str(t->ndim, t->dims, s, sizeof s));
    }
    const char *fn = qf_node_attr_string(n, "qfold_fn", "");
    if (strcmp(fn, "hard_swish") != 0 && strcmp(fn, "hard_sigmoid") != 0 && strcmp(fn, "exp") != 0 &&
        strcmp(fn, "log") != 0 && strcmp(fn, "leaky_relu") != 0)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): unknown qfold_fn '%s'", n->name, qf_op_label(n), fn);
    return QF_OK;
}

/* TFLite 2.2's DEQUANTIZE -> EXP / LOG (float) -> QUANTIZE for one int8 q,
 * as measured on its interpreter (every q, several qparams, tests/tflite):
 * x = (float)(q - zp_x) * s_x (exact in double, then rounded: the float
 * product), y = expf / logf (glibc's, which TFLite's std::exp calls), then
 * QUANTIZE: round(y / s_y) in double (its scale is a double: exp(0) / 0.4f
 * is 2.4999999 there, 2.5 in float; ties away from zero), cast to int32 as
 * x86-64's cvttsd2si does (a NaN or a value outside int32: INT32_MIN: log of
 * x <= 0, an exp past 2^31 steps), + zp_y wrapping as int32 does,
 * clamped to [-128, 127]. So log(0) gives -128 for zp_y >= 0 and 127 for
 * zp_y < 0 (INT32_MIN + zp_y wraps to a large positive), as TFLite does. */
static int8_t qlut_float_fn(bool is_exp, int q, float sx, int32_t zx, float sy, int32_t zy)
{
    const float x = (float)(q - zx) * sx;
    const float y = is_exp ? expf(x) : logf(x);
    const double r = round((double)y / (double)sy);
    int32_t k = INT32_MIN;
    if (r >= -2147483648.0 && r < 2147483648.0) k = (int32_t)r;
    const int32_t sum = (int32_t)((uint32_t)k + (uint32_t)zy);
    return (int8_t)(sum < -128 ? -128 : sum > 127 ? 127 : sum);
}

static qf_status qf_qlut_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 5));
    const qf_tensor *in[5];
    for (int i = 0; i < 5; i++) in[i] = &n->inputs[i]->type;
    QF_TRY(qlut_check(n, in));
    qf_set_output(n, 0, QF_DTYPE_I8, in[0]->ndim, in[0]->dims);
    return QF_OK;
}

/* HardSigmoid as the TFLite export writes it: ADD(x, C3) with RELU6 into t,
 * MUL(t, C6) into y, each with TFLite's int8 arithmetic. */
static qf_status qlut_hard_sigmoid(const qf_node *n, float sx, int32_t zx, float sy, int32_t zy, int8_t *table)
{
    qf_hard_sigmoid_form f;
    qf_hard_sigmoid_form_of(sy, zy, &f);
    qf_int8_binary add, mul;
    QF_TRY(qf_int8_add_prepare(n, sx, zx, f.c3_scale, 0, f.t_scale, zy, f.t_lo, f.t_hi, &add));
    QF_TRY(qf_int8_mul_prepare(n, f.t_scale, zy, f.c6_scale, 0, sy, zy, -128, 127, &mul));
    for (int q = -128; q < 128; q++)
        table[(uint8_t)q] = qf_int8_binary_eval(&mul, qf_int8_binary_eval(&add, q, f.c3), f.c6);
    return QF_OK;
}

static qf_status qf_qlut_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qlut_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 5));
    QF_TRY(qlut_check(n, io->in));
    float sx, sy;
    int32_t zx, zy;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "X", &sx, &zx));
    QF_TRY(qf_int8_qparams(n, io->in[3], io->in[4], "Y", &sy, &zy));
    const char *fn = qf_node_attr_string(n, "qfold_fn", "");
    if (strcmp(fn, "exp") == 0 || strcmp(fn, "log") == 0) {
        for (int q = -128; q < 128; q++)
            st->table[(uint8_t)q] = qlut_float_fn(fn[0] == 'e', q, sx, zx, sy, zy);
        return QF_OK;
    }
    if (strcmp(fn, "hard_sigmoid") == 0) return qlut_hard_sigmoid(n, sx, zx, sy, zy, st->table);
    if (strcmp(fn, "leaky_relu") == 0) {
        const float alpha = qf_node_attr_float(n, "alpha", 0.01f);
        qf_leaky_relu_params p;
        if (!qf_leaky_relu_prepare(sx, zx, sy, zy, alpha, &p))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): alpha %g with scales %g -> %g is outside TFLite's "
                            "int8 LeakyRelu (alpha >= 0, multipliers alpha * s_x / s_y and s_x / s_y below 2^23)",
                            n->name, qf_op_label(n), (double)alpha, (double)sx, (double)sy);
        for (int q = -128; q < 128; q++) st->table[(uint8_t)q] = qf_leaky_relu_int8(&p, (int8_t)q);
        return QF_OK;
    }
    qf_hard_swish_params p;
    if (!qf_hard_swish_prepare(sx, zx, sy, zy, &p))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scales %g -> %g are outside TFLite's int8 HardSwish "
                        "(the output scale must be at least the input's / 128)", n->name, qf_op_label(n),
                        (double)sx, (double)sy);
    for (int q = -128; q < 128; q++) st->table[(uint8_t)q] = qf_hard_swish_int8(&p, (int8_t)q);
    return QF_OK;
}

typedef struct qlut_job {
    const int8_t *table;
    const uint8_t *x;
    int8_t *y;
} qlut_job;

static void qlut_slice(void *ctx, int64_t lo, int64_t hi)
{
    const qlut_job *j = ctx;
    for (int64_t i = lo; i < hi; i++) j->y[i] = j->table[j->x[i]];
}

static qf_status qf_qlut_forward_f32(const qf_kernel_io *io)
{
    const qlut_state *st = io->state;
    qlut_job j = {.table = st->table, .x = io->in[0]->data, .y = io->out[0]->data};
    qf_parallel_for(qf_tensor_numel(io->out[0]), 65536, qlut_slice, &j);
    return QF_OK;
}

const qf_op_kernels qf_qlut_kernels = {
    .infer = qf_qlut_infer,
    .prepare = qf_qlut_prepare,
    .state_size = sizeof(qlut_state),
    .forward_f32 = qf_qlut_forward_f32,
};
