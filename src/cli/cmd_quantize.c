/* qfold quantize IN.onnx -o OUT.onnx --calib X.npy [--calib X2.npy ...] [--target neutron|generic]
 *                [--set RULE=VALUE ...] [--calib-count N] [--batch B] [--seed S] [--report R.json]
 *
 * Post-training quantization: the ptq pipeline (BatchNorm folds), then
 * annotate for the target, calibrate on the data, convert to ONNX QDQ, and
 * measure each quantized layer's SQNR against the folded float model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/strbuf.h"
#include "cli.h"
#include "qfold/io.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "qfold/schema.h"

#define QF_QZ_MAX_CALIB 16
#define QF_QZ_MAX_SETS 16

typedef struct qf_qz_args {
    const char *in, *out, *report, *target;
    const char *calib[QF_QZ_MAX_CALIB];
    int ncalib;
    const char *sets[QF_QZ_MAX_SETS];
    int nsets;
    int64_t count, batch;
    uint64_t seed;
    bool verify;
    qf_cli_exclude exclude;
    /* --max-drop: the accuracy target (qf_quantize_to_target) */
    const char *eval[QF_QZ_MAX_CALIB], *labels;
    int neval;
    double max_drop; /* NaN: none */
    int max_excluded;
} qf_qz_args;

/* Everything the command holds, released in one place. */
typedef struct qf_qz_state {
    qf_graph *g;
    qf_npy_file *files[QF_QZ_MAX_CALIB]; /* the calibration data, read a batch at a time */
    qf_npy_source *src;
    qf_quantize_model_result m; /* the library's recipe: passes, quantization, SQNR */
    qf_npy_file *efiles[QF_QZ_MAX_CALIB]; /* --eval-data, its labels */
    qf_npy_source *esrc;
    qf_tensor lab;
    int64_t *labels;
    qf_quant_target_result t; /* --max-drop's trials */
    double t_load, t_save, t_total; /* ms, for the summary (the recipe times its own steps) */
} qf_qz_state;

static int64_t qf_qz_number(const char *v, int64_t lo, int64_t hi)
{
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    return (*v && !*end && x >= lo && x <= hi) ? x : -1;
}

