/* Neutron rules for the pools, the reductions and Softmax: MaxPool,
 * AveragePool, GlobalAveragePool, ReduceMean, ReduceSum, ReduceMax,
 * Softmax.
 *
 * Read from ExecuTorch's NXP backend (backends/nxp/backend/ir/converter/
 * node_converters/ops_converters/): max_pool2d_with_indices_converter.py,
 * avg_pool_2d_converter.py, adaptive_avg_pool_2d_converter.py,
 * mean_dim_converter.py, sum_dim_int_list_converter.py, amax_converter.py,
 * softmax_converter.py, at commit cff6f4dd (eIQ Neutron SDK 3.x: the sdk3
 * rules) and at v1.3.0 (Neutron SW 2.2, the default flow there with
 * use_new_flow_neutron_c off: the sdk2 rules). v1.3.0 has no converter for
 * sum.dim_IntList and amax: ReduceSum and ReduceMax have no sdk2 rule.
 *
 * ONNX against aten, the form ExecuTorch sees:
 * - MaxPool is max_pool2d(_with_indices); its Indices output is the second
 *   output, which the NPU cannot produce. AveragePool is avg_pool2d: ONNX's
 *   count_include_pad defaults to 0 where aten's defaults to True (PyTorch
 *   exports it explicitly). A 1-D pool is the 2-D one with H = 1. ONNX pads
 *   are begin / end: checked on both ends.
 * - GlobalAveragePool is what PyTorch exports for adaptive_avg_pool2d to
 *   1 x 1 (kernel = stride = H x W); x.mean((2, 3)) exports as ReduceMean
 *   and is mean.dim.
 * - ReduceMean / ReduceSum / ReduceMax are mean.dim, sum.dim_IntList and
 *   amax, axes from the attribute (older opsets) or the constant input.
 * - Softmax before opset 13 flattens to 2-D at `axis` (PyTorch's form of it
 *   is a view to [prod(d < axis), prod(d >= axis)] and a softmax over the
 *   last dim); from opset 13 it is softmax over `axis`.
 */
#include <stdio.h>
#include <string.h>

#include "neutron.h"
#include "neutron_rule_util.h"

#define NP_MAX_WINDOW 4096 /* pool kernel and stride per axis */

static int64_t np_dim(const qf_value *v, int i)
{
    if (!v || i < 0 || i >= v->type.ndim) return -1;
    return v->type.dims[i];
}

static int64_t np_attr_at(const qf_node *node, const char *name, int i, int64_t dflt)
{
    int cnt = 0;
    const int64_t *v = qf_node_attr_ints(node, name, &cnt);
    return v && i < cnt ? v[i] : dflt;
}

/* A pool in aten's 2-D terms (a 1-D pool: H = 1). */
typedef struct np_pool {
    int rank;
    int64_t n, c, ih, iw;
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t pt, pl, pb, pr;
} np_pool;

