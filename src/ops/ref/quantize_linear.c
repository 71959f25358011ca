/* QuantizeLinear / DequantizeLinear (ONNX opsets 10..17), per tensor and per
 * axis. The arithmetic is in quant_math.h, shared with fake-quant and the
 * int8 kernels.
 *
 *   Quantize:   y = saturate(round_half_even(x / scale) + zp)   x float32
 *   Dequantize: y = (x - zp) * scale                            x int8 / uint8 / int32
 *
 * scale (float32) and zp have one element (per tensor) or are 1-D with
 * dims[axis] elements (per axis; `axis` defaults to 1, negative counts from
 * the end). The zero point is optional: Quantize then produces uint8 with
 * zp 0, Dequantize uses 0.
 */
#include <string.h>

#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/math/quant_math.h"


/* Per-tensor (channels = 1) or per-axis layout of one node's parameters:
 * element i of x uses parameter (i / inner) % channels. */
typedef struct quant_layout {
    int64_t channels, inner;
} quant_layout;

/* Check scale / zp and work out the layout. x may have unknown dims during
 * inference; the per-axis length is checked only when known. */
static qf_status quant_qparam_check(const qf_node *n, const qf_tensor *x, const qf_tensor *scale,
                              const qf_tensor *zp, quant_layout *lay)
{
    char s1[128], s2[128];
    lay->channels = 1;
    lay->inner = 1;
    if (scale->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scale dtype %s is not supported (float32)", n->name,
                        qf_op_label(n), qf_dtype_name(scale->dtype));
    if (zp && (zp->ndim != scale->ndim || !qf_shape_equal(zp->ndim, zp->dims, scale->ndim, scale->dims)))
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): zero point %s and scale %s differ in shape", n->name,
                        qf_op_label(n), qf_shape_str(zp->ndim, zp->dims, s1, sizeof s1),
                        qf_shape_str(scale->ndim, scale->dims, s2, sizeof s2));
    int64_t k = qf_shape_numel(scale->ndim, scale->dims);
    /* One element, whatever its rank, is per tensor (ONNX Runtime does the same). */
    if (k == 1) return QF_OK;
    if (scale->ndim != 1)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): scale must be a scalar or 1-D, has shape %s", n->name,
                        qf_op_label(n), qf_shape_str(scale->ndim, scale->dims, s1, sizeof s1));
    int64_t axis = qf_node_attr_int(n, "axis", 1);
    if (axis < -x->ndim || axis >= x->ndim)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld out of range for input %s", n->name,
                        qf_op_label(n), (long long)axis, qf_shape_str(x->ndim, x->dims, s1, sizeof s1));
    if (axis < 0) axis += x->ndim;
    int64_t c = x->dims[axis];
    if (c >= 0 && k >= 0 && c != k)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): per-axis scale %s does not match axis %lld of input %s",
                        n->name, qf_op_label(n), qf_shape_str(scale->ndim, scale->dims, s1, sizeof s1),
                        (long long)axis, qf_shape_str(x->ndim, x->dims, s2, sizeof s2));
    lay->channels = c;
    for (int i = (int)axis + 1; i < x->ndim; i++) lay->inner = lay->inner * (x->dims[i] < 0 ? 1 : x->dims[i]);
    return QF_OK;
}

/* Prepare (both ops): the layout, checked once. The checks read shapes and
 * dtypes only, which the plan fixes, so nothing is re-checked per run, also
 * when scale or zero point are computed at run time. */
static qf_status quant_prepare(const qf_kernel_io *io, void *state)
{
    const qf_tensor *zp = io->nin > 2 ? io->in[2] : NULL;
    return quant_qparam_check(io->node, io->in[0], io->in[1], zp, state);
}

static qf_status quant_need_input(const qf_node *n, int i)
{
    if (i >= n->ninputs || !n->inputs[i])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, qf_op_label(n), i);
    return QF_OK;
}

static void quant_set_output(qf_node *n, qf_dtype dt, const qf_tensor *x)
{
    qf_tensor *t = &n->outputs[0]->type;
    t->dtype = dt;
    t->ndim = x->ndim;
    memcpy(t->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim);
}

