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
 * layout the primitive prefers (format any). A W computed at run time (a
 * DequantizeLinear's output: `qfold run --simulate`, the per-layer SQNR of
 * `quantize`, a QAT model evaluated) is not taken (dconv_accepts): oneDNN
 * reads a plain W on NHWC data with its reference convolution (4-5 s per
 * resnet18 layer at batch 3), and qfold's reference kernel is fast and gives
 * ONNX Runtime's simulation of the bundled CNN's QDQ file exactly (0 of
 * 1,000 outputs differ; oneDNN's brgconv on a reordered W: 11, by one or two
 * steps of the output scale).
 *
 * Winograd (qf_dnnl_conv_winograd): a 2-D 3x3 conv with stride 1, no
 * dilation, one group and pads of at most 1 between blocked activations
 * (nChw16c) runs oneDNN's convolution_winograd (F(4x4, 3x3) or F(2x2, 3x3)
 * on AVX-512): 1.5-2x the direct kernel's speed on resnet18's 3x3 convs
 * (bench/run.md, session 14). It does not round as the direct sum does:
 * per element up to 1.1e-5 of max(|ref|, rms) against the direct kernel's
 * 1.4e-6 (tests/ops/test_dnnl_kernels.c holds it to 2e-5); on resnet18 the
 * max |y - y_ref| is 5e-6 against 4e-6 (1e-6 of the largest output).
 * Where oneDNN has no Winograd kernel for the problem the direct one runs;
 * QFOLD_WINOGRAD=0 turns it off.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ref/conv.h"
#include "core/parallel.h"
#include "backend/dnnl/dnnl_kernels.h"
#include "ops/math/gemm.h"
#include "ops/math/vector.h"

/* Winograd only where an image's output plane has at least this many pixels.
 * Its weight transform (oneDNN's wino_reorder, at plan init) costs 40-80 ns
 * per weight: resnet18's 512-channel 3x3 convs at 7x7 took ~190 ms each at
 * batch 8 (~85 ms at batch 1) to run 1.05-1.1x faster; its 256-channel ones at
 * 14x14 27-44 ms to run 1.5x faster at batch 8 (session 14, bench/run.md). */
enum { QF_WINO_MIN_PLANE = 14 * 14 };

/* The plan's layout rule asks, through qf_backend_conv_winograd (plan_layout.c). */
bool qf_dnnl_winograd_enabled(void)
{
    const char *e = getenv("QFOLD_WINOGRAD");
    return !e || strcmp(e, "0") != 0;
}

bool qf_dnnl_conv_winograd(const qf_node *n)
{
    if (n->op != QF_OP_CONV || n->ninputs < 2 || !n->inputs[0] || !n->inputs[1] || n->noutputs != 1 ||
        !n->outputs[0] || !qf_dnnl_winograd_enabled())
        return false;
    /* The reference's geometry (attributes, auto_pad resolved); a node it
     * rejects gets its error from the kernel's own prepare. */
    const qf_tensor *b = n->ninputs > 2 && n->inputs[2] ? &n->inputs[2]->type : NULL;
    qf_conv_geom cg;
    if (qf_conv_setup(n, &n->inputs[0]->type, &n->inputs[1]->type, b, false, &cg) != QF_OK) {
        qf_error_clear();
        return false;
    }
    if (cg.s.rank != 2 || cg.group != 1) return false;
    for (int i = 0; i < 2; i++)
        if (cg.s.kernel[i] != 3 || cg.s.stride[i] != 1 || cg.s.dilation[i] != 1 || cg.s.pad_begin[i] > 1 ||
            cg.s.pad_end[i] > 1)
            return false;
    return cg.s.out[0] * cg.s.out[1] >= QF_WINO_MIN_PLANE;
}

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

/* The problem in oneDNN's terms: strides, dilations (minus 1), pads. */
typedef struct dconv_dims {
    dnnl_dims_t strides, dil, pl, pr;
} dconv_dims;

/* The geometry of a float Conv / ConvTranspose node for oneDNN; declines what
 * the reference refuses or oneDNN cannot express. */
static qf_status dconv_setup(const qf_kernel_io *io, bool transpose, qf_conv_geom *cg, dconv_dims *d)
{
    const qf_node *n = io->node;
    if (io->nin < 2 || !io->in[0] || !io->in[1] || io->nout != 1 || !qf_dk_all_f32(io)) return QF_DK_DECLINE;
    if ((io->in_nhwc & ~1u) || (io->out_nhwc & ~1u)) return QF_DK_DECLINE;
    const qf_tensor *x = io->in[0], *w = io->in[1], *bias = io->nin > 2 ? io->in[2] : NULL;
    const qf_tensor *y = io->out[0];
    /* A node the geometry rejects gets its error from the reference prepare. */
    if (qf_conv_setup(n, x, w, bias, transpose, cg) != QF_OK) {
        qf_error_clear();
        return QF_DK_DECLINE;
    }
    /* Nor a node the reference refuses for its size (an im2col buffer over
     * qfold's tensor limit, GEMM sizes over 2^31): same error either way. */
    if (qf_conv_scratch_bytes(cg) > (uint64_t)QF_MAX_TENSOR_BYTES || cg->k > INT_MAX || cg->in_plane > INT_MAX ||
        cg->out_plane > INT_MAX || cg->mg > INT_MAX || cg->cg > INT_MAX)
        return QF_DK_DECLINE;
    for (int i = 0; i < cg->s.rank; i++) {
        d->strides[i] = cg->s.stride[i];
        d->dil[i] = cg->s.dilation[i] - 1;
        d->pl[i] = cg->s.pad_begin[i];
        d->pr[i] = cg->s.pad_end[i];
        if (y->dims[2 + i] != cg->s.out[i]) return QF_DK_DECLINE;
        if (transpose) {
            /* out = s (in - 1) + dk - pl - pr exactly: output_padding and
             * output_shape end up in pr. */
            int64_t dk = (cg->s.kernel[i] - 1) * cg->s.dilation[i] + 1;
            d->pr[i] = cg->s.stride[i] * (cg->s.in[i] - 1) + dk - d->pl[i] - cg->s.out[i];
        }
        if (d->pl[i] < 0 || d->pr[i] < 0) return QF_DK_DECLINE;
    }
    return QF_OK;
}

