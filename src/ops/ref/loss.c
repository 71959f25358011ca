/* Losses: SoftmaxCrossEntropyLoss (ONNX, opset 12+) and mse_loss (internal).
 * The trainer (src/train/) appends one of them to a copy of the graph's
 * output, so the backward tape runs through them like any other node.
 *
 * SoftmaxCrossEntropyLoss: scores [N, C] or [N, C, d1, ...] (float32),
 * labels [N] or [N, d1, ...] (int64 or int32), optional weights [C]
 * (float32). For every position i = (n, d1, ...):
 *     log_prob[n, c, d] = scores[n, c, d] - logsumexp_c(scores[n, :, d])
 *     l_i = -w[y_i] * log_prob[n, y_i, d]     (w = 1 without weights)
 * a position whose label equals ignore_index counts for nothing (l_i = 0,
 * weight 0). reduction "none": loss = l (labels' shape); "sum": sum_i l_i;
 * "mean" (the default): sum_i l_i / sum_i w[y_i] over counted positions,
 * which is torch.nn.functional.cross_entropy's weighted mean (and the plain
 * count without weights). The optional output 1 is log_prob. The
 * log-sum-exp is taken around the row's maximum, the loss summed in double.
 * A label outside [0, C) that is not ignore_index is an error.
 *
 * Backward (to scores; to weights for the gradient check): with g_i the
 * upstream gradient of l_i (dloss[i] for "none", dloss for "sum", dloss /
 * sum_w for "mean"),
 *     dscores[n, c, d] = g_i * w[y_i] * (softmax[n, c, d] - [c == y_i])
 *                      + dlog_prob[n, c, d] - softmax[n, c, d] * sum_c dlog_prob[n, c, d]
 * softmax = exp(log_prob), the log_prob kept from the forward in `saved`.
 *
 * mse_loss: prediction and target of one shape (float32), reduction "mean"
 * (the default: sum / numel) or "sum" of (p - t)^2, a scalar; gradients
 * dp = 2 (p - t) dloss (/ numel for "mean"), dt = -dp.
 */
#include <math.h>
#include <string.h>

#include "ops/kernels.h"

enum { LOSS_NONE = 0, LOSS_SUM = 1, LOSS_MEAN = 2 };

/* The node's reduction, or -1 when it is not one of those allowed. */
static int loss_reduction(const qf_node *n, bool allow_none)
{
    const char *r = qf_node_attr_string(n, "reduction", "mean");
    if (!strcmp(r, "mean")) return LOSS_MEAN;
    if (!strcmp(r, "sum")) return LOSS_SUM;
    if (allow_none && !strcmp(r, "none")) return LOSS_NONE;
    return -1;
}

/* --- SoftmaxCrossEntropyLoss ------------------------------------------------- */

/* Batch N, classes C and positions per sample D of scores [N, C, d1...]. */
static void sce_geometry(const qf_tensor *x, int64_t *nb, int64_t *c, int64_t *d)
{
    *nb = x->dims[0];
    *c = x->dims[1];
    *d = 1;
    for (int i = 2; i < x->ndim; i++) *d *= x->dims[i];
}

