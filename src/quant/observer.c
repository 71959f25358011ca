/* Observers: min/max, moving-average min/max, per-channel min/max and the
 * histogram observer with its L2 range search — PyTorch 1.13's
 * torch.ao.quantization.observer, step for step, so that qfold's qparams are
 * the ones a PyTorch user gets for the same tensors.
 *
 * Arithmetic: where torch keeps a float32 tensor (min_val, max_val, scale)
 * this code keeps a float and computes in float, so the qparams agree to
 * the bit; histogram counts and the search's error sums are doubles (torch's
 * are float32 tensors summed in float32: the difference moves the chosen
 * range by at most a bin in rare ties, well inside one quantization step).
 *
 * One deliberate difference: torch 1.13's HistogramObserver.forward passes
 * int(min) and int(max) to torch.histc, so a range such as [-0.7, 2.3] is
 * binned over [0, 2] while the bin width is taken from [-0.7, 2.3]; values
 * outside the truncated range are dropped. qfold bins over the real range
 * (what later PyTorch releases do). The two agree whenever the range's ends
 * are integers or lie inside (-1, 1) on the first batch.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "ops/math/quant_math.h"
#include "qfold/quant.h"

struct qf_observer {
    qf_observer_config cfg;
    int nch;          /* channels seen (1 for per-tensor observers once updated) */
    bool seen;
    float *min, *max; /* nch entries (per tensor: 1) */
    double *hist;     /* histogram: cfg.bins counts over [min[0], max[0]] */
};

qf_observer_config qf_observer_config_default(qf_observer_kind kind)
{
    return (qf_observer_config){.kind = kind, .scheme = QF_QSCHEME_AFFINE, .qmin = -128, .qmax = 127,
                                .eps = FLT_EPSILON, .averaging_constant = 0.01f, .ch_axis = 0,
                                .bins = 2048, .upsample_rate = 128};
}

qf_status qf_observer_init(qf_observer **out, const qf_observer_config *cfg)
{
    *out = NULL;
    if (cfg->kind < QF_OBSERVER_MIN_MAX || cfg->kind > QF_OBSERVER_HISTOGRAM)
        return qf_error(QF_ERR_INVALID, "observer: unknown kind %d", (int)cfg->kind);
    if (cfg->qmin >= cfg->qmax)
        return qf_error(QF_ERR_INVALID, "observer: quantized range [%d, %d] is empty", (int)cfg->qmin,
                        (int)cfg->qmax);
    if (!(cfg->eps > 0.0f) || !isfinite(cfg->eps))
        return qf_error(QF_ERR_INVALID, "observer: eps must be a positive number");
    if (cfg->kind == QF_OBSERVER_MOVING_AVERAGE && !(cfg->averaging_constant > 0.0f && cfg->averaging_constant <= 1.0f))
        return qf_error(QF_ERR_INVALID, "observer: averaging constant %g is not in (0, 1]",
                        (double)cfg->averaging_constant);
    if (cfg->kind == QF_OBSERVER_HISTOGRAM && (cfg->bins < 2 || cfg->bins > (1 << 20) || cfg->upsample_rate < 1 ||
                                               cfg->upsample_rate > (1 << 16)))
        return qf_error(QF_ERR_INVALID, "observer: histogram with %d bins, upsample rate %d", cfg->bins,
                        cfg->upsample_rate);
    if (cfg->kind == QF_OBSERVER_HISTOGRAM && cfg->scheme != QF_QSCHEME_AFFINE &&
        cfg->scheme != QF_QSCHEME_SYMMETRIC)
        return qf_error(QF_ERR_INVALID, "observer: unknown scheme %d", (int)cfg->scheme);
    if (cfg->kind == QF_OBSERVER_PER_CHANNEL && (cfg->ch_axis < 0 || cfg->ch_axis >= QF_MAX_DIMS))
        return qf_error(QF_ERR_INVALID, "observer: channel axis %d", cfg->ch_axis);
    qf_observer *o = qf_calloc(1, sizeof *o);
    if (!o) return QF_ERR_NOMEM;
    o->cfg = *cfg;
    if (cfg->kind != QF_OBSERVER_PER_CHANNEL) {
        o->min = qf_malloc(sizeof *o->min);
        o->max = qf_malloc(sizeof *o->max);
        if (cfg->kind == QF_OBSERVER_HISTOGRAM) o->hist = qf_calloc((size_t)cfg->bins, sizeof *o->hist);
        if (!o->min || !o->max || (cfg->kind == QF_OBSERVER_HISTOGRAM && !o->hist)) {
            qf_observer_free(o);
            return QF_ERR_NOMEM;
        }
        o->min[0] = INFINITY;
        o->max[0] = -INFINITY;
        o->nch = 1;
    }
    *out = o;
    return QF_OK;
}

