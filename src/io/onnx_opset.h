/* Versioned ONNX ops (src/io/onnx_opset.c): the default domain's opsets 7..21
 * read onto qfold's op forms, and qfold's forms written back at one opset.
 *
 * Import: qf_onnx_opset_import runs on the bound graph (before it is sorted,
 * folded and inferred) and rewrites the forms the op table does not read
 * (Pad-2's and Slice-1's attributes become constant inputs, an opset < 13
 * Softmax is marked QF_ONNX_SOFTMAX_2D), refusing what qfold cannot express;
 * qf_onnx_opset_finish runs after shape inference and unmarks the Softmax
 * whose 2-D coercion is the same as one axis.
 * Export: qf_onnx_opset_target picks the opset to write (the graph's, raised
 * where a node needs a later one), qf_onnx_opset_write gives one node's
 * inputs and attributes in that opset's form. */
#ifndef QF_ONNX_OPSET_H
#define QF_ONNX_OPSET_H

#include "qfold/graph.h"

#define QF_ONNX_OPSET_MIN 7
#define QF_ONNX_OPSET_MAX 21

/* Rewrite the nodes of an ONNX graph of default-domain opset `opset` into
 * the forms qfold's op table reads; refuse (naming the node and the reason)
 * what a version defines that qfold cannot express. */
qf_status qf_onnx_opset_import(qf_graph *g, int64_t opset);

/* The attribute marking a Softmax with the opset < 13 2-D coercion (read by
 * its kernels whatever g->opset says). */
#define QF_ONNX_SOFTMAX_2D "qfold_softmax_2d"

/* After shape inference: settle what needed the shapes (the Softmax mark);
 * *changed when nodes were added (the caller infers again). */
qf_status qf_onnx_opset_finish(qf_graph *g, bool *changed);

/* The opset export writes g at: g->opset, raised to the first opset in which
 * every node can be written. Errors name the node that cannot be written at
 * any opset up to QF_ONNX_OPSET_MAX. */
qf_status qf_onnx_opset_target(const qf_graph *g, int64_t *opset);

/* The IR version an opset was released with (opset 13: 7, 21: 10). */
int64_t qf_onnx_opset_ir_version(int64_t opset);

enum { QF_ONNX_WRITE_IN = 8, QF_ONNX_WRITE_ATTRS = 32 };

/* One node as written at an opset: inputs (a graph value, or a constant made
 * for this form, written as a new initializer named after the node and
 * made_name[i]; neither = omitted) and the attributes to write. */
typedef struct qf_onnx_written {
    int nin;
    const qf_value *in[QF_ONNX_WRITE_IN];
    const qf_tensor *made[QF_ONNX_WRITE_IN];
    const char *made_name[QF_ONNX_WRITE_IN];
    int nattrs;
    qf_attr attrs[QF_ONNX_WRITE_ATTRS];
} qf_onnx_written;

/* n is a marked Softmax that opset `opset` cannot write as one node: export
 * writes Flatten -> Softmax(axis 1) -> Reshape. */
bool qf_onnx_opset_softmax_2d(const qf_node *n, int64_t opset);

/* Memory for the written form (arrays, made tensors' data), valid until
 * the model is written; NULL on out-of-memory. */
typedef void *(*qf_onnx_alloc_fn)(void *ud, size_t size);

/* n (an op with an ONNX op_type) in the form of opset `opset` (from
 * qf_onnx_opset_target). *converted false: write n as it is (inputs and
 * attributes unchanged), w untouched. */
qf_status qf_onnx_opset_write(const qf_graph *g, const qf_node *n, int64_t opset, qf_onnx_alloc_fn alloc,
                              void *ud, qf_onnx_written *w, bool *converted);

#endif
