/* Unit tests of the Neutron-ready passes on graphs built with the IR API:
 * div_to_mul, fuse_linear_add, move_act_before_concat (float: the same
 * floats, bit for bit where the pass claims it, else within the claimed
 * bound), split_group_conv_qdq and fold_dq_q (QDQ: the same floats and, on
 * the int8 executor's lowered graph, the same integers, bit for bit); each
 * pass's report counts and the skip reasons of its guards. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

/* --- helpers --------------------------------------------------------------- */

static qf_value *cst(qf_graph *g, const char *name, qf_dtype dt, int ndim, const int64_t *dims,
                     const void *data)
{
    qf_tensor t;
    REQUIRE_OK(qf_tensor_init(&t, dt, ndim, dims));
    memcpy(t.data, data, (size_t)qf_tensor_numel(&t) * qf_dtype_size(dt));
    qf_value *v = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    REQUIRE(v != NULL, "constant %s: %s", name, qf_error_message());
    return v;
}

static qf_node *node(qf_graph *g, qf_op op, const char *name, int nin, qf_value **in)
{
    qf_node *n = qf_graph_add_node(g, op, name, nin, in, 1);
    REQUIRE(n != NULL, "node %s: %s", name, qf_error_message());
    return n;
}

static int count_op(const qf_graph *g, qf_op op)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == op;
    return k;
}

/* The report's result of pass `name` (its first run). */
static const qf_pass_result *result(const qf_pass_report *r, const char *name)
{
    for (int i = 0; r && i < r->nresults; i++)
        if (strcmp(r->results[i].pass, name) == 0) return &r->results[i];
    return NULL;
}

/* Run pass `name` on g; check its rewrites and, when skip is given, that
 * one skip's reason holds it. */
static void run_pass(qf_graph *g, const char *name, int rewrites, const char *skip,
                     const char *what)
{
    const char *names[] = {name, NULL};
    qf_pass_report *r = NULL;
    REQUIRE_OK(qf_passes_run(g, names, &(qf_pass_options){.verify = true}, &r));
    const qf_pass_result *pr = result(r, name);
    REQUIRE(pr != NULL, "%s: no %s result", what, name);
    CHECKF(pr->rewrites == rewrites, "%s: %d rewrites, want %d", what, pr->rewrites, rewrites);
    if (skip) {
        bool found = false;
        for (int i = 0; i < pr->nskipped; i++) found |= strstr(pr->skipped[i].reason, skip) != NULL;
        CHECKF(found, "%s: no skip mentions '%s' (%d skips%s%s)", what, skip, pr->nskipped,
               pr->nskipped ? ", first: " : "", pr->nskipped ? pr->skipped[0].reason : "");
    } else {
        CHECKF(pr->nskipped == 0, "%s: %d skips (%s)", what, pr->nskipped,
               pr->nskipped ? pr->skipped[0].reason : "");
    }
    qf_pass_report_free(r);
}

/* Deterministic inputs in [-2, 2). */
static void fill(qf_tensor *t, uint32_t seed)
{
    float *p = t->data;
    uint32_t s = seed * 2654435761u + 1u;
    for (int64_t i = 0; i < qf_tensor_numel(t); i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)((double)(s >> 8) / 16777216.0 * 4.0 - 2.0);
    }
}

/* Output 0 of g on its inputs filled by `fill` (seed = input index). */
static void run_graph(qf_graph *g, qf_tensor *y)
{
    qf_tensor in[4];
    const qf_tensor *ptr[4];
    REQUIRE(g->ninputs <= 4, "too many inputs");
    for (int i = 0; i < g->ninputs; i++) {
        REQUIRE_OK(
            qf_tensor_init(&in[i], QF_DTYPE_F32, g->inputs[i]->type.ndim, g->inputs[i]->type.dims));
        fill(&in[i], (uint32_t)i + 7u);
        ptr[i] = &in[i];
    }
    qf_plan *p;
    REQUIRE_OK(qf_plan_init(&p, g));
    REQUIRE_OK(qf_plan_run(p, ptr, g->ninputs));
    REQUIRE_OK(qf_tensor_copy(y, qf_plan_output(p, 0)));
    qf_plan_free(p);
    for (int i = 0; i < g->ninputs; i++) qf_tensor_free(&in[i]);
}

