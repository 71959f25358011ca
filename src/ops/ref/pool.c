/* Pooling and reductions (ONNX opsets 7..21): MaxPool, AveragePool,
 * GlobalAveragePool, ReduceMean, ReduceSum, ReduceMax.
 *
 * X is [N, C, spatial...] with 1 to 3 spatial dims; each (n, c) plane is
 * pooled on its own, as a 3-D problem (spatial.h lifts 1-D and 2-D). Window
 * sizes and pads follow spatial.h. MaxPool handles float32, int8 and uint8
 * and can return Indices: int64 offsets into the whole flattened X (plane
 * offset + position; storage_order 1 numbers a plane's positions
 * column-major), as ONNX Runtime does. Sums are accumulated in double.
 *
 * The integer executor's int8 AveragePool and Mean are ops of their own
 * (qavg_pool, qmean: src/ops/int8/qpool.c) on the window geometry of
 * pool.h.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/ref/pool.h"
#include "ops/math/reduce_walk.h"
#include "ops/math/spatial.h"

/* --- window pools ---------------------------------------------------------- */

/* What prepare keeps for MaxPool / AveragePool. */
typedef struct pool_state {
    pool_geom geom;
    bool col_major;    /* MaxPool storage_order = 1 */
    bool include_pad;  /* AveragePool count_include_pad */
} pool_state;

qf_status qf_pool_setup(const qf_node *n, const qf_tensor *x, qf_spatial_kind kind, pool_geom *pg)
{
    const char *op = qf_op_label(n);
    if (x->ndim < 3 || x->ndim > 2 + QF_SPATIAL_MAX)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): input X has rank %d, expected 3 to %d (N, C, spatial...)",
                        n->name, op, x->ndim, 2 + QF_SPATIAL_MAX);
    bool ceil_mode = qf_node_attr_int(n, "ceil_mode", 0) != 0;
    QF_TRY(qf_spatial_parse(n, x->ndim - 2, NULL, kind, &pg->s));
    QF_TRY(qf_spatial_forward_dims(n, &pg->s, x->dims + 2, ceil_mode));
    pg->l = qf_spatial_lift3(&pg->s);
    pg->planes = x->dims[0] >= 0 && x->dims[1] >= 0 ? x->dims[0] * x->dims[1] : -1;
    pg->in_plane = qf_spatial_prod(pg->s.rank, pg->s.in);
    pg->out_plane = qf_spatial_prod(pg->s.rank, pg->s.out);
    return QF_OK;
}

void qf_pool_set_output(qf_tensor *y, qf_dtype dt, const qf_tensor *x, const pool_geom *pg)
{
    y->dtype = dt;
    y->ndim = x->ndim;
    y->dims[0] = x->dims[0];
    y->dims[1] = x->dims[1];
    for (int i = 0; i < pg->s.rank; i++) y->dims[2 + i] = pg->s.out[i];
}

/* Input X of a pooling node, present and float32 (or int8 / uint8 too when
 * `ints` is set: MaxPool). */
static qf_status pool_input(const qf_node *n, bool ints, const qf_tensor **x)
{
    const char *op = qf_op_label(n);
    *x = NULL; /* defined on every path */
    if (n->ninputs < 1 || !n->inputs[0])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): input X is required", n->name, op);
    *x = &n->inputs[0]->type;
    qf_dtype dt = (*x)->dtype;
    if (dt == QF_DTYPE_F32 || (ints && (dt == QF_DTYPE_U8 || dt == QF_DTYPE_I8))) return QF_OK;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input X has dtype %s; %s supported", n->name, op,
                    qf_dtype_name(dt), ints ? "float32, int8 and uint8 are" : "only float32 is");
}

/* A float pool over a slice of the planes (each (n, c) plane is pooled on
 * its own, so qf_parallel_for splits the planes): forward x -> y, backward
 * y (the upstream gradient) -> dx, x read by MaxPool's backward. */
typedef struct pool_job {
    const pool_geom *pg;
    const float *x, *y;
    float *out, *dx;
    bool include_pad;
} pool_job;


