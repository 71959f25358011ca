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

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qfold/exec.h"
#include "qfold/graph.h"
#include "qfold/op.h"
#include "qfold/pass.h"
#include "qfold/quant_bias.h"
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
/* Both at once: qparams and the range they come from (min / max may be
 * NULL); the histogram's range search runs once. */
qf_status qf_observer_result(const qf_observer *o, qf_qparams *qp, float *min, float *max, int n);

/* qparams of the range [min, max] (float32 arithmetic as torch's
 * _calculate_qparams: the range is widened to include 0; affine
 * scale = (max - min) / (qmax - qmin), zp = qmin - round_half_even(min / scale)
 * clamped; symmetric scale = max(-min, max) / ((qmax - qmin) / 2), zp 0 for
 * a signed range, the midpoint for an unsigned one; scale >= eps). min > max
 * (nothing observed) gives scale 1, zp 0. */
qf_qparams qf_qparams_from_range(float min, float max, qf_qscheme scheme, int32_t qmin, int32_t qmax, float eps);

/* --- target profiles and annotation ----------------------------------------
 *
 * Each op's pattern (how it is quantized: the rows of the NXP Neutron
 * quantizer's patterns.py) is one row per op of the quant layer
 * (src/quant/op_quant.c); a profile says which ops it quantizes and how
 * activations and weights are quantized. Annotation walks the graph once and gives every value a
 * qspec: left in float, observed (own qparams), shared with another value,
 * fixed, a weight (per tensor or per channel) or an int32 bias.
 *
 *   const qf_quant_profile *p = qf_quant_profile_find("neutron");
 *   qf_quant_profile mine = *p;
 *   QF_TRY(qf_quant_profile_set(&mine, "reduction-scale=own"));
 *   qf_quant_annotation *a;
 *   QF_TRY(qf_quant_annotate(g, &mine, &a));
 *   ... a->spec[v->id], qf_quant_group(a, v->id), a->skips ...
 *   qf_quant_annotation_free(a);
 */

typedef enum qf_qpattern {
    QF_QPAT_NONE = 0,   /* no int8 form: left in float */
    QF_QPAT_CONV,       /* Conv / ConvTranspose: weight per the profile's conv spec, int32 bias */
    QF_QPAT_LINEAR,     /* linear, Gemm, MatMul with a constant weight */
    QF_QPAT_ACTIVATION, /* Relu / relu6 / Clip(0, x): fused after a conv or linear, else shares */
    QF_QPAT_SHARE,      /* output shares input 0's qparams (pools, reshapes, pad, ...) */
    QF_QPAT_CONCAT,     /* output shares the first input's; the others are requantized */
    QF_QPAT_FIXED,      /* output has fixed qparams (softmax, sigmoid, tanh) */
    QF_QPAT_BINARY,     /* Add / Sub / Mul: inputs and output observed */
    QF_QPAT_REDUCTION,  /* GlobalAveragePool / ReduceMean: shares or own, per the profile */
    QF_QPAT_OWN,        /* input and output observed */
    QF_QPAT_SAME,       /* every input and the output on one set of qparams (Max / Min) */
    QF_QPAT_PRELU       /* input and output observed, the constant slope int8 per tensor */
} qf_qpattern;

/* Which layer pairs the equalize pass balances: none, those where one of
 * the two weights is quantized per tensor (where a channel's range is lost
 * to its neighbours'), every pair. AUTO (both built-in profiles' default):
 * qf_quantize quantizes the model without equalization and with each rule
 * that changes it, and keeps the rule whose graph outputs are clearly closer
 * to the float model's on the calibration data (SQNR higher by
 * QF_QUANT_EQ_MARGIN_DB for per-tensor, QF_QUANT_EQ_ALL_MARGIN_DB over the
 * best other for all, tried only up to QF_QUANT_EQ_ALL_BYTES of weights);
 * when no rule changes the model, it is simply off (one calibration);
 * `qfold qat` decides the same way on a folded copy
 * (qf_quant_equalize_choose). The equalize pass itself,
 * with AUTO left undecided, does nothing. */
typedef enum qf_qequalize { QF_QEQ_OFF = 0, QF_QEQ_PER_TENSOR, QF_QEQ_ALL, QF_QEQ_AUTO } qf_qequalize;

/* How the int8 weights of Conv / ConvTranspose / Gemm are rounded: to the
 * nearest (half to even), or learned up or down per weight by AdaRound on
 * the calibration data after the conversion (qf_quant_adaround). */
typedef enum qf_qrounding { QF_QROUND_NEAREST = 0, QF_QROUND_ADAROUND } qf_qrounding;

/* How one class of tensors is quantized. */
typedef struct qf_qformat {
    qf_qscheme scheme;
    int32_t qmin, qmax;
    bool per_channel;             /* weights: one scale per output channel */
    qf_observer_kind observer;    /* activations: how ranges are observed */
} qf_qformat;

typedef struct qf_quant_profile {
    const char *name;
    const char *summary;
    qf_qformat activation;        /* int8 per-tensor affine */
    qf_qformat conv_weight;       /* Conv / ConvTranspose weights */
    qf_qformat linear_weight;     /* linear / Gemm / MatMul weights */
    float min_scale;              /* smallest scale an activation gets (observer eps) */
    bool fuse_activation;         /* no quantization between conv/linear and a following ReLU */
    bool fuse_any_clip;           /* ... nor a Clip(0, x) of any x (else only x = 6 or none: RELU6 / RELU) */
    bool concat_shares;           /* Concat's inputs and output on one set of qparams, observed on the
                                     union of their ranges (else the output has the first input's) */
    bool matmul_symmetric;        /* a MatMul of two activations reads both per-tensor symmetric
                                     [qmin + 1, qmax], zero point 0, min/max observed */
    bool reduction_shares;        /* reductions share their input's qparams (else own) */
    qf_qequalize equalize;        /* cross-layer equalization first (pass equalize) */
    qf_qbias bias_correction;     /* bias correction after the conversion (off in both built-in profiles) */
    bool neutron_passes;          /* the Neutron-ready graph: pipeline neutron before annotation,
                                   * neutron_qdq after conversion (quantize, qat, finalize) */
    /* weight-rounding, adaround-iters, adaround-reg: AdaRound after the
     * conversion (quantize only); the built-in profiles: nearest,
     * QF_QUANT_ADAROUND_ITERS, QF_QUANT_ADAROUND_REG (0 iterations: that
     * default too). */
    qf_qrounding weight_rounding;
    int adaround_iters;
    float adaround_reg;
    /* The ops it quantizes (by the pattern of their row): every op that has
     * one, or those set in ops[]. */
    bool every_op;
    bool ops[QF_OP_COUNT];
} qf_quant_profile;

