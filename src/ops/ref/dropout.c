/* Dropout (ONNX opsets 7..17): the identity in inference; in a training plan
 * (qf_kernel_io.training) PyTorch's inverted dropout with a seeded,
 * counter-based mask, and its backward. */
#include <stdint.h>
#include <string.h>

#include "core/rand.h"
#include "core/parallel.h"
#include "ops/kernels.h"

static const qf_value *qf_dropout_in(const qf_node *n, int slot)
{
    return slot < n->ninputs ? n->inputs[slot] : NULL;
}

static qf_status qf_dropout_copy(const qf_kernel_io *io)
{
    size_t nb = qf_tensor_nbytes(io->out[0]);
    if (nb && io->out[0]->data != io->in[0]->data) memcpy(io->out[0]->data, io->in[0]->data, nb);
    return QF_OK;
}

/* din[i] all zeros (when wanted). */
static void qf_dropout_grad_zero(const qf_kernel_io *io, int i)
{
    if (i < io->nin && io->din[i]) memset(io->din[i]->data, 0, qf_tensor_nbytes(io->din[i]));
}

/* --- training mode ------------------------------------------------------------ */

/* The drop ratio: input 1 (opset 12+), else the `ratio` attribute of the
 * older opsets, else 0.5. */
static qf_status qf_dropout_ratio(const qf_kernel_io *io, double *ratio)
{
    const qf_tensor *r = io->nin > 1 ? io->in[1] : NULL;
    *ratio = r ? 0.5 : qf_node_attr_float(io->node, "ratio", 0.5f);
    if (r) {
        if (!r->data || qf_tensor_numel(r) < 1)
            return qf_error(QF_ERR_INVALID, "node '%s' (Dropout): ratio has no value", io->node->name);
        *ratio = qf_tensor_get_f64(r, 0);
    }
    if (!(*ratio >= 0.0 && *ratio <= 1.0))
        return qf_error(QF_ERR_INVALID, "node '%s' (Dropout): ratio %g is outside [0, 1]", io->node->name,
                        *ratio);
    return QF_OK;
}

/* 1 / (1 - ratio), the scale of the kept elements (PyTorch's inverted
 * dropout); 0 for ratio 1, where everything is dropped. */
static float qf_dropout_scale(double ratio) { return ratio < 1.0 ? (float)(1.0 / (1.0 - ratio)) : 0.0f; }

static size_t qf_dropout_saved_size(const qf_node *n, const void *state)
{
    (void)state;
    int64_t k = qf_tensor_numel(&n->inputs[0]->type);
    return k > 0 ? (size_t)k : 0;
}

typedef struct qf_dropout_job {
    const float *x;
    float *y;
    uint8_t *mask;
    uint64_t key;
    uint64_t threshold; /* an element is dropped when its 32-bit draw is below */
    float scale;
} qf_dropout_job;

/* SplitMix64's output function: a bijective 64-bit mix. */

/* The mask is counter-based: element i's draw is SplitMix64's i-th output
 * from a state derived from the seed, so it depends on the seed and i only
 * (not on the thread split), and the same seed gives the same mask. */
static void qf_dropout_slice(void *ctx, int64_t lo, int64_t hi)
{
    const qf_dropout_job *j = ctx;
    for (int64_t i = lo; i < hi; i++) {
        uint64_t u = qf_mix64(j->key + (uint64_t)(i + 1) * QF_SPLITMIX_GAMMA) >> 32;
        uint8_t keep = u >= j->threshold;
        j->mask[i] = keep;
        j->y[i] = keep ? j->x[i] * j->scale : 0.0f;
    }
}

/* Training forward: drop each element with probability ratio, scale the
 * kept ones by 1 / (1 - ratio); the mask goes to `saved` (one byte per
 * element) and to the optional mask output. */
static qf_status qf_dropout_train_forward(const qf_kernel_io *io)
{
    const qf_tensor *x = io->in[0];
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (Dropout): training mode on %s (float32 only)",
                        io->node->name, qf_dtype_name(x->dtype));
    if (!io->saved && qf_tensor_numel(x) > 0)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (Dropout): training forward without its mask buffer",
                        io->node->name);
    double ratio;
    QF_TRY(qf_dropout_ratio(io, &ratio));
    double t = ratio * 4294967296.0;
    qf_dropout_job j = {.x = x->data, .y = io->out[0]->data, .mask = io->saved,
                        .key = qf_mix64(io->seed ^ 0x5851f42d4c957f2dull),
                        .threshold = t >= 4294967296.0 ? 4294967296ull : (uint64_t)t,
                        .scale = qf_dropout_scale(ratio)};
    const int64_t n = qf_tensor_numel(x);
    qf_parallel_for(n, 32768, qf_dropout_slice, &j);
    if (io->nout > 1 && io->out[1] && n > 0) memcpy(io->out[1]->data, io->saved, (size_t)n);
    return QF_OK;
}

