/* The op table: the kernel columns of every op in QF_OP_LIST
 * (include/qfold/op.h), one qf_op_kernels per op, indexed by qf_op.
 *
 * The op's schema (names, arity, roles, attributes) is one row of QF_OP_LIST
 * (read with qf_op_schema_get). Its columns here are sparse: the file of the
 * op's family (src/ops/<family>.c) defines `const qf_op_kernels
 * qf_<name>_kernels` with the columns it has, in designated initializers;
 * op_table.c collects them. A new kernel variant fills one more field there
 * and touches no row macro. tests/ops/test_op_table.c checks that every op has
 * inference and a float forward kernel.
 */
#ifndef QF_OP_TABLE_H
#define QF_OP_TABLE_H

#include "qfold/graph.h"
#include "qfold/schema.h"

/* What a kernel sees: the node (for error messages only: attributes and
 * geometry come prepared in `state`), the opset, its input tensors (NULL for
 * an omitted optional input), its output tensors (shape and dtype set, data
 * pointing into the plan's arena), the op's prepared state (NULL for an op
 * without `prepare`) and scratch memory of the size the op's `scratch`
 * function asked for. Kernels never allocate. */
typedef struct qf_kernel_io {
    const qf_node *node;
    int64_t opset;
    int nin, nout;
    const qf_tensor *const *in;
    qf_tensor *const *out;
    const void *state;
    void *scratch;
    size_t scratch_size;
    /* Memory layout of the activations, bit i for input / output i: set when
     * that 4-D tensor is stored channels-last (NHWC) although its dims stay
     * logical NCHW. The plan sets bits only for kernels whose column accepts
     * QF_LAYOUT_NHWC (qf_backend_kernels.layouts); the reference kernels
     * always see 0. With `blocked` set, a set bit means oneDNN's blocked
     * nChw16c instead (channels padded to a multiple of 16, the pad zero;
     * only for kernels whose column accepts QF_LAYOUT_BLOCKED): the plan
     * picks one of the two for all its channels-last values (layout.c). */
    uint32_t in_nhwc, out_nhwc;
    bool blocked;
    /* Post-ops: nodes the plan fused into this one, in order, e.g. a Relu /
     * Clip after a Conv, or an Add of a residual. For a binary one,
     * post_in[i] is its other operand (NULL for a unary one). out[0] is then
     * the last fused node's output; the fused nodes do not run as steps of
     * their own. Backend kernels only, except one reference kernel: the
     * training tape runs a Relu inside BatchNormalization's forward and
     * backward (grad_fuse in src/exec/grad.c; dout[0] is then the Relu's
     * output's gradient). nfused is 0 for every other reference kernel. */
    int nfused;
    const qf_node *const *fused;
    const qf_tensor *const *post_in;
    /* Training (the tape, src/exec/grad.c, and qf_node_eval_grad; zero in
     * every inference plan).
     * Forward in training mode (`training`): BatchNormalization normalizes
     * with the batch statistics and updates its running mean / variance in
     * place (in[3], in[4]: buffers the trainer made writable), Dropout drops
     * with the stream `seed` (a new seed every step). `saved` is the node's
     * saved_size bytes, kept from its training forward to its backward
     * (BN's batch mean and 1/sqrt(var + eps), Dropout's mask).
     * Backward (backward_f32): in / out are the forward's tensors, but only
     * those named by bwd_in / bwd_out hold data (the others: dtype and shape,
     * data NULL); dout[j] is dL/d out[j] (float32, out[j]'s shape; NULL when
     * no gradient reaches that output: treat it as zeros); din[i] is where
     * dL/d in[i] goes (float32, in[i]'s shape), NULL when nobody wants it.
     * The kernel overwrites din[i] (the tape sums over several readers). A
     * quantized value's gradient is the gradient with respect to its
     * dequantized real value: DequantizeLinear passes dout through,
     * QuantizeLinear masks it (straight-through estimator). scratch is
     * bwd_scratch's size. */
    bool training;
    uint64_t seed;
    void *saved;
    const qf_tensor *const *dout;
    qf_tensor *const *din;
} qf_kernel_io;

