/* Activations: Relu, relu6, Clip, LeakyRelu, PRelu, Sigmoid, Tanh, HardSigmoid,
 * HardSwish, Softmax, Erf, Exp, Log.
 *
 * Float kernels are written once over a type T (float or double) with
 * <tgmath.h>, so exp / tanh pick expf / tanhf for float32. NaN propagates
 * through Relu, relu6 and Clip (comparisons are arranged so that a NaN input
 * falls through to the output), as in PyTorch.
 */
#include <string.h>
#include <tgmath.h>

#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/math/broadcast.h"
#include "ops/ref/activation.h"
#include "ops/math/vector.h"

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
QF_VECTOR_CLONES static void act_clamp_f32_slice(void *ctx, int64_t a, int64_t b)
{
    const f32_map_job *j = ctx;
    const float *restrict x = j->x + a;
    float *restrict y = j->y + a;
    /* Below lo the result is min(lo, hi): hi everywhere when lo > hi. */
    const float lo = j->lo, hi = j->hi, under = lo > hi ? hi : lo;
    for (int64_t i = 0; i < b - a; i++) y[i] = x[i] < lo ? under : (x[i] > hi ? hi : x[i]);
}

static void act_clamp_f32(const qf_kernel_io *io, float lo, float hi)
{
    f32_map_job j = {io->in[0]->data, io->out[0]->data, lo, hi};
    qf_parallel_for(qf_tensor_numel(io->in[0]), 32768, act_clamp_f32_slice, &j);
}

/* --- backward ---------------------------------------------------------------
 *
 * The gradients are float32 (the backward contract, op_table.h). Each kernel
 * writes din[0] = 0 when no gradient reaches the output. Where torch's
 * derivative at a kink is not the mathematical one (both one-sided slopes
 * exist), the kernels follow PyTorch 1.13's CPU kernels and say so. */

static qf_status act_bwd_check(const qf_kernel_io *io)
{
    if (io->out[0]->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of dtype %s is not supported (float32)",
                        io->node->name, qf_op_label(io->node), qf_dtype_name(io->out[0]->dtype));
    return QF_OK;
}

/* A pointwise backward dx[i] = f(v[i], dy[i]), v the forward tensor the
 * kernel reads (x or y), p0 / p1 the op's parameters; memory-bound, so split
 * across the threads as the forward maps are. */
typedef struct act_bwd_job {
    const float *v, *dy;
    float *dx;
    float p0, p1;
} act_bwd_job;

/* The slice function `name` computing EXPR over v, dy, p0, p1. */
#define QF_BWD_SLICE_(name, EXPR)                                             \
    QF_VECTOR_CLONES static void name(void *ctx, int64_t lo, int64_t hi)      \
    {                                                                         \
        const act_bwd_job *j_ = ctx;                                          \
        const float *restrict v_ = j_->v, *restrict dy_ = j_->dy;             \
        float *restrict dx_ = j_->dx; /* never dy's or v's memory: the tape */\
        const float p0 = j_->p0, p1 = j_->p1;                                 \
        (void)p0;                                                             \
        (void)p1;                                                             \
        for (int64_t i = lo; i < hi; i++) {                                   \
            const float v = v_[i], dy = dy_[i];                               \
            dx_[i] = (EXPR);                                                  \
        }                                                                     \
    }

/* Run a slice function over the node's din[0] (zeros without dy). */
static qf_status act_bwd_map(const qf_kernel_io *io, const qf_tensor *v, qf_parallel_fn slice, float p0, float p1)
{
    QF_TRY(act_bwd_check(io));
    if (!io->din[0]) return QF_OK;
    const int64_t n = qf_tensor_numel(io->din[0]);
    if (!io->dout[0]) {
        memset(io->din[0]->data, 0, sizeof(float) * (size_t)n);
        return QF_OK;
    }
    act_bwd_job j = {v->data, io->dout[0]->data, io->din[0]->data, p0, p1};
    qf_parallel_for(n, 32768, slice, &j);
    return QF_OK;
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
 * the gradient at x = 0 is 0). Reads Y (bwd_out bit 0). A select, not a
 * branch: the signs of a layer's activations are a coin toss. */
QF_BWD_SLICE_(act_relu_bwd_slice, v > 0.0f ? dy : 0.0f)

static qf_status qf_relu_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->out[0], act_relu_bwd_slice, 0.0f, 0.0f);
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

