/* Shape inference, kernels and scratch sizes of every op, by family.
 * Each family lives in src/ops/<family>.c; the op table points at these. */
#ifndef QF_KERNELS_H
#define QF_KERNELS_H

#include "op_table.h"

/* conv.c */
qf_status qf_conv_infer(qf_graph *g, qf_node *n);
qf_status qf_conv_forward(const qf_kernel_io *io);
size_t qf_conv_scratch(const qf_node *n);
qf_status qf_conv_transpose_infer(qf_graph *g, qf_node *n);
qf_status qf_conv_transpose_forward(const qf_kernel_io *io);
size_t qf_conv_transpose_scratch(const qf_node *n);

/* norm.c */
qf_status qf_batch_norm_infer(qf_graph *g, qf_node *n);
qf_status qf_batch_norm_forward(const qf_kernel_io *io);
qf_status qf_layer_norm_infer(qf_graph *g, qf_node *n);
qf_status qf_layer_norm_forward(const qf_kernel_io *io);

/* linear.c */
qf_status qf_gemm_infer(qf_graph *g, qf_node *n);
qf_status qf_gemm_forward(const qf_kernel_io *io);
qf_status qf_matmul_infer(qf_graph *g, qf_node *n);
qf_status qf_matmul_forward(const qf_kernel_io *io);
qf_status qf_linear_infer(qf_graph *g, qf_node *n);
qf_status qf_linear_forward(const qf_kernel_io *io);

/* einsum.c */
qf_status qf_einsum_infer(qf_graph *g, qf_node *n);
qf_status qf_einsum_forward(const qf_kernel_io *io);
size_t qf_einsum_scratch(const qf_node *n);

/* elementwise.c */
qf_status qf_add_infer(qf_graph *g, qf_node *n);
qf_status qf_add_forward(const qf_kernel_io *io);
qf_status qf_sub_infer(qf_graph *g, qf_node *n);
qf_status qf_sub_forward(const qf_kernel_io *io);
qf_status qf_mul_infer(qf_graph *g, qf_node *n);
qf_status qf_mul_forward(const qf_kernel_io *io);
qf_status qf_div_infer(qf_graph *g, qf_node *n);
qf_status qf_div_forward(const qf_kernel_io *io);
qf_status qf_pow_infer(qf_graph *g, qf_node *n);
qf_status qf_pow_forward(const qf_kernel_io *io);
qf_status qf_sqrt_infer(qf_graph *g, qf_node *n);
qf_status qf_sqrt_forward(const qf_kernel_io *io);
qf_status qf_reciprocal_infer(qf_graph *g, qf_node *n);
qf_status qf_reciprocal_forward(const qf_kernel_io *io);
qf_status qf_neg_infer(qf_graph *g, qf_node *n);
qf_status qf_neg_forward(const qf_kernel_io *io);
qf_status qf_mod_infer(qf_graph *g, qf_node *n);
qf_status qf_mod_forward(const qf_kernel_io *io);
qf_status qf_equal_infer(qf_graph *g, qf_node *n);
qf_status qf_equal_forward(const qf_kernel_io *io);
qf_status qf_not_infer(qf_graph *g, qf_node *n);
qf_status qf_not_forward(const qf_kernel_io *io);

/* activation.c */
qf_status qf_relu_infer(qf_graph *g, qf_node *n);
qf_status qf_relu_forward(const qf_kernel_io *io);
qf_status qf_relu6_infer(qf_graph *g, qf_node *n);
qf_status qf_relu6_forward(const qf_kernel_io *io);
qf_status qf_clip_infer(qf_graph *g, qf_node *n);
qf_status qf_clip_forward(const qf_kernel_io *io);
qf_status qf_leaky_relu_infer(qf_graph *g, qf_node *n);
qf_status qf_leaky_relu_forward(const qf_kernel_io *io);
qf_status qf_sigmoid_infer(qf_graph *g, qf_node *n);
qf_status qf_sigmoid_forward(const qf_kernel_io *io);
qf_status qf_tanh_infer(qf_graph *g, qf_node *n);
qf_status qf_tanh_forward(const qf_kernel_io *io);
qf_status qf_erf_infer(qf_graph *g, qf_node *n);
qf_status qf_erf_forward(const qf_kernel_io *io);
qf_status qf_hard_sigmoid_infer(qf_graph *g, qf_node *n);
qf_status qf_hard_sigmoid_forward(const qf_kernel_io *io);
qf_status qf_hard_swish_infer(qf_graph *g, qf_node *n);
qf_status qf_hard_swish_forward(const qf_kernel_io *io);
qf_status qf_softmax_infer(qf_graph *g, qf_node *n);
qf_status qf_softmax_forward(const qf_kernel_io *io);

