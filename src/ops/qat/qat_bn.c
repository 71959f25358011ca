/* The two halves of QAT's simulated BatchNorm fusion (internal ops; the
 * passes qat_bn_add / qat_bn_remove put them in and take them out, export
 * has no ONNX form for them). With, per output channel c, as PyTorch 1.13's
 * ConvBn2d / LinearBn1d compute it in float32,
 *     std_c = sqrt(running_var_c + eps),   s_c = gamma_c / std_c
 *
 *   qat_bn_weight(W, gamma, running_var) = W * s      (s along W's output channel)
 *   qat_bn_output(Y, gamma, running_var[, b]) = Y / s (+ b)   (s along Y's dim 1;
 *   Y channels-last when the training tape sets io->in_nhwc bit 0)
 *
 * so that op(x, FQ(qat_bn_weight(W))) -> qat_bn_output -> BN(train) is
 * torch's _forward_approximate: the weight fake-quant sees W * s, BN sees the
 * unscaled output. W's output channel: axis 0 ([O, ...]: conv, linear) or,
 * with axis 1, ConvTranspose's [C_in, O/g, k...] where row r of group
 * r / (C_in / g) holds channels g' * (O/g) + j. Gradients flow to W / Y, to
 * gamma (through s: d s_c / d gamma_c = 1 / std_c) and to b; running_var is a
 * buffer (no gradient), as in torch: when it comes from another node (the
 * exact form's qat_bn_stats) its gradient is written as zeros.
 * The training forward keeps std and s in `saved` and the backward uses
 * those: BatchNormalization's training forward, later in the step, updates
 * running_var in place, and torch differentiates through the std its
 * forward computed from the running variance before that update.
 */
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/math/vector.h"

typedef struct qbn_state {
    float eps;
    int axis;              /* qat_bn_weight: 0 or 1 */
    int64_t group;
    int64_t outer, ch, inner; /* qat_bn_output: Y as [outer][ch][inner] */
} qbn_state;

static qf_status qbn_check_channels(const qf_node *n, int64_t ch)
{
    for (int i = 1; i < 3; i++) {
        const qf_tensor *t = &n->inputs[i]->type;
        if (t->dtype != QF_DTYPE_F32 || t->ndim != 1 || t->dims[0] != ch)
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %s must be float32 [%lld]", n->name, qf_op_label(n),
                            i == 1 ? "gamma" : "running_var", (long long)ch);
    }
    if (n->ninputs > 3 && n->inputs[3]) {
        const qf_tensor *b = &n->inputs[3]->type;
        if (b->dtype != QF_DTYPE_F32 || b->ndim != 1 || b->dims[0] != ch)
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): bias must be float32 [%lld]", n->name, qf_op_label(n),
                            (long long)ch);
    }
    return QF_OK;
}

/* Output channels of W for axis / group (conv_transpose: O = group * dims[1]). */
static int64_t qbn_weight_channels(const qf_tensor *w, int axis, int64_t group)
{
    return axis == 0 ? w->dims[0] : group * w->dims[1];
}

static qf_status qf_qat_bn_weight_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 3));
    const qf_tensor *w = &n->inputs[0]->type;
    const int64_t axis = qf_node_attr_int(n, "axis", 0), group = qf_node_attr_int(n, "group", 1);
    if (w->dtype != QF_DTYPE_F32 || w->ndim < 2 || (axis != 0 && axis != 1) || group < 1 ||
        (axis == 1 && w->dims[0] % group))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): W must be float32 of rank >= 2, axis 0 or 1, group >= 1 "
                        "dividing W's first dim", n->name, qf_op_label(n));
    QF_TRY(qbn_check_channels(n, qbn_weight_channels(w, (int)axis, group)));
    qf_set_output(n, 0, QF_DTYPE_F32, w->ndim, w->dims);
    return QF_OK;
}

static qf_status qf_qat_bn_output_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    if (n->ninputs < 3 || !n->inputs[0] || !n->inputs[1] || !n->inputs[2])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): Y, gamma and running_var are required", n->name,
                        qf_op_label(n));
    const qf_tensor *y = &n->inputs[0]->type;
    if (y->dtype != QF_DTYPE_F32 || y->ndim < 2)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): Y must be float32 [N, C, ...]", n->name, qf_op_label(n));
    QF_TRY(qbn_check_channels(n, y->dims[1]));
    qf_set_output(n, 0, QF_DTYPE_F32, y->ndim, y->dims);
    return QF_OK;
}

