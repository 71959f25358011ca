/* QLinearConv on oneDNN: the integer executor's convolution (src/quant/lower.c
 * lowers every DQ -> Conv/Gemm -> [act] -> Q group into one) as an int8
 * oneDNN convolution, VNNI where the CPU has it.
 *
 * By default (exact):
 *
 *   X (s8 / u8, per-tensor zero point)  ─reorder─▶ oneDNN's layout (nhwc)
 *   W (s8, zero point 0)  reordered once, at prepare
 *   conv -> s32 accumulators (oneDNN: the input zero point compensated in
 *        int32; no output scales, no bias, no post-ops), channels-last in
 *        the plan's scratch
 *   + s32 bias -> qfold's requantization (TFLite's MultiplyByQuantizedMultiplier:
 *        int8.h's qf_int8_requant_fixed_row, vectorized; ONNX's:
 *        qf_int8_requant_one_float) -> clamp
 *   Y (s8 / u8, NCHW or NHWC)
 *
 * The requantization gives the reference kernel's (qlinear.c) integers
 * element for element, so both engines agree, and with qfold_requant = 1
 * they are TFLite's. oneDNN's int8 convolution with an s32 destination and
 * nothing after the product stores its int32 sums as they are (checked
 * past 2^24 by tests/quant/int8_engines.py's models case; with output
 * scales or a bias it converts them to float first). The requantization
 * runs on qfold's threads (oneDNN's OpenMP team) over rows of the
 * accumulators (qf_int8_requant_fixed_row: integer AVX-512 / AVX2 lanes):
 * right after the primitive for a small convolution, or, past
 * QDNNL_CHUNK_SUMS sums, piece by piece, each thread running the primitive
 * on its own pieces and requantizing each while its sums are in cache (the
 * state below). Figures: bench/int8.md.
 *
 * With QFOLD_INT8=fast (qf_dnnl_int8_fast, opt-in, approximate) oneDNN
 * requantizes itself:
 *
 *   conv -> s32 accumulators (+ s32 bias) -> float * x_scale * w_scale[c] / y_scale
 *        -> round -> [clip to the fused activation's range] -> + y_zero_point -> saturate
 *   Y (s8 / u8)  ─reorder─▶ NCHW
 *
 * in float (round half to even): with qfold_requant = 1 (TFLite's
 * fixed-point multiplier) an output can differ from the reference by 1 LSB
 * (~0.1 % of a layer's outputs), and the 1-LSB differences compound over a
 * network (4 LSB on a ResNet-8's output); with ONNX's requantization (the
 * combined scale formed in float as ONNX Runtime does, rounded half to
 * even before the zero point is added) the results equal the reference's
 * (but for an accumulator and bias beyond 2^24, which oneDNN converts to
 * float apart). Declined on both paths (QF_ERR_UNSUPPORTED, no message, the
 * reference runs it): qparams that are not constants, a weight zero point
 * other than 0, uint8 weights, a multiplier the fixed-point path refuses,
 * anything oneDNN has no implementation for.
 *
 * Fast only: a residual qadd after the conv (the integer executor's int8 Add of the
 * conv's output C and another int8 activation R of its shape, TFLite's
 * arithmetic, src/ops/int8/qadd.c) is fused when the plan asks (qf_dnnl_can_fuse)
 * and the conv has no clamp of its own: the conv then writes the qadd's
 * output, with output scales s_x s_W[c] / s_r and the post-ops
 *
 *   binary add R -> linear (s_r / s_y, -zp_r s_r / s_y) -> round
 *   -> clip (the qadd's clamp less zp_y); + zp_y
 *
 * i.e. round((acc s_x s_W + (R - zp_r) s_r) / s_y) + zp_y in float, where
 * the unfused pair rounds and saturates C to int8 first and TFLite's Add
 * sums in 20-bit fixed point: the two differ by one LSB now and then (C's
 * rounding is half of s_c, at most one step of s_y when s_c <= 2 s_y, which
 * is asked), more only where C would saturate. The exact path leaves the
 * qadd to its reference kernel (a table lookup).
 *
 * The activation and output are NCHW or NHWC as the plan's layout says
 * (io->in_nhwc / out_nhwc bit 0: the integer executor's plans keep int8
 * activations channels-last between these convs, src/exec/plan_layout.c); a
 * reorder to and from the layout oneDNN picks runs only where that differs
 * (nhwc is its int8 layout on AVX-512 / VNNI, so none there; the exact
 * path's requantization writes NCHW itself). The reorders and the
 * accumulators use the plan's backend scratch, as does the user-managed
 * scratchpad.
 */
#include <string.h>

#include "backend/dnnl/dnnl_lib.h"
#include "core/parallel.h"
#include "ops/int8/int8.h"
#include "ops/int8/qlinear.h"

#define QDNNL_SLOTS 16 /* qf_parallel_threads()'s most */

typedef struct qdnnl_state {
    dnnl_primitive_t conv, reorder_in, reorder_out; /* reorders NULL when NCHW is oneDNN's layout */
    dnnl_memory_t x_user, x_conv, w, b, y_conv, y_user, pad, res; /* res: a fused qadd's other operand */
    void *w_raw;                 /* the reordered weights (qf_malloc), w's handle */
    size_t off_x, off_y, off_pad, off_acc, scratch;
    bool has_bias;
    /* The exact path: y_conv holds int32 accumulators (channels-last, at
     * off_acc), requantized by qfold with rq (its arrays in rq_raw, qf_malloc)
     * into Y of `rows` = N x out_plane positions of m channels. */
    bool exact, fixed, y_nhwc;
    qf_int8_requant rq;
    qf_int8_row_params row; /* m entries each, in rq_raw (bias: ONNX's requantization too) */
    void *rq_raw;
    int64_t rows, m, plane;
    /* The exact path runs the convolution in `chunks` equal pieces (the
     * primitive is built for one; qdnnl_chunks): whole images, or for a
     * pointwise convolution runs of output positions. With pieces, each of
     * `slots` threads takes a share of them and, for each, runs the
     * primitive itself (one thread: inside qfold's parallel job, oneDNN's
     * OpenMP regions do not fork) on its own stream, memories, scratchpad
     * and sums (acc_bytes at off_acc + slot * acc_bytes, its scratchpad at
     * off_pad + slot * pad_bytes), then requantizes the piece while it is in
     * its cache. No thread waits for another between two pieces. */
    int64_t chunks;
    size_t x_piece; /* X's bytes of one piece */
    int slots;
    size_t acc_bytes, pad_bytes;
    dnnl_stream_t slot_stream[QDNNL_SLOTS];
    dnnl_memory_t slot_x[QDNNL_SLOTS], slot_y[QDNNL_SLOTS], slot_pad[QDNNL_SLOTS];
} qdnnl_state;