/* Whether p quantizes op: op has a pattern (its row) and p takes it. */
bool qf_quant_profile_takes(const qf_quant_profile *p, qf_op op);
/* Facts of the int8 ops of a lowered graph (qf_quant_lower_int8), from
 * their rows, for the exporters that read such a graph: the input slot of
 * the output's scale (its zero point at the next slot), -1 for an op that
 * does not carry its output's qparams; whether the op moves int8 values
 * without changing their qparams (MaxPool, Reshape, Flatten, Transpose,
 * Squeeze, Unsqueeze). */
int qf_quant_op_out_qparams_slot(qf_op op);
bool qf_quant_op_passes_qparams(qf_op op);

/* The built-in profiles: "neutron", "generic". NULL if unknown. */
const qf_quant_profile *qf_quant_profile_find(const char *name);
/* The names of the built-in profiles, NULL-terminated. */
const char *const *qf_quant_profile_names(void);
/* Override one rule: "KEY=VALUE" with KEY one of reduction-scale (own|shared),
 * linear-weights / conv-weights (per-tensor|per-channel), activation-observer
 * (histogram|minmax|moving-average), fuse-activation (on|off), min-scale (a
 * positive number), equalize, concat-scale (shared|first), matmul-inputs
 * (symmetric|activation), neutron-passes (on|off), bias-correction
 * (off|empirical|analytical|auto), weight-rounding (nearest|adaround),
 * adaround-iters (1 .. 1000000), adaround-reg (a number >= 0).
 * QF_ERR_INVALID naming the key and the accepted values. */
qf_status qf_quant_profile_set(qf_quant_profile *p, const char *rule);
/* A copy of built-in profile `target` (NULL: "neutron") with `sets`
 * ("KEY=VALUE", qf_quant_profile_set) applied in order, in *out (freed with
 * qf_free): what `--target T --set ...` make of a profile. QF_ERR_INVALID
 * "unknown target 'T' (targets: neutron, generic)" or the rule's message. */
qf_status qf_quant_profile_make(const char *target, const char *const *sets, int nsets, qf_quant_profile **out);

typedef enum qf_qspec_kind {
    QF_QSPEC_FLOAT = 0, /* not quantized */
    QF_QSPEC_OBSERVE,   /* activation with its own observer (its group's) */
    QF_QSPEC_SHARE,     /* same qparams as value `share` (same group) */
    QF_QSPEC_FIXED,     /* fixed qparams */
    QF_QSPEC_WEIGHT,    /* constant weight, quantized from its own data */
    QF_QSPEC_BIAS       /* int32 bias: scale = s(bias_input) * s(bias_weight), zero point 0 */
} qf_qspec_kind;

typedef struct qf_qspec {
    qf_qspec_kind kind;
    qf_qformat format;   /* range, scheme, per channel, observer */
    int axis;            /* WEIGHT per channel: the channel axis */
    qf_qparams fixed;    /* FIXED */
    uint32_t share;      /* SHARE: the value it shares with */
    uint32_t bias_input, bias_weight; /* BIAS */
} qf_qspec;

typedef struct qf_quant_skip {
    const qf_node *node;
    const char *reason;  /* static text or owned by the annotation */
} qf_quant_skip;

typedef struct qf_quant_annotation {
    int nvalues;
    qf_qspec *spec;      /* by value id */
    uint32_t *parent;    /* shared-qparams groups (union-find over value ids) */
    qf_quant_skip *skips;/* nodes left in float, with the reason */
    int nskips, cap_skips;
    int nquantized;      /* values with a qspec other than FLOAT */
} qf_quant_annotation;

/* Annotate g (sorted, shapes inferred) for profile p. Nothing in g changes. */
qf_status qf_quant_annotate(const qf_graph *g, const qf_quant_profile *p, qf_quant_annotation **out);
/* The same with nodes kept in float whatever the profile takes (`qfold
 * quantize --exclude`): a node is excluded when its name or its op type
 * (qf_op_label: the ONNX op_type, qfold's name for an internal op) is one
 * of exclude[0 .. nexclude-1]. An excluded node gets no quantization of its
 * own (its constant weights stay float, nothing fuses into it or it into a
 * neighbour); a quantized neighbour still quantizes the values it shares
 * with it, so it sits between DequantizeLinear and QuantizeLinear as any
 * float island. It is listed in skips with the reason "excluded". An entry
 * that matches no node is QF_ERR_INVALID naming it. qat: as
 * qf_quant_annotate_qat. */
typedef struct qf_quant_annotate_options {
    bool qat;
    const char *const *exclude;
    int nexclude;
} qf_quant_annotate_options;
qf_status qf_quant_annotate_ex(const qf_graph *g, const qf_quant_profile *p, const qf_quant_annotate_options *o,
                               qf_quant_annotation **out);
/* The reason of an excluded node in skips / left_float. */
#define QF_QUANT_EXCLUDED "excluded"
/* The names of the nodes of g (as loaded, before any pass) that `entries`
 * exclude (a node name or an op type each, as qf_quant_annotate_ex matches
 * them), for a caller whose passes change op types before annotation
 * (canonicalize makes a Gemm qfold's internal `linear`, keeping its name):
 * *names (each and the array from qf_malloc; qf_quant_exclude_free), *from
 * the index of the entry each came from (may be NULL). An entry matching no
 * node is QF_ERR_INVALID: "exclude: 'X' is neither the name nor the op type
 * of a node of <model>" (model: NULL = "the model"). */
