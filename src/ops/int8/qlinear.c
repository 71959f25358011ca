/* The standard ONNX integer ops (opset 10+): QLinearConv, ConvInteger,
 * QLinearMatMul, MatMulInteger, on int8 and uint8 operands (each operand's
 * zero point has its dtype; activation and weight dtypes may differ).
 *
 *   ConvInteger    Y (int32) = conv(X - x_zp, W - w_zp)
 *   QLinearConv    Y = saturate(round((conv(X - x_zp, W - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp)
 *   MatMulInteger  Y (int32) = (A - a_zp) @ (B - b_zp)
 *   QLinearMatMul  Y = saturate(round((A - a_zp) @ (B - b_zp) * a_scale * b_scale / y_scale) + y_zp)
 *
 * Conv geometry is conv.h's (1-D to 3-D, groups, depthwise, strides, pads,
 * dilations); MatMul broadcasts like numpy's matmul. Weight scales and zero
 * points are per tensor or per output channel (conv: M; MatMul: the columns
 * of B); MatMulInteger's a_zp may also be per row of A. The arithmetic is
 * int8.h's: exact int32 accumulation and ONNX Runtime's float
 * requantization, so outputs equal onnxruntime's bit for bit. These run as
 * the forward_f32 column (the reference forward, here in integers); qparams
 * are read at run time (they may be graph inputs), their shapes and dtypes
 * are checked once, in prepare.
 */
#include <string.h>

#include "ops/math/broadcast.h"
#include "ops/int8/int8.h"
#include "ops/kernels.h"
#include "ops/int8/qlinear.h"
#include "ops/math/quant_math.h"

/* --- shared checks ---------------------------------------------------------- */

static const qf_tensor *ql_opt(const qf_node *n, int i)
{
    return i < n->ninputs && n->inputs[i] ? &n->inputs[i]->type : NULL;
}

static qf_status ql_need(const qf_node *n, int count)
{
    for (int i = 0; i < count; i++)
        if (i >= n->ninputs || !n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d is missing", n->name, qf_op_label(n), i);
    return QF_OK;
}

static bool ql_is_q8(qf_dtype dt) { return dt == QF_DTYPE_I8 || dt == QF_DTYPE_U8; }

static qf_status ql_check_q8(const qf_node *n, const qf_tensor *t, const char *what)
{
    if (ql_is_q8(t->dtype)) return QF_OK;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected int8 or uint8", n->name,
                    qf_op_label(n), what, qf_dtype_name(t->dtype));
}

/* A scale (float32) or zero point (dtype `zdt`) that is one value, or 1-D
 * with `channels` values when per_ok (channels -1: unknown, any length).
 * *per is set when it has more than one value (or 1-D of unknown length). */
static qf_status ql_check_qparam(const qf_node *n, const qf_tensor *t, const char *what, qf_dtype want,
                                 bool per_ok, int64_t channels, const char *axis_name, bool *per)
{
    char s[128];
    *per = false;
    if (t->dtype != want)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has dtype %s, expected %s", n->name, qf_op_label(n),
                        what, qf_dtype_name(t->dtype), qf_dtype_name(want));
    int64_t k = qf_shape_numel(t->ndim, t->dims);
    if (k == 1) return QF_OK;
    if (per_ok && t->ndim == 1 && (channels < 0 || t->dims[0] < 0 || t->dims[0] == channels)) {
        *per = true;
        return QF_OK;
    }
    if (per_ok)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %s has shape %s, expected one value or [%lld] (one per %s)",
                        n->name, qf_op_label(n), what, qf_shape_str(t->ndim, t->dims, s, sizeof s),
                        (long long)channels, axis_name);
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %s has shape %s; only one value (per tensor) is supported",
                    n->name, qf_op_label(n), what, qf_shape_str(t->ndim, t->dims, s, sizeof s));
}

/* Value i of an int8 / uint8 / int32 zero point (NULL: 0). */
static int32_t ql_zp_at(const qf_tensor *zp, int64_t i)
{
    if (!zp || !zp->data) return 0;
    switch (zp->dtype) {
    case QF_DTYPE_I8: return ((const int8_t *)zp->data)[i];
    case QF_DTYPE_U8: return ((const uint8_t *)zp->data)[i];
    default: return 0;
    }
}

