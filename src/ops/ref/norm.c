/* BatchNormalization (ONNX opsets 7..21), X float32 [N, C, ...] (rank >= 2),
 * and LayerNormalization (opset 17, at the end of the file).
 *
 * Inputs: X, scale (gamma) [C], B (beta) [C], input_mean [C], input_var [C];
 * the four parameter tensors may be float32 or float64.
 *
 * Inference (training_mode = 0, the default):
 *     y = (x - mean_c) / sqrt(var_c + eps) * scale_c + B_c
 * computed as y = x * a_c + d_c, with a_c and d_c formed in double.
 *
 * Training (training_mode = 1, opset 14+; or opset < 14 with the optional
 * mean / var outputs present): y uses the batch mean and the *biased* batch
 * variance (divide by the count), and the optional outputs are
 *     running_mean = input_mean * momentum + batch_mean * (1 - momentum)
 *     running_var  = input_var  * momentum + batch_var  * (1 - momentum)
 * with the same biased batch_var, as the ONNX spec's reference and its node
 * tests (test_batchnorm_*_training_mode) do. Note: PyTorch updates its
 * running_var with the unbiased variance (count / (count - 1)).
 *
 * Training as PyTorch (io->training: the backward tape and
 * qf_node_eval_grad; whatever the node's training_mode): y uses the batch
 * mean and the biased batch variance (two passes in double), the batch mean
 * and 1/sqrt(var + eps) are kept in `saved` for the backward, and the
 * running statistics are updated in place in input_mean / input_var with
 * nn.BatchNorm's rule, m = the node's momentum (ONNX's m is 1 - PyTorch's):
 *     input_mean = input_mean * m + batch_mean * (1 - m)
 *     input_var  = input_var  * m + batch_var * count / (count - 1) * (1 - m)
 * Backward in training mode as torch's native_batch_norm_backward, per
 * channel with xhat = (x - mean) * invstd over the channel's count values:
 *     dbeta = sum(dy), dgamma = sum(dy * xhat),
 *     dx = gamma * invstd * (dy - dbeta / count - xhat * dgamma / count)
 * and outside training (frozen BN, as in QAT) the per-channel affine of the
 * running statistics: dx = dy * gamma / sqrt(var + eps).
 *
 * Channels-last (io->in_nhwc bit 0: set only by the training tape, which
 * keeps a Conv -> BN -> Relu chain in NHWC for oneDNN's convolutions; X, Y,
 * dY and dX are then [P][C], P = N * spatial): the same formulas, each
 * channel's sums in double over its P values in row order, vectorized across
 * the channels of a row (norm_nhwc.c).
 */
#include <math.h>
#include <string.h>

#include "ops/math/broadcast.h"
#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/ref/norm_train.h"
#include "ops/math/vector.h"

static const char *const bn_param_names[4] = {"scale", "B", "input_mean", "input_var"};

/* QAT's --freeze-bn: a BatchNormalization with the internal attribute
 * qfold_frozen = 1 runs on its running statistics (and leaves them alone)
 * in a training plan too, and its backward is the per-channel affine's, as
 * torch's ConvBn2d.freeze_bn_stats(). Read at run time: a training loop
 * flips it between steps without a new plan. */
static bool bn_frozen(const qf_node *n)
{
    return qf_node_attr_int(n, "qfold_frozen", 0) != 0;
}

static bool bn_training(const qf_node *n, int64_t opset)
{
    if (opset >= 14) return qf_node_attr_int(n, "training_mode", 0) != 0;
    return n->noutputs > 1;
}

