/* qf_batch_widen (src/exec/batch_widen.c): which graphs exported with a
 * fixed batch size may run more samples at once, on small graphs built with
 * the IR API: row-wise ops pass, ops that reach across axis 0 are refused
 * with the node named, a Reshape that pins the batch is refused by the
 * shapes (though they infer at the larger batch), a Reshape to [1, -1] is
 * rewritten while widened and put back after; the batcher runs such a graph
 * at the larger batch with the outputs of one sample at a time. */
#include <string.h>

#include "../tools/qf_check.h"
#include "qfold/exec.h"
#include "qfold/graph.h"

/* A constant int64 vector. */
static qf_value *ints(qf_graph *g, const char *name, int n, const int64_t *v)
{
    qf_tensor t;
    int64_t d[1] = {n};
    if (qf_tensor_init(&t, QF_DTYPE_I64, 1, d) != QF_OK) return NULL;
    memcpy(t.data, v, sizeof *v * (size_t)n);
    return qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
}

/* x [1, 2, 3] -> node(s) per `kind` -> Relu -> output. */
static qf_graph *make(const char *kind)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    int64_t d[3] = {1, 2, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 3, d), *y = NULL;
    qf_node *n = NULL;
    if (!strcmp(kind, "softmax1") || !strcmp(kind, "softmax0")) {
        n = qf_graph_add_node(g, QF_OP_SOFTMAX, "sm", 1, &x, 1);
        if (n) qf_node_set_attr_int(g, n, "axis", kind[7] == '1' ? -1 : 0);
    } else if (!strcmp(kind, "concat0") || !strcmp(kind, "concat2")) {
        qf_value *in[2] = {x, x};
        n = qf_graph_add_node(g, QF_OP_CONCAT, "cat", 2, in, 1);
        if (n) qf_node_set_attr_int(g, n, "axis", kind[6] == '0' ? 0 : 2);
    } else if (!strcmp(kind, "transpose")) {
        n = qf_graph_add_node(g, QF_OP_TRANSPOSE, "tr", 1, &x, 1);
        int64_t perm[3] = {1, 0, 2};
        if (n) qf_node_set_attr_ints(g, n, "perm", perm, 3);
    } else if (!strcmp(kind, "shape")) {
        n = qf_graph_add_node(g, QF_OP_SHAPE, "shape", 1, &x, 1);
        if (n && qf_graph_add_output(g, n->outputs[0]) == QF_OK) return g;
    } else if (!strcmp(kind, "view1")) {
        /* x.view(x.size(0), -1) of a batch-1 export: [1, -1] */
        qf_value *in[2] = {x, ints(g, "s", 2, (int64_t[]){1, -1})};
        n = in[1] ? qf_graph_add_node(g, QF_OP_RESHAPE, "view", 2, in, 1) : NULL;
    } else if (!strcmp(kind, "pinned")) {
        /* x.view(2, -1) -> Softmax over the last axis -> .view(-1, 2, 3):
         * infers at any batch, mixes the samples at more than one */
        qf_value *in[2] = {x, ints(g, "s", 2, (int64_t[]){2, -1})};
        qf_node *v = in[1] ? qf_graph_add_node(g, QF_OP_RESHAPE, "pin", 2, in, 1) : NULL;
        qf_node *sm = v ? qf_graph_add_node(g, QF_OP_SOFTMAX, "sm", 1, &v->outputs[0], 1) : NULL;
        qf_value *back[2] = {sm ? sm->outputs[0] : NULL, ints(g, "s2", 3, (int64_t[]){-1, 2, 3})};
        n = back[0] && back[1] ? qf_graph_add_node(g, QF_OP_RESHAPE, "back", 2, back, 1) : NULL;
    }
    if (!n) {
        qf_graph_free(g);
        return NULL;
    }
    y = n->outputs[0];
    qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "relu", 1, &y, 1);
    if (!r || qf_graph_add_output(g, r->outputs[0]) != QF_OK) {
        qf_graph_free(g);
        return NULL;
    }
    return g;
}

/* May `kind`'s graph run 4 samples at once? Its reason into why (or ""). */
static bool widens(const char *kind, char *why, size_t size)
{
    qf_graph *g = make(kind);
    CHECK(g != NULL);
    if (!g) return false;
    qf_batch_widen *w = NULL;
    bool ok = false;
    CHECK_OK(qf_batch_widen_init(&w, g));
    if (w) CHECK_OK(qf_batch_widen_begin(w, 4, &ok));
    if (ok) {
        /* widened: the graph's output at 4 rows */
        const qf_value *o = g->outputs[0];
        CHECKF(o->type.dims[0] == 4 * (!strcmp(kind, "concat0") ? 2 : 1), "%s: output rows %lld",
               kind, (long long)o->type.dims[0]);
    }
    snprintf(why, size, "%s", w && qf_batch_widen_why(w) ? qf_batch_widen_why(w) : "");
    qf_batch_widen_free(w);
    /* as found after: batch 1 in and out */
    CHECKF(g->inputs[0]->type.dims[0] == 1, "%s: input left at %lld rows", kind,
           (long long)g->inputs[0]->type.dims[0]);
    CHECK_OK(qf_graph_infer_shapes(g));
    qf_graph_free(g);
    return ok;
}

