/* Neutron rules of the shape ops: Reshape, Flatten, Squeeze, Unsqueeze (as
 * view_copy), Transpose (permute_copy), Slice and Split (slice_copy), Pad
 * (constant_pad_nd, reflect pad), Resize (upsample nearest / bilinear),
 * Identity and Dropout (clone); and their partition rules.
 *
 * Read from ExecuTorch's NXP backend, node converters view_copy,
 * permute_copy, slice_copy_tensor (slice_tensor at v1.3.0),
 * constant_pad_nd, pad, upsample_nearest2d, upsample_bilinear2d, clone,
 * neutron_operator_support.transposition_is_supported_on_neutron,
 * the aten pass DecomposeSplitToSlices and the partitioner's no-op partition
 * check (edge_helper.is_no_op_on_neutron), at the commit of the SDK 3.x
 * rules and at v1.3.0 for the SDK 2.x ones. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "neutron.h"
#include "neutron_rule_util.h"
#include "qfold/op.h"

#define MAXR QF_MAX_DIMS

/* --- permutations (SDK 2.x transposes) ------------------------------------ */

static void perm_to_nhwc(int r, int *p)
{ /* channels first -> last: [0, 2, ..., r-1, 1] */
    p[0] = 0;
    for (int i = 1; i < r - 1; i++) p[i] = i + 1;
    if (r > 1) p[r - 1] = 1;
}

static void perm_to_nchw(int r, int *p)
{ /* channels last -> first: [0, r-1, 1, ..., r-2] */
    p[0] = 0;
    if (r > 1) p[1] = r - 1;
    for (int i = 2; i < r; i++) p[i] = i - 1;
}

static void perm_apply(const int64_t *shape, const int *p, int r, int64_t *out)
{
    for (int i = 0; i < r; i++) out[i] = shape[p[i]];
}

/* translator.combine_permutations: p1 then p2. */
static void perm_combine(const int *p1, const int *p2, int r, int *out)
{
    for (int i = 0; i < r; i++) out[i] = p1[p2[i]];
}

static bool perm_eq(const int *p, int r, const int *q)
{
    for (int i = 0; i < r; i++)
        if (p[i] != q[i]) return false;
    return true;
}

/* A permutation that moves only dims of size 1 (Neutron runs it as a
 * reshape; the identity included). */
static bool perm_invariant(const int64_t *shape, const int *p, int r)
{
    int last = -1;
    for (int i = 0; i < r; i++) {
        if (shape[p[i]] == 1) continue;
        if (p[i] < last) return false;
        last = p[i];
    }
    return true;
}

/* v1.3.0's transposition_is_supported_on_neutron: besides the reshapes, only
 * NHWC -> NCHW and NCHW -> NHWC of a batch-1 tensor with C and H*W multiples
 * of num_macs (and for NCHW -> NHWC, W as well). On failure *what says which
 * condition, in words. */
static bool tsup2(const int64_t *shape, const int *p, int r, int m, char *what, size_t wn)
{
    static const int to_nchw4[4] = {0, 3, 1, 2}, to_nhwc4[4] = {0, 2, 3, 1};
    if (perm_invariant(shape, p, r)) return true;
    if (r == 4 && (perm_eq(p, 4, to_nchw4) || perm_eq(p, 4, to_nhwc4))) {
        bool nhwc_in = perm_eq(p, 4, to_nchw4);
        int64_t n = shape[0], c = nhwc_in ? shape[3] : shape[1], h = nhwc_in ? shape[1] : shape[2],
                w = nhwc_in ? shape[2] : shape[3];
        if (nhwc_in && (h * w * c) % m != 0)
            snprintf(what, wn, "H*W*C = %lld is not a multiple of num_macs = %d",
                     (long long)(h * w * c), m);
        else if (!nhwc_in && w % m != 0)
            snprintf(what, wn, "W = %lld is not a multiple of num_macs = %d", (long long)w, m);
        else if (c % m != 0)
            snprintf(what, wn, "C = %lld is not a multiple of num_macs = %d", (long long)c, m);
        else if ((h * w) % m != 0)
            snprintf(what, wn, "H*W = %lld is not a multiple of num_macs = %d", (long long)(h * w),
                     m);
        else if (n != 1)
            snprintf(what, wn, "the batch is %lld, not 1", (long long)n);
        else
            return true;
        return false;
    }
    snprintf(what, wn, "SDK 2.x transposes only NCHW <-> NHWC (or moves dims of size 1)");
    return false;
}

