/* Broadcasting and indexing ops: Expand, Where, Range, ScatterND (ONNX opsets
 * 7..21).
 *
 * PyTorch exports these mostly in shape and mask computations (ViT's class
 * token, Swin's shifted-window attention mask) whose inputs are all known at
 * import, where they fold to constants with these kernels. Expand and Where
 * move element bytes, so they handle every dtype. Operands that decide an
 * output shape (Expand's shape, Range's start / limit / delta) must be
 * constants; a graph input fed there (as in the ONNX node tests) is pending
 * until the caller binds it (qf_graph_bind_input).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/math/broadcast.h"
#include "ops/kernels.h"

/* Whether input `slot` is a shape-deciding operand still to be bound (a graph
 * input); an operand computed by a node is a dynamic shape: error. */
static qf_status qf_idx_pending(const qf_node *n, int slot, const char *what, bool *pending)
{
    const qf_value *v = n->inputs[slot];
    *pending = false;
    if (qf_value_is_const(v)) return QF_OK;
    if (v->kind == QF_VALUE_INPUT && !v->producer) {
        *pending = true;
        return QF_OK;
    }
    return qf_error(QF_ERR_UNSUPPORTED,
                    "node '%s' (%s): %s '%s' is not a constant (dynamic shapes are not supported)", n->name,
                    qf_op_label(n), what, v->name);
}

/* Fill y from broadcast operands element by element: without `ctensor`,
 * y = ops[0] broadcast; with it, y = cond ? ops[0] : ops[1] (cond is
 * ctensor's bool data, broadcast too). */
static void qf_idx_bcast_copy(qf_tensor *y, int nops, const qf_tensor *const *ops, const uint8_t *cond,
                              const qf_tensor *ctensor)
{
    size_t esz = qf_dtype_size(y->dtype);
    char *py = y->data;
    const qf_tensor *all[QF_BCAST_MAX_OPS];
    int k = 0;
    if (ctensor) all[k++] = ctensor;
    for (int i = 0; i < nops; i++) all[k++] = ops[i];
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, y->ndim, y->dims, k, all);
    int first = ctensor ? 1 : 0;
    for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it)) {
        for (int64_t i = 0; i < it.len; i++) {
            int src = first;
            if (ctensor) src = cond[it.off[0] + i * it.step[0]] ? 1 : 2;
            const char *p = all[src]->data;
            memcpy(py + (size_t)(r * it.len + i) * esz, p + (size_t)(it.off[src] + i * it.step[src]) * esz, esz);
        }
    }
}

/* --- Expand ------------------------------------------------------------------- */
/* Expand (opset 8+): numpy broadcasting of the input with `shape` (both ways:
 * a 1 in `shape` keeps the input's dim, and `shape` may have fewer dims). */
static qf_status qf_expand_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 2));
    const qf_tensor *x = &n->inputs[0]->type;
    const qf_value *s = n->inputs[1];
    if (s->type.dtype != QF_DTYPE_I64 || s->type.ndim != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (Expand): shape must be a 1-D int64 tensor", n->name);
    bool pending;
    QF_TRY(qf_idx_pending(n, 1, "shape", &pending));
    int64_t k = s->type.dims[0];
    if (k > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Expand): rank %lld (qfold handles up to %d)", n->name,
                        (long long)k, QF_MAX_DIMS);
    int64_t shape[QF_MAX_DIMS];
    if (pending) {
        if (k < 0)
            return qf_error(QF_ERR_UNSUPPORTED,
                            "node '%s' (Expand): output rank is not known until the shape is bound", n->name);
        /* A dim of `shape` may be 1 (keep x's) or anything: unknown. */
        int nd = (int)k > x->ndim ? (int)k : x->ndim;
        for (int d = 0; d < nd; d++) shape[d] = -1;
        qf_set_output(n, 0, x->dtype, nd, shape);
        return QF_OK;
    }
    for (int64_t i = 0; i < k; i++) {
        shape[i] = qf_tensor_get_i64(&s->type, i);
        if (shape[i] < 0)
            return qf_error(QF_ERR_INVALID, "node '%s' (Expand): negative dimension %lld in shape", n->name,
                            (long long)shape[i]);
    }
    int ny;
    int64_t y[QF_MAX_DIMS];
    QF_TRY(qf_broadcast_infer(n, x->ndim, x->dims, (int)k, shape, &ny, y));
    qf_set_output(n, 0, x->dtype, ny, y);
    return QF_OK;
}

static qf_status qf_expand_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *ops[1] = {io->in[0]};
    if (qf_tensor_numel(io->out[0]) > 0) qf_idx_bcast_copy(io->out[0], 1, ops, NULL, NULL);
    return QF_OK;
}

