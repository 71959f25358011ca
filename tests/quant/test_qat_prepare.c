/* QAT's prepare: the QAT annotation (a conv / linear's BatchNorm belongs to
 * its pattern) and the fake_quant nodes made from it (src/quant/qat_insert.c), then
 * qat_bn_add, on x -> Conv -> BN -> Relu -> MaxPool -> Flatten -> linear -> BN1d:
 *   - fake_quants on x, both weights, the Relu output, the MaxPool and
 *     Flatten outputs (sharing the Relu output's buffers), the last BN's
 *     output; none
 *     between a conv / linear and its BN, none on a bias;
 *   - qat_bn_add then puts W*s under each weight fake_quant;
 *   - the tape trains through it: a training step gives finite, non-zero
 *     gradients to both weights and BN scales, the observers' buffers move
 *     from their initial values, and the graph verifies throughout. */
#include <math.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "tools/qf_check.h"
#include "tools/qf_test_graph.h"

static uint64_t rng = 0x0ddba11cafe1ull;

static int count_fq(const qf_graph *g)
{
    int n = 0;
    qf_graph_for_each_node(g, nd) n += nd->op == QF_OP_FAKE_QUANT;
    return n;
}

/* The fake_quant reading v, or NULL. */
static const qf_node *fq_of(const qf_graph *g, const char *value)
{
    const qf_value *v = qf_graph_find_value(g, value);
    for (int i = 0; v && i < v->nuses; i++)
        if (v->uses[i].node->op == QF_OP_FAKE_QUANT) return v->uses[i].node;
    return NULL;
}