/* dx = dy where 0 < x < 6, else 0: PyTorch's ReLU6 is hardtanh(x, 0, 6),
 * whose backward passes the gradient only strictly inside the bounds (0 at
 * x = 0 and x = 6, where torch.clamp would pass it: see Clip). Read from Y
 * (bwd_out bit 0): 0 < y < 6 exactly when 0 < x < 6 (NaN: 0, as torch's
 * vectorized kernel). */
QF_BWD_SLICE_(act_relu6_bwd_slice, v > 0.0f && v < 6.0f ? dy : 0.0f)

static qf_status qf_relu6_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->out[0], act_relu6_bwd_slice, 0.0f, 0.0f);
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
        const T under_ = lo_ > hi_ ? hi_ : lo_;                                      \
        QF_MAP_T_(T, x < lo_ ? under_ : (x > hi_ ? hi_ : x));                        \
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

QF_BWD_SLICE_(act_clip_bwd_slice, v >= p0 && v <= p1 ? dy : 0.0f)

/* As torch.clamp's backward (PyTorch 1.13, derivatives.yaml clamp.Tensor):
 * dx = dy where min <= x <= max (the gradient passes AT the bounds, unlike
 * relu6 / hardtanh; NaN: 0); d min = the sum of dy where x < min (and
 * min < max when both are given), d max = the sum of dy where x > max (or
 * max < min: then max is the output everywhere). Bounds from the inputs
 * (opset 11+) or the attributes; reads X, min, max (bwd_in bits 0-2). */
static qf_status qf_clip_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(act_bwd_check(io));
    const qf_node *n = io->node;
    const qf_tensor *tlo = io->nin > 1 ? io->in[1] : NULL, *thi = io->nin > 2 ? io->in[2] : NULL;
    const bool has_lo = tlo || qf_node_attr(n, "min"), has_hi = thi || qf_node_attr(n, "max");
    float lo = qf_node_attr_float(n, "min", -INFINITY), hi = qf_node_attr_float(n, "max", INFINITY);
    if (tlo) lo = *(const float *)tlo->data;
    if (thi) hi = *(const float *)thi->data;
    qf_tensor *dx = io->din[0], *dlo = tlo ? io->din[1] : NULL, *dhi = thi ? io->din[2] : NULL;
    const int64_t nel = qf_tensor_numel(io->in[0]);
    if (!io->dout[0]) {
        if (dx) memset(dx->data, 0, sizeof(float) * (size_t)nel);
        if (dlo) *(float *)dlo->data = 0.0f;
        if (dhi) *(float *)dhi->data = 0.0f;
        return QF_OK;
    }
    const float *x = io->in[0]->data, *dy = io->dout[0]->data;
    if (dx) QF_TRY(act_bwd_map(io, io->in[0], act_clip_bwd_slice, lo, hi));
    if (dlo) {
        double s = 0.0;
        if (!has_hi || lo < hi)
            for (int64_t i = 0; i < nel; i++) s += x[i] < lo ? (double)dy[i] : 0.0;
        *(float *)dlo->data = (float)s;
    }
    if (dhi) {
        double s = 0.0;
        const bool all = has_lo && hi < lo;
        for (int64_t i = 0; i < nel; i++) s += all || x[i] > hi ? (double)dy[i] : 0.0;
        *(float *)dhi->data = (float)s;
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

/* dx = dy where x > 0, else alpha * dy (torch's leaky_relu_backward: alpha
 * at x = 0). Reads X (bwd_in bit 0). */
QF_BWD_SLICE_(act_leaky_relu_bwd_slice, v > 0.0f ? dy : dy * p0)

static qf_status qf_leaky_relu_backward_f32(const qf_kernel_io *io)
{
    const float alpha = qf_node_attr_float(io->node, "alpha", 0.01f);
    return act_bwd_map(io, io->in[0], act_leaky_relu_bwd_slice, alpha, 0.0f);
}

/* --- PRelu ------------------------------------------------------------------ */

/* PRelu (opset 7+): y = x where x > 0, else slope * x; the slope broadcasts
 * to X's shape (unidirectionally: ONNX's rule; PyTorch's nn.PReLU exports
 * [C, 1, 1] per channel or [1]). Float32 / float64, both the same. */
static qf_status qf_prelu_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 2));
    const qf_tensor *x = &n->inputs[0]->type, *s = &n->inputs[1]->type;
    if (x->dtype != QF_DTYPE_F32 && x->dtype != QF_DTYPE_F64) return act_unsupported_dtype(n, x->dtype);
    if (s->dtype != x->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): slope dtype %s differs from X's %s", n->name,
                        qf_op_label(n), qf_dtype_name(s->dtype), qf_dtype_name(x->dtype));
    if (!qf_broadcast_to_ok(s->ndim, s->dims, x->ndim, x->dims)) {
        char a[128], b[128];
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): slope of shape %s does not broadcast to X's %s", n->name,
                        qf_op_label(n), qf_shape_str(s->ndim, s->dims, a, sizeof a),
                        qf_shape_str(x->ndim, x->dims, b, sizeof b));
    }
    qf_set_output(n, 0, x->dtype, x->ndim, x->dims);
    return QF_OK;
}