static bool np_pool_read(const qf_nview *n, np_pool *p)
{
    memset(p, 0, sizeof *p);
    const qf_node *node = n->node;
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL;
    p->rank = x ? x->type.ndim : 0;
    if (p->rank != 3 && p->rank != 4) return false;
    int sr = p->rank - 2;
    p->n = np_dim(x, 0);
    p->c = np_dim(x, 1);
    int64_t k[2] = {1, 1}, s[2] = {1, 1}, d[2] = {1, 1}, in[2] = {1, 1}, pb[2] = {0, 0},
            pe[2] = {0, 0};
    const char *ap = qf_node_attr_string(node, "auto_pad", "NOTSET");
    for (int a = 0; a < sr; a++) {
        int j = 2 - sr + a;
        k[j] = np_attr_at(node, "kernel_shape", a, 1);
        s[j] = np_attr_at(node, "strides", a, 1);
        d[j] = np_attr_at(node, "dilations", a, 1);
        in[j] = np_dim(x, 2 + a);
        pb[j] = np_attr_at(node, "pads", a, 0);
        pe[j] = np_attr_at(node, "pads", sr + a, 0);
        if (strcmp(ap, "VALID") == 0) {
            pb[j] = pe[j] = 0;
        } else if (strncmp(ap, "SAME_", 5) == 0 && in[j] >= 0) {
            int64_t o = (in[j] + s[j] - 1) / s[j],
                    total = (o - 1) * s[j] + (k[j] - 1) * d[j] + 1 - in[j];
            if (total < 0) total = 0;
            pb[j] = strcmp(ap, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
            pe[j] = total - pb[j];
        }
    }
    p->kh = k[0], p->kw = k[1], p->sh = s[0], p->sw = s[1], p->dh = d[0], p->dw = d[1];
    p->ih = in[0], p->iw = in[1];
    p->pt = pb[0], p->pl = pb[1], p->pb = pe[0], p->pr = pe[1];
    return true;
}

static bool np_refuse_rank(const qf_nview *n, qf_nwhy *why)
{
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL;
    int r = x ? x->type.ndim : 0;
    return qf_neutron_refuse(
        why, "", "a %d-D pool (input rank %d): the NPU takes 1-D and 2-D pools only", r - 2, r);
}

static bool np_window_limit(const np_pool *p, bool kernel, qf_nwhy *why)
{
    if (kernel && (p->kh > NP_MAX_WINDOW || p->kw > NP_MAX_WINDOW))
        return qf_neutron_refuse(why, "pool in two steps with smaller kernels",
                                 "kernel %lld x %lld: each side must be <= %d", (long long)p->kh,
                                 (long long)p->kw, NP_MAX_WINDOW);
    if (p->sh > NP_MAX_WINDOW || p->sw > NP_MAX_WINDOW)
        return qf_neutron_refuse(why, "pool in two steps with smaller strides",
                                 "stride %lld x %lld: each side must be <= %d", (long long)p->sh,
                                 (long long)p->sw, NP_MAX_WINDOW);
    return true;
}

/* --- MaxPool ------------------------------------------------------------- */

/* _is_supported_in_IR, the same in both flows. */
static bool np_max_pool_ir(const qf_nview *n, const np_pool *p, qf_nwhy *why)
{
    if (p->dh != 1 || p->dw != 1)
        return qf_neutron_refuse(why, "use dilation 1",
                                 "dilation %lld x %lld: Neutron's MaxPool takes none",
                                 (long long)p->dh, (long long)p->dw);
    if (qf_node_attr_int(n->node, "ceil_mode", 0))
        return qf_neutron_refuse(
            why, "use ceil_mode=0 (pad the input by one row / column if the last window matters)",
            "ceil_mode = 1: Neutron computes the output size with floor only");
    if (n->node->noutputs > 1) {
        const qf_value *idx = n->node->outputs[1];
        if (idx && (idx->nuses > 0 || idx->is_output))
            return qf_neutron_refuse(
                why, "do not use the Indices output (return_indices=False)",
                "the Indices output is used: the NPU computes the maxima only");
    }
    return qf_nrule_shared_qparams(n, 1, why);
}

static bool np_max_pool_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    np_pool p;
    if (!np_pool_read(n, &p)) return np_refuse_rank(n, why);
    if (!np_max_pool_ir(n, &p, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    /* The converter pads with a separate Pad: the stride limit is the
     * unpadded one (4096), and the pad limits of the pool do not apply. */
    return np_window_limit(&p, false, why);
}

static bool np_max_pool_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    np_pool p;
    if (!np_pool_read(n, &p)) return np_refuse_rank(n, why);
    if (!np_max_pool_ir(n, &p, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, false, why)) return false;
    int64_t m = t->num_macs > 0 ? t->num_macs : 1;
    if (p.n > 1) /* a dynamic batch counts as 1 */
        return qf_neutron_refuse(
            why, "export the model with batch 1 (run a batch as several inferences)",
            "batch %lld: SDK 2.x MaxPool takes batch 1 only", (long long)p.n);
    if (p.sh != 1 && p.sh != 2)
        return qf_neutron_refuse(why, "use stride 1 or 2 on H (pool twice for larger strides)",
                                 "stride H = %lld: SDK 2.x MaxPool takes stride H 1 or 2 only",
                                 (long long)p.sh);
    if (p.c >= 0 && p.c % m != 0) {
        qf_neutron_refuse(why, NULL, "C = %lld is not a multiple of num_macs = %lld",
                          (long long)p.c, (long long)m);
        return qf_nrule_fix(why, "pad the channels to %lld",
                            (long long)qf_neutron_round_up(p.c, m));
    }
    if (p.pt > p.kh || p.pb > p.kh || p.pl > p.kw || p.pr > p.kw)
        return qf_neutron_refuse(
            why, "reduce the padding to at most the kernel size",
            "pads (top %lld, left %lld, bottom %lld, right %lld) > kernel %lld x %lld",
            (long long)p.pt, (long long)p.pl, (long long)p.pb, (long long)p.pr, (long long)p.kh,
            (long long)p.kw);
    return true;
}

/* --- AveragePool / GlobalAveragePool ------------------------------------- */

static bool np_avg_pool_ir(const qf_nview *n, const np_pool *p, qf_nwhy *why)
{
    bool padded = p->pt || p->pl || p->pb || p->pr;
    if (padded && !qf_node_attr_int(n->node, "count_include_pad", 0))
        return qf_neutron_refuse(
            why,
            "set count_include_pad=1 (PyTorch's default; the border averages then count the "
            "padded zeros), or remove the padding",
            "count_include_pad = 0 with pads (top %lld, left %lld, bottom %lld, right %lld): the "
            "NPU pads with zeros that count in the average",
            (long long)p->pt, (long long)p->pl, (long long)p->pb, (long long)p->pr);
    if (qf_node_attr_int(n->node, "ceil_mode", 0))
        return qf_neutron_refuse(
            why, "use ceil_mode=0 (pad the input by one row / column if the last window matters)",
            "ceil_mode = 1: Neutron computes the output size with floor only");
    return qf_nrule_shared_qparams(n, 1, why);
}

static bool np_avg_pool_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    np_pool p;
    if (!np_pool_read(n, &p)) return np_refuse_rank(n, why);
    if (!np_avg_pool_ir(n, &p, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    return np_window_limit(&p, true, why);
}

static bool np_avg_pool_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    np_pool p;
    if (!np_pool_read(n, &p)) return np_refuse_rank(n, why);
    if (!np_avg_pool_ir(n, &p, why)) return false;
    return qf_nrule_io_quantized(n, 1, false, why);
}

/* adaptive_avg_pool2d to 1 x 1: kernel = stride = H x W. */
static bool np_global_read(const qf_nview *n, np_pool *p, qf_nwhy *why)
{
    memset(p, 0, sizeof *p);
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL;
    p->rank = x ? x->type.ndim : 0;
    if (p->rank != 3 && p->rank != 4) return np_refuse_rank(n, why);
    p->kh = p->sh = p->rank == 4 ? np_dim(x, 2) : 1;
    p->kw = p->sw = np_dim(x, p->rank - 1);
    return true;
}

static bool np_global_avg_pool_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    np_pool p;
    if (!np_global_read(n, &p, why)) return false;
    if (!qf_nrule_shared_qparams(n, 1, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    if (p.kh > NP_MAX_WINDOW || p.kw > NP_MAX_WINDOW)
        return qf_neutron_refuse(
            why, "average in two steps (an AveragePool first, then the global one)",
            "input %lld x %lld: a global average pool's window (H x W) must be <= %d per side",
            (long long)p.kh, (long long)p.kw, NP_MAX_WINDOW);
    return true;
}

static bool np_global_avg_pool_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    np_pool p;
    if (!np_global_read(n, &p, why)) return false;
    if (!qf_nrule_shared_qparams(n, 1, why)) return false;
    return qf_nrule_io_quantized(n, 1, false, why);
}

/* --- ReduceMean / ReduceSum / ReduceMax ---------------------------------- */

/* The reduced axes, normalised and sorted by position in mask; false when
 * they are not known (a computed axes input). All axes when none given. */
static bool np_reduce_axes(const qf_nview *n, bool *mask, int rank)
{
    memset(mask, 0, (size_t)rank * sizeof *mask);
    int cnt = 0;
    const int64_t *ax = qf_node_attr_ints(n->node, "axes", &cnt);
    int64_t buf[16];
    if (!ax && n->nin > 1 && n->in[1].v) {
        const qf_value *v = n->in[1].v;
        if (!v->type.data || v->type.dtype != QF_DTYPE_I64 || v->type.ndim > 1) return false;
        cnt = v->type.ndim == 0 ? 1 : (int)v->type.dims[0];
        if (cnt > 16) return false;
        memcpy(buf, v->type.data, (size_t)cnt * sizeof *buf);
        ax = buf;
    }
    if (!ax || cnt == 0) {
        /* No axes: all of them, unless noop_with_empty_axes (opset 18),
         * then none. */
        bool noop = qf_node_attr_int(n->node, "noop_with_empty_axes", 0) != 0;
        for (int i = 0; i < rank; i++) mask[i] = !noop;
        return true;
    }
    for (int i = 0; i < cnt; i++) {
        int64_t a = ax[i] < 0 ? ax[i] + rank : ax[i];
        if (a < 0 || a >= rank) return false;
        mask[a] = true;
    }
    return true;
}

/* HEAD's mean.dim / sum.dim_IntList / amax: shared qparams, int8 / uint8. */
static bool np_reduce_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    if (!qf_nrule_shared_qparams(n, 1, why)) return false;
    return qf_nrule_io_quantized(n, 1, true, why);
}

