/* qfold fuse IN.onnx -o OUT.onnx [--report R.json] [--verify] [--verify-data [NAME=]X.npy ...]
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
#include <unistd.h>

#include "core/clock.h"
#include "cli.h"
#include "core/strbuf.h"
#include "fuse_verify.h"
#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"

#define QF_FUSE_MAX_PASSES 64
#define QF_FUSE_DEFAULT_TOL 1e-4
#define QF_FUSE_MAX_VERIFY_DATA 32

typedef struct qf_fuse_args {
    const char *in, *out, *report, *passes, *pipeline;
    qf_verify_data vd[QF_FUSE_MAX_VERIFY_DATA]; /* --verify-data, in the order given */
    int nvd;
    bool verify, fixpoint, verbose, tol_set;
    double tol;
} qf_fuse_args;

static int qf_fuse_count_bn(const qf_graph *g)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == QF_OP_BATCH_NORM;
    return k;
}

/* --- verification ---------------------------------------------------------------- */

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

static void qf_fuse_extra_json(const qf_fuse_args *fa, const qf_graph *g, int bn_before,
                               const qf_compare_result *cmp, const char *verify_error, qf_strbuf *s)
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
    if (fa->nvd == 1 && !fa->vd[0].name[0]) {
        qf_strbuf_json_string(s, fa->vd[0].path);
    } else if (fa->nvd) {
        /* Per input: {"x": "x.npy", ...}. */
        qf_strbuf_puts(s, "{");
        for (int i = 0; i < fa->nvd; i++) {
            qf_strbuf_puts(s, i ? ", " : "");
            qf_strbuf_json_string(s, fa->vd[i].name);
            qf_strbuf_puts(s, ": ");
            qf_strbuf_json_string(s, fa->vd[i].path);
        }
        qf_strbuf_puts(s, "}");
    } else {
        qf_strbuf_puts(s, "\"random (fixed seed)\"");
    }
    qf_strbuf_puts(s, ", \"outputs\": [");
    for (int i = 0; i < cmp->noutputs; i++) {
        const qf_compare_output *d = &cmp->outputs[i];
        qf_strbuf_printf(s, "%s{\"name\": ", i ? ", " : "");
        qf_strbuf_json_string(s, d->name);
        qf_strbuf_printf(s, ", \"max_abs\": %.9g, \"max_rel\": %.9g, \"ok\": %s}", d->max_abs, d->max_rel,
                         d->ok ? "true" : "false");
    }
    qf_strbuf_puts(s, "]");
    if (verify_error) {
        /* Only a failed verification has these: a passing report is as before. */
        qf_strbuf_puts(s, ", \"ok\": false, \"error\": ");
        qf_strbuf_json_string(s, verify_error);
    }
    qf_strbuf_puts(s, "}");
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
        else if (qf_cli_args_value(&a, "--verify-data", NULL, &v)) {
            if (a.failed) break;
            if (fa->nvd == QF_FUSE_MAX_VERIFY_DATA) return qf_cli_usage_error(a.cmd, "too many --verify-data");
            qf_verify_data *d = &fa->vd[fa->nvd++];
            /* NAME=X.npy names the input; a path that exists as given is a file. */
            const char *eq = strchr(v, '=');
            struct stat sb;
            memset(d, 0, sizeof *d);
            d->path = v;
            if (eq && eq != v && !memchr(v, '/', (size_t)(eq - v)) && stat(v, &sb) != 0) {
                if ((size_t)(eq - v) >= sizeof d->name)
                    return qf_cli_usage_error(a.cmd, "--verify-data: input name too long");
                memcpy(d->name, v, (size_t)(eq - v));
                d->path = eq + 1;
            }
            fa->verify = true;
        }
        else if (qf_cli_args_value(&a, "--tolerance", NULL, &v)) {
            if (a.failed) break;
            char *end;
            fa->tol = strtod(v, &end);
            fa->tol_set = true;
            if (*end || !(fa->tol > 0) || !isfinite(fa->tol))
                return qf_cli_value_error(a.cmd, "--tolerance wants a positive number, got '%s'", v);
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
    if (fa->passes && fa->pipeline)
        return qf_cli_usage_error(a.cmd, "give --passes or --pipeline, not both");
    return QF_EXIT_OK;
}

