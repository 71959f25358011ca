/* Op names from QF_OP_LIST. */
#include <string.h>

#include "qfold/op.h"

static const char *const qf_op_names[QF_OP_COUNT] = {
#define QF_OP_NAME_(tag, name, onnx) [QF_OP_##tag] = name,
    QF_OP_LIST(QF_OP_NAME_)
#undef QF_OP_NAME_
};

static const char *const qf_op_onnx_names[QF_OP_COUNT] = {
#define QF_OP_ONNX_(tag, name, onnx) [QF_OP_##tag] = onnx,
    QF_OP_LIST(QF_OP_ONNX_)
#undef QF_OP_ONNX_
};

const char *qf_op_name(qf_op op) { return (unsigned)op < QF_OP_COUNT ? qf_op_names[op] : "?"; }

const char *qf_op_onnx_name(qf_op op) { return (unsigned)op < QF_OP_COUNT ? qf_op_onnx_names[op] : NULL; }

qf_op qf_op_from_onnx(const char *op_type)
{
    for (int i = 0; i < QF_OP_COUNT; i++)
        if (qf_op_onnx_names[i] && strcmp(qf_op_onnx_names[i], op_type) == 0) return (qf_op)i;
    return QF_OP_COUNT;
}

qf_op qf_op_from_name(const char *name)
{
    for (int i = 0; i < QF_OP_COUNT; i++)
        if (strcmp(qf_op_names[i], name) == 0) return (qf_op)i;
    return QF_OP_COUNT;
}
