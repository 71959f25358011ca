/* The op schema table, generated from QF_OP_LIST, and name look-ups. */
#include <string.h>

#include "qfold/schema.h"

/* The row's parenthesized lists, unwrapped; role and attribute shorthands
 * of QF_OP_LIST, defined for this table only. */
#define QF_UNPAREN_(...) __VA_ARGS__
#define DATA QF_ROLE_DATA
#define WEIGHT QF_ROLE_WEIGHT
#define BIAS QF_ROLE_BIAS
#define BN_SCALE QF_ROLE_BN_SCALE
#define BN_SHIFT QF_ROLE_BN_SHIFT
#define BN_STAT QF_ROLE_BN_STAT
#define SHAPE QF_ROLE_SHAPE
#define A(nm, ty) {#nm, QF_ATTR_##ty},

static const qf_op_schema qf_op_schemas[QF_OP_COUNT] = {
#define QF_OP_SCHEMA_(tag, nm, onnx, domain, min_in, max_in, min_out, max_out, role_list, attr_list)  \
    [QF_OP_##tag] = {.name = #nm, .onnx_name = onnx, .onnx_domain = domain,                   \
                     .min_inputs = min_in, .max_inputs = max_in,                              \
                     .min_outputs = min_out, .max_outputs = max_out,                          \
                     .roles = {QF_UNPAREN_ role_list}, .attrs = {QF_UNPAREN_ attr_list {NULL, QF_ATTR_INT}}},
    QF_OP_LIST(QF_OP_SCHEMA_)
#undef QF_OP_SCHEMA_
};

#undef A
#undef DATA
#undef WEIGHT
#undef BIAS
#undef BN_SCALE
#undef BN_SHIFT
#undef BN_STAT
#undef SHAPE
#undef QF_UNPAREN_

const qf_op_schema *qf_op_schema_get(qf_op op) { return (unsigned)op < QF_OP_COUNT ? &qf_op_schemas[op] : NULL; }

const qf_attr_schema *qf_op_schema_attr(qf_op op, const char *name)
{
    const qf_op_schema *s = qf_op_schema_get(op);
    if (!s) return NULL;
    for (const qf_attr_schema *a = s->attrs; a->name; a++)
        if (strcmp(a->name, name) == 0) return a;
    return NULL;
}

qf_input_role qf_op_input_role(qf_op op, int slot)
{
    const qf_op_schema *s = qf_op_schema_get(op);
    return s && slot >= 0 && slot < QF_MAX_ROLES ? s->roles[slot] : QF_ROLE_DATA;
}

const char *qf_attr_type_name(qf_attr_type t)
{
    switch (t) {
    case QF_ATTR_INT: return "INT";
    case QF_ATTR_FLOAT: return "FLOAT";
    case QF_ATTR_STRING: return "STRING";
    case QF_ATTR_INTS: return "INTS";
    case QF_ATTR_FLOATS: return "FLOATS";
    case QF_ATTR_TENSOR: return "TENSOR";
    }
    return "?";
}

const char *qf_op_name(qf_op op) { return (unsigned)op < QF_OP_COUNT ? qf_op_schemas[op].name : "?"; }

const char *qf_op_onnx_name(qf_op op) { return (unsigned)op < QF_OP_COUNT ? qf_op_schemas[op].onnx_name : NULL; }

qf_op qf_op_from_onnx(const char *op_type)
{
    for (int i = 0; i < QF_OP_COUNT; i++)
        if (qf_op_schemas[i].onnx_name && strcmp(qf_op_schemas[i].onnx_name, op_type) == 0) return (qf_op)i;
    return QF_OP_COUNT;
}

qf_op qf_op_from_name(const char *name)
{
    for (int i = 0; i < QF_OP_COUNT; i++)
        if (strcmp(qf_op_schemas[i].name, name) == 0) return (qf_op)i;
    return QF_OP_COUNT;
}