qf_status qf_quant_exclude_resolve(const qf_graph *g, const char *const *entries, int nentries, const char *model,
                                   char ***names, int **from, int *count);
void qf_quant_exclude_free(char **names, int *from, int count);
/* The same for QAT: a BatchNormalization that is the only reader of a conv /
 * linear belongs to its pattern (nothing quantized between the op and the
 * BN; the BN's output is what the ReLU fusion or the observer sees), as the
 * Neutron quantizer annotates for QAT. */
qf_status qf_quant_annotate_qat(const qf_graph *g, const qf_quant_profile *p, qf_quant_annotation **out);
void qf_quant_annotation_free(qf_quant_annotation *a);
/* The representative value id of v's shared-qparams group. */
uint32_t qf_quant_group(qf_quant_annotation *a, uint32_t v);
/* QAT: a fake_quant node (src/ops/fake_quant.c: PyTorch's FakeQuantize with
 * a moving-average min / max observer) after every activation the QAT
 * annotation quantizes (the members of a shared group read one set of
 * buffers; a fixed group's does not observe) and on every quantized weight
 * (per channel or per tensor, symmetric, the profile's range); biases stay
 * float. Run before qat_bn_add, which then scales the weight under its
 * fake_quant. *count (may be NULL) gets the fake_quants made. */
qf_status qf_quant_qat_insert(qf_graph *g, qf_quant_annotation *a, const qf_quant_profile *p, int *count);
/* What qat_convert will refuse of g's fake_quants whatever training does
 * (a range with no ONNX type, an affine weight, a per-channel activation):
 * the pass quant_qat_insert checks it, so that a refusal comes before the
 * training, not after it. QF_OK or an error naming the node. */
qf_status qf_quant_qat_convert_check(const qf_graph *g);
/* One line per quantized value and per node left in float (tests, --report). */
void qf_quant_annotation_print(const qf_quant_annotation *a, const qf_graph *g, FILE *f);

/* --- calibration ------------------------------------------------------------
 *
 * One observer per group of values that share qparams (a fixed group has
 * none); constants that are observed (an Add's constant operand) are seen
 * once, at init. The executor's per-step hook feeds every other annotated
 * value's tensor to its group's observer (qf_quant_calib_observe).
 */
typedef struct qf_quant_calib qf_quant_calib;

qf_status qf_quant_calib_init(qf_quant_calib **out, const qf_graph *g, qf_quant_annotation *a,
                              const qf_quant_profile *p);
void qf_quant_calib_free(qf_quant_calib *c);
/* Whether value v's tensors are wanted (an observed activation or input). */
bool qf_quant_calib_wants(const qf_quant_calib *c, uint32_t v);
/* Feed one tensor of value v (QF_ERR_NUMERIC naming the value on NaN / Inf). */
qf_status qf_quant_calib_observe(qf_quant_calib *c, uint32_t v, const qf_tensor *t);
/* Whether every observer ignores the order of a tensor's elements (per-tensor
 * min / max, moving average, histogram: then it may see a channels-last
 * tensor as is); false when one is per channel. */
bool qf_quant_calib_order_free(const qf_quant_calib *c);
/* Compute every group's qparams; after it, qf_quant_calib_qparams. A group
 * that saw nothing is QF_ERR_INVALID naming a value of it. */
qf_status qf_quant_calib_finish(qf_quant_calib *c);
/* The qparams of activation value v (its group's), or NULL for a value that
 * is not an activation with a qspec. Valid after qf_quant_calib_finish. */
const qf_qparams *qf_quant_calib_qparams(const qf_quant_calib *c, uint32_t v);
/* The range activation v's qparams came from (its group observer's; 0, 0 for
 * a fixed group), for the report. Valid after qf_quant_calib_finish. */
qf_status qf_quant_calib_range(const qf_quant_calib *c, uint32_t v, float *min, float *max);

/* One quantized tensor, as the report lists it. */
typedef struct qf_quant_tensor {
    char *name;
    qf_qspec_kind kind;      /* OBSERVE, SHARE, FIXED (activations), WEIGHT, BIAS */
    int nch;                 /* 1, or the channel count of a per-channel weight */
    float *scale;            /* nch entries */
    int32_t zero_point;      /* activations (weights and biases: 0) */
    float min, max;          /* activations: the observed range the qparams come from */
    char *shares;            /* SHARE: the tensor whose qparams it has */
    char *node;              /* weights and biases: the node that reads it */
    int zero_channels;       /* weights: channels (or the whole tensor) that are all zero */
} qf_quant_tensor;

/* --- convert to QDQ ------------------------------------------------------------
 *
 * Rewrites g (annotated by a, calibrated by c) into an ONNX QDQ graph:
 * activations get QuantizeLinear -> DequantizeLinear (int8, their group's
 * qparams); weights become int8 constants behind a DequantizeLinear (per
 * channel with `axis` where the qspec says); biases int32 constants with
 * scale s_in * s_w behind a DequantizeLinear. The opset is raised to 13
 * where per-channel DequantizeLinear needs it. A weight holding NaN / Inf is
 * QF_ERR_NUMERIC naming the node that reads it; the graph is then unchanged.
 * Counts what it did in *stats (may be NULL). */
typedef struct qf_quant_convert_stats {
    int activations;    /* Q/DQ pairs inserted */
    int weights;        /* weights quantized */
    int biases;         /* biases quantized */
    int zero_weights;   /* weight tensors with an all-zero channel (or all zero) */
} qf_quant_convert_stats;

/* tensors (may be NULL): every tensor quantized, appended as the report
 * lists them (qf_quantize_result owns such a list). */
qf_status qf_quant_convert(qf_graph *g, const qf_quant_annotation *a, const qf_quant_calib *c,
                           qf_quant_convert_stats *stats, qf_quant_tensor **tensors, int *ntensors);