/* One row: y[i] = x[i] > 0 ? x[i] : s[i * ss] * x[i] (the comparison as
 * PyTorch's prelu: x = 0 and NaN take the slope's product, which is the
 * same value). */
#define QF_PRELU_ROW_(T)                                                                         \
    do {                                                                                         \
        const T *px = io->in[0]->data, *ps = io->in[1]->data;                                   \
        T *py = io->out[0]->data;                                                                \
        for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {                         \
            const T *xr = px + it.off[0], *sr = ps + it.off[1];                                  \
            T *yr = py + r * it.len;                                                             \
            for (int64_t i = 0; i < it.len; i++) yr[i] = xr[i] > 0 ? xr[i] : sr[i * it.step[1]] * xr[i]; \
        }                                                                                        \
    } while (0)

static qf_status qf_prelu_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    const qf_tensor *ops[2] = {x, io->in[1]};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, x->ndim, x->dims, 2, ops);
    if (x->dtype == QF_DTYPE_F32) QF_PRELU_ROW_(float);
    else if (x->dtype == QF_DTYPE_F64) QF_PRELU_ROW_(double);
    else return act_unsupported_dtype(io->node, x->dtype);
    return QF_OK;
}

/* Scratch of the backward: dL/dslope before the sum over the dims the
 * slope is broadcast along (X's size); 0 while shapes are unknown. */
static size_t prelu_bwd_scratch(const qf_node *n, const void *state)
{
    (void)state;
    const qf_tensor *x = &n->inputs[0]->type;
    for (int i = 0; i < x->ndim; i++)
        if (x->dims[i] < 0) return 0;
    return sizeof(float) * (size_t)qf_shape_numel(x->ndim, x->dims);
}

/* torch's prelu backward: dx = dy where x > 0, else slope * dy; dslope =
 * the sum, over the elements each slope entry multiplies, of x * dy where
 * x <= 0 (0 where x > 0). Reads X and the slope (bwd_in bits 0, 1). */
static qf_status qf_prelu_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(act_bwd_check(io));
    qf_tensor *dx = io->din[0], *ds = io->din[1];
    const qf_tensor *x = io->in[0];
    const int64_t nx = qf_tensor_numel(x);
    if (!io->dout[0]) {
        if (dx) memset(dx->data, 0, qf_tensor_nbytes(dx));
        if (ds) memset(ds->data, 0, qf_tensor_nbytes(ds));
        return QF_OK;
    }
    float *g = NULL;
    if (ds) {
        if (!io->scratch || io->scratch_size < sizeof(float) * (size_t)nx)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): backward scratch too small", io->node->name,
                            qf_op_label(io->node));
        g = io->scratch;
    }
    const float *px = x->data, *ps = io->in[1]->data, *dy = io->dout[0]->data;
    float *pdx = dx ? dx->data : NULL;
    const qf_tensor *ops[2] = {x, io->in[1]};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, x->ndim, x->dims, 2, ops);
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        const int64_t o = r * it.len; /* X is the output's shape: off[0] == o */
        const float *sr = ps + it.off[1];
        for (int64_t i = 0; i < it.len; i++) {
            const bool pos = px[o + i] > 0.0f;
            if (pdx) pdx[o + i] = pos ? dy[o + i] : sr[i * it.step[1]] * dy[o + i];
            if (g) g[o + i] = pos ? 0.0f : px[o + i] * dy[o + i];
        }
    }
    if (ds) qf_bcast_reduce_f32(x->ndim, x->dims, g, 1.0f, ds);
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

/* SiLU in place over y[a, b), y = x * sigmoid(x) with sigmoid(x) computed as
 * act_sigmoid_f32_slice does, so the result is the reference engine's
 * Sigmoid then Mul, bit for bit. ctx is the float array. Static, with the
 * exported qf_silu_f32_inplace_slice below as its one caller: clang 14 emits
 * only the `.ifunc` symbol of a non-static target_clones function, so a
 * caller in another file (the oneDNN backend) did not link. */
