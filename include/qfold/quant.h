/* qfold — quantization: qparams and observers.
 *
 * An observer watches the float tensors that flow through one point of the
 * graph during calibration (or QAT) and turns what it saw into quantization
 * parameters (scale, zero point), exactly as PyTorch's observers do:
 *
 *   qf_observer_config cfg = qf_observer_config_default(QF_OBSERVER_HISTOGRAM);
 *   qf_observer *o;
 *   QF_TRY(qf_observer_init(&o, &cfg));
 *   for (each calibration batch) QF_TRY(qf_observer_update(o, &x));
 *   qf_qparams qp;
 *   QF_TRY(qf_observer_qparams(o, &qp, 1));   // one channel: per-tensor
 *   qf_observer_free(o);
 *
 * Observers never keep the tensors they see: min/max observers keep two
 * numbers per channel, the histogram observer `bins` counts.
 */
#ifndef QFOLD_QUANT_H
#define QFOLD_QUANT_H

#include <stdint.h>

#include "qfold/status.h"
#include "qfold/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qf_qscheme {
    QF_QSCHEME_AFFINE = 0, /* scale = (max - min) / (qmax - qmin), zero point from min */
    QF_QSCHEME_SYMMETRIC   /* scale = max(|min|, |max|) / ((qmax - qmin) / 2), zero point 0 */
} qf_qscheme;

typedef enum qf_observer_kind {
    QF_OBSERVER_MIN_MAX = 0,     /* torch MinMaxObserver */
    QF_OBSERVER_MOVING_AVERAGE,  /* torch MovingAverageMinMaxObserver */
    QF_OBSERVER_PER_CHANNEL,     /* torch PerChannelMinMaxObserver (ch_axis) */
    QF_OBSERVER_HISTOGRAM        /* torch HistogramObserver (L2 range search) */
} qf_observer_kind;

typedef struct qf_observer_config {
    qf_observer_kind kind;
    qf_qscheme scheme;
    int32_t qmin, qmax;         /* the integer range, e.g. [-128, 127] or [-127, 127] */
    float eps;                  /* smallest scale (torch: float32 epsilon); a profile may raise it (2^-12) */
    float averaging_constant;   /* moving average: min += c * (cur_min - min); torch default 0.01 */
    int ch_axis;                /* per channel: the channel axis of the observed tensors */
    int bins;                   /* histogram: 2048 as torch */
    int upsample_rate;          /* histogram: 128 as torch */
} qf_observer_config;

/* Quantization parameters of one channel (or of the whole tensor). */
typedef struct qf_qparams {
    float scale;
    int32_t zero_point;
} qf_qparams;

typedef struct qf_observer qf_observer;

/* torch's defaults for `kind`: affine int8 [-128, 127], eps = FLT_EPSILON,
 * averaging constant 0.01, ch_axis 0, 2048 bins, upsample rate 128. */
qf_observer_config qf_observer_config_default(qf_observer_kind kind);

/* QF_ERR_INVALID for a bad configuration (qmin >= qmax, histogram with fewer
 * than 2 bins, ...). */
qf_status qf_observer_init(qf_observer **out, const qf_observer_config *cfg);
void qf_observer_free(qf_observer *o);

/* Record float32 tensor x. Empty tensors are ignored (as torch). NaN or
 * infinite values are refused (QF_ERR_NUMERIC, with the index). Per channel:
 * x must have ch_axis, and the same channel count on every call. */
qf_status qf_observer_update(qf_observer *o, const qf_tensor *x);

/* Fold what `src` saw into `dst` (same configuration; per channel: same
 * channel count), as if dst had observed src's tensors too (the histogram
 * is merged on a common grid as torch merges a new batch). For tensors that
 * must share qparams: their qparams come from the combined statistics. */
qf_status qf_observer_merge(qf_observer *dst, const qf_observer *src);

/* Number of channels the qparams have: 1, or per channel the channel count
 * seen (0 before any update). */
int qf_observer_channels(const qf_observer *o);

/* Whether anything was observed. */
bool qf_observer_seen(const qf_observer *o);

/* The range the qparams are computed from, per channel: min/max seen
 * (moving averages for the moving-average observer; for the histogram the
 * range chosen by the L2 search). n must equal qf_observer_channels(o). */
qf_status qf_observer_range(const qf_observer *o, float *min, float *max, int n);

/* qparams, n = qf_observer_channels(o) entries. Before any update: scale 1,
 * zero point 0 (torch's default). */
qf_status qf_observer_qparams(const qf_observer *o, qf_qparams *qp, int n);

/* qparams of the range [min, max] (float32 arithmetic as torch's
 * _calculate_qparams: the range is widened to include 0; affine
 * scale = (max - min) / (qmax - qmin), zp = qmin - round_half_even(min / scale)
 * clamped; symmetric scale = max(-min, max) / ((qmax - qmin) / 2), zp 0 for
 * a signed range, the midpoint for an unsigned one; scale >= eps). min > max
 * (nothing observed) gives scale 1, zp 0. */
qf_qparams qf_qparams_from_range(float min, float max, qf_qscheme scheme, int32_t qmin, int32_t qmax, float eps);

#ifdef __cplusplus
}
#endif
#endif