/* The bound on |q - zp| of an operand for the accumulator check: from the
 * zero point's values when it is a constant, else the worst case (255). */
static int32_t ql_range_abs(qf_dtype dt, const qf_tensor *zp)
{
    if (zp && !zp->data) return 255;
    int64_t k = zp ? qf_tensor_numel(zp) : 1;
    int32_t m = 0;
    for (int64_t i = 0; i < k; i++) {
        int32_t a = qf_int8_range_abs(dt, ql_zp_at(zp, i));
        if (a > m) m = a;
    }
    return m;
}

/* qfold's attributes of a QLinearConv / QLinearMatMul, decoded here for
 * both: qfold_requant = 1 (TFLite's fixed point instead of ONNX's float
 * requantization) and qfold_clamp = [lo, hi] (a fused activation's range in
 * Y's integers, uint8 or int8), refused as on every int8 op when it is not
 * two values inside Y's range. ConvInteger / MatMulInteger (int32 Y) take
 * neither (their [lo, hi] is set but unused). */
static qf_status ql_out_attrs(const qf_node *n, bool qlinear, qf_dtype ydt, bool *fixed,
                              int32_t *lo, int32_t *hi)
{
    const int32_t min = ydt == QF_DTYPE_U8 ? 0 : -128, max = ydt == QF_DTYPE_U8 ? 255 : 127;
    *fixed = qlinear && qf_node_attr_int(n, "qfold_requant", 0) == 1;
    *lo = min;
    *hi = max;
    return qlinear ? qf_int8_clamp_range(n, min, max, lo, hi) : QF_OK;
}

/* Scratch carving: each block 64-byte aligned. */
static size_t ql_take(size_t *off, size_t bytes)
{
    size_t at = (*off + 63) / 64 * 64;
    *off = bytes > SIZE_MAX - at ? SIZE_MAX : at + bytes;
    return at;
}

static bool ql_bytes(int64_t a, int64_t b, size_t es, size_t *out)
{
    int64_t e, by;
    if (a < 0 || b < 0 || !qf_i64_mul(a, b, &e) || !qf_i64_mul(e, (int64_t)es, &by)) return false;
    *out = (size_t)by;
    return true;
}

/* Read zero points (count values, or one broadcast) into int32. */
static void ql_read_zp(const qf_tensor *zp, bool per, int64_t count, int32_t *dst)
{
    for (int64_t i = 0; i < count; i++) dst[i] = ql_zp_at(zp, per ? i : 0);
}

static qf_status ql_check_scratch(const qf_kernel_io *io, size_t need)
{
    if (io->scratch_size >= need) return QF_OK;
    return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): scratch of %zu bytes, the kernel needs %zu", io->node->name,
                    qf_op_label(io->node), io->scratch_size, need);
}

/* --- convolutions ------------------------------------------------------------ */

/* Input slots of the two convs. */
typedef struct qconv_slots {
    int x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b;
} qconv_slots;

static const qconv_slots qconv_qlinear = {0, 1, 2, 3, 4, 5, 6, 7, 8};
static const qconv_slots qconv_integer = {0, -1, 2, 1, -1, 3, -1, -1, -1};

typedef qf_qconv_state qconv_state;

static const qf_tensor *qconv_in(const qf_node *n, const qf_tensor *const *in, int nin, int slot)
{
    (void)n;
    return slot >= 0 && slot < nin ? in[slot] : NULL;
}

/* Types, qparam shapes and geometry; shared by infer and prepare. `in` holds
 * the nin input types (entries NULL when omitted). */
