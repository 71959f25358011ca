/* BatchNormalization in inference mode on oneDNN (float32 forward):
 * y = (x - mean) / sqrt(var + epsilon) * scale + B per channel, with the
 * given statistics (use_global_stats) and separate scale and shift
 * (use_scale | use_shift). X [N, C, ...] channels-first or channels-last (the
 * same for X and Y). Training mode (batch statistics, running-stat outputs)
 * stays with the reference. The variance must be a constant with var +
 * epsilon > 0 in every channel: otherwise the reference runs the node and
 * reports the channel. */
#include "backend/dnnl/dnnl_kernels.h"

static qf_status dbn_build(const qf_kernel_io *io, qf_dk_prim *p)
{
    const qf_node *n = io->node;
    if (io->nin != 5 || io->nout != 1 || io->nfused || !qf_dk_all_f32(io)) return QF_DK_DECLINE;
    for (int i = 0; i < 5; i++)
        if (!io->in[i]) return QF_DK_DECLINE;
    if (io->opset >= 14 && qf_node_attr_int(n, "training_mode", 0) != 0) return QF_DK_DECLINE;
    if ((io->in_nhwc & ~1u) || io->out_nhwc != (io->in_nhwc & 1u)) return QF_DK_DECLINE;
    const qf_tensor *x = io->in[0], *var = io->in[4];
    if (x->ndim < 2) return QF_DK_DECLINE;
    const int64_t c = x->dims[1];
    for (int i = 1; i < 5; i++)
        if (io->in[i]->ndim != 1 || io->in[i]->dims[0] != c) return QF_DK_DECLINE;
    const float eps = qf_node_attr_float(n, "epsilon", 1e-5f);
    if (!var->data) return QF_DK_DECLINE;
    for (int64_t ch = 0; ch < c; ch++)
        if (!((double)((const float *)var->data)[ch] + (double)eps > 0.0)) return QF_DK_DECLINE;

    dnnl_memory_desc_t data_md, c_md;
    QF_TRY(qf_dnnl_md(n, &data_md, x, qf_dnnl_fmt(io, io->in_nhwc & 1u)));
    QF_TRY(qf_dk_md_plain(&c_md, 1, &c));
    qf_dk_build b;
    QF_TRY(qf_dk_begin(&b, io, p));
    dnnl_batch_normalization_desc_t d;
    dnnl_status_t r = QF_DNNL(batch_normalization_forward_desc_init)(
        &d, dnnl_forward_inference, &data_md, eps,
        dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift);
    if (r != dnnl_success) {
        qf_dk_abort(&b);
        return r == dnnl_unimplemented || r == dnnl_invalid_arguments
                   ? QF_DK_DECLINE
                   : qf_dnnl_check(n, r, "batch norm descriptor");
    }
    QF_TRY(qf_dk_finish(&b, &d));
    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC, QF_DK_IN, 0, &data_md, NULL));
    static const int args[4] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (int i = 0; i < 4; i++) {
        const qf_tensor *t = io->in[1 + i];
        QF_TRY(qf_dk_bind(p, args[i], t->data ? QF_DK_FIXED : QF_DK_IN, 1 + i, &c_md, t->data));
    }
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &data_md, NULL);
}

static qf_status dbn_prepare(const qf_kernel_io *io, void *state)
{
    qf_status st = dbn_build(io, state);
    if (st != QF_OK) qf_dk_release(state);
    return st;
}

const qf_backend_kernels qf_batch_norm_dnnl = {
    .prepare = dbn_prepare,
    .state_size = sizeof(qf_dk_prim),
    .release = qf_dk_release,
    .scratch = qf_dk_scratch,
    .forward_f32 = qf_dk_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,
};
