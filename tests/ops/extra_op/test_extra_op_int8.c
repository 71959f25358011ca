/* The int8 form of the made-up op square_plus (square_plus_int8.c,
 * qf_test_extra_quant.h), end to end through the library: a graph
 * x -> square_plus -> y is quantized (the generic profile quantizes every op
 * with a pattern, so square_plus too; neutron's list does not name it), the
 * QDQ graph is lowered for the int8 executor (its row's lowering entry makes
 * one qsquare_plus node) and run. Its output must equal, bit for bit, (a)
 * the QDQ graph run as written (DQ -> float square_plus -> Q) and (b) an
 * independent computation in the test of the same integers: quantize x,
 * dequantize, x * x + bias, quantize with the output's qparams. */
#include <fenv.h>
#include <math.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

enum { NS = 64, W = 8 };

static const float bias = 0.25f;

/* x [-1, W] -> square_plus(bias) -> y */
static qf_graph *model(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = 13;
    int64_t dims[2] = {-1, W};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, dims);
    REQUIRE(x, "input: %s", qf_error_message());
    dims[0] = 1;
    REQUIRE_OK(qf_graph_set_input_shape(g, 0, 2, dims));
    qf_node *n = qf_graph_add_node(g, QF_OP_SQUARE_PLUS, "sq", 1, &x, 1);
    REQUIRE(n, "square_plus: %s", qf_error_message());
    REQUIRE_OK(qf_node_set_attr_float(g, n, "bias", bias));
    REQUIRE_OK(qf_graph_add_output(g, n->outputs[0]));
    x->type.dims[0] = -1;
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

/* Samples in [-2, 2), not symmetric around 0, deterministic. */
static void fill(float *x, int64_t n)
{
    uint32_t s = 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / (float)(1u << 24) * 4.0f - 2.0f + (i % 7 == 0 ? 0.125f : 0.0f);
    }
}

static int count_op(const qf_graph *g, qf_op op)
{
    int k = 0;
    for (const qf_node *n = g->first; n; n = n->next) k += n->op == op;
    return k;
}

static const qf_node *find_op(const qf_graph *g, qf_op op)
{
    for (const qf_node *n = g->first; n; n = n->next)
        if (n->op == op) return n;
    return NULL;
}

/* Run g on x [NS, W]; y gets the output. */
static void run(qf_graph *g, const float *x, float *y)
{
    int64_t dims[2] = {NS, W};
    REQUIRE_OK(qf_graph_set_input_shape(g, 0, 2, dims));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    qf_tensor xt;
    qf_tensor_view(&xt, QF_DTYPE_F32, 2, dims, (void *)x);
    const qf_tensor *in[1] = {&xt};
    qf_plan *p = NULL;
    REQUIRE_OK(qf_plan_init(&p, g));
    qf_status st = qf_plan_run(p, in, 1);
    if (st == QF_OK) memcpy(y, qf_plan_output(p, 0)->data, sizeof(float) * NS * W);
    qf_plan_free(p);
    REQUIRE_OK(st);
}

/* The test's own int8 arithmetic: QuantizeLinear (round half to even,
 * saturate), DequantizeLinear, the op in float32. */
static int32_t quantize(float v, float s, int32_t zp)
{
    float r = nearbyintf(v / s) + (float)zp; /* the default rounding mode: half to even */
    return r < -128.0f ? -128 : r > 127.0f ? 127 : (int32_t)r;
}

static void test_neutron_leaves_it_float(void)
{
    qf_graph *g = model();
    float x[NS * W];
    fill(x, NS * W);
    int64_t dims[2] = {NS, W};
    qf_tensor xt;
    qf_tensor_view(&xt, QF_DTYPE_F32, 2, dims, x);
    const qf_tensor *data[1] = {&xt};
    qf_data_source src = qf_data_source_tensors(data, 1);
    qf_quantize_options o = {.profile = qf_quant_profile_find("neutron"), .batch = 16};
    qf_quantize_result r = {0};
    REQUIRE_OK(qf_quantize(g, &src, &o, &r));
    CHECKF(count_op(g, QF_OP_QUANTIZE) == 0, "neutron quantized square_plus (%d QuantizeLinear)",
           count_op(g, QF_OP_QUANTIZE));
    CHECK(!qf_quant_profile_takes(o.profile, QF_OP_SQUARE_PLUS));
    CHECK(qf_quant_profile_takes(qf_quant_profile_find("generic"), QF_OP_SQUARE_PLUS));
    qf_quantize_result_free(&r);
    qf_graph_free(g);
}

