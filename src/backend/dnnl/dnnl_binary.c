/* Add, Sub, Mul and Div on oneDNN's binary primitive (float32 forward): one
 * IEEE operation per element, as the reference. numpy broadcasting as far as
 * oneDNN takes it: both operands padded with leading 1s to Y's rank; the
 * first operand must have Y's shape (Add and Mul swap their operands when
 * only the second has it); the second broadcasts. Channels-last operands
 * (io->in_nhwc / out_nhwc) are read with their strides, so a per-channel
 * [1, C, 1, 1] operand works in either layout. */
#include <string.h>

#include "backend/dnnl/dnnl_kernels.h"

/* Descriptor of t padded to `nd` dims (leading 1s), channels-last if asked. */
static qf_status dbin_md(const qf_node *n, dnnl_memory_desc_t *md, const qf_tensor *t, int nd,
                         int fmt)
{
    qf_tensor v;
    int64_t dims[QF_MAX_DIMS];
    for (int i = 0; i < nd; i++) dims[i] = i < nd - t->ndim ? 1 : t->dims[i - (nd - t->ndim)];
    qf_tensor_view(&v, QF_DTYPE_F32, nd, dims, NULL);
    return qf_dnnl_md(n, md, &v, fmt);
}

static bool dbin_same(const qf_tensor *a, const qf_tensor *y)
{
    if (qf_tensor_numel(a) != qf_tensor_numel(y) || a->ndim > y->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != y->dims[y->ndim - a->ndim + i]) return false;
    return true;
}

static qf_status dbin_build(const qf_kernel_io *io, qf_dk_prim *p)
{
    const qf_node *n = io->node;
    if (io->nin != 2 || !io->in[0] || !io->in[1] || io->nout != 1 || io->nfused ||
        !qf_dk_all_f32(io))
        return QF_DK_DECLINE;
    dnnl_alg_kind_t alg;
    switch (n->op) {
    case QF_OP_ADD: alg = dnnl_binary_add; break;
    case QF_OP_SUB: alg = dnnl_binary_sub; break;
    case QF_OP_MUL: alg = dnnl_binary_mul; break;
    case QF_OP_DIV: alg = dnnl_binary_div; break;
    default: return QF_DK_DECLINE;
    }
    const qf_tensor *y = io->out[0];
    int a = 0, b = 1;
    if (!dbin_same(io->in[0], y)) {
        if ((alg != dnnl_binary_add && alg != dnnl_binary_mul) || !dbin_same(io->in[1], y))
            return QF_DK_DECLINE;
        a = 1, b = 0;
    }
    /* A channels-last bit only on a tensor with a channel axis (rank 3..5). */
    for (int i = 0; i < 2; i++)
        if ((io->in_nhwc >> i & 1u) && (y->ndim < 3 || io->in[i]->ndim != y->ndim))
            return QF_DK_DECLINE;
    if ((io->in_nhwc & ~3u) || (io->out_nhwc & ~1u) || ((io->out_nhwc & 1u) && y->ndim < 3))
        return QF_DK_DECLINE;
    dnnl_memory_desc_t md0, md1, dst;
    QF_TRY(dbin_md(n, &md0, io->in[a], y->ndim, qf_dnnl_fmt(io, io->in_nhwc >> a & 1u)));
    QF_TRY(dbin_md(n, &md1, io->in[b], y->ndim, qf_dnnl_fmt(io, io->in_nhwc >> b & 1u)));
    QF_TRY(qf_dnnl_md(n, &dst, y, qf_dnnl_fmt(io, io->out_nhwc & 1u)));
    qf_dk_build bb;
    QF_TRY(qf_dk_begin(&bb, io, p));
    dnnl_binary_desc_t d;
    dnnl_status_t r = QF_DNNL(binary_desc_init)(&d, alg, &md0, &md1, &dst);
    if (r != dnnl_success) {
        qf_dk_abort(&bb);
        return r == dnnl_unimplemented || r == dnnl_invalid_arguments
                   ? QF_DK_DECLINE
                   : qf_dnnl_check(n, r, "binary descriptor");
    }
    QF_TRY(qf_dk_finish(&bb, &d));
    const qf_tensor *ta = io->in[a], *tb = io->in[b];
    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC_0, ta->data ? QF_DK_FIXED : QF_DK_IN, a, &md0, ta->data));
    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC_1, tb->data ? QF_DK_FIXED : QF_DK_IN, b, &md1, tb->data));
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &dst, NULL);
}

static qf_status dbin_prepare(const qf_kernel_io *io, void *state)
{
    qf_status st = dbin_build(io, state);
    if (st != QF_OK) qf_dk_release(state);
    return st;
}

#define QF_DBIN_COLUMNS_                                                                     \
    {                                                                                        \
        .prepare = dbin_prepare, .state_size = sizeof(qf_dk_prim), .release = qf_dk_release, \
        .scratch = qf_dk_scratch, .forward_f32 = qf_dk_forward,                              \
        .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,                      \
    }
const qf_backend_kernels qf_add_dnnl = QF_DBIN_COLUMNS_;
const qf_backend_kernels qf_sub_dnnl = QF_DBIN_COLUMNS_;
const qf_backend_kernels qf_mul_dnnl = QF_DBIN_COLUMNS_;
const qf_backend_kernels qf_div_dnnl = QF_DBIN_COLUMNS_;
#undef QF_DBIN_COLUMNS_