static qf_status qconv_check(const qf_node *n, const qf_tensor *const *in, int nin, bool qlinear, qconv_state *st)
{
    const qconv_slots *sl = qlinear ? &qconv_qlinear : &qconv_integer;
    const qf_tensor *x = in[sl->x], *w = in[sl->w];
    const qf_tensor *b = qconv_in(n, in, nin, sl->b);
    memset(st, 0, sizeof *st);
    st->qlinear = qlinear;
    QF_TRY(ql_check_q8(n, x, "input X"));
    QF_TRY(ql_check_q8(n, w, "weight W"));
    st->xdt = x->dtype;
    st->wdt = w->dtype;
    if (b && b->dtype != QF_DTYPE_I32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): bias B has dtype %s, expected int32", n->name,
                        qf_op_label(n), qf_dtype_name(b->dtype));
    qf_conv_geom *cg = &st->geom;
    QF_TRY(qf_conv_geometry(n, x, w, b, false, cg));
    bool per;
    const qf_tensor *xzp = qconv_in(n, in, nin, sl->x_zp), *wzp = qconv_in(n, in, nin, sl->w_zp);
    if (xzp) QF_TRY(ql_check_qparam(n, xzp, "x_zero_point", x->dtype, false, 1, "", &per));
    if (wzp) QF_TRY(ql_check_qparam(n, wzp, "w_zero_point", w->dtype, true, cg->m, "output channel", &st->w_zp_per));
    st->ydt = QF_DTYPE_I32;
    if (qlinear) {
        QF_TRY(ql_check_qparam(n, in[sl->x_scale], "x_scale", QF_DTYPE_F32, false, 1, "", &per));
        QF_TRY(ql_check_qparam(n, in[sl->w_scale], "w_scale", QF_DTYPE_F32, true, cg->m, "output channel",
                               &st->w_scale_per));
        QF_TRY(ql_check_qparam(n, in[sl->y_scale], "y_scale", QF_DTYPE_F32, false, 1, "", &per));
        const qf_tensor *yzp = in[sl->y_zp];
        if (!ql_is_q8(yzp->dtype))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): y_zero_point has dtype %s, expected int8 or uint8",
                            n->name, qf_op_label(n), qf_dtype_name(yzp->dtype));
        QF_TRY(ql_check_qparam(n, yzp, "y_zero_point", yzp->dtype, false, 1, "", &per));
        st->ydt = yzp->dtype;
    }
    return QF_OK;
}

static qf_status qconv_infer(qf_node *n, bool qlinear)
{
    QF_TRY(ql_need(n, qlinear ? 8 : 2));
    const qf_tensor *in[9] = {0};
    for (int i = 0; i < n->ninputs && i < 9; i++) in[i] = ql_opt(n, i);
    qconv_state st;
    QF_TRY(qconv_check(n, in, n->ninputs, qlinear, &st));
    const qf_tensor *x = in[0];
    const qf_conv_geom *cg = &st.geom;
    int64_t dims[QF_MAX_DIMS];
    dims[0] = cg->n;
    dims[1] = cg->m;
    for (int i = 0; i < cg->s.rank; i++) dims[2 + i] = cg->s.out[i];
    qf_set_output(n, 0, st.ydt, x->ndim, dims);
    return QF_OK;
}

qf_status qf_qconv_prepare(const qf_kernel_io *io, bool qlinear, qconv_state *st)
{
    const qf_node *n = io->node;
    QF_TRY(ql_need(n, qlinear ? 8 : 2));
    QF_TRY(qconv_check(n, io->in, io->nin, qlinear, st));
    const qconv_slots *sl = qlinear ? &qconv_qlinear : &qconv_integer;
    const qf_conv_geom *cg = &st->geom;
    if (cg->n < 0 || cg->m < 0 || cg->k < 0 || cg->in_plane < 0 || cg->out_plane < 0)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): shapes are not known at prepare", n->name, qf_op_label(n));
    const qf_tensor *xzp = qconv_in(n, io->in, io->nin, sl->x_zp), *wzp = qconv_in(n, io->in, io->nin, sl->w_zp);
    QF_TRY(qf_int8_check_k(n, cg->k, ql_range_abs(st->xdt, xzp), ql_range_abs(st->wdt, wzp)));
    size_t w16, col, acc, scale, zp, off = 0;
    if (!ql_bytes(cg->m, cg->k, sizeof(int16_t), &w16) || (col = qf_int8_conv_col_bytes(cg)) == SIZE_MAX ||
        !ql_bytes(cg->mg, cg->out_plane, sizeof(int32_t), &acc) || !ql_bytes(cg->m, 1, sizeof(float), &scale) ||
        !ql_bytes(cg->m, 1, sizeof(int32_t), &zp))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    st->off_w16 = ql_take(&off, w16);
    st->off_col = ql_take(&off, col);
    st->off_acc = ql_take(&off, qlinear ? acc : 0);
    st->off_scale = ql_take(&off, qlinear ? scale : 0);
    st->off_wzp = ql_take(&off, zp);
    QF_TRY(ql_out_attrs(n, qlinear, st->ydt, &st->fixed, &st->lo, &st->hi));
    /* |acc| <= K * max|x - zp| * max|w - zp| (+ the bias), as qf_int8_check_k bounds it. */
    st->acc_bound = cg->k * (int64_t)ql_range_abs(st->xdt, xzp) * (int64_t)ql_range_abs(st->wdt, wzp);
    size_t mult = 0;
    if (st->fixed && !ql_bytes(cg->m, 2, sizeof(int32_t), &mult))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    st->off_mult = ql_take(&off, mult);
    st->scratch = off;
    if (off == SIZE_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    return QF_OK;
}