static void qdnnl_release(void *state)
{
    qdnnl_state *s = state;
    if (!s) return;
    dnnl_primitive_t prims[] = {s->conv, s->reorder_in, s->reorder_out};
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i]) QF_DNNL(primitive_destroy)(prims[i]);
    dnnl_memory_t mems[] = {s->x_user, s->x_conv, s->w, s->b, s->y_conv, s->y_user, s->pad, s->res};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) QF_DNNL(memory_destroy)(mems[i]);
    for (int t = 0; t < QDNNL_SLOTS; t++) {
        if (s->slot_x[t]) QF_DNNL(memory_destroy)(s->slot_x[t]);
        if (s->slot_y[t]) QF_DNNL(memory_destroy)(s->slot_y[t]);
        if (s->slot_pad[t]) QF_DNNL(memory_destroy)(s->slot_pad[t]);
        if (s->slot_stream[t]) QF_DNNL(stream_destroy)(s->slot_stream[t]);
    }
    qf_free(s->w_raw);
    qf_free(s->rq_raw);
    memset(s, 0, sizeof *s);
}

static size_t qdnnl_take(size_t *off, size_t bytes)
{
    size_t at = (*off + 63) / 64 * 64;
    *off = bytes > SIZE_MAX - at ? SIZE_MAX : at + bytes;
    return at;
}

/* A constant's data at prepare, or NULL (a graph input: declined). */
static const void *qdnnl_const(const qf_kernel_io *io, int i)
{
    return i < io->nin && io->in[i] ? io->in[i]->data : NULL;
}

/* One zero point's value (int8 / uint8). */
static int32_t qdnnl_zp(const qf_tensor *t, int64_t i)
{
    return t->dtype == QF_DTYPE_U8 ? ((const uint8_t *)t->data)[i] : ((const int8_t *)t->data)[i];
}

/* The primitive descriptor of an op descriptor (declined when oneDNN has no
 * implementation). */
static qf_status qdnnl_primitive(const qf_node *n, const_dnnl_op_desc_t desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what)
{
    const qf_dnnl_lib *d = qf_dnnl();
    return qf_dnnl_try(n, QF_DNNL(primitive_desc_create)(pd, desc, attr, d->engine, NULL), what);
}

/* A reorder src -> dst; its scratchpad size raised into *pad. */
static qf_status qdnnl_reorder(const qf_node *n, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                               dnnl_primitive_t *prim, size_t *pad)
{
    const qf_dnnl_lib *d = qf_dnnl();
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    qf_status st = qf_dnnl_check(n, QF_DNNL(primitive_attr_create)(&attr), "reorder attributes");
    if (st == QF_OK)
        st = qf_dnnl_check(n, QF_DNNL(primitive_attr_set_scratchpad_mode)(attr, dnnl_scratchpad_mode_user),
                           "reorder attributes");
    if (st == QF_OK)
        st = qf_dnnl_try(n, QF_DNNL(reorder_primitive_desc_create)(&pd, src, d->engine, dst, d->engine, attr),
                         "reorder");
    if (st == QF_OK) {
        size_t sz = QF_DNNL(memory_desc_get_size)(QF_DNNL(primitive_desc_query_md)(pd, dnnl_query_scratchpad_md, 0));
        if (sz > *pad) *pad = sz;
        st = qf_dnnl_primitive_create(n, prim, pd, "reorder");
    }
    if (pd) QF_DNNL(primitive_desc_destroy)(pd);
    if (attr) QF_DNNL(primitive_attr_destroy)(attr);
    return st;
}

static qf_status qdnnl_memory(const qf_node *n, dnnl_memory_t *m, const dnnl_memory_desc_t *md)
{
    return qf_dnnl_check(n, QF_DNNL(memory_create)(m, md, qf_dnnl()->engine, DNNL_MEMORY_NONE), "memory");
}

static qf_status qdnnl_exec(const qf_node *n, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                            const char *what)
{
    return qf_dnnl_check(n, QF_DNNL(primitive_execute)(p, qf_dnnl_lib_.stream, nargs, args), what);
}

/* The dims of the weights [M, C/g, k...] as oneDNN's (g)oi(d)(h)w; returns
 * their count. */
static int qdnnl_weight_dims(const qf_conv_geom *cg, const qf_tensor *w, dnnl_dims_t dims)
{
    int nd = 0;
    if (cg->group > 1) dims[nd++] = cg->group;
    dims[nd++] = cg->mg;
    dims[nd++] = cg->cg;
    for (int i = 0; i < cg->s.rank; i++) dims[nd++] = w->dims[2 + i];
    return nd;
}

/* The weights reordered into the convolution's layout (with the
 * compensation oneDNN keeps for s8 activations) in memory the state owns. */