/* Checks attributes + input shapes, sets output dtype/shape. */
typedef qf_status (*qf_infer_fn)(qf_graph *g, qf_node *n);
/* Decodes attributes, checks and computes geometry once, at plan build, into
 * `state` (state_size bytes, zeroed, aligned). io->in / io->out are the value
 * types: a constant's data is set, an activation's is NULL; io->state and
 * io->scratch are NULL. Errors name the node. */
typedef qf_status (*qf_prepare_fn)(const qf_kernel_io *io, void *state);
/* Scratch bytes the kernels need; state is the prepared state (NULL for an
 * op without prepare). */
typedef size_t (*qf_scratch_fn)(const qf_node *n, const void *state);
typedef qf_status (*qf_kernel_fn)(const qf_kernel_io *io);

/* Layouts a backend kernel accepts (qf_backend_kernels.layouts). */
enum { QF_LAYOUT_NCHW = 1u << 0, QF_LAYOUT_NHWC = 1u << 1, QF_LAYOUT_BLOCKED = 1u << 2 };

/* The channel block of QF_LAYOUT_BLOCKED (oneDNN's nChw16c on AVX-512). */
#define QF_LAYOUT_BLOCK 16

typedef struct qf_op_kernels {
    qf_infer_fn infer;          /* required */
    qf_prepare_fn prepare;      /* NULL: the kernels read the node */
    size_t state_size;          /* > 0 exactly when prepare is set */
    qf_scratch_fn scratch;      /* NULL: no scratch */
    /* The forward kernel; required. Float for the float ops (int64 too where
     * shapes need it); in integers for the int8 ops (ONNX's QLinearConv ...,
     * qfold's QADD ... QLUT: src/ops/int8/), whose inputs and outputs are
     * int8 with their qparams as inputs, and for the ops that only move
     * values (MaxPool, Reshape, ...: their kernels take int8 as ONNX's
     * schema does). There is no separate integer column: an int8 kernel is
     * the forward kernel of an op of its own (a row of QF_OP_LIST), whose
     * nodes the int8 lowering makes (src/quant/lower.c, by the rows of
     * src/quant/op_quant.c). */
    qf_kernel_fn forward_f32;
    qf_kernel_fn backward_f32;  /* training (see qf_kernel_io); NULL: the op cannot be trained through */
    /* What backward_f32 reads: bit i of bwd_in / bwd_out set when it reads
     * the data of forward input / output i (the tape keeps only those alive
     * until the node's backward; the one-node harness hands the others with
     * data NULL, so a missing bit crashes the kernel tests, not training). */
    uint32_t bwd_in, bwd_out;
    qf_scratch_fn saved_size;   /* bytes kept from the training forward to backward; NULL: 0 */
    qf_scratch_fn bwd_scratch;  /* scratch bytes backward_f32 needs; NULL: 0 */
    /* QF_LAYOUT_NHWC: forward_f32 computes the same whatever the memory
     * order of its operands, as long as all have one (elementwise kernels:
     * the plan passes them same-shape operands, or one-element ones, in
     * channels-last order and the kernel never knows). 0: NCHW only. */
    unsigned layouts;
    /* forward_f32 may write its output over an input of the output's shape
     * and dtype (each element read before it is written: elementwise
     * arithmetic), and the backend's kernel over the first such input (as
     * oneDNN's binary primitive over src0) in the output's layout; the plan
     * then lets the output take the memory of such an input that is read for
     * the last time. */
    bool inplace;
} qf_op_kernels;

extern const qf_op_kernels *const qf_op_table[QF_OP_COUNT];

/* The kernel columns of op (op in range). */
static inline const qf_op_kernels *qf_op_kernels_get(qf_op op) { return qf_op_table[op]; }

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

/* QF_ERR_UNSUPPORTED naming the first opaque node (an op qfold does not
 * know, src/ops/ref/opaque.c): the graph cannot be run. Plans call it first. */
qf_status qf_graph_check_runnable(const qf_graph *g);

#endif