/* --- as passes ------------------------------------------------------------------
 *
 * quant_annotate and quant_convert are passes of the pass manager (pipelines
 * quantize_prepare and quantize_convert), so the verifier runs after them and
 * their report lists what they did and what they left in float. Their state
 * travels in qf_pass_options.user as a qf_quant_session. */
typedef struct qf_quant_session {
    const qf_quant_profile *profile;     /* in: the target */
    const char *const *exclude;          /* in: nodes kept in float (qf_quant_annotate_ex), may be NULL */
    int nexclude;
    qf_quant_annotation *annotation;     /* set by quant_annotate (owned by the session) */
    qf_quant_calib *calib;               /* in, for quant_convert: calibrated (owned by the session) */
    qf_quant_convert_stats stats;        /* set by quant_convert */
    qf_quant_tensor *tensors;            /* appended by quant_convert */
    int ntensors;
} qf_quant_session;

/* The int8 executor's lowering (pass quant_lower_int8): every DQ -> Conv /
 * Gemm -> [Relu / relu6 / Clip] -> Q group of a QDQ graph becomes one integer conv
 * (QLinearConv with TFLite's fixed-point requantization and the activation
 * as a clamp), so running the graph computes those layers as an int8 NPU
 * does; the rest runs as written (DQ -> float -> Q). For execution only:
 * the lowered graph carries qfold's own attributes (qfold_requant,
 * qfold_clamp) and is not meant to be exported. ctx may be NULL (outside the
 * pass manager); *count (may be NULL) gets the number of groups lowered. */
typedef enum qf_int8_requant_kind {
    QF_REQUANT_FIXED_POINT = 0, /* TFLite: multiplier and shift, its rounding */
    QF_REQUANT_ONNX             /* ONNX / ONNX Runtime: float32 scale, round half to even */
} qf_int8_requant_kind;
qf_status qf_quant_lower_int8(qf_graph *g, qf_pass_ctx *ctx, qf_int8_requant_kind rq, int *count);

/* The integer reference against the simulation, per value (the TFLite export
 * report's max_lsb): qdq runs twice on the first `count` samples of src (0:
 * all), once lowered with TFLite's fixed-point requantization (what the
 * exported graph computes) and once as written (Q / DQ in float, as `qfold
 * run --simulate`); max_lsb[k] gets the largest |difference| of int8 value
 * names[k] over every element and sample, or -1 where the graph has no such
 * int8 activation. qdq is not changed. TFLite's exact arithmetic needs the
 * reference kernels (qf_set_engine(QF_ENGINE_REF) first: oneDNN's int8 convs
 * requantize in float, within 1 LSB of it). (src/quant/int8_diff.c) */
qf_status qf_quant_int8_diff(const qf_graph *qdq, const qf_data_source *src, int64_t count, int nnames,
                             const char *const *names, int32_t *max_lsb);

/* Register the quant passes and pipelines (idempotent); qf_quantize does it. */
qf_status qf_quant_register_passes(void);

/* --- finalize: a QAT model exported from PyTorch -> the folded int8 QDQ form --
 *
 *   qf_quant_finalize_session fs = {0};
 *   QF_TRY(qf_quant_register_passes());
 *   st = qf_pipeline_run(g, "finalize", &(qf_pass_options){.verify = true, .user = &fs}, &report);
 *   ... fs.weights: the model's weight ranges, for a comparison with a profile ...
 *   qf_quant_finalize_session_free(&fs);
 *
 * Pipeline finalize = qat_fold_exported -> dce (Identity chains torch writes
 * before a zero point are read through, then go as dead code). The pass
 * (src/quant/qat_fold_exported.c) folds torch's simulated Conv / Gemm +
 * BatchNorm chains (op(QDQ(W*s)) -> Div(s) -> [Add(b)] -> BN, or op(QDQ(W))
 * -> BN) through the weight's Q / DQ, writes every fake-quantized weight as
 * an int8 initializer -> DequantizeLinear, the biases as int32 at s_in * s_w
 * and uint8 activation pairs as int8 ones. `user` may be NULL (no record). */
typedef struct qf_quant_finalize_weight {
    char *name;          /* the float weight's name (its int8 initializer: <name>_quantized) */
    char *node;          /* the Conv / ConvTranspose / Gemm reading it */
    bool linear;         /* a Gemm (the profile's linear weights), else a conv */
    int nch;             /* scales: 1 = per tensor */
    int32_t qmin, qmax;  /* the range the model was trained with */
    int folded;          /* output channels a BatchNorm was folded into (0: none) */
    int grid_kept;       /* of those, channels whose factor was exactly 1 (int8 and scale as trained) */
    int grid_scaled;     /* channels with the trained int8 values at the trained scale * |factor| */
    int requantized;     /* channels put on a new grid (per-tensor weights, degenerate factors) */
} qf_quant_finalize_weight;

/* The metadata_props key under which `qfold qat --keep-qat` records the
 * int8 range its weights were trained with, "QMIN,QMAX" (e.g. "-127,127"):
 * the file's Q/DQ pairs can only say int8's [-128, 127]. */
#define QF_QUANT_WEIGHT_RANGE_KEY "qfold.weight_range"
/* The metadata_props key under which `qfold quantize` / `qfold qat` record
 * the nodes they kept in float because --exclude named them, one node name
 * a line: the TFLite export refuses such a node with that reason. */
#define QF_QUANT_EXCLUDED_KEY "qfold.excluded"

