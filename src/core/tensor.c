/* Tensors: dtype helpers, shapes, owned and borrowed data. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "qfold/tensor.h"

size_t qf_dtype_size(qf_dtype dt)
{
    switch (dt) {
    case QF_DTYPE_F32: return 4;
    case QF_DTYPE_F64: return 8;
    case QF_DTYPE_I8: return 1;
    case QF_DTYPE_U8: return 1;
    case QF_DTYPE_I32: return 4;
    case QF_DTYPE_I64: return 8;
    case QF_DTYPE_BOOL: return 1;
    case QF_DTYPE_UNDEFINED: return 0;
    }
    return 0;
}

const char *qf_dtype_name(qf_dtype dt)
{
    switch (dt) {
    case QF_DTYPE_F32: return "float32";
    case QF_DTYPE_F64: return "float64";
    case QF_DTYPE_I8: return "int8";
    case QF_DTYPE_U8: return "uint8";
    case QF_DTYPE_I32: return "int32";
    case QF_DTYPE_I64: return "int64";
    case QF_DTYPE_BOOL: return "bool";
    case QF_DTYPE_UNDEFINED: return "undefined";
    }
    return "unknown";
}

bool qf_dtype_valid(int code)
{
    switch (code) {
    case QF_DTYPE_F32: case QF_DTYPE_F64: case QF_DTYPE_I8: case QF_DTYPE_U8:
    case QF_DTYPE_I32: case QF_DTYPE_I64: case QF_DTYPE_BOOL:
        return true;
    default:
        return false;
    }
}

bool qf_i64_add(int64_t a, int64_t b, int64_t *out)
{
#if defined(__GNUC__)
    return !__builtin_add_overflow(a, b, out);
#else
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return false;
    *out = a + b;
    return true;
#endif
}

bool qf_i64_mul(int64_t a, int64_t b, int64_t *out)
{
#if defined(__GNUC__)
    return !__builtin_mul_overflow(a, b, out);
#else
    /* CERT INT32-C: decide by division before multiplying. */
    if (a > 0) {
        if (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a) return false;
    } else if (a < 0) {
        if (b > 0 ? a < INT64_MIN / b : b < INT64_MAX / a) return false;
    }
    *out = a * b;
    return true;
#endif
}

bool qf_dtype_is_float(qf_dtype dt) { return dt == QF_DTYPE_F32 || dt == QF_DTYPE_F64; }

int64_t qf_shape_numel(int ndim, const int64_t *dims)
{
    int64_t n = 1;
    bool over = false;
    for (int i = 0; i < ndim; i++)
        if (dims[i] < 0) return -1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == 0) return 0;
        if (!over && !qf_i64_mul(n, dims[i], &n)) over = true;
    }
    return over ? INT64_MAX : n;
}

bool qf_shape_fits(qf_dtype dt, int ndim, const int64_t *dims)
{
    if (ndim < 0 || ndim > QF_MAX_DIMS) return false;
    int64_t bytes = (int64_t)(qf_dtype_size(dt) ? qf_dtype_size(dt) : 1);
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < -1) return false;
        if (dims[i] <= 0) continue;
        if (!qf_i64_mul(bytes, dims[i], &bytes) || bytes > QF_MAX_TENSOR_BYTES) return false;
    }
    return true;
}

