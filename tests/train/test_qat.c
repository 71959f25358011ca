/* qfold/qat.h on x -> Conv -> BN -> Relu -> GlobalAveragePool -> Flatten ->
 * Gemm -> BN1d -> Gemm (random BN statistics, gamma, beta):
 *   - the pipeline qat_prepare (canonicalize -> quant_qat_insert -> qat_bn_add)
 *     with the quantizer's session: fake_quants (a pooled output sharing its
 *     input's), the simulated fusion;
 *   - calibration: observers move, BN running statistics do not (BN frozen),
 *     parameters do not (no optimizer step), nothing frozen afterwards;
 *   - --freeze-bn after 2 steps: the running statistics change in steps 1-2
 *     and never after, while the weights keep training; the frozen flag is
 *     gone when qf_qat_train returns;
 *   - --freeze-observers after 1 epoch: the scales change in epoch 1 and never
 *     after; at step 0 before anything;
 *   - schedule points parsed, qf_graph_clone computing what the original does,
 *     a BN with an absurd epsilon / momentum and a model with nothing to
 *     quantize refused with the node's name. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "qfold/qat.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"
#include "tools/qf_test_graph.h"

#define N 24
#define BATCH 4
#define STEPS (N / BATCH)

static uint64_t rng = 0x5eedf00dull;

static qf_node *gemm(qf_graph *g, const char *name, qf_value *x, int64_t out, int64_t in)
{
    char n[64];
    int64_t wd[] = {out, in};
    snprintf(n, sizeof n, "%s_w", name);
    qf_value *w = qf_test_const(g, &rng, n, QF_VALUE_PARAMETER, 2, wd, -0.4f, 0.4f);
    snprintf(n, sizeof n, "%s_b", name);
    qf_value *b = qf_test_const(g, &rng, n, QF_VALUE_PARAMETER, 1, &out, -0.1f, 0.1f);
    qf_value *gi[3] = {x, w, b};
    qf_node *nd = qf_graph_add_node(g, QF_OP_GEMM, name, 3, gi, 1);
    if (nd && qf_node_set_attr_int(g, nd, "transB", 1) != QF_OK) return NULL;
    return nd;
}

/* The model; eps / momentum of the first BN as given. */
static qf_graph *model(float eps, float momentum)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    g->opset = 13;
    int64_t xd[] = {-1, 3, 6, 6}, wd[] = {6, 3, 3, 3}, c6 = 6;
    xd[0] = BATCH;
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *cin[3] = {x, qf_test_const(g, &rng, "w", QF_VALUE_PARAMETER, 4, wd, -0.5f, 0.5f),
                        qf_test_const(g, &rng, "b", QF_VALUE_PARAMETER, 1, &c6, -0.1f, 0.1f)};
    qf_node *conv = qf_graph_add_node(g, QF_OP_CONV, "conv", 3, cin, 1);
    int64_t pads[] = {1, 1, 1, 1};
    if (!conv || qf_node_set_attr_ints(g, conv, "pads", pads, 4) != QF_OK) return NULL;
    qf_node *b1 = qf_test_bn(g, &rng, "bn1", conv->outputs[0], 6);
    if (!b1 || qf_node_set_attr_float(g, b1, "epsilon", eps) != QF_OK ||
        qf_node_set_attr_float(g, b1, "momentum", momentum) != QF_OK)
        return NULL;
    qf_node *relu = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, b1->outputs, 1);
    qf_node *gap = relu ? qf_graph_add_node(g, QF_OP_GLOBAL_AVG_POOL, "gap", 1, relu->outputs, 1) : NULL;
    qf_node *flat = gap ? qf_graph_add_node(g, QF_OP_FLATTEN, "flat", 1, gap->outputs, 1) : NULL;
    qf_node *fc1 = flat ? gemm(g, "fc1", flat->outputs[0], 8, 6) : NULL;
    qf_node *b2 = fc1 ? qf_test_bn(g, &rng, "bn2", fc1->outputs[0], 8) : NULL;
    if (b2 && (qf_node_set_attr_float(g, b2, "epsilon", 1e-3f) != QF_OK ||
               qf_node_set_attr_float(g, b2, "momentum", 0.9f) != QF_OK))
        return NULL;
    qf_node *r2 = b2 ? qf_graph_add_node(g, QF_OP_RELU, "relu2", 1, b2->outputs, 1) : NULL;
    qf_node *fc2 = r2 ? gemm(g, "fc2", r2->outputs[0], 4, 8) : NULL;
    if (!fc2 || qf_graph_add_output(g, fc2->outputs[0]) != QF_OK || qf_graph_infer_shapes(g) != QF_OK) {
        qf_graph_free(g);
        return NULL;
    }
    return g;
}