/* One max-pool kernel per element type; T is the type, LOWEST its minimum. */
#define QF_MAX_POOL_BODY(T, LOWEST)                                                                          \
    const qf_spatial *l = &pg->l;                                                                            \
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];                                               \
    for (int64_t p = 0; p < pg->planes; p++) {                                                               \
        const T *xp = x + p * pg->in_plane;                                                                  \
        T *yp = y + p * pg->out_plane;                                                                       \
        int64_t *ip = ind ? ind + p * pg->out_plane : NULL;                                                 \
        for (int64_t od = 0; od < l->out[0]; od++) {                                                         \
            int64_t sd = od * l->stride[0] - l->pad_begin[0], d0, d1;                                        \
            qf_pool_tap_window(sd, l->dilation[0], l->kernel[0], ID, &d0, &d1);                                      \
            for (int64_t oh = 0; oh < l->out[1]; oh++) {                                                     \
                int64_t sh = oh * l->stride[1] - l->pad_begin[1], h0, h1;                                    \
                qf_pool_tap_window(sh, l->dilation[1], l->kernel[1], IH, &h0, &h1);                                  \
                for (int64_t ow = 0; ow < l->out[2]; ow++, yp++) {                                           \
                    int64_t sw = ow * l->stride[2] - l->pad_begin[2], w0, w1;                                \
                    qf_pool_tap_window(sw, l->dilation[2], l->kernel[2], IW, &w0, &w1);                              \
                    T best = LOWEST;                                                                         \
                    int64_t bd = -1, bh = -1, bw = -1;                                                       \
                    for (int64_t kd = d0; kd < d1; kd++) {                                                   \
                        int64_t id = sd + kd * l->dilation[0];                                               \
                        for (int64_t kh = h0; kh < h1; kh++) {                                               \
                            int64_t ih = sh + kh * l->dilation[1];                                           \
                            const T *row = xp + (id * IH + ih) * IW;                                         \
                            for (int64_t kw = w0; kw < w1; kw++) {                                           \
                                int64_t iw = sw + kw * l->dilation[2];                                       \
                                if (row[iw] > best || bd < 0) {                                              \
                                    best = row[iw];                                                          \
                                    bd = id, bh = ih, bw = iw;                                               \
                                }                                                                            \
                            }                                                                                \
                        }                                                                                    \
                    }                                                                                        \
                    *yp = best;                                                                              \
                    if (ip) {                                                                                \
                        int64_t pos = bd < 0 ? 0                                                             \
                                      : col_major ? bd + ID * (bh + IH * bw)                                 \
                                                  : (bd * IH + bh) * IW + bw;                                \
                        *ip++ = p * pg->in_plane + pos;                                                      \
                    }                                                                                        \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

/* Without Indices: a plain running maximum (the hot path of inference). */
#define QF_MAX_POOL_PLAIN(T, LOWEST)                                                                         \
    const qf_spatial *l = &pg->l;                                                                            \
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];                                               \
    const int64_t dd = l->dilation[0], dh = l->dilation[1], dw = l->dilation[2];                             \
    for (int64_t p = 0; p < pg->planes; p++) {                                                               \
        const T *xp = x + p * pg->in_plane;                                                                  \
        T *yp = y + p * pg->out_plane;                                                                       \
        for (int64_t od = 0; od < l->out[0]; od++) {                                                         \
            int64_t sd = od * l->stride[0] - l->pad_begin[0], d0, d1;                                        \
            qf_pool_tap_window(sd, dd, l->kernel[0], ID, &d0, &d1);                                                  \
            for (int64_t oh = 0; oh < l->out[1]; oh++) {                                                     \
                int64_t sh = oh * l->stride[1] - l->pad_begin[1], h0, h1;                                    \
                qf_pool_tap_window(sh, dh, l->kernel[1], IH, &h0, &h1);                                              \
                for (int64_t ow = 0; ow < l->out[2]; ow++, yp++) {                                           \
                    int64_t sw = ow * l->stride[2] - l->pad_begin[2], w0, w1;                                \
                    qf_pool_tap_window(sw, dw, l->kernel[2], IW, &w0, &w1);                                          \
                    T best = LOWEST;                                                                         \
                    for (int64_t kd = d0; kd < d1; kd++)                                                     \
                        for (int64_t kh = h0; kh < h1; kh++) {                                               \
                            const T *row = xp + ((sd + kd * dd) * IH + sh + kh * dh) * IW;                   \
                            for (int64_t kw = w0; kw < w1; kw++) {                                           \
                                T v = row[sw + kw * dw];                                                     \
                                best = v > best ? v : best;                                                  \
                            }                                                                                \
                        }                                                                                    \
                    *yp = best;                                                                              \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

static void max_pool_f32(const pool_geom *pg, const float *x, float *y, int64_t *ind, bool col_major)
{
    if (ind) {
        QF_MAX_POOL_BODY(float, -INFINITY)
    } else {
        QF_MAX_POOL_PLAIN(float, -INFINITY)
    }
}

static void max_pool_f32_planes(void *ctx, int64_t lo, int64_t hi)
{
    const pool_job *j = ctx;
    pool_geom sub = *j->pg;
    sub.planes = hi - lo;
    max_pool_f32(&sub, j->x + lo * sub.in_plane, j->out + lo * sub.out_plane, NULL, false);
}

static void max_pool_u8(const pool_geom *pg, const uint8_t *x, uint8_t *y, int64_t *ind, bool col_major)
{
    if (ind) {
        QF_MAX_POOL_BODY(uint8_t, 0)
    } else {
        QF_MAX_POOL_PLAIN(uint8_t, 0)
    }
}

static void max_pool_i8(const pool_geom *pg, const int8_t *x, int8_t *y, int64_t *ind, bool col_major)
{
    if (ind) {
        QF_MAX_POOL_BODY(int8_t, INT8_MIN)
    } else {
        QF_MAX_POOL_PLAIN(int8_t, INT8_MIN)
    }
}

#undef QF_MAX_POOL_BODY
#undef QF_MAX_POOL_PLAIN

static qf_status qf_max_pool_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const char *op = qf_op_label(n);
    const qf_tensor *x;
    QF_TRY(pool_input(n, true, &x));
    int64_t so = qf_node_attr_int(n, "storage_order", 0);
    if (so != 0 && so != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): storage_order = %lld, must be 0 or 1", n->name, op,
                        (long long)so);
    pool_geom pg;
    QF_TRY(qf_pool_setup(n, x, QF_SPATIAL_MAX_POOL, &pg));
    qf_pool_set_output(&n->outputs[0]->type, x->dtype, x, &pg);
    if (n->noutputs > 1) qf_pool_set_output(&n->outputs[1]->type, QF_DTYPE_I64, x, &pg);
    return QF_OK;
}

static qf_status qf_max_pool_prepare(const qf_kernel_io *io, void *state)
{
    pool_state *st = state;
    st->col_major = qf_node_attr_int(io->node, "storage_order", 0) == 1;
    return qf_pool_setup(io->node, io->in[0], QF_SPATIAL_MAX_POOL, &st->geom);
}

static qf_status qf_max_pool_forward_f32(const qf_kernel_io *io)
{
    const pool_state *st = io->state;
    const pool_geom pg = st->geom;
    const qf_tensor *x = io->in[0];
    int64_t *ind = io->nout > 1 && io->out[1] ? io->out[1]->data : NULL;
    bool col_major = st->col_major;
    switch (x->dtype) {
    case QF_DTYPE_F32:
        if (ind) { /* Indices number the whole tensor: one pass */
            max_pool_f32(&pg, x->data, io->out[0]->data, ind, col_major);
        } else {
            pool_job j = {.pg = &pg, .x = x->data, .out = io->out[0]->data};
            qf_parallel_for(pg.planes, qf_pool_grain(&pg), max_pool_f32_planes, &j);
        }
        break;
    case QF_DTYPE_U8: max_pool_u8(&pg, x->data, io->out[0]->data, ind, col_major); break;
    case QF_DTYPE_I8: max_pool_i8(&pg, x->data, io->out[0]->data, ind, col_major); break;
    default:
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s", io->node->name,
                        qf_op_label(io->node), qf_dtype_name(x->dtype));
    }
    return QF_OK;
}

static qf_status qf_avg_pool_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x;
    QF_TRY(pool_input(n, false, &x));
    pool_geom pg;
    QF_TRY(qf_pool_setup(n, x, QF_SPATIAL_AVG_POOL, &pg));
    qf_pool_set_output(&n->outputs[0]->type, QF_DTYPE_F32, x, &pg);
    return QF_OK;
}


static qf_status qf_avg_pool_prepare(const qf_kernel_io *io, void *state)
{
    pool_state *st = state;
    st->include_pad = qf_node_attr_int(io->node, "count_include_pad", 0) != 0;
    return qf_pool_setup(io->node, io->in[0], QF_SPATIAL_AVG_POOL, &st->geom);
}

/* One (n, c) plane of AveragePool: the window walk the forward and the
 * backward share. The count: count_include_pad, the window clipped to the
 * padded extent, else the taps inside X (PyTorch's divisor too). Exactly one
 * of the two is set:
 *   x, y     forward: y = the mean of x over each window's taps
 *   dy, dx   backward: dy / count to every tap (dx accumulates: zeroed by the caller) */
typedef struct avg_plane {
    const float *x, *dy;
    float *y, *dx;
} avg_plane;

static void avg_pool_plane(const pool_geom *pg, bool include_pad, avg_plane io)
{
    const qf_spatial *l = &pg->l;
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];
    for (int64_t od = 0; od < l->out[0]; od++) {
        int64_t sd = od * l->stride[0] - l->pad_begin[0], d0, d1;
        qf_pool_tap_window(sd, 1, l->kernel[0], ID, &d0, &d1);
        int64_t cd = qf_pool_padded_count(sd, l->kernel[0], ID, l->pad_end[0]);
        for (int64_t oh = 0; oh < l->out[1]; oh++) {
            int64_t sh = oh * l->stride[1] - l->pad_begin[1], h0, h1;
            qf_pool_tap_window(sh, 1, l->kernel[1], IH, &h0, &h1);
            int64_t ch = qf_pool_padded_count(sh, l->kernel[1], IH, l->pad_end[1]);
            for (int64_t ow = 0; ow < l->out[2]; ow++) {
                int64_t sw = ow * l->stride[2] - l->pad_begin[2], w0, w1;
                qf_pool_tap_window(sw, 1, l->kernel[2], IW, &w0, &w1);
                const int64_t inside = (d1 - d0) * (h1 - h0) * (w1 - w0);
                const int64_t cnt =
                    include_pad ? cd * ch * qf_pool_padded_count(sw, l->kernel[2], IW, l->pad_end[2]) : inside;
                if (io.dx) {
                    const float dyv = *io.dy++;
                    if (cnt <= 0) continue;
                    const float g = dyv / (float)cnt;
                    for (int64_t kd = d0; kd < d1; kd++)
                        for (int64_t kh = h0; kh < h1; kh++) {
                            float *row = io.dx + ((sd + kd) * IH + sh + kh) * IW + sw;
                            for (int64_t kw = w0; kw < w1; kw++) row[kw] += g;
                        }
                } else {
                    double sum = 0.0;
                    for (int64_t kd = d0; kd < d1; kd++)
                        for (int64_t kh = h0; kh < h1; kh++) {
                            const float *row = io.x + ((sd + kd) * IH + sh + kh) * IW;
                            for (int64_t kw = w0; kw < w1; kw++) sum += row[sw + kw];
                        }
                    *io.y++ = cnt > 0 ? (float)(sum / (double)cnt) : 0.0f;
                }
            }
        }
    }
}

static void avg_pool_f32_planes(void *ctx, int64_t lo, int64_t hi)
{
    const pool_job *j = ctx;
    const pool_geom *pg = j->pg;
    for (int64_t p = lo; p < hi; p++)
        avg_pool_plane(pg, j->include_pad, (avg_plane){.x = j->x + p * pg->in_plane, .y = j->out + p * pg->out_plane});
}

static qf_status qf_avg_pool_forward_f32(const qf_kernel_io *io)
{
    const pool_state *st = io->state;
    pool_job j = {.pg = &st->geom, .x = io->in[0]->data, .out = io->out[0]->data, .include_pad = st->include_pad};
    qf_parallel_for(st->geom.planes, qf_pool_grain(&st->geom), avg_pool_f32_planes, &j);
    return QF_OK;
}

/* --- GlobalAveragePool ----------------------------------------------------- */

static qf_status qf_global_avg_pool_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x;
    QF_TRY(pool_input(n, false, &x));
    if (x->ndim < 3)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): input X has rank %d, expected >= 3 (N, C, spatial...)",
                        n->name, qf_op_label(n), x->ndim);
    int64_t dims[QF_MAX_DIMS];
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    for (int i = 2; i < x->ndim; i++) dims[i] = 1;
    qf_set_output(n, 0, QF_DTYPE_F32, x->ndim, dims);
    return QF_OK;
}

