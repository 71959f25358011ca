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
 * (owns == false: a view into a plan's arena, a caller's buffer, a slice of
 * the buffer a loaded model was read into, ...). A borrowed tensor that is
 * `writable` is the only user of its bytes, so a pass may change them in
 * place; any other borrowed tensor is read-only to its holder, and a pass
 * that rewrites it makes an owned copy (copy-on-write).
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

/* The largest tensor (and the largest single buffer: a plan's activation
 * arena, a kernel's scratch) qfold accepts: 2^40 bytes, 1 TiB. A shape
 * beyond it can only come from a malformed or hostile file, so it is bad
 * input (QF_ERR_SHAPE), not an out-of-memory condition. Every dim of a shape
 * that fits is below 2^40, and so is every product of some of its dims:
 * sizes computed from such shapes cannot overflow int64. */
#define QF_MAX_TENSOR_BYTES ((int64_t)1 << 40)

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
    bool owns;     /* data is this tensor's allocation: qf_tensor_free frees it */
    bool writable; /* borrowed data that only this tensor uses (a slice of a
                    * graph's model buffer, qf_graph_adopt_buffer): may be
                    * changed in place; its owner frees it */
} qf_tensor;

size_t qf_dtype_size(qf_dtype dt);         /* 0 for an unknown dtype */
const char *qf_dtype_name(qf_dtype dt);    /* "float32", "int8", ... */
bool qf_dtype_valid(int code);             /* one of the dtypes above */
bool qf_dtype_is_float(qf_dtype dt);       /* float32 or float64 */

/* -1 if any dim is unknown; saturates at INT64_MAX when the product
 * overflows (never a real size: such a shape does not fit, see below). */
int64_t qf_shape_numel(int ndim, const int64_t *dims);
/* Whether a tensor of dtype dt and this shape is one qfold can hold: rank
 * 0..QF_MAX_DIMS, every dim >= 0 or -1 (unknown), and the product of the
 * known dims (a size-0 dim counted as 1, so that it cannot hide huge
 * others) times the element size at most QF_MAX_TENSOR_BYTES. */
bool qf_shape_fits(qf_dtype dt, int ndim, const int64_t *dims);
/* Checked int64 arithmetic for sizes computed from file data: false on
 * overflow (*out is then unspecified). */
bool qf_i64_add(int64_t a, int64_t b, int64_t *out);
bool qf_i64_mul(int64_t a, int64_t b, int64_t *out);
bool qf_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);
/* Writes "[1, 3, 224, 224]" into buf (always NUL-terminated); returns buf. */
char *qf_shape_str(int ndim, const int64_t *dims, char *buf, size_t size);

int64_t qf_tensor_numel(const qf_tensor *t);
size_t qf_tensor_nbytes(const qf_tensor *t); /* saturates at SIZE_MAX */

/* Allocates zeroed, owned data for the shape (dims must be known and the
 * shape must fit: QF_ERR_SHAPE otherwise). */
qf_status qf_tensor_init(qf_tensor *t, qf_dtype dt, int ndim, const int64_t *dims);
/* A borrowed, read-only view of `data`. */
void qf_tensor_view(qf_tensor *t, qf_dtype dt, int ndim, const int64_t *dims, void *data);
/* Deep copy; dst owns its data. */
qf_status qf_tensor_copy(qf_tensor *dst, const qf_tensor *src);
/* Frees owned data; leaves dtype/shape, sets data = NULL (owns and
 * writable false). */
void qf_tensor_free(qf_tensor *t);

/* Element i as double, whatever the dtype (for constants and tests). */
double qf_tensor_get_f64(const qf_tensor *t, int64_t i);
/* Element i as int64 (integers, bool; floats truncated, NaN -> 0, saturating). */
int64_t qf_tensor_get_i64(const qf_tensor *t, int64_t i);

#ifdef __cplusplus
}
#endif
#endif