static size_t qconv_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return state ? ((const qconv_state *)state)->scratch : 0;
}

static qf_status qconv_forward(const qf_kernel_io *io)
{
    const qconv_state *st = io->state;
    const qconv_slots *sl = st->qlinear ? &qconv_qlinear : &qconv_integer;
    QF_TRY(ql_check_scratch(io, st->scratch));
    const qf_conv_geom *cg = &st->geom;
    const qf_tensor *x = io->in[sl->x], *w = io->in[sl->w];
    const qf_tensor *xzp = qconv_in(io->node, io->in, io->nin, sl->x_zp);
    const qf_tensor *wzp = qconv_in(io->node, io->in, io->nin, sl->w_zp);
    const qf_tensor *b = qconv_in(io->node, io->in, io->nin, sl->b);
    qf_tensor *y = io->out[0];
    if (cg->n == 0 || cg->m == 0 || cg->out_plane == 0) return QF_OK;
    char *scr = io->scratch;
    int16_t *w16 = (int16_t *)(scr + st->off_w16), *col = (int16_t *)(scr + st->off_col);
    int32_t *wz = (int32_t *)(scr + st->off_wzp);
    ql_read_zp(wzp, st->w_zp_per, cg->m, wz);
    qf_int8_widen_rows(w->data, st->wdt, wz, true, cg->m, cg->k, w16);
    const int32_t xz = ql_zp_at(xzp, 0);
    const int32_t *bias = b ? b->data : NULL;

    qf_int8_requant rq = {0};
    int32_t *acc = NULL;
    if (st->qlinear) {
        float *scale = (float *)(scr + st->off_scale);
        const float xs = *(const float *)io->in[sl->x_scale]->data, ys = *(const float *)io->in[sl->y_scale]->data;
        const float *ws = io->in[sl->w_scale]->data;
        int64_t nch = st->w_scale_per ? cg->m : 1;
        for (int64_t c = 0; c < nch; c++) scale[c] = qf_int8_combined_scale(xs, ws[c], ys);
        rq.scale = scale;
        rq.per_channel = st->w_scale_per;
        rq.zp = ql_zp_at(io->in[sl->y_zp], 0);
        rq.dtype = st->ydt;
        rq.lo = st->lo;
        rq.hi = st->hi;
        acc = (int32_t *)(scr + st->off_acc);
        if (st->fixed) {
            /* TFLite: the real multiplier x_scale * w_scale / y_scale in double. */
            int32_t *mult = (int32_t *)(scr + st->off_mult), *shift = mult + cg->m;
            double real[1];
            for (int64_t c = 0; c < nch; c++) {
                real[0] = (double)xs * (double)ws[c] / (double)ys;
                QF_TRY(qf_int8_requant_prepare_fixed(io->node, real, 1, st->acc_bound, mult + c, shift + c));
            }
            rq.multiplier = mult;
            rq.shift = shift;
        }
    }
    for (int64_t bn = 0; bn < cg->n; bn++)
        for (int64_t g = 0; g < cg->group; g++) {
            int64_t row0 = bn * cg->m + g * cg->mg; /* first output row of this block */
            if (!st->qlinear) {
                int32_t *yb = (int32_t *)y->data + row0 * cg->out_plane;
                qf_int8_conv_group(cg, x->data, st->xdt, xz, bn, g, w16, bias, col, yb);
                continue;
            }
            qf_int8_conv_group(cg, x->data, st->xdt, xz, bn, g, w16, bias, col, acc);
            /* int8 and uint8 are one byte: the block starts at row0 * plane. */
            if (st->fixed)
                qf_int8_requant_fixed(&rq, g * cg->mg, cg->mg, cg->out_plane, acc, (char *)y->data + row0 * cg->out_plane);
            else
                qf_int8_requant_float(&rq, g * cg->mg, cg->mg, cg->out_plane, acc,
                                      (char *)y->data + row0 * cg->out_plane);
        }
    return QF_OK;
}