static void test_qat_prepare(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = 13;
    int64_t xd[] = {8, 3, 8, 8}, wd[] = {6, 3, 3, 3}, b6[] = {6}, w2d[] = {5, 6 * 4 * 4};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, xd);
    qf_value *w = qf_test_const(g, &rng, "w", QF_VALUE_PARAMETER, 4, wd, -0.5f, 0.5f),
             *b = qf_test_const(g, &rng, "b", QF_VALUE_PARAMETER, 1, b6, -.1f, .1f);
    qf_value *cin[3] = {x, w, b};
    qf_node *conv = qf_graph_add_node(g, QF_OP_CONV, "conv", 3, cin, 1);
    REQUIRE(conv, "conv");
    int64_t pads[] = {1, 1, 1, 1};
    REQUIRE_OK(qf_node_set_attr_ints(g, conv, "pads", pads, 4));
    qf_node *bn1 = qf_test_bn(g, &rng, "bn1", conv->outputs[0], 6);
    qf_value *r_in[1] = {bn1->outputs[0]};
    qf_node *relu = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, r_in, 1);
    qf_value *p_in[1] = {relu->outputs[0]};
    qf_node *pool = qf_graph_add_node(g, QF_OP_MAX_POOL, "pool", 1, p_in, 1);
    int64_t k[] = {2, 2};
    REQUIRE_OK(qf_node_set_attr_ints(g, pool, "kernel_shape", k, 2));
    REQUIRE_OK(qf_node_set_attr_ints(g, pool, "strides", k, 2));
    qf_value *f_in[1] = {pool->outputs[0]};
    qf_node *flat = qf_graph_add_node(g, QF_OP_FLATTEN, "flat", 1, f_in, 1);
    qf_value *w2 = qf_test_const(g, &rng, "w2", QF_VALUE_PARAMETER, 2, w2d, -0.2f, 0.2f);
    qf_value *l_in[2] = {flat->outputs[0], w2};
    qf_node *fc = qf_graph_add_node(g, QF_OP_LINEAR, "fc", 2, l_in, 1);
    qf_node *bn2 = qf_test_bn(g, &rng, "bn2", fc->outputs[0], 5);
    qf_value *target = qf_graph_add_input(g, "target", QF_DTYPE_F32, 2, (int64_t[]){8, 5});
    qf_value *m_in[2] = {bn2->outputs[0], target};
    REQUIRE(relu && pool && flat && fc && bn2 && target, "graph: %s", qf_error_message());
    REQUIRE_OK(qf_graph_add_output(g, bn2->outputs[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));

    qf_quant_annotation *a = NULL;
    REQUIRE_OK(qf_quant_annotate_qat(g, qf_quant_profile_find("neutron"), &a));
    CHECKF(a->nskips == 0, "%d nodes left in float (a BN of the pattern must not be)", a->nskips);
    int made = 0;
    REQUIRE_OK(qf_quant_qat_insert(g, a, qf_quant_profile_find("neutron"), &made));
    qf_quant_annotation_free(a);
    REQUIRE_OK(qf_graph_verify(g));
    REQUIRE_OK(qf_graph_verify_shapes(g));
    /* x, w, relu out, pool out and flat out (shared), w2, bn2 out (the graph output). */
    CHECKF(made == 7 && count_fq(g) == 7, "%d fake_quants made, %d in the graph", made, count_fq(g));
    CHECK(fq_of(g, "x") && fq_of(g, "w") && fq_of(g, "w2") && fq_of(g, "relu_out") && fq_of(g, "pool_out"));
    CHECKF(!fq_of(g, "conv_out") && !fq_of(g, "bn1_out") && !fq_of(g, "fc_out") && !fq_of(g, "b"),
           "a fake_quant between a conv / linear and its BN, or on a bias");
    const qf_node *fr = fq_of(g, "relu_out"), *fp = fq_of(g, "pool_out");
    const qf_node *ff = fq_of(g, "flat_out");
    CHECKF(fr && fp && ff && fr->inputs[1] == fp->inputs[1] && fr->inputs[3] == fp->inputs[3] &&
               ff->inputs[1] == fr->inputs[1],
           "MaxPool's and Flatten's outputs do not share the Relu output's buffers");
    const qf_node *fw = fq_of(g, "w");
    CHECKF(fw && qf_tensor_numel(&fw->inputs[1]->type) == 6 && qf_node_attr_int(fw, "quant_min", 0) == -127 &&
               qf_node_attr_int(fw, "symmetric", 0) == 1,
           "conv weight fake_quant: not per channel symmetric [-127, 127]");
    CHECKF(g->outputs[0]->producer && g->outputs[0]->producer->op == QF_OP_FAKE_QUANT,
           "the graph output is not the fake-quantized BN output");

    /* The simulated BN fusion under the weight fake_quants. */
    qf_pass_report *r = NULL;
    const char *add[] = {"qat_bn_add", NULL};
    REQUIRE_OK(qf_passes_run(g, add, &(qf_pass_options){.verify = true}, &r));
    CHECKF(qf_pass_report_count(r, QF_PASS_REWROTE, QF_OP_BATCH_NORM) == 2, "qat_bn_add rewrote %d BNs",
           qf_pass_report_count(r, QF_PASS_REWROTE, QF_OP_BATCH_NORM));
    qf_pass_report_free(r);
    CHECK(fw->inputs[0]->producer && fw->inputs[0]->producer->op == QF_OP_QAT_BN_WEIGHT);

    /* One training step through it all. */
    qf_node *loss = qf_graph_add_node(g, QF_OP_MSE_LOSS, "loss", 2, m_in, 1);
    REQUIRE(loss, "loss");
    REQUIRE_OK(qf_node_set_input(g, loss, 0, g->outputs[0]));
    REQUIRE_OK(qf_graph_add_output(g, loss->outputs[0]));
    const qf_value *ps[] = {w, w2, qf_graph_find_value(g, "bn1_gamma"), qf_graph_find_value(g, "bn2_gamma")};
    qf_grad_plan *gp = NULL;
    REQUIRE_OK(qf_grad_plan_init(&gp, g, &(qf_grad_options){.loss = loss->outputs[0], .nparams = 4, .params = ps}));
    qf_tensor xt, tt;
    REQUIRE_OK(qf_tensor_init(&xt, QF_DTYPE_F32, 4, xd));
    REQUIRE_OK(qf_tensor_init(&tt, QF_DTYPE_F32, 2, (int64_t[]){8, 5}));
    for (int64_t i = 0; i < qf_tensor_numel(&xt); i++) ((float *)xt.data)[i] = qf_test_rnd(&rng);
    for (int64_t i = 0; i < qf_tensor_numel(&tt); i++) ((float *)tt.data)[i] = qf_test_rnd(&rng);
    const qf_tensor *in[] = {&xt, &tt};
    REQUIRE_OK(qf_grad_plan_forward(gp, in, 2, true));
    REQUIRE_OK(qf_grad_plan_backward(gp));
    CHECKF(isfinite(qf_grad_plan_loss(gp)), "loss %g", qf_grad_plan_loss(gp));
    for (int i = 0; i < 4; i++) {
        const qf_tensor *gr = qf_grad_plan_grad(gp, i);
        double s = 0;
        bool finite = true;
        for (int64_t e = 0; e < qf_tensor_numel(gr); e++) {
            s += fabs(((const float *)gr->data)[e]);
            finite = finite && isfinite(((const float *)gr->data)[e]);
        }
        CHECKF(finite && s > 0, "gradient %d ('%s'): sum |g| = %g", i, ps[i]->name, s);
    }
    const float *sc = fr->inputs[1]->type.data, *mn = fr->inputs[3]->type.data;
    CHECKF(sc[0] != 1.0f && isfinite(mn[0]), "the Relu output's observer did not move: scale %g, min %g", sc[0],
           mn[0]);
    qf_grad_plan_free(gp);
    qf_tensor_free(&xt);
    qf_tensor_free(&tt);
    qf_graph_free(g);
}

