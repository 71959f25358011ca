/* qfold — the op schema: what the graph knows about each op, one row per op
 * of QF_OP_LIST (qfold/op.h): names, arity, input roles, typed attributes.
 *
 *   const qf_op_schema *s = qf_op_schema_get(QF_OP_CONV);
 *   // s->min_inputs == 2, s->roles[1] == QF_ROLE_WEIGHT, s->attrs[0].name ...
 *
 * Shape inference and kernels are not here: they are the columns of the op
 * table in src/ops/ (a layer above the graph).
 */
#ifndef QFOLD_SCHEMA_H
#define QFOLD_SCHEMA_H

#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#define QF_MAX_ROLES 5  /* input slots with a role; later slots are DATA */
#define QF_MAX_ATTRS 8  /* attributes in one schema row */

typedef struct qf_attr_schema {
    const char *name;   /* NULL ends the list */
    qf_attr_type type;
} qf_attr_schema;

typedef struct qf_op_schema {
    const char *name;             /* qfold name */
    const char *onnx_name;        /* ONNX op_type; NULL: internal, lowered on export */
    const char *onnx_domain;      /* "" = the default ONNX domain */
    int min_inputs, max_inputs;   /* max -1: variadic */
    int min_outputs, max_outputs; /* max -1: variadic */
    qf_input_role roles[QF_MAX_ROLES];
    qf_attr_schema attrs[QF_MAX_ATTRS + 1];
} qf_op_schema;

/* The schema row of op; NULL when op is out of range. */
const qf_op_schema *qf_op_schema_get(qf_op op);

/* The schema of attribute `name` of op, NULL when the row does not list it. */
const qf_attr_schema *qf_op_schema_attr(qf_op op, const char *name);

/* The role of input slot `slot` of op (DATA past the listed roles). */
qf_input_role qf_op_input_role(qf_op op, int slot);

/* The op's name for messages: ONNX's op_type, or qfold's for internal ops. */
static inline const char *qf_op_label(const qf_node *n)
{
    const char *onnx = qf_op_onnx_name(n->op);
    /* An opaque node (an op qfold does not know, kept for export) goes by
     * its ONNX op_type. */
    if (n->op == QF_OP_OPAQUE) onnx = qf_node_attr_string(n, "op_type", NULL);
    return onnx ? onnx : qf_op_name(n->op);
}

/* Printable name of an attribute type ("INT", "FLOATS", ...). */
const char *qf_attr_type_name(qf_attr_type t);

#ifdef __cplusplus
}
#endif
#endif
