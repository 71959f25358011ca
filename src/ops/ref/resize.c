/* Resize (ONNX opsets 11..19; import refuses Resize-10, whose operands and
 * rounding differ): nearest and linear interpolation, forward and backward.
 *
 * Every output coordinate x of an axis maps back to an input coordinate by
 * the coordinate_transformation_mode, with the axis's scale s (the scales
 * operand, or out / in when sizes are given) and its sizes in, out:
 *
 *   half_pixel            (x + 0.5) / s - 0.5
 *   pytorch_half_pixel    as half_pixel, 0 when out == 1
 *   align_corners         x * (in - 1) / (out - 1), 0 when out == 1
 *   asymmetric            x / s
 *   tf_half_pixel_for_nn  (x + 0.5) / s
 *   half_pixel_symmetric  in / 2 * (1 - out / (s * in)) + (x + 0.5) / s - 0.5
 *
 * computed in double, as ONNX's reference does. Nearest rounds it by
 * nearest_mode and clamps it into [0, in - 1]; it copies element bytes, so it
 * runs on every dtype (the integer executor's int8 nearest is this kernel on
 * int8: exact). Linear clamps it into [0, in - 1] (as ONNX Runtime; the same
 * as ONNX's edge padding and PyTorch's clamp at 0) and weighs the two
 * neighbours of every resized axis (bilinear on the last two axes of
 * N C H W, any rank in general), summed in double.
 *
 * Linear on int8 is the integer executor's form of a DQ -> Resize -> Q group
 * with shared qparams, and computes what TFLite 2.2's RESIZE_BILINEAR int8
 * kernel computes (its reference kernel, which its int8 path runs): float
 * sample positions from the float ratio in / out (or (in - 1) / (out - 1)),
 * the four raw int8 values weighed in float in its order, the sum truncated
 * toward zero. So it takes only the forms TFLite can express: 4-D, N and C
 * unchanged, asymmetric / half_pixel / pytorch_half_pixel (out > 1) /
 * align_corners, and a scale equal to out / in.
 *
 * Refused with the node and the reason: cubic, tf_crop_and_resize, antialias,
 * exclude_outside, keep_aspect_ratio_policy other than stretch. An operand
 * that decides the shape (scales, sizes) must be a constant, or a graph input
 * bound before the run (the node tests feed them so).
 */
#include <math.h>
#include <string.h>

#include "ops/kernels.h"

typedef enum { RS_NEAREST, RS_LINEAR } rs_mode;
typedef enum {
    RS_HALF_PIXEL,
    RS_PYTORCH_HALF_PIXEL,
    RS_ALIGN_CORNERS,
    RS_ASYMMETRIC,
    RS_TF_HALF_PIXEL_FOR_NN,
    RS_HALF_PIXEL_SYMMETRIC
} rs_coord;
typedef enum { RS_ROUND_PREFER_FLOOR, RS_ROUND_PREFER_CEIL, RS_FLOOR, RS_CEIL } rs_round;

/* Everything the kernels need, decoded from the node and its operands. */
typedef struct rs_geom {
    rs_mode mode;
    rs_coord coord;
    rs_round round;
    int ndim;
    int64_t in[QF_MAX_DIMS], out[QF_MAX_DIMS];
    double scale[QF_MAX_DIMS];
} rs_geom;

static const qf_value *rs_in(const qf_node *n, int slot)
{
    return slot >= 0 && slot < n->ninputs ? n->inputs[slot] : NULL;
}

static bool rs_is(const char *a, const char *b) { return strcmp(a, b) == 0; }