typedef struct qf_quant_finalize_session {
    /* in: the range the weights were trained with (weight_range set: the
     * model's QF_QUANT_WEIGHT_RANGE_KEY), else int8's [-128, 127] (PyTorch's
     * exporter takes only that range) */
    bool weight_range;
    int32_t weight_qmin, weight_qmax;
    qf_quant_finalize_weight *weights;
    int nweights, cap;
    int folded;          /* BatchNorms folded */
    int biases;          /* biases written as int32 */
    int float_biases;    /* biases left float (the op's input is not dequantized) */
    int activations;     /* uint8 activation pairs rewritten as int8 */
    int shared;          /* outputs PyTorch left float (a Pad before an AveragePool) given their input's qparams */
} qf_quant_finalize_session;
void qf_quant_finalize_session_free(qf_quant_finalize_session *s);
/* Register qat_fold_exported and the finalize pipeline (qf_quant_register_passes does). */
qf_status qf_quant_finalize_register(void);

/* --- AdaRound (src/quant/adaround.c) -------------------------------------------
 *
 * Learned rounding of the int8 weights (Nagel et al. 2020, "Up or Down?
 * Adaptive Rounding"), run by qf_quantize after the conversion when the
 * profile's weight_rounding is QF_QROUND_ADAROUND. For each Conv /
 * ConvTranspose / Gemm of the QDQ graph qdq whose weight is an int8
 * initializer behind a DequantizeLinear, in topological order: its input as
 * qdq computes it (the layers before already rounded) and the float model
 * ref's output of it (after the activation fused into it) on the first
 * samples of data (at most QF_QUANT_ADAROUND_SAMPLES, and as many as fit in
 * QF_QUANT_ADAROUND_BYTES per layer), then `iters` Adam steps (lr 1e-3) on
 * V of W_soft = s clip(floor(W / s) + h(V), qmin, qmax), h the rectified
 * sigmoid, minimizing the output's squared error summed over channels plus
 * reg * sum(1 - |2 h(V) - 1|^beta) (beta 20 -> 2 after 20 % of the
 * iterations); finally q = floor(W / s) + (h(V) >= 0.5), written into the
 * int8 initializer when its error on the samples is below nearest
 * rounding's. Every weight then differs from nearest rounding by at most
 * one step; the bias is unchanged. ref: the float graph qdq was converted
 * from (names shared). Deterministic for a seed (the batches' order). */
#define QF_QUANT_ADAROUND_ITERS 1000
#define QF_QUANT_ADAROUND_REG 0.01
#define QF_QUANT_ADAROUND_SAMPLES 1024
#define QF_QUANT_ADAROUND_BYTES ((size_t)256 << 20)

typedef struct qf_quant_adaround_layer {
    char *node;             /* the Conv / ConvTranspose / Gemm */
    char *weight;           /* its int8 initializer (NULL: it has none) */
    const char *reason;     /* not rounded by AdaRound: why (static text), else NULL */
    int iters;              /* Adam steps run */
    int64_t samples;        /* calibration samples its error is measured on */
    int64_t weights;        /* weight elements */
    int64_t changed;        /* of them, rounded the other way than nearest */
    double err_nearest;     /* mean squared error of the layer's output against float, nearest rounding */
    double err_adaround;    /* the same with AdaRound's rounding */
    bool kept;              /* AdaRound's rounding written (its error is lower) */
    double ms;              /* wall time of the layer */
} qf_quant_adaround_layer;

typedef struct qf_quant_adaround_options {
    int iters;              /* 0: QF_QUANT_ADAROUND_ITERS */
    double reg;             /* the regulariser's weight lambda (>= 0) */
    int64_t batch;          /* samples per step and per collection run; 0: 32 */
    int64_t max_samples;    /* the first samples of data only (0: all, at most QF_QUANT_ADAROUND_SAMPLES) */
    uint64_t seed;          /* the batches' order */
    /* After each layer (may be NULL): layer index (1-based) of count. */
    void (*progress)(void *ud, const qf_quant_adaround_layer *l, int index, int count);
    void *progress_ud;
} qf_quant_adaround_options;

/* *layers gets one entry per Conv / ConvTranspose / Gemm of qdq in order
 * (free with qf_quant_adaround_free), also on failure. */
qf_status qf_quant_adaround(qf_graph *qdq, qf_graph *ref, const qf_data_source *data,
                            const qf_quant_adaround_options *opt, const qf_quant_profile *p,
                            qf_quant_adaround_layer **layers, int *count);
void qf_quant_adaround_free(qf_quant_adaround_layer *l, int n);
/* "nearest", "adaround" */
const char *qf_quant_rounding_name(qf_qrounding r);

/* --- the whole post-training quantization ------------------------------------
 *
 * Annotate g for the profile, calibrate on `data` (a source with one array
 * per graph input, [N, ...], read a batch at a time by qf_run_source: the
 * calibration set is never in memory whole; qf_data_source_tensors wraps
 * tensors in memory), convert to QDQ. g must be folded already (the ptq
 * pipeline); it is rewritten in place. The result keeps what the report
 * needs (names copied: the graph changes). */

#define QF_QUANT_MAX_INPUTS 64   /* graph inputs a calibration source may have */

typedef struct qf_quantize_options {
    const qf_quant_profile *profile;  /* NULL: neutron */
    int64_t batch;                    /* calibration batch; 0 = 32 */
    int64_t max_samples;              /* 0: every sample */
    /* After each batch (may be NULL). `pass` names the calibration when
     * there are several (equalize=auto's trial: "without equalization",
     * "equalize per-tensor", ...), NULL when there is one. */
    void (*progress)(void *ud, const char *pass, int64_t done, int64_t total);
    void *progress_ud;
    /* Calibrate on a plain plan (every node's output written, NCHW, no
     * post-op fusion) instead of the planned one (channels-last and fused
     * except at observed values): the same statistics up to float rounding,
     * slower; tests compare the two. */
    bool plain_calibration;
    /* Nodes kept in float (`--exclude`): node names or op types of g as
     * qf_quantize gets it (qf_quant_annotate_ex); qf_quantize_model takes
     * them on the model as loaded (qf_quant_exclude_resolve) and gives
     * qf_quantize the names of the nodes they match. Each is in left_float
     * with the reason QF_QUANT_EXCLUDED. */
    const char *const *exclude;
    int nexclude;
    /* The BatchNorm statistics of the model before its fold (borrowed;
     * qf_quant_bn_stats_collect): bias-correction=analytical / auto use
     * them; NULL: analytical corrects nothing. qf_quantize_model collects
     * them itself. */
    const qf_quant_bn_stats *bn_stats;
    /* weight-rounding=adaround: the batches' order (0 is a seed too) and a
     * line's worth after each layer (may be NULL; progress_ud its ud). */
    uint64_t seed;
    void (*adaround_progress)(void *ud, const qf_quant_adaround_layer *l, int index, int count);
} qf_quantize_options;


