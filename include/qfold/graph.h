/* qfold — the graph IR.
 *
 *   qf_graph *g;
 *   QF_TRY(qf_graph_init(&g));
 *   int64_t d[] = {1, 8};
 *   qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
 *   qf_node *n = qf_graph_add_node(g, QF_OP_RELU, "relu0", 1, &x, 1);
 *   qf_graph_add_output(g, n->outputs[0]);
 *   QF_TRY(qf_graph_infer_shapes(g));
 *   QF_TRY(qf_graph_verify(g));
 *   qf_graph_free(g);
 *
 * A value is one tensor edge (SSA): produced by one node, or a graph input,
 * or a constant (initializer). Each value keeps its use list. Nodes are kept
 * in a doubly linked list, in topological order after qf_graph_toposort().
 * The graph owns everything reachable from it: nodes, values, names,
 * attributes (an arena) and constant payloads (each its own allocation, so a
 * rewrite can replace one without growing the graph).
 */
#ifndef QFOLD_GRAPH_H
#define QFOLD_GRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "qfold/op.h"
#include "qfold/status.h"
#include "qfold/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_graph qf_graph;
typedef struct qf_node qf_node;
typedef struct qf_value qf_value;

typedef enum qf_value_kind {
    QF_VALUE_ACTIVATION = 0, /* produced by a node */
    QF_VALUE_INPUT,          /* graph input, fed at run time */
    QF_VALUE_CONSTANT,       /* initializer that is neither trained nor tracked */
    QF_VALUE_PARAMETER,      /* trainable initializer: weights, bias, BN gamma / beta */
    QF_VALUE_BUFFER          /* state updated by training, not by the optimizer: BN mean / var */
} qf_value_kind;

typedef struct qf_use {
    qf_node *node;
    int slot; /* input index in node */
} qf_use;

struct qf_value {
    uint32_t id;          /* index in graph->values */
    const char *name;     /* unique in the graph */
    qf_value_kind kind;
    qf_tensor type;       /* dtype + shape; .data = payload for constants, the default of an
                           * input that has one (qf_graph_make_input), else NULL */
    qf_node *producer;    /* NULL for inputs and constants */
    int producer_slot;
    qf_use *uses;
    int nuses, cap_uses;
    bool is_output;       /* listed in graph->outputs */
    /* How the model stores this float32 value when it is not float32: 0, or
     * QF_STORE_F16 / QF_STORE_BF16 (import converts half-precision tensors to
     * float32; export and `qfold run`'s outputs convert back), with
     * QF_STORE_VIA_CAST on a constant the model had as a half-precision
     * initializer behind Cast(to=FLOAT) (export writes it so again). */
    int store;
    /* A constant whose payload is still in the file the graph was loaded
     * from (type.data NULL; see "Payloads left in the file" below). */
    struct qf_deferred *deferred;
};

#define QF_STORE_F16      10 /* ONNX FLOAT16 */
#define QF_STORE_BF16     16 /* ONNX BFLOAT16 */
#define QF_STORE_DTYPE    0xff
#define QF_STORE_VIA_CAST 0x100

typedef enum qf_attr_type {
    QF_ATTR_INT = 0,
    QF_ATTR_FLOAT,
    QF_ATTR_STRING,
    QF_ATTR_INTS,
    QF_ATTR_FLOATS,
    QF_ATTR_TENSOR
} qf_attr_type;

typedef struct qf_attr {
    const char *name;
    qf_attr_type type;
    int64_t i;
    float f;              /* ONNX stores float attributes in single precision */
    const char *s;
    int64_t *ints;        /* n entries */
    float *floats;        /* n entries */
    int n;
    qf_tensor *t;         /* QF_ATTR_TENSOR: owned by the graph */
} qf_attr;

struct qf_node {
    uint32_t id;
    qf_op op;
    const char *name;     /* unique in the graph */
    int ninputs, noutputs;
    qf_value **inputs;    /* an entry is NULL for an omitted optional input */
    qf_value **outputs;
    int nattrs, cap_attrs;
    qf_attr *attrs;
    qf_node *prev, *next;
};

struct qf_graph {
    const char *name;
    int64_t opset;        /* default-domain opset (7..21; written at, or raised from) */
    int64_t ir_version;
    const char *producer_name;
    qf_node *first, *last;
    int nnodes;
    qf_value **values;    /* by id; NULL where a value was removed */
    int nvalues, cap_values;
    qf_value **inputs;
    int ninputs, cap_inputs;
    qf_value **outputs;
    int noutputs, cap_outputs;
    uint32_t next_node_id;
    struct qf_graph_impl *impl; /* arena, name table */
};

