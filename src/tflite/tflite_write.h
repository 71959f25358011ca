/* The TFLite flatbuffer writer: a model described in plain C structs
 * (tensors, buffers, operators, one subgraph) serialized with the
 * FlatBuffers library and the code flatc generates at build time from the
 * vendored schema (third_party/tflite/schema.fbs). The one C++ unit of the
 * library (tflite_write.cc) sits behind this C interface; everything else of
 * the export (src/tflite/) is C.
 *
 * What the writer does the way TFLite's own writer does: buffer 0 is the
 * empty buffer every tensor without data points at, each buffer's data is
 * aligned to 16 bytes (force_align in the schema), one OperatorCode per
 * builtin (per custom_code for CUSTOM) with both fields set
 * (deprecated_builtin_code = min(code, 127), builtin_code), model version 3,
 * file identifier "TFL3". */
#ifndef QF_TFLITE_WRITE_H
#define QF_TFLITE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "qfold/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TensorType values of the schema. */
enum { QF_TFL_FLOAT32 = 0, QF_TFL_INT32 = 2, QF_TFL_INT64 = 4, QF_TFL_INT8 = 9 };
/* The BuiltinOperators qfold writes, one row each: X(tag, code, options)
 * gives the enum value QF_TFL_<tag> = code (the schema's BuiltinOperator),
 * the name the report prints (#tag) and the builtin's options table in the
 * schema (`<options>` as BuiltinOptions_<options>; NONE: it has none), whose
 * builder the writer looks up (tflite_write.cc, one function per options
 * table). A new builtin is a row here, and a builder there when its options
 * table is new. CUSTOM: the op's custom_code names it (qf_tfl_op). */
#define QF_TFL_BUILTIN_LIST(X)                                \
    X(ADD, 0, AddOptions)                                     \
    X(AVERAGE_POOL_2D, 1, Pool2DOptions)                      \
    X(CONCATENATION, 2, ConcatenationOptions)                 \
    X(CONV_2D, 3, Conv2DOptions)                              \
    X(DEPTHWISE_CONV_2D, 4, DepthwiseConv2DOptions)           \
    X(DEQUANTIZE, 6, DequantizeOptions)                       \
    X(FULLY_CONNECTED, 9, FullyConnectedOptions)              \
    X(LOGISTIC, 14, NONE)                                     \
    X(MAX_POOL_2D, 17, Pool2DOptions)                         \
    X(MUL, 18, MulOptions)                                    \
    X(RESHAPE, 22, ReshapeOptions)                            \
    X(RESIZE_BILINEAR, 23, ResizeBilinearOptions)             \
    X(SOFTMAX, 25, SoftmaxOptions)                            \
    X(SPLIT, 49, SplitOptions)                                \
    X(TANH, 28, NONE)                                         \
    X(CUSTOM, 32, NONE)                                       \
    X(PAD, 34, PadOptions)                                    \
    X(TRANSPOSE, 39, TransposeOptions)                        \
    X(MEAN, 40, ReducerOptions)                               \
    X(SUB, 41, SubOptions)                                    \
    X(EXP, 47, ExpOptions)                                    \
    X(MAXIMUM, 55, MaximumMinimumOptions)                     \
    X(MINIMUM, 57, MaximumMinimumOptions)                     \
    X(PADV2, 60, PadV2Options)                                \
    X(TRANSPOSE_CONV, 67, TransposeConvOptions)               \
    X(LOG, 73, NONE)                                          \
    X(SUM, 74, ReducerOptions)                                \
    X(REDUCE_MAX, 82, ReducerOptions)                         \
    X(RESIZE_NEAREST_NEIGHBOR, 97, ResizeNearestNeighborOptions) \
    X(LEAKY_RELU, 98, LeakyReluOptions)                       \
    X(ABS, 101, AbsOptions)                                   \
    X(QUANTIZE, 114, QuantizeOptions)                         \
    X(HARD_SWISH, 117, HardSwishOptions)

