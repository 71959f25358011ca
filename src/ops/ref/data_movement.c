/* Layout ops: Flatten, Reshape, Transpose, Concat, Slice, Split, Squeeze,
 * Unsqueeze, Pad, Identity (ONNX opsets 7..21), forward and backward
 * (Dropout, which moves data too, is in dropout.c).
 *
 * They only move data, so every dtype is handled by copying element bytes.
 * Operands that decide a shape (Reshape's shape, Slice's starts, Pad's pads,
 * axes given as inputs) must be constants: their data is read at inference. */
#include <stdint.h>
#include <string.h>

#include "ops/kernels.h"

static const qf_value *qf_lay_in(const qf_node *n, int slot)
{
    return slot < n->ninputs ? n->inputs[slot] : NULL;
}

/* Axis in [-rank, rank - 1] (or [-rank, rank] with `inclusive`), made >= 0. */
static qf_status qf_lay_axis(const qf_node *n, int64_t axis, int rank, bool inclusive, int *out)
{
    *out = 0; /* defined on every path: callers read it only on success */
    int64_t hi = inclusive ? rank : rank - 1;
    if (axis < -(int64_t)rank || axis > hi)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): axis %lld out of range for rank %d", n->name,
                        qf_op_label(n), (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return QF_OK;
}

/* The integers of a shape-like operand: a constant int64/int32 1-D tensor
 * (or scalar) of at most `max` entries. */
static qf_status qf_lay_const_ints(const qf_node *n, int slot, const char *what, int64_t *out, int max,
                                   int *count)
{
    const qf_value *v = qf_lay_in(n, slot);
    if (!qf_value_is_const(v))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): %s '%s' is not a constant (dynamic shapes are not supported)",
                        n->name, qf_op_label(n), what, v ? v->name : "?");
    if (v->type.dtype != QF_DTYPE_I64 && v->type.dtype != QF_DTYPE_I32)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s must be int64, got %s", n->name,
                        qf_op_label(n), what, qf_dtype_name(v->type.dtype));
    if (v->type.ndim > 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s must be 1-D, got rank %d", n->name,
                        qf_op_label(n), what, v->type.ndim);
    int64_t k = qf_tensor_numel(&v->type);
    if (k > max)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %s has %lld entries (at most %d)", n->name,
                        qf_op_label(n), what, (long long)k, max);
    for (int64_t i = 0; i < k; i++) out[i] = qf_tensor_get_i64(&v->type, i);
    *count = (int)k;
    return QF_OK;
}

/* Whether a shape-like operand is known yet. A graph input fed as a shape
 * (ONNX test models do that) is pending: its data arrives when the caller
 * binds it (qf_graph_bind_input), so the output keeps unknown dims until
 * then. A value computed at run time by a node is a dynamic shape: error. */
static qf_status qf_lay_pending(const qf_node *n, int slot, const char *what, bool *pending)
{
    const qf_value *v = qf_lay_in(n, slot);
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

/* An output of rank `ndim` whose dims wait for a pending operand. */
static qf_status qf_lay_set_unknown(qf_node *n, int i, qf_dtype dt, int64_t ndim)
{
    if (ndim < 0 || ndim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (%s): output rank is not known until its shape operands are bound",
                        n->name, qf_op_label(n));
    int64_t dims[QF_MAX_DIMS];
    for (int d = 0; d < ndim; d++) dims[d] = -1;
    qf_set_output(n, i, dt, (int)ndim, dims);
    return QF_OK;
}

/* The entry count of a 1-D operand (-1 if unknown). */
static int64_t qf_lay_len(const qf_node *n, int slot)
{
    const qf_value *v = qf_lay_in(n, slot);
    return v && v->type.ndim == 1 ? v->type.dims[0] : -1;
}

/* Axes from the `axes` attribute (older opsets) or input `slot` (opset 13+
 * for Squeeze / Unsqueeze / Split); *present = false when neither is given. */
static qf_status qf_lay_axes(const qf_node *n, int slot, int64_t *axes, int *count, bool *present)
{
    *present = false;
    *count = 0;
    if (qf_lay_in(n, slot)) {
        *present = true;
        return qf_lay_const_ints(n, slot, "axes", axes, QF_MAX_DIMS, count);
    }
    int k;
    const int64_t *a = qf_node_attr_ints(n, "axes", &k);
    if (!a) return QF_OK;
    if (k > QF_MAX_DIMS)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): %d axes", n->name, qf_op_label(n), k);
    memcpy(axes, a, sizeof *axes * (size_t)k);
    *count = k;
    *present = true;
    return QF_OK;
}

static void qf_lay_strides(int ndim, const int64_t *dims, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= dims[i];
    }
}

/* dst (row-major over `dims`) gets src[base + sum_i idx_i * stride_i]:
 * strides in elements, negative for reversed slices. Transpose and Slice. */
static void qf_lay_gather_strided(void *dst, const void *src, size_t esz, int ndim, const int64_t *dims,
                                  const int64_t *stride, int64_t base)
{
    int64_t numel = qf_shape_numel(ndim, dims);
    if (numel <= 0) return;
    char *d = dst;
    const char *s = src;
    if (ndim == 0) {
        memcpy(d, s + base * (int64_t)esz, esz);
        return;
    }
    int64_t inner = dims[ndim - 1], istr = stride[ndim - 1], off = base;
    int64_t idx[QF_MAX_DIMS] = {0};
    for (int64_t k = 0; k < numel; k += inner) {
        if (istr == 1) {
            memcpy(d, s + off * (int64_t)esz, (size_t)inner * esz);
        } else {
            switch (esz) {
#define QF_LAY_ROW_(T)                                                              \
    for (int64_t j = 0; j < inner; j++) ((T *)d)[j] = ((const T *)s)[off + j * istr]; \
    break;
            case 1: QF_LAY_ROW_(uint8_t)
            case 2: QF_LAY_ROW_(uint16_t)
            case 4: QF_LAY_ROW_(uint32_t)
            case 8: QF_LAY_ROW_(uint64_t)
#undef QF_LAY_ROW_
            default:
                for (int64_t j = 0; j < inner; j++)
                    memcpy(d + j * (int64_t)esz, s + (off + j * istr) * (int64_t)esz, esz);
            }
        }
        d += inner * (int64_t)esz;
        for (int a = ndim - 2; a >= 0; a--) {
            idx[a]++;
            off += stride[a];
            if (idx[a] < dims[a]) break;
            off -= stride[a] * dims[a];
            idx[a] = 0;
        }
    }
}

