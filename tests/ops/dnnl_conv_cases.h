/* The oneDNN Conv and ConvTranspose kernels against the reference, in every
 * layout (test_conv, test_conv_transpose), with fused post-op chains
 * (test_post_ops, also on Gemm and MatMul), the SiLU run after the primitive
 * (test_silu_split), and what qf_dnnl_can_fuse refuses (test_can_fuse).
 *
 * Header-only (static functions, on dnnl_case.h's harness): included once,
 * by test_dnnl_kernels.c, whose main runs the cases.
 */
#ifndef QF_TEST_DNNL_CONV_CASES_H
#define QF_TEST_DNNL_CONV_CASES_H

#include "ops/dnnl_case.h"

/* --- Conv ------------------------------------------------------------------------ */

typedef struct conv_spec {
    const char *what;
    int rank;
    int64_t n, c, m, group;
    int64_t in[3], k[3], stride[3], dil[3], pads[6];
    const char *auto_pad;
    bool w_const, bias, transpose;
    int64_t out_pad[3];
} conv_spec;

static qf_node *conv_case(dcase *c, const conv_spec *s)
{
    int64_t xd[5] = {s->n, s->c}, wd[5], bd[1] = {s->m};
    for (int i = 0; i < s->rank; i++) xd[2 + i] = s->in[i], wd[2 + i] = s->k[i];
    wd[0] = s->transpose ? s->c : s->m;
    wd[1] = s->transpose ? s->m / s->group : s->c / s->group;
    qf_value *in[3] = {dc_val(c, false, 0, 2 + s->rank, xd),
                       dc_val(c, s->w_const, 0, 2 + s->rank, wd),
                       s->bias ? dc_val(c, s->w_const, 0, 1, bd) : NULL};
    qf_node *n = dc_node(c, s->transpose ? QF_OP_CONV_TRANSPOSE : QF_OP_CONV, s->bias ? 3 : 2, in);
    if (s->group != 1) REQUIRE_OK(qf_node_set_attr_int(c->g, n, "group", s->group));
    if (s->stride[0]) set_ints(c, n, "strides", s->rank, s->stride);
    if (s->dil[0]) set_ints(c, n, "dilations", s->rank, s->dil);
    if (s->auto_pad)
        REQUIRE_OK(qf_node_set_attr_string(c->g, n, "auto_pad", s->auto_pad));
    else
        set_ints(c, n, "pads", 2 * s->rank, s->pads);
    if (s->out_pad[0]) set_ints(c, n, "output_padding", s->rank, s->out_pad);
    return n;
}

static const conv_spec conv_specs[] = {
    {"conv2d asym pads, stride, dilation",
     2,
     3,
     5,
     7,
     1,
     {9, 11},
     {3, 3},
     {2, 1},
     {1, 2},
     {1, 0, 2, 1},
     NULL,
     true,
     true},
    {"conv2d groups 3, batch 1",
     2,
     1,
     6,
     9,
     3,
     {8, 7},
     {3, 2},
     {1, 1},
     {1, 1},
     {1, 1, 1, 0},
     NULL,
     true,
     true},
    {"conv2d depthwise 20",
     2,
     3,
     20,
     20,
     20,
     {10, 9},
     {3, 3},
     {2, 2},
     {1, 1},
     {1, 1, 1, 1},
     NULL,
     true,
     false},
    {"conv2d depthwise x2 multiplier",
     2,
     1,
     6,
     12,
     6,
     {7, 7},
     {5, 5},
     {1, 1},
     {1, 1},
     {2, 2, 2, 2},
     NULL,
     true,
     true},
    {"conv2d 1x1 pointwise",
     2,
     3,
     17,
     33,
     1,
     {6, 5},
     {1, 1},
     {1, 1},
     {1, 1},
     {0, 0, 0, 0},
     NULL,
     true,
     true},
    {"conv1d stride 3 dilation 2", 1, 3, 3, 4, 1, {17}, {5}, {3}, {2}, {2, 1}, NULL, true, true},
    {"conv3d",
     3,
     1,
     3,
     5,
     1,
     {5, 6, 7},
     {3, 2, 3},
     {1, 2, 1},
     {1, 1, 1},
     {1, 0, 1, 0, 1, 2},
     NULL,
     true,
     true},
    {"conv2d SAME_UPPER stride 2",
     2,
     3,
     4,
     5,
     1,
     {9, 8},
     {4, 3},
     {2, 2},
     {1, 1},
     {0},
     "SAME_UPPER",
     true,
     true},
    {"conv2d SAME_LOWER stride 2",
     2,
     1,
     4,
     5,
     1,
     {9, 8},
     {4, 3},
     {2, 2},
     {1, 1},
     {0},
     "SAME_LOWER",
     true,
     false},
    {"conv2d W and B activations",
     2,
     3,
     6,
     10,
     2,
     {7, 6},
     {3, 3},
     {1, 2},
     {2, 1},
     {2, 1, 0, 1},
     NULL,
     false,
     true},
    {"conv2d 64 -> 24, batch 3",
     2,
     3,
     64,
     24,
     1,
     {12, 12},
     {3, 3},
     {1, 1},
     {1, 1},
     {1, 1, 1, 1},
     NULL,
     true,
     true},
};

