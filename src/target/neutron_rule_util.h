/* Private to src/target/: the readers and checks every Neutron rule file
 * shares (neutron_conv.c, neutron_pool.c, neutron_binary.c, neutron_act.c,
 * neutron_shape.c). The checks fill why in the rule files' words and return
 * false on a "no", like a rule; the readers only read.
 *
 *   if (!qf_nrule_io_quantized(n, 1, true, why)) return false; // input 0, output int8 / uint8
 *   if (!qf_nrule_shared_qparams(n, 1, why)) return false;
 *   int cd = qf_nrule_channel_dim(n->g, n->in[0].v);           // 1 or the last dim
 */
#ifndef QF_TARGET_NEUTRON_RULE_UTIL_H
#define QF_TARGET_NEUTRON_RULE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "neutron.h"

/* --- Quantization ------------------------------------------------------- */

/* The QDQ cluster and, when int8_types, the types of
 * NodeConverter.uses_quantization_type_for_io(node, [int8, uint8], [0 ..
 * nin_check-1], [0]): inputs in[0 .. nin_check-1] (omitted ones skipped)
 * behind a DequantizeLinear and output 0 before a QuantizeLinear, and with
 * int8_types all of them int8 or uint8. int8_types false is SDK 2.x's
 * partitioner, which takes any node inside a QDQ cluster. */
bool qf_nrule_io_quantized(const qf_nview *n, int nin_check, bool int8_types, qf_nwhy *why);
/* Input `slot` quantized to `dt` (int8 weights, int32 bias); what names the
 * operand in the message ("the weights"). */
bool qf_nrule_in_type(const qf_nview *n, int slot, qf_dtype dt, const char *what, qf_nwhy *why);
/* Input `slot` a constant (behind its DequantizeLinear or itself). */
bool qf_nrule_in_static(const qf_nview *n, int slot, const char *what, const char *fix,
                        qf_nwhy *why);
/* Both quantized with the same dtype, scales and zero points (exactly, as
 * ExecuTorch compares them; per channel: every channel). */
bool qf_nrule_same_qparams(const qf_nq *a, const qf_nq *b);
/* NodeConverter._has_shared_q_params_if_quantized and the converters that
 * do not rescale (cat, maximum / minimum, permute, constant pad): every
 * quantized input in[0 .. nin_check-1] quantized like output 0
 * (qf_nrule_same_qparams). Operands not quantized pass (the type checks
 * refuse them). */
bool qf_nrule_shared_qparams(const qf_nview *n, int nin_check, qf_nwhy *why);
/* "scale 0.0235 zero point -3 (int8)" into buf. */
const char *qf_nrule_qparams_str(const qf_nq *q, char *buf, size_t size);

/* --- Shapes and layout -------------------------------------------------- */

/* The product of a shape's dims, unknown (-1) dims counted as 1 (the way
 * ExecuTorch's flat-size helpers count symbolic dims). */
int64_t qf_nrule_numel(const qf_value *v);
/* "[1, 3, 224, 224]" of v into buf, "?" for an unknown dim; "[?]" when v is
 * NULL. */
const char *qf_nrule_shape_str(const qf_value *v, char *buf, size_t size);
/* ExecuTorch's NodeFormatInference on the ONNX graph: whether tensor v (rank
 * >= 3) is channels first, i.e. shares a layout with the data input or
 * output of a 2-D Conv / ConvTranspose / pool / Resize (ops that always run
 * NCHW) through ops that keep the layout. Reshape, Flatten, Squeeze,
 * Unsqueeze, Transpose (view_copy / permute_copy), reductions without
 * keepdims and MatMul / Einsum (PyTorch reshapes around its products) change
 * it; a tensor of rank <= 2 is formatless and ends the walk. */
bool qf_nrule_channels_first(const qf_graph *g, const qf_value *v);
/* The channel dimension as the Neutron converter sees it: 1 for a channels
 * first tensor, the last dimension for a formatless one; -1 for rank 0. */
int qf_nrule_channel_dim(const qf_graph *g, const qf_value *v);

/* --- Operands and neighbours -------------------------------------------- */

/* A static operand's values as int64 (int64 / int32 constants): up to max,
 * the count in *count. false when the operand is not a constant with data. */
bool qf_nrule_const_ints(const qf_nview *n, int slot, int64_t *dst, int max, int *count);
/* A static operand's float values (a float constant, or a constant behind a
 * DequantizeLinear, dequantized per tensor): up to max. */
bool qf_nrule_const_floats(const qf_nview *n, int slot, float *dst, int max, int *count);
/* The compute node behind a value, through QuantizeLinear / DequantizeLinear
 * pairs; NULL for a graph input or a constant. */
const qf_node *qf_nrule_compute_producer(const qf_value *v);
/* The compute nodes that read a value, through Q / DQ nodes: up to max of
 * them, the count returned. */
int qf_nrule_compute_consumers(const qf_value *v, const qf_node **dst, int max);
/* Whether node is one of the partition's compute nodes. */
bool qf_nrule_in_partition(const qf_npart *p, const qf_node *node);

/* printf into why->fix (after qf_neutron_refuse filled the rule); returns
 * false, a rule's "no". */
bool qf_nrule_fix(qf_nwhy *why, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* --- Defined by the rule files, used across them ------------------------ */

/* Whether a Sqrt is the first half of 1/sqrt(x) (its only reader a
 * Reciprocal or a Div(1, .)): the pair maps to Neutron's Rsqrt
 * (neutron_act.c). */
bool qf_neutron_is_rsqrt_sqrt(const qf_node *sqrt_node);
/* The partition rule of the ops that are no-ops on Neutron (Reshape family,
 * Identity, Dropout, a one-input Concat, a Resize by 1): a partition of
 * no-ops only goes to the CPU (NeutronPartitioner's no-op partition check;
 * neutron_shape.c). */
bool qf_neutron_noop_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                               qf_nwhy *why);

#endif
