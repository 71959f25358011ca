/* The oneDNN float forward kernels (src/ops/dnnl_*.c) against the reference
 * C kernels, on odd shapes: groups, depthwise, strides, asymmetric pads,
 * dilations, batch 1 and 3, channel counts that are not multiples of 16,
 * 1-D / 2-D / 3-D, channels-first and channels-last inputs and outputs
 * (converted here), and fused post-ops (activations, a residual Add).
 *
 * Each case builds a small graph: the node under test, then the nodes to fuse
 * after it. The reference runs every node with qf_node_eval (QF_ENGINE_REF's
 * kernels); the backend runs the node's .dnnl column alone with io->fused set,
 * as the plan would.
 *
 * The helpers that build and check a case are in dnnl_case.h (with the
 * tolerance), the Conv / ConvTranspose / post-op cases in dnnl_conv_cases.h:
 * both header-only, included here once (the check harness keeps its counts
 * in this file's statics, so the cases run in one translation unit).
 *
 * Without oneDNN (a build with -DQF_ONEDNN=OFF, or no libdnnl.so.2) the test
 * checks that the backend is off and exits 77 (skipped: nothing was
 * compared), as test_dnnl_qlinear.c does.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dnnl/dnnl_lib.h"
#include "backend/dnnl/dnnl_kernels.h"
#include "ops/op_table.h"
#include "qfold/exec.h"
#include "tools/qf_check.h"

/* Without oneDNN: 77 (ctest's skip, SKIP_RETURN_CODE in dnnl.cmake) when
 * the checks that the backend is off passed, else their failure. */
static int skipped(void)
{
    int rc = qf_check_report();
    return rc ? rc : 77;
}

#if QF_HAVE_DNNL

#include "ops/dnnl_case.h"
#include "ops/dnnl_conv_cases.h"

/* --- Gemm, MatMul, linear ------------------------------------------------------ */

static void gemm_case(dcase *c, bool ta, bool tb, float alpha, float beta, int cdims, bool b_const)
{
    const int64_t M = 5, K = 19, N = 17;
    int64_t ad[2] = {ta ? K : M, ta ? M : K}, bd[2] = {tb ? N : K, tb ? K : N};
    int64_t cd[2][2] = {{N}, {M, 1}};
    qf_value *in[3] = {dc_val(c, false, 0, 2, ad), dc_val(c, b_const, 0, 2, bd), NULL};
    int nin = 2;
    if (cdims == 1) in[2] = dc_val(c, true, 0, 1, cd[0]), nin = 3;
    if (cdims == 2) in[2] = dc_val(c, false, 0, 2, cd[1]), nin = 3;
    if (cdims == 3) {
        int64_t full[2] = {M, N};
        in[2] = dc_val(c, false, 0, 2, full), nin = 3;
    }
    if (cdims == 4) in[2] = dc_val(c, true, 0, 0, NULL), nin = 3;
    qf_node *n = dc_node(c, QF_OP_GEMM, nin, in);
    REQUIRE_OK(qf_node_set_attr_int(c->g, n, "transA", ta));
    REQUIRE_OK(qf_node_set_attr_int(c->g, n, "transB", tb));
    REQUIRE_OK(qf_node_set_attr_float(c->g, n, "alpha", alpha));
    REQUIRE_OK(qf_node_set_attr_float(c->g, n, "beta", beta));
}

static void test_gemm(void)
{
    char what[128];
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cd = 0; cd < 5; cd++) {
                dcase c;
                dc_init(&c, (uint32_t)(401 + ta * 10 + tb * 5 + cd));
                float alpha = cd == 2 ? 0.5f : 1.0f, beta = cd == 3 ? 0.0f : 1.0f;
                gemm_case(&c, ta, tb, alpha, beta, cd, (ta + cd) % 2 == 0);
                snprintf(what, sizeof what, "gemm transA %d transB %d C form %d alpha %g beta %g",
                         ta, tb, cd, alpha, beta);
                dc_check(&c, what, 0, 0);
                dc_free(&c);
            }
    /* beta 2 with a C: oneDNN has no scaled binary operand. */
    dcase c;
    dc_init(&c, 499);
    gemm_case(&c, false, false, 1.0f, 2.0f, 1, true);
    dc_declines(&c, "gemm beta 2");
    dc_free(&c);
}

