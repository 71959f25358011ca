/* numpy broadcasting: the output shape of several operands, and a row
 * iterator that walks broadcast operands without per-element index math.
 *
 *   // shape inference
 *   int ny; int64_t ydims[QF_MAX_DIMS];
 *   QF_TRY(qf_broadcast_infer(n, a->ndim, a->dims, b->ndim, b->dims, &ny, ydims));
 *
 *   // kernel: y = a + b, y contiguous with the broadcast shape
 *   const qf_tensor *ops[] = {a, b};
 *   qf_bcast_iter it;
 *   qf_bcast_iter_init(&it, y->ndim, y->dims, 2, ops);
 *   for (int64_t r = 0; r < it.rows; r++, qf_bcast_iter_next(&it))
 *       for (int64_t i = 0; i < it.len; i++)
 *           yp[r * it.len + i] = ap[it.off[0] + i * it.step[0]] + bp[it.off[1] + i * it.step[1]];
 *
 * The iterator first drops size-1 output dims and merges adjacent dims that
 * every operand walks contiguously (or broadcasts entirely), so
 * [N, C, H, W] + [1, C, 1, 1] becomes rows of H*W elements in which the second
 * operand is one constant value (step 0), and same-shape operands become a
 * single row. Within a row each operand's step is 0 (broadcast) or 1.
 */
#ifndef QF_OPS_BROADCAST_H
#define QF_OPS_BROADCAST_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/graph.h"

/* Most operands any op broadcasts together (Where has 3). */
#define QF_BCAST_MAX_OPS 4

/* numpy broadcasting of shapes a and b (right-aligned; a missing or size-1
 * dim stretches). Unknown dims (-1) are tolerated: -1 with 1 or -1 gives -1,
 * -1 with k > 1 gives k (a symbolic dim can only be 1 or k). `out` may alias
 * neither a nor b. Returns false when two known dims differ and neither is 1. */
bool qf_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                        int64_t out[QF_MAX_DIMS]);

/* Same, for shape inference: QF_ERR_SHAPE naming node n and both shapes. */
qf_status qf_broadcast_infer(const qf_node *n, int na, const int64_t *a, int nb, const int64_t *b,
                             int *nout, int64_t out[QF_MAX_DIMS]);

/* Unidirectional broadcasting (ONNX: Gemm's C, PRelu's slope): can `from`
 * be broadcast to shape `to` without changing `to`? Unknown dims pass. */
bool qf_broadcast_to_ok(int nfrom, const int64_t *from, int nto, const int64_t *to);

/* Element strides of a C-contiguous operand of shape (n, dims) seen through
 * the output shape (nout, out): right-aligned, 0 where the operand is
 * broadcast (missing dim or size 1). `strides` has nout entries. */
void qf_broadcast_strides(int n, const int64_t *dims, int nout, const int64_t *out, int64_t *strides);

/* Row iterator over a C-contiguous output of known shape. Row r of the
 * output is elements [r * len, (r + 1) * len); in it, operand k's element i
 * is at offset off[k] + i * step[k] (in elements of operand k). */
typedef struct qf_bcast_iter {
    int64_t rows;                    /* number of rows (0 if the output is empty) */
    int64_t len;                     /* elements per row */
    int nops;
    int64_t off[QF_BCAST_MAX_OPS];   /* current row start, per operand */
    int64_t step[QF_BCAST_MAX_OPS];  /* 0 or 1 */
    /* private: the odometer over the collapsed outer dims */
    int nouter;
    int64_t dims[QF_MAX_DIMS];
    int64_t idx[QF_MAX_DIMS];
    int64_t strides[QF_BCAST_MAX_OPS][QF_MAX_DIMS];
} qf_bcast_iter;

/* Operands must broadcast to (nout, out) (checked by inference; asserted). */
void qf_bcast_iter_init(qf_bcast_iter *it, int nout, const int64_t *out, int nops,
                        const qf_tensor *const *ops);
/* Move off[] to the next row. */
void qf_bcast_iter_next(qf_bcast_iter *it);
/* Put the iterator on row `row` (0 <= row < rows): a slice of the rows run
 * on another thread starts from its own copy of a freshly initialised one. */
void qf_bcast_iter_seek(qf_bcast_iter *it, int64_t row);

/* The gradient of a broadcast operand (the backward kernels): d = scale *
 * the sum of g over the elements of the broadcast shape (nout, out) that
 * read each element of d. g: float32, C-contiguous, of shape (nout, out); d:
 * float32, C-contiguous, of a shape that broadcasts to it; d is overwritten.
 * Row sums in double; a d of the output's size is just scale * g. */
void qf_bcast_reduce_f32(int nout, const int64_t *out, const float *g, float scale, qf_tensor *d);

#endif
