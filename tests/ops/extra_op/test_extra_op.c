/* The made-up op square_plus, built into a test variant of the library
 * (tests/ops/extra_op.cmake): its schema row is found by name, carries its
 * domain and attribute, and a one-node graph runs through the plan (shape
 * inference, prepare, forward) and through qf_node_eval. */
#include <math.h>

#include "qfold/exec.h"
#include "qfold/schema.h"
#include "tools/qf_check.h"

static void test_schema(void)
{
    qf_op op = qf_op_from_name("square_plus");
    CHECK(op == QF_OP_SQUARE_PLUS);
    const qf_op_schema *s = qf_op_schema_get(op);
    CHECK(s && strcmp(s->onnx_domain, "qfold.test") == 0);
    CHECK(qf_op_schema_attr(op, "bias") && qf_op_schema_attr(op, "bias")->type == QF_ATTR_FLOAT);
}

static void test_run(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t dims[2] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, dims);
    qf_node *n = qf_graph_add_node(g, QF_OP_SQUARE_PLUS, "sq", 1, &x, 1);
    CHECK(x && n);
    if (!x || !n) return;
    CHECK_OK(qf_node_set_attr_float(g, n, "bias", 0.5f));
    CHECK_OK(qf_graph_add_output(g, n->outputs[0]));
    CHECK_OK(qf_graph_verify(g));

    float xd[6] = {-2, -1, 0, 1, 2, 3};
    qf_tensor xt;
    qf_tensor_view(&xt, QF_DTYPE_F32, 2, dims, xd);
    const qf_tensor *in[1] = {&xt};
    qf_plan *p = NULL;
    CHECK_OK(qf_plan_init(&p, g));
    if (p) {
        CHECK_OK(qf_plan_run(p, in, 1));
        const float *y = qf_plan_output(p, 0)->data;
        for (int i = 0; i < 6; i++) CHECK(fabsf(y[i] - (xd[i] * xd[i] + 0.5f)) == 0.0f);
        qf_plan_free(p);
    }

    float yd[6] = {0};
    qf_tensor yt;
    qf_tensor_view(&yt, QF_DTYPE_F32, 2, dims, yd);
    qf_tensor *out[1] = {&yt};
    CHECK_OK(qf_node_eval(n, g->opset, in, out));
    CHECK(yd[5] == 9.5f && yd[0] == 4.5f);
    qf_graph_free(g);
}

int main(void)
{
    RUN(test_schema);
    RUN(test_run);
    return qf_check_report();
}
