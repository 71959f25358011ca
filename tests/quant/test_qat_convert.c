/* The end of QAT: qat_finalize (qat_bn_remove -> fuse_batch_norm through the
 * weight fake_quant -> dce -> qat_convert -> dce) on x -> op(W[, b]) -> BN ->
 * Relu for Conv, ConvTranspose (groups 1, 2) and linear, with and without
 * bias, per-channel and per-tensor weights, weight observer on and off,
 * prepared as qfold qat does (qf_quant_annotate_qat, qf_quant_qat_insert,
 * qat_bn_add) on random BN statistics, its observers fed by two training
 * forwards:
 *   - after the fold the weight fake_quant's input equals, bit for bit, what
 *     it saw in training (qat_bn_weight's output in eval mode), and its
 *     qparams moved once with it (observe 1: qf_qparams_torch of the moved
 *     running range) or not (observe 0);
 *   - the int8 weight is clamp(round(W*s / scale), -127, 127), the bias
 *     int32 at s_in * s_w of the folded bias, the graph holds no internal op;
 *   - the QDQ graph's inference output is the QAT graph's (eval) within one
 *     output quantization step (observe 0) / a few (observe 1: the weight
 *     grid moved);
 *   - bad input: a fake_quant that never observed is an error naming it, so
 *     is an activation range without an ONNX type (qat_convert, qat_export;
 *     nothing written); a weight fake_quant with another reader is a fold
 *     skip with the reason. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/math/quant_math.h"
#include "qfold/exec.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"
#include "tools/qf_test_graph.h"

static uint64_t rng = 0x9a7c0de5eedull;

typedef struct ccase {
    const char *name;
    qf_op op;
    int group;
    bool bias, per_channel, observe;
} ccase;

typedef struct built {
    qf_graph *g;
    qf_tensor x, target;
    int64_t xd[4];
    int xr;
} built;

/* x -> op -> BN -> Relu -> (graph output) and mse_loss(·, target). */
static bool build(const ccase *c, built *b)
{
    memset(b, 0, sizeof *b);
    if (qf_graph_init(&b->g) != QF_OK) return false;
    qf_graph *g = b->g;
    g->opset = 13;
    const int64_t cin = 4, cout = 6;
    int64_t wd[4], bd[1] = {cout}, yd[4];
    int wr = 4;
    if (c->op == QF_OP_LINEAR) {
        b->xd[0] = 16, b->xd[1] = 5, b->xr = 2;
        wd[0] = cout, wd[1] = 5, wr = 2;
        yd[0] = 16, yd[1] = cout;
    } else {
        b->xd[0] = 4, b->xd[1] = cin, b->xd[2] = 5, b->xd[3] = 6, b->xr = 4;
        if (c->op == QF_OP_CONV) {
            wd[0] = cout, wd[1] = cin / c->group, wd[2] = 3, wd[3] = 2;
            yd[2] = 3, yd[3] = 5;
        } else {
            wd[0] = cin, wd[1] = cout / c->group, wd[2] = 2, wd[3] = 3;
            yd[2] = 6, yd[3] = 8;
        }
        yd[0] = 4, yd[1] = cout;
    }
    qf_value *xv = qf_graph_add_input(g, "x", QF_DTYPE_F32, b->xr, b->xd);
    qf_value *w = qf_test_const(g, &rng, "w", QF_VALUE_PARAMETER, wr, wd, -1, 1);
    qf_value *bias = c->bias ? qf_test_const(g, &rng, "b", QF_VALUE_PARAMETER, 1, bd, -0.5f, 0.5f) : NULL;
    qf_value *pin[3] = {xv, w, bias};
    qf_node *p = qf_graph_add_node(g, c->op, "op", bias ? 3 : 2, pin, 1);
    if (!p) return false;
    if (c->op != QF_OP_LINEAR && qf_node_set_attr_int(g, p, "group", c->group) != QF_OK) return false;
    qf_value *gam = qf_test_const(g, &rng, "gamma", QF_VALUE_PARAMETER, 1, bd, 0.3f, 1.5f);
    qf_value *bet = qf_test_const(g, &rng, "beta", QF_VALUE_PARAMETER, 1, bd, -0.5f, 0.5f);
    qf_value *mu = qf_test_const(g, &rng, "mean", QF_VALUE_BUFFER, 1, bd, -0.3f, 0.3f);
    qf_value *var = qf_test_const(g, &rng, "var", QF_VALUE_BUFFER, 1, bd, 0.2f, 2.0f);
    qf_value *bin[5] = {p->outputs[0], gam, bet, mu, var};
    qf_node *bn = qf_graph_add_node(g, QF_OP_BATCH_NORM, "bn", 5, bin, 1);
    if (!bn) return false;
    qf_value *rin[1] = {bn->outputs[0]};
    qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, rin, 1);
    if (!r || qf_graph_add_output(g, r->outputs[0]) != QF_OK) return false;
    if (qf_graph_infer_shapes(g) != QF_OK) return false;
    if (qf_tensor_init(&b->x, QF_DTYPE_F32, b->xr, b->xd) != QF_OK) return false;
    for (int64_t i = 0; i < qf_tensor_numel(&b->x); i++) ((float *)b->x.data)[i] = qf_test_rnd(&rng);
    if (qf_tensor_init(&b->target, QF_DTYPE_F32, b->xr, yd) != QF_OK) return false;
    for (int64_t i = 0; i < qf_tensor_numel(&b->target); i++) ((float *)b->target.data)[i] = qf_test_rnd(&rng);
    return true;
}

