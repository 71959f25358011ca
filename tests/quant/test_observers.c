/* Observers (src/quant/observer.c).
 *
 *   test_observers            unit checks: qparams formulas, bad configs, NaN, merge
 *   test_observers DIR        against PyTorch 1.13 (DIR from observers_ref.py): every
 *                             min/max, moving-average and per-channel case to the bit,
 *                             every histogram case within one quantization step
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/io.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"

static qf_observer *make(qf_observer_kind kind, qf_qscheme scheme, int32_t qmin, int32_t qmax)
{
    qf_observer_config c = qf_observer_config_default(kind);
    c.scheme = scheme;
    c.qmin = qmin;
    c.qmax = qmax;
    qf_observer *o = NULL;
    if (qf_observer_init(&o, &c) != QF_OK) abort();
    return o;
}

static qf_tensor vec(float *d, int64_t n)
{
    qf_tensor t;
    qf_tensor_view(&t, QF_DTYPE_F32, 1, &n, d);
    return t;
}

static void test_qparams_formulas(void)
{
    /* affine int8: scale (max - min) / 255, zp = -128 - round(min / scale) */
    qf_qparams q = qf_qparams_from_range(-1.0f, 3.0f, QF_QSCHEME_AFFINE, -128, 127, FLT_EPSILON);
    CHECK(q.scale == 4.0f / 255.0f);
    CHECK(q.zero_point == -128 + 64); /* round(-1 / (4/255)) = round(-63.75) = -64 */
    /* the range always holds 0 */
    q = qf_qparams_from_range(2.0f, 3.0f, QF_QSCHEME_AFFINE, -128, 127, FLT_EPSILON);
    CHECK(q.scale == 3.0f / 255.0f && q.zero_point == -128);
    q = qf_qparams_from_range(-3.0f, -2.0f, QF_QSCHEME_AFFINE, -128, 127, FLT_EPSILON);
    CHECK(q.scale == 3.0f / 255.0f && q.zero_point == 127);
    /* symmetric [-127, 127]: max(|min|, |max|) / 127, zp 0 */
    q = qf_qparams_from_range(-0.5f, 2.54f, QF_QSCHEME_SYMMETRIC, -127, 127, FLT_EPSILON);
    CHECK(q.scale == 2.54f / 127.0f && q.zero_point == 0);
    /* symmetric [-128, 127]: / 127.5 */
    q = qf_qparams_from_range(-2.0f, 1.0f, QF_QSCHEME_SYMMETRIC, -128, 127, FLT_EPSILON);
    CHECK(q.scale == 2.0f / 127.5f && q.zero_point == 0);
    /* symmetric uint8: zero point 128 */
    q = qf_qparams_from_range(-2.0f, 1.0f, QF_QSCHEME_SYMMETRIC, 0, 255, FLT_EPSILON);
    CHECK(q.zero_point == 128);
    /* an all-zero range: scale eps (a profile's floor), zp in range */
    q = qf_qparams_from_range(0.0f, 0.0f, QF_QSCHEME_AFFINE, -128, 127, 0x1p-12f);
    CHECK(q.scale == 0x1p-12f && q.zero_point == -128);
    /* nothing observed: torch's defaults */
    q = qf_qparams_from_range(INFINITY, -INFINITY, QF_QSCHEME_AFFINE, -128, 127, FLT_EPSILON);
    CHECK(q.scale == 1.0f && q.zero_point == 0);
}

static void test_bad_config(void)
{
    qf_observer *o = NULL;
    qf_observer_config c = qf_observer_config_default(QF_OBSERVER_MIN_MAX);
    c.qmin = 5;
    c.qmax = 5;
    CHECK_STATUS(qf_observer_init(&o, &c), QF_ERR_INVALID);
    CHECK_MSG("empty");
    CHECK(o == NULL);
    c = qf_observer_config_default(QF_OBSERVER_HISTOGRAM);
    c.bins = 1;
    CHECK_STATUS(qf_observer_init(&o, &c), QF_ERR_INVALID);
    c = qf_observer_config_default(QF_OBSERVER_MOVING_AVERAGE);
    c.averaging_constant = 0.0f;
    CHECK_STATUS(qf_observer_init(&o, &c), QF_ERR_INVALID);
    c = qf_observer_config_default(QF_OBSERVER_MIN_MAX);
    c.eps = 0.0f;
    CHECK_STATUS(qf_observer_init(&o, &c), QF_ERR_INVALID);
}