static void dims_of(const qf_value *v, int64_t *d)
{
    for (int i = 0; i < v->type.ndim; i++) d[i] = v->type.dims[i];
}

static const char *perm_str(const int *p, int r, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < r && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? ", " : "", p[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* --- no-op partitions ----------------------------------------------------- */

/* Ops that are always no-ops on Neutron (is_no_op_on_neutron: clone,
 * view_copy, a one-input cat) and the resize by 1 (the no-op test on random
 * data). */
static bool is_noop(const qf_node *node)
{
    switch (node->op) {
    case QF_OP_RESHAPE:
    case QF_OP_FLATTEN:
    case QF_OP_SQUEEZE:
    case QF_OP_UNSQUEEZE:
    case QF_OP_IDENTITY:
    case QF_OP_DROPOUT: return true;
    case QF_OP_CONCAT: return node->ninputs == 1;
    case QF_OP_RESIZE: {
        const qf_value *x = node->inputs[0], *y = node->outputs[0];
        if (!x || !y || x->type.ndim != y->type.ndim) return false;
        for (int i = 0; i < x->type.ndim; i++)
            if (x->type.dims[i] != y->type.dims[i] || x->type.dims[i] < 0) return false;
        return true;
    }
    default: return false;
    }
}

/* NeutronPartitioner.validate_partitioning_result: a partition made of
 * no-ops only would be an empty Neutron graph, so none of it is delegated
 * (clone's own rule says the same of a clone alone). */
bool qf_neutron_noop_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                               qf_nwhy *why)
{
    (void)t;
    for (int i = 0; i < p->ncompute; i++)
        if (!is_noop(p->compute[i])) return true;
    const char *op = qf_op_onnx_name(n->node->op);
    return qf_neutron_refuse(
        why, "remove it, or keep it next to an operation that runs on the NPU",
        "%s moves no data on the NPU and its partition holds nothing else: the NPU refuses a "
        "partition with nothing to compute",
        p->ncompute == 1 ? op : "it");
}

/* --- Reshape, Flatten, Squeeze, Unsqueeze (view_copy) --------------------- */

static bool view_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    const qf_value *y = n->out[0].v;
    if (y->type.ndim >= 8)
        return qf_neutron_refuse(why, "keep the tensor at rank 7 or less",
                                 "the output has rank %d: the NPU reshapes to rank 7 at most",
                                 y->type.ndim);
    return true;
}

/* Whether node is the Gemm / MatMul that v1.3.0's
 * PermuteFullyConnectedWeightsAfterReshape can fold the flatten's transpose
 * into: batch kept, a 2-D output whose features are the weight's input
 * features, the Gemm in the same partition. */
static bool fc_after_flatten(const qf_nview *n, const qf_npart *p)
{
    const qf_node *c[2];
    if (qf_nrule_compute_consumers(n->node->outputs[0], c, 2) != 1) return false;
    const qf_node *fc = c[0];
    if ((fc->op != QF_OP_GEMM && fc->op != QF_OP_MATMUL) || !qf_nrule_in_partition(p, fc))
        return false;
    const qf_value *x = n->in[0].v, *y = n->out[0].v, *w = fc->ninputs > 1 ? fc->inputs[1] : NULL;
    if (!w || y->type.ndim != 2 || x->type.dims[0] != y->type.dims[0] || w->type.ndim != 2)
        return false;
    bool trans_b = fc->op == QF_OP_GEMM && qf_node_attr_int(fc, "transB", 0) != 0;
    return y->type.dims[1] == w->type.dims[trans_b ? 1 : 0];
}

/* v1.3.0's view_copy partition rule: a reshape that leaves or enters the
 * channels-first layout needs Neutron to transpose to / from it. */