static qf_status qbn_prepare_common(const qf_kernel_io *io, qbn_state *st)
{
    st->eps = qf_node_attr_float(io->node, "epsilon", 1e-5f);
    if (!(st->eps > 0.0f))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): epsilon %g must be > 0", io->node->name,
                        qf_op_label(io->node), st->eps);
    return QF_OK;
}

static qf_status qf_qat_bn_weight_prepare(const qf_kernel_io *io, void *state)
{
    qbn_state *st = state;
    QF_TRY(qbn_prepare_common(io, st));
    const qf_tensor *w = io->in[0];
    st->axis = (int)qf_node_attr_int(io->node, "axis", 0);
    st->group = qf_node_attr_int(io->node, "group", 1);
    st->ch = qbn_weight_channels(w, st->axis, st->group);
    st->inner = 1;
    for (int d = st->axis == 0 ? 1 : 2; d < w->ndim; d++) st->inner *= w->dims[d];
    st->outer = w->dims[0]; /* axis 1: rows of W */
    return QF_OK;
}

static qf_status qf_qat_bn_output_prepare(const qf_kernel_io *io, void *state)
{
    qbn_state *st = state;
    QF_TRY(qbn_prepare_common(io, st));
    const qf_tensor *y = io->in[0];
    st->outer = y->dims[0];
    st->ch = y->dims[1];
    st->inner = 1;
    for (int d = 2; d < y->ndim; d++) st->inner *= y->dims[d];
    return QF_OK;
}

/* std_c and s_c as torch computes them (float32). NaN or a non-positive
 * var + eps is an error naming the channel. */
static qf_status qbn_scale(const qf_kernel_io *io, const qbn_state *st, int64_t c, float *std, float *s)
{
    const float var = ((const float *)io->in[2]->data)[c], gamma = ((const float *)io->in[1]->data)[c];
    const float v = var + st->eps;
    if (!(v > 0.0f))
        return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): channel %lld: running_var %g + epsilon %g is not > 0",
                        io->node->name, qf_op_label(io->node), (long long)c, var, st->eps);
    *std = sqrtf(v);
    *s = gamma / *std;
    return QF_OK;
}

/* `saved`: std_c, then s_c (floats), kept from the training forward. */
static size_t qbn_saved(const qf_node *n, const void *state)
{
    (void)n;
    const qbn_state *st = state;
    return 2 * (size_t)(st && st->ch > 0 ? st->ch : 0) * sizeof(float);
}

/* The forward's std_c and s_c in a backward (saved), or an error naming the
 * node when the training forward did not keep them. */
static qf_status qbn_saved_scale(const qf_kernel_io *io, const qbn_state *st, int64_t c, float *std, float *s)
{
    if (!io->saved)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): backward without the forward's saved scale", io->node->name,
                        qf_op_label(io->node));
    const float *sv = io->saved;
    *std = sv[c];
    *s = sv[st->ch + c];
    return QF_OK;
}

/* qbn_scale, also kept in `saved` when there is one (a forward before a
 * backward). */
static qf_status qbn_scale_fwd(const qf_kernel_io *io, const qbn_state *st, int64_t c, float *std, float *s)
{
    QF_TRY(qbn_scale(io, st, c, std, s));
    if (io->saved) {
        float *sv = io->saved;
        sv[c] = *std;
        sv[st->ch + c] = *s;
    }
    return QF_OK;
}

/* Channel of row r, column j of W (axis 1: conv_transpose). */
static inline int64_t qbn_wch(const qbn_state *st, int64_t r, int64_t j)
{
    const int64_t per = st->ch / st->group, rows = st->outer / st->group;
    return (r / rows) * per + j;
}

