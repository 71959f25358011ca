/* qfold's int8 ConvTranspose (internal op QF_OP_QCONV_TRANSPOSE, never
 * exported; ONNX has no integer ConvTranspose): the integer executor's
 * lowering (src/quant/lower.c) makes one of every DQ -> ConvTranspose ->
 * [Relu / Clip] -> Q group, computed as TFLite's reference int8
 * TRANSPOSE_CONV computes it (integer_ops/transpose_conv.h: every product
 * (x - zp_x) * (w - zp_w) scattered into an int32 output, the bias added,
 * each output channel requantized with its own multiplier):
 *
 *   inputs  X, X_scale, X_zp, W, W_scale, W_zp, Y_scale, Y_zp, [B]  (QLinearConv's order)
 *   attrs   ConvTranspose's; qfold_requant = 1 for TFLite's fixed point
 *           (else ONNX's float requantization, int8.h); qfold_clamp
 *
 * X, W, Y int8 per tensor, W per tensor or per channel on axis 1 (W is
 * [C, M/group, k...]: one scale per output channel of a group, the same for
 * every group), B int32 at s_x * s_W. The arithmetic is the int8 core's
 * (int8.h): per group, col (M/g * prod(k) x P_in) = W_g^T (widened, zero
 * point subtracted) times X_g (widened), an int16 GEMM into int32; then
 * qf_int8_col2im3 adds each column entry into the output position it lands
 * on, as the float ConvTranspose does (conv.c). Every output sums at most
 * C/g * prod(k) products (each tap of each input channel lands on an output
 * at most once): that is the K the accumulator check bounds.
 */
#include <string.h>

#include "ops/ref/conv.h"
#include "ops/int8/int8.h"
#include "ops/kernels.h"

typedef struct qconvt_state {
    qf_conv_geom geom;
    bool fixed, w_scale_per, w_zp_per;
    int32_t lo, hi, zp_x, zp_y;
    int64_t acc_bound;
    size_t off_w16, off_x16, off_col, off_acc, off_wzp, off_scale, off_mult, scratch;
} qconvt_state;

static const char *const qconvt_names[9] = {"X", "X_scale", "X_zero_point", "W", "W_scale",
                                            "W_zero_point", "Y_scale", "Y_zero_point", "B"};

/* Dtypes, qparam shapes and the geometry; shared by infer and prepare. */
static qf_status qconvt_check(const qf_node *n, const qf_tensor *const *in, int nin, qconvt_state *st)
{
    char s[128];
    memset(st, 0, sizeof *st);
    for (int i = 0; i < nin && i < 9; i++) {
        if (!in[i]) {
            if (i == 8) continue;
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %s is missing", n->name, qf_op_label(n),
                            qconvt_names[i]);
        }
        qf_dtype want = i == 1 || i == 4 || i == 6 ? QF_DTYPE_F32 : i == 8 ? QF_DTYPE_I32 : QF_DTYPE_I8;
        if (in[i]->dtype != want)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected %s", n->name,
                            qf_op_label(n), qconvt_names[i], qf_dtype_name(in[i]->dtype), qf_dtype_name(want));
    }
    const qf_tensor *b = nin > 8 ? in[8] : NULL;
    qf_conv_geom *cg = &st->geom;
    QF_TRY(qf_conv_geometry(n, in[0], in[3], b, true, cg));
    for (int i = 1; i < 8; i++) {
        if (i == 3) continue;
        int64_t k = qf_tensor_numel(in[i]);
        bool per_ok = i == 4 || i == 5;
        if (k == 1) continue;
        if (per_ok && in[i]->ndim == 1 && (cg->mg < 0 || in[i]->dims[0] == cg->mg)) {
            if (i == 4) st->w_scale_per = true;
            else st->w_zp_per = true;
            continue;
        }
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %s has shape %s, expected one value%s", n->name,
                        qf_op_label(n), qconvt_names[i], qf_shape_str(in[i]->ndim, in[i]->dims, s, sizeof s),
                        per_ok ? " or one per output channel of a group (W's axis 1)" : "");
    }
    return QF_OK;
}

