/* Unit tests of the pointwise / linear / quant kernels (src/ops/{linear,
 * elementwise,activation,quant,broadcast}.c).
 *
 * Each case builds a one-node graph with the IR API and runs the op's shape
 * inference and forward kernel through the one-node runner
 * (tests/tools/qf_node_run.h, outputs poisoned beforehand), and
 * compares the result with an independent, naive reference computed here in
 * double (index-by-index broadcasting, triple-loop matmul, closed-form
 * activations). Bad-input cases check the status and the message. Every
 * mismatch is printed (tests/tools/qf_check.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/math/broadcast.h"
#include "ops/kernels.h"
#include "ops/math/quant_math.h"
#include "qfold/exec.h"
#include "qfold/graph.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

/* --- deterministic random data ------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double rnd(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static qf_tensor make(qf_dtype dt, int ndim, const int64_t *dims, double scale)
{
    qf_tensor t;
    REQUIRE_OK(qf_tensor_init(&t, dt, ndim, dims));
    int64_t n = qf_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        double v = rnd() * scale;
        switch (dt) {
        case QF_DTYPE_F32: ((float *)t.data)[i] = (float)v; break;
        case QF_DTYPE_F64: ((double *)t.data)[i] = v; break;
        case QF_DTYPE_I32: ((int32_t *)t.data)[i] = (int32_t)v; break;
        case QF_DTYPE_I64: ((int64_t *)t.data)[i] = (int64_t)v; break;
        case QF_DTYPE_I8: ((int8_t *)t.data)[i] = (int8_t)v; break;
        case QF_DTYPE_U8: ((uint8_t *)t.data)[i] = (uint8_t)(fabs(v)); break;
        default: abort();
        }
    }
    return t;
}

static qf_tensor make_vals(qf_dtype dt, int ndim, const int64_t *dims, const double *vals)
{
    qf_tensor t = make(dt, ndim, dims, 0.0);
    int64_t n = qf_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case QF_DTYPE_F32: ((float *)t.data)[i] = (float)vals[i]; break;
        case QF_DTYPE_F64: ((double *)t.data)[i] = vals[i]; break;
        case QF_DTYPE_I32: ((int32_t *)t.data)[i] = (int32_t)vals[i]; break;
        case QF_DTYPE_I64: ((int64_t *)t.data)[i] = (int64_t)vals[i]; break;
        case QF_DTYPE_I8: ((int8_t *)t.data)[i] = (int8_t)vals[i]; break;
        case QF_DTYPE_U8: ((uint8_t *)t.data)[i] = (uint8_t)vals[i]; break;
        default: abort();
        }
    }
    return t;
}

/* --- references -------------------------------------------------------------- */

/* Flat index into operand t of output element `flat` (numpy broadcasting). */
static int64_t ref_index(const qf_tensor *t, int nout, const int64_t *out, int64_t flat)
{
    int64_t idx = 0, stride = 1;
    for (int i = nout - 1; i >= 0; i--) {
        int64_t coord = flat % out[i];
        flat /= out[i];
        int j = i - (nout - t->ndim);
        if (j < 0) continue;
        if (t->dims[j] != 1) idx += coord * stride;
        stride *= t->dims[j];
    }
    return idx;
}

static bool close_enough(double got, double want, double rtol, double atol)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* Compare every element of t with want[], printing the first few mismatches. */
static void expect_values(const char *what, const qf_tensor *t, const double *want, double rtol, double atol)
{
    int64_t n = qf_tensor_numel(t);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double got = qf_tensor_get_f64(t, i);
        if (!close_enough(got, want[i], rtol, atol)) {
            if (bad < 5) fprintf(stderr, "  %s[%lld]: got %.9g, want %.9g\n", what, (long long)i, got, want[i]);
            bad++;
        }
    }
    CHECKF(bad == 0, "%s: %d of %lld elements differ", what, bad, (long long)n);
}

static void expect_shape(const char *what, const qf_tensor *t, int ndim, const int64_t *dims)
{
    char a[128], b[128];
    CHECKF(qf_shape_equal(t->ndim, t->dims, ndim, dims), "%s: shape %s, want %s", what,
          qf_shape_str(t->ndim, t->dims, a, sizeof a), qf_shape_str(ndim, dims, b, sizeof b));
}

static void expect_error(const char *what, qf_status st, qf_status want, const char *needle1, const char *needle2)
{
    const char *msg = qf_error_message();
    CHECKF(st == want, "%s: status %s, want %s (%s)", what, qf_status_name(st), qf_status_name(want), msg);
    CHECKF(!needle1 || strstr(msg, needle1), "%s: message \"%s\" lacks \"%s\"", what, msg, needle1);
    CHECKF(!needle2 || strstr(msg, needle2), "%s: message \"%s\" lacks \"%s\"", what, msg, needle2);
}

/* --- broadcasting ------------------------------------------------------------- */

