/* The plan's layout planning and post-op fusion (src/exec/plan_layout.c): on
 * small graphs, which steps run channels-last, which nodes are fused and
 * where reorders go, and that the outputs (and what a per-step hook sees)
 * match the reference engine's plan within 1e-5 relative.
 *
 *   test_plan_layout
 *
 * The layout checks need the oneDNN backend with its Conv kernel; without it
 * (a build with -DQF_ONEDNN=OFF, no libdnnl on the machine) only the
 * engine-independent checks run and the test says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_impl.h"
#include "backend/dnnl/dnnl_kernels.h"
#include "qfold/exec.h"
#include "qfold/graph.h"
#include "tools/qf_check.h"

static bool have_dnnl; /* the backend loads and runs Conv */

/* --- building graphs ------------------------------------------------------ */

static uint32_t rng_state = 12345;

static float frand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static qf_value *rand_const(qf_graph *g, const char *name, int ndim, const int64_t *dims,
                            float scale)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) return NULL;
    float *d = t.data;
    for (int64_t i = 0; i < qf_tensor_numel(&t); i++) d[i] = frand() * scale;
    return qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &t);
}

/* n's output, its shape inferred (the next node's weights depend on it). */
static qf_value *inferred(qf_graph *g, qf_node *n)
{
    CHECK_OK(qf_node_infer(g, n));
    return n->outputs[0];
}

/* Conv k x k, pad k/2, stride 1: cin -> cout channels. */
static qf_value *conv(qf_graph *g, const char *name, qf_value *x, int64_t cout, int64_t k)
{
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    int64_t wd[4] = {cout, x->type.dims[1], k, k}, bd[1] = {cout};
    qf_value *in[3] = {x, rand_const(g, wn, 4, wd, 0.3f), rand_const(g, bn, 1, bd, 0.1f)};
    qf_node *n = qf_graph_add_node(g, QF_OP_CONV, name, 3, in, 1);
    int64_t pads[4] = {k / 2, k / 2, k / 2, k / 2};
    CHECK_OK(qf_node_set_attr_ints(g, n, "pads", pads, 4));
    return inferred(g, n);
}

static qf_value *unary(qf_graph *g, qf_op op, const char *name, qf_value *x)
{
    return inferred(g, qf_graph_add_node(g, op, name, 1, &x, 1));
}

static qf_value *binary(qf_graph *g, qf_op op, const char *name, qf_value *a, qf_value *b)
{
    qf_value *in[2] = {a, b};
    return inferred(g, qf_graph_add_node(g, op, name, 2, in, 1));
}

static qf_value *pool(qf_graph *g, qf_op op, const char *name, qf_value *x)
{
    qf_node *n = qf_graph_add_node(g, op, name, 1, &x, 1);
    int64_t k[2] = {2, 2};
    CHECK_OK(qf_node_set_attr_ints(g, n, "kernel_shape", k, 2));
    CHECK_OK(qf_node_set_attr_ints(g, n, "strides", k, 2));
    return inferred(g, n);
}

static qf_value *gemm(qf_graph *g, const char *name, qf_value *x, int64_t nout)
{
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    int64_t wd[2] = {nout, x->type.dims[1]}, bd[1] = {nout};
    qf_value *in[3] = {x, rand_const(g, wn, 2, wd, 0.1f), rand_const(g, bn, 1, bd, 0.1f)};
    qf_node *n = qf_graph_add_node(g, QF_OP_GEMM, name, 3, in, 1);
    CHECK_OK(qf_node_set_attr_int(g, n, "transB", 1));
    return inferred(g, n);
}

/* --- running and comparing ----------------------------------------------- */

typedef struct plan_stats {
    int steps, reorders, backend, fused;
} plan_stats;

static plan_stats stats(const qf_plan *p)
{
    plan_stats s = {0};
    s.steps = qf_plan_step_count(p);
    for (int i = 0; i < s.steps; i++) {
        qf_plan_step_info info;
        qf_plan_step_get(p, i, &info);
        s.reorders += info.reorder != NULL;
        s.backend += info.backend;
        s.fused += info.nfused;
    }
    return s;
}

/* The step that runs node `name` (itself or fused), -1 if none. */
static int step_of(const qf_plan *p, const char *name, qf_plan_step_info *out)
{
    for (int i = 0; i < qf_plan_step_count(p); i++) {
        qf_plan_step_info info;
        qf_plan_step_get(p, i, &info);
        bool hit = !info.reorder && info.node && !strcmp(info.node->name, name);
        for (int k = 0; k < info.nfused; k++) hit |= !strcmp(info.fused[k]->name, name);
        if (hit) {
            if (out) *out = info;
            return i;
        }
    }
    return -1;
}

/* Is value `name` reordered by some step? */
static bool reordered(const qf_plan *p, const char *name)
{
    for (int i = 0; i < qf_plan_step_count(p); i++) {
        qf_plan_step_info info;
        qf_plan_step_get(p, i, &info);
        if (info.reorder && !strcmp(info.reorder->name, name)) return true;
    }
    return false;
}

static double rel_diff(const qf_tensor *a, const qf_tensor *b)
{
    if (qf_tensor_numel(a) != qf_tensor_numel(b)) return INFINITY;
    const float *x = a->data, *y = b->data;
    double md = 0, mref = 0;
    for (int64_t i = 0; i < qf_tensor_numel(a); i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= md)) md = d;
        if (fabs(y[i]) > mref) mref = fabs(y[i]);
    }
    return md / (mref > 1e-6 ? mref : 1e-6);
}

static qf_tensor input_for(const qf_graph *g)
{
    qf_tensor x;
    const qf_value *v = g->inputs[0];
    CHECK_OK(qf_tensor_init(&x, QF_DTYPE_F32, v->type.ndim, v->type.dims));
    float *d = x.data;
    for (int64_t i = 0; i < qf_tensor_numel(&x); i++) d[i] = frand();
    return x;
}

/* Builds the plan of `engine`, runs it on x, and copies its outputs. */
static qf_plan *plan_run(qf_graph *g, qf_engine engine, const qf_tensor *x)
{
    CHECK_OK(qf_set_engine(engine));
    qf_plan *p = NULL;
    qf_status st = qf_plan_init(&p, g);
    CHECK_OK(st);
    if (st != QF_OK) return NULL;
    const qf_tensor *feed[] = {x};
    CHECK_OK(qf_plan_run(p, feed, 1));
    return p;
}

/* Runs g on both engines, compares every output, returns the dnnl plan
 * (NULL without the backend) for the caller's layout checks. */
