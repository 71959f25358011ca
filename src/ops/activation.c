/* Activations: Relu, relu6, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid,
 * HardSwish, Softmax, Erf.
 *
 * Float kernels are written once over a type T (float or double) with
 * <tgmath.h>, so exp / tanh pick expf / tanhf for float32. NaN propagates
 * through Relu, relu6 and Clip (comparisons are arranged so that a NaN input
 * falls through to the output), as in PyTorch.
 */
#include <string.h>
#include <tgmath.h>

#include "core/parallel.h"
#include "dnnl_kernels.h"
#include "kernels.h"

static qf_status act_unsupported_dtype(const qf_node *n, qf_dtype dt)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input dtype %s is not supported", n->name,
                    qf_op_label(n), qf_dtype_name(dt));
}

/* Output = input's dtype and shape, after checking the dtype is allowed. */
static qf_status act_same_infer(qf_node *n, const qf_dtype *allowed, int count)
{
    if (n->ninputs < 1 || !n->inputs[0])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): input 0 is missing", n->name, qf_op_label(n));
    const qf_tensor *x = &n->inputs[0]->type;
    bool ok = false;
    for (int i = 0; i < count; i++) ok |= x->dtype == allowed[i];
    if (!ok) return act_unsupported_dtype(n, x->dtype);
    qf_tensor *y = &n->outputs[0]->type;
    y->dtype = x->dtype;
    y->ndim = x->ndim;
    memcpy(y->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim);
    return QF_OK;
}

static const qf_dtype float_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64};
static const qf_dtype relu_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32, QF_DTYPE_I64, QF_DTYPE_I8};
static const qf_dtype clip_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32,
                                       QF_DTYPE_I64, QF_DTYPE_I8,  QF_DTYPE_U8};

/* y[i] = EXPR(x) over the input, for element type T. */
#define QF_MAP_T_(T, EXPR)                                              \
    do {                                                                \
        const T *restrict p_ = io->in[0]->data;                         \
        T *restrict y_ = io->out[0]->data;                              \
        int64_t n_ = qf_tensor_numel(io->in[0]);                        \
        for (int64_t i_ = 0; i_ < n_; i_++) {                           \
            const T x = p_[i_];                                         \
            y_[i_] = (T)(EXPR);                                         \
        }                                                               \
    } while (0)

/* The same EXPR for float32 and float64 (T is the element type). */
#define QF_MAP_FLOAT_(EXPR)                                                      \
    do {                                                                         \
        if (io->in[0]->dtype == QF_DTYPE_F32) {                                  \
            typedef float T;                                                     \
            QF_MAP_T_(T, EXPR);                                                  \
        } else if (io->in[0]->dtype == QF_DTYPE_F64) {                           \
            typedef double T;                                                    \
            QF_MAP_T_(T, EXPR);                                                  \
        } else {                                                                 \
            return act_unsupported_dtype(io->node, io->in[0]->dtype);                \
        }                                                                        \
    } while (0)

/* Float32 maps over large tensors are memory-bound: split them across the
 * threads of core/parallel.h (slices of at least 32k elements). */
typedef struct f32_map_job {
    const float *x;
    float *y;
    float lo, hi;
} f32_map_job;

/* min(max(x, lo), hi) with NaN passing through, as QF_CLIP_T_ below. */
static void act_clamp_f32_slice(void *ctx, int64_t a, int64_t b)
{
    const f32_map_job *j = ctx;
    const float *restrict x = j->x + a;
    float *restrict y = j->y + a;
    const float lo = j->lo, hi = j->hi;
    for (int64_t i = 0; i < b - a; i++) y[i] = x[i] < lo ? (x[i] > hi ? hi : lo) : (x[i] > hi ? hi : x[i]);
}

static void act_clamp_f32(const qf_kernel_io *io, float lo, float hi)
{
    f32_map_job j = {io->in[0]->data, io->out[0]->data, lo, hi};
    qf_parallel_for(qf_tensor_numel(io->in[0]), 32768, act_clamp_f32_slice, &j);
}

/* --- Relu, relu6 --------------------------------------------------------- */

static qf_status qf_relu_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, relu_dtypes, 5); }

static qf_status qf_relu_forward_f32(const qf_kernel_io *io)
{
    switch (io->in[0]->dtype) {
    case QF_DTYPE_I32: QF_MAP_T_(int32_t, x < 0 ? 0 : x); return QF_OK;
    case QF_DTYPE_I64: QF_MAP_T_(int64_t, x < 0 ? 0 : x); return QF_OK;
    case QF_DTYPE_I8: QF_MAP_T_(int8_t, x < 0 ? 0 : x); return QF_OK;
    case QF_DTYPE_F32: act_clamp_f32(io, 0.0f, INFINITY); return QF_OK;
    default: break;
    }
    QF_MAP_FLOAT_(x < 0 ? (T)0 : x);
    return QF_OK;
}