/* The attributes (defaults of opset 11+). */
static qf_status rs_attrs(const qf_node *n, rs_geom *g)
{
    const char *op = qf_op_label(n);
    const char *m = qf_node_attr_string(n, "mode", "nearest");
    if (rs_is(m, "nearest"))
        g->mode = RS_NEAREST;
    else if (rs_is(m, "linear"))
        g->mode = RS_LINEAR;
    else
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): mode '%s' is not supported (nearest and linear are)",
                        n->name, op, m);
    const char *c = qf_node_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    if (rs_is(c, "half_pixel"))
        g->coord = RS_HALF_PIXEL;
    else if (rs_is(c, "pytorch_half_pixel"))
        g->coord = RS_PYTORCH_HALF_PIXEL;
    else if (rs_is(c, "align_corners"))
        g->coord = RS_ALIGN_CORNERS;
    else if (rs_is(c, "asymmetric"))
        g->coord = RS_ASYMMETRIC;
    else if (rs_is(c, "tf_half_pixel_for_nn"))
        g->coord = RS_TF_HALF_PIXEL_FOR_NN;
    else if (rs_is(c, "half_pixel_symmetric"))
        g->coord = RS_HALF_PIXEL_SYMMETRIC;
    else if (rs_is(c, "tf_crop_and_resize"))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): coordinate_transformation_mode 'tf_crop_and_resize' (a "
                        "crop by roi) is "
                        "not supported",
                        n->name, op);
    else
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): coordinate_transformation_mode '%s' is not supported",
                        n->name, op, c);
    const char *r = qf_node_attr_string(n, "nearest_mode", "round_prefer_floor");
    if (rs_is(r, "round_prefer_floor"))
        g->round = RS_ROUND_PREFER_FLOOR;
    else if (rs_is(r, "round_prefer_ceil"))
        g->round = RS_ROUND_PREFER_CEIL;
    else if (rs_is(r, "floor"))
        g->round = RS_FLOOR;
    else if (rs_is(r, "ceil"))
        g->round = RS_CEIL;
    else
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): nearest_mode '%s' is not supported",
                        n->name, op, r);
    if (qf_node_attr_int(n, "antialias", 0) != 0)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): antialias=1 is not supported", n->name,
                        op);
    if (g->mode != RS_NEAREST && qf_node_attr_int(n, "exclude_outside", 0) != 0)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): exclude_outside=1 is not supported",
                        n->name, op);
    return QF_OK;
}

/* The axes attribute (opset 18+), made >= 0, in order; all axes without it. */
static qf_status rs_axes(const qf_node *n, int rank, int *axes, int *naxes)
{
    int k = 0;
    const int64_t *a = qf_node_attr_ints(n, "axes", &k);
    if (!a) {
        for (int i = 0; i < rank; i++) axes[i] = i;
        *naxes = rank;
        return QF_OK;
    }
    if (k > rank)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %d axes for rank %d", n->name,
                        qf_op_label(n), k, rank);
    bool seen[QF_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        if (a[i] < -(int64_t)rank || a[i] >= rank)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld out of range for rank %d",
                            n->name, qf_op_label(n), (long long)a[i], rank);
        axes[i] = (int)(a[i] < 0 ? a[i] + rank : a[i]);
        if (seen[axes[i]])
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %d repeated", n->name,
                            qf_op_label(n), axes[i]);
        seen[axes[i]] = true;
    }
    *naxes = k;
    return QF_OK;
}

/* Output sizes and scales from X's dims (an unknown dim -1 stays unknown
 * unless sizes give it) and the scales or sizes tensor (exactly one given and
 * not empty). */
