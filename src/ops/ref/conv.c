/* Conv and ConvTranspose (ONNX opsets 7..21), float32, 1-D to 3-D.
 *
 * Layouts: X [N, C, spatial...]; Conv W [M, C/group, k...]; ConvTranspose W
 * [C, M/group, k...]; optional bias B [M]; Y [N, M, spatial'...].
 *
 * Both run through a real GEMM (qf_sgemm, ops/gemm.h, which threads itself):
 *   Conv:          Y_g (M/g x P_out) = W_g (M/g x K) * im2col(X_g) (K x P_out),
 *                  K = C/g * prod(k). 1x1 kernels with stride 1 and no pads
 *                  skip im2col (X_g already is the column matrix); depthwise
 *                  convs (one input channel per group) use a direct loop,
 *                  since a GEMM with M/g = 1 and K = 9 wastes im2col's copy.
 *   ConvTranspose: col (K x P_in) = W_g^T (K x C/g) * X_g (C/g x P_in),
 *                  K = M/g * prod(k), then col2im adds every column entry
 *                  into the output position it lands on.
 * Every problem is lifted to 3-D (leading size-1 dims, see spatial.h), so one
 * im2col / col2im serves 1-D, 2-D and 3-D.
 */
#include <limits.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/ref/conv.h"
#include "ops/math/gemm.h"
#include "ops/kernels.h"

static qf_status conv_check_float(const qf_node *n, const qf_tensor *t, const char *what)
{
    if (t->dtype == QF_DTYPE_F32) return QF_OK;
    if (t->dtype == QF_DTYPE_F64)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s is float64; only float32 convolutions are supported",
                        n->name, qf_op_label(n), what);
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected float32", n->name,
                    qf_op_label(n), what, qf_dtype_name(t->dtype));
}

/* Validate X, W, B and the attributes; compute every size (-1 where unknown).
 * x, w, b are the values' types in inference and the real tensors in the
 * kernel: the same checks run in both. */
qf_status qf_conv_setup(const qf_node *n, const qf_tensor *x, const qf_tensor *w, const qf_tensor *b,
                            bool transpose, qf_conv_geom *cg)
{
    QF_TRY(conv_check_float(n, x, "input X"));
    QF_TRY(conv_check_float(n, w, "weight W"));
    if (b) QF_TRY(conv_check_float(n, b, "bias B"));
    return qf_conv_geometry(n, x, w, b, transpose, cg);
}

/* The shape and attribute half of qf_conv_setup (dtypes are the caller's:
 * the integer convs check theirs). */
