/* The TFLite export's layout permutations and op mapping
 * (src/tflite/tflite_export.c), on small QDQ graphs built here:
 *
 *   int8 input -> DQ -> Conv / Gemm (int8 weight, int32 bias behind DQs)
 *                 -> [Relu] -> Q -> DQ -> output
 *
 * Each must export to the expected TFLite operator (CONV_2D,
 * DEPTHWISE_CONV_2D, FULLY_CONNECTED) with NHWC shapes, its MACs and weight
 * bytes in the report; the flatbuffer starts with its root offset and the
 * TFL3 identifier. Refusals name the node: a float model, a per-channel
 * fully connected layer, a group that is neither 1 nor depthwise. The op
 * table's rows name builtins the writer knows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/tflite.h"
#include "tflite/tflite_build.h" /* private: the layout helpers, the op table */
#include "tools/qf_check.h"

/* --- graph building --------------------------------------------------------- */

static qf_value *constant(qf_graph *g, const char *name, qf_dtype dt, int ndim, const int64_t *d, const void *v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, ndim, d) != QF_OK) return NULL;
    if (v) memcpy(t.data, v, qf_tensor_nbytes(&t));
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

/* A DequantizeLinear of v (per tensor: ns == 1 scalars; per channel on axis 0). */
static qf_value *dq(qf_graph *g, const char *name, qf_value *v, const float *s, int64_t ns, qf_dtype zdt)
{
    char b1[64], b2[64];
    snprintf(b1, sizeof b1, "%s_s", name);
    snprintf(b2, sizeof b2, "%s_z", name);
    static const int64_t zeros[64] = {0};
    qf_value *in[3] = {v, constant(g, b1, QF_DTYPE_F32, ns == 1 ? 0 : 1, &ns, s),
                       constant(g, b2, zdt, ns == 1 ? 0 : 1, &ns, zeros)};
    if (!v || !in[1] || !in[2]) return NULL;
    qf_node *n = qf_graph_add_node(g, QF_OP_DEQUANTIZE, name, 3, in, 1);
    if (n && ns > 1) qf_node_set_attr_int(g, n, "axis", 0);
    return n ? n->outputs[0] : NULL;
}

/* y -> [Relu] -> Q (sy, zy) -> DQ -> graph output "y". */
static void finish(qf_graph *g, qf_value *y, bool relu, float sy, int8_t zy)
{
    REQUIRE(y != NULL, "building: %s", qf_error_message());
    if (relu) y = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, &y, 1)->outputs[0];
    qf_value *qin[3] = {y, constant(g, "sy", QF_DTYPE_F32, 0, NULL, &sy), constant(g, "zy", QF_DTYPE_I8, 0, NULL, &zy)};
    qf_node *q = qf_graph_add_node(g, QF_OP_QUANTIZE, "q", 3, qin, 1);
    REQUIRE(q != NULL, "q");
    REQUIRE_OK(qf_graph_rename_value(g, q->outputs[0], "y_q"));
    qf_value *din[3] = {q->outputs[0], qin[1], qin[2]};
    qf_node *d = qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dq_out", 3, din, 1);
    REQUIRE(d != NULL, "dq");
    REQUIRE_OK(qf_graph_rename_value(g, d->outputs[0], "y"));
    REQUIRE_OK(qf_graph_add_output(g, d->outputs[0]));
    REQUIRE_OK(qf_graph_toposort(g));
    REQUIRE_OK(qf_graph_infer_shapes(g));
}

