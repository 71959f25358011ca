/* Backward kernels of the layout ops (src/ops/ref/data_movement.c), Dropout in training
 * mode (src/ops/ref/dropout.c) and Quantize / DequantizeLinear as fake-quant
 * (src/ops/ref/quantize_linear.c).
 *
 * The layout ops are linear maps that only move (Pad edge / reflect: copy)
 * elements: central differences with eps 1e-2 are exact up to the rounding
 * of the upstream-weighted sum, far below the tolerance (1e-2 relative, 1e-3
 * absolute). Dropout in training mode is linear too once its mask is fixed:
 * qf_node_gradcheck reruns the forward with the same seed, so the same mask.
 * Quantize's output is an integer (no float output to differentiate), so its
 * straight-through mask is checked exactly against the definition, at and
 * beyond the clamp edges. */
#include <math.h>
#include <stdio.h>

#include "grad_node.h"

#define NSLOTS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const qf_gradcheck_opts lin = {.eps = 1e-2};

static qf_tensor make_x(int ndim, const int64_t *dims)
{
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, ndim, dims));
    grad_fill(&x, 1.0f);
    return x;
}

static void test_flatten_reshape(void)
{
    const int64_t d[] = {2, 3, 4, 5};
    qf_tensor x = make_x(4, d);
    for (int axis = -1; axis <= 4; axis++) {
        qf_node_runner r;
        grad_slot sl[] = {GS_IN(&x)};
        grad_node(&r, QF_OP_FLATTEN, 13, 1, sl, 1);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", axis));
        char what[32];
        snprintf(what, sizeof what, "Flatten axis %d", axis);
        grad_run_check(&r, 0, false, &lin, what);
    }
    grad_slot s1[] = {GS_IN(&x), GS_I64(3, -1, 5)};
    grad_slot s2[] = {GS_IN(&x), GS_I64(0, -1)};
    grad_slot s3[] = {GS_IN(&x), GS_I64(120)};
    const grad_slot *cases[] = {s1, s2, s3};
    for (int i = 0; i < 3; i++) {
        qf_node_runner r;
        grad_node(&r, QF_OP_RESHAPE, 13, 2, cases[i], 1);
        grad_run_check(&r, 0, false, &lin, "Reshape");
    }
    qf_node_runner r;
    grad_slot si[] = {GS_IN(&x)};
    grad_node(&r, QF_OP_IDENTITY, 13, 1, si, 1);
    grad_run_check(&r, 0, false, &lin, "Identity");
    qf_tensor_free(&x);
}

static void test_transpose(void)
{
    const int64_t d[] = {2, 3, 4, 5};
    qf_tensor x = make_x(4, d);
    const int64_t perms[][4] = {{2, 0, 3, 1}, {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 3, 0, 2}};
    for (int p = 0; p <= 4; p++) {
        qf_node_runner r;
        grad_slot sl[] = {GS_IN(&x)};
        grad_node(&r, QF_OP_TRANSPOSE, 13, 1, sl, 1);
        if (p < 4) REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "perm", perms[p], 4));
        grad_run_check(&r, 0, false, &lin, p < 4 ? "Transpose perm" : "Transpose default perm");
    }
    qf_tensor_free(&x);
}

static void test_squeeze_unsqueeze(void)
{
    const int64_t d[] = {2, 1, 3, 1};
    qf_tensor x = make_x(4, d);
    {
        qf_node_runner r;
        grad_slot sl[] = {GS_IN(&x), GS_I64(1, -1)};
        grad_node(&r, QF_OP_SQUEEZE, 13, 2, sl, 1);
        grad_run_check(&r, 0, false, &lin, "Squeeze axes input");
    }
    {
        qf_node_runner r;
        grad_slot sl[] = {GS_IN(&x)};
        grad_node(&r, QF_OP_SQUEEZE, 11, 1, sl, 1);
        REQUIRE_OK(qf_node_set_attr_ints(r.g, r.n, "axes", (int64_t[]){3}, 1));
        grad_run_check(&r, 0, false, &lin, "Squeeze axes attribute");
    }
    {
        qf_node_runner r;
        grad_slot sl[] = {GS_IN(&x)};
        grad_node(&r, QF_OP_SQUEEZE, 13, 1, sl, 1);
        grad_run_check(&r, 0, false, &lin, "Squeeze all");
    }
    {
        qf_node_runner r;
        grad_slot sl[] = {GS_IN(&x), GS_I64(0, -1, 3)};
        grad_node(&r, QF_OP_UNSQUEEZE, 13, 2, sl, 1);
        grad_run_check(&r, 0, false, &lin, "Unsqueeze");
    }
    qf_tensor_free(&x);
}

