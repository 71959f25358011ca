/* Constant-producing and shape-computation ops: Constant, ConstantOfShape,
 * Shape, Gather, Cast (ONNX opsets 7..21). Import folds most of them away;
 * the kernels also serve the plan when they read activations. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "ops/kernels.h"

/* ONNX TensorProto.DataType names, for messages about dtypes qfold lacks. */
static const char *qf_cst_onnx_dtype(int64_t code)
{
    switch (code) {
    case 4: return "uint16";
    case 5: return "int16";
    case 8: return "string";
    case 10: return "float16";
    case 12: return "uint32";
    case 13: return "uint64";
    case 14: return "complex64";
    case 15: return "complex128";
    case 16: return "bfloat16";
    default: return qf_dtype_valid((int)code) ? qf_dtype_name((qf_dtype)code) : "unknown";
    }
}

/* --- Constant ----------------------------------------------------------------- */
/* The one value attribute of a Constant node. */
static qf_status qf_constant_attr(const qf_node *n, const qf_attr **out)
{
    static const char *const unsupported[] = {"sparse_value", "value_string", "value_strings"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (qf_node_attr(n, unsupported[i]))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Constant): attribute '%s' is not supported",
                            n->name, unsupported[i]);
    static const char *const names[] = {"value", "value_float", "value_floats", "value_int", "value_ints"};
    static const qf_attr_type types[] = {QF_ATTR_TENSOR, QF_ATTR_FLOAT, QF_ATTR_FLOATS, QF_ATTR_INT,
                                         QF_ATTR_INTS};
    *out = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const qf_attr *a = qf_node_attr(n, names[i]);
        if (!a) continue;
        if (a->type != types[i] || (a->type == QF_ATTR_TENSOR && !a->t))
            return qf_error(QF_ERR_INVALID, "node '%s' (Constant): attribute '%s' has the wrong type",
                            n->name, names[i]);
        if (*out)
            return qf_error(QF_ERR_INVALID, "node '%s' (Constant): both '%s' and '%s' are set", n->name,
                            (*out)->name, names[i]);
        *out = a;
    }
    if (!*out) return qf_error(QF_ERR_INVALID, "node '%s' (Constant): no value attribute", n->name);
    return QF_OK;
}

static qf_status qf_constant_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_attr *a;
    QF_TRY(qf_constant_attr(n, &a));
    int64_t len = a->n;
    switch (a->type) {
    case QF_ATTR_TENSOR:
        if (!qf_dtype_valid(a->t->dtype))
            return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Constant): dtype %s is not supported",
                            n->name, qf_cst_onnx_dtype(a->t->dtype));
        qf_set_output(n, 0, a->t->dtype, a->t->ndim, a->t->dims);
        break;
    case QF_ATTR_FLOAT: qf_set_output(n, 0, QF_DTYPE_F32, 0, NULL); break;
    case QF_ATTR_INT: qf_set_output(n, 0, QF_DTYPE_I64, 0, NULL); break;
    case QF_ATTR_FLOATS: qf_set_output(n, 0, QF_DTYPE_F32, 1, &len); break;
    case QF_ATTR_INTS: qf_set_output(n, 0, QF_DTYPE_I64, 1, &len); break;
    case QF_ATTR_STRING: break;
    }
    return QF_OK;
}

static qf_status qf_constant_forward_f32(const qf_kernel_io *io)
{
    const qf_attr *a;
    QF_TRY(qf_constant_attr(io->node, &a));
    qf_tensor *y = io->out[0];
    size_t nb = qf_tensor_nbytes(y);
    const void *src = NULL;
    float f = a->f;
    int64_t i = a->i;
    switch (a->type) {
    case QF_ATTR_TENSOR: src = a->t->data; break;
    case QF_ATTR_FLOAT: src = &f; break;
    case QF_ATTR_INT: src = &i; break;
    case QF_ATTR_FLOATS: src = a->floats; break;
    case QF_ATTR_INTS: src = a->ints; break;
    case QF_ATTR_STRING: break;
    }
    if (nb && src) memcpy(y->data, src, nb);
    return QF_OK;
}

/* --- ConstantOfShape ---------------------------------------------------------- */
/* The fill value: the `value` attribute (a one-element tensor), default float 0. */
static qf_status qf_cos_value(const qf_node *n, qf_dtype *dt, const void **bytes)
{
    static const float zero = 0.0f;
    const qf_attr *a = qf_node_attr(n, "value");
    *dt = QF_DTYPE_F32;
    *bytes = &zero;
    if (!a) return QF_OK;
    if (a->type != QF_ATTR_TENSOR || !a->t || qf_tensor_numel(a->t) != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (ConstantOfShape): 'value' must be a one-element tensor",
                        n->name);
    if (!qf_dtype_valid(a->t->dtype))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (ConstantOfShape): dtype %s is not supported",
                        n->name, qf_cst_onnx_dtype(a->t->dtype));
    *dt = a->t->dtype;
    *bytes = a->t->data;
    return QF_OK;
}

