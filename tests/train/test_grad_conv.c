/* Backward kernels of Conv and ConvTranspose (src/ops/ref/conv_backward.c)
 * against central differences (tests/tools/qf_gradcheck.h through
 * qf_node_gradcheck): 1-D, 2-D and 3-D, groups, depthwise (with a channel
 * multiplier), dilation, strides, asymmetric pads, auto_pad, output_padding,
 * with and without bias, every input slot; gradients not wanted (din NULL)
 * and no upstream gradient (dout NULL).
 *
 * Both ops are linear in each input, so the central difference is exact but
 * for float rounding of Y: with a step of 1e-2 and outputs of order 1, the
 * rounding of sum(dy * y) is ~1e-5 of a derivative of order 1, far inside
 * the default tolerance (atol 1e-3, rtol 1e-2); a wrong tap, offset or
 * group is off by a whole weight or input value. */
#include <math.h>

#include "tools/qf_check.h"
#include "qfold/exec.h"
#include "qfold/schema.h"
#include "tools/qf_node_run.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

static void fill(qf_tensor *t)
{
    float *p = t->data;
    for (int64_t i = 0, n = qf_tensor_numel(t); i < n; i++) p[i] = rnd();
}

/* One geometry. m: output channels. Zero strides / dilations mean 1. */
typedef struct conv_case {
    const char *name;
    bool transpose;
    int rank;
    int64_t n, c, m, group;
    int64_t in[3], k[3];
    int64_t stride[3], dil[3];
    int64_t pads[6]; /* begins, then ends */
    int64_t opad[3]; /* ConvTranspose output_padding */
    const char *auto_pad;
    bool bias;
    uint32_t slots; /* input slots to check (0: all) */
    int64_t oshape[3]; /* ConvTranspose output_shape (0: none) */
} conv_case;

static bool any_set(const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i]) return true;
    return false;
}

static void ones_for_zeros(const int64_t *v, int n, int64_t *out)
{
    for (int i = 0; i < n; i++) out[i] = v[i] ? v[i] : 1;
}

/* Build the node of case cc with random X, W (and B) into r. */
static bool case_init(const conv_case *cc, qf_node_runner *r, qf_tensor *x, qf_tensor *w, qf_tensor *b)
{
    int64_t xd[5] = {cc->n, cc->c}, wd[5];
    wd[0] = cc->transpose ? cc->c : cc->m;
    wd[1] = cc->transpose ? cc->m / cc->group : cc->c / cc->group;
    for (int i = 0; i < cc->rank; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
    }
    int64_t bd[1] = {cc->m};
    REQUIRE_OK(qf_tensor_init(x, QF_DTYPE_F32, 2 + cc->rank, xd));
    REQUIRE_OK(qf_tensor_init(w, QF_DTYPE_F32, 2 + cc->rank, wd));
    REQUIRE_OK(qf_tensor_init(b, QF_DTYPE_F32, 1, bd));
    fill(x);
    fill(w);
    fill(b);
    const qf_tensor *in[] = {x, w, b};
    REQUIRE_OK(qf_node_runner_init(r, cc->transpose ? QF_OP_CONV_TRANSPOSE : QF_OP_CONV, cc->name, cc->bias ? 3 : 2,
                                   in, 1, 13));
    int64_t v[6];
    if (any_set(cc->stride, cc->rank)) {
        ones_for_zeros(cc->stride, cc->rank, v);
        REQUIRE_OK(qf_node_set_attr_ints(r->g, r->n, "strides", v, cc->rank));
    }
    if (any_set(cc->dil, cc->rank)) {
        ones_for_zeros(cc->dil, cc->rank, v);
        REQUIRE_OK(qf_node_set_attr_ints(r->g, r->n, "dilations", v, cc->rank));
    }
    if (any_set(cc->pads, 2 * cc->rank)) {
        for (int i = 0; i < cc->rank; i++) {
            v[i] = cc->pads[i];
            v[cc->rank + i] = cc->pads[3 + i];
        }
        REQUIRE_OK(qf_node_set_attr_ints(r->g, r->n, "pads", v, 2 * cc->rank));
    }
    if (any_set(cc->opad, cc->rank)) REQUIRE_OK(qf_node_set_attr_ints(r->g, r->n, "output_padding", cc->opad, cc->rank));
    if (cc->group > 1) REQUIRE_OK(qf_node_set_attr_int(r->g, r->n, "group", cc->group));
    if (cc->auto_pad) REQUIRE_OK(qf_node_set_attr_string(r->g, r->n, "auto_pad", cc->auto_pad));
    if (any_set(cc->oshape, cc->rank)) REQUIRE_OK(qf_node_set_attr_ints(r->g, r->n, "output_shape", cc->oshape, cc->rank));
    return true;
}

