/* The int8 core (src/ops/int8/int8.h) on small convolutions, against direct
 * references: exact int32 accumulators, TFLite's fixed-point requantization
 * within 1 LSB of the double-precision result (with a fused clamp), ONNX
 * Runtime's float requantization exactly, and the refusals (an accumulator
 * that may overflow int32 at prepare, a multiplier too large for the
 * fixed-point path). The ONNX Runtime comparison of the ops is
 * qlinear_ort.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/int8/int8.h"
#include "ops/math/requant.h"
#include "qfold/graph.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

static uint32_t rng_state = 12345u;
static int32_t rnd(int32_t lo, int32_t hi)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (int32_t)((rng_state >> 8) % (uint32_t)(hi - lo + 1));
}

/* A graph holding one Conv node with int8 operand types, for the geometry. */
typedef struct conv_case {
    qf_graph *g;
    qf_node *n;
    qf_conv_geom cg;
} conv_case;

static qf_status conv_case_init(conv_case *c, const int64_t *xd, const int64_t *wd, int64_t group,
                                const int64_t *strides, const int64_t *pads, const int64_t *dil)
{
    memset(c, 0, sizeof *c);
    QF_TRY(qf_graph_init(&c->g));
    c->g->opset = 13;
    qf_value *in[2];
    in[0] = qf_graph_add_input(c->g, "x", QF_DTYPE_I8, 4, xd);
    in[1] = qf_graph_add_input(c->g, "w", QF_DTYPE_I8, 4, wd);
    c->n = qf_graph_add_node(c->g, QF_OP_CONV, "conv0", 2, in, 1);
    if (!in[0] || !in[1] || !c->n) return qf_error(QF_ERR_NOMEM, "graph");
    qf_node_set_attr_int(c->g, c->n, "group", group);
    qf_node_set_attr_ints(c->g, c->n, "strides", strides, 2);
    qf_node_set_attr_ints(c->g, c->n, "pads", pads, 4);
    qf_node_set_attr_ints(c->g, c->n, "dilations", dil, 2);
    return qf_conv_geometry(c->n, &in[0]->type, &in[1]->type, NULL, false, &c->cg);
}

/* Direct int64 reference of one accumulator. */
static int64_t ref_acc(const qf_conv_geom *cg, const int8_t *x, int32_t xzp, const int8_t *w, const int32_t *wzp,
                       const int32_t *bias, int64_t bn, int64_t m, int64_t oh, int64_t ow)
{
    const qf_spatial *s = &cg->s;
    int64_t g = m / cg->mg, kh = s->kernel[0], kw = s->kernel[1], ih_n = s->in[0], iw_n = s->in[1];
    int64_t acc = bias ? bias[m] : 0;
    for (int64_t c = 0; c < cg->cg; c++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++) {
                int64_t ih = oh * s->stride[0] - s->pad_begin[0] + i * s->dilation[0];
                int64_t iw = ow * s->stride[1] - s->pad_begin[1] + j * s->dilation[1];
                if (ih < 0 || ih >= ih_n || iw < 0 || iw >= iw_n) continue;
                int64_t xv = x[((bn * cg->c + g * cg->cg + c) * ih_n + ih) * iw_n + iw] - xzp;
                int64_t wv = w[((m * cg->cg + c) * kh + i) * kw + j] - wzp[m];
                acc += xv * wv;
            }
    return acc;
}

/* A grouped, strided, padded, dilated conv with per-channel weights through
 * the core: accumulators exact, (b) within 1 LSB of double, (a) exact to the
 * float32 formula, a fused ReLU clamp honoured. */