typedef struct data {
    qf_tensor x, y;
    const qf_tensor *feed[1];
    qf_data_source src;
} data;

static void data_init(data *d)
{
    int64_t xd[] = {N, 3, 6, 6}, yd[] = {N};
    REQUIRE_OK(qf_tensor_init(&d->x, QF_DTYPE_F32, 4, xd));
    REQUIRE_OK(qf_tensor_init(&d->y, QF_DTYPE_I64, 1, yd));
    for (int64_t i = 0; i < qf_tensor_numel(&d->x); i++) ((float *)d->x.data)[i] = 1.5f * qf_test_rnd(&rng);
    for (int64_t i = 0; i < N; i++) ((int64_t *)d->y.data)[i] = (int64_t)(i % 4);
    d->feed[0] = &d->x;
    d->src = qf_data_source_tensors(d->feed, 1);
}

static void data_free(data *d)
{
    qf_tensor_free(&d->x);
    qf_tensor_free(&d->y);
}

static int count_op(const qf_graph *g, qf_op op)
{
    int n = 0;
    qf_graph_for_each_node(g, nd) n += nd->op == op;
    return n;
}

/* The fake_quant reading value `name` (after prepare: the graph input x). */
static const qf_node *fq_of(const qf_graph *g, const char *name)
{
    const qf_value *v = qf_graph_find_value(g, name);
    for (int i = 0; v && i < v->nuses; i++)
        if (v->uses[i].node->op == QF_OP_FAKE_QUANT) return v->uses[i].node;
    return NULL;
}

static bool frozen_anywhere(const qf_graph *g)
{
    qf_graph_for_each_node(g, n) if (n->op == QF_OP_BATCH_NORM && qf_node_attr(n, "qfold_frozen")) return true;
    return false;
}

typedef struct session {
    qf_quant_session s;
    qf_qat_config q;
} session;

static void session_init(session *s)
{
    REQUIRE_OK(qf_quant_register_passes());
    memset(s, 0, sizeof *s);
    s->s.profile = qf_quant_profile_find("neutron");
    s->q = qf_qat_defaults();
    s->q.passes.user = &s->s;
    s->q.train.batch = BATCH;
    s->q.train.shuffle = false;
    s->q.train.optim.lr = 0.05;
}

