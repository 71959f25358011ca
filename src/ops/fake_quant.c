/* fake_quant (internal op): PyTorch 1.13's FakeQuantize module as one node,
 * for quantization-aware training.
 *
 *   Y = fake_quant(X, scale, zero_point, running_min, running_max)
 *
 * scale, zero_point (float32 holding integers), running_min, running_max are
 * buffers of one element (per tensor) or of X's dim `axis` (per channel),
 * updated in place by the training forward, as BatchNormalization's running
 * statistics are. Attributes: quant_min, quant_max (the integer grid),
 * axis (per channel), averaging_constant (c, default 0.01), symmetric (0/1),
 * eps (the smallest scale, default float32's epsilon), observe (1: the
 * training forward observes; read at run time), enabled (1: fake-quantize;
 * 0: Y = X).
 *
 * Training forward, with observe: the minimum and maximum of X (per channel
 * over every dim but `axis`) update the running ones as
 * MovingAverage(PerChannel)MinMaxObserver does (the first batch, when
 * running_min is +inf, assigns; later ones move by c: r += c (m - r)), then
 * scale and zero point are the observer's qparams (quant_math.h:
 * qf_qparams_torch). Every forward then computes, with inv = 1 / scale (as
 * fake_quantize_per_{tensor,channel}_affine do, a multiplication),
 *     q = zero_point + nearbyint(X * inv)
 *     Y = (clamp(q, quant_min, quant_max) - zero_point) * scale
 * and the backward passes dY where quant_min <= q <= quant_max, 0 elsewhere
 * (the straight-through estimator with torch's clamp mask). Before anything
 * was observed scale is 1 and zero point 0, as FakeQuantize's initial
 * buffers. Export has no ONNX form for it: QAT's convert turns each into a
 * QuantizeLinear -> DequantizeLinear pair.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "kernels.h"
#include "quant_math.h"

typedef struct fq_state {
    int32_t qmin, qmax;
    int axis;            /* -1: per tensor */
    float c, eps;
    bool symmetric, enabled;
    int64_t outer, ch, inner; /* X as [outer][ch][inner] */
} fq_state;

static qf_status qf_fake_quant_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    const char *op = qf_op_label(n);
    QF_TRY(qf_op_check_inputs(n, 5));
    const qf_tensor *x = &n->inputs[0]->type;
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "node '%s' (%s): input dtype %s, expected float32", n->name, op,
                        qf_dtype_name(x->dtype));
    const int64_t nel = qf_tensor_numel(&n->inputs[1]->type);
    for (int i = 1; i < 5; i++) {
        const qf_tensor *t = &n->inputs[i]->type;
        if (t->dtype != QF_DTYPE_F32 || qf_tensor_numel(t) != nel || t->ndim > 1)
            return qf_error(QF_ERR_INVALID,
                            "node '%s' (%s): scale, zero_point, running_min and running_max must be float32 "
                            "vectors of one length",
                            n->name, op);
    }
    if (nel > 1) {
        int64_t axis = qf_node_attr_int(n, "axis", 0);
        if (axis < 0) axis += x->ndim;
        if (axis < 0 || axis >= x->ndim || (x->dims[axis] >= 0 && x->dims[axis] != nel))
            return qf_error(QF_ERR_SHAPE, "node '%s' (%s): %lld qparams for axis %lld of a rank-%d input", n->name,
                            op, (long long)nel, (long long)qf_node_attr_int(n, "axis", 0), x->ndim);
    }
    const int64_t qmin = qf_node_attr_int(n, "quant_min", -128), qmax = qf_node_attr_int(n, "quant_max", 127);
    if (qmin >= qmax || qmin < -(1 << 24) || qmax > (1 << 24))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): quant range [%lld, %lld] is empty or too wide", n->name, op,
                        (long long)qmin, (long long)qmax);
    qf_set_output(n, 0, QF_DTYPE_F32, x->ndim, x->dims);
    return QF_OK;
}

static qf_status qf_fake_quant_prepare(const qf_kernel_io *io, void *state)
{
    fq_state *st = state;
    const qf_node *n = io->node;
    const qf_tensor *x = io->in[0];
    st->qmin = (int32_t)qf_node_attr_int(n, "quant_min", -128);
    st->qmax = (int32_t)qf_node_attr_int(n, "quant_max", 127);
    st->c = qf_node_attr_float(n, "averaging_constant", 0.01f);
    st->eps = qf_node_attr_float(n, "eps", FLT_EPSILON);
    st->symmetric = qf_node_attr_int(n, "symmetric", 0) != 0;
    st->enabled = qf_node_attr_int(n, "enabled", 1) != 0;
    if (!(st->c > 0.0f && st->c <= 1.0f) || !(st->eps > 0.0f))
        return qf_error(QF_ERR_INVALID, "node '%s' (%s): averaging_constant %g must be in (0, 1], eps %g > 0",
                        n->name, qf_op_label(n), st->c, st->eps);
    const int64_t nel = qf_tensor_numel(io->in[1]);
    st->axis = -1;
    st->outer = 1;
    st->ch = 1;
    st->inner = qf_tensor_numel(x);
    if (nel > 1) {
        int64_t axis = qf_node_attr_int(n, "axis", 0);
        if (axis < 0) axis += x->ndim;
        st->axis = (int)axis;
        st->ch = x->dims[axis];
        st->inner = 1;
        for (int d = 0; d < axis; d++) st->outer *= x->dims[d];
        for (int d = (int)axis + 1; d < x->ndim; d++) st->inner *= x->dims[d];
    }
    return QF_OK;
}

