/* Resize as TFLite's RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR: the lowered
 * int8 Resize (src/quant/lower.c) or a DQ -> Resize -> Q of shared qparams,
 * 4-D, H and W resized, the output size an int32 constant [OH, OW].
 *
 * Linear: the lowered int8 kernel computes TFLite's own arithmetic
 * (src/ops/ref/resize.c), so the mapping is only the options:
 * align_corners, half_pixel_centers (half_pixel, and pytorch_half_pixel with
 * both output sizes above 1) or neither (asymmetric), with scales equal to
 * out / in (TFLite samples at in / out). Other modes are refused by name.
 *
 * Nearest: qfold copies the element ONNX's coordinate mode and nearest_mode
 * pick; TFLite 2.2's int8 RESIZE_NEAREST_NEIGHBOR picks floor(x * in / out)
 * (in float) and reads no align_corners (measured: set, it picks the same;
 * tests/tflite/resize_test.py), so qfold writes it without options, and only
 * where its picks equal ONNX's on every output row and column of the node
 * (asymmetric + floor always; half_pixel + round_prefer_floor at integer
 * scales; ...). Other forms are refused naming the mode. */
#include <math.h>
#include <string.h>

#include "tflite_build.h"
#include "tflite_write.h"

/* ONNX's nearest pick of output index x on an axis (what resize.c computes). */
static int64_t rsz_onnx_nearest(const char *coord, const char *round, double s, int64_t in,
                                int64_t out, int64_t x)
{
    double v;
    if (!strcmp(coord, "asymmetric"))
        v = (double)x / s;
    else if (!strcmp(coord, "align_corners"))
        v = out > 1 ? (double)x * (double)(in - 1) / (double)(out - 1) : 0.0;
    else if (!strcmp(coord, "pytorch_half_pixel"))
        v = out > 1 ? ((double)x + 0.5) / s - 0.5 : 0.0;
    else if (!strcmp(coord, "tf_half_pixel_for_nn"))
        v = ((double)x + 0.5) / s;
    else if (!strcmp(coord, "half_pixel_symmetric"))
        v = (double)in / 2.0 * (1.0 - (double)out / (s * (double)in)) + ((double)x + 0.5) / s - 0.5;
    else
        v = ((double)x + 0.5) / s - 0.5; /* half_pixel */
    double f = floor(v), d = v - f;
    int64_t i;
    if (!strcmp(round, "floor"))
        i = (int64_t)f;
    else if (!strcmp(round, "ceil"))
        i = (int64_t)ceil(v);
    else if (!strcmp(round, "round_prefer_ceil"))
        i = (int64_t)(d < 0.5 ? f : f + 1.0);
    else
        i = (int64_t)(d <= 0.5 ? f : f + 1.0); /* round_prefer_floor */
    return i < 0 ? 0 : i >= in ? in - 1 : i;
}

/* TFLite 2.2's nearest pick (floor(x * in / out) in float, at most in - 1). */
static int64_t rsz_tfl_nearest(int64_t in, int64_t out, int64_t x)
{
    float v = (float)x * ((float)in / (float)out);
    int64_t i = (int64_t)floorf(v);
    return i < in - 1 ? i : in - 1;
}