static qf_status rs_geometry(const qf_node *n, const qf_tensor *x, const qf_tensor *scales,
                             const qf_tensor *sizes, rs_geom *g)
{
    const char *op = qf_op_label(n);
    memset(g, 0, sizeof *g);
    QF_TRY(rs_attrs(n, g));
    const int r = x->ndim;
    g->ndim = r;
    if (scales && qf_tensor_numel(scales) == 0) scales = NULL;
    if (sizes && qf_tensor_numel(sizes) == 0) sizes = NULL;
    if (!scales && !sizes)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): neither scales nor sizes is given",
                        n->name, op);
    if (scales && sizes)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): both scales and sizes are given", n->name,
                        op);
    int axes[QF_MAX_DIMS], naxes = 0;
    QF_TRY(rs_axes(n, r, axes, &naxes));
    for (int a = 0; a < r; a++) {
        g->in[a] = x->dims[a];
        g->out[a] = x->dims[a];
        g->scale[a] = 1.0;
    }
    int64_t k = scales ? qf_tensor_numel(scales) : qf_tensor_numel(sizes);
    if (k != naxes)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s has %lld entries, expected %d", n->name,
                        op, sizes ? "sizes" : "scales", (long long)k, naxes);
    if (scales && scales->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): scales must be float32, got %s", n->name,
                        op, qf_dtype_name(scales->dtype));
    if (sizes && sizes->dtype != QF_DTYPE_I64)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): sizes must be int64, got %s", n->name, op,
                        qf_dtype_name(sizes->dtype));
    if (sizes && !rs_is(qf_node_attr_string(n, "keep_aspect_ratio_policy", "stretch"), "stretch"))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): keep_aspect_ratio_policy '%s' is not supported "
                        "(stretch is)",
                        n->name, op, qf_node_attr_string(n, "keep_aspect_ratio_policy", ""));
    for (int i = 0; i < naxes; i++) {
        int a = axes[i];
        int64_t d = x->dims[a];
        if (sizes) {
            int64_t o = qf_tensor_get_i64(sizes, i);
            if (o <= 0)
                return qf_error(QF_ERR_INVALID, "node '%s' (%s): sizes[%d] = %lld is not positive",
                                n->name, op, i, (long long)o);
            g->out[a] = o;
            g->scale[a] = d > 0 ? (double)o / (double)d : 1.0;
            continue;
        }
        double s = qf_tensor_get_f64(scales, i);
        if (!(s > 0.0) || !isfinite(s))
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (%s): scale %g of axis %d is not a positive number", n->name,
                            op, s, a);
        g->scale[a] = s;
        if (d < 0) {
            g->out[a] = -1;
            continue;
        }
        /* floor(in * scale), in double as ONNX's reference computes it */
        double o = floor((double)d * s);
        if (o > (double)INT32_MAX)
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (%s): axis %d of size %lld scaled by %g is too large",
                            n->name, op, a, (long long)d, s);
        g->out[a] = (int64_t)o;
        if (d > 0 && g->out[a] == 0)
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (%s): axis %d of size %lld scaled by %g is empty", n->name,
                            op, a, (long long)d, s);
    }
    return QF_OK;
}

/* The input coordinate of output coordinate x on axis a. */
static double rs_source(const rs_geom *g, int a, int64_t x)
{
    const double s = g->scale[a], in = (double)g->in[a], out = (double)g->out[a];
    switch (g->coord) {
    case RS_HALF_PIXEL: return ((double)x + 0.5) / s - 0.5;
    case RS_PYTORCH_HALF_PIXEL: return g->out[a] > 1 ? ((double)x + 0.5) / s - 0.5 : 0.0;
    case RS_ALIGN_CORNERS: return g->out[a] > 1 ? (double)x * (in - 1.0) / (out - 1.0) : 0.0;
    case RS_ASYMMETRIC: return (double)x / s;
    case RS_TF_HALF_PIXEL_FOR_NN: return ((double)x + 0.5) / s;
    case RS_HALF_PIXEL_SYMMETRIC: {
        double adjustment = out / (s * in);
        return in / 2.0 * (1.0 - adjustment) + ((double)x + 0.5) / s - 0.5;
    }
    }
    return 0.0;
}

static int64_t rs_clamp(int64_t i, int64_t in) { return i < 0 ? 0 : i >= in ? in - 1 : i; }

/* Nearest: the input index of output index x on axis a. */
static int64_t rs_nearest(const rs_geom *g, int a, int64_t x)
{
    double v = rs_source(g, a, x), f = floor(v), d = v - f;
    int64_t i;
    switch (g->round) {
    case RS_ROUND_PREFER_FLOOR: i = (int64_t)(d <= 0.5 ? f : f + 1.0); break;
    case RS_ROUND_PREFER_CEIL: i = (int64_t)(d < 0.5 ? f : f + 1.0); break;
    case RS_FLOOR: i = (int64_t)f; break;
    case RS_CEIL: i = (int64_t)ceil(v); break;
    default: i = (int64_t)f; break;
    }
    return rs_clamp(i, g->in[a]);
}

/* Linear: the two neighbours of output index x on axis a and the weight of
 * the second (the first weighs 1 - w1). */
static void rs_linear(const rs_geom *g, int a, int64_t x, int64_t *i0, int64_t *i1, double *w1)
{
    double v = rs_source(g, a, x), hi = (double)(g->in[a] - 1);
    if (v < 0.0) v = 0.0;
    if (v > hi) v = hi;
    double f = floor(v);
    *i0 = (int64_t)f;
    *i1 = *i0 + 1 < g->in[a] ? *i0 + 1 : *i0;
    *w1 = v - f;
}

/* One axis's neighbours at the current output index. */
typedef struct rs_tap {
    int64_t i0, i1;
    double w1;
} rs_tap;

