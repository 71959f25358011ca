/* The pass manager: the registry of passes and pipelines, running a list of
 * passes once or to a fixpoint, the verifier after every pass, dead-code
 * elimination at the end, timing, and the report (text and JSON).
 *
 * The report owns every string it holds (node names, reasons, details) in
 * one arena, so it stays valid after the graph is changed or freed. The
 * passes record their events through pass_ctx.c (pass_ctx.h). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/arena.h"
#include "core/strbuf.h"
#include "pass_ctx.h"
#include "qfold/pass.h"

/* --- registry --------------------------------------------------------------- */

extern const qf_pass qf_pass_canonicalize;
extern const qf_pass qf_pass_fuse_batch_norm;
extern const qf_pass qf_pass_fuse_batch_norm_forward;
extern const qf_pass qf_pass_decompose_batch_norm;
extern const qf_pass qf_pass_dce;
extern const qf_pass qf_pass_fold_constants;
extern const qf_pass qf_pass_qat_bn_add;
extern const qf_pass qf_pass_qat_bn_add_exact;
extern const qf_pass qf_pass_qat_bn_remove;
extern const qf_pass qf_pass_fuse_hard_swish;
extern const qf_pass qf_pass_split_group_conv;
extern const qf_pass qf_pass_conv1d_to_2d;
extern const qf_pass qf_pass_div_to_mul;
extern const qf_pass qf_pass_fuse_linear_add;
extern const qf_pass qf_pass_move_act_before_concat;
extern const qf_pass qf_pass_split_group_conv_qdq;
extern const qf_pass qf_pass_fold_dq_q;

static const qf_pass *const qf_builtin_passes[] = {
    &qf_pass_fold_constants,
    &qf_pass_canonicalize,
    &qf_pass_fuse_batch_norm,
    &qf_pass_fuse_batch_norm_forward,
    &qf_pass_decompose_batch_norm,
    &qf_pass_dce,
    &qf_pass_qat_bn_add,
    &qf_pass_qat_bn_add_exact,
    &qf_pass_qat_bn_remove,
    &qf_pass_fuse_hard_swish,
    &qf_pass_split_group_conv,
    &qf_pass_conv1d_to_2d,
    &qf_pass_div_to_mul,
    &qf_pass_fuse_linear_add,
    &qf_pass_move_act_before_concat,
    &qf_pass_split_group_conv_qdq,
    &qf_pass_fold_dq_q,
};

/* Pipelines mirror the Neutron backend's default pass lists. qat_prepare
 * (with the quantizer's quant_qat_insert) and qat_finalize (ending in its
 * qat_convert) are the quant layer's (src/quant/quantize.c, registered by
 * qf_quant_register_passes). */
static const char *const qf_ptq_passes[] = {"canonicalize", "fuse_batch_norm",
                                            "fuse_batch_norm_forward", "dce", NULL};

static const qf_pipeline qf_pipeline_ptq = {
    .name = "ptq",
    .summary = "post-training: canonicalize, fold BatchNorm into the op before / after it, dce",
    .passes = qf_ptq_passes,
};

/* The Neutron-ready graph (ExecuTorch's NXP aten / edge passes where they
 * change what the NPU takes): `neutron` on the float graph after ptq, before
 * annotation; `neutron_qdq` on the QDQ graph (quantize's and qat's end,
 * finalize, export --target neutron). The quant layer composes them into its
 * pipelines (quantize_prepare_neutron, ...) for a profile with
 * neutron_passes. */
static const char *const qf_neutron_passes[] = {"div_to_mul", "fuse_linear_add", "move_act_before_concat", NULL};

static const qf_pipeline qf_pipeline_neutron = {
    .name = "neutron",
    .summary = "Neutron-ready float graph: Div by a constant as Mul, Linear + Add into the bias, an activation "
               "before a Concat of convs",
    .passes = qf_neutron_passes,
};

static const char *const qf_neutron_qdq_passes[] = {"split_group_conv_qdq", "fold_dq_q", "dce", NULL};

static const qf_pipeline qf_pipeline_neutron_qdq = {
    .name = "neutron_qdq",
    .summary = "Neutron-ready QDQ graph: grouped convs split per group, redundant DQ -> Q pairs folded",
    .passes = qf_neutron_qdq_passes,
};


