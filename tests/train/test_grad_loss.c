/* The loss ops (src/ops/ref/loss.c): backward kernels against central
 * differences (qf_node_gradcheck), on odd shapes, every reduction, class
 * weights, ignore_index, the log_prob output; the bad-input paths (a label
 * out of range names the node and the sample; export refuses mse_loss). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/io.h"
#include "qfold/schema.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

#define CHECK_NEAR(got, want, tol) \
    CHECKF(fabs((double)(got) - (want)) <= (tol), "%s = %.9g, expected %.9g", #got, (double)(got), (double)(want))

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void) /* [0, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / (double)(1ull << 53);
}

static void fill(qf_tensor *t, double lo, double hi)
{
    float *p = t->data;
    for (int64_t i = 0, n = qf_tensor_numel(t); i < n; i++) p[i] = (float)(lo + (hi - lo) * urand());
}

/* Scores of `ndim` dims, labels in [0, C) with every third one set to
 * `ignore` (when >= -100 it is set on the node), optional weights. */
static void check_sce(int ndim, const int64_t *dims, const char *reduction, bool weights, int64_t ignore, int nout)
{
    qf_tensor x, y, w;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, ndim, dims));
    int64_t ydims[QF_MAX_DIMS];
    ydims[0] = dims[0];
    for (int i = 2; i < ndim; i++) ydims[i - 1] = dims[i];
    REQUIRE_OK(qf_tensor_init(&y, QF_DTYPE_I64, ndim - 1, ydims));
    REQUIRE_OK(qf_tensor_init(&w, QF_DTYPE_F32, 1, &dims[1]));
    fill(&x, -3.0, 3.0);
    fill(&w, 0.2, 2.0);
    int64_t *lab = y.data;
    for (int64_t i = 0, n = qf_tensor_numel(&y); i < n; i++)
        lab[i] = (ignore >= -100 && i % 3 == 1) ? ignore : (int64_t)(urand() * (double)dims[1]);
    const qf_tensor *in[] = {&x, &y, &w};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_SOFTMAX_CE_LOSS, "ce", weights ? 3 : 2, in, nout, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "reduction", reduction));
    if (ignore >= -100) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "ignore_index", ignore));
    CHECK_OK(qf_node_runner_run(&r));
    /* Smooth everywhere: a step of 1e-2 keeps the second-order error of the
     * central difference far below the tolerance. */
    qf_gradcheck_opts o = {.eps = 1e-2, .kink_factor = -1};
    CHECKF(qf_node_gradcheck(&r, 0, true, 3, &o, stdout), "SoftmaxCrossEntropyLoss rank %d %s%s ignore %lld, %d outputs",
           ndim, reduction, weights ? " weighted" : "", (long long)ignore, nout);
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
    qf_tensor_free(&y);
    qf_tensor_free(&w);
}

static void test_sce_grad(void)
{
    const int64_t d2[] = {5, 7}, d3[] = {4, 6, 3}, d4[] = {3, 4, 2, 3};
    check_sce(2, d2, "mean", false, -1000, 1);
    check_sce(2, d2, "mean", false, -1000, 2);
    check_sce(2, d2, "mean", true, 3, 1);
    check_sce(2, d2, "sum", true, -1000, 2);
    check_sce(2, d2, "none", true, -1, 1);
    check_sce(3, d3, "mean", true, 2, 2);
    check_sce(3, d3, "none", false, -1000, 2);
    check_sce(4, d4, "sum", false, 0, 1);
}

/* A label outside [0, C) that is not ignore_index names the node and the sample. */
static void test_sce_bad_label(void)
{
    int64_t xd[] = {4, 3}, yd[] = {4};
    qf_tensor x, y;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, xd));
    REQUIRE_OK(qf_tensor_init(&y, QF_DTYPE_I64, 1, yd));
    int64_t *lab = y.data;
    lab[0] = 0, lab[1] = 2, lab[2] = 3, lab[3] = 1;
    const qf_tensor *in[] = {&x, &y};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_SOFTMAX_CE_LOSS, "the_loss", 2, in, 1, 13));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_INVALID, "node 'the_loss' (SoftmaxCrossEntropyLoss): sample 2: label 3 outside [0, 3)");
    qf_node_runner_free(&r);

    lab[2] = -1; /* ignore_index -1 makes it fine, -2 is not */
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_SOFTMAX_CE_LOSS, "the_loss", 2, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "ignore_index", -1));
    CHECK_OK(qf_node_runner_run(&r));
    qf_node_runner_free(&r);
    lab[3] = -2;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_SOFTMAX_CE_LOSS, "the_loss", 2, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "ignore_index", -1));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_INVALID, "sample 3: label -2");
    qf_node_runner_free(&r);

    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_SOFTMAX_CE_LOSS, "the_loss", 2, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "reduction", "average"));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_INVALID, "reduction 'average'");
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
    qf_tensor_free(&y);
}