static qf_status dconv_build(const qf_kernel_io *io, qf_dk_prim *p, bool transpose, bool sum, bool wino)
{
    const qf_node *n = io->node;
    qf_conv_geom cg;
    dconv_dims dd_;
    QF_TRY(dconv_setup(io, transpose, &cg, &dd_));
    const qf_tensor *x = io->in[0], *w = io->in[1], *bias = io->nin > 2 ? io->in[2] : NULL;
    const qf_tensor *y = io->out[0];
    const int64_t *strides = dd_.strides, *dil = dd_.dil, *pl = dd_.pl, *pr = dd_.pr;

    if (!w->data) return QF_DK_DECLINE; /* see dconv_accepts */
    dnnl_memory_desc_t src_md, dst_md, w_md, w_user, b_md;
    QF_TRY(qf_dnnl_md(n, &src_md, x, qf_dnnl_fmt(io, io->in_nhwc & 1u)));
    QF_TRY(qf_dnnl_md(n, &dst_md, y, qf_dnnl_fmt(io, io->out_nhwc & 1u)));
    int64_t wd[QF_MAX_DIMS + 1], ws[QF_MAX_DIMS + 1];
    int wn = dconv_weights(&cg, w, wd, ws);
    QF_TRY(qf_dk_md_strided(&w_user, wn, wd, ws));
    QF_TRY(qf_dk_md_any(&w_md, wn, wd));
    if (bias) QF_TRY(qf_dk_md_plain(&b_md, 1, &cg.m));

    qf_dk_build b;
    QF_TRY(qf_dk_begin(&b, io, p));
    b.sum_ok = sum;
    /* A fused SiLU runs after the primitive on the big k x k and depthwise
     * convs (qf_dk_set_silu_split), not on the 1x1 ones: there oneDNN's
     * swish post-op costs no more than a pass of its own (measured in
     * bench/run.md, session 11). */
    int64_t taps = 1;
    for (int i = 2; i < w->ndim; i++) taps *= w->dims[i];
    b.silu_ok = !transpose && taps > 1;
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
                                    &cd, dnnl_forward_inference,
                                    wino ? dnnl_convolution_winograd : dnnl_convolution_direct, &src_md,
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
    QF_TRY(qf_dk_bind_const(p, DNNL_ARG_WEIGHTS, &w_user, w->data, qf_dk_query(p, dnnl_query_weights_md, 0), 0));
    if (bias)
        QF_TRY(qf_dk_bind(p, DNNL_ARG_BIAS, bias->data ? QF_DK_FIXED : QF_DK_IN, 2, &b_md,
                          bias->data));
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &dst_md, NULL);
}

/* A residual Add fused into a Conv is a sum post-op: oneDNN 2.6 then runs
 * its brgemm kernel (brgconv, brgconv_1x1) where a binary add post-op gets
 * the older jit / jit_1x1 one. Single-thread, batch 1, nhwc, resnet18's
 * residual convs with the Add and the Relu fused, fastest of 150 calls:
 * 64ch 56x56 1.160 -> 1.057 ms, 128ch 28x28 1.088 -> 1.020, 256ch 14x14
 * 1.060 -> 1.003, 512ch 7x7 1.220 -> 0.974 (bench/conv_bench.c). Where the
 * sum does not build, the binary add does. */
static qf_status dconv_prepare(const qf_kernel_io *io, void *state)
{
    /* Winograd first where it may run (both activations blocked), then
     * the direct kernel. */
    const bool wino = io->blocked && (io->in_nhwc & 1u) && (io->out_nhwc & 1u) && qf_dnnl_conv_winograd(io->node);
    qf_status st = QF_DK_DECLINE;
    for (int alg = wino ? 0 : 1; alg < 2 && st == QF_DK_DECLINE; alg++) {
        st = dconv_build(io, state, false, true, alg == 0);
        bool summed = ((qf_dk_prim *)state)->sum_post != 0;
        if (st != QF_OK) qf_dk_release(state);
        if (st == QF_DK_DECLINE && summed) {
            st = dconv_build(io, state, false, false, alg == 0);
            if (st != QF_OK) qf_dk_release(state);
        }
    }
    return st;
}

static qf_status dconv_transpose_prepare(const qf_kernel_io *io, void *state)
{
    qf_status st = dconv_build(io, state, true, false, false);
    if (st != QF_OK) qf_dk_release(state);
    return st;
}