static void test_conv_requant(void)
{
    const int64_t xd[4] = {2, 6, 11, 10}, wd[4] = {8, 3, 3, 3}, st[2] = {2, 1}, pd[4] = {1, 2, 1, 0},
                  dl[2] = {1, 2};
    conv_case cc;
    REQUIRE_OK(conv_case_init(&cc, xd, wd, 2, st, pd, dl));
    const qf_conv_geom *cg = &cc.cg;
    const int64_t M = cg->m, P = cg->out_plane, OW = cg->s.out[1];
    int64_t nx = cg->n * cg->c * cg->in_plane, nw = M * cg->k;
    int8_t *x = malloc((size_t)nx), *w = malloc((size_t)nw), *y = malloc((size_t)(cg->n * M * P));
    int16_t *w16 = malloc(sizeof(int16_t) * (size_t)nw);
    int16_t *col = malloc(qf_int8_conv_col_bytes(cg));
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)(cg->mg * P));
    REQUIRE(x && w && y && w16 && col && acc, "malloc");
    for (int64_t i = 0; i < nx; i++) x[i] = (int8_t)rnd(-128, 127);
    for (int64_t i = 0; i < nw; i++) w[i] = (int8_t)rnd(-127, 127);
    int32_t wzp[8], bias[8], mult[8], shift[8];
    double real[8];
    float fscale[8];
    const int32_t xzp = -7, yzp = -5;
    const float xs = 0.0213f, ys = 0.0871f;
    for (int m = 0; m < 8; m++) {
        wzp[m] = m == 3 ? 4 : 0; /* one asymmetric channel */
        bias[m] = rnd(-4000, 4000);
        float ws = 0.002f + 0.0007f * (float)m;
        real[m] = (double)xs * ws / ys;
        fscale[m] = qf_int8_combined_scale(xs, ws, ys);
    }
    CHECK_OK(qf_int8_check_k(cc.n, cg->k, qf_int8_range_abs(QF_DTYPE_I8, xzp), 131));
    CHECK_OK(qf_int8_requant_prepare_fixed(cc.n, real, M, (int64_t)cg->k * 135 * 131 + 4000, mult, shift));
    qf_int8_widen_rows(w, QF_DTYPE_I8, wzp, true, M, cg->k, w16);

    /* Fused ReLU: the clamp starts at the zero point. */
    qf_int8_requant fixed = {.multiplier = mult, .shift = shift, .per_channel = true, .zp = yzp, .lo = yzp,
                             .hi = 127, .dtype = QF_DTYPE_I8};
    qf_int8_requant flt = {.scale = fscale, .per_channel = true, .zp = yzp, .lo = -128, .hi = 127,
                           .dtype = QF_DTYPE_I8};
    int64_t checked = 0, off_by_one = 0, acc_bad = 0, fixed_bad = 0, float_bad = 0;
    for (int64_t bn = 0; bn < cg->n; bn++)
        for (int64_t g = 0; g < cg->group; g++) {
            qf_int8_conv_group(cg, x, QF_DTYPE_I8, xzp, bn, g, w16, bias, col, acc);
            int8_t yf[4 * 64], yq[4 * 64];
            REQUIRE(cg->mg * P <= 4 * 64, "block too large: %lld", (long long)(cg->mg * P));
            qf_int8_requant_fixed(&fixed, g * cg->mg, cg->mg, P, acc, yq);
            qf_int8_requant_float(&flt, g * cg->mg, cg->mg, P, acc, yf);
            for (int64_t r = 0; r < cg->mg; r++)
                for (int64_t p = 0; p < P; p++) {
                    int64_t m = g * cg->mg + r;
                    int64_t want = ref_acc(cg, x, xzp, w, wzp, bias, bn, m, p / OW, p % OW);
                    int32_t got = acc[r * P + p];
                    acc_bad += got != want;
                    double d = round((double)want * real[m]) + yzp;
                    double dq = d < yzp ? yzp : d > 127 ? 127 : d;
                    double diff = fabs(yq[r * P + p] - dq);
                    fixed_bad += diff > 1.0;
                    off_by_one += diff == 1.0;
                    float fv = (float)want * fscale[m];
                    float fr = nearbyintf(fv) + (float)yzp; /* default rounding: half to even */
                    int32_t fq = fr < -128.0f ? -128 : fr > 127.0f ? 127 : (int32_t)fr;
                    float_bad += yf[r * P + p] != fq;
                    checked++;
                }
        }
    CHECKF(acc_bad == 0, "%lld of %lld accumulators differ from the direct sum", (long long)acc_bad,
           (long long)checked);
    CHECKF(fixed_bad == 0, "%lld of %lld fixed-point outputs more than 1 LSB from double", (long long)fixed_bad,
           (long long)checked);
    CHECKF(float_bad == 0, "%lld of %lld float-requantized outputs differ", (long long)float_bad,
           (long long)checked);
    printf("  %lld outputs; fixed point: %lld at 1 LSB from double, none further\n", (long long)checked,
           (long long)off_by_one);
    free(x), free(w), free(y), free(w16), free(col), free(acc);
    qf_graph_free(cc.g);
}