/* v1.3.0's mean.dim: rank 4, keepdim, over H and W only (in the layout
 * Neutron sees), channels a multiple of num_macs (it becomes an average
 * pool). */
static bool np_reduce_mean_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    if (!qf_nrule_shared_qparams(n, 1, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, false, why)) return false;
    const qf_value *x = n->in[0].v, *y = n->out[0].v;
    int rank = x ? x->type.ndim : 0;
    if (rank != 4)
        return qf_neutron_refuse(
            why, "", "input rank %d: SDK 2.x takes a mean over a rank-4 tensor only", rank);
    if (!qf_node_attr_int(n->node, "keepdims", 1))
        return qf_neutron_refuse(why, "use keepdims=1 and reshape after the mean",
                                 "keepdims = 0: SDK 2.x keeps the reduced dims only");
    bool cf = qf_nrule_channels_first(n->g, n->in[0].v);
    bool mask[4];
    if (np_reduce_axes(n, mask, 4)) {
        /* NCHW: H, W are axes 2, 3; a tensor with no conv around is seen
         * as NHWC: axes 1, 2. */
        int h = cf ? 2 : 1, w = cf ? 3 : 2;
        for (int i = 0; i < 4; i++)
            if (mask[i] != (i == h || i == w))
                return qf_neutron_refuse(
                    why, "average over the spatial axes only",
                    "a mean over other axes than %s (%d, %d): SDK 2.x averages over H and W only",
                    cf ? "H, W of NCHW" : "the middle two of a channels-last tensor", h, w);
    }
    int64_t m = t->num_macs > 0 ? t->num_macs : 1, c = np_dim(y, cf ? 1 : 3);
    if (c >= 0 && c % m != 0) {
        qf_neutron_refuse(why, NULL, "C = %lld is not a multiple of num_macs = %lld", (long long)c,
                          (long long)m);
        return qf_nrule_fix(why, "pad the channels to %lld", (long long)qf_neutron_round_up(c, m));
    }
    return true;
}

