/* Neutron rules of the element-wise binary ops and Concat: Add, Sub, Mul,
 * Div (as Mul by the divisor's reciprocal), Max, Min, Concat.
 *
 * Read from ExecuTorch's NXP backend, node converters add_tensor,
 * sub_tensor, mul_tensor, maximum, minimum, cat (_is_supported_in_IR /
 * _is_supported_on_target) and the aten pass ConvertDivToMul, at the commit
 * of the SDK 3.x rules and at v1.3.0 for the SDK 2.x ones. */
#include <math.h>
#include <stdio.h>

#include "neutron.h"
#include "neutron_rule_util.h"
#include "qfold/op.h"

#define QUANTIZE_FIX "quantize the model (qfold quantize --target neutron)"

/* SDK 3.x broadcasting (NodeConverter.inputs_satisfy_broadcast_condition):
 * the NPU broadcasts one operand as long as another already has the
 * output's element count. */
static bool broadcast_ok(const qf_nview *n, qf_nwhy *why)
{
    int64_t out = qf_nrule_numel(n->out[0].v);
    for (int i = 0; i < n->nin; i++)
        if (n->in[i].v && qf_nrule_numel(n->in[i].v) == out) return true;
    char a[96], b[96], o[96];
    return qf_neutron_refuse(
        why, "give one input the output's full shape (the NPU broadcasts only the other one)",
        "both inputs are broadcast: neither %s nor %s has the output %s's %lld elements",
        qf_nrule_shape_str(n->in[0].v, a, sizeof a), qf_nrule_shape_str(n->in[1].v, b, sizeof b),
        qf_nrule_shape_str(n->out[0].v, o, sizeof o), (long long)out);
}

/* SDK 2.x: no broadcasting at all (NodeConverter.uses_shape_broadcasting:
 * every input's shape equals the first one's). */
static bool same_shapes_ok(const qf_nview *n, qf_nwhy *why)
{
    const qf_value *a = n->in[0].v;
    for (int i = 1; i < n->nin; i++) {
        const qf_value *b = n->in[i].v;
        bool same = b && a && a->type.ndim == b->type.ndim;
        for (int d = 0; same && d < a->type.ndim; d++) same = a->type.dims[d] == b->type.dims[d];
        if (!same) {
            char sa[96], sb[96];
            return qf_neutron_refuse(
                why,
                "give both inputs the same shape (or use neutron-flow=sdk3: eIQ Neutron SDK 3.x "
                "broadcasts)",
                "inputs of shapes %s and %s are broadcast: SDK 2.x takes %s only on equal shapes",
                qf_nrule_shape_str(a, sa, sizeof sa), qf_nrule_shape_str(b, sb, sizeof sb),
                qf_op_onnx_name(n->node->op));
        }
    }
    return true;
}

static bool add_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    return broadcast_ok(n, why) && qf_nrule_io_quantized(n, 2, true, why);
}

static bool add_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    return qf_nrule_io_quantized(n, 2, false, why) && same_shapes_ok(n, why);
}

/* v1.3.0's mul_tensor: besides equal shapes, a dimension of the output must
 * be a multiple of 8 (the converter's literal 8, not num_macs), or every
 * dimension 1. */
static bool mul_dims8(const qf_nview *n, qf_nwhy *why)
{
    const qf_value *o = n->out[0].v;
    bool all1 = true;
    for (int d = 0; d < o->type.ndim; d++) {
        if (o->type.dims[d] > 0 && o->type.dims[d] % 8 == 0) return true;
        if (o->type.dims[d] != 1) all1 = false;
    }
    if (all1) return true;
    char so[96];
    return qf_neutron_refuse(why, "pad the channels to a multiple of 8",
                             "no dimension of the output %s is a multiple of 8 (SDK 2.x Mul)",
                             qf_nrule_shape_str(o, so, sizeof so));
}

static bool mul_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    return add_sdk2(n, t, why) && mul_dims8(n, why);
}

/* ExecuTorch's ConvertDivToMul (both generations) turns x / c with a
 * constant, non-zero divisor into x * (1 / c) before quantization; any other
 * division has no converter. */