static const conv_spec convt_specs[] = {
    {"convT2d groups 2 stride 2 output_padding",
     2,
     3,
     6,
     4,
     2,
     {5, 4},
     {3, 3},
     {2, 2},
     {1, 1},
     {1, 1, 1, 1},
     NULL,
     true,
     true,
     true,
     {1, 1}},
    {"convT2d asym pads dilation",
     2,
     1,
     5,
     7,
     1,
     {6, 7},
     {3, 2},
     {2, 3},
     {2, 1},
     {0, 1, 1, 0},
     NULL,
     true,
     true,
     true},
    {"convT1d", 1, 3, 4, 3, 1, {9}, {4}, {2}, {1}, {1, 1}, NULL, true, false, true},
    {"convT3d",
     3,
     1,
     3,
     4,
     1,
     {3, 4, 5},
     {2, 3, 3},
     {2, 1, 2},
     {1, 1, 1},
     {0, 1, 1, 0, 0, 1},
     NULL,
     true,
     true,
     true},
    {"convT2d depthwise W activation",
     2,
     3,
     5,
     5,
     5,
     {6, 6},
     {3, 3},
     {2, 2},
     {1, 1},
     {1, 1, 1, 1},
     NULL,
     false,
     true,
     true,
     {1, 0}},
};

static void test_conv(void)
{
    for (size_t i = 0; i < sizeof conv_specs / sizeof *conv_specs; i++)
        for (int l = 0; l < 4; l++) {
            dcase c;
            dc_init(&c, 11 + (uint32_t)i);
            conv_case(&c, &conv_specs[i]);
            dc_check(&c, conv_specs[i].what, layouts[l][0], layouts[l][1]);
            dc_free(&c);
        }
}

static void test_conv_transpose(void)
{
    for (size_t i = 0; i < sizeof convt_specs / sizeof *convt_specs; i++)
        for (int l = 0; l < 4; l++) {
            dcase c;
            dc_init(&c, 101 + (uint32_t)i);
            conv_case(&c, &convt_specs[i]);
            dc_check(&c, convt_specs[i].what, layouts[l][0], layouts[l][1]);
            dc_free(&c);
        }
}

/* --- post-ops -------------------------------------------------------------------- */

typedef enum {
    P_RELU,
    P_CLIP,
    P_RELU6,
    P_LEAKY,
    P_SIGMOID,
    P_TANH,
    P_HSIG,
    P_HSWISH,
    P_ADD,
    P_ADD_FIRST,
    P_SILU,      /* Sigmoid(v), then Mul(v, that): one swish post-op */
    P_SILU_SWAP  /* the same with Mul(Sigmoid(v), v) */
} post_kind;

static void add_post(dcase *c, post_kind k)
{
    qf_node *f = NULL;
    switch (k) {
    case P_RELU: dc_follow(c, QF_OP_RELU); break;
    case P_RELU6: dc_follow(c, QF_OP_RELU6); break;
    case P_CLIP: {
        qf_node *last = c->nfused ? c->fused[c->nfused - 1] : c->n;
        qf_value *in[3] = {last->outputs[0], dc_scalar(c, -0.5f), dc_scalar(c, 0.75f)};
        dc_node(c, QF_OP_CLIP, 3, in);
        break;
    }
    case P_LEAKY:
        f = dc_follow(c, QF_OP_LEAKY_RELU);
        REQUIRE_OK(qf_node_set_attr_float(c->g, f, "alpha", 0.3f));
        break;
    case P_SIGMOID: dc_follow(c, QF_OP_SIGMOID); break;
    case P_TANH: dc_follow(c, QF_OP_TANH); break;
    case P_HSIG:
        f = dc_follow(c, QF_OP_HARD_SIGMOID);
        REQUIRE_OK(qf_node_set_attr_float(c->g, f, "alpha", 0.25f));
        break;
    case P_HSWISH: dc_follow(c, QF_OP_HARD_SWISH); break;
    case P_ADD: dc_follow_add(c, false); break;
    case P_ADD_FIRST: dc_follow_add(c, true); break;
    case P_SILU:
    case P_SILU_SWAP: {
        qf_value *v = (c->nfused ? c->fused[c->nfused - 1] : c->n)->outputs[0];
        qf_value *s = dc_follow(c, QF_OP_SIGMOID)->outputs[0];
        qf_value *in[2] = {k == P_SILU ? v : s, k == P_SILU ? s : v};
        dc_node(c, QF_OP_MUL, 2, in);
        break;
    }
    }
}

