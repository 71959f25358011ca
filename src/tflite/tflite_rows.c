/* The TFLite export's op table: one row per qf_op, read by the driver
 * (tflite_export.c) for every node of the lowered graph: the TFLite
 * operator it becomes, the emitter that writes it, the ONNX op messages name
 * it by. An op without a row has no TFLite form (refused, naming the node).
 *
 * Adding a mapping: a row here and its emitter (declared just below, defined
 * in tflite_ops.c, tflite_ops_qdq.c or a file of its own, on the builder of
 * tflite_build.h); a builtin qfold did not write before is also a row of
 * QF_TFL_BUILTIN_LIST (tflite_write.h). The extra-op test build adds its
 * rows from its own header (QF_EXTRA_TFLITE_ROWS, tests/ops/extra_op/). */
#include "tflite_build.h"

/* The emitters (node n as TFLite operators; r: its row). */
#define QF_TFL_EMITTER_(name) \
    qf_status qf_tfl_emit_##name(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
/* tflite_ops.c: the integer nodes of the lowering (src/quant/lower.c) */
QF_TFL_EMITTER_(qconv);
QF_TFL_EMITTER_(qmatmul);
QF_TFL_EMITTER_(qconv_transpose);
QF_TFL_EMITTER_(pool);
QF_TFL_EMITTER_(qmean);
QF_TFL_EMITTER_(qbinary);
QF_TFL_EMITTER_(qconcat);
QF_TFL_EMITTER_(qlut);
QF_TFL_EMITTER_(reduce_max);
/* tflite_ops_qdq.c: DQ -> op -> [act] -> Q groups the lowering leaves, layout ops */
QF_TFL_EMITTER_(float);
QF_TFL_EMITTER_(act);
QF_TFL_EMITTER_(reshape);
QF_TFL_EMITTER_(transpose);
QF_TFL_EMITTER_(pad_node);
QF_TFL_EMITTER_(requant);
/* tflite_ops_minmax.c: Max / Min, Abs */
QF_TFL_EMITTER_(extreme);
QF_TFL_EMITTER_(abs);
/* tflite_resize.c: Resize, lowered (int8) or a DQ -> Resize -> Q of shared qparams */
QF_TFL_EMITTER_(resize);
QF_TFL_EMITTER_(split); /* a grouped conv's input (split_group_conv) */

#ifdef QF_TEST_EXTRA_OPS
#ifdef QF_EXTRA_TFLITE_ROWS
#define QF_TFL_EXTRA_DECL_(tag, name, ...) QF_TFL_EMITTER_(name);
QF_EXTRA_TFLITE_ROWS(QF_TFL_EXTRA_DECL_)
#undef QF_TFL_EXTRA_DECL_
#endif
#endif

