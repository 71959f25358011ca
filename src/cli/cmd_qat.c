/* qfold qat IN.onnx -o OUT.onnx --data X.npy --labels Y.npy [--val-data XV.npy --val-labels YV.npy]
 *           [--target neutron|generic] [--set RULE=VALUE ...] [--freeze-bn WHEN] [--freeze-observers WHEN]
 *           [--calib-count N] [--qat-bn approx|exact] [--bn-reestimate N]
 *           [--exclude NAME|OPTYPE[,...]] [--keep-qat QAT.onnx]
 *           [every option of qfold train]
 *
 * Quantization-aware training of a float model with BatchNorm (qfold/qat.h):
 * the pipeline qat_prepare (fake_quants for the target, BN simulated as
 * folded into its conv / linear), the observers calibrated on the first
 * --calib-count samples, qf_train with the QAT schedules and `qfold train`'s
 * progress bar, log and plot (train_common.h), with --bn-reestimate the
 * BatchNorm statistics re-estimated, then qat_finalize: the folded
 * int8 QDQ model. With validation data the summary gives the float model's
 * top-1 before and the int8 model's after, run by qfold's integer executor
 * as `qfold eval` runs it.
 *
 * Ctrl-C stops training after the current step; the model trained so far is
 * finalized and written (exit 1), as `qfold train` does. */
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "qfold/io.h"
#include "qfold/qat.h"
#include "qfold/quant.h"
#include "train_common.h"

#define QF_QAT_MAX_SETS 16

typedef struct qf_qat_args {
    qf_tr_args tr;
    const char *target, *keep_qat;
    const char *sets[QF_QAT_MAX_SETS];
    int nsets;
    bool exact;
    qf_qat_when freeze_bn, freeze_observers;
    int64_t calib_count;
    int64_t bn_reestimate; /* samples; 0: off */
    qf_cli_exclude exclude;
} qf_qat_args;

static int qf_qat_when_arg(const qf_cli_command *cmd, const char *opt, const char *v, qf_qat_when *w)
{
    if (qf_qat_when_parse(v, w) == QF_OK) return QF_EXIT_OK;
    return qf_cli_value_error(cmd, "%s takes optimizer steps (500), epochs (2ep) or never, got '%s'", opt, v);
}

static int qf_qat_parse(int argc, char **argv, qf_qat_args *qa)
{
    int rc = QF_EXIT_OK;
    const char *v;
    int64_t k;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_qat, argc, argv);
    const qf_cli_command *cmd = a.cmd;
    while (qf_cli_args_next(&a)) {
        if (qf_tr_option(&a, &qa->tr, &rc)) {
            if (rc != QF_EXIT_OK) return rc;
        } else if (qf_cli_args_value(&a, "--target", NULL, &v)) {
            qa->target = v;
        } else if (qf_cli_args_value(&a, "--set", NULL, &v)) {
            if (a.failed) break;
            if (qa->nsets == QF_QAT_MAX_SETS) return qf_cli_usage_error(cmd, "more than %d --set", QF_QAT_MAX_SETS);
            qa->sets[qa->nsets++] = v;
        } else if (qf_cli_args_value(&a, "--freeze-bn", NULL, &v)) {
            if (a.failed) break;
            if ((rc = qf_qat_when_arg(cmd, "--freeze-bn", v, &qa->freeze_bn)) != QF_EXIT_OK) return rc;
        } else if (qf_cli_args_value(&a, "--freeze-observers", NULL, &v)) {
            if (a.failed) break;
            if ((rc = qf_qat_when_arg(cmd, "--freeze-observers", v, &qa->freeze_observers)) != QF_EXIT_OK) return rc;
        } else if (qf_cli_args_value(&a, "--calib-count", NULL, &v)) {
            if (a.failed) break;
            if (!qf_tr_int(v, 0, INT64_MAX, &k))
                return qf_cli_value_error(cmd, "--calib-count takes a number of samples >= 0, got '%s'", v);
            qa->calib_count = k;
        } else if (qf_cli_args_value(&a, "--qat-bn", NULL, &v)) {
            if (a.failed) break;
            if (strcmp(v, "approx") && strcmp(v, "exact"))
                return qf_cli_value_error(cmd, "--qat-bn takes approx or exact, got '%s'", v);
            qa->exact = strcmp(v, "exact") == 0;
        } else if (qf_cli_args_value(&a, "--bn-reestimate", NULL, &v)) {
            if (a.failed) break;
            if (!qf_tr_int(v, 1, INT64_MAX, &k))
                return qf_cli_value_error(cmd, "--bn-reestimate takes a number of samples >= 1, got '%s'", v);
            qa->bn_reestimate = k;
        } else if (qf_cli_args_value(&a, "--exclude", NULL, &v)) {
            if (a.failed) break;
            if ((rc = qf_cli_exclude_add(cmd, &qa->exclude, v)) != QF_EXIT_OK) return rc;
        } else if (qf_cli_args_value(&a, "--keep-qat", NULL, &v)) {
            qa->keep_qat = v;
        } else {
            return qf_cli_args_unknown(&a);
        }
    }
    if (a.failed) return QF_EXIT_USAGE;
    rc = qf_tr_check_args(cmd, &qa->tr);
    if (rc == QF_EXIT_OK && qa->tr.c.loss != QF_LOSS_CROSS_ENTROPY)
        return qf_cli_usage_error(cmd, "qat trains classifiers: --loss ce only (the int8 accuracy needs classes)");
    return rc;
}