static void test_refuses_nan_and_other_dtypes(void)
{
    qf_observer *o = make(QF_OBSERVER_HISTOGRAM, QF_QSCHEME_AFFINE, -128, 127);
    float d[4] = {1.0f, NAN, 2.0f, 3.0f};
    qf_tensor t = vec(d, 4);
    CHECK_STATUS(qf_observer_update(o, &t), QF_ERR_NUMERIC);
    CHECK_MSG("element 1 is NaN");
    d[1] = INFINITY;
    CHECK_STATUS(qf_observer_update(o, &t), QF_ERR_NUMERIC);
    CHECK_MSG("infinite");
    CHECK(!qf_observer_seen(o));
    /* A large tensor is scanned in slices on the threads: its range, and a
     * NaN deep in the last slice reported at its index in the tensor. */
    enum { BIG = 5 << 16 };
    float *big = qf_malloc(sizeof *big * BIG);
    REQUIRE(big, "alloc");
    for (int i = 0; i < BIG; i++) big[i] = (float)(((int64_t)i * 7919) % 10007) * 1e-3f - 3.0f;
    big[4 * 65536 + 17] = 9.5f;
    big[3] = -4.25f;
    int64_t nbig = BIG;
    qf_tensor tb;
    qf_tensor_view(&tb, QF_DTYPE_F32, 1, &nbig, big);
    qf_observer *mm = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    CHECK_OK(qf_observer_update(mm, &tb)); /* 2 threads (main): two slices */
    float lo = 0, hi = 0;
    CHECK_OK(qf_observer_range(mm, &lo, &hi, 1));
    CHECKF(lo == -4.25f && hi == 9.5f, "range [%g, %g], want [-4.25, 9.5]", lo, hi);
    big[BIG - 100] = NAN;
    CHECK_STATUS(qf_observer_update(mm, &tb), QF_ERR_NUMERIC);
    CHECK_MSG("element 327580 is NaN");
    qf_observer_free(mm);
    qf_free(big);
    int8_t q[2] = {1, 2};
    int64_t two = 2;
    qf_tensor_view(&t, QF_DTYPE_I8, 1, &two, q);
    CHECK_STATUS(qf_observer_update(o, &t), QF_ERR_UNSUPPORTED);
    qf_observer_free(o);
}

static void test_empty_and_unseen(void)
{
    qf_observer *o = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    qf_tensor t = vec(NULL, 0);
    CHECK_OK(qf_observer_update(o, &t));
    CHECK(!qf_observer_seen(o));
    qf_qparams q;
    CHECK_OK(qf_observer_qparams(o, &q, 1));
    CHECK(q.scale == 1.0f && q.zero_point == 0);
    CHECK_STATUS(qf_observer_qparams(o, &q, 2), QF_ERR_INVALID);
    qf_observer_free(o);
}

static void test_per_channel_shape_errors(void)
{
    qf_observer_config c = qf_observer_config_default(QF_OBSERVER_PER_CHANNEL);
    c.ch_axis = 1;
    qf_observer *o = NULL;
    CHECK_OK(qf_observer_init(&o, &c));
    float d[12] = {0};
    int64_t dims[2] = {4, 3};
    qf_tensor t;
    qf_tensor_view(&t, QF_DTYPE_F32, 2, dims, d);
    CHECK_OK(qf_observer_update(o, &t));
    CHECK(qf_observer_channels(o) == 3);
    dims[0] = 3;
    dims[1] = 4;
    qf_tensor_view(&t, QF_DTYPE_F32, 2, dims, d);
    CHECK_STATUS(qf_observer_update(o, &t), QF_ERR_SHAPE);
    CHECK_MSG("4 channels on axis 1, earlier tensors had 3");
    int64_t one = 12;
    qf_tensor_view(&t, QF_DTYPE_F32, 1, &one, d);
    CHECK_STATUS(qf_observer_update(o, &t), QF_ERR_SHAPE);
    qf_observer_free(o);
}

