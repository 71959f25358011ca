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
 *
 * A float MaxPool in NHWC, 2-D, without dilations, over a multiple of 16
 * channels, runs on qfold's own AVX-512 loop (dmax_rows) where the CPU has
 * it: each output pixel's channels in registers, 64 at a time, over the
 * window's taps inside the image (a max ignores the padding). oneDNN 2.6's
 * NHWC pooling (jit:avx512_core) took 1.40-1.46 ms on ResNet-18's 3x3 s2
 * maxpool at batch 8, one thread, against 1.06-1.11 for such a loop and
 * ONNX Runtime's 1.14 (bench/run.md, session 12). A max is exact: the same
 * result as the reference's. The primitive is built all the same (its
 * scratchpad size and release path stay the common ones).
 */
#include <string.h>

#include "../core/parallel.h"
#include "dnnl_kernels.h"
#include "spatial.h"

#if QF_HAVE_DNNL

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QF_DMAX_OWN 1
#else
#define QF_DMAX_OWN 0
#endif

/* MaxPool's state: the primitive first (qf_dk_release / qf_dk_scratch /
 * qf_dk_forward take the state as a qf_dk_prim), then the geometry of the
 * own NHWC loop when it runs instead. */
typedef struct dmax_state {
    qf_dk_prim prim;
    bool own;
    int64_t h, w, c, oh, ow;
    int64_t kh, kw, sh, sw, ph, pw;
} dmax_state;

typedef enum { DPOOL_MAX, DPOOL_AVG, DPOOL_GLOBAL_AVG } dpool_kind;

static qf_status dpool_build(const qf_kernel_io *io, qf_dk_prim *p, dpool_kind kind, qf_spatial *geo)
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
    if (geo) *geo = s;
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &dst_md, NULL);
}

#if QF_DMAX_OWN
typedef struct dmax_job {
    const dmax_state *s;
    const float *x;
    float *y;
} dmax_job;

/* Output rows lo..hi-1 (over batch x output height), NHWC. Every window
 * holds at least one tap inside the image (dmax_pool_prepare checks). */
__attribute__((target("avx512f"))) static void dmax_rows(void *ctx, int64_t lo, int64_t hi)
{
    const dmax_job *j = ctx;
    const dmax_state *s = j->s;
    const int64_t c = s->c, wc = s->w * c;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t b = r / s->oh, y0 = (r % s->oh) * s->sh - s->ph;
        const int64_t ya = y0 < 0 ? 0 : y0, yb = y0 + s->kh < s->h ? y0 + s->kh : s->h;
        const float *xb = j->x + b * s->h * wc;
        float *yr = j->y + r * s->ow * c;
        for (int64_t ox = 0; ox < s->ow; ox++) {
            const int64_t x0 = ox * s->sw - s->pw;
            const int64_t xa = x0 < 0 ? 0 : x0, xe = x0 + s->kw < s->w ? x0 + s->kw : s->w;
            const float *first = xb + ya * wc + xa * c;
            float *yo = yr + ox * c;
            int64_t ch = 0;
            for (; ch + 64 <= c; ch += 64) {
                __m512 m0 = _mm512_loadu_ps(first + ch), m1 = _mm512_loadu_ps(first + ch + 16);
                __m512 m2 = _mm512_loadu_ps(first + ch + 32), m3 = _mm512_loadu_ps(first + ch + 48);
                for (int64_t iy = ya; iy < yb; iy++)
                    for (int64_t ix = xa; ix < xe; ix++) {
                        const float *q = xb + iy * wc + ix * c + ch;
                        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(q));
                        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(q + 16));
                        m2 = _mm512_max_ps(m2, _mm512_loadu_ps(q + 32));
                        m3 = _mm512_max_ps(m3, _mm512_loadu_ps(q + 48));
                    }
                _mm512_storeu_ps(yo + ch, m0);
                _mm512_storeu_ps(yo + ch + 16, m1);
                _mm512_storeu_ps(yo + ch + 32, m2);
                _mm512_storeu_ps(yo + ch + 48, m3);
            }
            for (; ch < c; ch += 16) {
                __m512 m = _mm512_loadu_ps(first + ch);
                for (int64_t iy = ya; iy < yb; iy++)
                    for (int64_t ix = xa; ix < xe; ix++) m = _mm512_max_ps(m, _mm512_loadu_ps(xb + iy * wc + ix * c + ch));
                _mm512_storeu_ps(yo + ch, m);
            }
        }
    }
}
#endif

