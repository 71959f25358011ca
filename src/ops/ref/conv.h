/* The numeric core of Conv and ConvTranspose, shared by their kernels (float
 * forward, the integer convs of int8.c, the backward of conv_backward.c):
 * geometry from the attributes and the operand types, the path choice,
 * im2col / col2im over the 3-D lift.
 *
 *   qf_conv_geom g;
 *   QF_TRY(qf_conv_setup(n, x_type, w_type, b_type, false, &g));  // once, in prepare
 *   if (qf_conv_choose_path(&g) == QF_CONV_PATH_IM2COL) qf_conv_im2col3(x, g.cg, &g.l, col);
 */
#ifndef QF_OPS_CONV_H
#define QF_OPS_CONV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qfold/graph.h"
#include "ops/op_table.h"
#include "ops/math/spatial.h"

typedef struct qf_conv_geom {
    qf_spatial s;      /* real rank */
    qf_spatial l;      /* lifted to 3-D */
    int64_t n, c, m;   /* batch, input channels, output channels */
    int64_t group, cg, mg;
    int64_t ksize;     /* prod(kernel) */
    int64_t k;         /* GEMM inner (Conv) or row count (ConvTranspose) */
    int64_t in_plane, out_plane;
    bool transpose;
} qf_conv_geom;

typedef enum qf_conv_path {
    QF_CONV_PATH_IM2COL,     /* im2col + GEMM */
    QF_CONV_PATH_POINTWISE,  /* 1x1, stride 1, no pads: X is the column matrix */
    QF_CONV_PATH_DEPTHWISE   /* one input channel per group: direct loop */
} qf_conv_path;

/* What prepare keeps for a Conv / ConvTranspose node. */
typedef struct qf_conv_state {
    qf_conv_geom geom;
    qf_conv_path path;       /* Conv only */
    size_t scratch;          /* bytes of the column buffer */
} qf_conv_state;

/* Validate X, W, B (types; data not needed) and n's attributes; compute every
 * size (-1 where unknown). Errors name the node. */
qf_status qf_conv_setup(const qf_node *n, const qf_tensor *x, const qf_tensor *w, const qf_tensor *b,
                        bool transpose, qf_conv_geom *cg);

/* qf_conv_setup without the float32 checks: shapes and attributes only, for
 * the integer convs (QLinearConv, ConvInteger), which check their dtypes. */
qf_status qf_conv_geometry(const qf_node *n, const qf_tensor *x, const qf_tensor *w, const qf_tensor *b,
                           bool transpose, qf_conv_geom *cg);

/* The Conv loop for cg (ConvTranspose always scatters through col2im). */
qf_conv_path qf_conv_choose_path(const qf_conv_geom *cg);

/* Column-buffer bytes for cg (0 when the path needs none; SIZE_MAX when it
 * does not fit). */
size_t qf_conv_scratch_bytes(const qf_conv_geom *cg);

/* Index range [lo, hi) of outputs o for which i = o * st + off lies in
 * [0, size): the positions of one kernel tap that read real input. */
static inline void qf_conv_tap_range(int64_t off, int64_t st, int64_t size, int64_t nout, int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + st - 1) / st;
    int64_t b = size - 1 - off < 0 ? 0 : (size - 1 - off) / st + 1;
    if (b > nout) b = nout;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* dst[0 .. n-1] = src[0 .. n-1] for rows of a plane: a short row (7, 14,
 * 28 wide) is copied inline, without a call to memcpy per row. */
static inline void qf_conv_copy_row(float *restrict dst, const float *restrict src, int64_t n)
{
    if (n >= 64) {
        memcpy(dst, src, sizeof *dst * (size_t)n);
        return;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(dst + i, src + i, 8 * sizeof *dst);
    if (i + 4 <= n) {
        memcpy(dst + i, src + i, 4 * sizeof *dst);
        i += 4;
    }
    if (i < n) dst[i] = src[i];
    if (i + 1 < n) dst[i + 1] = src[i + 1];
    if (i + 2 < n) dst[i + 2] = src[i + 2];
}

/* Column matrix of `channels` input planes: row (c, kd, kh, kw), column
 * (od, oh, ow) holds X[c, od*sd - pd + kd*dd, ...] or 0 in the padding. */
void qf_conv_im2col3(const float *x, int64_t channels, const qf_spatial *l, float *col);

/* The adjoint of im2col: col row (c, kd, kh, kw), column (id, ih, iw) is
 * added into Y[c, id*sd - pd + kd*dd, ...] when that lies in the output. */
void qf_conv_col2im3(const float *col, int64_t channels, const qf_spatial *l, float *y);

/* Backward kernels (conv_backward.c) of Conv and ConvTranspose, float32,
 * for the op table's backward_f32 / bwd_scratch columns: they read the
 * prepared qf_conv_state, X and W (bwd_in bits 0 and 1) and dY. */
qf_status qf_conv_backward_f32(const qf_kernel_io *io);
qf_status qf_conv_transpose_backward_f32(const qf_kernel_io *io);
size_t qf_conv_bwd_scratch(const qf_node *n, const void *state);

#endif