/* Only a constant W (see the top of the file). */
static bool dconv_accepts(const qf_node *n)
{
    return n->ninputs >= 2 && n->inputs[1] && qf_value_is_const(n->inputs[1]);
}

const qf_backend_kernels qf_conv_dnnl = {
    .prepare = dconv_prepare,
    .state_size = sizeof(qf_dk_prim),
    .release = qf_dk_release,
    .scratch = qf_dk_scratch,
    .forward_f32 = qf_dk_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC | QF_LAYOUT_BLOCKED,
    .dst_post = qf_dk_dst_post,
    .accepts = dconv_accepts,
};

const qf_backend_kernels qf_conv_transpose_dnnl = {
    .prepare = dconv_transpose_prepare,
    .state_size = sizeof(qf_dk_prim),
    .release = qf_dk_release,
    .scratch = qf_dk_scratch,
    .forward_f32 = qf_dk_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .accepts = dconv_accepts,
};

/* --- training: forward (training), backward data, backward weights ---------
 *
 * The tape (src/exec/grad.c) keeps activations and gradients in plain NCHW,
 * or channels-last (io->in_nhwc / out_nhwc bit 0) along the Conv -> BN ->
 * Relu chains it plans so; the weights change every step, so nothing is
 * reordered once: each
 * primitive takes the layouts it prefers (format any: blocked, where oneDNN's
 * JIT kernels run 4-40x faster than on plain NCHW, measured on the training
 * layers of the Fashion-MNIST CNN), and every argument whose preferred layout
 * differs from the plain one goes through a reorder per call into a buffer of
 * the scratch. That is what PyTorch's CPU convolution does too (ideep).
 */

/* One argument: the plain memory (the tape's tensor) and the primitive's. */
typedef struct dct_arg {
    dnnl_memory_t user, prim;  /* prim == user when the layouts agree */
    dnnl_primitive_t reorder;  /* user -> prim (inputs) or prim -> user (outputs); NULL: none */
    size_t off;                /* the primitive's buffer in the scratch */
} dct_arg;

typedef struct dct_state {
    dnnl_primitive_desc_t pd[3];   /* forward, backward data, backward weights */
    dnnl_primitive_t prim[3];
    dnnl_memory_t pad[3];          /* each one's scratchpad, at the scratch's start */
    dct_arg src_f, w_f, dst_f;     /* forward */
    dct_arg ddst_d, w_d, dsrc_d;   /* backward data */
    dct_arg src_w, ddst_w, dw_w;   /* backward weights */
    dnnl_memory_t bias, dbias;     /* plain [M] */
    size_t pad_bytes, dw_spare, db_spare, scratch;
    bool has_bias;
    bool ddst_reuse;               /* backward weights reads ddst_d's reordered dY */
    bool w_gemm;                   /* backward weights as one GEMM (dct_w_gemm) */
    bool w_im2col;                 /* ... few columns: dct_w_few (else X is the column matrix) */
    int64_t m, c, rows, kcols;     /* its sizes: output, input channels, N * out spatial, C * kernel */
    int64_t n;                     /* batch */
    qf_spatial l;                  /* the geometry lifted to 3-D (im2col) */
    size_t col_off;                /* dct_w_few's parts [n][C * k][M] in the scratch */
} dct_state;

enum { DCT_F, DCT_D, DCT_W };

static void dct_arg_free(dct_arg *a)
{
    if (a->reorder) QF_DNNL(primitive_destroy)(a->reorder);
    if (a->prim && a->prim != a->user) QF_DNNL(memory_destroy)(a->prim);
    if (a->user) QF_DNNL(memory_destroy)(a->user);
    memset(a, 0, sizeof *a);
}

static void dct_release(void *state)
{
    dct_state *t = state;
    dct_arg *args[] = {&t->src_f, &t->w_f, &t->dst_f, &t->ddst_d, &t->w_d, &t->dsrc_d, &t->src_w, &t->ddst_w, &t->dw_w};
    for (size_t i = 0; i < sizeof args / sizeof *args; i++) dct_arg_free(args[i]);
    for (int i = 0; i < 3; i++) {
        if (t->pad[i]) QF_DNNL(memory_destroy)(t->pad[i]);
        if (t->prim[i]) QF_DNNL(primitive_destroy)(t->prim[i]);
        if (t->pd[i]) QF_DNNL(primitive_desc_destroy)(t->pd[i]);
    }
    if (t->bias) QF_DNNL(memory_destroy)(t->bias);
    if (t->dbias) QF_DNNL(memory_destroy)(t->dbias);
    memset(t, 0, sizeof *t);
}

/* Argument `which` of primitive pd (DNNL_ARG_*), seen by the tape in plain
 * layout `user_md`; `in`: data flows user -> primitive. */