/* A pipeline or pass the run needs, there before any work: a branch
 * without them says so instead of failing after training. */
static int qf_qat_need(const char *what, bool pipeline, const char *name)
{
    if (pipeline ? qf_pipeline_find(name) != NULL : qf_pass_find(name) != NULL) return QF_EXIT_OK;
    return qf_cli_error(QF_EXIT_USAGE, "%s needs the %s '%s', which this build of qfold does not have", what,
                        pipeline ? "pipeline" : "pass", name);
}

/* Top-1 of g on the validation set; `what` names the model in a message. */
static qf_status qf_qat_top1(qf_graph *g, qf_tr_state *s, int64_t batch, const char *what, double *acc)
{
    const qf_data_source *val = qf_npy_source_get(s->vsrc);
    int64_t n = val->inputs[0]->dims[0], hits = 0;
    qf_status st = qf_cli_top1(g, val, s->val_labels.data, batch, &hits);
    if (st != QF_OK) return qf_error_prefix(st, "%s: ", what);
    *acc = n ? (double)hits / (double)n : 0;
    return QF_OK;
}

/* The training graph in its exportable form (the pass qat_export on a copy),
 * written as output `wi` the way the model is (--external-data, the side
 * file above the limit, staged with the others). Its int8 weight Q/DQ pairs
 * can only say int8's [-128, 127]: the range the weights were trained with
 * goes in metadata_props "qfold.weight_range" ("QMIN,QMAX", when every
 * weight of the profile has the same one), which `qfold finalize` reads. */
static qf_status qf_qat_keep(const qf_graph *g, const qf_quant_profile *p, qf_cli_outputs *out, int wi,
                             int *failed_write)
{
    static const char *const passes[] = {"qat_export", NULL};
    qf_graph *copy = NULL;
    QF_TRY(qf_graph_clone(g, &copy));
    qf_pass_options po = {.verify = true};
    const char *tmp = NULL;
    qf_status st = qf_graph_toposort(copy);
    if (st == QF_OK) st = qf_graph_infer_shapes(copy);
    qf_pass_report *rep = NULL;
    if (st == QF_OK) st = qf_passes_run(copy, passes, &po, &rep);
    qf_pass_report_free(rep);
    const qf_qformat *cw = &p->conv_weight, *lw = &p->linear_weight;
    if (st == QF_OK && cw->qmin == lw->qmin && cw->qmax == lw->qmax) {
        char range[32];
        snprintf(range, sizeof range, "%d,%d", (int)cw->qmin, (int)cw->qmax);
        st = qf_onnx_metadata_set(copy, QF_QUANT_WEIGHT_RANGE_KEY, range);
    }
    if (st == QF_OK && (st = qf_cli_outputs_save_model(out, wi, copy, &tmp)) != QF_OK) *failed_write = wi;
    qf_graph_free(copy);
    return st;
}