/* x int8 [1, C, 4, 4] -> Conv(M, group, k x k, pads p, stride s) -> [Relu] -> y. */
static qf_graph *conv_graph(int64_t C, int64_t M, int64_t group, int64_t k, int64_t p, int64_t s, bool relu,
                            bool quantized)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[4] = {1, C, 4, 4}, wd[4] = {M, C / group, k, k};
    float sx = 0.05f, sw[64], sb[64];
    int8_t w[4096];
    int32_t b[64];
    for (int64_t i = 0; i < M * (C / group) * k * k; i++) w[i] = (int8_t)((i * 37) % 255 - 127);
    for (int64_t m = 0; m < M; m++) {
        sw[m] = 0.01f * (float)(m + 1);
        sb[m] = sx * sw[m];
        b[m] = (int32_t)(m * 100 - 50);
    }
    qf_value *x;
    if (quantized) {
        float one = sx;
        x = dq(g, "x_dq", qf_graph_add_input(g, "x", QF_DTYPE_I8, 4, xd), &one, 1, QF_DTYPE_I8);
    } else {
        x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    }
    qf_value *wv = constant(g, "w", QF_DTYPE_I8, 4, wd, w), *bv = constant(g, "b", QF_DTYPE_I32, 1, &M, b);
    qf_value *in[3] = {x, quantized ? dq(g, "w_dq", wv, sw, M, QF_DTYPE_I8) : NULL,
                       quantized ? dq(g, "b_dq", bv, sb, M, QF_DTYPE_I32) : NULL};
    if (!quantized) {
        float wf[4096] = {0}, bf[64] = {0};
        in[1] = constant(g, "wf", QF_DTYPE_F32, 4, wd, wf);
        in[2] = constant(g, "bf", QF_DTYPE_F32, 1, &M, bf);
    }
    qf_node *n = qf_graph_add_node(g, QF_OP_CONV, "conv", 3, in, 1);
    REQUIRE(n != NULL, "conv: %s", qf_error_message());
    const int64_t ks[2] = {k, k}, pads[4] = {p, p, p, p}, st[2] = {s, s};
    qf_node_set_attr_ints(g, n, "kernel_shape", ks, 2);
    qf_node_set_attr_ints(g, n, "pads", pads, 4);
    qf_node_set_attr_ints(g, n, "strides", st, 2);
    qf_node_set_attr_int(g, n, "group", group);
    if (!quantized) {
        REQUIRE_OK(qf_graph_add_output(g, n->outputs[0]));
        REQUIRE_OK(qf_graph_toposort(g));
        REQUIRE_OK(qf_graph_infer_shapes(g));
        return g;
    }
    finish(g, n->outputs[0], relu, 0.1f, relu ? -128 : 3);
    return g;
}

/* x int8 [2, K] -> Gemm(W [M, K], transB) -> y; per-channel weights when pc. */
static qf_graph *gemm_graph(int64_t K, int64_t M, bool pc)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[2] = {2, K}, wd[2] = {M, K};
    float sx = 0.05f, sw[64], sb[64];
    int8_t w[4096];
    int32_t b[64];
    for (int64_t i = 0; i < M * K; i++) w[i] = (int8_t)((i * 29) % 255 - 127);
    for (int64_t m = 0; m < M; m++) {
        sw[m] = pc ? 0.01f * (float)(m + 1) : 0.02f;
        sb[m] = sx * sw[m];
        b[m] = (int32_t)m;
    }
    qf_value *x = dq(g, "x_dq", qf_graph_add_input(g, "x", QF_DTYPE_I8, 2, xd), &sx, 1, QF_DTYPE_I8);
    qf_value *in[3] = {x, dq(g, "w_dq", constant(g, "w", QF_DTYPE_I8, 2, wd, w), sw, pc ? M : 1, QF_DTYPE_I8),
                       dq(g, "b_dq", constant(g, "b", QF_DTYPE_I32, 1, &M, b), sb, pc ? M : 1, QF_DTYPE_I32)};
    qf_node *n = qf_graph_add_node(g, QF_OP_GEMM, "fc", 3, in, 1);
    REQUIRE(n != NULL, "gemm: %s", qf_error_message());
    qf_node_set_attr_int(g, n, "transB", 1);
    finish(g, n->outputs[0], false, 0.1f, 0);
    return g;
}

/* --- tests ------------------------------------------------------------------------ */

static void test_permute(void)
{
    /* OIHW [2, 3, 2, 2] -> OHWI [2, 2, 2, 3]: out[o][h][w][i] = in[o][i][h][w] */
    int8_t in[24], out[24];
    for (int i = 0; i < 24; i++) in[i] = (int8_t)i;
    const int64_t d[4] = {2, 3, 2, 2};
    static const int ohwi[4] = {0, 2, 3, 1}, ihwo[4] = {1, 2, 3, 0};
    qf_tfl_permute4(in, out, d, ohwi, 1);
    for (int o = 0; o < 2; o++)
        for (int h = 0; h < 2; h++)
            for (int w = 0; w < 2; w++)
                for (int i = 0; i < 3; i++)
                    CHECKF(out[((o * 2 + h) * 2 + w) * 3 + i] == in[((o * 3 + i) * 2 + h) * 2 + w], "OHWI at %d %d %d %d",
                           o, h, w, i);
    /* depthwise [M, 1, kh, kw] -> [1, kh, kw, M] */
    const int64_t dd[4] = {6, 1, 2, 2};
    qf_tfl_permute4(in, out, dd, ihwo, 1);
    for (int m = 0; m < 6; m++)
        for (int h = 0; h < 2; h++)
            for (int w = 0; w < 2; w++) CHECK(out[(h * 2 + w) * 6 + m] == in[(m * 2 + h) * 2 + w]);
    /* NCHW axis -> NHWC axis; other ranks unchanged */
    CHECK(qf_tfl_phys_axis(4, 0) == 0 && qf_tfl_phys_axis(4, 1) == 3 && qf_tfl_phys_axis(4, 2) == 1 &&
          qf_tfl_phys_axis(4, 3) == 2);
    CHECK(qf_tfl_phys_axis(2, 1) == 1 && qf_tfl_phys_axis(3, 2) == 2);
}

