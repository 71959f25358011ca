/* The integer executor's int8 pools (internal ops, never exported: the
 * lowering, src/quant/lower.c, makes them from DQ -> pool -> [Relu] -> Q
 * groups; inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point, per-tensor
 * int8, attribute qfold_clamp), on the window geometry of the float pools
 * (pool.h):
 *   qavg_pool  AveragePool's window and attributes, X and Y of the same
 *              qparams, as TFLite's reference int8 AveragePool: the sum of
 *              the int8 values of a window (a padded tap counted by
 *              count_include_pad holds the zero point: the real 0) divided
 *              by the count, rounded half away from zero.
 *   qmean      the mean over trailing axes (`axes`, `keepdims`: ReduceMean's;
 *              GlobalAveragePool is axes 2..), as TFLite's reference int8
 *              Mean: acc = sum(q - zp_x), MultiplyByQuantizedMultiplier(acc,
 *              s_x / s_y), divided by the count rounded half away from zero,
 *              + zp_y.
 */
#include "core/parallel.h"
#include "ops/int8/int8.h"
#include "ops/kernels.h"
#include "ops/ref/pool.h"
#include "ops/math/requant.h"

typedef struct qpool_state {
    pool_geom geom;
    bool include_pad;
    int32_t zp, lo, hi;
    int64_t outer, inner;   /* qmean: rows x reduced elements */
    int32_t mult, shift;    /* qmean: s_x / s_y */
    int32_t zp_y;
} qpool_state;

static qf_status qpool_input(const qf_node *n, const qf_tensor *x)
{
    if (x->dtype == QF_DTYPE_I8) return QF_OK;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input X has dtype %s, expected int8", n->name,
                    qf_op_label(n), qf_dtype_name(x->dtype));
}

static qf_status qf_qavg_pool_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 5));
    const qf_tensor *x = &n->inputs[0]->type;
    QF_TRY(qpool_input(n, x));
    pool_geom pg;
    QF_TRY(qf_pool_setup(n, x, QF_SPATIAL_AVG_POOL, &pg));
    qf_pool_set_output(&n->outputs[0]->type, QF_DTYPE_I8, x, &pg);
    return QF_OK;
}

static qf_status qf_qavg_pool_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qpool_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 5));
    QF_TRY(qpool_input(n, io->in[0]));
    float sx, sy;
    int32_t zy;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "X", &sx, &st->zp));
    QF_TRY(qf_int8_qparams(n, io->in[3], io->in[4], "Y", &sy, &zy));
    /* TFLite's int8 AveragePool has no requantization: one set of qparams. */
    if (sx != sy || st->zp != zy)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): X (scale %g, zero point %d) and Y (scale %g, zero "
                        "point %d) must have the same qparams", n->name, qf_op_label(n), (double)sx, (int)st->zp,
                        (double)sy, (int)zy);
    QF_TRY(qf_int8_clamp_attr(n, &st->lo, &st->hi));
    st->include_pad = qf_node_attr_int(n, "count_include_pad", 0) != 0;
    QF_TRY(qf_pool_setup(n, io->in[0], QF_SPATIAL_AVG_POOL, &st->geom));
    /* |sum| <= 128 * window: a window of up to 2^24 taps fits int32. */
    const qf_spatial *l = &st->geom.l;
    if (l->kernel[0] * l->kernel[1] * l->kernel[2] > ((int64_t)1 << 24))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): window of more than 2^24 taps", n->name, qf_op_label(n));
    return QF_OK;
}

typedef struct qpool_job {
    const qpool_state *st;
    const int8_t *x;
    int8_t *y;
} qpool_job;

/* One (n, c) plane, TFLite's reference int8 AveragePool: the integer sum
 * of a window's taps (with count_include_pad, the padded taps counted at
 * the zero point, the real 0), divided by the count (AveragePool's, as the
 * float kernel's) rounding half away from zero, clamped to [lo, hi]. */
static void qavg_pool_plane(const qpool_state *st, const int8_t *x, int8_t *y)
{
    const qf_spatial *l = &st->geom.l;
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
                    st->include_pad ? cd * ch * qf_pool_padded_count(sw, l->kernel[2], IW, l->pad_end[2]) : inside;
                int64_t acc = (cnt - inside) * st->zp;
                for (int64_t kd = d0; kd < d1; kd++)
                    for (int64_t kh = h0; kh < h1; kh++) {
                        const int8_t *row = x + ((sd + kd) * IH + sh + kh) * IW + sw;
                        for (int64_t kw = w0; kw < w1; kw++) acc += row[kw];
                    }
                int64_t v = cnt > 0 ? qf_int8_div_round_away(acc, cnt) : st->zp;
                *y++ = (int8_t)(v < st->lo ? st->lo : v > st->hi ? st->hi : v);
            }
        }
    }
}

static void qavg_pool_planes(void *ctx, int64_t lo, int64_t hi)
{
    const qpool_job *j = ctx;
    const pool_geom *pg = &j->st->geom;
    for (int64_t p = lo; p < hi; p++) qavg_pool_plane(j->st, j->x + p * pg->in_plane, j->y + p * pg->out_plane);
}