void qf_observer_free(qf_observer *o)
{
    if (!o) return;
    qf_free(o->min);
    qf_free(o->max);
    qf_free(o->hist);
    qf_free(o);
}

int qf_observer_channels(const qf_observer *o) { return o->nch; }

bool qf_observer_seen(const qf_observer *o) { return o->seen; }

/* --- qparams ------------------------------------------------------------------ */

qf_qparams qf_qparams_from_range(float min, float max, qf_qscheme scheme, int32_t qmin, int32_t qmax, float eps)
{
    qf_qparams qp;
    qf_qparams_torch(min, max, scheme == QF_QSCHEME_SYMMETRIC, qmin, qmax, eps, &qp.scale, &qp.zero_point);
    return qp;
}

/* --- min / max ---------------------------------------------------------------- */

/* min and max of n floats; QF_ERR_NUMERIC on NaN / Inf (the first one's
 * index). The scan the error needs runs only when a block holds one. */
static qf_status obs_minmax_scalar(const float *x, int64_t n, float *mn, float *mx)
{
    float a = INFINITY, b = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (!isfinite(v))
            return qf_error(QF_ERR_NUMERIC, "observer: element %lld is %s", (long long)i,
                            isnan(v) ? "NaN" : "infinite");
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    *mn = a;
    *mx = b;
    return QF_OK;
}

#define OBS_LANES 16

/* The same in OBS_LANES independent lanes (branch-free, so it vectorizes);
 * a non-finite element (every exponent bit set) sends the whole tensor to
 * the scalar loop for the error and its index. Min and max of finite values
 * do not depend on the order (but for the sign of a zero: -0 and +0 give
 * the same qparams and histogram). */
static qf_status obs_minmax(const float *x, int64_t n, float *mn, float *mx)
{
    float lo[OBS_LANES], hi[OBS_LANES];
    for (int j = 0; j < OBS_LANES; j++) {
        lo[j] = INFINITY;
        hi[j] = -INFINITY;
    }
    const int64_t block = 64 * OBS_LANES;
    int64_t i = 0;
    for (; i + block <= n; i += block) {
        uint32_t bad[OBS_LANES] = {0};
        for (int64_t k = i; k < i + block; k += OBS_LANES)
            for (int j = 0; j < OBS_LANES; j++) {
                float v = x[k + j];
                uint32_t bits;
                memcpy(&bits, &v, sizeof bits);
                bad[j] |= (bits & 0x7f800000u) == 0x7f800000u;
                lo[j] = v < lo[j] ? v : lo[j];
                hi[j] = v > hi[j] ? v : hi[j];
            }
        uint32_t any = 0;
        for (int j = 0; j < OBS_LANES; j++) any |= bad[j];
        if (any) return obs_minmax_scalar(x, n, mn, mx);
    }
    float a = INFINITY, b = -INFINITY;
    if (i < n) {
        qf_status st = obs_minmax_scalar(x + i, n - i, &a, &b);
        if (st != QF_OK) return obs_minmax_scalar(x, n, mn, mx); /* the index in the whole tensor */
    }
    for (int j = 0; j < OBS_LANES; j++) {
        a = lo[j] < a ? lo[j] : a;
        b = hi[j] > b ? hi[j] : b;
    }
    *mn = a;
    *mx = b;
    return QF_OK;
}

/* obs_minmax over a large tensor in slices on the threads (calibration
 * observes every activation on the calling thread otherwise, while the
 * other threads wait): min / max of the slices' min / max are the same
 * values in any order. A slice with a NaN / Inf sends the whole tensor to
 * the scalar loop, for the error with its index in the tensor. */
#define OBS_MINMAX_GRAIN ((int64_t)1 << 16)

