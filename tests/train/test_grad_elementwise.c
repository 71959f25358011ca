/* Backward kernels of Add, Sub, Mul, Div (src/ops/ref/elementwise.c) against
 * central differences (qf_node_gradcheck), over every broadcasting pattern:
 * a trailing vector, either operand the broadcast one, both broadcast
 * ([2,1,4] * [3,1]), scalars ([] and [1]), same shapes, interleaved
 * size-1 dims; the second operand a constant in every other case.
 * Add / Sub / Mul are linear in each operand: the central difference is
 * exact but for float32 rounding (step 1e-2). Div's divisor is kept in
 * +-[1, 2): the third derivative of 1/b stays below 6, and a step of 1e-3
 * puts the truncation error near 1e-6 and the one-sided slopes' gap
 * (|f''| h <= 2e-3 |dy|) under the kink guard's threshold. */
#include "train/grad_case.h"

typedef struct shape {
    int ndim;
    int64_t dims[4];
} shape;

static const struct {
    shape a, b;
} pairs[] = {
    {{3, {2, 3, 4}}, {1, {4}}},
    {{1, {4}}, {3, {2, 3, 4}}},
    {{3, {2, 1, 4}}, {2, {3, 1}}},
    {{3, {2, 3, 4}}, {0, {0}}},
    {{0, {0}}, {3, {2, 3, 4}}},
    {{3, {2, 3, 4}}, {1, {1}}},
    {{1, {1}}, {2, {3, 5}}},
    {{3, {2, 3, 5}}, {3, {2, 3, 5}}},
    {{4, {2, 3, 1, 5}}, {4, {1, 3, 4, 1}}},
    {{4, {1, 3, 1, 1}}, {4, {2, 3, 5, 5}}},
    {{2, {3, 1}}, {2, {1, 4}}},
};

static void test_binary(void)
{
    const qf_op ops[] = {QF_OP_ADD, QF_OP_SUB, QF_OP_MUL, QF_OP_DIV};
    const char *names[] = {"Add", "Sub", "Mul", "Div"};
    int k = 0;
    for (int o = 0; o < 4; o++)
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++, k++) {
            const bool div = ops[o] == QF_OP_DIV;
            qf_tensor a = grad_case_tensor(pairs[p].a.ndim, pairs[p].a.dims, 1.0f, 0.0f);
            qf_tensor b = grad_case_tensor(pairs[p].b.ndim, pairs[p].b.dims, div ? 1.0f : 1.0f, div ? 1.0f : 0.0f);
            grad_case c = {.op = ops[o], .nin = 2, .in = {&a, &b}, .consts = (k & 1) ? 1u << 1 : 0,
                           .eps = div ? 1e-3 : 1e-2};
            char what[160], sa[64], sb[64];
            snprintf(what, sizeof what, "%s %s %s%s", names[o], qf_shape_str(a.ndim, a.dims, sa, sizeof sa),
                     qf_shape_str(b.ndim, b.dims, sb, sizeof sb), (k & 1) ? " (B constant)" : "");
            grad_case_check(&c, what);
            qf_tensor_free(&a);
            qf_tensor_free(&b);
        }
}

int main(void)
{
    RUN(test_binary);
    return qf_check_report();
}