/* Whether the own loop takes this node: float NHWC in and out (not
 * blocked), 2-D, no dilation, channels a multiple of 16, every window
 * with a tap inside the image, and AVX-512 on this CPU. */
static bool dmax_own(const qf_kernel_io *io, const qf_spatial *g)
{
#if QF_DMAX_OWN
    const qf_tensor *x = io->in[0], *y = io->out[0];
    if (!__builtin_cpu_supports("avx512f") || io->blocked || !(io->in_nhwc & 1u) || !(io->out_nhwc & 1u) ||
        x->dtype != QF_DTYPE_F32 || x->ndim != 4 || g->rank != 2 || x->dims[1] % 16)
        return false;
    for (int i = 0; i < 2; i++) {
        const int64_t last = (y->dims[2 + i] - 1) * g->stride[i] - g->pad_begin[i];
        if (g->dilation[i] != 1 || g->pad_begin[i] >= g->kernel[i] || last >= x->dims[2 + i]) return false;
    }
    return true;
#else
    (void)io;
    (void)g;
    return false;
#endif
}

static qf_status dmax_pool_prepare(const qf_kernel_io *io, void *state)
{
    dmax_state *s = state;
    qf_spatial g;
    qf_status st = dpool_build(io, &s->prim, DPOOL_MAX, &g);
    if (st != QF_OK) {
        qf_dk_release(state);
        return st;
    }
    s->own = dmax_own(io, &g);
    if (s->own) {
        const qf_tensor *x = io->in[0], *y = io->out[0];
        s->h = x->dims[2];
        s->w = x->dims[3];
        s->c = x->dims[1];
        s->oh = y->dims[2];
        s->ow = y->dims[3];
        s->kh = g.kernel[0];
        s->kw = g.kernel[1];
        s->sh = g.stride[0];
        s->sw = g.stride[1];
        s->ph = g.pad_begin[0];
        s->pw = g.pad_begin[1];
    }
    return QF_OK;
}

static qf_status dmax_pool_forward(const qf_kernel_io *io)
{
    const dmax_state *s = io->state;
    if (!s->own) return qf_dk_forward(io);
#if QF_DMAX_OWN
    dmax_job j = {s, io->in[0]->data, io->out[0]->data};
    const int64_t rows = io->in[0]->dims[0] * s->oh;
    if (s->prim.serial)
        dmax_rows(&j, 0, rows);
    else
        qf_parallel_for(rows, 1, dmax_rows, &j);
#endif
    return QF_OK;
}

#define QF_DPOOL_PREPARE_(name, kind)                          \
    static qf_status name(const qf_kernel_io *io, void *state) \
    {                                                          \
        qf_status st = dpool_build(io, state, kind, NULL);     \
        if (st != QF_OK) qf_dk_release(state);                 \
        return st;                                             \
    }
QF_DPOOL_PREPARE_(davg_pool_prepare, DPOOL_AVG)
QF_DPOOL_PREPARE_(dglobal_avg_pool_prepare, DPOOL_GLOBAL_AVG)
#undef QF_DPOOL_PREPARE_

#define QF_DPOOL_COLUMNS_(prep)                                                      \
    {                                                                                \
        .prepare = prep, .state_size = sizeof(qf_dk_prim), .release = qf_dk_release, \
        .scratch = qf_dk_scratch, .forward_f32 = qf_dk_forward,                      \
        .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,              \
    }
const qf_backend_kernels qf_max_pool_dnnl = {
    .prepare = dmax_pool_prepare, .state_size = sizeof(dmax_state), .release = qf_dk_release,
    .scratch = qf_dk_scratch, .forward_f32 = dmax_pool_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,
};
const qf_backend_kernels qf_avg_pool_dnnl = QF_DPOOL_COLUMNS_(davg_pool_prepare);
const qf_backend_kernels qf_global_avg_pool_dnnl = QF_DPOOL_COLUMNS_(dglobal_avg_pool_prepare);
#undef QF_DPOOL_COLUMNS_

#endif /* QF_HAVE_DNNL */