const qf_tfl_row qf_tfl_rows[QF_OP_COUNT] = {
    /* integer nodes of the lowering */
    /* or DEPTHWISE_CONV_2D, or FULLY_CONNECTED (a lowered Gemm) */
    [QF_OP_QLINEAR_CONV] = {QF_TFL_CONV_2D, qf_tfl_emit_qconv, "Conv"},
    /* a MatMul by a constant */
    [QF_OP_QLINEAR_MATMUL] = {QF_TFL_FULLY_CONNECTED, qf_tfl_emit_qmatmul, "MatMul"},
    [QF_OP_QCONV_TRANSPOSE] = {QF_TFL_TRANSPOSE_CONV, qf_tfl_emit_qconv_transpose, "ConvTranspose"},
    [QF_OP_MAX_POOL] = {QF_TFL_MAX_POOL_2D, qf_tfl_emit_pool}, /* int8 in and out */
    [QF_OP_QAVG_POOL] = {QF_TFL_AVERAGE_POOL_2D, qf_tfl_emit_pool, "AveragePool"},
    [QF_OP_QMEAN] = {QF_TFL_MEAN, qf_tfl_emit_qmean, "ReduceMean / GlobalAveragePool"},
    [QF_OP_QSUM] = {QF_TFL_SUM, qf_tfl_emit_qmean, "ReduceSum"},
    [QF_OP_REDUCE_MAX] = {QF_TFL_REDUCE_MAX, qf_tfl_emit_reduce_max}, /* int8 in and out */
    [QF_OP_QADD] = {QF_TFL_ADD, qf_tfl_emit_qbinary, "Add"},
    [QF_OP_QMUL] = {QF_TFL_MUL, qf_tfl_emit_qbinary, "Mul"},
    [QF_OP_QCONCAT] = {QF_TFL_CONCATENATION, qf_tfl_emit_qconcat, "Concat"},
    /* HARD_SWISH; LEAKY_RELU; a HardSigmoid: ADD + MUL; Exp / Log: DEQUANTIZE -> EXP / LOG ->
     * QUANTIZE (TFLite 2.2 has no int8 form) */
    [QF_OP_QLUT] = {QF_TFL_HARD_SWISH, qf_tfl_emit_qlut, "HardSwish / HardSigmoid / LeakyRelu / Exp / Log"},
    /* DQ -> op -> [act] -> Q groups the lowering leaves */
    [QF_OP_SUB] = {QF_TFL_SUB, qf_tfl_emit_float},
    [QF_OP_ADD] = {QF_TFL_ADD, qf_tfl_emit_float}, /* qparams the lowering declined */
    [QF_OP_MUL] = {QF_TFL_MUL, qf_tfl_emit_float},
    /* Max / Min lowered (int8 in and out) or DQ -> op -> Q: a MAXIMUM / MINIMUM chain */
    [QF_OP_MAX] = {QF_TFL_MAXIMUM, qf_tfl_emit_extreme},
    [QF_OP_MIN] = {QF_TFL_MINIMUM, qf_tfl_emit_extreme},
    /* DQ -> Abs -> Q: DEQUANTIZE -> ABS -> QUANTIZE (TFLite 2.2's ABS is float only) */
    [QF_OP_ABS] = {QF_TFL_ABS, qf_tfl_emit_abs},
    [QF_OP_SIGMOID] = {QF_TFL_LOGISTIC, qf_tfl_emit_float},
    [QF_OP_TANH] = {QF_TFL_TANH, qf_tfl_emit_float},
    [QF_OP_HARD_SWISH] = {QF_TFL_HARD_SWISH, qf_tfl_emit_float},
    [QF_OP_SOFTMAX] = {QF_TFL_SOFTMAX, qf_tfl_emit_float},
    /* a lone activation: the fused RELU / RELU6 of a 1x1 MAX_POOL_2D or an ADD of 0 */
    [QF_OP_RELU] = {QF_TFL_MAX_POOL_2D, qf_tfl_emit_act},
    [QF_OP_RELU6] = {QF_TFL_MAX_POOL_2D, qf_tfl_emit_act},
    [QF_OP_CLIP] = {QF_TFL_MAX_POOL_2D, qf_tfl_emit_act},
    /* layout ops, on int8 data or between a DQ and a Q of the same qparams */
    /* RESHAPE, with a TRANSPOSE where the NHWC and NCHW orders differ */
    [QF_OP_RESHAPE] = {QF_TFL_RESHAPE, qf_tfl_emit_reshape},
    [QF_OP_FLATTEN] = {QF_TFL_RESHAPE, qf_tfl_emit_reshape},
    [QF_OP_SQUEEZE] = {QF_TFL_RESHAPE, qf_tfl_emit_reshape},
    [QF_OP_UNSQUEEZE] = {QF_TFL_RESHAPE, qf_tfl_emit_reshape},
    [QF_OP_TRANSPOSE] = {QF_TFL_TRANSPOSE, qf_tfl_emit_transpose},
    [QF_OP_PAD] = {QF_TFL_PAD, qf_tfl_emit_pad_node},
    /* a Q of a DQ (int8 -> int8, no op between): QUANTIZE where exact */
    [QF_OP_QUANTIZE] = {QF_TFL_QUANTIZE, qf_tfl_emit_requant},
    /* or RESIZE_NEAREST_NEIGHBOR (mode nearest) */
    [QF_OP_RESIZE] = {QF_TFL_RESIZE_BILINEAR, qf_tfl_emit_resize},
    /* int8 data split along channels (a grouped conv split per group) */
    [QF_OP_SPLIT] = {QF_TFL_SPLIT, qf_tfl_emit_split},
#ifdef QF_TEST_EXTRA_OPS
#ifdef QF_EXTRA_TFLITE_ROWS
#define QF_TFL_EXTRA_ROW_(tag, name, ...) [QF_OP_##tag] = {.emit = qf_tfl_emit_##name, __VA_ARGS__},
    QF_EXTRA_TFLITE_ROWS(QF_TFL_EXTRA_ROW_)
#undef QF_TFL_EXTRA_ROW_
#endif
#endif
};

/* One row per op: the table is indexed by any qf_op (rows it does not name are zero). */
_Static_assert(sizeof qf_tfl_rows / sizeof qf_tfl_rows[0] == QF_OP_COUNT,
               "qf_tfl_rows: one row per qf_op");
