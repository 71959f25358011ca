/* BatchNormalization's backward (src/ops/ref/norm.c) against central
 * differences: in training mode (batch statistics: dx through the mean and
 * the variance) and in inference mode (the running statistics' affine,
 * frozen BN), ranks 2 (BN1d), 3 and 4, random gamma / beta / running
 * statistics, float32 and float64 parameters; the running statistics' update
 * in place; a channel with one value refused in training. */
#include <math.h>
#include <stdio.h>

#include "qfold/exec.h"
#include "qfold/schema.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static double urand(void) /* [0, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / (double)(1ull << 53);
}

static void fill(qf_tensor *t, double lo, double hi)
{
    for (int64_t i = 0, n = qf_tensor_numel(t); i < n; i++) {
        double v = lo + (hi - lo) * urand();
        if (t->dtype == QF_DTYPE_F64) ((double *)t->data)[i] = v;
        else ((float *)t->data)[i] = (float)v;
    }
}

/* One BN node on x of `ndim` dims; parameters of dtype pdt. */
static void check_bn(int ndim, const int64_t *dims, qf_dtype pdt, bool training, double eps, double momentum)
{
    qf_tensor x, p[4];
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, ndim, dims));
    fill(&x, -2.0, 3.0);
    for (int i = 0; i < 4; i++) REQUIRE_OK(qf_tensor_init(&p[i], pdt, 1, &dims[1]));
    fill(&p[0], 0.5, 1.5);  /* gamma */
    fill(&p[1], -0.5, 0.5); /* beta */
    fill(&p[2], -0.3, 0.3); /* running mean */
    fill(&p[3], 0.5, 2.0);  /* running var */
    const qf_tensor *in[] = {&x, &p[0], &p[1], &p[2], &p[3]};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_BATCH_NORM, "bn", 5, in, 1, 15));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "epsilon", (float)eps));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "momentum", (float)momentum));
    CHECK_OK(qf_node_runner_run(&r));
    /* Smooth in every input; a step of 1e-2 keeps the central difference's
     * error (~h^2 f''') well under the 1e-2 relative tolerance. Float32
     * forward: the numeric side carries ~1e-7 / h of rounding. */
    qf_gradcheck_opts o = {.eps = 1e-2, .kink_factor = -1};
    CHECKF(qf_node_gradcheck(&r, 0, training, 1, &o, stdout), "BN rank %d %s %s", ndim, qf_dtype_name(pdt),
           training ? "training" : "inference");
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
    for (int i = 0; i < 4; i++) qf_tensor_free(&p[i]);
}

static void test_bn_grad(void)
{
    const int64_t d2[] = {7, 3}, d3[] = {4, 3, 5}, d4[] = {3, 2, 4, 5};
    for (int t = 0; t < 2; t++) {
        check_bn(2, d2, QF_DTYPE_F32, t, 1e-5, 0.9);
        check_bn(3, d3, QF_DTYPE_F32, t, 1e-3, 0.99);
        check_bn(4, d4, QF_DTYPE_F32, t, 1e-5, 0.9);
        check_bn(4, d4, QF_DTYPE_F64, t, 1e-3, 0.9);
    }
}

/* The running statistics after one training forward, against the
 * formula worked out here in double: x [4, 2] (count 4). */
static void test_bn_running_update(void)
{
    int64_t xd[] = {4, 2}, cd[] = {2};
    qf_tensor x, p[4];
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, xd));
    for (int i = 0; i < 4; i++) REQUIRE_OK(qf_tensor_init(&p[i], QF_DTYPE_F32, 1, cd));
    const float xv[] = {1, 10, 2, 20, 3, 30, 6, 40};
    for (int i = 0; i < 8; i++) ((float *)x.data)[i] = xv[i];
    float *g = p[0].data, *rm = p[2].data, *rv = p[3].data;
    g[0] = g[1] = 1.0f;
    rm[0] = 0.5f, rm[1] = -1.0f, rv[0] = 2.0f, rv[1] = 3.0f;
    const qf_tensor *in[] = {&x, &p[0], &p[1], &p[2], &p[3]};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_BATCH_NORM, "bn", 5, in, 1, 15));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "momentum", 0.75f));
    REQUIRE_OK(qf_node_runner_run(&r)); /* inference: nothing changes */
    CHECK(rm[0] == 0.5f && rv[1] == 3.0f);
    qf_tensor dx;
    REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 2, xd));
    qf_tensor *out[] = {&r.out[0]}, *din[] = {&dx, NULL, NULL, NULL, NULL};
    const qf_tensor *dout[] = {NULL};
    REQUIRE_OK(qf_node_eval_grad(r.n, 15, in, out, dout, din, true, 0));
    /* channel 0: mean 3, biased var 3.5, unbiased 14/3; channel 1: mean 25, var 125, unbiased 500/3 */
    CHECKF(fabs(rm[0] - (0.5 * 0.75 + 3.0 * 0.25)) < 1e-6, "running mean 0: %g", rm[0]);
    CHECKF(fabs(rm[1] - (-1.0 * 0.75 + 25.0 * 0.25)) < 1e-6, "running mean 1: %g", rm[1]);
    CHECKF(fabs(rv[0] - (2.0 * 0.75 + 14.0 / 3.0 * 0.25)) < 1e-6, "running var 0: %g", rv[0]);
    CHECKF(fabs(rv[1] - (3.0 * 0.75 + 500.0 / 3.0 * 0.25)) < 1e-4, "running var 1: %g", rv[1]);
    const float *y = r.out[0].data;
    CHECKF(fabs(y[0] - (1.0 - 3.0) / sqrt(3.5 + 1e-5)) < 1e-6, "y[0] = %g", y[0]);
    for (int i = 0; i < 8; i++) CHECKF(((float *)dx.data)[i] == 0.0f, "dx[%d] without dy = %g", i, ((float *)dx.data)[i]);
    qf_tensor_free(&dx);
    qf_node_runner_free(&r);

    /* one value per channel: torch refuses to train on it, so do we */
    int64_t one[] = {1, 2};
    x.dims[0] = 1;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_BATCH_NORM, "bn1", 5, in, 1, 15));
    REQUIRE_OK(qf_node_runner_run(&r));
    REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 2, one));
    din[0] = &dx;
    CHECK_ERR(qf_node_eval_grad(r.n, 15, in, out, dout, din, true, 0), QF_ERR_INVALID,
              "node 'bn1' (BatchNormalization): training needs more than 1 value per channel");
    qf_tensor_free(&dx);
    qf_node_runner_free(&r);
    x.dims[0] = 4;
    qf_tensor_free(&x);
    for (int i = 0; i < 4; i++) qf_tensor_free(&p[i]);
}

int main(void)
{
    RUN(test_bn_grad);
    RUN(test_bn_running_update);
    return qf_check_report();
}
