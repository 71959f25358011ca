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

/* Copy a TensorProto into an owned tensor. `what` names it in messages
 * ("initializer 'w'"). Accepts raw_data (little-endian) and the typed fields;
 * checks dims, rank, element count against the data size. */
qf_status qf_onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *what, qf_tensor *out);

/* Decode a ModelProto and build the graph, without the sort / fold / infer /
 * verify steps of qf_onnx_load (tests use it on graphs the kernels cannot
 * run yet). `owned` (may be NULL) is freed as soon as data is decoded. */
qf_status qf_onnx_parse(const void *data, size_t size, void *owned, qf_graph **out);

#endif
