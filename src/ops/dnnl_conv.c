/* Conv and ConvTranspose on oneDNN (float32 forward, 1-D to 3-D).
 *
 * The geometry is the reference's (qf_conv_setup: groups, dilations, strides,
 * asymmetric pads, auto_pad and output_padding / output_shape resolved into
 * pad_begin / pad_end). oneDNN takes the same problem as
 *   Conv:          convolution_direct, weights (g, M/g, C/g, k...) or (M, C, k...),
 *                  which is ONNX's W [M, C/g, k...] read as is;
 *   ConvTranspose: deconvolution_direct, weights (g, M/g, C/g, k...) over
 *                  ONNX's W [C, M/g, k...] = [g][C/g][M/g][k...] (strides),
 *                  the right padding chosen so that the output has the size
 *                  ONNX gives it (output_padding included).
 * Dilations are ONNX's minus 1. X and Y may be channels-last (io->in_nhwc /
 * out_nhwc bit 0). A constant W is reordered once, at prepare, into the
 * layout the primitive prefers (format any); a W computed at run time (a
 * DequantizeLinear output) is read in its plain layout. Winograd is not used:
 * it does not give the reference's results to float rounding.
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "conv.h"
#include "dnnl_kernels.h"

#if QF_HAVE_DNNL

/* Weights descriptor dims and the strides of ONNX's W in memory. */
static int dconv_weights(const qf_conv_geom *cg, const qf_tensor *w, int64_t *dims,
                         int64_t *strides)
{
    const int rank = cg->s.rank;
    const int64_t K = cg->ksize;
    int nd = 0;
    if (cg->group > 1) dims[nd++] = cg->group;
    dims[nd++] = cg->mg; /* oc per group */
    dims[nd++] = cg->cg; /* ic per group */
    for (int i = 0; i < rank; i++) dims[nd++] = w->dims[2 + i];
    int64_t ks = 1;
    for (int i = nd - 1; i >= nd - rank; i--) {
        strides[i] = ks;
        ks *= dims[i];
    }
    int oc = cg->group > 1 ? 1 : 0, ic = oc + 1;
    if (!cg->transpose) { /* [g][mg][cg][k] */
        strides[ic] = K;
        strides[oc] = cg->cg * K;
    } else { /* [g][cg][mg][k] */
        strides[oc] = K;
        strides[ic] = cg->mg * K;
    }
    if (cg->group > 1) strides[0] = cg->cg * cg->mg * K;
    return nd;
}