static bool view_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                           qf_nwhy *why)
{
    if (!qf_neutron_noop_partition(n, p, t, why)) return false;
    if (t->flow != QF_NEUTRON_SDK2) return true;
    const qf_value *x = n->in[0].v, *y = n->out[0].v;
    bool cf_in = qf_nrule_channels_first(n->g, x), cf_out = qf_nrule_channels_first(n->g, y);
    int rx = x->type.ndim, ry = y->type.ndim, pn[MAXR], ph[MAXR];
    int64_t xs[MAXR], ys[MAXR], xcl[MAXR];
    dims_of(x, xs);
    dims_of(y, ys);
    perm_to_nhwc(rx, ph);
    perm_apply(xs, ph, rx, xcl);
    char what[160], sx[96], sy[96];
    if (cf_in) {
        perm_to_nchw(rx, pn);
        if (!tsup2(xcl, pn, rx, t->num_macs, what, sizeof what) &&
            !(!cf_out && fc_after_flatten(n, p))) {
            char fix[160];
            snprintf(fix, sizeof fix,
                     "make H*W and the channels multiples of %d (batch 1), or feed the "
                     "flattened tensor straight into a Gemm on the NPU",
                     t->num_macs);
            return qf_neutron_refuse(
                why, fix,
                "%s of channels-first %s to %s needs a transpose to NCHW that SDK 2.x cannot "
                "do: %s",
                qf_op_onnx_name(n->node->op), qf_nrule_shape_str(x, sx, sizeof sx),
                qf_nrule_shape_str(y, sy, sizeof sy), what);
        }
    }
    if (cf_out) {
        perm_to_nhwc(ry, ph);
        if (!tsup2(ys, ph, ry, t->num_macs, what, sizeof what))
            return qf_neutron_refuse(
                why, "make W, the channels and H*W multiples of num_macs (batch 1)",
                "%s to channels-first %s needs a transpose to NHWC that SDK 2.x cannot do: %s",
                qf_op_onnx_name(n->node->op), qf_nrule_shape_str(y, sy, sizeof sy), what);
    }
    return true;
}

/* --- Transpose (permute_copy) --------------------------------------------- */

static int transpose_perm(const qf_nview *n, int *p)
{
    int r = n->in[0].v->type.ndim, cnt = 0;
    const int64_t *a = qf_node_attr_ints(n->node, "perm", &cnt);
    for (int i = 0; i < r; i++) p[i] = a && cnt == r ? (int)a[i] : r - 1 - i;
    return r;
}

static bool transpose_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    if (n->in[0].is_static) return true; /* computed on constants, removed by the converter */
    return qf_nrule_io_quantized(n, 1, true, why) && qf_nrule_shared_qparams(n, 1, why);
}

static bool transpose_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    if (n->in[0].is_static) return true;
    if (!qf_nrule_shared_qparams(n, 1, why)) return false;
    int p[MAXR], pn[MAXR], ph[MAXR], tmp[MAXR], mp[MAXR];
    int r = transpose_perm(n, p), m = t->num_macs;
    int64_t xs[MAXR], xcl[MAXR], ys[MAXR];
    dims_of(n->in[0].v, xs);
    dims_of(n->out[0].v, ys);
    perm_to_nhwc(r, ph);
    perm_to_nchw(r, pn);
    perm_apply(xs, ph, r, xcl);
    if (perm_invariant(xs, p, r) && perm_invariant(xcl, p, r)) return true;
    bool cf_in = qf_nrule_channels_first(n->g, n->in[0].v),
         cf_out = qf_nrule_channels_first(n->g, n->out[0].v);
    char w1[160], w2[160], w3[160];
    /* get_supported_transpositions: the main permutation, the layout
     * transposes before / after it, and their merged forms. */
    bool main_ok = tsup2(xs, p, r, m, w1, sizeof w1);
    bool sep_pre = tsup2(xcl, pn, r, m, w2, sizeof w2);
    perm_combine(pn, p, r, mp);
    bool merged_pre = tsup2(xcl, mp, r, m, w3, sizeof w3);
    bool sep_post = tsup2(ys, ph, r, m, w2, sizeof w2);
    perm_combine(p, ph, r, mp);
    bool merged_post = tsup2(xs, mp, r, m, w3, sizeof w3);
    perm_combine(pn, p, r, tmp);
    perm_combine(tmp, ph, r, mp);
    bool all_merged = tsup2(xs, mp, r, m, w3, sizeof w3);
    bool ok;
    if (cf_in && !cf_out)
        ok = (sep_pre && main_ok) || merged_pre;
    else if (!cf_in && cf_out)
        ok = (sep_post && main_ok) || merged_post;
    else if (cf_in && cf_out)
        ok = (sep_pre && main_ok && sep_post) || (sep_pre && merged_post) ||
             (merged_pre && sep_post) || all_merged;
    else
        ok = main_ok;
    if (ok) return true;
    char sp[64], sx[96];
    return qf_neutron_refuse(
        why,
        "keep the batch at 1 and pad C and H*W to multiples of num_macs, or use "
        "neutron-flow=sdk3 (Neutron-C in SDK 3.x transposes anything)",
        "Transpose %s of %s%s: %s", perm_str(p, r, sp, sizeof sp),
        qf_nrule_shape_str(n->in[0].v, sx, sizeof sx), cf_in ? " (channels first)" : "",
        main_ok ? "the layout transposes around it are not supported" : w1);
}