/* The float32 distance of a and b in units in the last place. */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((long long)ia - (long long)ib);
}

/* a and b elementwise: at most max_ulp apart, or within tol·(1 + |a|). */
static void compare(const qf_tensor *a, const qf_tensor *b, int64_t max_ulp, double tol,
                    const char *what)
{
    REQUIRE(qf_tensor_numel(a) == qf_tensor_numel(b), "%s: %lld vs %lld elements", what,
            (long long)qf_tensor_numel(a), (long long)qf_tensor_numel(b));
    const float *p = a->data, *q = b->data;
    int bad = 0;
    for (int64_t i = 0; i < qf_tensor_numel(a); i++) {
        bool ok = tol > 0 ? fabs((double)p[i] - (double)q[i]) <= tol * (1.0 + fabs((double)p[i]))
                          : ulps(p[i], q[i]) <= max_ulp;
        if (!ok && bad++ < 5)
            FAIL("%s: element %lld: %.9g before, %.9g after (%lld ulp)", what, (long long)i, p[i],
                 q[i], (long long)ulps(p[i], q[i]));
    }
}

/* --- div_to_mul -------------------------------------------------------------- */

enum { DM_POW2, DM_SCALAR_POW2, DM_THIRD, DM_ZERO, DM_TENSOR, DM_OVERFLOW };