static void test_concat_split(void)
{
    const int64_t da[] = {2, 3, 4}, db[] = {2, 1, 4}, dc[] = {2, 5, 4};
    qf_tensor a = make_x(3, da), b = make_x(3, db), c = make_x(3, dc);
    grad_slot sl[] = {GS_IN(&a), GS_IN(&b), GS_IN(&c)};
    for (int axis = 1; axis >= -2; axis -= 3) {
        qf_node_runner r;
        grad_node(&r, QF_OP_CONCAT, 13, 3, sl, 1);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", axis));
        grad_run_check(&r, 0, false, &lin, axis > 0 ? "Concat axis 1" : "Concat axis -2");
    }
    const int64_t dl2[] = {2, 4, 6}, da0[] = {1, 3, 4};
    qf_tensor l2 = make_x(3, dl2), a0 = make_x(3, da0);
    {
        qf_node_runner r;
        grad_slot s2[] = {GS_IN(&a), GS_IN(&a0)};
        grad_node(&r, QF_OP_CONCAT, 13, 2, s2, 1);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", 0));
        grad_run_check(&r, 0, false, &lin, "Concat axis 0");
    }
    {
        qf_node_runner r;
        grad_slot s3[] = {GS_IN(&c), GS_I64(2, 3, 0)};
        grad_node(&r, QF_OP_SPLIT, 13, 2, s3, 3);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", 1));
        grad_run_check(&r, 0, false, &lin, "Split 2, 3, 0");
    }
    {
        qf_node_runner r;
        grad_slot s4[] = {GS_IN(&l2)};
        grad_node(&r, QF_OP_SPLIT, 13, 1, s4, 3);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", -1));
        grad_run_check(&r, 0, false, &lin, "Split equal, axis -1");
    }
    qf_tensor_free(&l2);
    qf_tensor_free(&a0);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_tensor_free(&c);
}

/* Missing gradients: Concat with an input nobody wants (din NULL) gives the
 * others their blocks; Split with an output no gradient reaches (dout NULL)
 * leaves that block of dx zero. Exact: they only copy. */
