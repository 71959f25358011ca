/* The backward tape (src/exec/grad.c) on whole graphs: every parameter's
 * gradient against central differences of the loss the plan computes
 * (tests/tools/qf_gradcheck.h), through fan-out (a value read by several
 * nodes, and twice by one node), a parameter read by two nodes, a frozen
 * parameter, a parameter that does not reach the loss (zero gradient), the
 * summed temporaries, and the errors: an op without a backward kernel on the
 * way (named), a loss that is not one element, backward without a training
 * forward. The forward values the tape keeps must match an inference plan's
 * outputs bit for bit. */
#include <math.h>
#include <string.h>

#include "qfold/exec.h"
#include "tools/qf_check.h"
#include "tools/qf_gradcheck.h"

static uint64_t rng = 0x51ed2701a3b4c5d6ull;

static float rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

static qf_value *param(qf_graph *g, const char *name, qf_value_kind kind, int ndim, const int64_t *dims, float scale,
                       float shift)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) return NULL;
    float *p = t.data;
    for (int64_t i = 0; i < qf_tensor_numel(&t); i++) p[i] = shift + scale * rnd();
    return qf_graph_add_constant(g, name, kind, &t);
}

static qf_node *node(qf_graph *g, qf_op op, const char *name, int nin, qf_value *a, qf_value *b, qf_value *c)
{
    qf_value *in[3] = {a, b, c};
    return qf_graph_add_node(g, op, name, nin, in, 1);
}

/* x [2,3,6,5] -> Conv(w1, b1) -> Relu = y; z = y * y + y * s (s [1,4,1,1], read by two Muls)
 * -> GlobalAveragePool -> Flatten -> linear(w2, b2) -> mse_loss(., target). Also an unused
 * branch: a parameter `u` that reaches no loss. */
typedef struct net {
    qf_graph *g;
    qf_value *loss, *w1, *b1, *s, *w2, *b2, *u;
    qf_tensor x, target;
} net;

static void net_build(net *m)
{
    memset(m, 0, sizeof *m);
    REQUIRE_OK(qf_graph_init(&m->g));
    qf_graph *g = m->g;
    g->opset = 13;
    int64_t xd[] = {2, 3, 6, 5}, w1d[] = {4, 3, 3, 3}, b1d[] = {4}, sd[] = {1, 4, 1, 1}, w2d[] = {3, 4}, b2d[] = {3},
            td[] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *t = qf_graph_add_input(g, "target", QF_DTYPE_F32, 2, td);
    m->w1 = param(g, "w1", QF_VALUE_PARAMETER, 4, w1d, 0.5f, 0.0f);
    m->b1 = param(g, "b1", QF_VALUE_PARAMETER, 1, b1d, 0.3f, 0.1f);
    m->s = param(g, "s", QF_VALUE_PARAMETER, 4, sd, 0.5f, 1.0f);
    m->w2 = param(g, "w2", QF_VALUE_PARAMETER, 2, w2d, 0.5f, 0.0f);
    m->b2 = param(g, "b2", QF_VALUE_PARAMETER, 1, b2d, 0.3f, 0.0f);
    m->u = param(g, "u", QF_VALUE_PARAMETER, 1, b2d, 1.0f, 0.0f);
    REQUIRE(x && t && m->w1 && m->b1 && m->s && m->w2 && m->b2 && m->u, "graph: %s", qf_error_message());
    qf_node *conv = node(g, QF_OP_CONV, "conv", 3, x, m->w1, m->b1);
    REQUIRE(conv, "conv");
    int64_t pads[] = {1, 0, 1, 1};
    REQUIRE_OK(qf_node_set_attr_ints(g, conv, "pads", pads, 4));
    qf_node *relu = node(g, QF_OP_RELU, "relu", 1, conv->outputs[0], NULL, NULL);
    qf_node *sq = node(g, QF_OP_MUL, "square", 2, relu->outputs[0], relu->outputs[0], NULL);
    qf_node *sc = node(g, QF_OP_MUL, "scale", 2, relu->outputs[0], m->s, NULL);
    qf_node *sc2 = node(g, QF_OP_MUL, "scale2", 2, sc->outputs[0], m->s, NULL);
    qf_node *add = node(g, QF_OP_ADD, "add", 2, sq->outputs[0], sc2->outputs[0], NULL);
    qf_node *gap = node(g, QF_OP_GLOBAL_AVG_POOL, "gap", 1, add->outputs[0], NULL, NULL);
    qf_node *fl = node(g, QF_OP_FLATTEN, "flatten", 1, gap->outputs[0], NULL, NULL);
    qf_node *fc = node(g, QF_OP_LINEAR, "fc", 3, fl->outputs[0], m->w2, m->b2);
    qf_node *dead = node(g, QF_OP_MUL, "dead", 2, fc->outputs[0], m->u, NULL);
    qf_node *loss = node(g, QF_OP_MSE_LOSS, "loss", 2, fc->outputs[0], t, NULL);
    REQUIRE(relu && sq && sc && sc2 && add && gap && fl && fc && dead && loss, "nodes: %s", qf_error_message());
    m->loss = loss->outputs[0];
    REQUIRE_OK(qf_graph_add_output(g, fc->outputs[0]));
    REQUIRE_OK(qf_graph_add_output(g, m->loss));
    REQUIRE_OK(qf_graph_add_output(g, dead->outputs[0]));
    REQUIRE_OK(qf_tensor_init(&m->x, QF_DTYPE_F32, 4, xd));
    REQUIRE_OK(qf_tensor_init(&m->target, QF_DTYPE_F32, 2, td));
    for (int64_t i = 0; i < qf_tensor_numel(&m->x); i++) ((float *)m->x.data)[i] = rnd();
    for (int64_t i = 0; i < qf_tensor_numel(&m->target); i++) ((float *)m->target.data)[i] = rnd();
}

