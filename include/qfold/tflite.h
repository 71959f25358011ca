/* qfold — int8 TFLite export.
 *
 *   qf_tflite_result r;
 *   qf_tflite_options o = {.float_io = false};
 *   QF_TRY(qf_tflite_save(g, "model.tflite", &o, &r));   // or qf_tflite_export: in memory
 *   qf_tflite_report_print(&r, stderr);
 *   qf_tflite_result_free(&r);
 *
 * The input is an int8 QDQ graph: qfold's own (`quantize`, `qat`,
 * `finalize`) or one in the same form from another tool (ONNX Runtime's
 * quantize_static, QDQ format; its uint8 activations are made int8 exactly,
 * q - 128 with zero point z - 128; uint8 weights only with zero point 128).
 * The batch is the model's (a dynamic one as 1) or options.batch. Export runs
 * the int8 executor's lowering (qf_quant_lower_int8, TFLite's
 * requantization) on a private copy, so every DQ -> op -> [ReLU] -> Q group
 * becomes one integer node with its qparams resolved, and maps each such node
 * (and the few DQ -> op -> Q forms the lowering leaves, such as Sub, Softmax,
 * Sigmoid, Reshape) to one TFLite operator. Activations are NHWC: rank-4
 * tensors are transposed once for the whole graph, constants permuted at
 * export (conv weights OHWI, depthwise 1HWO); a TRANSPOSE is inserted only
 * where the semantics need it (a Reshape / Flatten of a tensor whose NHWC
 * and NCHW orders differ). TFLite tensor names are the ONNX value names.
 * Anything TFLite (or ArmNN's TfLite parser) cannot express is refused:
 * QF_ERR_UNSUPPORTED, the message names the node and the reason. */
#ifndef QFOLD_TFLITE_H
#define QFOLD_TFLITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_tflite_options {
    bool float_io;          /* float32 inputs / outputs: QUANTIZE / DEQUANTIZE at the boundaries */
    bool all_outputs;       /* debug: every int8 activation tensor is also a subgraph output */
    const char *description; /* the model's description (NULL: "qfold <version> int8 export") */
    int batch;              /* > 0: every input's first dim (0: the model's; a dynamic batch as 1) */
} qf_tflite_options;

#define QF_TFLITE_MAX_IO 4  /* shapes kept per op in the report (first inputs / outputs) */

/* One TFLite operator of the exported model, in execution order. */
typedef struct qf_tflite_op_info {
    const char *op;         /* TFLite op name: "CONV_2D" ... */
    const char *node;       /* the QDQ graph's node it comes from (a TRANSPOSE / PAD / QUANTIZE
                             * the export adds names the node it serves) */
    const char *output;     /* its (first) output tensor: an ONNX value name */
    int ninputs, noutputs;  /* activation inputs / outputs (constants not counted) */
    int in_ndim[QF_TFLITE_MAX_IO], out_ndim[QF_TFLITE_MAX_IO];
    int32_t in_shape[QF_TFLITE_MAX_IO][8], out_shape[QF_TFLITE_MAX_IO][8]; /* NHWC */
    int64_t macs;           /* multiply-accumulates (conv, depthwise, transpose conv, fully connected) */
    int64_t weight_bytes;   /* bytes of the constant weights, biases and operands it reads */
} qf_tflite_op_info;

typedef struct qf_tflite_result {
    uint8_t *data;           /* the flatbuffer (qf_tflite_export); NULL after qf_tflite_save */
    size_t size;             /* the file's size in bytes */
    int nops;
    qf_tflite_op_info *ops;
    int ntensors;
    int64_t weight_bytes;    /* every constant buffer (weights, biases, operands) */
    int64_t macs;            /* per invocation (of the exported batch) */
    int64_t peak_activation_bytes; /* arena plan: see qf_tflite_report_json */
    int64_t activation_bytes;      /* the sum of every activation tensor (no reuse) */
    void *impl;              /* strings and arrays the result owns */
} qf_tflite_result;

/* Build the TFLite model of g (not changed) in memory: r->data / r->size and
 * the report fields. r is zeroed first; free it with qf_tflite_result_free
 * also on failure. */
qf_status qf_tflite_export(const qf_graph *g, const qf_tflite_options *o, qf_tflite_result *r);

/* qf_tflite_export, then write the file (temporary file + rename: nothing is
 * written on failure). r may be NULL. */
qf_status qf_tflite_save(const qf_graph *g, const char *path, const qf_tflite_options *o, qf_tflite_result *r);

void qf_tflite_result_free(qf_tflite_result *r);

/* The deployment report as one JSON object (*json from qf_malloc, the caller
 * frees). max_lsb: NULL, or r->nops values, each the largest difference in
 * LSB measured for that op (a NaN: not measured, written as null). */
qf_status qf_tflite_report_json(const qf_tflite_result *r, const double *max_lsb, char **json, size_t *len);

/* What a layer above the export adds to the report (the deployment
 * target's placement of each op, qfold/target.h), as JSON text spliced in:
 * op: NULL, or r->nops entries, each NULL or members ("\"k\": v, ...", no
 * leading or trailing comma) appended to op i's object after its own;
 * top: NULL, or members appended to the top-level object after "ops". The
 * report's own text is unchanged: without extras it is byte for byte what
 * qf_tflite_report_json writes. */
typedef struct qf_tflite_report_extra {
    const char *const *op;
    const char *top;
} qf_tflite_report_extra;

/* qf_tflite_report_json with extras (x may be NULL). */
qf_status qf_tflite_report_json_extra(const qf_tflite_result *r, const double *max_lsb,
                                      const qf_tflite_report_extra *x, char **json, size_t *len);

/* A short human summary (a few lines) on f. */
void qf_tflite_report_print(const qf_tflite_result *r, FILE *f);

#ifdef __cplusplus
}
#endif

#endif