static void test_prepare(void)
{
    qf_graph *g = model(1e-5f, 0.9f);
    REQUIRE(g, "model: %s", qf_error_message());
    session s;
    session_init(&s);
    qf_pass_report *r = NULL;
    REQUIRE_OK(qf_qat_prepare(g, &s.q, &r));
    REQUIRE(r, "no report");
    /* equalize: the profile's rule (neutron: auto, which `qfold qat` decides
     * on data beforehand; undecided here, the pass does nothing) */
    const char *want[] = {"canonicalize", "fuse_hard_swish", "equalize", "quant_qat_insert", "qat_bn_add"};
    for (int i = 0; i < 5; i++)
        CHECKF(i < r->nresults && !strcmp(r->results[i].pass, want[i]), "pass %d of qat_prepare: %s, expected %s", i,
               i < r->nresults ? r->results[i].pass : "none", want[i]);
    /* x, w, the Relu output (GlobalAveragePool's and Flatten's share its
     * buffers), fc1_w, the second Relu's output, fc2_w, the output. */
    CHECKF(count_op(g, QF_OP_FAKE_QUANT) == 9, "%d fake_quants", count_op(g, QF_OP_FAKE_QUANT));
    CHECKF(r->nresults >= 4 && r->results[2].nrewritten == 0 && r->results[3].nrewritten == 9,
           "the passes reported %d equalized layers, %d fake_quants", r->nresults >= 4 ? r->results[2].nrewritten : -1,
           r->nresults >= 4 ? r->results[3].nrewritten : -1);
    const qf_node *fr = fq_of(g, "relu_out"), *fg = fq_of(g, "gap_out");
    CHECK(fr && fg && fr->inputs[1] == fg->inputs[1]);
    CHECKF(count_op(g, QF_OP_QAT_BN_WEIGHT) == 2 && count_op(g, QF_OP_QAT_BN_OUTPUT) == 2,
           "simulated fusions: %d weights, %d outputs", count_op(g, QF_OP_QAT_BN_WEIGHT),
           count_op(g, QF_OP_QAT_BN_OUTPUT));
    CHECK(fq_of(g, "x") != NULL);
    CHECK_OK(qf_graph_verify_shapes(g));
    qf_pass_report_free(r);

    /* The copy computes what the original does. */
    qf_graph *c = NULL;
    REQUIRE_OK(qf_graph_clone(g, &c));
    CHECK_OK(qf_graph_verify_shapes(c));
    CHECKF(c->nnodes == g->nnodes && c->noutputs == 1 && !strcmp(c->outputs[0]->name, g->outputs[0]->name),
           "clone: %d nodes of %d", c->nnodes, g->nnodes);
    data d;
    data_init(&d);
    qf_tensor xv;
    qf_tensor_view(&xv, QF_DTYPE_F32, 4, (int64_t[]){BATCH, 3, 6, 6}, d.x.data);
    const qf_tensor *in[] = {&xv};
    qf_plan *pa = NULL, *pb = NULL;
    REQUIRE_OK(qf_plan_init(&pa, g));
    REQUIRE_OK(qf_plan_init(&pb, c));
    REQUIRE_OK(qf_plan_run(pa, in, 1));
    REQUIRE_OK(qf_plan_run(pb, in, 1));
    const qf_tensor *ya = qf_plan_output(pa, 0), *yb = qf_plan_output(pb, 0);
    CHECK(qf_tensor_nbytes(ya) == qf_tensor_nbytes(yb) && !memcmp(ya->data, yb->data, qf_tensor_nbytes(ya)));
    qf_plan_free(pa);
    qf_plan_free(pb);
    qf_graph_free(c);
    data_free(&d);
    qf_quant_annotation_free(s.s.annotation);
    qf_graph_free(g);
}

static void copy_of(const qf_graph *g, const char *name, float *out, int n)
{
    const qf_value *v = qf_graph_find_value(g, name);
    REQUIRE(v && v->type.data && qf_tensor_numel(&v->type) >= n, "value '%s'", name);
    memcpy(out, v->type.data, sizeof *out * (size_t)n);
}

static void test_calibrate(void)
{
    qf_graph *g = model(1e-5f, 0.9f);
    REQUIRE(g, "model: %s", qf_error_message());
    session s;
    session_init(&s);
    REQUIRE_OK(qf_qat_prepare(g, &s.q, NULL));
    data d;
    data_init(&d);
    float mean0[6], var0[6], w0[8], mean1[6], var1[6], w1[8];
    copy_of(g, "bn1_mean", mean0, 6);
    copy_of(g, "bn1_var", var0, 6);
    copy_of(g, "w", w0, 8);
    const qf_node *fx = fq_of(g, "x");
    REQUIRE(fx, "no fake_quant on x");
    CHECK(((const float *)fx->inputs[1]->type.data)[0] == 1.0f);
    int64_t done = 0;
    s.q.calib_count = 10; /* two full batches and a short one */
    REQUIRE_OK(qf_qat_calibrate(g, &d.src, &d.y, &s.q, &done));
    CHECKF(done == 10, "calibrated on %lld samples", (long long)done);
    copy_of(g, "bn1_mean", mean1, 6);
    copy_of(g, "bn1_var", var1, 6);
    copy_of(g, "w", w1, 8);
    CHECK(!memcmp(mean0, mean1, sizeof mean0) && !memcmp(var0, var1, sizeof var0));
    CHECK(!memcmp(w0, w1, sizeof w0));
    const float sx = ((const float *)fx->inputs[1]->type.data)[0];
    CHECKF(sx != 1.0f && sx > 0, "x's scale after calibration: %g", sx);
    CHECK(!frozen_anywhere(g));
    /* calib_count 0: nothing runs. */
    s.q.calib_count = 0;
    REQUIRE_OK(qf_qat_calibrate(g, &d.src, &d.y, &s.q, &done));
    CHECK(done == 0 && ((const float *)fx->inputs[1]->type.data)[0] == sx);
    data_free(&d);
    qf_quant_annotation_free(s.s.annotation);
    qf_graph_free(g);
}

