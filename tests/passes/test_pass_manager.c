/* Unit tests of the pass manager and of canonicalize / dce, on graphs built
 * with the IR API (no importer, no executor needed).
 *
 *   test_pass_manager [WORKDIR]     (WORKDIR: where the JSON report is written)
 *
 * Every check prints what failed (tests/tools/qf_check.h); a graph that cannot
 * be built stops its test case (REQUIRE_OK). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/io.h"
#include "qfold/pass.h"
#include "tools/qf_check.h"

/* --- graph building helpers ------------------------------------------------------ */

static void set_type(qf_value *v, qf_dtype dt, int ndim, const int64_t *dims)
{
    v->type.dtype = dt;
    v->type.ndim = ndim;
    for (int i = 0; i < ndim; i++) v->type.dims[i] = dims[i];
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static qf_value *add_const(qf_graph *g, const char *name, int ndim, const int64_t *dims, const float *data)
{
    qf_tensor t;
    REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims));
    int64_t n = qf_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = data ? data[i] : (float)rnd();
    qf_value *v = qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &t);
    REQUIRE(v != NULL, "constant '%s': %s", name ? name : "", qf_error_message());
    return v;
}

static qf_value *add_scalar(qf_graph *g, const char *name, qf_dtype dt, double x)
{
    qf_tensor t;
    REQUIRE_OK(qf_tensor_init(&t, dt, 0, NULL));
    if (dt == QF_DTYPE_F32) *(float *)t.data = (float)x;
    else if (dt == QF_DTYPE_BOOL) *(uint8_t *)t.data = x != 0;
    else *(int64_t *)t.data = (int64_t)x;
    qf_value *v = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
    REQUIRE(v != NULL, "constant '%s': %s", name ? name : "", qf_error_message());
    return v;
}

static qf_node *add_node(qf_graph *g, qf_op op, const char *name, int nin, qf_value **in, int nout,
                         int ndim, const int64_t *dims)
{
    qf_node *n = qf_graph_add_node(g, op, name, nin, in, nout);
    REQUIRE(n != NULL, "node '%s': %s", name ? name : "", qf_error_message());
    for (int i = 0; i < nout; i++) /* Dropout's second output is its bool mask */
        set_type(n->outputs[i], op == QF_OP_DROPOUT && i == 1 ? QF_DTYPE_BOOL : QF_DTYPE_F32, ndim, dims);
    return n;
}

static int count_op(const qf_graph *g, qf_op op)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == op;
    return k;
}

static const qf_pass_result *find_result(const qf_pass_report *r, const char *pass)
{
    for (int i = 0; i < r->nresults; i++)
        if (strcmp(r->results[i].pass, pass) == 0) return &r->results[i];
    return NULL;
}

static bool has_event(const qf_pass_event *ev, int n, const char *node, const char *needle)
{
    for (int i = 0; i < n; i++)
        if ((!node || strcmp(ev[i].node, node) == 0) && strstr(ev[i].reason, needle)) return true;
    return false;
}

static qf_pass_report *run_canon(qf_graph *g)
{
    qf_pass_report *r = NULL;
    const char *names[] = {"canonicalize", "dce", NULL};
    qf_status st = qf_passes_run(g, names, &(qf_pass_options){.verify = true}, &r);
    CHECKF(st == QF_OK, "canonicalize failed: %s", qf_error_message());
    return r;
}

/* --- pass manager ------------------------------------------------------------------ */

/* A pass that skips every relu with a reason naming it, and rewrites nothing. */
static qf_status skipper_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    qf_graph_for_each_node(g, n) if (n->op == QF_OP_RELU) qf_pass_skip(ctx, n, "relu '%s' has \"%d\" users", n->name, n->outputs[0]->nuses);
    *changed = false;
    return QF_OK;
}
static const qf_pass skipper = {"skipper", "test: skips relus", skipper_run};