static int32_t quant_zp_at(const qf_tensor *zp, int64_t c)
{
    if (!zp) return 0;
    switch (zp->dtype) {
    case QF_DTYPE_I8: return ((const int8_t *)zp->data)[c];
    case QF_DTYPE_U8: return ((const uint8_t *)zp->data)[c];
    case QF_DTYPE_I32: return ((const int32_t *)zp->data)[c];
    default: return 0;
    }
}

/* --- QuantizeLinear ---------------------------------------------------------- */

static qf_status qf_quantize_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(quant_need_input(n, 0));
    QF_TRY(quant_need_input(n, 1));
    const qf_tensor *x = &n->inputs[0]->type, *scale = &n->inputs[1]->type;
    const qf_tensor *zp = n->ninputs > 2 && n->inputs[2] ? &n->inputs[2]->type : NULL;
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (QuantizeLinear): input dtype %s is not supported (float32)",
                        n->name, qf_dtype_name(x->dtype));
    qf_dtype out = zp ? zp->dtype : QF_DTYPE_U8;
    if (out != QF_DTYPE_I8 && out != QF_DTYPE_U8)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (QuantizeLinear): zero point dtype %s is not supported (int8, uint8)",
                        n->name, qf_dtype_name(out));
    quant_layout lay;
    QF_TRY(quant_qparam_check(n, x, scale, zp, &lay));
    quant_set_output(n, out, x);
    return QF_OK;
}

/* One scale and zero point over a whole tensor: a vectorizable loop over
 * slices of it, on qfold's threads (the integer executor quantizes the
 * activations around every op that runs in float). */
typedef struct quant_job {
    const void *x;
    void *y;
    float scale;
    int32_t zp;
    qf_dtype xdt, ydt;
} quant_job;

static void quantize_slice(void *ctx, int64_t lo, int64_t hi)
{
    const quant_job *j = ctx;
    const float *px = j->x;
    const float s = j->scale;
    const int32_t z = j->zp;
    if (j->ydt == QF_DTYPE_I8) {
        int8_t *py = j->y;
        for (int64_t i = lo; i < hi; i++) py[i] = (int8_t)qf_quantize_range_vec_f32(px[i], s, z, -128, 127);
    } else {
        uint8_t *py = j->y;
        for (int64_t i = lo; i < hi; i++) py[i] = (uint8_t)qf_quantize_range_vec_f32(px[i], s, z, 0, 255);
    }
}

static void dequantize_slice(void *ctx, int64_t lo, int64_t hi)
{
    const quant_job *j = ctx;
    float *py = j->y;
    const float s = j->scale;
    const int32_t z = j->zp;
    /* (q - zp) fits int32 for int8 / uint8 inputs: the same float as the
     * int64 difference of qf_dequantize_f32. */
    if (j->xdt == QF_DTYPE_I8) {
        const int8_t *px = j->x;
        for (int64_t i = lo; i < hi; i++) py[i] = (float)((int32_t)px[i] - z) * s;
    } else {
        const uint8_t *px = j->x;
        for (int64_t i = lo; i < hi; i++) py[i] = (float)((int32_t)px[i] - z) * s;
    }
}

/* Elements per thread slice of a per-tensor (de)quantization. */
#define QUANT_GRAIN 16384

static qf_status qf_quantize_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0], *scale = io->in[1];
    const qf_tensor *zp = io->nin > 2 ? io->in[2] : NULL;
    const quant_layout lay = *(const quant_layout *)io->state;
    qf_tensor *y = io->out[0];
    const float *px = x->data, *ps = scale->data;
    int64_t n = qf_tensor_numel(x);
    int64_t block = lay.channels * lay.inner;
    if (n == 0) return QF_OK;
    if (lay.channels == 1) {
        quant_job j = {.x = px, .y = y->data, .scale = ps[0], .zp = quant_zp_at(zp, 0), .ydt = y->dtype};
        qf_parallel_for(n, QUANT_GRAIN, quantize_slice, &j);
        return QF_OK;
    }
    /* Walk x as [outer, channels, inner]; per tensor is channels = inner = 1. */
    for (int64_t base = 0; base < n; base += block) {
        for (int64_t c = 0; c < lay.channels; c++) {
            const float s = ps[c];
            const int32_t z = quant_zp_at(zp, c);
            int64_t i0 = base + c * lay.inner;
            if (y->dtype == QF_DTYPE_I8) {
                int8_t *py = y->data;
                for (int64_t i = i0; i < i0 + lay.inner; i++) py[i] = qf_quantize_s8(px[i], s, z);
            } else {
                uint8_t *py = y->data;
                for (int64_t i = i0; i < i0 + lay.inner; i++) py[i] = qf_quantize_u8(px[i], s, z);
            }
        }
    }
    return QF_OK;
}