struct qf_qat_run;
static qf_status qf_qat_record_excluded(qf_graph *g, const struct qf_qat_run *run);

typedef struct qf_qat_run {
    qf_qat_config q;
    qf_quant_profile profile;
    qf_quant_session sess;
    qf_train_result r;
    int nfq;
    int64_t calibrated;
    int reest_bns;               /* --bn-reestimate: the nodes re-estimated, on reest_samples samples */
    int64_t reest_samples;
    double float_acc, int8_acc, seconds;
    bool interrupted;
    int failed_write;            /* the output whose write failed (a full disk), else -1 */
    qf_quantize_result eq;       /* equalize=auto: the PTQ trial that decided it */
    qf_pass_report *prepare_rep, *finalize_rep; /* the Neutron-ready passes' lines come from them */
    char **excluded;             /* --exclude: the nodes it names in the model as loaded */
    int nexcluded;
} qf_qat_run;

/* The excluded nodes the int8 model still has (a BatchNormalization folds
 * away), in metadata QF_QUANT_EXCLUDED_KEY as `quantize` records them. */
static qf_status qf_qat_record_excluded(qf_graph *g, const qf_qat_run *run)
{
    qf_quant_float_node *left = qf_calloc((size_t)run->nexcluded + 1, sizeof *left);
    if (!left) return QF_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < run->nexcluded; i++)
        if (qf_graph_find_node(g, run->excluded[i]))
            left[n++] = (qf_quant_float_node){.name = run->excluded[i], .reason = (char *)QF_QUANT_EXCLUDED};
    qf_status st = qf_onnx_record_excluded(g, left, n);
    qf_free(left);
    return st;
}

static int qf_qat_fake_quants(const qf_graph *g)
{
    int n = 0;
    qf_graph_for_each_node(g, nd) n += nd->op == QF_OP_FAKE_QUANT;
    return n;
}

/* Everything after loading: the float accuracy, prepare, calibrate, train,
 * --keep-qat, finalize, the model staged, the int8 accuracy. */
static qf_status qf_qat_work(qf_qat_args *qa, qf_tr_state *s, qf_qat_run *run, qf_cli_outputs *out)
{
    qf_graph *g = s->g;
    const bool val = qa->tr.nval > 0;
    /* --exclude: resolved on the model as loaded (canonicalize makes a Gemm
     * `linear`); quant_qat_insert leaves those nodes without fake_quants of
     * their own, so they stay float in the int8 model */
    QF_TRY(qf_quant_exclude_resolve(g, qa->exclude.entries, qa->exclude.n, qa->tr.in, &run->excluded, NULL,
                                    &run->nexcluded));
    run->sess.exclude = (const char *const *)run->excluded;
    run->sess.nexclude = run->nexcluded;
    if (val) QF_TRY(qf_qat_top1(g, s, qa->tr.c.batch, "the float model", &run->float_acc));
    /* equalize=auto: cross-layer equalization before QAT when it helps PTQ
     * on the calibration samples (a quantized copy decides; qat_prepare's
     * equalize pass then balances the BatchNorm-kept graph). */
    qf_qequalize eq = run->profile.equalize;
    qf_status st = qf_quant_equalize_choose(g, qf_npy_source_get(s->src),
                                            run->q.calib_count > 0 ? run->q.calib_count : 256, &run->profile, &eq,
                                            &run->eq);
    if (st == QF_ERR_NOMEM) return st;
    if (st != QF_OK) eq = QF_QEQ_OFF; /* a model PTQ cannot take (QAT checks it below): no equalization */
    run->profile.equalize = eq;
    QF_TRY(qf_qat_prepare(g, &run->q, &run->prepare_rep));
    run->nfq = qf_qat_fake_quants(g);
    QF_TRY(qf_qat_calibrate(g, qf_npy_source_get(s->src), &s->labels, &run->q, &run->calibrated));
    qf_tr_begin(s, &run->q.train);
    st = qf_qat_train(g, qf_npy_source_get(s->src), &s->labels, val ? qf_npy_source_get(s->vsrc) : NULL,
                                val ? &s->val_labels : NULL, &run->q, &run->r);
    qf_tr_end(s);
    if (st == QF_ERR_INTERRUPTED) {
        run->interrupted = true;
        st = QF_OK;
    }
    QF_TRY(st);
    /* --bn-reestimate: the running statistics of the model as trained,
     * before --keep-qat's copy and the fold (both take them). */
    if (qa->bn_reestimate > 0)
        QF_TRY(qf_qat_bn_reestimate(g, qf_npy_source_get(s->src), &s->labels, &run->q, qa->bn_reestimate,
                                    &run->reest_bns, &run->reest_samples));
    /* Outputs: 0 the model, then --log, --plot, then --keep-qat. */
    int wi = 0;
    if (qa->keep_qat) {
        int keep = 1 + (qa->tr.log != NULL) + (qa->tr.plot != NULL);
        st = qf_qat_keep(g, &run->profile, out, keep, &run->failed_write);
        if (st != QF_OK) return run->failed_write >= 0 ? st : qf_error_prefix(st, "--keep-qat: ");
    }
    QF_TRY(qf_qat_finalize(g, &run->q, &run->finalize_rep));
    QF_TRY(qf_qat_record_excluded(g, run));
    const char *tmp = NULL;
    /* A write that fails (a full disk) is reported as `train` reports it:
     * naming the output, exit 1. */
    st = qf_cli_outputs_save_model(out, wi, g, &tmp);
    if (st == QF_OK) st = qf_tr_stage_logs(&qa->tr, s, out, &wi);
    if (st != QF_OK) {
        run->failed_write = wi;
        return st;
    }
    if (val) {
        /* As `qfold eval` runs a QDQ model: its conv / Gemm groups in integers. */
        QF_TRY(qf_quant_lower_int8(g, NULL, QF_REQUANT_FIXED_POINT, NULL));
        QF_TRY(qf_qat_top1(g, s, qa->tr.c.batch, "the int8 model", &run->int8_acc));
    }
    return QF_OK;
}