static qf_status qf_softmax_ce_loss_infer(qf_graph *g, qf_node *n)
{
    /* No opset check: ONNX defines the op from opset 12, but the trainer
     * appends it to copies of graphs of any opset qfold imports (11..). */
    (void)g;
    const char *op = qf_op_label(n);
    if (n->ninputs < 2 || !n->inputs[0] || !n->inputs[1])
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): scores and labels are required", n->name, op);
    const qf_tensor *x = &n->inputs[0]->type, *y = &n->inputs[1]->type;
    const qf_tensor *w = n->ninputs > 2 && n->inputs[2] ? &n->inputs[2]->type : NULL;
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): scores have dtype %s, only float32 is supported", n->name,
                        op, qf_dtype_name(x->dtype));
    if (y->dtype != QF_DTYPE_I64 && y->dtype != QF_DTYPE_I32)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): labels have dtype %s, expected int64 or int32", n->name, op,
                        qf_dtype_name(y->dtype));
    if (x->ndim < 2)
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): scores have rank %d, expected >= 2 (N, C, ...)", n->name, op,
                        x->ndim);
    bool ok = y->ndim == x->ndim - 1 && (y->dims[0] < 0 || x->dims[0] < 0 || y->dims[0] == x->dims[0]);
    for (int i = 1; ok && i < y->ndim; i++)
        ok = y->dims[i] < 0 || x->dims[i + 1] < 0 || y->dims[i] == x->dims[i + 1];
    if (!ok) {
        char a[128], b[128];
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): labels of shape %s do not match scores of shape %s (N, C, d...)",
                        n->name, op, qf_shape_str(y->ndim, y->dims, a, sizeof a),
                        qf_shape_str(x->ndim, x->dims, b, sizeof b));
    }
    if (w && (w->dtype != QF_DTYPE_F32 || w->ndim != 1 || (w->dims[0] >= 0 && x->dims[1] >= 0 && w->dims[0] != x->dims[1]))) {
        char a[128];
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): weights of dtype %s, shape %s; expected float32 [%lld]", n->name,
                        op, qf_dtype_name(w->dtype), qf_shape_str(w->ndim, w->dims, a, sizeof a), (long long)x->dims[1]);
    }
    int red = loss_reduction(n, true);
    if (red < 0)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): reduction '%s'; expected none, sum or mean", n->name, op,
                        qf_node_attr_string(n, "reduction", "mean"));
    if (red == LOSS_NONE) qf_set_output(n, 0, QF_DTYPE_F32, y->ndim, y->dims);
    else qf_set_output(n, 0, QF_DTYPE_F32, 0, NULL);
    if (n->noutputs > 1 && n->outputs[1]) qf_set_output(n, 1, QF_DTYPE_F32, x->ndim, x->dims);
    return QF_OK;
}

/* What the forward and backward read of the node's attributes, decoded once. */
typedef struct sce_state {
    int red;
    bool has_ii;
    int64_t ii;
} sce_state;

static qf_status qf_softmax_ce_loss_prepare(const qf_kernel_io *io, void *state)
{
    sce_state *st = state;
    st->red = loss_reduction(io->node, true);
    st->has_ii = qf_node_attr(io->node, "ignore_index") != NULL;
    st->ii = qf_node_attr_int(io->node, "ignore_index", 0);
    return QF_OK;
}

/* `saved`: the weight sum and the reduced loss (doubles), then log_prob. */
typedef struct sce_saved {
    double wsum;
    double loss;
} sce_saved;

static size_t qf_softmax_ce_loss_saved(const qf_node *n, const void *state)
{
    (void)state;
    return sizeof(sce_saved) + (size_t)qf_tensor_numel(&n->inputs[0]->type) * sizeof(float);
}

static int64_t sce_label(const qf_tensor *y, int64_t i)
{
    return y->dtype == QF_DTYPE_I64 ? ((const int64_t *)y->data)[i] : ((const int32_t *)y->data)[i];
}

