/* What `qfold train` and `qfold qat` share (train_common.c): the training
 * options (one parser: qf_tr_option per argument, qf_tr_check_args after
 * the loop), the outputs and inputs checked up front, the data (.npy
 * sources scanned for NaN / Inf) and labels, the progress bar on a
 * terminal, one line per epoch, the CSV log and SVG plot, Ctrl-C.
 *
 *   qf_tr_args a = {.c = qf_train_defaults()};
 *   while (qf_cli_args_next(&args)) {
 *       if (qf_tr_option(&args, &a, &rc)) { if (rc) return rc; }
 *       else if (... the command's own options ...) ...
 *       else return qf_cli_args_unknown(&args);
 *   }
 *   rc = qf_tr_check_args(cmd, &a);
 *   qf_tr_outputs(&a, &out); qf_tr_load(&a, &s);
 *   qf_tr_begin(&s, &a.c); st = qf_train(...); qf_tr_end(&s);
 *   qf_tr_stage_logs(&a, &s, &out, &wi);   // after the model's file
 */
#ifndef QF_CLI_TRAIN_COMMON_H
#define QF_CLI_TRAIN_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "qfold/io.h"
#include "qfold/train.h"

#define QF_TR_MAX_DATA 16
#define QF_TR_MAX_FREEZE 256

typedef struct qf_tr_args {
    const char *in, *out, *labels, *val_labels, *log, *plot, *freeze_arg;
    const char *data[QF_TR_MAX_DATA], *val_data[QF_TR_MAX_DATA];
    int ndata, nval;
    qf_train_config c;
    char *freeze_buf;
    const char *freeze[QF_TR_MAX_FREEZE + 1];
} qf_tr_args;

/* What the callbacks record: the rows of the CSV and the curves of the plot. */
typedef struct qf_tr_step {
    int64_t step;
    int epoch;
    double lr, loss, acc, t;
} qf_tr_step;
typedef struct qf_tr_epoch {
    int epoch;
    int64_t step;
    double lr, loss, acc, val_loss, val_acc, t;
} qf_tr_epoch;

typedef struct qf_tr_state {
    const qf_tr_args *a;
    qf_tr_step *steps;
    int64_t nsteps, cap_steps;
    qf_tr_epoch *epochs;
    int nepochs;
    double t0, last_bar, last_lr;
    bool bar, bar_drawn;
    qf_npy_file *files[QF_TR_MAX_DATA], *vfiles[QF_TR_MAX_DATA];
    qf_npy_source *src, *vsrc;
    qf_tensor labels, val_labels;
    qf_graph *g;
} qf_tr_state;

/* Times: core/clock.h (qf_clock_seconds). */
/* v as an integer in [lo, hi] / a finite real; false otherwise. */
bool qf_tr_int(const char *v, int64_t lo, int64_t hi, int64_t *out);
bool qf_tr_real(const char *v, double *out);

/* One argument: IN, -o, the data and labels, every training option, --log,
 * --plot. True when it was one of them (*rc: QF_EXIT_OK, or the usage
 * error's exit status already printed); false to let the command try its
 * own options. */
bool qf_tr_option(qf_cli_args *a, qf_tr_args *ta, int *rc);
/* After the loop: what is required and what goes together; splits --freeze. */
int qf_tr_check_args(const qf_cli_command *cmd, qf_tr_args *ta);
void qf_tr_args_free(qf_tr_args *a);
/* Outputs -o (index 0), --log, --plot added in that order; the inputs checked
 * against them. */
int qf_tr_outputs(const qf_tr_args *a, qf_cli_outputs *out);
/* The model, the data sources (checked, scanned), the labels. */
qf_status qf_tr_load(const qf_tr_args *a, qf_tr_state *s);
/* Before qf_train: c's on_step / on_epoch (progress bar, epoch lines, the
 * curve) with s, SIGINT caught (a stop after the current step). After it:
 * SIGINT released, the bar cleared. */
void qf_tr_begin(qf_tr_state *s, qf_train_config *c);
void qf_tr_end(qf_tr_state *s);
/* Ctrl-C was pressed since qf_tr_begin. */
bool qf_tr_interrupted(void);
/* The --log CSV and --plot SVG staged as outputs *wi + 1, ... (*wi advanced). */
qf_status qf_tr_stage_logs(const qf_tr_args *a, const qf_tr_state *s, qf_cli_outputs *out, int *wi);
void qf_tr_state_free(qf_tr_state *s);

/* The options text of `qfold help train` / `qfold help qat`. */
#define QF_TR_USAGE_OPTIONS                                                                                           \
    "[--epochs N] [--batch B] [--lr LR] [--optimizer sgd|adam|adamw] [--momentum M]\n"                                \
    "                   [--nesterov] [--weight-decay WD] [--schedule constant|step|cosine] [--step-size S]\n"        \
    "                   [--gamma G] [--warmup STEPS] [--clip-norm C] [--loss ce|mse] [--freeze NAME,...]\n"          \
    "                   [--seed S] [--shuffle on|off] [--log CURVE.csv] [--plot CURVE.svg]"
#define QF_TR_OPTIONS_HELP                                                                                            \
    "  --data FILE         .npy with the training samples of the next graph input, samples first\n"                   \
    "                      ([N, ...input dims]); one per graph input\n"                                                \
    "  --labels FILE       .npy of N class indices (int64, int32 or uint8) for --loss ce; float32\n"                   \
    "                      targets of the model's output shape ([N, ...]) for --loss mse\n"                            \
    "  --val-data FILE, --val-labels FILE   validation set: loss and top-1 after every epoch\n"                        \
    "                      (inference mode)\n"                                                                         \
    "  --epochs N          passes over the data (default 1)\n"                                                         \
    "  --batch B           samples per step (default 32); an epoch's last batch may be smaller\n"                      \
    "  --lr LR             learning rate (default 0.01)\n"                                                             \
    "  --optimizer NAME    sgd (default), adam or adamw\n"                                                             \
    "  --momentum M        SGD momentum (default 0); --nesterov: Nesterov momentum\n"                                  \
    "  --weight-decay WD   L2 penalty (sgd, adam) or decoupled decay (adamw); default 0\n"                             \
    "  --schedule NAME     constant (default), step (x gamma every --step-size steps) or cosine\n"                     \
    "                      (to 0 over the run); --warmup STEPS ramps the rate up linearly first\n"                     \
    "  --clip-norm C       clip the gradients to global L2 norm C\n"                                                   \
    "  --loss ce|mse       softmax cross-entropy on class scores [N, classes] (default) or\n"                          \
    "                      mean squared error\n"                                                                       \
    "  --freeze NAMES      comma-separated parameter names that keep their values\n"                                   \
    "  --seed S            seed of the shuffling and of Dropout (default 0): the same seed\n"                          \
    "                      writes the same bytes\n"                                                                    \
    "  --shuffle on|off    shuffle the samples every epoch (default on); off: file order\n"                            \
    "  --log FILE          the curve as CSV: columns kind (step | epoch), epoch, step, lr,\n"                          \
    "                      loss, accuracy, val_loss, val_accuracy, seconds (since the start);\n"                       \
    "                      one row per step (the batch's loss and top-1) and one per epoch\n"                          \
    "                      (means over the epoch, validation figures)\n"                                               \
    "  --plot FILE         an SVG chart of the loss and accuracy curves\n"

#endif
