/* The backward kernels of QAT's simulated BatchNorm fusion (src/ops/qat/qat_bn.c,
 * src/ops/qat/qat_bn_exact.c) against central differences: qat_bn_weight (axis 0
 * and 1, grouped), qat_bn_output (with and without bias), qat_bn_exact in
 * training (batch statistics of Y0: d Y0 through the mean and the variance),
 * frozen (qfold_frozen) and inference, ranks 2 and 4, with and without b,
 * a channel with gamma = 0. qat_bn_stats: the running statistics after a
 * training forward against the formula worked out here (Y0 + b, the
 * unbiased variance, momentum), none in inference or frozen, its output the
 * updated variance, zeros as its gradient; bad input named. */
#include <math.h>
#include <stdio.h>

#include "qfold/exec.h"
#include "qfold/schema.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void) /* [0, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / (double)(1ull << 53);
}

static void fill(qf_tensor *t, double lo, double hi)
{
    for (int64_t i = 0, n = qf_tensor_numel(t); i < n; i++) ((float *)t->data)[i] = (float)(lo + (hi - lo) * urand());
}

/* Smooth in every input: a step of 1e-2 keeps the central difference's
 * error well under the 1e-2 relative tolerance. */
static const qf_gradcheck_opts smooth = {.eps = 1e-2, .kink_factor = -1};

static void check_weight(int ndim, const int64_t *wd, int axis, int group)
{
    const int64_t ch = axis == 0 ? wd[0] : wd[1] * group;
    qf_tensor w, gamma, var;
    REQUIRE_OK(qf_tensor_init(&w, QF_DTYPE_F32, ndim, wd));
    REQUIRE_OK(qf_tensor_init(&gamma, QF_DTYPE_F32, 1, &ch));
    REQUIRE_OK(qf_tensor_init(&var, QF_DTYPE_F32, 1, &ch));
    fill(&w, -1, 1);
    fill(&gamma, 0.5, 1.5);
    fill(&var, 0.5, 2.0);
    const qf_tensor *in[] = {&w, &gamma, &var};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_WEIGHT, "qw", 3, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", axis));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "group", group));
    CHECK_OK(qf_node_runner_run(&r));
    CHECKF(qf_node_gradcheck(&r, 3u, true, 7, &smooth, stdout), "qat_bn_weight axis %d group %d", axis, group);
    qf_node_runner_free(&r);
    qf_tensor_free(&w);
    qf_tensor_free(&gamma);
    qf_tensor_free(&var);
}

static void check_output(int ndim, const int64_t *yd, bool bias)
{
    qf_tensor y, gamma, var, b;
    REQUIRE_OK(qf_tensor_init(&y, QF_DTYPE_F32, ndim, yd));
    REQUIRE_OK(qf_tensor_init(&gamma, QF_DTYPE_F32, 1, &yd[1]));
    REQUIRE_OK(qf_tensor_init(&var, QF_DTYPE_F32, 1, &yd[1]));
    REQUIRE_OK(qf_tensor_init(&b, QF_DTYPE_F32, 1, &yd[1]));
    fill(&y, -2, 2);
    fill(&gamma, 0.5, 1.5);
    fill(&var, 0.5, 2.0);
    fill(&b, -0.5, 0.5);
    const qf_tensor *in[] = {&y, &gamma, &var, &b};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_OUTPUT, "qo", bias ? 4 : 3, in, 1, 13));
    CHECK_OK(qf_node_runner_run(&r));
    CHECKF(qf_node_gradcheck(&r, bias ? 11u : 3u, true, 8, &smooth, stdout), "qat_bn_output bias %d", bias);
    qf_node_runner_free(&r);
    qf_tensor_free(&y);
    qf_tensor_free(&gamma);
    qf_tensor_free(&var);
    qf_tensor_free(&b);
}

enum { MODE_TRAIN, MODE_FROZEN, MODE_INFER };

