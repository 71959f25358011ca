/* One node, alone: prepare, scratch, float forward (qf_node_eval). */
#include "exec_impl.h"

qf_status qf_exec_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    if (!k->prepare) return QF_OK;
    qf_status st = k->prepare(io, state);
    if (st != QF_OK) qf_exec_name_node(n, st);
    return st;
}

qf_status qf_node_eval(const qf_node *n, int64_t opset, const qf_tensor *const *in, qf_tensor *const *out)
{
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    void *state_raw = NULL, *scratch = NULL, *state = NULL;
    size_t scratch_size = 0;
    qf_kernel_io io = {.node = n, .opset = opset, .nin = n->ninputs, .nout = n->noutputs, .in = in, .out = out};
    qf_status st = QF_OK;
    if (k->state_size) {
        state = qf_exec_alloc_aligned(k->state_size, &state_raw);
        if (!state) return QF_ERR_NOMEM;
    }
    st = qf_exec_prepare(&io, state);
    if (st == QF_OK) st = qf_exec_scratch(n, state, &scratch_size);
    if (st == QF_OK && scratch_size) {
        scratch = qf_malloc(scratch_size);
        if (!scratch) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) {
        io.state = state;
        io.scratch = scratch;
        io.scratch_size = scratch_size;
        st = qf_exec_node(&io);
    }
    qf_free(scratch);
    qf_free(state_raw);
    return st;
}