/* mean_dim_converter.supports_partitioning_result (HEAD): a mean that keeps
 * its dims and reduces only dims of size 1 is a no-op the Neutron converter
 * drops; alone in its partition it would leave an empty graph. */
static bool np_reduce_mean_partition(const qf_nview *n, const qf_npart *p, const qf_target_spec *t,
                                     qf_nwhy *why)
{
    if (t->flow != QF_NEUTRON_SDK3 || p->ncompute != 1) return true;
    const qf_value *x = n->in[0].v;
    int rank = x ? x->type.ndim : 0;
    if (rank < 1 || rank > 8 || !qf_node_attr_int(n->node, "keepdims", 1)) return true;
    bool mask[8];
    if (!np_reduce_axes(n, mask, rank)) return true;
    for (int i = 0; i < rank; i++)
        if (mask[i] && x->type.dims[i] != 1) return true;
    return qf_neutron_refuse(
        why, "remove the no-op mean from the model",
        "a mean over dims of size 1 (a no-op) alone in its partition: the Neutron converter "
        "drops it and the partition would be empty");
}

/* --- Softmax ------------------------------------------------------------- */

typedef struct np_softmax {
    int64_t channels, spatial; /* the softmax axis, the product of the others */
    bool cf;                   /* channels-first: the softmax must run on axis 1 */
    int rank, axis, chan_axis;
} np_softmax;

