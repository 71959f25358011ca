/* Backward kernels of PRelu (src/ops/ref/activation.c), Max, Min and Abs
 * (src/ops/ref/elementwise.c) against central differences
 * (qf_node_gradcheck): PRelu with a per-channel [C, 1, 1] slope, one
 * shared slope and a slope along the last axis (X and the slope both
 * checked); Max / Min of two inputs broadcast either way and of three;
 * Abs. Random inputs (no ties, no zeros within a step: the kink guard
 * reports a central difference across a kink); all piecewise linear, so the
 * difference is exact but for float32 rounding (step 1e-2). The kinks
 * themselves (ties, x = 0) are checked against PyTorch in
 * grad_torch_newops.py. */
#include "train/grad_case.h"

static void test_prelu(void)
{
    const int64_t xd[4] = {2, 3, 4, 5};
    const struct {
        int ndim;
        int64_t dims[3];
        const char *what;
    } slopes[] = {{3, {3, 1, 1}, "PRelu per channel"},
                  {1, {1}, "PRelu one slope"},
                  {1, {5}, "PRelu last axis"}};
    for (size_t i = 0; i < sizeof slopes / sizeof slopes[0]; i++) {
        qf_tensor x = grad_case_tensor(4, xd, 1.0f, 0.05f);
        qf_tensor s = grad_case_tensor(slopes[i].ndim, slopes[i].dims, 0.5f, 0.0f);
        grad_case c = {
            .op = QF_OP_PRELU, .nin = 2, .in = {&x, &s}, .consts = i == 1 ? 0u : 1u << 1};
        grad_case_check(&c, slopes[i].what);
        qf_tensor_free(&x);
        qf_tensor_free(&s);
    }
}

static void test_extreme(void)
{
    const int64_t ad[3] = {2, 3, 4}, cd[2] = {3, 1};
    const qf_op ops[2] = {QF_OP_MAX, QF_OP_MIN};
    for (int o = 0; o < 2; o++) {
        qf_tensor a = grad_case_tensor(3, ad, 1.0f, 0.0f), b = grad_case_tensor(3, ad, 1.0f, 0.0f);
        qf_tensor c3 = grad_case_tensor(2, cd, 1.0f, 0.0f);
        grad_case two = {.op = ops[o], .nin = 2, .in = {&a, &c3}};
        grad_case_check(&two, o ? "Min [2,3,4] [3,1]" : "Max [2,3,4] [3,1]");
        grad_case first = {.op = ops[o], .nin = 2, .in = {&c3, &a}, .consts = 1u << 0};
        grad_case_check(&first, o ? "Min const [3,1] [2,3,4]" : "Max const [3,1] [2,3,4]");
        grad_case three = {.op = ops[o], .nin = 3, .in = {&a, &b, &c3}};
        grad_case_check(&three, o ? "Min of three" : "Max of three");
        grad_case one = {.op = ops[o], .nin = 1, .in = {&a}};
        grad_case_check(&one, o ? "Min of one" : "Max of one");
        qf_tensor_free(&a);
        qf_tensor_free(&b);
        qf_tensor_free(&c3);
    }
}

static void test_abs(void)
{
    const int64_t xd[3] = {3, 4, 5};
    qf_tensor x = grad_case_tensor(3, xd, 1.0f, 0.05f);
    grad_case c = {.op = QF_OP_ABS, .nin = 1, .in = {&x}};
    grad_case_check(&c, "Abs");
    qf_tensor_free(&x);
}

int main(void)
{
    RUN(test_prelu);
    RUN(test_extreme);
    RUN(test_abs);
    return qf_check_report();
}
