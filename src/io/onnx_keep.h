/* Private: what an ONNX model carries that qfold does not interpret, kept
 * from import to export (src/io/onnx_keep.c), and opaque nodes.
 *
 * Import records, as graph notes (src/ir/graph_notes.h): the model's
 * producer_version, domain, model_version, doc strings, metadata_props,
 * local functions, opset imports of other domains; the declared type and
 * symbolic dim names of every graph input / output / value_info entry, the
 * value_info entries themselves, node doc strings. Export writes them back:
 * scalar fields as themselves, whole messages (metadata_props, functions,
 * value_info) as the bytes they were, through protobuf-c's unknown fields
 * (packed after the known fields of the same message, which is where
 * protobuf's canonical field order puts them).
 *
 * A node whose op qfold does not know becomes an opaque node
 * (src/ops/ref/opaque.c): op_type, domain, name, inputs and outputs as in the
 * file, its AttributeProtos kept byte for byte. */
#ifndef QF_ONNX_KEEP_H
#define QF_ONNX_KEEP_H

#include "../core/arena.h"
#include "onnx_proto.h"

/* --- import ------------------------------------------------------------------ */

/* Record the model's and graph's kept fields (before any node is made). */
qf_status qf_keep_import_model(qf_graph *g, const Onnx__ModelProto *m);
/* node i's doc string, under the node's name in g. */
qf_status qf_keep_import_node_doc(qf_graph *g, const Onnx__NodeProto *np, const char *name);
/* Make np an opaque node named `name` (with np->n_input empty input slots,
 * bound later by name) in *out. "" names in np mean no name / an omitted
 * input or output. Refuses (QF_ERR_UNSUPPORTED, *out NULL) an attribute
 * holding a subgraph (its references to outer values would not be
 * tracked). attrs false: without its attributes (a stand-in while
 * collecting problems: never to be written). */
qf_status qf_keep_opaque_node(qf_graph *g, const Onnx__NodeProto *np, const char *name, bool attrs,
                              qf_node **out);
/* "domain.op_type" (just op_type in the default domain) of an opaque node,
 * or of np: the key inspect groups unsupported ops by. */
const char *qf_keep_op_key(const char *domain, const char *op_type, char *buf, size_t size);

/* --- export ------------------------------------------------------------------ */

/* The symbolic name of dim i of graph input / output `name` of rank ndim as
 * the model declared it: NULL when it was a number or had no name (or when
 * the model did not declare that value with this rank: *declared false). */
const char *qf_keep_dim_name(const qf_graph *g, const char *name, int ndim, int i, bool *declared);
/* The declared dtype code and shape of value `name` (graph input / output or
 * value_info); false when the model declared none. */
bool qf_keep_declared_type(const qf_graph *g, const char *name, int32_t *elem_type, int *ndim,
                           int64_t *dims);
/* The doc string of a graph input / output, NULL if none. */
const char *qf_keep_value_doc(const qf_graph *g, const char *name, qf_arena *a);
/* Fill np (inputs, outputs, op_type, name already set from n) with the rest
 * of an opaque node: domain, "" for omitted outputs and no name, the kept
 * attributes. */
qf_status qf_keep_opaque_fill(const qf_node *n, qf_arena *a, Onnx__NodeProto *np);
/* Set np's doc string when the model gave the node of that name one. */
qf_status qf_keep_node_doc(const qf_graph *g, qf_arena *a, Onnx__NodeProto *np);
/* Model and graph fields: producer_version, domain, model_version, doc
 * strings, metadata_props and functions (m's unknown fields), value_info of
 * values the graph still has with a compatible type (gp's unknown fields),
 * opset imports of other domains appended to m's (which holds the default
 * domain's; the array is replaced by one in a). */
qf_status qf_keep_export_model(const qf_graph *g, qf_arena *a, Onnx__ModelProto *m,
                               Onnx__GraphProto *gp);

#endif