static qf_status qf_qat_bn_weight_forward_f32(const qf_kernel_io *io)
{
    const qbn_state *st = io->state;
    const float *w = io->in[0]->data;
    float *y = io->out[0]->data;
    if (st->axis == 0) {
        for (int64_t c = 0; c < st->ch; c++) {
            float sd = 1.0f, s = 1.0f;
            QF_TRY(qbn_scale_fwd(io, st, c, &sd, &s));
            for (int64_t i = 0; i < st->inner; i++) y[c * st->inner + i] = w[c * st->inner + i] * s;
        }
        return QF_OK;
    }
    const int64_t per = st->ch / st->group;
    for (int64_t r = 0; r < st->outer; r++)
        for (int64_t j = 0; j < per; j++) {
            float sd = 1.0f, s = 1.0f;
            QF_TRY(qbn_scale_fwd(io, st, qbn_wch(st, r, j), &sd, &s));
            const int64_t o = (r * per + j) * st->inner;
            for (int64_t i = 0; i < st->inner; i++) y[o + i] = w[o + i] * s;
        }
    return QF_OK;
}

static qf_status qf_qat_bn_weight_backward_f32(const qf_kernel_io *io)
{
    const qbn_state *st = io->state;
    const float *w = io->in[0]->data, *dy = io->dout[0] ? io->dout[0]->data : NULL;
    float *dw = io->din[0] ? io->din[0]->data : NULL, *dg = io->din[1] ? io->din[1]->data : NULL;
    if (dg) memset(dg, 0, sizeof *dg * (size_t)st->ch);
    if (io->din[2]) memset(io->din[2]->data, 0, qf_tensor_nbytes(io->din[2]));
    if (!dy) {
        if (dw) memset(dw, 0, qf_tensor_nbytes(io->din[0]));
        return QF_OK;
    }
    const int64_t per = st->axis == 0 ? 1 : st->ch / st->group;
    const int64_t rows = st->axis == 0 ? st->ch : st->outer;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < per; j++) {
            const int64_t c = st->axis == 0 ? r : qbn_wch(st, r, j);
            float sd = 1.0f, s = 1.0f;
            QF_TRY(qbn_saved_scale(io, st, c, &sd, &s));
            const int64_t o = (r * per + j) * st->inner;
            double acc = 0.0;
            for (int64_t i = 0; i < st->inner; i++) {
                if (dw) dw[o + i] = dy[o + i] * s;
                acc += (double)dy[o + i] * w[o + i];
            }
            if (dg) dg[c] += (float)(acc / sd);
        }
    return QF_OK;
}

/* qat_bn_output over the threads: channels [lo, hi) each, s_c and std_c
 * computed before (qbn_scales), the sums of the backward in double over
 * QBN_LANES independent partial sums (they vectorize; one running sum is a
 * chain of dependent adds). */
#define QBN_LANES 16
typedef struct qbn_job {
    const qbn_state *st;
    const float *x, *dy, *b, *s, *sd;
    float *y, *dx, *dg, *db;
} qbn_job;

/* s_c and std_c of every channel into s / sd (the plan's scratch). */
static qf_status qbn_scales(const qf_kernel_io *io, const qbn_state *st, float *sd, float *s)
{
    for (int64_t c = 0; c < st->ch; c++) QF_TRY(qbn_scale(io, st, c, &sd[c], &s[c]));
    return QF_OK;
}

QF_VECTOR_CLONES static void qbn_output_fwd_slice(void *arg, int64_t lo, int64_t hi)
{
    const qbn_job *j = arg;
    const qbn_state *st = j->st;
    for (int64_t c = lo; c < hi; c++) {
        const float s = j->s[c], bc = j->b ? j->b[c] : 0.0f;
        for (int64_t o = 0; o < st->outer; o++) {
            const int64_t base = (o * st->ch + c) * st->inner;
            const float *restrict x = j->x + base;
            float *restrict y = j->y + base;
            if (j->b)
                for (int64_t i = 0; i < st->inner; i++) y[i] = x[i] / s + bc;
            else
                for (int64_t i = 0; i < st->inner; i++) y[i] = x[i] / s;
        }
    }
}