static qf_status qdnnl_weights(const qf_node *n, qdnnl_state *s, const qf_conv_geom *cg, const qf_tensor *w,
                               const dnnl_memory_desc_t *want)
{
    const qf_dnnl_lib *d = qf_dnnl();
    dnnl_dims_t dims;
    const int nd = qdnnl_weight_dims(cg, w, dims);
    static const dnnl_format_tag_t plain[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde, dnnl_abcdef};
    dnnl_memory_desc_t user;
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(&user, nd, dims, dnnl_s8, plain[nd]), "weights"));
    size_t bytes = QF_DNNL(memory_desc_get_size)(want);
    s->w_raw = qf_malloc(bytes + 64);
    if (!s->w_raw) return qf_error(QF_ERR_NOMEM, "out of memory");
    void *aligned = (void *)(((uintptr_t)s->w_raw + 63) / 64 * 64);
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_create)(&s->w, want, d->engine, aligned), "weights"));
    dnnl_memory_t src = NULL, padm = NULL;
    dnnl_primitive_t re = NULL;
    void *pad_raw = NULL;
    size_t pad = 0;
    qf_status st = qf_dnnl_check(n, QF_DNNL(memory_create)(&src, &user, d->engine, w->data), "weights");
    if (st == QF_OK) st = qdnnl_reorder(n, &user, want, &re, &pad);
    if (st == QF_OK) {
        /* The reorder's scratchpad (the compensation's partial sums), for this
         * one call. */
        dnnl_memory_desc_t pmd;
        dnnl_dims_t pd = {(dnnl_dim_t)(pad ? pad : 1)};
        pad_raw = qf_malloc(pad ? pad : 1);
        if (!pad_raw) st = qf_error(QF_ERR_NOMEM, "out of memory");
        if (st == QF_OK)
            st = qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(&pmd, 1, pd, dnnl_u8, dnnl_a), "scratchpad");
        if (st == QF_OK) st = qf_dnnl_check(n, QF_DNNL(memory_create)(&padm, &pmd, d->engine, pad_raw), "scratchpad");
    }
    if (st == QF_OK) {
        dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, s->w}, {DNNL_ARG_SCRATCHPAD, padm}};
        st = qdnnl_exec(n, re, 3, args, "weight reorder");
    }
    if (st == QF_OK) st = qf_dnnl_check(n, QF_DNNL(stream_wait)(d->stream), "weight reorder");
    if (re) QF_DNNL(primitive_destroy)(re);
    if (src) QF_DNNL(memory_destroy)(src);
    if (padm) QF_DNNL(memory_destroy)(padm);
    qf_free(pad_raw);
    return st;
}

/* A fused residual qadd: the conv's output C and the other operand R (its
 * scales and zero points), the qadd's output scale, zero point and clamp. */
typedef struct qdnnl_res {
    float sc, sr, sy;
    int32_t zc, zr, zy, lo, hi;
} qdnnl_res;

/* A scalar constant of dtype dt (float32 or int8) as a double, or false. */
static bool qdnnl_scalar(const qf_value *v, qf_dtype dt, double *out)
{
    if (!v || !qf_value_is_const(v) || v->type.dtype != dt || qf_tensor_numel(&v->type) != 1) return false;
    *out = dt == QF_DTYPE_F32 ? (double)*(const float *)v->type.data : (double)*(const int8_t *)v->type.data;
    return true;
}

/* The qadd f reading the output of conv p as a fused residual: int8 operands
 * of one shape (no broadcasting), constant per-tensor qparams with
 * s_c <= 2 s_y (C's skipped rounding is then within one output step), the
 * qadd's clamp; false when it is not one. */
static bool qdnnl_res_of(const qf_node *p, const qf_node *f, qdnnl_res *r)
{
    if (f->op != QF_OP_QADD || f->ninputs != 8 || f->noutputs != 1 || p->noutputs != 1) return false;
    const qf_value *c = p->outputs[0];
    const int ic = f->inputs[0] == c ? 0 : f->inputs[3] == c ? 3 : -1, ir = 3 - ic;
    if (ic < 0 || f->inputs[ir] == c || !f->inputs[ir]) return false;
    const qf_tensor *ct = &c->type, *rt = &f->inputs[ir]->type, *yt = &f->outputs[0]->type;
    if (ct->dtype != QF_DTYPE_I8 || rt->dtype != QF_DTYPE_I8 || yt->dtype != QF_DTYPE_I8 ||
        !qf_shape_equal(ct->ndim, ct->dims, rt->ndim, rt->dims) ||
        !qf_shape_equal(ct->ndim, ct->dims, yt->ndim, yt->dims))
        return false;
    double v[6];
    if (!qdnnl_scalar(f->inputs[ic + 1], QF_DTYPE_F32, &v[0]) || !qdnnl_scalar(f->inputs[ic + 2], QF_DTYPE_I8, &v[1]) ||
        !qdnnl_scalar(f->inputs[ir + 1], QF_DTYPE_F32, &v[2]) || !qdnnl_scalar(f->inputs[ir + 2], QF_DTYPE_I8, &v[3]) ||
        !qdnnl_scalar(f->inputs[6], QF_DTYPE_F32, &v[4]) || !qdnnl_scalar(f->inputs[7], QF_DTYPE_I8, &v[5]))
        return false;
    if (!(v[0] > 0.0 && v[2] > 0.0 && v[4] > 0.0 && v[0] <= 2.0 * v[4])) return false;
    *r = (qdnnl_res){.sc = (float)v[0], .zc = (int32_t)v[1], .sr = (float)v[2],
                     .zr = (int32_t)v[3], .sy = (float)v[4], .zy = (int32_t)v[5]};
    if (qf_int8_clamp_attr(f, &r->lo, &r->hi) != QF_OK) {
        qf_error_clear();
        return false;
    }
    return true;
}

bool qf_qdnnl_can_fuse(const qf_node *producer, const qf_node *follower)
{
    qdnnl_res r;
    return qf_dnnl_int8_fast() && qdnnl_res_of(producer, follower, &r);
}

/* The exact path's requantization: the reference kernel's parameters
 * (qconv_forward in qlinear.c: TFLite's multiplier and shift from
 * x_scale * w_scale[c] / y_scale in double, or ONNX's combined float scale)
 * in memory the state owns. A multiplier the fixed-point path refuses is
 * declined (the reference kernel then reports it at run time). */