static qf_status qf_qconv_transpose_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    if (n->ninputs < 8)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects 8 or 9 inputs, has %d", n->name, qf_op_label(n),
                        n->ninputs);
    const qf_tensor *in[9] = {0};
    for (int i = 0; i < n->ninputs && i < 9; i++) in[i] = n->inputs[i] ? &n->inputs[i]->type : NULL;
    qconvt_state st;
    QF_TRY(qconvt_check(n, in, n->ninputs, &st));
    int64_t dims[QF_MAX_DIMS];
    dims[0] = st.geom.n;
    dims[1] = st.geom.m;
    for (int i = 0; i < st.geom.s.rank; i++) dims[2 + i] = st.geom.s.out[i];
    qf_set_output(n, 0, QF_DTYPE_I8, in[0]->ndim, dims);
    return QF_OK;
}

/* Scratch carving: each block 64-byte aligned; false when a size overflows. */
static bool qconvt_take(size_t *off, int64_t a, int64_t b, size_t es, size_t *at)
{
    int64_t e, by;
    if (a < 0 || b < 0 || !qf_i64_mul(a, b, &e) || !qf_i64_mul(e, (int64_t)es, &by)) return false;
    *at = (*off + 63) / 64 * 64;
    if ((uint64_t)by > SIZE_MAX - *at) return false;
    *off = *at + (size_t)by;
    return true;
}

static qf_status qf_qconv_transpose_prepare(const qf_kernel_io *io, void *state)
{
    const qf_node *n = io->node;
    qconvt_state *st = state;
    if (io->nin < 8)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): expects 8 or 9 inputs, has %d", n->name, qf_op_label(n),
                        io->nin);
    QF_TRY(qconvt_check(n, io->in, io->nin, st));
    const qf_conv_geom *cg = &st->geom;
    if (cg->n < 0 || cg->m < 0 || cg->k < 0 || cg->in_plane < 0 || cg->out_plane < 0)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): shapes are not known at prepare", n->name, qf_op_label(n));
    for (int i = 1; i < 8; i++)
        if (i != 3 && !io->in[i]->data)
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s must be a constant", n->name, qf_op_label(n),
                            qconvt_names[i]);
    st->zp_x = *(const int8_t *)io->in[2]->data;
    st->zp_y = *(const int8_t *)io->in[7]->data;
    int32_t w_abs = 0;
    for (int64_t i = 0; i < qf_tensor_numel(io->in[5]); i++) {
        int32_t a = qf_int8_range_abs(QF_DTYPE_I8, ((const int8_t *)io->in[5]->data)[i]);
        if (a > w_abs) w_abs = a;
    }
    const int32_t x_abs = qf_int8_range_abs(QF_DTYPE_I8, st->zp_x);
    const int64_t terms = cg->cg * cg->ksize;
    QF_TRY(qf_int8_check_k(n, terms, x_abs, w_abs));
    st->acc_bound = terms * x_abs * w_abs;
    st->fixed = qf_node_attr_int(n, "qfold_requant", 0) == 1;
    QF_TRY(qf_int8_clamp_attr(n, &st->lo, &st->hi));
    size_t off = 0;
    if (!qconvt_take(&off, cg->c, cg->k, sizeof(int16_t), &st->off_w16) ||
        !qconvt_take(&off, cg->in_plane, cg->cg, sizeof(int16_t), &st->off_x16) ||
        !qconvt_take(&off, cg->k, cg->in_plane, sizeof(int32_t), &st->off_col) ||
        !qconvt_take(&off, cg->mg, cg->out_plane, sizeof(int32_t), &st->off_acc) ||
        !qconvt_take(&off, cg->k, 1, sizeof(int32_t), &st->off_wzp) ||
        !qconvt_take(&off, cg->mg, 1, sizeof(float), &st->off_scale) ||
        !qconvt_take(&off, cg->mg, 2, sizeof(int32_t), &st->off_mult))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    st->scratch = off;
    return QF_OK;
}

static size_t qconvt_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return state ? ((const qconvt_state *)state)->scratch : 0;
}

