/* Backward kernels of the pools (src/ops/ref/pool.c: MaxPool, AveragePool,
 * GlobalAveragePool, ReduceMean) against central differences
 * (tests/tools/qf_gradcheck.h through qf_node_gradcheck), on odd shapes with
 * every attribute combination: 1-D / 2-D / 3-D, strides, pads, dilations,
 * ceil_mode, count_include_pad, axes as attribute and as input, keepdims,
 * noop_with_empty_axes.
 *
 * Steps: MaxPool's output is piecewise linear in X (a kink where two taps of
 * a window swap places): eps 1e-3 on values in [-1, 1) keeps almost every
 * element away from a swap, and the kink guard skips the rest. The others
 * are linear in X: the central difference is exact up to float rounding of
 * the sums, which eps 1e-2 keeps far below the tolerance (1e-2 relative,
 * 1e-3 absolute). */
#include <math.h>
#include <stdio.h>

#include "grad_node.h"

static void pool_case(qf_op op, int rank, const int64_t *dims, const int64_t *k, const int64_t *s,
                      const int64_t *pads, const int64_t *dil, int ceil, int include_pad)
{
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, rank + 2, dims));
    grad_fill(&x, 1.0f);
    grad_slot sl[] = {GS_IN(&x)};
    qf_node_runner r;
    grad_node(&r, op, 13, 1, sl, 1);
    REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "kernel_shape", k, rank));
    if (s) REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "strides", s, rank));
    if (pads) REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "pads", pads, 2 * rank));
    if (dil) REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "dilations", dil, rank));
    if (ceil) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "ceil_mode", 1));
    if (include_pad) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "count_include_pad", 1));
    char what[160];
    snprintf(what, sizeof what, "%s %d-D k%lld s%lld p%lld d%lld ceil %d include_pad %d", qf_op_label(r.n), rank,
             (long long)k[0], (long long)(s ? s[0] : 1), (long long)(pads ? pads[0] : 0),
             (long long)(dil ? dil[0] : 1), ceil, include_pad);
    qf_gradcheck_opts o = {.eps = op == QF_OP_MAX_POOL ? 1e-3 : 1e-2};
    grad_run_check(&r, 0, false, &o, what);
    qf_tensor_free(&x);
}

static void test_max_pool(void)
{
    const int64_t d1[] = {2, 3, 11}, d2[] = {2, 3, 7, 9}, d3[] = {1, 2, 5, 6, 7};
    /* 1-D: stride, pads, dilation, ceil_mode */
    pool_case(QF_OP_MAX_POOL, 1, d1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){1, 1}, NULL, 0, 0);
    pool_case(QF_OP_MAX_POOL, 1, d1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){1, 0}, (int64_t[]){2}, 1, 0);
    /* 2-D: overlapping windows, uneven pads, dilation, ceil_mode, non-square */
    pool_case(QF_OP_MAX_POOL, 2, d2, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1, 1, 1}, NULL, 0, 0);
    pool_case(QF_OP_MAX_POOL, 2, d2, (int64_t[]){2, 3}, (int64_t[]){2, 1}, (int64_t[]){0, 1, 1, 0}, NULL, 1, 0);
    pool_case(QF_OP_MAX_POOL, 2, d2, (int64_t[]){2, 2}, (int64_t[]){1, 2}, (int64_t[]){1, 0, 0, 1},
              (int64_t[]){2, 3}, 1, 0);
    pool_case(QF_OP_MAX_POOL, 2, d2, (int64_t[]){3, 2}, (int64_t[]){3, 3}, NULL, NULL, 1, 0);
    /* 3-D */
    pool_case(QF_OP_MAX_POOL, 3, d3, (int64_t[]){2, 3, 2}, (int64_t[]){2, 2, 3}, (int64_t[]){1, 1, 0, 0, 1, 1},
              NULL, 1, 0);
    pool_case(QF_OP_MAX_POOL, 3, d3, (int64_t[]){2, 2, 2}, (int64_t[]){1, 2, 2}, NULL, (int64_t[]){2, 1, 2}, 0, 0);
}