static qf_status qf_lay_copy(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    qf_tensor *y = io->out[0];
    size_t nb = qf_tensor_nbytes(y);
    if (nb != qf_tensor_nbytes(x))
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): %zu bytes in, %zu out", io->node->name,
                        qf_op_label(io->node), qf_tensor_nbytes(x), nb);
    if (nb && y->data != x->data) memcpy(y->data, x->data, nb);
    return QF_OK;
}

/* --- Flatten ------------------------------------------------------------------ */
static qf_status qf_flatten_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    int axis;
    QF_TRY(qf_lay_axis(n, qf_node_attr_int(n, "axis", 1), x->ndim, true, &axis));
    int64_t out[2] = {1, 1};
    for (int i = 0; i < x->ndim; i++) {
        int64_t *o = &out[i < axis ? 0 : 1];
        *o = (*o < 0 || x->dims[i] < 0) ? -1 : *o * x->dims[i];
    }
    qf_set_output(n, 0, x->dtype, 2, out);
    return QF_OK;
}

static qf_status qf_flatten_forward_f32(const qf_kernel_io *io) { return qf_lay_copy(io); }

/* --- Reshape ------------------------------------------------------------------ */
static qf_status qf_reshape_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    int64_t shape[QF_MAX_DIMS];
    int k;
    bool pending;
    QF_TRY(qf_lay_pending(n, 1, "shape", &pending));
    if (pending) return qf_lay_set_unknown(n, 0, x->dtype, qf_lay_len(n, 1));
    QF_TRY(qf_lay_const_ints(n, 1, "shape", shape, QF_MAX_DIMS, &k));
    bool allowzero = qf_node_attr_int(n, "allowzero", 0) != 0;
    int infer_at = -1;
    int64_t known = 1;
    bool unknown = false;
    bool copied[QF_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        if (shape[i] == -1) {
            if (infer_at >= 0)
                return qf_error(QF_ERR_INVALID, "node '%s' (Reshape): more than one -1 in the shape",
                                n->name);
            infer_at = i;
            continue;
        }
        if (shape[i] < -1)
            return qf_error(QF_ERR_INVALID, "node '%s' (Reshape): negative dimension %lld", n->name,
                            (long long)shape[i]);
        if (shape[i] == 0 && !allowzero) {
            /* 0 copies the input's dimension at the same index. */
            if (i >= x->ndim)
                return qf_error(QF_ERR_SHAPE,
                                "node '%s' (Reshape): shape[%d] = 0 copies a dimension the rank-%d "
                                "input does not have",
                                n->name, i, x->ndim);
            shape[i] = x->dims[i];
            copied[i] = true;
        }
        if (shape[i] < 0) unknown = true;
        else if (!qf_i64_mul(known, shape[i], &known) || known > QF_MAX_TENSOR_BYTES) {
            char b[128];
            return qf_error(QF_ERR_SHAPE, "node '%s' (Reshape): target shape %s is larger than qfold handles",
                            n->name, qf_shape_str(k, shape, b, sizeof b));
        }
    }
    int64_t total = qf_tensor_numel(x);
    char a[128], b[128];
    if (infer_at >= 0) {
        if (total < 0 || unknown) {
            /* [0, -1] on an [N, C, H, W] of unknown N: the dims a 0 copies
             * are the same on both sides, so the -1 is the product of the
             * input's other dims over the target's other dims when those
             * are all known (x.view(x.size(0), -1) keeps its C*H*W). */
            int64_t in_rest = 1, out_rest = 1;
            bool rest_known = true;
            for (int d = 0; d < x->ndim && rest_known; d++)
                if (!(d < k && copied[d])) {
                    rest_known = x->dims[d] >= 0;
                    if (rest_known && !qf_i64_mul(in_rest, x->dims[d], &in_rest))
                        rest_known = false;
                }
            for (int i = 0; i < k && rest_known; i++)
                if (i != infer_at && !copied[i]) {
                    rest_known = shape[i] >= 0;
                    if (rest_known && !qf_i64_mul(out_rest, shape[i], &out_rest))
                        rest_known = false;
                }
            shape[infer_at] =
                rest_known && out_rest > 0 && in_rest % out_rest == 0 ? in_rest / out_rest : -1;
        } else if (known == 0 || total % known != 0) {
            return qf_error(QF_ERR_SHAPE, "node '%s' (Reshape): cannot reshape %s into %s", n->name,
                            qf_shape_str(x->ndim, x->dims, a, sizeof a), qf_shape_str(k, shape, b, sizeof b));
        } else {
            shape[infer_at] = total / known;
        }
    } else if (total >= 0 && !unknown && total != known) {
        return qf_error(QF_ERR_SHAPE, "node '%s' (Reshape): cannot reshape %s (%lld elements) into %s",
                        n->name, qf_shape_str(x->ndim, x->dims, a, sizeof a), (long long)total,
                        qf_shape_str(k, shape, b, sizeof b));
    }
    qf_set_output(n, 0, x->dtype, k, shape);
    return QF_OK;
}

static qf_status qf_reshape_forward_f32(const qf_kernel_io *io) { return qf_lay_copy(io); }

