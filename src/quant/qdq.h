/* The QDQ form's graph edits, shared by the converters that write it: PTQ's
 * convert (convert.c) and QAT's (the fake_quant / exported-QAT paths). Each
 * takes values of a sorted graph; new nodes are appended (toposort after).
 *
 *   qf_qdq_weight:  W (float32 constant) -> W_quantized (int8, clamped to
 *                   [qmin, qmax]) -> DequantizeLinear(scale[, axis]) -> every
 *                   reader of W; W is dropped when nothing else reads it.
 *   qf_qdq_bias:    b -> b_quantized (int32, round half to even of
 *                   b / (s_in * s_w) with the scale a float32 product) -> DQ
 *   qf_qdq_pair:    v -> QuantizeLinear -> DequantizeLinear -> v's readers
 *                   (and v's graph-output slot); qf_qdq_pair_axis: the same
 *                   per channel (a float weight's pair in an exported QAT model)
 *   qf_qdq_const:   an already quantized tensor q (int8 / uint8 / int32,
 *                   consumed) behind a DequantizeLinear replacing `orig`
 *
 * Names: <v>_quantized, <v>_scale, <v>_zero_point, <v>_QuantizeLinear,
 * <v>_DequantizeLinear, <v>_dequantized (qf_quant_measure_sqnr finds the
 * activations by the last). */
#ifndef QFOLD_QUANT_QDQ_H
#define QFOLD_QUANT_QDQ_H

#include "qfold/graph.h"

/* axis -1: per tensor (scale[0]); else scale[c] per index c of W's axis. */
qf_status qf_qdq_weight(qf_graph *g, qf_value *w, const float *scale, int axis, int32_t qmin, int32_t qmax);
/* sw: nw weight scales (1: per tensor); scale (numel(b) entries) receives
 * the bias scales written. QF_ERR_SHAPE when nw is neither 1 nor numel(b). */
qf_status qf_qdq_bias(qf_graph *g, qf_value *b, float s_in, const float *sw, int64_t nw, float *scale);
/* qdt: QF_DTYPE_I8 or QF_DTYPE_U8 (the zero point's and the quantized value's type). */
qf_status qf_qdq_pair(qf_graph *g, qf_value *v, float scale, int32_t zero_point, qf_dtype qdt);
/* n scales / zero points along v's axis (axis -1: one, written as scalars). */
qf_status qf_qdq_pair_axis(qf_graph *g, qf_value *v, const float *scale, const int32_t *zero_point, int64_t n,
                           int axis, qf_dtype qdt);
/* n scales (axis -1: one, written as scalars); q's dtype is the zero point's. */
qf_status qf_qdq_const(qf_graph *g, qf_value *orig, qf_tensor *q, const float *scale, int64_t n, int axis);

#endif