/* --- life cycle ---------------------------------------------------------- */
qf_status qf_graph_init(qf_graph **out);
void qf_graph_free(qf_graph *g);
/* A deep copy of g in *out: inputs, constants (payloads copied, owned),
 * nodes in g's list order with their attributes, outputs, the same names
 * and recorded shapes (src/ir/clone.c). Value and node ids may differ. */
qf_status qf_graph_clone(const qf_graph *g, qf_graph **out);

/* Copy a string into the graph's arena (NULL on out-of-memory). */
const char *qf_graph_strdup(qf_graph *g, const char *s);
/* Allocate zeroed memory in the graph's arena (freed with the graph). */
void *qf_graph_alloc(qf_graph *g, size_t size);
/* Hand the graph a buffer (`size` bytes from qf_malloc) that constants
 * borrow slices of (the ONNX importer reads the model file into one buffer
 * and points each weight at its bytes there, see qf_tensor.writable):
 * qf_graph_free frees it after every value. A writable slice's whole pages
 * are handed back to the system when qf_graph_remove_value removes its
 * value (say, a float weight the quantizer replaced), as freeing an owned
 * payload would. On failure (out of memory) the caller still owns buf. */
qf_status qf_graph_adopt_buffer(qf_graph *g, void *buf, size_t size);

/* --- values -------------------------------------------------------------- */
/* A new value. name may be NULL (a unique name is made); a name already in
 * use gets a suffix. Returns NULL on out-of-memory (message recorded). */
qf_value *qf_graph_add_value(qf_graph *g, const char *name, qf_value_kind kind,
                             qf_dtype dt, int ndim, const int64_t *dims);
qf_value *qf_graph_add_input(qf_graph *g, const char *name, qf_dtype dt, int ndim,
                             const int64_t *dims);
/* A constant value that takes ownership of t's data (t is left empty). */
qf_value *qf_graph_add_constant(qf_graph *g, const char *name, qf_value_kind kind, qf_tensor *t);
/* Replace a constant's payload (takes ownership; the old payload is freed). */
void qf_value_set_data(qf_value *v, qf_tensor *t);
qf_status qf_graph_add_output(qf_graph *g, qf_value *v);
qf_value *qf_graph_find_value(const qf_graph *g, const char *name);
/* Give v a new name. QF_ERR_INVALID if another value already has it. */
qf_status qf_graph_rename_value(qf_graph *g, qf_value *v, const char *name);
bool qf_value_is_const(const qf_value *v); /* constant, parameter or buffer with data */
/* v holds a payload: in memory (type.data) or still in the file (deferred). */
bool qf_value_has_data(const qf_value *v);
/* Remove a value with no producer and no uses (e.g. an unused initializer). */
void qf_graph_remove_value(qf_graph *g, qf_value *v);

/* --- payloads left in the file (src/ir/deferred.c) ----------------------
 * `qfold fuse` loads a model with qf_onnx_load_options.defer: its big
 * initializers stay in the input file (the graph keeps it open; nothing is
 * mapped), each value recording where its payload starts. A BN fold into
 * such a weight records its per-channel scale on it (qf_value_defer_scale)
 * instead of rewriting it; the exporter reads each payload in pieces
 * (qf_value_read) straight into its write buffer and scales it there. Any
 * other reader of a constant's data calls qf_value_load first (or the pass
 * manager, qf_graph_load_all, before a pass that is not qf_pass.deferred):
 * type.data of a deferred value is NULL, so a reader that forgets crashes
 * in tests rather than reading wrong values. */
typedef enum qf_scale_axis {
    QF_SCALE_AXIS0 = 0, /* channel o = axis 0 ([O, ...]: Conv, linear) */
    QF_SCALE_CONVT      /* ConvTranspose [C_in, O/g, ...] with `groups` */
} qf_scale_axis;
typedef struct qf_deferred {
    int64_t off;        /* of the payload in the source file */
    double *scale;      /* pending per-channel scale, or NULL; owned */
    int64_t nscale;
    qf_scale_axis axis;
    int64_t groups;
} qf_deferred;
/* The file deferred payloads are read from: the graph takes over fd (closed
 * by qf_graph_free) and remembers its size and modification time; a read
 * from a file that changed since (or a short read) fails with QF_ERR_IO,
 * naming the value. */