static void test_broadcast_shapes(void)
{
    struct {
        int na, nb;
        int64_t a[4], b[4];
        bool ok;
        int ny;
        int64_t y[4];
    } cases[] = {
        {2, 1, {3, 4}, {4}, true, 2, {3, 4}},
        {0, 3, {0}, {2, 3, 4}, true, 3, {2, 3, 4}},
        {3, 4, {1, 4, 5}, {2, 3, 1, 1}, true, 4, {2, 3, 4, 5}},
        {2, 2, {-1, 3}, {1, 3}, true, 2, {-1, 3}},
        {2, 2, {-1, 1}, {1, 7}, true, 2, {-1, 7}},
        {2, 2, {-1, 3}, {5, 3}, true, 2, {5, 3}},
        {2, 2, {-1, 3}, {-1, 3}, true, 2, {-1, 3}},
        {2, 1, {3, 4}, {3}, false, 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int ny = -1;
        int64_t y[QF_MAX_DIMS];
        bool ok = qf_broadcast_shape(cases[i].na, cases[i].a, cases[i].nb, cases[i].b, &ny, y);
        CHECKF(ok == cases[i].ok, "broadcast case %zu: ok %d", i, ok);
        if (ok && cases[i].ok) CHECKF(qf_shape_equal(ny, y, cases[i].ny, cases[i].y), "broadcast case %zu: shape", i);
    }
    int64_t c1[] = {4}, c2[] = {3, 1}, c3[] = {2, 4}, to[] = {3, 4};
    CHECKF(qf_broadcast_to_ok(1, c1, 2, to), "[4] -> [3,4]");
    CHECKF(qf_broadcast_to_ok(2, c2, 2, to), "[3,1] -> [3,4]");
    CHECKF(!qf_broadcast_to_ok(2, c3, 2, to), "[2,4] -/-> [3,4]");
}

/* Iterator rows for the per-channel case collapse to one constant per row. */
static void test_bcast_iter(void)
{
    int64_t x[] = {2, 3, 4, 5}, c[] = {1, 3, 1, 1};
    qf_tensor tx, tc;
    qf_tensor_view(&tx, QF_DTYPE_F32, 4, x, NULL);
    qf_tensor_view(&tc, QF_DTYPE_F32, 4, c, NULL);
    const qf_tensor *ops[2] = {&tx, &tc};
    qf_bcast_iter it;
    qf_bcast_iter_init(&it, 4, x, 2, ops);
    CHECKF(it.rows == 6 && it.len == 20, "per-channel rows %lld len %lld", (long long)it.rows, (long long)it.len);
    CHECKF(it.step[0] == 1 && it.step[1] == 0, "per-channel steps");
    int64_t seen[6];
    for (int r = 0; r < 6 && r < it.rows; r++, qf_bcast_iter_next(&it)) seen[r] = it.off[1];
    CHECKF(seen[0] == 0 && seen[1] == 1 && seen[2] == 2 && seen[3] == 0 && seen[5] == 2, "per-channel offsets");
    /* Same shapes: a single row. */
    const qf_tensor *same[2] = {&tx, &tx};
    qf_bcast_iter_init(&it, 4, x, 2, same);
    CHECKF(it.rows == 1 && it.len == 120, "same-shape collapses to one row");
}

/* --- elementwise ---------------------------------------------------------------- */

static double ref_binary(qf_op op, double a, double b, bool integer)
{
    switch (op) {
    case QF_OP_ADD: return a + b;
    case QF_OP_SUB: return a - b;
    case QF_OP_MUL: return a * b;
    case QF_OP_DIV: return integer ? trunc(a / b) : a / b;
    case QF_OP_POW: return pow(a, b);
    default: return NAN;
    }
}

static void run_binary(qf_op op, qf_dtype dt, int na, const int64_t *a_dims, int nb, const int64_t *b_dims)
{
    bool integer = dt != QF_DTYPE_F32 && dt != QF_DTYPE_F64;
    qf_tensor a = make(dt, na, a_dims, integer ? 50 : 2), b = make(dt, nb, b_dims, integer ? 50 : 2);
    if (op == QF_OP_DIV) {
        /* Keep divisors away from 0. */
        int64_t n = qf_tensor_numel(&b);
        for (int64_t i = 0; i < n; i++) {
            double v = qf_tensor_get_f64(&b, i);
            if (fabs(v) < 1) {
                if (dt == QF_DTYPE_F32) ((float *)b.data)[i] = 1.5f;
                else if (dt == QF_DTYPE_F64) ((double *)b.data)[i] = 1.5;
                else if (dt == QF_DTYPE_I32) ((int32_t *)b.data)[i] = 3;
                else if (dt == QF_DTYPE_I64) ((int64_t *)b.data)[i] = -3;
                else if (dt == QF_DTYPE_I8) ((int8_t *)b.data)[i] = -7;
                else ((uint8_t *)b.data)[i] = 7;
            }
        }
    }
    const qf_tensor *in[2] = {&a, &b};
    qf_node_runner tc;
    REQUIRE_OK(qf_node_runner_init(&tc, op, "n0", 2, in, 1, 17));
    char what[160], sa[64], sb[64];
    snprintf(what, sizeof what, "%s %s %s %s", qf_op_name(op), qf_dtype_name(dt), qf_shape_str(na, a_dims, sa, sizeof sa),
             qf_shape_str(nb, b_dims, sb, sizeof sb));
    qf_status st = qf_node_runner_run(&tc);
    CHECKF(st == QF_OK, "%s: %s", what, qf_error_message());
    if (st == QF_OK) {
        int64_t n = qf_tensor_numel(&tc.out[0]);
        double *want = calloc((size_t)n + 1, sizeof *want);
        for (int64_t i = 0; i < n; i++) {
            double x = qf_tensor_get_f64(&a, ref_index(&a, tc.out[0].ndim, tc.out[0].dims, i));
            double z = qf_tensor_get_f64(&b, ref_index(&b, tc.out[0].ndim, tc.out[0].dims, i));
            double v = ref_binary(op, x, z, integer);
            /* The kernel works in the dtype: round the reference the same way. */
            if (dt == QF_DTYPE_F32) v = (float)v;
            if (dt == QF_DTYPE_I8) v = (int8_t)(int64_t)v;
            if (dt == QF_DTYPE_U8) v = (uint8_t)(int64_t)v;
            want[i] = v;
        }
        expect_values(what, &tc.out[0], want, dt == QF_DTYPE_F32 ? 1e-6 : 1e-12, 0);
        free(want);
    }
    qf_node_runner_free(&tc);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
}

static void test_binary(void)
{
    static const struct {
        int na, nb;
        int64_t a[4], b[4];
    } shapes[] = {
        {3, 3, {2, 3, 4}, {2, 3, 4}},       /* same shape */
        {3, 0, {2, 3, 4}, {0}},             /* scalar */
        {0, 3, {0}, {2, 3, 4}},             /* scalar first */
        {3, 1, {2, 3, 4}, {4}},             /* last-dim vector */
        {4, 4, {2, 3, 4, 5}, {1, 3, 1, 1}}, /* per channel */
        {3, 2, {2, 3, 4}, {3, 1}},
        {3, 4, {1, 4, 5}, {2, 3, 1, 1}},    /* both broadcast */
        {2, 2, {3, 1}, {1, 5}},
        {1, 1, {1}, {1}},
    };
    static const qf_op ops[] = {QF_OP_ADD, QF_OP_SUB, QF_OP_MUL, QF_OP_DIV};
    static const qf_dtype dts[] = {QF_DTYPE_F32, QF_DTYPE_F64, QF_DTYPE_I32, QF_DTYPE_I64, QF_DTYPE_I8, QF_DTYPE_U8};
    for (size_t o = 0; o < 4; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            run_binary(ops[o], QF_DTYPE_F32, shapes[s].na, shapes[s].a, shapes[s].nb, shapes[s].b);
    for (size_t o = 0; o < 4; o++)
        for (size_t d = 1; d < 6; d++)
            for (size_t s = 3; s < 7; s++)
                run_binary(ops[o], dts[d], shapes[s].na, shapes[s].a, shapes[s].nb, shapes[s].b);
    run_binary(QF_OP_POW, QF_DTYPE_F32, 3, shapes[5].a, 2, shapes[5].b);
}

static void test_integer_semantics(void)
{
    int64_t d4[] = {4};
    /* C division truncates toward zero; int32 overflow wraps. */
    double av[] = {-7, 7, -8, 2147483647}, bv[] = {2, -2, 3, 1};
    qf_tensor a = make_vals(QF_DTYPE_I32, 1, d4, av), b = make_vals(QF_DTYPE_I32, 1, d4, bv);
    const qf_tensor *in[2] = {&a, &b};
    qf_node_runner tc;
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_DIV, "n0", 2, in, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "int div: %s", qf_error_message());
    double want_div[] = {-3, -3, -2, 2147483647};
    expect_values("int32 div truncates", &tc.out[0], want_div, 0, 0);
    qf_node_runner_free(&tc);
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_ADD, "n0", 2, in, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "int add: %s", qf_error_message());
    double want_add[] = {-5, 5, -5, -2147483648.0};
    expect_values("int32 add wraps", &tc.out[0], want_add, 0, 0);
    qf_node_runner_free(&tc);
    /* Division by zero names the node. */
    ((int32_t *)b.data)[2] = 0;
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_DIV, "n0", 2, in, 1, 13));
    expect_error("int div by zero", qf_node_runner_run(&tc), QF_ERR_NUMERIC, "'n0'", "division by zero");
    qf_node_runner_free(&tc);
    qf_tensor_free(&a);
    qf_tensor_free(&b);

    /* uint8 wraps modulo 256. */
    double ua[] = {250, 3, 0, 255}, ub[] = {10, 5, 1, 255};
    a = make_vals(QF_DTYPE_U8, 1, d4, ua);
    b = make_vals(QF_DTYPE_U8, 1, d4, ub);
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_SUB, "n0", 2, in, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "u8 sub: %s", qf_error_message());
    double want_u8[] = {240, 254, 255, 0};
    expect_values("uint8 sub wraps", &tc.out[0], want_u8, 0, 0);
    qf_node_runner_free(&tc);
    qf_tensor_free(&a);
    qf_tensor_free(&b);
}