static void test_matmul(void)
{
    static const struct {
        const char *what;
        int na, nb;
        int64_t a[4], b[4];
        bool b_const;
    } mm[] = {
        {"matmul 2d x 2d const", 2, 2, {7, 13}, {13, 6}, true},
        {"matmul batch broadcast", 4, 3, {3, 1, 4, 5}, {2, 5, 6}, false},
        {"matmul batch broadcast B", 3, 4, {2, 4, 5}, {3, 1, 5, 6}, false},
        {"matmul 1d x 2d", 1, 2, {9}, {9, 4}, true},
        {"matmul 2d x 1d", 2, 1, {4, 9}, {9}, false},
        {"matmul 3d x 2d const", 3, 2, {3, 7, 17}, {17, 19}, true},
    };
    for (size_t i = 0; i < sizeof mm / sizeof *mm; i++) {
        dcase c;
        dc_init(&c, 501 + (uint32_t)i);
        qf_value *in[2] = {dc_val(&c, false, 0, mm[i].na, mm[i].a),
                           dc_val(&c, mm[i].b_const, 0, mm[i].nb, mm[i].b)};
        dc_node(&c, QF_OP_MATMUL, 2, in);
        dc_check(&c, mm[i].what, 0, 0);
        dc_free(&c);
    }
    for (int bias = 0; bias < 2; bias++) {
        dcase c;
        dc_init(&c, 551 + (uint32_t)bias);
        int64_t xd[3] = {2, 3, 7}, wd[2] = {5, 7}, bd[1] = {5};
        qf_value *in[3] = {dc_val(&c, false, 0, 3, xd), dc_val(&c, bias == 0, 0, 2, wd),
                           bias ? dc_val(&c, true, 0, 1, bd) : NULL};
        dc_node(&c, QF_OP_LINEAR, bias ? 3 : 2, in);
        dc_check(&c, bias ? "linear with bias" : "linear", 0, 0);
        dc_free(&c);
    }
}

/* --- pools ---------------------------------------------------------------------- */

typedef struct pool_spec {
    const char *what;
    qf_op op;
    int rank;
    int64_t n, c, in[3], k[3], stride[3], dil[3], pads[6];
    int ceil_mode, include_pad;
    bool declined;
} pool_spec;

static const pool_spec pool_specs[] = {
    {"maxpool 3x3 s2 p1", QF_OP_MAX_POOL, 2, 3, 5, {11, 10}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}},
    {"maxpool ceil_mode asym pads",
     QF_OP_MAX_POOL,
     2,
     1,
     19,
     {10, 9},
     {3, 2},
     {2, 2},
     {0},
     {0, 1, 1, 0},
     1},
    /* NHWC in and out over whole 16-channel blocks (80 = 64 + 16), as ResNet's stem maxpool. */
    {"maxpool 3x3 s2 p1, 80 channels", QF_OP_MAX_POOL, 2, 2, 80, {13, 12}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}},
    {"maxpool ceil_mode asym pads, 32 channels",
     QF_OP_MAX_POOL,
     2,
     1,
     32,
     {10, 9},
     {3, 2},
     {2, 2},
     {0},
     {0, 1, 1, 0},
     1},
    {"maxpool dilations", QF_OP_MAX_POOL, 2, 3, 4, {12, 11}, {3, 2}, {1, 2}, {2, 3}, {1, 0, 1, 1}},
    {"maxpool 1d", QF_OP_MAX_POOL, 1, 3, 3, {17}, {4}, {3}, {0}, {1, 2}},
    {"maxpool 3d",
     QF_OP_MAX_POOL,
     3,
     1,
     3,
     {5, 6, 7},
     {2, 3, 2},
     {2, 1, 2},
     {0},
     {0, 1, 1, 0, 1, 0},
     1},
    {"avgpool exclude pad", QF_OP_AVG_POOL, 2, 3, 5, {11, 10}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}},
    {"avgpool include pad",
     QF_OP_AVG_POOL,
     2,
     3,
     5,
     {11, 10},
     {3, 3},
     {2, 2},
     {0},
     {1, 2, 0, 1},
     0,
     1},
    {"avgpool ceil exclude pad",
     QF_OP_AVG_POOL,
     2,
     1,
     7,
     {10, 9},
     {3, 3},
     {2, 2},
     {0},
     {0, 0, 0, 0},
     1,
     0},
    {"avgpool ceil include pad past the pads",
     QF_OP_AVG_POOL,
     2,
     1,
     7,
     {10, 9},
     {3, 3},
     {2, 2},
     {0},
     {0, 0, 0, 0},
     1,
     1,
     true},
    {"avgpool 1d include pad", QF_OP_AVG_POOL, 1, 3, 3, {17}, {4}, {3}, {0}, {1, 2}, 0, 1},
    {"avgpool 3d",
     QF_OP_AVG_POOL,
     3,
     1,
     3,
     {5, 6, 7},
     {2, 3, 2},
     {2, 1, 2},
     {0},
     {0, 1, 1, 0, 1, 0}},
};