static qf_status qf_qlinear_conv_forward_f32(const qf_kernel_io *io) { return qconv_forward(io); }
static qf_status qf_conv_integer_forward_f32(const qf_kernel_io *io) { return qconv_forward(io); }

static qf_status qf_qlinear_conv_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qconv_infer(n, true);
}

static qf_status qf_qlinear_conv_prepare(const qf_kernel_io *io, void *state)
{
    return qf_qconv_prepare(io, true, state);
}

static qf_status qf_conv_integer_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qconv_infer(n, false);
}

static qf_status qf_conv_integer_prepare(const qf_kernel_io *io, void *state)
{
    return qf_qconv_prepare(io, false, state);
}

/* --- matrix products --------------------------------------------------------- */

/* numpy matmul's view of A [..., M, K] and B [..., K, N] (1-D A is [1, K],
 * 1-D B is [K, 1], those dims dropped from the output); batch dims broadcast. */
typedef struct qmm_state {
    int64_t M, K, N;
    int na, nb;
    int64_t ba[QF_MAX_DIMS], bb[QF_MAX_DIMS];
    bool qlinear;
    qf_dtype adt, bdt, ydt;
    bool a_zp_per, b_zp_per, b_scale_per;
    /* qfold's int8 executor (src/quant/lower.c), as for QLinearConv:
     * qfold_requant = 1 (TFLite's fixed point, as its BATCH_MATMUL /
     * FULLY_CONNECTED), qfold_clamp = [lo, hi]. */
    bool fixed;
    int32_t lo, hi;
    int64_t acc_bound;
    size_t off_a16, off_b16, off_acc, off_scale, off_azp, off_bzp, off_mult, scratch;
} qmm_state;

typedef struct qmm_slots {
    int a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp;
} qmm_slots;

static const qmm_slots qmm_qlinear = {0, 1, 2, 3, 4, 5, 6, 7};
static const qmm_slots qmm_integer = {0, -1, 2, 1, -1, 3, -1, -1};