static void rs_tap_at(const rs_geom *g, int a, int64_t x, rs_tap *t)
{
    if (g->mode == RS_NEAREST) {
        t->i0 = t->i1 = rs_nearest(g, a, x);
        t->w1 = 0.0;
    } else {
        rs_linear(g, a, x, &t->i0, &t->i1, &t->w1);
    }
}

/* Linear mode reads at most 2^RS_MAX_LINEAR values per output element. */
#define RS_MAX_LINEAR 6

/* The input offsets and weights output element idx reads: the taps of the
 * axes whose two neighbours differ span the corners. Returns their count. */
static int rs_corners(const rs_geom *g, const rs_tap *taps, const int64_t *xs, int64_t *off,
                      double *w)
{
    int lin[QF_MAX_DIMS], nl = 0;
    int64_t base = 0;
    for (int a = 0; a < g->ndim; a++) {
        base += taps[a].i0 * xs[a];
        if (taps[a].i1 != taps[a].i0 && taps[a].w1 != 0.0 && nl < RS_MAX_LINEAR) lin[nl++] = a;
    }
    int nc = 1 << nl;
    for (int c = 0; c < nc; c++) {
        int64_t o = base;
        double wt = 1.0;
        for (int j = 0; j < nl; j++) {
            const rs_tap *t = &taps[lin[j]];
            if (c & (1 << j)) {
                o += (t->i1 - t->i0) * xs[lin[j]];
                wt *= t->w1;
            } else {
                wt *= 1.0 - t->w1;
            }
        }
        off[c] = o;
        w[c] = wt;
    }
    return nc;
}

static void rs_strides(int r, const int64_t *dims, int64_t *st)
{
    int64_t s = 1;
    for (int a = r - 1; a >= 0; a--) {
        st[a] = s;
        s *= dims[a];
    }
}

/* The geometry of a kernel call: X and the scales / sizes tensors. */
static qf_status rs_geom_of(const qf_kernel_io *io, rs_geom *g)
{
    const qf_node *n = io->node;
    const qf_tensor *scales = io->nin > 2 ? io->in[2] : NULL;
    const qf_tensor *sizes = io->nin > 3 ? io->in[3] : NULL;
    QF_TRY(rs_geometry(n, io->in[0], scales, sizes, g));
    if (g->mode == RS_LINEAR) {
        int resized = 0;
        for (int a = 0; a < g->ndim; a++) resized += g->in[a] != g->out[a] || g->scale[a] != 1.0;
        if (resized > RS_MAX_LINEAR)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (%s): linear resize of %d axes (at most %d)", n->name,
                            qf_op_label(n), resized, RS_MAX_LINEAR);
    }
    return QF_OK;
}

/* --- inference ------------------------------------------------------------------ */

static qf_status rs_operand(const qf_node *n, int slot, const char *what, bool *pending)
{
    const qf_value *v = rs_in(n, slot);
    *pending = false;
    if (!v || qf_value_is_const(v)) return QF_OK;
    if (v->kind == QF_VALUE_INPUT && !v->producer) {
        *pending = true;
        return QF_OK;
    }
    return qf_error(QF_ERR_UNSUPPORTED,
                    "node '%s' (%s): %s '%s' is not a constant (dynamic shapes are not supported)",
                    n->name, qf_op_label(n), what, v->name);
}

/* PyTorch's export of F.interpolate(size=...) on a dynamic batch computes
 * sizes as Concat(Slice(Shape(X), 0, 2), [H', W']): the first entries are X's
 * own dims, known only when the batch is (the TFLite export fixes the batch
 * and folds the chain). The output then keeps X's dims
 * there (unknown or not) and takes the constants for the rest; at run time
 * the chain computes sizes as usual. Fills dims (X's rank) and returns true
 * when sizes value v has that form. */