static qf_status qf_constant_of_shape_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_value *s = n->inputs[0];
    qf_dtype dt;
    const void *bytes;
    QF_TRY(qf_cos_value(n, &dt, &bytes));
    /* A graph input fed as the shape is bound later (qf_graph_bind_input):
     * until then only the rank is known. */
    if (!qf_value_is_const(s) && s->kind == QF_VALUE_INPUT && s->type.ndim == 1 &&
        s->type.dims[0] >= 0 && s->type.dims[0] <= QF_MAX_DIMS) {
        int64_t unknown[QF_MAX_DIMS] = {-1, -1, -1, -1, -1, -1, -1, -1};
        qf_set_output(n, 0, dt, (int)s->type.dims[0], unknown);
        return QF_OK;
    }
    if (!qf_value_is_const(s))
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (ConstantOfShape): shape '%s' is not a constant (dynamic shapes are "
                        "not supported)",
                        n->name, s->name);
    if (s->type.dtype != QF_DTYPE_I64 || s->type.ndim != 1)
        return qf_error(QF_ERR_INVALID, "node '%s' (ConstantOfShape): shape must be a 1-D int64 tensor",
                        n->name);
    int64_t k = qf_tensor_numel(&s->type);
    if (k > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (ConstantOfShape): rank %lld (qfold handles up to %d)",
                        n->name, (long long)k, QF_MAX_DIMS);
    int64_t dims[QF_MAX_DIMS];
    for (int64_t i = 0; i < k; i++) {
        dims[i] = qf_tensor_get_i64(&s->type, i);
        if (dims[i] < 0)
            return qf_error(QF_ERR_INVALID, "node '%s' (ConstantOfShape): negative dimension %lld",
                            n->name, (long long)dims[i]);
    }
    qf_set_output(n, 0, dt, (int)k, dims);
    return QF_OK;
}

static qf_status qf_constant_of_shape_forward_f32(const qf_kernel_io *io)
{
    qf_dtype dt;
    const void *bytes;
    QF_TRY(qf_cos_value(io->node, &dt, &bytes));
    qf_tensor *y = io->out[0];
    size_t esz = qf_dtype_size(dt);
    int64_t numel = qf_tensor_numel(y);
    for (int64_t i = 0; i < numel; i++) memcpy((char *)y->data + i * (int64_t)esz, bytes, esz);
    return QF_OK;
}

/* --- Shape -------------------------------------------------------------------- */
/* [start, end) of the dims to report (opset 15 attributes), clamped. */
static void qf_shape_range(const qf_node *n, int rank, int64_t *start, int64_t *end)
{
    int64_t s = qf_node_attr_int(n, "start", 0), e = qf_node_attr_int(n, "end", rank);
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    e = e < 0 ? 0 : e > rank ? rank : e;
    *start = s;
    *end = e > s ? e : s;
}

static qf_status qf_shape_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    int64_t s, e;
    qf_shape_range(n, n->inputs[0]->type.ndim, &s, &e);
    int64_t len = e - s;
    qf_set_output(n, 0, QF_DTYPE_I64, 1, &len);
    return QF_OK;
}

static qf_status qf_shape_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    int64_t s, e;
    qf_shape_range(io->node, x->ndim, &s, &e);
    int64_t *y = io->out[0]->data;
    for (int64_t i = s; i < e; i++) y[i - s] = x->dims[i];
    return QF_OK;
}

/* --- Gather ------------------------------------------------------------------- */
static qf_status qf_gather_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type, *ix = &n->inputs[1]->type;
    if (ix->dtype != QF_DTYPE_I64 && ix->dtype != QF_DTYPE_I32)
        return qf_error(QF_ERR_INVALID, "node '%s' (Gather): indices must be int32 or int64, got %s",
                        n->name, qf_dtype_name(ix->dtype));
    int64_t axis = qf_node_attr_int(n, "axis", 0);
    if (x->ndim == 0 || axis < -(int64_t)x->ndim || axis >= x->ndim)
        return qf_error(QF_ERR_INVALID, "node '%s' (Gather): axis %lld out of range for rank %d", n->name,
                        (long long)axis, x->ndim);
    int a = (int)(axis < 0 ? axis + x->ndim : axis);
    int r = x->ndim - 1 + ix->ndim;
    if (r > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Gather): output rank %d (qfold handles up to %d)",
                        n->name, r, QF_MAX_DIMS);
    int64_t dims[QF_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < a; i++) dims[k++] = x->dims[i];
    for (int i = 0; i < ix->ndim; i++) dims[k++] = ix->dims[i];
    for (int i = a + 1; i < x->ndim; i++) dims[k++] = x->dims[i];
    qf_set_output(n, 0, x->dtype, r, dims);
    return QF_OK;
}