/* permute_copy's supports_partitioning_result (SDK 3.x): a transpose of a
 * constant is removed by the converter, so alone it leaves an empty graph. */
static bool transpose_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                                qf_nwhy *why)
{
    if (t->flow != QF_NEUTRON_SDK3 || !n->in[0].is_static || p->ncompute != 1) return true;
    return qf_neutron_refuse(
        why, "fold it into the constant (qfold's fold-constants pass does)",
        "a Transpose of a constant alone in its NPU partition: the converter removes it, and "
        "the NPU refuses a partition with nothing to compute");
}

/* --- Slice, Split (slice_copy) -------------------------------------------- */

/* One slice along one axis, as slice_copy sees it. */
typedef struct {
    int axis;
    int64_t start, end, step;
    int64_t raw_start, raw_end; /* as written, negative ones not wrapped */
} slice1;

/* ONNX's clamping of a start / end against the dim (as _get_clipped_slice_args). */
static int64_t clip_index(int64_t i, int64_t dim)
{
    if (i < 0) i += dim;
    return i < 0 ? 0 : i > dim ? dim : i;
}

/* The slices of a Slice node; -1 when the parameters are not constants. */
static int slice_params(const qf_nview *n, slice1 *s, int max)
{
    int64_t st[MAXR], en[MAXR], ax[MAXR], sp[MAXR];
    int ns = 0, ne = 0, na = 0, np = 0;
    if (!qf_nrule_const_ints(n, 1, st, MAXR, &ns) || !qf_nrule_const_ints(n, 2, en, MAXR, &ne) ||
        ns != ne)
        return -1;
    int r = n->in[0].v->type.ndim;
    if (n->nin > 3 && n->in[3].v) {
        if (!qf_nrule_const_ints(n, 3, ax, MAXR, &na) || na != ns) return -1;
    } else {
        for (int i = 0; i < ns; i++) ax[i] = i;
    }
    if (n->nin > 4 && n->in[4].v) {
        if (!qf_nrule_const_ints(n, 4, sp, MAXR, &np) || np != ns) return -1;
    } else {
        for (int i = 0; i < ns; i++) sp[i] = 1;
    }
    int k = 0;
    for (int i = 0; i < ns && k < max; i++) {
        int a = (int)(ax[i] < 0 ? ax[i] + r : ax[i]);
        if (a < 0 || a >= r) continue;
        int64_t dim = n->in[0].v->type.dims[a];
        s[k++] = (slice1){.axis = a,
                          .start = clip_index(st[i], dim),
                          .end = clip_index(en[i], dim),
                          .step = sp[i],
                          .raw_start = st[i],
                          .raw_end = en[i]};
    }
    return k;
}

/* v1.3.0's slice_tensor: slicing only along the channels (the last dim of
 * the converter's layout), other dims swapped there by a transpose that
 * must be supported; the sliced dim a multiple of num_macs. */
