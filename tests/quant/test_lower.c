/* The int8 executor's lowering (src/quant/lower.c) on a QDQ model written by
 * `qfold quantize` (the fashion case of quantize_test.py):
 *
 *   test_lower MODEL.onnx CONVS GEMMS [OTHERS [OTHERS_ONNX [OPS]]]
 *
 * every Conv and Gemm group becomes a QLinearConv with the TFLite
 * requantization attribute (or without it for ONNX's), none is left, and a
 * second lowering finds nothing to do; OTHERS (default 0) more groups (a
 * pool, a mean, a concat, a ConvTranspose) become integer nodes too with
 * TFLite's requantization, OTHERS_ONNX (default 0) with ONNX's (a max pool),
 * and each op of the comma-separated list OPS (qfold's names, e.g.
 * qconv_transpose,qconcat) is among the nodes lowering made. And on a graph built here: a
 * DQ -> MaxPool -> Q of one set of qparams becomes the MaxPool of the int8
 * tensor, with the same outputs as the float simulation; with two sets of
 * qparams it stays as it is. A DQ -> Add -> [Relu] -> Q becomes the int8 Add
 * within 1 LSB of the simulation (`test_lower --graphs` runs only these). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

static const char *model;
static int want_conv, want_gemm, want_other, want_other_onnx;
static const char *want_ops;

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
    const int other = rq == QF_REQUANT_FIXED_POINT ? want_other : want_other_onnx;
    CHECKF(k == want_conv + want_gemm + other && ql == want_conv + want_gemm && conv == 0 && gemm == 0,
           "lowered %d (want %d + %d + %d): %d QLinearConv, %d Conv and %d Gemm left", k, want_conv, want_gemm,
           other, ql, conv, gemm);
    CHECKF(fixed == (rq == QF_REQUANT_FIXED_POINT ? ql : 0), "%d of %d with the fixed-point attribute", fixed, ql);
    CHECK_OK(qf_graph_verify_shapes(g));
    for (const char *p = want_ops; p && *p && rq == QF_REQUANT_FIXED_POINT;) {
        size_t len = strcspn(p, ",");
        char op[64];
        snprintf(op, sizeof op, "%.*s", (int)len, p);
        int found = 0;
        qf_graph_for_each_node(g, n) found += !strcmp(qf_op_name(n->op), op);
        CHECKF(found > 0, "no %s node after lowering", op);
        p += len + (p[len] == ',');
    }
    CHECK_OK(qf_quant_lower_int8(g, NULL, rq, &k));
    CHECKF(k == 0, "a second lowering lowered %d", k);
    qf_graph_free(g);
}

static void test_fixed_point(void) { check_lowering(QF_REQUANT_FIXED_POINT); }
static void test_onnx(void) { check_lowering(QF_REQUANT_ONNX); }

static qf_value *scalar(qf_graph *g, const char *name, qf_dtype dt, const void *v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, 0, NULL) != QF_OK) return NULL;
    memcpy(t.data, v, qf_tensor_nbytes(&t));
    qf_value *c = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    if (!c) qf_tensor_free(&t);
    return c;
}

/* x (int8) -> DQ -> MaxPool 3x3 / 2, pads 1 -> Q (scale sy, zp zy) -> DQ -> y. */
static qf_graph *max_pool_graph(float sy, int8_t zy)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    g->opset = 13;
    const int64_t xd[4] = {2, 3, 9, 8}, k[2] = {3, 3}, st[2] = {2, 2}, pads[4] = {1, 1, 1, 0};
    const float sx = 0.05f;
    const int8_t zx = -3;
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_I8, 4, xd);
    qf_value *in[3] = {x, scalar(g, "sx", QF_DTYPE_F32, &sx), scalar(g, "zx", QF_DTYPE_I8, &zx)};
    qf_node *dq = qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dq", 3, in, 1);
    qf_node *mp = dq ? qf_graph_add_node(g, QF_OP_MAX_POOL, "pool", 1, &dq->outputs[0], 1) : NULL;
    if (!mp) return g;
    qf_node_set_attr_ints(g, mp, "kernel_shape", k, 2);
    qf_node_set_attr_ints(g, mp, "strides", st, 2);
    qf_node_set_attr_ints(g, mp, "pads", pads, 4);
    qf_value *qin[3] = {mp->outputs[0], scalar(g, "sy", QF_DTYPE_F32, &sy), scalar(g, "zy", QF_DTYPE_I8, &zy)};
    qf_node *q = qf_graph_add_node(g, QF_OP_QUANTIZE, "q", 3, qin, 1);
    qf_value *din[3] = {q ? q->outputs[0] : NULL, qin[1], qin[2]};
    qf_node *dq2 = q ? qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dq_out", 3, din, 1) : NULL;
    if (dq2) qf_graph_add_output(g, dq2->outputs[0]);
    return g;
}