static qf_status dct_arg_make(const qf_node *n, dct_state *t, dct_arg *a, dnnl_primitive_desc_t pd, int which,
                              const dnnl_memory_desc_t *user_md, bool in)
{
    const qf_dnnl_lib *d = qf_dnnl();
    const dnnl_memory_desc_t *md = QF_DNNL(primitive_desc_query_md)(pd, dnnl_query_exec_arg_md, which);
    if (!md) return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): oneDNN has no argument %d", n->name, qf_op_label(n), which);
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_create)(&a->user, user_md, d->engine, DNNL_MEMORY_NONE), "memory"));
    if (QF_DNNL(memory_desc_equal)(md, user_md)) {
        a->prim = a->user;
        return QF_OK;
    }
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_create)(&a->prim, md, d->engine, DNNL_MEMORY_NONE), "memory"));
    a->off = t->scratch;
    t->scratch += (QF_DNNL(memory_desc_get_size)(md) + 63) & ~(size_t)63;
    dnnl_primitive_desc_t rpd = NULL;
    qf_status st = qf_dnnl_check(n,
                                 in ? QF_DNNL(reorder_primitive_desc_create)(&rpd, user_md, d->engine, md, d->engine, NULL)
                                    : QF_DNNL(reorder_primitive_desc_create)(&rpd, md, d->engine, user_md, d->engine, NULL),
                                 "reorder");
    if (st == QF_OK) st = qf_dnnl_primitive_create(n, &a->reorder, rpd, "reorder");
    if (rpd) QF_DNNL(primitive_desc_destroy)(rpd);
    return st;
}

static qf_status dct_pd(const qf_node *n, dnnl_primitive_desc_t *pd, const void *desc, const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_attr_t attr = NULL;
    QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_attr_create)(&attr), "attributes"));
    qf_status st = qf_dnnl_check(n, QF_DNNL(primitive_attr_set_scratchpad_mode)(attr, dnnl_scratchpad_mode_user),
                                 "scratchpad mode");
    if (st == QF_OK) st = qf_dnnl_try(n, QF_DNNL(primitive_desc_create)(pd, desc, attr, qf_dnnl()->engine, hint), "training convolution");
    QF_DNNL(primitive_attr_destroy)(attr);
    return st;
}

