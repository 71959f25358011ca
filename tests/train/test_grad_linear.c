/* Backward kernels of the matrix products (src/ops/ref/linear.c: Gemm, MatMul,
 * linear) against central differences (qf_node_gradcheck): every transA /
 * transB, every shape of Gemm's C, 1-D and batched MatMul operands with
 * broadcast batch dims, weights as graph inputs and as constants. The loss
 * sum(dy * y) is bilinear in the operands, so the central difference is
 * exact but for float32 rounding: a step of 1e-2 keeps that below 1e-4. */
#include "train/grad_case.h"

#define DIMS(...) (int64_t[]){__VA_ARGS__}
#define NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define T(...) grad_case_tensor(NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__), 1.0f, 0.0f)

/* Gemm: A [M, K] (transA: [K, M]), B [K, N] (transB: [N, K]), alpha 0.7,
 * beta 1.3, C of every broadcastable shape or absent; B (and C) constants
 * in every other case. */
static void test_gemm(void)
{
    const int64_t M = 3, K = 5, N = 4;
    qf_tensor cs[7];
    const char *cname[7] = {"[M,N]", "[N]", "[1,N]", "[M,1]", "[1]", "[]", "none"};
    cs[0] = T(M, N);
    cs[1] = T(N);
    cs[2] = T(1, N);
    cs[3] = T(M, 1);
    cs[4] = T(1);
    cs[5] = grad_case_tensor(0, NULL, 1.0f, 0.0f);
    int k = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int ci = 0; ci < 7; ci++, k++) {
                qf_tensor a = ta ? T(K, M) : T(M, K), b = tb ? T(N, K) : T(K, N);
                grad_case c = {.op = QF_OP_GEMM, .nin = ci < 6 ? 3 : 2, .in = {&a, &b, ci < 6 ? &cs[ci] : NULL},
                               .consts = (k & 1) ? (1u << 1) | (1u << 2) : 0,
                               .int_names = {"transA", "transB"}, .int_vals = {ta, tb},
                               .float_names = {"alpha", "beta"}, .float_vals = {0.7f, 1.3f}};
                char what[128];
                snprintf(what, sizeof what, "Gemm transA=%d transB=%d C %s%s", ta, tb, cname[ci],
                         (k & 1) ? " (B, C constants)" : "");
                grad_case_check(&c, what);
                qf_tensor_free(&a);
                qf_tensor_free(&b);
            }
    /* beta 0: C is not read, its gradient is 0. */
    qf_tensor a = T(M, K), b = T(K, N);
    grad_case c = {.op = QF_OP_GEMM, .nin = 3, .in = {&a, &b, &cs[0]}, .float_names = {"beta"}, .float_vals = {0.0f}};
    grad_case_check(&c, "Gemm beta=0");
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    for (int i = 0; i < 6; i++) qf_tensor_free(&cs[i]);
}

/* linear: x [rows.., in] with W [out, in] and bias [out] constants (as
 * import's canonicalize makes them) or graph inputs, with and without bias. */
static void test_linear(void)
{
    qf_tensor x2 = T(3, 5), x3 = T(2, 3, 5), w = T(4, 5), b = T(4);
    const qf_tensor *xs[2] = {&x2, &x3};
    for (int xi = 0; xi < 2; xi++)
        for (int consts = 0; consts < 2; consts++)
            for (int bias = 0; bias < 2; bias++) {
                grad_case c = {.op = QF_OP_LINEAR, .nin = bias ? 3 : 2, .in = {xs[xi], &w, bias ? &b : NULL},
                               .consts = consts ? (1u << 1) | (1u << 2) : 0};
                char what[128];
                snprintf(what, sizeof what, "linear x rank %d%s%s", xi + 2, bias ? " + bias" : "",
                         consts ? " (W, b constants)" : "");
                grad_case_check(&c, what);
            }
    qf_tensor_free(&x2);
    qf_tensor_free(&x3);
    qf_tensor_free(&w);
    qf_tensor_free(&b);
}

static void mm(qf_tensor a, qf_tensor b, uint32_t consts, const char *what)
{
    grad_case c = {.op = QF_OP_MATMUL, .nin = 2, .in = {&a, &b}, .consts = consts};
    grad_case_check(&c, what);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
}

static void test_matmul(void)
{
    mm(T(3, 5), T(5, 4), 0, "MatMul [3,5] x [5,4]");
    mm(T(5), T(5, 4), 0, "MatMul [5] x [5,4]");
    mm(T(3, 5), T(5), 0, "MatMul [3,5] x [5]");
    mm(T(5), T(5), 0, "MatMul [5] x [5]");
    mm(T(5), T(2, 5, 4), 0, "MatMul [5] x [2,5,4]");
    mm(T(2, 3, 5), T(5), 0, "MatMul [2,3,5] x [5]");
    mm(T(2, 3, 5), T(5, 4), 1u << 1, "MatMul [2,3,5] x const [5,4]");
    mm(T(2, 3, 5), T(1, 5, 4), 0, "MatMul [2,3,5] x [1,5,4]");
    mm(T(3, 5), T(2, 5, 4), 0, "MatMul [3,5] x [2,5,4]");
    mm(T(1, 3, 5), T(2, 5, 4), 1u << 0, "MatMul const [1,3,5] x [2,5,4]");
    mm(T(2, 3, 5), T(2, 5, 4), 0, "MatMul [2,3,5] x [2,5,4]");
    mm(T(2, 1, 3, 5), T(4, 5, 2), 0, "MatMul [2,1,3,5] x [4,5,2]");
    mm(T(3, 1, 2, 5), T(1, 2, 5, 3), 0, "MatMul [3,1,2,5] x [1,2,5,3]");
}

int main(void)
{
    RUN(test_gemm);
    RUN(test_linear);
    RUN(test_matmul);
    return qf_check_report();
}