typedef struct minmax_job {
    const float *x;
    int64_t n, per;
    float *lo, *hi;
    qf_status *st;
} minmax_job;

static void minmax_slices(void *ctx, int64_t lo, int64_t hi)
{
    const minmax_job *j = ctx;
    for (int64_t k = lo; k < hi; k++) {
        int64_t a = k * j->per, b = a + j->per < j->n ? a + j->per : j->n;
        j->st[k] = obs_minmax(j->x + a, b - a, &j->lo[k], &j->hi[k]);
    }
}

enum { OBS_MINMAX_MAX_SLICES = 64 };

static qf_status obs_minmax_par(const float *x, int64_t n, float *mn, float *mx)
{
    int64_t nslices = qf_parallel_threads();
    if (nslices > OBS_MINMAX_MAX_SLICES) nslices = OBS_MINMAX_MAX_SLICES;
    if (n / OBS_MINMAX_GRAIN < nslices) nslices = n / OBS_MINMAX_GRAIN;
    if (nslices < 2) return obs_minmax(x, n, mn, mx);
    float lo[OBS_MINMAX_MAX_SLICES], hi[OBS_MINMAX_MAX_SLICES];
    qf_status st[OBS_MINMAX_MAX_SLICES];
    minmax_job j = {x, n, (n + nslices - 1) / nslices, lo, hi, st};
    qf_parallel_for(nslices, 1, minmax_slices, &j);
    float a = INFINITY, b = -INFINITY;
    for (int64_t k = 0; k < nslices; k++) {
        if (st[k] != QF_OK) return obs_minmax_scalar(x, n, mn, mx);
        a = lo[k] < a ? lo[k] : a;
        b = hi[k] > b ? hi[k] : b;
    }
    *mn = a;
    *mx = b;
    return QF_OK;
}

/* Per channel: x viewed as [outer, C, inner], channel c's min and max. */
static qf_status obs_update_per_channel(qf_observer *o, const qf_tensor *x, const float *d)
{
    int axis = o->cfg.ch_axis;
    if (axis >= x->ndim)
        return qf_error(QF_ERR_SHAPE, "observer: per-channel axis %d, but the tensor has rank %d", axis, x->ndim);
    int64_t c = x->dims[axis], outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= x->dims[i];
    for (int i = axis + 1; i < x->ndim; i++) inner *= x->dims[i];
    if (c > (1 << 24)) return qf_error(QF_ERR_SHAPE, "observer: %lld channels", (long long)c);
    if (o->nch == 0) {
        o->min = qf_malloc(sizeof *o->min * (size_t)c);
        o->max = qf_malloc(sizeof *o->max * (size_t)c);
        if (!o->min || !o->max) {
            qf_free(o->min);
            qf_free(o->max);
            o->min = o->max = NULL;
            return QF_ERR_NOMEM;
        }
        for (int64_t k = 0; k < c; k++) {
            o->min[k] = INFINITY;
            o->max[k] = -INFINITY;
        }
        o->nch = (int)c;
    } else if (o->nch != c) {
        return qf_error(QF_ERR_SHAPE, "observer: %lld channels on axis %d, earlier tensors had %d", (long long)c,
                        axis, o->nch);
    }
    for (int64_t a = 0; a < outer; a++)
        for (int64_t k = 0; k < c; k++) {
            float mn, mx;
            QF_TRY(obs_minmax(d + (a * c + k) * inner, inner, &mn, &mx));
            o->min[k] = mn < o->min[k] ? mn : o->min[k];
            o->max[k] = mx > o->max[k] ? mx : o->max[k];
        }
    return QF_OK;
}

/* --- histogram ---------------------------------------------------------------- */

/* torch.histc over [lo, hi]: bin = (int)((v - lo) * bins / (hi - lo)) in
 * float, the right edge into the last bin, values outside dropped. Bin
 * indices a block at a time (the same float arithmetic, division included,
 * as one element at a time, but vectorized), then counted into `counts`.
 * The clamp to [0, bins - 1] happens in float before the conversion, which
 * truncates to the same index as clamping after it. */