static bool div_divisor_ok(const qf_nview *n, qf_nwhy *why)
{
    if (n->nin < 2 || !n->in[1].v || !n->in[1].is_static)
        return qf_neutron_refuse(
            why, "",
            "divides by a tensor computed at run time: the NPU has no division; only a division "
            "by a constant runs, as a multiplication by its reciprocal");
    float d[4096];
    int nd = 0;
    if (qf_nrule_const_floats(n, 1, d, 4096, &nd))
        for (int i = 0; i < nd; i++)
            if (d[i] == 0.0f || !isfinite(d[i]))
                return qf_neutron_refuse(
                    why, "", "the constant divisor holds %g: it cannot become a multiplication",
                    (double)d[i]);
    return true;
}

static bool div_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    /* Div(1, Sqrt(x)) is how PyTorch writes torch.rsqrt in ONNX: the pair is
     * Neutron's Rsqrt (neutron_act.c). */
    const qf_node *s = n->nin > 1 ? qf_nrule_compute_producer(n->in[1].v) : NULL;
    if (s && s->op == QF_OP_SQRT && qf_neutron_is_rsqrt_sqrt(s)) {
        if (!qf_nrule_io_quantized(n, 0, true, why)) return false;
        const qf_nq *x = &n->in[1];
        if (!x->quantized || (x->qtype != QF_DTYPE_I8 && x->qtype != QF_DTYPE_U8))
            return qf_neutron_refuse(why, QUANTIZE_FIX,
                                     "the square root's output is not quantized as int8 or uint8");
        return true;
    }
    return div_divisor_ok(n, why) && add_sdk3(n, t, why);
}

static bool div_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    if (!div_divisor_ok(n, why)) return false;
    /* A 0-d divisor is PyTorch's `x / 2.0`: the pass multiplies by a
     * constant of the quotient's full shape, so nothing is broadcast. */
    if (n->in[1].v->type.ndim == 0)
        return qf_nrule_io_quantized(n, 2, false, why) && mul_dims8(n, why);
    return mul_sdk2(n, t, why);
}

/* maximum / minimum (SDK 3.x only): two inputs, the broadcast rule, int8 /
 * uint8, and every input quantized exactly like the output (the IR has no
 * rescaling in Maximum / Minimum: _all_io_shares_quantization_parameters). */
static bool maxmin_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    const char *op = qf_op_onnx_name(n->node->op);
    if (n->nin != 2)
        return qf_neutron_refuse(
            why, n->nin > 2 ? "chain two-input nodes instead" : "remove it (it copies its input)",
            "%s of %d inputs: the Neutron converter takes exactly 2", op, n->nin);
    return broadcast_ok(n, why) && qf_nrule_io_quantized(n, 2, true, why) &&
           qf_nrule_shared_qparams(n, 2, why);
}

/* cat: every input shares the output's quantization (both generations: the
 * IR's Concatenation does not rescale). */
static bool concat_qparams_ok(const qf_nview *n, bool int8_types, qf_nwhy *why)
{
    return qf_nrule_io_quantized(n, n->nin, int8_types, why) &&
           qf_nrule_shared_qparams(n, n->nin, why);
}

static bool concat_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    return concat_qparams_ok(n, true, why);
}

static int concat_axis(const qf_nview *n)
{
    int r = n->out[0].v->type.ndim;
    int64_t a = qf_node_attr_int(n->node, "axis", 0);
    return (int)(a < 0 ? a + r : a);
}

/* A dimension's index in the converter's channels-last layout: a channels
 * first tensor is permuted [0, 2, ..., rank-1, 1] (NCHW -> NHWC). */
static int nhwc_dim(int dim, int rank, bool cf)
{
    if (!cf || dim == 0) return dim;
    return dim == 1 ? rank - 1 : dim - 1;
}

/* The inverse: the NCHW dimension at channels-last position p. */
static int nchw_dim(int p, int rank, bool cf)
{
    if (!cf || p == 0) return p;
    return p == rank - 1 ? 1 : p + 1;
}

/* v1.3.0's cat: at least 2 inputs, and the channels of every input and of
 * the output a multiple of num_macs, unless all inputs have one shape and
 * the concatenation runs along the channels (Neutron pads the last dim). */
