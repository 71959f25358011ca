/* qfold's int8 PRelu with TFLite's integer arithmetic (internal op
 * QF_OP_QPRELU, never exported as ONNX; TFLite's PRELU): the integer
 * executor's lowering (src/quant/lower_prelu.c) makes one of a
 * DQ -> PRelu(x, DQ(alpha)) -> Q group.
 *
 *   inputs  X, X_scale, X_zp, ALPHA, ALPHA_scale, ALPHA_zp, Y_scale, Y_zp
 *           (ALPHA an int8 tensor that broadcasts to X, per-tensor qparams)
 *
 * As TFLite's PRELU int8 kernel (reference_ops::BroadcastPrelu4DSlow, which
 * its interpreter runs for int8 with or without broadcasting): with
 * d = x - zp_x,
 *
 *   y = zp_y + MultiplyByQuantizedMultiplier(d, M1)                 d >= 0
 *   y = zp_y + MultiplyByQuantizedMultiplier(d * (a - zp_a), M2)    d <  0
 *
 * saturated to int8, where M1 = s_x / s_y and M2 = s_x * s_a / s_y are
 * computed as TFLite's PreluPrepare computes them (qf_prelu_multipliers,
 * requant.h), then QuantizeMultiplier.
 * |d| <= 255 and |d (a - zp_a)| <= 65025: prepare refuses a multiplier
 * whose left shift would overflow those (TFLite would compute garbage). */
#include <string.h>

#include "ops/int8/int8.h"
#include "ops/kernels.h"
#include "ops/math/broadcast.h"
#include "ops/math/requant.h"

typedef struct qprelu_state {
    int32_t zx, za, zy;
    int32_t m1, m2;
    int s1, s2;
} qprelu_state;

static const char *const qprelu_names[8] = {"X",           "X_scale", "X_zero_point", "alpha",
                                            "alpha_scale", "alpha_zero_point", "Y_scale", "Y_zero_point"};

static qf_status qprelu_check(const qf_node *n, const qf_tensor *const *in)
{
    char s[128], t[128];
    for (int i = 0; i < 8; i++) {
        const qf_dtype want = i == 1 || i == 4 || i == 6 ? QF_DTYPE_F32 : QF_DTYPE_I8;
        if (in[i]->dtype != want)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected %s", n->name,
                            qf_op_label(n), qprelu_names[i], qf_dtype_name(in[i]->dtype), qf_dtype_name(want));
    }
    if (!qf_broadcast_to_ok(in[3]->ndim, in[3]->dims, in[0]->ndim, in[0]->dims))
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): alpha of shape %s does not broadcast to X's %s", n->name,
                        qf_op_label(n), qf_shape_str(in[3]->ndim, in[3]->dims, s, sizeof s),
                        qf_shape_str(in[0]->ndim, in[0]->dims, t, sizeof t));
    return QF_OK;
}

static qf_status qf_qprelu_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 8));
    const qf_tensor *in[8];
    for (int i = 0; i < 8; i++) in[i] = &n->inputs[i]->type;
    QF_TRY(qprelu_check(n, in));
    qf_set_output(n, 0, QF_DTYPE_I8, in[0]->ndim, in[0]->dims);
    return QF_OK;
}

static qf_status qf_qprelu_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qprelu_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 8));
    QF_TRY(qprelu_check(n, io->in));
    float sx, sa, sy;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "X", &sx, &st->zx));
    QF_TRY(qf_int8_qparams(n, io->in[4], io->in[5], "alpha", &sa, &st->za));
    QF_TRY(qf_int8_qparams(n, io->in[6], io->in[7], "Y", &sy, &st->zy));
    double m1, m2;
    qf_prelu_multipliers(sx, sa, sy, &m1, &m2);
    qf_quantize_multiplier(m1, &st->m1, &st->s1);
    qf_quantize_multiplier(m2, &st->m2, &st->s2);
    /* the largest |x - zp_x| and |(x - zp_x)(a - zp_a)| of int8 operands */
    if (!qf_requant_shift_fits(st->s1, 255) || !qf_requant_shift_fits(st->s2, 255 * 255))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scales x %g, alpha %g -> y %g give a requantization "
                        "multiplier too large for int8 PRelu", n->name, qf_op_label(n), (double)sx, (double)sa,
                        (double)sy);
    return QF_OK;
}

static inline int8_t qprelu_one(const qprelu_state *st, int32_t x, int32_t a)
{
    const int32_t d = x - st->zx;
    int32_t v = d >= 0 ? qf_multiply_by_quantized_multiplier(d, st->m1, st->s1)
                       : qf_multiply_by_quantized_multiplier(d * (a - st->za), st->m2, st->s2);
    v += st->zy;
    return (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
}

static qf_status qf_qprelu_forward_f32(const qf_kernel_io *io)
{
    const qprelu_state *st = io->state;
    const qf_tensor *x = io->in[0], *a = io->in[3];
    const int8_t *px = x->data, *pa = a->data;
    int8_t *py = io->out[0]->data;
    const qf_tensor *ops[2] = {x, a};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, x->ndim, x->dims, 2, ops);
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        const int8_t *xr = px + it.off[0], *ar = pa + it.off[1];
        int8_t *yr = py + r * it.len;
        for (int64_t i = 0; i < it.len; i++) yr[i] = qprelu_one(st, xr[i], ar[i * it.step[1]]);
    }
    return QF_OK;
}

const qf_op_kernels qf_qprelu_kernels = {
    .infer = qf_qprelu_infer,
    .prepare = qf_qprelu_prepare,
    .state_size = sizeof(qprelu_state),
    .forward_f32 = qf_qprelu_forward_f32,
};
