/* QAT's exact simulated BatchNorm fusion (internal ops; the pass
 * qat_bn_add_exact puts them in, qat_bn_remove takes them out): the
 * two-pass method of PyTorch's _ConvBnNd._forward_slow (torch 2.x,
 * torch.ao.nn.intrinsic.qat.modules.conv_fused), which stays finite for a
 * channel with gamma = 0 or a tiny running variance, where the approximate
 * method (src/ops/qat/qat_bn.c) divides by s = gamma / std. For one BN after a
 * conv / conv_transpose / linear with weight W and bias b:
 *
 *   Y0 = op(x, W)                              (no fake-quant, no bias)
 *   qat_bn_stats(Y0, mean, var[, b]) -> var'  running statistics updated
 *   Y  = op(x, FQ(qat_bn_weight(W, gamma, var')))
 *   Z  = qat_bn_exact(Y, gamma, beta, mean, var', Y0[, b])
 *
 * qat_bn_stats, in a training forward (and unless its qfold_frozen is set),
 * updates the running statistics in place from the batch statistics of
 * Y0 + b, as nn.BatchNorm does under torch.no_grad() (momentum m, ONNX's:
 * running = running * m + batch * (1 - m), the unbiased variance); its
 * output var' is the running variance after that update (a copy: the value
 * orders qat_bn_weight after the update, as torch scales W by the updated
 * running std). No gradient flows through it (torch's no_grad): its
 * backward writes zeros.
 *
 * qat_bn_exact, with r = sqrt(var' + eps) (float32, as torch's running_std):
 *   training:  mu, v = mean and biased variance of Y0 per channel,
 *              sigma = sqrt(v + eps),
 *              Z = Y * (r / sigma) + (beta - gamma * mu / sigma)
 *   inference, or qfold_frozen (torch's frozen BN, bn.training False):
 *              Z = Y + (beta - gamma * (mean - b) / r)
 * Its backward is torch's autograd of that formula: to Y, gamma, beta, to
 * Y0 through mu and v (d v / d mu is zero: sum(Y0 - mu) = 0), to b (zero in
 * training: torch adds b - b), and, for the gradient check, to mean and
 * var' (the whole graph drops them: qat_bn_stats passes nothing on). */
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/kernels.h"

enum { QX_Y = 0, QX_GAMMA, QX_BETA, QX_MEAN, QX_VAR, QX_Y0, QX_BIAS };
enum { QS_Y0 = 0, QS_MEAN, QS_VAR, QS_BIAS };

typedef struct qx_state {
    double eps, momentum;
    int64_t outer, ch, inner;
} qx_state;

static bool qx_frozen(const qf_node *n)
{
    return qf_node_attr_int(n, "qfold_frozen", 0) != 0;
}

/* input i is float32 [ch] (an omitted optional one passes). */
static qf_status qx_check_vec(const qf_node *n, int i, const char *what, int64_t ch, bool optional)
{
    const qf_value *v = i < n->ninputs ? n->inputs[i] : NULL;
    if (!v) {
        if (optional) return QF_OK;
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s is missing", n->name, qf_op_label(n), what);
    }
    if (v->type.dtype != QF_DTYPE_F32 || v->type.ndim != 1 || (ch >= 0 && v->type.dims[0] != ch))
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %s must be float32 [%lld]", n->name, qf_op_label(n), what,
                        (long long)ch);
    return QF_OK;
}

static qf_status qx_check_data(const qf_node *n, int i, const char *what)
{
    const qf_value *v = i < n->ninputs ? n->inputs[i] : NULL;
    if (!v) return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s is missing", n->name, qf_op_label(n), what);
    if (v->type.dtype != QF_DTYPE_F32 || v->type.ndim < 2)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s must be float32 [N, C, ...]", n->name, qf_op_label(n),
                        what);
    return QF_OK;
}