QF_VECTOR_CLONES static void qbn_output_bwd_slice(void *arg, int64_t lo, int64_t hi)
{
    const qbn_job *j = arg;
    const qbn_state *st = j->st;
    for (int64_t c = lo; c < hi; c++) {
        const float s = j->s[c];
        double ay[QBN_LANES] = {0}, ad[QBN_LANES] = {0};
        double sy = 0.0, sdy = 0.0;
        for (int64_t o = 0; o < st->outer; o++) {
            const int64_t base = (o * st->ch + c) * st->inner;
            const float *restrict x = j->x + base;
            if (!j->dy) {
                if (j->dx) memset(j->dx + base, 0, sizeof(float) * (size_t)st->inner);
                continue;
            }
            const float *restrict d = j->dy + base;
            if (j->dx) {
                float *restrict dx = j->dx + base;
                for (int64_t i = 0; i < st->inner; i++) dx[i] = d[i] / s;
            }
            int64_t i = 0;
            for (; i + QBN_LANES <= st->inner; i += QBN_LANES)
                for (int l = 0; l < QBN_LANES; l++) {
                    ay[l] += (double)d[i + l] * x[i + l];
                    ad[l] += d[i + l];
                }
            for (; i < st->inner; i++) {
                sy += (double)d[i] * x[i];
                sdy += d[i];
            }
        }
        for (int l = 0; l < QBN_LANES; l++) {
            sy += ay[l];
            sdy += ad[l];
        }
        /* d (y / s) / d s = -y / s^2; d s / d gamma = 1 / std. */
        if (j->dg) j->dg[c] = (float)(-sy / ((double)s * s) / j->sd[c]);
        if (j->db) j->db[c] = (float)sdy;
    }
}

/* s_c and std_c: two floats per channel. */
static size_t qbn_output_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return 2 * sizeof(float) * (size_t)((const qbn_state *)state)->ch;
}

/* Channels per slice: at least ~16k elements each. */
static int64_t qbn_grain(const qbn_state *st)
{
    const int64_t per = st->outer * st->inner;
    return per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1);
}

/* Channels-last Y (io->in_nhwc bit 0, from the training tape's NHWC chains):
 * Y as [rows][ch], rows = outer * inner; the same arithmetic per element;
 * the backward takes channels [lo, hi) of every row, a channel's sums in
 * double in row order. */
#define QBN_CBLK 16

/* The forward over rows [r0, r1) with every channel (no sums: the threads
 * take rows, each a contiguous piece of Y). s and b through restrict
 * pointers: read through the job, GCC reloaded them after every store to Y
 * and kept the loop scalar (2x BatchNormalization's affine pass, perf). */
QF_VECTOR_CLONES static void qbn_output_fwd_nhwc_rows(void *arg, int64_t r0, int64_t r1)
{
    const qbn_job *j = arg;
    const int64_t ch = j->st->ch;
    const float *restrict s = j->s, *restrict b = j->b;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = j->x + r * ch;
        float *restrict y = j->y + r * ch;
        if (b)
            for (int64_t c = 0; c < ch; c++) y[c] = x[c] / s[c] + b[c];
        else
            for (int64_t c = 0; c < ch; c++) y[c] = x[c] / s[c];
    }
}

/* One row's w channels from `base` of the channels-last backward: dX = dY / s
 * (when wanted), and the row added to the per-channel sums of dY * X and dY. */
static inline __attribute__((always_inline)) void qbn_bwd_row(const qbn_job *j, int64_t base, int64_t w,
                                                              const float *sl, double *sy, double *sdy)
{
    const float *restrict x = j->x + base, *restrict d = j->dy + base;
    if (j->dx) {
        float *restrict dx = j->dx + base;
        for (int64_t k = 0; k < w; k++) dx[k] = d[k] / sl[k];
    }
    for (int64_t k = 0; k < w; k++) {
        sy[k] += (double)d[k] * x[k];
        sdy[k] += d[k];
    }
}

/* One block of w <= QBN_CBLK channels from c0; inlined with w = QBN_CBLK
 * for whole blocks (the accumulators then stay in registers). */