static void test_pow_types(void)
{
    int64_t d3[] = {3};
    double base[] = {1, 2, 3}, ex[] = {4, 5, 6}, want[] = {1, 32, 729};
    static const qf_dtype bases[] = {QF_DTYPE_F32, QF_DTYPE_I32, QF_DTYPE_I64, QF_DTYPE_F64};
    static const qf_dtype exps[] = {QF_DTYPE_F32, QF_DTYPE_I32, QF_DTYPE_I64, QF_DTYPE_F64, QF_DTYPE_I8, QF_DTYPE_U8};
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 6; j++) {
            qf_tensor a = make_vals(bases[i], 1, d3, base), b = make_vals(exps[j], 1, d3, ex);
            const qf_tensor *in[2] = {&a, &b};
            qf_node_runner tc;
            REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_POW, "n0", 2, in, 1, 15));
            char what[64];
            snprintf(what, sizeof what, "pow %s^%s", qf_dtype_name(bases[i]), qf_dtype_name(exps[j]));
            CHECKF(qf_node_runner_run(&tc) == QF_OK, "%s: %s", what, qf_error_message());
            CHECKF(tc.out[0].dtype == bases[i], "%s: output dtype %s", what, qf_dtype_name(tc.out[0].dtype));
            expect_values(what, &tc.out[0], want, 1e-6, 0);
            qf_node_runner_free(&tc);
            qf_tensor_free(&a);
            qf_tensor_free(&b);
        }
    }
}

