/* BatchNormalization's training kernels shared by norm.c (the op, the NCHW
 * kernels) and norm_nhwc.c (the channels-last kernels of the training tape:
 * X, Y, dY and dX [P][C], P = N * spatial). Private to src/ops. */
#ifndef QF_OPS_NORM_TRAIN_H
#define QF_OPS_NORM_TRAIN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/kernels.h"

typedef struct bn_job {
    const float *x, *dy;
    float *y, *dx, *dscale, *dbias, *dmean, *dvar;
    int64_t nb, c, inner;
    double eps;
    const qf_tensor *scale, *bias, *mean, *var;
    double *smean, *sinv; /* saved */
    bool batch;           /* backward: the batch-statistics formula */
    bool relu;            /* a Relu fused after the node (bn_relu below) */
} bn_job;

/* A Relu fused after the BatchNormalization (the training tape, grad_fuse in
 * src/exec/grad.c: the Relu is the only reader of Y; io->nfused == 1):
 * the forward writes relu(y) (Relu's own kernel: y < 0 ? 0 : y, NaN passing
 * through), and the backward takes d loss / d relu(y) and masks it where
 * y > 0 (Relu's backward: 0 at y = 0 and NaN) before the BatchNormalization
 * backward, recomputing y = x * a + d from X with the forward's own float a
 * and d (bn_coef): -ffp-contract=off (vector.h), so the same bits. Two
 * memory passes saved forward (Relu reading Y and writing its output) and
 * one backward (Relu reading Y and dY' and writing dY), and neither Y nor
 * dY is stored. */
static inline float bn_relu(float y) { return y < 0.0f ? 0.0f : y; }

/* Channels per parallel slice: at least ~16k elements each. */
static inline int64_t bn_grain(int64_t per_channel)
{
    return per_channel >= 16384 ? 1 : 16384 / (per_channel > 0 ? per_channel : 1);
}

/* The per-channel a and d of y = x * a + d: from the batch statistics
 * (j->batch: a = gamma * invstd, as bn_affine_slice) or the running ones
 * (a = gamma / sqrt(var + eps), as the inference forward). */
static inline void bn_coef(const bn_job *j, int64_t ch, float *af, float *df)
{
    double a, mu;
    if (j->batch) {
        a = qf_tensor_get_f64(j->scale, ch) * j->sinv[ch];
        mu = j->smean[ch];
    } else {
        a = qf_tensor_get_f64(j->scale, ch) / sqrt(qf_tensor_get_f64(j->var, ch) + j->eps);
        mu = qf_tensor_get_f64(j->mean, ch);
    }
    *af = (float)a;
    *df = (float)(qf_tensor_get_f64(j->bias, ch) - mu * a);
}

/* The channels-last passes (norm_nhwc.c), over the threads.
 * bn_nhwc_train: the training forward's statistics (the batch mean into
 * smean, the biased variance into sinv) and, where the split allows (true
 * returned), its affine with those statistics in the same pass; false: the
 * caller turns sinv into 1/sqrt(var + eps) and runs bn_nhwc_affine.
 * bn_nhwc_affine: y = x * a + d (bn_coef), relu'd with j->relu.
 * bn_nhwc_backward: dX, dscale, dbias (and dmean / dvar outside training),
 * as bn_backward_slice in norm.c. */
bool bn_nhwc_train(const bn_job *j);
void bn_nhwc_affine(const bn_job *j);
void bn_nhwc_backward(const bn_job *j);

#endif