/* --- Transpose ---------------------------------------------------------------- */
static qf_status qf_transpose_perm(const qf_node *n, int rank, int *perm)
{
    int k;
    const int64_t *p = qf_node_attr_ints(n, "perm", &k);
    if (!p) {
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
        return QF_OK;
    }
    if (k != rank)
        return qf_error(QF_ERR_INVALID, "node '%s' (Transpose): perm has %d entries for rank %d", n->name,
                        k, rank);
    bool seen[QF_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int a = 0;
        QF_TRY(qf_lay_axis(n, p[i], rank, false, &a));
        if (seen[a])
            return qf_error(QF_ERR_INVALID, "node '%s' (Transpose): perm repeats axis %d", n->name, a);
        seen[a] = true;
        perm[i] = a;
    }
    return QF_OK;
}

static qf_status qf_transpose_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    int perm[QF_MAX_DIMS];
    QF_TRY(qf_transpose_perm(n, x->ndim, perm));
    int64_t dims[QF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) dims[i] = x->dims[perm[i]];
    qf_set_output(n, 0, x->dtype, x->ndim, dims);
    return QF_OK;
}

static qf_status qf_transpose_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    qf_tensor *y = io->out[0];
    int perm[QF_MAX_DIMS];
    QF_TRY(qf_transpose_perm(io->node, x->ndim, perm));
    int64_t xs[QF_MAX_DIMS], st[QF_MAX_DIMS];
    qf_lay_strides(x->ndim, x->dims, xs);
    for (int i = 0; i < x->ndim; i++) st[i] = xs[perm[i]];
    qf_lay_gather_strided(y->data, x->data, qf_dtype_size(x->dtype), y->ndim, y->dims, st, 0);
    return QF_OK;
}

/* --- Concat ------------------------------------------------------------------- */
static qf_status qf_concat_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_attr *at = qf_node_attr(n, "axis");
    if (!at || at->type != QF_ATTR_INT)
        return qf_error(QF_ERR_INVALID, "node '%s' (Concat): attribute 'axis' is required", n->name);
    const qf_tensor *x0 = &n->inputs[0]->type;
    int axis;
    QF_TRY(qf_lay_axis(n, at->i, x0->ndim, false, &axis));
    int64_t dims[QF_MAX_DIMS];
    for (int d = 0; d < x0->ndim; d++) dims[d] = x0->dims[d];
    for (int i = 1; i < n->ninputs; i++) {
        if (!n->inputs[i])
            return qf_error(QF_ERR_INVALID, "node '%s' (Concat): input %d is missing", n->name, i);
        const qf_tensor *x = &n->inputs[i]->type;
        char a[128], b[128];
        if (x->dtype != x0->dtype)
            return qf_error(QF_ERR_INVALID, "node '%s' (Concat): input %d is %s, input 0 is %s", n->name,
                            i, qf_dtype_name(x->dtype), qf_dtype_name(x0->dtype));
        if (x->ndim != x0->ndim)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Concat): input %d has shape %s, input 0 %s",
                            n->name, i, qf_shape_str(x->ndim, x->dims, a, sizeof a),
                            qf_shape_str(x0->ndim, x0->dims, b, sizeof b));
        for (int d = 0; d < x->ndim; d++) {
            if (d == axis) {
                if (dims[d] < 0 || x->dims[d] < 0) dims[d] = -1;
                else if (!qf_i64_add(dims[d], x->dims[d], &dims[d]))
                    return qf_error(QF_ERR_SHAPE, "node '%s' (Concat): the output is larger than qfold handles",
                                    n->name);
            } else if (x->dims[d] >= 0 && dims[d] >= 0 && x->dims[d] != dims[d]) {
                return qf_error(QF_ERR_SHAPE,
                                "node '%s' (Concat): input %d has shape %s, input 0 %s (axis %d)",
                                n->name, i, qf_shape_str(x->ndim, x->dims, a, sizeof a),
                                qf_shape_str(x0->ndim, x0->dims, b, sizeof b), axis);
            } else if (dims[d] < 0) {
                dims[d] = x->dims[d];
            }
        }
    }
    qf_set_output(n, 0, x0->dtype, x0->ndim, dims);
    return QF_OK;
}

/* Concat and Split move the same blocks in opposite directions: along
 * `axis`, the whole is `outer` rows, each the parts' chunks side by side.
 * gather: parts -> whole (Concat); otherwise whole -> parts (Split). */
static qf_status qf_lay_axis_parts(const qf_node *n, qf_tensor *whole, const qf_tensor *const *parts,
                                   int nparts, bool gather)
{
    int axis;
    QF_TRY(qf_lay_axis(n, qf_node_attr_int(n, "axis", 0), whole->ndim, false, &axis));
    size_t esz = qf_dtype_size(whole->dtype);
    int64_t outer = qf_shape_numel(axis, whole->dims);
    int64_t inner = qf_shape_numel(whole->ndim - axis - 1, whole->dims + axis + 1);
    int64_t row = whole->dims[axis] * inner * (int64_t)esz, at = 0;
    for (int i = 0; i < nparts; i++) {
        char *part = parts[i]->data;
        int64_t chunk = parts[i]->dims[axis] * inner * (int64_t)esz;
        for (int64_t o = 0; chunk && o < outer; o++) {
            char *w = (char *)whole->data + o * row + at, *p = part + o * chunk;
            memcpy(gather ? w : p, gather ? p : w, (size_t)chunk);
        }
        at += chunk;
    }
    return QF_OK;
}

static qf_status qf_concat_forward_f32(const qf_kernel_io *io)
{
    return qf_lay_axis_parts(io->node, io->out[0], io->in, io->nin, true);
}

/* --- Slice -------------------------------------------------------------------- */
/* Per-axis start, step and length from the starts / ends / axes / steps
 * operands (ONNX opset 10+), clamped as the spec says. Axes whose dim is
 * unknown get length -1. */