static qf_status dct_build(const qf_kernel_io *io, dct_state *t, bool transpose)
{
    const qf_node *n = io->node;
    const qf_dnnl_lib *d = qf_dnnl();
    qf_conv_geom cg;
    dconv_dims g;
    if (io->nfused) return QF_DK_DECLINE;
    QF_TRY(dconv_setup(io, transpose, &cg, &g));
    const qf_tensor *x = io->in[0], *w = io->in[1], *bias = io->nin > 2 ? io->in[2] : NULL;
    dnnl_memory_desc_t x_user, y_user, w_user, b_md, x_any, y_any, w_any;
    /* One input channel (a first layer reading the data): NCHW and NHWC are
     * the same bytes, so the tape's X is taken as channels-last when Y is,
     * and its reorders (a copy) go. */
    const bool y_nhwc = (io->out_nhwc & 1u) != 0, x_nhwc = (io->in_nhwc & 1u) != 0 || (y_nhwc && x->dims[1] == 1);
    QF_TRY(qf_dnnl_md(n, &x_user, x, x_nhwc));
    QF_TRY(qf_dnnl_md(n, &y_user, io->out[0], y_nhwc));
    int64_t wd[QF_MAX_DIMS + 1], ws[QF_MAX_DIMS + 1];
    const int wn = dconv_weights(&cg, w, wd, ws);
    QF_TRY(qf_dk_md_strided(&w_user, wn, wd, ws));
    QF_TRY(qf_dk_md_any(&w_any, wn, wd));
    QF_TRY(qf_dk_md_any(&x_any, x->ndim, x->dims));
    QF_TRY(qf_dk_md_any(&y_any, io->out[0]->ndim, io->out[0]->dims));
    /* A side the tape keeps channels-last: both sides run channels-last (the
     * other one, plain, through its reorder): oneDNN's NHWC kernels, no
     * mixed layouts. */
    if (x_nhwc || y_nhwc) {
        QF_TRY(qf_dnnl_md(n, &x_any, x, true));
        QF_TRY(qf_dnnl_md(n, &y_any, io->out[0], true));
    }
    QF_TRY(qf_dk_md_plain(&b_md, 1, &cg.m));
    t->has_bias = bias != NULL;
    const dnnl_memory_desc_t *bmd = bias ? &b_md : NULL;
    dnnl_convolution_desc_t cf, cd, cw;
    dnnl_deconvolution_desc_t tf, td, tw;
    const dnnl_alg_kind_t ca = dnnl_convolution_direct, ta = dnnl_deconvolution_direct;
    dnnl_status_t r =
        transpose ? QF_DNNL(dilated_deconvolution_forward_desc_init)(&tf, dnnl_forward_training, ta, &x_any, &w_any, bmd,
                                                                     &y_any, g.strides, g.dil, g.pl, g.pr)
                  : QF_DNNL(dilated_convolution_forward_desc_init)(&cf, dnnl_forward_training, ca, &x_any, &w_any, bmd,
                                                                   &y_any, g.strides, g.dil, g.pl, g.pr);
    QF_TRY(qf_dnnl_try(n, r, "training convolution"));
    QF_TRY(dct_pd(n, &t->pd[DCT_F], transpose ? (const void *)&tf : (const void *)&cf, NULL));
    r = transpose ? QF_DNNL(dilated_deconvolution_backward_data_desc_init)(&td, ta, &x_any, &w_any, &y_any, g.strides,
                                                                            g.dil, g.pl, g.pr)
                  : QF_DNNL(dilated_convolution_backward_data_desc_init)(&cd, ca, &x_any, &w_any, &y_any, g.strides,
                                                                          g.dil, g.pl, g.pr);
    QF_TRY(qf_dnnl_try(n, r, "convolution backward data"));
    QF_TRY(dct_pd(n, &t->pd[DCT_D], transpose ? (const void *)&td : (const void *)&cd, t->pd[DCT_F]));
    r = transpose ? QF_DNNL(dilated_deconvolution_backward_weights_desc_init)(&tw, ta, &x_any, &w_any, bmd, &y_any,
                                                                               g.strides, g.dil, g.pl, g.pr)
                  : QF_DNNL(dilated_convolution_backward_weights_desc_init)(&cw, ca, &x_any, &w_any, bmd, &y_any,
                                                                             g.strides, g.dil, g.pl, g.pr);
    QF_TRY(qf_dnnl_try(n, r, "convolution backward weights"));
    QF_TRY(dct_pd(n, &t->pd[DCT_W], transpose ? (const void *)&tw : (const void *)&cw, t->pd[DCT_F]));
    /* The scratchpads share the scratch's start (the three never run at once). */
    for (int i = 0; i < 3; i++) {
        QF_TRY(qf_dnnl_primitive_create(n, &t->prim[i], t->pd[i], "training convolution"));
        const dnnl_memory_desc_t *smd = QF_DNNL(primitive_desc_query_md)(t->pd[i], dnnl_query_scratchpad_md, 0);
        size_t sz = smd ? QF_DNNL(memory_desc_get_size)(smd) : 0;
        if (sz) QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_create)(&t->pad[i], smd, d->engine, DNNL_MEMORY_NONE), "memory"));
        if (sz > t->pad_bytes) t->pad_bytes = sz;
    }
    t->scratch = (t->pad_bytes + 63) & ~(size_t)63;
    QF_TRY(dct_arg_make(n, t, &t->src_f, t->pd[DCT_F], DNNL_ARG_SRC, &x_user, true));
    QF_TRY(dct_arg_make(n, t, &t->w_f, t->pd[DCT_F], DNNL_ARG_WEIGHTS, &w_user, true));
    QF_TRY(dct_arg_make(n, t, &t->dst_f, t->pd[DCT_F], DNNL_ARG_DST, &y_user, false));
    QF_TRY(dct_arg_make(n, t, &t->ddst_d, t->pd[DCT_D], DNNL_ARG_DIFF_DST, &y_user, true));
    QF_TRY(dct_arg_make(n, t, &t->w_d, t->pd[DCT_D], DNNL_ARG_WEIGHTS, &w_user, true));
    QF_TRY(dct_arg_make(n, t, &t->dsrc_d, t->pd[DCT_D], DNNL_ARG_DIFF_SRC, &x_user, false));
    QF_TRY(dct_arg_make(n, t, &t->src_w, t->pd[DCT_W], DNNL_ARG_SRC, &x_user, true));
    QF_TRY(dct_arg_make(n, t, &t->ddst_w, t->pd[DCT_W], DNNL_ARG_DIFF_DST, &y_user, true));
    QF_TRY(dct_arg_make(n, t, &t->dw_w, t->pd[DCT_W], DNNL_ARG_DIFF_WEIGHTS, &w_user, false));
    /* Backward data and backward weights mostly want dY in the same blocked
     * layout: when backward data has just reordered it, backward weights
     * reads that buffer (one reorder of dY per step instead of two; a
     * reorder is an exact copy, so nothing else changes). */
    const dnnl_memory_desc_t *dd = QF_DNNL(primitive_desc_query_md)(t->pd[DCT_D], dnnl_query_exec_arg_md,
                                                                     DNNL_ARG_DIFF_DST);
    const dnnl_memory_desc_t *dwm = QF_DNNL(primitive_desc_query_md)(t->pd[DCT_W], dnnl_query_exec_arg_md,
                                                                      DNNL_ARG_DIFF_DST);
    t->ddst_reuse = t->ddst_d.reorder && t->ddst_w.reorder && dd && dwm && QF_DNNL(memory_desc_equal)(dd, dwm);
    /* Backward weights as one GEMM, d W [M, C * k] = dY^T col over the
     * N * out-spatial rows of dY [rows, M] (channels-last) and the column
     * matrix [rows, C * k] (qf_sgemm: oneDNN's sgemm), for a one-group
     * convolution run channels-last that is pointwise (1x1, stride 1, no
     * pads: X itself is the column matrix) or has few columns (C * k <= 64:
     * no GEMM but dct_w_few, a part per sample in the scratch). oneDNN's backward-weights kernels took 5x
     * (jit_1x1) and 6.5x (jit, ds_cnn's first layer: 10x4 over one channel)
     * their forward's time there: ds_cnn at batch 64, ONEDNN_VERBOSE, 27 % and
     * 11 % of a training step's oneDNN time. The GEMM sums in another order,
     * within float rounding of oneDNN's. */
    bool pw = !transpose && cg.group == 1 && (x_nhwc || y_nhwc);
    const bool gemm_ok = pw;
    for (int i = 0; i < cg.s.rank && pw; i++)
        pw = cg.s.kernel[i] == 1 && cg.s.stride[i] == 1 && cg.s.pad_begin[i] == 0 && cg.s.pad_end[i] == 0;
    const int64_t rows = qf_tensor_numel(io->out[0]) / cg.m, kcols = cg.c * cg.ksize;
    if (gemm_ok && (pw || (kcols <= 64 && (uint64_t)cg.n * (uint64_t)kcols * (uint64_t)cg.m * sizeof(float) <= (64u << 20)))) {
        t->w_gemm = true;
        t->w_im2col = !pw;
        t->m = cg.m;
        t->c = cg.c;
        t->n = cg.n;
        t->rows = rows;
        t->kcols = kcols;
        t->l = cg.l;
        if (t->w_im2col) {
            t->col_off = t->scratch;
            t->scratch += ((size_t)cg.n * (size_t)kcols * (size_t)cg.m * sizeof(float) + 63) & ~(size_t)63;
        }
    }
    /* Where d W and d B go when the tape does not want them (a frozen weight
     * with a trained bias, or the reverse): oneDNN computes both together. */
    t->dw_spare = t->scratch;
    t->scratch += (QF_DNNL(memory_desc_get_size)(&w_user) + 63) & ~(size_t)63;
    t->db_spare = t->scratch;
    t->scratch += ((size_t)cg.m * sizeof(float) + 63) & ~(size_t)63;
    if (bias) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_create)(&t->bias, &b_md, d->engine, DNNL_MEMORY_NONE), "memory"));
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_create)(&t->dbias, &b_md, d->engine, DNNL_MEMORY_NONE), "memory"));
    }
    return QF_OK;
}