static QF_VECTOR_CLONES void act_silu_f32_inplace_slice(void *ctx, int64_t a, int64_t b)
{
    float *restrict y = (float *)ctx + a;
    const int64_t n = b - a;
    for (int64_t i = 0; i < n; i++) {
        const float x = y[i];
        float e = act_expf_nonpos(x < 0 ? x : -x);
        float s = 1.0f / (1.0f + e);
        y[i] = x * (x >= 0 ? s : e * s);
    }
}

void qf_silu_f32_inplace_slice(void *ctx, int64_t a, int64_t b)
{
    act_silu_f32_inplace_slice(ctx, a, b);
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

/* dx = dy (1 - y) y, torch's sigmoid_backward from the output (bwd_out bit 0). */
QF_BWD_SLICE_(act_sigmoid_bwd_slice, dy * (1.0f - v) * v)

static qf_status qf_sigmoid_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->out[0], act_sigmoid_bwd_slice, 0.0f, 0.0f);
}

static qf_status qf_tanh_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_tanh_forward_f32(const qf_kernel_io *io)
{
    QF_MAP_FLOAT_(tanh(x));
    return QF_OK;
}

/* dx = dy (1 - y^2), torch's tanh_backward from the output (bwd_out bit 0). */
QF_BWD_SLICE_(act_tanh_bwd_slice, dy * (1.0f - v * v))

static qf_status qf_tanh_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->out[0], act_tanh_bwd_slice, 0.0f, 0.0f);
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

/* --- Exp, Log ---------------------------------------------------------------- */
/* <tgmath.h> picks expf / logf for float32: the functions the int8 tables of
 * qlut.c evaluate too, so a float model and its int8 tables agree. Log of a
 * negative number is NaN, of 0 -inf (IEEE, as PyTorch and ONNX Runtime). */
static qf_status qf_exp_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_exp_forward_f32(const qf_kernel_io *io)
{
    QF_MAP_FLOAT_(exp(x));
    return QF_OK;
}

/* dx = dy y, torch's exp backward (grad * result) from the output (bwd_out bit 0). */
QF_BWD_SLICE_(act_exp_bwd_slice, dy * v)

static qf_status qf_exp_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->out[0], act_exp_bwd_slice, 0.0f, 0.0f);
}

static qf_status qf_log_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_log_forward_f32(const qf_kernel_io *io)
{
    QF_MAP_FLOAT_(log(x));
    return QF_OK;
}

/* dx = dy / x, torch's log backward (grad.div(self)): a division, not dy
 * times 1 / x, so the rounding is torch's. Reads X (bwd_in bit 0). */
QF_BWD_SLICE_(act_log_bwd_slice, dy / v)

static qf_status qf_log_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->in[0], act_log_bwd_slice, 0.0f, 0.0f);
}

static qf_status qf_hard_sigmoid_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

/* float32 HardSigmoid (lo = alpha, hi = beta) and HardSwish (alpha 1/6,
 * beta 1/2) split across the threads: t = alpha x + beta, clamped to [0, 1]
 * with fmin / fmax's result (a NaN t gives 1, as fmin(1, NaN)), written as
 * comparisons so that the loop vectorizes. */
static inline float act_hard_sigmoid_f32(float x, float alpha, float beta)
{
    float t = alpha * x + beta;
    t = t < 1.0f ? t : 1.0f;
    return t > 0.0f ? t : 0.0f;
}

static void act_hard_sigmoid_f32_slice(void *ctx, int64_t a, int64_t b)
{
    const f32_map_job *j = ctx;
    const float *restrict x = j->x + a;
    float *restrict y = j->y + a;
    const float alpha = j->lo, beta = j->hi;
    for (int64_t i = 0; i < b - a; i++) y[i] = act_hard_sigmoid_f32(x[i], alpha, beta);
}

static void act_hard_swish_f32_slice(void *ctx, int64_t a, int64_t b)
{
    const f32_map_job *j = ctx;
    const float *restrict x = j->x + a;
    float *restrict y = j->y + a;
    for (int64_t i = 0; i < b - a; i++) y[i] = x[i] * act_hard_sigmoid_f32(x[i], 1.0f / 6.0f, 0.5f);
}

