/* Private to the TFLite export (src/tflite/): the export's state and the
 * helpers its three files share.
 *
 *   tflite_export.c     the driver: state, layout, tensors and buffers, graph
 *                       inputs / outputs, the op table (qf_tfl_rows), the
 *                       private lowered copy, the arena plan, the report
 *   tflite_ops.c        the integer nodes of the lowering as TFLite operators
 *                       (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED,
 *                       TRANSPOSE_CONV, pools, MEAN, ADD / MUL, CONCATENATION)
 *   tflite_ops_qdq.c    the DQ -> op -> [act] -> Q forms the lowering leaves
 *                       (SUB, LOGISTIC, TANH, SOFTMAX, HARD_SWISH, a lone
 *                       activation) and the layout ops (RESHAPE, TRANSPOSE, PAD)
 * The writer itself is tflite_write.h. */
#ifndef QF_TFLITE_EXPORT_IMPL_H
#define QF_TFLITE_EXPORT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qfold/graph.h"
#include "qfold/tflite.h"
#include "tflite_write.h"

/* ---- the export's state ------------------------------------------------------ */

typedef struct tfl_qp {
    float scale;
    int32_t zp;
} tfl_qp;

typedef struct ex {
    qf_graph *g;
    const qf_tflite_options *o;
    void **pool; /* every allocation of the export, freed at the end (or kept by the result) */
    int npool, cpool;
    qf_tfl_tensor *t;
    bool *t_param; /* a weight / bias / constant operand (weight bytes) */
    int nt, ct;
    int32_t *vmap; /* value id -> tensor index + 1 */
    qf_tfl_buffer *b;
    int nb, cb;
    qf_tfl_op *ops;
    qf_tflite_op_info *info;
    int nops, cops;
    bool *skip; /* node id -> consumed by another node's operator */
    int32_t *gin, *gout;
    int ngin, ngout, cgout;
} ex;

/* ---- state and messages (tflite_export.c) ---------------------------------------- */

/* Memory of the export (kept by the result or freed with it). */
void *qf_tfl_ex_alloc(ex *e, size_t n);
const char *qf_tfl_ex_strdup(ex *e, const char *s);
/* n's name for messages and reports (a lowered node's `_int8` suffix dropped). */
const char *qf_tfl_node_name(ex *e, const qf_node *n);
/* QF_ERR_UNSUPPORTED naming node n (may be NULL), its ONNX op and why. */
qf_status qf_tfl_refuse(ex *e, const qf_node *n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Grow an array of `es`-byte elements to hold `need`. */
qf_status qf_tfl_grow(void **p, int *cap, int need, size_t es);
/* QF_ERR_NOMEM when a tensor index is negative (an add_tensor that failed). */
qf_status qf_tfl_need(int ti);

/* ---- layout ------------------------------------------------------------------------ */

/* Rank-4 NHWC physical axis k holds NCHW logical axis qf_tfl_nhwc_from[k]. */
extern const int qf_tfl_nhwc_from[4];
/* The NHWC axis of NCHW axis a of a rank-`rank` tensor. */
int qf_tfl_phys_axis(int rank, int a);
/* dst = src permuted: dst axis k is src axis perm[k] (d: src's dims), es bytes each. */
void qf_tfl_permute4(const void *src, void *dst, const int64_t d[4], const int perm[4], size_t es);

/* ---- tensors (tflite_export.c) ------------------------------------------------------- */

/* A tensor (data copied into a buffer when given); its index, -1 on out-of-memory. */
int qf_tfl_add_tensor(ex *e, const char *name, int type, int ndim, const int32_t *shape, const void *data, size_t size,
                      int nq, const float *scale, const int64_t *zp, int qdim, bool param);
/* Per-tensor qparams from constant scale / zero point values. */
bool qf_tfl_qp_from(const qf_value *s, const qf_value *z, tfl_qp *qp);
/* The qparams of an int8 activation, from the nodes around it. */
bool qf_tfl_act_qp(const qf_value *v, tfl_qp *qp);
/* The tensor of int8 activation v (made on first use); n names the node in errors. */
qf_status qf_tfl_act_tensor(ex *e, const qf_node *n, const qf_value *v, int *out);
/* An int32 constant tensor named after owner + what. */
int qf_tfl_i32_tensor(ex *e, const char *owner, const char *what, const int32_t *v, int n, bool pairs);

/* uint8 QDQ made int8 (q - 128, zero point - 128) on the private copy;
 * uint8 weights of a zero point other than 128 refused (tflite_uint8.c). */
qf_status qf_tfl_uint8_to_int8(qf_graph *g);

/* ---- operators (tflite_ops.c) ------------------------------------------------------- */

/* Append an operator; *op gets it to fill the options. */
qf_status qf_tfl_add_op(ex *e, const qf_node *n, int code, const int32_t *in, int nin, const int32_t *out, int nout,
                        int64_t macs, qf_tfl_op **op);
/* The int8 operand v of a binary op, in rank `rank` (constants quantized with qp). */
qf_status qf_tfl_operand(ex *e, const qf_node *n, const qf_value *v, tfl_qp qp, int rank, int *out);
/* A lowered Gemm's trailing / leading reshape (parts of its FULLY_CONNECTED). */
const qf_node *qf_tfl_fc_tail(const qf_node *ql);
bool qf_tfl_fc_head(const qf_node *r);

/* The emitters of the op table: node n of the lowered graph as TFLite operators. */
qf_status qf_tfl_emit_qconv(ex *e, qf_node *n);
qf_status qf_tfl_emit_qmatmul(ex *e, qf_node *n);
qf_status qf_tfl_emit_qconv_transpose(ex *e, qf_node *n);
qf_status qf_tfl_emit_pool(ex *e, qf_node *n);
qf_status qf_tfl_emit_qmean(ex *e, qf_node *n);
qf_status qf_tfl_emit_qbinary(ex *e, qf_node *n);
qf_status qf_tfl_emit_qconcat(ex *e, qf_node *n);
qf_status qf_tfl_emit_qlut(ex *e, qf_node *n);
/* tflite_ops_qdq.c */
qf_status qf_tfl_emit_float(ex *e, qf_node *n);
qf_status qf_tfl_emit_act(ex *e, qf_node *n);
qf_status qf_tfl_emit_reshape(ex *e, qf_node *n);
qf_status qf_tfl_emit_transpose(ex *e, qf_node *n);
qf_status qf_tfl_emit_pad_node(ex *e, qf_node *n);

#endif