/* dx = dy where y > 0, else 0 (PyTorch's threshold_backward on the result:
 * the gradient at x = 0 is 0). Reads Y (bwd_out bit 0). */
static qf_status qf_relu_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    const float *y = io->out[0]->data;
    float *dx = io->din[0]->data;
    const int64_t n = qf_tensor_numel(io->out[0]);
    if (!io->dout[0]) {
        memset(dx, 0, sizeof *dx * (size_t)n);
        return QF_OK;
    }
    const float *dy = io->dout[0]->data;
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    return QF_OK;
}

static qf_status qf_relu6_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_relu6_forward_f32(const qf_kernel_io *io)
{
    if (io->in[0]->dtype == QF_DTYPE_F32) {
        act_clamp_f32(io, 0.0f, 6.0f);
        return QF_OK;
    }
    QF_MAP_FLOAT_(x < 0 ? (T)0 : x > 6 ? (T)6 : x);
    return QF_OK;
}

/* --- Clip ------------------------------------------------------------------ */

/* Clip (opset 11+): min and max are optional scalar inputs of x's dtype. */
static qf_status qf_clip_infer(qf_graph *g, qf_node *n)
{
    QF_TRY(act_same_infer(n, clip_dtypes, 6));
    (void)g;
    for (int i = 1; i < n->ninputs && i < 3; i++) {
        const qf_value *v = n->inputs[i];
        if (!v) continue;
        if (v->type.dtype != n->inputs[0]->type.dtype)
            return qf_error(QF_ERR_INVALID, "node '%s' (Clip): %s has dtype %s, input has %s", n->name,
                            i == 1 ? "min" : "max", qf_dtype_name(v->type.dtype),
                            qf_dtype_name(n->inputs[0]->type.dtype));
        int64_t k = qf_shape_numel(v->type.ndim, v->type.dims);
        if (k >= 0 && k != 1) {
            char s[128];
            return qf_error(QF_ERR_SHAPE, "node '%s' (Clip): %s must be a scalar, has shape %s", n->name,
                            i == 1 ? "min" : "max", qf_shape_str(v->type.ndim, v->type.dims, s, sizeof s));
        }
    }
    return QF_OK;
}

/* Bounds: the optional input, else the opset < 11 attribute, else the
 * dtype's range (written as +-infinity for floats). */
#define QF_CLIP_T_(T, LO, HI)                                                        \
    do {                                                                             \
        T lo_ = (LO), hi_ = (HI);                                                    \
        if (io->nin > 1 && io->in[1]) lo_ = *(const T *)io->in[1]->data;            \
        if (io->nin > 2 && io->in[2]) hi_ = *(const T *)io->in[2]->data;            \
        /* min(max(x, lo), hi): lo > hi gives hi everywhere, as numpy's clip. */    \
        QF_MAP_T_(T, x < lo_ ? (x > hi_ ? hi_ : lo_) : (x > hi_ ? hi_ : x));         \
    } while (0)

static qf_status qf_clip_forward_f32(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    switch (io->in[0]->dtype) {
    case QF_DTYPE_F32: {
        float lo = qf_node_attr_float(n, "min", -INFINITY), hi = qf_node_attr_float(n, "max", INFINITY);
        if (io->nin > 1 && io->in[1]) lo = *(const float *)io->in[1]->data;
        if (io->nin > 2 && io->in[2]) hi = *(const float *)io->in[2]->data;
        act_clamp_f32(io, lo, hi);
        break;
    }
    case QF_DTYPE_F64:
        QF_CLIP_T_(double, qf_node_attr_float(n, "min", -INFINITY), qf_node_attr_float(n, "max", INFINITY));
        break;
    case QF_DTYPE_I32: QF_CLIP_T_(int32_t, INT32_MIN, INT32_MAX); break;
    case QF_DTYPE_I64: QF_CLIP_T_(int64_t, INT64_MIN, INT64_MAX); break;
    case QF_DTYPE_I8: QF_CLIP_T_(int8_t, INT8_MIN, INT8_MAX); break;
    case QF_DTYPE_U8: QF_CLIP_T_(uint8_t, 0, UINT8_MAX); break;
    default: return act_unsupported_dtype(n, io->in[0]->dtype);
    }
    return QF_OK;
}

/* --- pointwise float activations ------------------------------------------ */

