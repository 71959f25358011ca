/* Unit tests of the BatchNorm passes on graphs built with the IR API:
 * fuse_batch_norm (conv 1-D/2-D, grouped, depthwise, dilated, conv_transpose
 * grouped, linear, gemm both layouts with alpha/beta, matmul -> linear),
 * fuse_batch_norm_forward, decompose_batch_norm, every guard's skip reason,
 * tied weights, the numeric errors and the diagnostics. Each rewrite is
 * checked by running the graph with the reference executor before and after
 * the pass on the same random input (BN statistics, gamma, beta random,
 * gamma partly negative). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/qf_check.h"
#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/pass.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(double lo, double hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static qf_value *rconst(qf_graph *g, const char *name, int ndim, const int64_t *dims, double lo, double hi)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) return NULL;
    float *p = t.data;
    for (int64_t i = 0; i < qf_tensor_numel(&t); i++) p[i] = (float)urand(lo, hi);
    return qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &t);
}

/* BN with random statistics on x (channels c); gamma in [-1.5, 1.5]. */
static qf_node *add_bn(qf_graph *g, const char *name, qf_value *x, int64_t c, float eps)
{
    char nm[128];
    qf_value *in[5];
    in[0] = x;
    snprintf(nm, sizeof nm, "%s.gamma", name);
    in[1] = rconst(g, nm, 1, &c, -1.5, 1.5);
    snprintf(nm, sizeof nm, "%s.beta", name);
    in[2] = rconst(g, nm, 1, &c, -1, 1);
    snprintf(nm, sizeof nm, "%s.mean", name);
    in[3] = rconst(g, nm, 1, &c, -0.5, 0.5);
    snprintf(nm, sizeof nm, "%s.var", name);
    in[4] = rconst(g, nm, 1, &c, 0.2, 2.0);
    qf_node *n = qf_graph_add_node(g, QF_OP_BATCH_NORM, name, 5, in, 1);
    if (n) qf_node_set_attr_float(g, n, "epsilon", eps);
    return n;
}

/* Run g on a deterministic random input; copies output 0 into *out. */
static qf_status run_graph(qf_graph *g, qf_tensor *out)
{
    qf_plan *p;
    QF_TRY(qf_plan_init(&p, g));
    const qf_value *xin = g->inputs[0];
    qf_tensor x;
    qf_status st = qf_tensor_init(&x, QF_DTYPE_F32, xin->type.ndim, xin->type.dims);
    if (st == QF_OK) {
        uint64_t keep = rng;
        rng = 12345;
        float *d = x.data;
        for (int64_t i = 0; i < qf_tensor_numel(&x); i++) d[i] = (float)urand(-2, 2);
        rng = keep;
        const qf_tensor *ins[1] = {&x};
        st = qf_plan_run(p, ins, 1);
        if (st == QF_OK) st = qf_tensor_copy(out, qf_plan_output(p, 0));
        qf_tensor_free(&x);
    }
    qf_plan_free(p);
    return st;
}

/* Max |a-b| / (max|a| + tiny) */
static double rel_diff(const qf_tensor *a, const qf_tensor *b)
{
    if (qf_tensor_numel(a) != qf_tensor_numel(b)) return INFINITY;
    const float *x = a->data, *y = b->data;
    double md = 0, mx = 1e-12;
    for (int64_t i = 0; i < qf_tensor_numel(a); i++) {
        md = fmax(md, fabs((double)x[i] - y[i]));
        mx = fmax(mx, fabs((double)x[i]));
    }
    return md / mx;
}

static int count_op(const qf_graph *g, qf_op op)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == op;
    return k;
}

static const qf_pass_result *result_of(const qf_pass_report *r, const char *pass)
{
    for (int i = 0; i < r->nresults; i++)
        if (strcmp(r->results[i].pass, pass) == 0) return &r->results[i];
    return NULL;
}

/* Run `passes` on g (verifier on) and compare outputs before/after. Returns
 * the report (caller frees). */
static qf_pass_report *fold_and_compare(qf_graph *g, const char *const *passes, double tol)
{
    qf_tensor before, after;
    memset(&before, 0, sizeof before);
    memset(&after, 0, sizeof after);
    CHECK_OK(qf_graph_infer_shapes(g));
    CHECK_OK(run_graph(g, &before));
    qf_pass_report *r = NULL;
    qf_pass_options opt = {.verify = true};
    CHECK_OK(qf_passes_run(g, passes, &opt, &r));
    CHECK_OK(run_graph(g, &after));
    double d = rel_diff(&before, &after);
    if (!(d <= tol)) fprintf(stderr, "  relative difference %g > %g\n", d, tol);
    CHECK(d <= tol);
    qf_tensor_free(&before);
    qf_tensor_free(&after);
    return r;
}

