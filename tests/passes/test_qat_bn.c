/* qat_bn_add / qat_bn_add_exact / qat_bn_remove (src/passes/qat_bn_*.c):
 * for Conv and ConvTranspose (groups 1 and 2) and linear, with and without
 * bias, epsilon 1e-5 and 1e-3, with and without a weight fake_quant, both
 * forms (approximate, exact), on random BN statistics:
 *   - add: one rewrite, the simulation's nodes in place, the op without its
 *     bias; in inference the simulated graph gives the original's outputs
 *     to float rounding (W*s / s; the exact form's W*s and
 *     beta - gamma * (mean - b) / r);
 *   - add then remove: the original graph again (same node count, the op
 *     reads W and b, BN its statistics) and outputs bit-identical to the
 *     original's;
 *   - remove leaves a simulation node whose chain it did not make alone,
 *     with the reason, and a chain of ONNX ops that looks like the
 *     simulation (PyTorch's export: Conv -> Div -> Add -> BN);
 *   - qat_bn_add_exact refuses a BN whose epsilon or momentum is missing or
 *     absurd, naming it, and leaves the graph as it was.
 * The reference kernels run both sides, so "bit-identical" is exact. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "tools/qf_check.h"
#include "tools/qf_test_graph.h"

static uint64_t rng = 0x7e57ab1e12345ull;

typedef struct qcase {
    char name[96];
    qf_op op;
    int group;
    bool bias, fq;
    float eps;
    bool exact;
} qcase;

/* x -> [fake_quant(W)] -> op -> BN -> Relu -> y */
static qf_graph *build(const qcase *c, qf_tensor *x)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    g->opset = 13;
    const int64_t cin = 4, cout = 6;
    int64_t xd[4] = {2, cin, 5, 6}, wd[4], bd[1] = {cout}, one[1] = {1};
    int xr = 4, wr = 4;
    if (c->op == QF_OP_LINEAR) {
        xd[0] = 3;
        xd[1] = 5;
        xr = 2;
        wd[0] = cout;
        wd[1] = 5;
        wr = 2;
    } else if (c->op == QF_OP_CONV) {
        wd[0] = cout, wd[1] = cin / c->group, wd[2] = 3, wd[3] = 2;
    } else {
        wd[0] = cin, wd[1] = cout / c->group, wd[2] = 2, wd[3] = 3;
    }
    qf_value *xv = qf_graph_add_input(g, "x", QF_DTYPE_F32, xr, xd);
    qf_value *w = qf_test_const(g, &rng, "w", QF_VALUE_PARAMETER, wr, wd, -1, 1);
    qf_value *b = c->bias ? qf_test_const(g, &rng, "b", QF_VALUE_PARAMETER, 1, bd, -0.5f, 0.5f) : NULL;
    qf_value *wsrc = w;
    if (c->fq) {
        qf_tensor t;
        if (qf_tensor_init(&t, QF_DTYPE_F32, 1, one) != QF_OK) return NULL;
        ((float *)t.data)[0] = 0.02f;
        qf_value *sc = qf_graph_add_constant(g, "fq_scale", QF_VALUE_BUFFER, &t);
        qf_value *zp = qf_test_const(g, &rng, "fq_zp", QF_VALUE_BUFFER, 1, one, 0, 0);
        qf_value *mn = qf_test_const(g, &rng, "fq_min", QF_VALUE_BUFFER, 1, one, -1, -1);
        qf_value *mx = qf_test_const(g, &rng, "fq_max", QF_VALUE_BUFFER, 1, one, 1, 1);
        qf_value *in[5] = {w, sc, zp, mn, mx};
        qf_node *fq = qf_graph_add_node(g, QF_OP_FAKE_QUANT, "w_fq", 5, in, 1);
        if (!fq || qf_node_set_attr_int(g, fq, "quant_min", -127) != QF_OK ||
            qf_node_set_attr_int(g, fq, "symmetric", 1) != QF_OK)
            return NULL;
        wsrc = fq->outputs[0];
    }
    qf_value *pin[3] = {xv, wsrc, b};
    qf_node *p = qf_graph_add_node(g, c->op, "op", b ? 3 : 2, pin, 1);
    if (!p) return NULL;
    if (c->op != QF_OP_LINEAR && qf_node_set_attr_int(g, p, "group", c->group) != QF_OK) return NULL;
    qf_value *gam = qf_test_const(g, &rng, "gamma", QF_VALUE_PARAMETER, 1, bd, -1.5f, 1.5f);
    qf_value *bet = qf_test_const(g, &rng, "beta", QF_VALUE_PARAMETER, 1, bd, -0.5f, 0.5f);
    qf_value *mu = qf_test_const(g, &rng, "mean", QF_VALUE_BUFFER, 1, bd, -0.3f, 0.3f);
    qf_value *var = qf_test_const(g, &rng, "var", QF_VALUE_BUFFER, 1, bd, 0.2f, 2.0f);
    qf_value *bin[5] = {p->outputs[0], gam, bet, mu, var};
    qf_node *bn = qf_graph_add_node(g, QF_OP_BATCH_NORM, "bn", 5, bin, 1);
    if (!bn || qf_node_set_attr_float(g, bn, "epsilon", c->eps) != QF_OK ||
        qf_node_set_attr_float(g, bn, "momentum", 0.9f) != QF_OK)
        return NULL;
    qf_value *rin[1] = {bn->outputs[0]};
    qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, rin, 1);
    if (!r || qf_graph_add_output(g, r->outputs[0]) != QF_OK) return NULL;
    if (qf_tensor_init(x, QF_DTYPE_F32, xr, xd) != QF_OK) return NULL;
    for (int64_t i = 0; i < qf_tensor_numel(x); i++) ((float *)x->data)[i] = qf_test_rnd(&rng);
    return g;
}