static qf_status qf_qat_bn_stats_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    if (n->ninputs < 3 || n->ninputs > 4)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects Y0, running_mean, running_var[, bias]", n->name,
                        qf_op_label(n));
    QF_TRY(qx_check_data(n, QS_Y0, "Y0"));
    const int64_t ch = n->inputs[QS_Y0]->type.dims[1];
    QF_TRY(qx_check_vec(n, QS_MEAN, "running_mean", ch, false));
    QF_TRY(qx_check_vec(n, QS_VAR, "running_var", ch, false));
    QF_TRY(qx_check_vec(n, QS_BIAS, "bias", ch, true));
    qf_set_output(n, 0, QF_DTYPE_F32, 1, &ch);
    return QF_OK;
}

static qf_status qf_qat_bn_exact_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    if (n->ninputs < 6 || n->ninputs > 7)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects Y, gamma, beta, running_mean, running_var, Y0[, bias]",
                        n->name, qf_op_label(n));
    QF_TRY(qx_check_data(n, QX_Y, "Y"));
    QF_TRY(qx_check_data(n, QX_Y0, "Y0"));
    const qf_tensor *y = &n->inputs[QX_Y]->type, *y0 = &n->inputs[QX_Y0]->type;
    bool same = y->ndim == y0->ndim;
    for (int d = 0; same && d < y->ndim; d++) same = y->dims[d] == y0->dims[d];
    if (!same)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): Y and Y0 differ in shape", n->name, qf_op_label(n));
    static const char *const what[5] = {"", "gamma", "beta", "running_mean", "running_var"};
    for (int i = QX_GAMMA; i <= QX_VAR; i++) QF_TRY(qx_check_vec(n, i, what[i], y->dims[1], false));
    QF_TRY(qx_check_vec(n, QX_BIAS, "bias", y->dims[1], true));
    qf_set_output(n, 0, QF_DTYPE_F32, y->ndim, y->dims);
    return QF_OK;
}

static qf_status qx_prepare_geom(const qf_kernel_io *io, qx_state *st)
{
    const qf_tensor *y = io->in[0];
    st->outer = y->dims[0];
    st->ch = y->dims[1];
    st->inner = 1;
    for (int d = 2; d < y->ndim; d++) st->inner *= y->dims[d];
    return QF_OK;
}

static qf_status qf_qat_bn_stats_prepare(const qf_kernel_io *io, void *state)
{
    qx_state *st = state;
    st->momentum = qf_node_attr_float(io->node, "momentum", 0.9f);
    if (!(st->momentum >= 0.0 && st->momentum <= 1.0))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): momentum %g is not in [0, 1]", io->node->name,
                        qf_op_label(io->node), st->momentum);
    return qx_prepare_geom(io, st);
}

static qf_status qf_qat_bn_exact_prepare(const qf_kernel_io *io, void *state)
{
    qx_state *st = state;
    st->eps = qf_node_attr_float(io->node, "epsilon", 1e-5f);
    if (!(st->eps > 0.0) || !isfinite(st->eps))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): epsilon %g must be > 0", io->node->name,
                        qf_op_label(io->node), st->eps);
    return qx_prepare_geom(io, st);
}

/* --- qat_bn_stats ----------------------------------------------------------- */

typedef struct qs_job {
    const qx_state *st;
    const float *y0, *b;
    float *mean, *var;
    double m; /* the momentum, read at run time */
} qs_job;

/* Channels lo..hi-1: batch mean and unbiased variance of Y0 + b (each
 * element rounded to float32 as torch forms conv_out + bias), in double,
 * folded into the running statistics. */
