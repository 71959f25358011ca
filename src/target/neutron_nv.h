/* Private to src/target/: small readers over a node view that the rule files
 * of the element-wise, activation and shape families share (neutron_binary.c,
 * neutron_act.c, neutron_shape.c). They read only; every "no" is spelled by
 * the caller.
 */
#ifndef QF_TARGET_NEUTRON_NV_H
#define QF_TARGET_NEUTRON_NV_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "neutron.h"

/* The product of a shape's dims, unknown (-1) dims counted as 1 (the way
 * ExecuTorch's flat-size helpers count symbolic dims). */
int64_t qf_nv_numel(const qf_value *v);
/* "[1, 8, 4, 4]" into buf. */
const char *qf_nv_shape_str(const qf_value *v, char *buf, size_t n);
/* ExecuTorch's NodeFormatInference, approximated on ONNX: a tensor of rank
 * >= 3 is channels first when it is connected to the data input or output
 * of a Conv, ConvTranspose, pool or Resize through ops that keep the layout
 * (anything but Reshape, Flatten, Squeeze, Unsqueeze and Transpose, which
 * change it, and tensors of rank <= 2); otherwise it is formatless. */
bool qf_nv_channels_first(const qf_graph *g, const qf_value *v);
/* The channel dimension as the Neutron converter sees it: 1 for a channels
 * first tensor, the last dimension for a formatless one. */
int qf_nv_channel_dim(const qf_graph *g, const qf_value *v);

/* QDQ cluster and quantization types: the operand slots in[0..nin_check-1]
 * (NULL / omitted ones skipped) and out[0] are behind a DequantizeLinear /
 * before a QuantizeLinear (ExecuTorch delegates only nodes of a QDQ cluster),
 * and when int8_types, quantized as int8 or uint8
 * (NodeConverter.uses_quantization_type_for_io). */
bool qf_nv_io_quantized(const qf_nview *n, int nin_check, bool int8_types, qf_nwhy *why);
/* Same quantization (scale, zero point, dtype) of two operands, per tensor. */
bool qf_nv_same_qparams(const qf_nq *a, const qf_nq *b);
/* "scale 0.0235 zero point -3 (int8)" into buf. */
const char *qf_nv_qparams_str(const qf_nq *q, char *buf, size_t n);

/* A static operand's values as int64 (int64 / int32 constants): up to max,
 * the count in *count. false when the operand is not a constant with data. */
bool qf_nv_const_ints(const qf_nview *n, int slot, int64_t *dst, int max, int *count);
/* A static operand's float values (a float constant, or a constant behind a
 * DequantizeLinear, dequantized per tensor): up to max. */
bool qf_nv_const_floats(const qf_nview *n, int slot, float *dst, int max, int *count);

/* The compute node behind a value, through QuantizeLinear / DequantizeLinear
 * pairs; NULL for a graph input or a constant. */
const qf_node *qf_nv_compute_producer(const qf_value *v);
/* The compute nodes that read a value, through Q / DQ nodes: up to max of
 * them, the count returned. */
int qf_nv_compute_consumers(const qf_value *v, const qf_node **dst, int max);
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
/* Whether node is one of the partition's compute nodes. */
bool qf_nv_in_partition(const qf_npart *p, const qf_node *node);

#endif