static void net_free(net *m)
{
    qf_graph_free(m->g);
    qf_tensor_free(&m->x);
    qf_tensor_free(&m->target);
}

typedef struct loss_ctx {
    qf_grad_plan *p;
    const qf_tensor *in[2];
    bool failed;
} loss_ctx;

static double plan_loss(const float *x, void *user)
{
    (void)x; /* the parameter's payload, perturbed in place: the plan reads it */
    loss_ctx *c = user;
    if (qf_grad_plan_forward(c->p, c->in, 2, true) != QF_OK) {
        c->failed = true;
        return NAN;
    }
    return qf_grad_plan_loss(c->p);
}

static void test_tape_gradients(void)
{
    /* The reference kernels on both sides: the tape's forward must then be
     * the inference plan's bit for bit (test_tape_engines compares oneDNN's
     * training kernels with them). */
    REQUIRE_OK(qf_set_engine(QF_ENGINE_REF));
    net m;
    net_build(&m);
    qf_value *ps[] = {m.w1, m.b1, m.s, m.w2, m.b2, m.u};
    qf_grad_plan *p = NULL;
    qf_grad_options o = {.loss = m.loss, .nparams = 6, .params = (const qf_value *const *)ps};
    REQUIRE_OK(qf_grad_plan_init(&p, m.g, &o));
    loss_ctx c = {.p = p, .in = {&m.x, &m.target}};
    REQUIRE_OK(qf_grad_plan_forward(p, c.in, 2, true));
    REQUIRE_OK(qf_grad_plan_backward(p));
    /* Copy the gradients: the plan's buffers are reused by the checks' forwards. */
    qf_tensor grads[6];
    for (int i = 0; i < 6; i++) {
        const qf_tensor *gr = qf_grad_plan_grad(p, i);
        REQUIRE(gr && gr->data && qf_shape_equal(gr->ndim, gr->dims, ps[i]->type.ndim, ps[i]->type.dims),
                "gradient %d", i);
        REQUIRE_OK(qf_tensor_init(&grads[i], QF_DTYPE_F32, gr->ndim, gr->dims));
        memcpy(grads[i].data, gr->data, qf_tensor_nbytes(gr));
    }
    qf_gradcheck_opts go = {.eps = 1e-3, .rtol = 2e-2, .atol = 2e-3};
    const char *names[] = {"w1", "b1", "s", "w2", "b2"};
    for (int i = 0; i < 5; i++) {
        qf_gradcheck_result r;
        bool ok = qf_gradcheck(plan_loss, &c, ps[i]->type.data, qf_tensor_numel(&ps[i]->type), grads[i].data, &go, &r);
        qf_gradcheck_print(stdout, names[i], &r);
        CHECKF(ok && !c.failed && r.checked > 0, "d loss / d %s", names[i]);
    }
    /* u reaches no loss: its gradient is zeros. */
    const float *gu = grads[5].data;
    bool zero = true;
    for (int k = 0; k < 3; k++) zero = zero && gu[k] == 0.0f;
    CHECKF(zero, "gradient of a parameter that reaches no loss is not zero");
    for (int i = 0; i < 6; i++) qf_tensor_free(&grads[i]);

    /* The tape's forward is the inference plan's, bit for bit. */
    REQUIRE_OK(qf_grad_plan_forward(p, c.in, 2, false));
    CHECK_ERR(qf_grad_plan_backward(p), QF_ERR_INVALID, "training");
    qf_plan *ip = NULL;
    REQUIRE_OK(qf_plan_init(&ip, m.g));
    REQUIRE_OK(qf_plan_run(ip, c.in, 2));
    for (int k = 0; k < 2; k++) {
        const qf_tensor *a = qf_plan_output(ip, k), *b = qf_grad_plan_output(p, k);
        CHECKF(qf_tensor_nbytes(a) == qf_tensor_nbytes(b) && !memcmp(a->data, b->data, qf_tensor_nbytes(a)),
               "output %d differs between the tape and the inference plan", k);
    }
    qf_plan_free(ip);
    printf("training arena: %zu bytes\n", qf_grad_plan_arena_bytes(p));
    qf_grad_plan_free(p);
    net_free(&m);
    qf_set_engine(QF_ENGINE_AUTO);
}

/* Only some parameters: the others stay constants to the tape (no gradient
 * into x, w1 or b1: the conv's input side is skipped). */
static void test_tape_subset(void)
{
    net m;
    net_build(&m);
    qf_value *ps[] = {m.w2};
    qf_grad_plan *p = NULL;
    qf_grad_options o = {.loss = m.loss, .nparams = 1, .params = (const qf_value *const *)ps};
    REQUIRE_OK(qf_grad_plan_init(&p, m.g, &o));
    const qf_tensor *in[] = {&m.x, &m.target};
    REQUIRE_OK(qf_grad_plan_forward(p, in, 2, true));
    REQUIRE_OK(qf_grad_plan_backward(p));
    const qf_tensor *gw = qf_grad_plan_grad(p, 0);
    double s = 0;
    for (int k = 0; k < 12; k++) s += fabs(((const float *)gw->data)[k]);
    CHECKF(s > 0, "d loss / d w2 is all zeros");
    qf_grad_plan_free(p);
    net_free(&m);
}

