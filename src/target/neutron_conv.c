/* Neutron rules for the convolutions and the matrix products: Conv (1-D,
 * 2-D, depthwise, grouped), ConvTranspose, Gemm, MatMul.
 *
 * Read from ExecuTorch's NXP backend (backends/nxp/): the converters
 * convolution_converter.py, addmm_converter.py, mm_converter.py and
 * bmm_converter.py, with shared/conv_utils.py and the aten passes
 * SplitGroupConvolution and ConvertConv1dToConv2dPass, at commit cff6f4dd
 * (eIQ Neutron SDK 3.x: the sdk3 rules) and at v1.3.0 (Neutron SW 2.2: the
 * sdk2 rules). docs/NEUTRON_RULES.md tables every check with its source.
 *
 * ONNX against aten, the form ExecuTorch sees:
 * - A 1-D Conv / ConvTranspose is a 2-D one with H = 1 (kernel 1 x k,
 *   stride 1 x s, no pads on H): ConvertConv1dToConv2dPass.
 * - ONNX pads are begin / end per axis, aten's are symmetric: PyTorch
 *   exports an asymmetric padding as a Pad node in front of a symmetric
 *   convolution. The limits on pads (ConvTranspose: pad < kernel; SDK 2.x
 *   ConvTranspose: no pad on H) are checked on both ends, so an asymmetric
 *   pad passes only when each side would. auto_pad SAME_* is resolved into
 *   its pads first.
 * - A grouped convolution (1 < groups, not depthwise) is judged as
 *   ExecuTorch judges it after SplitGroupConvolution: when that pass splits
 *   it (2 <= groups <= 10, constant weights, and in SDK 2.x a constant
 *   bias), as its per-group convolutions (Cin / groups input channels
 *   each); otherwise as the one node. qfold's split_group_conv pass splits
 *   it the same way before export.
 * - Gemm is aten's addmm (with C) or mm (without): transA is a separate
 *   permute of the activation in PyTorch (not this node's rule), transB a
 *   permute of the constant weights that the converter folds. MatMul with a
 *   rank-2 second operand is mm (torch.matmul folds a rank >= 3 first
 *   operand into rank 2); with both operands of rank >= 3 (or a rank-2
 *   first one) it is bmm on the operands reshaped to rank 3.
 */
#include <stdio.h>
#include <string.h>

#include "neutron.h"
#include "neutron_rule_util.h"

#define NC_MAX_KERNEL 4096  /* kernel, stride, dilation per axis */
#define NC_MAX_MACS   65535 /* kh * kw * ceil(Cin, num_macs) */
#define NC_MAX_SPLIT  10    /* SplitGroupConvolution: groups it splits */

/* A convolution in aten's 2-D terms. */
typedef struct nc_conv {
    int rank; /* input rank: 3 (1-D) or 4 (2-D); else no converter */
    bool transposed;
    int64_t n, cin, cout, ih, iw, oh, ow;
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t pt, pl, pb, pr; /* pads top, left, bottom, right */
    int64_t oph, opw;       /* ConvTranspose output_padding */
    int64_t group;
} nc_conv;

static int64_t nc_dim(const qf_value *v, int i)
{
    if (!v || i >= v->type.ndim || i < 0) return -1;
    return v->type.dims[i];
}

/* An ints attribute entry i, or dflt. */
static int64_t nc_attr_at(const qf_node *node, const char *name, int i, int64_t dflt)
{
    int cnt = 0;
    const int64_t *v = qf_node_attr_ints(node, name, &cnt);
    return v && i < cnt ? v[i] : dflt;
}

/* The pads of one spatial axis (index a of `sr` spatial axes), auto_pad
 * resolved as ONNX resolves it. */
