/* The fold_constants pass and the constant folding import runs
 * (src/passes/fold_constants.c): shape chains folded to constants, the
 * guards that keep weights, QDQ and big outputs as they are, the pass's
 * report. */
#include <stdint.h>
#include <string.h>

#include "qfold/exec.h"
#include "qfold/pass.h"
#include "tools/qf_check.h"

/* --- folding ------------------------------------------------------------------- */
static qf_value *const_i64(qf_graph *g, const char *name, int ndim, const int64_t *vals, int count)
{
    qf_tensor t;
    int64_t c = count;
    if (qf_tensor_init(&t, QF_DTYPE_I64, ndim, &c) != QF_OK) return NULL;
    memcpy(t.data, vals, sizeof *vals * (size_t)count);
    return qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
}

/* x.reshape(x.shape[0], -1) as torch exports it:
 * Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape. */
static qf_graph *shape_chain(qf_node **reshape, const char **cat_name)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    int64_t d[3] = {2, 3, 4};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 3, d);
    qf_value *s = qf_graph_add_node(g, QF_OP_SHAPE, "shape", 1, &x, 1)->outputs[0];
    int64_t zero = 0, minus1 = -1;
    qf_value *gin[2] = {s, const_i64(g, "zero", 0, &zero, 1)};
    qf_value *b = qf_graph_add_node(g, QF_OP_GATHER, "gather", 2, gin, 1)->outputs[0];
    qf_value *uin[2] = {b, const_i64(g, "axes0", 1, &zero, 1)};
    qf_value *u = qf_graph_add_node(g, QF_OP_UNSQUEEZE, "unsq", 2, uin, 1)->outputs[0];
    qf_value *cin[2] = {u, const_i64(g, "minus1", 1, &minus1, 1)};
    qf_node *cat = qf_graph_add_node(g, QF_OP_CONCAT, "cat", 2, cin, 1);
    CHECK_OK(qf_node_set_attr_int(g, cat, "axis", 0));
    *cat_name = cat->outputs[0]->name;
    qf_value *rin[2] = {x, cat->outputs[0]};
    *reshape = qf_graph_add_node(g, QF_OP_RESHAPE, "reshape", 2, rin, 1);
    CHECK_OK(qf_graph_add_output(g, (*reshape)->outputs[0]));
    CHECK_OK(qf_graph_toposort(g));
    return g;
}

static void test_fold_shape_chain(void)
{
    qf_node *r;
    const char *cat_name;
    qf_graph *g = shape_chain(&r, &cat_name);
    if (!g) return;
    int count = -1;
    CHECK_OK(qf_graph_fold_constants(g, &count));
    CHECK(count == 4);
    CHECK(g->nnodes == 1 && g->first == r);
    qf_value *shape = r->inputs[1];
    CHECK(qf_value_is_const(shape));
    CHECK(strcmp(shape->name, cat_name) == 0);
    CHECK(qf_graph_find_value(g, cat_name) == shape);
    CHECK(shape->type.ndim == 1 && shape->type.dims[0] == 2);
    CHECK(((int64_t *)shape->type.data)[0] == 2 && ((int64_t *)shape->type.data)[1] == -1);
    /* The constants the chain read are gone; only the input and the two values remain. */
    CHECK(!qf_graph_find_value(g, "zero") && !qf_graph_find_value(g, "axes0") &&
          !qf_graph_find_value(g, "minus1"));
    CHECK_OK(qf_graph_verify(g));
    qf_plan *p;
    CHECK_OK(qf_plan_init(&p, g));
    if (p) {
        const qf_tensor *y = qf_plan_output(p, 0);
        CHECK(y->ndim == 2 && y->dims[0] == 2 && y->dims[1] == 12);
        qf_plan_free(p);
    }
    qf_graph_free(g);
}

/* The same fold as the fold_constants pass: the report names every node it
 * folded, as FOLDED. */
