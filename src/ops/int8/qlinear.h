/* What the reference QLinearConv / ConvInteger prepare (src/ops/int8/qlinear.c)
 * decides, for the backend kernels of the same ops (src/backend/dnnl/dnnl_qlinear.c):
 * they run the reference prepare first, so that both engines accept and
 * refuse the same nodes with the same messages, then read the geometry,
 * dtypes and the requantization kind from its state.
 *
 *   qf_qconv_state ref;
 *   QF_TRY(qf_qconv_prepare(io, true, &ref));   // the reference's checks
 *   ... ref.geom, ref.fixed, ref.lo / ref.hi ...
 */
#ifndef QF_OPS_QLINEAR_H
#define QF_OPS_QLINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/ref/conv.h"
#include "ops/op_table.h"

typedef struct qf_qconv_state {
    qf_conv_geom geom;
    bool qlinear;
    /* qfold's int8 executor (src/quant/lower.c) sets two attributes no ONNX
     * file carries: qfold_requant = 1 for TFLite's fixed-point requantization
     * instead of ONNX's float one, qfold_clamp = [lo, hi] for a fused
     * activation's range in the output's integers. */
    bool fixed;
    int32_t lo, hi;
    int64_t acc_bound;
    qf_dtype xdt, wdt, ydt;
    bool w_scale_per, w_zp_per;
    size_t off_w16, off_col, off_acc, off_scale, off_wzp, off_mult, scratch;
} qf_qconv_state;

/* The reference prepare of QLinearConv (qlinear true) or ConvInteger. */
qf_status qf_qconv_prepare(const qf_kernel_io *io, bool qlinear, qf_qconv_state *st);


#endif