#define QF_COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define QF_MAX_REGISTERED 64

/* The registry: the built-in passes and pipelines, then those a layer above
 * (quant, train) registers at start-up (qf_pass_register). Registration
 * happens under a lock and only appends; the lists are read without one, so
 * register before running passes on other threads. */
static struct {
    pthread_mutex_t lock;
    bool init;
    const qf_pass *passes[QF_MAX_REGISTERED];
    int npasses;
    const qf_pipeline *pipelines[QF_MAX_REGISTERED];
    int npipelines;
} qf_reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void qf_reg_init_locked(void)
{
    if (qf_reg.init) return;
    for (int i = 0; i < QF_COUNT_OF(qf_builtin_passes); i++) qf_reg.passes[qf_reg.npasses++] = qf_builtin_passes[i];
    qf_reg.pipelines[qf_reg.npipelines++] = &qf_pipeline_ptq;
    qf_reg.pipelines[qf_reg.npipelines++] = &qf_pipeline_neutron;
    qf_reg.pipelines[qf_reg.npipelines++] = &qf_pipeline_neutron_qdq;
    qf_reg.init = true;
}

static void qf_reg_init(void)
{
    pthread_mutex_lock(&qf_reg.lock);
    qf_reg_init_locked();
    pthread_mutex_unlock(&qf_reg.lock);
}

qf_status qf_pass_register(const qf_pass *const *passes, int npasses, const qf_pipeline *const *pipelines,
                           int npipelines)
{
    qf_status st = QF_OK;
    pthread_mutex_lock(&qf_reg.lock);
    qf_reg_init_locked();
    for (int i = 0; i < npasses && st == QF_OK; i++) {
        bool have = false;
        for (int k = 0; k < qf_reg.npasses; k++) {
            if (qf_reg.passes[k] == passes[i]) have = true;
            else if (strcmp(qf_reg.passes[k]->name, passes[i]->name) == 0)
                st = qf_error(QF_ERR_INVALID, "a pass named '%s' is registered already", passes[i]->name);
        }
        if (st == QF_OK && !have) {
            if (qf_reg.npasses == QF_MAX_REGISTERED) st = qf_error(QF_ERR_INVALID, "too many passes registered");
            else qf_reg.passes[qf_reg.npasses++] = passes[i];
        }
    }
    for (int i = 0; i < npipelines && st == QF_OK; i++) {
        bool have = false;
        for (int k = 0; k < qf_reg.npipelines; k++) {
            if (qf_reg.pipelines[k] == pipelines[i]) have = true;
            else if (strcmp(qf_reg.pipelines[k]->name, pipelines[i]->name) == 0)
                st = qf_error(QF_ERR_INVALID, "a pipeline named '%s' is registered already", pipelines[i]->name);
        }
        if (st == QF_OK && !have) {
            if (qf_reg.npipelines == QF_MAX_REGISTERED) st = qf_error(QF_ERR_INVALID, "too many pipelines registered");
            else qf_reg.pipelines[qf_reg.npipelines++] = pipelines[i];
        }
    }
    pthread_mutex_unlock(&qf_reg.lock);
    return st;
}

const qf_pass *qf_pass_find(const char *name)
{
    qf_reg_init();
    for (int i = 0; i < qf_reg.npasses; i++)
        if (strcmp(qf_reg.passes[i]->name, name) == 0) return qf_reg.passes[i];
    return NULL;
}

const qf_pass *const *qf_pass_list(int *count)
{
    qf_reg_init();
    *count = qf_reg.npasses;
    return qf_reg.passes;
}

const qf_pipeline *qf_pipeline_find(const char *name)
{
    qf_reg_init();
    for (int i = 0; i < qf_reg.npipelines; i++)
        if (strcmp(qf_reg.pipelines[i]->name, name) == 0) return qf_reg.pipelines[i];
    return NULL;
}

const qf_pipeline *const *qf_pipeline_list(int *count)
{
    qf_reg_init();
    *count = qf_reg.npipelines;
    return qf_reg.pipelines;
}

/* --- report and context -------------------------------------------------------- */