/* auto_pad SAME_UPPER / SAME_LOWER: the geometry comes from the input size. */
static void test_auto_pad(void)
{
    const int64_t dims[] = {2, 3, 7, 8};
    const char *modes[] = {"SAME_UPPER", "SAME_LOWER"};
    qf_op ops[] = {QF_OP_MAX_POOL, QF_OP_AVG_POOL};
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 2; k++) {
            qf_tensor x;
            REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, dims));
            grad_fill(&x, 1.0f);
            grad_slot sl[] = {GS_IN(&x)};
            qf_node_runner r;
            grad_node(&r, ops[k], 13, 1, sl, 1);
            REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "kernel_shape", (int64_t[]){3, 2}, 2));
            REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "strides", (int64_t[]){2, 3}, 2));
            REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "auto_pad", modes[m]));
            if (k == 1) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "count_include_pad", 1));
            char what[64];
            snprintf(what, sizeof what, "%s auto_pad %s", qf_op_label(r.n), modes[m]);
            qf_gradcheck_opts o = {.eps = k == 0 ? 1e-3 : 1e-2};
            grad_run_check(&r, 0, false, &o, what);
            qf_tensor_free(&x);
        }
}

static void test_avg_pool(void)
{
    const int64_t d1[] = {2, 3, 11}, d2[] = {2, 3, 7, 9}, d3[] = {1, 2, 5, 6, 7};
    for (int inc = 0; inc <= 1; inc++) {
        pool_case(QF_OP_AVG_POOL, 1, d1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){1, 1}, NULL, 0, inc);
        pool_case(QF_OP_AVG_POOL, 1, d1, (int64_t[]){4}, (int64_t[]){3}, (int64_t[]){2, 1}, NULL, 1, inc);
        pool_case(QF_OP_AVG_POOL, 2, d2, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1, 1, 1}, NULL, 0,
                  inc);
        pool_case(QF_OP_AVG_POOL, 2, d2, (int64_t[]){2, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 0, 0, 1}, NULL, 1,
                  inc);
        pool_case(QF_OP_AVG_POOL, 2, d2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, NULL, NULL, 1, inc);
        pool_case(QF_OP_AVG_POOL, 3, d3, (int64_t[]){2, 3, 2}, (int64_t[]){2, 2, 3},
                  (int64_t[]){1, 1, 0, 0, 1, 1}, NULL, 1, inc);
    }
}

static void test_global_avg_pool(void)
{
    const int64_t shapes[][5] = {{2, 3, 7}, {2, 3, 5, 7}, {1, 2, 3, 4, 5}};
    for (int i = 0; i < 3; i++) {
        qf_tensor x;
        REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 3 + i, shapes[i]));
        grad_fill(&x, 1.0f);
        grad_slot sl[] = {GS_IN(&x)};
        qf_node_runner r;
        grad_node(&r, QF_OP_GLOBAL_AVG_POOL, 13, 1, sl, 1);
        char what[64];
        snprintf(what, sizeof what, "GlobalAveragePool rank %d", 3 + i);
        qf_gradcheck_opts o = {.eps = 1e-2};
        grad_run_check(&r, 0, false, &o, what);
        qf_tensor_free(&x);
    }
}

/* ReduceMean / ReduceSum / ReduceMax over `axes` (count -1: none given), as
 * attribute (opset 13; ReduceSum 11) or as the second input (opset 18;
 * ReduceSum 13). ReduceMax's random input has no ties (exact ties:
 * test_reduce_max_ties). */