static void test_tape_errors(void)
{
    net m;
    net_build(&m);
    /* Sqrt has no backward kernel: put it between w2 and the loss. */
    qf_node *fc = qf_graph_find_node(m.g, "fc");
    REQUIRE(fc, "fc");
    qf_value *in[] = {m.w2};
    qf_node *sq = qf_graph_insert_node(m.g, fc, false, QF_OP_SQRT, "root", 1, in, 1);
    REQUIRE(sq, "insert: %s", qf_error_message());
    REQUIRE_OK(qf_node_set_input(m.g, fc, 1, sq->outputs[0]));
    qf_value *ps[] = {m.w2};
    qf_grad_plan *p = NULL;
    qf_grad_options o = {.loss = m.loss, .nparams = 1, .params = (const qf_value *const *)ps};
    CHECK_ERR(qf_grad_plan_init(&p, m.g, &o), QF_ERR_UNSUPPORTED, "node 'root' (Sqrt): no backward kernel");
    CHECK(p == NULL);
    /* A loss of more than one element. */
    o.loss = fc->outputs[0];
    CHECK_ERR(qf_grad_plan_init(&p, m.g, &o), QF_ERR_INVALID, "one float32 element");
    /* A loss that no parameter reaches. */
    qf_value *ub[] = {m.u};
    o = (qf_grad_options){.loss = m.loss, .nparams = 1, .params = (const qf_value *const *)ub};
    CHECK_ERR(qf_grad_plan_init(&p, m.g, &o), QF_ERR_INVALID, "depends on none");
    net_free(&m);
}

/* --- the backend's training kernels vs the reference ones ---------------------- */

typedef struct conv_case {
    const char *name;
    bool transpose;
    int rank, group;
    int64_t n, c, m, in[3], k[3];
    int64_t stride[3], dil[3], pads[6], outpad[3];
    bool bias;
} conv_case;

/* x (a parameter, so that d x is computed too) -> Conv -> mse_loss(target):
 * d x, d W, d B of one training step with the current engine, into g[0..2]. */
static qf_status conv_grads(const conv_case *cc, qf_tensor *g)
{
    uint64_t saved = rng;
    rng = 0x1234567ull; /* the same tensors for both engines */
    qf_graph *gr = NULL;
    QF_TRY(qf_graph_init(&gr));
    gr->opset = 13;
    int64_t xd[5] = {cc->n, cc->c}, wd[5], bd[1] = {cc->m};
    if (cc->transpose) {
        wd[0] = cc->c;
        wd[1] = cc->m / cc->group;
    } else {
        wd[0] = cc->m;
        wd[1] = cc->c / cc->group;
    }
    for (int i = 0; i < cc->rank; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
    }
    qf_value *x = param(gr, "x", QF_VALUE_PARAMETER, 2 + cc->rank, xd, 1.0f, 0.0f);
    qf_value *w = param(gr, "w", QF_VALUE_PARAMETER, 2 + cc->rank, wd, 0.5f, 0.0f);
    qf_value *b = cc->bias ? param(gr, "b", QF_VALUE_PARAMETER, 1, bd, 0.5f, 0.0f) : NULL;
    qf_node *cv = node(gr, cc->transpose ? QF_OP_CONV_TRANSPOSE : QF_OP_CONV, "conv", cc->bias ? 3 : 2, x, w, b);
    qf_status st = x && w && cv ? QF_OK : QF_ERR_NOMEM;
    if (st == QF_OK) st = qf_node_set_attr_int(gr, cv, "group", cc->group);
    if (st == QF_OK) st = qf_node_set_attr_ints(gr, cv, "strides", cc->stride, cc->rank);
    if (st == QF_OK) st = qf_node_set_attr_ints(gr, cv, "dilations", cc->dil, cc->rank);
    if (st == QF_OK) st = qf_node_set_attr_ints(gr, cv, "pads", cc->pads, 2 * cc->rank);
    if (st == QF_OK && cc->transpose) st = qf_node_set_attr_ints(gr, cv, "output_padding", cc->outpad, cc->rank);
    if (st == QF_OK) st = qf_graph_infer_shapes(gr);
    qf_value *t = NULL;
    qf_node *loss = NULL;
    if (st == QF_OK) {
        const qf_tensor *y = &cv->outputs[0]->type;
        t = qf_graph_add_input(gr, "target", QF_DTYPE_F32, y->ndim, y->dims);
        loss = t ? node(gr, QF_OP_MSE_LOSS, "loss", 2, cv->outputs[0], t, NULL) : NULL;
        st = loss ? qf_graph_add_output(gr, loss->outputs[0]) : QF_ERR_NOMEM;
    }
    qf_tensor target = {0};
    qf_grad_plan *p = NULL;
    if (st == QF_OK) st = qf_tensor_init(&target, QF_DTYPE_F32, t->type.ndim, t->type.dims);
    if (st == QF_OK) {
        for (int64_t i = 0; i < qf_tensor_numel(&target); i++) ((float *)target.data)[i] = rnd();
        const qf_value *ps[] = {x, w, b};
        qf_grad_options o = {.loss = loss->outputs[0], .nparams = cc->bias ? 3 : 2, .params = ps};
        st = qf_grad_plan_init(&p, gr, &o);
    }
    const qf_tensor *in[] = {&target};
    if (st == QF_OK) st = qf_grad_plan_forward(p, in, 1, true);
    if (st == QF_OK) st = qf_grad_plan_backward(p);
    for (int i = 0; st == QF_OK && i < (cc->bias ? 3 : 2); i++) {
        const qf_tensor *gi = qf_grad_plan_grad(p, i);
        st = qf_tensor_init(&g[i], QF_DTYPE_F32, gi->ndim, gi->dims);
        if (st == QF_OK) memcpy(g[i].data, gi->data, qf_tensor_nbytes(gi));
    }
    qf_grad_plan_free(p);
    qf_tensor_free(&target);
    qf_graph_free(gr);
    rng = saved;
    return st;
}