static void test_concat_split_partial(void)
{
    const int64_t da[] = {2, 3, 4}, db[] = {2, 1, 4}, dw[] = {2, 4, 4};
    qf_tensor a = make_x(3, da), b = make_x(3, db), dy, da_, db_;
    REQUIRE_OK(qf_tensor_init(&dy, QF_DTYPE_F32, 3, dw));
    REQUIRE_OK(qf_tensor_init(&da_, QF_DTYPE_F32, 3, da));
    REQUIRE_OK(qf_tensor_init(&db_, QF_DTYPE_F32, 3, db));
    grad_fill(&dy, 1.0f);
    const float *g = dy.data;
    {
        grad_slot sl[] = {GS_IN(&a), GS_IN(&b)};
        qf_node_runner r;
        grad_node(&r, QF_OP_CONCAT, 13, 2, sl, 1);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", 1));
        REQUIRE_OK(qf_node_runner_run(&r));
        const qf_tensor *in[] = {&a, &b}, *douts[] = {&dy};
        qf_tensor *outs[] = {&r.out[0]}, *dins[] = {NULL, &db_};
        CHECK_OK(qf_node_eval_grad(r.n, 13, in, outs, douts, dins, false, 0));
        int bad = 0;
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 4; k++) bad += ((float *)db_.data)[n * 4 + k] != g[(n * 4 + 3) * 4 + k];
        CHECKF(bad == 0, "Concat, first input not wanted: %d elements of the second's gradient wrong", bad);
        qf_node_runner_free(&r);
    }
    {
        qf_tensor w = make_x(3, dw), dwt;
        REQUIRE_OK(qf_tensor_init(&dwt, QF_DTYPE_F32, 3, dw));
        grad_slot sl[] = {GS_IN(&w), GS_I64(3, 1)};
        qf_node_runner r;
        grad_node(&r, QF_OP_SPLIT, 13, 2, sl, 2);
        REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", 1));
        REQUIRE_OK(qf_node_runner_run(&r));
        const qf_tensor *in[] = {&w, &r.n->inputs[1]->type}, *douts[] = {NULL, &b};
        qf_tensor *outs[] = {&r.out[0], &r.out[1]}, *dins[] = {&dwt, NULL};
        memset(dwt.data, 0x7f, qf_tensor_nbytes(&dwt));
        CHECK_OK(qf_node_eval_grad(r.n, 13, in, outs, douts, dins, false, 0));
        int bad = 0;
        for (int n = 0; n < 2; n++)
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 4; k++) {
                    float want = c < 3 ? 0.0f : ((float *)b.data)[n * 4 + k];
                    bad += ((float *)dwt.data)[(n * 4 + c) * 4 + k] != want;
                }
        CHECKF(bad == 0, "Split, first output without gradient: %d elements of dx wrong", bad);
        qf_node_runner_free(&r);
        qf_tensor_free(&w);
        qf_tensor_free(&dwt);
    }
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_tensor_free(&dy);
    qf_tensor_free(&da_);
    qf_tensor_free(&db_);
}

static void test_slice(void)
{
    const int64_t d[] = {3, 7, 6};
    qf_tensor x = make_x(3, d);
    const int64_t big = INT64_MAX, small = INT64_MIN;
    grad_slot cases[][5] = {
        {GS_IN(&x), GS_I64(1, 0), GS_I64(3, 5), GS_NONE, GS_NONE},
        {GS_IN(&x), GS_I64(-1, 6), GS_I64(small, -100), GS_I64(1, 2), GS_I64(-2, -1)},
        {GS_IN(&x), GS_I64(0, -1), GS_I64(big, small), GS_I64(-1, 1), GS_I64(2, -3)},
        {GS_IN(&x), GS_I64(5, 1), GS_I64(1, 100), GS_I64(1, 0), GS_I64(-3, 5)},
        {GS_IN(&x), GS_I64(2), GS_I64(2), GS_I64(2), GS_NONE}, /* empty */
    };
    const char *names[] = {"Slice plain", "Slice negative steps, clamped ends", "Slice reversed whole axes",
                           "Slice steps past the axis", "Slice empty"};
    for (int i = 0; i < 5; i++) {
        int nin = cases[i][4].kind != SLOT_NONE ? 5 : cases[i][3].kind != SLOT_NONE ? 4 : 3;
        qf_node_runner r;
        grad_node(&r, QF_OP_SLICE, 13, nin, cases[i], 1);
        if (i == 4) {
            /* No output element: nothing to compare, but dx must be all zeros. */
            REQUIRE_OK(qf_node_runner_run(&r));
            qf_tensor dx, dy;
            REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 3, d));
            REQUIRE_OK(qf_tensor_init(&dy, QF_DTYPE_F32, r.out[0].ndim, r.out[0].dims));
            memset(dx.data, 0x7f, qf_tensor_nbytes(&dx));
            const qf_tensor *in[5] = {&x};
            for (int k = 1; k < 4; k++) in[k] = &r.n->inputs[k]->type;
            const qf_tensor *douts[] = {&dy};
            qf_tensor *outs[] = {&r.out[0]}, *dins[5] = {&dx};
            CHECK_OK(qf_node_eval_grad(r.n, 13, in, outs, douts, dins, false, 0));
            for (int64_t k = 0; k < qf_tensor_numel(&dx); k++)
                if (((float *)dx.data)[k] != 0.0f) {
                    FAIL("%s: dx[%lld] != 0", names[i], (long long)k);
                    break;
                }
            qf_tensor_free(&dx);
            qf_tensor_free(&dy);
            qf_node_runner_free(&r);
            continue;
        }
        grad_run_check(&r, 1u, false, &lin, names[i]);
    }
    qf_tensor_free(&x);
}