static void qf_qat_summary(const qf_qat_args *qa, const qf_qat_run *run)
{
    const qf_train_result *r = &run->r;
    printf("qfold qat: %s -> %s (target %s, BN %s): %d fake-quants, %lld calibration samples, %d epoch%s, "
           "%lld steps, %.1f s\n",
           qa->tr.in, qa->tr.out, run->profile.name, qa->exact ? "exact" : "approx", run->nfq,
           (long long)run->calibrated, r->epochs_done, r->epochs_done == 1 ? "" : "s", (long long)r->steps,
           run->seconds);
    if (qa->tr.nval)
        printf("val top-1: float %.2f %% before, int8 %.2f %% after (%+.2f pt)\n", 100 * run->float_acc,
               100 * run->int8_acc, 100 * (run->int8_acc - run->float_acc));
    if (qa->bn_reestimate > 0) {
        if (run->reest_bns)
            printf("bn re-estimation: %d BatchNorm%s on %lld samples (mean of the batch statistics, batches of %lld)\n",
                   run->reest_bns, run->reest_bns == 1 ? "" : "s", (long long)run->reest_samples,
                   (long long)qa->tr.c.batch);
        else
            printf("bn re-estimation: no BatchNorm to re-estimate\n");
    }
    if (run->eq.eq_trial) {
        char line[320];
        qf_quant_eq_summary(&run->eq, line, sizeof line);
        printf("equalize: %s (PTQ trial)\n", line);
    }
    qf_cli_target_passes_print(stdout, run->prepare_rep);
    qf_cli_target_passes_print(stdout, run->finalize_rep);
    for (int i = 0; i < run->nexcluded; i++)
        printf("%s '%s'%s", i ? "," : "left float (excluded):", run->excluded[i], i + 1 == run->nexcluded ? "\n" : "");
    if (qa->keep_qat) printf("training graph written to %s\n", qa->keep_qat);
}