static qf_status qf_batch_norm_infer(qf_graph *g, qf_node *n)
{
    const char *op = qf_op_label(n);
    if (n->ninputs != 5)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expected 5 inputs (X, scale, B, mean, var), got %d", n->name,
                        op, n->ninputs);
    for (int i = 0; i < 5; i++)
        if (!n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, op, i);
    const qf_tensor *x = &n->inputs[0]->type;
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input X has dtype %s, only float32 is supported",
                        n->name, op, qf_dtype_name(x->dtype));
    if (x->ndim < 2)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): input X has rank %d, expected >= 2 (N, C, ...)", n->name, op,
                        x->ndim);
    int64_t c = x->dims[1];
    for (int i = 1; i < 5; i++) {
        const qf_tensor *p = &n->inputs[i]->type;
        if (p->dtype != QF_DTYPE_F32 && p->dtype != QF_DTYPE_F64)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected float32 or float64",
                            n->name, op, bn_param_names[i - 1], qf_dtype_name(p->dtype));
        if (p->ndim != 1 || (c >= 0 && p->dims[0] >= 0 && p->dims[0] != c)) {
            char buf[64];
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %s has shape %s, expected [%lld] (the channels of X)",
                            n->name, op, bn_param_names[i - 1], qf_shape_str(p->ndim, p->dims, buf, sizeof buf),
                            (long long)c);
        }
        if (c < 0) c = p->dims[0];
    }
    bool training = bn_training(n, g->opset);
    if (n->noutputs > 1 && !training)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %d outputs but training_mode is 0 (only Y is defined)",
                        n->name, op, n->noutputs);
    if (n->noutputs == 2)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): 2 outputs; expected Y alone or Y, running_mean, running_var",
                        n->name, op);
    qf_tensor *y = &n->outputs[0]->type;
    y->dtype = QF_DTYPE_F32;
    y->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) y->dims[i] = x->dims[i];
    for (int i = 1; i < n->noutputs; i++) {
        qf_tensor *o = &n->outputs[i]->type;
        o->dtype = n->inputs[2 + i]->type.dtype;
        o->ndim = 1;
        o->dims[0] = c;
    }
    return QF_OK;
}