qf_status qf_conv_geometry(const qf_node *n, const qf_tensor *x, const qf_tensor *w, const qf_tensor *b,
                           bool transpose, qf_conv_geom *cg)
{
    const char *op = qf_op_label(n);
    memset(cg, 0, sizeof *cg);
    cg->transpose = transpose;
    if (x->ndim < 3 || x->ndim > 2 + QF_SPATIAL_MAX)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): input X has rank %d, expected 3 to %d (N, C, spatial...)",
                        n->name, op, x->ndim, 2 + QF_SPATIAL_MAX);
    if (w->ndim != x->ndim)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): weight W has rank %d but input X has rank %d", n->name, op,
                        w->ndim, x->ndim);
    int rank = x->ndim - 2;
    cg->group = qf_node_attr_int(n, "group", 1);
    if (cg->group < 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): group = %lld, must be >= 1", n->name, op,
                        (long long)cg->group);
    cg->n = x->dims[0];
    cg->c = x->dims[1];
    if (cg->c >= 0 && cg->c % cg->group != 0)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %lld input channels are not divisible by group %lld", n->name,
                        op, (long long)cg->c, (long long)cg->group);
    if (!transpose) {
        /* W [M, C/group, k...] */
        cg->m = w->dims[0];
        cg->cg = w->dims[1];
        if (cg->m >= 0 && cg->m % cg->group != 0)
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): W has %lld output channels, not divisible by group %lld",
                            n->name, op, (long long)cg->m, (long long)cg->group);
        int64_t want_c = 0;
        /* group comes from the file: the product may overflow, and then it
         * cannot equal the (fitting) channel count either. */
        bool want_ok = cg->cg >= 0 && qf_i64_mul(cg->cg, cg->group, &want_c);
        if (cg->c >= 0 && cg->cg >= 0 && (!want_ok || cg->c != want_c))
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (%s): input X has %lld channels but W expects W.dims[1] = %lld x group %lld",
                            n->name, op, (long long)cg->c, (long long)cg->cg, (long long)cg->group);
        cg->mg = cg->m >= 0 ? cg->m / cg->group : -1;
    } else {
        /* W [C, M/group, k...] */
        if (cg->c >= 0 && w->dims[0] >= 0 && cg->c != w->dims[0])
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): input X has %lld channels but W.dims[0] = %lld", n->name,
                            op, (long long)cg->c, (long long)w->dims[0]);
        if (w->dims[0] >= 0 && w->dims[0] % cg->group != 0)
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): W.dims[0] = %lld is not divisible by group %lld", n->name,
                            op, (long long)w->dims[0], (long long)cg->group);
        if (cg->c < 0) cg->c = w->dims[0];
        cg->cg = cg->c >= 0 ? cg->c / cg->group : -1;
        cg->mg = w->dims[1];
        cg->m = -1;
        if (cg->mg >= 0 && !qf_i64_mul(cg->mg, cg->group, &cg->m))
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): W.dims[1] = %lld x group %lld output channels is larger "
                            "than qfold handles", n->name, op, (long long)cg->mg, (long long)cg->group);
    }
    if (b) {
        if (b->ndim != 1 || (cg->m >= 0 && b->dims[0] >= 0 && b->dims[0] != cg->m)) {
            char buf[64];
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): bias B has shape %s, expected [%lld]", n->name, op,
                            qf_shape_str(b->ndim, b->dims, buf, sizeof buf), (long long)cg->m);
        }
    }
    QF_TRY(qf_spatial_parse(n, rank, w->dims + 2, QF_SPATIAL_CONV, &cg->s));
    if (transpose) QF_TRY(qf_spatial_transpose_dims(n, &cg->s, x->dims + 2));
    else QF_TRY(qf_spatial_forward_dims(n, &cg->s, x->dims + 2, false));
    cg->l = qf_spatial_lift3(&cg->s);
    cg->ksize = qf_spatial_prod(rank, cg->s.kernel);
    int64_t per = transpose ? cg->mg : cg->cg;
    /* Saturates: a K this large fails the scratch-size and GEMM checks. */
    cg->k = -1;
    if (per >= 0 && cg->ksize >= 0 && !qf_i64_mul(per, cg->ksize, &cg->k)) cg->k = INT64_MAX;
    cg->in_plane = qf_spatial_prod(rank, cg->s.in);
    cg->out_plane = qf_spatial_prod(rank, cg->s.out);
    return QF_OK;
}

qf_conv_path qf_conv_choose_path(const qf_conv_geom *cg)
{
    if (cg->cg == 1 && cg->group > 1) return QF_CONV_PATH_DEPTHWISE;
    for (int i = 0; i < QF_SPATIAL_MAX; i++)
        if (cg->l.kernel[i] != 1 || cg->l.stride[i] != 1 || cg->l.pad_begin[i] != 0 || cg->l.pad_end[i] != 0)
            return QF_CONV_PATH_IM2COL;
    return QF_CONV_PATH_POINTWISE;
}

static qf_status conv_set_output(qf_node *n, const qf_tensor *x, const qf_conv_geom *cg)
{
    qf_tensor *y = &n->outputs[0]->type;
    y->dtype = QF_DTYPE_F32;
    y->ndim = x->ndim;
    y->dims[0] = cg->n;
    y->dims[1] = cg->m;
    for (int i = 0; i < cg->s.rank; i++) y->dims[2 + i] = cg->s.out[i];
    return QF_OK;
}

static const qf_tensor *conv_opt_type(const qf_node *n, int i)
{
    return i < n->ninputs && n->inputs[i] ? &n->inputs[i]->type : NULL;
}

