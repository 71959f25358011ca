/* Geometry of the spatial ops: attributes, auto_pad, output sizes. */
#include "ops/math/spatial.h"

#include <string.h>

#include "ops/op_table.h"

int64_t qf_spatial_prod(int rank, const int64_t *v) { return qf_shape_numel(rank, v); }

/* The extent of a dilated kernel, (k - 1) * d + 1; false when it overflows
 * (k comes from W's shape, d from an attribute). */
static bool spatial_dilated_extent(int64_t k, int64_t d, int64_t *dk)
{
    return qf_i64_mul(k - 1, d, dk) && qf_i64_add(*dk, 1, dk);
}

static qf_status spatial_extent_overflow(const qf_node *n, int i, const qf_spatial *s)
{
    return qf_error(QF_ERR_SHAPE, "node '%s' (%s): spatial dim %d: kernel %lld with dilation %lld is larger than "
                    "qfold handles", n->name, qf_op_label(n), i, (long long)s->kernel[i],
                    (long long)s->dilation[i]);
}

/* Floor division for a positive divisor (C's '/' truncates toward zero). */
static int64_t spatial_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0)) ? q - 1 : q;
}

static int64_t spatial_ceil_div(int64_t a, int64_t b) { return -spatial_floor_div(-a, b); }

/* Kernel sizes, strides, dilations, pads and output sizes above this come
 * only from a hostile file; bounding them keeps every window computation
 * (dilated kernel extent, padded input, stride * position) inside int64. */
#define QF_SPATIAL_ATTR_MAX INT32_MAX

static qf_status spatial_check_attr_max(const qf_node *n, const char *name, int i, int64_t v)
{
    if (v <= QF_SPATIAL_ATTR_MAX) return QF_OK;
    return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s[%d] = %lld is larger than qfold handles (%lld)", n->name,
                    qf_op_label(n), name, i, (long long)v, (long long)QF_SPATIAL_ATTR_MAX);
}

static qf_status spatial_read_ints(const qf_node *n, const char *name, int want, int64_t dflt, int64_t min,
                           int64_t *dst)
{
    int count = 0;
    const int64_t *v = qf_node_attr_ints(n, name, &count);
    if (!v) {
        for (int i = 0; i < want; i++) dst[i] = dflt;
        return QF_OK;
    }
    if (count != want)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s has %d entries, expected %d (one per spatial dim)",
                        n->name, qf_op_label(n), name, count, want);
    for (int i = 0; i < want; i++) {
        if (v[i] < min)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s[%d] = %lld, must be >= %lld", n->name,
                            qf_op_label(n), name, i, (long long)v[i], (long long)min);
        QF_TRY(spatial_check_attr_max(n, name, i, v[i]));
        dst[i] = v[i];
    }
    return QF_OK;
}