static void test_pools(void)
{
    for (size_t i = 0; i < sizeof pool_specs / sizeof *pool_specs; i++) {
        const pool_spec *s = &pool_specs[i];
        for (int l = 0; l < 4; l++) {
            dcase c;
            dc_init(&c, 601 + (uint32_t)i);
            int64_t xd[5] = {s->n, s->c};
            for (int d = 0; d < s->rank; d++) xd[2 + d] = s->in[d];
            qf_value *in[1] = {dc_val(&c, false, 0, 2 + s->rank, xd)};
            qf_node *n = dc_node(&c, s->op, 1, in);
            set_ints(&c, n, "kernel_shape", s->rank, s->k);
            set_ints(&c, n, "strides", s->rank, s->stride);
            set_ints(&c, n, "pads", 2 * s->rank, s->pads);
            if (s->dil[0]) set_ints(&c, n, "dilations", s->rank, s->dil);
            if (s->ceil_mode) REQUIRE_OK(qf_node_set_attr_int(c.g, n, "ceil_mode", 1));
            if (s->include_pad) REQUIRE_OK(qf_node_set_attr_int(c.g, n, "count_include_pad", 1));
            if (s->declined) {
                dc_declines(&c, s->what);
                dc_free(&c);
                break;
            }
            dc_check(&c, s->what, layouts[l][0], layouts[l][1]);
            dc_free(&c);
        }
    }
    for (int rank = 1; rank <= 3; rank++)
        for (int l = 0; l < 4; l++) {
            dcase c;
            dc_init(&c, 651 + (uint32_t)rank);
            int64_t xd[5] = {3, 19, 7, 6, 5};
            qf_value *in[1] = {dc_val(&c, false, 0, 2 + rank, xd)};
            dc_node(&c, QF_OP_GLOBAL_AVG_POOL, 1, in);
            dc_check(&c, "global average pool", layouts[l][0], layouts[l][1]);
            dc_free(&c);
        }
    /* MaxPool with Indices stays with the reference. */
    dcase c;
    dc_init(&c, 699);
    int64_t xd[4] = {1, 3, 6, 6}, k[2] = {2, 2};
    qf_value *in[1] = {dc_val(&c, false, 0, 4, xd)};
    qf_node *n = qf_graph_add_node(c.g, QF_OP_MAX_POOL, "mp", 1, in, 2);
    REQUIRE(n != NULL, "node");
    c.n = n;
    set_ints(&c, n, "kernel_shape", 2, k);
    REQUIRE_OK(qf_graph_infer_shapes(c.g));
    dk_run r;
    qf_error_clear();
    qf_kernel_io io = {.node = n, .opset = 17, .nin = 1, .nout = 2};
    const qf_tensor *it[1] = {&n->inputs[0]->type};
    qf_tensor *ot[2] = {&n->outputs[0]->type, &n->outputs[1]->type};
    io.in = it;
    io.out = ot;
    memset(&r, 0, sizeof r);
    qf_dk_prim state;
    memset(&state, 0, sizeof state);
    CHECK(qf_max_pool_dnnl.prepare(&io, &state) == QF_ERR_UNSUPPORTED &&
          strcmp(qf_error_message(), "no error") == 0);
    dc_free(&c);
}

/* --- BatchNormalization, activations ------------------------------------------- */

