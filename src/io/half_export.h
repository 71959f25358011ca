/* Private: export of half-precision models (half_export.c). */
#ifndef QF_HALF_EXPORT_H
#define QF_HALF_EXPORT_H

#include "onnx_proto.h"

/* Settle the dtypes of gp (built from g by export, lowering done) from the
 * model's storage dtypes (qf_value.store): half-precision initializers
 * rounded from float32, interface types, a Cast in front of every constant
 * stored behind one. Buffers and names from alloc (the export's arena). */
qf_status qf_half_export(const qf_graph *g, Onnx__GraphProto *gp, void *(*alloc)(void *ctx, size_t size),
                         void *ctx);

#endif