/* Removes one identity per run: a fixpoint after as many runs as identities. */
static qf_status peel_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    qf_graph_for_each_node(g, n) {
        if (n->op != QF_OP_IDENTITY) continue;
        qf_pass_rewrite(ctx, n, "{\"k\": 1}", "peeled");
        REQUIRE_OK(qf_graph_replace_uses(g, n->outputs[0], n->inputs[0]));
        qf_graph_remove_node(g, n);
        *changed = true;
        return QF_OK;
    }
    return QF_OK;
}
static const qf_pass peel = {"peel", "test: removes one identity", peel_run};

/* Claims a change every time: never converges. */
static qf_status liar_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    (void)g;
    (void)ctx;
    *changed = true;
    return QF_OK;
}
static const qf_pass liar = {"liar", "test: always changed", liar_run};

/* Breaks a use list behind the IR's back (and, the lying one, says it did
 * not change anything: only the verifier can catch it). */
static qf_status breaker_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    (void)ctx;
    qf_node *last = g->last;
    last->inputs[0] = g->inputs[0]; /* x's use list does not learn of it */
    *changed = false;
    return QF_OK;
}
static const qf_pass breaker = {"breaker", "test: corrupts the graph", breaker_run};

/* Makes a real cycle through the API: r0 reads r1's output. */
static qf_status cycler_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    (void)ctx;
    REQUIRE_OK(qf_node_set_input(g, g->first, 0, g->last->outputs[0]));
    *changed = true;
    return QF_OK;
}
static const qf_pass cycler = {"cycler", "test: makes a cycle", cycler_run};

/* x -> relu r0 -> identity i0 -> identity i1 -> relu r1 -> out; plus a dead relu. */
static qf_graph *chain_graph(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[] = {2, 4};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_value *v = add_node(g, QF_OP_RELU, "r0", 1, &x, 1, 2, d)->outputs[0];
    v = add_node(g, QF_OP_IDENTITY, "i0", 1, &v, 1, 2, d)->outputs[0];
    v = add_node(g, QF_OP_IDENTITY, "i1", 1, &v, 1, 2, d)->outputs[0];
    add_node(g, QF_OP_RELU, "dead", 1, &v, 1, 2, d);
    v = add_node(g, QF_OP_RELU, "r1", 1, &v, 1, 2, d)->outputs[0];
    REQUIRE_OK(qf_graph_add_output(g, v));
    return g;
}

static void test_registry(void)
{
    int np, nl;
    const qf_pass *const *ps = qf_pass_list(&np);
    const qf_pipeline *const *pl = qf_pipeline_list(&nl);
    CHECKF(np >= 5, "%d passes", np);
    for (int i = 0; i < np; i++) {
        CHECKF(ps[i]->name && ps[i]->summary && ps[i]->run, "pass %d incomplete", i);
        CHECKF(qf_pass_find(ps[i]->name) == ps[i], "find %s", ps[i]->name);
    }
    const char *want[] = {"canonicalize", "fuse_batch_norm", "fuse_batch_norm_forward", "decompose_batch_norm", "dce"};
    for (int i = 0; i < 5; i++) CHECKF(qf_pass_find(want[i]) != NULL, "pass %s not registered", want[i]);
    const qf_pipeline *ptq = qf_pipeline_find("ptq");
    CHECKF(ptq != NULL, "no ptq pipeline");
    for (int i = 0; i < nl; i++)
        for (int k = 0; pl[i]->passes[k]; k++)
            CHECKF(qf_pass_find(pl[i]->passes[k]) != NULL, "pipeline %s names unknown pass %s", pl[i]->name,
                  pl[i]->passes[k]);
    CHECKF(qf_pass_find("nope") == NULL && qf_pipeline_find("nope") == NULL, "found nope");

    qf_graph *g = chain_graph();
    qf_pass_report *r = NULL;
    const char *bad[] = {"canonicalize", "nope", NULL};
    qf_status st = qf_passes_run(g, bad, NULL, &r);
    CHECKF(st == QF_ERR_INVALID && strstr(qf_error_message(), "unknown pass 'nope'"), "%s", qf_error_message());
    CHECKF(r == NULL, "report for an unresolved list");
    st = qf_pipeline_run(g, "nope", NULL, &r);
    CHECKF(st == QF_ERR_INVALID && strstr(qf_error_message(), "unknown pipeline"), "%s", qf_error_message());
    qf_graph_free(g);
}

