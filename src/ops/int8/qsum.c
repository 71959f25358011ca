/* The integer executor's int8 ReduceSum (internal op QF_OP_QSUM, never
 * exported as such: the lowering, src/quant/lower.c, makes it from a
 * DQ -> ReduceSum -> Q group of per-tensor int8 tensors; the TFLite export
 * writes it as SUM):
 *
 *   inputs  X, X_scale, X_zero_point, Y_scale, Y_zero_point (constant qparams)
 *   attrs   axes (the reduced axes, non-negative), keepdims
 *
 * It computes what TensorFlow Lite 2.2's int8 SUM computes, measured on its
 * interpreter (every case of tests/tflite), which is not a requantization of
 * the real sum with TFLite's fixed point:
 *   - qparams of X and Y that differ (qfold's profiles give a sum its own):
 *     S = sum(q) of the raw int8 values in int32, then in float32
 *     scale = s_x / s_y, bias = ((-zp_x) * scale) * N + 0.5 (N the reduced
 *     count), y = (int32)roundf(S * scale + bias) + zp_y (roundf: ties away
 *     from zero, after the + 0.5: the result is biased half a step up), and
 *     the int8 output is y's low byte: TFLite does not saturate, a sum past
 *     Y's range wraps around;
 *   - the same qparams: the raw int8 values added in int8, wrapping (the
 *     zero point counted N times): TFLite's generic SUM on the integers.
 * Both are TFLite's arithmetic, kept so that `qfold run` computes what the
 * .tflite computes; the QDQ model (ONNX Runtime, `--simulate`) saturates
 * instead, so a sum outside Y's calibrated range differs there.
 */
#include <math.h>
#include <string.h>

#include "ops/int8/int8.h"
#include "ops/kernels.h"
#include "ops/math/reduce_walk.h"

typedef struct qsum_state {
    bool same;         /* X and Y share their qparams: TFLite's raw sum */
    float scale, bias; /* s_x / s_y; ((-zp_x) * scale) * N + 0.5 */
    int32_t zp_y;
} qsum_state;

static const char *const qsum_names[5] = {"X", "X_scale", "X_zero_point", "Y_scale",
                                          "Y_zero_point"};

/* The reduced axes as a mask over rank. */
static qf_status qsum_axes(const qf_node *n, int rank, bool *mask)
{
    int count = 0;
    const int64_t *axes = qf_node_attr_ints(n, "axes", &count);
    for (int i = 0; i < rank; i++) mask[i] = false;
    for (int i = 0; i < count; i++) {
        if (axes[i] < 0 || axes[i] >= rank || mask[axes[i]])
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (%s): axis %lld is out of range or listed twice for rank %d",
                            n->name, qf_op_label(n), (long long)axes[i], rank);
        mask[axes[i]] = true;
    }
    return QF_OK;
}

static qf_status qsum_check(const qf_node *n, const qf_tensor *const *in)
{
    for (int i = 0; i < 5; i++) {
        qf_dtype want = i == 1 || i == 3 ? QF_DTYPE_F32 : QF_DTYPE_I8;
        if (in[i]->dtype != want)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected %s",
                            n->name, qf_op_label(n), qsum_names[i], qf_dtype_name(in[i]->dtype),
                            qf_dtype_name(want));
    }
    return QF_OK;
}

static qf_status qf_qsum_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 5));
    const qf_tensor *in[5];
    for (int i = 0; i < 5; i++) in[i] = &n->inputs[i]->type;
    QF_TRY(qsum_check(n, in));
    const qf_tensor *x = in[0];
    bool mask[QF_MAX_DIMS];
    QF_TRY(qsum_axes(n, x->ndim, mask));
    const bool keep = qf_node_attr_int(n, "keepdims", 1) != 0;
    int64_t dims[QF_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (!mask[i])
            dims[k++] = x->dims[i];
        else if (keep)
            dims[k++] = 1;
    }
    qf_set_output(n, 0, QF_DTYPE_I8, k, dims);
    return QF_OK;
}

static qf_status qf_qsum_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qsum_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 5));
    QF_TRY(qsum_check(n, io->in));
    float sx, sy;
    int32_t zx;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "X", &sx, &zx));
    QF_TRY(qf_int8_qparams(n, io->in[3], io->in[4], "Y", &sy, &st->zp_y));
    const qf_tensor *x = io->in[0];
    bool mask[QF_MAX_DIMS];
    QF_TRY(qsum_axes(n, x->ndim, mask));
    int64_t count = 1;
    for (int i = 0; i < x->ndim; i++)
        if (mask[i]) count *= x->dims[i];
    /* |S| <= 128 N fits int32, and N is exact in float32 */
    if (count > ((int64_t)1 << 24))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): %lld elements per sum; at most 2^24 are supported",
                        n->name, qf_op_label(n), (long long)count);
    st->same = sx == sy && zx == st->zp_y;
    /* in float32, one operation at a time, as TFLite's reference Sum */
    st->scale = sx / sy;
    const float zs = (float)-zx * st->scale;
    st->bias = zs * (float)count + 0.5f;
    return QF_OK;
}

/* One output element from the raw sum s of its N int8 inputs. */
static int8_t qsum_out(const qsum_state *st, int32_t s)
{
    if (st->same) return (int8_t)(uint8_t)((uint32_t)s & 0xffu);
    const float r = roundf((float)s * st->scale + st->bias);
    /* x86-64's float -> int32 conversion: INT32_MIN outside int32 */
    int32_t k = INT32_MIN;
    if (r >= -2147483648.0f && r < 2147483648.0f) k = (int32_t)r;
    return (int8_t)(uint8_t)(((uint32_t)k + (uint32_t)st->zp_y) & 0xffu);
}

static qf_status qf_qsum_forward_f32(const qf_kernel_io *io)
{
    const qsum_state *st = io->state;
    const qf_tensor *x = io->in[0];
    bool mask[QF_MAX_DIMS];
    QF_TRY(qsum_axes(io->node, x->ndim, mask));
    qf_reduce_walk w;
    qf_reduce_walk_init(&w, x->ndim, x->dims, mask);
    const int8_t *xd = x->data;
    int8_t *y = io->out[0]->data;
    const int64_t nout = qf_tensor_numel(io->out[0]);
    for (int64_t o = 0; o < nout; o++, qf_reduce_walk_next_out(&w)) {
        int32_t s = 0;
        int64_t ridx[QF_MAX_DIMS] = {0}, off = w.base;
        for (int64_t r = 0; r < w.rcount; r++, off = qf_reduce_walk_next_in(&w, ridx, off)) s += xd[off];
        y[o] = qsum_out(st, s);
    }
    return QF_OK;
}

const qf_op_kernels qf_qsum_kernels = {
    .infer = qf_qsum_infer,
    .prepare = qf_qsum_prepare,
    .state_size = sizeof(qsum_state),
    .forward_f32 = qf_qsum_forward_f32,
};
