/* qfold train IN.onnx -o OUT.onnx --data X.npy --labels Y.npy [--val-data XV.npy --val-labels YV.npy]
 *             [--epochs N] [--batch B] [--lr LR] [--optimizer sgd|adam|adamw] ... [--log CURVE.csv]
 *             [--plot CURVE.svg]
 *
 * Trains the model's parameters on a labelled data set (qf_train) and writes
 * the trained model in inference form. The data is read from the .npy files
 * a sample at a time (never in memory whole); the labels are loaded.
 *
 * Ctrl-C (SIGINT) stops after the current step: the model trained so far (and
 * the log and plot) are written, atomically as always, and qfold exits 1 with
 * "interrupted at step N; model trained so far written to OUT". A second
 * Ctrl-C ends qfold at once (nothing written). */
#include <stdio.h>

#include "core/clock.h"
#include "train_common.h"

/* --- the command -------------------------------------------------------------------------- */

static int qf_tr_parse(int argc, char **argv, qf_tr_args *ta)
{
    int rc = QF_EXIT_OK;
    qf_cli_args a = qf_cli_args_begin(&qf_cli_cmd_train, argc, argv);
    while (qf_cli_args_next(&a)) {
        if (!qf_tr_option(&a, ta, &rc)) return qf_cli_args_unknown(&a);
        if (rc != QF_EXIT_OK) return rc;
    }
    if (a.failed) return QF_EXIT_USAGE;
    return qf_tr_check_args(a.cmd, ta);
}

/* The model, then the log and the plot, to their temporary names, then all
 * renamed together. */
static int qf_tr_write(const qf_tr_args *a, const qf_tr_state *s, qf_cli_outputs *out)
{
    const char *tmp = NULL;
    int wi = 0;
    qf_status st = qf_cli_outputs_save_model(out, wi, s->g, &tmp);
    if (st == QF_OK) st = qf_tr_stage_logs(a, s, out, &wi);
    if (st != QF_OK) return qf_cli_fail_write(out, wi, st);
    return qf_cli_outputs_commit(out);
}

static int qf_cli_train(int argc, char **argv)
{
    qf_tr_args a = {.c = qf_train_defaults()};
    int rc = qf_tr_parse(argc, argv, &a);
    if (rc != QF_EXIT_OK) {
        qf_tr_args_free(&a);
        return rc;
    }
    qf_cli_outputs out;
    qf_cli_outputs_init(&out);
    qf_tr_state s = {.a = &a};
    if ((rc = qf_tr_outputs(&a, &out)) != QF_EXIT_OK) goto done;
    qf_status st = qf_tr_load(&a, &s);
    qf_train_result r = {0};
    if (st == QF_OK) {
        qf_tr_begin(&s, &a.c);
        st = qf_train(s.g, qf_npy_source_get(s.src), &s.labels, a.nval ? qf_npy_source_get(s.vsrc) : NULL,
                      a.nval ? &s.val_labels : NULL, &a.c, &r);
        qf_tr_end(&s);
    }
    if (st == QF_ERR_NUMERIC || st == QF_ERR_DIVERGED) {
        rc = qf_cli_error(qf_cli_exit_code(st), "%s; nothing written", qf_error_message());
        goto done;
    }
    if (st != QF_OK && st != QF_ERR_INTERRUPTED) {
        rc = qf_cli_fail(st);
        goto done;
    }
    if ((rc = qf_tr_write(&a, &s, &out)) != QF_EXIT_OK) goto done;
    if (st == QF_ERR_INTERRUPTED) {
        rc = qf_cli_error(QF_EXIT_FAIL, "interrupted at step %lld; model trained so far written to %s",
                          (long long)r.steps, a.out);
        goto done;
    }
    char num[32];
    printf("qfold train: %s -> %s: %d parameter tensors (%s weights), %d epoch%s, %lld steps, %.1f s\n", a.in, a.out,
           r.nparams, qf_cli_thousands(r.nweights, num, sizeof num), r.epochs_done, r.epochs_done == 1 ? "" : "s",
           (long long)r.steps, qf_clock_seconds() - s.t0);
done:
    qf_cli_outputs_free(&out);
    qf_tr_state_free(&s);
    qf_tr_args_free(&a);
    return rc;
}

const qf_cli_command qf_cli_cmd_train = {
    .name = "train",
    .summary = "train a model's parameters on a labelled data set (SGD / Adam / AdamW) and write it",
    .usage = "qfold train IN.onnx -o OUT.onnx --data X.npy --labels Y.npy [--val-data XV.npy --val-labels YV.npy]\n"
             "                   " QF_TR_USAGE_OPTIONS,
    .details =
        "Trains every parameter of the model (weights, biases, BatchNorm scale and shift; BatchNorm\n"
        "running statistics are updated as PyTorch's training mode does) on the data, then writes\n"
        "the trained model in inference form. The arithmetic follows PyTorch 1.13 (torch.optim.SGD /\n"
        "Adam / AdamW, the LR schedulers, clip_grad_norm_), so a run can be compared with PyTorch's\n"
        "step by step. Prints one line per epoch; a progress bar on a terminal.\n\n"
        "options:\n" QF_TR_OPTIONS_HELP "\n"
        "Ctrl-C stops after the current step, writes the model trained so far (and the log and\n"
        "plot) and exits with status 1. A loss that becomes NaN or infinite stops training with\n"
        "the step's number; nothing is written (exit status 2).\n",
    .fn = qf_cli_train,
};
