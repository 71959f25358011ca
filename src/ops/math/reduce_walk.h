/* Walking a reduction over any set of axes (ReduceMean / Sum / Max and the
 * int8 SUM): the output elements in order, one per index of the kept axes,
 * and for each the input elements it reduces, one per index of the reduced
 * axes, both as odometers over strides (no division per element).
 *
 *   qf_reduce_walk w;
 *   qf_reduce_walk_init(&w, x->ndim, x->dims, mask);
 *   for (int64_t o = 0; o < nout; o++, qf_reduce_walk_next_out(&w)) {
 *       int64_t ridx[QF_MAX_DIMS] = {0}, off = w.base;
 *       for (int64_t r = 0; r < w.rcount; r++, off = qf_reduce_walk_next_in(&w, ridx, off))
 *           ... x[off] ...
 *   }
 */
#ifndef QF_OPS_MATH_REDUCE_WALK_H
#define QF_OPS_MATH_REDUCE_WALK_H

#include <stdbool.h>
#include <stdint.h>

#include "qfold/tensor.h"

typedef struct qf_reduce_walk {
    int nk, nr;                                 /* kept / reduced axes */
    int64_t kd[QF_MAX_DIMS], ks[QF_MAX_DIMS];   /* kept axes: dims, input strides */
    int64_t rd[QF_MAX_DIMS], rs[QF_MAX_DIMS];   /* reduced axes: dims, input strides */
    int64_t rcount;                             /* elements per output element */
    int64_t kidx[QF_MAX_DIMS], base;            /* the output odometer and its offset */
} qf_reduce_walk;

/* mask[i]: axis i of the row-major input of rank `rank` is reduced. */
static inline void qf_reduce_walk_init(qf_reduce_walk *w, int rank, const int64_t *dims, const bool *mask)
{
    int64_t stride[QF_MAX_DIMS], s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        stride[i] = s;
        s *= dims[i];
    }
    w->nk = w->nr = 0;
    w->rcount = 1;
    w->base = 0;
    for (int i = 0; i < rank; i++) {
        w->kidx[i] = 0;
        if (mask[i]) {
            w->rd[w->nr] = dims[i];
            w->rs[w->nr++] = stride[i];
            w->rcount *= dims[i];
        } else {
            w->kd[w->nk] = dims[i];
            w->ks[w->nk++] = stride[i];
        }
    }
}

/* The input offset of the next reduced element after `off` (ridx: the
 * reduced odometer, zeros at the output element's first). */
static inline int64_t qf_reduce_walk_next_in(const qf_reduce_walk *w, int64_t *ridx, int64_t off)
{
    for (int i = w->nr - 1; i >= 0; i--) {
        off += w->rs[i];
        if (++ridx[i] < w->rd[i]) break;
        off -= w->rs[i] * w->rd[i];
        ridx[i] = 0;
    }
    return off;
}

/* Move w->base to the next output element's first input element. */
static inline void qf_reduce_walk_next_out(qf_reduce_walk *w)
{
    for (int i = w->nk - 1; i >= 0; i--) {
        w->base += w->ks[i];
        if (++w->kidx[i] < w->kd[i]) break;
        w->base -= w->ks[i] * w->kd[i];
        w->kidx[i] = 0;
    }
}

#endif