/* The accumulator bound: K * |x - zp| * |w - zp| must fit int32. */
static void test_k_bound(void)
{
    const int64_t xd[4] = {1, 4, 5, 5}, wd[4] = {2, 4, 3, 3}, st[2] = {1, 1}, pd[4] = {0, 0, 0, 0},
                  dl[2] = {1, 1};
    conv_case cc;
    REQUIRE_OK(conv_case_init(&cc, xd, wd, 1, st, pd, dl));
    CHECK(qf_int8_range_abs(QF_DTYPE_I8, 0) == 128);
    CHECK(qf_int8_range_abs(QF_DTYPE_U8, 0) == 255);
    CHECK(qf_int8_range_abs(QF_DTYPE_U8, 128) == 128);
    CHECK(qf_int8_range_abs(QF_DTYPE_I8, 127) == 255);
    CHECK_OK(qf_int8_check_k(cc.n, 131071, 128, 128));
    CHECK_ERR(qf_int8_check_k(cc.n, 131072, 128, 128), QF_ERR_UNSUPPORTED, "may overflow the int32 accumulator");
    CHECK_ERR(qf_int8_check_k(cc.n, 33026, 255, 255), QF_ERR_UNSUPPORTED, "conv0");
    /* A multiplier >= 1 shifts the accumulator left first. */
    int32_t qm, sh;
    double big = 4.0, small = 0.25;
    CHECK_ERR(qf_int8_requant_prepare_fixed(cc.n, &big, 1, (int64_t)1 << 30, &qm, &sh), QF_ERR_UNSUPPORTED,
              "too large");
    CHECK_OK(qf_int8_requant_prepare_fixed(cc.n, &big, 1, 1000, &qm, &sh));
    CHECK_OK(qf_int8_requant_prepare_fixed(cc.n, &small, 1, (int64_t)1 << 30, &qm, &sh));
    double nan_scale = NAN;
    CHECK_ERR(qf_int8_requant_prepare_fixed(cc.n, &nan_scale, 1, 1, &qm, &sh), QF_ERR_UNSUPPORTED, "finite");
    qf_graph_free(cc.g);
}

/* QLinearConv's prepare refuses a K whose accumulator may overflow (uint8
 * operands, zero points unknown until run time: K * 255 * 255). */
static void test_qlinear_conv_overflow(void)
{
    const int64_t c = 3700; /* K = 3700 * 9 = 33300 > 33025 */
    qf_tensor x, xs, xz, w, ws, wz, ys, yz;
    const int64_t xd[4] = {1, c, 3, 3}, wd[4] = {1, c, 3, 3}, one[1] = {1};
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_U8, 4, xd));
    REQUIRE_OK(qf_tensor_init(&w, QF_DTYPE_U8, 4, wd));
    REQUIRE_OK(qf_tensor_init(&xs, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&ws, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&ys, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&xz, QF_DTYPE_U8, 0, one));
    REQUIRE_OK(qf_tensor_init(&wz, QF_DTYPE_U8, 0, one));
    REQUIRE_OK(qf_tensor_init(&yz, QF_DTYPE_U8, 0, one));
    *(float *)xs.data = *(float *)ws.data = *(float *)ys.data = 1.0f;
    const qf_tensor *in[8] = {&x, &xs, &xz, &w, &ws, &wz, &ys, &yz};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLINEAR_CONV, "qconv0", 8, in, 1, 13));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_UNSUPPORTED, "qconv0");
    CHECK_MSG("may overflow the int32 accumulator");
    qf_node_runner_free(&r);

    /* With zero points 128 the bound is 128 * 128: the same K is accepted. */
    *(uint8_t *)xz.data = 128;
    *(uint8_t *)wz.data = 128;
    *(uint8_t *)yz.data = 128;
    memset(x.data, 129, (size_t)qf_tensor_numel(&x));
    memset(w.data, 130, (size_t)qf_tensor_numel(&w));
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLINEAR_CONV, "qconv1", 8, in, 1, 13));
    qf_status st = qf_node_runner_run(&r);
    CHECKF(st == QF_OK, "run: %s", qf_error_message());
    /* acc = K * 1 * 2 = 66600; y = saturate(66600 + 128) = 255. */
    if (st == QF_OK) CHECK(((const uint8_t *)r.out[0].data)[0] == 255);
    qf_node_runner_free(&r);
    qf_tensor_free(&x), qf_tensor_free(&w), qf_tensor_free(&xs), qf_tensor_free(&ws), qf_tensor_free(&ys);
    qf_tensor_free(&xz), qf_tensor_free(&wz), qf_tensor_free(&yz);
}