static bool slice_axis_sdk2(const qf_nview *n, int axis, const qf_target_spec *t, qf_nwhy *why)
{
    const qf_value *x = n->in[0].v;
    int r = x->type.ndim, m = t->num_macs;
    bool cf = qf_nrule_channels_first(n->g, x);
    int64_t xs[MAXR], xl[MAXR];
    int ph[MAXR];
    dims_of(x, xs);
    int d = axis;
    if (cf) {
        perm_to_nhwc(r, ph);
        perm_apply(xs, ph, r, xl);
        d = axis == 0 ? 0 : axis == 1 ? r - 1 : axis - 1;
    } else {
        memcpy(xl, xs, sizeof(int64_t) * (size_t)r);
    }
    char sx[96], what[160];
    if (d != r - 1) {
        int sw[MAXR];
        for (int i = 0; i < r; i++) sw[i] = i;
        sw[d] = r - 1;
        sw[r - 1] = d;
        if (!tsup2(xl, sw, r, m, what, sizeof what))
            return qf_neutron_refuse(
                why, "slice along the channels instead, or use neutron-flow=sdk3",
                "slicing %s along axis %d: SDK 2.x slices only the channels and cannot move "
                "axis %d there (%s)",
                qf_nrule_shape_str(x, sx, sizeof sx), axis, axis, what);
    }
    if (xl[d] % m != 0) {
        char fix[96];
        snprintf(fix, sizeof fix, "pad that dimension to a multiple of %d (%lld)", m,
                 (long long)qf_neutron_round_up(xl[d], m));
        return qf_neutron_refuse(
            why, fix,
            "the sliced axis %d of %s has %lld elements, not a multiple of num_macs = %d "
            "(SDK 2.x)",
            axis, qf_nrule_shape_str(x, sx, sizeof sx), (long long)xl[d], m);
    }
    return true;
}

static bool slice_rule(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    slice1 s[MAXR];
    int k = slice_params(n, s, MAXR);
    if (k < 0)
        return qf_neutron_refuse(
            why, "make starts, ends, axes and steps constants",
            "the Slice parameters are computed at run time: the NPU needs them constant");
    for (int i = 0; i < k; i++) {
        int64_t dim = n->in[0].v->type.dims[s[i].axis];
        if (s[i].start == 0 && s[i].end >= dim && s[i].step == 1)
            continue; /* keeps the whole axis */
        if (s[i].step != 1)
            return qf_neutron_refuse(
                why, "", "step %lld on axis %d: the Neutron converter slices with step 1 only",
                (long long)s[i].step, s[i].axis);
        if (s[i].start >= s[i].end)
            return qf_neutron_refuse(why, "remove the empty slice",
                                     "empty slice: start %lld >= end %lld on axis %d",
                                     (long long)s[i].start, (long long)s[i].end, s[i].axis);
        if (t->flow == QF_NEUTRON_SDK2) {
            /* v1.3.0's _get_clipped_slice_args clips start and end to [0, dim]
             * without wrapping negative ones first: an end of -1 reads as 0. */
            int64_t s2 = s[i].raw_start < 0 ? 0 : s[i].raw_start > dim ? dim : s[i].raw_start;
            int64_t e2 = s[i].raw_end < 0 ? 0 : s[i].raw_end > dim ? dim : s[i].raw_end;
            if (s2 >= e2) {
                char fix[96];
                snprintf(fix, sizeof fix, "write the slice with positive indices (%lld:%lld)",
                         (long long)s[i].start, (long long)s[i].end);
                return qf_neutron_refuse(
                    why, fix,
                    "slice %lld:%lld on axis %d: SDK 2.x reads a negative index as 0 (ExecuTorch "
                    "v1.3.0 does not wrap it), which leaves the slice empty",
                    (long long)s[i].raw_start, (long long)s[i].raw_end, s[i].axis);
            }
            if (!slice_axis_sdk2(n, s[i].axis, t, why)) return false;
        }
    }
    return true;
}

/* Split: DecomposeSplitToSlices (both generations) makes one slice per
 * output, each under slice_copy's rules. */
static bool split_rule(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    const qf_value *x = n->in[0].v;
    int r = x->type.ndim;
    int64_t a = qf_node_attr_int(n->node, "axis", 0);
    int axis = (int)(a < 0 ? a + r : a);
    if (axis < 0 || axis >= r)
        return qf_neutron_refuse(why, "", "Split axis %lld is outside rank %d", (long long)a, r);
    for (int k = 0; k < n->nout; k++) {
        const qf_value *y = n->out[k].v;
        if (y && y->type.ndim == r && y->type.dims[axis] == 0)
            return qf_neutron_refuse(why, "remove the empty part",
                                     "output %d of the Split is empty", k);
    }
    if (t->flow == QF_NEUTRON_SDK2) return slice_axis_sdk2(n, axis, t, why);
    return true;
}

/* --- Pad (constant_pad_nd, aten.pad reflect) ------------------------------ */

