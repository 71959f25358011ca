/* One node, alone: prepare, scratch, float forward (qf_node_eval); forward
 * then backward (qf_node_eval_grad). The per-node steps (qf_exec_prepare,
 * qf_exec_scratch, qf_exec_node) are plan.c's, shared with the plan and the
 * tape: this file uses them and plan.c uses nothing of it. */
#include "backend/backend.h"
#include "exec_impl.h"

qf_status qf_node_eval(const qf_node *n, int64_t opset, const qf_tensor *const *in, qf_tensor *const *out)
{
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    void *state_raw = NULL, *scratch = NULL, *state = NULL;
    size_t scratch_size = 0;
    qf_kernel_io io = {.node = n, .opset = opset, .nin = n->ninputs, .nout = n->noutputs, .in = in, .out = out};
    qf_status st = QF_OK;
    /* The reference kernels' GEMM follows the engine (the backend's sgemm
     * while it is active): give it the backend's hook (loads nothing). */
    qf_backend_attach();
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

/* The backward's view of a forward tensor: its data only when the op says
 * backward reads it (bit `slot` of mask), as the tape keeps only those. */
static qf_tensor *eval_grad_view(const qf_tensor *t, qf_tensor *view, uint32_t mask, int slot)
{
    if (!t) return NULL;
    *view = *t;
    view->owns = false;
    if (slot >= 32 || !((mask >> slot) & 1u)) view->data = NULL;
    return view;
}

qf_status qf_node_eval_grad(const qf_node *n, int64_t opset, const qf_tensor *const *in, qf_tensor *const *out,
                            const qf_tensor *const *dout, qf_tensor *const *din, bool training, uint64_t seed)
{
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    if (!k->backward_f32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): no backward kernel: cannot train through it", n->name,
                        qf_op_label(n));
    qf_backend_attach(); /* as qf_node_eval */
    void *state_raw = NULL, *scratch = NULL, *saved = NULL, *state = NULL;
    size_t fwd_bytes = 0, bwd_bytes = 0, saved_bytes = 0;
    const qf_tensor **bin = NULL;
    qf_tensor **bout = NULL;
    qf_tensor *views = NULL;
    qf_kernel_io io = {.node = n, .opset = opset, .nin = n->ninputs, .nout = n->noutputs, .in = in, .out = out,
                       .training = training, .seed = seed};
    qf_status st = QF_OK;
    if (k->state_size) {
        state = qf_exec_alloc_aligned(k->state_size, &state_raw);
        if (!state) return QF_ERR_NOMEM;
    }
    st = qf_exec_prepare(&io, state);
    if (st == QF_OK) st = qf_exec_scratch(n, state, &fwd_bytes);
    if (st == QF_OK) {
        if (k->bwd_scratch) bwd_bytes = k->bwd_scratch(n, state);
        if (k->saved_size) saved_bytes = k->saved_size(n, state);
        size_t sb = fwd_bytes > bwd_bytes ? fwd_bytes : bwd_bytes;
        const int nt = n->ninputs + n->noutputs;
        if (sb) scratch = qf_malloc(sb);
        if (saved_bytes) saved = qf_calloc(1, saved_bytes);
        bin = qf_calloc((size_t)(nt ? nt : 1), sizeof *bin);
        bout = qf_calloc((size_t)(nt ? nt : 1), sizeof *bout);
        views = qf_calloc((size_t)(nt ? nt : 1), sizeof *views);
        if ((sb && !scratch) || (saved_bytes && !saved) || !bin || !bout || !views) st = QF_ERR_NOMEM;
    }
    if (st == QF_OK) {
        io.state = state;
        io.scratch = scratch;
        io.scratch_size = fwd_bytes;
        io.saved = saved;
        st = qf_exec_node(&io);
    }
    if (st == QF_OK) {
        for (int i = 0; i < n->ninputs; i++) bin[i] = eval_grad_view(in[i], &views[i], k->bwd_in, i);
        for (int j = 0; j < n->noutputs; j++)
            bout[j] = eval_grad_view(out[j], &views[n->ninputs + j], k->bwd_out, j);
        io.in = bin;
        io.out = bout;
        io.scratch_size = bwd_bytes;
        io.dout = dout;
        io.din = din;
        st = k->backward_f32(&io);
        if (st != QF_OK) qf_exec_name_node(n, st);
    }
    qf_free(views);
    qf_free(bout);
    qf_free(bin);
    qf_free(saved);
    qf_free(scratch);
    qf_free(state_raw);
    return st;
}