static int qf_cli_qat(int argc, char **argv)
{
    qf_qat_args qa = {.tr = {.c = qf_train_defaults()}, .calib_count = -1};
    qf_qat_run run = {.q = qf_qat_defaults(), .failed_write = -1};
    int rc = qf_qat_parse(argc, argv, &qa);
    if (rc == QF_EXIT_OK) rc = qf_cli_quant_profile(qa.target, qa.sets, qa.nsets, &run.profile);
    /* Bias correction is post-training: QAT trains the biases with the
     * quantization noise in place, and its finalize folds BatchNorms the
     * training moved. */
    if (rc == QF_EXIT_OK && run.profile.bias_correction != QF_QBIAS_OFF)
        rc = qf_cli_value_error(&qf_cli_cmd_qat, "--set bias-correction=%s: qat does not apply bias correction (its "
                                "training adapts the biases to the quantization); use it with quantize",
                                qf_quant_bc_rule_name(run.profile.bias_correction));
    /* QAT trains the weights through their fake_quants: nothing to round after. */
    if (rc == QF_EXIT_OK && run.profile.weight_rounding != QF_QROUND_NEAREST)
        rc = qf_cli_usage_error(&qf_cli_cmd_qat, "--set weight-rounding=adaround is for `qfold quantize`: QAT "
                                                 "learns its weights' rounding by training");
    qf_status st = rc == QF_EXIT_OK ? qf_quant_register_passes() : QF_OK;
    if (st != QF_OK) rc = qf_cli_fail(st);
    run.q.prepare = qa.exact ? "qat_prepare_exact" : "qat_prepare";
    /* the Neutron-ready passes of the target (quant.h's neutron_passes) */
    if (run.profile.neutron_passes) {
        run.q.prepare = qa.exact ? "qat_prepare_exact_neutron" : "qat_prepare_neutron";
        run.q.finalize = "qat_finalize_neutron";
    }
    if (rc == QF_EXIT_OK) rc = qf_qat_need(qa.exact ? "--qat-bn exact" : "qat", true, run.q.prepare);
    if (rc == QF_EXIT_OK) rc = qf_qat_need("qat", true, run.q.finalize);
    if (rc == QF_EXIT_OK && qa.keep_qat) rc = qf_qat_need("--keep-qat", false, "qat_export");
    if (rc != QF_EXIT_OK) {
        qf_tr_args_free(&qa.tr);
        qf_cli_exclude_free(&qa.exclude);
        return rc;
    }
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    qf_tr_state s = {.a = &qa.tr};
    if ((rc = qf_tr_outputs(&qa.tr, &out)) != QF_EXIT_OK) goto done;
    if (qa.keep_qat && (rc = qf_cli_outputs_add_model(&out, "--keep-qat", qa.keep_qat)) != QF_EXIT_OK) goto done;
    double t0 = qf_clock_seconds();
    run.sess.profile = &run.profile;
    run.q.passes.user = &run.sess;
    run.q.train = qa.tr.c;
    run.q.freeze_bn = qa.freeze_bn;
    run.q.freeze_observers = qa.freeze_observers;
    if (qa.calib_count >= 0) run.q.calib_count = qa.calib_count;
    st = qf_tr_load(&qa.tr, &s);
    if (st == QF_OK) st = qf_qat_work(&qa, &s, &run, &out);
    run.seconds = qf_clock_seconds() - t0;
    if (st == QF_ERR_NUMERIC || st == QF_ERR_DIVERGED) {
        rc = qf_cli_error(qf_cli_exit_code(st), "%s; nothing written", qf_error_message());
        goto done;
    }
    if (st != QF_OK) {
        rc = run.failed_write >= 0 ? qf_cli_fail_write(&out, run.failed_write, st) : qf_cli_fail(st);
        goto done;
    }
    if ((rc = qf_cli_outputs_commit(&out)) != QF_EXIT_OK) goto done;
    if (run.interrupted) {
        rc = qf_cli_error(QF_EXIT_FAIL, "interrupted at step %lld; model trained so far finalized and written to %s",
                          (long long)run.r.steps, qa.tr.out);
        goto done;
    }
    qf_qat_summary(&qa, &run);
done:
    qf_cli_outputs_free(&out);
    qf_tr_state_free(&s);
    qf_tr_args_free(&qa.tr);
    qf_quant_annotation_free(run.sess.annotation);
    qf_quantize_result_free(&run.eq);
    qf_pass_report_free(run.prepare_rep);
    qf_pass_report_free(run.finalize_rep);
    qf_quant_exclude_free(run.excluded, NULL, run.nexcluded);
    qf_cli_exclude_free(&qa.exclude);
    return rc;
}