static void norm_store(const qf_tensor *t, int64_t i, double v)
{
    if (t->dtype == QF_DTYPE_F64) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

/* --- training as PyTorch (io->training) ---------------------------------------- */

/* `saved`: the batch mean, then 1/sqrt(var + eps), C doubles each. */
static size_t qf_batch_norm_saved(const qf_node *n, const void *state)
{
    (void)state;
    int64_t c = n->inputs[0]->type.dims[1];
    return 2 * (size_t)(c > 0 ? c : 0) * sizeof(double);
}


/* Channels lo..hi-1: the batch mean into smean, the biased variance into
 * sinv (bn_train_forward turns it into 1/sqrt(var + eps)). */
/* Reductions of one channel row in double, over 16 independent partial sums
 * (a single running sum is a chain of dependent adds: 4 cycles an element;
 * sixteen chains let the adds overlap and vectorize: two AVX-512 vectors of
 * doubles, four AVX2 ones, whose adds overlap too). */
#define BN_LANES 16
QF_VECTOR_CLONES static double bn_sum(const float *restrict p, int64_t n)
{
    double acc[BN_LANES] = {0};
    int64_t i = 0;
    for (; i + BN_LANES <= n; i += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) acc[l] += p[i + l];
    double s = 0.0;
    for (; i < n; i++) s += p[i];
    for (int l = 0; l < BN_LANES; l++) s += acc[l];
    return s;
}

QF_VECTOR_CLONES static double bn_centered_sq(const float *restrict p, int64_t n, double mu)
{
    double acc[BN_LANES] = {0};
    int64_t i = 0;
    for (; i + BN_LANES <= n; i += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            const double d = p[i + l] - mu;
            acc[l] += d * d;
        }
    double s = 0.0;
    for (; i < n; i++) s += (p[i] - mu) * (p[i] - mu);
    for (int l = 0; l < BN_LANES; l++) s += acc[l];
    return s;
}

/* sum g and sum (x - mu) g. */
QF_VECTOR_CLONES static void bn_sum_dot(const float *restrict x, const float *restrict g, int64_t n, double mu, double *sum,
                       double *dot)
{
    double as[BN_LANES] = {0}, ad[BN_LANES] = {0};
    int64_t i = 0;
    for (; i + BN_LANES <= n; i += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            as[l] += g[i + l];
            ad[l] += (x[i + l] - mu) * g[i + l];
        }
    double s = 0.0, d = 0.0;
    for (; i < n; i++) {
        s += g[i];
        d += (x[i] - mu) * g[i];
    }
    for (int l = 0; l < BN_LANES; l++) {
        s += as[l];
        d += ad[l];
    }
    *sum += s;
    *dot += d;
}

/* The same over the Relu-masked gradient: g where x * af + df > 0, else 0.
 * g is read unconditionally, then selected: a conditional read became a
 * masked load, and GCC then kept the accumulators on the stack (each
 * iteration's adds waiting on the last one's stores). */
QF_VECTOR_CLONES static void bn_sum_dot_relu(const float *restrict x, const float *restrict g, int64_t n, double mu,
                                             float af, float df, double *sum, double *dot)
{
    double as[BN_LANES] = {0}, ad[BN_LANES] = {0};
    int64_t i = 0;
    for (; i + BN_LANES <= n; i += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            const float gv = g[i + l], gl = x[i + l] * af + df > 0.0f ? gv : 0.0f; /* g read first: see below */
            as[l] += gl;
            ad[l] += (x[i + l] - mu) * gl;
        }
    double s = 0.0, d = 0.0;
    for (; i < n; i++) {
        const float gl = x[i] * af + df > 0.0f ? g[i] : 0.0f;
        s += gl;
        d += (x[i] - mu) * gl;
    }
    for (int l = 0; l < BN_LANES; l++) {
        s += as[l];
        d += ad[l];
    }
    *sum += s;
    *dot += d;
}

QF_VECTOR_CLONES static void bn_stats_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_job *j = ctx;
    const double cnt = (double)(j->nb * j->inner);
    for (int64_t ch = lo; ch < hi; ch++) {
        double s = 0.0, ss = 0.0;
        for (int64_t b = 0; b < j->nb; b++) s += bn_sum(j->x + (b * j->c + ch) * j->inner, j->inner);
        const double mu = s / cnt;
        for (int64_t b = 0; b < j->nb; b++) ss += bn_centered_sq(j->x + (b * j->c + ch) * j->inner, j->inner, mu);
        j->smean[ch] = mu;
        j->sinv[ch] = ss / cnt;
    }
}


static bool bn_fused_relu(const qf_kernel_io *io)
{
    return io->nfused == 1 && io->fused && io->fused[0]->op == QF_OP_RELU;
}


/* y = x * a + d per channel, a = gamma * invstd, d = beta - mean * a. */
QF_VECTOR_CLONES static void bn_affine_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_job *j = ctx;
    for (int64_t ch = lo; ch < hi; ch++) {
        const double a = qf_tensor_get_f64(j->scale, ch) * j->sinv[ch];
        const float af = (float)a, df = (float)(qf_tensor_get_f64(j->bias, ch) - j->smean[ch] * a);
        for (int64_t b = 0; b < j->nb; b++) {
            const float *p = j->x + (b * j->c + ch) * j->inner;
            float *q = j->y + (b * j->c + ch) * j->inner;
            if (j->relu)
                for (int64_t i = 0; i < j->inner; i++) q[i] = bn_relu(p[i] * af + df);
            else
                for (int64_t i = 0; i < j->inner; i++) q[i] = p[i] * af + df;
        }
    }
}