static qf_status qf_slice_params(const qf_node *n, int ndim, const int64_t *dims,
                                 const qf_tensor *const ops[4], int64_t *start, int64_t *step,
                                 int64_t *len)
{
    const char *what[4] = {"starts", "ends", "axes", "steps"};
    int64_t k = -1;
    for (int i = 0; i < 4; i++) {
        if (!ops[i]) continue;
        if (ops[i]->dtype != QF_DTYPE_I64 && ops[i]->dtype != QF_DTYPE_I32)
            return qf_error(QF_ERR_INVALID, "node '%s' (Slice): %s must be int64 or int32, got %s",
                            n->name, what[i], qf_dtype_name(ops[i]->dtype));
        int64_t c = qf_tensor_numel(ops[i]);
        if (k < 0) k = c;
        if (ops[i]->ndim != 1 || c != k || k > ndim)
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (Slice): %s has %lld entries, starts %lld (rank %d input)",
                            n->name, what[i], (long long)c, (long long)k, ndim);
    }
    for (int a = 0; a < ndim; a++) {
        start[a] = 0;
        step[a] = 1;
        len[a] = dims[a];
    }
    bool seen[QF_MAX_DIMS] = {false};
    for (int64_t i = 0; i < k; i++) {
        int a = (int)i;
        if (ops[2]) QF_TRY(qf_lay_axis(n, qf_tensor_get_i64(ops[2], i), ndim, false, &a));
        if (seen[a]) return qf_error(QF_ERR_INVALID, "node '%s' (Slice): axis %d repeated", n->name, a);
        seen[a] = true;
        int64_t s = qf_tensor_get_i64(ops[0], i), e = qf_tensor_get_i64(ops[1], i);
        int64_t st = ops[3] ? qf_tensor_get_i64(ops[3], i) : 1;
        if (st == 0) return qf_error(QF_ERR_INVALID, "node '%s' (Slice): step 0 on axis %d", n->name, a);
        step[a] = st;
        int64_t d = dims[a];
        if (d < 0) {
            len[a] = -1;
            continue;
        }
        /* A step longer than the axis takes one element, as a step of the
         * axis length does: clamping keeps the length and the kernel's
         * strides (element stride * step) inside int64 for any step. */
        int64_t dmax = d > 0 ? d : 1;
        if (st > dmax) st = dmax;
        if (st < -dmax) st = -dmax;
        step[a] = st;
        if (s < 0) s += d;
        if (e < 0) e += d;
        if (st > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            len[a] = e > s ? (e - s + st - 1) / st : 0;
        } else {
            s = s < 0 ? 0 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            len[a] = s > e ? (s - e + (-st) - 1) / (-st) : 0;
        }
        start[a] = len[a] > 0 ? s : 0;
    }
    return QF_OK;
}

static qf_status qf_slice_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    const qf_tensor *ops[4] = {NULL, NULL, NULL, NULL};
    const char *what[4] = {"starts", "ends", "axes", "steps"};
    if (n->ninputs < 3)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (Slice): the opset-1 form (starts / ends attributes) is not supported",
                        n->name);
    for (int i = 0; i < 4; i++) {
        const qf_value *v = qf_lay_in(n, i + 1);
        if (!v) {
            if (i < 2) return qf_error(QF_ERR_INVALID, "node '%s' (Slice): %s missing", n->name, what[i]);
            continue;
        }
        bool pending;
        QF_TRY(qf_lay_pending(n, i + 1, what[i], &pending));
        if (pending) return qf_lay_set_unknown(n, 0, x->dtype, x->ndim);
        ops[i] = &v->type;
    }
    int64_t start[QF_MAX_DIMS], step[QF_MAX_DIMS], len[QF_MAX_DIMS];
    QF_TRY(qf_slice_params(n, x->ndim, x->dims, ops, start, step, len));
    qf_set_output(n, 0, x->dtype, x->ndim, len);
    return QF_OK;
}

/* Where the slice reads X: element strides st[] per output axis and the
 * offset of its first element (from the starts / ends / axes / steps). */
static qf_status slice_walk(const qf_kernel_io *io, int64_t *st, int64_t *base)
{
    const qf_tensor *x = io->in[0];
    const qf_tensor *ops[4];
    for (int i = 0; i < 4; i++) ops[i] = i + 1 < io->nin ? io->in[i + 1] : NULL;
    int64_t start[QF_MAX_DIMS], step[QF_MAX_DIMS], len[QF_MAX_DIMS], xs[QF_MAX_DIMS];
    QF_TRY(qf_slice_params(io->node, x->ndim, x->dims, ops, start, step, len));
    qf_lay_strides(x->ndim, x->dims, xs);
    *base = 0;
    for (int a = 0; a < x->ndim; a++) {
        st[a] = xs[a] * step[a];
        *base += start[a] * xs[a];
    }
    return QF_OK;
}

static qf_status qf_slice_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    qf_tensor *y = io->out[0];
    int64_t st[QF_MAX_DIMS], base;
    QF_TRY(slice_walk(io, st, &base));
    qf_lay_gather_strided(y->data, x->data, qf_dtype_size(x->dtype), y->ndim, y->dims, st, base);
    return QF_OK;
}

