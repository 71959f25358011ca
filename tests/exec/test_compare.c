/* qf_compare_graphs: the reference-vs-candidate comparison behind
 * `qfold fuse --verify` (and quantize / qat / eval next). Small graphs built
 * with the IR API, given or generated inputs, one and several batches. */
#include <math.h>
#include <string.h>

#include "../tools/qf_check.h"
#include "qfold/exec.h"
#include "qfold/graph.h"

/* x [2, 3] -> relu -> "r"; x -> Add(x, c) -> "s", c zero except c[bump_at] = bump. */
static qf_graph *two_outputs(int bump_at, float bump)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    int64_t d[2] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_tensor c;
    if (!x || qf_tensor_init(&c, QF_DTYPE_F32, 2, d) != QF_OK) goto fail;
    memset(c.data, 0, qf_tensor_nbytes(&c));
    if (bump_at >= 0) ((float *)c.data)[bump_at] = bump;
    qf_value *cv = qf_graph_add_constant(g, "c", QF_VALUE_PARAMETER, &c);
    if (!cv) goto fail;
    qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "r", 1, &x, 1);
    qf_value *ain[2] = {x, cv};
    qf_node *s = qf_graph_add_node(g, QF_OP_ADD, "s", 2, ain, 1);
    if (!r || !s || qf_graph_add_output(g, r->outputs[0]) != QF_OK || qf_graph_add_output(g, s->outputs[0]) != QF_OK)
        goto fail;
    return g;
fail:
    qf_graph_free(g);
    return NULL;
}

/* x [2, 3] -> op (relu, identity or transpose) -> one output. */
static qf_graph *one_op(qf_op op)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    int64_t d[2] = {2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_node *n = x ? qf_graph_add_node(g, op, "n", 1, &x, 1) : NULL;
    if (!n || qf_graph_add_output(g, n->outputs[0]) != QF_OK) {
        qf_graph_free(g);
        return NULL;
    }
    return g;
}

static void fill(qf_tensor *t, const float *v)
{
    int64_t d[2] = {2, 3};
    qf_tensor_init(t, QF_DTYPE_F32, 2, d);
    memcpy(t->data, v, 6 * sizeof *v);
}

static void test_equal_generated(void)
{
    qf_graph *a = two_outputs(-1, 0), *b = two_outputs(-1, 0);
    CHECK(a && b);
    if (!a || !b) return;
    qf_compare_result r;
    CHECK_OK(qf_compare_graphs(a, b, NULL, 0, &(qf_compare_options){.batches = 3}, &r));
    CHECK(r.ok && r.noutputs == 2 && r.batches == 3);
    for (int i = 0; i < r.noutputs; i++) {
        CHECK(r.outputs[i].ok && r.outputs[i].max_abs == 0 && r.outputs[i].worst_index == -1);
        CHECK(r.outputs[i].max_ref > 0 && r.outputs[i].max_ref <= 1);
    }
    CHECK(strcmp(r.outputs[0].name, "r_out") == 0 && strcmp(r.outputs[1].name, "s_out") == 0);
    qf_compare_result_free(&r);
    qf_graph_free(a);
    qf_graph_free(b);
}

/* The generated inputs are the documented ones: uniform [-1, 1), batch 0 of
 * the default seed the same every time, other batches different. */
static void test_make_inputs(void)
{
    qf_graph *g = one_op(QF_OP_RELU);
    CHECK(g != NULL);
    if (!g) return;
    qf_tensor t0, t0b, t1;
    CHECK_OK(qf_compare_make_inputs(g, 0, 0, &t0));
    CHECK_OK(qf_compare_make_inputs(g, 0, 0, &t0b));
    CHECK_OK(qf_compare_make_inputs(g, 0, 1, &t1));
    CHECK(t0.dtype == QF_DTYPE_F32 && t0.ndim == 2 && t0.dims[0] == 2 && t0.dims[1] == 3);
    CHECK(memcmp(t0.data, t0b.data, qf_tensor_nbytes(&t0)) == 0);
    CHECK(memcmp(t0.data, t1.data, qf_tensor_nbytes(&t0)) != 0);
    for (int i = 0; i < 6; i++) CHECK(((float *)t0.data)[i] >= -1 && ((float *)t0.data)[i] < 1);
    qf_tensor_free(&t0);
    qf_tensor_free(&t0b);
    qf_tensor_free(&t1);
    qf_graph_free(g);
}

/* Negative case: the second output differs at element 4 by 0.5. */
static void test_one_output_differs(void)
{
    qf_graph *a = two_outputs(-1, 0), *b = two_outputs(4, 0.5f);
    CHECK(a && b);
    if (!a || !b) return;
    const float xv[6] = {1, -2, 3, -4, 2, 0.5f};
    qf_tensor x;
    fill(&x, xv);
    const qf_tensor *in[1] = {&x};
    qf_compare_result r;
    CHECK_OK(qf_compare_graphs(a, b, in, 1, &(qf_compare_options){.tolerance = 1e-3}, &r));
    CHECK(!r.ok && r.noutputs == 2 && r.worst == 1 && r.batches == 1);
    CHECK(r.outputs[0].ok && r.outputs[0].max_abs == 0);
    const qf_compare_output *d = &r.outputs[1];
    CHECK(!d->ok && d->max_abs == 0.5 && d->max_ref == 4 && fabs(d->max_rel - 0.125) < 1e-12);
    CHECK(d->worst_batch == 0 && d->worst_index == 4 && d->worst_ref == 2 && d->worst_cand == 2.5);
    qf_compare_result_free(&r);
    /* Within a loose tolerance the same difference passes. */
    qf_graph_free(a);
    qf_graph_free(b);
    a = two_outputs(-1, 0);
    b = two_outputs(4, 0.5f);
    CHECK_OK(qf_compare_graphs(a, b, in, 1, &(qf_compare_options){.tolerance = 0.2}, &r));
    CHECK(r.ok && r.outputs[1].ok);
    qf_compare_result_free(&r);
    qf_tensor_free(&x);
    qf_graph_free(a);
    qf_graph_free(b);
}