static qf_status conv_infer_common(qf_node *n, bool transpose)
{
    if (n->ninputs < 2 || !n->inputs[0] || !n->inputs[1])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): inputs X and W are required", n->name,
                        qf_op_label(n));
    qf_conv_geom cg;
    QF_TRY(qf_conv_setup(n, &n->inputs[0]->type, &n->inputs[1]->type, conv_opt_type(n, 2), transpose, &cg));
    return conv_set_output(n, &n->inputs[0]->type, &cg);
}

/* Depthwise (one input channel per group, any channel multiplier): each
 * kernel tap sweeps the output plane once, a vectorizable multiply-add.
 * No GEMM is involved, so the (batch, channel) planes are split across
 * threads here (core/parallel.h); each plane is written by one thread only. */
typedef struct dw_job {
    const qf_conv_geom *cg;
    const float *x, *w, *b;
    float *y;
} dw_job;

static void dw_plane(const qf_conv_geom *cg, const float *restrict xp, const float *restrict wk, float bias,
                     float *restrict yp)
{
    const qf_spatial *l = &cg->l;
    const int64_t IH = l->in[1], IW = l->in[2];
    const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2];
    for (int64_t i = 0; i < cg->out_plane; i++) yp[i] = bias;
    for (int64_t kd = 0; kd < l->kernel[0]; kd++)
        for (int64_t kh = 0; kh < l->kernel[1]; kh++)
            for (int64_t kw = 0; kw < l->kernel[2]; kw++) {
                const float wv = *wk++;
                int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;
                qf_conv_tap_range(offw, l->stride[2], IW, OW, &lo, &hi);
                for (int64_t od = 0; od < OD; od++) {
                    int64_t id = od * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];
                    if (id < 0 || id >= l->in[0]) continue;
                    for (int64_t oh = 0; oh < OH; oh++) {
                        int64_t ih = oh * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];
                        if (ih < 0 || ih >= IH) continue;
                        const float *restrict xr = xp + (id * IH + ih) * IW + offw;
                        float *restrict yr = yp + (od * OH + oh) * OW;
                        if (l->stride[2] == 1) {
                            for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow];
                        } else {
                            const int64_t sw = l->stride[2];
                            for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * sw];
                        }
                    }
                }
            }
}

/* Planes lo..hi-1 of the flattened (batch, output channel) index. */
static void dw_slice(void *ctx, int64_t lo, int64_t hi)
{
    const dw_job *j = ctx;
    const qf_conv_geom *cg = j->cg;
    for (int64_t p = lo; p < hi; p++) {
        int64_t bn = p / cg->m, co = p % cg->m;
        dw_plane(cg, j->x + (bn * cg->c + co / cg->mg) * cg->in_plane, j->w + co * cg->ksize,
                 j->b ? j->b[co] : 0.0f, j->y + p * cg->out_plane);
    }
}

static void conv_depthwise(const qf_conv_geom *cg, const float *x, const float *w, const float *b, float *y)
{
    dw_job job = {cg, x, w, b, y};
    /* About 16k multiply-adds per slice at least: below that, waking a
     * thread costs more than it saves. */
    int64_t per_plane = cg->out_plane * cg->ksize;
    int64_t grain = per_plane > 0 ? 16384 / per_plane + 1 : 1;
    qf_parallel_for(cg->n * cg->m, grain, dw_slice, &job);
}