static qf_status qf_global_avg_pool_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    const int64_t planes = x->dims[0] * x->dims[1];
    int64_t inner = 1;
    for (int i = 2; i < x->ndim; i++) inner *= x->dims[i];
    const float *xd = x->data;
    float *yd = io->out[0]->data;
    if ((io->in_nhwc & 1u) && x->ndim == 4) {
        /* Channels-last X (the training tape: a chain's last convolution):
         * each channel's sum in double over its values in the same order. */
        const int64_t nb = x->dims[0], c = x->dims[1];
        for (int64_t b = 0; b < nb; b++)
            for (int64_t c0 = 0; c0 < c; c0 += 16) {
                const int64_t w = c - c0 < 16 ? c - c0 : 16;
                double s[16] = {0};
                for (int64_t i = 0; i < inner; i++) {
                    const float *xp = xd + (b * inner + i) * c + c0;
                    for (int64_t k = 0; k < w; k++) s[k] += xp[k];
                }
                for (int64_t k = 0; k < w; k++) yd[b * c + c0 + k] = inner > 0 ? (float)(s[k] / (double)inner) : 0.0f;
            }
        return QF_OK;
    }
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = xd + p * inner;
        double s = 0.0;
        for (int64_t i = 0; i < inner; i++) s += xp[i];
        yd[p] = inner > 0 ? (float)(s / (double)inner) : 0.0f;
    }
    return QF_OK;
}