typedef struct qf_quant_float_node {
    char *name, *op, *reason;
} qf_quant_float_node;

typedef struct qf_quantize_result {
    int64_t samples;               /* calibration samples seen */
    qf_pass_report *prepare, *convert; /* the two pipelines' reports */
    qf_quant_tensor *tensors;
    int ntensors;
    qf_quant_float_node *left_float; /* ops left in float, with the reason */
    int nleft_float;
    qf_quant_convert_stats stats;
    double calibrate_ms;           /* wall time of the calibration runs (observers included) */
    double convert_ms;             /* wall time of annotation, qparams and conversion to QDQ */
    /* equalize=auto with a trial (some rule changed the model): per rule
     * (index QF_QEQ_OFF, _PER_TENSOR, _ALL) whether it was tried and the
     * graph outputs' SQNR (dB, int8 vs float on the first
     * QF_QUANT_EQ_SAMPLES calibration samples), and the rule kept. */
    bool eq_trial;
    bool eq_tried[3];
    double eq_sqnr[3];
    qf_qequalize eq_rule;
    /* Wall time of the rest of equalize=auto: finding which rules change the
     * model, the trials' copies and their outputs' SQNR (their calibrations
     * and conversions are in calibrate_ms / convert_ms). With calibrate_ms
     * and convert_ms it makes up all of qf_quantize's time. */
    double equalize_ms;
    /* Samples per calibration run: the batch asked for, or, on a model whose
     * inputs fix the batch size where qf_batch_widen refuses a larger one,
     * that size, and batch_note says why (NULL otherwise). */
    int64_t batch;
    char *batch_note;
    /* Bias correction (the profile's rule not off): the rule; the form its
     * figures are of (empirical or analytical: auto's best); whether the
     * corrected model was kept (empirical, analytical: always; auto: when
     * the form's graph outputs' SQNR against float on the first
     * QF_QUANT_EQ_SAMPLES calibration samples beat the uncorrected one's by
     * more than QF_QUANT_BC_MARGIN_DB); both SQNRs (dB); what it did; auto:
     * the other form's SQNR and figures (bc_alt_sqnr NaN when it was not
     * tried: analytical without BatchNorm statistics for any layer); the
     * wall time (its runs, copies and SQNRs; with calibrate_ms, convert_ms
     * and equalize_ms all of qf_quantize's time). */
    qf_qbias bc_rule, bc_form;
    bool bc_kept;
    double bc_sqnr_before, bc_sqnr_after;
    qf_quant_bc_stats bc;
    double bc_alt_sqnr;
    qf_quant_bc_stats bc_alt;
    double bc_ms;
    /* Internal: the float graph as converted, the BatchNorm statistics
     * anchored on it (qf_quantize frees both). */
    qf_graph *bc_float;
    qf_quant_bn_stats *bc_bn;
    /* weight-rounding=adaround: every Conv / ConvTranspose / Gemm with what
     * AdaRound did to it, and its wall time (not in the other phases). */
    qf_quant_adaround_layer *adaround;
    int nadaround;
    double adaround_ms;
    uint64_t adaround_seed; /* the seed it ran with (qf_quantize_options.seed) */
    qf_graph *float_ref;   /* internal: the float graph as converted, for AdaRound */
} qf_quantize_result;

#define QF_QUANT_EQ_SAMPLES 512
#define QF_QUANT_EQ_MARGIN_DB 1.0     /* equalize=auto keeps per-tensor when the SQNR gains this much */
#define QF_QUANT_EQ_ALL_MARGIN_DB 6.0 /* ... all when it gains this much (both over the model without;
                                         of those that clear theirs, the best measured is kept) */
#define QF_QUANT_EQ_ALL_BYTES ((size_t)32 << 20) /* all is tried on models with at most these weights */
#define QF_QUANT_BC_SAMPLES 512      /* bias correction measures on at most these calibration samples */
#define QF_QUANT_BC_MARGIN_DB 0.0    /* bias-correction=auto keeps it when the SQNR gains more than this */

qf_status qf_quantize(qf_graph *g, const qf_data_source *data, const qf_quantize_options *opt,
                      qf_quantize_result *out);
/* "off", "empirical", "analytical", "auto": the --set bias-correction= spelling. */
const char *qf_quant_bc_rule_name(qf_qbias b);
/* The bias correction in one line for a summary, e.g. "empirical, 23
 * layers (0 biases added, 9 passes), int8 outputs' SQNR 31.2 -> 33.0 dB
 * (kept)"; auto adds the other form's figure; "" when it did not run. */
void qf_quant_bc_summary(const qf_quantize_result *r, char *buf, size_t n);
/* "off", "per-tensor", "all", "auto": the --set equalize= spelling. */
const char *qf_quant_eq_rule_name(qf_qequalize e);
/* The margin over the model without equalization a rule needs to be kept
 * by equalize=auto (QF_QUANT_EQ_MARGIN_DB, QF_QUANT_EQ_ALL_MARGIN_DB; 0 for
 * off). */
double qf_quant_eq_margin(qf_qequalize rule);
/* The rule equalize=auto measured highest above the one it kept but refused
 * (it missed its margin over the model without), QF_QEQ_OFF for none. */
