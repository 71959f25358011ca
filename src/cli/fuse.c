/* qfold fuse IN.onnx -o OUT.onnx [--report R.json] [--verify] [--verify-data X.npy]
 *            [--tolerance T] [--passes p1,p2 | --pipeline NAME] [--fixpoint] [-v]
 *
 * Load, run a pipeline (default ptq) with the verifier after every pass,
 * optionally check that the written model computes what the original did,
 * and write the model (temporary file + rename; never over the input).
 *
 * --verify writes the model to a temporary file next to OUT, loads it back and
 * runs it and the original on the same inputs, so what is checked is exactly
 * the file that will be renamed into place (export included). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/strbuf.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"

#define QF_FUSE_MAX_PASSES 64
#define QF_FUSE_DEFAULT_TOL 1e-4

typedef struct qf_fuse_args {
    const char *in, *out, *report, *verify_data, *passes, *pipeline;
    bool verify, fixpoint, verbose;
    double tol;
} qf_fuse_args;

typedef struct qf_fuse_diff {
    const char *name; /* graph output name (owned by the original graph) */
    double max_abs, max_rel;
    bool ok;
} qf_fuse_diff;

static double qf_fuse_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int qf_fuse_count_bn(const qf_graph *g)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == QF_OP_BATCH_NORM;
    return k;
}

/* --- verification inputs ------------------------------------------------------ */

/* splitmix64: a fixed-seed generator, so --verify is reproducible. */
static uint64_t qf_fuse_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One tensor per graph input: the given .npy, or uniform [-1, 1) floats
 * (fixed seed per input) with unknown dims taken as 1; integer and bool
 * inputs are zeros. */
static qf_status qf_fuse_make_inputs(const qf_graph *g, const char *npy, qf_tensor *ts)
{
    if (npy) {
        if (g->ninputs != 1)
            return qf_error(QF_ERR_INVALID, "--verify-data takes one array, the model has %d inputs", g->ninputs);
        QF_TRY(qf_npy_load(npy, &ts[0]));
        const qf_value *v = g->inputs[0];
        if (ts[0].dtype != v->type.dtype || ts[0].ndim != v->type.ndim)
            return qf_error(QF_ERR_INVALID, "--verify-data '%s': input '%s' wants %s of rank %d, got %s of rank %d",
                            npy, v->name, qf_dtype_name(v->type.dtype), v->type.ndim, qf_dtype_name(ts[0].dtype),
                            ts[0].ndim);
        return QF_OK;
    }
    for (int i = 0; i < g->ninputs; i++) {
        const qf_value *v = g->inputs[i];
        int64_t dims[QF_MAX_DIMS];
        for (int d = 0; d < v->type.ndim; d++) dims[d] = v->type.dims[d] < 0 ? 1 : v->type.dims[d];
        QF_TRY(qf_tensor_init(&ts[i], v->type.dtype, v->type.ndim, dims));
        uint64_t seed = 0x5eedf00dull + (uint64_t)i;
        int64_t n = qf_tensor_numel(&ts[i]);
        for (int64_t k = 0; k < n; k++) {
            double x = (double)(qf_fuse_rng(&seed) >> 11) / (double)(1ull << 52) - 1.0;
            if (v->type.dtype == QF_DTYPE_F32) ((float *)ts[i].data)[k] = (float)x;
            else if (v->type.dtype == QF_DTYPE_F64) ((double *)ts[i].data)[k] = x;
        }
    }
    return QF_OK;
}

/* Bind the inputs into g (as `qfold run` does: int64 inputs become constants,
 * the others fix the input shapes), plan and run. */
