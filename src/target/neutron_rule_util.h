/* Private to src/target/: checks several Neutron rule files share
 * (neutron_conv.c, neutron_pool.c). Each fills why in the rule files' words
 * and returns false on a "no", like a rule.
 *
 *   if (!qf_nrule_io_int8(n, 0, why)) return false;   // main input, output int8 / uint8
 *   if (!qf_nrule_shared_qparams(n, why)) return false;
 */
#ifndef QF_TARGET_NEUTRON_RULE_UTIL_H
#define QF_TARGET_NEUTRON_RULE_UTIL_H

#include "neutron.h"

/* ExecuTorch's uses_quantization_type_for_io(node, [int8, uint8], [slot],
 * [0]): input `slot` behind a DequantizeLinear and output 0 before a
 * QuantizeLinear, both int8 or uint8. */
bool qf_nrule_io_int8(const qf_nview *n, int slot, qf_nwhy *why);
/* Input `slot` quantized to `dt` (int8 weights, int32 bias); what names the
 * operand in the message ("the weights"). */
bool qf_nrule_in_type(const qf_nview *n, int slot, qf_dtype dt, const char *what, qf_nwhy *why);
/* Input `slot` a constant (behind its DequantizeLinear or itself). */
bool qf_nrule_in_static(const qf_nview *n, int slot, const char *what, const char *fix,
                        qf_nwhy *why);
/* SDK 2.x: the partitioner takes only nodes inside a QDQ cluster (main
 * input dequantized, output quantized); no type check beyond that. */
bool qf_nrule_quantized(const qf_nview *n, qf_nwhy *why);
/* NodeConverter._has_shared_q_params_if_quantized: input 0 and output 0
 * with the same scale and zero point (exactly, as ExecuTorch compares them). */
bool qf_nrule_shared_qparams(const qf_nview *n, qf_nwhy *why);

/* Whether ExecuTorch's NodeFormatInference would mark this node's tensors
 * channels-first: connected to a 2-D Conv / ConvTranspose / pool / Resize (ops
 * that always run NCHW) through ops that keep the format (elementwise,
 * activations, Concat, Pad, Q / DQ, ...), not through the ones that change
 * it (Reshape, Flatten, Transpose, Squeeze / Unsqueeze, reductions, Gemm,
 * MatMul). */
bool qf_nrule_channels_first(const qf_graph *g, const qf_node *node);

/* printf into why->fix (after qf_neutron_refuse filled the rule); returns
 * false, a rule's "no". */
bool qf_nrule_fix(qf_nwhy *why, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* "[1, 3, 224, 224]" of v into buf; "[?]" when v is NULL. */
const char *qf_nrule_shape_str(const qf_value *v, char *buf, size_t size);

#endif