static qf_status qmm_check(const qf_node *n, const qf_tensor *const *in, int nin, bool qlinear, qmm_state *st,
                           int *ny, int64_t ydims[QF_MAX_DIMS])
{
    const qmm_slots *sl = qlinear ? &qmm_qlinear : &qmm_integer;
    const qf_tensor *a = in[sl->a], *b = in[sl->b];
    memset(st, 0, sizeof *st);
    st->qlinear = qlinear;
    QF_TRY(ql_check_q8(n, a, "input A"));
    QF_TRY(ql_check_q8(n, b, "input B"));
    st->adt = a->dtype;
    st->bdt = b->dtype;
    char sa[128], sb[128];
    if (a->ndim < 1 || b->ndim < 1)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): operands must have rank >= 1, have shapes %s and %s", n->name,
                        qf_op_label(n), qf_shape_str(a->ndim, a->dims, sa, sizeof sa),
                        qf_shape_str(b->ndim, b->dims, sb, sizeof sb));
    st->M = a->ndim >= 2 ? a->dims[a->ndim - 2] : 1;
    st->K = a->dims[a->ndim - 1];
    int64_t kb = b->ndim >= 2 ? b->dims[b->ndim - 2] : b->dims[0];
    st->N = b->ndim >= 2 ? b->dims[b->ndim - 1] : 1;
    st->na = a->ndim > 2 ? a->ndim - 2 : 0;
    st->nb = b->ndim > 2 ? b->ndim - 2 : 0;
    memcpy(st->ba, a->dims, sizeof(int64_t) * (size_t)st->na);
    memcpy(st->bb, b->dims, sizeof(int64_t) * (size_t)st->nb);
    bool kdiff = st->K >= 0 && kb >= 0 && st->K != kb;
    if (kdiff || !qf_broadcast_shape(st->na, st->ba, st->nb, st->bb, ny, ydims))
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): shapes %s and %s do not fit (%s)", n->name, qf_op_label(n),
                        qf_shape_str(a->ndim, a->dims, sa, sizeof sa), qf_shape_str(b->ndim, b->dims, sb, sizeof sb),
                        kdiff ? "inner dimensions differ" : "batch dimensions do not broadcast");
    if (a->ndim >= 2) ydims[(*ny)++] = st->M;
    if (b->ndim >= 2) ydims[(*ny)++] = st->N;
    bool per;
    const qf_tensor *azp = sl->a_zp < nin ? in[sl->a_zp] : NULL, *bzp = sl->b_zp < nin ? in[sl->b_zp] : NULL;
    /* QLinearMatMul's a is per tensor (as onnxruntime); MatMulInteger's
     * a_zero_point may be per row of A. */
    if (azp) QF_TRY(ql_check_qparam(n, azp, "a_zero_point", a->dtype, !qlinear, st->M, "row of A", &st->a_zp_per));
    if (bzp) QF_TRY(ql_check_qparam(n, bzp, "b_zero_point", b->dtype, true, st->N, "column of B", &st->b_zp_per));
    st->ydt = QF_DTYPE_I32;
    if (qlinear) {
        QF_TRY(ql_check_qparam(n, in[sl->a_scale], "a_scale", QF_DTYPE_F32, false, 1, "", &per));
        QF_TRY(ql_check_qparam(n, in[sl->b_scale], "b_scale", QF_DTYPE_F32, true, st->N, "column of B",
                               &st->b_scale_per));
        QF_TRY(ql_check_qparam(n, in[sl->y_scale], "y_scale", QF_DTYPE_F32, false, 1, "", &per));
        const qf_tensor *yzp = in[sl->y_zp];
        if (!ql_is_q8(yzp->dtype))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): y_zero_point has dtype %s, expected int8 or uint8",
                            n->name, qf_op_label(n), qf_dtype_name(yzp->dtype));
        QF_TRY(ql_check_qparam(n, yzp, "y_zero_point", yzp->dtype, false, 1, "", &per));
        st->ydt = yzp->dtype;
    }
    return QF_OK;
}

static qf_status qmm_infer(qf_node *n, bool qlinear)
{
    QF_TRY(ql_need(n, qlinear ? 8 : 2));
    const qf_tensor *in[8] = {0};
    for (int i = 0; i < n->ninputs && i < 8; i++) in[i] = ql_opt(n, i);
    qmm_state st;
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qmm_check(n, in, n->ninputs, qlinear, &st, &ny, y));
    qf_set_output(n, 0, st.ydt, ny, y);
    return QF_OK;
}