static qf_status qdnnl_requant_prepare(const qf_kernel_io *io, const qf_qconv_state *ref, qdnnl_state *s)
{
    const qf_node *n = io->node;
    const float xs = *(const float *)io->in[1]->data, ys = *(const float *)io->in[6]->data;
    const float *ws = io->in[4]->data;
    const int64_t m = ref->geom.m, nch = ref->w_scale_per ? m : 1;
    /* Three blocks of m entries: the multipliers (or the float scales), the
     * shifts, the bias (0 without one): one entry per output channel, a
     * per-tensor value repeated, as qf_int8_requant_fixed_row reads them. */
    s->rq_raw = qf_malloc((size_t)m * (3 * sizeof(int32_t) + sizeof(double)));
    if (!s->rq_raw) return qf_error(QF_ERR_NOMEM, "out of memory");
    double *real = s->rq_raw; /* first: aligned for doubles */
    int32_t *mult = (int32_t *)(real + m), *shift = mult + m, *bias = shift + m;
    float *scale = (float *)mult;
    for (int64_t c = 0; c < nch; c++) {
        if (!ref->fixed) {
            scale[c] = qf_int8_combined_scale(xs, ws[c], ys);
            continue;
        }
        double m_real = (double)xs * (double)ws[c] / (double)ys;
        if (qf_int8_requant_prepare_fixed(n, &m_real, 1, ref->acc_bound, mult + c, shift + c) != QF_OK) {
            qf_error_clear();
            return QF_ERR_UNSUPPORTED;
        }
    }
    for (int64_t c = nch; ref->fixed && c < m; c++) {
        mult[c] = mult[0];
        shift[c] = shift[0];
    }
    if (ref->fixed) qf_int8_requant_row_prepare(m, mult, real);
    const qf_tensor *b = io->nin > 8 ? io->in[8] : NULL;
    for (int64_t c = 0; c < m; c++) bias[c] = b ? ((const int32_t *)b->data)[c] : 0;
    s->rq = (qf_int8_requant){.scale = ref->fixed ? NULL : scale,
                              .multiplier = ref->fixed ? mult : NULL,
                              .shift = ref->fixed ? shift : NULL,
                              .per_channel = ref->w_scale_per,
                              .per_col = true,
                              .zp = qdnnl_zp(io->in[7], 0),
                              .lo = ref->lo,
                              .hi = ref->hi,
                              .dtype = ref->ydt};
    s->row = (qf_int8_row_params){.multiplier = mult, .shift = shift, .bias = bias, .real = real};
    s->fixed = ref->fixed;
    return QF_OK;
}

/* The convolution's attributes: output scales per channel, the input's and
 * output's zero points, the clamp of a fused activation; with a fused
 * residual (res), its post-ops and the binary operand's descriptor res_md. */
static qf_status qdnnl_attr(const qf_kernel_io *io, const qf_qconv_state *ref, const qdnnl_res *res,
                            const dnnl_memory_desc_t *res_md, bool exact, dnnl_primitive_attr_t attr)
{
    const qf_node *n = io->node;
    if (exact) {
        /* The int32 accumulators only: the input's zero point is the one
         * thing oneDNN applies (compensated in int32). */
        const int32_t xz = io->in[2] ? qdnnl_zp(io->in[2], 0) : 0;
        QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_attr_set_scratchpad_mode)(attr, dnnl_scratchpad_mode_user),
                             "attributes"));
        if (xz)
            QF_TRY(qf_dnnl_try(n, QF_DNNL(primitive_attr_set_zero_points)(attr, DNNL_ARG_SRC, 1, 0, &xz),
                               "zero points"));
        return QF_OK;
    }
    const qf_conv_geom *cg = &ref->geom;
    const float xs = *(const float *)io->in[1]->data, ys = *(const float *)io->in[6]->data;
    const float *ws = io->in[4]->data;
    const int64_t nch = ref->w_scale_per ? cg->m : 1;
    float scale[4096];
    if (nch > (int64_t)(sizeof scale / sizeof scale[0])) return QF_ERR_UNSUPPORTED;
    for (int64_t c = 0; c < nch; c++) {
        if (ref->fixed) {
            /* The multiplier TFLite approximates in fixed point; refused
             * there (the reference then reports it) means declined here. */
            double real = (double)xs * (double)ws[c] / (double)ys;
            int32_t mult, shift;
            if (qf_int8_requant_prepare_fixed(n, &real, 1, ref->acc_bound, &mult, &shift) != QF_OK) {
                qf_error_clear();
                return QF_ERR_UNSUPPORTED;
            }
            scale[c] = (float)real;
        } else {
            scale[c] = qf_int8_combined_scale(xs, ws[c], ys);
        }
        /* Fused residual: the accumulator in units of R's scale. */
        if (res) scale[c] = (float)((double)xs * (double)ws[c] / (double)res->sr);
    }
    QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_attr_set_scratchpad_mode)(attr, dnnl_scratchpad_mode_user),
                         "attributes"));
    QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_attr_set_output_scales)(attr, nch, nch > 1 ? 1 << 1 : 0, scale),
                         "output scales"));
    const int32_t xz = io->in[2] ? qdnnl_zp(io->in[2], 0) : 0, yz = res ? res->zy : qdnnl_zp(io->in[7], 0);
    if (xz)
        QF_TRY(qf_dnnl_try(n, QF_DNNL(primitive_attr_set_zero_points)(attr, DNNL_ARG_SRC, 1, 0, &xz), "zero points"));
    if (yz)
        QF_TRY(qf_dnnl_try(n, QF_DNNL(primitive_attr_set_zero_points)(attr, DNNL_ARG_DST, 1, 0, &yz), "zero points"));
    /* oneDNN adds the output zero point after its post-ops and rounds after
     * that: a round post-op (half to even) first makes it round(v) + zp, as
     * ONNX and the reference compute (round(v + zp) differs at ties when zp
     * is odd). Then the clamp of a fused activation: on integers, clipping
     * before adding zp equals clamping after it. A clamp that is the dtype's
     * whole range is the saturation oneDNN does anyway. */
    const int32_t dlo = ref->ydt == QF_DTYPE_U8 ? 0 : -128, dhi = ref->ydt == QF_DTYPE_U8 ? 255 : 127;
    dnnl_post_ops_t po = NULL;
    QF_TRY(qf_dnnl_check(n, QF_DNNL(post_ops_create)(&po), "post-ops"));
    qf_status st = QF_OK;
    if (res) {
        /* acc s_x s_W / s_r + R -> ((.) - zp_r) s_r / s_y -> round -> the
         * qadd's clamp (less zp_y, which oneDNN adds after). */
        const float k = res->sr / res->sy;
        st = qf_dnnl_check(n, QF_DNNL(post_ops_append_binary)(po, dnnl_binary_add, res_md), "binary post-op");
        if (st == QF_OK)
            st = qf_dnnl_check(
                n, QF_DNNL(post_ops_append_eltwise)(po, 1.0f, dnnl_eltwise_linear, k, -(float)res->zr * k),
                "post-ops");
        if (st == QF_OK)
            st = qf_dnnl_check(n, QF_DNNL(post_ops_append_eltwise)(po, 1.0f, dnnl_eltwise_round, 0.0f, 0.0f),
                               "post-ops");
        if (st == QF_OK)
            st = qf_dnnl_check(n,
                               QF_DNNL(post_ops_append_eltwise)(po, 1.0f, dnnl_eltwise_clip, (float)(res->lo - yz),
                                                                (float)(res->hi - yz)),
                               "post-ops");
        if (st == QF_OK) st = qf_dnnl_check(n, QF_DNNL(primitive_attr_set_post_ops)(attr, po), "post-ops");
        QF_DNNL(post_ops_destroy)(po);
        return st;
    }
    st = qf_dnnl_check(n, QF_DNNL(post_ops_append_eltwise)(po, 1.0f, dnnl_eltwise_round, 0.0f, 0.0f), "post-ops");
    if (st == QF_OK && (ref->lo != dlo || ref->hi != dhi))
        st = qf_dnnl_check(n,
                           QF_DNNL(post_ops_append_eltwise)(po, 1.0f, dnnl_eltwise_clip, (float)(ref->lo - yz),
                                                            (float)(ref->hi - yz)),
                           "post-ops");
    if (st == QF_OK) st = qf_dnnl_check(n, QF_DNNL(primitive_attr_set_post_ops)(attr, po), "post-ops");
    QF_DNNL(post_ops_destroy)(po);
    return st;
}

