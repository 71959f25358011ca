/* The op table: qf_op_table[QF_OP_x] points at the kernel columns the op's
 * family file defines (qf_<name>_kernels). tests/ops/test_op_table.c walks it. */
#include "kernels.h"

const qf_op_kernels *const qf_op_table[QF_OP_COUNT] = {
#define QF_OP_KERNELS_ROW_(tag, nm, ...) [QF_OP_##tag] = &qf_##nm##_kernels,
    QF_OP_LIST(QF_OP_KERNELS_ROW_)
#undef QF_OP_KERNELS_ROW_
};