qf_status qf_spatial_parse(const qf_node *n, int rank, const int64_t *w_kernel, qf_spatial_kind kind,
                           qf_spatial *s)
{
    const char *op = qf_op_label(n);
    memset(s, 0, sizeof *s);
    if (rank < 1 || rank > QF_SPATIAL_MAX)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): %d spatial dims, only 1 to %d are supported",
                        n->name, op, rank, QF_SPATIAL_MAX);
    s->rank = rank;

    const char *ap = qf_node_attr_string(n, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") == 0) s->auto_pad = QF_AUTO_PAD_NOTSET;
    else if (strcmp(ap, "SAME_UPPER") == 0) s->auto_pad = QF_AUTO_PAD_SAME_UPPER;
    else if (strcmp(ap, "SAME_LOWER") == 0) s->auto_pad = QF_AUTO_PAD_SAME_LOWER;
    else if (strcmp(ap, "VALID") == 0) s->auto_pad = QF_AUTO_PAD_VALID;
    else
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                        n->name, op, ap);

    int kcount = 0;
    const int64_t *k = qf_node_attr_ints(n, "kernel_shape", &kcount);
    if (k) {
        QF_TRY(spatial_read_ints(n, "kernel_shape", rank, 1, 1, s->kernel));
        if (w_kernel)
            for (int i = 0; i < rank; i++)
                if (w_kernel[i] >= 0 && w_kernel[i] != s->kernel[i])
                    return qf_error(QF_ERR_SHAPE, "node '%s' (%s): kernel_shape[%d] = %lld but the weight's spatial dim %d is %lld",
                                    n->name, op, i, (long long)s->kernel[i], i, (long long)w_kernel[i]);
    } else if (w_kernel) {
        for (int i = 0; i < rank; i++) s->kernel[i] = w_kernel[i];
    } else {
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): kernel_shape attribute is required", n->name, op);
    }

    QF_TRY(spatial_read_ints(n, "strides", rank, 1, 1, s->stride));
    if (kind == QF_SPATIAL_AVG_POOL) {
        for (int i = 0; i < rank; i++) s->dilation[i] = 1;
    } else {
        QF_TRY(spatial_read_ints(n, "dilations", rank, 1, 1, s->dilation));
    }

    int pcount = 0;
    const int64_t *p = qf_node_attr_ints(n, "pads", &pcount);
    if (p && s->auto_pad == QF_AUTO_PAD_NOTSET) {
        if (pcount != 2 * rank)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): pads has %d entries, expected %d (begin and end per spatial dim)",
                            n->name, op, pcount, 2 * rank);
        for (int i = 0; i < rank; i++) {
            s->pad_begin[i] = p[i];
            s->pad_end[i] = p[rank + i];
            if (p[i] < 0 || p[rank + i] < 0)
                return qf_error(QF_ERR_INVALID, "node '%s' (%s): negative pad (%lld, %lld) on spatial dim %d",
                                n->name, op, (long long)p[i], (long long)p[rank + i], i);
            QF_TRY(spatial_check_attr_max(n, "pads", i, p[i]));
            QF_TRY(spatial_check_attr_max(n, "pads", rank + i, p[rank + i]));
        }
    }
    for (int i = 0; i < rank; i++) {
        s->in[i] = -1;
        s->out[i] = -1;
    }
    return QF_OK;
}

qf_status qf_spatial_forward_dims(const qf_node *n, qf_spatial *s, const int64_t *in, bool ceil_mode)
{
    for (int i = 0; i < s->rank; i++) {
        s->in[i] = in[i];
        s->out[i] = -1;
        if (in[i] < 0 || s->kernel[i] < 0) continue;
        int64_t dk;
        if (!spatial_dilated_extent(s->kernel[i], s->dilation[i], &dk)) return spatial_extent_overflow(n, i, s);
        int64_t st = s->stride[i];
        switch (s->auto_pad) {
        case QF_AUTO_PAD_SAME_UPPER:
        case QF_AUTO_PAD_SAME_LOWER: {
            int64_t o = spatial_ceil_div(in[i], st);
            /* (o - 1) * st < in: subtract first, dk may be near INT64_MAX. */
            int64_t total = ((o - 1) * st - in[i]) + dk;
            if (total < 0) total = 0;
            /* The odd unit of padding goes to the end for SAME_UPPER, to the
             * beginning for SAME_LOWER. */
            s->pad_begin[i] = s->auto_pad == QF_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
            s->pad_end[i] = total - s->pad_begin[i];
            s->out[i] = o;
            break;
        }
        case QF_AUTO_PAD_VALID:
            s->pad_begin[i] = s->pad_end[i] = 0;
            s->out[i] = in[i] >= dk ? (in[i] - dk) / st + 1 : 0;
            break;
        case QF_AUTO_PAD_NOTSET: {
            int64_t span = in[i] + s->pad_begin[i] + s->pad_end[i] - dk;
            if (span < 0) {
                s->out[i] = 0;
                break;
            }
            int64_t o = (ceil_mode ? spatial_ceil_div(span, st) : span / st) + 1;
            /* ceil_mode: a last window starting in the end padding covers no
             * input element; it is dropped. */
            if (ceil_mode && (o - 1) * st >= in[i] + s->pad_begin[i]) o--;
            s->out[i] = o;
            break;
        }
        }
        if (s->out[i] < 1) {
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (%s): spatial dim %d: input %lld with kernel %lld (dilation %lld), stride %lld, "
                            "pads %lld+%lld gives output size %lld (< 1)",
                            n->name, qf_op_label(n), i, (long long)in[i], (long long)s->kernel[i],
                            (long long)s->dilation[i], (long long)st, (long long)s->pad_begin[i],
                            (long long)s->pad_end[i], (long long)s->out[i]);
        }
    }
    return QF_OK;
}

static qf_status spatial_transpose_overflow(const qf_node *n, int i, int64_t in, const qf_spatial *s)
{
    return qf_error(QF_ERR_SHAPE, "node '%s' (%s): spatial dim %d: input %lld with stride %lld gives an output "
                    "size larger than qfold handles", n->name, qf_op_label(n), i, (long long)in,
                    (long long)s->stride[i]);
}