static void hist_count(int64_t *counts, int bins, const float *x, int64_t n, float lo, float hi)
{
    float width = hi - lo, fbins = (float)bins, top = (float)(bins - 1);
    enum { BLOCK = 256 };
    int32_t pos[BLOCK];
    for (int64_t i = 0; i < n; i += BLOCK) {
        int m = n - i < BLOCK ? (int)(n - i) : BLOCK;
        const float *v = x + i;
        for (int j = 0; j < m; j++) {
            float f = (v[j] - lo) * fbins / width;
            f = f < 0.0f ? 0.0f : f;
            f = f > top ? top : f;
            int32_t p = (int32_t)f;
            pos[j] = (v[j] < lo || v[j] > hi) ? -1 : p;
        }
        for (int j = 0; j < m; j++)
            if (pos[j] >= 0) counts[pos[j]]++;
    }
}

/* Slices of a large tensor counted on the threads, each into its own row of
 * counts (integers: the sums are exact in any order, so the histogram is
 * the one a single thread makes, to the bit). */
#define HIST_GRAIN ((int64_t)1 << 16)
typedef struct hist_job {
    int64_t *counts; /* nslices rows of bins */
    int bins;
    const float *x;
    int64_t n, slice;
    float lo, hi;
} hist_job;

static void hist_slices(void *ctx, int64_t a, int64_t b)
{
    const hist_job *j = ctx;
    for (int64_t k = a; k < b; k++) {
        int64_t first = k * j->slice, m = j->n - first < j->slice ? j->n - first : j->slice;
        hist_count(j->counts + k * j->bins, j->bins, j->x + first, m, j->lo, j->hi);
    }
}

static void hist_add(double *hist, int bins, const float *x, int64_t n, float lo, float hi)
{
    if (!(hi > lo)) {
        /* A single value (all elements equal): torch widens to [v-1, v+1];
         * every element lands in the middle bin. */
        hist[bins / 2] += (double)n;
        return;
    }
    int64_t nslices = qf_parallel_threads();
    if (n / HIST_GRAIN < nslices) nslices = n / HIST_GRAIN;
    if (nslices < 1) nslices = 1;
    int64_t *counts = qf_calloc((size_t)nslices * (size_t)bins, sizeof *counts);
    if (!counts) { /* no room for the rows: one element at a time, straight into hist */
        qf_error_clear();
        float width = hi - lo, fbins = (float)bins, top = (float)(bins - 1);
        for (int64_t i = 0; i < n; i++) {
            float f = (x[i] - lo) * fbins / width;
            f = f < 0.0f ? 0.0f : f;
            f = f > top ? top : f;
            if (!(x[i] < lo || x[i] > hi)) hist[(int32_t)f] += 1.0;
        }
        return;
    }
    hist_job j = {counts, bins, x, n, (n + nslices - 1) / nslices, lo, hi};
    if (nslices == 1) hist_slices(&j, 0, 1);
    else qf_parallel_for(nslices, 1, hist_slices, &j);
    for (int b = 0; b < bins; b++) {
        int64_t t = 0;
        for (int64_t k = 0; k < nslices; k++) t += counts[k * bins + b];
        hist[b] += (double)t;
    }
    qf_free(counts);
}

/* torch's _combine_histograms without materializing the upsampled grid:
 * the old histogram, each bin spread over `up` cells of the fine grid and
 * placed at cell `start`, summed into `bins` output bins of `down` cells
 * each, divided by `up`, added to out. */
static void hist_combine(double *out, const double *old, int bins, int64_t up, int64_t down, int64_t start)
{
    int64_t end = start + (int64_t)bins * up; /* fine cells [start, end) hold the old bins */
    int64_t limit = (int64_t)bins * down;
    if (end > limit) end = limit;
    for (int j = 0; j < bins; j++) {
        int64_t lo = (int64_t)j * down, hi = lo + down;
        if (lo < start) lo = start;
        if (hi > end) hi = end;
        double sum = 0.0;
        while (lo < hi) {
            int64_t b = (lo - start) / up;
            int64_t cell_end = start + (b + 1) * up;
            int64_t stop = cell_end < hi ? cell_end : hi;
            sum += old[b] * (double)(stop - lo);
            lo = stop;
        }
        out[j] += sum / (double)up;
    }
}