static void qs_update_slice(void *ctx, int64_t lo, int64_t hi)
{
    const qs_job *j = ctx;
    const qx_state *st = j->st;
    const double cnt = (double)(st->outer * st->inner), m = j->m;
    for (int64_t c = lo; c < hi; c++) {
        const float bc = j->b ? j->b[c] : 0.0f;
        double s = 0.0, ss = 0.0;
        for (int64_t o = 0; o < st->outer; o++) {
            const float *p = j->y0 + (o * st->ch + c) * st->inner;
            for (int64_t i = 0; i < st->inner; i++) s += (float)(p[i] + bc);
        }
        const double mu = s / cnt;
        for (int64_t o = 0; o < st->outer; o++) {
            const float *p = j->y0 + (o * st->ch + c) * st->inner;
            for (int64_t i = 0; i < st->inner; i++) {
                const double d = (double)(float)(p[i] + bc) - mu;
                ss += d * d;
            }
        }
        j->mean[c] = (float)(j->mean[c] * m + mu * (1.0 - m));
        j->var[c] = (float)(j->var[c] * m + ss / (cnt - 1.0) * (1.0 - m));
    }
}

static int64_t qx_grain(const qx_state *st)
{
    const int64_t per = st->outer * st->inner;
    return per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1);
}

static qf_status qf_qat_bn_stats_forward_f32(const qf_kernel_io *io)
{
    const qx_state *st = io->state;
    const qf_node *n = io->node;
    if (io->training && !qx_frozen(n)) {
        if (st->outer * st->inner < 2)
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (%s): training needs more than 1 value per channel (Y0 has %lld)", n->name,
                            qf_op_label(n), (long long)(st->outer * st->inner));
        /* In place, as BatchNormalization's training forward: the trainer
         * made the running statistics writable. The momentum is read at run
         * time, as BatchNormalization reads it: BN re-estimation after QAT
         * (qf_qat_bn_reestimate) changes it between two steps of one plan. */
        qs_job j = {st, io->in[QS_Y0]->data, io->nin > QS_BIAS && io->in[QS_BIAS] ? io->in[QS_BIAS]->data : NULL,
                    io->in[QS_MEAN]->data, io->in[QS_VAR]->data,
                    qf_node_attr_float(n, "momentum", (float)st->momentum)};
        qf_parallel_for(st->ch, qx_grain(st), qs_update_slice, &j);
    }
    memcpy(io->out[0]->data, io->in[QS_VAR]->data, sizeof(float) * (size_t)st->ch);
    return QF_OK;
}

/* No gradient flows through the running statistics (torch's no_grad). */
static qf_status qf_qat_bn_stats_backward_f32(const qf_kernel_io *io)
{
    for (int i = 0; i < io->nin; i++)
        if (io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
    return QF_OK;
}

/* --- qat_bn_exact ------------------------------------------------------------ */

/* `saved` (a forward before a backward): per channel the batch mean of Y0,
 * sigma (training) and r, doubles. */
static size_t qx_saved(const qf_node *n, const void *state)
{
    (void)n;
    const qx_state *st = state;
    return 3 * (size_t)(st && st->ch > 0 ? st->ch : 0) * sizeof(double);
}

typedef struct qx_job {
    const qx_state *st;
    const qf_kernel_io *io;
    bool batch; /* training on batch statistics (not frozen) */
    double *mu, *sigma, *r;
    const float *y, *y0, *gamma, *beta, *mean, *var, *b, *dz;
    float *z, *dy, *dy0, *dgamma, *dbeta, *dmean, *dvar, *db;
} qx_job;

static void qx_forward_slice(void *ctx, int64_t lo, int64_t hi)
{
    const qx_job *j = ctx;
    const qx_state *st = j->st;
    const double cnt = (double)(st->outer * st->inner);
    for (int64_t c = lo; c < hi; c++) {
        const float r = sqrtf(j->var[c] + (float)st->eps);
        float u = 1.0f, fb;
        if (j->batch) {
            double s = 0.0, ss = 0.0;
            for (int64_t o = 0; o < st->outer; o++) {
                const float *p = j->y0 + (o * st->ch + c) * st->inner;
                for (int64_t i = 0; i < st->inner; i++) s += p[i];
            }
            const double mu = s / cnt;
            for (int64_t o = 0; o < st->outer; o++) {
                const float *p = j->y0 + (o * st->ch + c) * st->inner;
                for (int64_t i = 0; i < st->inner; i++) ss += (p[i] - mu) * (p[i] - mu);
            }
            const double sigma = sqrt(ss / cnt + st->eps);
            u = (float)(r / sigma);
            fb = (float)(j->beta[c] - j->gamma[c] * mu / sigma);
            j->mu[c] = mu;
            j->sigma[c] = sigma;
        } else {
            const double mb = (double)j->mean[c] - (j->b ? j->b[c] : 0.0f);
            fb = (float)(j->beta[c] - j->gamma[c] * mb / r);
        }
        if (j->r) j->r[c] = r;
        for (int64_t o = 0; o < st->outer; o++) {
            const int64_t base = (o * st->ch + c) * st->inner;
            if (j->batch)
                for (int64_t i = 0; i < st->inner; i++) j->z[base + i] = j->y[base + i] * u + fb;
            else
                for (int64_t i = 0; i < st->inner; i++) j->z[base + i] = j->y[base + i] + fb;
        }
    }
}

static qf_status qx_check_running(const qf_kernel_io *io, const qx_state *st)
{
    const float *var = io->in[QX_VAR]->data;
    for (int64_t c = 0; c < st->ch; c++)
        if (!(var[c] + (float)st->eps > 0.0f))
            return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): channel %lld: running_var %g + epsilon %g is not > 0",
                            io->node->name, qf_op_label(io->node), (long long)c, var[c], st->eps);
    return QF_OK;
}