static void test_pad(void)
{
    const int64_t d[] = {2, 3, 5, 4};
    qf_tensor x = make_x(4, d);
    const char *modes[] = {"constant", "reflect", "edge"};
    for (int m = 0; m < 3; m++) {
        /* both sides, uneven; for reflect the pads stay below the axis */
        grad_slot sl[] = {GS_IN(&x), GS_I64(0, 1, 2, 3, 1, 0, 4, 2), GS_F32(0.5f)};
        qf_node_runner r;
        grad_node(&r, QF_OP_PAD, 13, m == 0 ? 3 : 2, sl, 1);
        REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "mode", modes[m]));
        char what[64];
        snprintf(what, sizeof what, "Pad %s%s", modes[m], m == 0 ? " (and constant_value)" : "");
        grad_run_check(&r, 0, false, &lin, what);
    }
    for (int m = 0; m < 3; m++) {
        /* a crop on one side (negative pad), a pad on the other; axes input */
        grad_slot sl[] = {GS_IN(&x), GS_I64(-1, 2, 3, -2), GS_NONE, GS_I64(-2, 3)};
        qf_node_runner r;
        grad_node(&r, QF_OP_PAD, 18, 4, sl, 1);
        REQUIRE_OK(qf_node_set_attr_string(r.g, r.n, "mode", modes[m]));
        char what[64];
        snprintf(what, sizeof what, "Pad %s, crops, axes input", modes[m]);
        grad_run_check(&r, 0, false, &lin, what);
    }
    qf_tensor_free(&x);
}

/* --- Dropout ------------------------------------------------------------------ */

/* One training-mode Dropout forward + backward with ratio input `ratio`
 * (opset 13) or attribute (opset 11 when `attr`), seed `seed`: y, the mask
 * output and dx for dy = 1 (x is all ones + i / n). */
static void dropout_run(float ratio, bool attr, uint64_t seed, int64_t n, float *y, uint8_t *mask, float *dx)
{
    qf_tensor x, dy, dxt, yt, mt;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 1, &n));
    REQUIRE_OK(qf_tensor_init(&dy, QF_DTYPE_F32, 1, &n));
    REQUIRE_OK(qf_tensor_init(&dxt, QF_DTYPE_F32, 1, &n));
    REQUIRE_OK(qf_tensor_init(&yt, QF_DTYPE_F32, 1, &n));
    REQUIRE_OK(qf_tensor_init(&mt, QF_DTYPE_BOOL, 1, &n));
    for (int64_t i = 0; i < n; i++) {
        ((float *)x.data)[i] = 1.0f + (float)i / (float)n;
        ((float *)dy.data)[i] = 1.0f;
    }
    grad_slot sl[] = {GS_IN(&x), GS_F32(ratio)};
    qf_node_runner r;
    grad_node(&r, QF_OP_DROPOUT, attr ? 11 : 13, attr ? 1 : 2, sl, 2);
    if (attr) REQUIRE_OK(qf_node_set_attr_float(r.g, r.n, "ratio", ratio));
    REQUIRE_OK(qf_graph_infer_shapes(r.g));
    const qf_tensor *in[2] = {&x, attr ? NULL : &r.n->inputs[1]->type};
    const qf_tensor *douts[] = {&dy, NULL};
    qf_tensor *outs[] = {&yt, &mt}, *dins[2] = {&dxt, NULL};
    CHECK_OK(qf_node_eval_grad(r.n, attr ? 11 : 13, in, outs, douts, dins, true, seed));
    memcpy(y, yt.data, sizeof(float) * (size_t)n);
    memcpy(mask, mt.data, (size_t)n);
    memcpy(dx, dxt.data, sizeof(float) * (size_t)n);
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
    qf_tensor_free(&dy);
    qf_tensor_free(&dxt);
    qf_tensor_free(&yt);
    qf_tensor_free(&mt);
}