static void test_unary(void)
{
    int64_t d[] = {2, 3, 5};
    static const qf_op ops[] = {QF_OP_SQRT, QF_OP_RECIPROCAL, QF_OP_NEG};
    for (int k = 0; k < 3; k++) {
        for (int f64 = 0; f64 < 2; f64++) {
            qf_dtype dt = f64 ? QF_DTYPE_F64 : QF_DTYPE_F32;
            qf_tensor x = make(dt, 3, d, 4);
            int64_t n = qf_tensor_numel(&x);
            for (int64_t i = 0; i < n && ops[k] == QF_OP_SQRT; i++) {
                if (f64) ((double *)x.data)[i] = fabs(((double *)x.data)[i]);
                else ((float *)x.data)[i] = fabsf(((float *)x.data)[i]);
            }
            const qf_tensor *in[1] = {&x};
            qf_node_runner tc;
            REQUIRE_OK(qf_node_runner_init(&tc, ops[k], "n0", 1, in, 1, 13));
            CHECKF(qf_node_runner_run(&tc) == QF_OK, "%s: %s", qf_op_name(ops[k]), qf_error_message());
            double want[30];
            for (int64_t i = 0; i < n; i++) {
                double v = qf_tensor_get_f64(&x, i);
                want[i] = ops[k] == QF_OP_SQRT ? sqrt(v) : ops[k] == QF_OP_RECIPROCAL ? 1 / v : -v;
            }
            expect_values(qf_op_name(ops[k]), &tc.out[0], want, 1e-6, 0);
            qf_node_runner_free(&tc);
            qf_tensor_free(&x);
        }
    }
    int64_t d2[] = {2};
    double v[] = {5, -128};
    qf_tensor x = make_vals(QF_DTYPE_I8, 1, d2, v);
    const qf_tensor *in[1] = {&x};
    qf_node_runner tc;
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_NEG, "n0", 1, in, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "neg int8: %s", qf_error_message());
    double want[] = {-5, -128};
    expect_values("neg int8", &tc.out[0], want, 0, 0);
    qf_node_runner_free(&tc);
    qf_tensor_free(&x);
}

/* --- matrix products ----------------------------------------------------------- */

static void test_gemm(void)
{
    struct {
        int ta, tb;
        float alpha, beta;
        int cnd;
        int64_t c[2];
    } cases[] = {
        {0, 0, 1, 1, -1, {0}},      /* no C */
        {0, 1, 1, 1, 1, {5}},       /* [N] */
        {1, 0, 0.5f, 2, 2, {3, 1}}, /* [M, 1] */
        {1, 1, 1, 0.25f, 0, {0}},   /* scalar */
        {0, 0, 2, 1, 2, {3, 5}},    /* [M, N] */
        {0, 0, 1, 1, 1, {1}},       /* [1] */
        {0, 0, 1, 0, 2, {3, 5}},    /* beta 0: C ignored */
    };
    const int64_t M = 3, K = 4, N = 5;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t ad[2] = {cases[i].ta ? K : M, cases[i].ta ? M : K};
        int64_t bd[2] = {cases[i].tb ? N : K, cases[i].tb ? K : N};
        qf_tensor a = make(QF_DTYPE_F32, 2, ad, 1), b = make(QF_DTYPE_F32, 2, bd, 1);
        qf_tensor c = {0};
        if (cases[i].cnd >= 0) c = make(QF_DTYPE_F32, cases[i].cnd, cases[i].c, 1);
        const qf_tensor *in[3] = {&a, &b, cases[i].cnd >= 0 ? &c : NULL};
        qf_node_runner tc;
        REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_GEMM, "n0", cases[i].cnd >= 0 ? 3 : 2, in, 1, 13));
        qf_node_set_attr_int(tc.g, tc.n, "transA", cases[i].ta);
        qf_node_set_attr_int(tc.g, tc.n, "transB", cases[i].tb);
        qf_node_set_attr_float(tc.g, tc.n, "alpha", cases[i].alpha);
        qf_node_set_attr_float(tc.g, tc.n, "beta", cases[i].beta);
        char what[32];
        snprintf(what, sizeof what, "gemm case %zu", i);
        CHECKF(qf_node_runner_run(&tc) == QF_OK, "%s: %s", what, qf_error_message());
        int64_t yd[2] = {M, N};
        expect_shape(what, &tc.out[0], 2, yd);
        double want[15];
        for (int64_t m = 0; m < M; m++) {
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = qf_tensor_get_f64(&a, cases[i].ta ? k * M + m : m * K + k);
                    double bv = qf_tensor_get_f64(&b, cases[i].tb ? n * K + k : k * N + n);
                    s += av * bv;
                }
                s *= cases[i].alpha;
                if (cases[i].cnd >= 0) s += cases[i].beta * qf_tensor_get_f64(&c, ref_index(&c, 2, yd, m * N + n));
                want[m * N + n] = s;
            }
        }
        expect_values(what, &tc.out[0], want, 1e-5, 1e-6);
        qf_node_runner_free(&tc);
        qf_tensor_free(&a);
        qf_tensor_free(&b);
        qf_tensor_free(&c);
    }
}