qf_qequalize qf_quant_eq_refused(const qf_quantize_result *r);
/* The equalize=auto trial in one line for a summary: the rule kept and
 * every rule's output SQNR, e.g. "all kept: int8 outputs' SQNR 25.9 dB
 * (per-tensor 13.2, without 13.3)", and a rule measured higher that was
 * refused: "not kept: int8 outputs' SQNR 17.0 dB without (all 19.5,
 * per-tensor 17.0); all refused: +2.5 dB over without, below its 6 dB margin
 * (--set equalize=all keeps it)". 320 bytes hold it. */
void qf_quant_eq_summary(const qf_quantize_result *r, char *buf, size_t n);
void qf_quantize_result_free(qf_quantize_result *r);
/* Whether the equalize pass, with profile p's rule (per-tensor or all),
 * finds a layer pair in g to balance (it may still find each one balanced
 * already). Reads g only: equalize=auto asks it before it copies the graph
 * to learn whether equalization changes anything. */
bool qf_quant_equalize_candidates(const qf_graph *g, const qf_quant_profile *p);
/* ref, a float model folded by the ptq pipeline, rewritten by the float
 * passes profile p's quantize_prepare pipeline runs before annotation (the
 * Neutron-ready passes for a neutron_passes profile, fuse_hard_swish, then
 * equalize with `rule`, OFF / PER_TENSOR / ALL): the float graph a model
 * quantized with that rule was converted from, with the same value names.
 * The per-layer SQNR compares against it: equalization rescales the
 * channels between a pair, so the model as folded is not the reference of
 * an equalized one's inner values. */
qf_status qf_quant_float_as_prepared(qf_graph *ref, const qf_quant_profile *p, qf_qequalize rule);
/* equalize=auto for a float model g that is not quantized by qf_quantize
 * (QAT): a copy of g, BatchNorm folded (pipeline ptq), is quantized with
 * profile p on the first max_samples of data (0: all), which decides as in
 * qf_quantize; *out gets OFF, PER_TENSOR or ALL (p's own rule when it is not
 * auto), *trial that quantization's figures (eq_trial, eq_rule, the SQNRs;
 * free it with qf_quantize_result_free). g is not changed. */
qf_status qf_quant_equalize_choose(const qf_graph *g, const qf_data_source *data, int64_t max_samples,
                                   const qf_quant_profile *p, qf_qequalize *out, qf_quantize_result *trial);

/* Per-layer error of a quantized model: for every activation `name` of the
 * float graph `ref` that the QDQ graph `q` dequantizes (value
 * "<name>_dequantized"), the SQNR in dB, 10 log10(sum x^2 / sum (x - x_q)^2)
 * over the samples run (at most max_samples; 0 = all), x from ref and x_q
 * from q on the same inputs. Inf when the two agree exactly. The samples
 * run `batch` at a time (0 = QF_QUANT_SQNR_BATCH): the reference model's
 * activations of one batch are kept for the comparison, so the batch is
 * made smaller (down to 1) until they fit in QF_QUANT_SQNR_BYTES. */
#define QF_QUANT_SQNR_BYTES ((size_t)48 << 20)
#define QF_QUANT_SQNR_BATCH 32
typedef struct qf_quant_sqnr {
    char *name;
    double sqnr_db;
    double signal, noise;          /* the two sums */
    /* The local SQNR (qf_quant_measure_sqnr_ex with local; else NaN): the
     * same comparison when the layer that writes the value is the only one
     * quantized, its inputs float (see below). */
    double local_db;
    double local_noise;            /* its noise sum (its signal is `signal`) */
} qf_quant_sqnr;

qf_status qf_quant_measure_sqnr(qf_graph *ref, qf_graph *q, const qf_data_source *data, int64_t batch,
                                int64_t max_samples, qf_quant_sqnr **out, int *count);
/* The same, with `local`: each value's local SQNR too, from one more run of
 * q per batch in which every dequantized activation that has a float value
 * in ref (and every quantized graph input) is replaced, right after its
 * DequantizeLinear, by the float model's value (the input's data): each
 * layer of q (the nodes between its inputs' DequantizeLinear and its
 * output's QuantizeLinear: a conv with its fused ReLU, a pool, an Add...)
 * then computes on the float model's inputs with its own int8 weights, its
 * own arithmetic and its output's quantization, and its output is compared
 * with the float model's. A layer that loses accuracy is told apart from
 * the layers after it that only inherit the loss: their cumulative SQNR is
 * low, their local SQNR is not. Costs one more run of q per batch. */
qf_status qf_quant_measure_sqnr_ex(qf_graph *ref, qf_graph *q, const qf_data_source *data, int64_t batch,
                                   int64_t max_samples, bool local, qf_quant_sqnr **out, int *count);
void qf_quant_sqnr_free(qf_quant_sqnr *s, int count);

/* --- the quantize recipe: what `qfold quantize` does, in one call ------------
 *
 *   qf_quantize_model_options o = {.quantize = {.profile = qf_quant_profile_find("neutron")},
 *                                  .name = "m.onnx"};
 *   qf_quantize_model_result r;
 *   st = qf_quantize_model(g, data, &o, &r);   // g: the float model as loaded
 *   ... r.quant (what was quantized), r.sqnr (worst layer first) ...
 *   qf_quantize_model_result_free(&r);
 *
 * qf_quantize_model_check refuses a model that is quantized already (it has
 * QuantizeLinear / DequantizeLinear nodes): QF_ERR_INVALID "'<name>' is
 * already quantized ...". qf_quantize_model then, on g in place: that check;
 * the ptq pipeline (BatchNorm folds, verified); qf_quantize on `data`
 * (opt->quantize; the BatchNorm statistics taken before the fold for a
 * bias-correction rule analytical or auto); the shapes verified; and the per-layer SQNR of the result
 * against the folded float model (a copy of g taken before the passes, folded
 * the same way) on the first sqnr_samples calibration samples, sorted worst
 * first. The result holds what `qfold quantize` prints and reports. */
