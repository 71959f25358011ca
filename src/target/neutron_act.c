/* Neutron rules of the activations: Relu, Relu6 (qfold's internal op), Clip,
 * Sigmoid, Tanh, Exp, Log, Sqrt + Reciprocal (as rsqrt), HardSwish,
 * LeakyRelu, Abs, Neg, PRelu, HardSigmoid; and the partition rules of Relu
 * and clamp.
 *
 * Read from ExecuTorch's NXP backend, node converters relu, clamp,
 * hardtanh, sigmoid, tanh, exp, log, rsqrt, hardswish, leaky_relu, abs,
 * neg, prelu (and neutron_operator_support.activation_supported_on_target,
 * graph_utils.is_clamp_preserved_under_quantization), at the commit of the
 * SDK 3.x rules and at v1.3.0 for the SDK 2.x ones. An activation fused into
 * a Conv / Gemm / MatMul cluster is placed with it by the engine and never
 * reaches these rows. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "neutron.h"
#include "neutron_rule_util.h"
#include "qfold/op.h"

/* SDK 3.x activation_supported_on_target: main input and output int8 or
 * uint8. */
static bool act_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    return qf_nrule_io_quantized(n, 1, true, why);
}

/* SDK 2.x converters of sigmoid, tanh, leaky_relu, abs, relu: no rule of
 * their own beyond the QDQ cluster. */
static bool act_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    return qf_nrule_io_quantized(n, 1, false, why);
}

/* The bounds of a clamp: Relu (0, none), Relu6 (0, 6), Clip from its inputs
 * (opset >= 11) or attributes (opset 6); infinite bounds read as none.
 * false when a bound is computed at run time. */
static bool clip_bounds(const qf_nview *n, bool *has_lo, float *lo, bool *has_hi, float *hi)
{
    *has_lo = *has_hi = false;
    *lo = *hi = 0;
    switch (n->node->op) {
    case QF_OP_RELU: *has_lo = true; return true;
    case QF_OP_RELU6:
        *has_lo = *has_hi = true;
        *hi = 6;
        return true;
    default: break;
    }
    if (qf_node_attr(n->node, "min")) {
        *lo = qf_node_attr_float(n->node, "min", -FLT_MAX);
        *has_lo = true;
    }
    if (qf_node_attr(n->node, "max")) {
        *hi = qf_node_attr_float(n->node, "max", FLT_MAX);
        *has_hi = true;
    }
    for (int s = 1; s <= 2 && s < n->nin; s++) {
        if (!n->in[s].v) continue;
        float b;
        int cnt = 0;
        if (!qf_nrule_const_floats(n, s, &b, 1, &cnt) || cnt != 1) return false;
        if (s == 1)
            *has_lo = true, *lo = b;
        else
            *has_hi = true, *hi = b;
    }
    /* ExecuTorch treats an infinite bound as none; so does ONNX's float
     * range (a bound at +-FLT_MAX is how exporters write "none"). */
    if (*has_lo && (isinf(*lo) || *lo <= -FLT_MAX)) *has_lo = false;
    if (*has_hi && (isinf(*hi) || *hi >= FLT_MAX)) *has_hi = false;
    return true;
}

/* The clamp forms Neutron has as a single ReLU op: ReluN1To1 (-1, 1),
 * Relu0To1 (0, 1), Relu6 (0, 6), Relu (0, none). */
static bool relu_compatible(bool has_lo, float lo, bool has_hi, float hi)
{
    if (!has_lo) return false;
    if (lo == -1.0f) return has_hi && hi == 1.0f;
    if (lo != 0.0f) return false;
    return !has_hi || hi == 1.0f || hi == 6.0f;
}

static const char *bound_str(bool has, float v, char *buf, size_t n)
{
    if (!has)
        snprintf(buf, n, "none");
    else
        snprintf(buf, n, "%g", (double)v);
    return buf;
}