/* --- ReduceMean, ReduceSum, ReduceMax --------------------------------------- */

/* The reduced axes of n as a mask over x's rank. Axes come from the `axes`
 * attribute (ReduceMean / ReduceMax opsets <= 17, ReduceSum <= 12) or a
 * constant second input (the later forms); none
 * means all axes unless noop_with_empty_axes. *noop is set for that case. */
static qf_status pool_reduce_axes(const qf_node *n, int rank, bool *mask, bool *noop)
{
    const char *op = qf_op_label(n);
    int count = 0;
    const int64_t *axes = qf_node_attr_ints(n, "axes", &count);
    int64_t from_input[QF_MAX_DIMS];
    if (n->ninputs > 1 && n->inputs[1]) {
        const qf_value *av = n->inputs[1];
        if (!qf_value_is_const(av))
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): axes input '%s' is not a constant; dynamic shapes are "
                            "not supported",
                            n->name, op, av->name);
        int64_t na = qf_tensor_numel(&av->type);
        if (na > QF_MAX_DIMS)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): %lld axes for a rank-%d input", n->name, op,
                            (long long)na, rank);
        for (int64_t i = 0; i < na; i++) from_input[i] = qf_tensor_get_i64(&av->type, i);
        axes = from_input;
        count = (int)na;
    }
    *noop = false;
    for (int i = 0; i < rank; i++) mask[i] = false;
    if (count == 0) {
        if (qf_node_attr_int(n, "noop_with_empty_axes", 0)) *noop = true;
        else
            for (int i = 0; i < rank; i++) mask[i] = true;
        return QF_OK;
    }
    for (int i = 0; i < count; i++) {
        int64_t a = axes[i];
        if (a < -rank || a >= rank)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld is out of range for rank %d", n->name, op,
                            (long long)a, rank);
        if (a < 0) a += rank;
        if (mask[a])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld is listed twice", n->name, op, (long long)a);
        mask[a] = true;
    }
    return QF_OK;
}

/* The reductions of this file: ReduceMean, ReduceSum, ReduceMax. */
typedef enum pool_reduce_kind {
    POOL_REDUCE_MEAN,
    POOL_REDUCE_SUM,
    POOL_REDUCE_MAX
} pool_reduce_kind;

/* Output shape of a reduction: the kept axes, and the reduced ones as 1 with
 * keepdims (default 1); dtype as the input, one of `allowed`. */