static void expect_shape(const int32_t *s, int ndim, int a, int b, int c, int d)
{
    const int want[4] = {a, b, c, d};
    for (int i = 0; i < ndim && i < 4; i++) CHECKF(s[i] == want[i], "dim %d: %d, want %d", i, s[i], want[i]);
}

static void test_conv(void)
{
    qf_graph *g = conv_graph(2, 3, 1, 3, 1, 1, true, true);
    qf_tflite_result r;
    qf_tflite_options o = {0};
    REQUIRE_OK(qf_tflite_export(g, &o, &r));
    REQUIRE(r.nops == 1, "%d ops", r.nops);
    CHECK(strcmp(r.ops[0].op, "CONV_2D") == 0);
    CHECK(strcmp(r.ops[0].node, "conv") == 0);
    CHECK(strcmp(r.ops[0].output, "y_q") == 0); /* the Q output's ONNX name */
    CHECK(r.ops[0].ninputs == 1 && r.ops[0].noutputs == 1);
    expect_shape(r.ops[0].in_shape[0], 4, 1, 4, 4, 2);
    expect_shape(r.ops[0].out_shape[0], 4, 1, 4, 4, 3);
    CHECK(r.ops[0].macs == 4 * 4 * 3 * 3 * 3 * 2);
    CHECK(r.ops[0].weight_bytes == 3 * 2 * 3 * 3 + 3 * 4);
    CHECK(r.weight_bytes == r.ops[0].weight_bytes && r.macs == r.ops[0].macs);
    CHECK(r.size > 8 && memcmp(r.data + 4, "TFL3", 4) == 0);
    /* one live input + output: 32 + 48 bytes, 16-byte aligned */
    CHECK(r.peak_activation_bytes == 32 + 48);
    char *json = NULL;
    size_t len = 0;
    double lsb[1] = {1.0};
    REQUIRE_OK(qf_tflite_report_json(&r, lsb, &json, &len));
    CHECK(strstr(json, "\"op\": \"CONV_2D\"") && strstr(json, "\"max_lsb\": 1}"));
    qf_free(json);
    REQUIRE_OK(qf_tflite_report_json(&r, NULL, &json, &len));
    CHECK(strstr(json, "\"max_lsb\": null"));
    qf_free(json);
    qf_tflite_result_free(&r);
    /* float I/O: QUANTIZE and DEQUANTIZE at the boundaries */
    o.float_io = true;
    REQUIRE_OK(qf_tflite_export(g, &o, &r));
    CHECK(r.nops == 2 && strcmp(r.ops[r.nops - 1].op, "DEQUANTIZE") == 0);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
}

static void test_depthwise(void)
{
    /* group = C = 2, M = 4: depth multiplier 2; stride 2, pads 1 -> a widened SAME kernel */
    qf_graph *g = conv_graph(2, 4, 2, 3, 1, 2, false, true);
    qf_tflite_result r;
    REQUIRE_OK(qf_tflite_export(g, NULL, &r));
    REQUIRE(r.nops == 1, "%d ops", r.nops);
    CHECK(strcmp(r.ops[0].op, "DEPTHWISE_CONV_2D") == 0);
    expect_shape(r.ops[0].out_shape[0], 4, 1, 2, 2, 4);
    /* the kernel widened to 4 x 4 (zeros) so that SAME pads as ONNX's [1, 1] */
    CHECK(r.ops[0].weight_bytes == 4 * 4 * 4 + 4 * 4);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
}

static void test_fully_connected(void)
{
    qf_graph *g = gemm_graph(8, 5, false);
    qf_tflite_result r;
    REQUIRE_OK(qf_tflite_export(g, NULL, &r));
    REQUIRE(r.nops == 1, "%d ops", r.nops);
    CHECK(strcmp(r.ops[0].op, "FULLY_CONNECTED") == 0 && strcmp(r.ops[0].node, "fc") == 0);
    expect_shape(r.ops[0].in_shape[0], 2, 2, 8, 0, 0);
    expect_shape(r.ops[0].out_shape[0], 2, 2, 5, 0, 0);
    CHECK(r.ops[0].macs == 2 * 5 * 8);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
}

/* A Sigmoid between a DQ and a Q: LOGISTIC, whose int8 output TFLite fixes
 * at 1/256, -128; other qparams (another tool's) get a QUANTIZE after it. */