const qf_cli_command qf_cli_cmd_qat = {
    .name = "qat",
    .summary = "train with fake-quantization for a target (BatchNorm folding simulated), write the int8 QDQ model",
    .usage = "qfold qat IN.onnx -o OUT.onnx --data X.npy --labels Y.npy [--val-data XV.npy --val-labels YV.npy]\n"
             "                 [--target neutron|generic] [--set RULE=VALUE ...] [--freeze-bn WHEN]\n"
             "                 [--freeze-observers WHEN] [--calib-count N] [--qat-bn approx|exact]\n"
             "                 [--bn-reestimate N] [--exclude NAME|OPTYPE[,...]] [--keep-qat QAT.onnx]\n"
             "                 " QF_TR_USAGE_OPTIONS,
    .details =
        "Quantization-aware training of a float model with BatchNorm: fake-quantizes what the\n"
        "target quantizes (moving-average min/max observers on activations, averaging constant\n"
        "0.01; the target's weight scheme, per channel or per tensor), simulates every BatchNorm\n"
        "as folded into the conv / linear before it (the weight fake-quant sees W * gamma /\n"
        "sqrt(running_var + eps), as PyTorch's ConvBn2d / LinearBn1d), calibrates the observers,\n"
        "trains with `qfold train`'s engine, then removes the simulation, folds BatchNorm through\n"
        "the weight fake-quants and writes the int8 QDQ model. With --val-data it prints the\n"
        "float model's top-1 before and the int8 model's after (qfold's integer executor, as\n"
        "`qfold eval`). An output name ending in .tflite gets the int8 TFLite model instead (as\n"
        "`qfold export` writes it).\n\n"
        "options:\n"
        "  --target NAME       neutron (default: NXP eIQ Neutron's scheme) or generic\n"
        "  --set RULE=VALUE    override one rule of the target (see qfold help quantize; not\n"
        "                      bias-correction, which is post-training only)\n"
        "  --exclude NAME|OPTYPE[,...]   keep these nodes (node names or ONNX op types) in float,\n"
        "                      no fake_quants of their own (see qfold help quantize)\n"
        "  --calib-count N     samples (the first N of --data, file order) the observers see before\n"
        "                      training (default 256; 0: none, the first training step initializes\n"
        "                      them, as PyTorch's prepare_qat_fx does); training-mode forwards\n"
        "                      with every BatchNorm on its running statistics and frozen, no\n"
        "                      optimizer step\n"
        "  --freeze-bn WHEN    from then on BatchNorm normalizes with its running statistics and\n"
        "                      stops updating them (PyTorch's freeze_bn_stats)\n"
        "  --freeze-observers WHEN   from then on the observers stop: scales and zero points stay\n"
        "                      (PyTorch's disable_observer)\n"
        "                      WHEN: N (after N optimizer steps), Nep (after N epochs), never\n"
        "                      (default); 0 / 0ep: from the start\n"
        "  --qat-bn approx|exact   the simulated fusion: PyTorch's (default) or the exact two-pass\n"
        "                      method for channels with gamma = 0 or a tiny running variance\n"
        "  --bn-reestimate N   after training, before the fold: every BatchNorm's running statistics\n"
        "                      re-estimated on the first N samples of --data (file order, batches\n"
        "                      of --batch): the fake-quantized model's training forward with the\n"
        "                      weights and observers fixed, the plain mean of the batch statistics\n"
        "                      (as AIMET's reestimate_bn_stats; PyTorch's BN with momentum None);\n"
        "                      N >= 1 (default: off)\n"
        "  --keep-qat FILE     also write the training graph (Q/DQ pairs and the simulated fusion,\n"
        "                      in the form PyTorch exports a QAT model; the weights' trained range\n"
        "                      in metadata_props \"qfold.weight_range\" for qfold finalize; with\n"
        "                      --external-data its side file is FILE.data)\n" QF_TR_OPTIONS_HELP "\n"
        "Ctrl-C stops training after the current step; the model trained so far is finalized and\n"
        "written (exit status 1). A loss that becomes NaN or infinite writes nothing (exit 2).\n",
    .fn = qf_cli_qat,
};