static qf_status qf_fuse_run_graph(qf_graph *g, const qf_tensor *ts, int n, qf_plan **plan)
{
    const qf_tensor *feed[64];
    if (n > 64) return qf_error(QF_ERR_UNSUPPORTED, "--verify handles at most 64 inputs");
    if (n != g->ninputs) return qf_error(QF_ERR_INTERNAL, "fused model has %d inputs, original %d", g->ninputs, n);
    int nfeed = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i].dtype == QF_DTYPE_I64) continue;
        QF_TRY(qf_graph_set_input_shape(g, i, ts[i].ndim, ts[i].dims));
        feed[nfeed++] = &ts[i];
    }
    for (int i = n - 1; i >= 0; i--) {
        if (ts[i].dtype != QF_DTYPE_I64) continue;
        qf_tensor c;
        QF_TRY(qf_tensor_copy(&c, &ts[i]));
        qf_status st = qf_graph_bind_input(g, i, &c);
        qf_tensor_free(&c);
        QF_TRY(st);
    }
    QF_TRY(qf_plan_init(plan, g));
    return qf_plan_run(*plan, feed, nfeed);
}

/* max|a - b| and max|a - b| / max(1e-6, max|a|), a = original. A NaN on one
 * side only makes the difference infinite. */
static void qf_fuse_compare(const qf_tensor *a, const qf_tensor *b, double tol, qf_fuse_diff *d)
{
    double max_abs = 0, max_ref = 0;
    int64_t n = qf_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = qf_tensor_get_f64(a, i), y = qf_tensor_get_f64(b, i);
        if (isnan(x) || isnan(y)) {
            if (!(isnan(x) && isnan(y))) max_abs = INFINITY;
            continue;
        }
        max_abs = fmax(max_abs, fabs(x - y));
        max_ref = fmax(max_ref, fabs(x));
    }
    d->max_abs = max_abs;
    d->max_rel = max_abs / fmax(1e-6, max_ref);
    d->ok = d->max_rel <= tol;
}

/* Run the original and the written file on the same inputs, compare every
 * output. *ok is false when an output differs past the tolerance. */
static qf_status qf_fuse_verify(const qf_fuse_args *fa, const char *written, qf_fuse_diff **diffs, int *ndiffs,
                                bool *ok)
{
    qf_graph *g0 = NULL, *g1 = NULL;
    qf_plan *p0 = NULL, *p1 = NULL;
    qf_tensor *ts = NULL;
    int nin = 0;
    *ok = false;
    qf_status st = qf_onnx_load(fa->in, &g0);
    if (st == QF_OK) st = qf_onnx_load(written, &g1);
    if (st == QF_OK) {
        nin = g0->ninputs;
        ts = qf_calloc((size_t)(nin ? nin : 1), sizeof *ts);
        if (!ts) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) st = qf_fuse_make_inputs(g0, fa->verify_data, ts);
    if (st == QF_OK && g1->noutputs != g0->noutputs)
        st = qf_error(QF_ERR_INTERNAL, "fused model has %d outputs, original %d", g1->noutputs, g0->noutputs);
    if (st == QF_OK) {
        st = qf_fuse_run_graph(g0, ts, nin, &p0);
        if (st != QF_OK) qf_error_prefix(st, "running the original model: ");
    }
    if (st == QF_OK) {
        st = qf_fuse_run_graph(g1, ts, nin, &p1);
        if (st != QF_OK) qf_error_prefix(st, "running the fused model: ");
    }
    if (st == QF_OK) {
        int n = qf_plan_num_outputs(p0);
        *diffs = qf_calloc((size_t)(n ? n : 1), sizeof **diffs);
        if (!*diffs) st = QF_ERR_NOMEM;
        *ok = true;
        for (int i = 0; st == QF_OK && i < n; i++) {
            const qf_tensor *a = qf_plan_output(p0, i), *b = qf_plan_output(p1, i);
            qf_fuse_diff *d = &(*diffs)[i];
            d->name = qf_strdup(g0->outputs[i]->name);
            if (!d->name) {
                st = QF_ERR_NOMEM;
                break;
            }
            *ndiffs = i + 1;
            if (!qf_shape_equal(a->ndim, a->dims, b->ndim, b->dims)) {
                char sa[128], sb[128];
                st = qf_error(QF_ERR_MISMATCH, "output '%s': shape %s before, %s after fusing", d->name,
                              qf_shape_str(a->ndim, a->dims, sa, sizeof sa),
                              qf_shape_str(b->ndim, b->dims, sb, sizeof sb));
                break;
            }
            qf_fuse_compare(a, b, fa->tol, d);
            *ok &= d->ok;
        }
    }
    for (int i = 0; ts && i < nin; i++) qf_tensor_free(&ts[i]);
    qf_free(ts);
    qf_plan_free(p0);
    qf_plan_free(p1);
    qf_graph_free(g0);
    qf_graph_free(g1);
    return st;
}

