/* The rules of src/target/neutron_conv.c and neutron_pool.c called directly
 * on hand-made node views, for what `qfold check` on an ONNX file does not
 * reach (tests/target/rules_a_test.py covers the rest end to end):
 *   - MaxPool's Indices output in use (the engine refuses the node first,
 *     for its int64 output outside a QuantizeLinear);
 *   - a Softmax before opset 13 (the importer and quantizer rewrite it),
 *     checked on its flattened form [prod(d < axis), prod(d >= axis)];
 *   - ReduceMean's partition rule with the opset-18 axes input and
 *     noop_with_empty_axes. */
#include <string.h>

#include "target/neutron.h" /* private: the rows */
#include "tools/qf_check.h"

static const float one_scale = 0.1f;
static const int32_t zero_zp = 0;

/* A view of node n with every operand int8 per-tensor, scale 0.1, zero
 * point 0 (in / out: room for the node's operands). */
static qf_nview view_of(const qf_graph *g, const qf_node *n, qf_nq *in, qf_nq *out)
{
    for (int k = 0; k < n->ninputs; k++)
        in[k] = (qf_nq){.v = n->inputs[k],
                        .quantized = k == 0,
                        .qtype = k == 0 ? QF_DTYPE_I8
                                        : (n->inputs[k] ? n->inputs[k]->type.dtype : QF_DTYPE_F32),
                        .is_static = k > 0,
                        .axis = -1,
                        .nscale = 1,
                        .scale = k == 0 ? &one_scale : NULL,
                        .zero_point = k == 0 ? &zero_zp : NULL};
    for (int k = 0; k < n->noutputs; k++)
        out[k] = (qf_nq){.v = n->outputs[k],
                         .quantized = k == 0,
                         .qtype = k == 0 ? QF_DTYPE_I8 : QF_DTYPE_I64,
                         .axis = -1,
                         .nscale = 1,
                         .scale = &one_scale,
                         .zero_point = &zero_zp};
    return (qf_nview){
        .g = g, .node = n, .nin = n->ninputs, .nout = n->noutputs, .in = in, .out = out};
}

static qf_target_spec spec(qf_neutron_flow flow)
{
    qf_target_spec t;
    qf_target_spec_init(&t, "neutron");
    t.flow = flow;
    return t;
}

static void test_max_pool_indices(void)
{
    const qf_neutron_row *row = qf_neutron_row_find(QF_OP_MAX_POOL);
    REQUIRE(row && row->sdk3 && row->sdk2, "MaxPool row");
    for (int used = 0; used < 2; used++) {
        qf_graph *g = NULL;
        REQUIRE_OK(qf_graph_init(&g));
        int64_t d[4] = {1, 16, 4, 4};
        qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
        qf_node *n = qf_graph_add_node(g, QF_OP_MAX_POOL, "mp", 1, &x, 2);
        REQUIRE(n, "node added");
        int64_t k[2] = {2, 2};
        REQUIRE_OK(qf_node_set_attr_ints(g, n, "kernel_shape", k, 2));
        REQUIRE_OK(qf_node_set_attr_ints(g, n, "strides", k, 2));
        REQUIRE_OK(qf_graph_add_output(g, n->outputs[0]));
        if (used) REQUIRE_OK(qf_graph_add_output(g, n->outputs[1]));
        qf_nq in[1], out[2];
        qf_nview v = view_of(g, n, in, out);
        for (int f = 0; f < 2; f++) {
            qf_target_spec t = spec(f ? QF_NEUTRON_SDK2 : QF_NEUTRON_SDK3);
            qf_nwhy why = {{0}, {0}};
            bool ok = (f ? row->sdk2 : row->sdk3)(&v, &t, &why);
            CHECKF(ok == !used, "flow %d, indices used %d: %s", f, used, why.rule);
            if (used) CHECKF(strstr(why.rule, "Indices") != NULL, "rule: %s", why.rule);
        }
        qf_graph_free(g);
    }
}

