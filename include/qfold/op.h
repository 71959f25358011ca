/* qfold — the op list and its schema.
 *
 * One X-macro list holds the schema of every op, one row each:
 *
 *   X(TAG, name, onnx_op_type, onnx_domain, min_in, max_in, min_out, max_out,
 *     (input roles, one per slot), (attributes: A(name, TYPE) ...))
 *
 *   TAG          the enum tag (QF_OP_TAG)
 *   name         qfold's own name (ATen style), also the stem of the op's
 *                kernel columns (qf_<name>_kernels, src/ops/)
 *   onnx_op_type NULL for an internal op that export lowers to ONNX ops
 *   onnx_domain  "" for the default ONNX domain
 *   min/max      arity; max -1 = variadic
 *   roles        how the op uses each input slot (qf_input_role without its
 *                QF_ROLE_ prefix); slots past the list are DATA
 *   attributes   the attributes import reads with a fixed type; a file giving
 *                one with another type is refused
 *
 * The roles and attributes are only expanded by the schema table
 * (src/ir/op.c, read through qf_op_schema_get in qfold/schema.h). Shape
 * inference and kernels are columns of the op table in src/ops/.
 *
 *   qf_op op = qf_op_from_onnx("Conv");      // QF_OP_CONV, or QF_OP_COUNT
 *   printf("%s\n", qf_op_name(op));          // "conv"
 */
#ifndef QFOLD_OP_H
#define QFOLD_OP_H

