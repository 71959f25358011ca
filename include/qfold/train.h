/* qfold — training: optimizers, learning-rate schedules, the training loop.
 *
 *   qf_train_config c = qf_train_defaults();
 *   c.epochs = 2; c.batch = 64; c.optim.kind = QF_OPTIM_ADAM; c.optim.lr = 1e-3;
 *   qf_train_result r;
 *   QF_TRY(qf_train(g, &train_src, &train_labels, NULL, NULL, &c, &r));
 *   // g's parameters and BN running statistics now hold the trained values
 *
 * The gradients come from the backward tape (qf_grad_plan, qfold/exec.h);
 * losses are ops of the graph (SoftmaxCrossEntropyLoss, mse_loss: ops/loss.c)
 * that qf_train appends to the graph's output 0 for the run (and removes
 * afterwards), so the tape runs through them like any other node. Arithmetic follows PyTorch 1.13
 * (torch.optim.SGD / Adam / AdamW, torch.nn.utils.clip_grad_norm_), so that
 * a run can be compared with PyTorch's step by step.
 */
#ifndef QFOLD_TRAIN_H
#define QFOLD_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/exec.h"
#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- optimizers (optim.c) -------------------------------------------------- */

typedef enum qf_optim_kind { QF_OPTIM_SGD = 0, QF_OPTIM_ADAM = 1, QF_OPTIM_ADAMW = 2 } qf_optim_kind;

typedef struct qf_optim_config {
    qf_optim_kind kind;
    double lr;             /* the base learning rate (> 0); a schedule scales it */
    double momentum;       /* SGD: 0 = plain SGD */
    double dampening;      /* SGD (torch's default 0) */
    bool nesterov;         /* SGD: needs momentum > 0, dampening 0 */
    double weight_decay;   /* SGD, Adam: L2 added to the gradient; AdamW: decoupled */
    double beta1, beta2;   /* Adam(W): 0.9, 0.999 when both are 0 */
    double eps;            /* Adam(W): 1e-8 when 0 */
} qf_optim_config;

typedef struct qf_optimizer qf_optimizer;

/* An optimizer over params[0 .. n-1] (float32 tensors updated in place: their
 * data must be writable by the caller). State (momentum buffers, Adam's
 * moments) is allocated here, zeroed. QF_ERR_INVALID with one line for a
 * bad config (lr <= 0, nesterov without momentum, beta outside [0, 1), ...). */
qf_status qf_optim_init(qf_optimizer **out, const qf_optim_config *c, int n, qf_tensor *const *params);
/* One step with gradients grads[0 .. n-1] (the params' shapes) at learning
 * rate lr (the schedule's value for this step). A parameter whose grads[i]
 * is NULL (frozen) is left alone. */
qf_status qf_optim_step(qf_optimizer *o, const qf_tensor *const *grads, double lr);
void qf_optim_free(qf_optimizer *o);
const char *qf_optim_name(qf_optim_kind k); /* "sgd", "adam", "adamw" */
qf_status qf_optim_parse(const char *s, qf_optim_kind *out);

/* Scales grads so that their global L2 norm (over every element of every
 * non-NULL tensor, summed in double) is at most max_norm, as
 * torch.nn.utils.clip_grad_norm_ (coefficient max_norm / (norm + 1e-6),
 * applied when < 1). Returns the norm before clipping. */
double qf_clip_grad_norm(qf_tensor *const *grads, int n, double max_norm);

/* --- learning-rate schedules (schedule.c) ------------------------------------ */

typedef enum qf_sched_kind { QF_SCHED_CONSTANT = 0, QF_SCHED_STEP = 1, QF_SCHED_COSINE = 2 } qf_sched_kind;

typedef struct qf_schedule {
    qf_sched_kind kind;
    int64_t warmup;        /* steps 0 .. warmup-1 run at lr * (step + 1) / warmup; the
                              schedule then starts at its step 0 */
    int64_t step_size;     /* STEP: lr *= gamma every step_size steps (torch StepLR) */
    double gamma;          /* STEP: 0.1 when 0 */
    double min_lr;         /* COSINE: eta_min */
    int64_t total;         /* COSINE: T_max in steps after warm-up (qf_train sets it to the run's) */
} qf_schedule;

/* The learning rate at optimizer step `step` (0-based) for base rate lr. */
double qf_schedule_lr(const qf_schedule *s, double lr, int64_t step);
const char *qf_sched_name(qf_sched_kind k); /* "constant", "step", "cosine" */
qf_status qf_sched_parse(const char *s, qf_sched_kind *out);

/* --- the training loop (train.c) ---------------------------------------------- */