static bool clip_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    bool hl, hh;
    float lo, hi;
    if (!clip_bounds(n, &hl, &lo, &hh, &hi))
        return qf_neutron_refuse(why, "make the bounds constants",
                                 "the Clip bounds are computed at run time");
    if (!hl && !hh) return qf_neutron_refuse(why, "remove it", "Clip without bounds does nothing");
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    if (relu_compatible(hl, lo, hh, hi)) return true;
    /* Any other bounds become Min / Max, which do not rescale: the input and
     * the output must be quantized alike (ClampConverter._io_quant_is_same). */
    if (qf_nrule_same_qparams(&n->in[0], &n->out[0])) return true;
    char a[96], b[96], l[32], h[32];
    return qf_neutron_refuse(
        why,
        "quantize the output with the input's scale and zero point (qfold's neutron profile "
        "does), or use bounds (0, 6), (0, 1), (-1, 1) or (0, none)",
        "Clip(%s, %s) is not a ReLU form, so it runs as Min / Max, which needs the output "
        "quantized like the input: input %s, output %s",
        bound_str(hl, lo, l, sizeof l), bound_str(hh, hi, h, sizeof h),
        qf_nrule_qparams_str(&n->in[0], a, sizeof a),
        qf_nrule_qparams_str(&n->out[0], b, sizeof b));
}

/* v1.3.0's clamp / hardtanh: only the four ReLU forms. */
static bool clip_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    bool hl, hh;
    float lo, hi;
    if (!clip_bounds(n, &hl, &lo, &hh, &hi))
        return qf_neutron_refuse(why, "make the bounds constants",
                                 "the Clip bounds are computed at run time");
    if (!relu_compatible(hl, lo, hh, hi)) {
        char l[32], h[32];
        return qf_neutron_refuse(
            why,
            "use bounds (0, 6), (0, 1), (-1, 1) or (0, none) if the model allows, or "
            "neutron-flow=sdk3 (eIQ Neutron SDK 3.x runs other bounds as Min / Max)",
            "Clip(%s, %s): SDK 2.x takes only the ReLU forms (0, none), (0, 6), (0, 1), "
            "(-1, 1)",
            bound_str(hl, lo, l, sizeof l), bound_str(hh, hi, h, sizeof h));
    }
    return act_sdk2(n, t, why);
}

/* np.round + clip as ExecuTorch's quantize(): half to even. */
static int64_t quantize_bound(float v, const qf_nq *q, int64_t qmin, int64_t qmax)
{
    double r = nearbyint((double)v / (double)q->scale[0]) + (q->zero_point ? q->zero_point[0] : 0);
    return r < (double)qmin ? qmin : r > (double)qmax ? qmax : (int64_t)r;
}

static void qrange(const qf_nq *q, int64_t *qmin, int64_t *qmax)
{
    if (q->qtype == QF_DTYPE_U8)
        *qmin = 0, *qmax = 255;
    else if (q->qtype == QF_DTYPE_I32)
        *qmin = INT32_MIN, *qmax = INT32_MAX;
    else
        *qmin = -128, *qmax = 127;
}

/* is_clamp_preserved_under_quantization: a hinge of the clamp stays inside
 * the input's quantized range (else in int8 the clamp is the identity or a
 * constant). */
static bool clamp_preserved(const qf_nq *q, float lo, bool has_hi, float hi)
{
    if (!q->quantized || q->nscale != 1 || !q->scale) return false;
    int64_t qmin, qmax;
    qrange(q, &qmin, &qmax);
    int64_t ql = quantize_bound(lo, q, qmin, qmax);
    if (!has_hi) return qmin < ql && ql < qmax;
    int64_t qh = quantize_bound(hi, q, qmin, qmax);
    return (qmin < ql || qh < qmax) && !(qmax < ql) && !(qmin > qh);
}

static bool alone(const qf_nview *n, const qf_npart *p)
{
    return p->ncompute == 1 && p->compute[0] == n->node;
}

/* The SDK 2.x partition rule of relu / clamp (0, none) / (0, 6) alone in its
 * partition: v1.3.0's activation_supported_on_target, channels a multiple
 * of num_macs. */
static bool lone_act_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    const qf_value *x = n->in[0].v;
    int cd = qf_nrule_channel_dim(n->g, x);
    int64_t c = cd >= 0 ? x->type.dims[cd] : 1;
    if (c % t->num_macs == 0) return true;
    char fix[160];
    snprintf(fix, sizeof fix,
             "pad the channels to %lld, or put the activation right after the Conv / Gemm it "
             "follows so that it "
             "fuses there",
             (long long)qf_neutron_round_up(c, t->num_macs));
    return qf_neutron_refuse(
        why, fix,
        "a %s alone in its NPU partition needs its %lld channels to be a multiple of num_macs = "
        "%d (SDK 2.x)",
        qf_op_onnx_name(n->node->op) ? qf_op_onnx_name(n->node->op) : "Relu6", (long long)c,
        t->num_macs);
}