#ifdef __cplusplus
extern "C" {
#endif

/* A test build (QF_TEST_EXTRA_OPS, tests/ops/extra_op.cmake) appends made-up
 * ops to the list from its own header; every other build has none. */
#ifdef QF_TEST_EXTRA_OPS
#include "qf_test_extra_ops.h"
#endif
#ifndef QF_EXTRA_OP_LIST
#define QF_EXTRA_OP_LIST(X)
#endif

#define QF_OP_LIST(X)                                                                 \
    X(CONV, conv, "Conv", "", 2, 3, 1, 1,                                             \
      (DATA, WEIGHT, BIAS),                                                           \
      (A(auto_pad,STRING) A(dilations,INTS) A(group,INT)                              \
       A(kernel_shape,INTS) A(pads,INTS) A(strides,INTS)))                            \
    X(CONV_TRANSPOSE, conv_transpose, "ConvTranspose", "", 2, 3, 1, 1,                \
      (DATA, WEIGHT, BIAS),                                                           \
      (A(auto_pad,STRING) A(dilations,INTS) A(group,INT) A(kernel_shape,INTS)         \
       A(output_padding,INTS) A(output_shape,INTS) A(pads,INTS) A(strides,INTS)))     \
    X(BATCH_NORM, batch_norm, "BatchNormalization", "", 5, 5, 1, 3,                   \
      (DATA, BN_SCALE, BN_SHIFT, BN_STAT, BN_STAT),                                   \
      (A(epsilon,FLOAT) A(momentum,FLOAT)))                                           \
    X(LAYER_NORM, layer_norm, "LayerNormalization", "", 2, 3, 1, 3,                   \
      (DATA, WEIGHT, BIAS),                                                           \
      (A(axis,INT) A(epsilon,FLOAT)))                                                 \
    X(GEMM, gemm, "Gemm", "", 2, 3, 1, 1,                                             \
      (DATA, WEIGHT, BIAS),                                                           \
      (A(alpha,FLOAT) A(beta,FLOAT) A(transA,INT) A(transB,INT)))                     \
    X(MATMUL, matmul, "MatMul", "", 2, 2, 1, 1,                                       \
      (DATA, WEIGHT),                                                                 \
      ())                                                                             \
    X(EINSUM, einsum, "Einsum", "", 1, -1, 1, 1,                                      \
      (DATA),                                                                         \
      ())                                                                             \
    X(LINEAR, linear, NULL, "", 2, 3, 1, 1,                                           \
      (DATA, WEIGHT, BIAS),                                                           \
      ())                                                                             \
    X(ADD, add, "Add", "", 2, 2, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(SUB, sub, "Sub", "", 2, 2, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(MUL, mul, "Mul", "", 2, 2, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(DIV, div, "Div", "", 2, 2, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(MAX, max, "Max", "", 1, -1, 1, 1,                                               \
      (DATA),                                                                         \
      ())                                                                             \
    X(MIN, min, "Min", "", 1, -1, 1, 1,                                               \
      (DATA),                                                                         \
      ())                                                                             \
    X(POW, pow, "Pow", "", 2, 2, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(SQRT, sqrt, "Sqrt", "", 1, 1, 1, 1,                                             \
      (DATA),                                                                         \
      ())                                                                             \
    X(EXP, exp, "Exp", "", 1, 1, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(LOG, log, "Log", "", 1, 1, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(RECIPROCAL, reciprocal, "Reciprocal", "", 1, 1, 1, 1,                           \
      (DATA),                                                                         \
      ())                                                                             \
    X(NEG, neg, "Neg", "", 1, 1, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(ABS, abs, "Abs", "", 1, 1, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(MOD, mod, "Mod", "", 2, 2, 1, 1,                                                \
      (DATA),                                                                         \
      (A(fmod,INT)))                                                                  \
    X(EQUAL, equal, "Equal", "", 2, 2, 1, 1,                                          \
      (DATA),                                                                         \
      ())                                                                             \
    X(NOT, not, "Not", "", 1, 1, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(WHERE, where, "Where", "", 3, 3, 1, 1,                                          \
      (DATA),                                                                         \
      ())                                                                             \
    X(RELU, relu, "Relu", "", 1, 1, 1, 1,                                             \
      (DATA),                                                                         \
      ())                                                                             \
    X(RELU6, relu6, NULL, "", 1, 1, 1, 1,                                             \
      (DATA),                                                                         \
      ())                                                                             \
    X(CLIP, clip, "Clip", "", 1, 3, 1, 1,                                             \
      (DATA),                                                                         \
      ())                                                                             \
    X(LEAKY_RELU, leaky_relu, "LeakyRelu", "", 1, 1, 1, 1,                            \
      (DATA),                                                                         \
      (A(alpha,FLOAT)))                                                               \
    X(PRELU, prelu, "PRelu", "", 2, 2, 1, 1,                                          \
      (DATA, WEIGHT),                                                                 \
      ())                                                                             \
    X(SIGMOID, sigmoid, "Sigmoid", "", 1, 1, 1, 1,                                    \
      (DATA),                                                                         \
      ())                                                                             \
    X(TANH, tanh, "Tanh", "", 1, 1, 1, 1,                                             \
      (DATA),                                                                         \
      ())                                                                             \
    X(ERF, erf, "Erf", "", 1, 1, 1, 1,                                                \
      (DATA),                                                                         \
      ())                                                                             \
    X(HARD_SIGMOID, hard_sigmoid, "HardSigmoid", "", 1, 1, 1, 1,                      \
      (DATA),                                                                         \
      (A(alpha,FLOAT) A(beta,FLOAT)))                                                 \
    X(HARD_SWISH, hard_swish, "HardSwish", "", 1, 1, 1, 1,                            \
      (DATA),                                                                         \
      ())                                                                             \
    X(SOFTMAX, softmax, "Softmax", "", 1, 1, 1, 1,                                    \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(SOFTMAX_CE_LOSS, softmax_ce_loss, "SoftmaxCrossEntropyLoss", "", 2, 3, 1, 2,    \
      (DATA, DATA, DATA),                                                             \
      (A(ignore_index,INT) A(reduction,STRING)))                                      \
    X(MSE_LOSS, mse_loss, NULL, "", 2, 2, 1, 1,                                       \
      (DATA, DATA),                                                                   \
      (A(reduction,STRING)))                                                          \
    X(FAKE_QUANT, fake_quant, NULL, "", 5, 5, 1, 1,                                   \
      (DATA, BN_STAT, BN_STAT, BN_STAT, BN_STAT),                                     \
      (A(quant_min,INT) A(quant_max,INT) A(axis,INT) A(averaging_constant,FLOAT)      \
       A(symmetric,INT) A(eps,FLOAT) A(observe,INT) A(enabled,INT)))                  \
    X(QAT_BN_WEIGHT, qat_bn_weight, NULL, "", 3, 3, 1, 1,                             \
      (WEIGHT, BN_SCALE, BN_STAT),                                                    \
      (A(epsilon,FLOAT) A(axis,INT) A(group,INT)))                                    \
    X(QAT_BN_OUTPUT, qat_bn_output, NULL, "", 3, 4, 1, 1,                             \
      (DATA, BN_SCALE, BN_STAT, BIAS),                                                \
      (A(epsilon,FLOAT)))                                                             \
    X(QAT_BN_STATS, qat_bn_stats, NULL, "", 3, 4, 1, 1,                               \
      (DATA, BN_STAT, BN_STAT, BIAS),                                                 \
      (A(momentum,FLOAT) A(qfold_frozen,INT)))                                        \
    X(QAT_BN_EXACT, qat_bn_exact, NULL, "", 6, 7, 1, 1,                               \
      (DATA, BN_SCALE, BN_SHIFT, BN_STAT, BN_STAT),                                   \
      (A(epsilon,FLOAT) A(momentum,FLOAT) A(qfold_frozen,INT)))                       \
    X(MAX_POOL, max_pool, "MaxPool", "", 1, 1, 1, 2,                                  \
      (DATA),                                                                         \
      (A(auto_pad,STRING) A(ceil_mode,INT) A(dilations,INTS) A(kernel_shape,INTS)     \
       A(pads,INTS) A(storage_order,INT) A(strides,INTS)))                            \
    X(AVG_POOL, avg_pool, "AveragePool", "", 1, 1, 1, 1,                              \
      (DATA),                                                                         \
      (A(auto_pad,STRING) A(ceil_mode,INT) A(count_include_pad,INT) A(dilations,INTS) \
       A(kernel_shape,INTS) A(pads,INTS) A(strides,INTS)))                            \
    X(GLOBAL_AVG_POOL, global_avg_pool, "GlobalAveragePool", "", 1, 1, 1, 1,          \
      (DATA),                                                                         \
      ())                                                                             \
    X(REDUCE_MEAN, reduce_mean, "ReduceMean", "", 1, 2, 1, 1,                         \
      (DATA, SHAPE),                                                                  \
      (A(axes,INTS) A(keepdims,INT) A(noop_with_empty_axes,INT)))                     \
    X(REDUCE_SUM, reduce_sum, "ReduceSum", "", 1, 2, 1, 1,                            \
      (DATA, SHAPE),                                                                  \
      (A(axes,INTS) A(keepdims,INT) A(noop_with_empty_axes,INT)))                     \
    X(REDUCE_MAX, reduce_max, "ReduceMax", "", 1, 2, 1, 1,                            \
      (DATA, SHAPE),                                                                  \
      (A(axes,INTS) A(keepdims,INT) A(noop_with_empty_axes,INT)))                     \
    X(FLATTEN, flatten, "Flatten", "", 1, 1, 1, 1,                                    \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(RESHAPE, reshape, "Reshape", "", 2, 2, 1, 1,                                    \
      (DATA, SHAPE),                                                                  \
      (A(allowzero,INT)))                                                             \
    X(TRANSPOSE, transpose, "Transpose", "", 1, 1, 1, 1,                              \
      (DATA),                                                                         \
      (A(perm,INTS)))                                                                 \
    X(CONCAT, concat, "Concat", "", 1, -1, 1, 1,                                      \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(SLICE, slice, "Slice", "", 1, 5, 1, 1,                                          \
      (DATA, SHAPE, SHAPE, SHAPE, SHAPE),                                             \
      ())                                                                             \
    X(SPLIT, split, "Split", "", 1, 2, 1, -1,                                         \
      (DATA, SHAPE),                                                                  \
      (A(axis,INT) A(split,INTS)))                                                    \
    X(SQUEEZE, squeeze, "Squeeze", "", 1, 2, 1, 1,                                    \
      (DATA, SHAPE),                                                                  \
      (A(axes,INTS)))                                                                 \
    X(UNSQUEEZE, unsqueeze, "Unsqueeze", "", 1, 2, 1, 1,                              \
      (DATA, SHAPE),                                                                  \
      (A(axes,INTS)))                                                                 \
    X(PAD, pad, "Pad", "", 1, 4, 1, 1,                                                \
      (DATA, SHAPE, DATA, SHAPE),                                                     \
      (A(mode,STRING) A(pads,INTS)))                                                  \
    X(RESIZE, resize, "Resize", "", 1, 4, 1, 1,                                       \
      (DATA, SHAPE, SHAPE, SHAPE),                                                    \
      (A(antialias,INT) A(axes,INTS) A(coordinate_transformation_mode,STRING)         \
       A(exclude_outside,INT) A(keep_aspect_ratio_policy,STRING) A(mode,STRING)       \
       A(nearest_mode,STRING)))                                                       \
    X(EXPAND, expand, "Expand", "", 2, 2, 1, 1,                                       \
      (DATA, SHAPE),                                                                  \
      ())                                                                             \
    X(IDENTITY, identity, "Identity", "", 1, 1, 1, 1,                                 \
      (DATA),                                                                         \
      ())                                                                             \
    X(DROPOUT, dropout, "Dropout", "", 1, 3, 1, 2,                                    \
      (DATA),                                                                         \
      ())                                                                             \
    X(CONSTANT, constant, "Constant", "", 0, 0, 1, 1,                                 \
      (DATA),                                                                         \
      (A(value,TENSOR)))                                                              \
    X(CONSTANT_OF_SHAPE, constant_of_shape, "ConstantOfShape", "", 1, 1, 1, 1,        \
      (SHAPE),                                                                        \
      (A(value,TENSOR)))                                                              \
    X(SHAPE, shape, "Shape", "", 1, 1, 1, 1,                                          \
      (DATA),                                                                         \
      ())                                                                             \
    X(GATHER, gather, "Gather", "", 2, 2, 1, 1,                                       \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(CAST, cast, "Cast", "", 1, 1, 1, 1,                                             \
      (DATA),                                                                         \
      (A(to,INT)))                                                                    \
    X(RANGE, range, "Range", "", 3, 3, 1, 1,                                          \
      (SHAPE, SHAPE, SHAPE),                                                          \
      ())                                                                             \
    X(SCATTER_ND, scatter_nd, "ScatterND", "", 3, 3, 1, 1,                            \
      (DATA, DATA, DATA),                                                             \
      (A(reduction,STRING)))                                                          \
    X(QUANTIZE, quantize, "QuantizeLinear", "", 2, 3, 1, 1,                           \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(DEQUANTIZE, dequantize, "DequantizeLinear", "", 2, 3, 1, 1,                     \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(QLINEAR_CONV, qlinear_conv, "QLinearConv", "", 8, 9, 1, 1,                      \
      (DATA),                                                                         \
      (A(auto_pad,STRING) A(dilations,INTS) A(group,INT)                              \
       A(kernel_shape,INTS) A(pads,INTS) A(strides,INTS)))                            \
    X(CONV_INTEGER, conv_integer, "ConvInteger", "", 2, 4, 1, 1,                      \
      (DATA),                                                                         \
      (A(auto_pad,STRING) A(dilations,INTS) A(group,INT)                              \
       A(kernel_shape,INTS) A(pads,INTS) A(strides,INTS)))                            \
    X(QLINEAR_MATMUL, qlinear_matmul, "QLinearMatMul", "", 8, 8, 1, 1,                \
      (DATA),                                                                         \
      ())                                                                             \
    X(MATMUL_INTEGER, matmul_integer, "MatMulInteger", "", 2, 4, 1, 1,                \
      (DATA),                                                                         \
      ())                                                                             \
    X(QADD, qadd, NULL, "", 8, 8, 1, 1,                                               \
      (DATA),                                                                         \
      (A(qfold_clamp,INTS)))                                                          \
    X(QMUL, qmul, NULL, "", 8, 8, 1, 1,                                               \
      (DATA),                                                                         \
      (A(qfold_clamp,INTS)))                                                          \
    X(QCONCAT, qconcat, NULL, "", 5, -1, 1, 1,                                        \
      (DATA),                                                                         \
      (A(axis,INT)))                                                                  \
    X(QAVG_POOL, qavg_pool, NULL, "", 5, 5, 1, 1,                                     \
      (DATA),                                                                         \
      (A(auto_pad,STRING) A(ceil_mode,INT) A(count_include_pad,INT) A(dilations,INTS) \
       A(kernel_shape,INTS) A(pads,INTS) A(strides,INTS) A(qfold_clamp,INTS)))        \
    X(QMEAN, qmean, NULL, "", 5, 5, 1, 1,                                             \
      (DATA),                                                                         \
      (A(axes,INTS) A(keepdims,INT) A(qfold_clamp,INTS)))                             \
    X(QSUM, qsum, NULL, "", 5, 5, 1, 1,                                               \
      (DATA),                                                                         \
      (A(axes,INTS) A(keepdims,INT)))                                                 \
    X(QCONV_TRANSPOSE, qconv_transpose, NULL, "", 8, 9, 1, 1,                         \
      (DATA),                                                                         \
      (A(auto_pad,STRING) A(dilations,INTS) A(group,INT) A(kernel_shape,INTS)         \
       A(output_padding,INTS) A(output_shape,INTS) A(pads,INTS) A(strides,INTS)))     \
    X(QLUT, qlut, NULL, "", 5, 5, 1, 1,                                               \
      (DATA),                                                                         \
      (A(qfold_fn,STRING)))                                                           \
    X(OPAQUE, opaque, NULL, "", 0, -1, 1, -1,                                         \
      (DATA),                                                                         \
      (A(op_type,STRING) A(domain,STRING) A(attributes,TENSOR)                        \
       A(output_types,INTS) A(empty_outputs,INTS) A(unnamed,INT)))                    \
    QF_EXTRA_OP_LIST(X)

typedef enum qf_op {
#define QF_OP_ENUM_(tag, ...) QF_OP_##tag,
    QF_OP_LIST(QF_OP_ENUM_)
#undef QF_OP_ENUM_
    QF_OP_COUNT
} qf_op;

const char *qf_op_name(qf_op op);        /* qfold name, "?" if out of range */
const char *qf_op_onnx_name(qf_op op);   /* ONNX op_type, NULL for internal ops */
qf_op qf_op_from_onnx(const char *op_type); /* QF_OP_COUNT if unknown */
qf_op qf_op_from_name(const char *name);    /* by qfold name; QF_OP_COUNT if unknown */

#ifdef __cplusplus
}
#endif
#endif