/* The exact path's pieces: the int32 sums of the whole batch (4 bytes an
 * output element, 4x what the int8 output takes) leave the caches before
 * qfold reads them back to requantize; pieces of at most QDNNL_CHUNK_SUMS
 * sums (128 KB) stay in L2 (32 K: mobilenet_v2 batch 8 ran 20 % faster
 * than with 64 K). A pointwise convolution (kernel 1, stride 1, no
 * padding) on channels-last data is the same convolution over any run of
 * positions (a 1 x run image); any other runs whole images. The pieces are
 * equal (a divisor of the positions or of the batch), so one primitive
 * serves them all; runs shorter than an eighth of the budget are not worth
 * a primitive call each (then images, or no pieces). Sets *flat for runs
 * of positions; returns the number of pieces (1: none). */
#define QDNNL_CHUNK_SUMS ((int64_t)32 * 1024)

static int64_t qdnnl_chunks(const qf_conv_geom *cg, bool x_nhwc, bool *flat)
{
    bool pw = x_nhwc;
    for (int i = 0; i < cg->s.rank; i++)
        pw = pw && cg->s.kernel[i] == 1 && cg->s.stride[i] == 1 && cg->s.pad_begin[i] == 0 &&
             cg->s.pad_end[i] == 0;
    const int64_t rows = cg->n * cg->out_plane;
    *flat = false;
    if (pw && rows * cg->m > QDNNL_CHUNK_SUMS) {
        int64_t d = QDNNL_CHUNK_SUMS / cg->m;
        while (d > 1 && rows % d) d--;
        if (d * cg->m * 8 >= QDNNL_CHUNK_SUMS) {
            *flat = true;
            return rows / d;
        }
    }
    int64_t d = cg->n;
    while (d > 1 && (cg->n % d || d * cg->out_plane * cg->m > QDNNL_CHUNK_SUMS)) d--;
    return cg->n / d;
}