static bool np_softmax_read(const qf_nview *n, np_softmax *s, qf_nwhy *why)
{
    memset(s, 0, sizeof *s);
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL;
    s->rank = x ? x->type.ndim : 0;
    int64_t opset = n->g ? n->g->opset : 13;
    int64_t axis = qf_node_attr_int(n->node, "axis", opset >= 13 ? -1 : 1);
    if (s->rank < 1) return qf_neutron_refuse(why, "", "a softmax over a scalar");
    if (axis < 0) axis += s->rank;
    s->axis = (int)axis;
    int64_t numel = 1;
    for (int i = 0; i < s->rank; i++)
        numel = x->type.dims[i] < 0 || numel < 0 ? -1 : numel * x->type.dims[i];
    if (opset < 13 && axis != s->rank - 1) {
        /* Flattened to [prod(< axis), prod(>= axis)]: PyTorch's form is a
         * view (format-less) and a softmax over the last dim. */
        s->channels = 1;
        for (int i = (int)axis; i < s->rank; i++)
            s->channels =
                x->type.dims[i] < 0 || s->channels < 0 ? -1 : s->channels * x->type.dims[i];
        s->spatial = s->channels > 0 && numel >= 0 ? numel / s->channels : -1;
        s->rank = 2;
        s->axis = 1;
        s->chan_axis = 1;
        return true;
    }
    s->cf = s->rank >= 3 && qf_nrule_channels_first(n->g, n->in[0].v);
    s->chan_axis = s->cf ? 1 : s->rank - 1;
    s->channels = x->type.dims[s->chan_axis];
    s->spatial = s->channels > 0 && numel >= 0 ? numel / s->channels : -1;
    if (s->axis != s->chan_axis)
        return qf_neutron_refuse(
            why,
            s->cf ? "take the softmax over axis 1 (the channels), or transpose so that its "
                    "axis is the channels"
                  : "move the softmax axis last with a Transpose",
            "softmax over axis %d of a rank-%d tensor %s: Neutron takes a softmax over the "
            "channels only (axis %d)",
            s->axis, s->rank, s->cf ? "in channels-first layout (it follows a convolution)" : "",
            s->chan_axis);
    return true;
}