/* --- summary ---------------------------------------------------------------------- */

static void qf_fuse_summary(const qf_fuse_args *fa, const qf_graph *g, const qf_pass_report *r, int bn_before,
                            FILE *f)
{
    fprintf(f, "qfold fuse: %s -> %s (%s%s)\n", fa->in, fa->out, r->pipeline ? "pipeline " : "passes ",
            r->pipeline ? r->pipeline : fa->passes);
    /* Rewrites per pass over all iterations, in first-run order. */
    for (int i = 0; i < r->nresults; i++) {
        bool first = true;
        for (int k = 0; k < i && first; k++) first = strcmp(r->results[k].pass, r->results[i].pass) != 0;
        if (!first) continue;
        int rw = 0, sk = 0;
        double sec = 0;
        for (int k = i; k < r->nresults; k++) {
            if (strcmp(r->results[k].pass, r->results[i].pass) != 0) continue;
            rw += r->results[k].rewrites;
            sec += r->results[k].seconds;
            /* Skips of the last iteration: what is still left undone. */
            if (r->results[k].iteration == r->iterations - 1) sk = r->results[k].nskipped;
        }
        fprintf(f, "  %-24s %4d rewrite%s %4d skip%s  %8.3f ms\n", r->results[i].pass, rw, rw == 1 ? " " : "s", sk,
                sk == 1 ? " " : "s", sec * 1e3);
    }
    int bn_after = qf_fuse_count_bn(g);
    int decomposed = qf_pass_report_count(r, QF_PASS_DECOMPOSED, QF_OP_BATCH_NORM);
    fprintf(f, "  BatchNorm: %d before, %d after", bn_before, bn_after);
    if (bn_before) fprintf(f, " (%d folded", bn_before - bn_after - decomposed);
    if (bn_before && decomposed) fprintf(f, ", %d decomposed into Mul + Add", decomposed);
    if (bn_before) fputc(')', f);
    fputc('\n', f);
    /* Why each remaining BN stayed: the skips of the last iteration. */
    qf_graph_for_each_node(g, n) {
        if (n->op != QF_OP_BATCH_NORM) continue;
        bool any = false;
        for (int i = 0; i < r->nresults; i++) {
            const qf_pass_result *res = &r->results[i];
            if (res->iteration != r->iterations - 1) continue;
            for (int k = 0; k < res->nskipped; k++) {
                if (strcmp(res->skipped[k].node, n->name) != 0) continue;
                fprintf(f, "    kept '%s': %s: %s\n", n->name, res->pass, res->skipped[k].reason);
                any = true;
            }
        }
        if (!any) fprintf(f, "    kept '%s': no pass recorded a reason\n", n->name);
    }
}