static qf_plan *compare_engines(qf_graph *g, const char *what)
{
    qf_tensor x = input_for(g);
    qf_plan *ref = plan_run(g, QF_ENGINE_REF, &x);
    REQUIRE(ref != NULL, "%s: reference plan", what);
    plan_stats rs = stats(ref);
    CHECKF(rs.reorders == 0 && rs.backend == 0 && rs.fused == 0,
           "%s: the ref plan has %d reorders, %d fused", what, rs.reorders, rs.fused);
    qf_plan *dn = NULL;
    if (have_dnnl) {
        dn = plan_run(g, QF_ENGINE_DNNL, &x);
        for (int o = 0; dn && o < qf_plan_num_outputs(ref); o++) {
            double r = rel_diff(qf_plan_output(dn, o), qf_plan_output(ref, o));
            CHECKF(r <= 1e-5, "%s: output %d: dnnl vs ref relative difference %.3g > 1e-5", what, o,
                   r);
        }
        if (dn && qf_check_failed_now) qf_plan_print(dn, stderr);
    }
    qf_plan_free(ref);
    qf_tensor_free(&x);
    return dn;
}

/* --- cases ------------------------------------------------------------------- */

/* x -> Conv+Relu -> a -> Conv -> Add(., a) -> Relu -> y: everything runs
 * channels-last, the two convs carry the Relu / Add+Relu as post-ops, and the
 * only reorders are the input's and the output's. */
