/* The int8 executor's lowering (src/quant/lower.c) on a QDQ model written by
 * `qfold quantize` (the fashion case of quantize_test.py):
 *
 *   test_lower MODEL.onnx CONVS GEMMS
 *
 * every Conv and Gemm group becomes a QLinearConv with the TFLite
 * requantization attribute (or without it for ONNX's), none is left, and a
 * second lowering finds nothing to do. */
#include <stdlib.h>
#include <string.h>

#include "qfold/io.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

static const char *model;
static int want_conv, want_gemm;

static void count(const qf_graph *g, int *conv, int *gemm, int *ql, int *fixed)
{
    *conv = *gemm = *ql = *fixed = 0;
    qf_graph_for_each_node(g, n) {
        *conv += n->op == QF_OP_CONV;
        *gemm += n->op == QF_OP_GEMM;
        *ql += n->op == QF_OP_QLINEAR_CONV;
        *fixed += n->op == QF_OP_QLINEAR_CONV && qf_node_attr_int(n, "qfold_requant", 0) == 1;
    }
}

static void check_lowering(qf_int8_requant_kind rq)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_onnx_load(model, &g));
    int conv, gemm, ql, fixed, k = -1;
    count(g, &conv, &gemm, &ql, &fixed);
    CHECKF(conv == want_conv && gemm == want_gemm && ql == 0, "before: %d Conv, %d Gemm, %d QLinearConv", conv, gemm,
           ql);
    CHECK_OK(qf_quant_lower_int8(g, NULL, rq, &k));
    count(g, &conv, &gemm, &ql, &fixed);
    CHECKF(k == want_conv + want_gemm && ql == k && conv == 0 && gemm == 0,
           "lowered %d: %d QLinearConv, %d Conv and %d Gemm left", k, ql, conv, gemm);
    CHECKF(fixed == (rq == QF_REQUANT_FIXED_POINT ? ql : 0), "%d of %d with the fixed-point attribute", fixed, ql);
    CHECK_OK(qf_graph_verify_shapes(g));
    CHECK_OK(qf_quant_lower_int8(g, NULL, rq, &k));
    CHECKF(k == 0, "a second lowering lowered %d", k);
    qf_graph_free(g);
}

static void test_fixed_point(void) { check_lowering(QF_REQUANT_FIXED_POINT); }
static void test_onnx(void) { check_lowering(QF_REQUANT_ONNX); }

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_lower MODEL.onnx CONVS GEMMS\n");
        return 2;
    }
    model = argv[1];
    want_conv = atoi(argv[2]);
    want_gemm = atoi(argv[3]);
    RUN(test_fixed_point);
    RUN(test_onnx);
    return qf_check_report();
}