/* --- Where -------------------------------------------------------------------- */
/* Where (opset 9+): y = cond ? x : z, the three broadcast together; x and z
 * share a dtype (any), cond is bool. */
static qf_status qf_where_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 3));
    const qf_tensor *c = &n->inputs[0]->type, *x = &n->inputs[1]->type, *z = &n->inputs[2]->type;
    if (c->dtype != QF_DTYPE_BOOL)
        return qf_error(QF_ERR_INVALID, "node '%s' (Where): condition must be bool, got %s", n->name,
                        qf_dtype_name(c->dtype));
    if (x->dtype != z->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (Where): X and Y dtypes differ (%s and %s)", n->name,
                        qf_dtype_name(x->dtype), qf_dtype_name(z->dtype));
    int n1, n2;
    int64_t d1[QF_MAX_DIMS], d2[QF_MAX_DIMS];
    QF_TRY(qf_broadcast_infer(n, c->ndim, c->dims, x->ndim, x->dims, &n1, d1));
    QF_TRY(qf_broadcast_infer(n, n1, d1, z->ndim, z->dims, &n2, d2));
    qf_set_output(n, 0, x->dtype, n2, d2);
    return QF_OK;
}

static qf_status qf_where_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *ops[2] = {io->in[1], io->in[2]};
    if (qf_tensor_numel(io->out[0]) > 0) qf_idx_bcast_copy(io->out[0], 2, ops, io->in[0]->data, io->in[0]);
    return QF_OK;
}

/* --- Range -------------------------------------------------------------------- */
/* Range (opset 11): start, start + delta, ... while before limit; the three
 * are scalars of one dtype. Length max(ceil((limit - start) / delta), 0). */
static const qf_dtype qf_range_dtypes[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32, QF_DTYPE_I64};

static bool qf_range_is_int(qf_dtype dt) { return dt == QF_DTYPE_I32 || dt == QF_DTYPE_I64; }

static qf_status qf_range_length(const qf_node *n, const qf_tensor *s, const qf_tensor *l, const qf_tensor *d,
                                 int64_t *len)
{
    if (qf_range_is_int(s->dtype)) {
        int64_t a = qf_tensor_get_i64(s, 0), b = qf_tensor_get_i64(l, 0), st = qf_tensor_get_i64(d, 0);
        if (st == 0) return qf_error(QF_ERR_INVALID, "node '%s' (Range): delta is 0", n->name);
        /* ceil((b - a) / st) exactly, in uint64: the distance between two
         * int64s and |st| always fit there. The last element then lies
         * between a and b, so the kernel's a + i * st cannot overflow. */
        uint64_t dist, step = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st;
        if (st > 0 ? b <= a : b >= a) {
            *len = 0;
            return QF_OK;
        }
        dist = st > 0 ? (uint64_t)b - (uint64_t)a : (uint64_t)a - (uint64_t)b;
        uint64_t q = (dist - 1) / step + 1;
        if (q > (uint64_t)QF_MAX_TENSOR_BYTES)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Range): %llu elements, more than qfold handles", n->name,
                            (unsigned long long)q);
        *len = (int64_t)q;
    } else {
        double a = qf_tensor_get_f64(s, 0), b = qf_tensor_get_f64(l, 0), st = qf_tensor_get_f64(d, 0);
        if (st == 0 || st != st)
            return qf_error(QF_ERR_INVALID, "node '%s' (Range): delta is %g", n->name, st);
        double q = ceil((b - a) / st);
        if (q != q || q > 1e12)
            return qf_error(QF_ERR_INVALID, "node '%s' (Range): %g elements", n->name, q);
        *len = q > 0 ? (int64_t)q : 0;
    }
    return QF_OK;
}

static qf_status qf_range_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 3));
    static const char *const what[3] = {"start", "limit", "delta"};
    qf_dtype dt = n->inputs[0]->type.dtype;
    bool ok = false;
    for (int i = 0; i < 4; i++) ok |= dt == qf_range_dtypes[i];
    if (!ok)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Range): dtype %s is not supported", n->name,
                        qf_dtype_name(dt));
    bool any_pending = false;
    for (int i = 0; i < 3; i++) {
        const qf_tensor *t = &n->inputs[i]->type;
        if (t->dtype != dt)
            return qf_error(QF_ERR_INVALID, "node '%s' (Range): %s is %s, start is %s", n->name, what[i],
                            qf_dtype_name(t->dtype), qf_dtype_name(dt));
        /* Exactly one element: the length and the kernel read element 0. */
        int64_t numel = qf_shape_numel(t->ndim, t->dims);
        if (numel != 1 && numel != -1)
            return qf_error(QF_ERR_SHAPE, "node '%s' (Range): %s must be a scalar, it has %lld elements", n->name,
                            what[i], (long long)numel);
        bool pending;
        QF_TRY(qf_idx_pending(n, i, what[i], &pending));
        any_pending |= pending;
    }
    int64_t len = -1;
    if (!any_pending)
        QF_TRY(qf_range_length(n, &n->inputs[0]->type, &n->inputs[1]->type, &n->inputs[2]->type, &len));
    qf_set_output(n, 0, dt, 1, &len);
    return QF_OK;
}