static void nc_axis_pads(const qf_node *node, int a, int sr, int64_t in, int64_t out, int64_t k,
                         int64_t s, int64_t d, bool transposed, int64_t *pb, int64_t *pe)
{
    const char *ap = qf_node_attr_string(node, "auto_pad", "NOTSET");
    *pb = nc_attr_at(node, "pads", a, 0);
    *pe = nc_attr_at(node, "pads", sr + a, 0);
    int64_t dk = (k - 1) * d + 1, total = -1;
    bool upper = strcmp(ap, "SAME_LOWER") != 0;
    if (strcmp(ap, "VALID") == 0) {
        *pb = *pe = 0;
        return;
    }
    int oscnt = 0;
    bool has_os = qf_node_attr_ints(node, "output_shape", &oscnt) != NULL;
    if (strncmp(ap, "SAME_", 5) == 0 || (transposed && has_os)) {
        if (in < 0 || out < 0) return;
        if (!transposed)
            total = (out - 1) * s + dk - in;
        else
            total = s * (in - 1) + nc_attr_at(node, "output_padding", a, 0) + dk - out;
        if (total < 0) total = 0;
        /* Conv: the odd unit at the end for SAME_UPPER; ConvTranspose
         * (and output_shape): at the beginning, as the ONNX spec words it. */
        int64_t small = total / 2, big = total - small;
        if (!transposed) {
            *pb = upper ? small : big;
            *pe = total - *pb;
        } else {
            *pb = upper ? big : small;
            *pe = total - *pb;
        }
    }
}

static bool nc_conv_read(const qf_nview *n, nc_conv *c)
{
    memset(c, 0, sizeof *c);
    const qf_node *node = n->node;
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL, *w = n->nin > 1 ? n->in[1].v : NULL;
    const qf_value *y = n->nout > 0 ? n->out[0].v : NULL;
    c->transposed = node->op == QF_OP_CONV_TRANSPOSE;
    c->rank = x ? x->type.ndim : (w ? w->type.ndim : 0);
    if (c->rank != 3 && c->rank != 4) return false;
    c->group = qf_node_attr_int(node, "group", 1);
    c->n = nc_dim(x, 0);
    c->cin = nc_dim(x, 1);
    c->cout = nc_dim(y, 1);
    if (c->cout < 0 && w) c->cout = c->transposed ? nc_dim(w, 1) * c->group : nc_dim(w, 0);
    if (c->cin < 0 && w) c->cin = c->transposed ? nc_dim(w, 0) : nc_dim(w, 1) * c->group;
    int sr = c->rank - 2;
    /* 1-D: the W axis of a 2-D problem with H = 1. */
    int64_t k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, in[2] = {1, 1}, out[2] = {1, 1},
            pb[2] = {0, 0}, pe[2] = {0, 0}, op[2] = {0, 0};
    for (int a = 0; a < sr; a++) {
        int j = 2 - sr + a;
        k[j] = nc_attr_at(node, "kernel_shape", a, nc_dim(w, 2 + a));
        s[j] = nc_attr_at(node, "strides", a, 1);
        d[j] = nc_attr_at(node, "dilations", a, 1);
        in[j] = nc_dim(x, 2 + a);
        out[j] = nc_dim(y, 2 + a);
        op[j] = c->transposed ? nc_attr_at(node, "output_padding", a, 0) : 0;
        nc_axis_pads(node, a, sr, in[j], out[j], k[j], s[j], d[j], c->transposed, &pb[j], &pe[j]);
    }
    c->kh = k[0], c->kw = k[1], c->sh = s[0], c->sw = s[1], c->dh = d[0], c->dw = d[1];
    c->ih = in[0], c->iw = in[1], c->oh = out[0], c->ow = out[1];
    c->pt = pb[0], c->pl = pb[1], c->pb = pe[0], c->pr = pe[1];
    c->oph = op[0], c->opw = op[1];
    return true;
}

static bool nc_refuse_rank(const qf_nview *n, qf_nwhy *why)
{
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL;
    int r = x ? x->type.ndim : 0;
    return qf_neutron_refuse(
        why, "", "a %d-D convolution (input rank %d): the NPU takes 1-D and 2-D convolutions only",
        r - 2, r);
}

/* groups == Cin == Cout (conv_utils.group_conv_convertible_as_depthwise) */
static bool nc_depthwise(const nc_conv *c)
{
    return c->group > 1 && c->cin == c->group && c->cout == c->group;
}