static qf_status dct_prepare_common(const qf_kernel_io *io, void *state, bool transpose)
{
    qf_status st = dct_build(io, state, transpose);
    if (st != QF_OK) dct_release(state);
    return st;
}

static qf_status dct_prepare(const qf_kernel_io *io, void *state) { return dct_prepare_common(io, state, false); }
static qf_status dct_transpose_prepare(const qf_kernel_io *io, void *state) { return dct_prepare_common(io, state, true); }

static size_t dct_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return ((const dct_state *)state)->scratch;
}

/* Point a at the tape's tensor data (user) and its scratch buffer (prim). */
static qf_status dct_point(const qf_node *n, const dct_arg *a, void *data, char *scratch)
{
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(a->user, data), "memory"));
    if (a->prim != a->user) QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(a->prim, scratch + a->off), "memory"));
    return QF_OK;
}

static qf_status dct_reorder(const qf_node *n, const dct_arg *a, bool in)
{
    if (!a->reorder) return QF_OK;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, in ? a->user : a->prim}, {DNNL_ARG_TO, in ? a->prim : a->user}};
    return qf_dnnl_check(n, QF_DNNL(primitive_execute)(a->reorder, qf_dnnl_lib_.stream, 2, args), "reorder");
}

static qf_status dct_run(const qf_node *n, const dct_state *t, int which, char *scratch, dnnl_exec_arg_t *args, int nargs)
{
    if (t->pad[which]) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(t->pad[which], scratch), "memory"));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, t->pad[which]};
    }
    return qf_dnnl_check(n, QF_DNNL(primitive_execute)(t->prim[which], qf_dnnl_lib_.stream, nargs, args), "execute");
}

static qf_status dct_forward(const qf_kernel_io *io)
{
    const dct_state *t = io->state;
    const qf_node *n = io->node;
    char *sc = io->scratch;
    if (io->scratch_size < t->scratch)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): scratch of %zu bytes, oneDNN needs %zu", n->name,
                        qf_op_label(n), io->scratch_size, t->scratch);
    QF_TRY(dct_point(n, &t->src_f, io->in[0]->data, sc));
    QF_TRY(dct_point(n, &t->w_f, io->in[1]->data, sc));
    QF_TRY(dct_point(n, &t->dst_f, io->out[0]->data, sc));
    QF_TRY(dct_reorder(n, &t->src_f, true));
    QF_TRY(dct_reorder(n, &t->w_f, true));
    dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, t->src_f.prim}, {DNNL_ARG_WEIGHTS, t->w_f.prim}, {DNNL_ARG_DST, t->dst_f.prim}};
    int na = 3;
    if (t->has_bias) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(t->bias, io->in[2]->data), "memory"));
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, t->bias};
    }
    QF_TRY(dct_run(n, t, DCT_F, sc, args, na));
    QF_TRY(dct_reorder(n, &t->dst_f, false));
    return qf_dnnl_check(n, QF_DNNL(stream_wait)(qf_dnnl_lib_.stream), "execute");
}

/* The data an argument's primitive side reads: the tape's own buffer or its reordered copy in the scratch. */
static const float *dct_prim_data(const dct_arg *a, const void *user, const char *scratch)
{
    return a->prim == a->user ? user : (const float *)(scratch + a->off);
}

/* d W of a convolution with few columns (t->w_im2col: C * k <= 64), without
 * an im2col: part[j][m] = sum over the output rows r of dY[r][m] * col[r][j],
 * col[r][ci][k0][k1][k2] the value of channels-last X [n][i0][i1][i2][C]
 * under tap (k0, k1, k2) of row r (t->l: the geometry lifted to 3-D; ONNX
 * W's column order). Each tap walks only the output rows whose input is
 * inside X (the padding adds zeros: skipped), in row order, 16 channels of
 * dY at a time in registers. Each sample sums its rows in float into a part
 * of its own (samples lo..hi-1 here: qf_parallel_for over the batch);
 * dct_w_few adds the parts in sample order in double, so the result does
 * not depend on the thread count. An im2col of X (50176 x 9 floats for
 * fashion_cnn's first layer) and a GEMM over its rows took ~10 % of a
 * training step there. */