/* Per optimizer step: BN1's running mean, the conv weight, x's scale. */
typedef struct trace {
    const qf_graph *g;
    float mean[2 * STEPS + 1][6], w[2 * STEPS + 1][8], scale[2 * STEPS + 1];
    int n;
} trace;

static void trace_take(trace *t)
{
    copy_of(t->g, "bn1_mean", t->mean[t->n], 6);
    copy_of(t->g, "w", t->w[t->n], 8);
    const qf_node *fx = fq_of(t->g, "x");
    t->scale[t->n] = fx ? ((const float *)fx->inputs[1]->type.data)[0] : -1;
    t->n++;
}

static qf_status on_step(void *ud, qf_train_step_info *info)
{
    (void)info;
    trace_take(ud);
    return QF_OK;
}

static void run_schedule(const char *bn_when, const char *obs_when, trace *t)
{
    qf_graph *g = model(1e-5f, 0.9f);
    REQUIRE(g, "model: %s", qf_error_message());
    session s;
    session_init(&s);
    REQUIRE_OK(qf_qat_prepare(g, &s.q, NULL));
    REQUIRE_OK(qf_qat_when_parse(bn_when, &s.q.freeze_bn));
    REQUIRE_OK(qf_qat_when_parse(obs_when, &s.q.freeze_observers));
    data d;
    data_init(&d);
    memset(t, 0, sizeof *t);
    t->g = g;
    trace_take(t);
    s.q.train.epochs = 2;
    s.q.train.on_step = on_step;
    s.q.train.ud = t;
    qf_train_result r;
    REQUIRE_OK(qf_qat_train(g, &d.src, &d.y, NULL, NULL, &s.q, &r));
    CHECKF(r.steps == 2 * STEPS && t->n == 2 * STEPS + 1, "%lld steps, %d traced", (long long)r.steps, t->n);
    CHECK(!frozen_anywhere(g));
    data_free(&d);
    qf_quant_annotation_free(s.s.annotation);
    qf_graph_free(g);
}

static void test_freeze_bn(void)
{
    trace t;
    run_schedule("2", "never", &t);
    /* t.mean[k]: after k steps. Steps 1 and 2 move the statistics; the
     * switch after step 2 stops them for every later step. */
    CHECK(memcmp(t.mean[0], t.mean[1], sizeof t.mean[0]) && memcmp(t.mean[1], t.mean[2], sizeof t.mean[0]));
    for (int k = 3; k < t.n; k++) {
        CHECKF(!memcmp(t.mean[2], t.mean[k], sizeof t.mean[0]), "BN's running mean moved in step %d", k);
        CHECKF(memcmp(t.w[k - 1], t.w[k], sizeof t.w[0]), "the conv weight did not train in step %d", k);
        CHECKF(t.scale[k] != t.scale[k - 1], "x's observer stopped in step %d", k);
    }
    /* From the start: nothing ever moves the statistics. */
    run_schedule("0ep", "never", &t);
    for (int k = 1; k < t.n; k++) CHECKF(!memcmp(t.mean[0], t.mean[k], sizeof t.mean[0]), "moved in step %d", k);
}

static void test_freeze_observers(void)
{
    trace t;
    run_schedule("never", "1ep", &t);
    for (int k = 1; k <= STEPS; k++) CHECKF(t.scale[k] != t.scale[k - 1], "x's scale stood still in step %d", k);
    for (int k = STEPS + 1; k < t.n; k++) {
        CHECKF(t.scale[k] == t.scale[STEPS], "x's scale moved in step %d after the observers stopped", k);
        CHECKF(memcmp(t.mean[k - 1], t.mean[k], sizeof t.mean[0]), "BN stopped in step %d", k);
    }
    run_schedule("never", "0", &t);
    for (int k = 1; k < t.n; k++) CHECKF(t.scale[k] == 1.0f, "x's scale %g in step %d (never observed)", t.scale[k], k);
}