static void test_dropout_training(void)
{
    enum { N = 20000 };
    static float y[N], y2[N], dx[N], dx2[N];
    static uint8_t m[N], m2[N];
    const float ratios[] = {0.5f, 0.1f, 0.8f};
    for (int k = 0; k < 3; k++) {
        for (int attr = 0; attr <= 1; attr++) {
            float p = ratios[k];
            dropout_run(p, attr, 42, N, y, m, dx);
            const float scale = (float)(1.0 / (1.0 - (double)p));
            int64_t kept = 0, bad = 0;
            for (int64_t i = 0; i < N; i++) {
                float x = 1.0f + (float)i / (float)N;
                kept += m[i];
                if (m[i] > 1 || y[i] != (m[i] ? x * scale : 0.0f) || dx[i] != (m[i] ? scale : 0.0f)) bad++;
            }
            CHECKF(bad == 0, "Dropout p %g (%s): %lld elements not 0 / x / (1 - p) with their mask", p,
                   attr ? "attribute" : "input", (long long)bad);
            /* the kept count is binomial(N, 1 - p): within 5 standard deviations */
            double mean = N * (1.0 - p), sd = sqrt(N * p * (1.0 - p));
            CHECKF(fabs((double)kept - mean) < 5.0 * sd, "Dropout p %g: kept %lld of %d (expected %.0f +- %.0f)",
                   p, (long long)kept, N, mean, 5 * sd);
            printf("Dropout p %g (%s): kept %lld of %d, expected %.0f\n", p, attr ? "attribute" : "input",
                   (long long)kept, N, mean);
        }
    }
    dropout_run(0.5f, false, 42, N, y, m, dx);
    dropout_run(0.5f, false, 42, N, y2, m2, dx2);
    CHECK(memcmp(m, m2, N) == 0 && memcmp(y, y2, sizeof y) == 0);
    dropout_run(0.5f, false, 43, N, y2, m2, dx2);
    int64_t differ = 0;
    for (int i = 0; i < N; i++) differ += m[i] != m2[i];
    /* two independent masks of p 0.5 differ in about half the elements */
    CHECKF(differ > N / 2 - N / 20 && differ < N / 2 + N / 20, "seeds 42 and 43: masks differ in %lld of %d",
           (long long)differ, N);
    dropout_run(0.0f, false, 7, N, y, m, dx);
    int64_t all = 0;
    for (int i = 0; i < N; i++) all += m[i] && dx[i] == 1.0f;
    CHECKF(all == N, "ratio 0 keeps everything (%lld of %d)", (long long)all, N);
    dropout_run(1.0f, false, 7, N, y, m, dx);
    all = 0;
    for (int i = 0; i < N; i++) all += !m[i] && y[i] == 0.0f && dx[i] == 0.0f;
    CHECKF(all == N, "ratio 1 drops everything (%lld of %d)", (long long)all, N);
}

/* Central differences through the seeded forward, odd shape, ratio 0.3. */
static void test_dropout_gradcheck(void)
{
    const int64_t d[] = {3, 5, 7};
    qf_tensor x = make_x(3, d);
    grad_slot sl[] = {GS_IN(&x), GS_F32(0.3f)};
    qf_node_runner r;
    grad_node(&r, QF_OP_DROPOUT, 13, 2, sl, 1);
    grad_run_check(&r, 1u, true, &lin, "Dropout training, ratio 0.3");
    qf_tensor_free(&x);
}

/* Without training nothing changes: the identity, and training_mode = true
 * with a ratio is refused as before. */