static void test_skips_and_report(void)
{
    qf_graph *g = chain_graph();
    const qf_pass *list[] = {&skipper};
    qf_pass_report *r = NULL;
    REQUIRE_OK(qf_passes_run_list(g, list, 1, &(qf_pass_options){.verify = true}, &r));
    qf_graph_free(g); /* the report must not point into the graph */
    CHECKF(r->nresults == 2, "%d results (skipper + final dce)", r->nresults);
    const qf_pass_result *s = &r->results[0];
    CHECKF(strcmp(s->pass, "skipper") == 0 && !s->changed && s->rewrites == 0, "skipper result");
    CHECKF(s->nskipped == 3, "%d skips", s->nskipped);
    CHECKF(has_event(s->skipped, s->nskipped, "r0", "relu 'r0' has \"1\" users"), "r0 reason");
    CHECKF(s->nskipped && strcmp(s->skipped[0].op, "relu") == 0, "op name");
    const qf_pass_result *d = &r->results[1];
    CHECKF(strcmp(d->pass, "dce") == 0 && d->changed && d->rewrites == 1 && r->dce_removed == 1,
          "final dce removed %d", r->dce_removed);
    CHECKF(has_event(d->rewritten, d->nrewritten, "dead", "removed"), "dce names the dead node");
    CHECKF(r->iterations == 1 && r->converged && r->pipeline == NULL, "iterations %d", r->iterations);

    char *json;
    size_t len;
    REQUIRE_OK(qf_pass_report_json(r, "\"extra\": 7", &json, &len));
    CHECKF(len == strlen(json), "json length");
    CHECKF(strstr(json, "\"pass\": \"skipper\""), "json pass");
    CHECKF(strstr(json, "relu 'r0' has \\\"1\\\" users"), "json escaping: %s", json);
    CHECKF(strstr(json, "\"extra\": 7,"), "json extra");
    CHECKF(strstr(json, "\"dce_removed\": 1"), "json dce");
    qf_free(json);
    FILE *devnull = fopen("/dev/null", "w");
    if (devnull) {
        qf_pass_report_print(r, devnull);
        fclose(devnull);
    }
    qf_pass_report_free(r);
}