typedef struct dct_few_job {
    const dct_state *t;
    const float *x, *gy;
    float *part; /* [n][K][M] */
} dct_few_job;

/* The outputs o in [0, out) whose input o * s - p + k * d is in [0, in): [*lo, *hi). */
static void dct_tap_range(int64_t out, int64_t in, int64_t s, int64_t p, int64_t kd, int64_t *lo, int64_t *hi)
{
    const int64_t a = p - kd, b = in - 1 + p - kd; /* o * s in [a, b] */
    int64_t l = a <= 0 ? 0 : (a + s - 1) / s, h = b < 0 ? -1 : b / s;
    if (h > out - 1) h = out - 1;
    *lo = l;
    *hi = h + 1 > l ? h + 1 : l;
}

/* acc[0..w) += g[o * M + k] * x[o * xs] for the cnt rows of one tap that
 * read X (inlined with w = 16: acc in registers). */
static inline __attribute__((always_inline)) void dct_few_run(float *restrict acc, const float *restrict g,
                                                              const float *restrict x, int64_t M, int64_t xs,
                                                              int64_t cnt, int64_t w)
{
    float a[16];
    for (int64_t k = 0; k < w; k++) a[k] = acc[k];
    for (int64_t o = 0; o < cnt; o++) {
        const float xv = x[o * xs];
        const float *gr = g + o * M;
        for (int64_t k = 0; k < w; k++) a[k] += gr[k] * xv;
    }
    for (int64_t k = 0; k < w; k++) acc[k] = a[k];
}

QF_VECTOR_CLONES static void dct_few_slice(void *ctx, int64_t lo, int64_t hi)
{
    const dct_few_job *jb = ctx;
    const dct_state *t = jb->t;
    const qf_spatial *l = &t->l;
    const int64_t C = t->c, K = t->kcols, ks = K / C, M = t->m;
    for (int64_t n = lo; n < hi; n++) {
        float *pt = jb->part + n * K * M;
        memset(pt, 0, (size_t)(K * M) * sizeof(float));
        int64_t kk = 0;
        for (int64_t k0 = 0; k0 < l->kernel[0]; k0++)
            for (int64_t k1 = 0; k1 < l->kernel[1]; k1++)
                for (int64_t k2 = 0; k2 < l->kernel[2]; k2++, kk++) {
                    int64_t a0, b0, a1, b1, a2, b2;
                    dct_tap_range(l->out[0], l->in[0], l->stride[0], l->pad_begin[0], k0 * l->dilation[0], &a0, &b0);
                    dct_tap_range(l->out[1], l->in[1], l->stride[1], l->pad_begin[1], k1 * l->dilation[1], &a1, &b1);
                    dct_tap_range(l->out[2], l->in[2], l->stride[2], l->pad_begin[2], k2 * l->dilation[2], &a2, &b2);
                    for (int64_t o0 = a0; o0 < b0; o0++)
                        for (int64_t o1 = a1; o1 < b1; o1++) {
                            const int64_t r0 = ((n * l->out[0] + o0) * l->out[1] + o1) * l->out[2];
                            const int64_t i0 = o0 * l->stride[0] - l->pad_begin[0] + k0 * l->dilation[0];
                            const int64_t i1 = o1 * l->stride[1] - l->pad_begin[1] + k1 * l->dilation[1];
                            /* x of output o2 = a2 */
                            const int64_t i2 = a2 * l->stride[2] - l->pad_begin[2] + k2 * l->dilation[2];
                            const float *xr = jb->x + (((n * l->in[0] + i0) * l->in[1] + i1) * l->in[2] + i2) * C;
                            const int64_t xs = l->stride[2] * C, cnt = b2 - a2;
                            if (cnt <= 0) continue;
                            for (int64_t ci = 0; ci < C; ci++) {
                                float *acc = pt + (ci * ks + kk) * M;
                                for (int64_t m0 = 0; m0 < M; m0 += 16) {
                                    const float *g = jb->gy + (r0 + a2) * M + m0;
                                    if (M - m0 >= 16)
                                        dct_few_run(acc + m0, g, xr + ci, M, xs, cnt, 16);
                                    else
                                        dct_few_run(acc + m0, g, xr + ci, M, xs, cnt, M - m0);
                                }
                            }
                        }
                }
    }
}

static void dct_w_few(const dct_state *t, const float *x, const float *gy, float *part, float *dw)
{
    dct_few_job jb = {t, x, gy, part};
    const int64_t per = t->rows / (t->n > 0 ? t->n : 1) * t->kcols * t->m;
    qf_parallel_for(t->n, per >= 65536 ? 1 : 65536 / (per > 0 ? per : 1), dct_few_slice, &jb);
    const int64_t K = t->kcols, M = t->m;
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < K; j++) {
            double s = 0.0;
            for (int64_t n = 0; n < t->n; n++) s += part[(n * K + j) * M + m];
            dw[m * K + j] = (float)s;
        }
}

/* Backward weights as a GEMM (t->w_gemm): d W = dY^T col (col: X itself for
 * a pointwise convolution, else its im2col), d B = column sums of dY (in
 * double, 16 channels at a time). */