static qf_status qf_gather_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0], *ix = io->in[1];
    int64_t axis = qf_node_attr_int(io->node, "axis", 0);
    int a = (int)(axis < 0 ? axis + x->ndim : axis);
    size_t esz = qf_dtype_size(x->dtype);
    int64_t outer = qf_shape_numel(a, x->dims), d = x->dims[a];
    int64_t inner = qf_shape_numel(x->ndim - a - 1, x->dims + a + 1) * (int64_t)esz;
    int64_t count = qf_tensor_numel(ix);
    char *y = io->out[0]->data;
    const char *src = x->data;
    for (int64_t i = 0; i < count; i++) {
        int64_t j = qf_tensor_get_i64(ix, i);
        if (j < -d || j >= d)
            return qf_error(QF_ERR_INVALID, "node '%s' (Gather): index %lld out of range [%lld, %lld)",
                            io->node->name, (long long)j, (long long)-d, (long long)d);
        if (j < 0) j += d;
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + (o * count + i) * inner, src + (o * d + j) * inner, (size_t)inner);
    }
    return QF_OK;
}

/* --- Cast --------------------------------------------------------------------- */
static qf_status qf_cast_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_attr *a = qf_node_attr(n, "to");
    if (!a || a->type != QF_ATTR_INT)
        return qf_error(QF_ERR_INVALID, "node '%s' (Cast): attribute 'to' is required", n->name);
    /* float16 / bfloat16 are held as float32 (qf_value.store): the cast
     * rounds to the half-precision value and keeps it in float32. */
    bool half = a->i == QF_ONNX_FLOAT16 || a->i == QF_ONNX_BFLOAT16;
    if (!half && (!qf_dtype_valid((int)a->i) || a->i != (int)a->i))
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Cast): cast to %s (dtype %lld) is not supported",
                        n->name, qf_cst_onnx_dtype(a->i), (long long)a->i);
    const qf_tensor *x = &n->inputs[0]->type;
    qf_set_output(n, 0, half ? QF_DTYPE_F32 : (qf_dtype)a->i, x->ndim, x->dims);
    return QF_OK;
}

/* Float to integer truncates toward zero like numpy's astype; the few cases
 * C leaves undefined (NaN, out of the int64 range) saturate instead. The
 * int64 is then wrapped to narrower types (two's complement). */
static int64_t qf_cast_trunc(double v)
{
    if (isnan(v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}


static void qf_cast_store_int(void *y, qf_dtype dt, int64_t i, int64_t v)
{
    switch (dt) {
    case QF_DTYPE_I8: ((int8_t *)y)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
    case QF_DTYPE_U8: ((uint8_t *)y)[i] = (uint8_t)(uint64_t)v; break;
    case QF_DTYPE_I32: ((int32_t *)y)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
    case QF_DTYPE_I64: ((int64_t *)y)[i] = v; break;
    case QF_DTYPE_BOOL: ((uint8_t *)y)[i] = v != 0; break;
    case QF_DTYPE_F32: ((float *)y)[i] = (float)v; break;
    case QF_DTYPE_F64: ((double *)y)[i] = (double)v; break;
    case QF_DTYPE_UNDEFINED: break;
    }
}

static void qf_cast_store_float(void *y, qf_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case QF_DTYPE_F32: ((float *)y)[i] = (float)v; break;
    case QF_DTYPE_F64: ((double *)y)[i] = v; break;
    case QF_DTYPE_BOOL: ((uint8_t *)y)[i] = v != 0; break;
    default: qf_cast_store_int(y, dt, i, qf_cast_trunc(v)); break;
    }
}

static qf_status qf_cast_forward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    qf_tensor *y = io->out[0];
    int64_t numel = qf_tensor_numel(x);
    int64_t to = qf_node_attr_int(io->node, "to", 0);
    if (to == QF_ONNX_FLOAT16 || to == QF_ONNX_BFLOAT16) {
        float *yf = y->data;
        for (int64_t i = 0; i < numel; i++) yf[i] = qf_half_round((float)qf_tensor_get_f64(x, i), (int)to);
        return QF_OK;
    }
    if (x->dtype == y->dtype) {
        if (numel > 0) memcpy(y->data, x->data, qf_tensor_nbytes(x));
        return QF_OK;
    }
    if (qf_dtype_is_float(x->dtype)) {
        for (int64_t i = 0; i < numel; i++) qf_cast_store_float(y->data, y->dtype, i, qf_tensor_get_f64(x, i));
    } else {
        for (int64_t i = 0; i < numel; i++) qf_cast_store_int(y->data, y->dtype, i, qf_tensor_get_i64(x, i));
    }
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_constant_kernels = {
    .infer = qf_constant_infer,
    .forward_f32 = qf_constant_forward_f32,
};

const qf_op_kernels qf_constant_of_shape_kernels = {
    .infer = qf_constant_of_shape_infer,
    .forward_f32 = qf_constant_of_shape_forward_f32,
};

const qf_op_kernels qf_shape_kernels = {
    .infer = qf_shape_infer,
    .forward_f32 = qf_shape_forward_f32,
};

const qf_op_kernels qf_gather_kernels = {
    .infer = qf_gather_infer,
    .forward_f32 = qf_gather_forward_f32,
};

const qf_op_kernels qf_cast_kernels = {
    .infer = qf_cast_infer,
    .forward_f32 = qf_cast_forward_f32,
};