/* Shape inference of the ops checks the qparams and names the node. */
static void test_infer_errors(void)
{
    qf_tensor x, xs, xz, w, ws, wz, ys, yz;
    const int64_t xd[4] = {1, 4, 6, 6}, wd[4] = {8, 4, 3, 3}, one[1] = {1}, three[1] = {3};
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_U8, 4, xd));
    REQUIRE_OK(qf_tensor_init(&w, QF_DTYPE_I8, 4, wd));
    REQUIRE_OK(qf_tensor_init(&xs, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&ws, QF_DTYPE_F32, 1, three)); /* 3 scales for 8 output channels */
    REQUIRE_OK(qf_tensor_init(&ys, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&xz, QF_DTYPE_I8, 0, one));    /* int8 zero point for uint8 X */
    REQUIRE_OK(qf_tensor_init(&wz, QF_DTYPE_I8, 0, one));
    REQUIRE_OK(qf_tensor_init(&yz, QF_DTYPE_U8, 0, one));
    const qf_tensor *in[8] = {&x, &xs, &xz, &w, &ws, &wz, &ys, &yz};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLINEAR_CONV, "qc_bad_zp", 8, in, 1, 13));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_UNSUPPORTED, "node 'qc_bad_zp' (QLinearConv): x_zero_point");
    qf_node_runner_free(&r);
    qf_tensor_free(&xz);
    REQUIRE_OK(qf_tensor_init(&xz, QF_DTYPE_U8, 0, one));
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLINEAR_CONV, "qc_bad_scale", 8, in, 1, 13));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_SHAPE, "node 'qc_bad_scale' (QLinearConv): w_scale has shape [3]");
    qf_node_runner_free(&r);
    /* QLinearMatMul: inner dimensions. */
    const qf_tensor *mm[8] = {&x, &xs, &xz, &w, &xs, &wz, &ys, &yz};
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLINEAR_MATMUL, "qmm_bad", 8, mm, 1, 13));
    CHECK_ERR(qf_node_runner_run(&r), QF_ERR_SHAPE, "node 'qmm_bad' (QLinearMatMul)");
    qf_node_runner_free(&r);
    qf_tensor_free(&x), qf_tensor_free(&w), qf_tensor_free(&xs), qf_tensor_free(&ws), qf_tensor_free(&ys);
    qf_tensor_free(&xz), qf_tensor_free(&wz), qf_tensor_free(&yz);
}

/* qfold_clamp on QLinearConv / QLinearMatMul (a fused activation's range
 * in Y's integers, decoded by qf_int8_clamp_range as on every int8 op): a
 * clamp that is not two values inside Y's range is refused naming the node
 * (a wrong length was once ignored); a valid one on a uint8 Y is honoured. */