qf_status qf_graph_set_source(qf_graph *g, int fd, const char *path);
/* Leave v's payload (qf_tensor_nbytes(&v->type) bytes at off) in the file. */
qf_status qf_value_defer(qf_graph *g, qf_value *v, int64_t off);
/* Read v's payload into owned memory (the pending scale applied): v is an
 * ordinary constant afterwards. No-op when v is not deferred. */
qf_status qf_value_load(const qf_graph *g, qf_value *v);
/* qf_value_load of every deferred value. */
qf_status qf_graph_load_all(const qf_graph *g);
bool qf_graph_has_deferred(const qf_graph *g);
/* Bytes [off, off + n) of v's payload into dst (any alignment): as stored
 * in the file (scaled false) or with the pending scale applied (true), the
 * same float operation as the BN fold's (float)((double)w * s[o]). */
qf_status qf_value_read(const qf_graph *g, const qf_value *v, size_t off, void *dst, size_t n, bool scaled);
/* Record a per-channel scale on a deferred float32 value that has none yet
 * (s[0..n) copied). */
qf_status qf_value_defer_scale(qf_value *v, qf_scale_axis axis, int64_t groups, const double *s, int64_t n);
/* The channel whose scale applies to float element e of a weight of shape t
 * (axis and groups as above), and in *run_end the end of e's run of
 * elements of that channel. */
int64_t qf_scale_channel(const qf_tensor *t, qf_scale_axis axis, int64_t groups, int64_t e, int64_t *run_end);

/* --- nodes --------------------------------------------------------------- */
/* A new node appended at the end of the node list, with `noutputs` fresh
 * activation values (names "<node>_out<i>" unless renamed). inputs may hold
 * NULL entries for omitted optional inputs. Returns NULL on out-of-memory. */
qf_node *qf_graph_add_node(qf_graph *g, qf_op op, const char *name, int ninputs,
                           qf_value *const *inputs, int noutputs);
/* Same, but the node is linked right before / after `pos`. On failure
 * nothing of the node stays in the graph (no use, value or name). */
qf_node *qf_graph_insert_node(qf_graph *g, qf_node *pos, bool after, qf_op op, const char *name,
                              int ninputs, qf_value *const *inputs, int noutputs);
qf_node *qf_graph_find_node(const qf_graph *g, const char *name);
/* Give n a new name. QF_ERR_INVALID if another node already has it. A
 * rewrite that replaces a node gives the new one the old name once the old
 * node is removed, so rewriting twice does not grow names. */
qf_status qf_graph_rename_node(qf_graph *g, qf_node *n, const char *name);
/* Rewire input `slot` of n to v (v may be NULL); use lists are kept. */
qf_status qf_node_set_input(qf_graph *g, qf_node *n, int slot, qf_value *v);
/* Append one more input. */
qf_status qf_node_add_input(qf_graph *g, qf_node *n, qf_value *v);
/* Every use of `from` becomes a use of `to`; graph outputs follow (the
 * output keeps its name: `to` and `from` swap names when `from` was an
 * output, so a caller must not pass a graph input or output as `to` then:
 * the interface would be renamed). */
qf_status qf_graph_replace_uses(qf_graph *g, qf_value *from, qf_value *to);
/* Unlink and free a node. Its outputs must have no uses and not be graph
 * outputs; they are removed with it. Inputs lose the use. */
void qf_graph_remove_node(qf_graph *g, qf_node *n);
/* Remove nodes whose outputs are unused and not graph outputs, and constants
 * nobody uses. Returns the number of nodes removed. */
int qf_graph_dce(qf_graph *g);
/* qf_graph_dce that also reports each node it removes: removed(ud, n) is
 * called just before n is removed, while n and its inputs and outputs are
 * still intact (removed may be NULL). The callback must not change the
 * graph. */
int qf_graph_dce_ex(qf_graph *g, void (*removed)(void *ud, const qf_node *n), void *ud);

