/* The op table: one row of traits per op in QF_OP_LIST (include/qfold/op.h).
 *
 * Adding an op: add a row to QF_OP_LIST, implement its infer / forward
 * functions in the file of its family (src/ops/<family>.c), declare them in
 * src/ops/kernels.h and fill its row in src/ops/op_table.c. The static assert
 * there fails to compile if a row is missing.
 */
#ifndef QF_OP_TABLE_H
#define QF_OP_TABLE_H

#include "qfold/graph.h"

/* What a kernel sees: the node (for its attributes), the opset, its input
 * tensors (NULL for an omitted optional input), its output tensors (shape and
 * dtype set, data pointing into the plan's arena) and scratch memory of the
 * size the op's `scratch` function asked for. Kernels never allocate. */
typedef struct qf_kernel_io {
    const qf_node *node;
    int64_t opset;
    int nin, nout;
    const qf_tensor *const *in;
    qf_tensor *const *out;
    void *scratch;
    size_t scratch_size;
} qf_kernel_io;

typedef qf_status (*qf_infer_fn)(qf_graph *g, qf_node *n);
typedef qf_status (*qf_kernel_fn)(const qf_kernel_io *io);
typedef size_t (*qf_scratch_fn)(const qf_node *n);

/* How an op uses an input: drives qf_graph_classify_constants and, later,
 * the quantizer's annotation and the trainer's parameter marks. */
typedef enum qf_input_role {
    QF_ROLE_DATA = 0,
    QF_ROLE_WEIGHT,     /* trainable parameter */
    QF_ROLE_BIAS,       /* trainable parameter */
    QF_ROLE_BN_SCALE,   /* gamma: parameter */
    QF_ROLE_BN_SHIFT,   /* beta: parameter */
    QF_ROLE_BN_STAT,    /* running mean / var: buffer */
    QF_ROLE_SHAPE       /* shape-like operand: must be constant for static shapes */
} qf_input_role;

#define QF_MAX_ROLES 5

typedef struct qf_op_info {
    const char *name;       /* filled from QF_OP_LIST */
    int min_inputs, max_inputs;   /* max -1: variadic */
    int min_outputs, max_outputs; /* max -1: variadic */
    qf_input_role roles[QF_MAX_ROLES];
    qf_infer_fn infer;      /* checks attributes + input shapes, sets output dtype/shape */
    qf_kernel_fn forward;   /* float reference kernel (also int64 where shapes need it) */
    qf_scratch_fn scratch;  /* scratch bytes the forward kernel needs; NULL: none */
    qf_kernel_fn backward;  /* training; NULL until the op has one */
    qf_kernel_fn forward_s8;/* integer kernel; NULL until the op has one */
} qf_op_info;

extern const qf_op_info qf_op_table[QF_OP_COUNT];

static inline const qf_op_info *qf_op_info_get(qf_op op) { return &qf_op_table[op]; }

/* The op's name for messages: ONNX's op_type, or qfold's for internal ops. */
static inline const char *qf_op_label(const qf_node *n)
{
    const char *onnx = qf_op_onnx_name(n->op);
    return onnx ? onnx : qf_op_name(n->op);
}

/* QF_ERR_INVALID naming n unless it has exactly `count` inputs, all present. */
static inline qf_status qf_op_check_inputs(const qf_node *n, int count)
{
    if (n->ninputs != count)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects %d inputs, has %d", n->name, qf_op_label(n),
                        count, n->ninputs);
    for (int i = 0; i < count; i++)
        if (!n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, qf_op_label(n), i);
    return QF_OK;
}

/* Shape inference's result for output i of n. */
static inline void qf_set_output(qf_node *n, int i, qf_dtype dt, int ndim, const int64_t *dims)
{
    qf_tensor *t = &n->outputs[i]->type;
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->dims[d] = dims[d];
}

#endif