static void test_fold_constants_pass(void)
{
    qf_node *r;
    const char *cat_name;
    qf_graph *g = shape_chain(&r, &cat_name);
    if (!g) return;
    const char *names[] = {"fold_constants", NULL};
    qf_pass_report *rep = NULL;
    /* No verify: shapes cannot be inferred before the chain is folded. */
    CHECK_OK(qf_passes_run(g, names, NULL, &rep));
    CHECK(g->nnodes == 1 && g->first == r && qf_value_is_const(r->inputs[1]));
    CHECK(rep && qf_pass_report_count(rep, QF_PASS_FOLDED, QF_OP_COUNT) == 4);
    CHECK(rep && qf_pass_report_count(rep, QF_PASS_FOLDED, QF_OP_SHAPE) == 1);
    CHECK(rep && rep->nresults >= 1 && strcmp(rep->results[0].pass, "fold_constants") == 0 &&
          rep->results[0].changed && strcmp(rep->results[0].rewritten[0].node, "shape") == 0);
    qf_pass_report_free(rep);
    /* Nothing left to fold: unchanged; shapes verify now. */
    CHECK_OK(qf_passes_run(g, names, &(qf_pass_options){.verify = true}, &rep));
    CHECK(rep && !rep->results[0].changed && rep->results[0].rewrites == 0);
    qf_pass_report_free(rep);
    qf_graph_free(g);
}

/* A folded graph output keeps its name; big ConstantOfShape stays a node;
 * Shape of an input with an unknown dimension is not folded. */