static qf_status obs_update_histogram(qf_observer *o, const float *d, int64_t n, float mn, float mx)
{
    int bins = o->cfg.bins;
    float omin = o->min[0], omax = o->max[0];
    if (!o->seen || omin == omax) {
        o->min[0] = mn;
        o->max[0] = mx;
        memset(o->hist, 0, sizeof *o->hist * (size_t)bins);
        hist_add(o->hist, bins, d, n, mn, mx);
        return QF_OK;
    }
    float cmin = mn < omin ? mn : omin, cmax = mx > omax ? mx : omax;
    /* _adjust_min_max: a grid of `up` cells per old bin; the combined range
     * is widened at the top to a whole number of `down` cells per new bin. */
    int64_t up = o->cfg.upsample_rate;
    float hbw = (omax - omin) / (float)((int64_t)bins * up);
    double down_f = ceil((double)((cmax - cmin) / ((float)bins * hbw)));
    if (!(down_f >= 1.0) || down_f > 1e12)
        return qf_error(QF_ERR_NUMERIC, "observer: histogram range [%g, %g] cannot be merged with [%g, %g]",
                        (double)omin, (double)omax, (double)mn, (double)mx);
    int64_t down = (int64_t)down_f;
    float e = (float)down * ((float)bins * hbw) - (cmax - cmin);
    cmax = cmax + e;
    int64_t start = (int64_t)qf_round_half_even_f32((omin - cmin) / hbw);
    double *fresh = qf_calloc((size_t)bins, sizeof *fresh);
    if (!fresh) return QF_ERR_NOMEM;
    hist_add(fresh, bins, d, n, cmin, cmax);
    if (cmin == omin && cmax == omax) {
        for (int i = 0; i < bins; i++) fresh[i] += o->hist[i];
    } else {
        hist_combine(fresh, o->hist, bins, up, down, start);
    }
    qf_free(o->hist);
    o->hist = fresh;
    o->min[0] = cmin;
    o->max[0] = cmax;
    return QF_OK;
}

qf_status qf_observer_update(qf_observer *o, const qf_tensor *x)
{
    if (x->dtype != QF_DTYPE_F32)
        return qf_error(QF_ERR_UNSUPPORTED, "observer: tensor has dtype %s, expected float32",
                        qf_dtype_name(x->dtype));
    int64_t n = qf_tensor_numel(x);
    if (n < 0) return qf_error(QF_ERR_SHAPE, "observer: tensor with unknown shape");
    if (n == 0) return QF_OK;
    const float *d = x->data;
    if (o->cfg.kind == QF_OBSERVER_PER_CHANNEL) {
        QF_TRY(obs_update_per_channel(o, x, d));
        o->seen = true;
        return QF_OK;
    }
    float mn, mx;
    QF_TRY(obs_minmax_par(d, n, &mn, &mx));
    switch (o->cfg.kind) {
    case QF_OBSERVER_MIN_MAX:
        o->min[0] = mn < o->min[0] ? mn : o->min[0];
        o->max[0] = mx > o->max[0] ? mx : o->max[0];
        break;
    case QF_OBSERVER_MOVING_AVERAGE:
        if (!o->seen) {
            o->min[0] = mn;
            o->max[0] = mx;
        } else {
            float c = o->cfg.averaging_constant;
            o->min[0] = o->min[0] + c * (mn - o->min[0]);
            o->max[0] = o->max[0] + c * (mx - o->max[0]);
        }
        break;
    case QF_OBSERVER_HISTOGRAM:
        QF_TRY(obs_update_histogram(o, d, n, mn, mx));
        break;
    case QF_OBSERVER_PER_CHANNEL:
        break;
    }
    o->seen = true;
    return QF_OK;
}

/* Resample histogram h over [lo, hi] onto `out` over [nlo, nhi] (same bin
 * count), spreading each bin's count uniformly over its width. */