/* --- DequantizeLinear -------------------------------------------------------- */

static qf_status qf_dequantize_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(quant_need_input(n, 0));
    QF_TRY(quant_need_input(n, 1));
    const qf_tensor *x = &n->inputs[0]->type, *scale = &n->inputs[1]->type;
    const qf_tensor *zp = n->ninputs > 2 && n->inputs[2] ? &n->inputs[2]->type : NULL;
    if (x->dtype != QF_DTYPE_I8 && x->dtype != QF_DTYPE_U8 && x->dtype != QF_DTYPE_I32)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (DequantizeLinear): input dtype %s is not supported (int8, uint8, int32)", n->name,
                        qf_dtype_name(x->dtype));
    if (zp && zp->dtype != x->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (DequantizeLinear): zero point dtype %s differs from input dtype %s",
                        n->name, qf_dtype_name(zp->dtype), qf_dtype_name(x->dtype));
    quant_layout lay;
    QF_TRY(quant_qparam_check(n, x, scale, zp, &lay));
    quant_set_output(n, QF_DTYPE_F32, x);
    return QF_OK;
}

static qf_status qf_dequantize_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0], *scale = io->in[1];
    const qf_tensor *zp = io->nin > 2 ? io->in[2] : NULL;
    const quant_layout lay = *(const quant_layout *)io->state;
    const float *ps = scale->data;
    float *py = io->out[0]->data;
    int64_t n = qf_tensor_numel(x);
    int64_t block = lay.channels * lay.inner;
    if (n == 0) return QF_OK;
    if (lay.channels == 1 && (x->dtype == QF_DTYPE_I8 || x->dtype == QF_DTYPE_U8)) {
        quant_job j = {.x = x->data, .y = py, .scale = ps[0], .zp = quant_zp_at(zp, 0), .xdt = x->dtype};
        qf_parallel_for(n, QUANT_GRAIN, dequantize_slice, &j);
        return QF_OK;
    }
    for (int64_t base = 0; base < n; base += block) {
        for (int64_t c = 0; c < lay.channels; c++) {
            const float s = ps[c];
            const int32_t z = quant_zp_at(zp, c);
            int64_t i0 = base + c * lay.inner, i1 = i0 + lay.inner;
            switch (x->dtype) {
            case QF_DTYPE_I8:
                for (int64_t i = i0; i < i1; i++) py[i] = qf_dequantize_f32(((const int8_t *)x->data)[i], s, z);
                break;
            case QF_DTYPE_U8:
                for (int64_t i = i0; i < i1; i++) py[i] = qf_dequantize_f32(((const uint8_t *)x->data)[i], s, z);
                break;
            case QF_DTYPE_I32:
                for (int64_t i = i0; i < i1; i++) py[i] = qf_dequantize_f32(((const int32_t *)x->data)[i], s, z);
                break;
            default:
                return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (DequantizeLinear): input dtype %s is not supported",
                                io->node->name, qf_dtype_name(x->dtype));
            }
        }
    }
    return QF_OK;
}

/* --- backward (training; the contract is in op_table.h) ------------------------ */

/* The straight-through estimator's clamp mask of fake quantization, as
 * PyTorch 1.13 computes it (fake_quantize_tensor_cachemask_kernel and the
 * per-channel one): qval = zp + nearbyint(x * inv_scale) with inv_scale =
 * 1.0f / scale, all in float32, and the gradient passes where lo <= qval <=
 * hi. The product by the float reciprocal, not the division QuantizeLinear
 * rounds, is PyTorch's: the two can round apart only on a tie at the edge
 * of the range, and then the mask is PyTorch's. NaN and +-Inf give 0 (their
 * int64 cast in PyTorch is out of range). */