static int qf_qz_parse(int argc, char **argv, qf_qz_args *qa)
{
    const char *v;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_quantize, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (qf_cli_args_value(&a, "-o", "--output", &v)) {
            qa->out = v;
        } else if (qf_cli_args_value(&a, "--calib", NULL, &v)) {
            if (a.failed) break;
            if (qa->ncalib == QF_QZ_MAX_CALIB)
                return qf_cli_usage_error(a.cmd, "more than %d --calib", QF_QZ_MAX_CALIB);
            qa->calib[qa->ncalib++] = v;
        } else if (qf_cli_args_value(&a, "--target", NULL, &v)) {
            qa->target = v;
        } else if (qf_cli_args_value(&a, "--set", NULL, &v)) {
            if (a.failed) break;
            if (qa->nsets == QF_QZ_MAX_SETS) return qf_cli_usage_error(a.cmd, "more than %d --set", QF_QZ_MAX_SETS);
            qa->sets[qa->nsets++] = v;
        } else if (qf_cli_args_value(&a, "--calib-count", NULL, &v)) {
            if (a.failed) break;
            if ((qa->count = qf_qz_number(v, 1, INT64_MAX)) < 0)
                return qf_cli_value_error(a.cmd, "--calib-count takes a positive number, got '%s'", v);
        } else if (qf_cli_args_value(&a, "--batch", NULL, &v)) {
            if (a.failed) break;
            if ((qa->batch = qf_qz_number(v, 1, 1 << 20)) < 0)
                return qf_cli_value_error(a.cmd, "--batch takes a number from 1 to %d, got '%s'", 1 << 20, v);
        } else if (qf_cli_args_value(&a, "--seed", NULL, &v)) {
            if (a.failed) break;
            int64_t seed = qf_qz_number(v, 0, INT64_MAX);
            if (seed < 0) return qf_cli_value_error(a.cmd, "--seed takes a number from 0 to %lld, got '%s'",
                                                    (long long)INT64_MAX, v);
            qa->seed = (uint64_t)seed;
        } else if (qf_cli_args_value(&a, "--report", NULL, &v)) {
            qa->report = v;
        } else if (qf_cli_args_value(&a, "--exclude", NULL, &v)) {
            if (a.failed) break;
            int rc = qf_cli_exclude_add(a.cmd, &qa->exclude, v);
            if (rc != QF_EXIT_OK) return rc;
        } else if (qf_cli_args_value(&a, "--eval-data", NULL, &v)) {
            if (a.failed) break;
            if (qa->neval == QF_QZ_MAX_CALIB)
                return qf_cli_usage_error(a.cmd, "more than %d --eval-data", QF_QZ_MAX_CALIB);
            qa->eval[qa->neval++] = v;
        } else if (qf_cli_args_value(&a, "--eval-labels", NULL, &v)) {
            qa->labels = v;
        } else if (qf_cli_args_value(&a, "--max-drop", NULL, &v)) {
            if (a.failed) break;
            char *end = NULL;
            qa->max_drop = strtod(v, &end);
            if (!*v || *end || !isfinite(qa->max_drop) || qa->max_drop < 0)
                return qf_cli_value_error(a.cmd, "--max-drop takes top-1 points >= 0 (e.g. 1 or 0.5), got '%s'", v);
        } else if (qf_cli_args_value(&a, "--max-excluded", NULL, &v)) {
            if (a.failed) break;
            int64_t k = qf_qz_number(v, 0, 1000);
            if (k < 0) return qf_cli_value_error(a.cmd, "--max-excluded takes a number from 0 to 1000, got '%s'", v);
            qa->max_excluded = (int)k;
        } else if (qf_cli_args_flag(&a, "--verify", NULL)) {
            qa->verify = true;
        } else if (!qa->in && qf_cli_args_positional(&a, &v)) {
            qa->in = v;
        } else {
            return qf_cli_args_unknown(&a);
        }
    }
    if (a.failed) return QF_EXIT_USAGE;
    if (!qa->in) return qf_cli_usage_error(a.cmd, "no input model given");
    if (!qa->out) return qf_cli_usage_error(a.cmd, "no output given (-o OUT.onnx)");
    if (qa->verify && qf_cli_is_tflite(qa->out))
        return qf_cli_usage_error(a.cmd, "--verify loads an ONNX output back: not with a .tflite output");
    if (!qa->ncalib) return qf_cli_usage_error(a.cmd, "no calibration data given (--calib X.npy)");
    bool target = !isnan(qa->max_drop);
    if (target && (!qa->neval || !qa->labels))
        return qf_cli_usage_error(a.cmd, "--max-drop needs labelled data: --eval-data X.npy --eval-labels Y.npy");
    if (!target && (qa->neval || qa->labels))
        return qf_cli_usage_error(a.cmd, "--eval-data / --eval-labels go with --max-drop P");
    return QF_EXIT_OK;
}

/* The outputs (-o, then --report), checked before any work: usable paths,
 * none the same file as another output, the model or calibration data. */
static int qf_qz_outputs(const qf_qz_args *qa, qf_cli_outputs *out)
{
    int rc = qf_cli_outputs_add(out, "output", qa->out);
    if (rc == QF_EXIT_OK && qa->report) rc = qf_cli_outputs_add(out, "--report", qa->report);
    if (rc == QF_EXIT_OK) rc = qf_cli_outputs_input(out, "the input model", qa->in);
    for (int i = 0; rc == QF_EXIT_OK && i < qa->ncalib; i++)
        rc = qf_cli_outputs_input(out, "the calibration data", qa->calib[i]);
    for (int i = 0; rc == QF_EXIT_OK && i < qa->neval; i++)
        rc = qf_cli_outputs_input(out, "the eval data", qa->eval[i]);
    if (rc == QF_EXIT_OK && qa->labels) rc = qf_cli_outputs_input(out, "the eval labels", qa->labels);
    return rc;
}

/* The target profile with the --set overrides applied (also `qfold qat`'s). */
int qf_cli_quant_profile(const char *target, const char *const *sets, int nsets, qf_quant_profile *p)
{
    const char *name = target ? target : "neutron";
    const qf_quant_profile *base = qf_quant_profile_find(name);
    if (!base) {
        const char *const *names = qf_quant_profile_names();
        return qf_cli_error(QF_EXIT_USAGE, "unknown --target '%s' (targets: %s, %s)", name, names[0], names[1]);
    }
    qf_quant_profile *made = NULL;
    if (qf_quant_profile_make(name, sets, nsets, &made) != QF_OK)
        return qf_cli_error(QF_EXIT_USAGE, "--set: %s", qf_error_message());
    *p = *made;
    qf_free(made);
    return QF_EXIT_OK;
}

