/* Private helpers shared by the BatchNorm passes (fuse_batch_norm,
 * fuse_batch_norm_forward, decompose_batch_norm, and QAT's qat_bn_add /
 * qat_bn_add_exact): the BN math and the QAT chain's match; the
 * generic rewrite helpers they use too are in rewrite.h.
 *
 *   char why[160];
 *   if (qf_bn_check(g, bn, why, sizeof why)) { qf_pass_skip(ctx, bn, "%s", why); return false; }
 *   qf_bn_affine a;
 *   QF_TRY(qf_bn_affine_init(&a, bn));     // s_c, shift_c in double; validated
 *   ...
 *   qf_bn_affine_free(&a);
 *
 * Inference BatchNorm is the per-channel affine map
 *   BN(y)_c = s_c * (y_c - mu_c) + beta_c,   s_c = gamma_c / sqrt(var_c + eps),
 * i.e. BN(y)_c = s_c * y_c + shift_c with shift_c = beta_c - mu_c * s_c.
 * Everything here is computed in double; callers round once when they write
 * a tensor back.
 */
#ifndef QF_PASSES_BN_MATH_H
#define QF_PASSES_BN_MATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qfold/graph.h"

/* Input slots of BatchNormalization (ONNX order). */
enum { QF_BN_IN_X = 0, QF_BN_IN_SCALE = 1, QF_BN_IN_BIAS = 2, QF_BN_IN_MEAN = 3, QF_BN_IN_VAR = 4 };

/* Channels whose var + eps is below this are reported: their scale s_c is
 * large and amplifies the folded weights (and their quantization error). */
#define QF_BN_SMALL_VAR 1e-6

typedef struct qf_bn_affine {
    int64_t channels;
    double eps;           /* the node's epsilon (float attribute, widened) */
    double *scale;        /* s_c = gamma_c / sqrt(var_c + eps) */
    double *shift;        /* beta_c - mu_c * s_c */
    double *mean;         /* mu_c */
    double *beta;         /* beta_c */
    int64_t *small_var;   /* channels with var + eps < QF_BN_SMALL_VAR */
    int nsmall_var;
    int64_t *dead;        /* channels with gamma == 0 (their output is the constant beta) */
    int ndead;
} qf_bn_affine;

/* True when bn runs in training mode: training_mode != 0 (opset 14+), or
 * its running-statistics outputs exist (opset < 14) or are read. */
bool qf_bn_is_training(const qf_graph *g, const qf_node *bn);

/* The reason bn itself cannot be folded (written to buf, returns true), or
 * false when it can: inference mode, gamma/beta/mean/var constant float
 * tensors of one length C, matching channel axis 1 of X when known. */
bool qf_bn_check(const qf_graph *g, const qf_node *bn, char *buf, size_t size);

/* Compute s and shift for a bn that passed qf_bn_check. QF_ERR_NUMERIC
 * naming the node and channel when var + eps <= 0 or is not finite, naming
 * the tensor when a parameter holds NaN / Inf. */
qf_status qf_bn_affine_init(qf_bn_affine *a, const qf_node *bn);
void qf_bn_affine_free(qf_bn_affine *a);

/* The chain QAT's simulated fusion rewrites (qat_bn_add, qat_bn_add_exact):
 * a conv / conv_transpose / linear whose output has bn as its one reader
 * (and is no graph output), its weight a float32 constant under at most one
 * fake_quant read only by the op, its bias (if any) a float32 constant
 * [C], the channel counts agreeing, linear's output rank 2. */
typedef struct qf_bn_qat_chain {
    qf_node *bn, *prod, *fq;   /* fq: the weight's fake_quant, or NULL */
    qf_value *w, *b;           /* W under the fake_quant; b NULL without bias */
    int axis;                  /* W's output-channel axis: 1 for conv_transpose */
    int64_t group, out_ch;
} qf_bn_qat_chain;

/* Fills *a and returns false when bn heads such a chain (bn passed
 * qf_bn_check too); else writes the reason to why and returns true. */
bool qf_bn_qat_match(const qf_graph *g, qf_node *bn, qf_bn_qat_chain *a, char *why, size_t size);

/* Diagnostics for the rewrite record, as a JSON object (qf_malloc'd, free
 * with qf_free; NULL on out-of-memory): channel count, eps, channels with a
 * small var + eps, dead channels (gamma = 0), and for the folded weight the
 * per-output-channel ranges max|W'| reduced to max, median and their ratio
 * (the spread that per-tensor weight quantization suffers from). `ranges`
 * may be NULL (no weight: decompose). */
char *qf_bn_diag_json(const qf_bn_affine *a, const double *ranges, int64_t nranges);

#endif
