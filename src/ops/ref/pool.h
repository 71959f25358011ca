/* The window geometry of the pools (pool.c), shared with the int8
 * AveragePool and Mean (int8/qpool.c): each (n, c) plane of X [N, C,
 * spatial...] is pooled on its own, as a 3-D problem (spatial.h lifts 1-D
 * and 2-D).
 *
 *   pool_geom pg;
 *   QF_TRY(qf_pool_setup(n, x, QF_SPATIAL_AVG_POOL, &pg));
 *   qf_pool_tap_window(oh * pg.l.stride[1] - pg.l.pad_begin[1], 1, pg.l.kernel[1], IH, &h0, &h1);
 */
#ifndef QF_OPS_POOL_H
#define QF_OPS_POOL_H

#include "ops/math/spatial.h"

typedef struct pool_geom {
    qf_spatial s, l;
    int64_t planes; /* N * C */
    int64_t in_plane, out_plane;
} pool_geom;

/* The window attributes of n (kind: MaxPool's or AveragePool's) on X. */
qf_status qf_pool_setup(const qf_node *n, const qf_tensor *x, qf_spatial_kind kind, pool_geom *pg);
/* y: [N, C, the pooled spatial dims] of dtype dt. */
void qf_pool_set_output(qf_tensor *y, qf_dtype dt, const qf_tensor *x, const pool_geom *pg);

/* Planes per thread slice: at least ~4k output elements. */
static inline int64_t qf_pool_grain(const pool_geom *pg) { return 1 + 4096 / (pg->out_plane + 1); }

/* Index range [lo, hi) of kernel taps k with o + k * d inside [0, size). */
static inline void qf_pool_tap_window(int64_t start, int64_t dil, int64_t k, int64_t size, int64_t *lo, int64_t *hi)
{
    int64_t a, b;
    if (dil == 1) { /* the common case, without the divisions */
        a = start >= 0 ? 0 : -start;
        b = size - start < 0 ? 0 : size - start;
    } else {
        a = start >= 0 ? 0 : (-start + dil - 1) / dil;
        b = size - 1 - start < 0 ? 0 : (size - 1 - start) / dil + 1;
    }
    if (b > k) b = k;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* Taps of a window along one axis: [lo, hi) inside the input, and the count
 * used by count_include_pad = 1: the window clipped to the padded extent
 * [-pad_begin, size + pad_end) (a ceil_mode window may reach past it). */
static inline int64_t qf_pool_padded_count(int64_t start, int64_t k, int64_t size, int64_t pad_end)
{
    int64_t end = start + k;
    if (end > size + pad_end) end = size + pad_end;
    return end - start;
}

#endif
