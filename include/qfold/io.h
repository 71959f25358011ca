/* qfold — files: ONNX models and .npy arrays.
 *
 *   qf_graph *g;
 *   QF_TRY(qf_onnx_load("model.onnx", &g));
 *   QF_TRY(qf_onnx_save(g, "out.onnx"));      // temp file + rename
 *
 *   qf_tensor x;
 *   QF_TRY(qf_npy_load("x.npy", &x));          // x owns its data
 *   QF_TRY(qf_npy_save("y.npy", &x));
 *   qf_tensor_free(&x);
 */
#ifndef QFOLD_IO_H
#define QFOLD_IO_H

#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Import an ONNX model (opsets 11..17). Initializers become constants (then
 * classified as parameters / buffers), shape-computation chains with static
 * shapes are folded to constants, shapes are inferred and the graph verified.
 * Any op outside QF_OP_LIST fails with QF_ERR_UNSUPPORTED naming op and node. */
qf_status qf_onnx_load(const char *path, qf_graph **out);
qf_status qf_onnx_load_buffer(const void *data, size_t size, const char *what, qf_graph **out);
/* Export: names, opset and initializer order preserved; internal ops
 * (linear, relu6) lowered to ONNX ops. Written to a temporary file in the
 * same directory and renamed into place. */
qf_status qf_onnx_save(const qf_graph *g, const char *path);

/* Read one serialized TensorProto (the ONNX backend tests' input_0.pb). */
qf_status qf_onnx_tensor_load(const char *path, qf_tensor *out);

/* .npy version 1.0-3.0, C order, little-endian: float32, float64, int8,
 * uint8, int32, int64, bool. */
qf_status qf_npy_load(const char *path, qf_tensor *out);
qf_status qf_npy_save(const char *path, const qf_tensor *t);

/* Write `size` bytes to path through a temporary file + rename. */
qf_status qf_file_write_atomic(const char *path, const void *data, size_t size);
/* Read a whole file (owned buffer in *data, freed with qf_free). */
qf_status qf_file_read(const char *path, void **data, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
