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
 * (the straight-through estimator with torch's clamp mask). The forward keeps
 * that mask as bits in `saved` (a training plan's forward), so the backward
 * reads dY and the bits and quantizes nothing again. So does a member of a
 * shared-qparams group (one set of buffers for several fake_quants): its
 * backward masks with the scale of its own forward, though a later member's
 * observe has moved the buffers since, as PyTorch FX, which calls one
 * FakeQuantize module per member, keeps each call's mask
 * (tests/train/qat_shared_torch.py). Before anything
 * was observed scale is 1 and zero point 0, as FakeQuantize's initial
 * buffers. Export has no ONNX form for it: QAT's convert turns each into a
 * QuantizeLinear -> DequantizeLinear pair.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/parallel.h"
#include "ops/kernels.h"
#include "ops/math/quant_math.h"
#include "ops/math/vector.h"

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

/* nearbyintf without the call (baseline x86-64 has no rounding instruction,
 * so nearbyintf is a libm call per element, and no loop around it
 * vectorizes): for |v| < 2^23, |v| + 2^23 lies where the float grid is the
 * integers, so the add rounds |v| to an integer in the current rounding mode
 * (to nearest, ties to even: the parity of |v| + 2^23 is that of |v|'s
 * integer part) and the subtraction is exact; the sign goes back on (-0.3
 * gives -0, as nearbyintf). |v| >= 2^23 is an integer already, and NaN / Inf
 * fail the comparison and pass through. Bit-identical to nearbyintf. */
static inline float fq_rint(float v)
{
    const float big = 8388608.0f;
    const float a = fabsf(v), r = copysignf((a + big) - big, v);
    return a < big ? r : v;
}

/* Min / max with NaN skipped (a NaN never compares below or above), over
 * FQ_LANES independent lanes so that the loop is a vector min / max. */
#define FQ_LANES 16
QF_VECTOR_CLONES static void fq_minmax(const float *restrict p, int64_t n, float *mn, float *mx)
{
    float lo[FQ_LANES], hi[FQ_LANES];
    for (int l = 0; l < FQ_LANES; l++) {
        lo[l] = *mn;
        hi[l] = *mx;
    }
    int64_t i = 0;
    for (; i + FQ_LANES <= n; i += FQ_LANES)
        for (int l = 0; l < FQ_LANES; l++) {
            lo[l] = p[i + l] < lo[l] ? p[i + l] : lo[l];
            hi[l] = p[i + l] > hi[l] ? p[i + l] : hi[l];
        }
    float a = *mn, b = *mx;
    for (; i < n; i++) {
        a = p[i] < a ? p[i] : a;
        b = p[i] > b ? p[i] : b;
    }
    for (int l = 0; l < FQ_LANES; l++) {
        a = lo[l] < a ? lo[l] : a;
        b = hi[l] > b ? hi[l] : b;
    }
    *mn = a;
    *mx = b;
}

/* Per-tensor work is cut into pieces of FQ_PIECE elements for the threads;
 * the observer's partial minima / maxima of at most FQ_MAX_PIECES pieces
 * live on the stack (kernels never allocate): bigger tensors get bigger
 * pieces. */
#define FQ_PIECE 16384
#define FQ_MAX_PIECES 256

typedef struct fq_obs_job {
    const float *x;
    int64_t n, piece;
    float *mn, *mx; /* per piece */
} fq_obs_job;

static void fq_obs_pieces(void *arg, int64_t p0, int64_t p1)
{
    const fq_obs_job *j = arg;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t lo = p * j->piece, hi = lo + j->piece < j->n ? lo + j->piece : j->n;
        j->mn[p] = INFINITY;
        j->mx[p] = -INFINITY;
        fq_minmax(j->x + lo, hi - lo, &j->mn[p], &j->mx[p]);
    }
}

/* The observer: min / max of X per channel, moved into the running ones,
 * then the qparams. NaN / Inf in X is an error (an observer fed them would
 * make every later scale meaningless). Per tensor, the threads take pieces
 * of X; min / max are exact, so the order does not matter. */
static qf_status fq_observe(const qf_kernel_io *io, const fq_state *st)
{
    const float *x = io->in[0]->data;
    float *scale = (float *)io->in[1]->data, *zp = (float *)io->in[2]->data;
    float *rmin = (float *)io->in[3]->data, *rmax = (float *)io->in[4]->data;
    const int64_t numel = qf_tensor_numel(io->in[0]);
    if (numel == 0) return QF_OK;
    for (int64_t c = 0; c < st->ch; c++) {
        float mn = INFINITY, mx = -INFINITY;
        if (st->ch == 1 && numel > FQ_PIECE) {
            float pmn[FQ_MAX_PIECES], pmx[FQ_MAX_PIECES];
            int64_t piece = FQ_PIECE;
            while ((numel + piece - 1) / piece > FQ_MAX_PIECES) piece *= 2;
            fq_obs_job j = {x, numel, piece, pmn, pmx};
            const int64_t np = (numel + piece - 1) / piece;
            qf_parallel_for(np, 1, fq_obs_pieces, &j);
            for (int64_t p = 0; p < np; p++) {
                mn = pmn[p] < mn ? pmn[p] : mn;
                mx = pmx[p] > mx ? pmx[p] : mx;
            }
        } else {
            for (int64_t o = 0; o < st->outer; o++) fq_minmax(x + (o * st->ch + c) * st->inner, st->inner, &mn, &mx);
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
    uint32_t *mask; /* forward: written when not NULL; backward: read */
    bool backward;
} fq_job;

/* Element i of a forward with mask bits: Y, and bit i of the mask set when
 * quant_min <= q <= quant_max (the elements whose gradient passes). & (not
 * &&): a branch in the loop stops it from vectorizing. */
#define FQ_ELEM(i)                                                  \
    float q = z + fq_rint(x[i] * inv);                              \
    const uint32_t ok = (uint32_t)((q >= qlo) & (q <= qhi));        \
    q = q < qlo ? qlo : q > qhi ? qhi : q;                          \
    y[i] = (q - z) * s

/* Forward elements [lo, hi) of one channel's run with scale s and zero point
 * z: Y, and when j->mask is set the mask bits of [lo, hi). Whole 32-element
 * words are written at once (the loop vectorizes: a compare per lane, the
 * lanes' bits or-ed into the word); the ends of a run that share a word with
 * the next run (per channel) set their bits one at a time. A word belongs to
 * one thread: the threads take pieces of whole words (fq_pieces). */
QF_VECTOR_CLONES static void fq_span_fwd(const fq_job *j, int64_t lo, int64_t hi, float s, float z)
{
    const float qlo = (float)j->st->qmin, qhi = (float)j->st->qmax, inv = 1.0f / s;
    const float *restrict x = j->x;
    float *restrict y = j->y;
    uint32_t *restrict m = j->mask;
    if (!m) {
        for (int64_t i = lo; i < hi; i++) {
            float q = z + fq_rint(x[i] * inv);
            q = q < qlo ? qlo : q > qhi ? qhi : q;
            y[i] = (q - z) * s;
        }
        return;
    }
    int64_t i = lo;
    for (; i < hi && (i & 31); i++) {
        FQ_ELEM(i);
        m[i >> 5] = (m[i >> 5] & ~(1u << (i & 31))) | ok << (i & 31);
    }
    for (; i + 32 <= hi; i += 32) {
        uint32_t w = 0;
        for (int l = 0; l < 32; l++) {
            FQ_ELEM(i + l);
            w |= ok << l;
        }
        m[i >> 5] = w;
    }
    for (; i < hi; i++) {
        FQ_ELEM(i);
        m[i >> 5] = (m[i >> 5] & ~(1u << (i & 31))) | ok << (i & 31);
    }
}

/* Backward elements [lo, hi): dX = dY where the forward's mask bit is set,
 * 0 elsewhere (the clamp mask of torch's straight-through estimator, as
 * fake_quantize_*_cachemask keeps it). */
QF_VECTOR_CLONES static void fq_span_bwd(const fq_job *j, int64_t lo, int64_t hi)
{
    const uint32_t *restrict m = j->mask;
    const float *restrict dy = j->dy;
    float *restrict dx = j->y;
    int64_t i = lo;
    for (; i < hi && (i & 31); i++) dx[i] = (m[i >> 5] >> (i & 31)) & 1u ? dy[i] : 0.0f;
    for (; i + 32 <= hi; i += 32) {
        const uint32_t w = m[i >> 5];
        for (int l = 0; l < 32; l++) dx[i + l] = (w >> l) & 1u ? dy[i + l] : 0.0f;
    }
    for (; i < hi; i++) dx[i] = (m[i >> 5] >> (i & 31)) & 1u ? dy[i] : 0.0f;
}

/* Pieces [p0, p1) of FQ_PIECE elements (a multiple of 32: whole mask
 * words), per tensor or per channel: the pieces walk the runs of one
 * channel (row r of [outer][ch] is channel r % ch). */
static void fq_pieces(void *arg, int64_t p0, int64_t p1)
{
    const fq_job *j = arg;
    const fq_state *st = j->st;
    const int64_t n = st->outer * st->ch * st->inner, hi = p1 * FQ_PIECE < n ? p1 * FQ_PIECE : n;
    int64_t i = p0 * FQ_PIECE;
    if (j->backward) {
        fq_span_bwd(j, i, hi);
        return;
    }
    while (i < hi) {
        const int64_t r = i / st->inner, c = st->ch == 1 ? 0 : r % st->ch;
        const int64_t end = st->ch == 1 ? hi : (r + 1) * st->inner < hi ? (r + 1) * st->inner : hi;
        fq_span_fwd(j, i, end, j->scale[c], j->zp[c]);
        i = end;
    }
}

static void fq_run(const qf_kernel_io *io, const fq_state *st, const float *dy, float *y, bool backward)
{
    fq_job j = {st, io->in[0]->data, io->in[1]->data, io->in[2]->data, dy, y, io->saved, backward};
    const int64_t n = st->outer * st->ch * st->inner;
    qf_parallel_for((n + FQ_PIECE - 1) / FQ_PIECE, 1, fq_pieces, &j);
}

/* `saved`: the forward's mask, a bit per element of X (element i: bit i % 32
 * of word i / 32) in X's memory order, which is dY's (a training plan lays a
 * value and its gradient out alike). */
static size_t qf_fake_quant_saved(const qf_node *n, const void *state)
{
    (void)n;
    const fq_state *st = state;
    const int64_t numel = st ? st->outer * st->ch * st->inner : 0;
    return numel > 0 ? (size_t)(numel + 31) / 32 * sizeof(uint32_t) : 0;
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
    if (qf_tensor_numel(dx) == 0) return QF_OK;
    if (!io->saved)
        return qf_error(QF_ERR_INTERNAL, "node '%s' (%s): backward without the forward's mask", io->node->name,
                        qf_op_label(io->node));
    fq_run(io, st, io->dout[0]->data, dx->data, true);
    return QF_OK;
}

const qf_op_kernels qf_fake_quant_kernels = {
    .infer = qf_fake_quant_infer,
    .prepare = qf_fake_quant_prepare,
    .state_size = sizeof(fq_state),
    .forward_f32 = qf_fake_quant_forward_f32,
    .backward_f32 = qf_fake_quant_backward_f32,
    /* The backward reads dY and the mask in `saved`, no input: X need not
     * live until then. */
    .bwd_in = 0,
    .saved_size = qf_fake_quant_saved,
};