/* A MatMul of two activations under neutron: both inputs' fake_quants
 * symmetric [-127, 127] (the group's format, as PTQ observes them: the
 * Neutron BMM converter wants zero points 0); its output's affine
 * [-128, 127]. */
static void test_qat_matmul_symmetric(void)
{
    qf_graph *g = NULL;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = 13;
    int64_t ad[] = {2, 4, 6}, bd[] = {2, 6, 5};
    qf_value *in[2] = {qf_graph_add_input(g, "a", QF_DTYPE_F32, 3, ad),
                       qf_graph_add_input(g, "b", QF_DTYPE_F32, 3, bd)};
    qf_node *mm = qf_graph_add_node(g, QF_OP_MATMUL, "mm", 2, in, 1);
    REQUIRE(mm, "matmul");
    REQUIRE_OK(qf_graph_add_output(g, mm->outputs[0]));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    qf_quant_annotation *a = NULL;
    REQUIRE_OK(qf_quant_annotate_qat(g, qf_quant_profile_find("neutron"), &a));
    int made = 0;
    REQUIRE_OK(qf_quant_qat_insert(g, a, qf_quant_profile_find("neutron"), &made));
    qf_quant_annotation_free(a);
    REQUIRE_OK(qf_graph_verify(g));
    CHECKF(made == 3, "%d fake_quants", made);
    for (int i = 0; i < 2; i++) {
        const qf_node *f = fq_of(g, i ? "b" : "a");
        CHECKF(f && qf_node_attr_int(f, "symmetric", 0) == 1 && qf_node_attr_int(f, "quant_min", 0) == -127 &&
                   qf_node_attr_int(f, "quant_max", 0) == 127,
               "MatMul input %d: fake_quant not symmetric [-127, 127]", i);
    }
    const qf_node *fo = g->outputs[0]->producer;
    CHECKF(fo && fo->op == QF_OP_FAKE_QUANT && qf_node_attr_int(fo, "symmetric", 1) == 0 &&
               qf_node_attr_int(fo, "quant_min", 0) == -128,
           "MatMul output: fake_quant not affine [-128, 127]");
    qf_graph_free(g);
}

int main(void)
{
    RUN(test_qat_prepare);
    RUN(test_qat_matmul_symmetric);
    return qf_check_report();
}