static qf_status pool_reduce_infer(qf_node *n, const qf_dtype *allowed, int count,
                                   const char *names)
{
    const char *op = qf_op_label(n);
    if (n->ninputs < 1 || !n->inputs[0])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): input data is required", n->name, op);
    const qf_tensor *x = &n->inputs[0]->type;
    bool ok = false;
    for (int i = 0; i < count; i++) ok |= x->dtype == allowed[i];
    if (!ok)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input has dtype %s; %s supported",
                        n->name, op, qf_dtype_name(x->dtype), names);
    bool keep = qf_node_attr_int(n, "keepdims", 1) != 0;
    qf_tensor *y = &n->outputs[0]->type;
    y->dtype = x->dtype;
    const qf_value *av = n->ninputs > 1 ? n->inputs[1] : NULL;
    if (av && !qf_value_is_const(av) && av->kind == QF_VALUE_INPUT && !av->producer) {
        /* axes a graph input (ONNX's test models do that): pending until the
         * caller binds it, the output's dims unknown; its rank from the
         * count of axes the input declares */
        const int64_t na = av->type.ndim == 1 ? av->type.dims[0] : -1;
        int rank = x->ndim;
        if (!keep)
            rank = na > 0                                                      ? x->ndim - (int)na
                   : na == 0 && qf_node_attr_int(n, "noop_with_empty_axes", 0) ? x->ndim
                   : na == 0                                                   ? 0
                                                                               : -1;
        if (rank < 0)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): output rank is not known until axes '%s' is bound",
                            n->name, op, av->name);
        y->ndim = rank;
        for (int i = 0; i < rank; i++) y->dims[i] = -1;
        return QF_OK;
    }
    bool mask[QF_MAX_DIMS], noop;
    QF_TRY(pool_reduce_axes(n, x->ndim, mask, &noop));
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (!mask[i]) y->dims[k++] = x->dims[i];
        else if (keep) y->dims[k++] = 1;
    }
    y->ndim = k;
    return QF_OK;
}

static const qf_dtype pool_float_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64};
/* ReduceMax also moves int8 / uint8 values: the integer executor's exact
 * max of a tensor whose qparams the output shares (quant/lower_reduce.c). */
static const qf_dtype pool_max_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I8, QF_DTYPE_U8};

static qf_status qf_reduce_mean_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return pool_reduce_infer(n, pool_float_dtypes, 2, "float32 and float64 are");
}

static qf_status qf_reduce_sum_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return pool_reduce_infer(n, pool_float_dtypes, 2, "float32 and float64 are");
}

static qf_status qf_reduce_max_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return pool_reduce_infer(n, pool_max_dtypes, 4, "float32, float64, int8 and uint8 are");
}

/* One output element's reduction: the rcount elements at x + base + the
 * odometer over (rd, rs). Mean and sum in double, rounded once; max keeps a
 * NaN (the first one, as torch.amax propagates it) and is -inf over none. */
#define QF_REDUCE_OVER_(T, STEP)                                                                    \
    do {                                                                                            \
        const T *xd = x->data;                                                                      \
        int64_t ridx[QF_MAX_DIMS] = {0}, off = w.base;                                              \
        for (int64_t r = 0; r < w.rcount; r++, off = qf_reduce_walk_next_in(&w, ridx, off)) {       \
            const T v = xd[off];                                                                    \
            STEP;                                                                                   \
        }                                                                                           \
    } while (0)

static qf_status pool_reduce_forward(const qf_kernel_io *io, pool_reduce_kind kind)
{
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0];
    bool mask[QF_MAX_DIMS], noop;
    QF_TRY(pool_reduce_axes(n, x->ndim, mask, &noop));
    const int rank = x->ndim;
    if (noop) {
        memcpy(io->out[0]->data, x->data, qf_tensor_nbytes(x));
        return QF_OK;
    }
    /* The kept axes (one output element each) and, for each, the reduced
     * ones, as odometers (ops/math/reduce_walk.h). */
    qf_reduce_walk w;
    qf_reduce_walk_init(&w, rank, x->dims, mask);
    const int64_t nout = qf_tensor_numel(io->out[0]);
    const qf_dtype dt = x->dtype;
    void *yv = io->out[0]->data;
    const int64_t rcount = w.rcount;
    for (int64_t o = 0; o < nout; o++, qf_reduce_walk_next_out(&w)) {
        if (kind == POOL_REDUCE_MAX) {
            switch (dt) {
            case QF_DTYPE_I8: {
                int8_t m = INT8_MIN;
                QF_REDUCE_OVER_(int8_t, m = v > m ? v : m);
                ((int8_t *)yv)[o] = m;
                break;
            }
            case QF_DTYPE_U8: {
                uint8_t m = 0;
                QF_REDUCE_OVER_(uint8_t, m = v > m ? v : m);
                ((uint8_t *)yv)[o] = m;
                break;
            }
            case QF_DTYPE_F64: {
                double m = -INFINITY;
                QF_REDUCE_OVER_(double, if (m == m && (v > m || v != v)) m = v);
                ((double *)yv)[o] = m;
                break;
            }
            default: {
                float m = -INFINITY;
                QF_REDUCE_OVER_(float, if (m == m && (v > m || v != v)) m = v);
                ((float *)yv)[o] = m;
                break;
            }
            }
        } else {
            double s = 0.0;
            if (dt == QF_DTYPE_F64)
                QF_REDUCE_OVER_(double, s += v);
            else
                QF_REDUCE_OVER_(float, s += v);
            /* the mean of no element is NaN (0 / 0), their sum 0 */
            double r = kind == POOL_REDUCE_SUM ? s : rcount > 0 ? s / (double)rcount : NAN;
            if (dt == QF_DTYPE_F64)
                ((double *)yv)[o] = r;
            else
                ((float *)yv)[o] = (float)r;
        }
    }
    return QF_OK;
}