static qf_status qf_leaky_relu_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_leaky_relu_forward_f32(const qf_kernel_io *io)
{
    const float alpha = qf_node_attr_float(io->node, "alpha", 0.01f);
    QF_MAP_FLOAT_(x < 0 ? (T)alpha * x : x);
    return QF_OK;
}

static qf_status qf_sigmoid_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

/* e^x for x <= 0, branch-free so that a loop over it vectorizes (libm's expf
 * is a call per element and dominated EfficientNet's SiLU layers). x = n ln2 + r
 * with |r| <= ln2 / 2 (Cody-Waite split of ln2), e^r by its degree-6 Taylor
 * polynomial (truncation error r^7 / 7! < 1.3e-7 relative: about 1 ulp), and
 * 2^n put straight into the exponent bits. x is clamped at -87.3 so that 2^n
 * stays a normal float (the result then is ~1e-38 instead of a smaller
 * number or 0); NaN passes through (the comparisons are false, r is NaN). */
static inline float act_expf_nonpos(float x)
{
    x = x < -87.3f ? -87.3f : x;
    /* Round x / ln2 to the nearest integer: adding 1.5 * 2^23 pushes the
     * fraction bits out of the float. */
    const float shift = 12582912.0f;
    float nf = (x * 1.44269504f + shift) - shift;
    float r = x - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t i; float f; } two_n;
    /* NaN cannot be converted to int (undefined behaviour): any exponent
     * will do, p is NaN already. */
    int32_t ni = nf == nf ? (int32_t)nf : 0;
    two_n.i = (ni + 127) * (1 << 23);
    return p * two_n.f;
}

static void act_sigmoid_f32_slice(void *ctx, int64_t a, int64_t b)
{
    const f32_map_job *j = ctx;
    const float *restrict x = j->x + a;
    float *restrict y = j->y + a;
    const int64_t n = b - a;
    /* e = e^-|x| never overflows; sigmoid = 1 / (1 + e) for x >= 0 and
     * e / (1 + e) for x < 0 (the same two branches as the float64 path). */
    for (int64_t i = 0; i < n; i++) {
        float e = act_expf_nonpos(x[i] < 0 ? x[i] : -x[i]);
        float s = 1.0f / (1.0f + e);
        y[i] = x[i] >= 0 ? s : e * s;
    }
}

static qf_status qf_sigmoid_forward_f32(const qf_kernel_io *io)
{
    if (io->in[0]->dtype == QF_DTYPE_F32) {
        f32_map_job j = {io->in[0]->data, io->out[0]->data, 0.0f, 0.0f};
        qf_parallel_for(qf_tensor_numel(io->in[0]), 8192, act_sigmoid_f32_slice, &j);
        return QF_OK;
    }
    /* Two branches so that exp never overflows: for x < 0,
     * 1 / (1 + e^-x) = e^x / (1 + e^x). */
    QF_MAP_FLOAT_(x >= 0 ? (T)1 / ((T)1 + exp(-x)) : exp(x) / ((T)1 + exp(x)));
    return QF_OK;
}

static qf_status qf_tanh_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_tanh_forward_f32(const qf_kernel_io *io)
{
    QF_MAP_FLOAT_(tanh(x));
    return QF_OK;
}

/* --- Erf -------------------------------------------------------------------- */
/* The error function; PyTorch exports exact GELU as x * 0.5 * (1 + erf(x / sqrt 2)).
 * <tgmath.h> picks erff for float32. */
static qf_status qf_erf_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_erf_forward_f32(const qf_kernel_io *io)
{
    QF_MAP_FLOAT_(erf(x));
    return QF_OK;
}

static qf_status qf_hard_sigmoid_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_hard_sigmoid_forward_f32(const qf_kernel_io *io)
{
    const float alpha = qf_node_attr_float(io->node, "alpha", 0.2f);
    const float beta = qf_node_attr_float(io->node, "beta", 0.5f);
    QF_MAP_FLOAT_(fmax((T)0, fmin((T)1, (T)alpha * x + (T)beta)));
    return QF_OK;
}

static qf_status qf_hard_swish_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_hard_swish_forward_f32(const qf_kernel_io *io)
{
    /* ONNX: x * max(0, min(1, alpha * x + beta)) with alpha = 1/6, beta = 0.5. */
    QF_MAP_FLOAT_(x * fmax((T)0, fmin((T)1, x * ((T)1 / (T)6) + (T)0.5)));
    return QF_OK;
}

/* --- Softmax ----------------------------------------------------------------- */

/* Softmax changed meaning at opset 13: before, the input is coerced to 2-D
 * [prod(dims[:axis]), prod(dims[axis:])] (default axis 1) and each row is
 * normalised; from 13 on, it is normalised along one axis (default -1). Both
 * are "outer x len x inner" loops: opset < 13 is inner = 1 with len the
 * product of the trailing dims. An opset of 0 (a graph built in code) means
 * the current semantics. */
