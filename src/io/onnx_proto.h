/* Private: the protobuf side of ONNX import / export (protobuf-c, onnx.proto). */
#ifndef QF_ONNX_PROTO_H
#define QF_ONNX_PROTO_H

#include "io_internal.h"
#include "onnx.pb-c.h"

/* An allocator for protobuf-c that goes through qf_malloc / qf_free and sets
 * *failed when an allocation fails (unpack returns NULL both for bad data and
 * for out-of-memory; the flag tells them apart). */
ProtobufCAllocator qf_pb_allocator_make(bool *failed);
/* The status for a NULL from unpack: QF_ERR_NOMEM or QF_ERR_PARSE "not a valid <kind>". */
qf_status qf_pb_unpack_failed(bool alloc_failed, const char *kind);

/* Check that data is well-formed protobuf wire format for message `d`, and
 * that messages nest at most a few dozen levels (protobuf-c unpacks
 * recursively: a crafted file nested a million levels deep would overflow
 * the stack). QF_ERR_PARSE "not a valid <kind>" otherwise. */
qf_status qf_pb_check(const ProtobufCMessageDescriptor *d, const void *data, size_t size,
                      const char *kind);

/* ONNX TensorProto.DataType name ("float16", ...), for messages. */
const char *qf_onnx_dtype_name(int code);
/* QF_ERR_UNSUPPORTED naming `what` unless code is a dtype qfold handles. */
qf_status qf_onnx_dtype(int code, const char *what, qf_dtype *out);
/* Half precision: code (10 float16, 16 bfloat16) or 0 for any other dtype. */
int qf_onnx_half_code(int code);
/* qf_onnx_dtype that also takes float16 / bfloat16, held as float32 (*out)
 * with *store the ONNX code (0 for the other dtypes). */
qf_status qf_onnx_dtype_store(int code, const char *what, qf_dtype *out, int *store);
/* A float32 tensor of meta's shape (owned) from n half-precision values of
 * ONNX dtype `code`: little-endian 2-byte raw, or, raw NULL, the low 16 bits
 * of each int32 in typed (TensorProto's int32_data form). */
qf_status qf_onnx_half_decode(const uint8_t *raw, const int32_t *typed, const qf_tensor *meta, int code,
                              qf_tensor *out);

/* dtype and shape of a TensorProto (data NULL; float32 for a float16 /
 * bfloat16 tensor) and its payload's size in the file in bytes, checked (dtype known, rank, no negative dims, size within limits). */
qf_status qf_onnx_tensor_meta(const Onnx__TensorProto *tp, const char *what, qf_tensor *out,
                              size_t *nbytes);

/* A TensorProto as an owned tensor. `what` names it in messages
 * ("initializer 'w'"). Accepts raw_data (little-endian) and the typed fields;
 * checks dims, rank, element count against the data size. When raw_data
 * holds the payload the tensor takes over its buffer instead of copying it
 * (tp's raw_data is then empty). tp must come from a protobuf-c unpack with
 * qf_pb_allocator_make's allocator. */
qf_status qf_onnx_tensor_take(Onnx__TensorProto *tp, const char *what, qf_tensor *out);

/* The same for a TensorProto whose raw_data points into a writable buffer
 * that will outlive the tensor (the model buffer a graph adopts), at `base`
 * where tp's own bytes start: the tensor borrows the payload where it lies
 * (owns false, writable true), moved back over up to dtype size - 1 of tp's
 * earlier bytes when it is not aligned for its dtype; copied (owned) only
 * when those bytes are fewer, or the tensor is empty or has no raw_data. */
qf_status qf_onnx_tensor_borrow(const Onnx__TensorProto *tp, const uint8_t *base, const char *what,
                                qf_tensor *out);

/* The import fast path. A big model is almost all initializers' raw_data;
 * decoding the whole ModelProto at once would hold every weight twice (the
 * file and protobuf-c's copy). The split cuts the graph's initializers out:
 * `skeleton` is the model without them (small: nodes, inputs, outputs),
 * `init` the byte range of each initializer's TensorProto in file order,
 * to be decoded one at a time. Run on bytes that passed qf_pb_check. When
 * the model does not have the usual shape (not exactly one graph field, no
 * initializers) nothing is split: skeleton is NULL and the whole model is
 * decoded as one. */
typedef struct qf_onnx_range {
    size_t off, len;
} qf_onnx_range;
typedef struct qf_onnx_split {
    uint8_t *skeleton;
    size_t skeleton_size;
    qf_onnx_range *init;
    size_t ninit;
} qf_onnx_split;
qf_status qf_onnx_split_model(const void *data, size_t size, qf_onnx_split *out);
void qf_onnx_split_free(qf_onnx_split *s);

/* A growing buffer reused from one initializer to the next. */
typedef struct qf_onnx_scratch {
    uint8_t *buf;
    size_t cap;
} qf_onnx_scratch;

/* Unpack the TensorProto at data[r.off, r.off + r.len) (a range of the
 * split) without copying its raw_data: protobuf-c copies every bytes field
 * it decodes, so the message less its raw_data is gathered into scratch and
 * unpacked, and tp->raw_data is then set to the payload's place in data.
 * Free *out with qf_onnx_initializer_free (never free_unpacked: raw_data is
 * not protobuf-c's). */
qf_status qf_onnx_initializer_unpack(uint8_t *data, qf_onnx_range r, ProtobufCAllocator *alloc,
                                     const bool *oom, qf_onnx_scratch *scratch,
                                     Onnx__TensorProto **out);
void qf_onnx_initializer_free(Onnx__TensorProto *tp, ProtobufCAllocator *alloc);

#endif
