/* qfold — tensors: a dtype, a shape (row-major, C order) and data.
 *
 *   qf_tensor t;
 *   int64_t dims[] = {1, 3, 224, 224};
 *   QF_TRY(qf_tensor_init(&t, QF_DTYPE_F32, 4, dims));   // zero-filled, owned
 *   float *x = t.data;
 *   ...
 *   qf_tensor_free(&t);
 *
 * A tensor either owns its data (freed by qf_tensor_free) or borrows it
 * (owns == false: a view into a plan's arena, a caller's buffer, ...).
 */
#ifndef QFOLD_TENSOR_H
#define QFOLD_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qfold/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QF_MAX_DIMS 8

/* Values are ONNX TensorProto.DataType codes. */
typedef enum qf_dtype {
    QF_DTYPE_UNDEFINED = 0,
    QF_DTYPE_F32 = 1,
    QF_DTYPE_U8 = 2,
    QF_DTYPE_I8 = 3,
    QF_DTYPE_I32 = 6,
    QF_DTYPE_I64 = 7,
    QF_DTYPE_BOOL = 9,
    QF_DTYPE_F64 = 11
} qf_dtype;

typedef struct qf_tensor {
    qf_dtype dtype;
    int ndim;                    /* 0 = scalar */
    int64_t dims[QF_MAX_DIMS];   /* -1 = not known yet (symbolic dim) */
    void *data;
    bool owns;
} qf_tensor;

size_t qf_dtype_size(qf_dtype dt);         /* 0 for an unknown dtype */
const char *qf_dtype_name(qf_dtype dt);    /* "float32", "int8", ... */
bool qf_dtype_valid(int code);             /* one of the dtypes above */

int64_t qf_shape_numel(int ndim, const int64_t *dims); /* -1 if any dim is unknown */
bool qf_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);
/* Writes "[1, 3, 224, 224]" into buf (always NUL-terminated); returns buf. */
char *qf_shape_str(int ndim, const int64_t *dims, char *buf, size_t size);

int64_t qf_tensor_numel(const qf_tensor *t);
size_t qf_tensor_nbytes(const qf_tensor *t);

/* Allocates zeroed, owned data for the shape (dims must be known). */
qf_status qf_tensor_init(qf_tensor *t, qf_dtype dt, int ndim, const int64_t *dims);
/* A borrowed view of `data`. */
void qf_tensor_view(qf_tensor *t, qf_dtype dt, int ndim, const int64_t *dims, void *data);
/* Deep copy; dst owns its data. */
qf_status qf_tensor_copy(qf_tensor *dst, const qf_tensor *src);
/* Frees owned data; leaves dtype/shape, sets data = NULL. */
void qf_tensor_free(qf_tensor *t);

/* Element i as double, whatever the dtype (for constants and tests). */
double qf_tensor_get_f64(const qf_tensor *t, int64_t i);
/* Element i as int64 (integers, bool; floats truncated). */
int64_t qf_tensor_get_i64(const qf_tensor *t, int64_t i);

#ifdef __cplusplus
}
#endif
#endif
