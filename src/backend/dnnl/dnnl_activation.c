/* Unary activations on oneDNN's eltwise primitive (float32 forward):
 * LeakyRelu, Sigmoid, Tanh, HardSwish, with the algorithm and parameters of
 * qf_dk_eltwise_of (dnnl_prim.c), the same table the post-ops use. The data
 * is treated as one flat vector, so any layout works as long as X and Y have
 * the same one.
 *
 * Relu, relu6 and Clip alone stay with the reference kernels: oneDNN computes
 * them with max / min instructions, which turn a NaN into the bound, while
 * the reference (and PyTorch) pass NaN through. As post-ops of a Conv or Gemm
 * (qf_dnnl_can_fuse) they are taken: a NaN there needs a NaN input. */
#include "backend/dnnl/dnnl_kernels.h"

static qf_status dact_build(const qf_kernel_io *io, qf_dk_prim *p)
{
    const qf_node *n = io->node;
    if (io->nin < 1 || !io->in[0] || io->nout != 1 || io->nfused || !qf_dk_all_f32(io))
        return QF_DK_DECLINE;
    if ((io->in_nhwc & ~1u) || io->out_nhwc != (io->in_nhwc & 1u)) return QF_DK_DECLINE;
    dnnl_alg_kind_t alg;
    float alpha, beta;
    if (!qf_dk_eltwise_of(n, &alg, &alpha, &beta) || alg == dnnl_eltwise_clip ||
        (alg == dnnl_eltwise_relu && alpha == 0.0f))
        return QF_DK_DECLINE;
    int64_t numel = qf_tensor_numel(io->in[0]);
    if (numel != qf_tensor_numel(io->out[0])) return QF_DK_DECLINE;
    dnnl_memory_desc_t md;
    /* Every layout is one flat run of numel floats, blocked too when its
     * channels fill whole blocks. With pad channels oneDNN 2.6 has only its
     * reference eltwise kernel for the 4-D blocked layout (and a flat one
     * over the pad would write f(0) there): declined. */
    if (io->blocked && (io->in_nhwc & 1u) && (io->in[0]->ndim != 4 || io->in[0]->dims[1] % QF_LAYOUT_BLOCK))
        return QF_DK_DECLINE;
    QF_TRY(qf_dk_md_plain(&md, 1, &numel));
    qf_dk_build b;
    QF_TRY(qf_dk_begin(&b, io, p));
    dnnl_eltwise_desc_t d;
    dnnl_status_t r =
        QF_DNNL(eltwise_forward_desc_init)(&d, dnnl_forward_inference, alg, &md, alpha, beta);
    if (r != dnnl_success) {
        qf_dk_abort(&b);
        return r == dnnl_unimplemented || r == dnnl_invalid_arguments
                   ? QF_DK_DECLINE
                   : qf_dnnl_check(n, r, "eltwise descriptor");
    }
    QF_TRY(qf_dk_finish(&b, &d));
    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC, QF_DK_IN, 0, &md, NULL));
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &md, NULL);
}

static qf_status dact_prepare(const qf_kernel_io *io, void *state)
{
    qf_status st = dact_build(io, state);
    if (st != QF_OK) qf_dk_release(state);
    return st;
}

#define QF_DACT_COLUMNS_                                                                     \
    {                                                                                        \
        .prepare = dact_prepare, .state_size = sizeof(qf_dk_prim), .release = qf_dk_release, \
        .scratch = qf_dk_scratch, .forward_f32 = qf_dk_forward,                              \
        .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,                      \
    }
const qf_backend_kernels qf_leaky_relu_dnnl = QF_DACT_COLUMNS_;
const qf_backend_kernels qf_sigmoid_dnnl = QF_DACT_COLUMNS_;
const qf_backend_kernels qf_tanh_dnnl = QF_DACT_COLUMNS_;
const qf_backend_kernels qf_hard_swish_dnnl = QF_DACT_COLUMNS_;
#undef QF_DACT_COLUMNS_