/* The observer: min / max of X per channel, moved into the running ones,
 * then the qparams. NaN / Inf in X is an error (an observer fed them would
 * make every later scale meaningless). */
static qf_status fq_observe(const qf_kernel_io *io, const fq_state *st)
{
    const float *x = io->in[0]->data;
    float *scale = (float *)io->in[1]->data, *zp = (float *)io->in[2]->data;
    float *rmin = (float *)io->in[3]->data, *rmax = (float *)io->in[4]->data;
    if (qf_tensor_numel(io->in[0]) == 0) return QF_OK;
    for (int64_t c = 0; c < st->ch; c++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t o = 0; o < st->outer; o++) {
            const float *p = x + (o * st->ch + c) * st->inner;
            for (int64_t i = 0; i < st->inner; i++) {
                mn = p[i] < mn ? p[i] : mn;
                mx = p[i] > mx ? p[i] : mx;
            }
        }
        if (!isfinite(mn) || !isfinite(mx))
            return qf_error(QF_ERR_NUMERIC, "node '%s' (%s): the observed input holds NaN or Inf (channel %lld)",
                            io->node->name, qf_op_label(io->node), (long long)c);
        if (rmin[c] == INFINITY && rmax[c] == -INFINITY) {
            rmin[c] = mn;
            rmax[c] = mx;
        } else {
            rmin[c] = rmin[c] + st->c * (mn - rmin[c]);
            rmax[c] = rmax[c] + st->c * (mx - rmax[c]);
        }
        int32_t z;
        qf_qparams_torch(rmin[c], rmax[c], st->symmetric, st->qmin, st->qmax, st->eps, &scale[c], &z);
        zp[c] = (float)z;
    }
    return QF_OK;
}

typedef struct fq_job {
    const fq_state *st;
    const float *x, *scale, *zp, *dy;
    float *y;
    bool backward;
} fq_job;

/* Rows [o0, o1) of [outer][ch]: fake-quantize (forward) or mask dY (backward). */
static void fq_rows(void *arg, int64_t r0, int64_t r1)
{
    const fq_job *j = arg;
    const fq_state *st = j->st;
    const float lo = (float)st->qmin, hi = (float)st->qmax;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t c = r % st->ch;
        const float s = j->scale[c], inv = 1.0f / s, z = j->zp[c];
        const float *x = j->x + r * st->inner;
        float *y = j->y + r * st->inner;
        if (j->backward) {
            const float *dy = j->dy + r * st->inner;
            for (int64_t i = 0; i < st->inner; i++) {
                float q = z + nearbyintf(x[i] * inv);
                y[i] = q >= lo && q <= hi ? dy[i] : 0.0f;
            }
        } else {
            for (int64_t i = 0; i < st->inner; i++) {
                float q = z + nearbyintf(x[i] * inv);
                q = q < lo ? lo : q > hi ? hi : q;
                y[i] = (q - z) * s;
            }
        }
    }
}

static void fq_run(const qf_kernel_io *io, const fq_state *st, const float *dy, float *y, bool backward)
{
    fq_job j = {st, io->in[0]->data, io->in[1]->data, io->in[2]->data, dy, y, backward};
    int64_t rows = st->outer * st->ch;
    qf_parallel_for(rows, (st->inner > 4096 ? 1 : 4096 / (st->inner ? st->inner : 1)), fq_rows, &j);
}

static qf_status qf_fake_quant_forward_f32(const qf_kernel_io *io)
{
    const fq_state *st = io->state;
    /* observe is read at run time: QAT's --freeze-observers flips it between
     * steps without a new plan. */
    if (io->training && qf_node_attr_int(io->node, "observe", 1)) QF_TRY(fq_observe(io, st));
    if (!st->enabled) {
        memcpy(io->out[0]->data, io->in[0]->data, qf_tensor_nbytes(io->in[0]));
        return QF_OK;
    }
    fq_run(io, st, NULL, io->out[0]->data, false);
    return QF_OK;
}

static qf_status qf_fake_quant_backward_f32(const qf_kernel_io *io)
{
    const fq_state *st = io->state;
    qf_tensor *dx = io->din[0];
    if (!dx) return QF_OK;
    if (!io->dout[0]) {
        memset(dx->data, 0, qf_tensor_nbytes(dx));
        return QF_OK;
    }
    if (!st->enabled) {
        memcpy(dx->data, io->dout[0]->data, qf_tensor_nbytes(dx));
        return QF_OK;
    }
    fq_run(io, st, io->dout[0]->data, dx->data, true);
    return QF_OK;
}

const qf_op_kernels qf_fake_quant_kernels = {
    .infer = qf_fake_quant_infer,
    .prepare = qf_fake_quant_prepare,
    .state_size = sizeof(fq_state),
    .forward_f32 = qf_fake_quant_forward_f32,
    .backward_f32 = qf_fake_quant_backward_f32,
    /* X, and the qparams the forward used (the buffers: read in place). */
    .bwd_in = (1u << 0) | (1u << 1) | (1u << 2),
};
