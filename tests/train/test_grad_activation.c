/* Backward kernels of the activations (src/ops/activation.c) against central
 * differences (tests/tools/qf_gradcheck.h through qf_node_gradcheck), on odd
 * shapes with values on both sides of every kink. */
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

/* One unary op on a [2, 3, 5, 7] input in [-scale, scale). */
static void check_unary(qf_op op, float scale, const qf_gradcheck_opts *o)
{
    int64_t dims[] = {2, 3, 5, 7};
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, dims));
    fill(&x, scale);
    const qf_tensor *in[] = {&x};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, op, "act", 1, in, 1, 13));
    CHECK_OK(qf_node_runner_run(&r));
    CHECKF(qf_node_gradcheck(&r, 0, false, 7, o, stdout), "%s backward", qf_op_label(r.n));
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
}

static void test_relu(void)
{
    qf_gradcheck_opts o = {.eps = 1e-3};
    check_unary(QF_OP_RELU, 2.0f, &o);
}

int main(void)
{
    RUN(test_relu);
    return qf_check_report();
}