/* Two given batches; relu vs identity differ only where x < 0, which only
 * batch 1 has (at element 3). */
static void test_batches(void)
{
    qf_graph *a = one_op(QF_OP_IDENTITY), *b = one_op(QF_OP_RELU);
    CHECK(a && b);
    if (!a || !b) return;
    const float x0[6] = {1, 2, 3, 4, 5, 6}, x1[6] = {1, 2, 3, -0.25f, 5, 8};
    qf_tensor t0, t1;
    fill(&t0, x0);
    fill(&t1, x1);
    const qf_tensor *in[2] = {&t0, &t1};
    qf_compare_result r;
    CHECK_OK(qf_compare_graphs(a, b, in, 1, &(qf_compare_options){.batches = 2}, &r));
    CHECK(!r.ok && r.batches == 2 && r.noutputs == 1 && r.worst == 0);
    const qf_compare_output *d = &r.outputs[0];
    CHECK(d->max_abs == 0.25 && d->max_ref == 8 && d->worst_batch == 1 && d->worst_index == 3);
    CHECK(d->worst_ref == -0.25 && d->worst_cand == 0);
    qf_compare_result_free(&r);
    qf_tensor_free(&t0);
    qf_tensor_free(&t1);
    qf_graph_free(a);
    qf_graph_free(b);
}

/* A NaN on one side only is an infinite difference; on both sides, equal. */
static void test_nan(void)
{
    qf_graph *a = one_op(QF_OP_IDENTITY), *b = one_op(QF_OP_RELU);
    const float xv[6] = {NAN, 1, 2, 3, 4, 5};
    qf_tensor x;
    fill(&x, xv);
    const qf_tensor *in[1] = {&x};
    qf_compare_result r;
    CHECK_OK(qf_compare_graphs(a, b, in, 1, NULL, &r));
    /* relu(NaN) is NaN here too: equal. */
    CHECK(r.noutputs == 1 && r.outputs[0].max_abs == 0 && r.ok);
    qf_compare_result_free(&r);
    qf_graph_free(a);
    qf_graph_free(b);
    a = two_outputs(-1, 0);
    b = two_outputs(2, NAN);
    const float xv2[6] = {1, 1, 1, 1, 1, 1};
    qf_tensor_free(&x);
    fill(&x, xv2);
    CHECK_OK(qf_compare_graphs(a, b, in, 1, NULL, &r));
    CHECK(!r.ok && r.worst == 1 && isinf(r.outputs[1].max_abs) && r.outputs[1].worst_index == 2);
    qf_compare_result_free(&r);
    qf_tensor_free(&x);
    qf_graph_free(a);
    qf_graph_free(b);
}

static void test_mismatches(void)
{
    /* Output shapes differ: [2, 3] vs [3, 2]. */
    qf_graph *a = one_op(QF_OP_RELU), *b = one_op(QF_OP_TRANSPOSE);
    qf_compare_result r;
    qf_compare_options o = {.ref_name = "original", .cand_name = "fused", .change = "fusing"};
    CHECK_STATUS(qf_compare_graphs(a, b, NULL, 0, &o, &r), QF_ERR_MISMATCH);
    CHECK_MSG("output 'n_out': shape [2, 3] before, [3, 2] after fusing");
    CHECK(r.noutputs == 1 && !r.ok && !r.outputs[0].ok);
    qf_compare_result_free(&r);
    qf_graph_free(a);
    qf_graph_free(b);
    /* Output counts differ. */
    a = two_outputs(-1, 0);
    b = one_op(QF_OP_RELU);
    CHECK_STATUS(qf_compare_graphs(a, b, NULL, 0, &o, &r), QF_ERR_MISMATCH);
    CHECK_MSG("fused model has 1 outputs, original 2");
    CHECK(r.noutputs == 0 && r.worst == -1);
    qf_compare_result_free(&r);
    /* Given inputs of the wrong dtype. */
    qf_tensor x;
    int64_t d[2] = {2, 3};
    qf_tensor_init(&x, QF_DTYPE_F64, 2, d);
    memset(x.data, 0, qf_tensor_nbytes(&x));
    const qf_tensor *in[1] = {&x};
    CHECK_STATUS(qf_compare_graphs(b, b, in, 1, NULL, &r), QF_ERR_INVALID);
    CHECK_MSG("running the reference model: input 'x' wants float32 of rank 2, got float64 of rank 2");
    qf_compare_result_free(&r);
    qf_tensor_free(&x);
    qf_graph_free(a);
    qf_graph_free(b);
}

int main(void)
{
    RUN(test_equal_generated);
    RUN(test_make_inputs);
    RUN(test_one_output_differs);
    RUN(test_batches);
    RUN(test_nan);
    RUN(test_mismatches);
    return qf_check_report();
}