static void test_qlinear_clamp_attr(void)
{
    qf_tensor x, xs, xz, w, ws, wz, ys, yz;
    const int64_t xd[4] = {1, 2, 3, 3}, wd[4] = {1, 2, 3, 3}, md[2] = {3, 3}, one[1] = {1};
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_U8, 4, xd));
    REQUIRE_OK(qf_tensor_init(&w, QF_DTYPE_U8, 4, wd));
    REQUIRE_OK(qf_tensor_init(&xs, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&ws, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&ys, QF_DTYPE_F32, 0, one));
    REQUIRE_OK(qf_tensor_init(&xz, QF_DTYPE_U8, 0, one));
    REQUIRE_OK(qf_tensor_init(&wz, QF_DTYPE_U8, 0, one));
    REQUIRE_OK(qf_tensor_init(&yz, QF_DTYPE_U8, 0, one));
    *(float *)xs.data = *(float *)ws.data = *(float *)ys.data = 1.0f;
    memset(x.data, 3, (size_t)qf_tensor_numel(&x));
    memset(w.data, 5, (size_t)qf_tensor_numel(&w));
    const qf_tensor *in[8] = {&x, &xs, &xz, &w, &ws, &wz, &ys, &yz};
    static const struct {
        const char *name;
        int n;
        int64_t v[3];
    } bad[] = {{"qc_clamp3", 3, {0, 10, 20}},
               {"qc_clamp1", 1, {10}},
               {"qc_clamp_range", 2, {-1, 10}},
               {"qc_clamp_order", 2, {20, 10}}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int mm = 0; mm < 2; mm++) {
            qf_node_runner r;
            char name[64];
            snprintf(name, sizeof name, "%s%s", bad[i].name, mm ? "_mm" : "");
            if (mm) {
                x.ndim = w.ndim = 2;
                memcpy(x.dims, md, sizeof md);
                memcpy(w.dims, md, sizeof md);
            }
            REQUIRE_OK(qf_node_runner_init(&r, mm ? QF_OP_QLINEAR_MATMUL : QF_OP_QLINEAR_CONV, name,
                                           8, in, 1, 13));
            REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "qfold_clamp", bad[i].v, bad[i].n));
            char want[128];
            snprintf(want, sizeof want, "node '%s' (%s): qfold_clamp", name,
                     mm ? "QLinearMatMul" : "QLinearConv");
            CHECK_ERR(qf_node_runner_run(&r), QF_ERR_INVALID, want);
            CHECK_MSG("[0, 255]");
            qf_node_runner_free(&r);
            if (mm) {
                x.ndim = w.ndim = 4;
                memcpy(x.dims, xd, sizeof xd);
                memcpy(w.dims, wd, sizeof wd);
            }
        }
    /* [10, 40] on a uint8 Y: the accumulator 2 * 9 * 15 = 270 saturates at 40. */
    qf_node_runner r;
    const int64_t ok[2] = {10, 40};
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QLINEAR_CONV, "qc_clamp_ok", 8, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "qfold_clamp", ok, 2));
    qf_status st = qf_node_runner_run(&r);
    CHECKF(st == QF_OK, "run: %s", qf_error_message());
    if (st == QF_OK)
        CHECKF(((const uint8_t *)r.out[0].data)[0] == 40, "y = %d",
               ((const uint8_t *)r.out[0].data)[0]);
    qf_node_runner_free(&r);
    qf_tensor_free(&x), qf_tensor_free(&w), qf_tensor_free(&xs), qf_tensor_free(&ws),
        qf_tensor_free(&ys);
    qf_tensor_free(&xz), qf_tensor_free(&wz), qf_tensor_free(&yz);
}

/* qf_int8_requant_fixed_row (the vectorized requantization of the oneDNN
 * backend's int8 convolution), each implementation the CPU runs (the
 * double one, the AVX2 and AVX-512 integer ones), against
 * qf_int8_requant_one_fixed, element for element, every length 1..N (the
 * vector tails; bytes past n untouched): multipliers over [2^30, 2^31) and 0, every shift from -31 to 30
 * (a left shift with accumulators that fit it, as prepare guarantees),
 * accumulators over the whole int32 range and at the rounding ties, bias
 * adds that wrap, int8 and uint8 outputs with clamps. */