size_t qf_conv_scratch_bytes(const qf_conv_geom *cg)
{
    if (cg->k < 0 || cg->in_plane < 0 || cg->out_plane < 0) return 0;
    if (!cg->transpose && qf_conv_choose_path(cg) != QF_CONV_PATH_IM2COL) return 0;
    int64_t elems, bytes;
    if (!qf_i64_mul(cg->k, cg->transpose ? cg->in_plane : cg->out_plane, &elems) ||
        !qf_i64_mul(elems, (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)bytes;
}

/* Fill each of `rows` rows of `plane` floats with bias[row] (or 0). */
static void conv_fill_bias(float *y, const float *bias, int64_t rows, int64_t plane)
{
    for (int64_t r = 0; r < rows; r++) {
        float v = bias ? bias[r] : 0.0f;
        float *row = y + r * plane;
        for (int64_t i = 0; i < plane; i++) row[i] = v;
    }
}

/* Prepare (Conv and ConvTranspose): the geometry from the operand types,
 * checked once; the path and the scratch size. */
static qf_status conv_prepare(const qf_kernel_io *io, bool transpose, qf_conv_state *st)
{
    const qf_node *n = io->node;
    if (io->nin < 2 || !io->in[0] || !io->in[1])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): inputs X and W are required", n->name,
                        qf_op_label(n));
    const qf_tensor *b = io->nin > 2 ? io->in[2] : NULL;
    qf_conv_geom *cg = &st->geom;
    QF_TRY(qf_conv_setup(n, io->in[0], io->in[1], b, transpose, cg));
    const qf_tensor *y = io->out[0];
    if (cg->n < 0 || cg->in_plane < 0 || cg->out_plane < 0 || y->dims[0] != cg->n || y->dims[1] != cg->m ||
        qf_spatial_prod(cg->s.rank, y->dims + 2) != cg->out_plane)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): output buffer shape does not match the inputs", n->name,
                        qf_op_label(n));
    /* Sizes the kernels index with int64 products of; beyond 2^31 nothing
     * would fit in memory anyway. */
    if (cg->k > INT_MAX || cg->in_plane > INT_MAX || cg->out_plane > INT_MAX || cg->mg > INT_MAX ||
        cg->cg > INT_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): GEMM dimensions exceed 2^31 (K %lld, planes %lld, %lld)",
                        n->name, qf_op_label(n), (long long)cg->k, (long long)cg->in_plane,
                        (long long)cg->out_plane);
    st->path = transpose ? QF_CONV_PATH_IM2COL : qf_conv_choose_path(cg);
    st->scratch = qf_conv_scratch_bytes(cg);
    return QF_OK;
}

/* The kernels' check that the plan gave the scratch prepare asked for. */
static qf_status conv_check_scratch(const qf_kernel_io *io, const qf_conv_state *st)
{
    if (io->scratch_size >= st->scratch) return QF_OK;
    return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): scratch of %zu bytes, the kernel needs %zu", io->node->name,
                    qf_op_label(io->node), io->scratch_size, st->scratch);
}

static size_t conv_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return state ? ((const qf_conv_state *)state)->scratch : 0;
}

/* --- Conv ----------------------------------------------------------------- */

static qf_status qf_conv_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return conv_infer_common(n, false);
}

static qf_status qf_conv_prepare(const qf_kernel_io *io, void *state) { return conv_prepare(io, false, state); }

static qf_status qf_conv_forward_f32(const qf_kernel_io *io)
{
    const qf_conv_state *st = io->state;
    QF_TRY(conv_check_scratch(io, st));
    const qf_conv_geom cg = st->geom;
    const float *x = io->in[0]->data, *w = io->in[1]->data;
    const float *b = io->nin > 2 && io->in[2] ? io->in[2]->data : NULL;
    float *y = io->out[0]->data;
    /* Empty operands: no scratch was planned (its pointer may be NULL), and
     * with no input channel every output is the bias. */
    if (cg.out_plane == 0 || cg.m == 0 || cg.n == 0) return QF_OK;
    if (cg.k == 0) {
        for (int64_t bn = 0; bn < cg.n; bn++) conv_fill_bias(y + bn * cg.m * cg.out_plane, b, cg.m, cg.out_plane);
        return QF_OK;
    }
    qf_conv_path path = st->path;
    if (path == QF_CONV_PATH_DEPTHWISE) {
        conv_depthwise(&cg, x, w, b, y);
        return QF_OK;
    }
    float *col = io->scratch;
    const int64_t M = cg.mg, P = cg.out_plane, K = cg.k;
    for (int64_t bn = 0; bn < cg.n; bn++)
        for (int64_t g = 0; g < cg.group; g++) {
            const float *xg = x + (bn * cg.c + g * cg.cg) * cg.in_plane;
            float *yg = y + (bn * cg.m + g * cg.mg) * cg.out_plane;
            const float *wg = w + g * cg.mg * cg.k;
            const float *bg = b ? b + g * cg.mg : NULL;
            const float *colm = xg;
            if (path == QF_CONV_PATH_IM2COL) {
                qf_conv_im2col3(xg, cg.cg, &cg.l, col);
                colm = col;
            }
            if (bg) conv_fill_bias(yg, bg, cg.mg, cg.out_plane);
            QF_TRY(qf_sgemm(io->node, &(qf_sgemm_args){.m = M, .n = P, .k = K, .alpha = 1.0f, .a = wg, .lda = K,
                                                        .b = colm, .ldb = P, .beta = bg ? 1.0f : 0.0f, .c = yg,
                                                        .ldc = P}));
        }
    return QF_OK;
}