/* Softmax(axis = 1) at opset 11 over [1, 8, w]: the softmax runs over 8*w
 * values in one row; just inside (8*255 = 2040) and outside (8*256). */
static void test_softmax_opset11(void)
{
    const qf_neutron_row *row = qf_neutron_row_find(QF_OP_SOFTMAX);
    REQUIRE(row && row->sdk3, "Softmax row");
    for (int out_of = 0; out_of < 2; out_of++) {
        qf_graph *g = NULL;
        REQUIRE_OK(qf_graph_init(&g));
        g->opset = 11;
        int64_t d[3] = {1, 8, out_of ? 256 : 255};
        qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 3, d);
        qf_node *n = qf_graph_add_node(g, QF_OP_SOFTMAX, "sm", 1, &x, 1);
        REQUIRE(n, "node added");
        REQUIRE_OK(qf_node_set_attr_int(g, n, "axis", 1));
        n->outputs[0]->type = x->type;
        REQUIRE_OK(qf_graph_add_output(g, n->outputs[0]));
        qf_nq in[1], out[1];
        qf_nview v = view_of(g, n, in, out);
        qf_target_spec t = spec(QF_NEUTRON_SDK3);
        qf_nwhy why = {{0}, {0}};
        bool ok = row->sdk3(&v, &t, &why);
        CHECKF(ok == !out_of, "width %lld: %s", (long long)d[2], why.rule);
        if (out_of) CHECKF(strstr(why.rule, "2048 > 2040") != NULL, "rule: %s", why.rule);
        qf_graph_free(g);
    }
}

/* ReduceMean alone in its partition, opset 18: axes from the input; none
 * given with noop_with_empty_axes = 1 reduces nothing (a no-op). */
static void test_mean_partition(void)
{
    const qf_neutron_row *row = qf_neutron_row_find(QF_OP_REDUCE_MEAN);
    REQUIRE(row && row->partition, "ReduceMean row");
    for (int c = 0; c < 3; c++) {
        qf_graph *g = NULL;
        REQUIRE_OK(qf_graph_init(&g));
        g->opset = 18;
        int64_t d[4] = {1, 8, 1, c == 1 ? 3 : 1};
        qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, d);
        qf_value *ins[2] = {x, NULL};
        if (c < 2) {
            qf_tensor a;
            int64_t n2 = 2;
            REQUIRE_OK(qf_tensor_init(&a, QF_DTYPE_I64, 1, &n2));
            ((int64_t *)a.data)[0] = 2;
            ((int64_t *)a.data)[1] = -1;
            ins[1] = qf_graph_add_constant(g, "axes", QF_VALUE_CONSTANT, &a);
        }
        qf_node *n = qf_graph_add_node(g, QF_OP_REDUCE_MEAN, "m", 2, ins, 1);
        REQUIRE(n, "node added");
        if (c == 2) REQUIRE_OK(qf_node_set_attr_int(g, n, "noop_with_empty_axes", 1));
        qf_nq in[2], out[1];
        qf_nview v = view_of(g, n, in, out);
        const qf_node *alone[1] = {n};
        qf_npart p = {.ncompute = 1, .compute = alone};
        qf_target_spec t = spec(QF_NEUTRON_SDK3);
        qf_nwhy why = {{0}, {0}};
        bool keep = row->partition(&v, &p, &t, &why);
        /* c 0: axes 2, 3 of size 1: a no-op; c 1: W = 3 is reduced; c 2: nothing reduced. */
        CHECKF(keep == (c == 1), "case %d: %s", c, why.rule);
        if (!keep) CHECKF(strstr(why.rule, "no-op") != NULL, "rule: %s", why.rule);
        t.flow = QF_NEUTRON_SDK2; /* v1.3.0's mean has no partition rule */
        CHECK(row->partition(&v, &p, &t, &why));
        qf_graph_free(g);
    }
}

int main(void)
{
    RUN(test_max_pool_indices);
    RUN(test_softmax_opset11);
    RUN(test_mean_partition);
    return qf_check_report();
}