static void test_tape_engines(void)
{
    if (qf_set_engine(QF_ENGINE_DNNL) != QF_OK) {
        printf("oneDNN not available: %s (the reference kernels only)\n", qf_error_message());
        qf_set_engine(QF_ENGINE_AUTO);
        return;
    }
    static const conv_case cases[] = {
        {"conv 3x3 pad 1", false, 2, 1, 4, 3, 8, {9, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, {0}, true},
        {"conv stride 2, asymmetric pads, dilation 2", false, 2, 1, 3, 5, 6, {11, 8}, {3, 2}, {2, 1}, {2, 1},
         {1, 0, 2, 1}, {0}, true},
        {"grouped conv, no bias", false, 2, 3, 2, 6, 9, {7, 7}, {3, 3}, {1, 2}, {1, 1}, {0, 1, 1, 0}, {0}, false},
        {"depthwise 3x3", false, 2, 8, 3, 8, 8, {10, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, {0}, true},
        {"pointwise", false, 2, 1, 5, 16, 12, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, {0}, true},
        {"conv 1-D", false, 1, 1, 3, 4, 5, {13}, {5}, {2}, {1}, {2, 1}, {0}, true},
        {"conv 3-D", false, 3, 1, 2, 2, 3, {5, 6, 4}, {3, 2, 3}, {1, 2, 1}, {1, 1, 1}, {1, 0, 1, 1, 1, 0}, {0}, true},
        {"conv transpose stride 2, output padding", true, 2, 1, 2, 4, 6, {5, 6}, {3, 3}, {2, 2}, {1, 1},
         {1, 1, 1, 1}, {1, 0}, true},
        {"grouped conv transpose", true, 2, 2, 2, 4, 6, {4, 5}, {3, 2}, {2, 1}, {1, 1}, {0, 1, 1, 0}, {0, 0}, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const conv_case *cc = &cases[c];
        qf_tensor gref[3] = {{0}}, gd[3] = {{0}};
        CHECK_OK(qf_set_engine(QF_ENGINE_REF));
        qf_status st = conv_grads(cc, gref);
        CHECKF(st == QF_OK, "%s (ref): %s", cc->name, qf_error_message());
        CHECK_OK(qf_set_engine(QF_ENGINE_DNNL));
        st = conv_grads(cc, gd);
        CHECKF(st == QF_OK, "%s (dnnl): %s", cc->name, qf_error_message());
        const char *what[] = {"x", "W", "B"};
        for (int i = 0; i < (cc->bias ? 3 : 2) && st == QF_OK; i++) {
            double err = 0, scale = 1e-6;
            const float *a = gref[i].data, *b = gd[i].data;
            for (int64_t e = 0; e < qf_tensor_numel(&gref[i]); e++) {
                err = fmax(err, fabs((double)a[e] - b[e]));
                scale = fmax(scale, fabs((double)a[e]));
            }
            CHECKF(err <= 1e-5 * scale, "%s: d%s dnnl vs ref: max diff %g (scale %g)", cc->name, what[i], err, scale);
            printf("%-44s d%s: dnnl vs ref max diff %.3g of %.3g\n", cc->name, what[i], err, scale);
        }
        for (int i = 0; i < 3; i++) {
            qf_tensor_free(&gref[i]);
            qf_tensor_free(&gd[i]);
        }
    }
    qf_set_engine(QF_ENGINE_AUTO);
}

/* A chain the tape keeps channels-last on oneDNN (grad_nhwc): x -> Conv ->
 * BN -> Relu -> depthwise Conv (stride 2) -> BN -> Relu -> 1x1 Conv -> BN ->
 * Add (residual from the second Relu: a gradient summed from two readers)
 * -> Relu -> 1x1 Conv -> GlobalAveragePool (reading it channels-last) ->
 * Flatten -> linear -> mse_loss.
 * Two steps (the second with the middle BN frozen, its NHWC running-stats
 * path): every gradient, the loss and the running statistics of the oneDNN
 * engine against the reference kernels' (NCHW). */
typedef struct chain {
    qf_graph *g;
    qf_value *loss;
    qf_value *ps[16];
    int np;
    qf_value *stats[6];
    qf_node *bn2;
    qf_tensor target;
} chain;

static qf_node *chain_conv(chain *c, qf_value *x, const char *name, int64_t m, int64_t cin, int64_t k, int64_t group,
                           int64_t stride, bool bias)
{
    int64_t wd[] = {m, cin / group, k, k}, bd[] = {m};
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "%s_w", name);
    snprintf(bn, sizeof bn, "%s_b", name);
    qf_value *w = param(c->g, wn, QF_VALUE_PARAMETER, 4, wd, 0.6f, 0.0f);
    qf_value *b = bias ? param(c->g, bn, QF_VALUE_PARAMETER, 1, bd, 0.3f, 0.0f) : NULL;
    REQUIRE(w && (!bias || b), "conv params");
    c->ps[c->np++] = w;
    if (b) c->ps[c->np++] = b;
    qf_node *n = node(c->g, QF_OP_CONV, name, bias ? 3 : 2, x, w, b);
    REQUIRE(n, "conv node");
    int64_t p = k / 2, pads[] = {p, p, p, p}, st[] = {stride, stride};
    REQUIRE_OK(qf_node_set_attr_int(c->g, n, "group", group));
    REQUIRE_OK(qf_node_set_attr_ints(c->g, n, "pads", pads, 4));
    REQUIRE_OK(qf_node_set_attr_ints(c->g, n, "strides", st, 2));
    return n;
}

static qf_node *chain_bn(chain *c, qf_value *x, const char *name, int64_t ch, int k)
{
    int64_t d[] = {ch};
    char nm[4][32];
    const char *suf[] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; i++) snprintf(nm[i], sizeof nm[i], "%s_%s", name, suf[i]);
    qf_value *s = param(c->g, nm[0], QF_VALUE_PARAMETER, 1, d, 0.4f, 1.0f);
    qf_value *b = param(c->g, nm[1], QF_VALUE_PARAMETER, 1, d, 0.3f, 0.0f);
    qf_value *mu = param(c->g, nm[2], QF_VALUE_BUFFER, 1, d, 0.2f, 0.0f);
    qf_value *var = param(c->g, nm[3], QF_VALUE_BUFFER, 1, d, 0.3f, 1.0f);
    REQUIRE(s && b && mu && var, "bn params");
    c->ps[c->np++] = s;
    c->ps[c->np++] = b;
    c->stats[2 * k] = mu;
    c->stats[2 * k + 1] = var;
    qf_value *in[5] = {x, s, b, mu, var};
    qf_node *n = qf_graph_add_node(c->g, QF_OP_BATCH_NORM, name, 5, in, 1);
    REQUIRE(n, "bn node");
    REQUIRE_OK(qf_node_set_attr_float(c->g, n, "momentum", 0.9f));
    return n;
}

static void chain_build(chain *c)
{
    memset(c, 0, sizeof *c);
    rng = 0xfeedbeefull;
    REQUIRE_OK(qf_graph_init(&c->g));
    qf_graph *g = c->g;
    g->opset = 13;
    int64_t xd[] = {3, 5, 9, 8}, w5d[] = {4, 8}, b5d[] = {4}, td[] = {3, 4};
    qf_value *x = param(g, "x", QF_VALUE_PARAMETER, 4, xd, 1.0f, 0.0f);
    REQUIRE(x, "x");
    c->ps[c->np++] = x;
    qf_node *c1 = chain_conv(c, x, "conv1", 16, 5, 3, 1, 1, true);
    qf_node *b1 = chain_bn(c, c1->outputs[0], "bn1", 16, 0);
    qf_node *r1 = node(g, QF_OP_RELU, "relu1", 1, b1->outputs[0], NULL, NULL);
    qf_node *c2 = chain_conv(c, r1->outputs[0], "conv2", 16, 16, 3, 16, 2, false);
    qf_node *b2 = chain_bn(c, c2->outputs[0], "bn2", 16, 1);
    qf_node *r2 = node(g, QF_OP_RELU, "relu2", 1, b2->outputs[0], NULL, NULL);
    qf_node *c3 = chain_conv(c, r2->outputs[0], "conv3", 16, 16, 1, 1, 1, false);
    qf_node *b3 = chain_bn(c, c3->outputs[0], "bn3", 16, 2);
    qf_node *add = node(g, QF_OP_ADD, "add", 2, b3->outputs[0], r2->outputs[0], NULL);
    qf_node *r3 = node(g, QF_OP_RELU, "relu3", 1, add->outputs[0], NULL, NULL);
    qf_node *c4 = chain_conv(c, r3->outputs[0], "conv4", 8, 16, 1, 1, 1, true);
    qf_node *gap = node(g, QF_OP_GLOBAL_AVG_POOL, "gap", 1, c4->outputs[0], NULL, NULL);
    qf_node *fl = node(g, QF_OP_FLATTEN, "flatten", 1, gap->outputs[0], NULL, NULL);
    qf_value *w5 = param(g, "fc_w", QF_VALUE_PARAMETER, 2, w5d, 0.5f, 0.0f);
    qf_value *b5 = param(g, "fc_b", QF_VALUE_PARAMETER, 1, b5d, 0.3f, 0.0f);
    REQUIRE(r1 && r2 && add && r3 && gap && fl && w5 && b5, "chain nodes");
    c->ps[c->np++] = w5;
    c->ps[c->np++] = b5;
    qf_node *fc = node(g, QF_OP_LINEAR, "fc", 3, fl->outputs[0], w5, b5);
    qf_value *t = qf_graph_add_input(g, "target", QF_DTYPE_F32, 2, td);
    REQUIRE(fc && t, "fc");
    qf_node *loss = node(g, QF_OP_MSE_LOSS, "loss", 2, fc->outputs[0], t, NULL);
    REQUIRE(loss, "loss");
    c->loss = loss->outputs[0];
    c->bn2 = b2;
    REQUIRE_OK(qf_graph_add_output(g, c->loss));
    REQUIRE_OK(qf_tensor_init(&c->target, QF_DTYPE_F32, 2, td));
    for (int64_t i = 0; i < qf_tensor_numel(&c->target); i++) ((float *)c->target.data)[i] = rnd();
}

/* Two steps with the current engine: the loss, every gradient and the
 * running statistics after each, appended to out (floats). */
static qf_status chain_run(float *out, int64_t cap, int64_t *len)
{
    chain c;
    chain_build(&c);
    qf_grad_options o = {.loss = c.loss, .nparams = c.np, .params = (const qf_value *const *)c.ps};
    qf_grad_plan *p = NULL;
    qf_status st = qf_grad_plan_init(&p, c.g, &o);
    const qf_tensor *in[] = {&c.target};
    *len = 0;
    for (int step = 0; step < 2 && st == QF_OK; step++) {
        if (step == 1) st = qf_node_set_attr_int(c.g, c.bn2, "qfold_frozen", 1);
        if (st == QF_OK) st = qf_grad_plan_forward(p, in, 1, true);
        if (st == QF_OK) st = qf_grad_plan_backward(p);
        if (st != QF_OK) break;
        if (*len < cap) out[(*len)++] = qf_grad_plan_loss(p);
        for (int i = 0; i < c.np; i++) {
            const qf_tensor *gi = qf_grad_plan_grad(p, i);
            for (int64_t e = 0; e < qf_tensor_numel(gi) && *len < cap; e++) out[(*len)++] = ((const float *)gi->data)[e];
        }
        for (int k = 0; k < 6; k++) {
            const qf_tensor *t = &c.stats[k]->type;
            for (int64_t e = 0; e < qf_tensor_numel(t) && *len < cap; e++) out[(*len)++] = ((const float *)t->data)[e];
        }
    }
    qf_grad_plan_free(p);
    qf_tensor_free(&c.target);
    qf_graph_free(c.g);
    return st;
}

static void test_tape_nhwc_chain(void)
{
    if (qf_set_engine(QF_ENGINE_DNNL) != QF_OK) {
        printf("oneDNN not available: %s (the reference kernels only)\n", qf_error_message());
        qf_set_engine(QF_ENGINE_AUTO);
        return;
    }
    enum { CAP = 8192 };
    static float ref[CAP], dn[CAP];
    int64_t nref = 0, ndn = 0;
    CHECK_OK(qf_set_engine(QF_ENGINE_REF));
    qf_status st = chain_run(ref, CAP, &nref);
    CHECKF(st == QF_OK, "chain (ref): %s", qf_error_message());
    CHECK_OK(qf_set_engine(QF_ENGINE_DNNL));
    st = chain_run(dn, CAP, &ndn);
    CHECKF(st == QF_OK, "chain (dnnl): %s", qf_error_message());
    CHECKF(nref == ndn && nref > 1000 && nref < CAP, "chain: %lld vs %lld values", (long long)nref, (long long)ndn);
    double err = 0, scale = 1e-6;
    for (int64_t e = 0; e < nref && e < ndn; e++) {
        err = fmax(err, fabs((double)ref[e] - dn[e]));
        scale = fmax(scale, fabs((double)ref[e]));
    }
    printf("nhwc chain: dnnl vs ref max diff %.3g of %.3g over %lld values\n", err, scale, (long long)nref);
    CHECKF(err <= 1e-5 * scale, "chain: dnnl vs ref: max diff %g (scale %g)", err, scale);
    qf_set_engine(QF_ENGINE_AUTO);
}

/* BatchNormalization -> Relu run as one node in the tape (grad_fuse, bn_relu
 * in src/ops/ref/norm.c) against the two nodes each on its own (unfused), same
 * engine: x -> [Conv 3x3 ->] BN -> Relu -> [1x1 Conv ->] mse_loss, on odd
 * shapes (channels not a multiple of 16, batch 1 and 3, 2-D BatchNorm1d
 * input); with the convolutions on oneDNN the BN and Relu run channels-last.
 * Three steps (batch statistics, frozen, batch statistics) and an inference
 * forward: loss, output, every gradient and the running statistics must be
 * the same bits, and the fused plan must have fused the Relu. oneDNN's
 * against the reference's within 1e-5 of their scale: its convolutions'
 * backward weights as GEMMs (dct_w_gemm: the 3x3 one over im2col's
 * columns, the 1x1 one over X; at batch 1 x is an input of one channel:
 * no d x, so dY is reordered for the GEMM alone, and x is read as NHWC). */
typedef struct bnr_case {
    int64_t n, c, h, w; /* h = 0: x [n, c], no convolutions */
    int64_t stride;     /* the 3x3 convolution's (0: 1) */
    bool qat;           /* a qat_bn_output between the 3x3 convolution and the BN */
} bnr_case;

static qf_status bnr_run(const bnr_case *bc, bool unfused, float *out, int64_t cap, int64_t *len, int *fused)
{
    chain c;
    memset(&c, 0, sizeof c);
    rng = 0xb0a710c5ull + (uint64_t)bc->c;
    REQUIRE_OK(qf_graph_init(&c.g));
    qf_graph *g = c.g;
    g->opset = 13;
    const bool conv = bc->h > 0;
    const bool x_in = conv && bc->n == 1;
    const int64_t cin = x_in ? 1 : 3;
    const int64_t s = bc->stride ? bc->stride : 1, ho = conv ? (bc->h - 1) / s + 1 : 0, wo = conv ? (bc->w - 1) / s + 1 : 0;
    int64_t xd[] = {bc->n, conv ? cin : bc->c, bc->h, bc->w}, td[] = {bc->n, conv ? 4 : bc->c, ho, wo};
    qf_tensor xt = {0};
    qf_value *x = x_in ? qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd)
                       : param(g, "x", QF_VALUE_PARAMETER, conv ? 4 : 2, xd, 1.0f, 0.0f);
    REQUIRE(x, "x");
    if (x_in) {
        REQUIRE_OK(qf_tensor_init(&xt, QF_DTYPE_F32, 4, xd));
        for (int64_t i = 0; i < qf_tensor_numel(&xt); i++) ((float *)xt.data)[i] = rnd();
    } else
        c.ps[c.np++] = x;
    qf_value *v = conv ? chain_conv(&c, x, "conv1", bc->c, cin, 3, 1, s, true)->outputs[0] : x;
    if (bc->qat) {
        /* QAT's simulated fusion: Y / (gamma / sqrt(var + eps)), its own gamma and running variance. */
        int64_t cd[] = {bc->c};
        qf_value *qg = param(g, "qbo_gamma", QF_VALUE_PARAMETER, 1, cd, 0.4f, 1.0f);
        qf_value *qv = param(g, "qbo_var", QF_VALUE_BUFFER, 1, cd, 0.3f, 1.0f);
        REQUIRE(qg && qv, "qat_bn_output params");
        c.ps[c.np++] = qg;
        qf_node *q = node(g, QF_OP_QAT_BN_OUTPUT, "qbo", 3, v, qg, qv);
        REQUIRE(q, "qat_bn_output");
        v = q->outputs[0];
    }
    qf_node *bn = chain_bn(&c, v, "bn", bc->c, 0);
    qf_node *r = node(g, QF_OP_RELU, "relu", 1, bn->outputs[0], NULL, NULL);
    REQUIRE(r, "relu");
    v = conv ? chain_conv(&c, r->outputs[0], "conv2", 4, bc->c, 1, 1, 1, false)->outputs[0] : r->outputs[0];
    qf_value *t = qf_graph_add_input(g, "target", QF_DTYPE_F32, conv ? 4 : 2, td);
    qf_node *loss = t ? node(g, QF_OP_MSE_LOSS, "loss", 2, v, t, NULL) : NULL;
    REQUIRE(loss, "loss");
    REQUIRE_OK(qf_graph_add_output(g, loss->outputs[0]));
    REQUIRE_OK(qf_tensor_init(&c.target, QF_DTYPE_F32, conv ? 4 : 2, td));
    for (int64_t i = 0; i < qf_tensor_numel(&c.target); i++) ((float *)c.target.data)[i] = rnd();
    qf_grad_options o = {.loss = loss->outputs[0], .nparams = c.np, .params = (const qf_value *const *)c.ps,
                         .unfused = unfused};
    qf_grad_plan *p = NULL;
    qf_status st = qf_grad_plan_init(&p, g, &o);
    const qf_tensor *in[] = {x_in ? &xt : &c.target, &c.target};
    *len = 0;
    for (int step = 0; step < 4 && st == QF_OK; step++) {
        st = qf_node_set_attr_int(g, bn, "qfold_frozen", step == 1);
        if (st == QF_OK) st = qf_grad_plan_forward(p, in, x_in ? 2 : 1, step < 3);
        if (st == QF_OK && step < 3) st = qf_grad_plan_backward(p);
        if (st != QF_OK) break;
        if (*len < cap) out[(*len)++] = qf_grad_plan_loss(p);
        for (int i = 0; i < c.np && step < 3; i++) {
            const qf_tensor *gi = qf_grad_plan_grad(p, i);
            for (int64_t e = 0; e < qf_tensor_numel(gi) && *len < cap; e++) out[(*len)++] = ((const float *)gi->data)[e];
        }
        for (int k = 0; k < 2; k++) {
            const qf_tensor *sk = &c.stats[k]->type;
            for (int64_t e = 0; e < qf_tensor_numel(sk) && *len < cap; e++) out[(*len)++] = ((const float *)sk->data)[e];
        }
        /* The next step from other parameters: the optimizer's move. */
        for (int i = 0; i < c.np; i++) {
            float *pi = c.ps[i]->type.data;
            for (int64_t e = 0; e < qf_tensor_numel(&c.ps[i]->type); e++) pi[e] += 0.05f * rnd();
        }
    }
    *fused = p ? qf_grad_plan_fused(p) : -1;
    qf_grad_plan_free(p);
    qf_tensor_free(&c.target);
    qf_tensor_free(&xt);
    qf_graph_free(g);
    return st;
}