static qf_status qdnnl_build(const qf_kernel_io *io, const qf_qconv_state *ref, const qdnnl_res *res,
                             qdnnl_state *s)
{
    const bool exact = s->exact;
    const qf_node *n = io->node;
    const qf_conv_geom *cg = &ref->geom;
    const qf_tensor *x = io->in[0], *w = io->in[3], *y = io->out[0];
    const qf_tensor *b = io->nin > 8 ? io->in[8] : NULL;
    dnnl_memory_desc_t x_md, x_any, w_any, b_md, y_md, y_any, r_md;
    QF_TRY(qf_dnnl_md(n, &x_md, x, io->in_nhwc & 1u));
    QF_TRY(qf_dnnl_md(n, &y_md, y, io->out_nhwc & 1u));
    /* The exact path's piece (qdnnl_chunks): X's and the sums' dims of one. */
    dnnl_dims_t xdims, ydims;
    for (int i = 0; i < x->ndim; i++) xdims[i] = x->dims[i];
    for (int i = 0; i < y->ndim; i++) ydims[i] = y->dims[i];
    bool flat = false;
    if (!exact || x->ndim != y->ndim || x->ndim < 3 || x->ndim > 5) s->chunks = 1;
    else if (!s->chunks) s->chunks = qdnnl_chunks(cg, io->in_nhwc & 1u, &flat);
    if (s->chunks > 1) {
        if (flat) {
            const int64_t run = cg->n * cg->out_plane / s->chunks;
            xdims[0] = ydims[0] = 1;
            xdims[2] = ydims[2] = run;
            for (int i = 3; i < x->ndim; i++) xdims[i] = ydims[i] = 1;
        } else {
            xdims[0] = ydims[0] = cg->n / s->chunks;
        }
        static const dnnl_format_tag_t plain[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};
        static const dnnl_format_tag_t chl[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_acb, dnnl_acdb, dnnl_acdeb};
        QF_TRY(qf_dnnl_check(n,
                             QF_DNNL(memory_desc_init_by_tag)(&x_md, x->ndim, xdims, x_md.data_type,
                                                              (io->in_nhwc & 1u) ? chl[x->ndim] : plain[x->ndim]),
                             "input"));
        s->x_piece = QF_DNNL(memory_desc_get_size)(&x_md);
    }
    /* A fused residual is read in the output's layout, which the primitive
     * then writes directly. */
    if (res) QF_TRY(qf_dnnl_md(n, &r_md, io->post_in[0], io->out_nhwc & 1u));
    dnnl_dims_t dims;
    for (int i = 0; i < x->ndim; i++) dims[i] = xdims[i];
    QF_TRY(qf_dnnl_check(
        n, QF_DNNL(memory_desc_init_by_tag)(&x_any, x->ndim, dims, x_md.data_type, dnnl_format_tag_any), "input"));
    for (int i = 0; i < y->ndim; i++) dims[i] = exact ? ydims[i] : y->dims[i];
    static const dnnl_format_tag_t last[] = {dnnl_a, dnnl_a, dnnl_ab, dnnl_acb, dnnl_acdb, dnnl_acdeb};
    if (exact && (y->ndim < 3 || y->ndim > 5)) return QF_ERR_UNSUPPORTED;
    if (exact)
        /* int32 accumulators, channels-last: rows of M channels, the
         * requantization's per-column channel. */
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(&y_any, y->ndim, dims, dnnl_s32, last[y->ndim]),
                             "accumulators"));
    else if (res)
        y_any = y_md;
    else
        QF_TRY(qf_dnnl_check(
            n, QF_DNNL(memory_desc_init_by_tag)(&y_any, y->ndim, dims, y_md.data_type, dnnl_format_tag_any),
            "output"));
    const int nd = qdnnl_weight_dims(cg, w, dims);
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(&w_any, nd, dims, dnnl_s8, dnnl_format_tag_any),
                         "weights"));
    if (b) {
        dims[0] = cg->m;
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(&b_md, 1, dims, dnnl_s32, dnnl_a), "bias"));
    }
    dnnl_dims_t strides, dil, pl, pr;
    for (int i = 0; i < cg->s.rank; i++) {
        strides[i] = cg->s.stride[i];
        dil[i] = cg->s.dilation[i] - 1;
        pl[i] = cg->s.pad_begin[i];
        pr[i] = cg->s.pad_end[i];
    }
    dnnl_convolution_desc_t cd;
    QF_TRY(qf_dnnl_try(n,
                       QF_DNNL(dilated_convolution_forward_desc_init)(&cd, dnnl_forward_inference,
                                                                      dnnl_convolution_direct, &x_any, &w_any,
                                                                      b && !exact ? &b_md : NULL, &y_any, strides,
                                                                      dil, pl, pr),
                       "convolution descriptor"));
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    QF_TRY(qf_dnnl_check(n, QF_DNNL(primitive_attr_create)(&attr), "attributes"));
    qf_status st = qdnnl_attr(io, ref, res, res ? &r_md : NULL, exact, attr);
    if (st == QF_OK) st = qdnnl_primitive(n, &cd, attr, &pd, "int8 convolution");
    QF_DNNL(primitive_attr_destroy)(attr);
    if (st != QF_OK) return st;

    const dnnl_memory_desc_t *xc = QF_DNNL(primitive_desc_query_md)(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *wc = QF_DNNL(primitive_desc_query_md)(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *yc = QF_DNNL(primitive_desc_query_md)(pd, dnnl_query_dst_md, 0);
    if (s->chunks > 1 && !QF_DNNL(memory_desc_equal)(xc, &x_md)) {
        /* oneDNN wants X in another layout: a reorder of the whole X first,
         * no pieces. */
        QF_DNNL(primitive_desc_destroy)(pd);
        s->chunks = 1;
        return qdnnl_build(io, ref, res, s);
    }
    size_t pad = QF_DNNL(memory_desc_get_size)(QF_DNNL(primitive_desc_query_md)(pd, dnnl_query_scratchpad_md, 0));
    st = qf_dnnl_primitive_create(n, &s->conv, pd, "int8 convolution");
    if (st == QF_OK) st = qdnnl_weights(n, s, cg, w, wc);
    size_t off = 0;
    s->off_x = s->off_y = SIZE_MAX;
    if (st == QF_OK && !QF_DNNL(memory_desc_equal)(xc, &x_md)) {
        st = qdnnl_reorder(n, &x_md, xc, &s->reorder_in, &pad);
        s->off_x = qdnnl_take(&off, QF_DNNL(memory_desc_get_size)(xc));
    }
    if (st == QF_OK && exact) {
        s->acc_bytes = (QF_DNNL(memory_desc_get_size)(yc) + 63) / 64 * 64;
        s->slots = s->chunks > 1 ? qf_parallel_threads() : 1;
        if (s->slots > QDNNL_SLOTS) s->slots = QDNNL_SLOTS;
        s->off_acc = qdnnl_take(&off, s->acc_bytes * (size_t)s->slots);
    } else if (st == QF_OK && !QF_DNNL(memory_desc_equal)(yc, &y_md)) {
        st = qdnnl_reorder(n, yc, &y_md, &s->reorder_out, &pad);
        s->off_y = qdnnl_take(&off, QF_DNNL(memory_desc_get_size)(yc));
    }
    if (st == QF_OK) st = qdnnl_memory(n, &s->x_user, &x_md);
    if (st == QF_OK) st = qdnnl_memory(n, &s->x_conv, xc);
    if (st == QF_OK) st = qdnnl_memory(n, &s->y_conv, yc);
    if (st == QF_OK) st = qdnnl_memory(n, &s->y_user, &y_md);
    if (st == QF_OK && b && !exact) st = qdnnl_memory(n, &s->b, &b_md);
    if (st == QF_OK && res) st = qdnnl_memory(n, &s->res, &r_md);
    if (st == QF_OK) {
        /* Every primitive runs on one scratchpad (they run one after
         * another), but for the pieces' threads: one each. */
        s->pad_bytes = (pad + 63) / 64 * 64;
        s->off_pad = qdnnl_take(&off, s->chunks > 1 ? s->pad_bytes * (size_t)s->slots : pad);
        dnnl_memory_desc_t pmd;
        dims[0] = (dnnl_dim_t)(pad ? pad : 1);
        st = qf_dnnl_check(n, QF_DNNL(memory_desc_init_by_tag)(&pmd, 1, dims, dnnl_u8, dnnl_a), "scratchpad");
        if (st == QF_OK) st = qdnnl_memory(n, &s->pad, &pmd);
        for (int t = 0; s->chunks > 1 && st == QF_OK && t < s->slots; t++) {
            st = qf_dnnl_check(
                n, QF_DNNL(stream_create)(&s->slot_stream[t], qf_dnnl()->engine, dnnl_stream_default_flags), "stream");
            if (st == QF_OK) st = qdnnl_memory(n, &s->slot_x[t], xc);
            if (st == QF_OK) st = qdnnl_memory(n, &s->slot_y[t], yc);
            if (st == QF_OK) st = qdnnl_memory(n, &s->slot_pad[t], &pmd);
        }
    }
    s->scratch = off;
    s->has_bias = b != NULL;
    QF_DNNL(primitive_desc_destroy)(pd);
    if (st == QF_OK && off == SIZE_MAX) st = QF_ERR_UNSUPPORTED;
    return st;
}

static qf_status qdnnl_prepare(const qf_kernel_io *io, void *state)
{
    qdnnl_state *s = state;
    memset(s, 0, sizeof *s);
    if (!qf_dnnl() || io->nfused > 1 || (io->in_nhwc & ~1u) || (io->out_nhwc & ~1u)) return QF_ERR_UNSUPPORTED;
    s->exact = !qf_dnnl_int8_fast();
    if (s->exact && io->nfused) return QF_ERR_UNSUPPORTED; /* the plan asked while QFOLD_INT8 was fast */
    qdnnl_res res;
    if (io->nfused && (!io->post_in || !io->post_in[0] || !qdnnl_res_of(io->node, io->fused[0], &res)))
        return QF_ERR_UNSUPPORTED;
    qf_qconv_state ref;
    QF_TRY(qf_qconv_prepare(io, true, &ref));
    const qf_conv_geom *cg = &ref.geom;
    /* oneDNN takes s8 weights with zero point 0 and per-tensor qparams of
     * the activations, all known now. */
    if (ref.wdt != QF_DTYPE_I8 || cg->s.rank < 1 || cg->s.rank > 3) return QF_ERR_UNSUPPORTED;
    const int need[] = {1, 4, 6, 7};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!qdnnl_const(io, need[i])) return QF_ERR_UNSUPPORTED;
    if (io->in[2] && !qdnnl_const(io, 2)) return QF_ERR_UNSUPPORTED;
    if (io->nin > 8 && io->in[8] && !qdnnl_const(io, 8)) return QF_ERR_UNSUPPORTED;
    if (!qdnnl_const(io, 3)) return QF_ERR_UNSUPPORTED;
    if (io->in[5]) {
        if (!qdnnl_const(io, 5)) return QF_ERR_UNSUPPORTED;
        for (int64_t i = 0, k = qf_tensor_numel(io->in[5]); i < k; i++)
            if (qdnnl_zp(io->in[5], i) != 0) return QF_ERR_UNSUPPORTED;
    }
    if (cg->n <= 0 || cg->m <= 0 || cg->c <= 0 || cg->out_plane <= 0 || cg->in_plane <= 0) return QF_ERR_UNSUPPORTED;
    /* With a fused residual the conv's own clamp must be the int8 range
     * (C is not rounded or saturated on its own). */
    if (io->nfused && (ref.ydt != QF_DTYPE_I8 || ref.lo != -128 || ref.hi != 127)) return QF_ERR_UNSUPPORTED;
    qf_status st = s->exact ? qdnnl_requant_prepare(io, &ref, s) : QF_OK;
    if (st == QF_OK) st = qdnnl_build(io, &ref, io->nfused ? &res : NULL, s);
    s->rows = cg->n * cg->out_plane;
    s->m = cg->m;
    s->plane = cg->out_plane;
    s->y_nhwc = io->out_nhwc & 1u;
    if (st != QF_OK) {
        qdnnl_release(s);
        if (st == QF_ERR_UNSUPPORTED) qf_error_clear();
    }
    return st;
}