static qf_status qf_hard_sigmoid_forward_f32(const qf_kernel_io *io)
{
    const float alpha = qf_node_attr_float(io->node, "alpha", 0.2f);
    const float beta = qf_node_attr_float(io->node, "beta", 0.5f);
    if (io->in[0]->dtype == QF_DTYPE_F32) {
        f32_map_job j = {io->in[0]->data, io->out[0]->data, alpha, beta};
        qf_parallel_for(qf_tensor_numel(io->in[0]), 32768, act_hard_sigmoid_f32_slice, &j);
        return QF_OK;
    }
    QF_MAP_FLOAT_(fmax((T)0, fmin((T)1, (T)alpha * x + (T)beta)));
    return QF_OK;
}

/* dx = alpha dy where 0 < alpha x + beta < 1, else 0: strictly inside, as
 * torch's hardsigmoid_backward (0 at x = -3 and x = 3 for torch's alpha =
 * 1/6, beta = 1/2, where the mathematical one-sided slopes differ). alpha x +
 * beta in double: at torch's bounds the float32 alpha (0.16666667) puts
 * alpha * 3 + 0.5 just above 1, so x = +-3 are outside and the next floats
 * inside, exactly torch's -3 < x < 3. Reads X (bwd_in bit 0). */
QF_BWD_SLICE_(act_hard_sigmoid_bwd_slice, (double)p0 * v + p1 > 0.0 && (double)p0 * v + p1 < 1.0 ? dy * p0 : 0.0f)

static qf_status qf_hard_sigmoid_backward_f32(const qf_kernel_io *io)
{
    const float alpha = qf_node_attr_float(io->node, "alpha", 0.2f);
    const float beta = qf_node_attr_float(io->node, "beta", 0.5f);
    return act_bwd_map(io, io->in[0], act_hard_sigmoid_bwd_slice, alpha, beta);
}

static qf_status qf_hard_swish_infer(qf_graph *g, qf_node *n) { (void)g; return act_same_infer(n, float_dtypes, 2); }

static qf_status qf_hard_swish_forward_f32(const qf_kernel_io *io)
{
    /* ONNX: x * max(0, min(1, alpha * x + beta)) with alpha = 1/6, beta = 0.5. */
    if (io->in[0]->dtype == QF_DTYPE_F32) {
        f32_map_job j = {io->in[0]->data, io->out[0]->data, 0.0f, 0.0f};
        qf_parallel_for(qf_tensor_numel(io->in[0]), 32768, act_hard_swish_f32_slice, &j);
        return QF_OK;
    }
    QF_MAP_FLOAT_(x * fmax((T)0, fmin((T)1, x * ((T)1 / (T)6) + (T)0.5)));
    return QF_OK;
}

/* dx = 0 for x < -3, dy (x / 3 + 1/2) for -3 <= x < 3, dy for x >= 3: torch
 * 1.13's vectorized hardswish_backward (the CPU kernel every element but a
 * tail of fewer than one vector goes through). At x = -3 it gives -dy / 2,
 * the right-hand slope; at x = 3, dy, the right-hand slope too (its scalar
 * tail loop gives 1.5 dy there; we follow the vector path). Reads X
 * (bwd_in bit 0). */
QF_BWD_SLICE_(act_hard_swish_bwd_slice, v < -3.0f ? 0.0f : v >= 3.0f ? dy : dy * (v / 3.0f + 0.5f))

static qf_status qf_hard_swish_backward_f32(const qf_kernel_io *io)
{
    return act_bwd_map(io, io->in[0], act_hard_swish_bwd_slice, 0.0f, 0.0f);
}

/* --- Softmax ----------------------------------------------------------------- */

/* Softmax changed meaning at opset 13: before, the input is coerced to 2-D
 * [prod(dims[:axis]), prod(dims[axis:])] (default axis 1) and each row is
 * normalised; from 13 on, it is normalised along one axis (default -1). Both
 * are "outer x len x inner" loops: opset < 13 is inner = 1 with len the
 * product of the trailing dims. An opset of 0 (a graph built in code) means
 * the current semantics. ONNX import marks the Softmax of an opset < 13
 * model with qfold_softmax_2d (src/io/onnx_opset.c), which keeps the 2-D
 * coercion when the graph's opset is raised later (the quantizer's 13). */
static bool act_softmax_legacy(const qf_node *n, int64_t opset)
{
    return qf_node_attr_int(n, "qfold_softmax_2d", 0) != 0 || (opset > 0 && opset < 13);
}