/* SplitGroupConvolution splits this grouped convolution (conv_utils.
 * group_conv_convertible_into_multiple_convolutions and the pass's own
 * tests: constant weights, and in SDK 2.x (v1.3.0) a constant bias too; at
 * HEAD a missing bias is fine). */
static bool nc_split(const qf_nview *n, const nc_conv *c, qf_neutron_flow flow)
{
    if (c->group <= 1 || nc_depthwise(c) || c->transposed) return false;
    if (c->cout < 0 || c->cout % c->group != 0 || c->group > NC_MAX_SPLIT) return false;
    if (!n->in[1].is_static) return false;
    bool has_bias = n->nin > 2 && n->in[2].v;
    if (flow == QF_NEUTRON_SDK2 && !has_bias) return false;
    if (has_bias && !n->in[2].is_static) return false;
    return true;
}

/* The HEAD conversion's quantization: int8 / uint8 I/O, int8 constant
 * weights, int32 constant bias (ConvolutionConverter._is_conv_quant_supported). */
static bool nc_conv_quant_sdk3(const qf_nview *n, qf_nwhy *why)
{
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    if (!qf_nrule_in_type(n, 1, QF_DTYPE_I8, "the weights", why)) return false;
    bool has_bias = n->nin > 2 && n->in[2].v;
    if (has_bias && !qf_nrule_in_type(n, 2, QF_DTYPE_I32, "the bias values", why)) return false;
    if (!qf_nrule_in_static(n, 1, "the weights", "make the weights an initializer", why))
        return false;
    if (has_bias &&
        !qf_nrule_in_static(n, 2, "the bias values", "make the bias an initializer", why))
        return false;
    return true;
}

/* kh * kw * ceil(Cin, num_macs) <= 65535, with the split that fixes it. */
static bool nc_macs_limit(const nc_conv *c, int64_t cin, const char *what, const qf_target_spec *t,
                          qf_nwhy *why)
{
    int64_t m = t->num_macs > 0 ? t->num_macs : 1;
    int64_t v = c->kh * c->kw * qf_neutron_round_up(cin, m);
    if (cin < 0 || v <= NC_MAX_MACS) return true;
    qf_neutron_refuse(why, NULL, "%skh*kw*ceil(Cin, %lld) = %lld*%lld*%lld = %lld > %d", what,
                      (long long)m, (long long)c->kh, (long long)c->kw,
                      (long long)qf_neutron_round_up(cin, m), (long long)v, NC_MAX_MACS);
    /* The most input channels a convolution with this kernel may read. */
    int64_t cmax = NC_MAX_MACS / (c->kh * c->kw) / m * m;
    if (cmax >= m) {
        int64_t parts = (cin + cmax - 1) / cmax;
        return qf_nrule_fix(
            why,
            "split the input channels into %lld convolutions of at most %lld channels each and "
            "add their outputs",
            (long long)parts, (long long)cmax);
    }
    return qf_nrule_fix(why, "use a smaller kernel (kh*kw <= %lld)", (long long)(NC_MAX_MACS / m));
}

static bool nc_conv_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    nc_conv c;
    if (!nc_conv_read(n, &c)) return nc_refuse_rank(n, why);
    if (!nc_conv_quant_sdk3(n, why)) return false;
    int64_t lim[6] = {c.kh, c.kw, c.sh, c.sw, c.dh, c.dw};
    const char *names[6] = {"kernel height", "kernel width", "stride H",
                            "stride W",      "dilation H",   "dilation W"};
    for (int i = 0; i < 6; i++)
        if (lim[i] > NC_MAX_KERNEL)
            return qf_neutron_refuse(why, "", "%s = %lld > %d", names[i], (long long)lim[i],
                                     NC_MAX_KERNEL);
    /* The converter reads Cin off the input tensor: a depthwise or an
     * unsplit grouped convolution counts all of them. */
    int64_t cin = c.cin;
    char what[96] = "";
    if (nc_split(n, &c, QF_NEUTRON_SDK3)) {
        cin = c.cin / c.group;
        snprintf(what, sizeof what,
                 "each of the %lld per-group convolutions: ", (long long)c.group);
    }
    return nc_macs_limit(&c, cin, what, t, why);
}