static void test_fixpoint(void)
{
    /* Two identities, one peeled per iteration: iterations 1 and 2 change the
     * graph, iteration 3 does not. */
    qf_graph *g = chain_graph();
    const qf_pass *list[] = {&peel};
    qf_pass_report *r = NULL;
    REQUIRE_OK(qf_passes_run_list(g, list, 1, &(qf_pass_options){.verify = true, .fixpoint = true}, &r));
    CHECKF(r->iterations == 3 && r->converged, "iterations %d", r->iterations);
    CHECKF(count_op(g, QF_OP_IDENTITY) == 0, "identities left");
    CHECKF(r->nresults == 4 && r->results[3].iteration == 2, "results %d", r->nresults);
    CHECKF(r->results[0].nrewritten == 1 && r->results[0].rewritten[0].detail &&
              strcmp(r->results[0].rewritten[0].detail, "{\"k\": 1}") == 0, "detail kept");
    CHECKF(qf_graph_find_value(g, "r1_out") && qf_graph_find_value(g, "r1_out")->is_output, "output");
    qf_pass_report_free(r);
    qf_graph_free(g);

    /* A pass that always changes: bounded, reported, an error. */
    g = chain_graph();
    const qf_pass *list2[] = {&liar};
    qf_status st = qf_passes_run_list(g, list2, 1, &(qf_pass_options){.fixpoint = true, .max_iterations = 5}, &r);
    CHECKF(st == QF_ERR_INTERNAL && strstr(qf_error_message(), "fixpoint") && strstr(qf_error_message(), "'liar'"),
          "%s", qf_error_message());
    CHECKF(r && r->iterations == 5 && !r->converged && r->nresults == 5, "bounded at 5");
    qf_pass_report_free(r);

    /* Once (no fixpoint): one iteration whatever the pass says. */
    REQUIRE_OK(qf_passes_run_list(g, list2, 1, NULL, &r));
    CHECKF(r->iterations == 1 && r->nresults == 2, "once");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_verify_failure(void)
{
    qf_graph *g = chain_graph();
    const qf_pass *list[] = {&breaker};
    qf_pass_report *r = NULL;
    qf_status st = qf_passes_run_list(g, list, 1, &(qf_pass_options){.verify = true}, &r);
    CHECKF(st == QF_ERR_INTERNAL, "status %s", qf_status_name(st));
    CHECKF(strstr(qf_error_message(), "pass 'breaker' left the graph invalid: verifier:"), "%s", qf_error_message());
    CHECKF(r && r->nresults == 1, "report kept on failure");
    qf_pass_report_free(r);
    qf_graph_free(g);

    g = chain_graph();
    const qf_pass *list2[] = {&cycler};
    st = qf_passes_run_list(g, list2, 1, NULL, &r);
    CHECKF(st == QF_ERR_INTERNAL && strstr(qf_error_message(), "pass 'cycler' left the graph invalid: graph has a cycle"),
          "%s", qf_error_message());
    qf_pass_report_free(r);
    qf_graph_free(g);

    /* An invalid graph before any pass is not blamed on the pass. */
    g = chain_graph();
    g->last->inputs[0] = g->inputs[0];
    const qf_pass *list3[] = {&skipper};
    st = qf_passes_run_list(g, list3, 1, &(qf_pass_options){.verify = true}, &r);
    CHECKF(st != QF_OK && strstr(qf_error_message(), "before the first pass"), "%s", qf_error_message());
    CHECKF(r && r->nresults == 0, "no pass ran");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

/* --- canonicalize ------------------------------------------------------------------ */

/* y = alpha * A' B' + beta * C on A [m, k], naive, in double. */
static void gemm_ref(const float *a, const float *b, const float *c, int cn, int m, int k, int n, int trans_b,
                     double alpha, double beta, double *y)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)a[i * k + p] * (trans_b ? b[j * k + p] : b[p * n + j]);
            y[i * n + j] = alpha * s + (c ? beta * c[cn == 1 ? 0 : j] : 0.0);
        }
}

/* y = x W^T + bias, W [n, k]. */
static void linear_ref(const float *x, const qf_value *w, const qf_value *b, int m, int k, int n, double *y)
{
    const float *wd = w->type.data, *bd = b ? b->type.data : NULL;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)x[i * k + p] * wd[j * k + p];
            y[i * n + j] = s + (bd ? bd[j] : 0.0);
        }
}

