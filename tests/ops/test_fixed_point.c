/* TFLite's 16-bit fixed-point helpers and its int8 HardSwish
 * (src/ops/math/fixed_point.h), and qfold's int8 table op QF_OP_QLUT
 * (src/ops/int8/qlut.c) that runs it: the helpers on their edge cases, the
 * HardSwish within 1 LSB of the real function on many scale / zero-point
 * pairs (its bit-exactness against TensorFlow Lite 2.2 is
 * tests/tflite/armnn_test.py activations_sweep), the node equal to the
 * helper on every int8 input, its refusals. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/fixed_point.h"
#include "qfold/graph.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

static uint32_t rng_state = 2026u;
static double urand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (double)(rng_state >> 8) / (double)(1u << 24);
}

static void test_helpers(void)
{
    CHECK(qf_fp16_sat_round_doubling_high_mul(INT16_MIN, INT16_MIN) == INT16_MAX);
    CHECK(qf_fp16_sat_round_doubling_high_mul(16384, 16384) == 8192);  /* 0.5 * 0.5 */
    CHECK(qf_fp16_sat_round_doubling_high_mul(3, 16384) == 2);         /* 1.5 rounds up */
    CHECK(qf_fp16_sat_round_doubling_high_mul(-3, 16384) == -1);       /* -1.5 too: gemmlowp's nudge 1 - 2^14 */
    CHECK(qf_fp16_sat_round_doubling_high_mul(-5, 16384) == -2);       /* -2.5 -> -2 */
    CHECK(qf_fp16_sat_doubling_high_mul(3, 16384) == 1);               /* truncated */
    CHECK(qf_fp16_sat_doubling_high_mul(-3, 16384) == -1);
    CHECK(qf_fp16_sat_doubling_high_mul(INT16_MIN, INT16_MIN) == INT16_MAX);
    CHECK(qf_fp16_rounding_divide_by_pot(5, 1) == 3 && qf_fp16_rounding_divide_by_pot(-5, 1) == -3);
    CHECK(qf_fp16_rounding_divide_by_pot(-4, 2) == -1 && qf_fp16_rounding_divide_by_pot(7, 0) == 7);
    CHECK(qf_fp16_sat_left_shift(20000, 1) == INT16_MAX && qf_fp16_sat_left_shift(-20000, 1) == INT16_MIN);
    CHECK(qf_fp16_sat_left_shift(-3, 2) == -12);
    CHECK(qf_fp16_multiplier(1 << 30) == 16384);
    CHECK(qf_fp16_multiplier(INT32_MAX) == INT16_MAX);
    CHECK(qf_fp16_multiplier((1 << 30) + (1 << 15)) == 16385); /* rounds half up */
}

static double hswish(double x) { return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0; }

static void test_hard_swish_real(void)
{
    int pairs = 0, worst = 0;
    for (int k = 0; k < 400; k++) {
        float sx = (float)(0.002 * pow(200.0, urand())), sy = (float)(sx * (0.3 + 2.0 * urand()));
        int32_t zx = (int32_t)(urand() * 255) - 128, zy = (int32_t)(urand() * 255) - 128;
        qf_hard_swish_params p;
        if (!qf_hard_swish_prepare(sx, zx, sy, zy, &p)) continue;
        pairs++;
        for (int q = -128; q < 128; q++) {
            double want = nearbyint(hswish((q - zx) * (double)sx) / sy) + zy;
            want = fmin(fmax(want, -128), 127);
            int d = abs(qf_hard_swish_int8(&p, (int8_t)q) - (int)want);
            if (d > worst) worst = d;
        }
    }
    CHECKF(pairs > 350, "%d pairs prepared", pairs);
    CHECKF(worst <= 1, "max %d LSB from the real HardSwish", worst);
    qf_hard_swish_params p;
    CHECK(!qf_hard_swish_prepare(1.0f, 0, 1.0f / 1024.0f, 0, &p)); /* s_y < s_x / 128: TFLite refuses */
    CHECK(qf_hard_swish_prepare(0.05f, 3, 0.04f, -60, &p));
}

/* The node on every int8 input equals the helper. */
static void test_qlut_node(void)
{
    int64_t d[2] = {1, 256}, one = 1;
    qf_tensor x, sx, zx, sy, zy;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_I8, 2, d));
    REQUIRE_OK(qf_tensor_init(&sx, QF_DTYPE_F32, 0, &one));
    REQUIRE_OK(qf_tensor_init(&zx, QF_DTYPE_I8, 0, &one));
    REQUIRE_OK(qf_tensor_init(&sy, QF_DTYPE_F32, 0, &one));
    REQUIRE_OK(qf_tensor_init(&zy, QF_DTYPE_I8, 0, &one));
    for (int i = 0; i < 256; i++) ((int8_t *)x.data)[i] = (int8_t)(i - 128);
    *(float *)sx.data = 0.05f;
    *(int8_t *)zx.data = 10;
    *(float *)sy.data = 0.04f;
    *(int8_t *)zy.data = -60;
    const qf_tensor *in[5] = {&x, &sx, &zx, &sy, &zy};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLUT, "hs", 5, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "qfold_fn", "hard_swish"));
    CHECK_OK(qf_node_runner_run(&r));
    qf_hard_swish_params p;
    CHECK(qf_hard_swish_prepare(0.05f, 10, 0.04f, -60, &p));
    int bad = 0;
    for (int i = 0; i < 256 && r.nout; i++) bad += ((const int8_t *)r.out[0].data)[i] != qf_hard_swish_int8(&p, (int8_t)(i - 128));
    CHECKF(bad == 0, "%d of 256 differ from the helper", bad);
    qf_node_runner_free(&r);
    /* an unknown function, and scales TFLite refuses: errors naming the node */
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLUT, "bad_fn", 5, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "qfold_fn", "gelu"));
    CHECK(qf_node_runner_run(&r) != QF_OK && strstr(qf_error_message(), "bad_fn"));
    qf_node_runner_free(&r);
    *(float *)sy.data = 0.0001f;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLUT, "bad_scale", 5, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "qfold_fn", "hard_swish"));
    CHECK(qf_node_runner_run(&r) != QF_OK && strstr(qf_error_message(), "bad_scale"));
    qf_node_runner_free(&r);
    qf_tensor *ts[5] = {&x, &sx, &zx, &sy, &zy};
    for (int i = 0; i < 5; i++) qf_tensor_free(ts[i]);
}

int main(void)
{
    RUN(test_helpers);
    RUN(test_hard_swish_real);
    RUN(test_qlut_node);
    return qf_check_report();
}