static qf_status dconv_build(const qf_kernel_io *io, qf_dk_prim *p, bool transpose)
{
    const qf_node *n = io->node;
    if (io->nin < 2 || !io->in[0] || !io->in[1] || io->nout != 1 || !qf_dk_all_f32(io))
        return QF_DK_DECLINE;
    if ((io->in_nhwc & ~1u) || (io->out_nhwc & ~1u)) return QF_DK_DECLINE;
    const qf_tensor *x = io->in[0], *w = io->in[1], *bias = io->nin > 2 ? io->in[2] : NULL;
    const qf_tensor *y = io->out[0];
    qf_conv_geom cg;
    /* A node the geometry rejects gets its error from the reference prepare. */
    if (qf_conv_setup(n, x, w, bias, transpose, &cg) != QF_OK) {
        qf_error_clear();
        return QF_DK_DECLINE;
    }
    /* Nor a node the reference refuses for its size (an im2col buffer over
     * qfold's tensor limit, GEMM sizes over 2^31): same error either way. */
    if (qf_conv_scratch_bytes(&cg) > (uint64_t)QF_MAX_TENSOR_BYTES || cg.k > INT_MAX ||
        cg.in_plane > INT_MAX || cg.out_plane > INT_MAX || cg.mg > INT_MAX || cg.cg > INT_MAX)
        return QF_DK_DECLINE;
    const int rank = cg.s.rank;
    dnnl_dims_t strides, dil, pl, pr;
    for (int i = 0; i < rank; i++) {
        strides[i] = cg.s.stride[i];
        dil[i] = cg.s.dilation[i] - 1;
        pl[i] = cg.s.pad_begin[i];
        pr[i] = cg.s.pad_end[i];
        if (y->dims[2 + i] != cg.s.out[i]) return QF_DK_DECLINE;
        if (transpose) {
            /* out = s (in - 1) + dk - pl - pr exactly: output_padding and
             * output_shape end up in pr. */
            int64_t dk = (cg.s.kernel[i] - 1) * cg.s.dilation[i] + 1;
            pr[i] = cg.s.stride[i] * (cg.s.in[i] - 1) + dk - pl[i] - cg.s.out[i];
        }
        if (pl[i] < 0 || pr[i] < 0) return QF_DK_DECLINE;
    }

    dnnl_memory_desc_t src_md, dst_md, w_md, w_user, b_md;
    QF_TRY(qf_dnnl_md(n, &src_md, x, io->in_nhwc & 1u));
    QF_TRY(qf_dnnl_md(n, &dst_md, y, io->out_nhwc & 1u));
    int64_t wd[QF_MAX_DIMS + 1], ws[QF_MAX_DIMS + 1];
    int wn = dconv_weights(&cg, w, wd, ws);
    QF_TRY(qf_dk_md_strided(&w_user, wn, wd, ws));
    const bool w_const = w->data != NULL;
    if (w_const)
        QF_TRY(qf_dk_md_any(&w_md, wn, wd));
    else
        w_md = w_user;
    if (bias) QF_TRY(qf_dk_md_plain(&b_md, 1, &cg.m));

    qf_dk_build b;
    QF_TRY(qf_dk_begin(&b, io, p));
    qf_status st = qf_dk_post_fused(&b, &dst_md);
    dnnl_convolution_desc_t cd;
    dnnl_deconvolution_desc_t dd;
    const void *desc = transpose ? (const void *)&dd : (const void *)&cd;
    if (st == QF_OK) {
        dnnl_status_t r = transpose
                              ? QF_DNNL(dilated_deconvolution_forward_desc_init)(
                                    &dd, dnnl_forward_inference, dnnl_deconvolution_direct, &src_md,
                                    &w_md, bias ? &b_md : NULL, &dst_md, strides, dil, pl, pr)
                              : QF_DNNL(dilated_convolution_forward_desc_init)(
                                    &cd, dnnl_forward_inference, dnnl_convolution_direct, &src_md,
                                    &w_md, bias ? &b_md : NULL, &dst_md, strides, dil, pl, pr);
        if (r == dnnl_unimplemented || r == dnnl_invalid_arguments)
            st = QF_DK_DECLINE;
        else
            st = qf_dnnl_check(n, r, "convolution descriptor");
    }
    if (st != QF_OK) {
        qf_dk_abort(&b);
        return st;
    }
    QF_TRY(qf_dk_finish(&b, desc));

    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC, QF_DK_IN, 0, &src_md, NULL));
    if (w_const)
        QF_TRY(qf_dk_bind_const(p, DNNL_ARG_WEIGHTS, &w_user, w->data,
                                qf_dk_query(p, dnnl_query_weights_md, 0), 0));
    else
        QF_TRY(qf_dk_bind(p, DNNL_ARG_WEIGHTS, QF_DK_IN, 1, &w_md, NULL));
    if (bias)
        QF_TRY(qf_dk_bind(p, DNNL_ARG_BIAS, bias->data ? QF_DK_FIXED : QF_DK_IN, 2, &b_md,
                          bias->data));
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &dst_md, NULL);
}

static qf_status dconv_prepare(const qf_kernel_io *io, void *state)
{
    qf_status st = dconv_build(io, state, false);
    if (st != QF_OK) qf_dk_release(state);
    return st;
}

static qf_status dconv_transpose_prepare(const qf_kernel_io *io, void *state)
{
    qf_status st = dconv_build(io, state, true);
    if (st != QF_OK) qf_dk_release(state);
    return st;
}

const qf_backend_kernels qf_conv_dnnl = {
    .prepare = dconv_prepare,
    .state_size = sizeof(qf_dk_prim),
    .release = qf_dk_release,
    .scratch = qf_dk_scratch,
    .forward_f32 = qf_dk_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
};

const qf_backend_kernels qf_conv_transpose_dnnl = {
    .prepare = dconv_transpose_prepare,
    .state_size = sizeof(qf_dk_prim),
    .release = qf_dk_release,
    .scratch = qf_dk_scratch,
    .forward_f32 = qf_dk_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
};

#endif /* QF_HAVE_DNNL */
