/* Gemm, MatMul and linear on oneDNN's matmul primitive (float32 forward).
 *
 *   Gemm:   Y = alpha op(A) op(B) + beta C. op(A) and op(B) are strided views
 *           (transA / transB cost nothing); alpha != 1 is an eltwise linear
 *           post-op; C is a binary add post-op broadcast to [M, N] (beta 1),
 *           or ignored (beta 0, as the reference). Other betas with a C are
 *           declined: oneDNN has no scaled binary operand.
 *   MatMul: numpy matmul: 1-D operands become [1, K] / [K, 1]; both are
 *           padded with leading 1s to one rank; the batch dims broadcast in
 *           the primitive. Y's memory is the same as the padded result.
 *   linear: y = x W^T + b with x [..., in] as [rows, in], W [out, in] read
 *           transposed, b a [1, out] bias.
 * A constant B / W is reordered once into the primitive's preferred layout.
 * Fused followers (io->fused) come after alpha and C.
 */
#include <string.h>

#include "backend/dnnl/dnnl_kernels.h"

/* One matmul problem in oneDNN's terms. */
typedef struct dmm_problem {
    int nd;
    int64_t src[DNNL_MAX_NDIMS], src_st[DNNL_MAX_NDIMS];
    int64_t wei[DNNL_MAX_NDIMS], wei_st[DNNL_MAX_NDIMS];
    int64_t dst[DNNL_MAX_NDIMS];
    int wei_in;           /* input slot of the weights */
    const void *wei_data; /* constant weights, or NULL */
    int bias_in;          /* input slot of a [1, N] bias, or -1 */
    float alpha;          /* Gemm's alpha (1: none) */
    int c_in;             /* Gemm's C slot (added as a binary post-op), or -1 */
    int64_t c_dims[2];
} dmm_problem;

static void dmm_row_major(int nd, const int64_t *dims, int64_t *st)
{
    st[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) st[i] = st[i + 1] * dims[i + 1];
}

static qf_status dmm_build(const qf_kernel_io *io, qf_dk_prim *p, const dmm_problem *pr)
{
    const qf_node *n = io->node;
    dnnl_memory_desc_t src_md, wei_user, wei_md, dst_md, bias_md, c_md;
    QF_TRY(qf_dk_md_strided(&src_md, pr->nd, pr->src, pr->src_st));
    QF_TRY(qf_dk_md_strided(&wei_user, pr->nd, pr->wei, pr->wei_st));
    if (pr->wei_data)
        QF_TRY(qf_dk_md_any(&wei_md, pr->nd, pr->wei));
    else
        wei_md = wei_user;
    QF_TRY(qf_dk_md_plain(&dst_md, pr->nd, pr->dst));
    if (pr->bias_in >= 0) {
        int64_t bd[DNNL_MAX_NDIMS];
        for (int i = 0; i < pr->nd; i++) bd[i] = 1;
        bd[pr->nd - 1] = pr->dst[pr->nd - 1];
        QF_TRY(qf_dk_md_plain(&bias_md, pr->nd, bd));
    }
    if (pr->c_in >= 0) QF_TRY(qf_dk_md_plain(&c_md, 2, pr->c_dims));

    qf_dk_build b;
    QF_TRY(qf_dk_begin(&b, io, p));
    qf_status st = QF_OK;
    if (pr->alpha != 1.0f) st = qf_dk_post_eltwise(&b, dnnl_eltwise_linear, pr->alpha, 0.0f);
    if (st == QF_OK && pr->c_in >= 0) {
        st = qf_dnnl_check(n, QF_DNNL(post_ops_append_binary)(b.po, dnnl_binary_add, &c_md),
                           "binary post-op");
        if (st == QF_OK) {
            p->args[p->nargs++] =
                (qf_dk_arg){.arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(b.npo) | DNNL_ARG_SRC_1,
                            .source = QF_DK_IN,
                            .index = pr->c_in};
            b.npo++;
        }
    }
    if (st == QF_OK) st = qf_dk_post_fused(&b, &dst_md);
    dnnl_matmul_desc_t md;
    if (st == QF_OK) {
        dnnl_status_t r = QF_DNNL(matmul_desc_init)(&md, &src_md, &wei_md,
                                                    pr->bias_in >= 0 ? &bias_md : NULL, &dst_md);
        st = r == dnnl_unimplemented || r == dnnl_invalid_arguments
                 ? QF_DK_DECLINE
                 : qf_dnnl_check(n, r, "matmul descriptor");
    }
    if (st != QF_OK) {
        qf_dk_abort(&b);
        return st;
    }
    QF_TRY(qf_dk_finish(&b, &md));
    QF_TRY(qf_dk_bind(p, DNNL_ARG_SRC, QF_DK_IN, 0, &src_md, NULL));
    if (pr->wei_data)
        QF_TRY(qf_dk_bind_const(p, DNNL_ARG_WEIGHTS, &wei_user, pr->wei_data,
                                qf_dk_query(p, dnnl_query_weights_md, 0), 0));
    else
        QF_TRY(qf_dk_bind(p, DNNL_ARG_WEIGHTS, QF_DK_IN, pr->wei_in, &wei_md, NULL));
    if (pr->bias_in >= 0) {
        const qf_tensor *bt = io->in[pr->bias_in];
        QF_TRY(qf_dk_bind(p, DNNL_ARG_BIAS, bt->data ? QF_DK_FIXED : QF_DK_IN, pr->bias_in,
                          &bias_md, bt->data));
    }
    return qf_dk_bind(p, DNNL_ARG_DST, QF_DK_OUT, 0, &dst_md, NULL);
}