#undef QF_REDUCE_OVER_

static qf_status qf_reduce_mean_forward_f32(const qf_kernel_io *io)
{
    return pool_reduce_forward(io, POOL_REDUCE_MEAN);
}
static qf_status qf_reduce_sum_forward_f32(const qf_kernel_io *io)
{
    return pool_reduce_forward(io, POOL_REDUCE_SUM);
}
static qf_status qf_reduce_max_forward_f32(const qf_kernel_io *io)
{
    return pool_reduce_forward(io, POOL_REDUCE_MAX);
}

/* --- backward (training; the contract is in op_table.h) -------------------- */

/* din[0] zeroed, or NULL when nobody wants it. A NULL dout is zeros: the
 * gradient is then zero too. Returns false when there is nothing more to do. */
static bool pool_grad_begin(const qf_kernel_io *io, float **dx, const float **dy)
{
    *dx = NULL;
    *dy = NULL;
    if (!io->din[0]) return false;
    *dx = io->din[0]->data;
    memset(*dx, 0, sizeof(float) * (size_t)qf_tensor_numel(io->din[0]));
    if (!io->dout[0]) return false;
    *dy = io->dout[0]->data;
    return true;
}

static qf_status pool_grad_f32_only(const qf_kernel_io *io)
{
    if (io->in[0]->dtype == QF_DTYPE_F32) return QF_OK;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of a %s input (float32 only)",
                    io->node->name, qf_op_label(io->node), qf_dtype_name(io->in[0]->dtype));
}

/* MaxPool: each dy goes to the element its window's maximum came from, found
 * again in X (cheaper than keeping indices from the forward). The choice is
 * PyTorch's (max_pool{2,3}d_with_indices on CPU): the windows are scanned
 * depth, row, column; the first maximum wins a tie (a strict >), a NaN wins
 * over every number and a later NaN over an earlier one; a window whose
 * every tap is -inf gives its first tap. Planes are independent: one thread
 * slice of planes each. */
static void max_pool_grad_planes(void *ctx, int64_t lo, int64_t hi)
{
    const pool_job *j = ctx;
    const pool_geom *pg = j->pg;
    const qf_spatial *l = &pg->l;
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];
    const int64_t dd = l->dilation[0], dh = l->dilation[1], dw = l->dilation[2];
    for (int64_t p = lo; p < hi; p++) {
        const float *xp = j->x + p * pg->in_plane;
        const float *dyp = j->y + p * pg->out_plane;
        float *dxp = j->dx + p * pg->in_plane;
        for (int64_t od = 0; od < l->out[0]; od++) {
            int64_t sd = od * l->stride[0] - l->pad_begin[0], d0, d1;
            qf_pool_tap_window(sd, dd, l->kernel[0], ID, &d0, &d1);
            for (int64_t oh = 0; oh < l->out[1]; oh++) {
                int64_t sh = oh * l->stride[1] - l->pad_begin[1], h0, h1;
                qf_pool_tap_window(sh, dh, l->kernel[1], IH, &h0, &h1);
                for (int64_t ow = 0; ow < l->out[2]; ow++, dyp++) {
                    int64_t sw = ow * l->stride[2] - l->pad_begin[2], w0, w1;
                    qf_pool_tap_window(sw, dw, l->kernel[2], IW, &w0, &w1);
                    if (d0 >= d1 || h0 >= h1 || w0 >= w1) continue; /* no tap inside X */
                    float best = -INFINITY;
                    int64_t at = ((sd + d0 * dd) * IH + sh + h0 * dh) * IW + sw + w0 * dw;
                    for (int64_t kd = d0; kd < d1; kd++)
                        for (int64_t kh = h0; kh < h1; kh++) {
                            int64_t row = ((sd + kd * dd) * IH + sh + kh * dh) * IW + sw;
                            for (int64_t kw = w0; kw < w1; kw++) {
                                float v = xp[row + kw * dw];
                                if (v > best || v != v) {
                                    best = v;
                                    at = row + kw * dw;
                                }
                            }
                        }
                    dxp[at] += *dyp;
                }
            }
        }
    }
}

/* Reads X (bwd_in bit 0). */
static qf_status qf_max_pool_backward_f32(const qf_kernel_io *io)
{
    QF_TRY(pool_grad_f32_only(io));
    float *dx;
    const float *dy;
    if (!pool_grad_begin(io, &dx, &dy)) return QF_OK;
    const pool_state *st = io->state;
    pool_job j = {.pg = &st->geom, .x = io->in[0]->data, .y = dy, .dx = dx};
    qf_parallel_for(st->geom.planes, qf_pool_grain(&st->geom), max_pool_grad_planes, &j);
    return QF_OK;
}

/* AveragePool: each dy / count goes to every tap of its window inside X
 * (avg_pool_plane's backward). */
static void avg_pool_grad_planes(void *ctx, int64_t lo, int64_t hi)
{
    const pool_job *j = ctx;
    const pool_geom *pg = j->pg;
    for (int64_t p = lo; p < hi; p++)
        avg_pool_plane(pg, j->include_pad, (avg_plane){.dy = j->y + p * pg->out_plane, .dx = j->dx + p * pg->in_plane});
}