int qf_cli_exclude_add(const qf_cli_command *cmd, qf_cli_exclude *x, const char *value)
{
    if (x->ncopies == QF_CLI_MAX_EXCLUDE) return qf_cli_usage_error(cmd, "more than %d --exclude", QF_CLI_MAX_EXCLUDE);
    char *c = qf_strdup(value);
    if (!c) return qf_cli_fail(QF_ERR_NOMEM);
    x->copies[x->ncopies++] = c;
    for (char *e = c;;) {
        char *comma = strchr(e, ',');
        if (comma) *comma = 0;
        if (!*e) return qf_cli_usage_error(cmd, "--exclude '%s': an empty node name or op type", value);
        if (x->n == QF_CLI_MAX_EXCLUDE)
            return qf_cli_usage_error(cmd, "--exclude: more than %d entries", QF_CLI_MAX_EXCLUDE);
        x->entries[x->n++] = e;
        if (!comma) break;
        e = comma + 1;
    }
    return QF_EXIT_OK;
}

void qf_cli_exclude_free(qf_cli_exclude *x)
{
    for (int i = 0; i < x->ncopies; i++) qf_free(x->copies[i]);
    x->ncopies = x->n = 0;
}

/* Calibration file i for graph input v (t: its dtype and shape): a batch
 * axis first, the sample dims the graph fixes, at least one sample. */
static qf_status qf_qz_check_data(const char *path, const qf_value *v, const qf_tensor *t)
{
    qf_status st = qf_data_check(v, t);
    return st == QF_OK ? QF_OK : qf_error_prefix(st, "calibration data '%s': ", path);
}

static qf_status qf_qz_load_data(const qf_qz_args *qa, qf_qz_state *s)
{
    const qf_graph *g = s->g;
    if (qa->ncalib != g->ninputs)
        return qf_error(QF_ERR_INVALID, "'%s' has %d input%s: give one --calib per input, got %d", qa->in,
                        g->ninputs, g->ninputs == 1 ? "" : "s", qa->ncalib);
    for (int i = 0; i < qa->ncalib; i++) {
        qf_status st = qf_npy_open(qa->calib[i], &s->files[i]);
        if (st != QF_OK) return qf_error_prefix(st, "calibration data '%s': ", qa->calib[i]);
        const qf_tensor *t = qf_npy_info(s->files[i]), *t0 = qf_npy_info(s->files[0]);
        QF_TRY(qf_qz_check_data(qa->calib[i], g->inputs[i], t));
        QF_TRY(qf_npy_check_finite("calibration data", qa->calib[i], g->inputs[i], s->files[i]));
        if (t->dims[0] != t0->dims[0])
            return qf_error(QF_ERR_SHAPE, "calibration data '%s' holds %lld samples, '%s' %lld", qa->calib[i],
                            (long long)t->dims[0], qa->calib[0], (long long)t0->dims[0]);
    }
    return qf_npy_source_init(&s->src, s->files, qa->ncalib);
}

/* --eval-data against the model's inputs, --eval-labels against its count. */
static qf_status qf_qz_load_eval(const qf_qz_args *qa, qf_qz_state *s)
{
    const qf_graph *g = s->g;
    if (qa->neval != g->ninputs)
        return qf_error(QF_ERR_INVALID, "'%s' has %d input%s: give one --eval-data per input, got %d", qa->in,
                        g->ninputs, g->ninputs == 1 ? "" : "s", qa->neval);
    for (int i = 0; i < qa->neval; i++) {
        qf_status st = qf_npy_open(qa->eval[i], &s->efiles[i]);
        if (st != QF_OK) return qf_error_prefix(st, "eval data '%s': ", qa->eval[i]);
        const qf_tensor *t = qf_npy_info(s->efiles[i]), *t0 = qf_npy_info(s->efiles[0]);
        st = qf_data_check(g->inputs[i], t);
        if (st != QF_OK) return qf_error_prefix(st, "eval data '%s': ", qa->eval[i]);
        QF_TRY(qf_npy_check_finite("eval data", qa->eval[i], g->inputs[i], s->efiles[i]));
        if (t->dims[0] != t0->dims[0])
            return qf_error(QF_ERR_SHAPE, "eval data '%s' holds %lld samples, '%s' %lld", qa->eval[i],
                            (long long)t->dims[0], qa->eval[0], (long long)t0->dims[0]);
    }
    QF_TRY(qf_cli_labels(qa->labels, qf_npy_info(s->efiles[0])->dims[0], &s->lab, &s->labels));
    return qf_npy_source_init(&s->esrc, s->efiles, qa->neval);
}