static void test_batch_norm(void)
{
    static const int64_t shapes[3][5] = {{3, 19, 5, 7}, {1, 33, 4, 3, 2}, {6, 21}};
    static const int ranks[3] = {4, 5, 2};
    for (int s = 0; s < 3; s++)
        for (int l = 0; l < (ranks[s] > 2 ? 2 : 1); l++) {
            dcase c;
            dc_init(&c, 701 + (uint32_t)s);
            int64_t cd[1] = {shapes[s][1]};
            qf_value *in[5] = {dc_val(&c, false, 0, ranks[s], shapes[s]),
                               dc_val(&c, true, 0, 1, cd), dc_val(&c, s == 1, 0, 1, cd),
                               dc_val(&c, true, 0, 1, cd), dc_val(&c, true, 1.2f, 1, cd)};
            qf_node *n = dc_node(&c, QF_OP_BATCH_NORM, 5, in);
            REQUIRE_OK(qf_node_set_attr_float(c.g, n, "epsilon", 1e-3f));
            dc_check(&c, "batch norm", layouts[l][0], layouts[l][1]);
            dc_free(&c);
        }
}

static void test_activations(void)
{
    static const qf_op ops[] = {QF_OP_LEAKY_RELU, QF_OP_SIGMOID, QF_OP_TANH, QF_OP_HARD_SWISH};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        for (int l = 0; l < 2; l++) {
            dcase c;
            dc_init(&c, 801 + (uint32_t)i);
            int64_t xd[4] = {3, 5, 7, 9};
            /* Values in [-4, 4]: past every activation's knees. */
            qf_value *x = dc_val(&c, false, 0, 4, xd);
            float *p = dc_data(&c, x)->data;
            for (int64_t k = 0; k < 3 * 5 * 7 * 9; k++) p[k] *= 4.0f;
            /* NaN passes through every reference activation (as in PyTorch). */
            p[7] = p[100] = NAN;
            qf_value *in[1] = {x};
            dc_node(&c, ops[i], 1, in);
            dc_check(&c, qf_op_schema_get(ops[i])->name, layouts[l][0], layouts[l][1]);
            dc_free(&c);
        }
    /* No oneDNN column: Relu, relu6 and Clip lose NaN in oneDNN (max / min). */
    CHECK(!qf_backend_kernels_get(QF_OP_RELU) && !qf_backend_kernels_get(QF_OP_RELU6) &&
          !qf_backend_kernels_get(QF_OP_CLIP));
}

/* --- Add, Sub, Mul, Div ---------------------------------------------------------- */

static void test_binary(void)
{
    static const qf_op ops[4] = {QF_OP_ADD, QF_OP_SUB, QF_OP_MUL, QF_OP_DIV};
    static const struct {
        const char *what;
        int na, nb;
        int64_t a[4], b[4];
        bool b_const, spatial;
    } shapes[] = {
        {"same shape", 4, 4, {3, 5, 7, 6}, {3, 5, 7, 6}, false, true},
        {"per channel", 4, 4, {3, 19, 4, 5}, {1, 19, 1, 1}, true, true},
        {"per channel, rank 3 constant", 4, 3, {1, 6, 4, 5}, {6, 1, 1}, true, false},
        {"scalar", 4, 0, {2, 3, 4, 5}, {0}, true, false},
        {"rows", 2, 1, {7, 9}, {9}, false, false},
    };
    char what[128];
    for (int o = 0; o < 4; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int l = 0; l < (shapes[s].spatial ? 4 : 1); l++) {
                dcase c;
                dc_init(&c, 901 + (uint32_t)(o * 10 + (int)s));
                /* The divisor in [1, 3]: away from 0. */
                qf_value *in[2] = {dc_val(&c, false, 0, shapes[s].na, shapes[s].a),
                                   dc_val(&c, shapes[s].b_const, 2.0f, shapes[s].nb, shapes[s].b)};
                dc_node(&c, ops[o], 2, in);
                snprintf(what, sizeof what, "%s %s", qf_op_schema_get(ops[o])->name,
                         shapes[s].what);
                /* In the mixed layouts, one operand channels-last. */
                uint32_t in_bits = l == 0 ? 0 : l == 1 ? 3 : l == 2 ? 1 : 2;
                if (shapes[s].na != shapes[s].nb) in_bits &= 1u;
                dc_check(&c, what, in_bits, l == 1 || l == 3 ? 1 : 0);
                dc_free(&c);
            }
    /* The broadcast operand first: Add and Mul swap, Sub and Div decline. */
    for (int o = 0; o < 4; o++) {
        dcase c;
        dc_init(&c, 991 + (uint32_t)o);
        int64_t a[4] = {1, 7, 1, 1}, b[4] = {2, 7, 3, 4};
        qf_value *in[2] = {dc_val(&c, true, 2.0f, 4, a), dc_val(&c, false, 0, 4, b)};
        dc_node(&c, ops[o], 2, in);
        snprintf(what, sizeof what, "%s broadcast first", qf_op_schema_get(ops[o])->name);
        if (ops[o] == QF_OP_ADD || ops[o] == QF_OP_MUL)
            dc_check(&c, what, 2, 1);
        else
            dc_declines(&c, what);
        dc_free(&c);
    }
}