static const char *const FUSE[] = {"fuse_batch_norm", NULL};
static const char *const FWD[] = {"fuse_batch_norm_forward", NULL};
static const char *const DECOMP[] = {"decompose_batch_norm", NULL};

/* conv (ndim spatial dims) -> BN -> relu; graph output is the relu. */
typedef struct conv_case {
    int spatial;
    int64_t cin, cout, group, dil;
    bool bias, transpose, bn_is_output;
    float eps;
} conv_case;

static qf_graph *build_conv_bn(const conv_case *cc)
{
    qf_graph *g;
    if (qf_graph_init(&g)) return NULL;
    int64_t xd[4] = {2, cc->cin, 7, 6};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2 + cc->spatial, xd);
    int64_t wd[4];
    if (cc->transpose) {
        wd[0] = cc->cin;
        wd[1] = cc->cout / cc->group;
    } else {
        wd[0] = cc->cout;
        wd[1] = cc->cin / cc->group;
    }
    wd[2] = wd[3] = 3;
    qf_value *in[3] = {x, rconst(g, "w", 2 + cc->spatial, wd, -1, 1), NULL};
    if (cc->bias) in[2] = rconst(g, "b", 1, &cc->cout, -1, 1);
    qf_node *c = qf_graph_add_node(g, cc->transpose ? QF_OP_CONV_TRANSPOSE : QF_OP_CONV, "conv0",
                                   cc->bias ? 3 : 2, in, 1);
    int64_t ks[2] = {3, 3}, dl[2] = {cc->dil, cc->dil}, pads[4] = {1, 1, 1, 1};
    qf_node_set_attr_ints(g, c, "kernel_shape", ks, cc->spatial);
    qf_node_set_attr_ints(g, c, "dilations", dl, cc->spatial);
    qf_node_set_attr_ints(g, c, "pads", pads, 2 * cc->spatial);
    qf_node_set_attr_int(g, c, "group", cc->group);
    qf_node *bn = add_bn(g, "bn0", c->outputs[0], cc->cout, cc->eps);
    if (cc->bn_is_output) {
        qf_graph_add_output(g, bn->outputs[0]);
    } else {
        qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "relu0", 1, bn->outputs, 1);
        qf_graph_add_output(g, r->outputs[0]);
    }
    return g;
}

static void check_conv_case(const conv_case *cc)
{
    qf_graph *g = build_conv_bn(cc);
    CHECK(g != NULL);
    if (!g) return;
    const char *out_name = g->outputs[0]->name;
    char keep[64];
    snprintf(keep, sizeof keep, "%s", out_name);
    qf_pass_report *r = fold_and_compare(g, FUSE, 1e-5);
    const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->rewrites == 1 && res->nskipped == 0);
    if (res && res->nrewritten == 1) CHECK(res->rewritten[0].detail && strstr(res->rewritten[0].detail, "weight_range_spread"));
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 0);
    qf_node *c = qf_graph_find_node(g, "conv0");
    CHECK(c && c->ninputs == 3 && c->inputs[2] && qf_value_is_const(c->inputs[2]));
    CHECK(strcmp(g->outputs[0]->name, keep) == 0);
    /* No BN parameter is left behind. */
    CHECK(qf_graph_find_value(g, "bn0.gamma") == NULL && qf_graph_find_value(g, "bn0.var") == NULL);
    qf_pass_report_free(r);
    /* Idempotence: a second run finds nothing to do. */
    qf_pass_options opt = {.verify = true};
    CHECK_OK(qf_passes_run(g, FUSE, &opt, &r));
    res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->rewrites == 0 && !res->changed);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_conv2d_bias(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 8, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    check_conv_case(&cc);
}

static void test_conv2d_nobias_grouped_dilated(void)
{
    conv_case cc = {.spatial = 2, .cin = 4, .cout = 6, .group = 2, .dil = 2, .bias = false, .eps = 1e-3f};
    check_conv_case(&cc);
}