static bool rs_sizes_of_shape(const qf_value *v, const qf_value *x, int64_t *dims)
{
    const qf_node *c = v ? v->producer : NULL;
    if (!c || c->op != QF_OP_CONCAT || qf_node_attr_int(c, "axis", 0) != 0) return false;
    const int r = x->type.ndim;
    int k = 0;
    for (int i = 0; i < c->ninputs; i++) {
        const qf_value *p = c->inputs[i];
        if (!p) return false;
        if (qf_value_is_const(p)) {
            if (p->type.dtype != QF_DTYPE_I64 || p->type.ndim != 1) return false;
            for (int64_t j = 0; j < qf_tensor_numel(&p->type); j++) {
                if (k >= r) return false;
                dims[k++] = qf_tensor_get_i64(&p->type, j);
            }
            continue;
        }
        /* Slice(Shape(X), [s], [e]) (axis 0, step 1) or Shape(X) */
        const qf_node *sl = p->producer, *sh = sl;
        int64_t b = 0, e = r;
        if (sl && sl->op == QF_OP_SLICE) {
            if (sl->ninputs < 3 || sl->ninputs > 5 || !qf_value_is_const(sl->inputs[1]) ||
                !qf_value_is_const(sl->inputs[2]) || qf_tensor_numel(&sl->inputs[1]->type) != 1 ||
                qf_tensor_numel(&sl->inputs[2]->type) != 1)
                return false;
            for (int j = 3; j < sl->ninputs; j++)
                if (sl->inputs[j] &&
                    (!qf_value_is_const(sl->inputs[j]) ||
                     qf_tensor_numel(&sl->inputs[j]->type) != 1 ||
                     qf_tensor_get_i64(&sl->inputs[j]->type, 0) != (j == 3 ? 0 : 1)))
                    return false;
            b = qf_tensor_get_i64(&sl->inputs[1]->type, 0);
            e = qf_tensor_get_i64(&sl->inputs[2]->type, 0);
            if (b < 0) b += r;
            if (e < 0) e += r;
            if (e > r) e = r;
            sh = sl->inputs[0]->producer;
        }
        if (!sh || sh->op != QF_OP_SHAPE || sh->nattrs != 0 || b < 0 || b > e) return false;
        /* the Shape of X, or of a value of X's dims there (the integer
         * executor's Resize reads the int8 X, the Shape its DequantizeLinear;
         * the kernel checks the sizes it gets against the output) */
        const qf_tensor *st = &sh->inputs[0]->type;
        if (st->ndim != r) return false;
        for (int64_t a = b; a < e; a++) {
            if (k != a || st->dims[a] != x->type.dims[a])
                return false; /* X's dim a at position a */
            dims[k++] = x->type.dims[a];
        }
    }
    return k == r;
}

static qf_status qf_resize_infer(qf_graph *g, qf_node *n)
{
    const qf_tensor *x = &n->inputs[0]->type;
    (void)g;
    bool p_scales, p_sizes;
    QF_TRY(rs_operand(n, 2, "scales", &p_scales));
    int64_t dims[QF_MAX_DIMS];
    if (rs_sizes_of_shape(rs_in(n, 3), n->inputs[0], dims)) {
        rs_geom geo;
        QF_TRY(rs_attrs(n, &geo));
        qf_set_output(n, 0, x->dtype, x->ndim, dims);
        return QF_OK;
    }
    QF_TRY(rs_operand(n, 3, "sizes", &p_sizes));
    if (p_scales || p_sizes) {
        /* The node tests feed scales / sizes as graph inputs: known once bound. */
        for (int a = 0; a < x->ndim; a++) dims[a] = -1;
        rs_geom geo;
        QF_TRY(rs_attrs(n, &geo));
        qf_set_output(n, 0, x->dtype, x->ndim, dims);
        return QF_OK;
    }
    const qf_value *sv = rs_in(n, 2), *zv = rs_in(n, 3);
    rs_geom geo;
    QF_TRY(rs_geometry(n, x, sv ? &sv->type : NULL, zv ? &zv->type : NULL, &geo));
    if (geo.mode == RS_LINEAR && x->dtype != QF_DTYPE_F32 && x->dtype != QF_DTYPE_I8)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): linear resize of %s data is not supported", n->name,
                        qf_op_label(n), qf_dtype_name(x->dtype));
    qf_set_output(n, 0, x->dtype, x->ndim, geo.out);
    return QF_OK;
}

/* --- forward -------------------------------------------------------------------- */

/* Walks the output in order, keeping every axis's taps for the current
 * index (an axis's taps change only when its index does). */