static void run_graph(qf_graph *g, const qf_tensor *x, qf_tensor *y)
{
    qf_plan *p = NULL;
    REQUIRE_OK(qf_plan_init(&p, g));
    const qf_tensor *feed[1] = {x};
    REQUIRE_OK(qf_plan_run(p, feed, 1));
    const qf_tensor *o = qf_plan_output(p, 0);
    REQUIRE_OK(qf_tensor_init(y, o->dtype, o->ndim, o->dims));
    memcpy(y->data, o->data, qf_tensor_nbytes(o));
    qf_plan_free(p);
}

static void check_max_pool(float sy, int8_t zy, bool lowered)
{
    qf_graph *g = max_pool_graph(sy, zy), *sim = max_pool_graph(sy, zy);
    REQUIRE(g && sim && g->noutputs == 1 && sim->noutputs == 1, "graph: %s", qf_error_message());
    REQUIRE_OK(qf_graph_infer_shapes(g));
    REQUIRE_OK(qf_graph_infer_shapes(sim));
    int k = -1;
    REQUIRE_OK(qf_quant_lower_int8(g, NULL, QF_REQUANT_FIXED_POINT, &k));
    int pools = 0, int8_pools = 0, quants = 0;
    for (const qf_node *n = g->first; n; n = n->next) {
        pools += n->op == QF_OP_MAX_POOL;
        int8_pools += n->op == QF_OP_MAX_POOL && n->inputs[0]->type.dtype == QF_DTYPE_I8;
        quants += n->op == QF_OP_QUANTIZE;
    }
    CHECKF(k == (lowered ? 1 : 0) && pools == 1 && int8_pools == (lowered ? 1 : 0) && quants == (lowered ? 0 : 1),
           "lowered %d: %d MaxPool (%d on int8), %d QuantizeLinear", k, pools, int8_pools, quants);
    qf_tensor x = {0}, a = {0}, b = {0};
    const int64_t xd[4] = {2, 3, 9, 8};
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_I8, 4, xd));
    for (int64_t i = 0; i < qf_tensor_numel(&x); i++) ((int8_t *)x.data)[i] = (int8_t)((i * 73 + 11) % 256 - 128);
    run_graph(g, &x, &a);
    run_graph(sim, &x, &b);
    CHECKF(a.ndim == b.ndim && qf_tensor_numel(&a) == qf_tensor_numel(&b) &&
               memcmp(a.data, b.data, qf_tensor_nbytes(&a)) == 0,
           "the lowered max pool differs from the float simulation");
    qf_tensor_free(&x);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_graph_free(g);
    qf_graph_free(sim);
}

/* a, b (int8) -> DQ each -> Add -> [Relu] -> Q (sy, zy) -> DQ -> y. */
static qf_graph *add_graph(float sa, int8_t za, float sb, int8_t zb, float sy, int8_t zy, bool relu)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    g->opset = 13;
    const int64_t d[4] = {3, 5, 7, 11};
    qf_value *a = qf_graph_add_input(g, "a", QF_DTYPE_I8, 4, d), *b = qf_graph_add_input(g, "b", QF_DTYPE_I8, 4, d);
    qf_value *ia[3] = {a, scalar(g, "sa", QF_DTYPE_F32, &sa), scalar(g, "za", QF_DTYPE_I8, &za)};
    qf_value *ib[3] = {b, scalar(g, "sb", QF_DTYPE_F32, &sb), scalar(g, "zb", QF_DTYPE_I8, &zb)};
    qf_node *dqa = qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dqa", 3, ia, 1);
    qf_node *dqb = qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dqb", 3, ib, 1);
    if (!dqa || !dqb) return g;
    qf_value *sum[2] = {dqa->outputs[0], dqb->outputs[0]};
    qf_node *add = qf_graph_add_node(g, QF_OP_ADD, "add", 2, sum, 1);
    qf_node *r = add && relu ? qf_graph_add_node(g, QF_OP_RELU, "relu", 1, &add->outputs[0], 1) : add;
    if (!r) return g;
    qf_value *qin[3] = {r->outputs[0], scalar(g, "sy", QF_DTYPE_F32, &sy), scalar(g, "zy", QF_DTYPE_I8, &zy)};
    qf_node *q = qf_graph_add_node(g, QF_OP_QUANTIZE, "q", 3, qin, 1);
    qf_value *din[3] = {q ? q->outputs[0] : NULL, qin[1], qin[2]};
    qf_node *dq2 = q ? qf_graph_add_node(g, QF_OP_DEQUANTIZE, "dq_out", 3, din, 1) : NULL;
    if (dq2) qf_graph_add_output(g, dq2->outputs[0]);
    return g;
}

/* The int8 Add (TFLite's arithmetic) against the float simulation of the
 * same graph: within 1 LSB everywhere, equal on >= 99 %; the clamp of a
 * fused Relu honoured. Not lowered with ONNX's requantization, nor when the
 * output scale is too small for TFLite's multipliers. */