static size_t qdnnl_scratch(const qf_node *n, const void *state)
{
    (void)n;
    return ((const qdnnl_state *)state)->scratch;
}

/* The exact path's requantization of rows lo..hi-1 of the accumulators
 * (one output position of one batch item each, m channels): + bias (int32,
 * wrapping as the reference's), then the reference kernel's arithmetic per
 * element (TFLite's: qf_int8_requant_fixed_row, vectorized; ONNX's:
 * qf_int8_requant_one_float), into Y channels-last or NCHW. */
typedef struct qdnnl_rq_job {
    const qdnnl_state *s;
    const int32_t *acc; /* the sums of rows row0.. (one piece) */
    void *y;
    int64_t row0;
} qdnnl_rq_job;

static void qdnnl_requant_rows(void *ctx, int64_t lo, int64_t hi)
{
    const qdnnl_rq_job *j = ctx;
    const qdnnl_state *s = j->s;
    const qf_int8_requant *rq = &s->rq;
    const int64_t m = s->m, plane = s->plane;
    const bool u8 = rq->dtype == QF_DTYPE_U8;
    uint8_t row[256];
    for (int64_t r = j->row0 + lo; r < j->row0 + hi; r++) {
        const int32_t *a = j->acc + (r - j->row0) * m;
        if (s->fixed && s->y_nhwc) {
            qf_int8_requant_fixed_row(rq, m, a, &s->row, (uint8_t *)j->y + r * m);
            continue;
        }
        /* NCHW: element (r, c) goes to (b * m + c) * plane + p for
         * r = b * plane + p; a row is requantized in pieces of 256
         * channels, then scattered. */
        const int64_t b = r / plane, p = r - b * plane;
        uint8_t *y = (uint8_t *)j->y + (s->y_nhwc ? r * m : b * m * plane + p);
        const int64_t step = s->y_nhwc ? 1 : plane;
        for (int64_t c0 = 0; c0 < m; c0 += 256) {
            const int64_t k = m - c0 < 256 ? m - c0 : 256;
            if (s->fixed) {
                const qf_int8_row_params *w = &s->row;
                qf_int8_row_params pc = {w->multiplier + c0, w->shift + c0, w->bias + c0, w->real + c0};
                qf_int8_requant_fixed_row(rq, k, a + c0, &pc, row);
            } else {
                for (int64_t c = 0; c < k; c++) {
                    const int32_t v = (int32_t)((uint32_t)a[c0 + c] + (uint32_t)s->row.bias[c0 + c]);
                    const int32_t q = qf_int8_requant_one_float(rq, rq->per_channel ? c0 + c : 0, v);
                    row[c] = u8 ? (uint8_t)q : (uint8_t)(int8_t)q;
                }
            }
            for (int64_t c = 0; c < k; c++) y[(c0 + c) * step] = row[c];
        }
    }
}