/* pool.c */
qf_status qf_max_pool_infer(qf_graph *g, qf_node *n);
qf_status qf_max_pool_forward(const qf_kernel_io *io);
qf_status qf_avg_pool_infer(qf_graph *g, qf_node *n);
qf_status qf_avg_pool_forward(const qf_kernel_io *io);
qf_status qf_global_avg_pool_infer(qf_graph *g, qf_node *n);
qf_status qf_global_avg_pool_forward(const qf_kernel_io *io);
qf_status qf_reduce_mean_infer(qf_graph *g, qf_node *n);
qf_status qf_reduce_mean_forward(const qf_kernel_io *io);

/* layout.c */
qf_status qf_flatten_infer(qf_graph *g, qf_node *n);
qf_status qf_flatten_forward(const qf_kernel_io *io);
qf_status qf_reshape_infer(qf_graph *g, qf_node *n);
qf_status qf_reshape_forward(const qf_kernel_io *io);
qf_status qf_transpose_infer(qf_graph *g, qf_node *n);
qf_status qf_transpose_forward(const qf_kernel_io *io);
qf_status qf_concat_infer(qf_graph *g, qf_node *n);
qf_status qf_concat_forward(const qf_kernel_io *io);
qf_status qf_slice_infer(qf_graph *g, qf_node *n);
qf_status qf_slice_forward(const qf_kernel_io *io);
qf_status qf_split_infer(qf_graph *g, qf_node *n);
qf_status qf_split_forward(const qf_kernel_io *io);
qf_status qf_squeeze_infer(qf_graph *g, qf_node *n);
qf_status qf_squeeze_forward(const qf_kernel_io *io);
qf_status qf_unsqueeze_infer(qf_graph *g, qf_node *n);
qf_status qf_unsqueeze_forward(const qf_kernel_io *io);
qf_status qf_pad_infer(qf_graph *g, qf_node *n);
qf_status qf_pad_forward(const qf_kernel_io *io);
qf_status qf_identity_infer(qf_graph *g, qf_node *n);
qf_status qf_identity_forward(const qf_kernel_io *io);
qf_status qf_dropout_infer(qf_graph *g, qf_node *n);
qf_status qf_dropout_forward(const qf_kernel_io *io);

/* constant.c */
qf_status qf_constant_infer(qf_graph *g, qf_node *n);
qf_status qf_constant_forward(const qf_kernel_io *io);
qf_status qf_constant_of_shape_infer(qf_graph *g, qf_node *n);
qf_status qf_constant_of_shape_forward(const qf_kernel_io *io);
qf_status qf_shape_infer(qf_graph *g, qf_node *n);
qf_status qf_shape_forward(const qf_kernel_io *io);
qf_status qf_gather_infer(qf_graph *g, qf_node *n);
qf_status qf_gather_forward(const qf_kernel_io *io);
qf_status qf_cast_infer(qf_graph *g, qf_node *n);
qf_status qf_cast_forward(const qf_kernel_io *io);

/* index.c */
qf_status qf_expand_infer(qf_graph *g, qf_node *n);
qf_status qf_expand_forward(const qf_kernel_io *io);
qf_status qf_where_infer(qf_graph *g, qf_node *n);
qf_status qf_where_forward(const qf_kernel_io *io);
qf_status qf_range_infer(qf_graph *g, qf_node *n);
qf_status qf_range_forward(const qf_kernel_io *io);
qf_status qf_scatter_nd_infer(qf_graph *g, qf_node *n);
qf_status qf_scatter_nd_forward(const qf_kernel_io *io);

/* quant.c */
qf_status qf_quantize_infer(qf_graph *g, qf_node *n);
qf_status qf_quantize_forward(const qf_kernel_io *io);
qf_status qf_dequantize_infer(qf_graph *g, qf_node *n);
qf_status qf_dequantize_forward(const qf_kernel_io *io);

#endif