static void check_add(float sa, int8_t za, float sb, int8_t zb, float sy, int8_t zy, bool relu,
                      qf_int8_requant_kind rq, bool lowered)
{
    qf_graph *g = add_graph(sa, za, sb, zb, sy, zy, relu), *sim = add_graph(sa, za, sb, zb, sy, zy, relu);
    REQUIRE(g && sim && g->noutputs == 1 && sim->noutputs == 1, "graph: %s", qf_error_message());
    REQUIRE_OK(qf_graph_infer_shapes(g));
    REQUIRE_OK(qf_graph_infer_shapes(sim));
    int k = -1, qadds = 0, adds = 0;
    REQUIRE_OK(qf_quant_lower_int8(g, NULL, rq, &k));
    for (const qf_node *n = g->first; n; n = n->next) {
        qadds += n->op == QF_OP_QADD;
        adds += n->op == QF_OP_ADD;
    }
    CHECKF(k == (lowered ? 1 : 0) && qadds == (lowered ? 1 : 0) && adds == (lowered ? 0 : 1),
           "lowered %d: %d int8 Add, %d Add", k, qadds, adds);
    qf_tensor a = {0}, b = {0}, y = {0}, ys = {0};
    const int64_t d[4] = {3, 5, 7, 11};
    REQUIRE_OK(qf_tensor_init(&a, QF_DTYPE_I8, 4, d));
    REQUIRE_OK(qf_tensor_init(&b, QF_DTYPE_I8, 4, d));
    int64_t count = qf_tensor_numel(&a);
    for (int64_t i = 0; i < count; i++) {
        ((int8_t *)a.data)[i] = (int8_t)((i * 73 + 11) % 256 - 128);
        ((int8_t *)b.data)[i] = (int8_t)((i * 151 + 7) % 256 - 128);
    }
    const qf_tensor *feed[2] = {&a, &b};
    qf_plan *p = NULL;
    for (int which = 0; which < 2; which++) {
        REQUIRE_OK(qf_plan_init(&p, which ? sim : g));
        REQUIRE_OK(qf_plan_run(p, feed, 2));
        const qf_tensor *o = qf_plan_output(p, 0);
        qf_tensor *dst = which ? &ys : &y;
        REQUIRE_OK(qf_tensor_init(dst, o->dtype, o->ndim, o->dims));
        memcpy(dst->data, o->data, qf_tensor_nbytes(o));
        qf_plan_free(p);
        p = NULL;
    }
    int64_t off = 0, bad = 0, below = 0;
    for (int64_t i = 0; i < count; i++) {
        float u = ((const float *)y.data)[i], v = ((const float *)ys.data)[i];
        float lsb = fabsf(u - v) / sy;
        off += lsb > 0.5f;
        bad += lsb > 1.5f;
        below += relu && u < 0.0f;
    }
    CHECKF(bad == 0 && (double)off <= 0.01 * (double)count && below == 0,
           "int8 Add vs float: %lld of %lld more than 1 LSB off, %lld 1 LSB off, %lld below the Relu", (long long)bad,
           (long long)count, (long long)off, (long long)below);
    if (!lowered)
        CHECKF(off == 0, "not lowered, yet %lld outputs differ from the simulation", (long long)off);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_tensor_free(&y);
    qf_tensor_free(&ys);
    qf_graph_free(g);
    qf_graph_free(sim);
}

static void test_add(void) { check_add(0.031f, -5, 0.047f, 3, 0.06f, -20, false, QF_REQUANT_FIXED_POINT, true); }
static void test_add_relu(void) { check_add(0.02f, 0, 0.013f, -128, 0.03f, -128, true, QF_REQUANT_FIXED_POINT, true); }
static void test_add_onnx(void) { check_add(0.031f, -5, 0.047f, 3, 0.06f, -20, false, QF_REQUANT_ONNX, false); }
static void test_add_tiny_scale(void)
{
    check_add(0.5f, 0, 0.25f, 0, 1e-7f, 0, false, QF_REQUANT_FIXED_POINT, false);
}

static void test_max_pool_shared(void) { check_max_pool(0.05f, -3, true); }
static void test_max_pool_requantized(void) { check_max_pool(0.07f, -3, false); }

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--graphs")) {
        RUN(test_max_pool_shared);
        RUN(test_max_pool_requantized);
        RUN(test_add);
        RUN(test_add_relu);
        RUN(test_add_onnx);
        RUN(test_add_tiny_scale);
        return qf_check_report();
    }
    if (argc < 4 || argc > 7) {
        fprintf(stderr, "usage: test_lower MODEL.onnx CONVS GEMMS [OTHERS [OTHERS_ONNX [OPS]]]\n");
        return 2;
    }
    model = argv[1];
    want_conv = atoi(argv[2]);
    want_gemm = atoi(argv[3]);
    want_other = argc > 4 ? atoi(argv[4]) : 0;
    want_other_onnx = argc > 5 ? atoi(argv[5]) : 0;
    want_ops = argc > 6 ? argv[6] : NULL;
    RUN(test_fixed_point);
    RUN(test_onnx);
    RUN(test_max_pool_shared);
    RUN(test_max_pool_requantized);
    RUN(test_add);
    RUN(test_add_relu);
    RUN(test_add_onnx);
    RUN(test_add_tiny_scale);
    return qf_check_report();
}