static qf_status qf_range_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *s = io->in[0], *d = io->in[2];
    qf_tensor *y = io->out[0];
    int64_t len = qf_tensor_numel(y);
    switch (y->dtype) {
    case QF_DTYPE_I64: {
        int64_t a = qf_tensor_get_i64(s, 0), st = qf_tensor_get_i64(d, 0);
        for (int64_t i = 0; i < len; i++) ((int64_t *)y->data)[i] = a + i * st;
        break;
    }
    case QF_DTYPE_I32: {
        int64_t a = qf_tensor_get_i64(s, 0), st = qf_tensor_get_i64(d, 0);
        for (int64_t i = 0; i < len; i++) ((int32_t *)y->data)[i] = (int32_t)(a + i * st);
        break;
    }
    /* start + i * delta in the input's own precision, as ONNX defines it */
    case QF_DTYPE_F32: {
        float a = ((const float *)s->data)[0], st = ((const float *)d->data)[0];
        for (int64_t i = 0; i < len; i++) ((float *)y->data)[i] = a + (float)i * st;
        break;
    }
    case QF_DTYPE_F64: {
        double a = ((const double *)s->data)[0], st = ((const double *)d->data)[0];
        for (int64_t i = 0; i < len; i++) ((double *)y->data)[i] = a + (double)i * st;
        break;
    }
    default:
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Range): dtype %s is not supported", io->node->name,
                        qf_dtype_name(y->dtype));
    }
    return QF_OK;
}

/* --- ScatterND ---------------------------------------------------------------- */
/* ScatterND (opset 11, reduction since 16): y = data, then for every index
 * tuple j (the last axis of `indices`, k entries) the slice data[idx_j, ...]
 * of rank r - k is replaced by (or, reduction add / mul, combined with)
 * updates[j, ...]. updates has shape indices.shape[:-1] + data.shape[k:]. */
typedef enum { QF_SCATTER_NONE, QF_SCATTER_ADD, QF_SCATTER_MUL } qf_scatter_mode;

static qf_status qf_scatter_mode_of(const qf_node *n, qf_scatter_mode *mode)
{
    *mode = QF_SCATTER_NONE; /* defined on every path */
    const char *r = qf_node_attr_string(n, "reduction", "none");
    if (strcmp(r, "none") == 0) *mode = QF_SCATTER_NONE;
    else if (strcmp(r, "add") == 0) *mode = QF_SCATTER_ADD;
    else if (strcmp(r, "mul") == 0) *mode = QF_SCATTER_MUL;
    else
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (ScatterND): reduction '%s' is not supported", n->name, r);
    return QF_OK;
}

static qf_status qf_scatter_nd_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    QF_TRY(qf_op_check_inputs(n, 3));
    const qf_tensor *x = &n->inputs[0]->type, *ix = &n->inputs[1]->type, *u = &n->inputs[2]->type;
    qf_scatter_mode mode;
    QF_TRY(qf_scatter_mode_of(n, &mode));
    if (ix->dtype != QF_DTYPE_I64)
        return qf_error(QF_ERR_INVALID, "node '%s' (ScatterND): indices must be int64, got %s", n->name,
                        qf_dtype_name(ix->dtype));
    if (u->dtype != x->dtype)
        return qf_error(QF_ERR_INVALID, "node '%s' (ScatterND): updates are %s, data is %s", n->name,
                        qf_dtype_name(u->dtype), qf_dtype_name(x->dtype));
    if (mode != QF_SCATTER_NONE && x->dtype != QF_DTYPE_F32 && x->dtype != QF_DTYPE_F64 &&
        x->dtype != QF_DTYPE_I32 && x->dtype != QF_DTYPE_I64)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (ScatterND): reduction on %s is not supported", n->name,
                        qf_dtype_name(x->dtype));
    if (ix->ndim < 1)
        return qf_error(QF_ERR_SHAPE, "node '%s' (ScatterND): indices must have rank >= 1", n->name);
    int64_t k = ix->dims[ix->ndim - 1];
    if (k >= 0 && (k < 1 || k > x->ndim))
        return qf_error(QF_ERR_SHAPE, "node '%s' (ScatterND): index tuples of %lld entries into rank %d data",
                        n->name, (long long)k, x->ndim);
    /* updates' shape = indices.shape[:-1] + data.shape[k:] */
    if (k >= 0) {
        int want = ix->ndim - 1 + x->ndim - (int)k;
        bool ok = u->ndim == want;
        for (int d = 0; ok && d < ix->ndim - 1; d++)
            ok = ix->dims[d] < 0 || u->dims[d] < 0 || ix->dims[d] == u->dims[d];
        for (int d = 0; ok && d < x->ndim - (int)k; d++) {
            int64_t a = x->dims[k + d], b = u->dims[ix->ndim - 1 + d];
            ok = a < 0 || b < 0 || a == b;
        }
        if (!ok) {
            char a[128], b[128], c[128];
            return qf_error(QF_ERR_SHAPE, "node '%s' (ScatterND): updates %s do not fit indices %s into data %s",
                            n->name, qf_shape_str(u->ndim, u->dims, a, sizeof a),
                            qf_shape_str(ix->ndim, ix->dims, b, sizeof b),
                            qf_shape_str(x->ndim, x->dims, c, sizeof c));
        }
    }
    qf_set_output(n, 0, x->dtype, x->ndim, x->dims);
    return QF_OK;
}