static void hist_resample(double *out, const double *h, int bins, double lo, double hi, double nlo, double nhi)
{
    double w = (hi - lo) / bins, nw = (nhi - nlo) / bins;
    if (!(w > 0.0) || !(nw > 0.0)) {
        double total = 0.0;
        for (int i = 0; i < bins; i++) total += h[i];
        int k = nw > 0.0 ? (int)((lo - nlo) / nw) : bins / 2;
        out[k < 0 ? 0 : k >= bins ? bins - 1 : k] += total;
        return;
    }
    for (int i = 0; i < bins; i++) {
        if (h[i] == 0.0) continue;
        double a = lo + i * w, b = a + w;
        int j0 = (int)floor((a - nlo) / nw), j1 = (int)floor((b - nlo) / nw);
        if (j0 < 0) j0 = 0;
        if (j1 >= bins) j1 = bins - 1;
        for (int j = j0; j <= j1; j++) {
            double ca = nlo + j * nw, cb = ca + nw;
            double ov = (b < cb ? b : cb) - (a > ca ? a : ca);
            if (ov > 0.0) out[j] += h[i] * ov / w;
        }
    }
}

qf_status qf_observer_merge(qf_observer *dst, const qf_observer *src)
{
    if (dst->cfg.kind != src->cfg.kind)
        return qf_error(QF_ERR_INVALID, "observer: cannot merge observers of different kinds");
    if (!src->seen) return QF_OK;
    if (!dst->seen && dst->cfg.kind != QF_OBSERVER_HISTOGRAM) {
        if (dst->cfg.kind == QF_OBSERVER_PER_CHANNEL) {
            dst->min = qf_malloc(sizeof *dst->min * (size_t)src->nch);
            dst->max = qf_malloc(sizeof *dst->max * (size_t)src->nch);
            if (!dst->min || !dst->max) {
                qf_free(dst->min);
                qf_free(dst->max);
                dst->min = dst->max = NULL;
                return QF_ERR_NOMEM;
            }
            dst->nch = src->nch;
        }
        memcpy(dst->min, src->min, sizeof *dst->min * (size_t)src->nch);
        memcpy(dst->max, src->max, sizeof *dst->max * (size_t)src->nch);
        dst->seen = true;
        return QF_OK;
    }
    if (dst->nch != src->nch)
        return qf_error(QF_ERR_SHAPE, "observer: cannot merge %d channels with %d", src->nch, dst->nch);
    if (dst->cfg.kind != QF_OBSERVER_HISTOGRAM) {
        for (int k = 0; k < dst->nch; k++) {
            dst->min[k] = src->min[k] < dst->min[k] ? src->min[k] : dst->min[k];
            dst->max[k] = src->max[k] > dst->max[k] ? src->max[k] : dst->max[k];
        }
        return QF_OK;
    }
    if (dst->cfg.bins != src->cfg.bins)
        return qf_error(QF_ERR_INVALID, "observer: cannot merge histograms of %d and %d bins", src->cfg.bins,
                        dst->cfg.bins);
    int bins = dst->cfg.bins;
    float lo = dst->seen && dst->min[0] < src->min[0] ? dst->min[0] : src->min[0];
    float hi = dst->seen && dst->max[0] > src->max[0] ? dst->max[0] : src->max[0];
    double *h = qf_calloc((size_t)bins, sizeof *h);
    if (!h) return QF_ERR_NOMEM;
    if (dst->seen) hist_resample(h, dst->hist, bins, dst->min[0], dst->max[0], lo, hi);
    hist_resample(h, src->hist, bins, src->min[0], src->max[0], lo, hi);
    qf_free(dst->hist);
    dst->hist = h;
    dst->min[0] = lo;
    dst->max[0] = hi;
    dst->seen = true;
    return QF_OK;
}

/* --- the histogram's L2 range search (torch _non_linear_param_search) -------- */

/* density * integral_{a}^{b} x^2 dx */
static double l2_norm(double a, double b, double density) { return density * (b * b * b - a * a * a) / 3.0; }

/* torch _compute_quantization_error: the L2 error of quantizing the
 * histogram with `dst` levels spread over bins [first, last]. */
static double hist_error(const double *hist, int bins, double bin_width, int dst, int first, int last)
{
    double dst_w = bin_width * (last - first + 1) / dst;
    if (dst_w == 0.0) return 0.0;
    double norm = 0.0;
    for (int i = 0; i < bins; i++) {
        if (hist[i] == 0.0) continue;
        double begin = (i - first) * bin_width, end = begin + bin_width;
        double db = floor(begin / dst_w), de = floor(end / dst_w);
        db = db < 0 ? 0 : db > dst - 1 ? dst - 1 : db;
        de = de < 0 ? 0 : de > dst - 1 ? dst - 1 : de;
        double density = hist[i] / bin_width;
        double b_center = (db + 0.5) * dst_w, e_center = de * dst_w + dst_w / 2;
        norm += l2_norm(begin - b_center, dst_w / 2, density);
        norm += (de - db - 1) * l2_norm(-dst_w / 2, dst_w / 2, density);
        norm += l2_norm(-dst_w / 2, end - e_center, density);
    }
    return norm;
}