static qf_status qf_qavg_pool_forward_f32(const qf_kernel_io *io)
{
    const qpool_state *st = io->state;
    qpool_job j = {st, io->in[0]->data, io->out[0]->data};
    qf_parallel_for(st->geom.planes, qf_pool_grain(&st->geom), qavg_pool_planes, &j);
    return QF_OK;
}

/* qmean's reduced axes: the `axes` attribute, which must name the trailing
 * axes [r, rank) in any order (the rows stay contiguous). *first = r. */
static qf_status qmean_axes(const qf_node *n, int rank, int *first)
{
    int count = 0;
    const int64_t *axes = qf_node_attr_ints(n, "axes", &count);
    bool mask[QF_MAX_DIMS] = {false};
    for (int i = 0; i < count; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank || mask[a])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld is out of range for rank %d or listed twice",
                            n->name, qf_op_label(n), (long long)axes[i], rank);
        mask[a] = true;
    }
    *first = rank - count;
    for (int i = 0; i < rank; i++)
        if (mask[i] != (i >= *first) || count == 0)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): axes must be the last %d axes of the rank-%d input",
                            n->name, qf_op_label(n), count, rank);
    return QF_OK;
}

static qf_status qf_qmean_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 5));
    const qf_tensor *x = &n->inputs[0]->type;
    QF_TRY(qpool_input(n, x));
    int first;
    QF_TRY(qmean_axes(n, x->ndim, &first));
    bool keep = qf_node_attr_int(n, "keepdims", 1) != 0;
    int64_t dims[QF_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i < first) dims[k++] = x->dims[i];
        else if (keep) dims[k++] = 1;
    }
    qf_set_output(n, 0, QF_DTYPE_I8, k, dims);
    return QF_OK;
}

static qf_status qf_qmean_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qpool_state *st = state;
    QF_TRY(qf_op_check_inputs(n, 5));
    const qf_tensor *x = io->in[0];
    QF_TRY(qpool_input(n, x));
    int first;
    QF_TRY(qmean_axes(n, x->ndim, &first));
    float sx, sy;
    QF_TRY(qf_int8_qparams(n, io->in[1], io->in[2], "X", &sx, &st->zp));
    QF_TRY(qf_int8_qparams(n, io->in[3], io->in[4], "Y", &sy, &st->zp_y));
    QF_TRY(qf_int8_clamp_attr(n, &st->lo, &st->hi));
    st->outer = qf_shape_numel(first, x->dims);
    st->inner = qf_shape_numel(x->ndim - first, x->dims + first);
    if (st->outer < 0 || st->inner < 0)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): shapes are not known at prepare", n->name, qf_op_label(n));
    /* |sum(q - zp)| <= 255 * count must fit int32 (and its left shift). */
    if (st->inner > INT32_MAX / 255)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %lld elements per mean overflow the int32 sum", n->name,
                        qf_op_label(n), (long long)st->inner);
    /* TFLite's Mean: the multiplier s_x / s_y in double. */
    const double real = (double)sx / (double)sy;
    int32_t shift;
    QF_TRY(qf_int8_requant_prepare_fixed(n, &real, 1, 255 * st->inner, &st->mult, &shift));
    st->shift = shift;
    return QF_OK;
}

static void qmean_rows(void *ctx, int64_t lo, int64_t hi)
{
    const qpool_job *j = ctx;
    const qpool_state *st = j->st;
    for (int64_t r = lo; r < hi; r++) {
        const int8_t *xp = j->x + r * st->inner;
        int32_t acc = 0;
        for (int64_t i = 0; i < st->inner; i++) acc += xp[i] - st->zp;
        acc = qf_multiply_by_quantized_multiplier(acc, st->mult, (int)st->shift);
        int64_t v = (st->inner > 0 ? qf_int8_div_round_away(acc, st->inner) : 0) + st->zp_y;
        j->y[r] = (int8_t)(v < st->lo ? st->lo : v > st->hi ? st->hi : v);
    }
}

static qf_status qf_qmean_forward_f32(const qf_kernel_io *io)
{
    const qpool_state *st = io->state;
    qpool_job j = {st, io->in[0]->data, io->out[0]->data};
    qf_parallel_for(st->outer, 1 + 4096 / (st->inner + 1), qmean_rows, &j);
    return QF_OK;
}


const qf_op_kernels qf_qavg_pool_kernels = {
    .infer = qf_qavg_pool_infer,
    .prepare = qf_qavg_pool_prepare,
    .state_size = sizeof(qpool_state),
    .forward_f32 = qf_qavg_pool_forward_f32,
};

const qf_op_kernels qf_qmean_kernels = {
    .infer = qf_qmean_infer,
    .prepare = qf_qmean_prepare,
    .state_size = sizeof(qpool_state),
    .forward_f32 = qf_qmean_forward_f32,
};