static void test_matmul(void)
{
    struct {
        int na, nb;
        int64_t a[4], b[4];
        int ny;
        int64_t y[4];
    } cases[] = {
        {2, 2, {3, 4}, {4, 5}, 2, {3, 5}},
        {3, 2, {2, 3, 4}, {4, 5}, 3, {2, 3, 5}},
        {4, 3, {1, 2, 3, 4}, {2, 4, 5}, 4, {1, 2, 3, 5}},
        {1, 1, {4}, {4}, 0, {0}},
        {1, 3, {4}, {2, 4, 5}, 2, {2, 5}},
        {3, 1, {2, 3, 4}, {4}, 2, {2, 3}},
        {4, 3, {3, 1, 2, 4}, {5, 4, 3}, 4, {3, 5, 2, 3}},
        {2, 4, {3, 4}, {1, 1, 4, 2}, 4, {1, 1, 3, 2}},
        {3, 3, {2, 3, 4}, {2, 4, 6}, 3, {2, 3, 6}},
    };
    for (int f64 = 0; f64 < 2; f64++) {
        qf_dtype dt = f64 ? QF_DTYPE_F64 : QF_DTYPE_F32;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            qf_tensor a = make(dt, cases[i].na, cases[i].a, 1), b = make(dt, cases[i].nb, cases[i].b, 1);
            const qf_tensor *in[2] = {&a, &b};
            qf_node_runner tc;
            REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_MATMUL, "n0", 2, in, 1, 13));
            char what[48];
            snprintf(what, sizeof what, "matmul %s case %zu", qf_dtype_name(dt), i);
            qf_status st = qf_node_runner_run(&tc);
            CHECKF(st == QF_OK, "%s: %s", what, qf_error_message());
            if (st != QF_OK) {
                qf_node_runner_free(&tc);
                qf_tensor_free(&a);
                qf_tensor_free(&b);
                continue;
            }
            expect_shape(what, &tc.out[0], cases[i].ny, cases[i].y);
            /* Reference: promote 1-D operands, broadcast batch by index. */
            int64_t M = cases[i].na >= 2 ? cases[i].a[cases[i].na - 2] : 1, K = cases[i].a[cases[i].na - 1];
            int64_t N = cases[i].nb >= 2 ? cases[i].b[cases[i].nb - 1] : 1;
            qf_tensor ab, bb;
            qf_tensor_view(&ab, dt, cases[i].na > 2 ? cases[i].na - 2 : 0, cases[i].a, NULL);
            qf_tensor_view(&bb, dt, cases[i].nb > 2 ? cases[i].nb - 2 : 0, cases[i].b, NULL);
            int nyb;
            int64_t yb[QF_MAX_DIMS];
            qf_broadcast_shape(ab.ndim, ab.dims, bb.ndim, bb.dims, &nyb, yb);
            int64_t nbatch = qf_shape_numel(nyb, yb);
            double *want = calloc((size_t)(nbatch * M * N), sizeof *want);
            for (int64_t t = 0; t < nbatch; t++) {
                int64_t ia = ref_index(&ab, nyb, yb, t), ib = ref_index(&bb, nyb, yb, t);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        double s = 0;
                        for (int64_t k = 0; k < K; k++)
                            s += qf_tensor_get_f64(&a, ia * M * K + m * K + k) *
                                 qf_tensor_get_f64(&b, ib * K * N + k * N + n);
                        want[(t * M + m) * N + n] = s;
                    }
            }
            expect_values(what, &tc.out[0], want, 1e-5, 1e-6);
            free(want);
            qf_node_runner_free(&tc);
            qf_tensor_free(&a);
            qf_tensor_free(&b);
        }
    }
}

static void test_linear(void)
{
    int64_t xd[] = {2, 3, 4}, wd[] = {5, 4}, bd[] = {5};
    qf_tensor x = make(QF_DTYPE_F32, 3, xd, 1), w = make(QF_DTYPE_F32, 2, wd, 1), b = make(QF_DTYPE_F32, 1, bd, 1);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const qf_tensor *in[3] = {&x, &w, &b};
        qf_node_runner tc;
        REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_LINEAR, "n0", with_bias ? 3 : 2, in, 1, 13));
        CHECKF(qf_node_runner_run(&tc) == QF_OK, "linear: %s", qf_error_message());
        int64_t yd[] = {2, 3, 5};
        expect_shape("linear", &tc.out[0], 3, yd);
        double want[30];
        for (int r = 0; r < 6; r++)
            for (int o = 0; o < 5; o++) {
                double s = with_bias ? qf_tensor_get_f64(&b, o) : 0;
                for (int k = 0; k < 4; k++) s += qf_tensor_get_f64(&x, r * 4 + k) * qf_tensor_get_f64(&w, o * 4 + k);
                want[r * 5 + o] = s;
            }
        expect_values(with_bias ? "linear + bias" : "linear", &tc.out[0], want, 1e-5, 1e-6);
        qf_node_runner_free(&tc);
    }
    qf_tensor_free(&x);
    qf_tensor_free(&w);
    qf_tensor_free(&b);
}

/* --- shape inference: unknown dims and errors -------------------------------------- */