static qf_status qf_qconv_transpose_forward_f32(const qf_kernel_io *io)
{
    const qconvt_state *st = io->state;
    const qf_node *n = io->node;
    if (io->scratch_size < st->scratch)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): scratch of %zu bytes, the kernel needs %zu", n->name,
                        qf_op_label(n), io->scratch_size, st->scratch);
    const qf_conv_geom *cg = &st->geom;
    if (cg->n == 0 || cg->m == 0 || cg->out_plane == 0) return QF_OK;
    char *scr = io->scratch;
    int16_t *w16 = (int16_t *)(scr + st->off_w16), *x16 = (int16_t *)(scr + st->off_x16);
    int32_t *col = (int32_t *)(scr + st->off_col), *acc = (int32_t *)(scr + st->off_acc);
    int32_t *wz = (int32_t *)(scr + st->off_wzp), *mult = (int32_t *)(scr + st->off_mult), *shift = mult + cg->mg;
    float *scale = (float *)(scr + st->off_scale);
    const int8_t *wq = io->in[3]->data, *wzp = io->in[5]->data;
    const float xs = *(const float *)io->in[1]->data, ys = *(const float *)io->in[6]->data;
    const float *ws = io->in[4]->data;
    const int32_t *bias = io->nin > 8 && io->in[8] ? io->in[8]->data : NULL;

    /* A = W_g^T (K x C/g) per group, the zero point of column (m, k) its
     * output channel's. */
    for (int64_t j = 0; j < cg->k; j++) wz[j] = wzp[st->w_zp_per ? j / cg->ksize : 0];
    for (int64_t g = 0; g < cg->group; g++)
        qf_int8_widen_cols_t(wq + g * cg->cg * cg->k, QF_DTYPE_I8, wz, true, cg->cg, cg->k, w16 + g * cg->k * cg->cg);

    /* The requantization of output channel m of a group (channels repeat
     * across groups: W's axis 1 has M/group entries). */
    const int64_t nch = st->w_scale_per ? cg->mg : 1;
    qf_int8_requant rq = {.per_channel = st->w_scale_per, .zp = st->zp_y, .lo = st->lo, .hi = st->hi,
                          .dtype = QF_DTYPE_I8};
    if (st->fixed) {
        for (int64_t c = 0; c < nch; c++) {
            /* TFLite: the real multiplier s_x * s_w / s_y in double. */
            double real = (double)xs * (double)ws[c] / (double)ys;
            QF_TRY(qf_int8_requant_prepare_fixed(n, &real, 1, st->acc_bound, mult + c, shift + c));
        }
        rq.multiplier = mult;
        rq.shift = shift;
    } else {
        for (int64_t c = 0; c < nch; c++) scale[c] = qf_int8_combined_scale(xs, ws[c], ys);
        rq.scale = scale;
    }
    const int8_t *x = io->in[0]->data;
    int8_t *y = io->out[0]->data;
    for (int64_t bn = 0; bn < cg->n; bn++)
        for (int64_t g = 0; g < cg->group; g++) {
            const int8_t *xg = x + (bn * cg->c + g * cg->cg) * cg->in_plane;
            const int64_t row0 = bn * cg->m + g * cg->mg;
            for (int64_t r = 0; r < cg->mg; r++) {
                int32_t b = bias ? bias[g * cg->mg + r] : 0;
                for (int64_t p = 0; p < cg->out_plane; p++) acc[r * cg->out_plane + p] = b;
            }
            if (cg->in_plane > 0 && cg->cg > 0) {
                qf_int8_widen_cols_t(xg, QF_DTYPE_I8, &st->zp_x, false, cg->cg, cg->in_plane, x16);
                qf_int8_gemm_nt(cg->k, cg->in_plane, cg->cg, w16 + g * cg->k * cg->cg, x16, NULL, col, cg->in_plane);
                qf_int8_col2im3(col, cg->mg, &cg->l, acc);
            }
            if (st->fixed) qf_int8_requant_fixed(&rq, 0, cg->mg, cg->out_plane, acc, y + row0 * cg->out_plane);
            else qf_int8_requant_float(&rq, 0, cg->mg, cg->out_plane, acc, y + row0 * cg->out_plane);
        }
    return QF_OK;
}

const qf_op_kernels qf_qconv_transpose_kernels = {
    .infer = qf_qconv_transpose_infer,
    .prepare = qf_qconv_transpose_prepare,
    .state_size = sizeof(qconvt_state),
    .scratch = qconvt_scratch,
    .forward_f32 = qf_qconv_transpose_forward_f32,
};