/* Log-softmax of scores into lp (same layout) and the loss; checks labels. */
static qf_status qf_softmax_ce_loss_forward_f32(const qf_kernel_io *io)
{
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0], *y = io->in[1];
    const qf_tensor *w = io->nin > 2 ? io->in[2] : NULL;
    const sce_state *st = io->state;
    const int red = st->red;
    const bool has_ii = st->has_ii;
    const int64_t ii = st->ii;
    int64_t nb, c, dd;
    sce_geometry(x, &nb, &c, &dd);
    const float *xd = x->data, *wd = w ? w->data : NULL;
    float *loss = io->out[0]->data;
    float *lpo = io->nout > 1 && io->out[1] ? io->out[1]->data : NULL;
    float *lp = io->saved ? (float *)((sce_saved *)io->saved + 1) : lpo;

    /* Labels first: an error leaves no half-written output behind it. */
    for (int64_t i = 0; i < nb * dd; i++) {
        int64_t lab = sce_label(y, i);
        if (has_ii && lab == ii) continue;
        if (lab < 0 || lab >= c) {
            if (dd > 1)
                return qf_error(QF_ERR_INVALID,
                                "node '%s' (%s): sample %lld, position %lld: label %lld outside [0, %lld) (ignore_index %s)",
                                n->name, qf_op_label(n), (long long)(i / dd), (long long)(i % dd), (long long)lab,
                                (long long)c, has_ii ? "set to another value" : "not set");
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): sample %lld: label %lld outside [0, %lld) (ignore_index %s)",
                            n->name, qf_op_label(n), (long long)i, (long long)lab, (long long)c,
                            has_ii ? "set to another value" : "not set");
        }
    }
    double total = 0.0, wsum = 0.0;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t d = 0; d < dd; d++) {
            const float *p = xd + b * c * dd + d;
            double mx = -INFINITY;
            for (int64_t k = 0; k < c; k++)
                if (p[k * dd] > mx) mx = p[k * dd];
            double s = 0.0;
            for (int64_t k = 0; k < c; k++) s += exp((double)p[k * dd] - mx);
            const double lse = mx + log(s);
            if (lp) {
                float *q = lp + b * c * dd + d;
                for (int64_t k = 0; k < c; k++) q[k * dd] = (float)((double)p[k * dd] - lse);
            }
            if (lpo && lpo != lp) {
                float *q = lpo + b * c * dd + d;
                for (int64_t k = 0; k < c; k++) q[k * dd] = (float)((double)p[k * dd] - lse);
            }
            const int64_t i = b * dd + d, lab = sce_label(y, i);
            double li = 0.0;
            if (!(has_ii && lab == ii)) {
                const double wi = wd ? wd[lab] : 1.0;
                li = -wi * ((double)p[lab * dd] - lse);
                wsum += wi;
            }
            if (red == LOSS_NONE) loss[i] = (float)li;
            total += li;
        }
    double reduced = red == LOSS_MEAN ? total / wsum : total;
    if (red != LOSS_NONE) loss[0] = (float)reduced;
    if (io->saved) {
        sce_saved *sv = io->saved;
        sv->wsum = wsum;
        sv->loss = reduced;
    }
    return QF_OK;
}

static qf_status qf_softmax_ce_loss_backward_f32(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0], *y = io->in[1];
    const qf_tensor *w = io->nin > 2 ? io->in[2] : NULL;
    const sce_state *st = io->state;
    const int red = st->red;
    const bool has_ii = st->has_ii;
    const int64_t ii = st->ii;
    int64_t nb, c, dd;
    sce_geometry(x, &nb, &c, &dd);
    const sce_saved *sv = io->saved;
    const float *lp = (const float *)(sv + 1), *wd = w ? w->data : NULL;
    const float *dl = io->dout[0] ? io->dout[0]->data : NULL;
    const float *dlp = io->nout > 1 && io->dout[1] ? io->dout[1]->data : NULL;
    /* g_i's factor common to every position: the reduced loss's gradient. */
    const double dred = red == LOSS_NONE || !dl ? 0.0 : red == LOSS_MEAN ? dl[0] / sv->wsum : dl[0];
    float *dx = io->din[0] ? io->din[0]->data : NULL;
    float *dw = io->nin > 2 && io->din[2] ? io->din[2]->data : NULL;
    if (dw) memset(dw, 0, (size_t)c * sizeof *dw);

    for (int64_t b = 0; b < nb; b++)
        for (int64_t d = 0; d < dd; d++) {
            const int64_t i = b * dd + d, lab = sce_label(y, i), base = b * c * dd + d;
            const bool counted = !(has_ii && lab == ii);
            const double gi = red == LOSS_NONE ? (dl ? dl[i] : 0.0) : dred;
            if (dx) {
                const double gw = counted ? gi * (wd ? wd[lab] : 1.0) : 0.0;
                double sdlp = 0.0;
                if (dlp)
                    for (int64_t k = 0; k < c; k++) sdlp += dlp[base + k * dd];
                for (int64_t k = 0; k < c; k++) {
                    const double sm = exp((double)lp[base + k * dd]);
                    double v = gw * (sm - (k == lab ? 1.0 : 0.0));
                    if (dlp) v += dlp[base + k * dd] - sm * sdlp;
                    dx[base + k * dd] = (float)v;
                }
            }
            if (dw && counted) {
                /* d/dw_c of the weighted loss; for "mean" also through the
                 * denominator sum_w: (l_i - loss) / sum_w. */
                const double li = -(double)lp[base + lab * dd];
                dw[lab] += (float)(red == LOSS_MEAN ? dred * (li - sv->loss) : gi * li);
            }
        }
    return QF_OK;
}

