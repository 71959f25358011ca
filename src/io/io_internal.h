/* Private helpers shared by the io module (files, .npy, ONNX). */
#ifndef QF_IO_INTERNAL_H
#define QF_IO_INTERNAL_H

#include "qfold/io.h"

/* Write the concatenation of `nparts` buffers to path atomically (temporary
 * file in the same directory, fsync, rename); a failure leaves no file. */
qf_status qf_file_write_parts(const char *path, int nparts, const void *const *data,
                              const size_t *size);

#endif