/* --- the blocked layout (nChw16c, io->blocked) ---------------------------------- */

/* 3x3 stride-1 convs that run as Winograd ones on blocked activations:
 * test_blocked checks their numbers, test_winograd that Winograd ran. */
static const conv_spec wino_convs[] = {
    {"blocked 3x3 64->64 s1", 2, 3, 64, 64, 1, {16, 14}, {3, 3}, {1, 1}, {0}, {1, 1, 1, 1}, NULL, true, true},
    {"blocked 3x3 32->48 s1 valid", 2, 1, 32, 48, 1, {18, 16}, {3, 3}, {1, 1}, {0}, {0}, NULL, true, true},
    {"blocked 3x3 256->256 s1 14x14", 2, 1, 256, 256, 1, {14, 14}, {3, 3}, {1, 1}, {0}, {1, 1, 1, 1}, NULL, true, true},
    {"blocked 3x3 48->32 s1 pads 1,0,0,1", 2, 3, 48, 32, 1, {16, 15}, {3, 3}, {1, 1}, {0}, {1, 0, 0, 1}, NULL, true, false},
    {"blocked 3x3 24->40 s1", 2, 3, 24, 40, 1, {14, 15}, {3, 3}, {1, 1}, {0}, {1, 1, 1, 1}, NULL, true, true},
};

/* Every kernel the plan lets take the blocked layout, on channel counts that
 * are not multiples of 16 (24, 40, 3, 8), batch 1 and 3; an activation only
 * over whole blocks of channels (48; 40 declined: oneDNN 2.6 has only its
 * reference eltwise there, and the plan then goes NHWC). */
