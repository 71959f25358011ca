/* Private to the TFLite export (src/tflite/): its state, the row type of its
 * op table, and the builder every emitter and the driver share.
 *
 *   tflite_write.h/.cc  the flatbuffer writer: builtins (QF_TFL_BUILTIN_LIST)
 *                       and their options tables; depends on no other file here
 *   tflite_build.c      the builder (this header): memory, messages, layout,
 *                       tensors and buffers, qparams, operators, operands, the
 *                       DQ -> op -> Q groups; calls no other file here
 *   tflite_ops.c        emitters of the lowering's integer nodes (CONV_2D,
 *                       DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV,
 *                       pools, MEAN, ADD / MUL, CONCATENATION, HARD_SWISH,
 *                       LEAKY_RELU)
 *   tflite_ops_qdq.c    emitters of the DQ -> op -> [act] -> Q forms the
 *                       lowering leaves (SUB, LOGISTIC, TANH, SOFTMAX, ...,
 *                       a lone activation) and the layout ops (RESHAPE,
 *                       TRANSPOSE, PAD)
 *   tflite_rows.c       the op table qf_tfl_rows: one row per qf_op
 *   tflite_uint8.c      uint8 QDQ made int8 on the private copy
 *   tflite_export.c     the driver: the private lowered copy, graph inputs and
 *                       outputs, each node through its row, the arena plan,
 *                       the result and the report
 * Calls go one way: export -> rows -> ops* -> build; export -> build, write,
 * uint8; build and ops* -> nothing of the driver. */
#ifndef QF_TFLITE_BUILD_H
#define QF_TFLITE_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qfold/graph.h"
#include "qfold/tflite.h"
#include "tflite_write.h"

/* ---- the export's state ------------------------------------------------------ */

typedef struct qf_tfl_qp {
    float scale;
    int32_t zp;
} qf_tfl_qp;

typedef struct qf_tfl_ex {
    qf_graph *g;
    const qf_tflite_options *o;
    void **pool; /* every allocation of the export, freed at the end (or kept by the result) */
    int npool, cpool;
    qf_tfl_tensor *t;
    bool *t_param; /* a weight / bias / constant operand (weight bytes) */
    int nt, ct;
    int32_t *vmap; /* value id -> tensor index + 1 */
    bool *nlc;     /* value id -> a rank-3 interface tensor written channels-last, [N, L, C]
                    * (a 1-D run's graph input or output: one RESHAPE to / from NHWC H = 1) */
    qf_tfl_buffer *b;
    int nb, cb;
    qf_tfl_op *ops;
    qf_tflite_op_info *info;
    int nops, cops;
    bool *skip; /* node id -> consumed by another node's operator */
    int32_t *gin, *gout;
    int ngin, ngout, cgout;
    /* the node being emitted and the ONNX op messages name it by (its row's
     * `source`; an emitter may set another: a lowered Gemm) */
    const qf_node *node;
    const char *source;
} qf_tfl_ex;

/* ---- the op table (tflite_rows.c) ---------------------------------------------- */

typedef struct qf_tfl_row qf_tfl_row;

/* An emitter: node n of the lowered graph as TFLite operators, tensors and
 * buffers (through the builder below), or a refusal naming n (qf_tfl_refuse). */
typedef qf_status (*qf_tfl_emit_fn)(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *r);

/* One row per qf_op: how a node of that op in the lowered graph is written.
 * An all-zero row (no emitter): the op has no TFLite form and is refused. */
struct qf_tfl_row {
    int builtin;         /* its TFLite operator (QF_TFL_*); the emitter may write
                          * siblings too (DEPTHWISE_CONV_2D, a QUANTIZE) */
    qf_tfl_emit_fn emit; /* writes the node */
    const char *source;  /* the ONNX op messages name (NULL: the op's own label) */
    const char *custom;  /* QF_TFL_CUSTOM: its custom_code */
};

