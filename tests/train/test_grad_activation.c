/* Backward kernels of the activations (src/ops/ref/activation.c) against central
 * differences (tests/tools/qf_gradcheck.h through qf_node_gradcheck), on odd
 * shapes with values on both sides of every kink. */
#include <string.h>

#include "tools/qf_check.h"
#include "qfold/schema.h"
#include "tools/qf_node_run.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

static void fill(qf_tensor *t, float scale)
{
    float *p = t->data;
    for (int64_t i = 0, n = qf_tensor_numel(t); i < n; i++) p[i] = scale * rnd();
}

/* Float attributes of a case (name NULL: none). */
typedef struct act_attr {
    const char *name;
    float v;
} act_attr;

/* One unary op on an input of shape dims in [-scale, scale), opset 13. */
static void check_unary_shape(qf_op op, int ndim, const int64_t *dims, float scale, const act_attr *attrs,
                              int64_t opset, const qf_gradcheck_opts *o)
{
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, ndim, dims));
    fill(&x, scale);
    const qf_tensor *in[] = {&x};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, op, "act", 1, in, 1, opset));
    for (int i = 0; attrs && attrs[i].name; i++) {
        if (!strcmp(attrs[i].name, "axis")) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", (int64_t)attrs[i].v));
        else REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, attrs[i].name, attrs[i].v));
    }
    CHECK_OK(qf_node_runner_run(&r));
    CHECKF(qf_node_gradcheck(&r, 0, false, 7, o, stdout), "%s backward", qf_op_label(r.n));
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
}

/* One unary op on a [2, 3, 5, 7] input in [-scale, scale). */
static void check_unary(qf_op op, float scale, const qf_gradcheck_opts *o)
{
    int64_t dims[] = {2, 3, 5, 7};
    check_unary_shape(op, 4, dims, scale, NULL, 13, o);
}

static void test_relu(void)
{
    qf_gradcheck_opts o = {.eps = 1e-3};
    check_unary(QF_OP_RELU, 2.0f, &o);
}

/* relu6 over [-8, 8): both kinks (0, 6) inside the range. */
static void test_relu6(void)
{
    qf_gradcheck_opts o = {.eps = 1e-3};
    check_unary(QF_OP_RELU6, 8.0f, &o);
}

/* Clip with min / max as inputs (opset 11+, scalars), each a graph input so
 * that d min and d max are checked too; also min only, and min > max (max
 * everywhere: dx = 0, d max = sum dy). */
static void check_clip(float lo, float hi, bool with_lo, bool with_hi)
{
    int64_t dims[] = {3, 4, 5};
    qf_tensor x, tlo, thi;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 3, dims));
    REQUIRE_OK(qf_tensor_init(&tlo, QF_DTYPE_F32, 0, NULL));
    REQUIRE_OK(qf_tensor_init(&thi, QF_DTYPE_F32, 0, NULL));
    fill(&x, 3.0f);
    *(float *)tlo.data = lo;
    *(float *)thi.data = hi;
    const qf_tensor *in[] = {&x, with_lo ? &tlo : NULL, with_hi ? &thi : NULL};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_CLIP, "clip", with_hi ? 3 : 2, in, 1, 13));
    CHECK_OK(qf_node_runner_run(&r));
    qf_gradcheck_opts o = {.eps = 1e-3};
    CHECKF(qf_node_gradcheck(&r, 0, false, 11, &o, stdout), "Clip(%g, %g) backward", lo, hi);
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
    qf_tensor_free(&tlo);
    qf_tensor_free(&thi);
}

static void test_clip(void)
{
    check_clip(-1.0f, 2.0f, true, true);
    check_clip(-0.5f, 0.0f, true, false);
    check_clip(0.0f, 1.5f, false, true);
    check_clip(1.0f, -1.0f, true, true);
}

static void test_leaky_relu(void)
{
    qf_gradcheck_opts o = {.eps = 1e-3};
    int64_t dims[] = {4, 9};
    act_attr a[] = {{"alpha", 0.15f}, {NULL, 0}};
    check_unary(QF_OP_LEAKY_RELU, 2.0f, &o);
    check_unary_shape(QF_OP_LEAKY_RELU, 2, dims, 2.0f, a, 13, &o);
}

/* Smooth: the step is limited by the curvature (|f''| h below the
 * tolerance) and by float32 rounding of y (6e-8 |y| / h): 1e-2 keeps both
 * near 1e-4. */
static void test_sigmoid_tanh(void)
{
    qf_gradcheck_opts o = {.eps = 1e-2};
    check_unary(QF_OP_SIGMOID, 4.0f, &o);
    check_unary(QF_OP_TANH, 3.0f, &o);
}

/* Exp on [-3, 3); Log on [0.5, 3.5) (its derivative 1 / x stays moderate). */
static void test_exp_log(void)
{
    qf_gradcheck_opts o = {.eps = 1e-2};
    check_unary(QF_OP_EXP, 3.0f, &o);
    int64_t dims[] = {2, 3, 5, 7};
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, dims));
    fill(&x, 1.5f);
    float *p = x.data;
    for (int64_t i = 0; i < qf_tensor_numel(&x); i++) p[i] += 2.0f;
    const qf_tensor *in[] = {&x};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_LOG, "log", 1, in, 1, 13));
    CHECK_OK(qf_node_runner_run(&r));
    CHECKF(qf_node_gradcheck(&r, 0, false, 7, &o, stdout), "Log backward");
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
}

static void test_hard_sigmoid_swish(void)
{
    qf_gradcheck_opts o = {.eps = 1e-3};
    int64_t dims[] = {3, 11};
    act_attr torch_like[] = {{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}, {NULL, 0}};
    act_attr other[] = {{"alpha", -0.3f}, {"beta", 0.4f}, {NULL, 0}};
    check_unary(QF_OP_HARD_SIGMOID, 6.0f, &o);
    check_unary_shape(QF_OP_HARD_SIGMOID, 2, dims, 5.0f, torch_like, 13, &o);
    check_unary_shape(QF_OP_HARD_SIGMOID, 2, dims, 5.0f, other, 13, &o);
    check_unary(QF_OP_HARD_SWISH, 5.0f, &o);
}

/* Softmax along every axis of an odd shape, per-axis (opset 13) and
 * flattened at the axis (opset 11). */
static void test_softmax(void)
{
    qf_gradcheck_opts o = {.eps = 1e-2};
    int64_t dims[] = {2, 3, 4, 5};
    for (int axis = -1; axis < 4; axis++) {
        act_attr a[] = {{"axis", (float)axis}, {NULL, 0}};
        check_unary_shape(QF_OP_SOFTMAX, 4, dims, 3.0f, a, 13, &o);
        check_unary_shape(QF_OP_SOFTMAX, 4, dims, 3.0f, a, 11, &o);
    }
    check_unary_shape(QF_OP_SOFTMAX, 4, dims, 3.0f, NULL, 11, &o); /* default axis 1 */
    check_unary_shape(QF_OP_SOFTMAX, 4, dims, 3.0f, NULL, 13, &o); /* default axis -1 */
}

int main(void)
{
    RUN(test_relu);
    RUN(test_relu6);
    RUN(test_clip);
    RUN(test_leaky_relu);
    RUN(test_sigmoid_tanh);
    RUN(test_exp_log);
    RUN(test_hard_sigmoid_swish);
    RUN(test_softmax);
    return qf_check_report();
}