static inline float quant_ste_pass(float x, float inv_scale, float zp, float lo, float hi)
{
    float q = qf_round_half_even_f32(x * inv_scale) + zp;
    return q >= lo && q <= hi ? 1.0f : 0.0f;
}

typedef struct quant_grad_job {
    const float *x, *dy;
    float *dx;
    float inv_scale, zp, lo, hi;
} quant_grad_job;

static void quant_grad_slice(void *ctx, int64_t lo, int64_t hi)
{
    const quant_grad_job *j = ctx;
    for (int64_t i = lo; i < hi; i++)
        j->dx[i] = j->dy[i] * quant_ste_pass(j->x[i], j->inv_scale, j->zp, j->lo, j->hi);
}

/* Gradients of the quantization parameters, when asked for: none (0), as
 * PyTorch's fake_quantize_per_{tensor,channel}_affine gives none. */
static void quant_grad_params_zero(const qf_kernel_io *io)
{
    for (int i = 1; i < io->nin && i < 3; i++)
        if (io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
}

/* QuantizeLinear: dx = dy where x quantizes inside [qmin, qmax] of the
 * output type (before saturation), else 0; dy is the gradient with respect
 * to the dequantized value of y (op_table.h). Reads x, scale and the zero
 * point (bwd_in bits 0..2). */
static qf_status qf_quantize_backward_f32(const qf_kernel_io *io)
{
    quant_grad_params_zero(io);
    if (!io->din[0]) return QF_OK;
    const qf_tensor *x = io->in[0], *scale = io->in[1];
    const qf_tensor *zp = io->nin > 2 ? io->in[2] : NULL;
    float *dx = io->din[0]->data;
    const int64_t n = qf_tensor_numel(x);
    if (!io->dout[0]) {
        memset(dx, 0, sizeof *dx * (size_t)n);
        return QF_OK;
    }
    const quant_layout lay = *(const quant_layout *)io->state;
    const bool s8 = io->out[0]->dtype == QF_DTYPE_I8;
    quant_grad_job j = {.x = x->data, .dy = io->dout[0]->data, .dx = dx, .lo = s8 ? -128.0f : 0.0f,
                        .hi = s8 ? 127.0f : 255.0f};
    const float *ps = scale->data;
    if (n == 0) return QF_OK;
    if (lay.channels == 1) {
        j.inv_scale = 1.0f / ps[0];
        j.zp = (float)quant_zp_at(zp, 0);
        qf_parallel_for(n, QUANT_GRAIN, quant_grad_slice, &j);
        return QF_OK;
    }
    const int64_t block = lay.channels * lay.inner;
    for (int64_t base = 0; base < n; base += block)
        for (int64_t c = 0; c < lay.channels; c++) {
            j.inv_scale = 1.0f / ps[c];
            j.zp = (float)quant_zp_at(zp, c);
            int64_t i0 = base + c * lay.inner;
            quant_grad_slice(&j, i0, i0 + lay.inner);
        }
    return QF_OK;
}

/* DequantizeLinear: dx = dy (x's gradient is the one of its dequantized
 * value, which y is). Reads nothing of the forward. */
static qf_status qf_dequantize_backward_f32(const qf_kernel_io *io)
{
    quant_grad_params_zero(io);
    if (!io->din[0]) return QF_OK;
    size_t nb = qf_tensor_nbytes(io->din[0]);
    if (io->dout[0]) memcpy(io->din[0]->data, io->dout[0]->data, nb);
    else memset(io->din[0]->data, 0, nb);
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_quantize_kernels = {
    .infer = qf_quantize_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC, /* per tensor: elementwise (layout.c checks) */
    .prepare = quant_prepare,
    .state_size = sizeof(quant_layout),
    .forward_f32 = qf_quantize_forward_f32,
    .backward_f32 = qf_quantize_backward_f32,
    .bwd_in = 0x7u, /* x, scale, zero point */
};

const qf_op_kernels qf_dequantize_kernels = {
    .infer = qf_dequantize_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC, /* per tensor: elementwise (layout.c checks) */
    .prepare = quant_prepare,
    .state_size = sizeof(quant_layout),
    .forward_f32 = qf_dequantize_forward_f32,
    .backward_f32 = qf_dequantize_backward_f32,
};