/* Merging two min/max observers equals observing both tensors; merging
 * histograms gives the range of both and keeps every count. */
static void test_merge(void)
{
    float a[5] = {-1.0f, 0.5f, 0.25f, 2.0f, 0.0f}, b[4] = {-3.0f, 1.0f, 0.5f, 0.75f};
    qf_tensor ta = vec(a, 5), tb = vec(b, 4);
    qf_observer *x = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    qf_observer *y = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    qf_observer *both = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    CHECK_OK(qf_observer_update(x, &ta));
    CHECK_OK(qf_observer_update(y, &tb));
    CHECK_OK(qf_observer_update(both, &ta));
    CHECK_OK(qf_observer_update(both, &tb));
    CHECK_OK(qf_observer_merge(x, y));
    qf_qparams qx, qb;
    CHECK_OK(qf_observer_qparams(x, &qx, 1));
    CHECK_OK(qf_observer_qparams(both, &qb, 1));
    CHECK(qx.scale == qb.scale && qx.zero_point == qb.zero_point);
    qf_observer_free(x);
    qf_observer_free(y);
    qf_observer_free(both);

    qf_observer *h1 = make(QF_OBSERVER_HISTOGRAM, QF_QSCHEME_AFFINE, -128, 127);
    qf_observer *h2 = make(QF_OBSERVER_HISTOGRAM, QF_QSCHEME_AFFINE, -128, 127);
    qf_observer *mm = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    CHECK_OK(qf_observer_update(h1, &ta));
    CHECK_OK(qf_observer_update(h2, &tb));
    CHECK_STATUS(qf_observer_merge(h1, mm), QF_ERR_INVALID);
    CHECK_OK(qf_observer_merge(h1, h2));
    float lo, hi;
    CHECK_OK(qf_observer_range(h1, &lo, &hi, 1));
    /* The search may trim, never widen: inside the union [-3, 2]. */
    CHECK(lo >= -3.0f && hi <= 2.0f + 1e-6f && lo < hi);
    qf_observer_free(h1);
    qf_observer_free(h2);
    qf_observer_free(mm);
}

/* Uniform data: nothing to clip, the L2 search keeps (nearly) the whole
 * range, so the histogram's qparams are within a step of min/max's. */
static void test_histogram_uniform(void)
{
    enum { N = 20000 };
    float *d = malloc(sizeof *d * N);
    unsigned s = 1;
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        d[i] = ((float)((s >> 8) & 0xffff) / 65535.0f - 0.25f) * 2.0f; /* uniform [-0.5, 1.5] */
    }
    qf_tensor t = vec(d, N);
    qf_observer *h = make(QF_OBSERVER_HISTOGRAM, QF_QSCHEME_AFFINE, -128, 127);
    qf_observer *m = make(QF_OBSERVER_MIN_MAX, QF_QSCHEME_AFFINE, -128, 127);
    CHECK_OK(qf_observer_update(h, &t));
    CHECK_OK(qf_observer_update(m, &t));
    qf_qparams qh, qm;
    CHECK_OK(qf_observer_qparams(h, &qh, 1));
    CHECK_OK(qf_observer_qparams(m, &qm, 1));
    CHECK(fabsf(qh.scale - qm.scale) <= qm.scale * 0.02f && abs(qh.zero_point - qm.zero_point) <= 2);
    if (!(fabsf(qh.scale - qm.scale) <= qm.scale * 0.02f))
        fprintf(stderr, "  histogram scale %g zp %d, min/max scale %g zp %d\n", qh.scale, qh.zero_point, qm.scale,
                qm.zero_point);
    qf_observer_free(h);
    qf_observer_free(m);
    free(d);
}

