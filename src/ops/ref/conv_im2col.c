/* im2col and col2im over 3-D (1-D and 2-D lifted, see ops/math/spatial.h):
 * the column matrices of the float convolutions (conv.c), their backward
 * (conv_backward.c) and the transposed ones; declared in conv.h. A file of
 * its own so that the forward and backward kernels both use it and neither
 * uses the other's. */
#include <string.h>

#include "ops/ref/conv.h"

/* Column matrix of `channels` input planes: row (c, kd, kh, kw), column
 * (od, oh, ow) holds X[c, od*sd - pd + kd*dd, ...] or 0 in the padding. */
void qf_conv_im2col3(const float *x, int64_t channels, const qf_spatial *l, float *col)
{
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];
    const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2];
    float *dst = col;
    for (int64_t c = 0; c < channels; c++) {
        const float *xc = x + c * ID * IH * IW;
        for (int64_t kd = 0; kd < l->kernel[0]; kd++)
            for (int64_t kh = 0; kh < l->kernel[1]; kh++)
                for (int64_t kw = 0; kw < l->kernel[2]; kw++) {
                    int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;
                    qf_conv_tap_range(offw, l->stride[2], IW, OW, &lo, &hi);
                    for (int64_t od = 0; od < OD; od++) {
                        int64_t id = od * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];
                        for (int64_t oh = 0; oh < OH; oh++, dst += OW) {
                            int64_t ih = oh * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];
                            if (id < 0 || id >= ID || ih < 0 || ih >= IH) {
                                memset(dst, 0, sizeof *dst * (size_t)OW);
                                continue;
                            }
                            const float *row = xc + (id * IH + ih) * IW;
                            if (lo > 0) memset(dst, 0, sizeof *dst * (size_t)lo);
                            if (l->stride[2] == 1) {
                                qf_conv_copy_row(dst + lo, row + lo + offw, hi - lo);
                            } else {
                                for (int64_t ow = lo; ow < hi; ow++) dst[ow] = row[ow * l->stride[2] + offw];
                            }
                            if (hi < OW) memset(dst + hi, 0, sizeof *dst * (size_t)(OW - hi));
                        }
                    }
                }
    }
}

/* The adjoint of im2col: col row (c, kd, kh, kw), column (id, ih, iw) is
 * added into Y[c, id*sd - pd + kd*dd, ...] when that lies in the output. */
void qf_conv_col2im3(const float *col, int64_t channels, const qf_spatial *l, float *y)
{
    const int64_t ID = l->in[0], IH = l->in[1], IW = l->in[2];
    const int64_t OD = l->out[0], OH = l->out[1], OW = l->out[2];
    const float *src = col;
    for (int64_t c = 0; c < channels; c++) {
        float *yc = y + c * OD * OH * OW;
        for (int64_t kd = 0; kd < l->kernel[0]; kd++)
            for (int64_t kh = 0; kh < l->kernel[1]; kh++)
                for (int64_t kw = 0; kw < l->kernel[2]; kw++) {
                    int64_t offw = kw * l->dilation[2] - l->pad_begin[2], lo, hi;
                    qf_conv_tap_range(offw, l->stride[2], OW, IW, &lo, &hi);
                    for (int64_t id = 0; id < ID; id++) {
                        int64_t od = id * l->stride[0] - l->pad_begin[0] + kd * l->dilation[0];
                        for (int64_t ih = 0; ih < IH; ih++, src += IW) {
                            int64_t oh = ih * l->stride[1] - l->pad_begin[1] + kh * l->dilation[1];
                            if (od < 0 || od >= OD || oh < 0 || oh >= OH) continue;
                            float *row = yc + (od * OH + oh) * OW + offw;
                            if (l->stride[2] == 1) {
                                for (int64_t iw = lo; iw < hi; iw++) row[iw] += src[iw];
                            } else {
                                for (int64_t iw = lo; iw < hi; iw++) row[iw * l->stride[2]] += src[iw];
                            }
                        }
                    }
                }
    }
}