static void test_conv1d_depthwise(void)
{
    conv_case cc = {.spatial = 1, .cin = 5, .cout = 10, .group = 5, .dil = 1, .bias = true, .eps = 1e-3f};
    check_conv_case(&cc);
}

static void test_conv_transpose_grouped(void)
{
    conv_case cc = {.spatial = 2, .cin = 4, .cout = 6, .group = 2, .dil = 1, .bias = false, .transpose = true,
                    .eps = 1e-5f};
    check_conv_case(&cc);
    conv_case cb = {.spatial = 1, .cin = 6, .cout = 4, .group = 2, .dil = 1, .bias = true, .transpose = true,
                    .eps = 1e-3f};
    check_conv_case(&cb);
}

static void test_bn_is_graph_output(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 4, .group = 1, .dil = 1, .bias = true, .bn_is_output = true,
                    .eps = 1e-5f};
    check_conv_case(&cc);
}

/* x[N, K] -> (linear | gemm | matmul) -> BN1d -> output */
typedef enum dense_kind { DENSE_LINEAR, DENSE_GEMM_T0, DENSE_GEMM_T1, DENSE_MATMUL } dense_kind;

static qf_graph *build_dense_bn(dense_kind kind, bool bias, int64_t cshape_rows)
{
    qf_graph *g;
    if (qf_graph_init(&g)) return NULL;
    int64_t K = 5, O = 7, xd[2] = {3, K};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    int64_t wok[2] = {O, K}, wko[2] = {K, O};
    bool ko = kind == DENSE_GEMM_T0 || kind == DENSE_MATMUL;
    qf_value *in[3] = {x, rconst(g, "w", 2, ko ? wko : wok, -1, 1), NULL};
    int nin = 2;
    if (bias) {
        int64_t cd[2] = {cshape_rows, O};
        in[2] = cshape_rows ? rconst(g, "b", 2, cd, -1, 1) : rconst(g, "b", 1, &O, -1, 1);
        nin = 3;
    }
    qf_op op = kind == DENSE_LINEAR ? QF_OP_LINEAR : kind == DENSE_MATMUL ? QF_OP_MATMUL : QF_OP_GEMM;
    qf_node *d = qf_graph_add_node(g, op, "fc0", nin, in, 1);
    if (kind == DENSE_GEMM_T1) qf_node_set_attr_int(g, d, "transB", 1);
    if (kind == DENSE_GEMM_T0 || kind == DENSE_GEMM_T1) {
        qf_node_set_attr_float(g, d, "alpha", 0.75f);
        qf_node_set_attr_float(g, d, "beta", 1.5f);
    }
    qf_node *bn = add_bn(g, "bn0", d->outputs[0], O, 1e-5f);
    qf_graph_add_output(g, bn->outputs[0]);
    return g;
}

static void check_dense(dense_kind kind, bool bias, int64_t rows)
{
    qf_graph *g = build_dense_bn(kind, bias, rows);
    qf_pass_report *r = fold_and_compare(g, FUSE, 1e-5);
    const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->rewrites == 1);
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 0);
    qf_node *d = qf_graph_find_node(g, "fc0");
    CHECK(d && d->ninputs == 3 && d->inputs[2]);
    if (kind == DENSE_MATMUL) CHECK(d && d->op == QF_OP_LINEAR && d->inputs[1]->type.dims[0] == 7);
    if (kind == DENSE_GEMM_T0 || kind == DENSE_GEMM_T1)
        CHECK(d && qf_node_attr_float(d, "alpha", 0) == 1.0f && qf_node_attr_float(d, "beta", 0) == 1.0f);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_linear(void)
{
    check_dense(DENSE_LINEAR, true, 0);
    check_dense(DENSE_LINEAR, false, 0);
}

static void test_gemm(void)
{
    check_dense(DENSE_GEMM_T0, true, 0);
    check_dense(DENSE_GEMM_T1, true, 1);
    check_dense(DENSE_GEMM_T1, true, 3); /* C [M, O] */
    check_dense(DENSE_GEMM_T0, false, 0);
}

static void test_matmul(void) { check_dense(DENSE_MATMUL, false, 0); }

