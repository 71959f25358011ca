/* The shared node walk (qf_pass_for_each_op), the rewrite actions the
 * report totals (qf_pass_report_count), and the generic rewrite helpers of
 * src/passes/rewrite.h, on small graphs built with the IR API. */
#include <math.h>
#include <string.h>

#include "../tools/qf_check.h"
#include "passes/rewrite.h"
#include "qfold/pass.h"

/* x -> relu a -> relu b -> relu c -> Add(c, w) "add" -> output; w a [4] constant. */
static qf_graph *chain(void)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    int64_t d[1] = {4};
    qf_value *v = qf_graph_add_input(g, "x", QF_DTYPE_F32, 1, d);
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3 && v; i++) {
        qf_node *n = qf_graph_add_node(g, QF_OP_RELU, names[i], 1, &v, 1);
        v = n ? n->outputs[0] : NULL;
    }
    double wv[4] = {1, 2, 3, 4};
    qf_value *w = v ? qf_rewrite_new_const_f32(g, "w", QF_VALUE_PARAMETER, wv, 1, d) : NULL;
    qf_value *in[2] = {v, w};
    qf_node *add = w ? qf_graph_add_node(g, QF_OP_ADD, "add", 2, in, 1) : NULL;
    if (!add || qf_graph_add_output(g, add->outputs[0]) != QF_OK || qf_graph_infer_shapes(g) != QF_OK) {
        qf_graph_free(g);
        return NULL;
    }
    return g;
}

/* The walk test: visits are logged; 'a' is skipped, 'b' is rewritten by
 * removing b and c and inserting a relu "fresh", which must not be visited
 * (nor c, removed before its turn). */
typedef struct walk_log {
    char seen[8][16];
    int nseen;
} walk_log;

static bool walk_match(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g;
    walk_log *log = user;
    if (log->nseen < 8) snprintf(log->seen[log->nseen++], sizeof log->seen[0], "%s", n->name);
    if (strcmp(n->name, "a") == 0) {
        qf_pass_skip(ctx, n, "kept: %s", "first");
        return false;
    }
    return true;
}

static qf_status walk_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)user;
    qf_node *c = n->outputs[0]->uses[0].node;
    qf_value *x = n->inputs[0];
    qf_pass_rewrite_as(ctx, c, QF_PASS_REMOVED, NULL, "dropped with %s", n->name);
    QF_TRY(qf_rewrite_splice_out(g, c, c->inputs[0]));
    qf_pass_rewrite_as(ctx, n, QF_PASS_FOLDED, "{\"k\": 2}", "spliced out");
    QF_TRY(qf_rewrite_splice_out(g, n, x));
    qf_node *add = qf_graph_find_node(g, "add");
    qf_node *fresh = qf_graph_insert_node(g, add, false, QF_OP_RELU, "fresh", 1, &x, 1);
    if (!fresh) return QF_ERR_NOMEM;
    qf_tensor *ft = &fresh->outputs[0]->type;
    ft->dtype = x->type.dtype;
    ft->ndim = x->type.ndim;
    memcpy(ft->dims, x->type.dims, sizeof ft->dims);
    return qf_node_set_input(g, add, 0, fresh->outputs[0]);
}

static qf_status walk_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    static walk_log log;
    memset(&log, 0, sizeof log);
    *changed = false;
    qf_status st = qf_pass_for_each_op(g, ctx, QF_OP_RELU, walk_match, walk_apply, &log, changed);
    /* The log is checked through the report and here: a, b only. */
    if (st == QF_OK && (log.nseen != 2 || strcmp(log.seen[0], "a") || strcmp(log.seen[1], "b")))
        return qf_error(QF_ERR_INTERNAL, "walk visited %d nodes (%s, %s, ...), expected a, b", log.nseen,
                        log.seen[0], log.nseen > 1 ? log.seen[1] : "-");
    return st;
}

static const qf_pass walk_pass = {"walk", "test: the shared walk", walk_run};