static void reduce_case(qf_op op, const int64_t *axes, int count, int keep, int noop, bool as_input)
{
    const int64_t dims[] = {2, 3, 5, 4};
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, dims));
    grad_fill(&x, 1.0f);
    grad_slot sl[2] = {GS_IN(&x), GS_NONE};
    if (as_input && count >= 0) sl[1] = (grad_slot){.kind = SLOT_I64, .iv = axes, .n = count};
    qf_node_runner r;
    const int64_t opset = op == QF_OP_REDUCE_SUM ? (as_input ? 13 : 11) : (as_input ? 18 : 13);
    grad_node(&r, op, opset, as_input && count >= 0 ? 2 : 1, sl, 1);
    if (!as_input && count > 0) REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "axes", axes, count));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "keepdims", keep));
    if (noop) REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "noop_with_empty_axes", 1));
    char what[128];
    snprintf(what, sizeof what, "%s %d axes%s, keepdims %d, noop %d, %s", qf_op_label(r.n), count,
             count > 0 ? (axes[0] < 0 ? " (negative)" : "") : "", keep, noop,
             as_input ? "input" : "attribute");
    qf_gradcheck_opts o = {.eps = 1e-2};
    grad_run_check(&r, 1u, false, &o, what);
    qf_tensor_free(&x);
}

static void test_reductions(void)
{
    const qf_op ops[] = {QF_OP_REDUCE_MEAN, QF_OP_REDUCE_SUM, QF_OP_REDUCE_MAX};
    for (int k = 0; k < 3; k++) {
        for (int keep = 0; keep <= 1; keep++)
            for (int in = 0; in <= 1; in++) {
                reduce_case(ops[k], (int64_t[]){2, 3}, 2, keep, 0, in);
                reduce_case(ops[k], (int64_t[]){1}, 1, keep, 0, in);
                reduce_case(ops[k], (int64_t[]){-4, 2}, 2, keep, 0, in);
                reduce_case(ops[k], (int64_t[]){3}, 1, keep, 0, in);
                reduce_case(ops[k], NULL, -1, keep, 0, in);
            }
        reduce_case(ops[k], NULL, -1, 1, 1, true); /* noop_with_empty_axes: the identity */
    }
}

/* ReduceMax's tied maxima share the gradient evenly (torch.amax), checked
 * exactly: central differences cannot see a tie. */
static void test_reduce_max_ties(void)
{
    const int64_t dims[] = {2, 4};
    qf_tensor x, dy, dx;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, dims));
    const float vals[8] = {3, 1, 3, 3, -2, 5, 0, 4};
    memcpy(x.data, vals, sizeof vals);
    const qf_tensor *in[] = {&x};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_REDUCE_MAX, "rmax", 1, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "axes", (int64_t[]){1}, 1));
    REQUIRE_OK(qf_node_runner_run(&r));
    REQUIRE_OK(qf_tensor_init(&dy, QF_DTYPE_F32, r.out[0].ndim, r.out[0].dims));
    REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 2, dims));
    const float g[2] = {0.6f, 10};
    memcpy(dy.data, g, sizeof g);
    const qf_tensor *ins[] = {&x}, *douts[] = {&dy};
    qf_tensor *outs[] = {&r.out[0]}, *dins[] = {&dx};
    REQUIRE_OK(qf_node_eval_grad(r.n, 13, ins, outs, douts, dins, false, 0));
    const float third = 0.6f / 3.0f, want[8] = {third, 0, third, third, 0, 10, 0, 0};
    const float *got = dx.data;
    for (int i = 0; i < 8; i++)
        CHECKF(got[i] == want[i], "ReduceMax tie: dx[%d] = %g, want %g", i, got[i], want[i]);
    qf_tensor_free(&dx);
    qf_tensor_free(&dy);
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
}

/* PyTorch's choice among tied maxima: the first in scan order gets the
 * whole gradient; a NaN wins over numbers. Checked exactly here (central
 * differences cannot see a tie). */