static void check_gemm(int trans_b, float alpha, float beta, int cdims, bool with_c)
{
    enum { M = 3, K = 5, N = 4 };
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t xd[] = {M, K}, yd[] = {M, N}, bd[2] = {trans_b ? N : K, trans_b ? K : N};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    qf_value *b = add_const(g, "B", 2, bd, NULL);
    int64_t cd[2] = {1, N};
    qf_value *c = NULL;
    if (with_c) c = cdims == 2 ? add_const(g, "C", 2, cd, NULL) : cdims == 1 ? add_const(g, "C", 1, &cd[1], NULL)
                                                                             : add_const(g, "C", 0, NULL, NULL);
    qf_value *in[] = {x, b, c};
    qf_node *n = add_node(g, QF_OP_GEMM, "fc", with_c ? 3 : 2, in, 1, 2, yd);
    REQUIRE_OK(qf_node_set_attr_int(g, n, "transB", trans_b));
    REQUIRE_OK(qf_node_set_attr_float(g, n, "alpha", alpha));
    REQUIRE_OK(qf_node_set_attr_float(g, n, "beta", beta));
    qf_value *y = add_node(g, QF_OP_RELU, "act", 1, &n->outputs[0], 1, 2, yd)->outputs[0];
    REQUIRE_OK(qf_graph_add_output(g, y));

    float xs[M * K];
    for (int i = 0; i < M * K; i++) xs[i] = (float)rnd();
    double want[M * N], got[M * N];
    gemm_ref(xs, b->type.data, c ? c->type.data : NULL, c ? (int)qf_tensor_numel(&c->type) : 0, M, K, N, trans_b,
             alpha, beta, want);

    qf_pass_report *r = run_canon(g);
    CHECKF(count_op(g, QF_OP_GEMM) == 0 && count_op(g, QF_OP_LINEAR) == 1, "gemm transB=%d not converted", trans_b);
    qf_node *lin = NULL;
    qf_graph_for_each_node(g, m) if (m->op == QF_OP_LINEAR) lin = m;
    if (lin) {
        const qf_value *w = lin->inputs[1];
        CHECKF(w->type.ndim == 2 && w->type.dims[0] == N && w->type.dims[1] == K, "weight is [out, in]");
        CHECKF((lin->ninputs == 3) == (with_c && beta != 0), "bias presence");
        CHECKF(lin->outputs[0]->type.ndim == 2 && lin->outputs[0]->type.dims[1] == N, "output type copied");
        CHECKF(lin->outputs[0] == qf_graph_find_value(g, "fc_out"), "value name kept");
        if (trans_b && alpha == 1.0f) CHECKF(w == b, "transB=1 alpha=1 reuses B");
        linear_ref(xs, w, lin->ninputs == 3 ? lin->inputs[2] : NULL, M, K, N, got);
        double md = 0;
        for (int i = 0; i < M * N; i++) md = fmax(md, fabs(got[i] - want[i]));
        CHECKF(md < 1e-5, "gemm(transB=%d, alpha=%g, beta=%g, C rank %d): max diff %g", trans_b, alpha, beta, cdims, md);
    }
    const qf_pass_result *cr = find_result(r, "canonicalize");
    CHECKF(cr && cr->rewrites == 1 && has_event(cr->rewritten, cr->nrewritten, "fc", "gemm -> linear"), "rewrite recorded");
    CHECKF(qf_graph_find_value(g, "B") == NULL || trans_b, "old B removed by dce");
    qf_pass_report_free(r);

    /* Idempotent. */
    r = run_canon(g);
    cr = find_result(r, "canonicalize");
    CHECKF(cr && !cr->changed && cr->rewrites == 0, "second canonicalize changed the graph");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_gemm_skips(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t xd[] = {4, 3}, wd[] = {4, 5}, yd[] = {3, 5}, bad[] = {3, 5};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, xd);
    qf_value *in[] = {x, add_const(g, "W", 2, wd, NULL)};
    qf_node *a = add_node(g, QF_OP_GEMM, "ta", 2, in, 1, 2, yd);
    REQUIRE_OK(qf_node_set_attr_int(g, a, "transA", 1));
    qf_value *x2 = qf_graph_add_input(g, "x2", QF_DTYPE_F32, 2, yd);
    qf_value *in2[] = {x, x2};
    int64_t dyd[] = {4, 5}; /* [4, 3] x [3, 5] */
    add_node(g, QF_OP_GEMM, "dyn", 2, in2, 1, 2, dyd);
    int64_t x3d[] = {3, 4};
    qf_value *x3 = qf_graph_add_input(g, "x3", QF_DTYPE_F32, 2, x3d);
    qf_value *in3[] = {x3, add_const(g, "W3", 2, wd, NULL), add_const(g, "C3", 2, bad, NULL)};
    add_node(g, QF_OP_GEMM, "fullc", 3, in3, 1, 2, yd);
    qf_graph_for_each_node(g, n) REQUIRE_OK(qf_graph_add_output(g, n->outputs[0]));
    qf_pass_report *r = run_canon(g);
    const qf_pass_result *cr = find_result(r, "canonicalize");
    CHECKF(count_op(g, QF_OP_GEMM) == 3, "a gemm was converted");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "ta", "transA=1"), "transA reason");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "dyn", "not a constant"), "dynamic B reason");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "fullc", "not a per-output bias"), "C [M,N] reason");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_matmul_add(void)
{
    enum { B = 2, T = 3, K = 4, N = 5 };
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t xd[] = {B, T, K}, wd[] = {K, N}, yd[] = {B, T, N}, bd[] = {N};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 3, xd);
    qf_value *w = add_const(g, "W", 2, wd, NULL);
    qf_value *in[] = {x, w};
    qf_node *mm = add_node(g, QF_OP_MATMUL, "mm", 2, in, 1, 3, yd);
    qf_value *bias = add_const(g, "bias", 1, bd, NULL);
    qf_value *ain[] = {bias, mm->outputs[0]}; /* bias first: either order */
    qf_node *add = add_node(g, QF_OP_ADD, "add", 2, ain, 1, 3, yd);
    REQUIRE_OK(qf_graph_add_output(g, add->outputs[0]));
    /* A lone MatMul (kept) and one with two users (kept). */
    qf_value *in2[] = {x, add_const(g, "W2", 2, wd, NULL)};
    qf_node *lone = add_node(g, QF_OP_MATMUL, "lone", 2, in2, 1, 3, yd);
    qf_value *r1 = add_node(g, QF_OP_RELU, "relu_lone", 1, &lone->outputs[0], 1, 3, yd)->outputs[0];
    REQUIRE_OK(qf_graph_add_output(g, r1));
    qf_value *in3[] = {x, add_const(g, "W3", 2, wd, NULL)};
    qf_node *two = add_node(g, QF_OP_MATMUL, "two", 2, in3, 1, 3, yd);
    qf_value *a3[] = {two->outputs[0], add_const(g, "b3", 1, bd, NULL)};
    REQUIRE_OK(qf_graph_add_output(g, add_node(g, QF_OP_ADD, "add3", 2, a3, 1, 3, yd)->outputs[0]));
    REQUIRE_OK(qf_graph_add_output(g, two->outputs[0]));

    const float *wv = w->type.data, *bv = bias->type.data;
    float wcopy[K * N], bcopy[N];
    memcpy(wcopy, wv, sizeof wcopy);
    memcpy(bcopy, bv, sizeof bcopy);

    qf_pass_report *r = run_canon(g);
    const qf_pass_result *cr = find_result(r, "canonicalize");
    CHECKF(count_op(g, QF_OP_LINEAR) == 1 && count_op(g, QF_OP_MATMUL) == 2 && count_op(g, QF_OP_ADD) == 1,
          "linear %d matmul %d add %d", count_op(g, QF_OP_LINEAR), count_op(g, QF_OP_MATMUL), count_op(g, QF_OP_ADD));
    qf_value *out = qf_graph_find_value(g, "add_out");
    CHECKF(out && out->is_output && out->producer && out->producer->op == QF_OP_LINEAR, "graph output name kept");
    if (out && out->producer && out->producer->op == QF_OP_LINEAR) {
        const qf_node *lin = out->producer;
        const float *wt = lin->inputs[1]->type.data;
        bool ok = lin->inputs[1]->type.dims[0] == N && lin->inputs[1]->type.dims[1] == K;
        for (int o = 0; ok && o < N; o++)
            for (int i = 0; i < K; i++) ok &= wt[o * K + i] == wcopy[i * N + o];
        CHECKF(ok, "weight is W^T exactly");
        CHECKF(lin->inputs[0] == x && memcmp(lin->inputs[2]->type.data, bcopy, sizeof bcopy) == 0, "inputs");
        CHECKF(out->type.ndim == 3 && out->type.dims[2] == N, "output type");
    }
    CHECKF(cr && has_event(cr->rewritten, cr->nrewritten, "mm", "matmul + add"), "rewrite recorded");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "lone", "left as MatMul"), "lone reason");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "two", "is a graph output"), "two users reason");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_clip(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = 13;
    int64_t d[] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_value *in[] = {x, add_scalar(g, "lo", QF_DTYPE_F32, 0), add_scalar(g, "hi", QF_DTYPE_F32, 6)};
    qf_node *c = add_node(g, QF_OP_CLIP, "clip6", 3, in, 1, 2, d);
    qf_value *in2[] = {c->outputs[0], add_scalar(g, "lo2", QF_DTYPE_F32, 0), add_scalar(g, "hi2", QF_DTYPE_F32, 5)};
    qf_node *c5 = add_node(g, QF_OP_CLIP, "clip5", 3, in2, 1, 2, d);
    qf_value *lo_dyn = qf_graph_add_input(g, "lo_dyn", QF_DTYPE_F32, 0, NULL); /* a scalar fed at run time */
    qf_value *in3[] = {c5->outputs[0], lo_dyn, NULL};
    qf_node *cd = add_node(g, QF_OP_CLIP, "clipdyn", 3, in3, 1, 2, d);
    REQUIRE_OK(qf_graph_add_output(g, cd->outputs[0]));
    qf_pass_report *r = run_canon(g);
    const qf_pass_result *cr = find_result(r, "canonicalize");
    CHECKF(count_op(g, QF_OP_RELU6) == 1 && count_op(g, QF_OP_CLIP) == 2, "clip(0,6) -> relu6");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "clip5", "clip(min=0, max=5) is not relu6"), "clip5 reason");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "clipdyn", "not a constant"), "dyn reason");
    CHECKF(qf_graph_find_value(g, "hi") == NULL, "dce removed the bounds");
    qf_value *v = qf_graph_find_value(g, "clip6_out");
    CHECKF(v && v->producer && v->producer->op == QF_OP_RELU6, "value name kept");
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_identity_dropout(void)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    /* x -> Identity 'pass_in' -> graph output 'y0': kept (x is a graph input). */
    qf_node *keep = add_node(g, QF_OP_IDENTITY, "pass_in", 1, &x, 1, 2, d);
    REQUIRE_OK(qf_graph_rename_value(g, keep->outputs[0], "y0"));
    REQUIRE_OK(qf_graph_add_output(g, keep->outputs[0]));
    /* relu -> Identity -> Dropout(ratio) -> Dropout(ratio, training=false) -> graph output 'y1' */
    qf_value *v = add_node(g, QF_OP_RELU, "relu", 1, &x, 1, 2, d)->outputs[0];
    v = add_node(g, QF_OP_IDENTITY, "id", 1, &v, 1, 2, d)->outputs[0];
    qf_value *din[] = {v, add_scalar(g, "ratio", QF_DTYPE_F32, 0.5)};
    v = add_node(g, QF_OP_DROPOUT, "drop", 2, din, 1, 2, d)->outputs[0];
    qf_value *din2[] = {v, add_scalar(g, "ratio2", QF_DTYPE_F32, 0.5), add_scalar(g, "tm", QF_DTYPE_BOOL, 0)};
    qf_node *d2 = add_node(g, QF_OP_DROPOUT, "drop2", 3, din2, 2, 2, d);
    REQUIRE_OK(qf_graph_rename_value(g, d2->outputs[0], "y1"));
    REQUIRE_OK(qf_graph_add_output(g, d2->outputs[0]));
    /* Training-mode dropout and one whose mask is used: kept. */
    qf_value *din3[] = {x, add_scalar(g, "ratio3", QF_DTYPE_F32, 0.5), add_scalar(g, "tm3", QF_DTYPE_BOOL, 1)};
    qf_node *d3 = add_node(g, QF_OP_DROPOUT, "drop_train", 3, din3, 1, 2, d);
    REQUIRE_OK(qf_graph_add_output(g, d3->outputs[0]));
    qf_value *din4[] = {x};
    qf_node *d4 = add_node(g, QF_OP_DROPOUT, "drop_mask", 1, din4, 2, 2, d);
    REQUIRE_OK(qf_graph_add_output(g, add_node(g, QF_OP_RELU, "r4", 1, &d4->outputs[0], 1, 2, d)->outputs[0]));
    REQUIRE_OK(qf_graph_add_output(g, d4->outputs[1]));

    qf_pass_report *r = run_canon(g);
    const qf_pass_result *cr = find_result(r, "canonicalize");
    CHECKF(count_op(g, QF_OP_IDENTITY) == 1 && count_op(g, QF_OP_DROPOUT) == 2, "identity %d dropout %d",
          count_op(g, QF_OP_IDENTITY), count_op(g, QF_OP_DROPOUT));
    qf_value *y1 = qf_graph_find_value(g, "y1");
    CHECKF(y1 && y1->is_output && y1->producer && y1->producer->op == QF_OP_RELU, "y1 now produced by relu");
    CHECKF(g->noutputs == 5 && g->outputs[1] == y1, "output order kept");
    qf_value *y0 = qf_graph_find_value(g, "y0");
    CHECKF(y0 && y0->producer && y0->producer->op == QF_OP_IDENTITY && g->inputs[0] == x && strcmp(x->name, "x") == 0,
          "graph input kept");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "pass_in", "graph input"), "pass_in reason");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "drop_train", "training mode"), "train reason");
    CHECKF(cr && has_event(cr->skipped, cr->nskipped, "drop_mask", "mask"), "mask reason");
    CHECKF(cr && cr->rewrites == 3, "rewrites %d", cr ? cr->rewrites : -1);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