static bool np_softmax_sdk3(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    (void)t;
    np_softmax s;
    if (!np_softmax_read(n, &s, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, true, why)) return false;
    if (s.channels > 2040)
        return qf_neutron_refuse(
            why,
            "reduce the softmax axis to <= 2040 (fewer classes), or leave this softmax on the "
            "CPU (the last op of a classifier: one transition)",
            "channels (the softmax axis) = %lld > 2040", (long long)s.channels);
    if (s.spatial > 4096)
        return qf_neutron_refuse(
            why, "split the tensor along another axis into parts of <= 4096 rows each",
            "rows (the product of the other dims) = %lld > 4096", (long long)s.spatial);
    if (s.channels >= 0 && s.spatial >= 0 && s.channels * s.spatial > 524288)
        return qf_neutron_refuse(why, "split the tensor along another axis",
                                 "channels*rows = %lld*%lld = %lld > 524288", (long long)s.channels,
                                 (long long)s.spatial, (long long)(s.channels * s.spatial));
    return true;
}

static bool np_softmax_sdk2(const qf_nview *n, const qf_target_spec *t, qf_nwhy *why)
{
    np_softmax s;
    const qf_value *x = n->nin > 0 ? n->in[0].v : NULL;
    if (x && x->type.ndim == 1)
        return qf_neutron_refuse(why, "reshape the vector to [1, N]",
                                 "a 1-D softmax: SDK 2.x takes rank >= 2 only");
    if (!np_softmax_read(n, &s, why)) return false;
    if (!qf_nrule_io_quantized(n, 1, false, why)) return false;
    int64_t m = t->num_macs > 0 ? t->num_macs : 1, pipes = t->num_pipes > 0 ? t->num_pipes : 1;
    /* channels < 4096 / num_pipes * 4, in ExecuTorch's float division */
    double cmax = 4096.0 / (double)pipes * 4.0;
    if (s.channels >= 0 && s.channels % m != 0) {
        qf_neutron_refuse(why, NULL,
                          "channels (the softmax axis) = %lld is not a multiple of num_macs = %lld",
                          (long long)s.channels, (long long)m);
        return qf_nrule_fix(why, "pad the softmax axis to %lld with values near the smallest input (their exp "
                            "adds to the sum; values far below widen the int8 scale)",
                            (long long)qf_neutron_round_up(s.channels, m));
    }
    if (s.channels >= 0 && (double)s.channels >= cmax)
        return qf_neutron_refuse(why, "reduce the softmax axis",
                                 "channels = %lld >= 4096/num_pipes*4 = %g", (long long)s.channels,
                                 cmax);
    if (s.spatial > 4096)
        return qf_neutron_refuse(
            why, "split the tensor along another axis into parts of <= 4096 rows each",
            "rows (the product of the other dims) = %lld > 4096", (long long)s.spatial);
    if (s.channels >= 0 && s.spatial >= 0 && (double)(s.channels * s.spatial) / (double)m > 65536.0)
        return qf_neutron_refuse(why, "split the tensor along another axis",
                                 "channels*rows/num_macs = %lld*%lld/%lld = %g > 65536",
                                 (long long)s.channels, (long long)s.spatial, (long long)m,
                                 (double)(s.channels * s.spatial) / (double)m);
    return true;
}

const qf_neutron_row qf_neutron_rows_pool[] = {
    {QF_OP_MAX_POOL, np_max_pool_sdk3, np_max_pool_sdk2, NULL},
    {QF_OP_AVG_POOL, np_avg_pool_sdk3, np_avg_pool_sdk2, NULL},
    {QF_OP_GLOBAL_AVG_POOL, np_global_avg_pool_sdk3, np_global_avg_pool_sdk2, NULL},
    {QF_OP_REDUCE_MEAN, np_reduce_sdk3, np_reduce_mean_sdk2, np_reduce_mean_partition},
    {QF_OP_REDUCE_SUM, np_reduce_sdk3, NULL, NULL},
    {QF_OP_REDUCE_MAX, np_reduce_sdk3, NULL, NULL},
    {QF_OP_SOFTMAX, np_softmax_sdk3, np_softmax_sdk2, NULL},
    {QF_OP_COUNT, NULL, NULL, NULL},
};