/* Reads neither X nor Y: the geometry is in the prepared state. */
static qf_status qf_avg_pool_backward_f32(const qf_kernel_io *io)
{
    float *dx;
    const float *dy;
    if (!pool_grad_begin(io, &dx, &dy)) return QF_OK;
    const pool_state *st = io->state;
    pool_job j = {.pg = &st->geom, .y = dy, .dx = dx, .include_pad = st->include_pad};
    qf_parallel_for(st->geom.planes, qf_pool_grain(&st->geom), avg_pool_grad_planes, &j);
    return QF_OK;
}

/* GlobalAveragePool: dx = dy / (spatial size), broadcast over each plane. */
static qf_status qf_global_avg_pool_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    const qf_tensor *x = io->in[0];
    float *dx = io->din[0]->data;
    const int64_t planes = x->dims[0] * x->dims[1];
    int64_t inner = 1;
    for (int i = 2; i < x->ndim; i++) inner *= x->dims[i];
    const float *dy = io->dout[0] ? io->dout[0]->data : NULL;
    if ((io->in_nhwc & 1u) && x->ndim == 4) { /* as the forward */
        const int64_t nb = x->dims[0], c = x->dims[1];
        for (int64_t b = 0; b < nb; b++)
            for (int64_t i = 0; i < inner; i++) {
                float *dxp = dx + (b * inner + i) * c;
                for (int64_t k = 0; k < c; k++) dxp[k] = dy ? dy[b * c + k] / (float)inner : 0.0f;
            }
        return QF_OK;
    }
    for (int64_t p = 0; p < planes; p++) {
        const float g = dy ? dy[p] / (float)inner : 0.0f;
        float *dxp = dx + p * inner;
        for (int64_t i = 0; i < inner; i++) dxp[i] = g;
    }
    return QF_OK;
}

/* ReduceMean: dx[i] = dy[o(i)] / (reduced count), o(i) the output element
 * x[i] was averaged into: x is walked in order, with an output stride per
 * axis (0 on the reduced ones). With noop_with_empty_axes and no axes the
 * node is the identity. */
static qf_status qf_reduce_mean_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0];
    float *dx = io->din[0]->data;
    const int64_t total = qf_tensor_numel(x);
    bool mask[QF_MAX_DIMS], noop;
    QF_TRY(pool_reduce_axes(n, x->ndim, mask, &noop));
    if (!io->dout[0]) {
        memset(dx, 0, sizeof *dx * (size_t)total);
        return QF_OK;
    }
    const float *dy = io->dout[0]->data;
    if (noop) {
        memcpy(dx, dy, sizeof *dx * (size_t)total);
        return QF_OK;
    }
    const int rank = x->ndim;
    int64_t ostride[QF_MAX_DIMS], st = 1, rcount = 1;
    for (int i = rank - 1; i >= 0; i--) {
        if (mask[i]) {
            ostride[i] = 0;
            rcount *= x->dims[i];
        } else {
            ostride[i] = st;
            st *= x->dims[i];
        }
    }
    if (total == 0) return QF_OK;
    /* Divided per element, as PyTorch's mean backward (not times 1 / n). */
    const float cnt = (float)rcount;
    if (rank == 0) {
        dx[0] = dy[0] / cnt;
        return QF_OK;
    }
    /* Rows of the innermost axis; an odometer over the outer ones. */
    const int64_t inner = x->dims[rank - 1], istr = ostride[rank - 1];
    int64_t idx[QF_MAX_DIMS] = {0}, off = 0;
    for (int64_t k = 0; k < total; k += inner) {
        float *row = dx + k;
        if (istr == 0) {
            const float g = dy[off] / cnt;
            for (int64_t j = 0; j < inner; j++) row[j] = g;
        } else {
            for (int64_t j = 0; j < inner; j++) row[j] = dy[off + j] / cnt;
        }
        for (int a = rank - 2; a >= 0; a--) {
            off += ostride[a];
            if (++idx[a] < x->dims[a]) break;
            off -= ostride[a] * x->dims[a];
            idx[a] = 0;
        }
    }
    return QF_OK;
}

/* The output offset of every element of x in order, for a reduction
 * (mask: the reduced axes): the odometer of the backward kernels below. */
typedef struct pool_reduce_walk {
    int rank;
    int64_t ostride[QF_MAX_DIMS], idx[QF_MAX_DIMS], dims[QF_MAX_DIMS], off;
} pool_reduce_walk;

static void pool_reduce_walk_init(pool_reduce_walk *w, const qf_tensor *x, const bool *mask)
{
    int64_t st = 1;
    w->rank = x->ndim;
    w->off = 0;
    for (int i = x->ndim - 1; i >= 0; i--) {
        w->dims[i] = x->dims[i];
        w->idx[i] = 0;
        w->ostride[i] = mask[i] ? 0 : st;
        if (!mask[i]) st *= x->dims[i];
    }
}

static inline void pool_reduce_walk_next(pool_reduce_walk *w)
{
    for (int a = w->rank - 1; a >= 0; a--) {
        w->off += w->ostride[a];
        if (++w->idx[a] < w->dims[a]) return;
        w->off -= w->ostride[a] * w->dims[a];
        w->idx[a] = 0;
    }
}