/* MatMul(x, Transpose(W [O, K])) -> BN: PyTorch's bias-free Linear at opset <= 13. */
static void test_matmul_transposed_weight(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t xd[2] = {3, 5}, wd[2] = {7, 5};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    qf_value *w = rconst(g, "w", 2, wd, -1, 1);
    qf_node *t = qf_graph_add_node(g, QF_OP_TRANSPOSE, "wT", 1, &w, 1);
    qf_value *in[2] = {x, t->outputs[0]};
    qf_node *m = qf_graph_add_node(g, QF_OP_MATMUL, "fc0", 2, in, 1);
    qf_node *bn = add_bn(g, "bn0", m->outputs[0], 7, 1e-3f);
    qf_graph_add_output(g, bn->outputs[0]);
    qf_pass_report *r = fold_and_compare(g, FUSE, 1e-5);
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 0 && count_op(g, QF_OP_TRANSPOSE) == 0);
    CHECK(m->op == QF_OP_LINEAR && m->ninputs == 3 && qf_value_is_const(m->inputs[1]));
    qf_pass_report_free(r);
    qf_graph_free(g);
}

/* Expect one skip with `reason` (substring) and the BN kept. */
static void expect_skip(qf_graph *g, const char *pass, const char *reason)
{
    const char *const list[] = {pass, NULL};
    qf_pass_report *r = fold_and_compare(g, list, 0);
    const qf_pass_result *res = r ? result_of(r, pass) : NULL;
    CHECK(res && res->rewrites == 0 && res->nskipped == 1);
    if (res && res->nskipped == 1) {
        if (!strstr(res->skipped[0].reason, reason))
            fprintf(stderr, "  reason \"%s\" lacks \"%s\"\n", res->skipped[0].reason, reason);
        CHECK(strstr(res->skipped[0].reason, reason) != NULL);
    }
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 1);
    qf_pass_report_free(r);
}

static void test_skip_two_users(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 3, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    qf_node *c = qf_graph_find_node(g, "conv0"), *relu = qf_graph_find_node(g, "relu0");
    qf_value *in[2] = {relu->outputs[0], c->outputs[0]};
    qf_node *add = qf_graph_add_node(g, QF_OP_ADD, "skip_add", 2, in, 1);
    g->outputs[0]->is_output = false;
    g->outputs[0] = add->outputs[0];
    add->outputs[0]->is_output = true;
    expect_skip(g, "fuse_batch_norm", "conv output has 2 users");
    qf_graph_free(g);
}

static void test_skip_graph_output(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 4, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    qf_graph_add_output(g, qf_graph_find_node(g, "conv0")->outputs[0]);
    expect_skip(g, "fuse_batch_norm", "conv output is a graph output");
    qf_graph_free(g);
}

static void test_skip_training(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 4, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    qf_node *bn = qf_graph_find_node(g, "bn0");
    qf_node_set_attr_int(g, bn, "training_mode", 1);
    CHECK_OK(qf_graph_infer_shapes(g));
    qf_pass_report *r = NULL;
    qf_pass_options opt = {.verify = true};
    CHECK_OK(qf_passes_run(g, FUSE, &opt, &r));
    const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->rewrites == 0 && res->nskipped == 1 &&
          strstr(res->skipped[0].reason, "BN is in training mode"));
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 1);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_skip_weight_not_const(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t xd[4] = {1, 3, 5, 5}, wd[4] = {4, 3, 3, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *w = qf_graph_add_input(g, "w", QF_DTYPE_F32, 4, wd);
    qf_value *in[2] = {x, w};
    qf_node *c = qf_graph_add_node(g, QF_OP_CONV, "conv0", 2, in, 1);
    qf_node *bn = add_bn(g, "bn0", c->outputs[0], 4, 1e-5f);
    qf_graph_add_output(g, bn->outputs[0]);
    CHECK_OK(qf_graph_infer_shapes(g));
    qf_pass_report *r = NULL;
    qf_pass_options opt = {.verify = true};
    CHECK_OK(qf_passes_run(g, FUSE, &opt, &r));
    const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->nskipped == 1 && strstr(res->skipped[0].reason, "weight is not a constant"));
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 1);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_skip_linear_rank3(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t xd[3] = {2, 4, 5}, wd[2] = {4, 5};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 3, xd);
    qf_value *in[2] = {x, rconst(g, "w", 2, wd, -1, 1)};
    qf_node *d = qf_graph_add_node(g, QF_OP_LINEAR, "fc0", 2, in, 1);
    qf_node *bn = add_bn(g, "bn0", d->outputs[0], 4, 1e-5f);
    qf_graph_add_output(g, bn->outputs[0]);
    expect_skip(g, "fuse_batch_norm", "linear output is rank 3");
    qf_graph_free(g);
}

