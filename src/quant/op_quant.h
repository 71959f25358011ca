/* One row per op for quantization: what annotate, lower and the int8
 * executor's readers know about an op, as data (op_quant.c), indexed by
 * qf_op as the op schema is.
 *
 *   const qf_op_quant *r = qf_op_quant_get(n->op);
 *   if (r->pattern == QF_QPAT_FIXED) ... r->fixed ...        // annotate
 *   if (r->lower) QF_TRY(r->lower(g, ctx, n, rq, &done));    // lower
 *   if (r->int8 == QF_INT8_QPARAMS_IN) ... n->inputs[r->qparams_slot] ... // export
 *
 * A row has two halves. The float op's: how a profile that quantizes the op
 * annotates it (`pattern`, with `fixed` for QF_QPAT_FIXED and the weight and
 * bias slots for the weighted patterns), and its int8 form (`lower`, the
 * lowering entry that turns a DQ -> op -> [act] -> Q group into an int8
 * node). The int8 op's (a node of a lowered graph): whether it carries its
 * output's qparams as inputs (which slot) or moves int8 values without
 * changing their qparams. convert reads neither: it works from the
 * annotation's per-value qspecs, which the rows decided.
 *
 * Adding an int8 op: the int8 op's schema row (include/qfold/op.h, ONNX name
 * NULL) and its kernel file (src/ops/int8/), its row here (`.int8`,
 * `.qparams_slot`), and in the float op's row `.lower`, the lowering entry
 * (src/quant/lower.c, with the helpers of lower.h).
 */
#ifndef QFOLD_QUANT_OP_QUANT_H
#define QFOLD_QUANT_OP_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/quant.h"

/* A lowering entry: if n heads a group its int8 op takes, add the int8 node,
 * move the group's Q output's readers to it and set *done (the group's float
 * nodes are left for dead-code elimination); else leave g as it was.
 * ctx (may be NULL) gets a line for what was done or skipped. */
typedef qf_status (*qf_quant_lower_fn)(qf_graph *g, qf_pass_ctx *ctx, qf_node *n,
                                       qf_int8_requant_kind rq, bool *done);

/* What an op is in a lowered graph. */
typedef enum qf_op_int8_kind {
    QF_INT8_NONE = 0, /* not an int8 op */
    QF_INT8_QPARAMS_IN, /* an int8 op whose output's scale and zero point are inputs qparams_slot, +1 */
    QF_INT8_PASSES_QPARAMS /* moves int8 values: its output has input 0's qparams (MaxPool, Reshape, ...) */
} qf_op_int8_kind;

typedef struct qf_op_quant {
    /* The float op, when a profile quantizes it. */
    qf_qpattern pattern;     /* QF_QPAT_NONE: no int8 form, left in float */
    qf_qparams fixed;        /* QF_QPAT_FIXED: the output's qparams */
    int8_t weight_slot;      /* QF_QPAT_CONV / LINEAR: the constant weight's input slot */
    int8_t bias_slot;        /* its bias's (int32 at s_x * s_W), -1: none */
    int8_t weight_axis;      /* the weight's output-channel axis (Gemm: without transB) */
    qf_quant_lower_fn lower; /* its int8 form; NULL: stays DQ -> float op -> Q */
    bool lower_onnx;         /* lowered with ONNX's requantization too (an ONNX integer op) */
    /* The op in a lowered graph. */
    qf_op_int8_kind int8;
    int8_t qparams_slot; /* QF_INT8_QPARAMS_IN */
} qf_op_quant;

/* The row of op (an all-zero row for an op without quantization facts and
 * for QF_OP_COUNT or beyond). */
const qf_op_quant *qf_op_quant_get(qf_op op);

/* The output-channel axis of node n's weight (a weighted op's row), with
 * Gemm's transB applied: B is [in, out], or [out, in] with transB. -1 for
 * an op without a weight. */
int qf_op_quant_weight_axis(const qf_node *n);

#endif