/* --- mse_loss ------------------------------------------------------------------ */

static qf_status qf_mse_loss_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const char *op = qf_op_label(n);
    QF_TRY(qf_op_check_inputs(n, 2));
    const qf_tensor *p = &n->inputs[0]->type, *t = &n->inputs[1]->type;
    if (p->dtype != QF_DTYPE_F32 || t->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): prediction %s and target %s; only float32 is supported",
                        n->name, op, qf_dtype_name(p->dtype), qf_dtype_name(t->dtype));
    bool same = p->ndim == t->ndim;
    for (int i = 0; same && i < p->ndim; i++) same = p->dims[i] == t->dims[i];
    if (!same) {
        char a[128], b[128];
        return qf_error(QF_ERR_SHAPE, "node '%s' (%s): prediction of shape %s, target of shape %s: expected the same",
                        n->name, op, qf_shape_str(p->ndim, p->dims, a, sizeof a),
                        qf_shape_str(t->ndim, t->dims, b, sizeof b));
    }
    if (loss_reduction(n, false) < 0)
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): reduction '%s'; expected sum or mean", n->name, op,
                        qf_node_attr_string(n, "reduction", "mean"));
    qf_set_output(n, 0, QF_DTYPE_F32, 0, NULL);
    return QF_OK;
}

/* The reduction, decoded once (an int in the state). */
static qf_status qf_mse_loss_prepare(const qf_kernel_io *io, void *state)
{
    *(int *)state = loss_reduction(io->node, false);
    return QF_OK;
}

static qf_status qf_mse_loss_forward_f32(const qf_kernel_io *io)
{
    const float *p = io->in[0]->data, *t = io->in[1]->data;
    const int64_t cnt = qf_tensor_numel(io->in[0]);
    double s = 0.0;
    for (int64_t i = 0; i < cnt; i++) {
        const double d = (double)p[i] - t[i];
        s += d * d;
    }
    if (*(const int *)io->state == LOSS_MEAN) s /= (double)cnt;
    ((float *)io->out[0]->data)[0] = (float)s;
    return QF_OK;
}

static qf_status qf_mse_loss_backward_f32(const qf_kernel_io *io)
{
    const float *p = io->in[0]->data, *t = io->in[1]->data;
    const int64_t cnt = qf_tensor_numel(io->in[0]);
    double k = io->dout[0] ? 2.0 * ((const float *)io->dout[0]->data)[0] : 0.0;
    if (*(const int *)io->state == LOSS_MEAN) k /= (double)cnt;
    const float kf = (float)k;
    float *dp = io->din[0] ? io->din[0]->data : NULL, *dt = io->din[1] ? io->din[1]->data : NULL;
    for (int64_t i = 0; i < cnt; i++) {
        const float g = (p[i] - t[i]) * kf;
        if (dp) dp[i] = g;
        if (dt) dt[i] = -g;
    }
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_softmax_ce_loss_kernels = {
    .infer = qf_softmax_ce_loss_infer,
    .prepare = qf_softmax_ce_loss_prepare,
    .state_size = sizeof(sce_state),
    .forward_f32 = qf_softmax_ce_loss_forward_f32,
    .backward_f32 = qf_softmax_ce_loss_backward_f32,
    .bwd_in = 1u << 1 | 1u << 2,
    .saved_size = qf_softmax_ce_loss_saved,
};

const qf_op_kernels qf_mse_loss_kernels = {
    .infer = qf_mse_loss_infer,
    .prepare = qf_mse_loss_prepare,
    .state_size = sizeof(int),
    .forward_f32 = qf_mse_loss_forward_f32,
    .backward_f32 = qf_mse_loss_backward_f32,
    .bwd_in = 1u << 0 | 1u << 1,
};