static void test_rules(void)
{
    char why[256];
    CHECK(widens("softmax1", why, sizeof why) && !why[0]);
    CHECK(widens("concat2", why, sizeof why) && !why[0]);
    CHECK(!widens("softmax0", why, sizeof why));
    CHECKF(strstr(why, "node 'sm' (Softmax) normalizes over axis 0") != NULL, "why: %s", why);
    CHECK(!widens("concat0", why, sizeof why));
    CHECKF(strstr(why, "node 'cat' (Concat) concatenates along axis 0") != NULL, "why: %s", why);
    CHECK(!widens("transpose", why, sizeof why));
    CHECKF(strstr(why, "node 'tr' (Transpose) moves axis 0") != NULL, "why: %s", why);
    CHECK(!widens("shape", why, sizeof why));
    CHECKF(strstr(why, "node 'shape' (Shape) reads the batch size") != NULL, "why: %s", why);
    /* Shape inference at batch 4 succeeds here: only the shapes' check
     * catches the Reshape that puts the batch into its rows. */
    CHECK(!widens("pinned", why, sizeof why));
    CHECKF(
        strstr(
            why,
            "node 'pin' (Reshape): value 'pin_out' is [2, 3] at batch 1 but [2, 12] at batch 4") !=
            NULL,
        "why: %s", why);
}

/* The [1, -1] constant reads [0, -1] while widened, [1, -1] (the same
 * buffer) after. */
static void test_view_rewrite(void)
{
    qf_graph *g = make("view1");
    CHECK(g != NULL);
    if (!g) return;
    qf_value *s = qf_graph_find_value(g, "s");
    const void *data = s->type.data;
    qf_batch_widen *w = NULL;
    bool ok = false;
    CHECK_OK(qf_batch_widen_init(&w, g));
    CHECK_OK(qf_batch_widen_begin(w, 4, &ok));
    CHECK(ok && !qf_batch_widen_why(w));
    const int64_t *v = s->type.data;
    CHECK(v[0] == 0 && v[1] == -1);
    CHECK(g->outputs[0]->type.dims[0] == 4 && g->outputs[0]->type.dims[1] == 6);
    qf_batch_widen_end(w);
    v = s->type.data;
    CHECK(s->type.data == data && v[0] == 1 && v[1] == -1);
    qf_batch_widen_free(w);
    qf_graph_free(g);
}

/* The batcher with widen: the view graph runs 4 rows at once, outputs as
 * four runs of one; the pinned one runs 1 at a time and says why. */
static void test_batcher(void)
{
    float xs[4 * 6];
    for (int i = 0; i < 24; i++) xs[i] = (float)((i * 7) % 11) - 5.0f;
    int64_t d[3] = {4, 2, 3};
    qf_tensor data;
    qf_tensor_view(&data, QF_DTYPE_F32, 3, d, xs);
    const qf_tensor *in[1] = {&data};
    const char *kinds[2] = {"view1", "pinned"};
    for (int k = 0; k < 2; k++) {
        qf_graph *g = make(kinds[k]);
        CHECK(g != NULL);
        if (!g) return;
        float one[4][6];
        qf_batcher *b = NULL;
        CHECK_OK(qf_batcher_open(&b, g, in, 1, &(qf_batch_options){0}));
        for (int r = 0; b && r < 4; r++) {
            const void *rows[1] = {xs + 6 * r};
            CHECK_OK(qf_batcher_run(b, rows, 1));
            memcpy(one[r], qf_plan_output(qf_batcher_plan(b), 0)->data, sizeof one[r]);
        }
        CHECK_OK(qf_batcher_close(b));
        b = NULL;
        CHECK_OK(qf_batcher_open(&b, g, in, 1, &(qf_batch_options){.widen = true}));
        if (!b) continue;
        int64_t rows_run = qf_batcher_rows(b, 4);
        if (k == 0) {
            CHECK(rows_run == 4 && !qf_batcher_why(b));
            const void *rows[1] = {xs};
            CHECK_OK(qf_batcher_run(b, rows, 4));
            CHECK(memcmp(qf_plan_output(qf_batcher_plan(b), 0)->data, one, sizeof one) == 0);
        } else {
            CHECK(rows_run == 1 && qf_batcher_why(b) && strstr(qf_batcher_why(b), "'pin'"));
        }
        CHECK_OK(qf_batcher_close(b));
        CHECK(g->inputs[0]->type.dims[0] == 1 && g->outputs[0]->type.dims[0] == 1);
        qf_graph_free(g);
    }
}

int main(void)
{
    RUN(test_rules);
    RUN(test_view_rewrite);
    RUN(test_batcher);
    return qf_check_report();
}