static qf_status bn_train_forward(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0];
    bn_job j = {.x = x->data, .y = io->out[0]->data, .nb = x->dims[0], .c = x->dims[1], .inner = 1,
                .eps = qf_node_attr_float(n, "epsilon", 1e-5f), .scale = io->in[1], .bias = io->in[2]};
    for (int i = 2; i < x->ndim; i++) j.inner *= x->dims[i];
    const double momentum = qf_node_attr_float(n, "momentum", 0.9f);
    const int64_t count = j.nb * j.inner;
    if (count < 2)
        return qf_error(QF_ERR_INVALID,
                        "node '%s' (%s): training needs more than 1 value per channel (input shape has %lld)", n->name,
                        qf_op_label(n), (long long)count);
    if (!io->saved)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): training forward without its saved statistics", n->name,
                        qf_op_label(n));
    j.smean = io->saved;
    j.sinv = j.smean + j.c;
    j.relu = bn_fused_relu(io);
    /* [N, C] (or 1x1 spatial) is channels-last as it is: one row of C a sample. */
    const bool nhwc = (io->in_nhwc & 1u) != 0 || j.inner == 1;
    const bool fused = nhwc && bn_nhwc_train(&j);
    if (!nhwc)
        qf_parallel_for(j.c, bn_grain(count), bn_stats_slice, &j);
    for (int64_t ch = 0; ch < j.c; ch++)
        if (!(j.sinv[ch] + j.eps > 0.0))
            return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): channel %lld: variance %g + epsilon %g is not > 0",
                            n->name, qf_op_label(n), (long long)ch, j.sinv[ch], j.eps);
    /* The running statistics, in place: the trainer made them writable
     * (op_table.h), the one-node harness passes its own copies. */
    qf_tensor *rmean = (qf_tensor *)io->in[3], *rvar = (qf_tensor *)io->in[4];
    const double unbias = (double)count / (double)(count - 1);
    for (int64_t ch = 0; ch < j.c; ch++) {
        const double v = j.sinv[ch];
        const double m1 = qf_tensor_get_f64(rmean, ch) * momentum + j.smean[ch] * (1.0 - momentum);
        const double v1 = qf_tensor_get_f64(rvar, ch) * momentum + v * unbias * (1.0 - momentum);
        norm_store(rmean, ch, m1);
        norm_store(rvar, ch, v1);
        if (io->nout == 3) {
            norm_store(io->out[1], ch, m1);
            norm_store(io->out[2], ch, v1);
        }
        j.sinv[ch] = 1.0 / sqrt(v + j.eps);
    }
    j.batch = true;
    if (fused)
        return QF_OK;
    if (nhwc)
        bn_nhwc_affine(&j);
    else
        qf_parallel_for(j.c, bn_grain(count), bn_affine_slice, &j);
    return QF_OK;
}

/* Channels lo..hi-1 of the backward. */
QF_VECTOR_CLONES static void bn_backward_slice(void *ctx, int64_t lo, int64_t hi)
{
    const bn_job *j = ctx;
    const double cnt = (double)(j->nb * j->inner);
    for (int64_t ch = lo; ch < hi; ch++) {
        const double gamma = qf_tensor_get_f64(j->scale, ch);
        double mu, inv;
        if (j->batch) {
            mu = j->smean[ch];
            inv = j->sinv[ch];
        } else {
            mu = qf_tensor_get_f64(j->mean, ch);
            inv = 1.0 / sqrt(qf_tensor_get_f64(j->var, ch) + j->eps);
        }
        double sum = 0.0, dotp = 0.0;
        float af = 0.0f, df = 0.0f;
        if (j->relu) bn_coef(j, ch, &af, &df);
        if (j->dy) {
            for (int64_t b = 0; b < j->nb; b++) {
                const float *p = j->x + (b * j->c + ch) * j->inner, *g = j->dy + (b * j->c + ch) * j->inner;
                if (j->relu)
                    bn_sum_dot_relu(p, g, j->inner, mu, af, df, &sum, &dotp);
                else
                    bn_sum_dot(p, g, j->inner, mu, &sum, &dotp);
            }
        }
        if (j->dbias) j->dbias[ch] = (float)sum;
        if (j->dscale) j->dscale[ch] = (float)(dotp * inv);
        if (j->dmean) j->dmean[ch] = j->batch ? 0.0f : (float)(-sum * gamma * inv);
        if (j->dvar) j->dvar[ch] = j->batch ? 0.0f : (float)(-0.5 * dotp * gamma * inv * inv * inv);
        if (!j->dx) continue;
        const float a = (float)(gamma * inv);
        /* Training: dx = a * (dy - sum / cnt - (x - mean) * k), k = dotp * inv^2 / cnt. */
        const float gm = j->batch ? (float)(sum / cnt) : 0.0f, k = j->batch ? (float)(dotp * inv * inv / cnt) : 0.0f;
        const float muf = (float)mu;
        for (int64_t b = 0; b < j->nb; b++) {
            const float *p = j->x + (b * j->c + ch) * j->inner;
            float *q = j->dx + (b * j->c + ch) * j->inner;
            if (!j->dy) {
                for (int64_t i = 0; i < j->inner; i++) q[i] = 0.0f;
                continue;
            }
            const float *g = j->dy + (b * j->c + ch) * j->inner;
            if (j->relu && j->batch)
                for (int64_t i = 0; i < j->inner; i++) {
                    const float gi = p[i] * af + df > 0.0f ? g[i] : 0.0f;
                    q[i] = (gi - gm - (p[i] - muf) * k) * a;
                }
            else if (j->relu)
                for (int64_t i = 0; i < j->inner; i++) q[i] = (p[i] * af + df > 0.0f ? g[i] : 0.0f) * a;
            else if (j->batch)
                for (int64_t i = 0; i < j->inner; i++) q[i] = (g[i] - gm - (p[i] - muf) * k) * a;
            else
                for (int64_t i = 0; i < j->inner; i++) q[i] = g[i] * a;
        }
    }
}