static const float *qx_in(const qf_kernel_io *io, int i)
{
    return io->nin > i && io->in[i] ? io->in[i]->data : NULL;
}

static float *qx_din(const qf_kernel_io *io, int i)
{
    return io->nin > i && io->din[i] ? io->din[i]->data : NULL;
}

static qf_status qf_qat_bn_exact_forward_f32(const qf_kernel_io *io)
{
    const qx_state *st = io->state;
    const qf_node *n = io->node;
    QF_TRY(qx_check_running(io, st));
    qx_job j = {.st = st, .io = io, .batch = io->training && !qx_frozen(n), .y = qx_in(io, QX_Y),
                .y0 = qx_in(io, QX_Y0), .gamma = qx_in(io, QX_GAMMA), .beta = qx_in(io, QX_BETA),
                .mean = qx_in(io, QX_MEAN), .var = qx_in(io, QX_VAR), .b = qx_in(io, QX_BIAS),
                .z = io->out[0]->data};
    if (j.batch && !io->saved)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): training forward without its saved statistics", n->name,
                        qf_op_label(n));
    if (io->saved) {
        j.mu = io->saved;
        j.sigma = j.mu + st->ch;
        j.r = j.sigma + st->ch;
    }
    if (j.batch && st->outer * st->inner < 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): training on an empty batch", n->name, qf_op_label(n));
    qf_parallel_for(st->ch, qx_grain(st), qx_forward_slice, &j);
    return QF_OK;
}