/* qat_bn_exact(Y, gamma, beta, mean, var', Y0[, b]): every float input
 * checked (mean and var' too: the op's own derivatives; the graph drops
 * them). */
static void check_exact(int ndim, const int64_t *yd, bool bias, int mode, bool dead)
{
    static const char *const modes[] = {"training", "frozen", "inference"};
    const int64_t c = yd[1];
    qf_tensor y, y0, p[5];
    REQUIRE_OK(qf_tensor_init(&y, QF_DTYPE_F32, ndim, yd));
    REQUIRE_OK(qf_tensor_init(&y0, QF_DTYPE_F32, ndim, yd));
    for (int i = 0; i < 5; i++) REQUIRE_OK(qf_tensor_init(&p[i], QF_DTYPE_F32, 1, &c));
    fill(&y, -2, 2);
    fill(&y0, -1.5, 2.5);
    fill(&p[0], 0.5, 1.5);   /* gamma */
    fill(&p[1], -0.5, 0.5);  /* beta */
    fill(&p[2], -0.3, 0.3);  /* running mean */
    fill(&p[3], 0.5, 2.0);   /* var' */
    fill(&p[4], -0.5, 0.5);  /* b */
    if (dead) ((float *)p[0].data)[0] = 0.0f;
    const qf_tensor *in[] = {&y, &p[0], &p[1], &p[2], &p[3], &y0, &p[4]};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_EXACT, "qx", bias ? 7 : 6, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "epsilon", 1e-3f));
    if (mode == MODE_FROZEN) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "qfold_frozen", 1));
    CHECK_OK(qf_node_runner_run(&r));
    CHECKF(qf_node_gradcheck(&r, 0, mode != MODE_INFER, 9, &smooth, stdout), "qat_bn_exact rank %d bias %d %s%s",
           ndim, bias, modes[mode], dead ? " gamma 0" : "");
    qf_node_runner_free(&r);
    qf_tensor_free(&y);
    qf_tensor_free(&y0);
    for (int i = 0; i < 5; i++) qf_tensor_free(&p[i]);
}

static void test_qat_grads(void)
{
    const int64_t w4[] = {5, 3, 2, 2}, w2[] = {4, 6}, wt[] = {4, 3, 2, 3};
    check_weight(4, w4, 0, 1);
    check_weight(2, w2, 0, 1);
    check_weight(4, wt, 1, 1);
    check_weight(4, wt, 1, 2);
    const int64_t y4[] = {2, 3, 3, 4}, y2[] = {6, 5};
    check_output(4, y4, true);
    check_output(2, y2, false);
    for (int mode = MODE_TRAIN; mode <= MODE_INFER; mode++) {
        check_exact(4, y4, true, mode, false);
        check_exact(2, y2, false, mode, false);
        check_exact(2, y2, true, mode, true);
    }
}