#define RS_WALK_BEGIN(g, ny)                                            \
    rs_tap taps[QF_MAX_DIMS];                                           \
    int64_t idx[QF_MAX_DIMS] = {0};                                     \
    for (int a = 0; a < (g)->ndim; a++) rs_tap_at((g), a, 0, &taps[a]); \
    for (int64_t k = 0; k < (ny); k++) {
#define RS_WALK_END(g)                           \
    for (int a = (g)->ndim - 1; a >= 0; a--) {   \
        if (++idx[a] < (g)->out[a]) {            \
            rs_tap_at((g), a, idx[a], &taps[a]); \
            break;                               \
        }                                        \
        idx[a] = 0;                              \
        rs_tap_at((g), a, 0, &taps[a]);          \
    }                                            \
    }

static void rs_forward_float(const rs_geom *g, const float *x, float *y)
{
    int64_t xs[QF_MAX_DIMS], off[1 << RS_MAX_LINEAR], ny = 1;
    double w[1 << RS_MAX_LINEAR];
    rs_strides(g->ndim, g->in, xs);
    for (int a = 0; a < g->ndim; a++) ny *= g->out[a];
    RS_WALK_BEGIN(g, ny)
    int nc = rs_corners(g, taps, xs, off, w);
    double acc = 0.0;
    for (int c = 0; c < nc; c++) acc += w[c] * (double)x[off[c]];
    y[k] = (float)acc;
    RS_WALK_END(g)
}

static void rs_forward_bytes(const rs_geom *g, const char *x, char *y, size_t esz)
{
    int64_t xs[QF_MAX_DIMS], ny = 1;
    rs_strides(g->ndim, g->in, xs);
    for (int a = 0; a < g->ndim; a++) ny *= g->out[a];
    RS_WALK_BEGIN(g, ny)
    int64_t o = 0;
    for (int a = 0; a < g->ndim; a++) o += taps[a].i0 * xs[a];
    memcpy(y + k * (int64_t)esz, x + o * (int64_t)esz, esz);
    RS_WALK_END(g)
}

/* TFLite's sample position on one axis (ComputeInterpolationValues of its
 * reference kernel): in float, from the float ratio of the sizes. */
static void rs_tfl_axis(int64_t in, int64_t out, bool align, bool half, int64_t x, float *pos,
                        int64_t *lo, int64_t *hi)
{
    float ratio = (align && out > 1) ? (float)(in - 1) / (float)(out - 1) : (float)in / (float)out;
    float v = half ? ((float)x + 0.5f) * ratio - 0.5f : (float)x * ratio;
    int64_t f = (int64_t)floorf(v), c = (int64_t)ceilf(v);
    *pos = v;
    *lo = f > 0 ? f : 0;
    *hi = c < in - 1 ? c : in - 1;
}

/* Whether int8 linear can run as TFLite's RESIZE_BILINEAR computes it (see
 * the file comment); the reason when not. */
static const char *rs_tfl_linear_refusal(const rs_geom *g, bool *align, bool *half)
{
    if (g->ndim != 4) return "it is not 4-D";
    if (g->in[0] != g->out[0] || g->in[1] != g->out[1]) return "it resizes N or C";
    *align = g->coord == RS_ALIGN_CORNERS;
    *half = g->coord == RS_HALF_PIXEL || g->coord == RS_PYTORCH_HALF_PIXEL;
    if (g->coord == RS_PYTORCH_HALF_PIXEL && (g->out[2] == 1 || g->out[3] == 1))
        return "pytorch_half_pixel with an output size 1 has no TFLite form";
    if (!*align && !*half && g->coord != RS_ASYMMETRIC)
        return "its coordinate_transformation_mode has no TFLite form";
    for (int a = 2; a < 4 && !*align; a++)
        if (g->scale[a] != (double)g->out[a] / (double)g->in[a])
            return "a scale differs from out / in";
    return NULL;
}