static void test_blocked(void)
{
    static const conv_spec convs[] = {
        {"blocked 1x1 24->40", 2, 1, 24, 40, 1, {9, 7}, {1, 1}, {0}, {0}, {0}, NULL, true, true},
        {"blocked 1x1 40->24", 2, 3, 40, 24, 1, {6, 5}, {1, 1}, {0}, {0}, {0}, NULL, true, true},
        {"blocked depthwise 3x3 s2", 2, 3, 24, 24, 24, {9, 8}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}, NULL, true, true},
        {"blocked depthwise 5x5", 2, 1, 40, 40, 40, {7, 7}, {5, 5}, {1, 1}, {0}, {2, 2, 2, 2}, NULL, true, true},
        {"blocked 3x3 24->40 s2", 2, 3, 24, 40, 1, {8, 9}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}, NULL, true, false},
        {"blocked SE fc 40->8 on 1x1", 2, 3, 40, 8, 1, {1, 1}, {1, 1}, {0}, {0}, {0}, NULL, true, true},
        {"blocked SE fc 8->40 on 1x1", 2, 1, 8, 40, 1, {1, 1}, {1, 1}, {0}, {0}, {0}, NULL, true, true},
    };
    const size_t nconvs = sizeof convs / sizeof *convs, nwino = sizeof wino_convs / sizeof *wino_convs;
    char what[160];
    for (size_t i = 0; i < nconvs + nwino; i++)
        for (int post = 0; post < 3; post++) {
            const conv_spec *cs = i < nconvs ? &convs[i] : &wino_convs[i - nconvs];
            dcase c;
            dc_init(&c, 1301 + (uint32_t)(i * 3 + (size_t)post));
            conv_case(&c, cs);
            if (post == 1) add_post(&c, P_SILU);
            if (post == 2) add_post(&c, P_ADD);
            snprintf(what, sizeof what, "%s%s", cs->what, post == 1 ? " + silu" : post == 2 ? " + add" : "");
            dc_check_blocked(&c, what, 1, 1);
            dc_free(&c);
        }
    /* A first conv over the image's 3 channels: NCHW in, blocked out (the
     * plan's choice), both batches. */
    for (int64_t nb = 1; nb <= 3; nb += 2) {
        const conv_spec s = {"blocked stem 3->24 s2", 2, nb, 3, 24, 1, {11, 12}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1},
                             NULL, true, true};
        dcase c;
        dc_init(&c, 1351 + (uint32_t)nb);
        conv_case(&c, &s);
        add_post(&c, P_SILU);
        dc_check_blocked(&c, s.what, 0, 1);
        dc_free(&c);
    }
    /* Pools: max 3x3 s2, average, global average. */
    static const qf_op pools[3] = {QF_OP_MAX_POOL, QF_OP_AVG_POOL, QF_OP_GLOBAL_AVG_POOL};
    for (int o = 0; o < 3; o++)
        for (int64_t nb = 1; nb <= 3; nb += 2) {
            dcase c;
            dc_init(&c, 1361 + (uint32_t)(o * 4 + nb));
            int64_t xd[4] = {nb, o == 2 ? 40 : 24, 9, 10}, k[2] = {3, 3}, st2[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
            qf_value *in[1] = {dc_val(&c, false, 0, 4, xd)};
            qf_node *n = dc_node(&c, pools[o], 1, in);
            if (o < 2) {
                set_ints(&c, n, "kernel_shape", 2, k);
                set_ints(&c, n, "strides", 2, st2);
                set_ints(&c, n, "pads", 4, pads);
            }
            dc_check_blocked(&c, qf_op_schema_get(pools[o])->name, 1, 1);
            dc_free(&c);
        }
    /* Binary: same shape, and squeeze-excite's per-channel scale [N, C, 1, 1]
     * (blocked too: an activation of the plan). */
    for (int s = 0; s < 2; s++)
        for (int64_t nb = 1; nb <= 3; nb += 2) {
            dcase c;
            dc_init(&c, 1371 + (uint32_t)(s * 4 + nb));
            int64_t a[4] = {nb, 24, 7, 6}, b[4] = {nb, 24, s ? 1 : 7, s ? 1 : 6};
            qf_value *in[2] = {dc_val(&c, false, 0, 4, a), dc_val(&c, false, 1.0f, 4, b)};
            dc_node(&c, s ? QF_OP_MUL : QF_OP_ADD, 2, in);
            dc_check_blocked(&c, s ? "blocked Mul by [N, C, 1, 1]" : "blocked Add", 3, 1);
            dc_free(&c);
        }
    /* BatchNormalization and an activation over 40 channels. */
    for (int64_t nb = 1; nb <= 3; nb += 2) {
        dcase c;
        dc_init(&c, 1381 + (uint32_t)nb);
        int64_t xd[4] = {nb, 40, 5, 7}, cd[1] = {40};
        qf_value *in[5] = {dc_val(&c, false, 0, 4, xd), dc_val(&c, true, 0, 1, cd), dc_val(&c, true, 0, 1, cd),
                           dc_val(&c, true, 0, 1, cd), dc_val(&c, true, 1.2f, 1, cd)};
        dc_node(&c, QF_OP_BATCH_NORM, 5, in);
        dc_check_blocked(&c, "blocked batch norm", 1, 1);
        dc_free(&c);
        for (int64_t ch = 40; ch <= 48; ch += 8) {
            dc_init(&c, 1391 + (uint32_t)(nb + ch));
            int64_t ad[4] = {nb, ch, 5, 7};
            qf_value *x[1] = {dc_val(&c, false, 0, 4, ad)};
            dc_node(&c, QF_OP_SIGMOID, 1, x);
            if (ch == 48) {
                dc_check_blocked(&c, "blocked sigmoid", 1, 1);
            } else {
                REQUIRE_OK(qf_graph_infer_shapes(c.g));
                dk_run r;
                dk_blocked = true;
                qf_status st = dk_prepare(&c, &r, 1, 1);
                dk_blocked = false;
                CHECKF(st == QF_ERR_UNSUPPORTED, "blocked sigmoid over 40 channels: prepare gave %d", (int)st);
                if (st == QF_OK) {
                    r.k->release(r.state);
                    free(r.state_raw);
                }
            }
            dc_free(&c);
        }
    }
}

/* --- Winograd (qf_dnnl_conv_winograd) ------------------------------------------ */

/* The implementation oneDNN chose for a conv case prepared channels-last
 * (blocked, or NHWC). */