/* qat_bn_stats on Y0 [4, 2] (count 4), b = (1, -2), momentum 0.75. */
static void test_stats_update(void)
{
    int64_t yd[] = {4, 2}, cd[] = {2};
    qf_tensor y0, rm, rv, b;
    REQUIRE_OK(qf_tensor_init(&y0, QF_DTYPE_F32, 2, yd));
    REQUIRE_OK(qf_tensor_init(&rm, QF_DTYPE_F32, 1, cd));
    REQUIRE_OK(qf_tensor_init(&rv, QF_DTYPE_F32, 1, cd));
    REQUIRE_OK(qf_tensor_init(&b, QF_DTYPE_F32, 1, cd));
    const float yv[] = {1, 10, 2, 20, 3, 30, 6, 40};
    for (int i = 0; i < 8; i++) ((float *)y0.data)[i] = yv[i];
    float *m = rm.data, *v = rv.data, *bb = b.data;
    m[0] = 0.5f, m[1] = -1.0f, v[0] = 2.0f, v[1] = 3.0f, bb[0] = 1.0f, bb[1] = -2.0f;
    const qf_tensor *in[] = {&y0, &rm, &rv, &b};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_STATS, "qs", 4, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "momentum", 0.75f));
    REQUIRE_OK(qf_node_runner_run(&r)); /* inference: nothing changes, var' = var */
    const float *out = r.out[0].data;
    CHECK(m[0] == 0.5f && v[1] == 3.0f && out[0] == 2.0f && out[1] == 3.0f);
    qf_tensor dy0, dv;
    REQUIRE_OK(qf_tensor_init(&dy0, QF_DTYPE_F32, 2, yd));
    REQUIRE_OK(qf_tensor_init(&dv, QF_DTYPE_F32, 1, cd));
    fill(&dv, -1, 1);
    fill(&dy0, 5, 6);
    qf_tensor *outs[] = {&r.out[0]}, *din[] = {&dy0, NULL, NULL, NULL};
    const qf_tensor *dout[] = {&dv};
    REQUIRE_OK(qf_node_eval_grad(r.n, 13, in, outs, dout, din, true, 0));
    /* Y0 + b: channel 0 {2, 3, 4, 7}: mean 4, unbiased var 14/3; channel 1
     * {8, 18, 28, 38}: mean 23, unbiased var 500/3. */
    CHECKF(fabs(m[0] - (0.5 * 0.75 + 4.0 * 0.25)) < 1e-6, "running mean 0: %g", m[0]);
    CHECKF(fabs(m[1] - (-1.0 * 0.75 + 23.0 * 0.25)) < 1e-6, "running mean 1: %g", m[1]);
    CHECKF(fabs(v[0] - (2.0 * 0.75 + 14.0 / 3.0 * 0.25)) < 1e-6, "running var 0: %g", v[0]);
    CHECKF(fabs(v[1] - (3.0 * 0.75 + 500.0 / 3.0 * 0.25)) < 1e-4, "running var 1: %g", v[1]);
    CHECKF(out[0] == v[0] && out[1] == v[1], "var' is not the updated running variance");
    for (int i = 0; i < 8; i++) CHECKF(((float *)dy0.data)[i] == 0.0f, "d Y0[%d] = %g", i, ((float *)dy0.data)[i]);
    qf_node_runner_free(&r);

    /* Frozen: no update in a training forward either. */
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_STATS, "qs_frozen", 4, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "qfold_frozen", 1));
    REQUIRE_OK(qf_node_runner_run(&r));
    const float m0 = m[0], v0 = v[0];
    outs[0] = &r.out[0];
    REQUIRE_OK(qf_node_eval_grad(r.n, 13, in, outs, dout, din, true, 0));
    CHECK(m[0] == m0 && v[0] == v0);
    qf_node_runner_free(&r);

    /* Bad input: a momentum outside [0, 1], one value per channel. */
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_STATS, "qs_bad", 4, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "momentum", 1.5f));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_INVALID, "node 'qs_bad' (qat_bn_stats): momentum 1.5 is not in [0, 1]");
    qf_node_runner_free(&r);
    y0.dims[0] = 1;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QAT_BN_STATS, "qs_one", 4, in, 1, 13));
    REQUIRE_OK(qf_node_runner_run(&r));
    outs[0] = &r.out[0];
    din[0] = NULL;
    CHECK_ERR(qf_node_eval_grad(r.n, 13, in, outs, dout, din, true, 0), QF_ERR_INVALID,
              "node 'qs_one' (qat_bn_stats): training needs more than 1 value per channel");
    qf_node_runner_free(&r);
    y0.dims[0] = 4;
    qf_tensor_free(&dy0);
    qf_tensor_free(&dv);
    qf_tensor_free(&y0);
    qf_tensor_free(&rm);
    qf_tensor_free(&rv);
    qf_tensor_free(&b);
}

int main(void)
{
    RUN(test_qat_grads);
    RUN(test_stats_update);
    return qf_check_report();
}