static void test_residual(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 16, 9, 7};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = unary(g, QF_OP_RELU, "r1", conv(g, "c1", x, 16, 3));
    qf_value *b = conv(g, "c2", a, 16, 3);
    qf_value *y = unary(g, QF_OP_RELU, "r2", binary(g, QF_OP_ADD, "add", b, a));
    CHECK_OK(qf_graph_add_output(g, y));
    qf_plan *p = compare_engines(g, "residual");
    if (p) {
        plan_stats s = stats(p);
        CHECKF(s.reorders == 2 && reordered(p, "x") && reordered(p, y->name),
               "residual: %d reorders, want 2", s.reorders);
        CHECKF(s.steps == 4 && s.backend == 2 && s.fused == 3,
               "residual: %d steps, %d on dnnl, %d fused", s.steps, s.backend, s.fused);
        qf_plan_step_info c1, c2;
        CHECK(step_of(p, "r1", &c1) >= 0 && !strcmp(c1.node->name, "c1") && c1.in_nhwc == 1 &&
              c1.out_nhwc == 1);
        CHECK(step_of(p, "r2", &c2) >= 0 && !strcmp(c2.node->name, "c2") && c2.nfused == 2 &&
              c2.out_nhwc == 1);
        /* c2 reads a itself: its output cannot lie over a (the residual is
         * copied into it before the sum post-op). */
        CHECKF(!c2.over_post, "residual: c2 writes over its own input");
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* A ResNet block: x -> Conv+Relu -> a -> Conv+Relu -> b -> Conv -> Add(., a)
 * -> Relu -> y, and a downsampling one, y -> Conv(stride 2)+Relu -> c ->
 * Conv -> d; z = Relu(Add(Conv1x1(stride 2)(y), d)): the Conv that absorbs
 * each Add writes its output over the residual it adds (read there for the
 * last time: oneDNN's sum post-op in place), and the results stay the
 * reference's. */
static void test_residual_over(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {1, 16, 11, 9};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = unary(g, QF_OP_RELU, "r0", conv(g, "c0", x, 16, 3));
    qf_value *b = unary(g, QF_OP_RELU, "r1", conv(g, "c1", a, 16, 3));
    qf_value *y = unary(g, QF_OP_RELU, "r2", binary(g, QF_OP_ADD, "add", conv(g, "c2", b, 16, 3), a));
    qf_value *c = unary(g, QF_OP_RELU, "r3", conv(g, "c3", y, 32, 3));
    qf_value *dd = conv(g, "c4", c, 32, 3);
    qf_value *ds = conv(g, "ds", y, 32, 1);
    qf_node *cn = c->producer->inputs[0]->producer, *dn = ds->producer;
    int64_t s2[2] = {2, 2};
    CHECK_OK(qf_node_set_attr_ints(g, cn, "strides", s2, 2));
    CHECK_OK(qf_node_set_attr_ints(g, dn, "strides", s2, 2));
    CHECK_OK(qf_node_infer(g, cn));
    CHECK_OK(qf_node_infer(g, c->producer));
    CHECK_OK(qf_node_infer(g, dd->producer));
    CHECK_OK(qf_node_infer(g, dn));
    qf_value *z = unary(g, QF_OP_RELU, "r4", binary(g, QF_OP_ADD, "add2", ds, dd));
    CHECK_OK(qf_graph_add_output(g, z));
    qf_plan *p = compare_engines(g, "residual over");
    if (p) {
        qf_plan_step_info s1, s2i;
        CHECK(step_of(p, "add", &s1) >= 0 && s1.nfused == 2);
        CHECKF(s1.over_post, "residual over: the Conv + Add does not write over its residual");
        CHECK(step_of(p, "add2", &s2i) >= 0 && s2i.nfused == 2);
        CHECKF(s2i.over_post, "residual over: the downsampling Conv + Add does not write over its residual");
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* x -> Conv+Relu -> Flatten -> Gemm: Flatten needs NCHW, so the conv's
 * output is reordered once before it (and the input once). */
static void test_flatten(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {3, 5, 6, 6};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *r = unary(g, QF_OP_RELU, "r", conv(g, "c", x, 7, 3));
    qf_value *f = unary(g, QF_OP_FLATTEN, "flat", r);
    CHECK_OK(qf_graph_add_output(g, gemm(g, "fc", f, 10)));
    qf_plan *p = compare_engines(g, "flatten");
    if (p) {
        plan_stats s = stats(p);
        CHECKF(s.reorders == 2 && reordered(p, "x") && reordered(p, r->name),
               "flatten: %d reorders, want 2", s.reorders);
        qf_plan_step_info fl;
        CHECK(step_of(p, "flat", &fl) >= 0 && !fl.backend && fl.in_nhwc == 0);
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* Two convs -> Concat (reference, NCHW only) -> Conv: the convs' outputs
 * come back to NCHW for the concat, its output goes to NHWC for the conv. */
static void test_concat(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {1, 8, 10, 10};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = conv(g, "ca", x, 5, 3), *b = conv(g, "cb", x, 6, 1);
    qf_value *in[2] = {a, b};
    qf_node *cat = qf_graph_add_node(g, QF_OP_CONCAT, "cat", 2, in, 1);
    CHECK_OK(qf_node_set_attr_int(g, cat, "axis", 1));
    qf_value *y = conv(g, "cc", inferred(g, cat), 4, 3);
    CHECK_OK(qf_graph_add_output(g, y));
    qf_plan *p = compare_engines(g, "concat");
    if (p) {
        plan_stats s = stats(p);
        CHECKF(s.reorders == 5 && reordered(p, a->name) && reordered(p, b->name) &&
                   reordered(p, cat->outputs[0]->name),
               "concat: %d reorders, want 5 (x, both conv outputs, the concat's, y)", s.reorders);
        qf_plan_step_info ci;
        CHECK(step_of(p, "cat", &ci) >= 0 && !ci.backend && ci.in_nhwc == 0 && ci.out_nhwc == 0);
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* A graph output in the middle of a channels-last chain is read in NCHW
 * (its own reorder), and the node producing it is not fused away; a value
 * that is a graph output is never the inside of a fused chain. */
static void test_middle_output(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 4, 8, 8};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *c1 = conv(g, "c1", x, 8, 3);
    qf_value *r1 = unary(g, QF_OP_RELU, "r1", c1);
    qf_value *c2 = conv(g, "c2", r1, 8, 3);
    qf_value *r2 = unary(g, QF_OP_RELU, "r2", c2);
    CHECK_OK(qf_graph_add_output(g, r2));
    CHECK_OK(qf_graph_add_output(g, r1)); /* the middle, after Relu */
    CHECK_OK(qf_graph_add_output(g, c2)); /* before a Relu: no fusion of r2 */
    qf_plan *p = compare_engines(g, "middle output");
    if (p) {
        plan_stats s = stats(p);
        CHECKF(s.reorders == 4, "middle output: %d reorders, want 4 (x, r1, c2, r2)", s.reorders);
        qf_plan_step_info i1, i2;
        CHECK(step_of(p, "r1", &i1) >= 0 && !strcmp(i1.node->name, "c1") && i1.nfused == 1);
        CHECK(step_of(p, "r2", &i2) >= 0 && !strcmp(i2.node->name, "r2"));
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* Conv -> MaxPool -> Relu -> AveragePool -> GlobalAveragePool -> Flatten ->
 * Gemm: pools run channels-last, the global pool's 1x1 output is the same
 * bytes in both layouts, so only the input is reordered. */
static void test_pools(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 3, 12, 12};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *v = pool(g, QF_OP_MAX_POOL, "mp", conv(g, "c", x, 16, 3));
    v = pool(g, QF_OP_AVG_POOL, "ap", unary(g, QF_OP_RELU, "r", v));
    v = unary(g, QF_OP_FLATTEN, "flat", unary(g, QF_OP_GLOBAL_AVG_POOL, "gap", v));
    CHECK_OK(qf_graph_add_output(g, gemm(g, "fc", v, 5)));
    qf_plan *p = compare_engines(g, "pools");
    if (p) {
        plan_stats s = stats(p);
        CHECKF(s.reorders == 1 && reordered(p, "x"), "pools: %d reorders, want 1 (x)", s.reorders);
        qf_plan_step_info mp;
        CHECK(step_of(p, "mp", &mp) >= 0 && mp.in_nhwc == 1 && mp.out_nhwc == 1);
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* A squeeze-excite block: x -> Conv -> a; s = Sigmoid(Conv(GAP(a))) [N,C,1,1];
 * Mul(a, s) broadcasts s over the spatial dims, and so does Sub(s, m), whose
 * broadcast first operand the backend's binary kernel does not take: the
 * reference Sub runs channels-last on views with permuted dims (s, 1x1, is the
 * same bytes in both layouts), so nothing is reordered inside. An Add of a
 * constant stored NCHW is not fused (the post-op would read it in the conv's
 * layout). */
static void test_broadcast(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 6, 7, 5};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = conv(g, "c1", x, 12, 3);
    qf_value *sq = unary(g, QF_OP_SIGMOID, "sig",
                         conv(g, "c2", unary(g, QF_OP_GLOBAL_AVG_POOL, "gap", a), 12, 1));
    qf_value *m = binary(g, QF_OP_MUL, "mul", a, sq);
    qf_value *y = conv(g, "c3", binary(g, QF_OP_SUB, "sub", sq, m), 4, 3);
    int64_t cd[4] = {2, 4, 7, 5};
    qf_value *z = binary(g, QF_OP_ADD, "addc", y, rand_const(g, "cst", 4, cd, 1.0f));
    CHECK_OK(qf_graph_add_output(g, z));
    qf_plan *p = compare_engines(g, "broadcast");
    if (p) {
        plan_stats s = stats(p);
        CHECKF(s.reorders <= 2 && reordered(p, "x"),
               "broadcast: %d reorders, want x's and at most one more", s.reorders);
        qf_plan_step_info mi, si, c3;
        CHECK(step_of(p, "mul", &mi) >= 0 && mi.out_nhwc == 1);
        CHECK(step_of(p, "sub", &si) >= 0 && !si.backend && si.in_nhwc == 2 && si.out_nhwc == 1);
        CHECK(step_of(p, "c3", &c3) >= 0 && c3.nfused == 0);
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* SiLU as PyTorch exports it, Mul(v, Sigmoid(v)) in either operand order,
 * runs as one swish post-op of the conv before it (EfficientNet's blocks and
 * their squeeze-excite fc1); not when the Sigmoid's output has another
 * reader (here a graph output) or the conv's output a third one (a residual
 * Add). */
static void test_silu(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 5, 9, 7};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = conv(g, "c1", x, 12, 3);
    qf_value *a1 = binary(g, QF_OP_MUL, "mul1", a, unary(g, QF_OP_SIGMOID, "sig1", a));
    qf_value *b = conv(g, "c2", a1, 12, 1);
    qf_value *b1 = binary(g, QF_OP_MUL, "mul2", unary(g, QF_OP_SIGMOID, "sig2", b), b);
    /* squeeze-excite: GAP -> conv + SiLU -> conv + Sigmoid -> Mul (broadcast) */
    qf_value *e = conv(g, "fc1", unary(g, QF_OP_GLOBAL_AVG_POOL, "gap", b1), 3, 1);
    qf_value *e1 = binary(g, QF_OP_MUL, "mul3", e, unary(g, QF_OP_SIGMOID, "sig3", e));
    qf_value *sc = unary(g, QF_OP_SIGMOID, "sig4", conv(g, "fc2", e1, 12, 1));
    qf_value *c = conv(g, "c3", binary(g, QF_OP_MUL, "se", b1, sc), 7, 3);
    qf_value *s5 = unary(g, QF_OP_SIGMOID, "sig5", c); /* also a graph output */
    qf_value *c1 = binary(g, QF_OP_MUL, "mul5", c, s5);
    qf_value *f = conv(g, "c4", c1, 7, 3);
    qf_value *f1 = binary(g, QF_OP_MUL, "mul6", f, unary(g, QF_OP_SIGMOID, "sig6", f));
    qf_value *y = binary(g, QF_OP_ADD, "res", f1, f); /* f has a third reader */
    CHECK_OK(qf_graph_add_output(g, y));
    CHECK_OK(qf_graph_add_output(g, s5));
    qf_plan *p = compare_engines(g, "silu");
    if (p) {
        static const char *const fused_in[][3] = {
            {"c1", "sig1", "mul1"}, {"c2", "sig2", "mul2"}, {"fc1", "sig3", "mul3"}};
        for (int k = 0; k < 3; k++) {
            qf_plan_step_info ci, si, mi;
            int at = step_of(p, fused_in[k][0], &ci);
            CHECKF(at >= 0 && ci.nfused == 2 && step_of(p, fused_in[k][1], &si) == at &&
                       step_of(p, fused_in[k][2], &mi) == at,
                   "silu: %s + %s + %s not one step", fused_in[k][0], fused_in[k][1],
                   fused_in[k][2]);
        }
        qf_plan_step_info c3, c4;
        CHECK(step_of(p, "c3", &c3) >= 0 && c3.nfused == 0 && step_of(p, "sig5", NULL) != step_of(p, "c3", NULL));
        CHECK(step_of(p, "c4", &c4) >= 0 && c4.nfused == 0 && step_of(p, "mul6", NULL) != step_of(p, "c4", NULL));
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_graph_free(g);
}

/* Elementwise arithmetic writes over an operand it reads for the last time:
 * a = -x; b = a + a (over a); c = b * x (b is read again: a new buffer);
 * e = c - b (over c or b): two buffers where there would be four. */
static void test_inplace(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 3, 16, 16};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = unary(g, QF_OP_NEG, "neg", x);
    qf_value *b = binary(g, QF_OP_ADD, "add", a, a); /* over a */
    qf_value *c = binary(g, QF_OP_MUL, "mul", b, x); /* b is read again: a new buffer */
    qf_value *e = binary(g, QF_OP_SUB, "sub", c, b); /* over c (or b) */
    CHECK_OK(qf_graph_add_output(g, e));
    qf_tensor xt = input_for(g);
    qf_plan *p = plan_run(g, QF_ENGINE_REF, &xt);
    if (p) {
        const size_t one = 2 * 3 * 16 * 16 * sizeof(float);
        CHECKF(qf_plan_arena_bytes(p) == 2 * one, "arena %zu bytes, want %zu",
               qf_plan_arena_bytes(p), 2 * one);
        const float *xv = xt.data, *y = qf_plan_output(p, 0)->data;
        int bad = 0;
        for (int64_t i = 0; i < qf_tensor_numel(&xt); i++) {
            float av = -xv[i], bv = av + av, want = bv * xv[i] - bv;
            bad += y[i] != want;
        }
        CHECKF(bad == 0, "%d elements differ from the arithmetic", bad);
    }
    qf_plan_free(p);
    qf_tensor_free(&xt);
    qf_graph_free(g);
}

/* --- the integer executor's int8 graphs -------------------------------------- */

static qf_value *scalar_const(qf_graph *g, const char *name, qf_dtype dt, double v)
{
    qf_tensor t;
    if (qf_tensor_init(&t, dt, 0, NULL) != QF_OK) return NULL;
    if (dt == QF_DTYPE_F32) *(float *)t.data = (float)v;
    else *(int8_t *)t.data = (int8_t)v;
    return qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
}

/* An int8 QLinearConv k x k (pad k/2) of the int8 activation x (scale sx, zero
 * point zx) to cout channels at scale sy / zero point zy, per-channel weight
 * scales, an int32 bias, ONNX's requantization, clamp [lo, 127] (a fused Relu
 * when lo is zy). */
static qf_value *qconv(qf_graph *g, const char *name, qf_value *x, double sx, int zx, int64_t cout, int64_t k,
                       double sy, int zy, int lo)
{
    char nm[8][64];
    static const char *suffix[] = {"sx", "zx", "w", "sw", "zw", "sy", "zy", "b"};
    for (int i = 0; i < 8; i++) snprintf(nm[i], sizeof nm[i], "%s.%s", name, suffix[i]);
    const int64_t cin = x->type.dims[1];
    int64_t wd[4] = {cout, cin, k, k}, cd[1] = {cout};
    qf_tensor w, sw, zw, b;
    CHECK_OK(qf_tensor_init(&w, QF_DTYPE_I8, 4, wd));
    CHECK_OK(qf_tensor_init(&sw, QF_DTYPE_F32, 1, cd));
    CHECK_OK(qf_tensor_init(&zw, QF_DTYPE_I8, 1, cd));
    CHECK_OK(qf_tensor_init(&b, QF_DTYPE_I32, 1, cd));
    for (int64_t i = 0; i < qf_tensor_numel(&w); i++) ((int8_t *)w.data)[i] = (int8_t)(frand() * 127.0f);
    for (int64_t c = 0; c < cout; c++) {
        ((float *)sw.data)[c] = 0.002f + 0.001f * (float)(c % 5);
        ((int8_t *)zw.data)[c] = 0;
        ((int32_t *)b.data)[c] = (int32_t)(frand() * 2000.0f);
    }
    qf_value *in[9] = {x,
                       scalar_const(g, nm[0], QF_DTYPE_F32, sx),
                       scalar_const(g, nm[1], QF_DTYPE_I8, zx),
                       qf_graph_add_constant(g, nm[2], QF_VALUE_PARAMETER, &w),
                       qf_graph_add_constant(g, nm[3], QF_VALUE_CONSTANT, &sw),
                       qf_graph_add_constant(g, nm[4], QF_VALUE_CONSTANT, &zw),
                       scalar_const(g, nm[5], QF_DTYPE_F32, sy),
                       scalar_const(g, nm[6], QF_DTYPE_I8, zy),
                       qf_graph_add_constant(g, nm[7], QF_VALUE_PARAMETER, &b)};
    qf_node *n = qf_graph_add_node(g, QF_OP_QLINEAR_CONV, name, 9, in, 1);
    int64_t pads[4] = {k / 2, k / 2, k / 2, k / 2}, clamp[2] = {lo, 127};
    CHECK_OK(qf_node_set_attr_ints(g, n, "pads", pads, 4));
    CHECK_OK(qf_node_set_attr_ints(g, n, "qfold_clamp", clamp, 2));
    return inferred(g, n);
}

static qf_value *qdq(qf_graph *g, qf_op op, const char *name, qf_value *x, double s, int z)
{
    char a[64], b[64];
    snprintf(a, sizeof a, "%s.s", name);
    snprintf(b, sizeof b, "%s.z", name);
    qf_value *in[3] = {x, scalar_const(g, a, QF_DTYPE_F32, s), scalar_const(g, b, QF_DTYPE_I8, z)};
    return inferred(g, qf_graph_add_node(g, op, name, 3, in, 1));
}

/* The integer executor's lowered residual block, as qf_quant_lower_int8
 * writes it: Q -> QLinearConv(+Relu) -> QLinearConv -> qadd (TFLite's integer
 * Add) -> int8 MaxPool -> DQ, and a second branch QLinearConv 1x1 -> DQ. The
 * int8 activations stay channels-last from the quantized input on: the only
 * reorders are the float input's and the two outputs'. By default every
 * output equals the reference's; with QFOLD_INT8=fast the qadd is fused
 * into the conv before it (oneDNN computes C + R in float without rounding C
 * to int8 first: within one step of the output scale of TFLite's Add); with
 * ONNX's requantization oneDNN's int8 convs equal the reference's, so the
 * 1x1 branch matches exactly. */
static void test_int8_chain(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 16, 9, 7};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *xq = qdq(g, QF_OP_QUANTIZE, "q", x, 0.01, 3);
    qf_value *a = qconv(g, "c1", xq, 0.01, 3, 16, 3, 0.05, -20, -20);
    qf_value *b = qconv(g, "c2", a, 0.05, -20, 16, 3, 0.4, 5, -128);
    qf_value *in[8] = {b,
                       scalar_const(g, "add.sa", QF_DTYPE_F32, 0.4),
                       scalar_const(g, "add.za", QF_DTYPE_I8, 5),
                       a,
                       scalar_const(g, "add.sb", QF_DTYPE_F32, 0.05),
                       scalar_const(g, "add.zb", QF_DTYPE_I8, -20),
                       scalar_const(g, "add.sy", QF_DTYPE_F32, 0.3),
                       scalar_const(g, "add.zy", QF_DTYPE_I8, -7)};
    qf_node *an = qf_graph_add_node(g, QF_OP_QADD, "add", 8, in, 1);
    int64_t clamp[2] = {-7, 127};
    CHECK_OK(qf_node_set_attr_ints(g, an, "qfold_clamp", clamp, 2));
    qf_value *mp = pool(g, QF_OP_MAX_POOL, "mp", inferred(g, an));
    qf_value *y = qdq(g, QF_OP_DEQUANTIZE, "dq", mp, 0.3, -7);
    qf_value *c3 = qconv(g, "c3", a, 0.05, -20, 8, 1, 0.2, 0, -128);
    qf_value *z = qdq(g, QF_OP_DEQUANTIZE, "dq3", c3, 0.2, 0);
    CHECK_OK(qf_graph_add_output(g, y));
    CHECK_OK(qf_graph_add_output(g, z));

    qf_tensor xt = input_for(g);
    qf_plan *ref = plan_run(g, QF_ENGINE_REF, &xt);
    qf_plan *p = have_dnnl ? plan_run(g, QF_ENGINE_DNNL, &xt) : NULL;
    if (p && ref) {
        /* By default the int8 convs on oneDNN requantize as the reference
         * (qfold's requantization of oneDNN's int32 sums): every output
         * equal, the qadd a step of its own. */
        double r0 = rel_diff(qf_plan_output(p, 0), qf_plan_output(ref, 0));
        double r1 = rel_diff(qf_plan_output(p, 1), qf_plan_output(ref, 1));
        CHECKF(r0 == 0.0 && r1 == 0.0, "int8 chain, exact: outputs differ from the reference (%.3g, %.3g relative)",
               r0, r1);
        static const char *const on_dnnl[] = {"c1", "c2", "mp", "c3"};
        for (size_t i = 0; i < sizeof on_dnnl / sizeof on_dnnl[0]; i++) {
            qf_plan_step_info info;
            CHECKF(step_of(p, on_dnnl[i], &info) >= 0 && info.backend && (info.in_nhwc & 1u) && info.out_nhwc == 1,
                   "int8 chain, exact: %s not on dnnl channels-last", on_dnnl[i]);
        }
        qf_plan_step_info ai;
        CHECK(step_of(p, "add", &ai) >= 0 && !strcmp(ai.node->name, "add") && ai.nfused == 0);
        if (qf_check_failed_now) qf_plan_print(p, stderr);
        qf_plan_free(p);
        /* QFOLD_INT8=fast: oneDNN requantizes in float and fuses the qadd. */
        setenv("QFOLD_INT8", "fast", 1);
        p = plan_run(g, QF_ENGINE_DNNL, &xt);
        unsetenv("QFOLD_INT8");
    }
    if (p && ref) {
        /* The fused add: every element within one step (0.3) of the
         * reference, most equal (C's skipped rounding is up to 0.67 of a
         * step here, s_c / s_y = 4 / 3); the 1x1 branch: equal. */
        const qf_tensor *yd = qf_plan_output(p, 0), *yr = qf_plan_output(ref, 0);
        const float *u = yd->data, *v = yr->data;
        int64_t n = qf_tensor_numel(yr), equal = 0, within = 0;
        for (int64_t i = 0; i < n; i++) {
            double diff = fabs((double)u[i] - v[i]) / 0.3;
            equal += diff < 0.5;
            within += diff < 1.5;
        }
        CHECKF(within == n && equal >= n * 6 / 10, "int8 chain: add: %lld of %lld within 1 LSB, %lld equal",
               (long long)within, (long long)n, (long long)equal);
        double r = rel_diff(qf_plan_output(p, 1), qf_plan_output(ref, 1));
        CHECKF(r == 0.0, "int8 chain: the 1x1 branch differs (%.3g relative)", r);
        plan_stats s = stats(p);
        CHECKF(s.reorders == 3 && reordered(p, "x") && reordered(p, y->name) && reordered(p, z->name),
               "int8 chain: %d reorders, want 3 (x, y, z)", s.reorders);
        static const char *const on_dnnl[] = {"c1", "c2", "mp", "c3"};
        for (size_t i = 0; i < sizeof on_dnnl / sizeof on_dnnl[0]; i++) {
            qf_plan_step_info info;
            CHECKF(step_of(p, on_dnnl[i], &info) >= 0 && info.backend && (info.in_nhwc & 1u) && info.out_nhwc == 1,
                   "int8 chain: %s not on dnnl channels-last", on_dnnl[i]);
        }
        qf_plan_step_info ai;
        CHECK(step_of(p, "add", &ai) >= 0 && !strcmp(ai.node->name, "c2") && ai.nfused == 1);
        if (qf_check_failed_now) qf_plan_print(p, stderr);
    }
    qf_plan_free(p);
    qf_plan_free(ref);
    qf_tensor_free(&xt);
    qf_graph_free(g);
}

/* The reorder kernel alone (qf_exec_reorder), both directions, against the
 * definition of the two layouts: float and uint8, 1-6 channels (a network's
 * input: 3), spatial sizes that are not a multiple of its tiles, batches
 * large enough to run on several threads; on qfold's pool (engine ref) and
 * on oneDNN's OpenMP threads (engine dnnl: qf_parallel_for's runner). */
static void test_reorder_kernel(void)
{
    static const int64_t shapes[][4] = {{1, 3, 5, 7},     {3, 3, 67, 65},   {2, 2, 64, 64},
                                        {2, 4, 33, 131},  {1, 1, 9, 9},     {2, 5, 67, 65},
                                        {1, 6, 3, 40},    {12, 3, 96, 100}, {5, 4, 70, 61},
                                        {4, 2, 129, 130}, {2, 64, 17, 19}};
    for (int e = 0; e < (have_dnnl ? 2 : 1); e++) {
        CHECK_OK(qf_set_engine(e ? QF_ENGINE_DNNL : QF_ENGINE_REF));
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int bytes = 1; bytes <= 4; bytes += 3)
                for (int to_nhwc = 0; to_nhwc <= 1; to_nhwc++) {
                    const int64_t *d = shapes[si];
                    const int64_t c = d[1], sp = d[2] * d[3];
                    const qf_dtype dt = bytes == 1 ? QF_DTYPE_U8 : QF_DTYPE_F32;
                    qf_tensor x, y;
                    CHECK_OK(qf_tensor_init(&x, dt, 4, d));
                    CHECK_OK(qf_tensor_init(&y, dt, 4, d));
                    const int64_t n = qf_tensor_numel(&x);
                    for (int64_t i = 0; i < n; i++) {
                        if (bytes == 1)
                            ((uint8_t *)x.data)[i] = (uint8_t)(i * 7 + 3);
                        else
                            ((float *)x.data)[i] = (float)i;
                    }
                    const qf_tensor *in[1] = {&x};
                    qf_tensor *out[1] = {&y};
                    CHECK_OK(qf_exec_reorder(&(qf_kernel_io){.nin = 1,
                                                             .nout = 1,
                                                             .in = in,
                                                             .out = out,
                                                             .in_nhwc = (uint32_t)!to_nhwc,
                                                             .out_nhwc = (uint32_t)to_nhwc}));
                    int64_t bad = 0;
                    for (int64_t b = 0; b < d[0]; b++)
                        for (int64_t k = 0; k < c; k++)
                            for (int64_t q = 0; q < sp; q++) {
                                int64_t nchw = (b * c + k) * sp + q, nhwc = (b * sp + q) * c + k;
                                int64_t src = to_nhwc ? nchw : nhwc, dst = to_nhwc ? nhwc : nchw;
                                if (bytes == 1)
                                    bad += ((uint8_t *)y.data)[dst] != ((uint8_t *)x.data)[src];
                                else
                                    bad += ((float *)y.data)[dst] != ((float *)x.data)[src];
                            }
                    CHECKF(bad == 0,
                           "reorder %lldx%lldx%lldx%lld %s %s, engine %s: %lld elements misplaced",
                           (long long)d[0], (long long)c, (long long)d[2], (long long)d[3],
                           bytes == 1 ? "u8" : "f32", to_nhwc ? "to nhwc" : "to nchw",
                           e ? "dnnl" : "ref", (long long)bad);
                    qf_tensor_free(&x);
                    qf_tensor_free(&y);
                }
    }
}

/* What a per-step hook sees. */
typedef struct seen {
    int calls;
    double sums[64];
    const char *names[64];
} seen;

static qf_status record(void *ud, const qf_node *n, const qf_tensor *const *outs, int nout)
{
    seen *s = ud;
    (void)nout;
    if (s->calls >= 64) return QF_OK;
    /* A position-weighted sum: a channels-last tensor gives another figure. */
    double sum = 0;
    const float *d = outs[0]->data;
    for (int64_t i = 0; i < qf_tensor_numel(outs[0]); i++) sum += d[i] * (double)((i % 97) + 1);
    s->names[s->calls] = n->name;
    s->sums[s->calls++] = sum;
    return QF_OK;
}

/* A hook sees every node, in NCHW, as with the reference engine: the plan
 * is built again without NHWC and fusion when a hook is set on it. */
static void test_hook_plain(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {1, 8, 6, 6};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = unary(g, QF_OP_RELU, "r1", conv(g, "c1", x, 8, 3));
    qf_value *y =
        unary(g, QF_OP_RELU, "r2", binary(g, QF_OP_ADD, "add", conv(g, "c2", a, 8, 3), a));
    CHECK_OK(qf_graph_add_output(g, y));
    qf_tensor xt = input_for(g);
    const qf_tensor *feed[] = {&xt};
    seen want = {0}, got = {0};
    for (int e = 0; e < (have_dnnl ? 2 : 1); e++) {
        CHECK_OK(qf_set_engine(e ? QF_ENGINE_DNNL : QF_ENGINE_REF));
        qf_plan *p = NULL;
        CHECK_OK(qf_plan_init(&p, g));
        if (!p) break;
        qf_plan_set_hook(p, record, e ? &got : &want);
        CHECK_OK(qf_plan_run(p, feed, 1));
        plan_stats s = stats(p);
        CHECKF(s.reorders == 0 && s.fused == 0, "hooked plan: %d reorders, %d fused", s.reorders,
               s.fused);
        qf_plan_free(p);
    }
    CHECKF(want.calls == g->nnodes, "ref: the hook saw %d nodes of %d", want.calls, g->nnodes);
    if (have_dnnl) {
        CHECKF(got.calls == want.calls, "dnnl: the hook saw %d nodes, ref %d", got.calls,
               want.calls);
        for (int i = 0; i < got.calls && i < want.calls; i++)
            CHECKF(!strcmp(got.names[i], want.names[i]) &&
                       fabs(got.sums[i] - want.sums[i]) <= 1e-5 * (fabs(want.sums[i]) + 1),
                   "step %d: %s %.9g vs ref %s %.9g", i, got.names[i], got.sums[i], want.names[i],
                   want.sums[i]);
    }
    qf_tensor_free(&xt);
    qf_graph_free(g);
}

/* --- the blocked layout (nChw16c) ------------------------------------------ */

/* The reorder kernel between NCHW and blocked (io.blocked): every element
 * where nChw16c puts it, the pad channels of the last block 0, and back. */
static void test_blocked_reorder(void)
{
    static const int64_t shapes[][4] = {{1, 3, 5, 7}, {3, 24, 9, 8}, {2, 40, 17, 19}, {1, 16, 3, 3}, {2, 1, 300, 2}};
    for (int e = 0; e < (have_dnnl ? 2 : 1); e++) {
        CHECK_OK(qf_set_engine(e ? QF_ENGINE_DNNL : QF_ENGINE_REF));
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t *d = shapes[si], B = QF_LAYOUT_BLOCK, nb = (d[1] + B - 1) / B, sp = d[2] * d[3];
            const int64_t padded = d[0] * nb * B * sp;
            qf_tensor x, y, z;
            CHECK_OK(qf_tensor_init(&x, QF_DTYPE_F32, 4, d));
            CHECK_OK(qf_tensor_init(&z, QF_DTYPE_F32, 4, d));
            qf_tensor_view(&y, QF_DTYPE_F32, 4, d, NULL);
            float *yb = malloc((size_t)padded * sizeof *yb);
            for (int64_t i = 0; i < padded; i++) yb[i] = NAN;
            y.data = yb;
            for (int64_t i = 0; i < qf_tensor_numel(&x); i++) ((float *)x.data)[i] = (float)i + 1.0f;
            const qf_tensor *in1[1] = {&x}, *in2[1] = {&y};
            qf_tensor *out1[1] = {&y}, *out2[1] = {&z};
            CHECK_OK(qf_exec_reorder(&(qf_kernel_io){.nin = 1, .nout = 1, .in = in1, .out = out1, .out_nhwc = 1,
                                                     .blocked = true}));
            CHECK_OK(qf_exec_reorder(&(qf_kernel_io){.nin = 1, .nout = 1, .in = in2, .out = out2, .in_nhwc = 1,
                                                     .blocked = true}));
            int64_t bad = 0, back = 0;
            for (int64_t b = 0; b < d[0]; b++)
                for (int64_t k = 0; k < nb * B; k++)
                    for (int64_t q = 0; q < sp; q++) {
                        float got = yb[((b * nb + k / B) * sp + q) * B + k % B];
                        bad += k < d[1] ? got != ((float *)x.data)[(b * d[1] + k) * sp + q] : got != 0.0f;
                    }
            for (int64_t i = 0; i < qf_tensor_numel(&x); i++) back += ((float *)z.data)[i] != ((float *)x.data)[i];
            CHECKF(bad == 0 && back == 0, "blocked reorder %lldx%lldx%lldx%lld, engine %s: %lld misplaced, %lld back",
                   (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], e ? "dnnl" : "ref",
                   (long long)bad, (long long)back);
            free(yb);
            qf_tensor_free(&x);
            qf_tensor_free(&z);
        }
    }
}

/* Depthwise k x k conv, pad k/2, with a SiLU (Sigmoid + Mul). */
static qf_value *dw_silu(qf_graph *g, const char *name, qf_value *x, int64_t k)
{
    char wn[64], sn[64], mn[64];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(sn, sizeof sn, "%s.sig", name);
    snprintf(mn, sizeof mn, "%s.mul", name);
    const int64_t c = x->type.dims[1];
    int64_t wd[4] = {c, 1, k, k}, pads[4] = {k / 2, k / 2, k / 2, k / 2};
    qf_value *in[2] = {x, rand_const(g, wn, 4, wd, 0.3f)};
    qf_node *n = qf_graph_add_node(g, QF_OP_CONV, name, 2, in, 1);
    CHECK_OK(qf_node_set_attr_ints(g, n, "pads", pads, 4));
    CHECK_OK(qf_node_set_attr_int(g, n, "group", c));
    qf_value *y = inferred(g, n);
    return binary(g, QF_OP_MUL, mn, y, unary(g, QF_OP_SIGMOID, sn, y));
}

static qf_value *silu(qf_graph *g, const char *name, qf_value *y)
{
    char sn[64];
    snprintf(sn, sizeof sn, "%s.sig", name);
    return binary(g, QF_OP_MUL, name, y, unary(g, QF_OP_SIGMOID, sn, y));
}

/* An EfficientNet-like graph over `ch` channels (24: padded to 32) at 28x28
 * per image: stem 3x3 3 -> stem_ch + SiLU, 1x1 stem_ch -> ch + SiLU, depthwise 3x3 +
 * SiLU, squeeze-excite (GAP, 1x1 ch -> 8 + SiLU, 1x1 8 -> ch + Sigmoid, Mul
 * by the [N, ch, 1, 1] scale), 1x1 ch -> ch + the residual Add into p; then
 * a Relu of p (unfused: p has two readers; a reference kernel, so it reads
 * NCHW) whose output r a 1x1 conv reads, its Add of p, a max pool. */
static qf_graph *blocked_graph(int64_t stem_ch, int64_t ch)
{
    qf_graph *g;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    int64_t d[4] = {2, 3, 28, 28};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *s = silu(g, "stem.silu", conv(g, "stem", x, stem_ch, 3));
    qf_value *e = silu(g, "exp.silu", conv(g, "exp", s, ch, 1));
    qf_value *w = dw_silu(g, "dw", e, 3);
    qf_value *q = silu(g, "fc1.silu", conv(g, "fc1", unary(g, QF_OP_GLOBAL_AVG_POOL, "gap", w), 8, 1));
    qf_value *sc = unary(g, QF_OP_SIGMOID, "fc2.sig", conv(g, "fc2", q, ch, 1));
    qf_value *p = binary(g, QF_OP_ADD, "res", conv(g, "proj", binary(g, QF_OP_MUL, "se", w, sc), ch, 1), e);
    qf_value *r = unary(g, QF_OP_RELU, "relu", p);
    qf_value *y = conv(g, "head", r, ch, 1);
    qf_value *m = pool(g, QF_OP_MAX_POOL, "mp", binary(g, QF_OP_ADD, "add2", y, p));
    CHECK_OK(qf_graph_add_output(g, m));
    CHECK_OK(qf_graph_add_output(g, r));
    return g;
}

/* The rule picks blocked for that graph (1x1 convs over 28x28 pixels and 16
 * / 24 channels) and the results stay the reference's; the stem reads the
 * NCHW image (no reorder of x), the reference Relu reads NCHW (one reorder
 * before it, one after it for the conv and the Add that read it blocked);
 * QFOLD_LAYOUT=nhwc gives the NHWC plan, and a graph of 64-channel 1x1 convs
 * stays NHWC. */
static void test_blocked_plan(void)
{
    if (!have_dnnl) return;
    for (int pass = 0; pass < 2; pass++) {
        qf_graph *g = blocked_graph(16, 24);
        REQUIRE(g != NULL, "graph");
        if (pass) setenv("QFOLD_LAYOUT", "nhwc", 1);
        qf_plan *p = compare_engines(g, pass ? "blocked graph, nhwc forced" : "blocked graph");
        unsetenv("QFOLD_LAYOUT");
        if (p) {
            qf_plan_step_info st, dw, se, rl, hd;
            CHECK(step_of(p, "stem", &st) >= 0 && step_of(p, "dw", &dw) >= 0 && step_of(p, "se", &se) >= 0 &&
                  step_of(p, "relu", &rl) >= 0 && step_of(p, "head", &hd) >= 0);
            CHECKF(st.blocked == !pass && dw.blocked == !pass, "blocked graph (pass %d): plan blocked %d", pass,
                   (int)st.blocked);
            CHECKF(dw.backend && dw.in_nhwc == 1 && dw.out_nhwc == 1 && dw.nfused == 2 && se.backend &&
                       se.in_nhwc == 3 && hd.backend && !rl.backend && rl.in_nhwc == (uint32_t)pass,
                   "blocked graph (pass %d): dw in %u out %u fused %d, se in %u, relu on %s", pass, dw.in_nhwc,
                   dw.out_nhwc, dw.nfused, se.in_nhwc, rl.backend ? "dnnl" : "ref");
            if (!pass) {
                plan_stats s = stats(p);
                CHECKF(st.in_nhwc == 0 && st.out_nhwc == 1 && !reordered(p, "x"),
                       "blocked graph: the stem reads %s", st.in_nhwc ? "blocked" : "nchw");
                /* p for the Relu, r for the head conv, mp's output (a
                 * graph output). */
                CHECKF(s.reorders == 3, "blocked graph: %d reorders, want 3", s.reorders);
            }
            if (qf_check_failed_now) qf_plan_print(p, stderr);
        }
        qf_plan_free(p);
        qf_graph_free(g);
    }
    /* 64 channels everywhere but the stem: the rule keeps NHWC. */
    qf_graph *g = blocked_graph(64, 64);
    REQUIRE(g != NULL, "graph");
    qf_plan *p = compare_engines(g, "64-channel graph");
    qf_plan_step_info dw;
    CHECK(!p || (step_of(p, "dw", &dw) >= 0 && !dw.blocked && dw.in_nhwc == 1));
    qf_plan_free(p);
    /* Forced blocked: the same results. */
    setenv("QFOLD_LAYOUT", "blocked", 1);
    p = compare_engines(g, "64-channel graph, blocked forced");
    unsetenv("QFOLD_LAYOUT");
    CHECK(!p || (step_of(p, "dw", &dw) >= 0 && dw.blocked && dw.in_nhwc == 1));
    qf_plan_free(p);
    qf_graph_free(g);

    /* An unfused Sigmoid over 24 channels (its input has two readers): the
     * backend declines it blocked (pad channels), so the plan, forced
     * blocked or not, goes NHWC, with the Sigmoid on the backend there. */
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {1, 3, 28, 28};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *e = conv(g, "exp", conv(g, "stem", x, 16, 3), 24, 1);
    qf_value *s = unary(g, QF_OP_SIGMOID, "sig", e);
    CHECK_OK(qf_graph_add_output(g, binary(g, QF_OP_ADD, "sum", conv(g, "c2", e, 24, 1), s)));
    for (int pass = 0; pass < 2; pass++) {
        if (pass) setenv("QFOLD_LAYOUT", "blocked", 1);
        p = compare_engines(g, "declined sigmoid");
        unsetenv("QFOLD_LAYOUT");
        qf_plan_step_info si;
        CHECKF(!p || (step_of(p, "sig", &si) >= 0 && !si.blocked && si.backend && si.in_nhwc == 1),
               "declined sigmoid (pass %d): plan blocked or sigmoid not on the backend in NHWC", pass);
        if (p && qf_check_failed_now) qf_plan_print(p, stderr);
        qf_plan_free(p);
    }
    qf_graph_free(g);
}

/* A ResNet-like block over 32 channels at 28x28: stem 3x3 3 -> 32 + Relu,
 * 3x3 32 -> 32 + Relu, 3x3 32 -> 32 + the residual Add + Relu. Its 3x3
 * stride-1 convs run as Winograd ones only on blocked activations, so the
 * rule plans it blocked (QF_BLOCKED_WINO_SHARE) and the results stay
 * within 1e-5 of the reference's; with QFOLD_WINOGRAD=0 it stays NHWC. */
static void test_winograd_plan(void)
{
    if (!have_dnnl) return;
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[4] = {2, 3, 28, 28};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
    qf_value *a = unary(g, QF_OP_RELU, "stem.relu", conv(g, "stem", x, 32, 3));
    qf_value *b = unary(g, QF_OP_RELU, "c1.relu", conv(g, "c1", a, 32, 3));
    qf_value *y = unary(g, QF_OP_RELU, "out.relu", binary(g, QF_OP_ADD, "res", conv(g, "c2", b, 32, 3), a));
    CHECK_OK(qf_graph_add_output(g, y));
    for (int pass = 0; pass < 2; pass++) {
        if (pass) setenv("QFOLD_WINOGRAD", "0", 1);
        qf_plan *p = compare_engines(g, pass ? "winograd graph, QFOLD_WINOGRAD=0" : "winograd graph");
        unsetenv("QFOLD_WINOGRAD");
        qf_plan_step_info c1, c2;
        CHECKF(!p || (step_of(p, "c1", &c1) >= 0 && step_of(p, "c2", &c2) >= 0 && c1.backend && c2.backend &&
                      c1.blocked == !pass && c2.blocked == !pass && c2.nfused == 2),
               "winograd graph (pass %d): c1 / c2 not on the backend, blocked %d, or c2's Add not fused", pass,
               p ? (int)c1.blocked : -1);
        if (p && qf_check_failed_now) qf_plan_print(p, stderr);
        qf_plan_free(p);
    }
    qf_graph_free(g);
}

int main(void)
{
    unsetenv("QFOLD_WINOGRAD"); /* the default is checked, and test_winograd_plan sets it */
    have_dnnl = qf_set_engine(QF_ENGINE_DNNL) == QF_OK && qf_backend_kernels_get(QF_OP_CONV);
    if (!have_dnnl)
        fprintf(stderr,
                "test_plan_layout: no oneDNN backend: layouts not checked, ref plans only\n");
    RUN(test_reorder_kernel);
    RUN(test_residual);
    RUN(test_residual_over);
    RUN(test_flatten);
    RUN(test_concat);
    RUN(test_middle_output);
    RUN(test_pools);
    RUN(test_broadcast);
    RUN(test_silu);
#if QF_HAVE_DNNL
    /* Again with every fused SiLU run after its conv's primitive, in place
     * (the default does that only on outputs of millions of elements). */
    if (have_dnnl) {
        qf_dk_set_silu_split(0);
        RUN(test_silu);
        qf_dk_set_silu_split(-1);
    }
#endif
    RUN(test_int8_chain);
    RUN(test_inplace);
    RUN(test_hook_plain);
    RUN(test_blocked_reorder);
    RUN(test_blocked_plan);
    RUN(test_winograd_plan);
    return qf_check_report();
}