qf_status qf_spatial_transpose_dims(const qf_node *n, qf_spatial *s, const int64_t *in)
{
    const char *op = qf_op_label(n);
    int64_t opad[QF_SPATIAL_MAX];
    QF_TRY(spatial_read_ints(n, "output_padding", s->rank, 0, 0, opad));
    int oscount = 0;
    const int64_t *os = qf_node_attr_ints(n, "output_shape", &oscount);
    /* output_shape lists the spatial sizes; exporters sometimes give the
     * whole shape (N, C, spatial...): then the last `rank` entries count. */
    if (os && oscount != s->rank && oscount != s->rank + 2)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): output_shape has %d entries, expected %d", n->name, op,
                        oscount, s->rank);
    if (os) os += oscount - s->rank;

    for (int i = 0; i < s->rank; i++) {
        s->in[i] = in[i];
        s->out[i] = -1;
        int64_t dk = -1;
        if (s->kernel[i] >= 0 && !spatial_dilated_extent(s->kernel[i], s->dilation[i], &dk))
            return spatial_extent_overflow(n, i, s);
        int64_t want = -1;
        if (os) {
            want = os[i];
            if (want < 1)
                return qf_error(QF_ERR_INVALID, "node '%s' (%s): output_shape[%d] = %lld, must be >= 1", n->name,
                                op, i, (long long)want);
            QF_TRY(spatial_check_attr_max(n, "output_shape", i, want));
        } else if (s->auto_pad == QF_AUTO_PAD_SAME_UPPER || s->auto_pad == QF_AUTO_PAD_SAME_LOWER) {
            if (in[i] >= 0 && !qf_i64_mul(in[i], s->stride[i], &want))
                return spatial_transpose_overflow(n, i, in[i], s);
        }
        if (in[i] < 0 || dk < 0) {
            s->out[i] = want;
            continue;
        }
        /* The full result of scattering every input position. */
        int64_t full;
        if (!qf_i64_mul(s->stride[i], in[i] - 1, &full) || !qf_i64_add(full, opad[i], &full) ||
            !qf_i64_add(full, dk, &full))
            return spatial_transpose_overflow(n, i, in[i], s);
        if (want >= 0) {
            /* Padding to reach the wanted size, split as the ONNX spec says
             * (floor division, as its reference: a negative total means the
             * output extends past the full result, at the end). */
            int64_t total = full - want;
            int64_t half = spatial_floor_div(total, 2);
            if (s->auto_pad == QF_AUTO_PAD_SAME_UPPER) {
                s->pad_begin[i] = half;
                s->pad_end[i] = total - half;
            } else {
                s->pad_begin[i] = total - half;
                s->pad_end[i] = half;
            }
            s->out[i] = want;
        } else {
            if (s->auto_pad == QF_AUTO_PAD_VALID) s->pad_begin[i] = s->pad_end[i] = 0;
            s->out[i] = full - s->pad_begin[i] - s->pad_end[i];
        }
        if (s->out[i] < 1)
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (%s): spatial dim %d: input %lld, kernel %lld, stride %lld, pads %lld+%lld "
                            "give output size %lld (< 1)",
                            n->name, op, i, (long long)in[i], (long long)s->kernel[i], (long long)s->stride[i],
                            (long long)s->pad_begin[i], (long long)s->pad_end[i], (long long)s->out[i]);
    }
    return QF_OK;
}

qf_spatial qf_spatial_lift3(const qf_spatial *s)
{
    qf_spatial l;
    memset(&l, 0, sizeof l);
    l.rank = QF_SPATIAL_MAX;
    l.auto_pad = s->auto_pad;
    int shift = QF_SPATIAL_MAX - s->rank;
    for (int i = 0; i < QF_SPATIAL_MAX; i++) {
        int j = i - shift;
        bool real = j >= 0;
        l.kernel[i] = real ? s->kernel[j] : 1;
        l.stride[i] = real ? s->stride[j] : 1;
        l.dilation[i] = real ? s->dilation[j] : 1;
        l.pad_begin[i] = real ? s->pad_begin[j] : 0;
        l.pad_end[i] = real ? s->pad_end[j] : 0;
        l.in[i] = real ? s->in[j] : 1;
        l.out[i] = real ? s->out[j] : 1;
    }
    return l;
}