static void qf_fuse_extra_json(const qf_fuse_args *fa, const qf_graph *g, int bn_before, const qf_fuse_diff *diffs,
                               int ndiffs, qf_strbuf *s)
{
    qf_strbuf_puts(s, "\"input\": ");
    qf_strbuf_json_string(s, fa->in);
    qf_strbuf_puts(s, ",\n  \"output\": ");
    qf_strbuf_json_string(s, fa->out);
    qf_strbuf_printf(s, ",\n  \"batch_norm\": {\"before\": %d, \"after\": %d, \"kept\": [", bn_before,
                     qf_fuse_count_bn(g));
    bool first = true;
    qf_graph_for_each_node(g, n) {
        if (n->op != QF_OP_BATCH_NORM) continue;
        qf_strbuf_puts(s, first ? "" : ", ");
        qf_strbuf_json_string(s, n->name);
        first = false;
    }
    qf_strbuf_puts(s, "]},\n  \"verify\": ");
    if (!fa->verify) {
        qf_strbuf_puts(s, "null");
        return;
    }
    qf_strbuf_printf(s, "{\"tolerance\": %.9g, \"data\": ", fa->tol);
    if (fa->verify_data) qf_strbuf_json_string(s, fa->verify_data);
    else qf_strbuf_puts(s, "\"random (fixed seed)\"");
    qf_strbuf_puts(s, ", \"outputs\": [");
    for (int i = 0; i < ndiffs; i++) {
        qf_strbuf_printf(s, "%s{\"name\": ", i ? ", " : "");
        qf_strbuf_json_string(s, diffs[i].name);
        qf_strbuf_printf(s, ", \"max_abs\": %.9g, \"max_rel\": %.9g, \"ok\": %s}", diffs[i].max_abs, diffs[i].max_rel,
                         diffs[i].ok ? "true" : "false");
    }
    qf_strbuf_puts(s, "]}");
}

/* --- the command -------------------------------------------------------------------- */

static int qf_fuse_parse(int argc, char **argv, qf_fuse_args *fa)
{
    const char *v = NULL;
    *fa = (qf_fuse_args){.tol = QF_FUSE_DEFAULT_TOL};
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_fuse, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "-o", "--output", &v)) fa->out = v;
        else if (qf_cli_args_value(&a, "--report", NULL, &v)) fa->report = v;
        else if (qf_cli_args_flag(&a, "--verify", NULL)) fa->verify = true;
        else if (qf_cli_args_value(&a, "--verify-data", NULL, &v)) fa->verify_data = v, fa->verify = true;
        else if (qf_cli_args_value(&a, "--tolerance", NULL, &v)) {
            if (a.failed) break;
            char *end;
            fa->tol = strtod(v, &end);
            if (*end || !(fa->tol > 0) || !isfinite(fa->tol))
                return qf_cli_usage_error(a.cmd, "--tolerance wants a positive number, got '%s'", v);
        } else if (qf_cli_args_value(&a, "--passes", NULL, &v)) fa->passes = v;
        else if (qf_cli_args_value(&a, "--pipeline", NULL, &v)) fa->pipeline = v;
        else if (qf_cli_args_flag(&a, "--fixpoint", NULL)) fa->fixpoint = true;
        else if (qf_cli_args_flag(&a, "-v", "--verbose")) fa->verbose = true;
        else if (!fa->in && qf_cli_args_positional(&a, &v)) fa->in = v;
        else return qf_cli_args_unknown(&a);
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!fa->in) return qf_cli_usage_error(a.cmd, "no input model given");
    if (!fa->out) return qf_cli_usage_error(a.cmd, "no output given (-o OUT.onnx)");
    if (fa->passes && fa->pipeline) return qf_cli_usage_error(a.cmd, "give --passes or --pipeline, not both");
    if (strcmp(fa->out, fa->in) == 0 || qf_cli_same_file(fa->out, fa->in))
        return qf_cli_error(QF_EXIT_USAGE, "output '%s' is the input model: refusing to overwrite it", fa->out);
    if (fa->report && (strcmp(fa->report, fa->in) == 0 || qf_cli_same_file(fa->report, fa->in) ||
                       strcmp(fa->report, fa->out) == 0))
        return qf_cli_error(QF_EXIT_USAGE, "report '%s' would overwrite a model", fa->report);
    return QF_EXIT_OK;
}

/* "a,b,c" into names (pointers into buf); unknown names are a usage error. */
static int qf_fuse_split(const char *list, char *buf, size_t size, const char **names)
{
    snprintf(buf, size, "%s", list);
    int n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == QF_FUSE_MAX_PASSES) return qf_cli_error(QF_EXIT_USAGE, "too many passes in --passes");
        if (!qf_pass_find(tok)) return qf_cli_error(QF_EXIT_USAGE, "unknown pass '%s' (see `qfold passes`)", tok);
        names[n++] = tok;
    }
    if (!n) return qf_cli_error(QF_EXIT_USAGE, "--passes is empty");
    names[n] = NULL;
    return QF_EXIT_OK;
}