static bool nc_conv_transpose_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    nc_conv c;
    if (!nc_conv_read(n, &c)) return nc_refuse_rank(n, why);
    /* _is_supported_in_IR */
    if (c.group > 1 && c.cin == c.group && c.cout == c.group)
        return qf_neutron_refuse(
            why, "use a regular (groups = 1) transposed convolution",
            "a depthwise transposed convolution (groups = %lld): Neutron has none",
            (long long)c.group);
    if (c.dh != 1 || c.dw != 1)
        return qf_neutron_refuse(why, "use dilation 1",
                                 "dilation %lld x %lld: Neutron's TransposeConv takes none",
                                 (long long)c.dh, (long long)c.dw);
    if (!nc_conv_quant_sdk3(n, why)) return false;
    if (c.group > 1)
        return qf_neutron_refuse(
            why,
            "split it into one ConvTranspose per group and a Concat (ExecuTorch's "
            "SplitGroupConvolution splits only regular convolutions)",
            "a grouped transposed convolution (groups = %lld): Neutron takes groups = 1 only",
            (long long)c.group);
    if (c.kh > NC_MAX_KERNEL || c.kw > NC_MAX_KERNEL)
        return qf_neutron_refuse(why, "", "kernel %lld x %lld: each side must be <= %d",
                                 (long long)c.kh, (long long)c.kw, NC_MAX_KERNEL);
    if (c.sh > c.kh || c.sw > c.kw)
        return qf_neutron_refuse(
            why, "use a stride no larger than the kernel",
            "stride %lld x %lld > kernel %lld x %lld: the stride must be <= the kernel",
            (long long)c.sh, (long long)c.sw, (long long)c.kh, (long long)c.kw);
    if (c.sh > 2 || c.sw > 2)
        return qf_neutron_refuse(
            why, "upsample in steps of 2 (two transposed convolutions of stride 2 for 4)",
            "stride %lld x %lld: a transposed convolution's stride must be <= 2", (long long)c.sh,
            (long long)c.sw);
    if (c.pt >= c.kh || c.pb >= c.kh || c.pl >= c.kw || c.pr >= c.kw)
        return qf_neutron_refuse(
            why, "reduce the padding below the kernel size (crop the output with a Slice)",
            "pads (top %lld, left %lld, bottom %lld, right %lld) with kernel %lld x %lld: each "
            "pad must be < the kernel",
            (long long)c.pt, (long long)c.pl, (long long)c.pb, (long long)c.pr, (long long)c.kh,
            (long long)c.kw);
    return nc_macs_limit(&c, c.cin, "", t, why);
}

static bool nc_conv_common_sdk2(const qf_nview *n, nc_conv *c, qf_nwhy *why)
{
    if (!nc_conv_read(n, c)) return nc_refuse_rank(n, why);
    if (!qf_nrule_io_quantized(n, 1, false, why)) return false;
    /* The output of the (split) convolution: batch 1. */
    if (c->n > 1) /* a dynamic batch (-1) counts as 1, as ExecuTorch exports it */
        return qf_neutron_refuse(
            why, "export the model with batch 1 (run a batch as several inferences)",
            "batch %lld: SDK 2.x convolutions take batch 1 only", (long long)c->n);
    return true;
}

static bool nc_conv_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    nc_conv c;
    if (!nc_conv_common_sdk2(n, &c, why)) return false;
    if (c.group == 1) return true;
    if (nc_depthwise(&c))
        return qf_nrule_in_static(n, 1, "the depthwise weights", "make the weights an initializer",
                                  why);
    if (nc_split(n, &c, QF_NEUTRON_SDK2)) return true; /* per-group convolutions, batch 1 checked */
    return qf_neutron_refuse(
        why,
        "use groups <= 10 with constant weights and a constant bias (ExecuTorch then splits "
        "it), or split it in the model into per-group convolutions and a Concat",
        "a grouped convolution (groups = %lld, Cin = %lld, Cout = %lld) that ExecuTorch does not "
        "split: SDK 2.x has no grouped convolution",
        (long long)c.group, (long long)c.cin, (long long)c.cout);
}