static bool concat_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    if (!concat_qparams_ok(n, false, why)) return false;
    if (n->nin < 2)
        return qf_neutron_refuse(why, "remove it (it copies its input)",
                                 "Concat of %d input: SDK 2.x needs at least 2", n->nin);
    const qf_value *o = n->out[0].v;
    bool cf = qf_nrule_channels_first(n->g, o);
    int rank = o->type.ndim, cd = cf ? 1 : rank - 1;
    bool equal = true;
    for (int i = 1; i < n->nin; i++) {
        const qf_value *a = n->in[0].v, *b = n->in[i].v;
        equal = equal && a->type.ndim == b->type.ndim;
        for (int d = 0; equal && d < a->type.ndim; d++) equal = a->type.dims[d] == b->type.dims[d];
    }
    bool along_channels = nhwc_dim(concat_axis(n), rank, cf) == rank - 1;
    if (equal && along_channels) return true;
    int m = t->num_macs;
    for (int i = 0; i <= n->nin; i++) {
        const qf_value *v = i < n->nin ? n->in[i].v : o;
        int64_t c = v->type.dims[cd];
        if (c % m != 0) {
            char w[32];
            if (i < n->nin)
                snprintf(w, sizeof w, "input %d", i);
            else
                snprintf(w, sizeof w, "the output");
            char fix[224];
            snprintf(fix, sizeof fix,
                     "pad the channels of %s to %lld and of every other input and the output "
                     "to a multiple of %d, or join equal-shaped inputs along the channels",
                     w, (long long)qf_neutron_round_up(c, m), m);
            return qf_neutron_refuse(
                why, fix,
                "%s has %lld channels, not a multiple of num_macs = %d (SDK 2.x Concat; only "
                "equal-shaped inputs joined along the channels are exempt)",
                w, (long long)c, m);
        }
    }
    return true;
}

/* v1.3.0's cat partition rule (a NeutronConverter bug it works around): when
 * an input comes from outside the Concat's partition, every input needs a
 * dimension other than 1 before the concatenated one (channels-last order). */
static bool concat_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                             qf_nwhy *why)
{
    if (!qf_neutron_noop_partition(n, p, t, why))
        return false; /* a one-input Concat among no-ops */
    if (t->flow != QF_NEUTRON_SDK2 || n->nout < 1) return true;
    bool all_inside = true;
    for (int i = 0; i < n->nin; i++) {
        const qf_node *src = qf_nrule_compute_producer(n->in[i].v);
        if (!src || !qf_nrule_in_partition(p, src)) all_inside = false;
    }
    if (all_inside) return true;
    bool cf = qf_nrule_channels_first(n->g, n->out[0].v);
    int rank = n->out[0].v->type.ndim, dim = nhwc_dim(concat_axis(n), rank, cf);
    for (int i = 0; i < n->nin; i++) {
        const qf_value *v = n->in[i].v;
        bool any = false;
        for (int d = 0; d < dim; d++) {
            if (v->type.dims[nchw_dim(d, rank, cf)] != 1) any = true;
        }
        if (!any) {
            char s[96];
            return qf_neutron_refuse(
                why, "",
                "Concat reads input %d %s from outside its NPU partition and every dimension "
                "before the joined one is 1 (a Neutron converter limitation in SDK 2.x)",
                i, qf_nrule_shape_str(v, s, sizeof s));
        }
    }
    return true;
}

const qf_neutron_row qf_neutron_rows_binary[] = {
    {QF_OP_ADD, add_sdk3, add_sdk2, NULL},
    {QF_OP_SUB, add_sdk3, add_sdk2, NULL},
    {QF_OP_MUL, add_sdk3, mul_sdk2, NULL},
    {QF_OP_DIV, div_sdk3, div_sdk2, NULL},
    {QF_OP_MAX, maxmin_sdk3, NULL, NULL},
    {QF_OP_MIN, maxmin_sdk3, NULL, NULL},
    {QF_OP_CONCAT, concat_sdk3, concat_sdk2, concat_partition},
    {QF_OP_COUNT, NULL, NULL, NULL},
};