/* ReduceSum: dx[i] = dy[o(i)] (torch.sum's backward: the gradient expanded
 * over the reduced axes). With noop_with_empty_axes and no axes the node is
 * the identity. Reads neither X nor Y. */
static qf_status qf_reduce_sum_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    const qf_tensor *x = io->in[0];
    float *dx = io->din[0]->data;
    const int64_t total = qf_tensor_numel(x);
    bool mask[QF_MAX_DIMS], noop;
    QF_TRY(pool_reduce_axes(io->node, x->ndim, mask, &noop));
    if (!io->dout[0]) {
        memset(dx, 0, sizeof *dx * (size_t)total);
        return QF_OK;
    }
    const float *dy = io->dout[0]->data;
    if (noop) {
        memcpy(dx, dy, sizeof *dx * (size_t)total);
        return QF_OK;
    }
    pool_reduce_walk w;
    pool_reduce_walk_init(&w, x, mask);
    for (int64_t i = 0; i < total; i++, pool_reduce_walk_next(&w)) dx[i] = dy[w.off];
    return QF_OK;
}

/* Scratch of ReduceMax's backward: one tie count per output element. */
static size_t qf_reduce_max_bwd_scratch(const qf_node *n, const void *state)
{
    (void)state;
    int64_t k = qf_tensor_numel(&n->outputs[0]->type);
    return sizeof(float) * (size_t)(k > 0 ? k : 1);
}

/* ReduceMax: torch.amax's backward (PyTorch 1.13, derivatives.yaml amax:
 * scale_grad_by_count): the gradient is split evenly among the elements
 * equal to their slice's maximum, dx[i] = (dy[o] / count[o]) * (x[i] ==
 * y[o]), where count[o] is the number of such ties (torch.max(dim)'s
 * backward instead gives all of it to one index; ReduceMax follows amax).
 * Written as torch computes it, so a slice whose maximum is NaN (no element
 * equals it) gets dy / 0 * 0 = NaN everywhere, as in torch. Reads X and Y
 * (bwd_in and bwd_out bit 0). */
static qf_status qf_reduce_max_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    const qf_tensor *x = io->in[0];
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): backward of a %s input (float32 only)",
                        io->node->name, qf_op_label(io->node), qf_dtype_name(x->dtype));
    float *dx = io->din[0]->data;
    const int64_t total = qf_tensor_numel(x);
    bool mask[QF_MAX_DIMS], noop;
    QF_TRY(pool_reduce_axes(io->node, x->ndim, mask, &noop));
    if (!io->dout[0]) {
        memset(dx, 0, sizeof *dx * (size_t)total);
        return QF_OK;
    }
    const float *dy = io->dout[0]->data;
    if (noop) {
        memcpy(dx, dy, sizeof *dx * (size_t)total);
        return QF_OK;
    }
    const float *xd = x->data, *yd = io->out[0]->data;
    float *count = io->scratch;
    memset(count, 0, sizeof *count * (size_t)qf_tensor_numel(io->out[0]));
    pool_reduce_walk w;
    pool_reduce_walk_init(&w, x, mask);
    for (int64_t i = 0; i < total; i++, pool_reduce_walk_next(&w))
        count[w.off] += xd[i] == yd[w.off] ? 1.0f : 0.0f;
    pool_reduce_walk_init(&w, x, mask);
    for (int64_t i = 0; i < total; i++, pool_reduce_walk_next(&w))
        dx[i] = dy[w.off] / count[w.off] * (xd[i] == yd[w.off] ? 1.0f : 0.0f);
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_max_pool_kernels = {
    .infer = qf_max_pool_infer,
    .prepare = qf_max_pool_prepare,
    .state_size = sizeof(pool_state),
    .forward_f32 = qf_max_pool_forward_f32,
    .backward_f32 = qf_max_pool_backward_f32,
    .bwd_in = 1u << 0,
};

const qf_op_kernels qf_avg_pool_kernels = {
    .infer = qf_avg_pool_infer,
    .prepare = qf_avg_pool_prepare,
    .state_size = sizeof(pool_state),
    .forward_f32 = qf_avg_pool_forward_f32,
    .backward_f32 = qf_avg_pool_backward_f32,
};

const qf_op_kernels qf_global_avg_pool_kernels = {
    .infer = qf_global_avg_pool_infer,
    .forward_f32 = qf_global_avg_pool_forward_f32,
    .backward_f32 = qf_global_avg_pool_backward_f32,
};

const qf_op_kernels qf_reduce_mean_kernels = {
    .infer = qf_reduce_mean_infer,
    .forward_f32 = qf_reduce_mean_forward_f32,
    .backward_f32 = qf_reduce_mean_backward_f32,
};

const qf_op_kernels qf_reduce_sum_kernels = {
    .infer = qf_reduce_sum_infer,
    .forward_f32 = qf_reduce_sum_forward_f32,
    .backward_f32 = qf_reduce_sum_backward_f32,
};

const qf_op_kernels qf_reduce_max_kernels = {
    .infer = qf_reduce_max_infer,
    .forward_f32 = qf_reduce_max_forward_f32,
    .backward_f32 = qf_reduce_max_backward_f32,
    .bwd_in = 1u << 0,
    .bwd_out = 1u << 0,
    .bwd_scratch = qf_reduce_max_bwd_scratch,
};