static bool lone_noop(qf_nwhy *why, const char *what, const char *detail, const char *fix)
{
    return qf_neutron_refuse(
        why, fix,
        "%s alone in its NPU partition computes nothing in int8 (%s), and the NPU refuses a "
        "partition with nothing to compute",
        what, detail);
}

/* The real range [lo, hi] of a per-tensor quantized operand. */
static void real_range(const qf_nq *q, double *lo, double *hi)
{
    int64_t qmin, qmax;
    qrange(q, &qmin, &qmax);
    int32_t zp = q->zero_point ? q->zero_point[0] : 0;
    *lo = (double)(qmin - zp) * q->scale[0];
    *hi = (double)(qmax - zp) * q->scale[0];
}

/* relu's supports_partitioning_result. */
static bool relu_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                           qf_nwhy *why)
{
    if (!alone(n, p)) return true;
    if (t->flow == QF_NEUTRON_SDK2) return lone_act_sdk2(n, t, why);
    if (clamp_preserved(&n->in[0], 0, false, 0)) return true;
    char detail[160];
    double lo = 0, hi = 0;
    if (n->in[0].quantized && n->in[0].nscale == 1 && n->in[0].scale)
        real_range(&n->in[0], &lo, &hi);
    snprintf(detail, sizeof detail, "its input's quantized range [%g, %g] holds no negative value",
             lo, hi);
    return lone_noop(
        why, "a Relu", detail,
        "remove it (its input is never negative), or fuse it into the operation before it");
}

/* clamp / hardtanh's supports_partitioning_result. */
static bool clip_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                           qf_nwhy *why)
{
    if (!alone(n, p)) return true;
    bool hl, hh;
    float lo, hi;
    if (!clip_bounds(n, &hl, &lo, &hh, &hi)) return true;
    if (t->flow == QF_NEUTRON_SDK2) {
        /* Only Relu (0, none) and Relu6 (0, 6) have the rule in v1.3.0. */
        if (hl && lo == 0.0f && (!hh || hi == 6.0f)) return lone_act_sdk2(n, t, why);
        return true;
    }
    char l[32], h[32], what[96], detail[160];
    snprintf(what, sizeof what, "Clip(%s, %s)", bound_str(hl, lo, l, sizeof l),
             bound_str(hh, hi, h, sizeof h));
    double rlo = 0, rhi = 0;
    if (n->in[0].quantized && n->in[0].nscale == 1 && n->in[0].scale)
        real_range(&n->in[0], &rlo, &rhi);
    snprintf(detail, sizeof detail,
             "its bounds lie at or outside the input's quantized range [%g, %g]", rlo, rhi);
    if (relu_compatible(hl, lo, hh, hi)) {
        if (clamp_preserved(&n->in[0], lo, hh, hi)) return true;
        return lone_noop(why, what, detail,
                         "remove it (it changes no quantized value), or fuse it into the operation "
                         "before it");
    }
    /* Other bounds: a no-op when they are looser than the int8 range of the
     * input (_bounds_are_looser_than_quantization_range; int8 only). */
    const qf_nq *q = &n->in[0];
    if (!q->quantized || q->qtype != QF_DTYPE_I8 || q->nscale != 1 || !q->scale) return true;
    int32_t zp = q->zero_point ? q->zero_point[0] : 0;
    double rmin = (double)(-128 - zp) * q->scale[0], rmax = (double)(127 - zp) * q->scale[0];
    bool noop = (!hl || lo <= rmin) && (!hh || rmax <= hi);
    return noop ? lone_noop(why, what, detail, "remove it (it changes no quantized value)") : true;
}