static void qx_backward_slice(void *ctx, int64_t lo, int64_t hi)
{
    const qx_job *j = ctx;
    const qx_state *st = j->st;
    const double cnt = (double)(st->outer * st->inner);
    for (int64_t c = lo; c < hi; c++) {
        const double r = j->r[c], gamma = j->gamma[c];
        double g = 0.0, p = 0.0;
        if (j->dz)
            for (int64_t o = 0; o < st->outer; o++) {
                const int64_t base = (o * st->ch + c) * st->inner;
                for (int64_t i = 0; i < st->inner; i++) {
                    g += j->dz[base + i];
                    p += (double)j->dz[base + i] * j->y[base + i];
                }
            }
        if (j->dbeta) j->dbeta[c] = (float)g;
        float uy, ay0 = 0.0f, cy0 = 0.0f, my0 = 0.0f;
        if (j->batch) {
            /* Z = Y * r / sigma + beta - gamma * mu / sigma. */
            const double mu = j->mu[c], sg = j->sigma[c];
            const double dsigma = (gamma * mu * g - r * p) / (sg * sg);
            const double dv = dsigma / (2.0 * sg), dmu = -gamma * g / sg;
            uy = (float)(r / sg);
            ay0 = (float)(dmu / cnt);
            cy0 = (float)(2.0 * dv / cnt);
            my0 = (float)mu;
            if (j->dgamma) j->dgamma[c] = (float)(-g * mu / sg);
            if (j->dmean) j->dmean[c] = 0.0f;
            if (j->dvar) j->dvar[c] = (float)(p / (2.0 * r * sg)); /* d r / d var' = 1 / (2 r) */
            if (j->db) j->db[c] = 0.0f;
        } else {
            /* Z = Y + beta - gamma * (mean - b) / r. */
            const double mb = (double)j->mean[c] - (j->b ? j->b[c] : 0.0f);
            uy = 1.0f;
            if (j->dgamma) j->dgamma[c] = (float)(-g * mb / r);
            if (j->dmean) j->dmean[c] = (float)(-g * gamma / r);
            if (j->dvar) j->dvar[c] = (float)(g * gamma * mb / (2.0 * r * r * r));
            if (j->db) j->db[c] = (float)(g * gamma / r);
        }
        for (int64_t o = 0; o < st->outer; o++) {
            const int64_t base = (o * st->ch + c) * st->inner;
            for (int64_t i = 0; i < st->inner; i++) {
                const float d = j->dz ? j->dz[base + i] : 0.0f;
                if (j->dy) j->dy[base + i] = d * uy;
                if (j->dy0) j->dy0[base + i] = j->batch ? ay0 + cy0 * (j->y0[base + i] - my0) : 0.0f;
            }
        }
    }
}

static qf_status qf_qat_bn_exact_backward_f32(const qf_kernel_io *io)
{
    const qx_state *st = io->state;
    const qf_node *n = io->node;
    if (!io->saved)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): backward without its saved statistics", n->name,
                        qf_op_label(n));
    qx_job j = {.st = st, .io = io, .batch = io->training && !qx_frozen(n), .y = qx_in(io, QX_Y),
                .y0 = qx_in(io, QX_Y0), .gamma = qx_in(io, QX_GAMMA), .mean = qx_in(io, QX_MEAN),
                .b = qx_in(io, QX_BIAS),
                .dz = io->dout[0] ? io->dout[0]->data : NULL, .dy = qx_din(io, QX_Y), .dy0 = qx_din(io, QX_Y0),
                .dgamma = qx_din(io, QX_GAMMA), .dbeta = qx_din(io, QX_BETA), .dmean = qx_din(io, QX_MEAN),
                .dvar = qx_din(io, QX_VAR), .db = qx_din(io, QX_BIAS)};
    j.mu = io->saved;
    j.sigma = j.mu + st->ch;
    j.r = j.sigma + st->ch;
    qf_parallel_for(st->ch, qx_grain(st), qx_backward_slice, &j);
    return QF_OK;
}

const qf_op_kernels qf_qat_bn_stats_kernels = {
    .infer = qf_qat_bn_stats_infer,
    .prepare = qf_qat_bn_stats_prepare,
    .state_size = sizeof(qx_state),
    .forward_f32 = qf_qat_bn_stats_forward_f32,
    .backward_f32 = qf_qat_bn_stats_backward_f32,
};

const qf_op_kernels qf_qat_bn_exact_kernels = {
    .infer = qf_qat_bn_exact_infer,
    .prepare = qf_qat_bn_exact_prepare,
    .state_size = sizeof(qx_state),
    .forward_f32 = qf_qat_bn_exact_forward_f32,
    .backward_f32 = qf_qat_bn_exact_backward_f32,
    /* Y (for d sigma), gamma, mean, Y0, b; mu, sigma and r come from `saved`. */
    .bwd_in = (1u << QX_Y) | (1u << QX_GAMMA) | (1u << QX_MEAN) | (1u << QX_Y0) | (1u << QX_BIAS),
    .saved_size = qx_saved,
};
