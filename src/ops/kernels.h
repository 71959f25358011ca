/* The kernel columns of every op, defined by the op's family file
 * (src/ops/<family>.c) and collected into qf_op_table by op_table.c. */
#ifndef QF_KERNELS_H
#define QF_KERNELS_H

#include "op_table.h"

#define QF_OP_KERNELS_DECL_(tag, nm, ...) extern const qf_op_kernels qf_##nm##_kernels;
QF_OP_LIST(QF_OP_KERNELS_DECL_)
#undef QF_OP_KERNELS_DECL_

#endif
