/* Unit tests of the fuse_hard_swish pass (src/passes/fuse_hard_swish.c) on
 * graphs built with the IR API: torch's opset-13 x * HardSigmoid(x) becomes
 * one HardSwish computing the same floats (either operand order,
 * the graph output keeping its name), and every guard leaves the pair as it
 * is with a skip naming the reason: other alpha / beta, a second reader of
 * the HardSigmoid, a HardSigmoid that is a graph output, a Mul of another
 * tensor (a squeeze-excite block). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "tools/qf_check.h"

enum { HS_PLAIN, HS_SWAPPED, HS_ALPHA, HS_BETA, HS_TWO_READERS, HS_OUTPUT, HS_OTHER_TENSOR };

static const int64_t hs_dims[2] = {3, 97};

/* x [3, 97] -> HardSigmoid -> h; y = Mul(x, h) (or the variant's change). */
static qf_graph *hs_graph(int variant)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, hs_dims);
    qf_value *z = qf_graph_add_input(g, "z", QF_DTYPE_F32, 2, hs_dims);
    REQUIRE(x && z, "inputs: %s", qf_error_message());
    qf_node *h = qf_graph_add_node(g, QF_OP_HARD_SIGMOID, "hsig", 1, &x, 1);
    REQUIRE(h != NULL, "HardSigmoid: %s", qf_error_message());
    /* torch writes alpha as the float nearest 1/6 */
    REQUIRE_OK(qf_node_set_attr_float(g, h, "alpha", variant == HS_ALPHA ? 0.2f : 1.0f / 6.0f));
    REQUIRE_OK(qf_node_set_attr_float(g, h, "beta", variant == HS_BETA ? 0.4f : 0.5f));
    qf_value *hv = h->outputs[0];
    qf_value *ins[2] = {variant == HS_OTHER_TENSOR ? z : x, hv};
    if (variant == HS_SWAPPED) {
        ins[0] = hv;
        ins[1] = x;
    }
    qf_node *m = qf_graph_add_node(g, QF_OP_MUL, "mul", 2, ins, 1);
    REQUIRE(m != NULL, "Mul: %s", qf_error_message());
    REQUIRE_OK(qf_graph_rename_value(g, m->outputs[0], "y"));
    REQUIRE_OK(qf_graph_add_output(g, m->outputs[0]));
    if (variant == HS_TWO_READERS) {
        qf_value *in2[2] = {hv, z};
        qf_node *a = qf_graph_add_node(g, QF_OP_ADD, "add", 2, in2, 1);
        REQUIRE(a != NULL, "Add: %s", qf_error_message());
        REQUIRE_OK(qf_graph_add_output(g, a->outputs[0]));
    }
    if (variant == HS_OUTPUT) REQUIRE_OK(qf_graph_add_output(g, hv));
    REQUIRE_OK(qf_graph_infer_shapes(g));
    return g;
}

static int count_op(const qf_graph *g, qf_op op)
{
    int k = 0;
    qf_graph_for_each_node(g, n) k += n->op == op;
    return k;
}

/* Input element i of n: [-4.5, 4.5] in steps, HardSigmoid's corners -3, 3 first. */
static float hs_x(int64_t i, int64_t n)
{
    return i == 0 ? -3.0f : i == 1 ? 3.0f : -4.5f + 9.0f * (float)i / (float)(n - 1);
}

/* Output 0 of g on x (hs_x) and z. */
static void hs_run(qf_graph *g, qf_tensor *y)
{
    qf_tensor x, z;
    REQUIRE_OK(qf_tensor_init(&x, QF_DTYPE_F32, 2, hs_dims));
    REQUIRE_OK(qf_tensor_init(&z, QF_DTYPE_F32, 2, hs_dims));
    float *xd = x.data, *zd = z.data;
    for (int64_t i = 0; i < qf_tensor_numel(&x); i++) {
        xd[i] = hs_x(i, qf_tensor_numel(&x));
        zd[i] = 0.25f;
    }
    qf_plan *p;
    REQUIRE_OK(qf_plan_init(&p, g));
    const qf_tensor *in[2] = {&x, &z};
    REQUIRE_OK(qf_plan_run(p, in, 2));
    const qf_tensor *o = qf_plan_output(p, 0);
    REQUIRE_OK(qf_tensor_init(y, QF_DTYPE_F32, o->ndim, o->dims));
    memcpy(y->data, o->data, sizeof(float) * (size_t)qf_tensor_numel(o));
    qf_plan_free(p);
    qf_tensor_free(&x);
    qf_tensor_free(&z);
}