/* Canonicalize rewrites Gemm with every mix of transB, alpha, beta, C. */
static void test_gemm_forms(void)
{
    for (int tb = 0; tb < 2; tb++) {
        check_gemm(tb, 1.0f, 1.0f, 1, true);
        check_gemm(tb, 0.5f, 2.0f, 2, true);
        check_gemm(tb, 1.5f, 0.0f, 1, true);
        check_gemm(tb, 1.0f, 1.0f, 0, true);
        check_gemm(tb, 2.0f, 1.0f, 0, false);
    }
}

/* Passes of a layer above register at run time: found by name, listed, run
 * with their session pointer; a second pass with a taken name is refused. */
static bool user_seen;
static qf_status user_pass_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    (void)g;
    *changed = false;
    user_seen = qf_pass_user(ctx) == (void *)&user_seen;
    return QF_OK;
}
static const qf_pass user_pass = {.name = "test_user_pass", .summary = "test", .run = user_pass_run};
static const qf_pass clash_pass = {.name = "dce", .summary = "clash", .run = user_pass_run};
static const char *const user_list[] = {"test_user_pass", NULL};
static const qf_pipeline user_pipeline = {.name = "test_user", .summary = "test", .passes = user_list};

static void test_register(void)
{
    const qf_pass *ps[] = {&user_pass};
    const qf_pipeline *pl[] = {&user_pipeline};
    CHECK_OK(qf_pass_register(ps, 1, pl, 1));
    CHECK_OK(qf_pass_register(ps, 1, pl, 1)); /* idempotent */
    CHECK(qf_pass_find("test_user_pass") == &user_pass && qf_pipeline_find("test_user") == &user_pipeline);
    int n = 0, seen = 0;
    const qf_pass *const *all = qf_pass_list(&n);
    for (int i = 0; i < n; i++) seen += all[i] == &user_pass;
    CHECK(seen == 1 && qf_pass_find("dce") != NULL);
    const qf_pass *clash[] = {&clash_pass};
    CHECK_ERR(qf_pass_register(clash, 1, NULL, 0), QF_ERR_INVALID, "'dce' is registered already");
    qf_graph *g = chain_graph();
    qf_pass_report *r = NULL;
    CHECK_OK(qf_pipeline_run(g, "test_user", &(qf_pass_options){.user = &user_seen}, &r));
    CHECK(user_seen);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

int main(void)
{
    RUN(test_registry);
    RUN(test_register);
    RUN(test_skips_and_report);
    RUN(test_fixpoint);
    RUN(test_verify_failure);
    RUN(test_gemm_forms);
    RUN(test_gemm_skips);
    RUN(test_matmul_add);
    RUN(test_clip);
    RUN(test_identity_dropout);
    return qf_check_report();
}