void qf_pass_report_free(qf_pass_report *r)
{
    if (!r) return;
    qf_report_impl *ri = (qf_report_impl *)r;
    for (int i = 0; i < r->nresults; i++) {
        qf_free(r->results[i].rewritten);
        qf_free(r->results[i].skipped);
    }
    qf_free(r->results);
    qf_arena_free(&ri->arena);
    qf_free(ri);
}

static qf_status qf_report_new(qf_report_impl **out, const char *pipeline)
{
    qf_report_impl *ri = qf_calloc(1, sizeof *ri);
    if (!ri) return QF_ERR_NOMEM;
    qf_arena_init(&ri->arena);
    ri->pub.converged = true;
    if (pipeline) {
        ri->pub.pipeline = qf_arena_strdup(&ri->arena, pipeline);
        if (!ri->pub.pipeline) {
            qf_pass_report_free(&ri->pub);
            return qf_error(QF_ERR_NOMEM, "out of memory");
        }
    }
    *out = ri;
    return QF_OK;
}

/* Run one pass and append its result to the report. */
static qf_status qf_run_one(qf_graph *g, const qf_pass *p, const qf_pass_options *opt, int iteration,
                            qf_report_impl *ri, bool *changed)
{
    qf_pass_report *r = &ri->pub;
    if (r->nresults == ri->cap_results) {
        int ncap = ri->cap_results ? ri->cap_results * 2 : 8;
        qf_pass_result *nr = qf_realloc(r->results, sizeof *nr * (size_t)ncap);
        if (!nr) return qf_error(QF_ERR_NOMEM, "out of memory");
        r->results = nr;
        ri->cap_results = ncap;
    }
    qf_pass_ctx ctx = {.rep = ri, .user = opt->user};
    *changed = false;
    double t0 = qf_clock_seconds();
    qf_status st = p->deferred ? QF_OK : qf_graph_load_all(g);
    if (st == QF_OK) st = p->run(g, &ctx, changed);
    /* Keep the node list sorted for the passes after this one: a pass may
     * insert a node where it was convenient (O(n) when already sorted). */
    bool sort_failed = false;
    if (st == QF_OK && *changed) sort_failed = (st = qf_graph_toposort(g)) != QF_OK;
    double t1 = qf_clock_seconds();

    qf_pass_result *res = &r->results[r->nresults++];
    *res = (qf_pass_result){
        .pass = p->name,
        .changed = *changed,
        .rewrites = ctx.rewritten.n,
        .rewritten = ctx.rewritten.ev,
        .nrewritten = ctx.rewritten.n,
        .skipped = ctx.skipped.ev,
        .nskipped = ctx.skipped.n,
        .seconds = t1 - t0,
        .iteration = iteration,
    };
    for (int i = 0; i < ctx.rewritten.n; i++) {
        qf_pass_action act = ctx.rewritten.ev[i].action;
        res->actions[act >= 0 && act < QF_PASS_ACTION_COUNT ? act : QF_PASS_REWROTE]++;
    }
    r->dce_removed += res->actions[QF_PASS_REMOVED];
    if (sort_failed && st != QF_ERR_NOMEM) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", qf_error_message());
        return qf_error(QF_ERR_INTERNAL, "pass '%s' left the graph invalid: %s", p->name, msg);
    }
    if (st != QF_OK) return qf_error_prefix(st, "pass '%s': ", p->name);
    if (ctx.oom) return qf_error(QF_ERR_NOMEM, "pass '%s': out of memory recording its report", p->name);
    if (opt->verify) {
        st = qf_graph_verify_shapes(g);
        if (st != QF_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", qf_error_message());
            return qf_error(QF_ERR_INTERNAL, "pass '%s' left the graph invalid: %s", p->name, msg);
        }
    }
    return QF_OK;
}