/* neg (both generations): the converter expects per-tensor quantization. */
static bool neg_per_tensor(const qf_nview *n, qf_nwhy *why)
{
    const qf_nq *q = &n->in[0];
    if (q->quantized && q->nscale > 1)
        return qf_neutron_refuse(
            why, "quantize Neg's input per tensor",
            "Neg's input is quantized per channel (%lld scales on axis %d): the converter "
            "needs one scale and zero point",
            (long long)q->nscale, q->axis);
    return true;
}

static bool neg_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    return neg_per_tensor(n, why) && act_sdk3(n, t, why);
}

static bool neg_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    return neg_per_tensor(n, why) && act_sdk2(n, t, why);
}

/* prelu SDK 3.x: the broadcast condition (an input with the output's element
 * count: always the data input), both the data and the slope int8 / uint8
 * behind a DequantizeLinear, and a per-channel slope on a tensor of rank > 2
 * only in the channels-first layout (the converter applies it along the
 * channels). */
static bool prelu_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    if (!qf_nrule_io_quantized(n, 2, true, why)) return false;
    const qf_value *x = n->in[0].v, *slope = n->nin > 1 ? n->in[1].v : NULL;
    if (x && slope && x->type.ndim > 2 && qf_nrule_numel(slope) != 1 &&
        !qf_nrule_channels_first(n->g, x)) {
        char sx[96];
        return qf_neutron_refuse(
            why, "use one slope for all channels, or apply PRelu to a Conv's output",
            "PRelu with a slope per channel on %s, which is not in the "
            "channels-first layout (no Conv / pool / Resize around it)",
            qf_nrule_shape_str(x, sx, sizeof sx));
    }
    return true;
}

/* v1.3.0's prelu: 4-D, channels a multiple of num_macs, H*W <= 4096. */
static bool prelu_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    if (!qf_nrule_io_quantized(n, 2, false, why)) return false;
    const qf_value *o = n->out[0].v;
    if (o->type.ndim != 4)
        return qf_neutron_refuse(why, "",
                                 "PRelu on a %d-D tensor: SDK 2.x takes PRelu on 4-D tensors only",
                                 o->type.ndim);
    /* The channels are dim 1 of a channels-first tensor, else the last. */
    bool cf = qf_nrule_channels_first(n->g, o);
    int64_t c = o->type.dims[cf ? 1 : 3],
            hw = cf ? o->type.dims[2] * o->type.dims[3] : o->type.dims[1] * o->type.dims[2];
    if (c % t->num_macs != 0) {
        char fix[96];
        snprintf(fix, sizeof fix, "pad the channels to a multiple of %d (%lld)", t->num_macs,
                 (long long)qf_neutron_round_up(c, t->num_macs));
        return qf_neutron_refuse(
            why, fix, "PRelu's %lld channels are not a multiple of num_macs = %d (SDK 2.x)",
            (long long)c, t->num_macs);
    }
    if (hw > 4096)
        return qf_neutron_refuse(why, "apply it to smaller tiles of the feature map (H*W <= 4096)",
                                 "PRelu's H*W = %lld > 4096 (SDK 2.x)", (long long)hw);
    return true;
}

/* rsqrt (SDK 3.x only): ONNX has no rsqrt; PyTorch writes torch.rsqrt as
 * Reciprocal(Sqrt(x)) or Div(1, Sqrt(x)). The Sqrt of that pair and its
 * Reciprocal / Div map to Neutron's Rsqrt; a lone Sqrt or Reciprocal has no
 * converter. */
static bool is_one_over(const qf_node *d)
{
    if (d->op == QF_OP_RECIPROCAL) return true;
    if (d->op != QF_OP_DIV || d->ninputs < 2 || !d->inputs[0]) return false;
    /* Div(1, x): the dividend a constant 1, possibly behind a DQ (then its
     * quantized value only tells us its sign; trust the float constant). */
    const qf_value *a = d->inputs[0];
    double scale = 0, zp = 0;
    if (a->producer && a->producer->op == QF_OP_DEQUANTIZE && a->producer->ninputs >= 2) {
        /* Behind a DequantizeLinear: 1 up to its quantization step. */
        const qf_node *dq = a->producer;
        const qf_value *s = dq->inputs[1], *z = dq->ninputs > 2 ? dq->inputs[2] : NULL;
        if (!s || !s->type.data || s->type.dtype != QF_DTYPE_F32 || qf_tensor_numel(&s->type) != 1)
            return false;
        scale = *(const float *)s->type.data;
        if (z && z->type.data) zp = (double)qf_tensor_get_i64(&z->type, 0);
        a = dq->inputs[0];
    }
    if (!a || !qf_value_is_const(a) || !a->type.data) return false;
    int64_t e = qf_tensor_numel(&a->type);
    for (int64_t i = 0; i < e; i++) {
        double v = scale > 0 ? ((double)qf_tensor_get_i64(&a->type, i) - zp) * scale
                             : qf_tensor_get_f64(&a->type, i);
        if (fabs(v - 1.0) > (scale > 0 ? scale : 0)) return false;
    }
    return e > 0;
}