static qf_status qmm_prepare(const qf_kernel_io *io, bool qlinear, qmm_state *st)
{
    const qf_node *n = io->node;
    QF_TRY(ql_need(n, qlinear ? 8 : 2));
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qmm_check(n, io->in, io->nin, qlinear, st, &ny, y));
    const qmm_slots *sl = qlinear ? &qmm_qlinear : &qmm_integer;
    if (st->M < 0 || st->K < 0 || st->N < 0)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): shapes are not known at prepare", n->name, qf_op_label(n));
    const qf_tensor *azp = sl->a_zp < io->nin ? io->in[sl->a_zp] : NULL;
    const qf_tensor *bzp = sl->b_zp < io->nin ? io->in[sl->b_zp] : NULL;
    QF_TRY(qf_int8_check_k(n, st->K, ql_range_abs(st->adt, azp), ql_range_abs(st->bdt, bzp)));
    size_t a16, b16, acc, scale, azb, bzb, off = 0;
    if (!ql_bytes(st->M, st->K, sizeof(int16_t), &a16) || !ql_bytes(st->N, st->K, sizeof(int16_t), &b16) ||
        !ql_bytes(st->M, st->N, sizeof(int32_t), &acc) || !ql_bytes(st->N, 1, sizeof(float), &scale) ||
        !ql_bytes(st->M, 1, sizeof(int32_t), &azb) || !ql_bytes(st->N, 1, sizeof(int32_t), &bzb))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    st->off_a16 = ql_take(&off, a16);
    st->off_b16 = ql_take(&off, b16);
    st->off_acc = ql_take(&off, qlinear ? acc : 0);
    st->off_scale = ql_take(&off, qlinear ? scale : 0);
    st->off_azp = ql_take(&off, azb);
    st->off_bzp = ql_take(&off, bzb);
    QF_TRY(ql_out_attrs(n, qlinear, st->ydt, &st->fixed, &st->lo, &st->hi));
    st->acc_bound = st->K * (int64_t)ql_range_abs(st->adt, azp) * (int64_t)ql_range_abs(st->bdt, bzp);
    size_t mult = 0;
    if (st->fixed && !ql_bytes(st->N, 2, sizeof(int32_t), &mult))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    st->off_mult = ql_take(&off, mult);
    st->scratch = off;
    if (off == SIZE_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scratch size overflows", n->name, qf_op_label(n));
    return QF_OK;
}

static size_t qmm_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return state ? ((const qmm_state *)state)->scratch : 0;
}

static qf_status qmm_forward(const qf_kernel_io *io)
{
    const qmm_state *st = io->state;
    const qmm_slots *sl = st->qlinear ? &qmm_qlinear : &qmm_integer;
    QF_TRY(ql_check_scratch(io, st->scratch));
    const qf_tensor *a = io->in[sl->a], *b = io->in[sl->b];
    const qf_tensor *azp = sl->a_zp < io->nin ? io->in[sl->a_zp] : NULL;
    const qf_tensor *bzp = sl->b_zp < io->nin ? io->in[sl->b_zp] : NULL;
    qf_tensor *y = io->out[0];
    const int64_t M = st->M, K = st->K, N = st->N;
    if (qf_tensor_numel(y) == 0) return QF_OK;
    char *scr = io->scratch;
    int16_t *a16 = (int16_t *)(scr + st->off_a16), *b16 = (int16_t *)(scr + st->off_b16);
    int32_t *az = (int32_t *)(scr + st->off_azp), *bz = (int32_t *)(scr + st->off_bzp);
    ql_read_zp(azp, st->a_zp_per, M, az);
    ql_read_zp(bzp, st->b_zp_per, N, bz);

    qf_int8_requant rq = {0};
    int32_t *acc = NULL;
    if (st->qlinear) {
        float *scale = (float *)(scr + st->off_scale);
        const float as = *(const float *)io->in[sl->a_scale]->data, ys = *(const float *)io->in[sl->y_scale]->data;
        const float *bs = io->in[sl->b_scale]->data;
        int64_t nch = st->b_scale_per ? N : 1;
        for (int64_t c = 0; c < nch; c++) scale[c] = qf_int8_combined_scale(as, bs[c], ys);
        rq.scale = scale;
        rq.per_channel = st->b_scale_per;
        rq.per_col = true;
        rq.zp = ql_zp_at(io->in[sl->y_zp], 0);
        rq.dtype = st->ydt;
        rq.lo = st->lo;
        rq.hi = st->hi;
        acc = (int32_t *)(scr + st->off_acc);
        if (st->fixed) {
            /* TFLite: the real multiplier a_scale * b_scale / y_scale in double. */
            int32_t *mult = (int32_t *)(scr + st->off_mult), *shift = mult + N;
            for (int64_t c = 0; c < nch; c++) {
                double real = (double)as * (double)bs[c] / (double)ys;
                QF_TRY(qf_int8_requant_prepare_fixed(io->node, &real, 1, st->acc_bound, mult + c, shift + c));
            }
            rq.multiplier = mult;
            rq.shift = shift;
        }
    }

    /* One GEMM per output batch entry; the batch index walks A's and B's
     * (broadcast) batch dims like an elementwise op over the batch shapes.
     * B^T is widened again only when its batch entry changes. */
    int nyb;
    int64_t yb[QF_MAX_DIMS];
    qf_broadcast_shape(st->na, st->ba, st->nb, st->bb, &nyb, yb);
    qf_tensor va, vb;
    qf_tensor_view(&va, a->dtype, st->na, st->ba, NULL);
    qf_tensor_view(&vb, b->dtype, st->nb, st->bb, NULL);
    const qf_tensor *ops[2] = {&va, &vb};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, nyb, yb, 2, ops);
    const char *pa = a->data, *pb = b->data;
    const size_t ysz = qf_dtype_size(y->dtype);
    int64_t last_b = -1;
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        for (int64_t i = 0; i < it.len; i++) {
            int64_t ia = it.off[0] + i * it.step[0], ib = it.off[1] + i * it.step[1], iy = r * it.len + i;
            qf_int8_widen_rows(pa + ia * M * K, st->adt, az, true, M, K, a16);
            if (ib != last_b) {
                qf_int8_widen_cols_t(pb + ib * K * N, st->bdt, bz, true, K, N, b16);
                last_b = ib;
            }
            char *yo = (char *)y->data + (size_t)(iy * M * N) * ysz;
            if (!st->qlinear) {
                qf_int8_gemm_nt(M, N, K, a16, b16, NULL, (int32_t *)yo, N);
                continue;
            }
            qf_int8_gemm_nt(M, N, K, a16, b16, NULL, acc, N);
            if (st->fixed) qf_int8_requant_fixed(&rq, 0, M, N, acc, yo);
            else qf_int8_requant_float(&rq, 0, M, N, acc, yo);
        }
    }
    return QF_OK;
}

