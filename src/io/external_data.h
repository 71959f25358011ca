/* Private: ONNX external data, the initializers whose bytes live in side
 * files next to the model (TensorProto.data_location = EXTERNAL and its
 * external_data entries: location, offset, length; checksum is ignored).
 *
 * Reading (import): every side file is confined to the model's directory: a
 * location that is absolute, has a ".." component, or resolves (through
 * symbolic links) outside the directory is refused, as is a side file that
 * is not a regular file (FIFO, directory, device) and a range past its end;
 * each message names the initializer. Each payload is read with pread into
 * an allocation of its own (owned, writable: folded in place like a
 * payload of the model buffer), one read per tensor, nothing read twice.
 *
 * Writing (export): initializers of at least `threshold` bytes go to one side
 * file, each at an offset aligned to QF_EXT_ALIGN, written from the graph's
 * memory through a file writer (temporary file, committed by the caller). */
#ifndef QF_EXTERNAL_DATA_H
#define QF_EXTERNAL_DATA_H

#include "onnx_proto.h"

/* Offsets of tensors in a side file qfold writes are multiples of this: a
 * page, so that a reader may map each tensor where it lies (ONNX's own
 * writer aligns the same way when asked to). */
#define QF_EXT_ALIGN 4096
/* onnx.external_data_helper.convert_model_to_external_data's default. */
#define QF_EXT_THRESHOLD 1024

/* --- reading ----------------------------------------------------------------- */

typedef struct qf_ext_reader qf_ext_reader;

/* True when tp keeps its data in a side file. */
bool qf_ext_is_external(const Onnx__TensorProto *tp);

/* Start reading side files of the model at model_path (NULL: a model from
 * memory, whose external tensors are refused). redirect_location, when not
 * NULL, is read from redirect_path instead (a side file staged under a
 * temporary name, trusted: the caller wrote it). */
qf_status qf_ext_reader_init(qf_ext_reader **out, const char *model_path,
                             const char *redirect_location, const char *redirect_path);
void qf_ext_reader_free(qf_ext_reader *r);

/* tp's payload, read from its side file into an owned tensor. `what` names
 * the tensor in messages ("initializer 'w'"). */
qf_status qf_ext_read_tensor(qf_ext_reader *r, const Onnx__TensorProto *tp, const char *what,
                             qf_tensor *out);

/* --- writing ----------------------------------------------------------------- */

typedef struct qf_ext_entry {
    const void *data;
    size_t size;
    uint64_t offset;
} qf_ext_entry;

/* The tensors moved out, in side-file order. */
typedef struct qf_ext_plan {
    qf_ext_entry *e;
    size_t n, cap;
    uint64_t end; /* bytes of the side file */
} qf_ext_plan;

/* Move every initializer of gp with at least `threshold` bytes of raw_data
 * into the plan: its raw_data is cleared and its data_location / external_data
 * entries (location, offset, length) set; strings are allocated with alloc
 * (an arena: freed with the export). */
qf_status qf_ext_plan_build(qf_ext_plan *p, Onnx__GraphProto *gp, const char *location,
                            size_t threshold, void *(*alloc)(void *ctx, size_t size), void *ctx);
/* Write the plan's bytes to w (zero padding between tensors). */
void qf_ext_plan_write(const qf_ext_plan *p, qf_file_writer *w);
void qf_ext_plan_free(qf_ext_plan *p);

#endif