static void test_int8(void)
{
    CHECK(fegetround() == FE_TONEAREST);
    CHECK(qf_quant_op_out_qparams_slot(QF_OP_QSQUARE_PLUS) == 3);
    CHECK(qf_quant_op_out_qparams_slot(QF_OP_SQUARE_PLUS) == -1);
    qf_graph *g = model();
    float x[NS * W];
    fill(x, NS * W);
    int64_t dims[2] = {NS, W};
    qf_tensor xt;
    qf_tensor_view(&xt, QF_DTYPE_F32, 2, dims, x);
    const qf_tensor *data[1] = {&xt};
    qf_data_source src = qf_data_source_tensors(data, 1);
    qf_quantize_options o = {.profile = qf_quant_profile_find("generic"), .batch = 16};
    qf_quantize_result r = {0};
    REQUIRE_OK(qf_quantize(g, &src, &o, &r));
    qf_quantize_result_free(&r);

    /* DQ -> square_plus -> Q: its input's and output's qparams */
    const qf_node *sq = find_op(g, QF_OP_SQUARE_PLUS);
    REQUIRE(sq, "square_plus is gone after quantize");
    const qf_node *dq = sq->inputs[0]->producer,
                  *q = sq->outputs[0]->nuses == 1 ? sq->outputs[0]->uses[0].node : NULL;
    REQUIRE(dq && dq->op == QF_OP_DEQUANTIZE && q && q->op == QF_OP_QUANTIZE,
            "square_plus is not between a DequantizeLinear and a QuantizeLinear");
    const float sx = *(const float *)dq->inputs[1]->type.data,
                sy = *(const float *)q->inputs[1]->type.data;
    const int32_t zx = *(const int8_t *)dq->inputs[2]->type.data,
                  zy = *(const int8_t *)q->inputs[2]->type.data;

    qf_graph *low = NULL;
    REQUIRE_OK(qf_graph_clone(g, &low));
    int lowered = 0;
    REQUIRE_OK(qf_quant_lower_int8(low, NULL, QF_REQUANT_FIXED_POINT, &lowered));
    CHECKF(lowered == 1 && count_op(low, QF_OP_QSQUARE_PLUS) == 1 &&
               count_op(low, QF_OP_SQUARE_PLUS) == 0,
           "lowered %d groups: %d qsquare_plus, %d square_plus left", lowered,
           count_op(low, QF_OP_QSQUARE_PLUS), count_op(low, QF_OP_SQUARE_PLUS));
    /* ONNX's requantization: no ONNX integer op computes it, it stays as written */
    qf_graph *onnx = NULL;
    REQUIRE_OK(qf_graph_clone(g, &onnx));
    REQUIRE_OK(qf_quant_lower_int8(onnx, NULL, QF_REQUANT_ONNX, &lowered));
    CHECKF(lowered == 0, "lowered %d groups with ONNX's requantization", lowered);
    qf_graph_free(onnx);

    float x2[NS * W], ysim[NS * W], yint[NS * W];
    for (int i = 0; i < NS * W; i++)
        x2[i] = x[(i * 37) % (NS * W)] * 1.25f; /* some outside the calibrated range */
    run(g, x2, ysim);
    run(low, x2, yint);
    int bad = 0;
    for (int i = 0; i < NS * W; i++) {
        const float xd = (float)(quantize(x2[i], sx, zx) - zx) * sx;
        const int32_t want = quantize(xd * xd + bias, sy, zy);
        const float wantf = (float)(want - zy) * sy;
        if (yint[i] != ysim[i] || yint[i] != wantf) {
            if (bad++ < 10)
                FAIL("x[%d] = %.9g: int8 executor %.9g, QDQ as written %.9g, expected %.9g (q %d)",
                     i, (double)x2[i], (double)yint[i], (double)ysim[i], (double)wantf, want);
        }
    }
    CHECKF(bad == 0, "%d of %d outputs differ", bad, NS * W);
    qf_graph_free(low);
    qf_graph_free(g);
}

int main(void)
{
    RUN(test_neutron_leaves_it_float);
    RUN(test_int8);
    return qf_check_report();
}