static qf_status qf_qlinear_matmul_forward_f32(const qf_kernel_io *io) { return qmm_forward(io); }
static qf_status qf_matmul_integer_forward_f32(const qf_kernel_io *io) { return qmm_forward(io); }

static qf_status qf_qlinear_matmul_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qmm_infer(n, true);
}

static qf_status qf_qlinear_matmul_prepare(const qf_kernel_io *io, void *state)
{
    return qmm_prepare(io, true, state);
}

static qf_status qf_matmul_integer_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qmm_infer(n, false);
}

static qf_status qf_matmul_integer_prepare(const qf_kernel_io *io, void *state)
{
    return qmm_prepare(io, false, state);
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_qlinear_conv_kernels = {
    .infer = qf_qlinear_conv_infer,
    .prepare = qf_qlinear_conv_prepare,
    .state_size = sizeof(qconv_state),
    .scratch = qconv_scratch,
    .forward_f32 = qf_qlinear_conv_forward_f32,
};

const qf_op_kernels qf_conv_integer_kernels = {
    .infer = qf_conv_integer_infer,
    .prepare = qf_conv_integer_prepare,
    .state_size = sizeof(qconv_state),
    .scratch = qconv_scratch,
    .forward_f32 = qf_conv_integer_forward_f32,
};

const qf_op_kernels qf_qlinear_matmul_kernels = {
    .infer = qf_qlinear_matmul_infer,
    .prepare = qf_qlinear_matmul_prepare,
    .state_size = sizeof(qmm_state),
    .scratch = qmm_scratch,
    .forward_f32 = qf_qlinear_matmul_forward_f32,
};

const qf_op_kernels qf_matmul_integer_kernels = {
    .infer = qf_matmul_integer_infer,
    .prepare = qf_matmul_integer_prepare,
    .state_size = sizeof(qmm_state),
    .scratch = qmm_scratch,
    .forward_f32 = qf_matmul_integer_forward_f32,
};
