/* qf_npy_check_finite (qfold/io.h): every value of a float32 .npy file
 * finite, the whole file scanned a few MiB at a time before anything runs
 * on it (calibration, evaluation, training data), the first NaN / Inf
 * named by sample and index. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/io.h"

#define QF_NPY_SCAN_BYTES ((size_t)4 << 20) /* the NaN / Inf scan reads this much at a time */

/* Element k (C order) of the file holding data t for input v is x: as the
 * other bad-data messages, the file, the input and the shape it expects,
 * then where the value is (its sample and its index within the sample). */
static qf_status qf_npy_nonfinite(const char *what, const char *path, const qf_value *v,
                                  const qf_tensor *t, int64_t k, float x)
{
    char want[160], at[160];
    int64_t dims[QF_MAX_DIMS], idx[QF_MAX_DIMS];
    memcpy(dims, v->type.dims, sizeof dims);
    dims[0] = -1; /* the sample count: the file's own */
    int64_t rest = k;
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->dims[d] > 0 ? rest % t->dims[d] : 0;
        rest = t->dims[d] > 0 ? rest / t->dims[d] : 0;
    }
    qf_shape_str(t->ndim - 1, idx + 1, at, sizeof at);
    return qf_error(QF_ERR_NUMERIC,
                    "%s '%s' for input '%s' (expects %s %s, samples first, finite): element %lld "
                    "(sample %lld, at "
                    "%s) is %s",
                    what, path, v->name, qf_dtype_name(v->type.dtype),
                    qf_shape_str(v->type.ndim, dims, want, sizeof want), (long long)k,
                    (long long)idx[0], at, isnan(x) ? "NaN" : "infinite");
}

qf_status qf_npy_check_finite(const char *what, const char *path, const qf_value *v, qf_npy_file *f)
{
    const qf_tensor *t = qf_npy_info(f);
    if (t->dtype != QF_DTYPE_F32) return QF_OK;
    size_t row = qf_npy_row_bytes(f);
    int64_t n = t->dims[0], step = row ? (int64_t)(QF_NPY_SCAN_BYTES / row) : n;
    if (step < 1) step = 1;
    if (step > n) step = n;
    size_t bytes = (size_t)step * row;
    float *buf = qf_malloc(bytes ? bytes : 1);
    if (!buf) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    int64_t per_row = (int64_t)(row / sizeof(float));
    for (int64_t first = 0; first < n && st == QF_OK; first += step) {
        int64_t count = n - first < step ? n - first : step;
        st = qf_npy_read_rows(f, first, count, buf);
        for (int64_t i = 0, m = count * per_row; i < m && st == QF_OK; i++)
            if (!isfinite(buf[i]))
                st = qf_npy_nonfinite(what, path, v, t, first * per_row + i, buf[i]);
    }
    qf_free(buf);
    return st;
}