/* The outputs (-o first, then --report), checked before any work: usable
 * paths, none the same file as another or as an input. */
static int qf_fuse_outputs(const qf_fuse_args *fa, qf_cli_outputs *out)
{
    int rc = qf_cli_outputs_add(out, "output", fa->out);
    if (rc == QF_EXIT_OK && fa->report) rc = qf_cli_outputs_add(out, "report", fa->report);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(out, "the input model", fa->in);
    for (int i = 0; rc == QF_EXIT_OK && i < fa->nvd; i++)
        rc = qf_cli_outputs_input(out, "the --verify-data input", fa->vd[i].path);
    return rc;
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

static int qf_cli_fuse(int argc, char **argv)
{
    qf_fuse_args fa;
    int rc = qf_fuse_parse(argc, argv, &fa);
    if (rc != QF_EXIT_OK) return rc;
    /* the quant layer's passes too (equalize runs outside a quantize session) */
    qf_status rst = qf_quant_register_passes();
    if (rst != QF_OK) return qf_cli_fail(rst);
    char pass_buf[4096];
    const char *names[QF_FUSE_MAX_PASSES + 1];
    if (fa.passes && (rc = qf_fuse_split(fa.passes, pass_buf, sizeof pass_buf, names)) != QF_EXIT_OK) return rc;
    const char *pipeline = fa.pipeline ? fa.pipeline : "ptq";
    if (!fa.passes && !qf_pipeline_find(pipeline))
        return qf_cli_error(QF_EXIT_USAGE, "unknown pipeline '%s' (see `qfold passes`)", pipeline);

    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    if ((rc = qf_fuse_outputs(&fa, &out)) != QF_EXIT_OK) {
        qf_cli_outputs_free(&out);
        return rc;
    }

    double t0 = qf_clock_seconds();
    qf_graph *g = NULL;
    qf_pass_report *r = NULL;
    qf_compare_result cmp = {0};
    const char *tmp = NULL;
    qf_strbuf extra = {0};
    /* The conv weights stay in the input file: the BN fold records its
     * scale on them and the exporter reads them straight into its write
     * buffer (graph.h, "payloads left in the file"). */
    qf_onnx_load_options lo = {.defer = true};
    qf_status st = qf_onnx_load_ex(fa.in, &lo, &g);
    if (st != QF_OK) {
        rc = qf_cli_fail(st);
        goto done;
    }
    double t_load = qf_clock_seconds();
    if (!fa.tol_set) fa.tol = qf_cli_half_tolerance(g, fa.tol);
    int bn_before = qf_fuse_count_bn(g);
    qf_pass_options opt = {.verify = true, .fixpoint = fa.fixpoint};
    st = fa.passes ? qf_passes_run(g, names, &opt, &r) : qf_pipeline_run(g, pipeline, &opt, &r);
    if (st != QF_OK) {
        rc = qf_cli_fail(st);
        goto done;
    }
    double t_pass = qf_clock_seconds();
    if (fa.verbose) qf_pass_report_print(r, stdout);

    /* Every output goes to its temporary name first (the model, then the
     * report); they are renamed together once all are written, so a failure
     * anywhere leaves the old files as they were. --verify checks exactly
     * the file that will be renamed into place (export included). */
    st = qf_cli_outputs_save_model(&out, 0, g, &tmp);
    if (st != QF_OK) {
        rc = qf_cli_fail_write(&out, 0, st);
        goto done;
    }
    char *verify_error = NULL;
    if (fa.verify) {
        st = qf_fuse_verify_run(fa.in, tmp, fa.vd, fa.nvd, fa.tol, &cmp);
        for (int i = 0; i < cmp.noutputs; i++) {
            const qf_compare_output *d = &cmp.outputs[i];
            printf("verify: output '%s': max abs diff %.3g, max rel diff %.3g (tolerance %.3g) %s\n", d->name,
                   d->max_abs, d->max_rel, fa.tol, d->ok ? "ok" : "FAILED");
        }
        if (st == QF_OK && !cmp.ok)
            st = qf_error(QF_ERR_MISMATCH, "the fused model's outputs differ from the original's past the "
                                           "tolerance %g: %s", fa.tol,
                          fa.report ? "the model is not written" : "nothing written");
        if (st == QF_ERR_MISMATCH && fa.report) {
            /* A failed verification is reported: the report is written, the
             * model is not (exit 1). */
            const char *msg = qf_error_message();
            size_t n = strlen(msg) + 1;
            if ((verify_error = qf_malloc(n))) memcpy(verify_error, msg, n);
            qf_cli_outputs_drop(&out, 0);
        } else if (st != QF_OK) {
            rc = qf_cli_fail(st);
            goto done;
        }
    }
    if (fa.report) {
        char *text = NULL;
        size_t len = 0;
        const char *rtmp = NULL;
        qf_fuse_extra_json(&fa, g, bn_before, &cmp, verify_error, &extra);
        st = extra.oom ? qf_error(QF_ERR_NOMEM, "out of memory")
                       : qf_pass_report_json(r, extra.p, &text, &len);
        if (st != QF_OK) {
            rc = qf_cli_fail(st);
            goto done;
        }
        st = qf_cli_outputs_stage(&out, 1, &rtmp);
        if (st == QF_OK) st = qf_file_write_atomic(rtmp, text, len);
        qf_free(text);
        if (st != QF_OK) {
            qf_free(verify_error);
            rc = qf_cli_fail_write(&out, 1, st);
            goto done;
        }
    }
    if ((rc = qf_cli_outputs_commit(&out)) != QF_EXIT_OK) {
        qf_free(verify_error);
        goto done;
    }
    if (verify_error) {
        rc = qf_cli_error(QF_EXIT_FAIL, "%s (report written to %s)", verify_error, fa.report);
        qf_free(verify_error);
        goto done;
    }
    double t_end = qf_clock_seconds();
    qf_fuse_summary(&fa, g, r, bn_before, stdout);
    printf("  time: load %.1f ms, passes %.1f ms, %s %.1f ms, total %.1f ms\n", (t_load - t0) * 1e3,
           (t_pass - t_load) * 1e3, fa.verify ? "verify + save" : "save", (t_end - t_pass) * 1e3, (t_end - t0) * 1e3);
done:
    qf_cli_outputs_free(&out);
    qf_compare_result_free(&cmp);
    qf_strbuf_free(&extra);
    qf_pass_report_free(r);
    qf_graph_free(g);
    return rc;
}

const qf_cli_command qf_cli_cmd_fuse = {
    .name = "fuse",
    .summary = "fold BatchNorm (and canonicalize) with a pass pipeline, write the rewritten model",
    .usage = "qfold fuse IN.onnx -o OUT.onnx [--report R.json] [--verify] [--verify-data [NAME=]X.npy ...]\n"
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
        "                        fixed-seed generator, integer inputs zeros (int64 ones bound\n"
        "                        as constants, as `qfold run` does). Unknown dims: a dim named\n"
        "                        as a dim of a --verify-data array takes its size, the first\n"
        "                        dim 1, the others the smallest of 1, 2, 4, ..., 256 the model\n"
        "                        accepts (pooling / convolution windows). A model that cannot\n"
        "                        be verified (an op qfold cannot run, no size fits) fails\n"
        "                        with exit status 1, nothing written but the --report\n"
        "  --verify-data X.npy   verify on this array instead (single-input models); for a\n"
        "  --verify-data NAME=X.npy  model with several inputs (or integer shape inputs),\n"
        "                        one per input given, the others generated\n"
        "  --tolerance T         fail when, for some output, max|a - b| / max(1e-6, max|a|)\n"
        "                        exceeds T (a = original, b = rewritten; default 1e-4); then\n"
        "                        nothing is written (but the --report, which says why) and\n"
        "                        the exit status is 1\n"
        "  --passes p1,p2        run these passes instead of a pipeline (dce is appended)\n"
        "  --pipeline NAME       run this pipeline (default ptq)\n"
        "  --fixpoint            repeat the list until no pass changes the graph (at most 8)\n"
        "  -v, --verbose         print the full report (every rewrite and skip)\n",
    .fn = qf_cli_fuse,
};