static void test_tape_bn_relu_fused(void)
{
    /* Channels-last BN with up to 64 channels splits the rows (bn_rstats
     * in src/ops/ref/norm_nhwc.c: 16 chunks; [1, 6, 3, 3] has 9 rows, [3, 31, ...]
     * a 16- and a 15-channel block, [2, 64, ...] the most channels there),
     * with more the channels (bn_train_nhwc_slice: statistics and affine in
     * one pass; [3, 70, ...]: four 16-channel blocks and one of 6, [2, 65]
     * 2-D); the 3x3 convolution's d W (3 or 1 input channels: few columns) is
     * dct_w_few's (src/backend/dnnl/dnnl_conv.c), stride 2 in [3, 7, 9, 7, 2]. The
     * last three with QAT's qat_bn_output before the BN (channels-last on
     * oneDNN; its backward's rows split up to 64 channels, src/ops/qat/qat_bn.c). */
    static const bnr_case cases[] = {{1, 5, 7, 3},  {3, 17, 5, 4}, {3, 33, 4, 5}, {3, 16, 6, 6},
                                     {3, 17, 0, 0}, {2, 20, 0, 0}, {1, 6, 3, 3},  {3, 31, 5, 3},
                                     {3, 7, 9, 7, 2}, {2, 64, 3, 3}, {3, 70, 4, 3}, {2, 65, 0, 0},
                                     {3, 17, 5, 4, 0, true}, {2, 64, 3, 3, 0, true}, {3, 70, 4, 3, 0, true}};
    enum { CAP = 16384, NCASE = 15 };
    static float a[CAP], b[CAP], ref[NCASE][CAP];
    int64_t nref[NCASE] = {0};
    const qf_engine engines[] = {QF_ENGINE_REF, QF_ENGINE_DNNL};
    for (int e = 0; e < 2; e++) {
        if (qf_set_engine(engines[e]) != QF_OK) {
            printf("oneDNN not available: %s (the reference kernels only)\n", qf_error_message());
            qf_error_clear();
            continue;
        }
        for (size_t k = 0; k < NCASE; k++) {
            const bnr_case bc = cases[k];
            int64_t na = 0, nb = 0;
            int fused = 0, unfused = 0;
            qf_status st = bnr_run(&bc, false, a, CAP, &na, &fused);
            CHECKF(st == QF_OK, "case %zu fused: %s", k, qf_error_message());
            st = bnr_run(&bc, true, b, CAP, &nb, &unfused);
            CHECKF(st == QF_OK, "case %zu unfused: %s", k, qf_error_message());
            CHECKF(na == nb && na > 20 && na < CAP, "case %zu: %lld vs %lld values", k, (long long)na, (long long)nb);
            int64_t diff = 0;
            for (int64_t i = 0; i < na && i < nb; i++) diff += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
            CHECKF(diff == 0, "case %zu (%s): %lld of %lld values differ fused vs unfused", k, e ? "dnnl" : "ref",
                   (long long)diff, (long long)na);
            CHECKF(fused == 1 && unfused == 0, "case %zu: %d / %d nodes fused", k, fused, unfused);
            double err = 0, scale = 1e-6;
            if (e == 0) {
                memcpy(ref[k], a, sizeof a[0] * (size_t)na);
                nref[k] = na;
            } else {
                CHECKF(nref[k] == na, "case %zu: %lld values on oneDNN, %lld on ref", k, (long long)na,
                       (long long)nref[k]);
                for (int64_t i = 0; i < na && i < nref[k]; i++) {
                    err = fmax(err, fabs((double)ref[k][i] - a[i]));
                    scale = fmax(scale, fabs((double)ref[k][i]));
                }
                CHECKF(err <= 1e-5 * scale, "case %zu: dnnl vs ref max diff %g (scale %g)", k, err, scale);
            }
            printf("bn+relu%s [%lld, %lld, %lld, %lld] %s: %lld values equal fused / unfused; vs ref %.3g of %.3g\n",
                   bc.qat ? " (qat)" : "", (long long)bc.n, (long long)bc.c, (long long)bc.h, (long long)bc.w,
                   e ? "dnnl" : "ref",
                   (long long)na, err, scale);
        }
    }
    qf_set_engine(QF_ENGINE_AUTO);
}