/* Output of g on x (owned copy in out). */
static qf_status run(qf_graph *g, const qf_tensor *x, qf_tensor *out)
{
    qf_plan *p = NULL;
    QF_TRY(qf_plan_init(&p, g));
    const qf_tensor *in[] = {x};
    qf_status st = qf_plan_run(p, in, 1);
    if (st == QF_OK) {
        const qf_tensor *y = qf_plan_output(p, 0);
        st = qf_tensor_init(out, y->dtype, y->ndim, y->dims);
        if (st == QF_OK) memcpy(out->data, y->data, qf_tensor_nbytes(y));
    }
    qf_plan_free(p);
    return st;
}

static int count_op(const qf_graph *g, qf_op op)
{
    int n = 0;
    qf_graph_for_each_node(g, nd) n += nd->op == op;
    return n;
}

static void check_case(const qcase *c)
{
    qf_tensor x = {0}, y0 = {0}, y1 = {0}, y2 = {0};
    qf_graph *g = build(c, &x);
    REQUIRE(g, "%s: building: %s", c->name, qf_error_message());
    const int nodes0 = g->nnodes;
    REQUIRE_OK(run(g, &x, &y0));
    qf_pass_report *r = NULL;
    const char *add[] = {c->exact ? "qat_bn_add_exact" : "qat_bn_add", NULL}, *rm[] = {"qat_bn_remove", NULL};
    CHECK_OK(qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r));
    CHECKF(qf_pass_report_count(r, QF_PASS_REWROTE, QF_OP_BATCH_NORM) == 1, "%s: add did not rewrite the BN",
           c->name);
    qf_pass_report_free(r);
    if (c->exact)
        CHECKF(count_op(g, QF_OP_QAT_BN_WEIGHT) == 1 && count_op(g, QF_OP_QAT_BN_STATS) == 1 &&
                   count_op(g, QF_OP_QAT_BN_EXACT) == 1 && count_op(g, QF_OP_BATCH_NORM) == 0 &&
                   count_op(g, c->op) == 2 && g->nnodes == nodes0 + 3,
               "%s: the exact simulation's nodes are missing", c->name);
    else
        CHECKF(count_op(g, QF_OP_QAT_BN_WEIGHT) == 1 && count_op(g, QF_OP_QAT_BN_OUTPUT) == 1,
               "%s: the simulation's nodes are missing", c->name);
    const qf_node *op = qf_graph_find_node(g, "op");
    CHECKF(op && (op->ninputs < 3 || !op->inputs[2]), "%s: the op kept its bias", c->name);
    REQUIRE_OK(run(g, &x, &y1));
    double err = 0, scale = 1e-6;
    for (int64_t i = 0; i < qf_tensor_numel(&y0); i++) {
        err = fmax(err, fabs((double)((float *)y0.data)[i] - ((float *)y1.data)[i]));
        scale = fmax(scale, fabs((double)((float *)y0.data)[i]));
    }
    /* With a weight fake-quant the simulation quantizes W*s instead of W:
     * a different grid, so only the float case is equal to rounding. */
    if (!c->fq) CHECKF(err <= 1e-5 * scale, "%s: simulated graph differs by %g (scale %g)", c->name, err, scale);
    CHECK_OK(qf_passes_run(g, rm, &(qf_pass_options){.verify = true}, &r));
    CHECKF(qf_pass_report_count(r, QF_PASS_REMOVED, c->exact ? QF_OP_QAT_BN_EXACT : QF_OP_QAT_BN_OUTPUT) == 1,
           "%s: remove did nothing", c->name);
    qf_pass_report_free(r);
    const char *dce[] = {"dce", NULL};
    CHECK_OK(qf_passes_run(g, dce, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    CHECKF(g->nnodes == nodes0, "%s: %d nodes after remove, %d before add", c->name, g->nnodes, nodes0);
    op = qf_graph_find_node(g, "op");
    CHECKF(op && (c->fq ? op->inputs[1]->producer->inputs[0] : op->inputs[1]) == qf_graph_find_value(g, "w"),
           "%s: the op does not read W again", c->name);
    if (c->bias) CHECKF(op && op->ninputs > 2 && op->inputs[2] == qf_graph_find_value(g, "b"), "%s: bias", c->name);
    const qf_node *bn = qf_graph_find_node(g, "bn");
    CHECKF(bn && bn->op == QF_OP_BATCH_NORM && bn->ninputs == 5 && bn->inputs[0] == op->outputs[0] &&
               bn->inputs[4] == qf_graph_find_value(g, "var") && bn->inputs[3] == qf_graph_find_value(g, "mean"),
           "%s: the BatchNormalization is not back", c->name);
    REQUIRE_OK(run(g, &x, &y2));
    CHECKF(qf_tensor_nbytes(&y0) == qf_tensor_nbytes(&y2) && !memcmp(y0.data, y2.data, qf_tensor_nbytes(&y0)),
           "%s: add then remove is not bit-identical to the original", c->name);
    printf("%-48s simulated vs original %.3g, add+remove bit-identical\n", c->name, err);
    qf_tensor_free(&x);
    qf_tensor_free(&y0);
    qf_tensor_free(&y1);
    qf_tensor_free(&y2);
    qf_graph_free(g);
}

/* Every combination: conv and conv_transpose (groups 1 and 2), linear; bias
 * or not; epsilon 1e-5 or 1e-3; weight fake_quant or not; approximate or
 * exact form. */
static void test_add_remove(void)
{
    static const struct {
        const char *name;
        qf_op op;
        int group;
    } ops[] = {{"conv", QF_OP_CONV, 1},
               {"grouped conv", QF_OP_CONV, 2},
               {"conv_transpose", QF_OP_CONV_TRANSPOSE, 1},
               {"grouped conv_transpose", QF_OP_CONV_TRANSPOSE, 2},
               {"linear", QF_OP_LINEAR, 1}};
    for (int exact = 0; exact < 2; exact++)
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
            for (int bits = 0; bits < 8; bits++) {
                qcase c = {.op = ops[o].op, .group = ops[o].group, .bias = bits & 1, .fq = (bits >> 1) & 1,
                           .eps = bits & 4 ? 1e-3f : 1e-5f, .exact = exact};
                snprintf(c.name, sizeof c.name, "%s%s, %s, %s, eps %g", exact ? "exact " : "", ops[o].name,
                         c.bias ? "bias" : "no bias", c.fq ? "fake-quant" : "float", c.eps);
                check_case(&c);
            }
}

/* A qat_bn_output that qat_bn_add did not make (its op reads a plain weight):
 * remove reports it and leaves it. */
static void test_remove_leaves_foreign(void)
{
    qcase c = {"foreign", QF_OP_CONV, 1, false, false, 1e-5f, false};
    qf_tensor x = {0};
    qf_graph *g = build(&c, &x);
    REQUIRE(g, "build: %s", qf_error_message());
    qf_node *op = qf_graph_find_node(g, "op"), *bn = qf_graph_find_node(g, "bn");
    qf_value *in[3] = {op->outputs[0], bn->inputs[1], bn->inputs[4]};
    qf_node *on = qf_graph_insert_node(g, op, true, QF_OP_QAT_BN_OUTPUT, "foreign_out", 3, in, 1);
    REQUIRE(on, "insert: %s", qf_error_message());
    REQUIRE_OK(qf_graph_infer_shapes(g));
    REQUIRE_OK(qf_node_set_input(g, bn, 0, on->outputs[0]));
    const int nodes = g->nnodes;
    qf_pass_report *r = NULL;
    const char *rm[] = {"qat_bn_remove", NULL};
    CHECK_OK(qf_passes_run(g, rm, &(qf_pass_options){.verify = true}, &r));
    CHECK(qf_pass_report_count(r, QF_PASS_REMOVED, QF_OP_QAT_BN_OUTPUT) == 0);
    char *json = NULL;
    size_t len = 0;
    CHECK_OK(qf_pass_report_json(r, NULL, &json, &len));
    CHECKF(json && strstr(json, "is not a qat_bn_weight"), "the skip reason is missing: %s", json ? json : "");
    qf_free(json);
    qf_pass_report_free(r);
    CHECK(g->nnodes == nodes);
    qf_tensor_free(&x);
    qf_graph_free(g);
}

/* The exact form's chain with one link that qat_bn_add_exact would not
 * have made (the batch statistics' copy of the op reads another weight; the
 * statistics node updates another running mean): remove reports it and
 * leaves it. */
static void test_remove_leaves_foreign_exact(void)
{
    for (int variant = 0; variant < 2; variant++) {
        qcase c = {"foreign exact", QF_OP_CONV, 1, true, false, 1e-5f, true};
        qf_tensor x = {0};
        qf_graph *g = build(&c, &x);
        REQUIRE(g, "build: %s", qf_error_message());
        REQUIRE_OK(qf_graph_infer_shapes(g));
        qf_pass_report *r = NULL;
        const char *add[] = {"qat_bn_add_exact", NULL}, *rm[] = {"qat_bn_remove", NULL};
        REQUIRE_OK(qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r));
        qf_pass_report_free(r);
        const char *why;
        if (variant == 0) {
            qf_node *cp = qf_graph_find_node(g, "op_qat_batch");
            REQUIRE(cp, "no op_qat_batch");
            int64_t wd[4];
            memcpy(wd, cp->inputs[1]->type.dims, sizeof wd);
            qf_value *w2 = qf_test_const(g, &rng, "w2", QF_VALUE_PARAMETER, 4, wd, -1, 1);
            REQUIRE_OK(qf_node_set_input(g, cp, 1, w2));
            why = "Y0 is not conv 'op' on the float weight";
        } else {
            /* The statistics node updates another running mean. */
            qf_node *sn = qf_graph_find_node(g, "bn_qat_stats");
            REQUIRE(sn && sn->op == QF_OP_QAT_BN_STATS, "no bn_qat_stats");
            const int64_t cd[1] = {6};
            REQUIRE_OK(qf_node_set_input(g, sn, 1, qf_test_const(g, &rng, "mean2", QF_VALUE_BUFFER, 1, cd, 0, 0)));
            why = "qat_bn_stats 'bn_qat_stats' reads another Y0 / running_mean / bias";
        }
        const int nodes = g->nnodes;
        REQUIRE_OK(qf_passes_run(g, rm, &(qf_pass_options){.verify = true}, &r));
        CHECK(qf_pass_report_count(r, QF_PASS_REMOVED, QF_OP_QAT_BN_EXACT) == 0);
        char *json = NULL;
        size_t len = 0;
        CHECK_OK(qf_pass_report_json(r, NULL, &json, &len));
        CHECKF(json && strstr(json, why), "variant %d: the skip reason is missing: %s", variant, json ? json : "");
        qf_free(json);
        qf_pass_report_free(r);
        CHECK(g->nnodes == nodes && count_op(g, QF_OP_QAT_BN_EXACT) == 1);
        qf_tensor_free(&x);
        qf_graph_free(g);
    }
}