static void built_free(built *b)
{
    qf_graph_free(b->g);
    qf_tensor_free(&b->x);
    qf_tensor_free(&b->target);
}

/* Prepare for QAT as qfold qat does. */
static void prepare(const ccase *c, qf_graph *g)
{
    qf_quant_profile prof = *qf_quant_profile_find("neutron");
    REQUIRE_OK(qf_quant_profile_set(&prof, c->per_channel ? "linear-weights=per-channel"
                                                          : "linear-weights=per-tensor"));
    REQUIRE_OK(qf_quant_profile_set(&prof, c->per_channel ? "conv-weights=per-channel" : "conv-weights=per-tensor"));
    qf_quant_annotation *a = NULL;
    REQUIRE_OK(qf_quant_annotate_qat(g, &prof, &a));
    REQUIRE_OK(qf_quant_qat_insert(g, a, &prof, NULL));
    qf_quant_annotation_free(a);
    qf_pass_report *r = NULL;
    const char *add[] = {"qat_bn_add", NULL};
    REQUIRE_OK(qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
}

/* Two training forwards (the observers and BN's running statistics move),
 * with a loss on the graph output. */
static void observe(built *b)
{
    qf_graph *g = b->g;
    qf_value *t = qf_graph_add_input(g, "target", QF_DTYPE_F32, b->target.ndim, b->target.dims);
    qf_value *m_in[2] = {g->outputs[0], t};
    qf_node *loss = qf_graph_add_node(g, QF_OP_MSE_LOSS, "loss", 2, m_in, 1);
    REQUIRE(t && loss, "loss: %s", qf_error_message());
    REQUIRE_OK(qf_graph_add_output(g, loss->outputs[0]));
    const qf_value *ps[] = {qf_graph_find_value(g, "gamma")};
    qf_grad_plan *gp = NULL;
    REQUIRE_OK(qf_grad_plan_init(&gp, g, &(qf_grad_options){.loss = loss->outputs[0], .nparams = 1, .params = ps}));
    const qf_tensor *in[] = {&b->x, &b->target};
    for (int step = 0; step < 2; step++) REQUIRE_OK(qf_grad_plan_forward(gp, in, 2, true));
    qf_grad_plan_free(gp);
}

/* Output 0 of g on the built inputs (owned copy). */
static qf_status infer(qf_graph *g, const built *b, qf_tensor *out)
{
    qf_plan *p = NULL;
    QF_TRY(qf_plan_init(&p, g));
    const qf_tensor *in[] = {&b->x, &b->target};
    qf_status st = qf_plan_run(p, in, 2);
    if (st == QF_OK) {
        const qf_tensor *y = qf_plan_output(p, 0);
        st = qf_tensor_init(out, y->dtype, y->ndim, y->dims);
        if (st == QF_OK) memcpy(out->data, y->data, qf_tensor_nbytes(y));
    }
    qf_plan_free(p);
    return st;
}

static qf_node *find_op(const qf_graph *g, qf_op op)
{
    qf_graph_for_each_node(g, n) if (n->op == op) return n;
    return NULL;
}

static void run_case(const ccase *c)
{
    built b;
    REQUIRE(build(c, &b), "%s: build: %s", c->name, qf_error_message());
    qf_graph *g = b.g;
    prepare(c, g);
    observe(&b);
    qf_node *wn = find_op(g, QF_OP_QAT_BN_WEIGHT);
    REQUIRE(wn && wn->outputs[0]->nuses == 1, "%s: no qat_bn_weight", c->name);
    qf_node *fq = wn->outputs[0]->uses[0].node;
    REQUIRE(fq->op == QF_OP_FAKE_QUANT, "%s: the weight has no fake_quant", c->name);
    REQUIRE_OK(qf_node_set_attr_int(g, fq, "observe", c->observe));
    const int64_t nq = qf_tensor_numel(&fq->inputs[1]->type);
    CHECKF((nq > 1) == c->per_channel, "%s: weight fake_quant has %lld scales", c->name, (long long)nq);
    /* What the weight fake_quant sees in eval: qat_bn_weight's output. */
    qf_tensor seen;
    REQUIRE_OK(qf_tensor_init(&seen, QF_DTYPE_F32, wn->inputs[0]->type.ndim, wn->inputs[0]->type.dims));
    const qf_tensor *win[3] = {&wn->inputs[0]->type, &wn->inputs[1]->type, &wn->inputs[2]->type};
    qf_tensor *wout[1] = {&seen};
    REQUIRE_OK(qf_node_eval(wn, g->opset, win, wout));
    /* The qparams expected after the fold. */
    float scale[8], rmin[8], rmax[8];
    for (int64_t k = 0; k < nq; k++) {
        scale[k] = ((const float *)fq->inputs[1]->type.data)[k];
        rmin[k] = ((const float *)fq->inputs[3]->type.data)[k];
        rmax[k] = ((const float *)fq->inputs[4]->type.data)[k];
    }
    const int qaxis = nq > 1 ? (int)qf_node_attr_int(fq, "axis", 0) : -1;
    if (c->observe) {
        const qf_tensor *st = &seen;
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < st->ndim; d++) {
            if (qaxis >= 0 && d < qaxis) outer *= st->dims[d];
            if (qaxis < 0 || d > qaxis) inner *= st->dims[d];
        }
        for (int64_t k = 0; k < nq; k++) {
            float mn = INFINITY, mx = -INFINITY;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = 0; i < inner; i++) {
                    float v = ((const float *)st->data)[(o * nq + k) * inner + i];
                    mn = fminf(mn, v);
                    mx = fmaxf(mx, v);
                }
            rmin[k] = rmin[k] + 0.01f * (mn - rmin[k]);
            rmax[k] = rmax[k] + 0.01f * (mx - rmax[k]);
            int32_t z;
            qf_qparams_torch(rmin[k], rmax[k], 1, -127, 127, 1.1920928955078125e-07f, &scale[k], &z);
        }
    }
    qf_tensor want;
    REQUIRE_OK(infer(g, &b, &want));
    const qf_node *ofq = g->outputs[0]->producer;
    REQUIRE(ofq && ofq->op == QF_OP_FAKE_QUANT, "%s: the output is not fake-quantized", c->name);
    const float out_step = ((const float *)ofq->inputs[1]->type.data)[0];

    /* The folds, then the fake_quant's input and qparams. */
    qf_pass_report *r = NULL;
    const char *fold[] = {"qat_bn_remove", "fuse_batch_norm", "dce", NULL};
    REQUIRE_OK(qf_passes_run(g, fold, &(qf_pass_options){.verify = true}, &r));
    CHECKF(qf_pass_report_count(r, QF_PASS_FOLDED, QF_OP_BATCH_NORM) == 1, "%s: BN not folded", c->name);
    qf_pass_report_free(r);
    const qf_value *wf = fq->inputs[0];
    CHECKF(qf_value_is_const(wf) && memcmp(wf->type.data, seen.data, qf_tensor_nbytes(&seen)) == 0,
           "%s: folded weight differs from what the fake_quant saw in training", c->name);
    for (int64_t k = 0; k < nq; k++)
        CHECKF(((const float *)fq->inputs[1]->type.data)[k] == scale[k] &&
                   ((const float *)fq->inputs[3]->type.data)[k] == rmin[k] &&
                   ((const float *)fq->inputs[4]->type.data)[k] == rmax[k],
               "%s: channel %lld: scale %.9g (want %.9g), min %.9g (%.9g), max %.9g (%.9g)", c->name, (long long)k,
               ((const float *)fq->inputs[1]->type.data)[k], scale[k], ((const float *)fq->inputs[3]->type.data)[k],
               rmin[k], ((const float *)fq->inputs[4]->type.data)[k], rmax[k]);
    /* The folded bias, for its int32 check. */
    qf_node *op = find_op(g, c->op);
    REQUIRE(op && op->ninputs > 2 && op->inputs[2], "%s: the folded op has no bias", c->name);
    const int64_t O = qf_tensor_numel(&op->inputs[2]->type);
    float bfold[8];
    memcpy(bfold, op->inputs[2]->type.data, sizeof(float) * (size_t)O);
    float s_in = ((const float *)op->inputs[0]->producer->inputs[1]->type.data)[0];

    const char *conv[] = {"qat_convert", "dce", NULL};
    REQUIRE_OK(qf_passes_run(g, conv, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    int internal = 0;
    qf_graph_for_each_node(g, n)
    {
        internal += !qf_op_onnx_name(n->op) && n->op != QF_OP_LINEAR && n->op != QF_OP_MSE_LOSS;
    }
    CHECKF(internal == 0, "%s: %d internal nodes left", c->name, internal);
    CHECKF(g->opset >= 13, "%s: opset %lld", c->name, (long long)g->opset);
    const qf_node *wdq = op->inputs[1]->producer, *bdq = op->inputs[2]->producer;
    REQUIRE(wdq && wdq->op == QF_OP_DEQUANTIZE && wdq->inputs[0]->type.dtype == QF_DTYPE_I8,
            "%s: weight is not a DQ of int8", c->name);
    REQUIRE(bdq && bdq->op == QF_OP_DEQUANTIZE && bdq->inputs[0]->type.dtype == QF_DTYPE_I32,
            "%s: bias is not a DQ of int32", c->name);
    const int8_t *q = wdq->inputs[0]->type.data;
    const qf_tensor *st = &seen;
    int64_t inner = 1, bad = 0;
    for (int d = qaxis + 1; d < st->ndim; d++) inner *= st->dims[d];
    if (qaxis < 0) inner = qf_tensor_numel(st);
    for (int64_t i = 0; i < qf_tensor_numel(st); i++) {
        const int64_t k = qaxis < 0 ? 0 : (i / inner) % nq;
        const float v = ((const float *)st->data)[i];
        const float r0 = qf_round_half_even_f32(v / scale[k]);
        const int want_q = r0 < -127.0f ? -127 : r0 > 127.0f ? 127 : (int)r0;
        if (q[i] != want_q && bad++ < 5)
            FAIL("%s: weight %lld: int8 %d, want %d (W*s %.9g, scale %.9g)", c->name, (long long)i, q[i], want_q, v,
                 scale[k]);
    }
    const int32_t *qb = bdq->inputs[0]->type.data;
    for (int64_t o = 0; o < O; o++) {
        const float sw = scale[nq > 1 ? (c->op == QF_OP_CONV_TRANSPOSE ? o % nq : o) : 0];
        const double want_b = nearbyint((double)bfold[o] / (double)(s_in * sw));
        CHECKF(qb[o] == (int32_t)want_b, "%s: bias %lld: int32 %d, want %.0f", c->name, (long long)o, qb[o], want_b);
    }
    /* The QDQ graph against the QAT graph in eval. */
    qf_tensor got;
    REQUIRE_OK(infer(g, &b, &got));
    double worst = 0;
    for (int64_t i = 0; i < qf_tensor_numel(&got); i++)
        worst = fmax(worst, fabs((double)((float *)got.data)[i] - ((float *)want.data)[i]));
    const double steps = c->observe ? 4.0 : 1.0;
    CHECKF(worst <= steps * out_step + 1e-6, "%s: QDQ vs QAT output: max |diff| %.3g = %.2f output steps (allowed %g)",
           c->name, worst, worst / out_step, steps);
    printf("%-28s max |QDQ - QAT| = %.2f output steps\n", c->name, worst / out_step);
    qf_tensor_free(&got);
    qf_tensor_free(&want);
    qf_tensor_free(&seen);
    built_free(&b);
}

static void test_qat_finalize_cases(void)
{
    static const ccase cases[] = {
        {"conv bias per-channel obs", QF_OP_CONV, 1, true, true, true},
        {"conv per-tensor obs0", QF_OP_CONV, 1, false, false, false},
        {"conv group2 bias per-tensor", QF_OP_CONV, 2, true, false, true},
        {"convT bias per-channel obs", QF_OP_CONV_TRANSPOSE, 1, true, true, true},
        {"convT g2 bias per-channel obs0", QF_OP_CONV_TRANSPOSE, 2, true, true, false},
        {"convT per-tensor obs", QF_OP_CONV_TRANSPOSE, 1, true, false, true},
        {"linear bias per-tensor obs", QF_OP_LINEAR, 1, true, false, true},
        {"linear bias per-channel obs0", QF_OP_LINEAR, 1, true, true, false},
        {"linear bias per-channel obs", QF_OP_LINEAR, 1, true, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* Nothing observed: qat_finalize refuses, naming the fake_quant. */
static void test_never_observed(void)
{
    const ccase c = {"never observed", QF_OP_CONV, 1, true, true, true};
    built b;
    REQUIRE(build(&c, &b), "build");
    prepare(&c, b.g);
    REQUIRE_OK(qf_quant_register_passes());
    qf_pass_report *r = NULL;
    CHECK_ERR(qf_pipeline_run(b.g, "qat_finalize", &(qf_pass_options){.verify = true}, &r), QF_ERR_INVALID,
              "node 'x_fq' (fake_quant): nothing observed yet");
    CHECK_MSG("calibrate or train first");
    qf_pass_report_free(r);
    built_free(&b);
}

/* An activation range with no ONNX type: qat_convert and qat_export refuse
 * it naming the node, and qat_convert writes nothing. */
static void test_bad_range(void)
{
    const ccase c = {"bad range", QF_OP_CONV, 1, true, true, true};
    built b;
    REQUIRE(build(&c, &b), "build");
    qf_graph *g = b.g;
    prepare(&c, g);
    observe(&b);
    qf_node *xfq = g->inputs[0]->uses[0].node;
    REQUIRE(xfq->op == QF_OP_FAKE_QUANT, "x has no fake_quant");
    REQUIRE_OK(qf_node_set_attr_int(g, xfq, "quant_max", 300));
    qf_pass_report *r = NULL;
    const char *exp[] = {"qat_export", NULL};
    CHECK_ERR(qf_passes_run(g, exp, &(qf_pass_options){.verify = true}, &r), QF_ERR_UNSUPPORTED,
              "node 'x_fq' (fake_quant): range [-128, 300] fits neither int8 nor uint8");
    qf_pass_report_free(r);
    const char *fold[] = {"qat_bn_remove", "fuse_batch_norm", "dce", NULL};
    REQUIRE_OK(qf_passes_run(g, fold, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    int before = 0, after = 0;
    qf_graph_for_each_node(g, n) before++;
    const char *conv[] = {"qat_convert", NULL};
    CHECK_ERR(qf_passes_run(g, conv, &(qf_pass_options){.verify = true}, &r), QF_ERR_UNSUPPORTED,
              "node 'x_fq' (fake_quant): activation range [-128, 300] is neither int8");
    qf_pass_report_free(r);
    qf_graph_for_each_node(g, n) after += n->op == QF_OP_FAKE_QUANT ? 1 : 0;
    CHECKF(after == 3, "qat_convert wrote before refusing: %d fake_quants left of %d nodes", after, before);
    built_free(&b);
}

/* The weight's fake_quant read by another node: the fold skips with the
 * reason, as its other skips. */
static void test_fq_two_readers(void)
{
    const ccase c = {"two readers", QF_OP_CONV, 1, true, true, true};
    built b;
    REQUIRE(build(&c, &b), "build");
    qf_graph *g = b.g;
    prepare(&c, g);
    observe(&b);
    const char *rm[] = {"qat_bn_remove", NULL};
    qf_pass_report *r = NULL;
    REQUIRE_OK(qf_passes_run(g, rm, &(qf_pass_options){.verify = true}, &r));
    qf_pass_report_free(r);
    qf_node *op = find_op(g, QF_OP_CONV);
    REQUIRE_OK(qf_graph_add_output(g, op->inputs[1]));
    const char *fold[] = {"fuse_batch_norm", NULL};
    REQUIRE_OK(qf_passes_run(g, fold, &(qf_pass_options){.verify = true}, &r));
    const qf_pass_result *res = &r->results[0];
    CHECKF(res->rewrites == 0 && res->nskipped == 1 &&
               strstr(res->skipped[0].reason, "the weight's fake_quant 'w_fq' has 2 readers"),
           "fold: %d rewrites, skip '%s'", res->rewrites,
           res->nskipped ? res->skipped[0].reason : "");
    qf_pass_report_free(r);
    built_free(&b);
}

int main(void)
{
    if (qf_quant_register_passes() != QF_OK) return 1;
    RUN(test_qat_finalize_cases);
    RUN(test_never_observed);
    RUN(test_fq_two_readers);
    RUN(test_bad_range);
    return qf_check_report();
}