/* --- Split -------------------------------------------------------------------- */
static qf_status qf_split_infer(qf_graph *g, qf_node *n)
{
    const qf_tensor *x = &n->inputs[0]->type;
    int axis;
    QF_TRY(qf_lay_axis(n, qf_node_attr_int(n, "axis", 0), x->ndim, false, &axis));
    int nout = n->noutputs;
    int64_t split[64];
    int k = 0;
    bool given = false;
    bool pending;
    QF_TRY(qf_lay_pending(n, 1, "split", &pending));
    if (pending) {
        for (int i = 0; i < nout; i++) {
            int64_t dims[QF_MAX_DIMS];
            memcpy(dims, x->dims, sizeof dims);
            dims[axis] = -1;
            qf_set_output(n, i, x->dtype, x->ndim, dims);
        }
        return QF_OK;
    }
    if (qf_lay_in(n, 1)) {
        QF_TRY(qf_lay_const_ints(n, 1, "split", split, 64, &k));
        given = true;
    } else if (g->opset < 13 || qf_node_attr(n, "split")) {
        const int64_t *a = qf_node_attr_ints(n, "split", &k);
        if (a) {
            if (k > 64) return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Split): %d parts", n->name, k);
            memcpy(split, a, sizeof *split * (size_t)k);
            given = true;
        }
    }
    int64_t d = x->dims[axis];
    if (given) {
        if (k != nout)
            return qf_error(QF_ERR_INVALID, "node '%s' (Split): split has %d entries for %d outputs",
                            n->name, k, nout);
        int64_t sum = 0;
        for (int i = 0; i < k; i++) {
            if (split[i] < 0)
                return qf_error(QF_ERR_INVALID, "node '%s' (Split): negative split %lld", n->name,
                                (long long)split[i]);
            if (!qf_i64_add(sum, split[i], &sum))
                return qf_error(QF_ERR_SHAPE, "node '%s' (Split): split sizes overflow", n->name);
        }
        if (d >= 0 && sum != d)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Split): split sums to %lld, axis %d has %lld",
                            n->name, (long long)sum, axis, (long long)d);
    } else if (qf_node_attr(n, "num_outputs")) {
        if (nout > 64) return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Split): %d parts", n->name, nout);
        /* Opset 18's num_outputs: parts of ceil(d / n), the last one smaller. */
        int64_t part = d < 0 ? -1 : (d + nout - 1) / nout, last = d - part * (nout - 1);
        if (d >= 0 && last < 0)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Split): axis %d of size %lld does not split into %d parts",
                            n->name, axis, (long long)d, nout);
        for (int i = 0; i < nout; i++) split[i] = d < 0 ? -1 : i < nout - 1 ? part : last;
    } else {
        if (nout > 64) return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Split): %d parts", n->name, nout);
        /* Opset 13: equal parts; the dimension must divide evenly. */
        if (d >= 0 && d % nout != 0)
            return qf_error(QF_ERR_SHAPE,
                            "node '%s' (Split): axis %d of size %lld does not split into %d equal parts",
                            n->name, axis, (long long)d, nout);
        for (int i = 0; i < nout; i++) split[i] = d < 0 ? -1 : d / nout;
    }
    for (int i = 0; i < nout; i++) {
        int64_t dims[QF_MAX_DIMS];
        memcpy(dims, x->dims, sizeof dims);
        dims[axis] = split[i];
        qf_set_output(n, i, x->dtype, x->ndim, dims);
    }
    return QF_OK;
}

static qf_status qf_split_forward_f32(const qf_kernel_io *io)
{
    /* The input is only read: gather = false never writes through `whole`. */
    return qf_lay_axis_parts(io->node, (qf_tensor *)io->in[0], (const qf_tensor *const *)io->out, io->nout,
                             false);
}

/* --- Squeeze / Unsqueeze ------------------------------------------------------ */
static qf_status qf_squeeze_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    int64_t axes[QF_MAX_DIMS];
    int k;
    bool present, pending;
    QF_TRY(qf_lay_pending(n, 1, "axes", &pending));
    if (pending) {
        int64_t len = qf_lay_len(n, 1);
        return qf_lay_set_unknown(n, 0, x->dtype, len < 0 ? -1 : x->ndim - len);
    }
    QF_TRY(qf_lay_axes(n, 1, axes, &k, &present));
    bool drop[QF_MAX_DIMS] = {false};
    if (present) {
        for (int i = 0; i < k; i++) {
            int a;
            QF_TRY(qf_lay_axis(n, axes[i], x->ndim, false, &a));
            if (x->dims[a] > 1 || x->dims[a] == 0)
                return qf_error(QF_ERR_SHAPE, "node '%s' (Squeeze): axis %d has size %lld, not 1",
                                n->name, a, (long long)x->dims[a]);
            drop[a] = true;
        }
    } else {
        /* No axes: every dim of size 1 goes; an unknown dim is taken to stay
         * (the usual batch dimension) until shapes are bound. */
        for (int a = 0; a < x->ndim; a++) drop[a] = x->dims[a] == 1;
    }
    int64_t dims[QF_MAX_DIMS];
    int r = 0;
    for (int a = 0; a < x->ndim; a++)
        if (!drop[a]) dims[r++] = x->dims[a];
    qf_set_output(n, 0, x->dtype, r, dims);
    return QF_OK;
}

static qf_status qf_squeeze_forward_f32(const qf_kernel_io *io) { return qf_lay_copy(io); }

static qf_status qf_unsqueeze_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    int64_t axes[QF_MAX_DIMS];
    int k;
    bool present, pending;
    QF_TRY(qf_lay_pending(n, 1, "axes", &pending));
    if (pending) {
        int64_t len = qf_lay_len(n, 1);
        return qf_lay_set_unknown(n, 0, x->dtype, len < 0 ? -1 : x->ndim + len);
    }
    QF_TRY(qf_lay_axes(n, 1, axes, &k, &present));
    if (!present) return qf_error(QF_ERR_INVALID, "node '%s' (Unsqueeze): axes missing", n->name);
    int r = x->ndim + k;
    if (r > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Unsqueeze): rank %d (qfold handles up to %d)",
                        n->name, r, QF_MAX_DIMS);
    bool add[QF_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int a;
        QF_TRY(qf_lay_axis(n, axes[i], r, false, &a));
        if (add[a]) return qf_error(QF_ERR_INVALID, "node '%s' (Unsqueeze): axis %d repeated", n->name, a);
        add[a] = true;
    }
    int64_t dims[QF_MAX_DIMS];
    for (int a = 0, j = 0; a < r; a++) dims[a] = add[a] ? 1 : x->dims[j++];
    qf_set_output(n, 0, x->dtype, r, dims);
    return QF_OK;
}