static void test_infer_errors(void)
{
    qf_graph *g;
    qf_graph_init(&g);
    g->opset = 13;
    int64_t a[] = {-1, 3, 4}, b[] = {4}, c[] = {4, 5}, bad[] = {5, 5}, v3[] = {3};
    qf_value *va = qf_graph_add_input(g, "a", QF_DTYPE_F32, 3, a);
    qf_value *vb = qf_graph_add_input(g, "b", QF_DTYPE_F32, 1, b);
    qf_value *vc = qf_graph_add_input(g, "c", QF_DTYPE_F32, 2, c);
    qf_value *vbad = qf_graph_add_input(g, "bad", QF_DTYPE_F32, 2, bad);
    qf_value *vi = qf_graph_add_input(g, "i", QF_DTYPE_I32, 1, b);
    qf_value *v3v = qf_graph_add_input(g, "v3", QF_DTYPE_F32, 1, v3);

    qf_value *ab[2] = {va, vb};
    qf_node *add = qf_graph_add_node(g, QF_OP_ADD, "add_ok", 2, ab, 1);
    qf_value *ac[2] = {va, vc};
    qf_node *mm = qf_graph_add_node(g, QF_OP_MATMUL, "mm_ok", 2, ac, 1);
    CHECKF(qf_graph_infer_shapes(g) == QF_OK, "unknown dims: %s", qf_error_message());
    int64_t want_add[] = {-1, 3, 4}, want_mm[] = {-1, 3, 5};
    expect_shape("add with symbolic batch", &add->outputs[0]->type, 3, want_add);
    expect_shape("matmul with symbolic batch", &mm->outputs[0]->type, 3, want_mm);

    qf_value *e1[2] = {va, v3v};
    qf_node *n1 = qf_graph_add_node(g, QF_OP_MUL, "mul_bad", 2, e1, 1);
    expect_error("broadcast mismatch", qf_mul_kernels.infer(g, n1), QF_ERR_SHAPE, "'mul_bad'", "[?, 3, 4] and [3]");
    qf_value *e2[2] = {va, vbad};
    qf_node *n2 = qf_graph_add_node(g, QF_OP_MATMUL, "mm_bad", 2, e2, 1);
    expect_error("matmul inner mismatch", qf_matmul_kernels.infer(g, n2), QF_ERR_SHAPE, "'mm_bad'", "[5, 5]");
    qf_value *e3[2] = {vbad, vc};
    qf_node *n3 = qf_graph_add_node(g, QF_OP_GEMM, "gemm_bad", 2, e3, 1);
    expect_error("gemm inner mismatch", qf_gemm_kernels.infer(g, n3), QF_ERR_SHAPE, "'gemm_bad'", "[4, 5]");
    qf_value *e4[2] = {vb, vi};
    qf_node *n4 = qf_graph_add_node(g, QF_OP_SUB, "sub_types", 2, e4, 1);
    expect_error("dtype mismatch", qf_sub_kernels.infer(g, n4), QF_ERR_INVALID, "'sub_types'", "int32");
    qf_value *e5[3] = {vbad, vc, v3v};
    qf_node *n5 = qf_graph_add_node(g, QF_OP_GEMM, "gemm_c", 3, e5, 1);
    qf_node_set_attr_int(g, n5, "transB", 1);
    expect_error("gemm C broadcast", qf_gemm_kernels.infer(g, n5), QF_ERR_SHAPE, "'gemm_c'", "C [3]");
    /* numpy rejects [1, 2, 3, 4] x [3, 4, 5]: batch dims [1, 2] and [3]. */
    int64_t a4[] = {1, 2, 3, 4}, b3[] = {3, 4, 5};
    qf_value *e7[2] = {qf_graph_add_input(g, "a4", QF_DTYPE_F32, 4, a4), qf_graph_add_input(g, "b3", QF_DTYPE_F32, 3, b3)};
    qf_node *n7 = qf_graph_add_node(g, QF_OP_MATMUL, "mm_batch", 2, e7, 1);
    expect_error("matmul batch mismatch", qf_matmul_kernels.infer(g, n7), QF_ERR_SHAPE, "'mm_batch'", "batch");
    qf_value *e6[1] = {va};
    qf_node *n6 = qf_graph_add_node(g, QF_OP_SOFTMAX, "sm_axis", 1, e6, 1);
    qf_node_set_attr_int(g, n6, "axis", 3);
    expect_error("softmax axis", qf_softmax_kernels.infer(g, n6), QF_ERR_INVALID, "'sm_axis'", "axis 3");
    qf_graph_free(g);
}

/* --- activations ------------------------------------------------------------------ */

static double ref_act(qf_op op, double x)
{
    switch (op) {
    case QF_OP_RELU: return x > 0 ? x : 0;
    case QF_OP_RELU6: return fmin(fmax(x, 0), 6);
    case QF_OP_LEAKY_RELU: return x >= 0 ? x : 0.01 * x;
    case QF_OP_SIGMOID: return 1 / (1 + exp(-x));
    case QF_OP_TANH: return tanh(x);
    case QF_OP_HARD_SIGMOID: return fmax(0, fmin(1, 0.2 * x + 0.5));
    case QF_OP_HARD_SWISH: return x * fmax(0, fmin(1, x / 6 + 0.5));
    default: return NAN;
    }
}

static void test_activations(void)
{
    static const qf_op ops[] = {QF_OP_RELU, QF_OP_RELU6, QF_OP_LEAKY_RELU, QF_OP_SIGMOID,
                                QF_OP_TANH, QF_OP_HARD_SIGMOID, QF_OP_HARD_SWISH};
    int64_t d[] = {4, 25};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        for (int f64 = 0; f64 < 2; f64++) {
            qf_tensor x = make(f64 ? QF_DTYPE_F64 : QF_DTYPE_F32, 2, d, 10);
            /* Extremes: sigmoid must not overflow. */
            if (f64) ((double *)x.data)[0] = -800;
            else ((float *)x.data)[0] = -100;
            const qf_tensor *in[1] = {&x};
            qf_node_runner tc;
            REQUIRE_OK(qf_node_runner_init(&tc, ops[k], "n0", 1, in, 1, 13));
            CHECKF(qf_node_runner_run(&tc) == QF_OK, "%s: %s", qf_op_name(ops[k]), qf_error_message());
            double want[100];
            for (int i = 0; i < 100; i++) want[i] = ref_act(ops[k], qf_tensor_get_f64(&x, i));
            expect_values(qf_op_name(ops[k]), &tc.out[0], want, 1e-6, 1e-7);
            qf_node_runner_free(&tc);
            qf_tensor_free(&x);
        }
    }
}