/* Indexed by qf_op (tflite_rows.c); the driver reads it. */
extern const qf_tfl_row qf_tfl_rows[QF_OP_COUNT];

/* ---- memory and messages ------------------------------------------------------- */

/* Memory of the export (kept by the result or freed with it). */
void *qf_tfl_ex_alloc(qf_tfl_ex *e, size_t n);
const char *qf_tfl_ex_strdup(qf_tfl_ex *e, const char *s);
/* n's name for messages and reports (a lowered node's `_int8` suffix dropped). */
const char *qf_tfl_node_name(qf_tfl_ex *e, const qf_node *n);
/* QF_ERR_UNSUPPORTED naming node n (may be NULL), its ONNX op and why. */
qf_status qf_tfl_refuse(qf_tfl_ex *e, const qf_node *n, const char *fmt, ...)
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

/* ---- tensors ------------------------------------------------------------------------ */

/* A tensor (data copied into a buffer when given); its index, -1 on out-of-memory. */
int qf_tfl_add_tensor(qf_tfl_ex *e, const char *name, int type, int ndim, const int32_t *shape,
                      const void *data, size_t size, int nq, const float *scale, const int64_t *zp,
                      int qdim, bool param);
/* Per-tensor qparams from constant scale / zero point values. */
bool qf_tfl_qp_from(const qf_value *s, const qf_value *z, qf_tfl_qp *qp);
/* The qparams of an int8 activation, from the nodes around it. */
bool qf_tfl_act_qp(const qf_value *v, qf_tfl_qp *qp);
/* The tensor of int8 activation v (made on first use); n names the node in errors. */
qf_status qf_tfl_act_tensor(qf_tfl_ex *e, const qf_node *n, const qf_value *v, int *out);
/* An int32 constant tensor named after owner + what. */
int qf_tfl_i32_tensor(qf_tfl_ex *e, const char *owner, const char *what, const int32_t *v, int n,
                      bool pairs);

/* ---- operators ---------------------------------------------------------------------- */

/* Append an operator; *op gets it to fill the options. */
qf_status qf_tfl_add_op(qf_tfl_ex *e, const qf_node *n, int code, const int32_t *in, int nin,
                        const int32_t *out, int nout, int64_t macs, qf_tfl_op **op);
/* The int8 operand v of a binary op, in rank `rank` (constants quantized with qp). */
qf_status qf_tfl_operand(qf_tfl_ex *e, const qf_node *n, const qf_value *v, qf_tfl_qp qp, int rank,
                         int *out);
/* A lowered Gemm's trailing / leading reshape (parts of its FULLY_CONNECTED). */
const qf_node *qf_tfl_fc_tail(const qf_node *ql);
bool qf_tfl_fc_head(const qf_node *r);

/* ---- DQ -> op -> [act] -> Q groups the lowering leaves -------------------------- */

/* Input i of a float op: the int8 value behind its per-tensor DequantizeLinear,
 * or an int8 value read directly (shape ops), with its qparams. */
qf_status qf_tfl_group_in(qf_tfl_ex *e, const qf_node *n, int i, const qf_value **v, qf_tfl_qp *qp);
/* The output of a float op: its int8 value, or the Q that reads it (through
 * a Relu / Relu6 / Clip when act is not NULL: the fused activation in *act);
 * the Q and the activation are marked consumed. */
qf_status qf_tfl_group_out(qf_tfl_ex *e, const qf_node *n, const qf_value **y, qf_tfl_qp *qp,
                           int *act);
/* A layout op's input and output, which must carry the same qparams. */
qf_status qf_tfl_group_same_qp(qf_tfl_ex *e, const qf_node *n, const char *what, const qf_value **x,
                               const qf_value **y);

/* uint8 QDQ made int8 (q - 128, zero point - 128) on the private copy;
 * uint8 weights of a zero point other than 128 refused (tflite_uint8.c). */
qf_status qf_tfl_uint8_to_int8(qf_graph *g);

#endif
