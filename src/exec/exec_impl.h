/* Private helpers shared by the executor's files (plan.c, fold.c). */
#ifndef QF_EXEC_IMPL_H
#define QF_EXEC_IMPL_H

#include "../ops/op_table.h"
#include "qfold/exec.h"

/* Buffers in the plan's arena (and its scratch) start on this boundary. */
#define QF_EXEC_ALIGN 64

/* Round n up to a multiple of QF_EXEC_ALIGN. */
static inline size_t qf_exec_align(size_t n)
{
    return (n + QF_EXEC_ALIGN - 1) / QF_EXEC_ALIGN * QF_EXEC_ALIGN;
}

/* Run n's forward kernel on prepared tensors. On failure the message names
 * the node: when the kernel's message does not mention it, it is prefixed. */
qf_status qf_exec_node(const qf_kernel_io *io);

/* Scratch bytes n's kernel needs (0 when none); QF_ERR_SHAPE naming the node
 * when that is more than qfold allocates in one piece (QF_MAX_TENSOR_BYTES:
 * an im2col of a huge kernel over a huge output). */
qf_status qf_exec_scratch(const qf_node *n, size_t *bytes);

#endif