/* Hand-computed: scores [[0, ln 3]] label 1: softmax (1/4, 3/4), loss -ln(3/4);
 * with weights (2, 5): the mean is the same loss, the sum 5 times it. */
static void test_sce_values(void)
{
    int64_t xd[] = {1, 2}, yd[] = {1}, wd[] = {2};
    qf_tensor x, y, w;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, xd));
    REQUIRE_OK(qf_tensor_init(&y, QF_DTYPE_I64, 1, yd));
    REQUIRE_OK(qf_tensor_init(&w, QF_DTYPE_F32, 1, wd));
    ((float *)x.data)[1] = (float)log(3.0);
    ((int64_t *)y.data)[0] = 1;
    ((float *)w.data)[0] = 2, ((float *)w.data)[1] = 5;
    const qf_tensor *in[] = {&x, &y, &w};
    const char *red[] = {"mean", "sum"};
    for (int k = 0; k < 2; k++) {
        qf_node_runner r;
        /* opset 11: the trainer appends the loss to graphs of any imported opset */
        REQUIRE_OK(qf_node_runner_init(&r, QF_OP_SOFTMAX_CE_LOSS, "ce", 3, in, 2, 11));
        REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "reduction", red[k]));
        CHECK_OK(qf_node_runner_run(&r));
        double want = -log(0.75) * (k ? 5.0 : 1.0);
        CHECK_NEAR(((float *)r.out[0].data)[0], want, 1e-6);
        CHECK_NEAR(((float *)r.out[1].data)[0], log(0.25), 1e-6);
        qf_node_runner_free(&r);
    }
    qf_tensor_free(&x);
    qf_tensor_free(&y);
    qf_tensor_free(&w);
}

static void check_mse(const char *reduction)
{
    int64_t d[] = {3, 5, 2};
    qf_tensor p, t;
    REQUIRE_OK(qf_tensor_init(&p, QF_DTYPE_F32, 3, d));
    REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_F32, 3, d));
    fill(&p, -2.0, 2.0);
    fill(&t, -2.0, 2.0);
    const qf_tensor *in[] = {&p, &t};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_MSE_LOSS, "mse", 2, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "reduction", reduction));
    CHECK_OK(qf_node_runner_run(&r));
    double s = 0.0;
    for (int i = 0; i < 30; i++) {
        double e = (double)((float *)p.data)[i] - ((float *)t.data)[i];
        s += e * e;
    }
    CHECK_NEAR(((float *)r.out[0].data)[0], strcmp(reduction, "mean") ? s : s / 30.0, 1e-5);
    qf_gradcheck_opts o = {.eps = 1e-2, .kink_factor = -1};
    CHECKF(qf_node_gradcheck(&r, 0, true, 5, &o, stdout), "mse_loss %s", reduction);
    qf_node_runner_free(&r);
    qf_tensor_free(&p);
    qf_tensor_free(&t);
}

static void test_mse(void)
{
    check_mse("mean");
    check_mse("sum");
}

/* mse_loss is an internal op without an ONNX form: export says so. */
static void test_mse_not_exported(void)
{
    int64_t d[] = {2, 3};
    qf_tensor p, t;
    REQUIRE_OK(qf_tensor_init(&p, QF_DTYPE_F32, 2, d));
    REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_F32, 2, d));
    const qf_tensor *in[] = {&p, &t};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_MSE_LOSS, "the_mse", 2, in, 1, 13));
    CHECK_OK(qf_node_runner_run(&r));
    CHECK_ERR(qf_onnx_save(r.g, "test_grad_loss_refused.onnx"), QF_ERR_UNSUPPORTED,
              "node 'the_mse': internal op mse_loss has no ONNX form");
    FILE *f = fopen("test_grad_loss_refused.onnx", "rb");
    CHECK(f == NULL);
    if (f) fclose(f);
    qf_node_runner_free(&r);
    qf_tensor_free(&p);
    qf_tensor_free(&t);
}

int main(void)
{
    RUN(test_sce_grad);
    RUN(test_sce_bad_label);
    RUN(test_sce_values);
    RUN(test_mse);
    RUN(test_mse_not_exported);
    return qf_check_report();
}