/* Two convs share one weight; each has its own BN: both fold, each gets its
 * own scaled copy and the other conv's weight is untouched. */
static void test_tied_weight(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t xd[4] = {1, 4, 5, 5}, wd[4] = {4, 4, 1, 1};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *w = rconst(g, "w_tied", 4, wd, -1, 1);
    qf_value *in[2] = {x, w};
    qf_node *c0 = qf_graph_add_node(g, QF_OP_CONV, "conv0", 2, in, 1);
    qf_node *b0 = add_bn(g, "bn0", c0->outputs[0], 4, 1e-5f);
    in[0] = b0->outputs[0];
    qf_node *c1 = qf_graph_add_node(g, QF_OP_CONV, "conv1", 2, in, 1);
    qf_node *b1 = add_bn(g, "bn1", c1->outputs[0], 4, 1e-3f);
    qf_graph_add_output(g, b1->outputs[0]);
    qf_pass_report *r = fold_and_compare(g, FUSE, 1e-5);
    const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->rewrites == 2);
    CHECK(c0->inputs[1] != c1->inputs[1]);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_numeric_var(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 4, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    qf_node *bn = qf_graph_find_node(g, "bn0");
    float *var = bn->inputs[4]->type.data;
    var[2] = -1e-5f - 1.0f;
    CHECK_OK(qf_graph_infer_shapes(g));
    qf_pass_report *r = NULL;
    qf_pass_options opt = {.verify = true};
    CHECK_STATUS(qf_passes_run(g, FUSE, &opt, &r), QF_ERR_NUMERIC);
    CHECK_MSG("bn0");
    CHECK_MSG("channel 2");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_numeric_nan_weight(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 4, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    qf_node *c = qf_graph_find_node(g, "conv0");
    ((float *)c->inputs[1]->type.data)[5] = NAN;
    float bias_before[4];
    memcpy(bias_before, c->inputs[2]->type.data, sizeof bias_before);
    CHECK_OK(qf_graph_infer_shapes(g));
    qf_pass_report *r = NULL;
    qf_pass_options opt = {.verify = true};
    CHECK_STATUS(qf_passes_run(g, FUSE, &opt, &r), QF_ERR_NUMERIC);
    CHECK_MSG("'w'");
    /* The failed fold wrote nothing: the bias is not half folded. */
    CHECK(memcmp(bias_before, c->inputs[2]->type.data, sizeof bias_before) == 0);
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 1);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_diagnostics(void)
{
    conv_case cc = {.spatial = 2, .cin = 3, .cout = 4, .group = 1, .dil = 1, .bias = true, .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    qf_node *bn = qf_graph_find_node(g, "bn0");
    ((float *)bn->inputs[1]->type.data)[1] = 0.0f;  /* dead channel 1 */
    ((float *)bn->inputs[4]->type.data)[3] = 0.0f;  /* var + eps = 1e-5: not small */
    ((float *)bn->inputs[4]->type.data)[0] = -9.999e-6f; /* var + eps ~ 1e-9: small */
    qf_pass_report *r = fold_and_compare(g, FUSE, 1e-5);
    const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm") : NULL;
    CHECK(res && res->nrewritten == 1);
    if (res && res->nrewritten == 1) {
        const char *d = res->rewritten[0].detail;
        printf("  detail: %s\n", d ? d : "(null)");
        CHECK(d && strstr(d, "\"dead_channels\":[1]"));
        CHECK(d && strstr(d, "\"small_var_channels\":[0]"));
        CHECK(d && strstr(d, "\"channels\":4"));
    }
    qf_pass_report_free(r);
    qf_graph_free(g);
}

/* x -> relu -> BN -> conv (pads 0, groups 1 / depthwise) */
static qf_graph *build_bn_conv(int64_t group, int64_t pad, bool bias)
{
    qf_graph *g;
    if (qf_graph_init(&g)) return NULL;
    int64_t C = 4, O = group == 1 ? 6 : 8, xd[4] = {2, C, 6, 5}, wd[4] = {O, C / group, 3, 2};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_node *relu = qf_graph_add_node(g, QF_OP_RELU, "relu0", 1, &x, 1);
    qf_node *bn = add_bn(g, "bn0", relu->outputs[0], C, 1e-3f);
    qf_value *in[3] = {bn->outputs[0], rconst(g, "w", 4, wd, -1, 1), bias ? rconst(g, "b", 1, &O, -1, 1) : NULL};
    qf_node *c = qf_graph_add_node(g, QF_OP_CONV, "conv0", bias ? 3 : 2, in, 1);
    int64_t pads[4] = {pad, pad, pad, pad}, st[2] = {2, 1};
    qf_node_set_attr_ints(g, c, "pads", pads, 4);
    qf_node_set_attr_ints(g, c, "strides", st, 2);
    qf_node_set_attr_int(g, c, "group", group);
    qf_graph_add_output(g, c->outputs[0]);
    return g;
}

static void test_forward(void)
{
    for (int k = 0; k < 3; k++) {
        qf_graph *g = build_bn_conv(k == 2 ? 4 : 1, 0, k != 1);
        qf_pass_report *r = fold_and_compare(g, FWD, 1e-5);
        const qf_pass_result *res = r ? result_of(r, "fuse_batch_norm_forward") : NULL;
        CHECK(res && res->rewrites == 1);
        CHECK(count_op(g, QF_OP_BATCH_NORM) == 0);
        qf_pass_report_free(r);
        qf_graph_free(g);
    }
    qf_graph *g = build_bn_conv(1, 1, true);
    expect_skip(g, "fuse_batch_norm_forward", "pads its input");
    qf_graph_free(g);
    g = build_bn_conv(2, 0, true);
    expect_skip(g, "fuse_batch_norm_forward", "groups 2");
    qf_graph_free(g);
    /* fuse_batch_norm does not touch a BN after relu, and says why. */
    g = build_bn_conv(1, 0, true);
    expect_skip(g, "fuse_batch_norm", "BN input comes from relu");
    qf_graph_free(g);
}

static void test_decompose(void)
{
    qf_graph *g = build_bn_conv(1, 1, true);
    qf_pass_report *r = fold_and_compare(g, DECOMP, 1e-5);
    const qf_pass_result *res = r ? result_of(r, "decompose_batch_norm") : NULL;
    CHECK(res && res->rewrites == 1);
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 0 && count_op(g, QF_OP_MUL) == 1 && count_op(g, QF_OP_ADD) == 1);
    qf_node *mul = qf_graph_find_node(g, "bn0_mul");
    CHECK(mul && mul->inputs[1]->type.ndim == 3 && mul->inputs[1]->type.dims[0] == 4 &&
          mul->inputs[1]->type.dims[1] == 1);
    qf_pass_report_free(r);
    qf_graph_free(g);
    /* rank 2: [N, C] * [C] */
    g = build_dense_bn(DENSE_LINEAR, true, 0);
    r = fold_and_compare(g, DECOMP, 1e-5);
    CHECK(count_op(g, QF_OP_BATCH_NORM) == 0);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

/* Every allocation of a fold is freed with the graph and the report. */
static void test_no_leaks(void)
{
    qf_check_alloc ca;
    qf_check_count_allocs(&ca);
    conv_case cc = {.spatial = 2, .cin = 4, .cout = 6, .group = 2, .dil = 1, .bias = false, .transpose = true,
                    .eps = 1e-5f};
    qf_graph *g = build_conv_bn(&cc);
    CHECK_OK(qf_graph_infer_shapes(g));
    qf_pass_report *r = NULL;
    const char *const all[] = {"fuse_batch_norm", "fuse_batch_norm_forward", "decompose_batch_norm", NULL};
    CHECK_OK(qf_passes_run(g, all, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    qf_graph_free(g);
    CHECK(ca.live == 0);
    qf_set_allocator(NULL, NULL);
}

int main(void)
{
    RUN(test_conv2d_bias);
    RUN(test_conv2d_nobias_grouped_dilated);
    RUN(test_conv1d_depthwise);
    RUN(test_conv_transpose_grouped);
    RUN(test_bn_is_graph_output);
    RUN(test_linear);
    RUN(test_gemm);
    RUN(test_matmul);
    RUN(test_matmul_transposed_weight);
    RUN(test_skip_two_users);
    RUN(test_skip_graph_output);
    RUN(test_skip_training);
    RUN(test_skip_weight_not_const);
    RUN(test_skip_linear_rank3);
    RUN(test_tied_weight);
    RUN(test_numeric_var);
    RUN(test_numeric_nan_weight);
    RUN(test_diagnostics);
    RUN(test_forward);
    RUN(test_decompose);
    RUN(test_no_leaks);
    return qf_check_report();
}