/* A large tensor's histogram is counted in slices on the threads (one row
 * of integer counts each); when the rows cannot be allocated the observer
 * counts one element at a time on the calling thread. Both must give the
 * same histogram, hence the same range and qparams, to the bit. */
static size_t fail_size;
static void *fail_one_size(void *ud, void *p, size_t n)
{
    (void)ud;
    if (n == 0) {
        free(p);
        return NULL;
    }
    return !p && n == fail_size ? NULL : realloc(p, n);
}

static void test_histogram_threads(void)
{
    enum { N = 3 * 98304 + 77 }; /* several slices of 65536, the last one short */
    float *d = malloc(sizeof *d * N);
    unsigned s = 7;
    for (int i = 0; i < N; i++) { /* relu-like: half zeros, a tail */
        s = s * 1103515245u + 12345u;
        float u = (float)((s >> 8) & 0xffff) / 65535.0f;
        d[i] = u < 0.5f ? 0.0f : (u - 0.5f) * (u - 0.5f) * 12.0f;
    }
    d[N - 1] = 3.5f; /* the maximum in the last, short slice */
    qf_tensor t = vec(d, N), half = vec(d, N / 2);
    qf_qparams q[2];
    float lo[2], hi[2];
    for (int k = 0; k < 2; k++) {
        qf_observer *h = make(QF_OBSERVER_HISTOGRAM, QF_QSCHEME_AFFINE, -128, 127);
        /* k = 1: the rows of counts (threads x 2048 x 8 bytes) are refused */
        fail_size = k ? (size_t)2 * 2048 * sizeof(int64_t) : 0;
        if (k) qf_set_allocator(fail_one_size, NULL);
        CHECK_OK(qf_observer_update(h, &half));
        CHECK_OK(qf_observer_update(h, &t)); /* a wider range: the old bins are combined */
        qf_set_allocator(NULL, NULL);
        CHECK_OK(qf_observer_result(h, &q[k], &lo[k], &hi[k], 1));
        qf_observer_free(h);
    }
    CHECK(q[0].scale == q[1].scale && q[0].zero_point == q[1].zero_point && lo[0] == lo[1] && hi[0] == hi[1]);
    if (!(q[0].scale == q[1].scale && lo[0] == lo[1] && hi[0] == hi[1]))
        fprintf(stderr, "  threads: scale %.9g range [%.9g, %.9g]; one by one: scale %.9g range [%.9g, %.9g]\n",
                q[0].scale, lo[0], hi[0], q[1].scale, lo[1], hi[1]);
    free(d);
}

/* --- against PyTorch --------------------------------------------------------- */

static int read_floats(FILE *f, const char *key, float *v, int n)
{
    char word[32];
    if (fscanf(f, "%31s", word) != 1 || strcmp(word, key) != 0) return -1;
    for (int i = 0; i < n; i++) {
        char num[64];
        if (fscanf(f, "%63s", num) != 1) return -1;
        v[i] = (float)strtod(num, NULL);
    }
    return 0;
}

static qf_observer_kind kind_of(const char *s)
{
    if (!strcmp(s, "minmax")) return QF_OBSERVER_MIN_MAX;
    if (!strcmp(s, "moving")) return QF_OBSERVER_MOVING_AVERAGE;
    if (!strcmp(s, "perchannel")) return QF_OBSERVER_PER_CHANNEL;
    return QF_OBSERVER_HISTOGRAM;
}