static qf_graph *dm_graph(int variant)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[2] = {64, 8}, cd[1] = {8};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    float c[8] = {0.25f, 2.0f, -4.0f, 1.0f, 0x1p-20f, 0x1p40f, -0.5f, 8.0f};
    if (variant == DM_THIRD)
        for (int i = 0; i < 8; i++) c[i] = 3.0f + 0.7f * (float)i; /* 1/c not exact */
    if (variant == DM_ZERO) c[3] = 0.0f;
    if (variant == DM_OVERFLOW) c[2] = 0x1p-130f; /* a subnormal: 1/c overflows */
    qf_value *cv = variant == DM_TENSOR ? qf_graph_add_input(g, "c", QF_DTYPE_F32, 1, cd)
                   : variant == DM_SCALAR_POW2
                       ? cst(g, "c", QF_DTYPE_F32, 0, NULL, &(float){0.125f})
                       : cst(g, "c", QF_DTYPE_F32, 1, cd, c);
    qf_value *in[2] = {x, cv};
    qf_node *d = node(g, QF_OP_DIV, "div", 2, in);
    REQUIRE_OK(qf_graph_rename_value(g, d->outputs[0], "y"));
    REQUIRE_OK(qf_graph_add_output(g, d->outputs[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static void dm_case(int variant, bool taken, int64_t max_ulp, const char *skip)
{
    qf_graph *g = dm_graph(variant), *ref = dm_graph(variant);
    char what[64];
    snprintf(what, sizeof what, "div_to_mul variant %d", variant);
    run_pass(g, "div_to_mul", taken ? 1 : 0, skip, what);
    CHECKF(count_op(g, QF_OP_MUL) == (taken ? 1 : 0) && count_op(g, QF_OP_DIV) == (taken ? 0 : 1),
           "%s: %d Mul, %d Div", what, count_op(g, QF_OP_MUL), count_op(g, QF_OP_DIV));
    CHECKF(strcmp(g->outputs[0]->name, "y") == 0 &&
               strcmp(g->outputs[0]->producer->name, "div") == 0,
           "%s: output '%s' of '%s'", what, g->outputs[0]->name, g->outputs[0]->producer->name);
    qf_tensor a, b;
    run_graph(ref, &a);
    run_graph(g, &b);
    compare(&a, &b, max_ulp, 0, what);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_graph_free(g);
    qf_graph_free(ref);
}

static void test_div_to_mul(void)
{
    dm_case(DM_POW2, true, 0, NULL); /* powers of two: bit for bit */
    dm_case(DM_SCALAR_POW2, true, 0, NULL);
    dm_case(DM_THIRD, true, 1, NULL); /* within 1 ulp */
    dm_case(DM_ZERO, false, 0, "divisor element 3 is 0");
    dm_case(DM_TENSOR, false, 0, "not a constant");
    dm_case(DM_OVERFLOW, false, 0, "overflows float32");
}

/* The 1-ulp claim is not vacuous: 1/c rounded does move some quotients. */
static void test_div_to_mul_inexact_moves(void)
{
    qf_graph *g = dm_graph(DM_THIRD), *ref = dm_graph(DM_THIRD);
    run_pass(g, "div_to_mul", 1, NULL, "div_to_mul inexact");
    qf_tensor a, b;
    run_graph(ref, &a);
    run_graph(g, &b);
    int64_t moved = 0;
    for (int64_t i = 0; i < qf_tensor_numel(&a); i++)
        moved += ((float *)a.data)[i] != ((float *)b.data)[i];
    CHECKF(moved > 0, "no quotient moved: the inexact case tests nothing");
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_graph_free(g);
    qf_graph_free(ref);
}

/* --- fuse_linear_add ---------------------------------------------------------- */

enum {
    LA_BIAS,
    LA_NO_BIAS,
    LA_SWAPPED,
    LA_ROW,
    LA_ONE,
    LA_TWO_READERS,
    LA_MATRIX,
    LA_TENSOR,
    LA_MUL
};

static qf_graph *la_graph(int variant)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[2] = {5, 16}, wd[2] = {8, 16}, bd[1] = {8}, rd[2] = {1, 8}, md[2] = {5, 8},
                  od[1] = {1};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    float w[128], b[8], c[40];
    for (int i = 0; i < 128; i++) w[i] = (float)((i * 37 % 23) - 11) / 16.0f;
    for (int i = 0; i < 8; i++) b[i] = 0.1f * (float)i - 0.3f;
    for (int i = 0; i < 40; i++) c[i] = 0.37f * (float)(i % 8) - 1.1f;
    qf_value *in[3] = {x, cst(g, "W", QF_DTYPE_F32, 2, wd, w), cst(g, "b", QF_DTYPE_F32, 1, bd, b)};
    qf_node *l = node(g, QF_OP_LINEAR, "fc", variant == LA_NO_BIAS ? 2 : 3, in);
    qf_value *cv = variant == LA_ROW      ? cst(g, "c", QF_DTYPE_F32, 2, rd, c)
                   : variant == LA_ONE    ? cst(g, "c", QF_DTYPE_F32, 1, od, c)
                   : variant == LA_MATRIX ? cst(g, "c", QF_DTYPE_F32, 2, md, c)
                   : variant == LA_TENSOR ? qf_graph_add_input(g, "c", QF_DTYPE_F32, 1, bd)
                                          : cst(g, "c", QF_DTYPE_F32, 1, bd, c);
    qf_value *ain[2] = {l->outputs[0], cv};
    if (variant == LA_SWAPPED) {
        ain[0] = cv;
        ain[1] = l->outputs[0];
    }
    qf_node *a = node(g, variant == LA_MUL ? QF_OP_MUL : QF_OP_ADD, "add", 2, ain);
    REQUIRE_OK(qf_graph_rename_value(g, a->outputs[0], "y"));
    REQUIRE_OK(qf_graph_add_output(g, a->outputs[0]));
    if (variant == LA_TWO_READERS) {
        qf_node *r = node(g, QF_OP_RELU, "relu", 1, &l->outputs[0]);
        REQUIRE_OK(qf_graph_add_output(g, r->outputs[0]));
    }
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static void la_case(int variant, bool taken, const char *skip)
{
    qf_graph *g = la_graph(variant), *ref = la_graph(variant);
    char what[64];
    snprintf(what, sizeof what, "fuse_linear_add variant %d", variant);
    run_pass(g, "fuse_linear_add", taken ? 1 : 0, skip, what);
    CHECKF(count_op(g, QF_OP_ADD) == (taken || variant == LA_MUL ? 0 : 1), "%s: %d Add", what,
           count_op(g, QF_OP_ADD));
    CHECKF(strcmp(g->outputs[0]->name, "y") == 0, "%s: output 0 is '%s'", what,
           g->outputs[0]->name);
    if (taken) {
        const qf_node *l = g->outputs[0]->producer;
        CHECKF(l->op == QF_OP_LINEAR && strcmp(l->name, "fc") == 0 && l->ninputs == 3 &&
                   l->inputs[2],
               "%s: output made by '%s' without a bias", what, l->name);
    }
    qf_tensor a, b;
    run_graph(ref, &a);
    run_graph(g, &b);
    /* float32 rounding of the reordered sums: |x·W| + |b| + |c| is below 20
     * here, 4 ulp of that */
    compare(&a, &b, 0, taken ? 1e-5 : 1e-30, what);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_graph_free(g);
    qf_graph_free(ref);
}

static void test_fuse_linear_add(void)
{
    la_case(LA_BIAS, true, NULL);
    la_case(LA_NO_BIAS, true, NULL);
    la_case(LA_SWAPPED, true, NULL);
    la_case(LA_ROW, true, NULL);
    la_case(LA_ONE, true, NULL);
    la_case(LA_TWO_READERS, false, "read more than once");
    la_case(LA_MATRIX, false, "not one per output feature");
    la_case(LA_TENSOR, false, "not a constant");
    la_case(LA_MUL, false, NULL); /* no Add reads it: no candidate, no line */
}

/* --- move_act_before_concat ---------------------------------------------------- */

enum {
    MA_RELU,
    MA_SIGMOID,
    MA_LINEAR,
    MA_OTHER_INPUT,
    MA_TWO_READERS,
    MA_NOT_ACT,
    MA_NOT_ACT_AT_ALL
};

static qf_graph *ma_graph(int variant)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[4] = {2, 3, 6, 6}, wd[4] = {4, 3, 3, 3}, ld[2] = {2, 12}, lw[2] = {5, 12};
    float w[108], b[4];
    for (int i = 0; i < 108; i++) w[i] = (float)((i * 29 % 17) - 8) / 8.0f;
    for (int i = 0; i < 4; i++) b[i] = 0.2f * (float)i - 0.3f;
    qf_value *parts[2];
    if (variant == MA_LINEAR) {
        qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, ld);
        for (int k = 0; k < 2; k++) {
            char name[16];
            snprintf(name, sizeof name, "W%d", k);
            qf_value *in[2] = {x, cst(g, name, QF_DTYPE_F32, 2, lw, w + 7 * k)};
            snprintf(name, sizeof name, "fc%d", k);
            parts[k] = node(g, QF_OP_LINEAR, name, 2, in)->outputs[0];
        }
    } else {
        qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
        for (int k = 0; k < 2; k++) {
            char name[16];
            snprintf(name, sizeof name, "W%d", k);
            qf_value *in[3] = {x, cst(g, name, QF_DTYPE_F32, 4, wd, w),
                               cst(g, k ? "b1" : "b0", QF_DTYPE_F32, 1, wd, b)};
            snprintf(name, sizeof name, "conv%d", k);
            qf_node *c = node(g, QF_OP_CONV, name, 3, in);
            REQUIRE_OK(qf_node_set_attr_ints(g, c, "pads", (const int64_t[]){1, 1, 1, 1}, 4));
            REQUIRE_OK(qf_node_set_attr_ints(g, c, "kernel_shape", (const int64_t[]){3, 3}, 2));
            parts[k] = c->outputs[0];
        }
        if (variant == MA_OTHER_INPUT)
            parts[1] = node(g, QF_OP_ABS, "abs", 1, &parts[1])->outputs[0];
    }
    qf_node *cc = node(g, QF_OP_CONCAT, "cat", 2, parts);
    REQUIRE_OK(qf_node_set_attr_int(g, cc, "axis", 1));
    qf_node *a = node(g,
                      variant == MA_SIGMOID          ? QF_OP_SIGMOID
                      : variant == MA_NOT_ACT        ? QF_OP_LEAKY_RELU
                      : variant == MA_NOT_ACT_AT_ALL ? QF_OP_ABS
                                                     : QF_OP_RELU,
                      "act", 1, &cc->outputs[0]);
    REQUIRE_OK(qf_graph_rename_value(g, a->outputs[0], "y"));
    REQUIRE_OK(qf_graph_add_output(g, a->outputs[0]));
    if (variant == MA_TWO_READERS) REQUIRE_OK(qf_graph_add_output(g, parts[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static void ma_case(int variant, bool taken, const char *skip)
{
    qf_graph *g = ma_graph(variant), *ref = ma_graph(variant);
    char what[64];
    snprintf(what, sizeof what, "move_act_before_concat variant %d", variant);
    run_pass(g, "move_act_before_concat", taken ? 1 : 0, skip, what);
    const qf_op act = variant == MA_SIGMOID          ? QF_OP_SIGMOID
                      : variant == MA_NOT_ACT        ? QF_OP_LEAKY_RELU
                      : variant == MA_NOT_ACT_AT_ALL ? QF_OP_ABS
                                                     : QF_OP_RELU;
    CHECKF(count_op(g, act) == (taken ? 2 : 1), "%s: %d activations", what, count_op(g, act));
    CHECKF(strcmp(g->outputs[0]->name, "y") == 0, "%s: output 0 is '%s'", what,
           g->outputs[0]->name);
    if (taken)
        CHECKF(g->outputs[0]->producer->op == QF_OP_CONCAT, "%s: output not made by the Concat",
               what);
    qf_tensor a, b;
    run_graph(ref, &a);
    run_graph(g, &b);
    compare(&a, &b, 0, 0, what); /* element-wise: bit for bit */
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_graph_free(g);
    qf_graph_free(ref);
}

static void test_move_act_before_concat(void)
{
    ma_case(MA_RELU, true, NULL);
    ma_case(MA_SIGMOID, true, NULL);
    ma_case(MA_LINEAR, true, NULL);
    ma_case(MA_OTHER_INPUT, false, "input 1 is not a 2-D convolution");
    ma_case(MA_TWO_READERS, false, "other readers");
    ma_case(MA_NOT_ACT, false, "not an activation the NPU fuses");
    ma_case(MA_NOT_ACT_AT_ALL, false, NULL); /* no activation reads it: no candidate, no line */
}

/* --- QDQ graphs: split_group_conv_qdq, fold_dq_q ------------------------------- */

/* x -Q-DQ-, so that a graph's float input is on an int8 grid. */
static qf_value *qdq(qf_graph *g, const char *name, qf_value *x, float s, int8_t z)
{
    char n[64];
    snprintf(n, sizeof n, "%s_s", name);
    qf_value *sv = cst(g, n, QF_DTYPE_F32, 0, NULL, &s);
    snprintf(n, sizeof n, "%s_z", name);
    qf_value *zv = cst(g, n, QF_DTYPE_I8, 0, NULL, &z);
    qf_value *in[3] = {x, sv, zv};
    snprintf(n, sizeof n, "%s_q", name);
    qf_node *q = node(g, QF_OP_QUANTIZE, n, 3, in);
    in[0] = q->outputs[0];
    snprintf(n, sizeof n, "%s_dq", name);
    return node(g, QF_OP_DEQUANTIZE, n, 3, in)->outputs[0];
}

enum {
    GC_PLAIN,
    GC_RELU,
    GC_NO_BIAS,
    GC_DEPTHWISE,
    GC_FLOAT_WEIGHT,
    GC_TWO_READERS,
    GC_NO_XZP,
    GC_TEN,
    GC_ELEVEN
};

/* x [1, 4, 7, 7] -Q-DQ- Conv(group 2 | 4, DQ(int8 W per channel), DQ(int32 b)) [-Relu] -Q-DQ- y */
static qf_graph *gc_graph(int variant)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    const int dw = variant == GC_DEPTHWISE;
    /* groups: 2; 4 depthwise; 10 and 11 (ExecuTorch's limit is 10) of 2 channels each */
    const int64_t group = dw ? 4 : variant == GC_TEN ? 10 : variant == GC_ELEVEN ? 11 : 2;
    const int64_t xd[4] = {1, group > 4 ? 2 * group : 4, 7, 7},
                  wd[4] = {group > 4 ? 2 * group : 6 + 2 * dw, dw ? 1 : 2, 3, 3}, md[1] = {wd[0]};
    const int64_t m = wd[0], wn = m * wd[1] * 9;
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *xq = qdq(g, "x", x, 0.03f, variant == GC_NO_XZP ? 0 : 5);
    if (variant == GC_NO_XZP) { /* an int8 DQ without its zero point (0) */
        qf_node *d = xq->producer;
        REQUIRE_OK(qf_node_set_input(g, d, 2, NULL));
        d->ninputs = 2;
    }
    int8_t wq[22 * 2 * 9];
    float sw[22], wf[22 * 2 * 9];
    int8_t zw[22] = {0};
    int32_t bq[22];
    float sb[22];
    for (int64_t i = 0; i < wn; i++) wq[i] = (int8_t)((i * 53 % 255) - 127);
    for (int64_t o = 0; o < m; o++) {
        sw[o] = 0.002f * (float)(o + 1);
        bq[o] = (int32_t)(o * 977 % 4001) - 2000;
        sb[o] = 0.03f * sw[o];
    }
    for (int64_t i = 0; i < wn; i++) wf[i] = (float)wq[i] * sw[i / (wn / m)];
    qf_value *w;
    if (variant == GC_FLOAT_WEIGHT) {
        w = cst(g, "W", QF_DTYPE_F32, 4, wd, wf);
    } else {
        qf_value *in[3] = {cst(g, "Wq", QF_DTYPE_I8, 4, wd, wq),
                           cst(g, "Ws", QF_DTYPE_F32, 1, md, sw),
                           cst(g, "Wz", QF_DTYPE_I8, 1, md, zw)};
        qf_node *d = node(g, QF_OP_DEQUANTIZE, "W_dq", 3, in);
        REQUIRE_OK(qf_node_set_attr_int(g, d, "axis", 0));
        w = d->outputs[0];
    }
    qf_value *cin[3] = {xq, w, NULL};
    if (variant != GC_NO_BIAS) {
        qf_value *in[2] = {cst(g, "bq", QF_DTYPE_I32, 1, md, bq),
                           cst(g, "bs", QF_DTYPE_F32, 1, md, sb)};
        qf_node *d = node(g, QF_OP_DEQUANTIZE, "b_dq", 2, in);
        REQUIRE_OK(qf_node_set_attr_int(g, d, "axis", 0));
        cin[2] = d->outputs[0];
    }
    qf_node *c = node(g, QF_OP_CONV, "conv", variant == GC_NO_BIAS ? 2 : 3, cin);
    REQUIRE_OK(qf_node_set_attr_int(g, c, "group", group));
    REQUIRE_OK(qf_node_set_attr_ints(g, c, "pads", (const int64_t[]){1, 1, 1, 1}, 4));
    REQUIRE_OK(qf_node_set_attr_ints(g, c, "strides", (const int64_t[]){2, 1}, 2));
    REQUIRE_OK(qf_node_set_attr_ints(g, c, "kernel_shape", (const int64_t[]){3, 3}, 2));
    qf_value *y = c->outputs[0];
    if (variant == GC_RELU) y = node(g, QF_OP_RELU, "relu", 1, &y)->outputs[0];
    if (variant == GC_TWO_READERS) REQUIRE_OK(qf_graph_add_output(g, y));
    qf_value *out = qdq(g, "y", y, 0.05f, -7);
    REQUIRE_OK(qf_graph_rename_value(g, out, "out"));
    REQUIRE_OK(qf_graph_add_output(g, out));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

/* g's output 0 on its int8 executor (the lowered copy: QLinearConv, qconcat ...). */
static void run_int8(const qf_graph *g, qf_tensor *y, int qconvs, const char *what)
{
    qf_graph *c;
    REQUIRE_OK(qf_graph_clone(g, &c));
    int lowered = 0;
    REQUIRE_OK(qf_quant_lower_int8(c, NULL, QF_REQUANT_FIXED_POINT, &lowered));
    CHECKF(lowered > 0, "%s: nothing lowered to int8", what);
    CHECKF(count_op(c, QF_OP_QLINEAR_CONV) == qconvs, "%s: %d integer convolutions, want %d", what,
           count_op(c, QF_OP_QLINEAR_CONV), qconvs);
    run_graph(c, y);
    qf_graph_free(c);
}

static void gc_case(int variant, bool taken, const char *skip)
{
    qf_graph *g = gc_graph(variant), *ref = gc_graph(variant);
    if (variant == GC_RELU) g->opset = ref->opset = 18; /* the Split then names its part count */
    char what[64];
    snprintf(what, sizeof what, "split_group_conv_qdq variant %d", variant);
    run_pass(g, "split_group_conv_qdq", taken ? 1 : 0, skip, what);
    const int parts =
        taken ? (int)qf_node_attr_int(qf_graph_find_node(ref, "conv"), "group", 1) : 1;
    CHECKF(count_op(g, QF_OP_CONV) == parts, "%s: %d Conv", what, count_op(g, QF_OP_CONV));
    if (taken) {
        qf_graph_for_each_node(g, n)
        {
            if (n->op == QF_OP_CONV)
                CHECKF(qf_node_attr_int(n, "group", 1) == 1, "%s: '%s' grouped", what, n->name);
        }
        qf_graph_for_each_node(g, n)
        {
            if (n->op == QF_OP_SPLIT)
                CHECKF(qf_node_attr_int(n, "num_outputs", 0) == (g->opset >= 18 ? parts : 0),
                       "%s: Split num_outputs %lld at opset %lld", what,
                       (long long)qf_node_attr_int(n, "num_outputs", 0), (long long)g->opset);
        }
        CHECKF(count_op(g, QF_OP_SPLIT) == 1 && count_op(g, QF_OP_CONCAT) == 1,
               "%s: %d Split, %d Concat", what, count_op(g, QF_OP_SPLIT),
               count_op(g, QF_OP_CONCAT));
        CHECKF(count_op(g, QF_OP_RELU) == (variant == GC_RELU ? 2 : 0), "%s: %d Relu", what,
               count_op(g, QF_OP_RELU));
        CHECKF(qf_graph_find_node(g, "conv") && qf_graph_find_node(g, "conv")->op == QF_OP_CONCAT,
               "%s: the Concat does not carry the conv's name", what);
    }
    CHECKF(strcmp(g->outputs[g->noutputs - 1]->name, "out") == 0, "%s: output '%s'", what,
           g->outputs[g->noutputs - 1]->name);
    qf_tensor a, b;
    run_graph(ref, &a);
    run_graph(g, &b);
    compare(&a, &b, 0, 0, what); /* float: on the output's grid, bit for bit */
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    if (variant != GC_FLOAT_WEIGHT && variant != GC_TWO_READERS &&
        variant != GC_NO_XZP) { /* (not lowered) */
        char w8[80];
        snprintf(w8, sizeof w8, "%s (int8)", what);
        run_int8(ref, &a, 1, w8);
        run_int8(g, &b, parts, w8);
        compare(&a, &b, 0, 0, w8); /* the same integers */
        qf_tensor_free(&a);
        qf_tensor_free(&b);
    }
    qf_graph_free(g);
    qf_graph_free(ref);
}

static void test_split_group_conv_qdq(void)
{
    gc_case(GC_PLAIN, true, NULL);
    gc_case(GC_RELU, true, NULL);
    gc_case(GC_NO_BIAS, true, NULL);
    gc_case(GC_FLOAT_WEIGHT, false, "weight is not a DequantizeLinear");
    gc_case(GC_TWO_READERS, false, "not read by one QuantizeLinear");
    gc_case(GC_NO_XZP, true, NULL); /* the Split moves integers: no zero point needed */
    /* depthwise is the NPU's own form: no rewrite, no skip line */
    gc_case(GC_DEPTHWISE, false, NULL);
    gc_case(GC_TEN, true, NULL); /* ExecuTorch splits 2 to 10 groups */
    gc_case(GC_ELEVEN, false, "11 groups: more than 10");
}

enum { FQ_SAME, FQ_OTHER_SCALE, FQ_OTHER_TYPE, FQ_OUTPUT };

/* x -Q(s, z)-DQ- -Q(s', z')-DQ- y (the middle pair redundant when s' = s, z' = z) */
static qf_graph *fq_graph(int variant)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    const int64_t xd[2] = {16, 16};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    qf_value *a = qdq(g, "a", x, 0.02f, 3);
    /* the second pair: its own constants of the same values (ONNX exporters
     * write one initializer per node) */
    float s = variant == FQ_OTHER_SCALE ? 0.025f : 0.02f;
    qf_value *sv = cst(g, "b_s", QF_DTYPE_F32, 0, NULL, &s), *zv;
    if (variant == FQ_OTHER_TYPE) {
        uint8_t z = 3;
        zv = cst(g, "b_z", QF_DTYPE_U8, 0, NULL, &z);
    } else {
        int8_t z = 3;
        zv = cst(g, "b_z", QF_DTYPE_I8, 0, NULL, &z);
    }
    qf_value *in[3] = {a, sv, zv};
    qf_node *q = node(g, QF_OP_QUANTIZE, "b_q", 3, in);
    if (variant == FQ_OUTPUT) REQUIRE_OK(qf_graph_add_output(g, q->outputs[0]));
    in[0] = q->outputs[0];
    qf_node *d = node(g, QF_OP_DEQUANTIZE, "b_dq", 3, in);
    REQUIRE_OK(qf_graph_rename_value(g, d->outputs[0], "y"));
    REQUIRE_OK(qf_graph_add_output(g, d->outputs[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static void fq_case(int variant, bool taken, const char *skip)
{
    qf_graph *g = fq_graph(variant), *ref = fq_graph(variant);
    char what[64];
    snprintf(what, sizeof what, "fold_dq_q variant %d", variant);
    run_pass(g, "fold_dq_q", taken ? 1 : 0, skip, what);
    CHECKF(count_op(g, QF_OP_QUANTIZE) == (taken ? 1 : 2), "%s: %d QuantizeLinear", what,
           count_op(g, QF_OP_QUANTIZE));
    qf_tensor a, b;
    const int o = g->noutputs - 1;
    REQUIRE(strcmp(g->outputs[o]->name, "y") == 0, "%s: output '%s'", what, g->outputs[o]->name);
    if (o == 0) {
        run_graph(ref, &a);
        run_graph(g, &b);
        compare(&a, &b, 0, 0, what);
        qf_tensor_free(&a);
        qf_tensor_free(&b);
    }
    qf_graph_free(g);
    qf_graph_free(ref);
}

static void test_fold_dq_q(void)
{
    fq_case(FQ_SAME, true, NULL);
    fq_case(FQ_OTHER_SCALE, false, "requantizes");
    fq_case(FQ_OTHER_TYPE, false, "writes uint8");
    fq_case(FQ_OUTPUT, false, "graph output");
}

/* The pipelines hold the passes (quantize's use them by these names). */
static void test_pipelines(void)
{
    REQUIRE_OK(qf_quant_register_passes());
    static const char *const want[][4] = {
        {"neutron", "div_to_mul", "fuse_linear_add", "move_act_before_concat"},
        {"neutron_qdq", "split_group_conv_qdq", "fold_dq_q", NULL},
        {"quantize_prepare_neutron", "div_to_mul", "quant_annotate", NULL},
        {"quantize_convert_neutron", "quant_convert", "split_group_conv_qdq", "fold_dq_q"},
        {"qat_prepare_neutron", "canonicalize", "div_to_mul", "quant_qat_insert"},
        {"qat_finalize_neutron", "qat_convert", "split_group_conv_qdq", "fold_dq_q"},
        {"finalize_neutron", "qat_fold_exported", "split_group_conv_qdq", "fold_dq_q"},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const qf_pipeline *p = qf_pipeline_find(want[k][0]);
        REQUIRE(p != NULL, "no pipeline %s", want[k][0]);
        for (int i = 1; i < 4 && want[k][i]; i++) {
            bool found = false;
            for (int j = 0; p->passes[j]; j++) found |= strcmp(p->passes[j], want[k][i]) == 0;
            CHECKF(found, "pipeline %s lacks %s", want[k][0], want[k][i]);
        }
    }
    CHECK(qf_quant_profile_find("neutron")->neutron_passes);
    CHECK(!qf_quant_profile_find("generic")->neutron_passes);
    qf_quant_profile p = *qf_quant_profile_find("neutron");
    CHECK_OK(qf_quant_profile_set(&p, "neutron-passes=off"));
    CHECK(!p.neutron_passes);
}

int main(void)
{
    RUN(test_div_to_mul);
    RUN(test_div_to_mul_inexact_moves);
    RUN(test_fuse_linear_add);
    RUN(test_move_act_before_concat);
    RUN(test_split_group_conv_qdq);
    RUN(test_fold_dq_q);
    RUN(test_pipelines);
    return qf_check_report();
}
