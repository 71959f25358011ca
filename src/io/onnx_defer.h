/* Private: reading a model file with its big payloads left in the file
 * (qf_onnx_load_options.defer; graph.h, "payloads left in the file"). */
#ifndef QF_ONNX_DEFER_H
#define QF_ONNX_DEFER_H

#include "onnx_proto.h"

/* Initializer payloads of at least this many bytes stay in the file. */
#define QF_DEFER_MIN ((size_t)64 << 10)

/* The model file fd (size bytes) read into a fresh buffer of size + 1 bytes
 * (*buf, from qf_malloc, not populated), except the raw_data of every graph
 * initializer of at least `min` bytes: those ranges (*holes, in file order,
 * qf_malloc'd) are never read nor touched, so they take no memory. Bytes
 * that do not walk as ModelProto > GraphProto > TensorProto are read whole
 * (no holes): the decoder then reports them as usual. */
qf_status qf_onnx_read_sparse(int fd, const char *path, size_t size, size_t min, uint8_t **buf,
                              qf_onnx_range **holes, size_t *nholes);
/* Read the bytes of one hole after all (a payload the import cannot leave
 * in the file: float16, a mismatched size, ...). */
qf_status qf_onnx_fill_hole(int fd, const char *path, uint8_t *buf, qf_onnx_range hole);

#endif