static void wino_impl(dcase *c, bool blocked, char *impl, size_t cap)
{
    REQUIRE_OK(qf_graph_infer_shapes(c->g));
    dk_run r;
    dk_blocked = blocked;
    qf_error_clear();
    qf_status st = dk_prepare(c, &r, 1, 1);
    dk_blocked = false;
    REQUIRE(st == QF_OK, "prepare failed (%d: %s)", (int)st, qf_error_message());
    const char *s = NULL;
    QF_DNNL(primitive_desc_query)(((const qf_dk_prim *)r.state)->pd, dnnl_query_impl_info_str, 0, (void *)&s);
    snprintf(impl, cap, "%s", s ? s : "?");
    r.k->release(r.state);
    free(r.state_raw);
}

/* test_blocked checks the numbers of the 3x3 stride-1 cases; here, that they
 * did run as Winograd convolutions (with and without a residual sum), that
 * QFOLD_WINOGRAD=0 and the NHWC layout give the direct kernel, and which
 * convs the predicate takes. */
static void test_winograd(void)
{
    const conv_spec *wino = wino_convs;
    char impl[128];
    for (size_t i = 0; i < sizeof wino_convs / sizeof *wino_convs; i++)
        for (int mode = 0; mode < 3; mode++) {
            dcase c;
            dc_init(&c, 1401 + (uint32_t)(i * 3 + (size_t)mode));
            conv_case(&c, &wino[i]);
            if (mode == 1) add_post(&c, P_ADD);
            REQUIRE_OK(qf_graph_infer_shapes(c.g));
            CHECKF(qf_dnnl_conv_winograd(c.n), "%s: not a Winograd conv", wino[i].what);
            if (mode == 2) setenv("QFOLD_WINOGRAD", "0", 1);
            wino_impl(&c, true, impl, sizeof impl);
            unsetenv("QFOLD_WINOGRAD");
            CHECKF((strstr(impl, "wino") != NULL) == (mode < 2), "%s%s: oneDNN ran %s", wino[i].what,
                   mode == 1 ? " + add" : mode == 2 ? " with QFOLD_WINOGRAD=0" : "", impl);
            dc_free(&c);
        }
    /* Not Winograd: stride 2, dilation 2, groups, 5x5, pads of 2, a 13x14
     * output plane (QF_WINO_MIN_PLANE). */
    static const conv_spec direct[] = {
        {"3x3 s2", 2, 1, 32, 32, 1, {9, 9}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}, NULL, true, true},
        {"3x3 dilation 2", 2, 1, 32, 32, 1, {9, 9}, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, NULL, true, true},
        {"3x3 2 groups", 2, 1, 32, 32, 2, {9, 9}, {3, 3}, {1, 1}, {0}, {1, 1, 1, 1}, NULL, true, true},
        {"5x5", 2, 1, 32, 32, 1, {9, 9}, {5, 5}, {1, 1}, {0}, {2, 2, 2, 2}, NULL, true, true},
        {"3x3 pads 2", 2, 1, 32, 32, 1, {9, 9}, {3, 3}, {1, 1}, {0}, {2, 2, 2, 2}, NULL, true, true},
        {"3x3 13x14 out", 2, 1, 32, 32, 1, {13, 14}, {3, 3}, {1, 1}, {0}, {1, 1, 1, 1}, NULL, true, true},
    };
    for (size_t i = 0; i < sizeof direct / sizeof *direct; i++) {
        dcase c;
        dc_init(&c, 1421 + (uint32_t)i);
        conv_case(&c, &direct[i]);
        REQUIRE_OK(qf_graph_infer_shapes(c.g));
        CHECKF(!qf_dnnl_conv_winograd(c.n), "%s: taken as a Winograd conv", direct[i].what);
        dc_free(&c);
    }
    /* NHWC activations: the direct kernel. */
    dcase c;
    dc_init(&c, 1431);
    conv_case(&c, &wino[0]);
    wino_impl(&c, false, impl, sizeof impl);
    CHECKF(!strstr(impl, "wino"), "3x3 64->64 s1 on NHWC: oneDNN ran %s", impl);
    dc_free(&c);
}

/* --- which nodes run on one thread ---------------------------------------------- */

/* Whether libgomp's idle threads sleep at once, from the environment it read
 * (qfold's own GOMP_SPINCOUNT when the user set none): passive, or a plain
 * spin count of at most 300 (qfold's busy-machine spin). */
static bool env_short_wait(void)
{
    const char *w = getenv("OMP_WAIT_POLICY");
    if (w) return strcmp(w, "passive") == 0 || strcmp(w, "PASSIVE") == 0;
    const char *s = getenv("GOMP_SPINCOUNT");
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : 0;
    return s && end != s && *end == '\0' && v <= 300;
}