static const char *pad_mode(const qf_nview *n)
{
    return qf_node_attr_string(n->node, "mode", "constant");
}

/* The begin / end padding of each dim; false when not constant. */
static bool pad_amounts(const qf_nview *n, int64_t *beg, int64_t *end)
{
    int r = n->in[0].v->type.ndim, cnt = 0, na = 0;
    int64_t p[2 * MAXR], ax[MAXR];
    const int64_t *attr = qf_node_attr_ints(n->node, "pads", &cnt);
    if (n->nin > 1 && n->in[1].v) {
        if (!qf_nrule_const_ints(n, 1, p, 2 * MAXR, &cnt)) return false;
    } else if (attr && cnt <= 2 * MAXR) {
        memcpy(p, attr, sizeof(int64_t) * (size_t)cnt);
    } else {
        cnt = 0;
    }
    if (n->nin > 3 && n->in[3].v) {
        if (!qf_nrule_const_ints(n, 3, ax, MAXR, &na)) return false;
    } else {
        na = r;
        for (int i = 0; i < r; i++) ax[i] = i;
    }
    memset(beg, 0, sizeof(int64_t) * MAXR);
    memset(end, 0, sizeof(int64_t) * MAXR);
    if (cnt == 0) return true;
    if (cnt != 2 * na) return false;
    for (int i = 0; i < na; i++) {
        int d = (int)(ax[i] < 0 ? ax[i] + r : ax[i]);
        if (d < 0 || d >= r) return false;
        beg[d] = p[i];
        end[d] = p[na + i];
    }
    return true;
}

static bool pad_common(const qf_nview *n, qf_nwhy *why, int64_t *beg, int64_t *end)
{
    const char *mode = pad_mode(n);
    if (strcmp(mode, "constant") != 0 && strcmp(mode, "reflect") != 0)
        return qf_neutron_refuse(
            why, "use constant or reflect padding",
            "Pad mode '%s': Neutron's converters take constant and reflect padding only", mode);
    if (!pad_amounts(n, beg, end))
        return qf_neutron_refuse(why, "make the pads a constant",
                                 "the pads are computed at run time");
    return true;
}

static bool pad_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    int64_t beg[MAXR], end[MAXR];
    if (!pad_common(n, why, beg, end) || !qf_nrule_io_quantized(n, 1, true, why)) return false;
    /* constant_pad_nd: the IR's Pad does not rescale (shared qparams). */
    if (strcmp(pad_mode(n), "constant") == 0) return qf_nrule_shared_qparams(n, 1, why);
    return true;
}

static bool pad_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    int64_t beg[MAXR], end[MAXR];
    if (!pad_common(n, why, beg, end)) return false;
    if (strcmp(pad_mode(n), "reflect") == 0)
        return qf_neutron_refuse(why, "use constant padding, or neutron-flow=sdk3",
                                 "no Neutron converter for reflect padding in SDK 2.x");
    if (!qf_nrule_shared_qparams(n, 1, why)) return false;
    int cd = qf_nrule_channel_dim(n->g, n->in[0].v);
    if (cd >= 0 && (beg[cd] != 0 || end[cd] != 0))
        return qf_neutron_refuse(
            why,
            "give the Conv before it more output channels (with zero weights) instead, or use "
            "neutron-flow=sdk3",
            "pads the channels (axis %d) by %lld + %lld: SDK 2.x pads only the other dimensions",
            cd, (long long)beg[cd], (long long)end[cd]);
    return true;
}

/* --- Resize (upsample_nearest2d / upsample_bilinear2d) -------------------- */

typedef struct {
    bool nearest, align_corners;
    int64_t in_h, in_w, out_h, out_w;
    double sh, sw;
} resize_t;