/* Common checks: float32 everywhere, channels-first only (these are not
 * spatial ops), one output. */
static bool dmm_io_ok(const qf_kernel_io *io, int nin_min)
{
    if (io->nin < nin_min || io->nout != 1 || !qf_dk_all_f32(io) || io->in_nhwc || io->out_nhwc)
        return false;
    for (int i = 0; i < nin_min; i++)
        if (!io->in[i]) return false;
    return true;
}

/* --- Gemm ---------------------------------------------------------------------- */

static qf_status dgemm_build(const qf_kernel_io *io, qf_dk_prim *p)
{
    if (!dmm_io_ok(io, 2)) return QF_DK_DECLINE;
    const qf_node *n = io->node;
    const qf_tensor *a = io->in[0], *bt = io->in[1], *c = io->nin > 2 ? io->in[2] : NULL,
                    *y = io->out[0];
    if (a->ndim != 2 || bt->ndim != 2 || y->ndim != 2) return QF_DK_DECLINE;
    const bool ta = qf_node_attr_int(n, "transA", 0) != 0,
               tb = qf_node_attr_int(n, "transB", 0) != 0;
    const float alpha = qf_node_attr_float(n, "alpha", 1.0f),
                beta = qf_node_attr_float(n, "beta", 1.0f);
    const int64_t M = y->dims[0], N = y->dims[1], K = a->dims[ta ? 0 : 1];
    if (a->dims[ta ? 1 : 0] != M || bt->dims[tb ? 1 : 0] != K || bt->dims[tb ? 0 : 1] != N)
        return QF_DK_DECLINE;
    dmm_problem pr = {.nd = 2, .wei_in = 1, .bias_in = -1, .alpha = alpha, .c_in = -1};
    pr.src[0] = M, pr.src[1] = K;
    pr.src_st[0] = ta ? 1 : K, pr.src_st[1] = ta ? M : 1;
    pr.wei[0] = K, pr.wei[1] = N;
    pr.wei_st[0] = tb ? 1 : N, pr.wei_st[1] = tb ? K : 1;
    pr.wei_data = bt->data;
    pr.dst[0] = M, pr.dst[1] = N;
    if (c && beta != 0.0f) {
        if (beta != 1.0f || c->ndim > 2) return QF_DK_DECLINE;
        /* C broadcast to [M, N] (numpy: leading dims added). */
        pr.c_dims[0] = c->ndim == 2 ? c->dims[0] : 1;
        pr.c_dims[1] = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
        if ((pr.c_dims[0] != 1 && pr.c_dims[0] != M) || (pr.c_dims[1] != 1 && pr.c_dims[1] != N))
            return QF_DK_DECLINE;
        pr.c_in = 2;
    }
    return dmm_build(io, p, &pr);
}

/* --- MatMul -------------------------------------------------------------------- */