typedef enum qf_loss_kind { QF_LOSS_CROSS_ENTROPY = 0, QF_LOSS_MSE = 1 } qf_loss_kind;

/* Per optimizer step, after it (progress bars, logs, QAT's schedules). A
 * status other than QF_OK stops training (the model keeps what the steps so
 * far made); QF_ERR_INTERRUPTED is how Ctrl-C stops it. */
typedef struct qf_train_step_info {
    int epoch;             /* 0-based */
    int64_t step;          /* optimizer steps so far, 1-based after the step */
    int64_t steps_per_epoch;
    int64_t total_steps;
    double loss;           /* this batch's mean loss */
    double accuracy;       /* this batch's top-1 (cross-entropy only; else -1) */
    double lr;
} qf_train_step_info;
typedef qf_status (*qf_train_step_fn)(void *ud, qf_train_step_info *info);

/* Per epoch, after validation. */
typedef struct qf_train_epoch_info {
    int epoch;
    double train_loss, train_accuracy;   /* means over the epoch's samples */
    double val_loss, val_accuracy;       /* -1 without validation data */
    double seconds;
} qf_train_epoch_info;
typedef qf_status (*qf_train_epoch_fn)(void *ud, const qf_train_epoch_info *info);

typedef struct qf_train_config {
    int epochs;            /* >= 1 */
    int64_t batch;         /* >= 1; an epoch's last, shorter batch runs too (torch's drop_last=False) */
    qf_optim_config optim;
    qf_schedule sched;
    qf_loss_kind loss;
    uint64_t seed;         /* shuffling and Dropout */
    bool shuffle;          /* off: the data in file order every epoch */
    double clip_norm;      /* > 0: clip gradients to this global norm */
    const char *const *freeze; /* parameter names kept fixed (NULL-terminated; may be NULL) */
    bool forward_only;     /* each step is the training forward alone (BN and fake_quant update their
                              buffers; no backward, no optimizer step, lr reported as 0): QAT's
                              calibration of the observers */
    qf_train_step_fn on_step;
    qf_train_epoch_fn on_epoch;
    void *ud;
} qf_train_config;

qf_train_config qf_train_defaults(void);

typedef struct qf_train_result {
    int64_t steps;
    int epochs_done;
    double final_loss;
    double val_accuracy;   /* last epoch's, -1 without validation data */
    int nparams;           /* parameters trained (not frozen) */
    int64_t nweights;      /* their elements */
} qf_train_result;

/* Train g (an inference graph: float inputs [N, ...], one data source input
 * per graph input; output 0 the logits [N, classes] for cross-entropy or the
 * prediction for MSE) on the samples of `data` with `labels` (int64 [N]
 * class indices in [0, classes) for cross-entropy, float32 [N, output 0's
 * sample dims] for MSE). g's parameters (and BN running statistics) are
 * updated in place: on success and on a stop by on_step / on_epoch (Ctrl-C),
 * g holds the model as trained so far. When training diverges
 * (QF_ERR_DIVERGED "step N: ...": the loss or a gradient NaN / Inf, numeric
 * trouble in the training forward) g is left as it was before the failing
 * step, except after an update that made a parameter non-finite ("step N:
 * parameter 'P' is not finite after the update") or a non-finite validation
 * loss ("epoch E (step N): validation loss is nan"): then g holds non-finite
 * or useless weights and must not be written. val / val_labels may
 * be NULL (validation: after each epoch, inference mode).
 *
 * For the run, g gets a graph input "qf_train_labels" and the loss node
 * "qf_train_loss" reading output 0, and its inputs' batch dimension is set
 * to the batch size (also when the model fixes it); all of it is undone
 * before qf_train returns, whatever happened: g keeps its inputs, outputs and
 * shapes. Payloads of parameters and buffers that are borrowed and not
 * writable are copied first (the caller's bytes are never written). A BN's
 * running statistic shared with other inputs (torch.onnx.export merges a
 * fresh BN's equal initializers, read through Identity nodes) gets a buffer
 * of its own, named as that Identity's output. A name in c->freeze that is
 * not a parameter is QF_ERR_INVALID. Each epoch's order is a Fisher-Yates
 * shuffle (i from N-1 down to 1, swap i with j uniform in [0, i]) of the
 * previous epoch's order (the first: 0 .. N-1), driven by splitmix64 seeded
 * once with c->seed, uniform integers by rejecting draws below 2^64 mod
 * (i+1); with c->shuffle off, file order every epoch. */
qf_status qf_train(qf_graph *g, const qf_data_source *data, const qf_tensor *labels, const qf_data_source *val,
                   const qf_tensor *val_labels, const qf_train_config *c, qf_train_result *res);

#ifdef __cplusplus
}
#endif
#endif