bool qf_neutron_is_rsqrt_sqrt(const qf_node *sqrt_node)
{
    const qf_node *c[2];
    return qf_nrule_compute_consumers(sqrt_node->outputs[0], c, 2) == 1 && is_one_over(c[0]) &&
           qf_nrule_compute_producer(c[0]->inputs[c[0]->op == QF_OP_DIV ? 1 : 0]) == sqrt_node;
}

static bool sqrt_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    if (!qf_neutron_is_rsqrt_sqrt(n->node))
        return qf_neutron_refuse(
            why,
            "if the model computes 1/sqrt(x), write it as Reciprocal(Sqrt(x)) (Neutron's "
            "Rsqrt)",
            "Neutron has no square root: only 1/sqrt(x) (Rsqrt) runs on the NPU");
    return act_sdk3(n, t, why);
}

static bool reciprocal_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    const qf_node *s = qf_nrule_compute_producer(n->in[0].v);
    if (!s || s->op != QF_OP_SQRT || !qf_neutron_is_rsqrt_sqrt(s))
        return qf_neutron_refuse(
            why, "", "Neutron has no reciprocal: only 1/sqrt(x) (Rsqrt) runs on the NPU");
    return act_sdk3(n, t, why);
}

/* hardsigmoid: ExecuTorch's NeutronQuantizer has no pattern for it and
 * to_edge decomposes it (add 3, clamp, divide by 6); so it is never
 * delegated as it stands. Its parts run when the model spells them out. */
static bool hard_sigmoid_no(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    float alpha = qf_node_attr_float(n->node, "alpha", 0.2f),
          beta = qf_node_attr_float(n->node, "beta", 0.5f);
    char fix[200];
    snprintf(fix, sizeof fix,
             "write it as Clip(x * %g + %g, 0, 1): a Mul by a constant, an Add and a (0, 1) Clip "
             "each run on the NPU",
             (double)alpha, (double)beta);
    return qf_neutron_refuse(
        why, fix,
        "HardSigmoid has no Neutron converter: ExecuTorch's quantizer leaves it float and "
        "lowers it to add, clamp and a division");
}

const qf_neutron_row qf_neutron_rows_act[] = {
    {QF_OP_RELU, act_sdk3, act_sdk2, relu_partition},
    {QF_OP_RELU6, clip_sdk3, clip_sdk2, clip_partition},
    {QF_OP_CLIP, clip_sdk3, clip_sdk2, clip_partition},
    {QF_OP_SIGMOID, act_sdk3, act_sdk2, NULL},
    {QF_OP_TANH, act_sdk3, act_sdk2, NULL},
    {QF_OP_EXP, act_sdk3, NULL, NULL},
    {QF_OP_LOG, act_sdk3, NULL, NULL},
    {QF_OP_SQRT, sqrt_sdk3, NULL, NULL},
    {QF_OP_RECIPROCAL, reciprocal_sdk3, NULL, NULL},
    {QF_OP_HARD_SWISH, act_sdk3, NULL, NULL},
    {QF_OP_LEAKY_RELU, act_sdk3, act_sdk2, NULL},
    {QF_OP_ABS, act_sdk3, act_sdk2, NULL},
    {QF_OP_NEG, neg_sdk3, neg_sdk2, NULL},
    {QF_OP_PRELU, prelu_sdk3, prelu_sdk2, NULL},
    {QF_OP_HARD_SIGMOID, hard_sigmoid_no, hard_sigmoid_no, NULL},
    {QF_OP_COUNT, NULL, NULL, NULL},
};