/* --- ConvTranspose -------------------------------------------------------- */

static qf_status qf_conv_transpose_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return conv_infer_common(n, true);
}

static qf_status qf_conv_transpose_prepare(const qf_kernel_io *io, void *state)
{
    return conv_prepare(io, true, state);
}

static qf_status qf_conv_transpose_forward_f32(const qf_kernel_io *io)
{
    const qf_conv_state *st = io->state;
    QF_TRY(conv_check_scratch(io, st));
    const qf_conv_geom cg = st->geom;
    const float *x = io->in[0]->data, *w = io->in[1]->data;
    const float *b = io->nin > 2 && io->in[2] ? io->in[2]->data : NULL;
    float *y = io->out[0]->data;
    /* Empty operands: no scratch was planned (its pointer may be NULL); with
     * no input position (or channel) to scatter, every output is the bias. */
    if (cg.out_plane == 0 || cg.m == 0 || cg.n == 0) return QF_OK;
    if (cg.k == 0 || cg.in_plane == 0 || cg.cg == 0) {
        for (int64_t bn = 0; bn < cg.n; bn++) conv_fill_bias(y + bn * cg.m * cg.out_plane, b, cg.m, cg.out_plane);
        return QF_OK;
    }
    float *col = io->scratch;
    const int64_t K = cg.k, P = cg.in_plane, C = cg.cg;
    for (int64_t bn = 0; bn < cg.n; bn++)
        for (int64_t g = 0; g < cg.group; g++) {
            const float *xg = x + (bn * cg.c + g * cg.cg) * cg.in_plane;
            const float *wg = w + g * cg.cg * cg.k;
            float *yg = y + (bn * cg.m + g * cg.mg) * cg.out_plane;
            QF_TRY(qf_sgemm(io->node, &(qf_sgemm_args){.ta = true, .m = K, .n = P, .k = C, .alpha = 1.0f, .a = wg,
                                                        .lda = K, .b = xg, .ldb = P, .c = col, .ldc = P}));
            conv_fill_bias(yg, b ? b + g * cg.mg : NULL, cg.mg, cg.out_plane);
            qf_conv_col2im3(col, cg.mg, &cg.l, yg);
        }
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_conv_kernels = {
    .infer = qf_conv_infer,
    .prepare = qf_conv_prepare,
    .state_size = sizeof(qf_conv_state),
    .scratch = conv_scratch,
    .forward_f32 = qf_conv_forward_f32,
    .backward_f32 = qf_conv_backward_f32,
    .bwd_in = (1u << 0) | (1u << 1), /* X (for dW) and W (for dX) */
    .bwd_scratch = qf_conv_bwd_scratch,
};

const qf_op_kernels qf_conv_transpose_kernels = {
    .infer = qf_conv_transpose_infer,
    .prepare = qf_conv_transpose_prepare,
    .state_size = sizeof(qf_conv_state),
    .scratch = conv_scratch,
    .forward_f32 = qf_conv_transpose_forward_f32,
    .backward_f32 = qf_conv_transpose_backward_f32,
    .bwd_in = (1u << 0) | (1u << 1), /* X (for dW) and W (for dX) */
    .bwd_scratch = qf_conv_bwd_scratch,
};