static inline __attribute__((always_inline)) void qbn_output_bwd_nhwc_block(const qbn_job *j, int64_t c0, int64_t w)
{
    const qbn_state *st = j->st;
    const int64_t rows = st->outer * st->inner, ch = st->ch;
    double sy[QBN_CBLK] = {0}, sdy[QBN_CBLK] = {0};
    float sl[QBN_CBLK]; /* s in registers: read through j, it was reloaded after every store to dX */
    for (int64_t k = 0; k < w; k++) sl[k] = j->s[c0 + k];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = r * ch + c0;
        if (!j->dy) {
            if (j->dx) memset(j->dx + base, 0, sizeof(float) * (size_t)w);
            continue;
        }
        qbn_bwd_row(j, base, w, sl, sy, sdy);
    }
    for (int64_t k = 0; k < w; k++) {
        const int64_t c = c0 + k;
        const float s = j->s[c];
        if (j->dg) j->dg[c] = (float)(-sy[k] / ((double)s * s) / j->sd[c]);
        if (j->db) j->db[c] = (float)sdy[k];
    }
}

QF_VECTOR_CLONES static void qbn_output_bwd_nhwc_slice(void *arg, int64_t lo, int64_t hi)
{
    const qbn_job *j = arg;
    for (int64_t c0 = lo; c0 < hi; c0 += QBN_CBLK) {
        if (hi - c0 >= QBN_CBLK)
            qbn_output_bwd_nhwc_block(j, c0, QBN_CBLK);
        else
            qbn_output_bwd_nhwc_block(j, c0, hi - c0);
    }
}

/* The channels-last backward with up to 64 channels and a dY: the rows
 * split, as BatchNormalization's (src/ops/ref/norm_nhwc.c). With the channel
 * split each thread walked a column of 64 bytes of every row (ds_cnn's 64
 * channels: 256-byte rows, 2 MB tensors) and the loads stalled (perf: 11 %
 * of a ds_cnn QAT step). Here the sums run over QBN_RCHUNKS fixed chunks of
 * rows (a fixed count: the results do not depend on the thread count), each
 * chunk's partial sums per channel in double in row order, the chunks' sums
 * added in chunk order; each thread reads contiguous rows, a chunk's rows
 * staying in L2 between its 16-channel blocks. */
#define QBN_RCHUNKS 16
#define QBN_RMAXC 64

typedef struct qbn_rjob {
    const qbn_job *j;
    int64_t rows, nch;
    double part[QBN_RCHUNKS][2][QBN_RMAXC];
} qbn_rjob;

static inline __attribute__((always_inline)) void qbn_rbwd_block(qbn_rjob *t, int64_t chunk, int64_t c0, int64_t w)
{
    const qbn_job *j = t->j;
    const int64_t ch = j->st->ch, r0 = t->rows * chunk / t->nch, r1 = t->rows * (chunk + 1) / t->nch;
    double sy[QBN_CBLK] = {0}, sdy[QBN_CBLK] = {0};
    float sl[QBN_CBLK];
    for (int64_t k = 0; k < w; k++) sl[k] = j->s[c0 + k];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t base = r * ch + c0;
        qbn_bwd_row(j, base, w, sl, sy, sdy);
    }
    for (int64_t k = 0; k < w; k++) {
        t->part[chunk][0][c0 + k] = sy[k];
        t->part[chunk][1][c0 + k] = sdy[k];
    }
}

QF_VECTOR_CLONES static void qbn_rbwd_slice(void *arg, int64_t lo, int64_t hi)
{
    qbn_rjob *t = arg;
    const int64_t ch = t->j->st->ch;
    for (int64_t chunk = lo; chunk < hi; chunk++)
        for (int64_t c0 = 0; c0 < ch; c0 += QBN_CBLK) {
            if (ch - c0 >= QBN_CBLK)
                qbn_rbwd_block(t, chunk, c0, QBN_CBLK);
            else
                qbn_rbwd_block(t, chunk, c0, ch - c0);
        }
}