static const qf_pass_result *hs_result(const qf_pass_report *r)
{
    for (int i = 0; i < r->nresults; i++)
        if (strcmp(r->results[i].pass, "fuse_hard_swish") == 0) return &r->results[i];
    return NULL;
}

static void hs_case(int variant, bool fused, const char *skip)
{
    qf_graph *g = hs_graph(variant), *ref = hs_graph(variant);
    static const char *const names[] = {"fuse_hard_swish", NULL};
    qf_pass_report *r = NULL;
    REQUIRE_OK(qf_passes_run(g, names, &(qf_pass_options){.verify = true}, &r));
    const qf_pass_result *pr = hs_result(r);
    REQUIRE(pr != NULL, "variant %d: no fuse_hard_swish result in the report", variant);
    CHECKF(count_op(g, QF_OP_HARD_SWISH) == (fused ? 1 : 0), "variant %d: %d HardSwish", variant,
           count_op(g, QF_OP_HARD_SWISH));
    CHECKF(count_op(g, QF_OP_HARD_SIGMOID) == (fused ? 0 : 1), "variant %d: %d HardSigmoid",
           variant, count_op(g, QF_OP_HARD_SIGMOID));
    CHECKF(count_op(g, QF_OP_MUL) == (fused ? 0 : 1), "variant %d: %d Mul", variant,
           count_op(g, QF_OP_MUL));
    CHECKF(pr->rewrites == (fused ? 1 : 0), "variant %d: %d rewrites", variant, pr->rewrites);
    if (skip) {
        bool found = false;
        for (int i = 0; i < pr->nskipped; i++) found |= strstr(pr->skipped[i].reason, skip) != NULL;
        CHECKF(found, "variant %d: no skip mentions '%s' (%d skips)", variant, skip, pr->nskipped);
    }
    CHECKF(strcmp(g->outputs[0]->name, "y") == 0, "variant %d: output 0 is '%s'", variant,
           g->outputs[0]->name);
    if (fused) {
        const qf_node *s = g->outputs[0]->producer;
        CHECKF(s && s->op == QF_OP_HARD_SWISH && strcmp(s->name, "mul") == 0,
               "variant %d: output made by '%s'", variant, s ? s->name : "(none)");
    }
    /* the same floats */
    const char *engine = getenv("QFOLD_ENGINE");
    const bool exact = engine && strcmp(engine, "ref") == 0;
    qf_tensor a, b;
    hs_run(ref, &a);
    hs_run(g, &b);
    int64_t bad = 0;
    for (int64_t i = 0; i < qf_tensor_numel(&a); i++) {
        float u = ((float *)a.data)[i], v = ((float *)b.data)[i];
        /* 2 ulp of the input's magnitude: near x = -3 the product cancels */
        const float x = fabsf(hs_x(i, qf_tensor_numel(&a)));
        bool same =
            exact ? memcmp(&u, &v, sizeof u) == 0 : fabsf(u - v) <= 2.4e-7f * (x > 1.0f ? x : 1.0f);
        if (!same && bad++ < 5)
            FAIL("variant %d: element %lld: %.9g before, %.9g after%s", variant, (long long)i, u, v,
                 exact ? " (reference kernels: bit for bit)" : "");
    }
    qf_tensor_free(&a);
    qf_tensor_free(&b);
    qf_pass_report_free(r);
    qf_graph_free(g);
    qf_graph_free(ref);
}

static void test_fused(void)
{
    hs_case(HS_PLAIN, true, NULL);
    hs_case(HS_SWAPPED, true, NULL);
}

static void test_guards(void)
{
    hs_case(HS_ALPHA, false, "not HardSwish's");
    hs_case(HS_BETA, false, "not HardSwish's");
    hs_case(HS_TWO_READERS, false, "read more than once");
    hs_case(HS_OUTPUT, false, "a graph output");
    hs_case(HS_OTHER_TENSOR, false, "another tensor");
}

int main(void)
{
    RUN(test_fused);
    RUN(test_guards);
    return qf_check_report();
}