static qf_status act_softmax_axis(const qf_node *n, int64_t opset, int ndim, int *axis)
{
    *axis = 0; /* defined on every path */
    int64_t a = qf_node_attr_int(n, "axis", act_softmax_legacy(n, opset) ? 1 : -1);
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
    if (act_softmax_legacy(io->node, io->opset)) {
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

/* dx = y (dy - sum_k dy_k y_k) along the softmax's rows (torch's
 * _softmax_backward_data), with the forward's outer x len x inner split
 * (opset < 13: the flattened trailing dims). Reads Y (bwd_out bit 0). */
static qf_status qf_softmax_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(act_bwd_check(io));
    if (!io->din[0]) return QF_OK;
    const qf_tensor *y = io->out[0];
    float *dx = io->din[0]->data;
    if (!io->dout[0]) {
        memset(dx, 0, qf_tensor_nbytes(io->din[0]));
        return QF_OK;
    }
    int axis;
    QF_TRY(act_softmax_axis(io->node, io->opset, y->ndim, &axis));
    int64_t outer = 1, len = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= y->dims[i];
    if (act_softmax_legacy(io->node, io->opset)) {
        for (int i = axis; i < y->ndim; i++) len *= y->dims[i];
    } else {
        len = y->dims[axis];
        for (int i = axis + 1; i < y->ndim; i++) inner *= y->dims[i];
    }
    const float *py = y->data, *pdy = io->dout[0]->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < inner; j++) {
            const int64_t base = o * len * inner + j;
            double dot = 0.0;
            for (int64_t k = 0; k < len; k++) dot += (double)pdy[base + k * inner] * py[base + k * inner];
            const float fdot = (float)dot;
            for (int64_t k = 0; k < len; k++) {
                const int64_t e = base + k * inner;
                dx[e] = py[e] * (pdy[e] - fdot);
            }
        }
    }
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
    .backward_f32 = qf_relu6_backward_f32,
    .bwd_out = 1u << 0,
};

const qf_op_kernels qf_clip_kernels = {
    .infer = qf_clip_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_clip_forward_f32,
    .backward_f32 = qf_clip_backward_f32,
    .bwd_in = (1u << 0) | (1u << 1) | (1u << 2),
};

const qf_op_kernels qf_leaky_relu_kernels = {
    .infer = qf_leaky_relu_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_leaky_relu_forward_f32,
    .backward_f32 = qf_leaky_relu_backward_f32,
    .bwd_in = 1u << 0,
};

const qf_op_kernels qf_prelu_kernels = {
    .infer = qf_prelu_infer,
    .forward_f32 = qf_prelu_forward_f32,
    .backward_f32 = qf_prelu_backward_f32,
    .bwd_scratch = prelu_bwd_scratch,
    .bwd_in = (1u << 0) | (1u << 1),
};

const qf_op_kernels qf_sigmoid_kernels = {
    .infer = qf_sigmoid_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_sigmoid_forward_f32,
    .backward_f32 = qf_sigmoid_backward_f32,
    .bwd_out = 1u << 0,
};

const qf_op_kernels qf_tanh_kernels = {
    .infer = qf_tanh_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_tanh_forward_f32,
    .backward_f32 = qf_tanh_backward_f32,
    .bwd_out = 1u << 0,
};

const qf_op_kernels qf_erf_kernels = {
    .infer = qf_erf_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_erf_forward_f32,
};

const qf_op_kernels qf_exp_kernels = {
    .infer = qf_exp_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_exp_forward_f32,
    .backward_f32 = qf_exp_backward_f32,
    .bwd_out = 1u << 0,
};

const qf_op_kernels qf_log_kernels = {
    .infer = qf_log_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_log_forward_f32,
    .backward_f32 = qf_log_backward_f32,
    .bwd_in = 1u << 0,
};

const qf_op_kernels qf_hard_sigmoid_kernels = {
    .infer = qf_hard_sigmoid_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_hard_sigmoid_forward_f32,
    .backward_f32 = qf_hard_sigmoid_backward_f32,
    .bwd_in = 1u << 0,
};

const qf_op_kernels qf_hard_swish_kernels = {
    .infer = qf_hard_swish_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_hard_swish_forward_f32,
    .backward_f32 = qf_hard_swish_backward_f32,
    .bwd_in = 1u << 0,
};

const qf_op_kernels qf_softmax_kernels = {
    .infer = qf_softmax_infer,
    .forward_f32 = qf_softmax_forward_f32,
    .backward_f32 = qf_softmax_backward_f32,
    .bwd_out = 1u << 0,
};