static void test_max_pool_ties(void)
{
    const int64_t dims[] = {1, 1, 3, 4};
    qf_tensor x, dy, dx;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, dims));
    float *xv = x.data;
    const float vals[12] = {1, 5, 5, 0, 5, 2, 3, 7, 0, NAN, 7, 7};
    memcpy(xv, vals, sizeof vals);
    const qf_tensor *in[] = {&x};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_MAX_POOL, "mp", 1, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "kernel_shape", (int64_t[]){2, 2}, 2));
    REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "strides", (int64_t[]){1, 2}, 2));
    REQUIRE_OK(qf_node_runner_run(&r));
    /* windows: (rows 0-1, cols 0-1) {1,5,5,2}: first 5 at (0,1);
     * (0-1, 2-3) {5,0,3,7}: 7 at (1,3); (1-2, 0-1) {5,2,0,NaN}: NaN at (2,1);
     * (1-2, 2-3) {3,7,7,7}: first 7 at (1,3). */
    REQUIRE_OK(qf_tensor_init(&dy, QF_DTYPE_F32, 4, r.out[0].dims));
    REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 4, dims));
    const float g[4] = {1, 10, 100, 1000};
    memcpy(dy.data, g, sizeof g);
    const qf_tensor *ins[] = {&x}, *douts[] = {&dy};
    qf_tensor *outs[] = {&r.out[0]}, *dins[] = {&dx};
    REQUIRE_OK(qf_node_eval_grad(r.n, 13, ins, outs, douts, dins, false, 0));
    const float want[12] = {0, 1, 0, 0, 0, 0, 0, 1010, 0, 100, 0, 0};
    const float *got = dx.data;
    for (int i = 0; i < 12; i++) CHECKF(got[i] == want[i], "tie: dx[%d] = %g, want %g", i, got[i], want[i]);
    qf_tensor_free(&dx);
    qf_tensor_free(&dy);
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
}

/* A NULL dout (no gradient reaches the output) gives dx = 0, and every
 * element of din is written. */
static void test_no_dout(void)
{
    const int64_t dims[] = {1, 2, 5, 5};
    qf_op ops[] = {QF_OP_MAX_POOL,    QF_OP_AVG_POOL,   QF_OP_GLOBAL_AVG_POOL,
                   QF_OP_REDUCE_MEAN, QF_OP_REDUCE_SUM, QF_OP_REDUCE_MAX};
    for (int k = 0; k < 6; k++) {
        qf_tensor x, dx;
        REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, dims));
        REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 4, dims));
        grad_fill(&x, 1.0f);
        memset(dx.data, 0x7f, qf_tensor_nbytes(&dx));
        const qf_tensor *in[] = {&x};
        qf_node_runner r;
        REQUIRE_OK(qf_node_runner_init(&r, ops[k], "p", 1, in, 1, 13));
        if (k < 2) REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "kernel_shape", (int64_t[]){2, 2}, 2));
        REQUIRE_OK(qf_node_runner_run(&r));
        const qf_tensor *douts[] = {NULL};
        qf_tensor *outs[] = {&r.out[0]}, *dins[] = {&dx};
        CHECK_OK(qf_node_eval_grad(r.n, 13, in, outs, douts, dins, false, 0));
        const float *d = dx.data;
        for (int64_t i = 0; i < qf_tensor_numel(&dx); i++)
            if (d[i] != 0.0f) {
                FAIL("%s: no dout, dx[%lld] = %g", qf_op_label(r.n), (long long)i, d[i]);
                break;
            }
        qf_node_runner_free(&r);
        qf_tensor_free(&dx);
        qf_tensor_free(&x);
    }
}

int main(void)
{
    RUN(test_max_pool);
    RUN(test_max_pool_ties);
    RUN(test_avg_pool);
    RUN(test_auto_pad);
    RUN(test_global_avg_pool);
    RUN(test_reductions);
    RUN(test_reduce_max_ties);
    RUN(test_no_dout);
    return qf_check_report();
}