static void test_fixed_qparams(void)
{
    for (int k = 0; k < 2; k++) {
        qf_graph *g = NULL;
        REQUIRE_OK(qf_graph_init(&g));
        const int64_t xd[4] = {1, 3, 4, 4};
        float sx = 0.05f;
        qf_value *x = dq(g, "x_dq", qf_graph_add_input(g, "x", QF_DTYPE_I8, 4, xd), &sx, 1, QF_DTYPE_I8);
        qf_node *n = qf_graph_add_node(g, QF_OP_SIGMOID, "sig", 1, &x, 1);
        REQUIRE(n != NULL, "sigmoid");
        finish(g, n->outputs[0], false, k ? 0.004f : 1.0f / 256, k ? -100 : -128);
        qf_tflite_result r;
        REQUIRE_OK(qf_tflite_export(g, NULL, &r));
        CHECKF(r.nops == 1 + k && strcmp(r.ops[0].op, "LOGISTIC") == 0, "case %d: %d ops", k, r.nops);
        if (k) CHECK(r.nops == 2 && strcmp(r.ops[1].op, "QUANTIZE") == 0 && strcmp(r.ops[1].output, "y_q") == 0);
        qf_tflite_result_free(&r);
        qf_graph_free(g);
    }
}

static void test_refusals(void)
{
    qf_tflite_result r;
    /* Per-channel Linear weights: a 1x1 CONV_2D between two RESHAPEs (a
     * per-channel FULLY_CONNECTED runs on neither TFLite 2.2 nor ArmNN). */
    qf_graph *g = gemm_graph(8, 5, true);
    REQUIRE_OK(qf_tflite_export(g, NULL, &r));
    CHECKF(r.nops == 3 && strcmp(r.ops[0].op, "RESHAPE") == 0 && strcmp(r.ops[1].op, "CONV_2D") == 0 &&
               strcmp(r.ops[2].op, "RESHAPE") == 0,
           "per-channel Gemm: %d ops, the first %s", r.nops, r.nops ? r.ops[0].op : "-");
    qf_tflite_result_free(&r);
    qf_graph_free(g);
    g = conv_graph(2, 3, 1, 3, 1, 1, false, false);
    CHECK_ERR(qf_tflite_export(g, NULL, &r), QF_ERR_UNSUPPORTED, "node 'conv' (Conv)");
    qf_tflite_result_free(&r);
    qf_graph_free(g);
}

/* A grouped conv (group 2 of 4 channels): SPLIT -> a CONV_2D per group ->
 * CONCATENATION (split_group_conv), the concatenation named as the conv. */
static void test_group_conv(void)
{
    qf_tflite_result r;
    qf_graph *g = conv_graph(4, 4, 2, 1, 0, 1, false, true);
    REQUIRE_OK(qf_tflite_export(g, NULL, &r));
    CHECKF(r.nops == 4 && strcmp(r.ops[0].op, "SPLIT") == 0 &&
               strcmp(r.ops[1].op, "CONV_2D") == 0 && strcmp(r.ops[2].op, "CONV_2D") == 0 &&
               strcmp(r.ops[3].op, "CONCATENATION") == 0 && strcmp(r.ops[3].node, "conv") == 0,
           "%d ops", r.nops);
    CHECK(r.ops[1].out_shape[0][3] == 2 && r.ops[3].out_shape[0][3] == 4);
    qf_tflite_result_free(&r);
    qf_graph_free(g);
}

/* The op table (src/tflite/tflite_rows.c): every row with an emitter names
 * a builtin the writer knows (QF_TFL_BUILTIN_LIST), a CUSTOM row its
 * custom_code; a row without one is all zero (the op is refused). */
static void test_rows(void)
{
    int mapped = 0;
    for (int op = 0; op < QF_OP_COUNT; op++) {
        const qf_tfl_row *r = &qf_tfl_rows[op];
        if (!r->emit) {
            CHECKF(r->builtin == 0 && !r->source && !r->custom, "%s: a row without an emitter", qf_op_name(op));
            continue;
        }
        mapped++;
        CHECKF(strcmp(qf_tfl_builtin_name(r->builtin), "?") != 0, "%s: builtin %d is not in QF_TFL_BUILTIN_LIST",
               qf_op_name(op), r->builtin);
        CHECKF((r->builtin == QF_TFL_CUSTOM) == (r->custom != NULL), "%s: custom_code and CUSTOM disagree",
               qf_op_name(op));
    }
    CHECK(mapped >= 26);
    CHECK(qf_tfl_rows[QF_OP_QLINEAR_CONV].builtin == QF_TFL_CONV_2D);
    CHECK(strcmp(qf_tfl_builtin_name(QF_TFL_TRANSPOSE_CONV), "TRANSPOSE_CONV") == 0);
}

int main(void)
{
    RUN(test_permute);
    RUN(test_conv);
    RUN(test_depthwise);
    RUN(test_fully_connected);
    RUN(test_fixed_qparams);
    RUN(test_refusals);
    RUN(test_group_conv);
    RUN(test_rows);
    return qf_check_report();
}