/* The exact path's pieces (qdnnl_state's chunks): slots lo..hi-1, each a
 * thread's share of the pieces, in order. Errors go to st[slot]. */
typedef struct qdnnl_piece_job {
    const qdnnl_state *s;
    const qf_node *n;
    char *scr;
    const void *x;
    void *y;
    qf_status st[QDNNL_SLOTS];
} qdnnl_piece_job;

static void qdnnl_pieces(void *ctx, int64_t lo, int64_t hi)
{
    qdnnl_piece_job *j = ctx;
    const qdnnl_state *s = j->s;
    const qf_node *n = j->n;
    const int64_t rows = s->rows / s->chunks;
    const size_t xstep = s->x_piece;
    for (int64_t t = lo; t < hi; t++) {
        int64_t k0, k1;
        qf_parallel_slice(s->chunks, s->slots, (int)t, &k0, &k1);
        int32_t *acc = (int32_t *)(j->scr + s->off_acc + (size_t)t * s->acc_bytes);
        qf_status st = qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->slot_y[t], acc), "accumulators");
        if (st == QF_OK)
            st = qf_dnnl_check(n,
                               QF_DNNL(memory_set_data_handle)(s->slot_pad[t],
                                                               j->scr + s->off_pad + (size_t)t * s->pad_bytes),
                               "scratchpad");
        for (int64_t k = k0; st == QF_OK && k < k1; k++) {
            st = qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->slot_x[t], (char *)j->x + (size_t)k * xstep),
                               "input");
            dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, s->slot_x[t]},
                                   {DNNL_ARG_WEIGHTS, s->w},
                                   {DNNL_ARG_DST, s->slot_y[t]},
                                   {DNNL_ARG_SCRATCHPAD, s->slot_pad[t]}};
            if (st == QF_OK)
                st = qf_dnnl_check(n, QF_DNNL(primitive_execute)(s->conv, s->slot_stream[t], 4, a),
                                   "int8 convolution");
            if (st == QF_OK)
                st = qf_dnnl_check(n, QF_DNNL(stream_wait)(s->slot_stream[t]), "int8 convolution");
            if (st != QF_OK) break;
            qdnnl_rq_job r = {.s = s, .acc = acc, .y = j->y, .row0 = k * rows};
            qdnnl_requant_rows(&r, 0, rows);
        }
        j->st[t] = st;
    }
}

static qf_status qdnnl_forward(const qf_kernel_io *io)
{
    const qdnnl_state *s = io->state;
    const qf_node *n = io->node;
    if (io->scratch_size < s->scratch)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): scratch of %zu bytes, the kernel needs %zu", n->name,
                        qf_op_label(n), io->scratch_size, s->scratch);
    char *scr = io->scratch;
    void *x = io->in[0]->data, *y = io->out[0]->data;
    void *xc = s->reorder_in ? scr + s->off_x : x;
    void *yc = s->exact ? scr + s->off_acc : s->reorder_out ? scr + s->off_y : y;
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->pad, scr + s->off_pad), "scratchpad"));
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->x_conv, xc), "input"));
    QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->y_conv, yc), "output"));
    if (s->reorder_in) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->x_user, x), "input"));
        dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, s->x_user}, {DNNL_ARG_TO, s->x_conv}, {DNNL_ARG_SCRATCHPAD, s->pad}};
        QF_TRY(qdnnl_exec(n, s->reorder_in, 3, a, "input reorder"));
    }
    dnnl_exec_arg_t a[6] = {{DNNL_ARG_SRC, s->x_conv},
                            {DNNL_ARG_WEIGHTS, s->w},
                            {DNNL_ARG_DST, s->y_conv},
                            {DNNL_ARG_SCRATCHPAD, s->pad}};
    int na = 4;
    if (s->has_bias && !s->exact) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->b, io->in[8]->data), "bias"));
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, s->b};
    }
    if (s->res) { /* the binary add is post-op 0 */
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->res, io->post_in[0]->data), "residual"));
        a[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, s->res};
    }
    if (s->exact && s->chunks > 1) {
        qdnnl_piece_job j = {.s = s, .n = n, .scr = scr, .x = x, .y = y};
        qf_parallel_for(s->slots, 1, qdnnl_pieces, &j);
        for (int t = 0; t < s->slots; t++)
            if (j.st[t] != QF_OK) return j.st[t];
        return QF_OK;
    }
    QF_TRY(qdnnl_exec(n, s->conv, na, a, "int8 convolution"));
    if (s->exact) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(stream_wait)(qf_dnnl_lib_.stream), "int8 convolution"));
        qdnnl_rq_job j = {.s = s, .acc = yc, .y = y};
        qf_parallel_for(s->rows, 1 + 8192 / (s->m + 1), qdnnl_requant_rows, &j);
        return QF_OK;
    }
    if (s->reorder_out) {
        QF_TRY(qf_dnnl_check(n, QF_DNNL(memory_set_data_handle)(s->y_user, y), "output"));
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, s->y_conv}, {DNNL_ARG_TO, s->y_user}, {DNNL_ARG_SCRATCHPAD, s->pad}};
        QF_TRY(qdnnl_exec(n, s->reorder_out, 3, r, "output reorder"));
    }
    return qf_dnnl_check(n, QF_DNNL(stream_wait)(qf_dnnl_lib_.stream), "int8 convolution");
}

const qf_backend_kernels qf_qlinear_conv_dnnl = {
    .prepare = qdnnl_prepare,
    .state_size = sizeof(qdnnl_state),
    .release = qdnnl_release,
    .scratch = qdnnl_scratch,
    .forward_f32 = qdnnl_forward,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
};