static const struct {
    const char *what;
    int n;
    post_kind k[3];
} post_chains[] = {
    {"relu", 1, {P_RELU}},
    {"clip(-0.5, 0.75)", 1, {P_CLIP}},
    {"relu6", 1, {P_RELU6}},
    {"leaky_relu", 1, {P_LEAKY}},
    {"sigmoid", 1, {P_SIGMOID}},
    {"tanh", 1, {P_TANH}},
    {"hard_sigmoid", 1, {P_HSIG}},
    {"hard_swish", 1, {P_HSWISH}},
    {"add", 1, {P_ADD}},
    {"add (residual first) + relu", 2, {P_ADD_FIRST, P_RELU}},
    {"relu + add + relu", 3, {P_RELU, P_ADD, P_RELU}},
    {"leaky + sigmoid + add", 3, {P_LEAKY, P_SIGMOID, P_ADD}},
    {"silu", 1, {P_SILU}},
    {"silu (sigmoid first)", 1, {P_SILU_SWAP}},
    {"add + silu", 2, {P_ADD, P_SILU}},
    {"silu + add", 2, {P_SILU_SWAP, P_ADD}},
};

static void test_post_ops(void)
{
    for (size_t p = 0; p < sizeof post_chains / sizeof *post_chains; p++) {
        char what[128];
        for (int which = 0; which < 4; which++) {
            dcase c;
            dc_init(&c, 201 + (uint32_t)p);
            bool spatial = which < 2;
            if (which == 0) conv_case(&c, &conv_specs[0]);
            if (which == 1) conv_case(&c, &convt_specs[0]);
            if (which == 2) {
                int64_t ad[2] = {5, 7}, bd[2] = {6, 7}, cd[1] = {6};
                qf_value *in[3] = {dc_val(&c, false, 0, 2, ad), dc_val(&c, true, 0, 2, bd),
                                   dc_val(&c, true, 0, 1, cd)};
                qf_node *n = dc_node(&c, QF_OP_GEMM, 3, in);
                REQUIRE_OK(qf_node_set_attr_int(c.g, n, "transB", 1));
            }
            if (which == 3) {
                int64_t ad[3] = {3, 4, 9}, bd[2] = {9, 5};
                qf_value *in[2] = {dc_val(&c, false, 0, 3, ad), dc_val(&c, false, 0, 2, bd)};
                dc_node(&c, QF_OP_MATMUL, 2, in);
            }
            for (int k = 0; k < post_chains[p].n; k++) add_post(&c, post_chains[p].k[k]);
            static const char *const names[4] = {"conv", "convT", "gemm", "matmul"};
            /* The plan asks before fusing: every link must be accepted. */
            REQUIRE_OK(qf_graph_infer_shapes(c.g));
            for (int k = 0; k < c.nfused; k++)
                CHECKF(qf_dnnl_can_fuse(c.n, c.fused[k]), "%s + %s: can_fuse says no at %d",
                       names[which], post_chains[p].what, k);
            snprintf(what, sizeof what, "%s + %s", names[which], post_chains[p].what);
            dc_check(&c, what, 0, 0);
            dc_free(&c);
            if (!spatial) continue;
            dc_init(&c, 301 + (uint32_t)p);
            conv_case(&c, which == 0 ? &conv_specs[2] : &convt_specs[1]);
            for (int k = 0; k < post_chains[p].n; k++) add_post(&c, post_chains[p].k[k]);
            snprintf(what, sizeof what, "%s NHWC + %s", names[which], post_chains[p].what);
            dc_check(&c, what, 1, 1);
            dc_free(&c);
        }
    }
}

/* A large k x k conv's fused SiLU runs after the primitive, in place, on
 * oneDNN's OpenMP team (qf_dk_set_silu_split; the default only splits
 * outputs of millions of elements): forced here on a 3x3 conv whose output
 * (3 x 19 x 29 x 31, 51,243 elements: odd, split unevenly between the
 * threads) is big enough for the team, in every layout, after a residual Add
 * too; a 1x1 conv keeps the post-op, and so does the 3x3 at the default. */