static qf_check_alloc counter;

/* Out of memory at every allocation of the init: QF_ERR_NOMEM, nothing left allocated. */
static void test_tape_oom(void)
{
    int k = 1;
    for (; k < 400; k++) {
        net m;
        net_build(&m);
        qf_value *ps[] = {m.w1, m.b1, m.s, m.w2, m.b2};
        qf_grad_options o = {.loss = m.loss, .nparams = 5, .params = (const qf_value *const *)ps};
        qf_grad_plan *p = NULL;
        const long live = counter.live;
        counter.fail_at = counter.calls + k;
        qf_status st = qf_grad_plan_init(&p, m.g, &o);
        counter.fail_at = 0;
        if (st == QF_OK) {
            qf_grad_plan_free(p);
            net_free(&m);
            break;
        }
        CHECKF(st == QF_ERR_NOMEM && p == NULL, "allocation %d failing: status %d", k, st);
        CHECKF(counter.live == live, "allocation %d failing: %ld blocks leaked", k, counter.live - live);
        net_free(&m);
    }
    CHECKF(k > 5 && k < 400, "init succeeded after %d failing allocations", k);
}

int main(void)
{
    qf_check_count_allocs(&counter);
    RUN(test_tape_gradients);
    RUN(test_tape_subset);
    RUN(test_tape_errors);
    RUN(test_tape_oom);
    RUN(test_tape_engines);
    RUN(test_tape_nhwc_chain);
    RUN(test_tape_bn_relu_fused);
    CHECKF(counter.live == 0, "%ld blocks still allocated at the end", counter.live);
    return qf_check_report();
}
