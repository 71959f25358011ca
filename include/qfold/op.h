/* qfold — the op list.
 *
 * One X-macro list names every op: its enum tag, qfold's own name (ATen
 * style) and the ONNX op_type it maps to (NULL: internal op that export
 * lowers to ONNX ops, see io/onnx_export.c). The traits of each op (arity,
 * shape inference, kernels) live in one table, src/ops/op_table.c.
 *
 *   qf_op op = qf_op_from_onnx("Conv");      // QF_OP_CONV, or QF_OP_COUNT
 *   printf("%s\n", qf_op_name(op));          // "conv"
 */
#ifndef QFOLD_OP_H
#define QFOLD_OP_H

#ifdef __cplusplus
extern "C" {
#endif

/*  X(TAG,              name,               onnx op_type)              */
#define QF_OP_LIST(X)                                                     \
    X(CONV,             "conv",             "Conv")                       \
    X(CONV_TRANSPOSE,   "conv_transpose",   "ConvTranspose")              \
    X(BATCH_NORM,       "batch_norm",       "BatchNormalization")         \
    X(LAYER_NORM,       "layer_norm",       "LayerNormalization")         \
    X(GEMM,             "gemm",             "Gemm")                       \
    X(MATMUL,           "matmul",           "MatMul")                     \
    X(EINSUM,           "einsum",           "Einsum")                     \
    X(LINEAR,           "linear",           NULL)                         \
    X(ADD,              "add",              "Add")                        \
    X(SUB,              "sub",              "Sub")                        \
    X(MUL,              "mul",              "Mul")                        \
    X(DIV,              "div",              "Div")                        \
    X(POW,              "pow",              "Pow")                        \
    X(SQRT,             "sqrt",             "Sqrt")                       \
    X(RECIPROCAL,       "reciprocal",       "Reciprocal")                 \
    X(NEG,              "neg",              "Neg")                        \
    X(MOD,              "mod",              "Mod")                        \
    X(EQUAL,            "equal",            "Equal")                      \
    X(NOT,              "not",              "Not")                        \
    X(WHERE,            "where",            "Where")                      \
    X(RELU,             "relu",             "Relu")                       \
    X(RELU6,            "relu6",            NULL)                         \
    X(CLIP,             "clip",             "Clip")                       \
    X(LEAKY_RELU,       "leaky_relu",       "LeakyRelu")                  \
    X(SIGMOID,          "sigmoid",          "Sigmoid")                    \
    X(TANH,             "tanh",             "Tanh")                       \
    X(ERF,              "erf",              "Erf")                        \
    X(HARD_SIGMOID,     "hard_sigmoid",     "HardSigmoid")                \
    X(HARD_SWISH,       "hard_swish",       "HardSwish")                  \
    X(SOFTMAX,          "softmax",          "Softmax")                    \
    X(MAX_POOL,         "max_pool",         "MaxPool")                    \
    X(AVG_POOL,         "avg_pool",         "AveragePool")                \
    X(GLOBAL_AVG_POOL,  "global_avg_pool",  "GlobalAveragePool")          \
    X(REDUCE_MEAN,      "reduce_mean",      "ReduceMean")                 \
    X(FLATTEN,          "flatten",          "Flatten")                    \
    X(RESHAPE,          "reshape",          "Reshape")                    \
    X(TRANSPOSE,        "transpose",        "Transpose")                  \
    X(CONCAT,           "concat",           "Concat")                     \
    X(SLICE,            "slice",            "Slice")                      \
    X(SPLIT,            "split",            "Split")                      \
    X(SQUEEZE,          "squeeze",          "Squeeze")                    \
    X(UNSQUEEZE,        "unsqueeze",        "Unsqueeze")                  \
    X(PAD,              "pad",              "Pad")                        \
    X(EXPAND,           "expand",           "Expand")                     \
    X(IDENTITY,         "identity",         "Identity")                   \
    X(DROPOUT,          "dropout",          "Dropout")                    \
    X(CONSTANT,         "constant",         "Constant")                   \
    X(CONSTANT_OF_SHAPE,"constant_of_shape","ConstantOfShape")            \
    X(SHAPE,            "shape",            "Shape")                      \
    X(GATHER,           "gather",           "Gather")                     \
    X(CAST,             "cast",             "Cast")                       \
    X(RANGE,            "range",            "Range")                      \
    X(SCATTER_ND,       "scatter_nd",       "ScatterND")                  \
    X(QUANTIZE,         "quantize",         "QuantizeLinear")             \
    X(DEQUANTIZE,       "dequantize",       "DequantizeLinear")

typedef enum qf_op {
#define QF_OP_ENUM_(tag, name, onnx) QF_OP_##tag,
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