/* --max-drop: one line per trial as it ends. */
static void qf_qz_trial(void *ud, const qf_quant_target_trial *t, int index)
{
    (void)ud;
    if (t->skipped)
        printf("target trial %d: %s: not tried (%s)\n", index, t->what, t->skipped);
    else
        printf("target trial %d: %s: int8 top-1 %.2f %%, drop %.2f points: %s\n", index, t->what, t->top1, t->drop,
               t->kept ? "kept" : "not kept");
    fflush(stdout);
}

static void qf_qz_progress(void *ud, const char *pass, int64_t done, int64_t total)
{
    (void)ud;
    fprintf(stderr, "\rcalibrating %lld / %lld samples%s%s%s", (long long)done, (long long)total, pass ? " (" : "",
            pass ? pass : "", pass ? ")" : "");
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

/* One line per layer as AdaRound finishes it (it takes seconds a layer). */
static void qf_qz_adaround_progress(void *ud, const qf_quant_adaround_layer *l, int index, int count)
{
    (void)ud;
    if (l->reason) {
        fprintf(stderr, "adaround %d/%d '%s': skipped: %s\n", index, count, l->node, l->reason);
    } else {
        double rel = l->err_nearest > 0.0 ? 100.0 * (l->err_adaround - l->err_nearest) / l->err_nearest : 0.0;
        fprintf(stderr,
                "adaround %d/%d '%s': %d iterations, %lld samples, reconstruction error %.4g -> %.4g (%+.1f %%), "
                "%lld of %lld weights rounded the other way%s, %.2f s\n",
                index, count, l->node, l->iters, (long long)l->samples, l->err_nearest, l->err_adaround, rel,
                (long long)l->changed, (long long)l->weights, l->kept ? "" : " (not kept: not below nearest)",
                l->ms / 1e3);
    }
    fflush(stderr);
}

/* --- output ------------------------------------------------------------------------ */

static void qf_qz_summary(const qf_qz_args *qa, const qf_quant_profile *p, const qf_qz_state *s)
{
    const qf_quantize_result *r = &s->m.quant;
    const qf_quant_convert_stats *c = &r->stats;
    char num[32];
    printf("qfold quantize: %s -> %s (target %s, %s calibration samples, batch %lld)\n", qa->in,
           qa->out, p->name, qf_cli_thousands(r->samples, num, sizeof num), (long long)r->batch);
    if (r->batch_note)
        printf("  note        the model fixes its batch size at %lld and %s: calibrated %lld "
               "sample%s at a time\n",
               (long long)r->batch, r->batch_note, (long long)r->batch, r->batch == 1 ? "" : "s");
    printf("  quantized   %d activations, %d weights, %d biases\n", c->activations, c->weights, c->biases);
    for (int i = 0; i < r->ntensors; i++) {
        const qf_quant_tensor *t = &r->tensors[i];
        if (t->kind != QF_QSPEC_WEIGHT || !t->zero_channels) continue;
        if (t->zero_channels == t->nch)
            printf("  note        weight '%s' of node '%s' is all zero\n", t->name, t->node ? t->node : "?");
        else
            printf("  note        weight '%s' of node '%s': %d of %d channels are all zero\n", t->name,
                   t->node ? t->node : "?", t->zero_channels, t->nch);
    }
    if (r->eq_trial) {
        char line[320];
        qf_quant_eq_summary(r, line, sizeof line);
        printf("  equalize    %s\n", line);
    }
    if (r->bc_rule != QF_QBIAS_OFF) {
        char line[320];
        qf_quant_bc_summary(r, line, sizeof line);
        printf("  bias correction %s\n", line);
    }
    if (r->nadaround) {
        int kept = 0, skipped = 0;
        double before = 0.0, after = 0.0;
        for (int i = 0; i < r->nadaround; i++) {
            const qf_quant_adaround_layer *l = &r->adaround[i];
            skipped += l->reason != NULL;
            if (l->reason) continue;
            kept += l->kept;
            before += l->err_nearest;
            after += l->kept ? l->err_adaround : l->err_nearest;
        }
        printf("  adaround    %d of %d layers rounded by AdaRound (%d kept nearest, %d skipped); summed "
               "reconstruction error %.4g -> %.4g\n",
               kept, r->nadaround, r->nadaround - kept - skipped, skipped, before, after);
    }
    qf_cli_target_passes_print(stdout, r->prepare);
    qf_cli_target_passes_print(stdout, r->convert);
    printf("  left float  %d op%s\n", r->nleft_float, r->nleft_float == 1 ? "" : "s");
    for (int i = 0; i < r->nleft_float && i < 10; i++)
        printf("    %s '%s': %s\n", r->left_float[i].op, r->left_float[i].name, r->left_float[i].reason);
    if (r->nleft_float > 10) printf("    ... %d more in the report\n", r->nleft_float - 10);
    if (s->m.nsqnr) {
        /* cumulative: the int8 model against the float one; local: the layer
         * alone quantized, its inputs the float model's (a layer that loses
         * accuracy has both low, the layers after it only the cumulative) */
        printf("  lowest SQNR (int8 model vs float, per layer output; local: that layer alone in int8):\n");
        printf("    %-40s %10s %8s\n", "", "cumulative", "local");
        for (int i = 0; i < s->m.nsqnr && i < 5; i++)
            printf("    %-40s %7.1f dB %5.1f dB\n", s->m.sqnr[i].name, s->m.sqnr[i].sqnr_db, s->m.sqnr[i].local_db);
    }
    for (int k = 0; k < s->m.nworst_local; k++) {
        const qf_quant_sqnr *w = &s->m.sqnr[s->m.worst_local[k]];
        printf("%s %s %.1f dB (cumulative %.1f)%s", k ? "," : "  worst local SQNR:", w->name, w->local_db, w->sqnr_db,
               k + 1 == s->m.nworst_local ? "\n" : "");
    }
    /* Every phase, adding up to the total: calibrate is every calibration
     * (equalize=auto's trials run one each), equalize the rest of the
     * trials (their copies and output SQNR). */
    printf("  time: load %.1f ms, passes %.1f ms, calibrate %.1f ms (%.1f samples/s), equalize "
           "%.1f ms, ",
           s->t_load, s->m.passes_ms, r->calibrate_ms,
           r->calibrate_ms > 0 ? (double)r->samples * 1e3 / r->calibrate_ms : 0.0, r->equalize_ms);
    if (r->bc_rule != QF_QBIAS_OFF) printf("bias correction %.1f ms, ", r->bc_ms);
    printf("convert %.1f ms, adaround %.1f ms, sqnr %.1f ms, save %.1f ms, total %.1f ms\n", r->convert_ms,
           r->adaround_ms, s->m.sqnr_ms, s->t_save, s->t_total);
}

/* --- the command --------------------------------------------------------------------- */

static qf_status qf_qz_run(const qf_qz_args *qa, const qf_quant_profile *p, qf_qz_state *s)
{
    double t0 = qf_clock_seconds() * 1e3;
    QF_TRY(qf_onnx_load(qa->in, &s->g));
    QF_TRY(qf_quantize_model_check(s->g, qa->in)); /* before the data is read */
    char **names = NULL;
    int nnames = 0;
    QF_TRY(qf_quant_exclude_resolve(s->g, qa->exclude.entries, qa->exclude.n, qa->in, &names, NULL, &nnames));
    qf_quant_exclude_free(names, NULL, nnames);
    QF_TRY(qf_qz_load_data(qa, s));
    if (!isnan(qa->max_drop)) QF_TRY(qf_qz_load_eval(qa, s));
    s->t_load = qf_clock_seconds() * 1e3 - t0;
    qf_quantize_model_options mo = {.quantize = {.profile = p, .batch = qa->batch, .max_samples = qa->count,
                                                 .exclude = qa->exclude.entries, .nexclude = qa->exclude.n,
                                                 .seed = qa->seed},
                                    .name = qa->in};
    if (isatty(STDERR_FILENO)) mo.quantize.progress = qf_qz_progress;
    mo.quantize.adaround_progress = qf_qz_adaround_progress;
    if (!isnan(qa->max_drop)) {
        qf_quant_target_options to = {.model = mo, .sets = qa->sets, .nsets = qa->nsets,
                                      .eval = qf_npy_source_get(s->esrc), .labels = s->labels,
                                      .max_drop = qa->max_drop, .max_excluded = qa->max_excluded, .trial = qf_qz_trial};
        printf("target: top-1 drop <= %g points, at most %d exclusion%s\n", qa->max_drop, qa->max_excluded,
               qa->max_excluded == 1 ? "" : "s");
        qf_graph *q = NULL;
        QF_TRY(qf_quantize_to_target(s->g, qf_npy_source_get(s->src), &to, &q, &s->m, &s->t));
        qf_graph_free(s->g);
        s->g = q;
        const qf_quant_target_trial *b = &s->t.trials[s->t.best];
        if (!s->t.met)
            return qf_error(QF_ERR_MISMATCH,
                            "quantize: top-1 drop <= %g points not reached: best int8 top-1 %.2f %% (trial %d, %s), "
                            "drop %.2f points from float %.2f %% on %lld samples; nothing written",
                            qa->max_drop, b->top1, s->t.best, b->what, b->drop, s->t.float_top1,
                            (long long)s->t.samples);
        printf("target: reached at trial %d (%s): int8 top-1 %.2f %%, float %.2f %%, drop %.2f points\n", s->t.best,
               b->what, b->top1, s->t.float_top1, b->drop);
    } else {
        QF_TRY(qf_quantize_model(s->g, qf_npy_source_get(s->src), &mo, &s->m));
    }
    return qf_onnx_record_excluded(s->g, s->m.quant.left_float, s->m.quant.nleft_float);
}

#define QF_QZ_VERIFY_SAMPLES 8

/* --verify: the file just written (tmp), loaded back, computes what the
 * quantized graph in memory computes, on the first calibration samples, as
 * written (Q / DQ in float: both sides the same graph, so any difference is
 * the export's). */
static qf_status qf_qz_verify(const qf_qz_state *s, const char *tmp, qf_compare_result *res)
{
    const qf_data_source *src = qf_npy_source_get(s->src);
    int n = src->ninputs;
    int64_t count = src->inputs[0]->dims[0] < QF_QZ_VERIFY_SAMPLES ? src->inputs[0]->dims[0] : QF_QZ_VERIFY_SAMPLES;
    const void *rows[QF_QZ_MAX_CALIB];
    QF_TRY(src->read(src, 0, count, rows));
    qf_tensor views[QF_QZ_MAX_CALIB];
    for (int i = 0; i < n; i++) {
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, src->inputs[i]->dims, sizeof dims);
        dims[0] = count;
        qf_tensor_view(&views[i], src->inputs[i]->dtype, src->inputs[i]->ndim, dims, (void *)rows[i]);
    }
    qf_graph *written = NULL;
    QF_TRY(qf_cli_load_staged(tmp, &written));
    qf_verify_options opt = {.tolerance = 1e-6, .ref_name = "quantized", .cand_name = "written", .change = "writing"};
    qf_status st = qf_verify_graphs(s->g, written, views, &opt, res);
    qf_graph_free(written);
    if (st == QF_OK && !res->ok)
        st = qf_error(QF_ERR_MISMATCH, "the written model computes other outputs than the quantized graph: nothing "
                                       "written");
    return st;
}