#define QF_QUANTIZE_MODEL_SQNR_SAMPLES 128
typedef struct qf_quantize_model_options {
    qf_quantize_options quantize; /* profile, batch, max_samples, progress */
    int64_t sqnr_samples;         /* 0: QF_QUANTIZE_MODEL_SQNR_SAMPLES; < 0: no SQNR */
    bool no_local_sqnr;           /* skip the local SQNR (measured by default: one more run of the
                                   * int8 model over the SQNR samples, qf_quant_measure_sqnr_ex) */
    const char *name;             /* the model in messages; NULL: "the model" */
} qf_quantize_model_options;
typedef struct qf_quantize_model_result {
    qf_pass_report *passes; /* the ptq pipeline's report */
    qf_quantize_result quant;
    qf_quant_sqnr *sqnr; /* worst first (NaN last) */
    int nsqnr;
    /* the indices in sqnr of the (at most 3) worst local SQNRs, worst first:
     * the layers whose own quantization loses the most */
    int worst_local[3];
    int nworst_local;
    double passes_ms, sqnr_ms; /* wall times of the ptq pipeline and the SQNR measurement */
} qf_quantize_model_result;
/* true when g has a QuantizeLinear or DequantizeLinear node. */
bool qf_graph_is_quantized(const qf_graph *g);
qf_status qf_quantize_model_check(const qf_graph *g, const char *name);
qf_status qf_quantize_model(qf_graph *g, const qf_data_source *data, const qf_quantize_model_options *opt,
                            qf_quantize_model_result *out);
void qf_quantize_model_result_free(qf_quantize_model_result *r);

/* --- an accuracy target (`qfold quantize --max-drop`; src/quant/accuracy_target.c)
 *
 *   qf_quant_target_options o = {.model = mo, .eval = src, .labels = y, .max_drop = 1.0, .max_excluded = 3};
 *   qf_graph *q; qf_quantize_model_result m; qf_quant_target_result t;
 *   st = qf_quantize_to_target(g, calib, &o, &q, &m, &t);   // g: the float model as loaded, not changed
 *   if (st == QF_OK && t.met) ... save q (m, t.profile: its summary and report) ...
 *
 * Quantizes copies of g (qf_quantize_model) and counts each one's int8 top-1
 * on the eval data (lowered as `qfold eval` runs it: qf_quant_lower_int8,
 * TFLite requantization; qf_classify) against the float model's. Trial 0 is
 * the quantization as asked; while the drop (float top-1 - int8 top-1, in
 * points) exceeds max_drop, it tries in turn bias-correction=auto and
 * weight-rounding=adaround (each unless the profile has it on or `sets`
 * names its key: the user's choice stands), then up to max_excluded times
 * the layer with the worst local SQNR of the model kept (the node writing
 * that value in g, with the Conv / ConvTranspose / Gemm / MatMul before it
 * when that node is an activation fused after one) added to
 * model.quantize.exclude. A trial is kept when its top-1 is higher than the
 * best so far. *out gets the best model (also when the target is not met:
 * t.met false), *m its result, t every trial. Each trial prints through
 * opt->trial when set. */
typedef struct qf_quant_target_trial {
    char what[256];   /* "as asked", "bias-correction=auto", "exclude /c2/Conv,/Relu_1" */
    const char *skipped; /* not run: why (static text); top1 / drop NaN */
    double top1;      /* int8 top-1 on the eval data, percent */
    double drop;      /* float top-1 - top1, points */
    bool kept;        /* it became the model kept */
} qf_quant_target_trial;
typedef struct qf_quant_target_options {
    qf_quantize_model_options model; /* as qf_quantize_model (profile, the user's exclude, ...) */
    const char *const *sets;         /* the user's --set rules: a recovery whose key is among them is left */
    int nsets;
    const qf_data_source *eval;      /* the eval data, one array per graph input */
    const int64_t *labels;           /* one class index per eval sample */
    int64_t eval_batch;              /* 0: 64 */
    double max_drop;                 /* top-1 points, >= 0 */
    int max_excluded;                /* exclusion trials at most, >= 0 */
    void (*trial)(void *ud, const qf_quant_target_trial *t, int index);
    void *trial_ud;
} qf_quant_target_options;
typedef struct qf_quant_target_result {
    double float_top1;               /* percent */
    int64_t samples;                 /* eval samples */
    double max_drop;
    qf_quant_target_trial *trials;
    int ntrials;
    int best;                        /* the trial of the model kept */
    bool met;                        /* its drop <= max_drop */
    qf_quant_profile profile;        /* the kept model's profile (recoveries applied) */
    char **exclude;                  /* the kept model's exclude entries (the user's, then the layers added) */
    int nexclude;
    double ms;                       /* wall time of it all */
} qf_quant_target_result;
qf_status qf_quantize_to_target(const qf_graph *g, const qf_data_source *calib, const qf_quant_target_options *opt,
                                qf_graph **out, qf_quantize_model_result *m, qf_quant_target_result *t);
void qf_quant_target_result_free(qf_quant_target_result *t);

/* The report `qfold quantize --report` writes, as one JSON object (*json
 * from qf_malloc, the caller frees; src/quant/report.c): the ptq pipeline's
 * pass report (qf_pass_report_json) with the quantization's members: input,
 * output, target, set, calibration (samples, batch, batch_note, files),
 * counts, tensors (every quantized tensor's scale, zero point and observed
 * range), equalize, left_float, the quantizer's two pipelines and the
 * per-layer SQNR, worst first. `info` (may be NULL) names what the result
 * does not hold: the files (NULL: null) and the rules applied to p. */
typedef struct qf_quantize_report_info {
    const char *input, *output;          /* the model files (NULL: null) */
    const char *const *sets;             /* the rules applied to the profile ("KEY=VALUE"), in order */
    int nsets;
    const char *const *files;            /* the calibration data's files (NULL entries: null) */
    int nfiles;
    const qf_quant_target_result *target; /* --max-drop: the trials ("accuracy_target"); NULL: none */
} qf_quantize_report_info;
qf_status qf_quantize_model_report_json(const qf_quantize_model_result *m, const qf_quant_profile *p,
                                        const qf_quantize_report_info *info, char **json, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