/* One case: 0 when qfold agrees with torch. */
static int run_case(const char *dir, FILE *f, const char *name, int *exact_hist)
{
    char kind[32], scheme[32];
    int qmin, qmax, axis, nbatch, nch, exact;
    if (fscanf(f, "%31s %31s %d %d %d %d %d %d", kind, scheme, &qmin, &qmax, &axis, &nbatch, &nch, &exact) != 8)
        return -1;
    float *ts = malloc(sizeof(float) * (size_t)nch * 4), *tmin = ts + nch, *tmax = ts + 2 * nch;
    float *tzp = ts + 3 * nch;
    int bad = read_floats(f, "scale", ts, nch) || read_floats(f, "zp", tzp, nch) ||
              read_floats(f, "min", tmin, nch) || read_floats(f, "max", tmax, nch);
    if (bad) {
        free(ts);
        return -1;
    }
    qf_observer_config c = qf_observer_config_default(kind_of(kind));
    c.scheme = strcmp(scheme, "symmetric") == 0 ? QF_QSCHEME_SYMMETRIC : QF_QSCHEME_AFFINE;
    c.qmin = qmin;
    c.qmax = qmax;
    c.ch_axis = axis;
    qf_observer *o = NULL;
    qf_status st = qf_observer_init(&o, &c);
    for (int b = 0; b < nbatch && st == QF_OK; b++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s_%d.npy", dir, name, b);
        qf_tensor x;
        st = qf_npy_load(path, &x);
        if (st == QF_OK) {
            st = qf_observer_update(o, &x);
            qf_tensor_free(&x);
        }
    }
    int fails = 0;
    if (st != QF_OK || qf_observer_channels(o) != nch) {
        fprintf(stderr, "  %s: %s (channels %d, torch %d)\n", name, qf_error_message(),
                o ? qf_observer_channels(o) : -1, nch);
        fails = 1;
    } else {
        qf_qparams *qp = malloc(sizeof *qp * (size_t)nch);
        float *mn = malloc(sizeof *mn * (size_t)nch * 2), *mx = mn + nch;
        CHECK_OK(qf_observer_qparams(o, qp, nch));
        CHECK_OK(qf_observer_range(o, mn, mx, nch));
        int all_exact = 1;
        for (int k = 0; k < nch; k++) {
            int same = qp[k].scale == ts[k] && qp[k].zero_point == (int32_t)tzp[k] && mn[k] == tmin[k] &&
                       mx[k] == tmax[k];
            all_exact &= same;
            /* Histogram: the chosen range within one quantization step. */
            int ok = exact ? same
                           : fabsf(mn[k] - tmin[k]) <= ts[k] && fabsf(mx[k] - tmax[k]) <= ts[k] &&
                                 abs(qp[k].zero_point - (int32_t)tzp[k]) <= 1;
            if (!ok) {
                fprintf(stderr,
                        "  %s channel %d: qfold scale %a zp %d range [%a, %a]; torch scale %a zp %d range [%a, %a]\n",
                        name, k, qp[k].scale, qp[k].zero_point, mn[k], mx[k], ts[k], (int)tzp[k], tmin[k],
                        tmax[k]);
                fails++;
            }
        }
        if (!exact && all_exact) (*exact_hist)++;
        free(qp);
        free(mn);
    }
    qf_observer_free(o);
    free(ts);
    return fails ? 1 : 0;
}

static const char *ref_dir;

static void test_against_torch(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.txt", ref_dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char word[16], name[256];
    int ncases = 0, nfail = 0, nhist = 0, exact_hist = 0;
    while (fscanf(f, "%15s %255s", word, name) == 2 && strcmp(word, "case") == 0) {
        int r = run_case(ref_dir, f, name, &exact_hist);
        CHECK(r >= 0);
        if (r < 0) break;
        ncases++;
        nfail += r;
        nhist += strncmp(name, "histogram", 9) == 0;
    }
    fclose(f);
    printf("  %d cases against torch (%d histogram, %d of them to the bit), %d differ\n", ncases, nhist,
           exact_hist, nfail);
    CHECK(ncases >= 80);
    CHECK(nfail == 0);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        ref_dir = argv[1];
        RUN(test_against_torch);
        return qf_check_report();
    }
    CHECK_OK(qf_set_threads(2)); /* the histogram's slices on two threads, whatever the machine */
    RUN(test_qparams_formulas);
    RUN(test_bad_config);
    RUN(test_refuses_nan_and_other_dtypes);
    RUN(test_empty_and_unseen);
    RUN(test_per_channel_shape_errors);
    RUN(test_merge);
    RUN(test_histogram_uniform);
    RUN(test_histogram_threads);
    return qf_check_report();
}