static void test_walk_and_actions(void)
{
    qf_graph *g = chain();
    CHECK(g != NULL);
    if (!g) return;
    const qf_pass *list[] = {&walk_pass};
    qf_pass_report *r = NULL;
    CHECK_OK(qf_passes_run_list(g, list, 1, &(qf_pass_options){.verify = true}, &r));
    CHECK(r && r->nresults == 2);
    if (!r || r->nresults != 2) {
        qf_pass_report_free(r);
        qf_graph_free(g);
        return;
    }
    const qf_pass_result *w = &r->results[0];
    CHECK(w->changed && w->rewrites == 2 && w->nskipped == 1);
    CHECK(strcmp(w->skipped[0].node, "a") == 0 && strcmp(w->skipped[0].reason, "kept: first") == 0);
    CHECK(w->skipped[0].node_op == QF_OP_RELU);
    CHECK(w->actions[QF_PASS_FOLDED] == 1 && w->actions[QF_PASS_REMOVED] == 1 && w->actions[QF_PASS_REWROTE] == 0);
    CHECK(w->rewritten[1].action == QF_PASS_FOLDED && strcmp(w->rewritten[1].node, "b") == 0);
    /* The walk's REMOVED counts as dead-code removal too; the final dce had nothing to do. */
    CHECK(r->dce_removed == 1 && r->results[1].rewrites == 0);
    CHECK(qf_pass_report_count(r, QF_PASS_FOLDED, QF_OP_RELU) == 1);
    CHECK(qf_pass_report_count(r, QF_PASS_FOLDED, QF_OP_BATCH_NORM) == 0);
    CHECK(qf_pass_report_count(r, QF_PASS_REMOVED, QF_OP_COUNT) == 1);
    CHECK(qf_pass_report_count(r, QF_PASS_DECOMPOSED, QF_OP_COUNT) == 0);
    /* Graph: x -> a -> fresh -> add. */
    CHECK(g->nnodes == 3 && qf_graph_find_node(g, "b") == NULL && qf_graph_find_node(g, "c") == NULL);
    qf_node *fresh = qf_graph_find_node(g, "fresh");
    CHECK(fresh && fresh->inputs[0] == qf_graph_find_node(g, "a")->outputs[0]);
    /* The JSON report keeps its format: no new fields. */
    char *json = NULL;
    CHECK_OK(qf_pass_report_json(r, NULL, &json, NULL));
    CHECK(json && !strstr(json, "action") && strstr(json, "\"reason\": \"spliced out\", \"detail\": {\"k\": 2}"));
    qf_free(json);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

/* A walk over an op with no nodes, and an apply that fails: the status
 * comes back and *changed stays false. */
static bool take_all(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g, (void)ctx, (void)n, (void)user;
    return true;
}

static qf_status fail_apply(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
{
    (void)g, (void)ctx, (void)user;
    return qf_error(QF_ERR_NUMERIC, "node '%s': refused", n->name);
}

static qf_status failing_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    *changed = false;
    QF_TRY(qf_pass_for_each_op(g, ctx, QF_OP_CONV, take_all, fail_apply, NULL, changed));
    if (*changed) return qf_error(QF_ERR_INTERNAL, "no conv, yet changed");
    return qf_pass_for_each_op(g, ctx, QF_OP_RELU, take_all, fail_apply, NULL, changed);
}

static const qf_pass failing_pass = {"failing", "test: apply fails", failing_run};

static void test_walk_failure(void)
{
    qf_graph *g = chain();
    const qf_pass *list[] = {&failing_pass};
    qf_pass_report *r = NULL;
    CHECK_STATUS(qf_passes_run_list(g, list, 1, NULL, &r), QF_ERR_NUMERIC);
    CHECK_MSG("pass 'failing': node 'a': refused");
    CHECK(r && r->nresults == 1 && !r->results[0].changed);
    qf_pass_report_free(r);
    qf_graph_free(g);
}

static void test_helpers(void)
{
    qf_graph *g = chain();
    CHECK(g != NULL);
    if (!g) return;
    qf_node *add = qf_graph_find_node(g, "add"), *c = qf_graph_find_node(g, "c");
    qf_value *w = qf_graph_find_value(g, "w");
    int slot = -1;
    CHECK(qf_rewrite_sole_user(w, &slot) == add && slot == 1);
    CHECK(qf_rewrite_sole_user(add->outputs[0], NULL) == NULL); /* a graph output */
    CHECK(qf_rewrite_is_f32_const(w) && !qf_rewrite_is_f32_const(c->outputs[0]) && !qf_rewrite_is_f32_const(NULL));
    CHECK(qf_rewrite_can_write_in_place(w, add, 1) && !qf_rewrite_can_write_in_place(w, add, 0));
    CHECK(qf_rewrite_why((char[8]){0}, 8, "%s", "truncated reason"));
    CHECK_OK(qf_rewrite_check_finite(w, add));

    /* In place: w keeps its name and now holds 9s. */
    int64_t d[1] = {4};
    qf_tensor t;
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 1, d));
    for (int i = 0; i < 4; i++) ((float *)t.data)[i] = 9;
    CHECK_OK(qf_rewrite_install_const(g, add, 1, &t, "w_new"));
    CHECK(add->inputs[1] == w && ((float *)w->type.data)[3] == 9 && !qf_graph_find_value(g, "w_new"));

    /* Tied: a second reader of w keeps the old payload, add gets a fresh constant. */
    qf_value *in2[2] = {c->outputs[0], w};
    qf_node *other = qf_graph_add_node(g, QF_OP_MUL, "other", 2, in2, 1);
    CHECK(other && qf_graph_add_output(g, other->outputs[0]) == QF_OK);
    CHECK(!qf_rewrite_can_write_in_place(w, add, 1) && qf_rewrite_sole_user(w, NULL) == NULL);
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 1, d));
    for (int i = 0; i < 4; i++) ((float *)t.data)[i] = (float)i;
    ((float *)t.data)[2] = INFINITY;
    CHECK_OK(qf_rewrite_install_const(g, add, 1, &t, "w_new"));
    qf_value *fresh = add->inputs[1];
    CHECK(fresh != w && strcmp(fresh->name, "w_new") == 0 && fresh->kind == QF_VALUE_PARAMETER);
    CHECK(((float *)w->type.data)[2] == 9 && w->nuses == 1);
    CHECK_STATUS(qf_rewrite_check_finite(fresh, add), QF_ERR_NUMERIC);
    CHECK_MSG("node 'add' (add): tensor 'w_new' holds Inf at index 2");

    /* Appending past the inputs: slots in between become omitted inputs. */
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 1, d));
    memset(t.data, 0, qf_tensor_nbytes(&t));
    CHECK_OK(qf_rewrite_install_const(g, c, 2, &t, "c_extra"));
    CHECK(c->ninputs == 3 && c->inputs[1] == NULL && strcmp(c->inputs[2]->name, "c_extra") == 0);

    /* Splicing c out: its readers read b's output, its now unread constant goes. */
    qf_value *bout = qf_graph_find_node(g, "b")->outputs[0];
    CHECK_OK(qf_rewrite_splice_out(g, c, bout));
    CHECK(!qf_graph_find_node(g, "c") && !qf_graph_find_value(g, "c_extra"));
    CHECK(add->inputs[0] == bout && other->inputs[0] == bout);

    /* Dropping: repeats and live values are passed over. */
    qf_node_set_input(g, other, 1, fresh);
    qf_value *drop[4] = {w, w, NULL, fresh};
    qf_rewrite_drop_dead_consts(g, drop, 4);
    CHECK(!qf_graph_find_value(g, "w") && qf_graph_find_value(g, "w_new") == fresh);
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

int main(void)
{
    RUN(test_walk_and_actions);
    RUN(test_walk_failure);
    RUN(test_helpers);
    return qf_check_report();
}
