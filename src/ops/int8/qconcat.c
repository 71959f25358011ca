/* qfold's int8 Concat (internal op QF_OP_QCONCAT, never exported): the
 * integer executor's lowering (src/quant/lower.c) makes one of every
 * DQ -> Concat -> Q group of per-tensor int8 tensors:
 *
 *   inputs  Y_scale, Y_zp, then X_i, X_i_scale, X_i_zp for each input
 *           (com.microsoft QLinearConcat's order)
 *   attr    axis (Concat's)
 *
 * TFLite's int8 CONCATENATION takes inputs of the output's qparams only; its
 * converter puts a requantizing QUANTIZE in front of any other input. Here
 * the same: an input whose scale and zero point equal the output's is
 * copied; another is requantized as TFLite's int8 -> int8 QUANTIZE does
 * (reference_ops::Requantize): clamp(MBQM(q - zp_x, s_x / s_y) + zp_y) with
 * the multiplier from QuantizeMultiplier in double (requant.h), tabulated per
 * input for the 256 int8 values at run time (qparams are constants). TFLite
 * rounds twice there (the high multiplication rounds q - zp times the
 * mantissa to an integer, then the shift rounds again), which on operands
 * this small puts ~1 in 4 requantized values 1 LSB from the exact ratio (the
 * float simulation): that is what a TFLite-based NPU computes.
 */
#include <string.h>

#include "ops/int8/int8.h"
#include "ops/kernels.h"
#include "ops/math/requant.h"

/* Inputs of one node at most (64 concatenated tensors; the lowering makes
 * no larger one). */
enum { QF_MAX_INPUTS_QCONCAT = 2 + 3 * 64 };

/* The concat axis of n over rank-`rank` inputs, in [0, rank). */
static qf_status qconcat_axis(const qf_node *n, int rank, int *axis)
{
    int64_t a = qf_node_attr_int(n, "axis", 0);
    if (a < -rank || a >= rank)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld is out of range for rank %d", n->name,
                        qf_op_label(n), (long long)a, rank);
    *axis = (int)(a < 0 ? a + rank : a);
    return QF_OK;
}

/* Inputs in triples after Y's two qparams; every X int8, of one rank and
 * equal dims but on the axis. The output's dims in y. */
static qf_status qconcat_check(const qf_node *n, const qf_tensor *const *in, int nin, int *axis, int *ndim,
                               int64_t y[QF_MAX_DIMS])
{
    char s1[128], s2[128];
    if (nin < 5 || (nin - 2) % 3 != 0)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects Y_scale, Y_zero_point and triples (X, X_scale, "
                        "X_zero_point), has %d inputs", n->name, qf_op_label(n), nin);
    for (int i = 0; i < nin; i++)
        if (!in[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, qf_op_label(n), i);
    const qf_tensor *x0 = in[2];
    QF_TRY(qconcat_axis(n, x0->ndim, axis));
    *ndim = x0->ndim;
    memcpy(y, x0->dims, sizeof(int64_t) * (size_t)x0->ndim);
    for (int i = 2; i < nin; i += 3) {
        const qf_tensor *x = in[i];
        if (x->dtype != QF_DTYPE_I8)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input %d has dtype %s, expected int8", n->name,
                            qf_op_label(n), i, qf_dtype_name(x->dtype));
        bool fit = x->ndim == x0->ndim;
        for (int d = 0; fit && d < x->ndim; d++)
            fit = d == *axis || x->dims[d] < 0 || x0->dims[d] < 0 || x->dims[d] == x0->dims[d];
        if (!fit)
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): input shapes %s and %s differ off axis %d", n->name,
                            qf_op_label(n), qf_shape_str(x0->ndim, x0->dims, s1, sizeof s1),
                            qf_shape_str(x->ndim, x->dims, s2, sizeof s2), *axis);
        if (i > 2) y[*axis] = y[*axis] < 0 || x->dims[*axis] < 0 ? -1 : y[*axis] + x->dims[*axis];
    }
    return QF_OK;
}

static qf_status qf_qconcat_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *in[QF_MAX_INPUTS_QCONCAT];
    if (n->ninputs > QF_MAX_INPUTS_QCONCAT)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): more than %d inputs", n->name, qf_op_label(n),
                        QF_MAX_INPUTS_QCONCAT);
    for (int i = 0; i < n->ninputs; i++) in[i] = n->inputs[i] ? &n->inputs[i]->type : NULL;
    int axis, ndim;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qconcat_check(n, in, n->ninputs, &axis, &ndim, y));
    qf_set_output(n, 0, QF_DTYPE_I8, ndim, y);
    return QF_OK;
}

typedef struct qconcat_state {
    int axis;
} qconcat_state;

static qf_status qf_qconcat_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qconcat_state *st = state;
    int ndim;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qconcat_check(n, io->in, io->nin, &st->axis, &ndim, y));
    float s;
    int32_t z;
    for (int i = 0; i < io->nin; i += 3) QF_TRY(qf_int8_qparams(n, io->in[i], io->in[i + 1], i ? "X" : "Y", &s, &z));
    return QF_OK;
}

static qf_status qf_qconcat_forward_f32(const qf_kernel_io *io)
{
    const qconcat_state *st = io->state;
    const qf_node *n = io->node;
    const qf_tensor *yt = io->out[0];
    float sy, sx;
    int32_t zy, zx;
    QF_TRY(qf_int8_qparams(n, io->in[0], io->in[1], "Y", &sy, &zy));
    int64_t outer = qf_shape_numel(st->axis, yt->dims);
    int64_t inner = qf_shape_numel(yt->ndim - st->axis - 1, yt->dims + st->axis + 1);
    int64_t yrow = yt->dims[st->axis] * inner, at = 0;
    int8_t *y = yt->data;
    for (int i = 2; i < io->nin; i += 3) {
        const qf_tensor *x = io->in[i];
        QF_TRY(qf_int8_qparams(n, io->in[i + 1], io->in[i + 2], "X", &sx, &zx));
        const int64_t chunk = x->dims[st->axis] * inner;
        const int8_t *xp = x->data;
        if (sx == sy && zx == zy) {
            for (int64_t o = 0; o < outer; o++) memcpy(y + o * yrow + at, xp + o * chunk, (size_t)chunk);
        } else {
            /* TFLite's Requantize: the multiplier s_x / s_y in double; |q -
             * zp| <= 255, so any multiplier below 2^23 shifts safely. */
            const double real = (double)sx / (double)sy;
            int32_t mult, shift;
            QF_TRY(qf_int8_requant_prepare_fixed(n, &real, 1, 255, &mult, &shift));
            int8_t table[256];
            for (int q = -128; q < 128; q++) {
                int32_t v = qf_multiply_by_quantized_multiplier(q - zx, mult, (int)shift) + zy;
                table[q + 128] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
            }
            for (int64_t o = 0; o < outer; o++) {
                const int8_t *src = xp + o * chunk;
                int8_t *dst = y + o * yrow + at;
                for (int64_t k = 0; k < chunk; k++) dst[k] = table[src[k] + 128];
            }
        }
        at += chunk;
    }
    return QF_OK;
}

const qf_op_kernels qf_qconcat_kernels = {
    .infer = qf_qconcat_infer,
    .prepare = qf_qconcat_prepare,
    .state_size = sizeof(qconcat_state),
    .forward_f32 = qf_qconcat_forward_f32,
};