static int qf_cli_quantize(int argc, char **argv)
{
    qf_qz_args qa = {.max_drop = NAN, .max_excluded = 3};
    int rc = qf_qz_parse(argc, argv, &qa);
    qf_quant_profile p;
    if (rc == QF_EXIT_OK) rc = qf_cli_quant_profile(qa.target, qa.sets, qa.nsets, &p);
    if (rc != QF_EXIT_OK) {
        qf_cli_exclude_free(&qa.exclude);
        return rc;
    }
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    if ((rc = qf_qz_outputs(&qa, &out)) != QF_EXIT_OK) {
        qf_cli_outputs_free(&out);
        qf_cli_exclude_free(&qa.exclude);
        return rc;
    }
    qf_qz_state s = {0};
    char *text = NULL;
    size_t len = 0;
    double t0 = (qf_clock_seconds() * 1e3);
    qf_status st = qf_qz_run(&qa, &p, &s);
    double t1 = (qf_clock_seconds() * 1e3);
    /* Both files or neither: the report is built before anything is written. */
    if (st == QF_OK && qa.report) {
        qf_quantize_report_info info = {.input = qa.in, .output = qa.out, .sets = qa.sets, .nsets = qa.nsets,
                                        .files = qa.calib, .nfiles = qa.ncalib,
                                        .target = s.t.ntrials ? &s.t : NULL};
        st = qf_quantize_model_report_json(&s.m, s.t.ntrials ? &s.t.profile : &p, &info, &text, &len);
    }
    /* Both to their temporary names, then renamed together. */
    const char *tmp = NULL;
    int wi = -1; /* the output being written */
    qf_compare_result cmp = {0};
    if (st == QF_OK) st = qf_cli_outputs_save_model(&out, wi = 0, s.g, &tmp);
    if (st == QF_OK && qa.verify) {
        wi = -1; /* a mismatch is not a write error */
        st = qf_qz_verify(&s, tmp, &cmp);
        for (int i = 0; i < cmp.noutputs; i++)
            printf("verify: output '%s': max abs diff %.3g (written file vs quantized graph) %s\n",
                   cmp.outputs[i].name, cmp.outputs[i].max_abs, cmp.outputs[i].ok ? "ok" : "FAILED");
    }
    if (st == QF_OK && qa.report && (st = qf_cli_outputs_stage(&out, wi = 1, &tmp)) == QF_OK)
        st = qf_file_write_atomic(tmp, text, len);
    if (st != QF_OK) {
        rc = wi >= 0 ? qf_cli_fail_write(&out, wi, st) : qf_cli_fail(st);
    } else if ((rc = qf_cli_outputs_commit(&out)) == QF_EXIT_OK) {
        s.t_save = (qf_clock_seconds() * 1e3) - t1;
        s.t_total = (qf_clock_seconds() * 1e3) - t0;
        qf_qz_summary(&qa, s.t.ntrials ? &s.t.profile : &p, &s);
    }
    qf_cli_outputs_free(&out);
    qf_compare_result_free(&cmp);
    qf_free(text);
    qf_quantize_model_result_free(&s.m);
    qf_quant_target_result_free(&s.t);
    qf_npy_source_free(s.esrc);
    for (int i = 0; i < QF_QZ_MAX_CALIB; i++) qf_npy_close(s.efiles[i]);
    qf_tensor_free(&s.lab);
    qf_free(s.labels);
    qf_npy_source_free(s.src);
    for (int i = 0; i < QF_QZ_MAX_CALIB; i++) qf_npy_close(s.files[i]);
    qf_graph_free(s.g);
    qf_cli_exclude_free(&qa.exclude);
    return rc;
}