/* Reads X, scale (and the running statistics outside training): bwd_in. */
static qf_status qf_batch_norm_backward_f32(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0];
    float *din[5] = {0};
    for (int i = 0; i < 5 && i < io->nin; i++) din[i] = io->din[i] ? io->din[i]->data : NULL;
    bn_job j = {.x = x->data, .dy = io->dout[0] ? io->dout[0]->data : NULL, .dx = din[0], .dscale = din[1],
                .dbias = din[2], .dmean = din[3], .dvar = din[4], .nb = x->dims[0], .c = x->dims[1], .inner = 1,
                .eps = qf_node_attr_float(n, "epsilon", 1e-5f), .scale = io->in[1], .bias = io->in[2],
                .mean = io->in[3], .var = io->in[4], .batch = (io->training && !bn_frozen(n)) || bn_training(n, io->opset),
                .relu = bn_fused_relu(io)};
    for (int i = 2; i < x->ndim; i++) j.inner *= x->dims[i];
    if (io->nout > 1 && (io->dout[1] || (io->nout > 2 && io->dout[2])))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): a gradient through the running_mean / running_var outputs is not supported",
                        n->name, qf_op_label(n));
    if (j.batch) {
        if (!io->saved)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): backward in training mode without saved statistics",
                            n->name, qf_op_label(n));
        j.smean = io->saved;
        j.sinv = j.smean + j.c;
    }
    const bool nhwc = (io->in_nhwc & 1u) != 0 || j.inner == 1; /* as bn_train_forward */
    if (nhwc)
        bn_nhwc_backward(&j);
    else
        qf_parallel_for(j.c, bn_grain(j.nb * j.inner), bn_backward_slice, &j);
    return QF_OK;
}

/* Outside PyTorch-style training on channels-last data (a frozen BN in the
 * tape; the tape keeps a BN in its ONNX training mode in NCHW): the affine of
 * the running statistics, as below. */