static bool act_softmax_legacy(int64_t opset) { return opset > 0 && opset < 13; }

static qf_status act_softmax_axis(const qf_node *n, int64_t opset, int ndim, int *axis)
{
    *axis = 0; /* defined on every path */
    int64_t a = qf_node_attr_int(n, "axis", act_softmax_legacy(opset) ? 1 : -1);
    if (a < -ndim || a >= ndim || ndim == 0)
        return qf_error(QF_ERR_INVALID, "node '%s' (Softmax): axis %lld out of range for rank %d", n->name,
                        (long long)a, ndim);
    *axis = (int)(a < 0 ? a + ndim : a);
    return QF_OK;
}

static qf_status qf_softmax_infer(qf_graph *g, qf_node *n)
{
    QF_TRY(act_same_infer(n, float_dtypes, 2));
    int axis;
    return act_softmax_axis(n, g->opset, n->inputs[0]->type.ndim, &axis);
}

#define QF_SOFTMAX_T_(T)                                                              \
    do {                                                                              \
        const T *p = x->data;                                                         \
        T *y = io->out[0]->data;                                                      \
        for (int64_t o = 0; o < outer; o++) {                                         \
            for (int64_t j = 0; j < inner; j++) {                                     \
                const T *xp = p + o * len * inner + j;                                \
                T *yp = y + o * len * inner + j;                                      \
                T m = xp[0];                                                          \
                for (int64_t k = 1; k < len; k++) m = xp[k * inner] > m ? xp[k * inner] : m; \
                double sum = 0;                                                       \
                for (int64_t k = 0; k < len; k++) {                                   \
                    T e = exp(xp[k * inner] - m);                                     \
                    yp[k * inner] = e;                                                \
                    sum += e;                                                         \
                }                                                                     \
                T inv = (T)(1.0 / sum);                                               \
                for (int64_t k = 0; k < len; k++) yp[k * inner] *= inv;               \
            }                                                                         \
        }                                                                             \
    } while (0)

static qf_status qf_softmax_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    int axis;
    QF_TRY(act_softmax_axis(io->node, io->opset, x->ndim, &axis));
    int64_t outer = 1, len = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= x->dims[i];
    if (act_softmax_legacy(io->opset)) {
        for (int i = axis; i < x->ndim; i++) len *= x->dims[i];
    } else {
        len = x->dims[axis];
        for (int i = axis + 1; i < x->ndim; i++) inner *= x->dims[i];
    }
    if (len == 0 || outer == 0 || inner == 0) return QF_OK;
    /* Subtracting the row maximum keeps exp <= 1: no overflow for any input. */
    if (x->dtype == QF_DTYPE_F32) QF_SOFTMAX_T_(float);
    else if (x->dtype == QF_DTYPE_F64) QF_SOFTMAX_T_(double);
    else return act_unsupported_dtype(io->node, x->dtype);
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_relu_kernels = {
    .infer = qf_relu_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_relu_forward_f32,
    .backward_f32 = qf_relu_backward_f32,
    .bwd_out = 1u << 0,
};

const qf_op_kernels qf_relu6_kernels = {
    .infer = qf_relu6_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_relu6_forward_f32,
};

const qf_op_kernels qf_clip_kernels = {
    .infer = qf_clip_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_clip_forward_f32,
};

const qf_op_kernels qf_leaky_relu_kernels = {
    .infer = qf_leaky_relu_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_leaky_relu_forward_f32,
    .dnnl = QF_DNNL_KERNELS(leaky_relu),
};

const qf_op_kernels qf_sigmoid_kernels = {
    .infer = qf_sigmoid_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_sigmoid_forward_f32,
    .dnnl = QF_DNNL_KERNELS(sigmoid),
};

const qf_op_kernels qf_tanh_kernels = {
    .infer = qf_tanh_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_tanh_forward_f32,
    .dnnl = QF_DNNL_KERNELS(tanh),
};

const qf_op_kernels qf_erf_kernels = {
    .infer = qf_erf_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_erf_forward_f32,
};

const qf_op_kernels qf_hard_sigmoid_kernels = {
    .infer = qf_hard_sigmoid_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_hard_sigmoid_forward_f32,
};

const qf_op_kernels qf_hard_swish_kernels = {
    .infer = qf_hard_swish_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_hard_swish_forward_f32,
    .dnnl = QF_DNNL_KERNELS(hard_swish),
};

const qf_op_kernels qf_softmax_kernels = {
    .infer = qf_softmax_infer,
    .forward_f32 = qf_softmax_forward_f32,
};