/* v1.3.0's TransposeConv2DKernelKind test (neutron-library's
 * NeutronLibraryInterrogation), one condition at a time. */
static bool nc_conv_transpose_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    nc_conv c;
    if (!nc_conv_common_sdk2(n, &c, why)) return false;
    int64_t m = t->num_macs > 0 ? t->num_macs : 1;
    if (c.group > 1 && c.cin == c.group && c.cout == c.group)
        return qf_neutron_refuse(
            why, "use a regular (groups = 1) transposed convolution",
            "a depthwise transposed convolution (groups = %lld): Neutron has none",
            (long long)c.group);
    if (c.group > 1)
        return qf_neutron_refuse(
            why, "split it into one ConvTranspose per group and a Concat",
            "a grouped transposed convolution (groups = %lld): Neutron takes groups = 1 only",
            (long long)c.group);
    if (!qf_nrule_in_static(n, 1, "the weights", "make the weights an initializer", why))
        return false;
    if (c.dh != 1 || c.dw != 1)
        return qf_neutron_refuse(why, "use dilation 1",
                                 "dilation %lld x %lld: SDK 2.x TransposeConv takes none",
                                 (long long)c.dh, (long long)c.dw);
    if (c.kh != 1)
        return qf_neutron_refuse(
            why,
            "make it 1-D: kernel 1 x k with stride 1 and no padding on H, an even k with "
            "stride W = k, Cin and Cout multiples of num_macs; or use the SDK 3.x flow",
            "kernel height %lld: SDK 2.x takes transposed convolutions with kernel height 1 only",
            (long long)c.kh);
    if (c.sh != 1)
        return qf_neutron_refuse(why, "use stride 1 on H",
                                 "stride H = %lld: SDK 2.x takes stride H = 1 only",
                                 (long long)c.sh);
    if (c.pt != 0 || c.pb != 0)
        return qf_neutron_refuse(why, "remove the padding on H",
                                 "pads on H (%lld, %lld): SDK 2.x takes none", (long long)c.pt,
                                 (long long)c.pb);
    if (c.pl >= c.kw || c.pr >= c.kw)
        return qf_neutron_refuse(why, "reduce the padding below the kernel width",
                                 "pads on W (%lld, %lld) >= kernel width %lld", (long long)c.pl,
                                 (long long)c.pr, (long long)c.kw);
    if ((c.pl != 0 || c.pr != 0) && c.ih != 1)
        return qf_neutron_refuse(
            why, "remove the padding (crop the output with a Slice instead)",
            "pads on W with input height %lld: SDK 2.x crops the padding only when H = 1",
            (long long)c.ih);
    bool half = c.kw % 2 == 0 && c.sw == c.kw / 2 && c.oh == 1;
    if (c.sw != c.kw && !half)
        return qf_neutron_refuse(
            why, "use stride W = kernel width (or half of it with output height 1)",
            "stride W = %lld with kernel width %lld and output height %lld: SDK 2.x takes "
            "stride W = kernel width, or = kernel width / 2 when the output height is 1",
            (long long)c.sw, (long long)c.kw, (long long)c.oh);
    if (c.sw % 2 != 0)
        return qf_neutron_refuse(why, "use an even stride W",
                                 "stride W = %lld is odd: SDK 2.x takes even strides only",
                                 (long long)c.sw);
    if (c.cin % m != 0) {
        qf_neutron_refuse(why, NULL, "Cin = %lld is not a multiple of num_macs = %lld",
                          (long long)c.cin, (long long)m);
        return qf_nrule_fix(why, "pad the input channels to %lld",
                            (long long)qf_neutron_round_up(c.cin, m));
    }
    if (c.cout % m != 0) {
        qf_neutron_refuse(why, NULL, "Cout = %lld is not a multiple of num_macs = %lld",
                          (long long)c.cout, (long long)m);
        return qf_nrule_fix(why, "pad the output channels to %lld",
                            (long long)qf_neutron_round_up(c.cout, m));
    }
    if (c.kw % 2 != 0)
        return qf_neutron_refuse(why, "use an even kernel width",
                                 "kernel width %lld is odd: SDK 2.x takes even kernel widths only",
                                 (long long)c.kw);
    return true;
}