/* What PyTorch's exporter writes for a QAT ConvBn2d: Conv -> Div(s) ->
 * Add(b) -> BatchNormalization, all ONNX ops. It looks like the simulation
 * but qat_bn_remove did not make it: nothing changes, outputs
 * bit-identical. */
static void test_remove_leaves_onnx_chain(void)
{
    qcase c = {"onnx chain", QF_OP_CONV, 1, false, false, 1e-5f, false};
    qf_tensor x = {0}, y0 = {0}, y1 = {0};
    qf_graph *g = build(&c, &x);
    REQUIRE(g, "build: %s", qf_error_message());
    qf_node *op = qf_graph_find_node(g, "op"), *bn = qf_graph_find_node(g, "bn");
    const int64_t cd[4] = {1, 6, 1, 1};
    qf_value *s = qf_test_const(g, &rng, "s", QF_VALUE_CONSTANT, 4, cd, 0.5f, 1.5f),
             *b = qf_test_const(g, &rng, "b_after", QF_VALUE_CONSTANT, 4, cd, -0.5f, 0.5f);
    qf_value *din[2] = {op->outputs[0], s};
    qf_node *div = qf_graph_insert_node(g, op, true, QF_OP_DIV, "div", 2, din, 1);
    REQUIRE(div, "div");
    qf_value *ain[2] = {div->outputs[0], b};
    qf_node *add = qf_graph_insert_node(g, div, true, QF_OP_ADD, "add", 2, ain, 1);
    REQUIRE(add, "add");
    REQUIRE_OK(qf_node_set_input(g, bn, 0, add->outputs[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    REQUIRE_OK(run(g, &x, &y0));
    const int nodes = g->nnodes;
    qf_pass_report *r = NULL;
    const char *rm[] = {"qat_bn_remove", NULL};
    CHECK_OK(qf_passes_run(g, rm, &(qf_pass_options){.verify = true}, &r));
    CHECK(qf_pass_report_count(r, QF_PASS_REMOVED, QF_OP_BATCH_NORM) == 0);
    qf_pass_report_free(r);
    CHECK(g->nnodes == nodes && bn->inputs[0] == add->outputs[0] && op->outputs[0]->nuses == 1);
    REQUIRE_OK(run(g, &x, &y1));
    CHECK(!memcmp(y0.data, y1.data, qf_tensor_nbytes(&y0)));
    qf_tensor_free(&x);
    qf_tensor_free(&y0);
    qf_tensor_free(&y1);
    qf_graph_free(g);
}

/* A BN whose epsilon or momentum is missing or absurd: qat_bn_add_exact
 * fails naming it, and the graph is as it was. */
static void test_exact_bad_bn(void)
{
    static const struct {
        const char *attr;
        float v; /* NAN: remove the attribute */
        const char *msg;
    } bad[] = {{"epsilon", NAN, "node 'bn' (BatchNormalization): no epsilon attribute"},
               {"momentum", NAN, "node 'bn' (BatchNormalization): no momentum attribute"},
               {"epsilon", 0.0f, "node 'bn' (BatchNormalization): epsilon 0 is not in (0, 0.5]"},
               {"epsilon", -1e-5f, "node 'bn' (BatchNormalization): epsilon -1e-05 is not in (0, 0.5]"},
               {"epsilon", INFINITY, "node 'bn' (BatchNormalization): epsilon inf is not in (0, 0.5]"},
               {"momentum", 1.5f, "node 'bn' (BatchNormalization): momentum 1.5 is not in [0, 1]"},
               {"momentum", -0.1f, "node 'bn' (BatchNormalization): momentum -0.1 is not in [0, 1]"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        qcase c = {"bad bn", QF_OP_CONV, 1, true, true, 1e-5f, true};
        qf_tensor x = {0};
        qf_graph *g = build(&c, &x);
        REQUIRE(g, "build: %s", qf_error_message());
        REQUIRE_OK(qf_graph_infer_shapes(g));
        qf_node *bn = qf_graph_find_node(g, "bn");
        if (isnan(bad[i].v))
            qf_node_remove_attr(bn, bad[i].attr);
        else
            REQUIRE_OK(qf_node_set_attr_float(g, bn, bad[i].attr, bad[i].v));
        const int nodes = g->nnodes;
        qf_pass_report *r = NULL;
        const char *add[] = {"qat_bn_add_exact", NULL};
        CHECK_ERR(qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r), QF_ERR_INVALID, bad[i].msg);
        qf_pass_report_free(r);
        CHECKF(g->nnodes == nodes && bn->op == QF_OP_BATCH_NORM && count_op(g, QF_OP_QAT_BN_WEIGHT) == 0,
               "%s: the graph changed", bad[i].msg);
        qf_tensor_free(&x);
        qf_graph_free(g);
    }
}

/* A running mean that is also the BN's shift (torch.onnx.export merges
 * equal initializers): the exact form updates its own copy, beta stays
 * beta; add then remove is still bit-identical. */
static void test_exact_shared_stat(void)
{
    qcase c = {"shared running mean", QF_OP_CONV, 1, true, false, 1e-5f, true};
    qf_tensor x = {0}, y0 = {0}, y1 = {0};
    qf_graph *g = build(&c, &x);
    REQUIRE(g, "build: %s", qf_error_message());
    qf_node *bn = qf_graph_find_node(g, "bn");
    qf_value *beta = qf_graph_find_value(g, "beta");
    REQUIRE_OK(qf_node_set_input(g, bn, 3, beta));
    REQUIRE_OK(run(g, &x, &y0));
    qf_pass_report *r = NULL;
    const char *add[] = {"qat_bn_add_exact", NULL}, *rm[] = {"qat_bn_remove", NULL};
    CHECK_OK(qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    const qf_node *sn = qf_graph_find_node(g, "bn_qat_stats");
    REQUIRE(sn, "no bn_qat_stats");
    const qf_value *m = sn->inputs[1];
    CHECKF(m != beta && m->kind == QF_VALUE_BUFFER && m->nuses == 2 &&
               !memcmp(m->type.data, beta->type.data, qf_tensor_nbytes(&beta->type)),
           "the running mean is not a copy of its own");
    CHECK_OK(qf_passes_run(g, rm, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    REQUIRE_OK(run(g, &x, &y1));
    CHECK(!memcmp(y0.data, y1.data, qf_tensor_nbytes(&y0)));
    qf_tensor_free(&x);
    qf_tensor_free(&y0);
    qf_tensor_free(&y1);
    qf_graph_free(g);
}

int main(void)
{
    qf_set_engine(QF_ENGINE_REF);
    RUN(test_add_remove);
    RUN(test_remove_leaves_foreign);
    RUN(test_remove_leaves_foreign_exact);
    RUN(test_remove_leaves_onnx_chain);
    RUN(test_exact_bad_bn);
    RUN(test_exact_shared_stat);
    return qf_check_report();
}