#define QF_TFL_BUILTIN_ENUM_(tag, code, options) QF_TFL_##tag = code,
enum { QF_TFL_BUILTIN_LIST(QF_TFL_BUILTIN_ENUM_) };
#undef QF_TFL_BUILTIN_ENUM_

/* The name of builtin code (QF_TFL_CONV_2D -> "CONV_2D"), "?" for one the
 * list does not hold. */
static inline const char *qf_tfl_builtin_name(int code)
{
#define QF_TFL_BUILTIN_NAME_(tag, c, options) \
    if (code == (c)) return #tag;
    QF_TFL_BUILTIN_LIST(QF_TFL_BUILTIN_NAME_)
#undef QF_TFL_BUILTIN_NAME_
    return "?";
}

/* Padding and ActivationFunctionType values of the schema. */
enum { QF_TFL_PAD_SAME = 0, QF_TFL_PAD_VALID = 1 };
enum { QF_TFL_ACT_NONE = 0, QF_TFL_ACT_RELU = 1, QF_TFL_ACT_RELU6 = 3 };

#define QF_TFL_MAX_RANK 8

typedef struct qf_tfl_tensor {
    const char *name;
    int type;                        /* QF_TFL_INT8 ... */
    int ndim;
    int32_t shape[QF_TFL_MAX_RANK];
    uint32_t buffer;                 /* index into the model's buffers + 1; 0: no data */
    int nq;                          /* number of scales (0: no quantization) */
    const float *scale;              /* nq scales */
    const int64_t *zero_point;       /* nq zero points */
    int qdim;                        /* quantized_dimension */
} qf_tfl_tensor;

typedef struct qf_tfl_buffer {
    const void *data;
    size_t size;
} qf_tfl_buffer;

/* An attribute of a custom operator: an integer or a float, by name. */
typedef struct qf_tfl_attr {
    const char *name;
    int is_float; /* 1: f, 0: i */
    int64_t i;
    double f;
} qf_tfl_attr;

/* One operator; the options fields the op's options table has are read,
 * the others ignored. */
typedef struct qf_tfl_op {
    int code;                        /* BuiltinOperator */
    int ninputs, noutputs;
    const int32_t *inputs, *outputs; /* tensor indices (-1: an omitted optional input) */
    int padding, stride_w, stride_h, dilation_w, dilation_h, filter_w, filter_h;
    int depth_multiplier, activation, axis, keep_dims;
    int align_corners, half_pixel_centers; /* RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR */
    float beta;                      /* SOFTMAX */
    float alpha;                     /* LEAKY_RELU */
    const int32_t *new_shape;        /* RESHAPE: also in its options, for readers that take it there */
    int new_shape_len;
    int num_splits;                  /* SPLIT */
    /* CUSTOM: the operator's name (OperatorCode.custom_code) and its
     * attributes, written as a FlexBuffers map (custom_options), the form
     * TFLite's custom ops read theirs in */
    const char *custom_code;
    const qf_tfl_attr *custom_attrs;
    int ncustom_attrs;
} qf_tfl_op;

typedef struct qf_tfl_model {
    const qf_tfl_tensor *tensors;
    int ntensors;
    const qf_tfl_buffer *buffers;    /* written as buffers 1..n (0 is the empty one) */
    int nbuffers;
    const qf_tfl_op *ops;
    int nops;
    const int32_t *inputs, *outputs; /* the subgraph's */
    int ninputs, noutputs;
    const char *name;                /* the subgraph's name */
    const char *description;
} qf_tfl_model;

/* Serialize m; *out (qf_malloc, the caller frees) gets *size bytes, whose
 * start is aligned for the 16-byte buffer alignment to hold in memory. */
qf_status qf_tfl_serialize(const qf_tfl_model *m, uint8_t **out, size_t *size);

#ifdef __cplusplus
}
#endif

#endif