/* --- Gemm / MatMul ------------------------------------------------------- */

/* addmm / mm at HEAD: int8 / uint8 I/O, int8 constant weights of rank 2,
 * (addmm) int32 constant bias of shape [P] or [1, P]. */
static bool nc_fc_sdk3(const qf_nview *n, int wslot, int bslot, qf_nwhy *why)
{
    const qf_value *w = n->in[wslot].v;
    if (w && w->type.ndim != 2)
        return qf_neutron_refuse(why, "",
                                 "weights of rank %d: the NPU's fully connected layer takes rank 2",
                                 w->type.ndim);
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    if (!qf_nrule_in_type(n, wslot, QF_DTYPE_I8, "the weights", why)) return false;
    if (bslot >= 0 && !qf_nrule_in_type(n, bslot, QF_DTYPE_I32, "the bias values", why))
        return false;
    if (!qf_nrule_in_static(
            n, wslot, "the weights",
            "make the second operand an initializer, or make both operands rank 3 (a batched "
            "product, bmm, takes two activations)",
            why))
        return false;
    if (bslot >= 0 &&
        !qf_nrule_in_static(n, bslot, "the bias values", "make the bias an initializer", why))
        return false;
    return true;
}

static bool nc_gemm_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    bool has_c = n->nin > 2 && n->in[2].v;
    float alpha = qf_node_attr_float(n->node, "alpha", 1.0f),
          beta = qf_node_attr_float(n->node, "beta", 1.0f);
    if (alpha != 1.0f || (has_c && beta != 1.0f))
        return qf_neutron_refuse(
            why, "fold alpha into the weights and beta into the bias",
            "alpha = %g, beta = %g: the NPU's fully connected layer takes alpha = beta = 1 only",
            (double)alpha, (double)beta);
    if (has_c) {
        /* addmm's bias: [P] or [1, P] only (not [N, P], [1] or a scalar). */
        const qf_value *b = n->in[2].v, *y = n->out[0].v;
        int64_t p = nc_dim(y, 1);
        bool ok = (b->type.ndim == 1 && b->type.dims[0] == p) ||
                  (b->type.ndim == 2 && b->type.dims[0] == 1 && b->type.dims[1] == p);
        if (!ok && p >= 0) {
            char s[64];
            {
                qf_neutron_refuse(
                    why, NULL,
                    "bias of shape %s: the NPU takes a bias of shape [%lld] or [1, %lld]",
                    qf_nrule_shape_str(b, s, sizeof s), (long long)p, (long long)p);
                return qf_nrule_fix(why, "give the bias one value per output feature ([%lld])",
                                    (long long)p);
            }
        }
    }
    return nc_fc_sdk3(n, 1, has_c ? 2 : -1, why);
}

static bool nc_gemm_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    if (!qf_nrule_io_quantized(n, 1, false, why)) return false;
    const qf_value *w = n->in[1].v;
    if (w && w->type.ndim != 2)
        return qf_neutron_refuse(why, "",
                                 "weights of rank %d: the NPU's fully connected layer takes rank 2",
                                 w->type.ndim);
    return true;
}

/* How PyTorch's matmul lowers a MatMul of these ranks. */
typedef enum nc_mm_kind { NC_MM, NC_BMM, NC_NONE } nc_mm_kind;

static nc_mm_kind nc_matmul_kind(int ra, int rb)
{
    if (rb == 1) return NC_NONE;           /* mv / dot: no converter */
    if (rb == 2) return NC_MM;             /* mm; a rank >= 3 A is folded into rank 2 */
    if (ra >= 2 && rb >= 3) return NC_BMM; /* expand + reshape to rank 3 + bmm */
    return NC_NONE;
}