static qf_status dct_w_gemm(const qf_kernel_io *io, const dct_state *t, const float *gy, char *sc, bool reuse)
{
    const qf_node *n = io->node;
    qf_tensor *dw = io->din[1], *db = io->nin > 2 ? io->din[2] : NULL;
    if (!reuse) {
        QF_TRY(dct_point(n, &t->ddst_w, io->dout[0]->data, sc));
        QF_TRY(dct_reorder(n, &t->ddst_w, true));
        gy = dct_prim_data(&t->ddst_w, io->dout[0]->data, sc);
    }
    QF_TRY(dct_point(n, &t->src_w, io->in[0]->data, sc));
    QF_TRY(dct_reorder(n, &t->src_w, true));
    QF_TRY(qf_dnnl_check(n, QF_DNNL(stream_wait)(qf_dnnl_lib_.stream), "execute"));
    const float *x = dct_prim_data(&t->src_w, io->in[0]->data, sc);
    if (dw && t->w_im2col)
        dct_w_few(t, x, gy, (float *)(sc + t->col_off), dw->data);
    else if (dw)
        QF_TRY(qf_sgemm(n, &(qf_sgemm_args){.ta = true, .m = t->m, .n = t->kcols, .k = t->rows, .alpha = 1.0f,
                                           .a = gy, .lda = t->m, .b = x, .ldb = t->kcols, .c = dw->data,
                                           .ldc = t->kcols}));
    if (db) {
        float *o = db->data;
        for (int64_t c0 = 0; c0 < t->m; c0 += 16) {
            const int64_t w = t->m - c0 < 16 ? t->m - c0 : 16;
            double acc[16] = {0};
            for (int64_t r = 0; r < t->rows; r++)
                for (int64_t k = 0; k < w; k++) acc[k] += gy[r * t->m + c0 + k];
            for (int64_t k = 0; k < w; k++) o[c0 + k] = (float)acc[k];
        }
    }
    return QF_OK;
}

static qf_status dct_backward(const qf_kernel_io *io)
{
    const dct_state *t = io->state;
    const qf_node *n = io->node;
    char *sc = io->scratch;
    qf_tensor *dx = io->din[0], *dw = io->din[1], *db = io->nin > 2 ? io->din[2] : NULL;
    if (!io->dout[0]) {
        for (int i = 0; i < io->nin && i < 3; i++)
            if (io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
        return QF_OK;
    }
    void *ddst = io->dout[0]->data;
    if (dx) {
        QF_TRY(dct_point(n, &t->ddst_d, ddst, sc));
        QF_TRY(dct_point(n, &t->w_d, io->in[1]->data, sc));
        QF_TRY(dct_point(n, &t->dsrc_d, dx->data, sc));
        QF_TRY(dct_reorder(n, &t->ddst_d, true));
        QF_TRY(dct_reorder(n, &t->w_d, true));
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, t->ddst_d.prim}, {DNNL_ARG_WEIGHTS, t->w_d.prim},
                                   {DNNL_ARG_DIFF_SRC, t->dsrc_d.prim}};
        QF_TRY(dct_run(n, t, DCT_D, sc, args, 3));
        QF_TRY(dct_reorder(n, &t->dsrc_d, false));
    }
    if ((dw || db) && t->w_gemm) {
        /* Backward data ran on dY channels-last (the tape's, or its reorder). */
        QF_TRY(dct_w_gemm(io, t, dx ? dct_prim_data(&t->ddst_d, ddst, sc) : NULL, sc, dx != NULL));
    } else if (dw || db) {
        const bool reuse = dx && t->ddst_reuse; /* ddst_d.prim holds dY, reordered above */
        QF_TRY(dct_point(n, &t->src_w, io->in[0]->data, sc));
        if (!reuse) QF_TRY(dct_point(n, &t->ddst_w, ddst, sc));
        QF_TRY(dct_point(n, &t->dw_w, dw ? dw->data : sc + t->dw_spare, sc));
        QF_TRY(dct_reorder(n, &t->src_w, true));
        if (!reuse) QF_TRY(dct_reorder(n, &t->ddst_w, true));
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, t->src_w.prim},
                                   {DNNL_ARG_DIFF_DST, reuse ? t->ddst_d.prim : t->ddst_w.prim},
                                   {DNNL_ARG_DIFF_WEIGHTS, t->dw_w.prim}};
        int na = 3;
        if (t->has_bias) {
            QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(t->dbias, db ? db->data : sc + t->db_spare),
                                 "memory"));
            args[na++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, t->dbias};
        }
        QF_TRY(dct_run(n, t, DCT_W, sc, args, na));
        if (dw) QF_TRY(dct_reorder(n, &t->dw_w, false));
    }
    return qf_dnnl_check(n, QF_DNNL(stream_wait)(qf_dnnl_lib_.stream), "execute");
}

const qf_backend_kernels qf_conv_dnnl_train = {
    .prepare = dct_prepare,
    .state_size = sizeof(dct_state),
    .release = dct_release,
    .scratch = dct_scratch,
    .forward_f32 = dct_forward,
    .backward_f32 = dct_backward,
};

const qf_backend_kernels qf_conv_transpose_dnnl_train = {
    .prepare = dct_transpose_prepare,
    .state_size = sizeof(dct_state),
    .release = dct_release,
    .scratch = dct_scratch,
    .forward_f32 = dct_forward,
    .backward_f32 = dct_backward,
};