static void test_clip(void)
{
    int64_t d[] = {6}, s[] = {0};
    double xv[] = {-3, -1, 0, 2, 5, 9};
    for (int variant = 0; variant < 4; variant++) {
        qf_tensor x = make_vals(QF_DTYPE_F32, 1, d, xv);
        double lo[] = {-1}, hi[] = {4};
        qf_tensor tl = make_vals(QF_DTYPE_F32, 0, s, lo), th = make_vals(QF_DTYPE_F32, 0, s, hi);
        const qf_tensor *in[3] = {&x, variant & 1 ? &tl : NULL, variant & 2 ? &th : NULL};
        qf_node_runner tc;
        REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_CLIP, "n0", variant & 2 ? 3 : variant ? 2 : 1, in, 1, 13));
        CHECKF(qf_node_runner_run(&tc) == QF_OK, "clip %d: %s", variant, qf_error_message());
        double want[6];
        for (int i = 0; i < 6; i++) {
            double v = xv[i];
            if (variant & 1) v = fmax(v, -1);
            if (variant & 2) v = fmin(v, 4);
            want[i] = v;
        }
        expect_values("clip", &tc.out[0], want, 0, 0);
        qf_node_runner_free(&tc);
        qf_tensor_free(&x);
        qf_tensor_free(&tl);
        qf_tensor_free(&th);
    }
    /* int8, min only. */
    double iv[] = {-128, -5, 0, 3, 100, 127}, lo[] = {-4};
    qf_tensor x = make_vals(QF_DTYPE_I8, 1, d, iv), tl = make_vals(QF_DTYPE_I8, 0, s, lo);
    const qf_tensor *in[2] = {&x, &tl};
    qf_node_runner tc;
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_CLIP, "n0", 2, in, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "clip int8: %s", qf_error_message());
    double want[] = {-4, -4, 0, 3, 100, 127};
    expect_values("clip int8", &tc.out[0], want, 0, 0);
    qf_node_runner_free(&tc);
    qf_tensor_free(&x);
    qf_tensor_free(&tl);
}

static void test_softmax(void)
{
    int64_t d[] = {2, 3, 4};
    struct {
        int64_t opset, axis;
        int has_axis;
    } cases[] = {{13, 1, 1}, {13, 0, 1}, {13, -1, 0}, {13, 2, 1}, {11, 1, 0}, {11, 0, 1}, {12, 2, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        qf_tensor x = make(QF_DTYPE_F32, 3, d, 50);
        ((float *)x.data)[0] = 1000; /* stable: subtracts the max */
        const qf_tensor *in[1] = {&x};
        qf_node_runner tc;
        REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_SOFTMAX, "n0", 1, in, 1, cases[c].opset));
        if (cases[c].has_axis) qf_node_set_attr_int(tc.g, tc.n, "axis", cases[c].axis);
        char what[48];
        snprintf(what, sizeof what, "softmax case %zu", c);
        CHECKF(qf_node_runner_run(&tc) == QF_OK, "%s: %s", what, qf_error_message());
        int64_t axis = cases[c].has_axis ? cases[c].axis : cases[c].opset >= 13 ? -1 : 1;
        if (axis < 0) axis += 3;
        int64_t outer = 1, len = 1, inner = 1;
        for (int i = 0; i < axis; i++) outer *= d[i];
        if (cases[c].opset < 13) {
            for (int i = (int)axis; i < 3; i++) len *= d[i];
        } else {
            len = d[axis];
            for (int i = (int)axis + 1; i < 3; i++) inner *= d[i];
        }
        double want[24];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                double m = -INFINITY, s = 0;
                for (int64_t k = 0; k < len; k++) m = fmax(m, qf_tensor_get_f64(&x, (o * len + k) * inner + j));
                for (int64_t k = 0; k < len; k++) s += exp(qf_tensor_get_f64(&x, (o * len + k) * inner + j) - m);
                for (int64_t k = 0; k < len; k++)
                    want[(o * len + k) * inner + j] = exp(qf_tensor_get_f64(&x, (o * len + k) * inner + j) - m) / s;
            }
        expect_values(what, &tc.out[0], want, 1e-5, 1e-7);
        qf_node_runner_free(&tc);
        qf_tensor_free(&x);
    }
}

/* --- quantization --------------------------------------------------------------------- */