static void test_fold_guards(void)
{
    qf_graph *g;
    CHECK_OK(qf_graph_init(&g));
    int64_t big[2] = {1024, 1024}, small[2] = {4, 4};
    qf_value *bs = const_i64(g, "big_shape", 1, big, 2);
    qf_value *ss = const_i64(g, "small_shape", 1, small, 2);
    qf_node *nb = qf_graph_add_node(g, QF_OP_CONSTANT_OF_SHAPE, "big", 1, &bs, 1);
    qf_node *ns = qf_graph_add_node(g, QF_OP_CONSTANT_OF_SHAPE, "small", 1, &ss, 1);
    qf_node *nc = qf_graph_add_node(g, QF_OP_CONSTANT, "c", 0, NULL, 1);
    CHECK_OK(qf_node_set_attr_int(g, nc, "value_int", 42));
    /* A weight re-laid-out by its only reader folds under the weight's name;
     * a float chain that starts at a Constant node folds. */
    qf_tensor wt;
    int64_t wd = 3;
    CHECK_OK(qf_tensor_init(&wt, QF_DTYPE_F32, 1, &wd));
    qf_value *w = qf_graph_add_constant(g, "fc.weight", QF_VALUE_CONSTANT, &wt);
    qf_node *ntw = qf_graph_add_node(g, QF_OP_TRANSPOSE, "transpose_w", 1, &w, 1);
    qf_node *nf = qf_graph_add_node(g, QF_OP_CONSTANT, "cf", 0, NULL, 1);
    float fv[2] = {0.5f, 2.0f};
    CHECK_OK(qf_node_set_attr_floats(g, nf, "value_floats", fv, 2));
    qf_node *nfi = qf_graph_add_node(g, QF_OP_IDENTITY, "cf_id", 1, &nf->outputs[0], 1);
    int64_t du[2] = {-1, 3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, du);
    qf_node *nsh = qf_graph_add_node(g, QF_OP_SHAPE, "shape_x", 1, &x, 1);
    qf_value *mm[2] = {ntw->outputs[0], nfi->outputs[0]};
    qf_node *ncat = qf_graph_add_node(g, QF_OP_CONCAT, "cat_w", 2, mm, 1);
    CHECK_OK(qf_node_set_attr_int(g, ncat, "axis", 0));
    CHECK_OK(qf_graph_add_output(g, nb->outputs[0]));
    CHECK_OK(qf_graph_add_output(g, ns->outputs[0]));
    CHECK_OK(qf_graph_add_output(g, nc->outputs[0]));
    CHECK_OK(qf_graph_add_output(g, nsh->outputs[0]));
    CHECK_OK(qf_graph_add_output(g, ncat->outputs[0]));
    const char *cname = nc->outputs[0]->name;
    int count = -1;
    CHECK_OK(qf_graph_fold_constants(g, &count));
    CHECK(count == 5);
    CHECK(g->nnodes == 3 && g->first == nb);
    CHECK(!qf_graph_find_node(g, "transpose_w") && qf_graph_find_node(g, "shape_x") == nsh);
    /* Transpose(fc.weight) folded: the result is the weight, under its name. */
    CHECK(qf_graph_find_value(g, "fc.weight") == ncat->inputs[0]);
    CHECK(qf_value_is_const(ncat->inputs[0]) && ncat->inputs[0]->type.dims[0] == 3);
    CHECK(ncat->inputs[1]->kind == QF_VALUE_CONSTANT && ncat->inputs[1]->type.dims[0] == 2);
    /* Concat mixes the weight into a graph output: it stays a node. */
    CHECK(qf_graph_find_node(g, "cat_w") == ncat);
    CHECK(!g->outputs[1]->producer && qf_value_is_const(g->outputs[1]));
    CHECK(strcmp(g->outputs[1]->name, "small_out") == 0);
    CHECK(qf_tensor_numel(&g->outputs[1]->type) == 16);
    CHECK(strcmp(g->outputs[2]->name, cname) == 0);
    CHECK(qf_value_is_const(g->outputs[2]) && *(int64_t *)g->outputs[2]->type.data == 42);
    CHECK(qf_graph_find_value(g, "small_shape") == NULL);
    CHECK(qf_graph_find_value(g, "big_shape") == bs);
    CHECK_OK(qf_graph_verify(g));

    /* Shape folds once the input's shape is known; outputs that are
     * constants are readable from a plan. */
    int64_t dk[2] = {5, 3};
    CHECK_OK(qf_graph_set_input_shape(g, 0, 2, dk));
    CHECK_OK(qf_graph_fold_constants(g, &count));
    CHECK(count == 1 && g->nnodes == 2);
    qf_plan *p;
    CHECK_OK(qf_plan_init(&p, g));
    if (p) {
        qf_tensor xt;
        CHECK_OK(qf_tensor_init(&xt, QF_DTYPE_F32, 2, dk));
        const qf_tensor *in[] = {&xt};
        CHECK_OK(qf_plan_run(p, in, 1));
        const qf_tensor *o3 = qf_plan_output(p, 3);
        CHECK(o3->dtype == QF_DTYPE_I64 && o3->dims[0] == 2);
        CHECK(((int64_t *)o3->data)[0] == 5 && ((int64_t *)o3->data)[1] == 3);
        CHECK(*(int64_t *)qf_plan_output(p, 2)->data == 42);
        CHECK(((float *)qf_plan_output(p, 0)->data)[1024 * 1024 - 1] == 0.0f);
        const qf_tensor *o4 = qf_plan_output(p, 4);
        CHECK(o4->ndim == 1 && o4->dims[0] == 5 && ((float *)o4->data)[3] == 0.5f);
        qf_tensor_free(&xt);
        qf_plan_free(p);
    }
    /* qf_graph_fold_node refuses a node that reads a run-time value. */
    qf_graph_free(g);
    CHECK_OK(qf_graph_init(&g));
    x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, dk);
    qf_node *id = qf_graph_add_node(g, QF_OP_IDENTITY, "ident", 1, &x, 1);
    CHECK_OK(qf_graph_add_output(g, id->outputs[0]));
    CHECK_ERR(qf_graph_fold_node(g, id), QF_ERR_INVALID, "'ident'");
    CHECK_MSG("not all constants");
    qf_graph_free(g);
}

int main(void)
{
    RUN(test_fold_shape_chain);
    RUN(test_fold_constants_pass);
    RUN(test_fold_guards);
    return qf_check_report();
}