static qf_status dmatmul_build(const qf_kernel_io *io, qf_dk_prim *p)
{
    if (!dmm_io_ok(io, 2)) return QF_DK_DECLINE;
    const qf_tensor *a = io->in[0], *bt = io->in[1];
    /* numpy's view: [..., M, K] x [..., K, N]. */
    int64_t ad[QF_MAX_DIMS + 1], bd[QF_MAX_DIMS + 1];
    int na = a->ndim, nb = bt->ndim;
    memcpy(ad, a->dims, sizeof(int64_t) * (size_t)na);
    memcpy(bd, bt->dims, sizeof(int64_t) * (size_t)nb);
    if (na == 1) ad[1] = ad[0], ad[0] = 1, na = 2;
    if (nb == 1) bd[1] = 1, nb = 2;
    const int nd = na > nb ? na : nb;
    if (nd > DNNL_MAX_NDIMS) return QF_DK_DECLINE;
    dmm_problem pr = {.nd = nd, .wei_in = 1, .bias_in = -1, .alpha = 1.0f, .c_in = -1};
    for (int i = 0; i < nd; i++) {
        pr.src[i] = i < nd - na ? 1 : ad[i - (nd - na)];
        pr.wei[i] = i < nd - nb ? 1 : bd[i - (nd - nb)];
    }
    const int64_t K = pr.src[nd - 1];
    if (pr.wei[nd - 2] != K) return QF_DK_DECLINE;
    for (int i = 0; i < nd - 2; i++) {
        if (pr.src[i] != pr.wei[i] && pr.src[i] != 1 && pr.wei[i] != 1) return QF_DK_DECLINE;
        pr.dst[i] = pr.src[i] > pr.wei[i] ? pr.src[i] : pr.wei[i];
    }
    pr.dst[nd - 2] = pr.src[nd - 2];
    pr.dst[nd - 1] = pr.wei[nd - 1];
    if (qf_shape_numel(nd, pr.dst) != qf_tensor_numel(io->out[0])) return QF_DK_DECLINE;
    dmm_row_major(nd, pr.src, pr.src_st);
    dmm_row_major(nd, pr.wei, pr.wei_st);
    pr.wei_data = bt->data;
    return dmm_build(io, p, &pr);
}

/* --- linear -------------------------------------------------------------------- */

static qf_status dlinear_build(const qf_kernel_io *io, qf_dk_prim *p)
{
    if (!dmm_io_ok(io, 2)) return QF_DK_DECLINE;
    const qf_tensor *x = io->in[0], *w = io->in[1], *bias = io->nin > 2 ? io->in[2] : NULL;
    if (w->ndim != 2 || x->dims[x->ndim - 1] != w->dims[1]) return QF_DK_DECLINE;
    const int64_t in = w->dims[1], out = w->dims[0], rows = qf_tensor_numel(x) / in;
    dmm_problem pr = {.nd = 2, .wei_in = 1, .bias_in = bias ? 2 : -1, .alpha = 1.0f, .c_in = -1};
    pr.src[0] = rows, pr.src[1] = in;
    pr.src_st[0] = in, pr.src_st[1] = 1;
    pr.wei[0] = in, pr.wei[1] = out; /* W^T: W [out, in] read with strides */
    pr.wei_st[0] = 1, pr.wei_st[1] = in;
    pr.wei_data = w->data;
    pr.dst[0] = rows, pr.dst[1] = out;
    return dmm_build(io, p, &pr);
}

/* --- op table columns ------------------------------------------------------------ */

#define QF_DMM_PREPARE_(name, build)                           \
    static qf_status name(const qf_kernel_io *io, void *state) \
    {                                                          \
        qf_status st = build(io, state);                       \
        if (st != QF_OK) qf_dk_release(state);                 \
        return st;                                             \
    }
QF_DMM_PREPARE_(dgemm_prepare, dgemm_build)
QF_DMM_PREPARE_(dmatmul_prepare, dmatmul_build)
QF_DMM_PREPARE_(dlinear_prepare, dlinear_build)
#undef QF_DMM_PREPARE_

#define QF_DMM_COLUMNS_(prep)                                                              \
    {                                                                                      \
        .prepare = prep, .state_size = sizeof(qf_dk_prim), .release = qf_dk_release,       \
        .scratch = qf_dk_scratch, .forward_f32 = qf_dk_forward, .layouts = QF_LAYOUT_NCHW, \
    }
const qf_backend_kernels qf_gemm_dnnl = QF_DMM_COLUMNS_(dgemm_prepare);
const qf_backend_kernels qf_matmul_dnnl = QF_DMM_COLUMNS_(dmatmul_prepare);
const qf_backend_kernels qf_linear_dnnl = QF_DMM_COLUMNS_(dlinear_prepare);
#undef QF_DMM_COLUMNS_