static void test_quant_math(void)
{
    float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4999998f, 3.0f, -0.0f, 8388609.0f};
    float want[] = {0, 2, 2, -0.0f, -2, -2, 2, 3, 0, 8388609.0f};
    for (int i = 0; i < 10; i++)
        CHECKF(qf_round_half_even_f32(in[i]) == want[i], "round_half_even(%.9g) = %.9g, want %.9g", in[i],
              qf_round_half_even_f32(in[i]), want[i]);
    CHECKF(isnan(qf_round_half_even_f32(NAN)), "round(NaN) is NaN");
    CHECKF(qf_quantize_s8(1000.f, 1.f, 0) == 127 && qf_quantize_s8(-1000.f, 1.f, 0) == -128, "s8 saturates");
    CHECKF(qf_quantize_u8(-1.f, 1.f, 0) == 0 && qf_quantize_u8(300.f, 1.f, 0) == 255, "u8 saturates");
    CHECKF(qf_quantize_s8(NAN, 1.f, 3) == 3, "NaN quantizes to the zero point");
    CHECKF(qf_quantize_u8(1.25f, 0.5f, 128) == 130, "u8 tie 2.5 -> 2 + 128");
    CHECKF(qf_quantize_s8(INFINITY, 1.f, 0) == 127, "inf saturates");
    CHECKF(qf_dequantize_f32(-128, 0.5f, -128) == 0.f && qf_dequantize_f32(127, 0.5f, -128) == 127.5f, "dequantize");
}

static void test_quantize_ops(void)
{
    /* Per tensor, uint8 default zero point: ties go to even. */
    int64_t d6[] = {6}, s0[] = {0};
    double xv[] = {0, 1, 3, 5, -2, 1000}, sc[] = {2};
    qf_tensor x = make_vals(QF_DTYPE_F32, 1, d6, xv), scale = make_vals(QF_DTYPE_F32, 0, s0, sc);
    const qf_tensor *in[3] = {&x, &scale, NULL};
    qf_node_runner tc;
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_QUANTIZE, "n0", 2, in, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "quantize default zp: %s", qf_error_message());
    CHECKF(tc.out[0].dtype == QF_DTYPE_U8, "quantize without zp gives uint8");
    double want_u8[] = {0, 0, 2, 2, 0, 255};
    expect_values("quantize u8 per tensor", &tc.out[0], want_u8, 0, 0);
    qf_node_runner_free(&tc);
    qf_tensor_free(&x);
    qf_tensor_free(&scale);

    /* Per axis (axis 1 of [2, 3, 2]) int8, and back. */
    int64_t dx[] = {2, 3, 2}, d3[] = {3};
    qf_tensor xa = make(QF_DTYPE_F32, 3, dx, 3);
    double scv[] = {0.1, 0.02, 0.5}, zpv[] = {0, -10, 5};
    qf_tensor sa = make_vals(QF_DTYPE_F32, 1, d3, scv), za = make_vals(QF_DTYPE_I8, 1, d3, zpv);
    const qf_tensor *ina[3] = {&xa, &sa, &za};
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_QUANTIZE, "n0", 3, ina, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "quantize per axis: %s", qf_error_message());
    double want[12], deq[12];
    for (int i = 0; i < 12; i++) {
        int c = (i / 2) % 3;
        float v = ((float *)xa.data)[i] / (float)scv[c];
        double r = nearbyint(v) + zpv[c];
        want[i] = r < -128 ? -128 : r > 127 ? 127 : r;
        deq[i] = (want[i] - zpv[c]) * (float)scv[c];
    }
    expect_values("quantize s8 per axis", &tc.out[0], want, 0, 0);
    qf_tensor q;
    qf_tensor_copy(&q, &tc.out[0]);
    qf_node_runner_free(&tc);
    const qf_tensor *ind[3] = {&q, &sa, &za};
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_DEQUANTIZE, "n0", 3, ind, 1, 13));
    qf_node_set_attr_int(tc.g, tc.n, "axis", -2);
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "dequantize per axis: %s", qf_error_message());
    expect_values("dequantize s8 per axis (axis -2)", &tc.out[0], deq, 1e-6, 0);
    qf_node_runner_free(&tc);

    /* A per-axis scale of the wrong length is a shape error naming the node. */
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_QUANTIZE, "n0", 3, ina, 1, 13));
    qf_node_set_attr_int(tc.g, tc.n, "axis", 2);
    expect_error("per-axis length", qf_node_runner_run(&tc), QF_ERR_SHAPE, "'n0'", "axis 2");
    qf_node_runner_free(&tc);
    qf_tensor_free(&q);
    qf_tensor_free(&xa);
    qf_tensor_free(&sa);
    qf_tensor_free(&za);

    /* int32 bias dequantize. */
    int64_t d2[] = {2};
    double bv[] = {-1000, 70000}, bs[] = {0.001};
    qf_tensor xb = make_vals(QF_DTYPE_I32, 1, d2, bv), sb = make_vals(QF_DTYPE_F32, 0, s0, bs);
    const qf_tensor *inb[2] = {&xb, &sb};
    REQUIRE_OK(qf_node_runner_init(&tc, QF_OP_DEQUANTIZE, "n0", 2, inb, 1, 13));
    CHECKF(qf_node_runner_run(&tc) == QF_OK, "dequantize int32: %s", qf_error_message());
    double wb[] = {-1.0, 70.0};
    expect_values("dequantize int32", &tc.out[0], wb, 1e-6, 0);
    qf_node_runner_free(&tc);
    qf_tensor_free(&xb);
    qf_tensor_free(&sb);
}

int main(void)
{
    RUN(test_broadcast_shapes);
    RUN(test_bcast_iter);
    RUN(test_binary);
    RUN(test_integer_semantics);
    RUN(test_pow_types);
    RUN(test_unary);
    RUN(test_gemm);
    RUN(test_matmul);
    RUN(test_linear);
    RUN(test_infer_errors);
    RUN(test_activations);
    RUN(test_clip);
    RUN(test_softmax);
    RUN(test_quant_math);
    RUN(test_quantize_ops);
    return qf_check_report();
}
