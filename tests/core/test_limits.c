/* Size arithmetic on hostile numbers (src/core/tensor.c): the checked int64
 * helpers, qf_shape_numel's saturation, qf_shape_fits (the limit every
 * inferred shape is held to) and float -> int64 reads of NaN / huge values.
 * Model-level cases are in tests/ref/hostile_models.py. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/tensor.h"
#include "tools/qf_check.h"

static void test_checked_arithmetic(void)
{
    int64_t r = 0;
    CHECK(qf_i64_mul(1 << 20, 1 << 20, &r) && r == (int64_t)1 << 40);
    CHECK(!qf_i64_mul(INT64_MAX, 2, &r));
    CHECK(!qf_i64_mul(INT64_MIN, -1, &r));
    CHECK(qf_i64_mul(INT64_MIN, 1, &r) && r == INT64_MIN);
    CHECK(qf_i64_add(INT64_MAX, INT64_MIN, &r) && r == -1);
    CHECK(!qf_i64_add(INT64_MAX, 1, &r));
    CHECK(!qf_i64_add(INT64_MIN, -1, &r));
}

static void test_shape_limits(void)
{
    int64_t big[] = {(int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40};
    CHECK(qf_shape_numel(3, big) == INT64_MAX); /* saturates, no UB */
    int64_t hollow[] = {0, (int64_t)1 << 62, (int64_t)1 << 62};
    CHECK(qf_shape_numel(3, hollow) == 0);
    int64_t unknown[] = {(int64_t)1 << 62, -1, (int64_t)1 << 62};
    CHECK(qf_shape_numel(3, unknown) == -1);

    /* 2^40 bytes is the limit: 2^38 float32 fit, one more element does not. */
    int64_t edge[] = {(int64_t)1 << 38};
    CHECK(qf_shape_fits(QF_DTYPE_F32, 1, edge));
    edge[0]++;
    CHECK(!qf_shape_fits(QF_DTYPE_F32, 1, edge));
    CHECK(!qf_shape_fits(QF_DTYPE_F32, 3, hollow)); /* a zero dim hides nothing */
    CHECK(!qf_shape_fits(QF_DTYPE_F32, 3, big));
    int64_t bad[] = {-2};
    CHECK(!qf_shape_fits(QF_DTYPE_F32, 1, bad));
    int64_t pending[] = {-1, 3, 224, 224};
    CHECK(qf_shape_fits(QF_DTYPE_F32, 4, pending));
    CHECK(!qf_shape_fits(QF_DTYPE_F32, QF_MAX_DIMS + 1, pending));

    qf_tensor t;
    CHECK_STATUS(qf_tensor_init(&t, QF_DTYPE_F32, 3, hollow), QF_ERR_SHAPE);
    CHECK_MSG("larger than qfold handles");

}

static void test_float_reads(void)
{
    qf_tensor t;
    float fv[] = {NAN, 1e30f, -1e30f, -2.75f};
    int64_t d4[] = {4};
    qf_tensor_view(&t, QF_DTYPE_F32, 1, d4, fv);
    CHECK(qf_tensor_get_i64(&t, 0) == 0);
    CHECK(qf_tensor_get_i64(&t, 1) == INT64_MAX);
    CHECK(qf_tensor_get_i64(&t, 2) == INT64_MIN);
    CHECK(qf_tensor_get_i64(&t, 3) == -2);
}

int main(void)
{
    RUN(test_checked_arithmetic);
    RUN(test_shape_limits);
    RUN(test_float_reads);
    return qf_check_report();
}
