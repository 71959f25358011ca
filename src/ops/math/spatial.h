/* Geometry shared by the spatial ops (Conv, ConvTranspose, MaxPool,
 * AveragePool): reading kernel / stride / dilation / pad attributes,
 * resolving auto_pad, computing output sizes, lifting 1-D and 2-D problems
 * to 3-D so that one loop nest serves every rank.
 *
 *   qf_spatial s;
 *   QF_TRY(qf_spatial_parse(n, rank, w_kernel, QF_SPATIAL_CONV, &s));
 *   QF_TRY(qf_spatial_forward_dims(n, &s, x->dims + 2, false));
 *   qf_spatial l = qf_spatial_lift3(&s);   // l.in[0..2], l.out[0..2], ...
 *
 * Sizes follow ONNX (opsets 7..21):
 *   explicit pads:  out = floor_or_ceil((in + pb + pe - ((k-1)*d + 1)) / s) + 1;
 *                   with ceil_mode a window that would start inside the end
 *                   padding is dropped (PyTorch and ONNX Runtime do the same);
 *   SAME_UPPER / SAME_LOWER:  out = ceil(in / s), total pad
 *                   max(0, (out-1)*s + (k-1)*d + 1 - in), the odd unit at the
 *                   end (UPPER) or at the beginning (LOWER);
 *   VALID:          no pads, out = floor((in - ((k-1)*d + 1)) / s) + 1.
 * Unknown sizes (-1) propagate: an output size is -1 when it depends on an
 * unknown input size; only known sizes are checked.
 */
#ifndef QF_OPS_SPATIAL_H
#define QF_OPS_SPATIAL_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/graph.h"

#define QF_SPATIAL_MAX 3 /* spatial dims handled: 1-D, 2-D, 3-D */

typedef enum qf_auto_pad {
    QF_AUTO_PAD_NOTSET = 0,
    QF_AUTO_PAD_SAME_UPPER,
    QF_AUTO_PAD_SAME_LOWER,
    QF_AUTO_PAD_VALID
} qf_auto_pad;

/* Which attributes an op has. */
typedef enum qf_spatial_kind {
    QF_SPATIAL_CONV,      /* kernel_shape optional (from W), dilations */
    QF_SPATIAL_MAX_POOL,  /* kernel_shape required, dilations */
    QF_SPATIAL_AVG_POOL   /* kernel_shape required, no dilations before opset 19 */
} qf_spatial_kind;

typedef struct qf_spatial {
    int rank;                          /* spatial dims, 1..QF_SPATIAL_MAX */
    qf_auto_pad auto_pad;
    int64_t kernel[QF_SPATIAL_MAX];    /* -1: unknown (W's shape not known yet) */
    int64_t stride[QF_SPATIAL_MAX];
    int64_t dilation[QF_SPATIAL_MAX];
    int64_t pad_begin[QF_SPATIAL_MAX]; /* explicit, or resolved from auto_pad */
    int64_t pad_end[QF_SPATIAL_MAX];
    int64_t in[QF_SPATIAL_MAX];        /* input spatial sizes, -1 unknown */
    int64_t out[QF_SPATIAL_MAX];       /* output spatial sizes, -1 unknown */
} qf_spatial;

/* Read and check auto_pad, kernel_shape, strides, dilations and pads of n for
 * `rank` spatial dims. w_kernel (conv ops: W's spatial dims, entries may be
 * -1) is used when kernel_shape is absent and checked against it when both
 * are known. QF_ERR_INVALID / QF_ERR_SHAPE naming the node and the numbers. */
qf_status qf_spatial_parse(const qf_node *n, int rank, const int64_t *w_kernel, qf_spatial_kind kind,
                           qf_spatial *s);

/* Output sizes of a convolution / pooling window over `in` (rank sizes, -1
 * unknown); resolves auto_pad into pad_begin / pad_end where in is known.
 * Fails when a known output size would be < 1. */
qf_status qf_spatial_forward_dims(const qf_node *n, qf_spatial *s, const int64_t *in, bool ceil_mode);

/* Output sizes of a transposed convolution (ONNX ConvTranspose), from the
 * output_padding and output_shape attributes of n; sets pad_begin / pad_end
 * (pad_end may be negative: output_shape larger than the full result). */
qf_status qf_spatial_transpose_dims(const qf_node *n, qf_spatial *s, const int64_t *in);

/* The same geometry as a 3-D problem: leading dims of size 1 (kernel 1,
 * stride 1, dilation 1, no pads) in front of the real ones. Row-major
 * offsets inside a plane are unchanged by the lift. */
qf_spatial qf_spatial_lift3(const qf_spatial *s);

/* Product of the first `rank` entries (-1 if any is unknown). */
int64_t qf_spatial_prod(int rank, const int64_t *v);

#endif