static void test_dropout_inference(void)
{
    const int64_t d[] = {4, 5};
    qf_tensor x = make_x(2, d);
    {
        grad_slot sl[] = {GS_IN(&x), GS_F32(0.5f)};
        qf_node_runner r;
        grad_node(&r, QF_OP_DROPOUT, 13, 2, sl, 1);
        grad_run_check(&r, 1u, false, &lin, "Dropout inference");
    }
    {
        qf_tensor tm;
        REQUIRE_OK(qf_tensor_init(&tm, QF_DTYPE_BOOL, 0, NULL));
        *(uint8_t *)tm.data = 1;
        grad_slot sl[] = {GS_IN(&x), GS_F32(0.5f), GS_NONE};
        qf_node_runner r;
        grad_node(&r, QF_OP_DROPOUT, 13, 3, sl, 1);
        qf_value *tv = qf_graph_add_constant(r.g, "tm", QF_VALUE_CONSTANT, &tm);
        REQUIRE(tv, "training_mode constant");
        REQUIRE_OK(qf_node_set_input(r.g, r.n, 2, tv));
        CHECK_ERR(qf_node_runner_run(&r), QF_ERR_UNSUPPORTED, "training_mode = true with ratio 0.5");
        qf_node_runner_free(&r);
    }
    qf_tensor_free(&x);
}

/* --- Quantize / DequantizeLinear as fake-quant ---------------------------------- */

/* PyTorch's mask (fake_quantize_per_{tensor,channel}_affine backward), in
 * double from its definition: zp + nearbyint(x * (float)(1 / scale)) within
 * [lo, hi]. */
static bool torch_mask(float x, float scale, int zp, int lo, int hi)
{
    float inv = 1.0f / scale;
    float v = x * inv;
    if (!isfinite(v)) return false;
    double q = nearbyint((double)v) + zp; /* the default rounding mode: half to even */
    return q >= lo && q <= hi;
}

