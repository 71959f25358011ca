/* qfold — bias correction of a quantized model (src/quant/bias_correct.c).
 *
 * qf_quantize runs it after the conversion to QDQ when the profile's
 * bias_correction rule is not off (`--set bias-correction=...`); a program
 * can run it on a QDQ graph q and the float graph f it was converted from:
 *
 *   qf_quant_bc_stats st;
 *   QF_TRY(qf_quant_bias_correct(q, f, data, 512, 32, &st));       // empirical
 *
 *   qf_quant_bn_stats *bn;                                         // data-free
 *   QF_TRY(qf_quant_bn_stats_collect(g, &bn));   // g: before the BatchNorm fold
 *   ... fold (pipeline ptq), quantize into q, f the float graph converted ...
 *   QF_TRY(qf_quant_bias_correct_analytic(q, f, bn, &st));
 *   qf_quant_bn_stats_free(bn);
 */
#ifndef QFOLD_QUANT_BIAS_H
#define QFOLD_QUANT_BIAS_H

#include <stdint.h>

#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rule (`--set bias-correction=`): for every quantized Conv /
 * ConvTranspose / Gemm (or linear), a mean error per output channel taken
 * from its int32 bias (a layer without a bias gets one).
 *   EMPIRICAL:  the mean over the calibration data of (its output in the QDQ
 *               model - its output in the float model), layer after layer
 *               (each layer's input is the already corrected QDQ model's).
 *   ANALYTICAL: data-free (Nagel et al. 2019): (W_q - W) E[x], E[x] from the
 *               BatchNorm the fold consumed into the layer producing x (its
 *               output ~ N(beta, gamma^2)), through a ReLU / ReLU6 / Clip
 *               (the clipped normal's mean), average pools and a Flatten;
 *               layers whose input has no such statistics are left alone.
 *   AUTO:       both tried; the one whose graph outputs' SQNR against float
 *               on the calibration data is higher is kept when it beats the
 *               uncorrected model's by more than QF_QUANT_BC_MARGIN_DB. */
typedef enum qf_qbias { QF_QBIAS_OFF = 0, QF_QBIAS_EMPIRICAL, QF_QBIAS_ANALYTICAL, QF_QBIAS_AUTO } qf_qbias;

/* What one bias correction did. */
typedef struct qf_quant_bc_stats {
    int layers;           /* biases corrected */
    int added;            /* of those, biases added (the layer had none) */
    int skipped;          /* Conv / ConvTranspose / Gemm left as they were (no float counterpart or
                           * form; analytical: no BatchNorm statistics for the input either) */
    int passes;           /* runs of q over the data (0 for analytical) */
    int64_t samples;      /* samples per run (0 for analytical) */
    double max_abs_error; /* the largest |mean error| corrected, in output units */
} qf_quant_bc_stats;

/* Empirical: q is the QDQ graph qf_quant_convert made from the float graph
 * f (f's values keep their names in q). For every Conv / ConvTranspose /
 * Gemm / linear of q with int8 weights behind a DequantizeLinear and its
 * output in f, the mean error per output channel of its output (q - f, over
 * the first max_samples of data, `batch` at a time) is taken from its int32
 * bias, in stages of layers that do not depend on one another, so that each
 * layer's error is measured with the corrections of the layers before it in
 * place; a layer without a bias gets one. f is run once, q once per stage.
 * q is rewritten in place (its shapes inferred again). */
qf_status qf_quant_bias_correct(qf_graph *q, qf_graph *f, const qf_data_source *data, int64_t max_samples,
                                int64_t batch, qf_quant_bc_stats *stats);

/* The statistics of the BatchNorms a fold will consume: one entry per
 * inference BatchNormalization whose input is produced by a Conv /
 * ConvTranspose / Gemm / MatMul / linear and read by it alone, keyed by
 * its output's name and its input's (the folded layer's output takes one
 * of them): the
 * folded output's expected distribution per channel, mean beta and std
 * |gamma| sqrt(var / (var + eps)). `anchor` (qf_quant_bn_stats_anchor):
 * the folded producer's bias per channel as quantization starts, so that a
 * later per-channel rescaling (cross-layer equalization) is seen in the
 * float graph's bias and followed. */
typedef struct qf_quant_bn_entry {
    char *name, *input; /* the BatchNorm's output and input */
    int64_t channels;
    double *mean, *std;
    double *anchor; /* NULL until anchored, or when the producer has no constant bias */
} qf_quant_bn_entry;
typedef struct qf_quant_bn_stats {
    qf_quant_bn_entry *entries;
    int count;
} qf_quant_bn_stats;
/* g: a float graph before the ptq pipeline. *out: never NULL on QF_OK (may hold 0 entries). */
qf_status qf_quant_bn_stats_collect(const qf_graph *g, qf_quant_bn_stats **out);
/* A copy of s with each entry's anchor read from g (the folded float graph). */
qf_status qf_quant_bn_stats_anchor(const qf_quant_bn_stats *s, const qf_graph *g, qf_quant_bn_stats **out);
void qf_quant_bn_stats_free(qf_quant_bn_stats *s);

/* Analytical (data-free): for every layer of q as qf_quant_bias_correct
 * finds them (ConvTranspose excepted: its taps per output position vary)
 * whose input in f comes, through ReLU / ReLU6 / Clip, AveragePool /
 * GlobalAveragePool and Flatten / Reshape to [N, K], from a value bn
 * describes: e[c] = sum over the weights of output channel c of
 * (W_q - W) E[x] (padding ignored), taken from its int32 bias. bn must be
 * anchored (qf_quant_bn_stats_anchor) on the graph f was made from. */
qf_status qf_quant_bias_correct_analytic(qf_graph *q, const qf_graph *f, const qf_quant_bn_stats *bn,
                                         qf_quant_bc_stats *stats);

/* The mean error per output channel of every layer bias correction would
 * correct, measured in one run of q as it stands (a copy of it) and one of
 * f; bias_scale: the int32 bias's scale per channel (tests: after the
 * correction each |mean_error| is within about half of it on the same
 * data). */
typedef struct qf_quant_bias_error {
    char *name;          /* the layer (node of q) */
    int64_t channels;
    double *mean_error;  /* channels entries: mean(q output) - mean(f output) */
    double *bias_scale;  /* channels entries */
} qf_quant_bias_error;
qf_status qf_quant_bias_errors(qf_graph *q, qf_graph *f, const qf_data_source *data, int64_t max_samples,
                               int64_t batch, qf_quant_bias_error **out, int *count);
void qf_quant_bias_errors_free(qf_quant_bias_error *e, int count);

#ifdef __cplusplus
}
#endif

#endif