static void qbn_rbackward(const qbn_job *j)
{
    qbn_rjob t;
    t.j = j;
    t.rows = j->st->outer * j->st->inner;
    t.nch = t.rows < QBN_RCHUNKS ? (t.rows > 0 ? t.rows : 1) : QBN_RCHUNKS;
    const int64_t ch = j->st->ch, per = (t.rows / t.nch) * ch;
    qf_parallel_for(t.nch, per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1), qbn_rbwd_slice, &t);
    for (int64_t c = 0; c < ch; c++) {
        double sy = 0.0, sdy = 0.0;
        for (int64_t k = 0; k < t.nch; k++) {
            sy += t.part[k][0][c];
            sdy += t.part[k][1][c];
        }
        const float s = j->s[c];
        if (j->dg) j->dg[c] = (float)(-sy / ((double)s * s) / j->sd[c]);
        if (j->db) j->db[c] = (float)sdy;
    }
}

/* Channels per NHWC slice: whole cache lines (16 floats) per thread where
 * there are enough channels. */
static int64_t qbn_nhwc_grain(const qbn_state *st)
{
    int64_t g = qbn_grain(st);
    if (st->ch >= 32) g = (g + 15) / 16 * 16;
    return g;
}

static qf_status qf_qat_bn_output_forward_f32(const qf_kernel_io *io)
{
    const qbn_state *st = io->state;
    /* std_c, s_c: kept in `saved` for the backward in a training plan (BN's
     * forward updates the running variance later in the same step), in the
     * scratch otherwise. */
    float *sd = io->saved ? (float *)io->saved : (float *)io->scratch, *s = sd + st->ch;
    QF_TRY(qbn_scales(io, st, sd, s));
    qbn_job j = {.st = st, .x = io->in[0]->data, .b = io->nin > 3 && io->in[3] ? io->in[3]->data : NULL, .s = s,
                 .sd = sd, .y = io->out[0]->data};
    if (io->in_nhwc & 1u)
        qf_parallel_for(st->outer * st->inner, 16384 / (st->ch > 0 ? st->ch : 1) + 1, qbn_output_fwd_nhwc_rows, &j);
    else
        qf_parallel_for(st->ch, qbn_grain(st), qbn_output_fwd_slice, &j);
    return QF_OK;
}

static qf_status qf_qat_bn_output_backward_f32(const qf_kernel_io *io)
{
    const qbn_state *st = io->state;
    if (!io->saved)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): backward without the forward's saved scale", io->node->name,
                        qf_op_label(io->node));
    const float *sd = io->saved, *s = sd + st->ch;
    if (io->din[2]) memset(io->din[2]->data, 0, qf_tensor_nbytes(io->din[2]));
    qbn_job j = {.st = st, .x = io->in[0]->data, .dy = io->dout[0] ? io->dout[0]->data : NULL, .s = s, .sd = sd,
                 .dx = io->din[0] ? io->din[0]->data : NULL, .dg = io->din[1] ? io->din[1]->data : NULL,
                 .db = io->nin > 3 && io->din[3] ? io->din[3]->data : NULL};
    if ((io->in_nhwc & 1u) && j.dy && st->ch <= QBN_RMAXC)
        qbn_rbackward(&j);
    else if (io->in_nhwc & 1u)
        qf_parallel_for(st->ch, qbn_nhwc_grain(st), qbn_output_bwd_nhwc_slice, &j);
    else
        qf_parallel_for(st->ch, qbn_grain(st), qbn_output_bwd_slice, &j);
    return QF_OK;
}

const qf_op_kernels qf_qat_bn_weight_kernels = {
    .infer = qf_qat_bn_weight_infer,
    .prepare = qf_qat_bn_weight_prepare,
    .state_size = sizeof(qbn_state),
    .forward_f32 = qf_qat_bn_weight_forward_f32,
    .backward_f32 = qf_qat_bn_weight_backward_f32,
    .bwd_in = (1u << 0), /* W (for d gamma); std and s come from `saved` */
    .saved_size = qbn_saved,
};

const qf_op_kernels qf_qat_bn_output_kernels = {
    .infer = qf_qat_bn_output_infer,
    .prepare = qf_qat_bn_output_prepare,
    .state_size = sizeof(qbn_state),
    .scratch = qbn_output_scratch,
    .forward_f32 = qf_qat_bn_output_forward_f32,
    .backward_f32 = qf_qat_bn_output_backward_f32,
    .bwd_in = (1u << 0), /* Y (for d gamma); std and s come from `saved` */
    .saved_size = qbn_saved,
};