static qf_status qf_run_list(qf_graph *g, const qf_pass *const *passes, int npasses,
                             const qf_pass_options *opt, qf_report_impl *ri)
{
    qf_pass_report *r = &ri->pub;
    if (opt->verify) {
        qf_status st = qf_graph_verify_shapes(g);
        if (st != QF_OK) return qf_error_prefix(st, "graph is invalid before the first pass: ");
    }
    int max_it = opt->fixpoint ? (opt->max_iterations > 0 ? opt->max_iterations : 8) : 1;
    const char *last_changer = NULL;
    bool any = false;
    for (int it = 0; it < max_it; it++) {
        any = false;
        r->iterations = it + 1;
        for (int i = 0; i < npasses; i++) {
            bool changed = false;
            QF_TRY(qf_run_one(g, passes[i], opt, it, ri, &changed));
            if (changed) {
                any = true;
                last_changer = passes[i]->name;
            }
        }
        if (!any) break;
    }
    /* In fixpoint mode the last iteration must have changed nothing; a list
     * that keeps changing the graph has two passes undoing each other. */
    if (opt->fixpoint && any) {
        r->converged = false;
        return qf_error(QF_ERR_INTERNAL,
                        "passes did not reach a fixpoint in %d iterations (pass '%s' still changes the graph)",
                        max_it, last_changer ? last_changer : "?");
    }
    if (npasses == 0 || strcmp(passes[npasses - 1]->name, "dce") != 0) {
        bool changed = false;
        QF_TRY(qf_run_one(g, &qf_pass_dce, opt, r->iterations > 0 ? r->iterations - 1 : 0, ri, &changed));
    }
    return QF_OK;
}

static qf_status qf_run_report(qf_graph *g, const qf_pass *const *passes, int npasses,
                               const qf_pass_options *opt, const char *pipeline, qf_pass_report **out)
{
    static const qf_pass_options dflt = {0};
    if (!opt) opt = &dflt;
    *out = NULL;
    qf_report_impl *ri = NULL;
    QF_TRY(qf_report_new(&ri, pipeline));
    double t0 = qf_clock_seconds();
    qf_status st = qf_run_list(g, passes, npasses, opt, ri);
    ri->pub.seconds = qf_clock_seconds() - t0;
    *out = &ri->pub;
    return st;
}

qf_status qf_passes_run_list(qf_graph *g, const qf_pass *const *passes, int npasses,
                             const qf_pass_options *opt, qf_pass_report **out)
{
    return qf_run_report(g, passes, npasses, opt, NULL, out);
}

#define QF_MAX_LIST 64

static qf_status qf_resolve(const char *const *names, const qf_pass **list, int *n)
{
    *n = 0;
    for (int i = 0; names[i]; i++) {
        if (*n == QF_MAX_LIST) return qf_error(QF_ERR_INVALID, "more than %d passes in one list", QF_MAX_LIST);
        const qf_pass *p = qf_pass_find(names[i]);
        if (!p) return qf_error(QF_ERR_INVALID, "unknown pass '%s' (see `qfold passes`)", names[i]);
        list[(*n)++] = p;
    }
    return QF_OK;
}

qf_status qf_passes_run(qf_graph *g, const char *const *names, const qf_pass_options *opt,
                        qf_pass_report **out)
{
    const qf_pass *list[QF_MAX_LIST];
    int n;
    *out = NULL;
    QF_TRY(qf_resolve(names, list, &n));
    return qf_run_report(g, list, n, opt, NULL, out);
}

qf_status qf_pipeline_run(qf_graph *g, const char *pipeline, const qf_pass_options *opt,
                          qf_pass_report **out)
{
    *out = NULL;
    const qf_pipeline *pl = qf_pipeline_find(pipeline);
    if (!pl) return qf_error(QF_ERR_INVALID, "unknown pipeline '%s' (see `qfold passes`)", pipeline);
    const qf_pass *list[QF_MAX_LIST];
    int n;
    QF_TRY(qf_resolve(pl->passes, list, &n));
    return qf_run_report(g, list, n, opt, pl->name, out);
}

/* --- text ------------------------------------------------------------------------ */

static void qf_print_events(const qf_pass_event *ev, int n, const char *verb, FILE *f)
{
    for (int i = 0; i < n; i++)
        fprintf(f, "    %s %s '%s': %s\n", verb, ev[i].op, ev[i].node, ev[i].reason);
}