static bool resize_read(const qf_nview *n, resize_t *r, qf_nwhy *why)
{
    const qf_value *x = n->in[0].v, *y = n->out[0].v;
    const char *mode = qf_node_attr_string(n->node, "mode", "nearest");
    const char *ctm = qf_node_attr_string(n->node, "coordinate_transformation_mode", "half_pixel");
    if (x->type.ndim != 4 || y->type.ndim != 4)
        return qf_neutron_refuse(
            why, "", "Resize of a %d-D tensor: the NPU upsamples 4-D (NCHW) tensors only",
            x->type.ndim);
    for (int i = 0; i < 4; i++)
        if (x->type.dims[i] <= 0 || y->type.dims[i] <= 0)
            return qf_neutron_refuse(
                why, "give the model static input shapes",
                "the Resize's shapes are not known: the NPU needs static shapes");
    if (x->type.dims[0] != y->type.dims[0] || x->type.dims[1] != y->type.dims[1])
        return qf_neutron_refuse(
            why, "",
            "the Resize changes the batch or channel dimension: the NPU resizes H and W "
            "only");
    r->nearest = strcmp(mode, "nearest") == 0;
    if (!r->nearest && strcmp(mode, "linear") != 0)
        return qf_neutron_refuse(why, "use nearest or (bi)linear interpolation",
                                 "Resize mode '%s': the NPU resizes nearest or bilinear only",
                                 mode);
    r->align_corners = !r->nearest && strcmp(ctm, "align_corners") == 0;
    if (!r->nearest && !r->align_corners && strcmp(ctm, "half_pixel") != 0 &&
        strcmp(ctm, "pytorch_half_pixel") != 0)
        return qf_neutron_refuse(
            why, "resize with half_pixel (align_corners=False) or align_corners coordinates",
            "bilinear Resize with coordinate_transformation_mode '%s' matches neither of "
            "Neutron's (half_pixel, align_corners)",
            ctm);
    r->in_h = x->type.dims[2], r->in_w = x->type.dims[3];
    r->out_h = y->type.dims[2], r->out_w = y->type.dims[3];
    if (r->align_corners) {
        if (r->in_h == 1 || r->in_w == 1)
            return qf_neutron_refuse(why, "", "align_corners Resize of an input with H or W = 1");
        r->sh = (double)(r->out_h - 1) / (double)(r->in_h - 1);
        r->sw = (double)(r->out_w - 1) / (double)(r->in_w - 1);
    } else {
        r->sh = (double)r->out_h / (double)r->in_h;
        r->sw = (double)r->out_w / (double)r->in_w;
    }
    return true;
}

static bool scale_in(double s, const int *set, int n)
{
    for (int i = 0; i < n; i++)
        if (s == set[i]) return true;
    return false;
}

/* A fix for a scale SDK 3.x does not take: a chain of its scales when there
 * is one (a power of two above 8), or why none exists. */
static void scale_fix(double s, char *fix, size_t n)
{
    double ip;
    if (modf(s, &ip) != 0.0 || s < 1) {
        snprintf(fix, n,
                 "x%g is not a whole scale, so no chain of Neutron's x1 / x2 / x4 / x8 makes it: "
                 "resize on the "
                 "CPU or change the model",
                 s);
        return;
    }
    int64_t v = (int64_t)s;
    if ((v & (v - 1)) != 0) {
        snprintf(fix, n,
                 "x%lld cannot be made of Neutron's x2 / x4 / x8 (their products are powers of "
                 "two): use a "
                 "power-of-two scale, or resize on the CPU",
                 (long long)v);
        return;
    }
    size_t k = (size_t)snprintf(fix, n, "resize in steps:");
    while (v > 1 && k < n) {
        int64_t st = v >= 8 ? 8 : v;
        k += (size_t)snprintf(fix + k, n - k, " x%lld", (long long)st);
        v /= st;
    }
}

static bool resize_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    resize_t r;
    if (!resize_read(n, &r, why) || !qf_nrule_io_quantized(n, 1, true, why)) return false;
    static const int ok[] = {1, 2, 4, 8};
    for (int k = 0; k < 2; k++) {
        double s = k ? r.sw : r.sh;
        if (scale_in(s, ok, 4)) continue;
        char fix[200];
        scale_fix(s, fix, sizeof fix);
        return qf_neutron_refuse(why, fix, "%s scale %g (%lld -> %lld) is not 1, 2, 4 or 8",
                                 k ? "W" : "H", s, (long long)(k ? r.in_w : r.in_h),
                                 (long long)(k ? r.out_w : r.out_h));
    }
    return true;
}

/* v1.3.0's upsample: x2 or x4 in both H and W at once, channels a multiple
 * of num_macs (bilinear computes the scale as out / in either way). */
