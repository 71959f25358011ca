/* The oneDNN backend's kernel tables, indexed by op: the one place that says
 * which ops oneDNN runs (the kernels are in dnnl_<family>.c). The backend
 * layer (backend.c) hands them to the plan and the training tape. */
#include "backend/dnnl/dnnl_kernels.h"

const qf_backend_kernels *const qf_dnnl_table[QF_OP_COUNT] = {
    [QF_OP_CONV] = &qf_conv_dnnl,
    [QF_OP_CONV_TRANSPOSE] = &qf_conv_transpose_dnnl,
    [QF_OP_GEMM] = &qf_gemm_dnnl,
    [QF_OP_MATMUL] = &qf_matmul_dnnl,
    [QF_OP_LINEAR] = &qf_linear_dnnl,
    [QF_OP_MAX_POOL] = &qf_max_pool_dnnl,
    [QF_OP_AVG_POOL] = &qf_avg_pool_dnnl,
    [QF_OP_GLOBAL_AVG_POOL] = &qf_global_avg_pool_dnnl,
    [QF_OP_BATCH_NORM] = &qf_batch_norm_dnnl,
    [QF_OP_ADD] = &qf_add_dnnl,
    [QF_OP_SUB] = &qf_sub_dnnl,
    [QF_OP_MUL] = &qf_mul_dnnl,
    [QF_OP_DIV] = &qf_div_dnnl,
    [QF_OP_LEAKY_RELU] = &qf_leaky_relu_dnnl,
    [QF_OP_SIGMOID] = &qf_sigmoid_dnnl,
    [QF_OP_TANH] = &qf_tanh_dnnl,
    [QF_OP_HARD_SWISH] = &qf_hard_swish_dnnl,
    [QF_OP_QLINEAR_CONV] = &qf_qlinear_conv_dnnl,
};

const qf_backend_kernels *const qf_dnnl_train_table[QF_OP_COUNT] = {
    [QF_OP_CONV] = &qf_conv_dnnl_train,
    [QF_OP_CONV_TRANSPOSE] = &qf_conv_transpose_dnnl_train,
};