static void check_case(const conv_case *cc)
{
    qf_node_runner r;
    qf_tensor x, w, b;
    if (!case_init(cc, &r, &x, &w, &b)) return;
    CHECK_OK(qf_node_runner_run(&r));
    qf_gradcheck_opts o = {.eps = 1e-2};
    CHECKF(qf_node_gradcheck(&r, cc->slots, false, 11, &o, stdout), "%s backward", cc->name);
    qf_node_runner_free(&r);
    qf_tensor_free(&x);
    qf_tensor_free(&w);
    qf_tensor_free(&b);
}

/* pads: begins (up to 3), then ends (up to 3), as conv_case.pads. */
#define P1(b0, e0) {b0, 0, 0, e0, 0, 0}
#define P2(b0, b1, e0, e1) {b0, b1, 0, e0, e1, 0}

static const conv_case conv_cases[] = {
    /* name, transpose, rank, n, c, m, group, in, k, stride, dil, pads, opad, auto_pad, bias, slots */
    {"conv2d", false, 2, 2, 3, 4, 1, {7, 5}, {3, 2}, {0}, {0}, {0}, {0}, NULL, true, 0},
    {"conv2d_nobias", false, 2, 2, 3, 4, 1, {6, 5}, {3, 3}, {1, 2}, {0}, P2(1, 0, 0, 2), {0}, NULL, false, 0},
    /* The odd geometry of the brief: C 3, 7 x 5, k 3 x 2, stride 2, pads
     * (1, 0, 2, 1), dilation 2, groups 3. */
    {"conv2d_odd", false, 2, 2, 3, 6, 3, {7, 5}, {3, 2}, {2, 2}, {2, 2}, P2(1, 0, 2, 1), {0}, NULL, true, 0},
    {"conv2d_groups2", false, 2, 3, 4, 6, 2, {5, 6}, {2, 3}, {1, 2}, {1, 2}, P2(0, 2, 1, 1), {0}, NULL, true, 0},
    {"depthwise", false, 2, 2, 3, 3, 3, {6, 7}, {3, 3}, {0}, {0}, P2(1, 1, 1, 1), {0}, NULL, true, 0},
    {"depthwise_s2_mult2", false, 2, 2, 3, 6, 3, {7, 6}, {3, 3}, {2, 2}, {0}, P2(1, 0, 2, 1), {0}, NULL, true, 0},
    {"depthwise_dil2", false, 2, 1, 4, 4, 4, {7, 5}, {3, 2}, {1, 2}, {2, 2}, P2(2, 1, 1, 0), {0}, NULL, false, 0},
    /* Stride 1: the padded-plane loops (dilation, asymmetric pads, channel
     * multiplier, 1-D and 3-D). */
    {"depthwise_flat_dil", false, 2, 2, 3, 6, 3, {7, 6}, {3, 2}, {0}, {2, 3}, P2(2, 0, 1, 2), {0}, NULL, true, 0},
    {"depthwise_flat_1d", false, 1, 2, 3, 3, 3, {9}, {3}, {0}, {2}, P1(0, 3), {0}, NULL, true, 0},
    {"depthwise_flat_3d", false, 3, 1, 2, 2, 2, {3, 4, 5}, {2, 3, 3}, {0}, {1, 1, 2}, {1, 0, 1, 0, 2, 1}, {0}, NULL,
     true, 0},
    {"pointwise", false, 2, 2, 4, 5, 1, {5, 3}, {1, 1}, {0}, {0}, {0}, {0}, NULL, true, 0},
    {"pointwise_groups2", false, 2, 2, 4, 6, 2, {3, 5}, {1, 1}, {0}, {0}, {0}, {0}, NULL, false, 0},
    {"pointwise_s2", false, 2, 2, 3, 4, 1, {5, 6}, {1, 1}, {2, 2}, {0}, {0}, {0}, NULL, true, 0},
    {"conv1d", false, 1, 2, 3, 4, 1, {9}, {3}, {2}, {2}, P1(1, 2), {0}, NULL, true, 0},
    {"conv1d_depthwise", false, 1, 2, 4, 4, 4, {11}, {5}, {3}, {0}, P1(2, 0), {0}, NULL, true, 0},
    {"conv3d", false, 3, 1, 2, 3, 1, {4, 5, 3}, {2, 3, 2}, {1, 2, 1}, {0}, {1, 0, 1, 0, 1, 0}, {0}, NULL, true, 0},
    {"conv3d_groups", false, 3, 2, 4, 2, 2, {3, 4, 5}, {2, 2, 3}, {1, 1, 2}, {2, 1, 1}, {0, 1, 1, 1, 0, 0}, {0},
     NULL, true, 0},
    {"same_upper", false, 2, 2, 3, 4, 1, {7, 6}, {3, 2}, {2, 2}, {0}, {0}, {0}, "SAME_UPPER", true, 0},
    {"same_lower", false, 2, 2, 2, 4, 2, {6, 7}, {2, 3}, {2, 3}, {0}, {0}, {0}, "SAME_LOWER", true, 0},
    {"valid", false, 2, 2, 3, 2, 1, {7, 6}, {3, 2}, {2, 1}, {0}, {0}, {0}, "VALID", false, 0},
    /* Large enough (>= 64k multiply-adds) that the batch is split over the
     * threads: W and B only (X through the torch test: each of its
     * elements would cost two forwards). */
    {"conv2d_threads", false, 2, 8, 8, 8, 1, {12, 12}, {3, 3}, {0}, {0}, P2(1, 1, 1, 1), {0}, NULL, true, 6},
    {"depthwise_threads", false, 2, 8, 8, 8, 8, {16, 16}, {3, 3}, {0}, {0}, P2(1, 1, 1, 1), {0}, NULL, true, 6},

    {"convT2d", true, 2, 2, 3, 4, 1, {4, 3}, {3, 2}, {0}, {0}, {0}, {0}, NULL, true, 0},
    {"convT2d_odd", true, 2, 2, 3, 6, 3, {4, 3}, {3, 2}, {2, 2}, {2, 2}, P2(1, 0, 2, 1), {1, 1}, NULL, true, 0},
    {"convT2d_nobias", true, 2, 2, 4, 6, 2, {3, 4}, {2, 3}, {2, 1}, {1, 2}, P2(0, 2, 1, 0), {1, 0}, NULL, false, 0},
    {"convT2d_depthwise", true, 2, 2, 3, 3, 3, {4, 5}, {3, 3}, {2, 2}, {0}, P2(1, 1, 1, 1), {1, 1}, NULL, true, 0},
    {"convT_pointwise", true, 2, 2, 4, 3, 1, {3, 5}, {1, 1}, {0}, {0}, {0}, {0}, NULL, true, 0},
    {"convT1d", true, 1, 2, 3, 4, 1, {5}, {3}, {3}, {2}, P1(2, 1), {2}, NULL, true, 0},
    {"convT3d", true, 3, 1, 2, 4, 2, {2, 3, 3}, {2, 2, 3}, {2, 1, 2}, {1, 2, 1}, {1, 0, 1, 0, 1, 0}, {1, 0, 1},
     NULL, true, 0},
    {"convT_same_upper", true, 2, 2, 3, 2, 1, {3, 4}, {3, 2}, {2, 2}, {0}, {0}, {0}, "SAME_UPPER", true, 0},
    /* output_shape past the full result: pad_end < 0, rows only B reaches. */
    {"convT_output_shape", true, 2, 2, 2, 4, 2, {3, 3}, {2, 3}, {2, 1}, {0}, {0}, {0}, NULL, true, 0, {8, 6}},
    {"convT2d_threads", true, 2, 8, 8, 8, 2, {8, 8}, {3, 3}, {2, 2}, {0}, P2(1, 1, 1, 1), {1, 1}, NULL, true, 6},
};