qf_status qf_tfl_emit_resize(qf_tfl_ex *e, qf_node *n, const qf_tfl_row *row)
{
    (void)row;
    const qf_value *x, *y;
    QF_TRY(qf_tfl_group_same_qp(e, n, "resize", &x, &y));
    const qf_tensor *xt = &x->type, *yt = &y->type;
    if (xt->ndim != 4 || yt->ndim != 4 || xt->dims[0] != yt->dims[0] || xt->dims[1] != yt->dims[1])
        return qf_tfl_refuse(e, n, "TFLite resizes H and W of a 4-D tensor only");
    for (int a = 2; a < 4; a++)
        if (xt->dims[a] <= 0 || yt->dims[a] <= 0 || yt->dims[a] > INT32_MAX)
            return qf_tfl_refuse(e, n, "its spatial sizes are not known");
    const bool linear = strcmp(qf_node_attr_string(n, "mode", "nearest"), "linear") == 0;
    const char *coord = qf_node_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    const char *round = qf_node_attr_string(n, "nearest_mode", "round_prefer_floor");
    /* the scales of H and W: entries 2, 3, or 0, 1 with axes [2, 3] (opset 18) */
    int cnt = 0, first = 2;
    const int64_t *axes = qf_node_attr_ints(n, "axes", &cnt);
    if (axes) {
        if (cnt != 2 || (axes[0] != 2 && axes[0] != -2) || (axes[1] != 3 && axes[1] != -1))
            return qf_tfl_refuse(e, n, "axes other than [2, 3]");
        first = 0;
    }
    double s[2];
    const qf_value *sv = n->ninputs > 2 ? n->inputs[2] : NULL;
    bool given = sv && qf_tensor_numel(&sv->type) > 0;
    if (given && (!qf_value_is_const(sv) || qf_tensor_numel(&sv->type) != first + 2))
        return qf_tfl_refuse(e, n, "its scales are not a constant of %d values", first + 2);
    for (int a = 0; a < 2; a++)
        s[a] = given ? qf_tensor_get_f64(&sv->type, first + a)
                     : (double)yt->dims[a + 2] / (double)xt->dims[a + 2];
    qf_tfl_op *op;
    int align = 0, half = 0;
    if (linear) {
        align = strcmp(coord, "align_corners") == 0;
        bool torch = strcmp(coord, "pytorch_half_pixel") == 0;
        half = strcmp(coord, "half_pixel") == 0 || torch;
        if (!align && !half && strcmp(coord, "asymmetric") != 0)
            return qf_tfl_refuse(
                e, n, "linear with coordinate_transformation_mode '%s' has no RESIZE_BILINEAR form",
                coord);
        if (torch && (yt->dims[2] == 1 || yt->dims[3] == 1))
            return qf_tfl_refuse(
                e, n, "pytorch_half_pixel to an output size of 1 has no RESIZE_BILINEAR form");
        for (int a = 0; a < 2 && !align; a++)
            if (s[a] != (double)yt->dims[a + 2] / (double)xt->dims[a + 2])
                return qf_tfl_refuse(
                    e, n,
                    "scale %g is not out / in = %lld / %lld (RESIZE_BILINEAR samples at in / out)",
                    s[a], (long long)yt->dims[a + 2], (long long)xt->dims[a + 2]);
    } else {
        for (int a = 2; a < 4; a++)
            for (int64_t o = 0; o < yt->dims[a]; o++)
                if (rsz_onnx_nearest(coord, round, s[a - 2], xt->dims[a], yt->dims[a], o) !=
                    rsz_tfl_nearest(xt->dims[a], yt->dims[a], o))
                    return qf_tfl_refuse(
                        e, n,
                        "nearest with coordinate_transformation_mode '%s' and nearest_mode '%s' "
                        "picks other elements than TFLite 2.2's RESIZE_NEAREST_NEIGHBOR "
                        "(floor(x * in / out); it ignores align_corners)",
                        coord, round);
    }
    int xi, yi;
    QF_TRY(qf_tfl_act_tensor(e, n, x, &xi));
    QF_TRY(qf_tfl_act_tensor(e, n, y, &yi));
    int32_t size[2] = {(int32_t)yt->dims[2], (int32_t)yt->dims[3]};
    int si = qf_tfl_i32_tensor(e, y->name, "size", size, 2, false);
    QF_TRY(qf_tfl_need(si));
    int32_t in[2] = {xi, si};
    QF_TRY(qf_tfl_add_op(e, n, linear ? QF_TFL_RESIZE_BILINEAR : QF_TFL_RESIZE_NEAREST_NEIGHBOR, in,
                         2, &yi, 1, 0, &op));
    op->align_corners = align;
    op->half_pixel_centers = half;
    return QF_OK;
}