static void quant_case(qf_dtype qt, bool per_axis)
{
    const int64_t d[] = {2, 3, 41};
    qf_tensor x;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 3, d));
    const float scales[3] = {0.05f, 0.1f, 0.0371f};
    const int zps_s8[3] = {-3, 0, 17}, zps_u8[3] = {128, 0, 3};
    const int *zps = qt == QF_DTYPE_I8 ? zps_s8 : zps_u8;
    const int lo = qt == QF_DTYPE_I8 ? -128 : 0, hi = qt == QF_DTYPE_I8 ? 127 : 255;
    float *xv = x.data;
    /* every channel row: values around both edges, exactly on them, the
     * half-way points just inside and outside, far beyond, NaN, +-Inf */
    for (int64_t o = 0; o < 2; o++)
        for (int64_t c = 0; c < 3; c++) {
            int64_t cc = per_axis ? c : 0;
            float s = scales[cc];
            int z = zps[cc];
            float *row = xv + (o * 3 + c) * 41;
            for (int k = 0; k < 33; k++) {
                int edge = k < 16 ? lo : hi;
                float off = (float)(k % 16 - 8) * 0.25f;
                row[k] = ((float)(edge - z) + off) * s;
            }
            row[33] = NAN;
            row[34] = INFINITY;
            row[35] = -INFINITY;
            row[36] = 1e30f;
            row[37] = -1e30f;
            row[38] = 0.0f;
            row[39] = ((float)(hi - z) + 0.5f) * s;
            row[40] = ((float)(lo - z) - 0.5f) * s;
        }
    qf_tensor sc, zp;
    int64_t k3 = 3;
    REQUIRE_OK(qf_tensor_init(&sc, QF_DTYPE_F32, per_axis ? 1 : 0, &k3));
    REQUIRE_OK(qf_tensor_init(&zp, qt, per_axis ? 1 : 0, &k3));
    for (int c = 0; c < (per_axis ? 3 : 1); c++) {
        ((float *)sc.data)[c] = scales[c];
        if (qt == QF_DTYPE_I8) ((int8_t *)zp.data)[c] = (int8_t)zps[c];
        else ((uint8_t *)zp.data)[c] = (uint8_t)zps[c];
    }
    const qf_tensor *in[] = {&x, &sc, &zp};
    qf_node_runner r;
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_QUANTIZE, "q", 3, in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", 1));
    REQUIRE_OK(qf_node_runner_run(&r));
    qf_tensor dy, dx, dsc;
    REQUIRE_OK(qf_tensor_init(&dy, QF_DTYPE_F32, 3, d));
    REQUIRE_OK(qf_tensor_init(&dx, QF_DTYPE_F32, 3, d));
    REQUIRE_OK(qf_tensor_init(&dsc, QF_DTYPE_F32, sc.ndim, sc.dims));
    grad_fill(&dy, 1.0f);
    memset(dsc.data, 0x7f, qf_tensor_nbytes(&dsc));
    const qf_tensor *douts[] = {&dy};
    qf_tensor *outs[] = {&r.out[0]}, *dins[] = {&dx, &dsc, NULL};
    CHECK_OK(qf_node_eval_grad(r.n, 13, in, outs, douts, dins, true, 0));
    int64_t bad = 0, pass = 0;
    for (int64_t i = 0; i < qf_tensor_numel(&x); i++) {
        int64_t c = per_axis ? (i / 41) % 3 : 0;
        bool m = torch_mask(xv[i], scales[c], zps[c], lo, hi);
        float want = m ? ((float *)dy.data)[i] : 0.0f;
        pass += m;
        if (((float *)dx.data)[i] != want) {
            if (bad++ < 5)
                FAIL("QuantizeLinear %s%s: x %.9g: dx %g, want %g", qf_dtype_name(qt), per_axis ? " per axis" : "",
                     xv[i], ((float *)dx.data)[i], want);
        }
    }
    CHECKF(bad == 0, "%lld mismatches", (long long)bad);
    CHECKF(pass > 0 && pass < qf_tensor_numel(&x), "the mask passes %lld of %lld", (long long)pass,
           (long long)qf_tensor_numel(&x));
    for (int c = 0; c < (per_axis ? 3 : 1); c++) CHECK(((float *)dsc.data)[c] == 0.0f);
    printf("QuantizeLinear %s%s: mask passes %lld of %lld\n", qf_dtype_name(qt), per_axis ? " per axis" : "",
           (long long)pass, (long long)qf_tensor_numel(&x));
    /* DequantizeLinear of the same parameters: dx = dy. */
    qf_tensor q;
    REQUIRE_OK(qf_tensor_init(&q, qt, 3, d));
    memcpy(q.data, r.out[0].data, qf_tensor_nbytes(&q));
    qf_node_runner_free(&r);
    const qf_tensor *din_in[] = {&q, &sc, &zp};
    REQUIRE_OK(qf_node_runner_init(&r, QF_OP_DEQUANTIZE, "dq", 3, din_in, 1, 13));
    REQUIRE_OK(qf_node_set_attr_int(r.g, r.n, "axis", 1));
    qf_status st = qf_node_runner_run(&r);
    CHECK_OK(st);
    qf_tensor dq_dx;
    REQUIRE_OK(qf_tensor_init(&dq_dx, QF_DTYPE_F32, 3, d));
    qf_tensor *dq_outs[] = {&r.out[0]}, *dq_dins[] = {&dq_dx, &dsc, NULL};
    CHECK_OK(qf_node_eval_grad(r.n, 13, din_in, dq_outs, douts, dq_dins, true, 0));
    CHECK(memcmp(dq_dx.data, dy.data, qf_tensor_nbytes(&dy)) == 0);
    qf_node_runner_free(&r);
    qf_tensor_free(&q);
    qf_tensor_free(&dq_dx);
    qf_tensor_free(&dy);
    qf_tensor_free(&dx);
    qf_tensor_free(&dsc);
    qf_tensor_free(&sc);
    qf_tensor_free(&zp);
    qf_tensor_free(&x);
}

static void test_quant(void)
{
    quant_case(QF_DTYPE_I8, false);
    quant_case(QF_DTYPE_U8, false);
    quant_case(QF_DTYPE_I8, true);
    quant_case(QF_DTYPE_U8, true);
}

int main(void)
{
    RUN(test_flatten_reshape);
    RUN(test_transpose);
    RUN(test_squeeze_unsqueeze);
    RUN(test_concat_split);
    RUN(test_concat_split_partial);
    RUN(test_slice);
    RUN(test_pad);
    RUN(test_dropout_training);
    RUN(test_dropout_gradcheck);
    RUN(test_dropout_inference);
    RUN(test_quant);
    return qf_check_report();
}