/* dx = dy * mask / (1 - ratio) in training mode (the mask from `saved`; reads
 * the ratio, bwd_in bit 1), dx = dy in inference. */
static qf_status qf_dropout_backward_f32(const qf_kernel_io *io)
{
    qf_dropout_grad_zero(io, 1); /* the ratio is no parameter: its gradient, if asked, is 0 */
    if (!io->din[0]) return QF_OK;
    if (!io->dout[0]) {
        qf_dropout_grad_zero(io, 0);
        return QF_OK;
    }
    if (!io->training) {
        memcpy(io->din[0]->data, io->dout[0]->data, qf_tensor_nbytes(io->din[0]));
        return QF_OK;
    }
    double ratio;
    QF_TRY(qf_dropout_ratio(io, &ratio));
    const float scale = qf_dropout_scale(ratio);
    const uint8_t *mask = io->saved;
    const float *dy = io->dout[0]->data;
    float *dx = io->din[0]->data;
    const int64_t n = qf_tensor_numel(io->din[0]);
    if (!mask && n > 0)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (Dropout): backward without the forward's mask",
                        io->node->name);
    for (int64_t i = 0; i < n; i++) dx[i] = mask[i] ? dy[i] * scale : 0.0f;
    return QF_OK;
}

/* --- inference ------------------------------------------------------------------ */

/* An inference plan runs Dropout in inference mode: training_mode = true is
 * accepted there only with a ratio of 0 (nothing dropped: the same result);
 * ratio defaults to 0.5. A training plan (io->training) drops. */
static qf_status qf_dropout_training(const qf_node *n, const qf_tensor *tm, const qf_tensor *ratio)
{
    if (!tm || !tm->data || qf_tensor_numel(tm) < 1 || qf_tensor_get_i64(tm, 0) == 0) return QF_OK;
    if (ratio && !ratio->data) return QF_OK; /* known at run time: the kernel checks */
    double r = ratio && qf_tensor_numel(ratio) > 0 ? qf_tensor_get_f64(ratio, 0) : 0.5;
    if (r != 0.0)
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s' (Dropout): training_mode = true with ratio %g is not supported "
                        "(inference only)",
                        n->name, r);
    return QF_OK;
}

static qf_status qf_dropout_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const qf_tensor *x = &n->inputs[0]->type;
    const qf_value *tm = qf_dropout_in(n, 2);
    /* Training mode is a property of how the graph is run, not of its
     * shapes: the graph stays valid (a pass may still see or remove the
     * node); the inference kernel refuses to run it. */
    if (tm && tm->type.dtype != QF_DTYPE_BOOL)
        return qf_error(QF_ERR_INVALID, "node '%s' (Dropout): training_mode must be bool, got %s",
                        n->name, qf_dtype_name(tm->type.dtype));
    qf_set_output(n, 0, x->dtype, x->ndim, x->dims);
    if (n->noutputs > 1) qf_set_output(n, 1, QF_DTYPE_BOOL, x->ndim, x->dims);
    return QF_OK;
}

static qf_status qf_dropout_forward_f32(const qf_kernel_io *io)
{
    if (io->training) return qf_dropout_train_forward(io);
    QF_TRY(qf_dropout_training(io->node, io->nin > 2 ? io->in[2] : NULL, io->nin > 1 ? io->in[1] : NULL));
    QF_TRY(qf_dropout_copy(io));
    /* In inference every element is kept: the mask is all true. */
    if (io->nout > 1) memset(io->out[1]->data, 1, qf_tensor_nbytes(io->out[1]));
    return QF_OK;
}

/* --- op table columns (src/ops/op_table.h) --- */

const qf_op_kernels qf_dropout_kernels = {
    .infer = qf_dropout_infer,
    .layouts = QF_LAYOUT_NCHW | QF_LAYOUT_NHWC,
    .forward_f32 = qf_dropout_forward_f32,
    .backward_f32 = qf_dropout_backward_f32,
    .bwd_in = 1u << 1, /* ratio */
    .saved_size = qf_dropout_saved_size,
};