/* Write to a fresh temporary name next to `out` (so the rename stays on one
 * file system). mkstemp creates it 0600 and qf_onnx_save keeps the mode of
 * the file it replaces: give it the mode OUT would get without --verify (the
 * existing OUT's, else 0644), or the renamed model would be private. */
static qf_status qf_fuse_temp_name(const char *out, char *buf, size_t size)
{
    int k = snprintf(buf, size, "%s.qfold-verify-XXXXXX", out);
    if (k < 0 || (size_t)k >= size) return qf_error(QF_ERR_IO, "%s: path too long", out);
    int fd = mkstemp(buf);
    if (fd < 0) {
        qf_status st = qf_error(QF_ERR_IO, "cannot create a temporary file next to '%s': %s", out, strerror(errno));
        buf[0] = '\0'; /* nothing to remove */
        return st;
    }
    struct stat old;
    mode_t mode = stat(out, &old) == 0 ? (old.st_mode & 07777) : 0644;
    qf_status st = QF_OK;
    if (fchmod(fd, mode) != 0) {
        st = qf_error(QF_ERR_IO, "cannot set the mode of '%s': %s", buf, strerror(errno));
        unlink(buf);
        buf[0] = '\0';
    }
    close(fd);
    return st;
}

static int qf_cli_fuse(int argc, char **argv)
{
    qf_fuse_args fa;
    int rc = qf_fuse_parse(argc, argv, &fa);
    if (rc != QF_EXIT_OK) return rc;
    char pass_buf[4096];
    const char *names[QF_FUSE_MAX_PASSES + 1];
    if (fa.passes && (rc = qf_fuse_split(fa.passes, pass_buf, sizeof pass_buf, names)) != QF_EXIT_OK) return rc;
    const char *pipeline = fa.pipeline ? fa.pipeline : "ptq";
    if (!fa.passes && !qf_pipeline_find(pipeline))
        return qf_cli_error(QF_EXIT_USAGE, "unknown pipeline '%s' (see `qfold passes`)", pipeline);

    double t0 = qf_fuse_now();
    qf_graph *g = NULL;
    qf_pass_report *r = NULL;
    qf_fuse_diff *diffs = NULL;
    int ndiffs = 0;
    char tmp[4096] = "";
    qf_strbuf extra = {0};
    qf_status st = qf_onnx_load(fa.in, &g);
    if (st != QF_OK) {
        rc = qf_cli_fail(st);
        goto done;
    }
    double t_load = qf_fuse_now();
    int bn_before = qf_fuse_count_bn(g);
    qf_pass_options opt = {.verify = true, .fixpoint = fa.fixpoint};
    st = fa.passes ? qf_passes_run(g, names, &opt, &r) : qf_pipeline_run(g, pipeline, &opt, &r);
    if (st != QF_OK) {
        rc = qf_cli_fail(st);
        goto done;
    }
    double t_pass = qf_fuse_now();
    if (fa.verbose) qf_pass_report_print(r, stdout);

    if (fa.verify) {
        bool ok = false;
        st = qf_fuse_temp_name(fa.out, tmp, sizeof tmp);
        if (st == QF_OK) st = qf_onnx_save(g, tmp);
        if (st == QF_OK) st = qf_fuse_verify(&fa, tmp, &diffs, &ndiffs, &ok);
        for (int i = 0; i < ndiffs; i++)
            printf("verify: output '%s': max abs diff %.3g, max rel diff %.3g (tolerance %.3g) %s\n", diffs[i].name,
                   diffs[i].max_abs, diffs[i].max_rel, fa.tol, diffs[i].ok ? "ok" : "FAILED");
        if (st == QF_OK && !ok)
            st = qf_error(QF_ERR_MISMATCH, "the fused model's outputs differ from the original's past the "
                                           "tolerance %g: nothing written", fa.tol);
        if (st != QF_OK) {
            rc = qf_cli_fail(st);
            goto done;
        }
    }
    if (fa.report) {
        char *text = NULL;
        size_t len = 0;
        qf_fuse_extra_json(&fa, g, bn_before, diffs, ndiffs, &extra);
        st = extra.oom ? qf_error(QF_ERR_NOMEM, "out of memory") : qf_pass_report_json(r, extra.p, &text, &len);
        if (st == QF_OK) st = qf_file_write_atomic(fa.report, text, len);
        qf_free(text);
        if (st != QF_OK) {
            rc = qf_cli_fail(st);
            goto done;
        }
    }
    if (fa.verify) {
        if (rename(tmp, fa.out) != 0) {
            rc = qf_cli_error(QF_EXIT_FAIL, "cannot rename '%s' to '%s': %s", tmp, fa.out, strerror(errno));
            goto done;
        }
        tmp[0] = '\0';
    } else if ((st = qf_onnx_save(g, fa.out)) != QF_OK) {
        rc = qf_cli_fail(st);
        goto done;
    }
    double t_end = qf_fuse_now();
    qf_fuse_summary(&fa, g, r, bn_before, stdout);
    printf("  time: load %.1f ms, passes %.1f ms, %s %.1f ms, total %.1f ms\n", (t_load - t0) * 1e3,
           (t_pass - t_load) * 1e3, fa.verify ? "verify + save" : "save", (t_end - t_pass) * 1e3, (t_end - t0) * 1e3);
done:
    if (tmp[0]) unlink(tmp);
    for (int i = 0; i < ndiffs; i++) qf_free((void *)diffs[i].name);
    qf_free(diffs);
    qf_strbuf_free(&extra);
    qf_pass_report_free(r);
    qf_graph_free(g);
    return rc;
}