const qf_cli_command qf_cli_cmd_quantize = {
    .name = "quantize",
    .summary = "post-training int8 quantization for a target: fold, calibrate, write an ONNX QDQ model",
    .usage = "qfold quantize IN.onnx -o OUT.onnx --calib X.npy [--calib X2.npy ...] [--target neutron|generic]\n"
             "                      [--set RULE=VALUE ...] [--calib-count N] [--batch B] [--seed S]\n"
             "                      [--report R.json] [--exclude NAME|OPTYPE[,...]] [--verify]\n"
             "                      [--eval-data X.npy --eval-labels Y.npy --max-drop P [--max-excluded K]]",
    .details =
        "Folds BatchNorm (pipeline ptq), annotates the graph with the target's int8 patterns,\n"
        "runs the calibration data through it to observe every quantized tensor's range,\n"
        "then writes an ONNX QDQ model (opset >= 13): int8 weights and int32 biases behind\n"
        "DequantizeLinear, QuantizeLinear -> DequantizeLinear on activations. Prints what\n"
        "was quantized, the ops left in float with the reason, and the layers whose int8\n"
        "output is furthest from the float one (SQNR on up to 128 calibration samples):\n"
        "cumulative (the whole int8 model) and local (that layer alone in int8, its inputs\n"
        "the float model's), and the three worst local ones: the layer that loses accuracy\n"
        "has a low local SQNR, the layers after it that only inherit the loss a good one.\n"
        "An output name ending in .tflite gets the int8 TFLite model instead (as `qfold\n"
        "export` writes it from the QDQ model; not with --verify).\n\n"
        "options:\n"
        "  --calib FILE         .npy with the calibration samples of the next graph input, the\n"
        "                       samples first ([N, ...input dims]); one per graph input\n"
        "  --target NAME        neutron (default: NXP eIQ Neutron's scheme) or generic\n"
        "                       (per-channel weights everywhere, min/max observers)\n"
        "  --set RULE=VALUE     override one rule of the target: reduction-scale=own|shared,\n"
        "                       linear-weights / conv-weights=per-tensor|per-channel,\n"
        "                       activation-observer=histogram|minmax|moving-average,\n"
        "                       fuse-activation=on|off, min-scale=<number>,\n"
        "                       equalize=auto|off|per-tensor|all (cross-layer equalization first:\n"
        "                       balance channel ranges between two layers joined by Relu /\n"
        "                       pools; auto, the default: of the rules whose int8 outputs are\n"
        "                       closer to float's on the calibration data than without by\n"
        "                       their margin, per-tensor 1 dB, all 6 dB, the closest is kept;\n"
        "                       the summary names one measured closer that missed it),\n"
        "                       neutron-passes=on|off (neutron: on; the Neutron-ready graph:\n"
        "                       Div by a constant as Mul, Linear + constant Add into the bias,\n"
        "                       an activation moved before a Concat of convs; then grouped\n"
        "                       convs split per group (exact in int8), redundant DQ -> Q folded),\n"
        "                       concat-scale=shared|first (neutron: shared; a Concat's inputs\n"
        "                       quantized like its output, or the first input's qparams),\n"
        "                       matmul-inputs=symmetric|activation (neutron: symmetric; a MatMul\n"
        "                       of two activations with zero point 0 on both inputs),\n"
        "                       bias-correction=off|empirical|analytical|auto (default off; each\n"
        "                       Conv / ConvTranspose / Gemm's mean output error per channel taken\n"
        "                       from its int32 bias; empirical: measured on the calibration data,\n"
        "                       layer after layer; analytical: data-free, (W_q - W) E[x] with E[x]\n"
        "                       from the BatchNorm folded into the layer before (+ ReLU); auto:\n"
        "                       both tried, the better kept when the int8 outputs' SQNR improves;\n"
        "                       quantize only: qat refuses it, its training adapts the biases)\n"
        "                       weight-rounding=nearest|adaround (default nearest; adaround:\n"
        "                       each Conv / ConvTranspose / Gemm's int8 weights rounded up or\n"
        "                       down as learned on the calibration data (AdaRound, Nagel et al.\n"
        "                       2020), layer by layer, its input from the int8 model; kept where\n"
        "                       it reconstructs the layer's float output better; a line per\n"
        "                       layer on stderr), adaround-iters=N (Adam steps per layer,\n"
        "                       default 1000), adaround-reg=X (the rounding regulariser's\n"
        "                       weight, default 0.01; 0: none)\n"
        "  --calib-count N      use the first N samples only\n"
        "  --batch B            samples per calibration run (default 32; AdaRound's batch too)\n"
        "  --seed S             weight-rounding=adaround: the order of its batches (default 0;\n"
        "                       the same seed, the same model byte for byte)\n"
        "  --exclude NAME|OPTYPE[,...]  keep these nodes in float (node names or ONNX op types\n"
        "                       of the model as given, e.g. /head/Gemm or Gemm; repeatable),\n"
        "                       between DequantizeLinear and QuantizeLinear; listed as left\n"
        "                       in float, reason \"excluded\" (report and metadata\n"
        "                       qfold.excluded); an entry matching no node is an error.\n"
        "                       `qfold export` refuses such a node (a float island)\n"
        "  --verify             load the written model back and check that it computes what the\n"
        "                       quantized graph computes (first calibration samples); nothing\n"
        "                       is written when it does not\n"
        "  --max-drop P         an accuracy target: the int8 model's top-1 on --eval-data at most\n"
        "                       P points below the float model's (P >= 0). Quantizes as asked,\n"
        "                       then, while the drop exceeds P, tries in turn\n"
        "                       bias-correction=auto and weight-rounding=adaround (each unless\n"
        "                       on already or given by --set: your choice stands), then keeps\n"
        "                       float the layer with the worst local SQNR (a Conv / Gemm with\n"
        "                       its fused activation), one at a time; a trial is kept when its\n"
        "                       top-1 is higher. A line per trial (what, int8 top-1, drop, kept\n"
        "                       or not), in the report too (accuracy_target). Not reached:\n"
        "                       exit 1, the best trial named, nothing written (model nor report)\n"
        "  --eval-data FILE     .npy of labelled samples of the next graph input (one per input),\n"
        "                       evaluated as `qfold eval` does (int8: its integer groups)\n"
        "  --eval-labels FILE   .npy of their class indices (int64, int32 or uint8)\n"
        "  --max-excluded K     --max-drop: at most K layers tried in float (default 3; 0: none)\n"
        "  --report FILE        a JSON report: the passes, every tensor's scale, zero point and\n"
        "                       observed range, the ops left in float, per-layer SQNR\n"
        "                       (db: cumulative, local_db: local; worst_local_sqnr)\n",
    .fn = qf_cli_quantize,
};
