/* qfold — quantization-aware training: prepare, calibrate, train with the
 * QAT schedules, finalize.
 *
 *   qf_quant_session s = {.profile = qf_quant_profile_find("neutron")};  // qfold/quant.h
 *   QF_TRY(qf_quant_register_passes());            // quant_qat_insert, the convert
 *   qf_qat_config q = qf_qat_defaults();
 *   q.passes.user = &s;
 *   q.train.epochs = 3;
 *   QF_TRY(qf_qat_when_parse("2ep", &q.freeze_bn));
 *   QF_TRY(qf_qat_prepare(g, &q, NULL));           // fake_quants + simulated BN fusion
 *   QF_TRY(qf_qat_calibrate(g, &data, &labels, &q, NULL));
 *   QF_TRY(qf_qat_train(g, &data, &labels, NULL, NULL, &q, &r));
 *   QF_TRY(qf_qat_bn_reestimate(g, &data, &labels, &q, 512, NULL, NULL)); // optional
 *   QF_TRY(qf_qat_finalize(g, &q, NULL));          // the folded int8 QDQ model
 *   qf_quant_annotation_free(s.annotation);
 *
 * The train layer does not name the quantizer (quant and train sit side by
 * side, docs/ARCHITECTURE.md): its passes are reached by pipeline name
 * through the pass manager, its state in q.passes.user; the caller (the
 * `qat` command) registers them and owns the session.
 */
#ifndef QFOLD_QAT_H
#define QFOLD_QAT_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/pass.h"
#include "qfold/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When a schedule switches: never, after `at` optimizer steps, or after `at`
 * epochs (at 0: before the first step). */
typedef enum qf_qat_unit { QF_QAT_NEVER = 0, QF_QAT_STEPS = 1, QF_QAT_EPOCHS = 2 } qf_qat_unit;
typedef struct qf_qat_when {
    qf_qat_unit unit;
    int64_t at;
} qf_qat_when;

/* "500" (optimizer steps), "2ep" (epochs), "never". QF_ERR_INVALID otherwise. */
qf_status qf_qat_when_parse(const char *s, qf_qat_when *out);
/* The optimizer steps after which w switches, for an epoch of
 * steps_per_epoch steps; -1 for never. */
int64_t qf_qat_when_step(const qf_qat_when *w, int64_t steps_per_epoch);

typedef struct qf_qat_config {
    qf_train_config train;    /* qf_train's; on_step / on_epoch are the caller's (progress, log) */
    const char *prepare;      /* pipeline before training ("qat_prepare", or "qat_prepare_exact") */
    const char *finalize;     /* pipeline after training ("qat_finalize") */
    qf_pass_options passes;   /* both pipelines' options: user = the quantizer's session */
    int64_t calib_count;      /* samples the observers see before training (0: none) */
    qf_qat_when freeze_bn;        /* BN on running statistics, no more updates (freeze_bn_stats) */
    qf_qat_when freeze_observers; /* fake_quant observers stop (disable_observer): scales fixed */
} qf_qat_config;

/* Defaults: qf_train_defaults(), "qat_prepare" / "qat_finalize", verify on,
 * 256 calibration samples, schedules never. */
qf_qat_config qf_qat_defaults(void);

/* The prepare pipeline on g (a float inference graph with BN): fake_quants
 * on what the target quantizes, BN simulated as folded into the conv /
 * linear before it. *rep (may be NULL) gets the pass report. */
qf_status qf_qat_prepare(qf_graph *g, const qf_qat_config *c, qf_pass_report **rep);

/* Calibration of the observers before training: the training forward (no
 * backward, no optimizer step) on the first c->calib_count samples of data
 * in file order, in batches of c->train.batch, every BatchNorm frozen
 * (qfold_frozen: it normalizes with its running statistics and leaves them
 * alone), so the observers see the activations of the model as it will be
 * deployed and the running statistics do not move. The fake_quants observe
 * and fake-quantize as in training. *samples (may be NULL) gets the count
 * run. A calib_count of 0 does nothing. */
qf_status qf_qat_calibrate(qf_graph *g, const qf_data_source *data, const qf_tensor *labels, const qf_qat_config *c,
                           int64_t *samples);

/* qf_train with the QAT schedules: after the step c->freeze_bn names every
 * BatchNorm gets qfold_frozen = 1 (read at run time by the training plan:
 * running statistics, no updates, PyTorch's freeze_bn_stats), after the step
 * c->freeze_observers names every fake_quant gets observe = 0 (torch's
 * disable_observer); then the caller's on_step. A switch at step 0 applies
 * before the first step. On return (whatever happened) the BatchNorms lose
 * qfold_frozen again: the graph is an inference graph. */
qf_status qf_qat_train(qf_graph *g, const qf_data_source *data, const qf_tensor *labels, const qf_data_source *val,
                       const qf_tensor *val_labels, const qf_qat_config *c, qf_train_result *res);

/* BatchNorm re-estimation after training (AIMET's reestimate_bn_stats):
 * the running statistics of every BatchNorm (and of the exact form's
 * qat_bn_stats) replaced by the plain mean of the batch statistics over the
 * first `count` samples of data in file order, in batches of c->train.batch:
 * the training forward of the fake-quantized model (BatchNorm on batch
 * statistics, no backward, no optimizer step, the observers stopped so the
 * scales stay as trained), each batch weighing the same, as PyTorch's BN
 * with momentum None (cumulative average), whatever the statistics were
 * before. A last batch of one sample is left out (no batch variance). Each
 * node's momentum and each fake_quant's observe are put back afterwards.
 * Call it between qf_qat_train and qf_qat_finalize. *bns (may be NULL) gets
 * the number of nodes re-estimated, *samples (may be NULL) the samples run;
 * a count of 0 or a graph without BatchNorm does nothing. */
qf_status qf_qat_bn_reestimate(qf_graph *g, const qf_data_source *data, const qf_tensor *labels,
                               const qf_qat_config *c, int64_t count, int *bns, int64_t *samples);

/* The finalize pipeline: the simulation removed, BN folded through the
 * weight fake-quants, the fake_quants converted to QDQ. A fake_quant or
 * QAT op left afterwards is QF_ERR_UNSUPPORTED naming it. */
qf_status qf_qat_finalize(qf_graph *g, const qf_qat_config *c, qf_pass_report **rep);

/* The run-time switches: qfold_frozen on every BatchNormalization, observe on
 * every fake_quant. Return how many nodes they set. */
int qf_qat_set_bn_frozen(qf_graph *g, bool frozen);
int qf_qat_set_observe(qf_graph *g, bool observe);

#ifdef __cplusplus
}
#endif
#endif