void qf_pass_report_print(const qf_pass_report *r, FILE *f)
{
    if (r->pipeline) fprintf(f, "pipeline %s", r->pipeline);
    else fprintf(f, "passes");
    fprintf(f, ": %d iteration%s, %.3f ms\n", r->iterations, r->iterations == 1 ? "" : "s",
            r->seconds * 1e3);
    for (int i = 0; i < r->nresults; i++) {
        const qf_pass_result *res = &r->results[i];
        fprintf(f, "  %-26s iter %d  %-9s %3d rewrite%s %3d skip%s  %8.3f ms\n", res->pass,
                res->iteration + 1, res->changed ? "changed" : "unchanged", res->rewrites,
                res->rewrites == 1 ? " " : "s", res->nskipped, res->nskipped == 1 ? " " : "s",
                res->seconds * 1e3);
        qf_print_events(res->rewritten, res->nrewritten, "rewrote", f);
        qf_print_events(res->skipped, res->nskipped, "skipped", f);
    }
    if (!r->converged) fprintf(f, "  did not reach a fixpoint\n");
}

int qf_pass_report_count(const qf_pass_report *r, qf_pass_action action, qf_op op)
{
    int k = 0;
    for (int i = 0; i < r->nresults; i++) {
        const qf_pass_result *res = &r->results[i];
        for (int e = 0; e < res->nrewritten; e++)
            k += res->rewritten[e].action == action && (op == QF_OP_COUNT || res->rewritten[e].node_op == op);
    }
    return k;
}

/* --- JSON ------------------------------------------------------------------------ */

static void qf_json_num(qf_strbuf *b, double x)
{
    if (isfinite(x)) qf_strbuf_printf(b, "%.9g", x);
    else qf_strbuf_puts(b, "null");
}

static void qf_json_events(qf_strbuf *b, const char *key, const qf_pass_event *ev, int n)
{
    qf_strbuf_printf(b, ", \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        qf_strbuf_puts(b, i ? ",\n        {\"node\": " : "\n        {\"node\": ");
        qf_strbuf_json_string(b, ev[i].node);
        qf_strbuf_puts(b, ", \"op\": ");
        qf_strbuf_json_string(b, ev[i].op);
        qf_strbuf_puts(b, ", \"reason\": ");
        qf_strbuf_json_string(b, ev[i].reason);
        if (ev[i].detail) {
            qf_strbuf_puts(b, ", \"detail\": ");
            qf_strbuf_puts(b, ev[i].detail);
        }
        qf_strbuf_puts(b, "}");
    }
    qf_strbuf_puts(b, "]");
}

qf_status qf_pass_report_json(const qf_pass_report *r, const char *extra, char **out, size_t *len)
{
    qf_strbuf b = {0};
    *out = NULL;
    if (len) *len = 0;
    qf_strbuf_puts(&b, "{\n  \"pipeline\": ");
    if (r->pipeline) qf_strbuf_json_string(&b, r->pipeline);
    else qf_strbuf_puts(&b, "null");
    qf_strbuf_puts(&b, ",\n  \"seconds\": ");
    qf_json_num(&b, r->seconds);
    qf_strbuf_printf(&b, ",\n  \"iterations\": %d,\n  \"converged\": %s,\n  \"dce_removed\": %d,\n",
                     r->iterations, r->converged ? "true" : "false", r->dce_removed);
    if (extra && *extra) {
        qf_strbuf_puts(&b, "  ");
        qf_strbuf_puts(&b, extra);
        qf_strbuf_puts(&b, ",\n");
    }
    qf_strbuf_puts(&b, "  \"passes\": [");
    for (int i = 0; i < r->nresults; i++) {
        const qf_pass_result *res = &r->results[i];
        qf_strbuf_puts(&b, i ? ",\n    {\"pass\": " : "\n    {\"pass\": ");
        qf_strbuf_json_string(&b, res->pass);
        qf_strbuf_printf(&b, ", \"iteration\": %d, \"changed\": %s, \"rewrites\": %d, \"skips\": %d, \"seconds\": ",
                         res->iteration, res->changed ? "true" : "false", res->rewrites, res->nskipped);
        qf_json_num(&b, res->seconds);
        qf_json_events(&b, "rewritten", res->rewritten, res->nrewritten);
        qf_json_events(&b, "skipped", res->skipped, res->nskipped);
        qf_strbuf_puts(&b, "}");
    }
    qf_strbuf_puts(&b, "\n  ]\n}\n");
    *out = qf_strbuf_take(&b, len);
    return *out ? QF_OK : qf_error(QF_ERR_NOMEM, "out of memory writing the pass report");
}