static void test_silu_split(void)
{
    static const conv_spec specs[2] = {
        {"conv2d 3x3 5 -> 19", 2, 3, 5, 19, 1, {29, 31}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, true, false, {0}},
        {"conv2d 1x1 5 -> 19", 2, 3, 5, 19, 1, {29, 31}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, NULL, true, true, false, {0}}};
    for (int cfg = 0; cfg < 3; cfg++) { /* 3x3 forced, 1x1 forced, 3x3 at the default */
        qf_dk_set_silu_split(cfg < 2 ? 0 : -1);
        const conv_spec *sp = &specs[cfg == 1];
        for (size_t p = 12; p < 15; p++) /* post_chains: silu, silu (sigmoid first), add + silu */
            for (int l = 0; l < 4; l++) {
                REQUIRE(strstr(post_chains[p].what, "silu"), "post_chains[%zu] is no SiLU chain", p);
                dcase c;
                dc_init(&c, 401 + (uint32_t)p);
                conv_case(&c, sp);
                for (int k = 0; k < post_chains[p].n; k++) add_post(&c, post_chains[p].k[k]);
                REQUIRE_OK(qf_graph_infer_shapes(c.g));
                dk_run r;
                REQUIRE_OK(dk_prepare(&c, &r, layouts[l][0], layouts[l][1]));
                bool after = ((const qf_dk_prim *)r.state)->silu_after;
                r.k->release(r.state);
                free(r.state_raw);
                char what[160];
                snprintf(what, sizeof what, "%s + %s (config %d)", sp->what, post_chains[p].what, cfg);
                CHECKF(after == (cfg == 0), "%s: SiLU after the primitive %d", what, (int)after);
                dc_check(&c, what, layouts[l][0], layouts[l][1]);
                dc_free(&c);
            }
    }
    qf_dk_set_silu_split(-1);
}

static void test_can_fuse(void)
{
    dcase c;
    dc_init(&c, 5);
    conv_case(&c, &conv_specs[0]);
    dc_follow(&c, QF_OP_SOFTMAX);
    REQUIRE_OK(qf_graph_infer_shapes(c.g));
    CHECK(!qf_dnnl_can_fuse(c.n, c.fused[0])); /* not an eltwise */
    CHECK(!qf_dnnl_can_fuse(c.fused[0], c.n)); /* Softmax is no producer */
    dc_free(&c);
    /* An Add that broadcasts its other operand is not a post-op. */
    dc_init(&c, 6);
    conv_case(&c, &conv_specs[0]);
    REQUIRE_OK(qf_graph_infer_shapes(c.g));
    int64_t one[1] = {1};
    qf_value *in[2] = {c.n->outputs[0], dc_val(&c, false, 0, 1, one)};
    dc_node(&c, QF_OP_ADD, 2, in);
    REQUIRE_OK(qf_graph_infer_shapes(c.g));
    CHECK(!qf_dnnl_can_fuse(c.n, c.fused[0]));
    dc_free(&c);
    /* Clip with a bound computed at run time. */
    dc_init(&c, 7);
    conv_case(&c, &conv_specs[0]);
    qf_value *cin[3] = {c.n->outputs[0], dc_val(&c, false, 0, 0, NULL), NULL};
    dc_node(&c, QF_OP_CLIP, 2, cin);
    REQUIRE_OK(qf_graph_infer_shapes(c.g));
    CHECK(!qf_dnnl_can_fuse(c.n, c.fused[0]));
    dc_free(&c);
    /* A Mul is a post-op only as a SiLU's: Mul(y, Sigmoid(y)). Not
     * Mul(y, Sigmoid(z)), Mul(y, Tanh(y)), Mul(y, y). */
    for (int k = 0; k < 3; k++) {
        dc_init(&c, 8);
        qf_value *y = conv_case(&c, &conv_specs[0])->outputs[0];
        REQUIRE_OK(qf_graph_infer_shapes(c.g));
        qf_value *z = k == 0 ? dc_val(&c, false, 0, y->type.ndim, y->type.dims) : y;
        qf_node *act = qf_graph_add_node(c.g, k == 1 ? QF_OP_TANH : QF_OP_SIGMOID, "act", 1, &z, 1);
        REQUIRE(act != NULL, "node: %s", qf_error_message());
        qf_value *min[2] = {y, k == 2 ? y : act->outputs[0]};
        dc_node(&c, QF_OP_MUL, 2, min);
        REQUIRE_OK(qf_graph_infer_shapes(c.g));
        CHECKF(!qf_dnnl_can_fuse(c.n, c.fused[0]), "mul case %d taken as a post-op", k);
        dc_free(&c);
    }
    /* A SiLU's Mul fused without its Sigmoid before it: declined. */
    dc_init(&c, 9);
    qf_value *y = conv_case(&c, &conv_specs[0])->outputs[0];
    qf_node *sg = qf_graph_add_node(c.g, QF_OP_SIGMOID, "sg", 1, &y, 1);
    REQUIRE(sg != NULL, "node: %s", qf_error_message());
    qf_value *min[2] = {y, sg->outputs[0]};
    dc_node(&c, QF_OP_MUL, 2, min);
    REQUIRE_OK(qf_graph_infer_shapes(c.g));
    CHECK(qf_dnnl_can_fuse(c.n, c.fused[0]));
    dc_declines(&c, "conv + mul of a silu without its sigmoid");
    dc_free(&c);
}

#endif /* QF_TEST_DNNL_CONV_CASES_H */