/* The rank-3 operands bmm sees: [b, M, K] and [b, K, N]. */
static void nc_bmm_dims(const qf_value *a, const qf_value *b, int64_t *m, int64_t *k, int64_t *nn)
{
    *m = nc_dim(a, a->type.ndim - 2);
    *k = nc_dim(a, a->type.ndim - 1);
    *nn = nc_dim(b, b->type.ndim - 1);
}

static bool nc_matmul_none(const qf_nview *n, qf_nwhy *why)
{
    return qf_neutron_refuse(
        why, "unsqueeze the vector operand into a matrix",
        "a product with a vector operand (ranks %d and %d; PyTorch's mv / dot): no Neutron "
        "converter",
        n->in[0].v ? n->in[0].v->type.ndim : 0, n->in[1].v ? n->in[1].v->type.ndim : 0);
}

static bool nc_matmul_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    const qf_value *a = n->in[0].v, *b = n->in[1].v;
    if (!a || !b) return qf_neutron_refuse(why, "", "an operand is missing");
    nc_mm_kind kind = nc_matmul_kind(a->type.ndim, b->type.ndim);
    if (kind == NC_NONE) return nc_matmul_none(n, why);
    if (kind == NC_MM) return nc_fc_sdk3(n, 1, -1, why);
    /* bmm: both operands int8 / uint8 with zero point 0. */
    if (!qf_nrule_io_quantized(n, 2, true, why)) return false;
    for (int i = 0; i < 2; i++) {
        const qf_nq *q = &n->in[i];
        for (int64_t j = 0; j < q->nscale; j++)
            if (q->zero_point && q->zero_point[j] != 0)
                return qf_neutron_refuse(
                    why,
                    "quantize both operands symmetrically (zero point 0; qfold quantize "
                    "--target neutron does, except for a Softmax / Sigmoid output, whose "
                    "fixed zero point is -128: requantize that edge)",
                    "operand %d has zero point %d: a batched product (bmm) needs both zero "
                    "points 0",
                    i, (int)q->zero_point[j]);
    }
    return true;
}

static bool nc_matmul_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    const qf_value *a = n->in[0].v, *b = n->in[1].v;
    if (!a || !b) return qf_neutron_refuse(why, "", "an operand is missing");
    nc_mm_kind kind = nc_matmul_kind(a->type.ndim, b->type.ndim);
    if (kind == NC_NONE) return nc_matmul_none(n, why);
    if (!qf_nrule_io_quantized(n, 1, false, why)) return false;
    if (kind == NC_MM) return true; /* v1.3.0's mm: weights of rank 2, nothing else */
    int64_t m = t->num_macs > 0 ? t->num_macs : 1, dm, dk, dn;
    nc_bmm_dims(a, b, &dm, &dk, &dn);
    int64_t dims[3] = {dm, dk, dn};
    const char *names[3] = {"M (rows of the first operand)", "K (the shared dimension)",
                            "N (columns of the second operand)"};
    for (int i = 0; i < 3; i++)
        if (dims[i] >= 0 && dims[i] % m != 0) {
            qf_neutron_refuse(why, NULL,
                              "batched product: %s = %lld is not a multiple of num_macs = %lld",
                              names[i], (long long)dims[i], (long long)m);
            return qf_nrule_fix(why, "pad %c to %lld", "MKN"[i],
                                (long long)qf_neutron_round_up(dims[i], m));
        }
    return true;
}

const qf_neutron_row qf_neutron_rows_conv[] = {
    {QF_OP_CONV, nc_conv_sdk3, nc_conv_sdk2, NULL},
    {QF_OP_CONV_TRANSPOSE, nc_conv_transpose_sdk3, nc_conv_transpose_sdk2, NULL},
    {QF_OP_GEMM, nc_gemm_sdk3, nc_gemm_sdk2, NULL},
    {QF_OP_MATMUL, nc_matmul_sdk3, nc_matmul_sdk2, NULL},
    {QF_OP_COUNT, NULL, NULL, NULL},
};