/* qf_dk_finish's bound on X + W + Y: 64Ki elements, 256Ki where libgomp's
 * threads sleep at once (ctest runs this also with OMP_WAIT_POLICY=passive
 * and with GOMP_SPINCOUNT=30000, so both sides are checked wherever the
 * suite runs). A GlobalAveragePool of 16 channels: X + Y elements. */
static void test_serial_bound(void)
{
    const bool short_wait = env_short_wait();
    CHECKF(qf_dnnl()->short_wait == short_wait, "short_wait %d, the environment says %d",
           (int)qf_dnnl()->short_wait, (int)short_wait);
    static const struct {
        int64_t h, w;
        int serial; /* 1 always, 0 never, -1 with the short wait */
    } cases[] = {{60, 60, 1},    {64, 64, -1},  {100, 100, -1},
                 {128, 127, -1}, {128, 128, 0}, {200, 100, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dcase c;
        dc_init(&c, 1201 + (uint32_t)i);
        int64_t xd[4] = {1, 16, cases[i].h, cases[i].w};
        qf_value *in[1] = {dc_val(&c, false, 0, 4, xd)};
        dc_node(&c, QF_OP_GLOBAL_AVG_POOL, 1, in);
        REQUIRE_OK(qf_graph_infer_shapes(c.g));
        dk_run r;
        REQUIRE_OK(dk_prepare(&c, &r, 1, 1));
        const bool serial = ((const qf_dk_prim *)r.state)->serial;
        const bool want = cases[i].serial < 0 ? short_wait : cases[i].serial == 1;
        CHECKF(serial == want,
               "GlobalAveragePool of 16 x %lld x %lld (short wait %d): serial %d, want %d",
               (long long)cases[i].h, (long long)cases[i].w, (int)short_wait, (int)serial,
               (int)want);
        r.k->release(r.state);
        free(r.state_raw);
        dc_free(&c);
    }
}

int main(int argc, char **argv)
{
    unsetenv("QFOLD_WINOGRAD"); /* the default is checked, and test_winograd sets it */
    /* "serial-bound": that test alone (ctest's runs with libgomp's wait set
     * both ways, tests/ops/dnnl.cmake). */
    const bool bound_only = argc > 1 && strcmp(argv[1], "serial-bound") == 0;
    if (qf_set_engine(QF_ENGINE_DNNL) != QF_OK || !qf_dnnl()) {
        /* No libdnnl here: the engine says why; the reference kernels run
         * everything (every other test covers them). */
        printf("SKIP oneDNN kernels: %s\n", qf_backend_why_not());
        CHECK(!qf_dnnl_can_fuse(NULL, NULL));
        return skipped();
    }
    if (bound_only) {
        RUN(test_serial_bound);
        return qf_check_report();
    }
    /* Every case's shapes are small enough to run on one thread
     * (qf_dk_set_serial_max): run them all on oneDNN's threads, then the
     * convolutions, pools and Gemms again serially. */
    qf_dk_set_serial_max(0);
    RUN(test_conv);
    RUN(test_conv_transpose);
    RUN(test_post_ops);
    RUN(test_can_fuse);
    RUN(test_gemm);
    RUN(test_matmul);
    RUN(test_pools);
    RUN(test_batch_norm);
    RUN(test_activations);
    RUN(test_binary);
    RUN(test_silu_split);
    RUN(test_blocked);
    RUN(test_winograd);
    qf_dk_set_serial_max(-1);
    RUN(test_serial_bound);
    RUN(test_conv);
    RUN(test_post_ops);
    RUN(test_silu_split);
    qf_dk_set_silu_split(0); /* every k x k conv's SiLU after the primitive, serial */
    RUN(test_post_ops);
    qf_dk_set_silu_split(-1);
    RUN(test_gemm);
    RUN(test_pools);
    RUN(test_blocked);
    qf_dk_set_serial_max(0);
    qf_dk_set_silu_split(0); /* the SiLU after the primitive, where the kernel allows it */
    RUN(test_blocked);
    qf_dk_set_silu_split(-1);
    return qf_check_report();
}

#else /* a build without oneDNN */

int main(void)
{
    CHECK(qf_set_engine(QF_ENGINE_DNNL) != QF_OK);
    CHECK(!qf_backend_can_fuse(NULL, NULL));
    printf("SKIP oneDNN kernels: built without oneDNN\n");
    return skipped();
}

#endif