static qf_status bn_forward_nhwc(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0];
    if (bn_training(n, io->opset) || io->nout != 1)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): ONNX training mode on channels-last data", n->name,
                        qf_op_label(n));
    bn_job j = {.x = x->data, .y = io->out[0]->data, .nb = x->dims[0], .c = x->dims[1], .inner = 1,
                .eps = qf_node_attr_float(n, "epsilon", 1e-5f), .scale = io->in[1], .bias = io->in[2],
                .mean = io->in[3], .var = io->in[4], .relu = bn_fused_relu(io)};
    for (int i = 2; i < x->ndim; i++) j.inner *= x->dims[i];
    for (int64_t ch = 0; ch < j.c; ch++) {
        const double v = qf_tensor_get_f64(j.var, ch);
        if (!(v + j.eps > 0.0))
            return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): channel %lld: variance %g + epsilon %g is not > 0",
                            n->name, qf_op_label(n), (long long)ch, v, j.eps);
    }
    bn_nhwc_affine(&j);
    return QF_OK;
}

static qf_status qf_batch_norm_forward_f32(const qf_kernel_io *io)
{
    if (io->training && !bn_frozen(io->node)) return bn_train_forward(io);
    if (io->in_nhwc & 1u) return bn_forward_nhwc(io);

    const qf_node *n = io->node;
    const char *op = qf_op_label(n);
    const qf_tensor *x = io->in[0];
    const qf_tensor *scale = io->in[1], *bias = io->in[2], *mean = io->in[3], *var = io->in[4];
    const int64_t nb = x->dims[0], c = x->dims[1];
    int64_t inner = 1;
    for (int i = 2; i < x->ndim; i++) inner *= x->dims[i];
    const double eps = qf_node_attr_float(n, "epsilon", 1e-5f);
    const double momentum = qf_node_attr_float(n, "momentum", 0.9f);
    const bool training = bn_training(n, io->opset), relu = bn_fused_relu(io);
    const float *xd = x->data;
    float *yd = io->out[0]->data;

    for (int64_t ch = 0; ch < c; ch++) {
        double mu, v;
        if (training) {
            /* Two passes in double: the mean, then the centred sum of squares. */
            double s = 0.0, ss = 0.0;
            for (int64_t b = 0; b < nb; b++) {
                const float *p = xd + (b * c + ch) * inner;
                for (int64_t i = 0; i < inner; i++) s += p[i];
            }
            double cnt = (double)(nb * inner);
            mu = cnt > 0 ? s / cnt : 0.0;
            for (int64_t b = 0; b < nb; b++) {
                const float *p = xd + (b * c + ch) * inner;
                for (int64_t i = 0; i < inner; i++) {
                    double d = p[i] - mu;
                    ss += d * d;
                }
            }
            v = cnt > 0 ? ss / cnt : 0.0;
            if (io->saved) ((double *)io->saved)[ch] = mu;
            if (io->nout == 3) {
                norm_store(io->out[1], ch, qf_tensor_get_f64(mean, ch) * momentum + mu * (1.0 - momentum));
                norm_store(io->out[2], ch, qf_tensor_get_f64(var, ch) * momentum + v * (1.0 - momentum));
            }
        } else {
            mu = qf_tensor_get_f64(mean, ch);
            v = qf_tensor_get_f64(var, ch);
        }
        if (!(v + eps > 0.0))
            return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): channel %lld: variance %g + epsilon %g is not > 0",
                            n->name, op, (long long)ch, v, eps);
        if (training && io->saved) ((double *)io->saved)[c + ch] = 1.0 / sqrt(v + eps);
        double a = qf_tensor_get_f64(scale, ch) / sqrt(v + eps);
        double d = qf_tensor_get_f64(bias, ch) - mu * a;
        const float af = (float)a, df = (float)d;
        for (int64_t b = 0; b < nb; b++) {
            const float *p = xd + (b * c + ch) * inner;
            float *q = yd + (b * c + ch) * inner;
            if (relu)
                for (int64_t i = 0; i < inner; i++) q[i] = bn_relu(p[i] * af + df);
            else
                for (int64_t i = 0; i < inner; i++) q[i] = p[i] * af + df;
        }
    }
    return QF_OK;
}