/* dst[i] (op)= src[i] for i < len, elements of dtype dt. */
static void qf_scatter_combine(void *dst, const void *src, int64_t len, qf_dtype dt, qf_scatter_mode mode)
{
#define QF_SCATTER_LOOP_(T)                                                       \
    do {                                                                          \
        T *o = dst;                                                               \
        const T *s = src;                                                         \
        if (mode == QF_SCATTER_ADD)                                               \
            for (int64_t i = 0; i < len; i++) o[i] = (T)(o[i] + s[i]);            \
        else                                                                      \
            for (int64_t i = 0; i < len; i++) o[i] = (T)(o[i] * s[i]);            \
    } while (0)
    switch (dt) {
    case QF_DTYPE_F32: QF_SCATTER_LOOP_(float); break;
    case QF_DTYPE_F64: QF_SCATTER_LOOP_(double); break;
    /* integer add / mul wrap, through the unsigned type */
    case QF_DTYPE_I32: QF_SCATTER_LOOP_(uint32_t); break;
    case QF_DTYPE_I64: QF_SCATTER_LOOP_(uint64_t); break;
    default: break;
    }
#undef QF_SCATTER_LOOP_
}

static qf_status qf_scatter_nd_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0], *ix = io->in[1], *u = io->in[2];
    qf_tensor *y = io->out[0];
    qf_scatter_mode mode;
    QF_TRY(qf_scatter_mode_of(io->node, &mode));
    size_t esz = qf_dtype_size(x->dtype);
    if (y->data != x->data) memcpy(y->data, x->data, qf_tensor_nbytes(x));
    int k = (int)ix->dims[ix->ndim - 1];
    /* Elements per slice and the element stride of each indexed axis. */
    int64_t slice = 1, stride[QF_MAX_DIMS];
    for (int d = k; d < x->ndim; d++) slice *= x->dims[d];
    int64_t s = slice;
    for (int d = k - 1; d >= 0; d--) {
        stride[d] = s;
        s *= x->dims[d];
    }
    int64_t tuples = qf_tensor_numel(ix) / (k ? k : 1);
    const int64_t *idx = ix->data;
    for (int64_t j = 0; j < tuples; j++) {
        int64_t off = 0;
        for (int d = 0; d < k; d++) {
            int64_t v = idx[j * k + d];
            if (v < 0) v += x->dims[d];
            if (v < 0 || v >= x->dims[d])
                return qf_error(QF_ERR_INVALID, "node '%s' (ScatterND): index %lld out of range for axis %d of size %lld",
                                io->node->name, (long long)idx[j * k + d], d, (long long)x->dims[d]);
            off += v * stride[d];
        }
        char *dst = (char *)y->data + (size_t)off * esz;
        const char *src = (const char *)u->data + (size_t)(j * slice) * esz;
        if (mode == QF_SCATTER_NONE) memcpy(dst, src, (size_t)slice * esz);
        else qf_scatter_combine(dst, src, slice, x->dtype, mode);
    }
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_where_kernels = {
    .infer = qf_where_infer,
    .forward_f32 = qf_where_forward_f32,
};

const qf_op_kernels qf_expand_kernels = {
    .infer = qf_expand_infer,
    .forward_f32 = qf_expand_forward_f32,
};

const qf_op_kernels qf_range_kernels = {
    .infer = qf_range_infer,
    .forward_f32 = qf_range_forward_f32,
};

const qf_op_kernels qf_scatter_nd_kernels = {
    .infer = qf_scatter_nd_infer,
    .forward_f32 = qf_scatter_nd_forward_f32,
};
