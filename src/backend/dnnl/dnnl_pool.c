/* MaxPool, AveragePool and GlobalAveragePool on oneDNN's pooling primitive
 * (float32 forward, MaxPool also int8 / uint8; 1-D to 3-D, X and Y
 * channels-first or channels-last).
 *
 * Geometry as the reference (spatial.h: kernel, strides, dilations, pads,
 * auto_pad, ceil_mode). oneDNN wants out = (in + pl + pr - dk) / s + 1 with
 * integer division, so the right padding handed to it is the smallest
 * non-negative one giving the reference's output size; windows never reach
 * past it. AveragePool with count_include_pad counts the padded taps of a
 * window as oneDNN does (the whole kernel) only while no window reaches past
 * the real end padding: a ceil_mode window that does (the reference clips its
 * count there) is declined. MaxPool with Indices and AveragePool with
 * dilations (ignored by the reference) are declined too.
 */
#include <string.h>

#include "backend/dnnl/dnnl_kernels.h"
#include "ops/math/spatial.h"

typedef enum { DPOOL_MAX, DPOOL_AVG, DPOOL_GLOBAL_AVG } dpool_kind;

static qf_status dpool_build(const qf_kernel_io *io, qf_dk_prim *p, dpool_kind kind)
{
    const qf_node *n = io->node;
    if (io->nin != 1 || !io->in[0] || io->nout != 1 || io->nfused) return QF_DK_DECLINE;
    /* MaxPool also on the integer executor's int8 / uint8 activations (a
     * max of integers: exact). */
    const qf_dtype xdt = io->in[0]->dtype;
    const bool int8 = kind == DPOOL_MAX && (xdt == QF_DTYPE_I8 || xdt == QF_DTYPE_U8) && io->out[0]->dtype == xdt;
    if (!int8 && !qf_dk_all_f32(io)) return QF_DK_DECLINE;
    for (int i = 0; int8 && i < io->in[0]->ndim; i++)
        if (io->in[0]->dims[i] < 1) return QF_DK_DECLINE;
    if ((io->in_nhwc & ~1u) || (io->out_nhwc & ~1u)) return QF_DK_DECLINE;
    const qf_tensor *x = io->in[0], *y = io->out[0];
    if (x->ndim < 3 || x->ndim > 2 + QF_SPATIAL_MAX || y->ndim != x->ndim) return QF_DK_DECLINE;
    const int rank = x->ndim - 2;
    qf_spatial s;
    memset(&s, 0, sizeof s);
    bool include_pad = false;
    if (kind == DPOOL_GLOBAL_AVG) {
        s.rank = rank;
        for (int i = 0; i < rank; i++) {
            s.kernel[i] = s.in[i] = x->dims[2 + i];
            s.stride[i] = s.dilation[i] = s.out[i] = 1;
        }
    } else {
        bool ceil_mode = qf_node_attr_int(n, "ceil_mode", 0) != 0;
        qf_status st = qf_spatial_parse(
            n, rank, NULL, kind == DPOOL_MAX ? QF_SPATIAL_MAX_POOL : QF_SPATIAL_AVG_POOL, &s);
        if (st == QF_OK) st = qf_spatial_forward_dims(n, &s, x->dims + 2, ceil_mode);
        if (st != QF_OK) { /* the reference prepare reports it */
            qf_error_clear();
            return QF_DK_DECLINE;
        }
        include_pad = kind == DPOOL_AVG && qf_node_attr_int(n, "count_include_pad", 0) != 0;
    }
    dnnl_dims_t kernel, strides, dil, pl, pr;
    for (int i = 0; i < rank; i++) {
        if (y->dims[2 + i] != s.out[i]) return QF_DK_DECLINE;
        if (kind != DPOOL_MAX && s.dilation[i] != 1) return QF_DK_DECLINE;
        int64_t dk = (s.kernel[i] - 1) * s.dilation[i] + 1;
        int64_t reach =
            (s.out[i] - 1) * s.stride[i] + dk - s.in[i] - s.pad_begin[i]; /* past the input end */
        if (s.pad_begin[i] < 0 || reach <= -s.stride[i]) return QF_DK_DECLINE;
        if (include_pad && reach > s.pad_end[i]) return QF_DK_DECLINE;
        kernel[i] = s.kernel[i];
        strides[i] = s.stride[i];
        dil[i] = s.dilation[i] - 1;
        pl[i] = s.pad_begin[i];
        pr[i] = reach > 0 ? reach : 0;
    }
    dnnl_memory_desc_t src_md, dst_md;
    QF_TRY(qf_dnnl_md(n, &src_md, x, qf_dnnl_fmt(io, io->in_nhwc & 1u)));
    QF_TRY(qf_dnnl_md(n, &dst_md, y, qf_dnnl_fmt(io, io->out_nhwc & 1u)));
    dnnl_alg_kind_t alg = kind == DPOOL_MAX ? dnnl_pooling_max
                          : include_pad     ? dnnl_pooling_avg_include_padding
                                            : dnnl_pooling_avg_exclude_padding;
    qf_dk_build b;
    QF_TRY(qf_dk_begin(&b, io, p));
    dnnl_pooling_v2_desc_t pd;
    dnnl_status_t r = QF_DNNL(pooling_v2_forward_desc_init)(
        &pd, dnnl_forward_inference, alg, &src_md, &dst_md, strides, kernel, dil, pl, pr);
    if (r != dnnl_success) {
        qf_dk_abort(&b);
        return r == dnnl_unimplemented || r == dnnl_invalid_arguments
                   ? QF_DK_DECLINE
                   : qf_dnnl_check(n, r, "pooling descriptor");
    }
    QF_TRY(qf_dk_finish(&b, &pd));
    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC, QF_DK_IN, 0, &src_md, NULL));
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &dst_md, NULL);
}

#define QF_DPOOL_PREPARE_(name, kind)                          \
    static qf_status name(const qf_kernel_io *io, void *state) \
    {                                                          \
        qf_status st = dpool_build(io, state, kind);           \
        if (st != QF_OK) qf_dk_release(state);                 \
        return st;                                             \
    }
QF_DPOOL_PREPARE_(dmax_pool_prepare, DPOOL_MAX)
QF_DPOOL_PREPARE_(davg_pool_prepare, DPOOL_AVG)
QF_DPOOL_PREPARE_(dglobal_avg_pool_prepare, DPOOL_GLOBAL_AVG)
#undef QF_DPOOL_PREPARE_

#define QF_DPOOL_COLUMNS_(prep)                                                      \
    {                                                                                \
        .prepare = prep, .state_size = sizeof(qf_dk_prim), .release = qf_dk_release, \
        .scratch = qf_dk_scratch, .forward_f32 = qf_dk_forward,                      \
        .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,              \
    }
const qf_backend_kernels qf_max_pool_dnnl = QF_DPOOL_COLUMNS_(dmax_pool_prepare);
const qf_backend_kernels qf_avg_pool_dnnl = QF_DPOOL_COLUMNS_(davg_pool_prepare);
const qf_backend_kernels qf_global_avg_pool_dnnl = QF_DPOOL_COLUMNS_(dglobal_avg_pool_prepare);
#undef QF_DPOOL_COLUMNS_