/* --- attributes ---------------------------------------------------------- */
const qf_attr *qf_node_attr(const qf_node *n, const char *name);
int64_t qf_node_attr_int(const qf_node *n, const char *name, int64_t dflt);
float qf_node_attr_float(const qf_node *n, const char *name, float dflt);
const char *qf_node_attr_string(const qf_node *n, const char *name, const char *dflt);
/* Returns the array and sets *count; NULL and *count = 0 when absent. */
const int64_t *qf_node_attr_ints(const qf_node *n, const char *name, int *count);
const float *qf_node_attr_floats(const qf_node *n, const char *name, int *count);
qf_status qf_node_set_attr_int(qf_graph *g, qf_node *n, const char *name, int64_t v);
qf_status qf_node_set_attr_float(qf_graph *g, qf_node *n, const char *name, float v);
qf_status qf_node_set_attr_string(qf_graph *g, qf_node *n, const char *name, const char *v);
qf_status qf_node_set_attr_ints(qf_graph *g, qf_node *n, const char *name, const int64_t *v, int count);
qf_status qf_node_set_attr_floats(qf_graph *g, qf_node *n, const char *name, const float *v, int count);
/* The int, float and string attributes (one or a list) of `like` (NULL:
 * none) onto n; tensor attributes are not copied. */
qf_status qf_node_copy_attrs(qf_graph *g, qf_node *n, const qf_node *like);
/* Takes ownership of t's data. */
qf_status qf_node_set_attr_tensor(qf_graph *g, qf_node *n, const char *name, qf_tensor *t);
void qf_node_remove_attr(qf_node *n, const char *name);

/* --- whole-graph operations ---------------------------------------------- */
/* Reorder the node list topologically (stable: keeps the current order where
 * it can). QF_ERR_INVALID naming a node on the cycle if there is one. */
qf_status qf_graph_toposort(qf_graph *g);
/* Shape inference of one node: checks its inputs have a type and a shape
 * that fits (qf_shape_fits), runs the op's inference (src/ops/infer.c), then
 * refuses an output shape that does not fit (QF_ERR_SHAPE naming the node).
 * Every caller of an op's inference goes through here. */
qf_status qf_node_infer(qf_graph *g, qf_node *n);
/* Run every node's shape inference in order (graph must be sorted). */
qf_status qf_graph_infer_shapes(qf_graph *g);
/* Check every structural invariant: ids, names, SSA, use lists (every use
 * names a listed node that reads the value), order, arity. Shapes are
 * checked by qf_graph_verify_shapes. */
qf_status qf_graph_verify(const qf_graph *g);
/* qf_graph_verify, then re-run every node's shape inference and check that
 * each output's dtype and shape are what the graph says (a rewrite that
 * forgot to update a type is caught here). The graph must be sorted; it is
 * left as it was, also when the check fails. */
qf_status qf_graph_verify_shapes(qf_graph *g);
/* Mark initializers as parameters / buffers by how the op table's input
 * roles use them (conv weight -> parameter, BN running mean -> buffer). */
void qf_graph_classify_constants(qf_graph *g);

/* --- binding inputs -------------------------------------------------------- */
/* Give graph input i a concrete shape (e.g. a batch size read from a .npy);
 * run qf_graph_infer_shapes afterwards. */
qf_status qf_graph_set_input_shape(qf_graph *g, int i, int ndim, const int64_t *dims);
/* Turn graph input i into a constant with t's data (takes ownership); it
 * leaves the input list. Used for shape-like int64 inputs (a Reshape's shape
 * fed as an input) so that shapes stay static. */
qf_status qf_graph_bind_input(qf_graph *g, int i, qf_tensor *t);
/* Inputs with a default: ONNX (IR version >= 4) reads an initializer that is
 * also listed as a graph input as that input's default value, which a run may
 * override (ONNX Runtime's "overridable initializer"). Such a value is a graph
 * input (kind QF_VALUE_INPUT) whose type.data holds the default: it is not a
 * constant (qf_value_is_const is false), so no pass folds it, and export
 * writes it as an input and an initializer again.
 * qf_graph_make_input: constant v, its payload in memory (qf_value_load it
 * first if it is still in the file), becomes such an input, appended to the
 * input list.
 * qf_graph_input_use_default: input i, which has a default, is not fed: it
 * becomes the constant of its default and leaves the input list. */
qf_status qf_graph_make_input(qf_graph *g, qf_value *v);
qf_status qf_graph_input_use_default(qf_graph *g, int i);
bool qf_value_has_default(const qf_value *v); /* a graph input with a default */

/* --- printing ------------------------------------------------------------- */
void qf_graph_print(const qf_graph *g, FILE *f);
void qf_graph_print_dot(const qf_graph *g, FILE *f);
const char *qf_value_kind_name(qf_value_kind k);

#define qf_graph_for_each_node(g, n) for (qf_node *n = (g)->first; n; n = n->next)

#ifdef __cplusplus
}
#endif
#endif