/* --- LayerNormalization -------------------------------------------------------- */
/* LayerNormalization (opset 17; PyTorch exports nn.LayerNorm as it from opset
 * 17, as a ReduceMean / Sub / Pow / Sqrt / Div chain below). X [d0..dr-1] is
 * normalized over dims axis..r-1 (one "row" of `inner` elements per index of
 * the leading dims):
 *     mean = avg(x_row), inv = 1 / sqrt(avg((x - mean)^2) + epsilon)
 *     y = (x - mean) * inv * Scale + B
 * Scale and B (optional) broadcast to X.shape[axis:]. The optional outputs
 * Mean and InvStdDev have shape X.shape[:axis] + [1] * (r - axis). Row
 * statistics in double. */
static const char *const ln_names[3] = {"X", "Scale", "B"};

static int ln_axis(const qf_node *n, int rank)
{
    int64_t axis = qf_node_attr_int(n, "axis", -1);
    return (int)(axis < 0 ? axis + rank : axis);
}

static qf_status qf_layer_norm_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const char *op = qf_op_label(n);
    if (n->ninputs < 2 || !n->inputs[0] || !n->inputs[1])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): X and Scale are required", n->name, op);
    const qf_tensor *x = &n->inputs[0]->type;
    if (x->dtype != QF_DTYPE_F32 && x->dtype != QF_DTYPE_F64)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input X has dtype %s, expected float32 or float64",
                        n->name, op, qf_dtype_name(x->dtype));
    int64_t axis_attr = qf_node_attr_int(n, "axis", -1);
    if (axis_attr < -(int64_t)x->ndim || axis_attr >= x->ndim)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld out of range for rank %d", n->name, op,
                        (long long)axis_attr, x->ndim);
    int axis = ln_axis(n, x->ndim);
    int64_t stash = qf_node_attr_int(n, "stash_type", 1);
    if (stash != 1)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): stash_type %lld (only 1, float32, is supported)",
                        n->name, op, (long long)stash);
    for (int i = 1; i < 3 && i < n->ninputs; i++) {
        const qf_tensor *p = n->inputs[i] ? &n->inputs[i]->type : NULL;
        if (!p) continue;
        if (p->dtype != x->dtype)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s has dtype %s, X has %s", n->name, op, ln_names[i],
                            qf_dtype_name(p->dtype), qf_dtype_name(x->dtype));
        if (!qf_broadcast_to_ok(p->ndim, p->dims, x->ndim - axis, x->dims + axis)) {
            char a[128], b[128];
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %s of shape %s does not broadcast to %s", n->name, op,
                            ln_names[i], qf_shape_str(p->ndim, p->dims, a, sizeof a),
                            qf_shape_str(x->ndim - axis, x->dims + axis, b, sizeof b));
        }
    }
    qf_tensor *y = &n->outputs[0]->type;
    y->dtype = x->dtype;
    y->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) y->dims[d] = x->dims[d];
    for (int o = 1; o < n->noutputs; o++) {
        if (!n->outputs[o]) continue;
        qf_tensor *t = &n->outputs[o]->type;
        t->dtype = QF_DTYPE_F32;
        t->ndim = x->ndim;
        for (int d = 0; d < x->ndim; d++) t->dims[d] = d < axis ? x->dims[d] : 1;
    }
    return QF_OK;
}

/* Offset of element j of a row (shape dims[0..nd-1]) in an operand that
 * broadcasts to it with element strides `st` (0 on broadcast dims). */
static int64_t ln_offset(int64_t j, int nd, const int64_t *dims, const int64_t *st)
{
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (j % dims[d]) * st[d];
        j /= dims[d];
    }
    return off;
}

/* Mean and biased variance of one row, in double: the mean, then the
 * centred sum of squares. */
#define QF_LN_STATS_(fname, T)                                              \
    static void fname(const T *p, int64_t len, double *mu, double *var)     \
    {                                                                       \
        double s = 0.0, ss = 0.0;                                           \
        for (int64_t j = 0; j < len; j++) s += p[j];                        \
        *mu = len ? s / (double)len : 0.0;                                  \
        for (int64_t j = 0; j < len; j++) {                                 \
            double d = p[j] - *mu;                                          \
            ss += d * d;                                                    \
        }                                                                   \
        *var = len ? ss / (double)len : 0.0;                                \
    }