static qf_status qf_unsqueeze_forward_f32(const qf_kernel_io *io) { return qf_lay_copy(io); }

/* --- Pad ---------------------------------------------------------------------- */
typedef enum { QF_PAD_CONSTANT, QF_PAD_REFLECT, QF_PAD_EDGE } qf_pad_mode;

static qf_status qf_pad_mode_of(const qf_node *n, qf_pad_mode *mode)
{
    *mode = QF_PAD_CONSTANT; /* defined on every path */
    const char *m = qf_node_attr_string(n, "mode", "constant");
    if (strcmp(m, "constant") == 0) *mode = QF_PAD_CONSTANT;
    else if (strcmp(m, "reflect") == 0) *mode = QF_PAD_REFLECT;
    else if (strcmp(m, "edge") == 0) *mode = QF_PAD_EDGE;
    else return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Pad): mode '%s' is not supported", n->name, m);
    return QF_OK;
}

/* pads[a] (begin) and pads[a + ndim] (end) for every axis, from the pads
 * operand and the optional axes operand (opset 18). */
static qf_status qf_pad_amounts(const qf_node *n, int ndim, const qf_tensor *pt, const qf_tensor *at,
                                int64_t *pads)
{
    int64_t k = qf_tensor_numel(pt);
    int naxes = ndim;
    int axes[QF_MAX_DIMS];
    for (int a = 0; a < ndim; a++) axes[a] = a;
    if (at) {
        naxes = (int)qf_tensor_numel(at);
        if (naxes > ndim)
            return qf_error(QF_ERR_INVALID, "node '%s' (Pad): %d axes for rank %d", n->name, naxes, ndim);
        for (int i = 0; i < naxes; i++) QF_TRY(qf_lay_axis(n, qf_tensor_get_i64(at, i), ndim, false, &axes[i]));
    }
    if (pt->dtype != QF_DTYPE_I64 || k != 2 * naxes)
        return qf_error(QF_ERR_INVALID, "node '%s' (Pad): pads must be %d int64 values, got %lld %s",
                        n->name, 2 * naxes, (long long)k, qf_dtype_name(pt->dtype));
    for (int a = 0; a < 2 * ndim; a++) pads[a] = 0;
    for (int i = 0; i < naxes; i++) {
        pads[axes[i]] = qf_tensor_get_i64(pt, i);
        pads[axes[i] + ndim] = qf_tensor_get_i64(pt, i + naxes);
    }
    return QF_OK;
}

static qf_status qf_pad_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    qf_pad_mode mode;
    QF_TRY(qf_pad_mode_of(n, &mode));
    if (n->ninputs < 2 || !n->inputs[1])
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (Pad): the opset-2 form (pads attribute) is not supported", n->name);
    int64_t tmp[2 * QF_MAX_DIMS];
    int k;
    bool pending, pending_axes;
    QF_TRY(qf_lay_pending(n, 1, "pads", &pending));
    QF_TRY(qf_lay_pending(n, 3, "axes", &pending_axes));
    if (pending || pending_axes) return qf_lay_set_unknown(n, 0, x->dtype, x->ndim);
    QF_TRY(qf_lay_const_ints(n, 1, "pads", tmp, 2 * QF_MAX_DIMS, &k));
    const qf_value *av = qf_lay_in(n, 3);
    if (av) QF_TRY(qf_lay_const_ints(n, 3, "axes", tmp, QF_MAX_DIMS, &k));
    int64_t pads[2 * QF_MAX_DIMS];
    QF_TRY(qf_pad_amounts(n, x->ndim, &n->inputs[1]->type, av ? &av->type : NULL, pads));
    const qf_value *cv = qf_lay_in(n, 2);
    if (cv && cv->type.dtype != x->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (Pad): constant_value is %s, data is %s", n->name,
                        qf_dtype_name(cv->type.dtype), qf_dtype_name(x->dtype));
    int64_t dims[QF_MAX_DIMS];
    for (int a = 0; a < x->ndim; a++) {
        int64_t d = x->dims[a];
        if (d < 0) {
            dims[a] = -1;
            continue;
        }
        /* A pad may crop (negative), but not more than the whole axis. */
        if (pads[a] < -d || pads[a + x->ndim] < -d || !qf_i64_add(d, pads[a], &dims[a]) ||
            !qf_i64_add(dims[a], pads[a + x->ndim], &dims[a]))
            return qf_error(QF_ERR_SHAPE, "node '%s' (Pad): pads %lld and %lld do not fit axis %d of size %lld",
                            n->name, (long long)pads[a], (long long)pads[a + x->ndim], a, (long long)d);
        if (dims[a] < 0)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Pad): axis %d of size %lld padded to %lld", n->name,
                            a, (long long)d, (long long)dims[a]);
        if (mode != QF_PAD_CONSTANT && d == 0 && dims[a] > 0)
            return qf_error(QF_ERR_INVALID, "node '%s' (Pad): cannot %s-pad the empty axis %d", n->name,
                            mode == QF_PAD_EDGE ? "edge" : "reflect", a);
    }
    qf_set_output(n, 0, x->dtype, x->ndim, dims);
    return QF_OK;
}

/* The source index along an axis of size d for padded position j (j may be
 * outside [0, d)); -1 means "the constant". */
static int64_t qf_pad_source(qf_pad_mode mode, int64_t j, int64_t d)
{
    if (j >= 0 && j < d) return j;
    switch (mode) {
    case QF_PAD_CONSTANT: return -1;
    case QF_PAD_EDGE: return j < 0 ? 0 : d - 1;
    case QF_PAD_REFLECT: {
        /* Mirror without repeating the edge (numpy 'reflect'), as often as
         * the pad needs: the pattern has period 2 (d - 1). */
        if (d == 1) return 0;
        int64_t period = 2 * (d - 1);
        j %= period;
        if (j < 0) j += period;
        return j < d ? j : period - j;
    }
    }
    return -1;
}