const qf_cli_command qf_cli_cmd_fuse = {
    .name = "fuse",
    .summary = "fold BatchNorm (and canonicalize) with a pass pipeline, write the rewritten model",
    .usage = "qfold fuse IN.onnx -o OUT.onnx [--report R.json] [--verify] [--verify-data X.npy]\n"
             "                  [--tolerance T] [--passes p1,p2 | --pipeline NAME] [--fixpoint] [-v]",
    .details =
        "Runs the passes (default: pipeline ptq = canonicalize, fuse_batch_norm,\n"
        "fuse_batch_norm_forward, dce; `qfold passes` lists them) with the graph verifier\n"
        "after each one, prints a summary (rewrites per pass, BatchNorms folded, why each\n"
        "remaining one was kept) and writes OUT through a temporary file + rename. OUT may\n"
        "not be the input.\n\n"
        "options:\n"
        "  -o, --output FILE     the rewritten model\n"
        "  --report FILE         the full pass report as JSON: every rewrite and every skip\n"
        "                        with its reason, per-pass times, BN diagnostics, --verify\n"
        "  --verify              run the original and the written model on the same inputs\n"
        "                        and compare every output; inputs are uniform [-1, 1) from a\n"
        "                        fixed-seed generator, unknown dims taken as 1, integer inputs\n"
        "                        zeros (int64 ones bound as constants, as `qfold run` does)\n"
        "  --verify-data X.npy   verify on this array instead (single-input models)\n"
        "  --tolerance T         fail when, for some output, max|a - b| / max(1e-6, max|a|)\n"
        "                        exceeds T (a = original, b = rewritten; default 1e-4); then\n"
        "                        nothing is written and the exit status is 1\n"
        "  --passes p1,p2        run these passes instead of a pipeline (dce is appended)\n"
        "  --pipeline NAME       run this pipeline (default ptq)\n"
        "  --fixpoint            repeat the list until no pass changes the graph (at most 8)\n"
        "  -v, --verbose         print the full report (every rewrite and skip)\n",
    .fn = qf_cli_fuse,
};