static void hist_search(const qf_observer *o, float *new_min, float *new_max)
{
    int bins = o->cfg.bins;
    float mn = o->min[0], mx = o->max[0];
    float bin_width = (mx - mn) / (float)bins;
    if (!(bin_width > 0.0f)) {
        *new_min = mn;
        *new_max = mx;
        return;
    }
    double *csum = qf_malloc(sizeof *csum * (size_t)bins);
    if (!csum) {
        /* Out of memory for the search: the full range is a valid answer. */
        *new_min = mn;
        *new_max = mx;
        return;
    }
    double total = 0.0;
    for (int i = 0; i < bins; i++) csum[i] = total += o->hist[i];
    int dst = o->cfg.qmax - o->cfg.qmin + 1;
    /* torch: dst_nbins = 2^bits of the dtype (256 for 8 bits) */
    int bits = 0;
    while ((1 << bits) < dst && bits < 30) bits++;
    dst = 1 << bits;
    const double step = 1e-5;
    double alpha = 0.0, beta = 1.0, norm_min = INFINITY;
    int start = 0, end = bins - 1, l = 0, r = bins - 1;
    while (alpha < beta) {
        double na = alpha + step, nb = beta - step;
        /* The quantile bounds only grow inward and start/end only move
         * inward, so the scans resume where the last one stopped. */
        if (l < start) l = start;
        if (l > end) l = end;
        if (r > end) r = end;
        if (r < start) r = start;
        while (l < end && csum[l] < na * total) l++;
        while (r > start && csum[r] > nb * total) r--;
        int ns = start, ne = end;
        if (l - start > end - r) {
            ns = l;
            alpha = na;
        } else {
            ne = r;
            beta = nb;
        }
        if (ns == start && ne == end) continue;
        double norm = hist_error(o->hist, bins, (double)(mx - mn) / bins, dst, ns, ne);
        if (norm > norm_min) break;
        norm_min = norm;
        start = ns;
        end = ne;
    }
    qf_free(csum);
    *new_min = mn + bin_width * (float)start;
    *new_max = mn + bin_width * (float)(end + 1);
}

qf_status qf_observer_range(const qf_observer *o, float *min, float *max, int n)
{
    if (n != o->nch)
        return qf_error(QF_ERR_INVALID, "observer: asked for %d channels, it has %d", n, o->nch);
    if (o->cfg.kind == QF_OBSERVER_HISTOGRAM && o->seen) {
        hist_search(o, &min[0], &max[0]);
        return QF_OK;
    }
    for (int k = 0; k < n; k++) {
        min[k] = o->min[k];
        max[k] = o->max[k];
    }
    return QF_OK;
}

qf_status qf_observer_result(const qf_observer *o, qf_qparams *qp, float *min, float *max, int n)
{
    if (n != o->nch)
        return qf_error(QF_ERR_INVALID, "observer: asked for %d channels, it has %d", n, o->nch);
    const qf_observer_config *c = &o->cfg;
    for (int k = 0; k < n; k++) {
        float mn = o->seen ? o->min[k] : INFINITY, mx = o->seen ? o->max[k] : -INFINITY;
        /* the histogram's range: the L2 search, once */
        if (c->kind == QF_OBSERVER_HISTOGRAM && o->seen) hist_search(o, &mn, &mx);
        /* nothing seen: min > max, torch's default qparams */
        qp[k] = qf_qparams_from_range(mn, mx, c->scheme, c->qmin, c->qmax, c->eps);
        if (min) min[k] = mn;
        if (max) max[k] = mx;
    }
    return QF_OK;
}

qf_status qf_observer_qparams(const qf_observer *o, qf_qparams *qp, int n)
{
    return qf_observer_result(o, qp, NULL, NULL, n);
}