static qf_status qf_pad_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    qf_tensor *y = io->out[0];
    qf_pad_mode mode;
    QF_TRY(qf_pad_mode_of(io->node, &mode));
    int64_t pads[2 * QF_MAX_DIMS];
    QF_TRY(qf_pad_amounts(io->node, x->ndim, io->in[1], io->nin > 3 ? io->in[3] : NULL, pads));
    size_t esz = qf_dtype_size(x->dtype);
    unsigned char fill[16] = {0};
    const qf_tensor *cv = io->nin > 2 ? io->in[2] : NULL;
    if (cv && qf_tensor_numel(cv) > 0) memcpy(fill, cv->data, esz);
    int64_t xs[QF_MAX_DIMS], idx[QF_MAX_DIMS] = {0};
    qf_lay_strides(x->ndim, x->dims, xs);
    int64_t numel = qf_tensor_numel(y);
    char *dst = y->data;
    const char *src = x->data;
    for (int64_t k = 0; k < numel; k++) {
        int64_t off = 0;
        bool inside = true;
        for (int a = 0; a < x->ndim && inside; a++) {
            int64_t j = qf_pad_source(mode, idx[a] - pads[a], x->dims[a]);
            if (j < 0) inside = false;
            else off += j * xs[a];
        }
        memcpy(dst + k * (int64_t)esz, inside ? src + off * (int64_t)esz : (const char *)fill, esz);
        for (int a = y->ndim - 1; a >= 0; a--) {
            if (++idx[a] < y->dims[a]) break;
            idx[a] = 0;
        }
    }
    return QF_OK;
}

/* --- backward (training; the contract is in op_table.h) ----------------------- */

/* din[i] all zeros (when wanted). */
static void qf_lay_grad_zero(const qf_kernel_io *io, int i)
{
    if (i < io->nin && io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
}

/* The ops that keep the element order (Flatten, Reshape, Squeeze, Unsqueeze,
 * Identity): dx is dy under x's shape. Shape operands (int64) get none. */
static qf_status qf_lay_grad_copy(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    if (!io->dout[0]) {
        qf_lay_grad_zero(io, 0);
        return QF_OK;
    }
    memcpy(io->din[0]->data, io->dout[0]->data, qf_tensor_nbytes(io->din[0]));
    return QF_OK;
}

/* Transpose: dx = dy transposed back. dx is walked in order; its axis
 * perm[i] is dy's axis i, so it steps by dy's stride of axis i. */
static qf_status qf_transpose_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0] || !io->dout[0]) {
        qf_lay_grad_zero(io, 0);
        return QF_OK;
    }
    const qf_tensor *dy = io->dout[0];
    qf_tensor *dx = io->din[0];
    int perm[QF_MAX_DIMS];
    QF_TRY(qf_transpose_perm(io->node, dx->ndim, perm));
    int64_t ys[QF_MAX_DIMS], st[QF_MAX_DIMS];
    qf_lay_strides(dy->ndim, dy->dims, ys);
    for (int i = 0; i < dy->ndim; i++) st[perm[i]] = ys[i];
    qf_lay_gather_strided(dx->data, dy->data, sizeof(float), dx->ndim, dx->dims, st, 0);
    return QF_OK;
}

/* Concat / Split backward: the blocks of `whole` along the node's axis, one
 * per part i (shape shapes[i]), copied from (gather) or to data[i]'s data; a
 * part whose data[i] is NULL is skipped. qf_lay_axis_parts for parts that
 * may be missing. */
static qf_status qf_lay_grad_parts(const qf_node *n, float *whole, const qf_tensor *wshape, int nparts,
                                   const qf_tensor *const *shapes, const qf_tensor *const *data, bool gather)
{
    int axis;
    QF_TRY(qf_lay_axis(n, qf_node_attr_int(n, "axis", 0), wshape->ndim, false, &axis));
    int64_t outer = qf_shape_numel(axis, wshape->dims);
    int64_t inner = qf_shape_numel(wshape->ndim - axis - 1, wshape->dims + axis + 1);
    int64_t row = wshape->dims[axis] * inner, at = 0;
    for (int i = 0; i < nparts; i++) {
        int64_t chunk = shapes[i]->dims[axis] * inner;
        float *part = data[i] ? data[i]->data : NULL;
        for (int64_t o = 0; chunk && part && o < outer; o++) {
            float *w = whole + o * row + at, *p = part + o * chunk;
            memcpy(gather ? w : p, gather ? p : w, sizeof(float) * (size_t)chunk);
        }
        at += chunk;
    }
    return QF_OK;
}

/* Concat: each input's gradient is its block of dy (Split's forward). */
static qf_status qf_concat_backward_f32(const qf_kernel_io *io)
{
    if (!io->dout[0]) {
        for (int i = 0; i < io->nin; i++) qf_lay_grad_zero(io, i);
        return QF_OK;
    }
    return qf_lay_grad_parts(io->node, io->dout[0]->data, io->dout[0], io->nin, io->in,
                             (const qf_tensor *const *)io->din, false);
}

/* Split: dx is the outputs' gradients side by side (Concat's forward); an
 * output without gradient leaves its block zero. */
static qf_status qf_split_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    for (int j = 0; j < io->nout; j++)
        if (!io->dout[j]) {
            qf_lay_grad_zero(io, 0);
            break;
        }
    return qf_lay_grad_parts(io->node, io->din[0]->data, io->din[0], io->nout,
                             (const qf_tensor *const *)io->out, io->dout, true);
}

/* Slice: dx is zero but where an element was taken, which gets its dy (each
 * element is taken at most once, also with negative steps). Reads the
 * starts / ends / axes / steps operands (bwd_in bits 1..4). */