static const conv_case *find_case(const char *name)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
        if (!strcmp(conv_cases[i].name, name)) return &conv_cases[i];
    REQUIRE(false, "no case %s", name);
    return NULL;
}

static void test_geometries(void)
{
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) check_case(&conv_cases[i]);
}

/* Each slot alone: the others not wanted (din NULL) are skipped, and the
 * wanted one is still right. */
static void test_one_slot_at_a_time(void)
{
    const conv_case *picks[] = {find_case("conv2d_odd"), find_case("depthwise_s2_mult2"),
                                find_case("depthwise_flat_dil"), find_case("pointwise"), find_case("convT2d_odd")};
    for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++)
        for (uint32_t s = 0; s < 3; s++) {
            conv_case cc = *picks[p];
            cc.slots = 1u << s;
            check_case(&cc);
        }
}

/* No gradient reaches Y (dout NULL): every wanted gradient is zero, written
 * over whatever the buffers held. */
static void test_no_upstream(void)
{
    const conv_case *picks[] = {find_case("conv2d"), find_case("depthwise"), find_case("depthwise_s2_mult2"),
                                find_case("convT2d")};
    for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++) {
        qf_node_runner r;
        qf_tensor x, w, b, dins[3];
        if (!case_init(picks[p], &r, &x, &w, &b)) return;
        CHECK_OK(qf_node_runner_run(&r));
        const qf_tensor *src[3] = {&x, &w, &b};
        qf_tensor *din[3];
        for (int i = 0; i < 3; i++) {
            REQUIRE_OK(qf_tensor_init(&dins[i], QF_DTYPE_F32, src[i]->ndim, src[i]->dims));
            memset(dins[i].data, 0x7f, qf_tensor_nbytes(&dins[i]));
            din[i] = &dins[i];
        }
        const qf_tensor *in[3] = {&x, &w, &b};
        qf_tensor *out[1] = {&r.out[0]};
        const qf_tensor *dout[1] = {NULL};
        CHECK_OK(qf_node_eval_grad(r.n, 13, in, out, dout, din, false, 0));
        for (int i = 0; i < r.n->ninputs; i++) {
            const float *d = dins[i].data;
            int64_t bad = 0;
            for (int64_t k = 0, n = qf_tensor_numel(&dins[i]); k < n; k++) bad += d[k] != 0.0f;
            CHECKF(bad == 0, "%s: d input %d has %lld nonzero elements without an upstream gradient",
                   picks[p]->name, i, (long long)bad);
        }
        for (int i = 0; i < 3; i++) qf_tensor_free(&dins[i]);
        qf_node_runner_free(&r);
        qf_tensor_free(&x);
        qf_tensor_free(&w);
        qf_tensor_free(&b);
    }
}

int main(void)
{
    RUN(test_geometries);
    RUN(test_one_slot_at_a_time);
    RUN(test_no_upstream);
    return qf_check_report();
}
