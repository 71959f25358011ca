/* The op table: one row per op of QF_OP_LIST, in designated initializers.
 * Columns: arity (inputs, outputs; -1 = variadic), the scratch-size function,
 * the role of each input. Shape inference and the forward kernel are found
 * by name: qf_<name>_infer / qf_<name>_forward in src/ops/<family>.c. */
#include "kernels.h"
#include "op_table.h"

#define QF_OP_ROW_(tag, nm, min_in, max_in, min_out, max_out, scratch_fn, ...) \
    [QF_OP_##tag] = {.name = #nm,                                                \
                     .min_inputs = min_in, .max_inputs = max_in,                  \
                     .min_outputs = min_out, .max_outputs = max_out,              \
                     .roles = {__VA_ARGS__},                                      \
                     .infer = qf_##nm##_infer,                                    \
                     .forward = qf_##nm##_forward,                                \
                     .scratch = scratch_fn}

const qf_op_info qf_op_table[QF_OP_COUNT] = {
    QF_OP_ROW_(CONV, conv, 2, 3, 1, 1, qf_conv_scratch, QF_ROLE_DATA, QF_ROLE_WEIGHT, QF_ROLE_BIAS),
    QF_OP_ROW_(CONV_TRANSPOSE, conv_transpose, 2, 3, 1, 1, qf_conv_transpose_scratch, QF_ROLE_DATA, QF_ROLE_WEIGHT, QF_ROLE_BIAS),
    QF_OP_ROW_(BATCH_NORM, batch_norm, 5, 5, 1, 3, NULL, QF_ROLE_DATA, QF_ROLE_BN_SCALE, QF_ROLE_BN_SHIFT, QF_ROLE_BN_STAT, QF_ROLE_BN_STAT),
    QF_OP_ROW_(LAYER_NORM, layer_norm, 2, 3, 1, 3, NULL, QF_ROLE_DATA, QF_ROLE_WEIGHT, QF_ROLE_BIAS),
    QF_OP_ROW_(GEMM, gemm, 2, 3, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_WEIGHT, QF_ROLE_BIAS),
    QF_OP_ROW_(MATMUL, matmul, 2, 2, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_WEIGHT),
    QF_OP_ROW_(EINSUM, einsum, 1, -1, 1, 1, qf_einsum_scratch, QF_ROLE_DATA),
    QF_OP_ROW_(LINEAR, linear, 2, 3, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_WEIGHT, QF_ROLE_BIAS),
    QF_OP_ROW_(ADD, add, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(SUB, sub, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(MUL, mul, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(DIV, div, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(POW, pow, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(SQRT, sqrt, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(RECIPROCAL, reciprocal, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(NEG, neg, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(MOD, mod, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(EQUAL, equal, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(NOT, not, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(WHERE, where, 3, 3, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(RELU, relu, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(RELU6, relu6, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(CLIP, clip, 1, 3, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(LEAKY_RELU, leaky_relu, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(SIGMOID, sigmoid, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(TANH, tanh, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(ERF, erf, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(HARD_SIGMOID, hard_sigmoid, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(HARD_SWISH, hard_swish, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(SOFTMAX, softmax, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(MAX_POOL, max_pool, 1, 1, 1, 2, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(AVG_POOL, avg_pool, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(GLOBAL_AVG_POOL, global_avg_pool, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(REDUCE_MEAN, reduce_mean, 1, 2, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(FLATTEN, flatten, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(RESHAPE, reshape, 2, 2, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(TRANSPOSE, transpose, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(CONCAT, concat, 1, -1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(SLICE, slice, 1, 5, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE, QF_ROLE_SHAPE, QF_ROLE_SHAPE, QF_ROLE_SHAPE),
    QF_OP_ROW_(SPLIT, split, 1, 2, 1, -1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(SQUEEZE, squeeze, 1, 2, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(UNSQUEEZE, unsqueeze, 1, 2, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(PAD, pad, 1, 4, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(EXPAND, expand, 2, 2, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_SHAPE),
    QF_OP_ROW_(IDENTITY, identity, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(DROPOUT, dropout, 1, 3, 1, 2, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(CONSTANT, constant, 0, 0, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(CONSTANT_OF_SHAPE, constant_of_shape, 1, 1, 1, 1, NULL, QF_ROLE_SHAPE),
    QF_OP_ROW_(SHAPE, shape, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(GATHER, gather, 2, 2, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(CAST, cast, 1, 1, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(RANGE, range, 3, 3, 1, 1, NULL, QF_ROLE_SHAPE, QF_ROLE_SHAPE, QF_ROLE_SHAPE),
    QF_OP_ROW_(SCATTER_ND, scatter_nd, 3, 3, 1, 1, NULL, QF_ROLE_DATA, QF_ROLE_DATA, QF_ROLE_DATA),
    QF_OP_ROW_(QUANTIZE, quantize, 2, 3, 1, 1, NULL, QF_ROLE_DATA),
    QF_OP_ROW_(DEQUANTIZE, dequantize, 2, 3, 1, 1, NULL, QF_ROLE_DATA),
};

#undef QF_OP_ROW_

/* Every op of QF_OP_LIST has a row: a missing row leaves .infer NULL, which
 * the verifier reports; this assert catches a list/table size mismatch. */
_Static_assert(sizeof qf_op_table / sizeof qf_op_table[0] == QF_OP_COUNT, "op table incomplete");