static qf_status qf_slice_backward_f32(const qf_kernel_io *io)
{
    if (!io->din[0]) return QF_OK;
    qf_lay_grad_zero(io, 0);
    if (!io->dout[0]) return QF_OK;
    const qf_tensor *dy = io->dout[0];
    int64_t st[QF_MAX_DIMS], base;
    QF_TRY(slice_walk(io, st, &base));
    const int64_t numel = qf_tensor_numel(dy);
    if (numel <= 0) return QF_OK;
    float *dx = io->din[0]->data;
    const float *g = dy->data;
    const int nd = dy->ndim;
    if (nd == 0) {
        dx[base] = g[0];
        return QF_OK;
    }
    const int64_t inner = dy->dims[nd - 1], istr = st[nd - 1];
    int64_t idx[QF_MAX_DIMS] = {0}, off = base;
    for (int64_t k = 0; k < numel; k += inner, g += inner) {
        for (int64_t j = 0; j < inner; j++) dx[off + j * istr] = g[j];
        for (int a = nd - 2; a >= 0; a--) {
            off += st[a];
            if (++idx[a] < dy->dims[a]) break;
            off -= st[a] * dy->dims[a];
            idx[a] = 0;
        }
    }
    return QF_OK;
}

/* Pad: every output element's dy goes back to the input element it was read
 * from (constant mode: the kept block; edge / reflect: summed over every
 * copy, as PyTorch's replication / reflection pad backward); a cropped input
 * element (negative pad) gets 0. A float constant_value wanted as a gradient
 * gets the sum of dy over the padded positions. Reads pads and axes (bwd_in
 * bits 1 and 3). */
static qf_status qf_pad_backward_f32(const qf_kernel_io *io)
{
    qf_tensor *dxt = io->din[0];
    qf_tensor *dct = io->nin > 2 && io->in[2] ? io->din[2] : NULL;
    qf_lay_grad_zero(io, 0);
    qf_lay_grad_zero(io, 2);
    if ((!dxt && !dct) || !io->dout[0]) return QF_OK;
    const qf_tensor *x = io->in[0], *dy = io->dout[0];
    qf_pad_mode mode;
    QF_TRY(qf_pad_mode_of(io->node, &mode));
    int64_t pads[2 * QF_MAX_DIMS];
    QF_TRY(qf_pad_amounts(io->node, x->ndim, io->in[1], io->nin > 3 ? io->in[3] : NULL, pads));
    int64_t xs[QF_MAX_DIMS], idx[QF_MAX_DIMS] = {0};
    qf_lay_strides(x->ndim, x->dims, xs);
    const int64_t numel = qf_tensor_numel(dy);
    const float *g = dy->data;
    float *dx = dxt ? dxt->data : NULL;
    double outside = 0.0;
    for (int64_t k = 0; k < numel; k++) {
        int64_t off = 0;
        bool inside = true;
        for (int a = 0; a < x->ndim && inside; a++) {
            int64_t j = qf_pad_source(mode, idx[a] - pads[a], x->dims[a]);
            if (j < 0) inside = false;
            else off += j * xs[a];
        }
        if (!inside) outside += g[k];
        else if (dx) dx[off] += g[k];
        for (int a = dy->ndim - 1; a >= 0; a--) {
            if (++idx[a] < dy->dims[a]) break;
            idx[a] = 0;
        }
    }
    if (dct && qf_tensor_numel(dct) > 0) ((float *)dct->data)[0] = (float)outside;
    return QF_OK;
}

/* --- Identity ------------------------------------------------------------------- */
static qf_status qf_identity_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    qf_set_output(n, 0, x->dtype, x->ndim, x->dims);
    return QF_OK;
}

static qf_status qf_identity_forward_f32(const qf_kernel_io *io) { return qf_lay_copy(io); }

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_flatten_kernels = {
    .infer = qf_flatten_infer,
    .forward_f32 = qf_flatten_forward_f32,
    .backward_f32 = qf_lay_grad_copy,
};

const qf_op_kernels qf_reshape_kernels = {
    .infer = qf_reshape_infer,
    .forward_f32 = qf_reshape_forward_f32,
    .backward_f32 = qf_lay_grad_copy,
};

const qf_op_kernels qf_transpose_kernels = {
    .infer = qf_transpose_infer,
    .forward_f32 = qf_transpose_forward_f32,
    .backward_f32 = qf_transpose_backward_f32,
};

const qf_op_kernels qf_concat_kernels = {
    .infer = qf_concat_infer,
    .forward_f32 = qf_concat_forward_f32,
    .backward_f32 = qf_concat_backward_f32,
};

const qf_op_kernels qf_slice_kernels = {
    .infer = qf_slice_infer,
    .forward_f32 = qf_slice_forward_f32,
    .backward_f32 = qf_slice_backward_f32,
    .bwd_in = 0x1eu, /* starts, ends, axes, steps */
};

const qf_op_kernels qf_split_kernels = {
    .infer = qf_split_infer,
    .forward_f32 = qf_split_forward_f32,
    .backward_f32 = qf_split_backward_f32,
};

const qf_op_kernels qf_squeeze_kernels = {
    .infer = qf_squeeze_infer,
    .forward_f32 = qf_squeeze_forward_f32,
    .backward_f32 = qf_lay_grad_copy,
};

const qf_op_kernels qf_unsqueeze_kernels = {
    .infer = qf_unsqueeze_infer,
    .forward_f32 = qf_unsqueeze_forward_f32,
    .backward_f32 = qf_lay_grad_copy,
};

const qf_op_kernels qf_pad_kernels = {
    .infer = qf_pad_infer,
    .forward_f32 = qf_pad_forward_f32,
    .backward_f32 = qf_pad_backward_f32,
    .bwd_in = (1u << 1) | (1u << 3), /* pads, axes */
};

const qf_op_kernels qf_identity_kernels = {
    .infer = qf_identity_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_identity_forward_f32,
    .backward_f32 = qf_lay_grad_copy,
};
