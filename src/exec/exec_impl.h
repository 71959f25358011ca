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

/* Scratch bytes n's kernel needs (0 when none), given its prepared state;
 * QF_ERR_SHAPE naming the node when that is more than qfold allocates in one
 * piece (QF_MAX_TENSOR_BYTES: an im2col of a huge kernel over a huge output). */
qf_status qf_exec_scratch(const qf_node *n, const void *state, size_t *bytes);

/* Run the prepare column of io->node (nothing when the op has none) into
 * `state` (the op's state_size bytes, zeroed). io->in / io->out are types:
 * data may be NULL. On failure the message names the node. */
qf_status qf_exec_prepare(const qf_kernel_io *io, void *state);

/* Prefix st's message with "node 'x' (Op): " unless it already names n. */
void qf_exec_name_node(const qf_node *n, qf_status st);

/* Zeroed memory aligned to QF_EXEC_ALIGN through the allocation hook: the
 * raw pointer (for qf_free) goes to *raw, the aligned one is returned. */
void *qf_exec_alloc_aligned(size_t size, void **raw);

#endif