bool qf_shape_equal(int na, const int64_t *a, int nb, const int64_t *b)
{
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

char *qf_shape_str(int ndim, const int64_t *dims, char *buf, size_t size)
{
    size_t k = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    k += (size_t)snprintf(buf + k, size - k, "[");
    for (int i = 0; i < ndim && k < size; i++) {
        if (dims[i] < 0)
            k += (size_t)snprintf(buf + k, size - k, "%s?", i ? ", " : "");
        else
            k += (size_t)snprintf(buf + k, size - k, "%s%" PRId64, i ? ", " : "", dims[i]);
    }
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

int64_t qf_tensor_numel(const qf_tensor *t) { return qf_shape_numel(t->ndim, t->dims); }

size_t qf_tensor_nbytes(const qf_tensor *t)
{
    int64_t n = qf_tensor_numel(t);
    size_t es = qf_dtype_size(t->dtype);
    if (n < 0) return 0;
    if (es && (uint64_t)n > SIZE_MAX / es) return SIZE_MAX;
    return (size_t)n * es;
}

qf_status qf_tensor_init(qf_tensor *t, qf_dtype dt, int ndim, const int64_t *dims)
{
    if (ndim < 0 || ndim > QF_MAX_DIMS)
        return qf_error(QF_ERR_UNSUPPORTED, "tensor rank %d (qfold handles 0..%d)", ndim, QF_MAX_DIMS);
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return qf_error(QF_ERR_SHAPE, "tensor dimension %d is not known", i);
        t->dims[i] = dims[i];
    }
    if (!qf_shape_fits(dt, ndim, dims)) {
        char buf[160];
        return qf_error(QF_ERR_SHAPE, "tensor of shape %s (%s) is larger than qfold handles (%lld bytes)",
                        qf_shape_str(ndim, dims, buf, sizeof buf), qf_dtype_name(dt),
                        (long long)QF_MAX_TENSOR_BYTES);
    }
    size_t nb = qf_tensor_nbytes(t);
    t->data = qf_calloc(1, nb ? nb : 1);
    if (!t->data) return QF_ERR_NOMEM;
    t->owns = true;
    return QF_OK;
}

void qf_tensor_view(qf_tensor *t, qf_dtype dt, int ndim, const int64_t *dims, void *data)
{
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->data = data;
    t->owns = false;
}

qf_status qf_tensor_copy(qf_tensor *dst, const qf_tensor *src)
{
    QF_TRY(qf_tensor_init(dst, src->dtype, src->ndim, src->dims));
    size_t nb = qf_tensor_nbytes(src);
    if (nb) memcpy(dst->data, src->data, nb);
    return QF_OK;
}

void qf_tensor_free(qf_tensor *t)
{
    if (t->owns) qf_free(t->data);
    t->data = NULL;
    t->owns = false;
    t->writable = false;
}

double qf_tensor_get_f64(const qf_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case QF_DTYPE_F32: return ((const float *)t->data)[i];
    case QF_DTYPE_F64: return ((const double *)t->data)[i];
    case QF_DTYPE_I8: return ((const int8_t *)t->data)[i];
    case QF_DTYPE_U8: return ((const uint8_t *)t->data)[i];
    case QF_DTYPE_I32: return ((const int32_t *)t->data)[i];
    case QF_DTYPE_I64: return (double)((const int64_t *)t->data)[i];
    case QF_DTYPE_BOOL: return ((const uint8_t *)t->data)[i] != 0;
    case QF_DTYPE_UNDEFINED: break;
    }
    return 0.0;
}

/* Truncation toward zero; NaN and values outside int64 (whose conversion C
 * leaves undefined, and which a file may hold) saturate: NaN -> 0. */
static int64_t qf_f64_to_i64(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

int64_t qf_tensor_get_i64(const qf_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case QF_DTYPE_I64: return ((const int64_t *)t->data)[i];
    case QF_DTYPE_I32: return ((const int32_t *)t->data)[i];
    case QF_DTYPE_I8: return ((const int8_t *)t->data)[i];
    case QF_DTYPE_U8: return ((const uint8_t *)t->data)[i];
    case QF_DTYPE_BOOL: return ((const uint8_t *)t->data)[i] != 0;
    case QF_DTYPE_F32: return qf_f64_to_i64(((const float *)t->data)[i]);
    case QF_DTYPE_F64: return qf_f64_to_i64(((const double *)t->data)[i]);
    case QF_DTYPE_UNDEFINED: break;
    }
    return 0;
}
