/* TFLite's 16-bit fixed-point helpers, its int8 HardSwish and LeakyRelu
 * (src/ops/math/fixed_point.h), and qfold's int8 table op QF_OP_QLUT
 * (src/ops/int8/qlut.c) that runs it: the helpers on their edge cases, the
 * HardSwish within 1 LSB of the real function on many scale / zero-point
 * pairs (its bit-exactness against TensorFlow Lite 2.2 is
 * tests/tflite/armnn_test.py activations_sweep), the node equal to the
 * helper on every int8 input, its refusals. LeakyRelu: TFLite's rounding
 * on hand-worked values (a tie goes up, where a float LeakyRelu + QuantizeLinear
 * rounds it to even), within 1 LSB of the real function, the node
 * equal to the helper, its refusals (ArmNN 20.08 on every int8 input is
 * tests/tflite/leaky_test.py sweep; TensorFlow Lite 2.2 has no int8
 * LEAKY_RELU). */
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

static void test_leaky_relu(void)
{
    qf_leaky_relu_params p;
    /* s_x = s_y, alpha 1/2, zero points 0: the identity is (2^30, shift 1),
     * alpha (2^30, 0); -3 * 0.5 = -1.5 rounds up to -1 (SaturatingRounding
     * DoublingHighMul's nudge), -5 * 0.5 to -2; positive values pass */
    REQUIRE(qf_leaky_relu_prepare(0.1f, 0, 0.1f, 0, 0.5f, &p), "prepare");
    CHECK(p.id_mult == (1 << 30) && p.id_shift == 1 && p.alpha_mult == (1 << 30) && p.alpha_shift == 0);
    CHECK(qf_leaky_relu_int8(&p, -3) == -1 && qf_leaky_relu_int8(&p, -5) == -2 && qf_leaky_relu_int8(&p, -128) == -64);
    CHECK(qf_leaky_relu_int8(&p, 3) == 3 && qf_leaky_relu_int8(&p, 127) == 127 && qf_leaky_relu_int8(&p, 0) == 0);
    /* zero points: v = x - zp_x, + zp_y, clamped */
    REQUIRE(qf_leaky_relu_prepare(0.1f, 10, 0.05f, -100, 0.5f, &p), "prepare");
    CHECK(qf_leaky_relu_int8(&p, 20) == -80 && qf_leaky_relu_int8(&p, 127) == 127 && qf_leaky_relu_int8(&p, 0) == -110);
    int pairs = 0, worst = 0;
    static const float alphas[] = {0.0f, 0.01f, 0.1f, 0.2f, 1.5f, 3.0f};
    for (int k = 0; k < 600; k++) {
        const float alpha = alphas[k % 6];
        float sx = (float)(0.002 * pow(200.0, urand())), sy = (float)(sx * (0.2 + 2.0 * urand()));
        int32_t zx = (int32_t)(urand() * 255) - 128, zy = (int32_t)(urand() * 255) - 128;
        if (!qf_leaky_relu_prepare(sx, zx, sy, zy, alpha, &p)) continue;
        pairs++;
        for (int q = -128; q < 128; q++) {
            double x = (q - zx) * (double)sx;
            double want = fmin(fmax(nearbyint((x >= 0 ? x : alpha * x) / sy) + zy, -128), 127);
            int d = abs(qf_leaky_relu_int8(&p, (int8_t)q) - (int)want);
            if (d > worst) worst = d;
        }
    }
    CHECKF(pairs == 600, "%d pairs prepared", pairs);
    CHECKF(worst <= 1, "max %d LSB from the real LeakyRelu", worst);
    /* no int8 form: a negative or non-finite alpha, a multiplier of 2^23 */
    CHECK(!qf_leaky_relu_prepare(0.1f, 0, 0.1f, 0, -0.1f, &p) && !qf_leaky_relu_prepare(0.1f, 0, 0.1f, 0, NAN, &p));
    CHECK(!qf_leaky_relu_prepare(1.0f, 0, 1.0f / 8388608.0f, 0, 0.1f, &p));
    CHECK(!qf_leaky_relu_prepare(0.0f, 0, 0.1f, 0, 0.1f, &p));

    /* the node (QF_OP_QLUT, qfold_fn "leaky_relu") equals the helper */
    int64_t d[2] = {1, 256}, one = 1;
    qf_tensor x, sxt, zxt, syt, zyt;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_I8, 2, d));
    REQUIRE_OK(qf_tensor_init(&sxt, QF_DTYPE_F32, 0, &one));
    REQUIRE_OK(qf_tensor_init(&zxt, QF_DTYPE_I8, 0, &one));
    REQUIRE_OK(qf_tensor_init(&syt, QF_DTYPE_F32, 0, &one));
    REQUIRE_OK(qf_tensor_init(&zyt, QF_DTYPE_I8, 0, &one));
    for (int i = 0; i < 256; i++) ((int8_t *)x.data)[i] = (int8_t)(i - 128);
    *(float *)sxt.data = 0.05f;
    *(int8_t *)zxt.data = 10;
    *(float *)syt.data = 0.04f;
    *(int8_t *)zyt.data = -60;
    const qf_tensor *in[5] = {&x, &sxt, &zxt, &syt, &zyt};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLUT, "lr", 5, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "qfold_fn", "leaky_relu"));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "alpha", 0.2f));
    CHECK_OK(qf_node_runner_run(&r));
    CHECK(qf_leaky_relu_prepare(0.05f, 10, 0.04f, -60, 0.2f, &p));
    int bad = 0;
    for (int i = 0; i < 256 && r.nout; i++) bad += ((const int8_t *)r.out[0].data)[i] != qf_leaky_relu_int8(&p, (int8_t)(i - 128));
    CHECKF(bad == 0, "%d of 256 differ from the helper", bad);
    qf_node_runner_free(&r);
    /* a negative alpha: an error naming the node */
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLUT, "bad_alpha", 5, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "qfold_fn", "leaky_relu"));
    REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "alpha", -0.5f));
    CHECK(qf_node_runner_run(&r) != QF_OK && strstr(qf_error_message(), "bad_alpha") &&
          strstr(qf_error_message(), "LeakyRelu"));
    qf_node_runner_free(&r);
    qf_tensor *ts[5] = {&x, &sxt, &zxt, &syt, &zyt};
    for (int i = 0; i < 5; i++) qf_tensor_free(ts[i]);
}

int main(void)
{
    RUN(test_helpers);
    RUN(test_hard_swish_real);
    RUN(test_qlut_node);
    RUN(test_leaky_relu);
    return qf_check_report();
}