QF_LN_STATS_(ln_stats_f32, float)
QF_LN_STATS_(ln_stats_f64, double)

static qf_status qf_layer_norm_forward_f32(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0], *scale = io->in[1], *bias = io->nin > 2 ? io->in[2] : NULL;
    const int axis = ln_axis(n, x->ndim), nd = x->ndim - axis;
    const double eps = qf_node_attr_float(n, "epsilon", 1e-5f);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis; d < x->ndim; d++) inner *= x->dims[d];
    int64_t sst[QF_MAX_DIMS] = {0}, bst[QF_MAX_DIMS] = {0};
    qf_broadcast_strides(scale->ndim, scale->dims, nd, x->dims + axis, sst);
    if (bias) qf_broadcast_strides(bias->ndim, bias->dims, nd, x->dims + axis, bst);
    const bool sfull = qf_tensor_numel(scale) == inner, bfull = !bias || qf_tensor_numel(bias) == inner;
    qf_tensor *y = io->out[0];
    qf_tensor *mo = io->nout > 1 ? io->out[1] : NULL, *io_inv = io->nout > 2 ? io->out[2] : NULL;

    for (int64_t r = 0; r < outer; r++) {
        const int64_t base = r * inner;
        double mu, v;
        if (x->dtype == QF_DTYPE_F32) ln_stats_f32((const float *)x->data + base, inner, &mu, &v);
        else ln_stats_f64((const double *)x->data + base, inner, &mu, &v);
        if (!(v + eps > 0.0))
            return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): row %lld: variance %g + epsilon %g is not > 0",
                            n->name, qf_op_label(n), (long long)r, v, eps);
        /* stash_type 1: the statistics are float32 and y is computed from
         * them, as the ONNX definition does. */
        const float muf = (float)mu, invf = (float)(1.0 / sqrt(v + eps));
        if (mo && mo->data) ((float *)mo->data)[r] = muf;
        if (io_inv && io_inv->data) ((float *)io_inv->data)[r] = invf;
        if (x->dtype == QF_DTYPE_F32) {
            const float *p = (const float *)x->data + base, *sc = scale->data, *bi = bias ? bias->data : NULL;
            float *q = (float *)y->data + base;
            for (int64_t j = 0; j < inner; j++) {
                float gs = sc[sfull ? j : ln_offset(j, nd, x->dims + axis, sst)];
                float bb = bi ? bi[bfull ? j : ln_offset(j, nd, x->dims + axis, bst)] : 0.0f;
                q[j] = (p[j] - muf) * invf * gs + bb;
            }
        } else {
            const double *p = (const double *)x->data + base, *sc = scale->data, *bi = bias ? bias->data : NULL;
            double *q = (double *)y->data + base;
            for (int64_t j = 0; j < inner; j++) {
                double gs = sc[sfull ? j : ln_offset(j, nd, x->dims + axis, sst)];
                double bb = bi ? bi[bfull ? j : ln_offset(j, nd, x->dims + axis, bst)] : 0.0;
                q[j] = (p[j] - mu) * (1.0 / sqrt(v + eps)) * gs + bb;
            }
        }
    }
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_batch_norm_kernels = {
    .infer = qf_batch_norm_infer,
    .forward_f32 = qf_batch_norm_forward_f32,
    .backward_f32 = qf_batch_norm_backward_f32,
    .bwd_in = 1u << 0 | 1u << 1 | 1u << 2 | 1u << 3 | 1u << 4, /* B: a fused Relu's mask (bn_relu) */
    .saved_size = qf_batch_norm_saved,
};

const qf_op_kernels qf_layer_norm_kernels = {
    .infer = qf_layer_norm_infer,
    .forward_f32 = qf_layer_norm_forward_f32,
};