static void test_requant_row(void)
{
    enum { N = 67 }; /* not a multiple of any vector width */
    int32_t acc[N], bias[N], mult[N], shift[N];
    double real[N];
    uint8_t got[N];
    static const qf_int8_row_isa isas[] = {QF_INT8_ROW_BEST, QF_INT8_ROW_DOUBLE, QF_INT8_ROW_AVX2,
                                           QF_INT8_ROW_AVX512};
    static const char *const names[] = {"best", "double", "avx2", "avx512"};
    int64_t bad[4] = {0}, checked = 0;
    bool ran[4] = {false};
    for (int round = 0; round < 4000; round++) {
        for (int c = 0; c < N; c++) {
            mult[c] = c == 5   ? 0
                      : c == 6 ? INT32_MAX
                               : (int32_t)((1u << 30) + ((uint32_t)rnd(0, 0x3fffffff)));
            if (c % 7 == 0)
                mult[c] = (int32_t)((1u << 30) +
                                    ((uint32_t)rnd(0, 3) << 28)); /* v qm / 2^31 hits k + 1/2 */
            shift[c] = rnd(-31, 30);
            int32_t a = (int32_t)(((uint32_t)rnd(0, 0xffff) << 16) ^ (uint32_t)rnd(0, 0xffff));
            if (round % 4 == 1) a = rnd(-300000, 300000);
            if (round % 4 == 2)
                a = rnd(-2000, 2000) * (1 << (c % 20)) + rnd(-1, 1); /* ties of the right shift */
            if (round % 4 == 3) {
                /* Around a tie of the result: v qm 2^(shift - 31) = k + 1/2
                 * for an output k in range, give or take a few units of v. */
                const double t =
                    ((double)rnd(-300, 300) + 0.5) / ldexp((double)mult[c], shift[c] - 31);
                a = fabs(t) < 2e9 ? (int32_t)t + rnd(-3, 3) : 0;
            }
            if (shift[c] > 0) a >>= shift[c] + 1; /* fits the left shift */
            acc[c] = a;
            bias[c] = round % 8 == 7 ? (int32_t)((uint32_t)rnd(0, 0xffff) << 16) : rnd(-5000, 5000);
            if (shift[c] > 0 || round % 8 == 3) bias[c] = 0;
        }
        const bool u8 = round % 2 == 1;
        qf_int8_requant rq = {.multiplier = mult,
                              .shift = shift,
                              .per_channel = true,
                              .per_col = true,
                              .zp = u8 ? rnd(0, 255) : rnd(-128, 127),
                              .dtype = u8 ? QF_DTYPE_U8 : QF_DTYPE_I8};
        rq.lo = u8 ? rnd(0, 40) : rnd(-128, -90);
        rq.hi = u8 ? rnd(200, 255) : rnd(90, 127);
        if (round % 16 == 5 ||
            round % 16 ==
                10) /* the largest sums: SRDHM's result near INT32_MAX / INT32_MIN, + zp past int32 */
            for (int c = 0; c < 8; c++) {
                mult[c] = INT32_MAX - c;
                shift[c] = c % 2 == 0 ? 0 : -1;
                acc[c] = c < 4 ? INT32_MAX - c : INT32_MIN + c;
                bias[c] = 0;
            }
        qf_int8_requant_row_prepare(N, mult, real);
        const qf_int8_row_params rp = {mult, shift, bias, real};
        for (int isa = 0; isa < (int)(sizeof isas / sizeof isas[0]); isa++) {
            if (!qf_int8_requant_row_has(isas[isa])) continue;
            ran[isa] = true;
            /* every length from 1 to N over the rounds: the vector loops' tails */
            const int n = round % 3 == 0 ? N : 1 + round % N;
            memset(got, 0xa5, sizeof got);
            qf_int8_requant_fixed_row_isa(isas[isa], &rq, n, acc, &rp, got);
            for (int c = 0; c < N; c++) {
                int32_t v = (int32_t)((uint32_t)acc[c] + (uint32_t)bias[c]);
                int32_t want =
                    c < n ? qf_int8_requant_one_fixed(&rq, c, v) : (int32_t)(uint8_t)0xa5;
                int32_t g = u8 || c >= n ? got[c] : (int8_t)got[c];
                checked++;
                if (g != want && bad[isa]++ < 5)
                    fprintf(stderr,
                            "requant row (%s), n %d, column %d: acc %d + bias %d, multiplier %d "
                            "shift %d: %d, want %d\n",
                            names[isa], n, c, acc[c], bias[c], mult[c], shift[c], g, want);
            }
        }
    }
    for (int isa = 0; isa < (int)(sizeof isas / sizeof isas[0]); isa++) {
        CHECKF(bad[isa] == 0, "requant row (%s): %lld differ", names[isa], (long long)bad[isa]);
        if (!ran[isa])
            fprintf(stderr, "requant row (%s): not run, the CPU has no such instructions\n",
                    names[isa]);
    }
    CHECKF(ran[0] && ran[1], "requant row: the best and the double implementations must run");
    (void)checked;
}

int main(void)
{
    RUN(test_requant_row);
    RUN(test_infer_errors);
    RUN(test_conv_requant);
    RUN(test_k_bound);
    RUN(test_qlinear_conv_overflow);
    RUN(test_qlinear_clamp_attr);
    return qf_check_report();
}