static qf_status rs_forward_tfl_s8(const qf_kernel_io *io, const rs_geom *g)
{
    bool align = false, half = false;
    const char *why = rs_tfl_linear_refusal(g, &align, &half);
    if (why)
        return qf_error(
            QF_ERR_UNSUPPORTED,
            "node '%s' (%s): int8 linear resize runs as TFLite's RESIZE_BILINEAR, and %s",
            io->node->name, qf_op_label(io->node), why);
    const int8_t *x = io->in[0]->data;
    int8_t *y = io->out[0]->data;
    const int64_t H = g->in[2], W = g->in[3], OH = g->out[2], OW = g->out[3],
                  planes = g->in[0] * g->in[1];
    for (int64_t p = 0; p < planes; p++) {
        const int8_t *xp = x + p * H * W;
        int8_t *yp = y + p * OH * OW;
        for (int64_t oy = 0; oy < OH; oy++) {
            float py;
            int64_t y0, y1;
            rs_tfl_axis(H, OH, align, half, oy, &py, &y0, &y1);
            for (int64_t ox = 0; ox < OW; ox++) {
                float px;
                int64_t x0, x1;
                rs_tfl_axis(W, OW, align, half, ox, &px, &x0, &x1);
                /* float in TFLite's order; its cast to int8 truncates */
                float dy = py - (float)y0, dx = px - (float)x0;
                float v = (float)xp[y0 * W + x0] * (1.0f - dy) * (1.0f - dx) +
                          (float)xp[y1 * W + x0] * dy * (1.0f - dx) +
                          (float)xp[y0 * W + x1] * (1.0f - dy) * dx +
                          (float)xp[y1 * W + x1] * dy * dx;
                yp[oy * OW + ox] = (int8_t)v;
            }
        }
    }
    return QF_OK;
}

static qf_status qf_resize_forward_f32(const qf_kernel_io *io)
{
    rs_geom g;
    QF_TRY(rs_geom_of(io, &g));
    const qf_tensor *x = io->in[0];
    for (int a = 0; a < g.ndim; a++)
        if (g.out[a] != io->out[0]->dims[a])
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (%s): output axis %d is %lld, the operands give %lld",
                            io->node->name, qf_op_label(io->node), a,
                            (long long)io->out[0]->dims[a], (long long)g.out[a]);
    if (qf_tensor_numel(io->out[0]) == 0) return QF_OK;
    if (qf_tensor_numel(x) == 0)
        return qf_error(QF_ERR_SHAPE,
                        "node '%s' (%s): an empty input cannot be resized to a non-empty output",
                        io->node->name, qf_op_label(io->node));
    if (g.mode == RS_NEAREST) {
        rs_forward_bytes(&g, x->data, io->out[0]->data, qf_dtype_size(x->dtype));
        return QF_OK;
    }
    if (x->dtype == QF_DTYPE_I8) return rs_forward_tfl_s8(io, &g);
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): linear resize of %s data is not supported", io->node->name,
                        qf_op_label(io->node), qf_dtype_name(x->dtype));
    rs_forward_float(&g, x->data, io->out[0]->data);
    return QF_OK;
}

/* --- backward (training; the contract is in op_table.h) ---------------------------- */

/* dx: every output element's dy goes back to the input elements it read,
 * with the weight it read them with (nearest: 1 to its one source, summed
 * over every output that copied it), as PyTorch's upsample backward. The
 * scales / sizes operands get no gradient. Reads the scales / sizes (bwd_in
 * bits 1 to 3). */
static qf_status qf_resize_backward_f32(const qf_kernel_io *io)
{
    for (int i = 1; i < io->nin; i++)
        if (io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
    qf_tensor *dxt = io->din[0];
    if (!dxt) return QF_OK;
    memset(dxt->data, 0, qf_tensor_nbytes(dxt));
    if (!io->dout[0]) return QF_OK;
    rs_geom g;
    QF_TRY(rs_geom_of(io, &g));
    const float *dy = io->dout[0]->data;
    float *dx = dxt->data;
    int64_t xs[QF_MAX_DIMS], off[1 << RS_MAX_LINEAR], ny = qf_tensor_numel(io->dout[0]);
    double w[1 << RS_MAX_LINEAR];
    rs_strides(g.ndim, g.in, xs);
    if (ny == 0 || qf_tensor_numel(dxt) == 0) return QF_OK;
    RS_WALK_BEGIN(&g, ny)
    int nc = rs_corners(&g, taps, xs, off, w);
    for (int c = 0; c < nc; c++) dx[off[c]] += (float)(w[c] * (double)dy[k]);
    RS_WALK_END(&g)
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_resize_kernels = {
    .infer = qf_resize_infer,
    .forward_f32 = qf_resize_forward_f32,
    .backward_f32 = qf_resize_backward_f32,
    .bwd_in = (1u << 2) | (1u << 3), /* scales, sizes */
};