static void test_when(void)
{
    qf_qat_when w;
    CHECK_OK(qf_qat_when_parse("500", &w));
    CHECK(w.unit == QF_QAT_STEPS && w.at == 500 && qf_qat_when_step(&w, 7) == 500);
    CHECK_OK(qf_qat_when_parse("2ep", &w));
    CHECK(w.unit == QF_QAT_EPOCHS && w.at == 2 && qf_qat_when_step(&w, 7) == 14);
    CHECK_OK(qf_qat_when_parse("never", &w));
    CHECK(w.unit == QF_QAT_NEVER && qf_qat_when_step(&w, 7) == -1);
    const char *bad[] = {"", "-1", "2e", "ep", "1.5", "2ep1", "x", " 3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_ERR(qf_qat_when_parse(bad[i], &w), QF_ERR_INVALID, "schedule point");
}

static void test_bad_input(void)
{
    session s;
    session_init(&s);
    const float eps[] = {0.0f, -1e-5f, NAN, 3.0f}, mom[] = {1.5f, -0.1f, NAN};
    for (int i = 0; i < 4; i++) {
        qf_graph *g = model(eps[i], 0.9f);
        REQUIRE(g, "model");
        CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_INVALID, "node 'bn1' (BatchNormalization): epsilon");
        qf_graph_free(g);
    }
    for (int i = 0; i < 3; i++) {
        qf_graph *g = model(1e-5f, mom[i]);
        REQUIRE(g, "model");
        CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_INVALID, "node 'bn1' (BatchNormalization): momentum");
        qf_graph_free(g);
    }
    /* Missing: ONNX's defaults may not be what the model was trained with. */
    static const char *const attr[] = {"epsilon", "momentum"};
    for (int i = 0; i < 2; i++) {
        qf_graph *g = model(1e-5f, 0.9f);
        REQUIRE(g, "model");
        qf_graph_for_each_node(g, n)
        {
            if (!strcmp(n->name, "bn1")) qf_node_remove_attr(n, attr[i]);
        }
        char want[96];
        snprintf(want, sizeof want, "node 'bn1' (BatchNormalization): no %s attribute", attr[i]);
        CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_INVALID, want);
        qf_graph_free(g);
    }
    /* x -> Erf: nothing the target quantizes. */
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = 13;
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, (int64_t[]){2, 3});
    qf_node *e = qf_graph_add_node(g, QF_OP_ERF, "erf", 1, &x, 1);
    REQUIRE(e, "erf");
    REQUIRE_OK(qf_graph_add_output(g, e->outputs[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_UNSUPPORTED, "node 'erf' (Erf)");
    qf_graph_free(g);
    qf_quant_annotation_free(s.s.annotation);
    /* Without the quantizer's session the pass says what it needs. */
    g = model(1e-5f, 0.9f);
    REQUIRE(g, "model");
    s.q.passes.user = NULL;
    CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_INVALID, "needs a quantization session");
    qf_graph_free(g);
}

/* What qat_convert refuses whatever training does is refused by prepare,
 * before any training: a profile whose activation range has no ONNX type,
 * one whose weights are affine. */
static void test_convert_checked_first(void)
{
    session s;
    session_init(&s);
    qf_quant_profile p = *s.s.profile;
    p.activation.qmin = 0;
    p.activation.qmax = 65535;
    s.s.profile = &p;
    qf_graph *g = model(1e-5f, 0.9f);
    REQUIRE(g, "model");
    CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_UNSUPPORTED,
              "activation range [0, 65535] is neither int8");
    qf_graph_free(g);
    qf_quant_annotation_free(s.s.annotation);
    s.s.annotation = NULL;
    p = *qf_quant_profile_find("neutron");
    p.conv_weight.scheme = QF_QSCHEME_AFFINE;
    g = model(1e-5f, 0.9f);
    REQUIRE(g, "model");
    CHECK_ERR(qf_qat_prepare(g, &s.q, NULL), QF_ERR_UNSUPPORTED, "affine weight quantization");
    qf_graph_free(g);
    qf_quant_annotation_free(s.s.annotation);
}

int main(void)
{
    RUN(test_when);
    RUN(test_prepare);
    RUN(test_calibrate);
    RUN(test_freeze_bn);
    RUN(test_freeze_observers);
    RUN(test_bad_input);
    RUN(test_convert_checked_first);
    return qf_check_report();
}