static bool resize_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    resize_t r;
    if (!resize_read(n, &r, why)) return false;
    bool ok = false;
    for (int s = 2; s <= 4; s += 2)
        if (r.in_h * s == r.out_h && r.in_w * s == r.out_w) ok = true;
    if (!ok) {
        char fix[200] = "";
        double sh = (double)r.out_h / (double)r.in_h, sw = (double)r.out_w / (double)r.in_w;
        if (sh == 1 && sw == 1)
            snprintf(fix, sizeof fix, "remove it (a resize by 1 copies its input)");
        else if (sh != sw)
            snprintf(
                fix, sizeof fix,
                "use one scale for H and W (x2 or x4), or neutron-flow=sdk3 (any of 1, 2, 4, 8 "
                "per axis)");
        else if (sh == 8)
            snprintf(fix, sizeof fix, "resize by 4, then by 2");
        else if (sh == 16)
            snprintf(fix, sizeof fix, "resize by 4, then by 4");
        else
            snprintf(fix, sizeof fix, "x%g cannot be made of x2 and x4 steps: resize on the CPU",
                     sh);
        return qf_neutron_refuse(
            why, fix, "H x W scale %g x %g: SDK 2.x upsamples by x2 or x4 in both H and W only", sh,
            sw);
    }
    int64_t c = n->in[0].v->type.dims[1];
    if (c % t->num_macs != 0) {
        char fix[96];
        snprintf(fix, sizeof fix, "pad the channels to a multiple of %d (%lld)", t->num_macs,
                 (long long)qf_neutron_round_up(c, t->num_macs));
        return qf_neutron_refuse(
            why, fix, "Resize of %lld channels, not a multiple of num_macs = %d (SDK 2.x)",
            (long long)c, t->num_macs);
    }
    return true;
}

/* upsample_*'s supports_partitioning_result (SDK 3.x): a resize by 1 alone. */
static bool resize_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                             qf_nwhy *why)
{
    if (t->flow != QF_NEUTRON_SDK3) return qf_neutron_noop_partition(n, p, t, why);
    if (p->ncompute == 1 && is_noop(n->node))
        return qf_neutron_refuse(
            why, "remove it (a resize by 1 copies its input)",
            "a Resize by 1 alone in its NPU partition: the converter skips it, and the NPU "
            "refuses a partition with nothing to compute");
    return qf_neutron_noop_partition(n, p, t, why);
}

/* --- Identity, Dropout (clone) -------------------------------------------- */

static bool clone_rule(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    /* Dropout's mask output has no counterpart in clone. */
    if (n->node->op == QF_OP_DROPOUT && n->nout > 1 && n->out[1].v &&
        (n->out[1].v->nuses || n->out[1].v->is_output))
        return qf_neutron_refuse(why, "do not use the dropout mask at inference",
                                 "the Dropout's mask output is read");
    return true;
}

/* clone's supports_partitioning_result: alone it converts to nothing. */
static bool clone_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                            qf_nwhy *why)
{
    if (p->ncompute == 1)
        return qf_neutron_refuse(
            why, "remove it (it copies its input)",
            "%s alone in its NPU partition: a copy becomes nothing on the NPU, and the NPU "
            "refuses a partition with nothing to compute",
            qf_op_onnx_name(n->node->op));
    return qf_neutron_noop_partition(n, p, t, why);
}

const qf_neutron_row qf_neutron_rows_shape[] = {
    {QF_OP_RESHAPE, view_sdk3, view_sdk3, view_partition},
    {QF_OP_FLATTEN, view_sdk3, view_sdk3, view_partition},
    {QF_OP_SQUEEZE, view_sdk3, view_sdk3, view_partition},
    {QF_OP_UNSQUEEZE, view_sdk3, view_sdk3, view_partition},
    {QF_OP_TRANSPOSE, transpose_sdk3, transpose_sdk2, transpose_partition},
    {QF_OP_SLICE, slice_rule, slice_rule, NULL},
    {QF_OP_SPLIT, split_rule, split_rule, NULL},
    {QF_OP_PAD, pad_sdk3, pad_sdk2, NULL},
    {QF_OP_RESIZE, resize_sdk3, resize_sdk2, resize_partition},
    {QF_OP_IDENTITY, clone_rule, clone_rule, clone_partition},
    {QF_OP_DROPOUT, clone_rule, clone_rule, clone_partition},
    {QF_OP_COUNT, NULL, NULL, NULL},
};
