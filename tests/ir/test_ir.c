/* Unit tests of the graph IR (src/ir): building, use lists through every
 * rewiring call, topological order (stable, cycle error), the verifier on
 * broken graphs, dead-code elimination, name uniqueness, attributes, input
 * binding and constant classification. Every test frees its graph and the
 * counting allocator checks that nothing was leaked. */
#include <math.h>

#include "qfold/graph.h"
#include "tools/qf_check.h"

static qf_check_alloc alloc;

/* x [1, 8] -> relu "r0" -> add "a0" (+ constant c) -> graph output. */
static qf_graph *small_graph(qf_value **x, qf_value **c, qf_node **r0, qf_node **a0)
{
    qf_graph *g = NULL;
    if (qf_graph_init(&g) != QF_OK) return NULL;
    int64_t d[] = {1, 8};
    *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, d);
    qf_tensor t;
    qf_tensor_init(&t, QF_DTYPE_F32, 2, d);
    *c = qf_graph_add_constant(g, "c", QF_VALUE_CONSTANT, &t);
    *r0 = qf_graph_add_node(g, QF_OP_RELU, "r0", 1, x, 1);
    qf_value *in[2] = {(*r0)->outputs[0], *c};
    *a0 = qf_graph_add_node(g, QF_OP_ADD, "a0", 2, in, 1);
    qf_graph_add_output(g, (*a0)->outputs[0]);
    return g;
}

static int has_use(const qf_value *v, const qf_node *n, int slot)
{
    for (int i = 0; i < v->nuses; i++)
        if (v->uses[i].node == n && v->uses[i].slot == slot) return 1;
    return 0;
}

static void test_build(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(g->nnodes == 2 && g->first == r0 && g->last == a0);
    CHECK(r0->next == a0 && a0->prev == r0);
    CHECK(g->ninputs == 1 && g->inputs[0] == x && x->kind == QF_VALUE_INPUT);
    CHECK(c->kind == QF_VALUE_CONSTANT && qf_value_is_const(c) && !qf_value_is_const(x));
    CHECK(strcmp(r0->outputs[0]->name, "r0_out") == 0);
    CHECK(r0->outputs[0]->producer == r0 && r0->outputs[0]->producer_slot == 0);
    CHECK(r0->outputs[0]->kind == QF_VALUE_ACTIVATION);
    CHECK(x->nuses == 1 && has_use(x, r0, 0));
    CHECK(r0->outputs[0]->nuses == 1 && has_use(r0->outputs[0], a0, 0));
    CHECK(c->nuses == 1 && has_use(c, a0, 1));
    CHECK(g->noutputs == 1 && a0->outputs[0]->is_output);
    CHECK(qf_graph_find_node(g, "a0") == a0 && qf_graph_find_value(g, "c") == c);
    CHECK(qf_graph_find_node(g, "nope") == NULL && qf_graph_find_value(g, "nope") == NULL);
    CHECK(g->values[x->id] == x && g->values[c->id] == c);
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

static void test_use_lists_set_input(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    /* a0 reads x directly in slot 0 instead of r0's output. */
    CHECK_OK(qf_node_set_input(g, a0, 0, x));
    CHECK(a0->inputs[0] == x);
    CHECK(x->nuses == 2 && has_use(x, r0, 0) && has_use(x, a0, 0));
    CHECK(r0->outputs[0]->nuses == 0);
    /* The same value in two slots of one node: two uses. */
    CHECK_OK(qf_node_set_input(g, a0, 1, x));
    CHECK(x->nuses == 3 && has_use(x, a0, 1) && c->nuses == 0);
    /* NULL (an omitted optional input) drops the use. */
    CHECK_OK(qf_node_set_input(g, a0, 1, NULL));
    CHECK(x->nuses == 2 && !has_use(x, a0, 1) && a0->inputs[1] == NULL);
    CHECK_STATUS(qf_node_set_input(g, a0, 5, x), QF_ERR_INTERNAL);
    CHECK_OK(qf_node_set_input(g, a0, 1, c));
    /* Appending an input. */
    qf_node *cat = qf_graph_add_node(g, QF_OP_CONCAT, "cat", 1, &x, 1);
    CHECK(cat != NULL);
    CHECK_OK(qf_node_add_input(g, cat, c));
    CHECK(cat->ninputs == 2 && cat->inputs[1] == c && has_use(c, cat, 1) && c->nuses == 2);
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

static void test_replace_uses_and_remove(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    /* A second relu reading r0; replace r0's output by x everywhere. */
    qf_node *r1 = qf_graph_add_node(g, QF_OP_RELU, "r1", 1, &r0->outputs[0], 1);
    CHECK_OK(qf_graph_add_output(g, r1->outputs[0]));
    qf_value *r0out = r0->outputs[0];
    CHECK(r0out->nuses == 2);
    CHECK_OK(qf_graph_replace_uses(g, r0out, x));
    CHECK(r0out->nuses == 0);
    CHECK(x->nuses == 3 && has_use(x, a0, 0) && has_use(x, r1, 0) && has_use(x, r0, 0));
    CHECK(a0->inputs[0] == x && r1->inputs[0] == x);
    int nvals = 0;
    for (int i = 0; i < g->nvalues; i++) nvals += g->values[i] != NULL;
    uint32_t rid = r0out->id;
    qf_graph_remove_node(g, r0);
    CHECK(g->nnodes == 2 && g->first == a0 && a0->prev == NULL);
    CHECK(qf_graph_find_node(g, "r0") == NULL && qf_graph_find_value(g, "r0_out") == NULL);
    CHECK(g->values[rid] == NULL);
    CHECK(x->nuses == 2 && !has_use(x, r0, 0));
    int nvals2 = 0;
    for (int i = 0; i < g->nvalues; i++) nvals2 += g->values[i] != NULL;
    CHECK(nvals2 == nvals - 1);
    CHECK_OK(qf_graph_verify(g));

    /* Replacing a graph output: the output keeps its name. */
    qf_value *out = a0->outputs[0];
    const char *oname = out->name;
    qf_node *r2 = qf_graph_add_node(g, QF_OP_RELU, "r2", 1, &out, 1);
    qf_value *r2out = r2->outputs[0];
    CHECK_OK(qf_graph_replace_uses(g, out, r2out));
    /* r2 itself read `out`: replace_uses rewires it too, so put it back. */
    CHECK_OK(qf_node_set_input(g, r2, 0, out));
    CHECK(g->outputs[0] == r2out && r2out->is_output && !out->is_output);
    CHECK(strcmp(r2out->name, oname) == 0 && strcmp(out->name, oname) != 0);
    CHECK(qf_graph_find_value(g, oname) == r2out);
    CHECK(qf_graph_find_value(g, out->name) == out);
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

static int order_is(const qf_graph *g, const qf_node *const *want, int n)
{
    const qf_node *p = g->first;
    for (int i = 0; i < n; i++, p = p->next)
        if (p != want[i]) return 0;
    return p == NULL && g->last == want[n - 1];
}

static void test_toposort(void)
{
    qf_graph *g = NULL;
    CHECK_OK(qf_graph_init(&g));
    if (!g) return;
    int64_t d[] = {4};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 1, d);
    qf_node *p = qf_graph_add_node(g, QF_OP_RELU, "p", 1, &x, 1);
    qf_node *q = qf_graph_add_node(g, QF_OP_RELU, "q", 1, &x, 1);
    qf_node *r = qf_graph_add_node(g, QF_OP_RELU, "r", 1, &x, 1);
    qf_node *s = qf_graph_add_node(g, QF_OP_RELU, "s", 1, &x, 1);
    qf_graph_add_output(g, q->outputs[0]);
    qf_graph_add_output(g, p->outputs[0]);
    qf_graph_add_output(g, r->outputs[0]);

    /* Already sorted: unchanged. */
    CHECK_OK(qf_graph_toposort(g));
    const qf_node *o1[] = {p, q, r, s};
    CHECK(order_is(g, o1, 4));

    /* q now reads s, which comes later: q must move after s, and the
     * others keep their relative order (the earliest ready node first). */
    CHECK_OK(qf_node_set_input(g, q, 0, s->outputs[0]));
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    CHECK_OK(qf_graph_toposort(g));
    const qf_node *o2[] = {p, r, s, q};
    CHECK(order_is(g, o2, 4));
    for (const qf_node *n = g->first; n; n = n->next) CHECK(!n->next || n->next->prev == n);
    CHECK_OK(qf_graph_verify(g));

    /* A cycle: s reads q, q reads s. */
    CHECK_OK(qf_node_set_input(g, s, 0, q->outputs[0]));
    qf_error_clear();
    CHECK_STATUS(qf_graph_toposort(g), QF_ERR_INVALID);
    CHECK_MSG("cycle");
    CHECK(strstr(qf_error_message(), "'s'") || strstr(qf_error_message(), "'q'"));
    /* A failed sort leaves the node list intact. */
    int count = 0;
    for (qf_node *n = g->first; n; n = n->next) count++;
    CHECK(count == 4 && g->nnodes == 4);
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    qf_graph_free(g);
}

static void test_verifier_catches(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    CHECK_OK(qf_graph_verify(g));

    /* A reader missing from the use list. */
    qf_use saved = c->uses[0];
    c->nuses = 0;
    qf_error_clear();
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    CHECK_MSG("use list");
    CHECK_MSG("'c'");
    c->nuses = 1;
    CHECK_OK(qf_graph_verify(g));

    /* A use naming the wrong slot. */
    c->uses[0].slot = 0;
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    c->uses[0] = saved;

    /* A stale use: x claims a0 reads it. */
    qf_node *r0n = r0;
    x->uses[0].node = a0;
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    x->uses[0].node = r0n;

    /* An initializer without data. */
    void *data = c->type.data;
    c->type.data = NULL;
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    c->type.data = data;

    /* Wrong arity for the op. */
    a0->ninputs = 1;
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    a0->ninputs = 2;

    /* A broken producer link. */
    r0->outputs[0]->producer_slot = 1;
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    r0->outputs[0]->producer_slot = 0;

    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

/* An insert that runs out of memory half way leaves nothing behind: no use
 * by the half-built node, no output value, no name (review-a). */
static void test_insert_node_oom(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    int64_t d[] = {1, 8};
    qf_tensor t;
    qf_tensor_init(&t, QF_DTYPE_F32, 2, d);
    /* k has no use yet: its first use allocates, after x's use is added. */
    qf_value *k = qf_graph_add_constant(g, "k", QF_VALUE_CONSTANT, &t);
    qf_value *in[2] = {x, k};
    int x_uses = x->nuses, nnodes = g->nnodes, failed = 0;
    for (long n = 1; n < 64; n++) {
        alloc.fail_at = alloc.calls + n;
        alloc.persistent = 1;
        qf_node *a = qf_graph_add_node(g, QF_OP_ADD, "new", 2, in, 1);
        alloc.fail_at = 0;
        if (a) {
            qf_graph_remove_node(g, a);
            break;
        }
        failed++;
        CHECK(x->nuses == x_uses && k->nuses == 0 && g->nnodes == nnodes);
        CHECK(qf_graph_find_node(g, "new") == NULL && qf_graph_find_value(g, "new_out") == NULL);
        CHECK_OK(qf_graph_verify(g));
    }
    CHECK(failed > 0);
    CHECK(x->nuses == x_uses && k->nuses == 0);
    CHECK_OK(qf_graph_verify(g));

    /* The verifier also catches a use by a node that is not in the list. */
    qf_node *gone = qf_graph_add_node(g, QF_OP_RELU, "gone", 1, &x, 1);
    qf_value *gone_out = gone->outputs[0];
    qf_graph_remove_node(g, gone);
    CHECK(qf_graph_find_value(g, "gone_out") == NULL && gone_out != NULL);
    CHECK_OK(qf_graph_verify(g));
    qf_use stale = {gone, 0};
    x->uses[x->nuses++] = stale; /* cap is at least 8 */
    gone->inputs[0] = x;         /* still "reads" x, but is unlinked */
    gone->ninputs = 1;
    qf_error_clear();
    CHECK_STATUS(qf_graph_verify(g), QF_ERR_INVALID);
    CHECK_MSG("not in the graph");
    x->nuses--;
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

/* verify_shapes reports a stale output type and leaves the graph as it was. */
static void test_verify_shapes_leaves_graph(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    CHECK_OK(qf_graph_infer_shapes(g));
    CHECK_OK(qf_graph_verify_shapes(g));
    qf_value *out = a0->outputs[0];
    out->type.dims[1] = 7; /* a rewrite that forgot to update the type */
    qf_error_clear();
    CHECK_STATUS(qf_graph_verify_shapes(g), QF_ERR_INVALID);
    CHECK_MSG("'a0'");
    CHECK(out->type.dims[1] == 7);
    out->type.dims[1] = 8;
    CHECK_OK(qf_graph_verify_shapes(g));
    qf_graph_free(g);
}

static void test_dce(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    /* A dead chain d1 -> d2 (nothing reads d2) and an unused constant. */
    qf_node *d1 = qf_graph_add_node(g, QF_OP_RELU, "d1", 1, &x, 1);
    qf_node *d2 = qf_graph_add_node(g, QF_OP_SIGMOID, "d2", 1, &d1->outputs[0], 1);
    CHECK(d2 != NULL);
    int64_t d[] = {3};
    qf_tensor t;
    qf_tensor_init(&t, QF_DTYPE_F32, 1, d);
    CHECK(qf_graph_add_constant(g, "unused", QF_VALUE_CONSTANT, &t) != NULL);
    /* A node whose output is a graph output stays even without readers. */
    qf_node *keep = qf_graph_add_node(g, QF_OP_RELU, "keep", 1, &x, 1);
    qf_graph_add_output(g, keep->outputs[0]);

    CHECK(qf_graph_dce(g) == 2);
    CHECK(g->nnodes == 3);
    CHECK(qf_graph_find_node(g, "d1") == NULL && qf_graph_find_node(g, "d2") == NULL);
    CHECK(qf_graph_find_value(g, "unused") == NULL);
    CHECK(qf_graph_find_node(g, "keep") == keep && qf_graph_find_value(g, "c") == c);
    CHECK(x->nuses == 2 && g->ninputs == 1);
    CHECK(qf_graph_dce(g) == 0);
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

static void test_names(void)
{
    qf_graph *g = NULL;
    CHECK_OK(qf_graph_init(&g));
    if (!g) return;
    int64_t d[] = {2};
    qf_value *a = qf_graph_add_value(g, "t", QF_VALUE_INPUT, QF_DTYPE_F32, 1, d);
    qf_value *b = qf_graph_add_value(g, "t", QF_VALUE_INPUT, QF_DTYPE_F32, 1, d);
    qf_value *e = qf_graph_add_value(g, NULL, QF_VALUE_INPUT, QF_DTYPE_F32, 1, d);
    qf_value *f = qf_graph_add_value(g, "", QF_VALUE_INPUT, QF_DTYPE_F32, 1, d);
    CHECK(a && b && e && f);
    if (!(a && b && e && f)) {
        qf_graph_free(g);
        return;
    }
    CHECK(strcmp(a->name, "t") == 0 && strcmp(b->name, "t") != 0);
    CHECK(strcmp(e->name, f->name) != 0 && e->name[0] && f->name[0]);
    CHECK(qf_graph_find_value(g, "t") == a && qf_graph_find_value(g, b->name) == b);
    qf_node *n1 = qf_graph_add_node(g, QF_OP_RELU, "n", 1, &a, 1);
    qf_node *n2 = qf_graph_add_node(g, QF_OP_RELU, "n", 1, &a, 1);
    qf_node *n3 = qf_graph_add_node(g, QF_OP_RELU, NULL, 1, &a, 1);
    CHECK(strcmp(n1->name, "n") == 0 && strcmp(n2->name, "n") != 0);
    CHECK(strcmp(n3->name, n1->name) != 0 && strcmp(n3->name, n2->name) != 0);
    CHECK(qf_graph_find_node(g, n2->name) == n2 && qf_graph_find_node(g, n3->name) == n3);
    /* Output values named after their node, unique too. */
    CHECK(strcmp(n1->outputs[0]->name, n2->outputs[0]->name) != 0);
    /* A value may be named like a node. */
    qf_value *v = qf_graph_add_value(g, "n", QF_VALUE_INPUT, QF_DTYPE_F32, 1, d);
    CHECK(v && strcmp(v->name, "n") == 0);
    /* Rank above QF_MAX_DIMS is refused with a message. */
    int64_t big[QF_MAX_DIMS + 1] = {0};
    qf_error_clear();
    CHECK(qf_graph_add_value(g, "big", QF_VALUE_INPUT, QF_DTYPE_F32, QF_MAX_DIMS + 1, big) == NULL);
    CHECK_MSG("big");
    /* Removing a value frees its name for reuse. */
    qf_graph_remove_value(g, v);
    qf_value *v2 = qf_graph_add_value(g, "n", QF_VALUE_INPUT, QF_DTYPE_F32, 1, d);
    CHECK(v2 && strcmp(v2->name, "n") == 0);
    qf_graph_free(g);
}

static void test_attributes(void)
{
    qf_value *x, *c;
    qf_node *r0, *a0;
    qf_graph *g = small_graph(&x, &c, &r0, &a0);
    if (!g) return;
    qf_node *n = a0;
    int cnt = -1;
    CHECK(qf_node_attr(n, "k") == NULL);
    CHECK(qf_node_attr_int(n, "k", 7) == 7);
    CHECK(qf_node_attr_float(n, "f", 0.5f) == 0.5f);
    CHECK(strcmp(qf_node_attr_string(n, "s", "dflt"), "dflt") == 0);
    CHECK(qf_node_attr_ints(n, "is", &cnt) == NULL && cnt == 0);
    cnt = -1;
    CHECK(qf_node_attr_floats(n, "fs", &cnt) == NULL && cnt == 0);

    const int64_t is[] = {1, -2, 3};
    const float fs[] = {0.25f, -1.5f};
    CHECK_OK(qf_node_set_attr_int(g, n, "k", -42));
    CHECK_OK(qf_node_set_attr_float(g, n, "f", 1e-5f));
    CHECK_OK(qf_node_set_attr_string(g, n, "s", "SAME_UPPER"));
    CHECK_OK(qf_node_set_attr_ints(g, n, "is", is, 3));
    CHECK_OK(qf_node_set_attr_floats(g, n, "fs", fs, 2));
    CHECK_OK(qf_node_set_attr_ints(g, n, "empty", NULL, 0));
    int64_t d[] = {2};
    qf_tensor t;
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 1, d));
    ((float *)t.data)[1] = 3.5f;
    CHECK_OK(qf_node_set_attr_tensor(g, n, "value", &t));
    CHECK(t.data == NULL);
    CHECK(n->nattrs == 7);

    CHECK(qf_node_attr_int(n, "k", 0) == -42);
    CHECK(qf_node_attr_float(n, "f", 0) == 1e-5f);
    CHECK(strcmp(qf_node_attr_string(n, "s", ""), "SAME_UPPER") == 0);
    const int64_t *gi = qf_node_attr_ints(n, "is", &cnt);
    CHECK(cnt == 3 && gi && gi[0] == 1 && gi[1] == -2 && gi[2] == 3);
    const float *gf = qf_node_attr_floats(n, "fs", &cnt);
    CHECK(cnt == 2 && gf && gf[0] == 0.25f && gf[1] == -1.5f);
    qf_node_attr_ints(n, "empty", &cnt);
    CHECK(cnt == 0 && qf_node_attr(n, "empty") != NULL);
    const qf_attr *ta = qf_node_attr(n, "value");
    CHECK(ta && ta->type == QF_ATTR_TENSOR && ta->t && ((float *)ta->t->data)[1] == 3.5f);
    /* A read of the wrong type gives the default. */
    CHECK(qf_node_attr_int(n, "f", 9) == 9);
    CHECK(qf_node_attr_float(n, "k", 2.0f) == 2.0f);
    qf_node_attr_ints(n, "k", &cnt);
    CHECK(cnt == 0);

    /* Overwriting keeps one attribute, possibly of a new type (the tensor
     * payload replaced here must be freed: the allocator checks). */
    CHECK_OK(qf_node_set_attr_int(g, n, "k", 5));
    CHECK_OK(qf_node_set_attr_float(g, n, "value", 2.0f));
    CHECK(n->nattrs == 7 && qf_node_attr_int(n, "k", 0) == 5 && qf_node_attr_float(n, "value", 0) == 2.0f);
    qf_node_remove_attr(n, "s");
    CHECK(n->nattrs == 6 && qf_node_attr(n, "s") == NULL && qf_node_attr_int(n, "k", 0) == 5);
    qf_node_remove_attr(n, "absent");
    CHECK(n->nattrs == 6);
    /* Many attributes: the array grows. */
    char name[16];
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "a%d", i);
        CHECK_OK(qf_node_set_attr_int(g, n, name, i));
    }
    CHECK(n->nattrs == 46 && qf_node_attr_int(n, "a0", -1) == 0 && qf_node_attr_int(n, "a39", -1) == 39);
    CHECK(qf_node_attr_int(n, "k", 0) == 5);
    /* A tensor attribute still set when the graph is freed is freed with it. */
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 1, d));
    CHECK_OK(qf_node_set_attr_tensor(g, r0, "value", &t));
    qf_graph_free(g);
}

static void test_bind_input(void)
{
    qf_graph *g = NULL;
    CHECK_OK(qf_graph_init(&g));
    if (!g) return;
    int64_t dx[] = {-1, 6}, dsh[] = {2};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 2, dx);
    qf_value *sh = qf_graph_add_input(g, "shape", QF_DTYPE_I64, 1, dsh);
    qf_value *in[2] = {x, sh};
    qf_node *r = qf_graph_add_node(g, QF_OP_RESHAPE, "reshape", 2, in, 1);
    qf_graph_add_output(g, r->outputs[0]);

    int64_t wrong[] = {2, 7}, ok[] = {2, 6};
    CHECK_STATUS(qf_graph_set_input_shape(g, 0, 2, wrong), QF_ERR_SHAPE);
    CHECK_MSG("'x'");
    CHECK_STATUS(qf_graph_set_input_shape(g, 0, 1, ok), QF_ERR_SHAPE);
    CHECK_STATUS(qf_graph_set_input_shape(g, 5, 2, ok), QF_ERR_INVALID);
    CHECK_OK(qf_graph_set_input_shape(g, 0, 2, ok));
    CHECK(x->type.dims[0] == 2 && x->type.dims[1] == 6);

    qf_tensor t;
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_F32, 1, dsh));
    CHECK_STATUS(qf_graph_bind_input(g, 1, &t), QF_ERR_INVALID); /* wrong dtype */
    CHECK(g->ninputs == 2 && t.data != NULL);
    qf_tensor_free(&t);
    CHECK_OK(qf_tensor_init(&t, QF_DTYPE_I64, 1, dsh));
    ((int64_t *)t.data)[0] = 3;
    ((int64_t *)t.data)[1] = 4;
    CHECK_OK(qf_graph_bind_input(g, 1, &t));
    CHECK(t.data == NULL);
    CHECK(g->ninputs == 1 && g->inputs[0] == x);
    CHECK(sh->kind == QF_VALUE_CONSTANT && qf_value_is_const(sh));
    CHECK(((int64_t *)sh->type.data)[1] == 4 && has_use(sh, r, 1));
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

static void test_classify_constants(void)
{
    qf_graph *g = NULL;
    CHECK_OK(qf_graph_init(&g));
    if (!g) return;
    int64_t dx[] = {1, 2, 4, 4}, dw[] = {3, 2, 1, 1}, dc[] = {3};
    qf_value *x = qf_graph_add_input(g, "x", QF_DTYPE_F32, 4, dx);
    qf_tensor t;
    qf_value *k[7];
    const char *names[] = {"w", "b", "gamma", "beta", "mean", "var"};
    qf_tensor_init(&t, QF_DTYPE_F32, 4, dw);
    k[0] = qf_graph_add_constant(g, names[0], QF_VALUE_CONSTANT, &t);
    for (int i = 1; i < 6; i++) {
        qf_tensor_init(&t, QF_DTYPE_F32, 1, dc);
        k[i] = qf_graph_add_constant(g, names[i], QF_VALUE_CONSTANT, &t);
    }
    qf_value *cin[3] = {x, k[0], k[1]};
    qf_node *conv = qf_graph_add_node(g, QF_OP_CONV, "conv", 3, cin, 1);
    qf_value *bin[5] = {conv->outputs[0], k[2], k[3], k[4], k[5]};
    qf_node *bn = qf_graph_add_node(g, QF_OP_BATCH_NORM, "bn", 5, bin, 1);
    /* A shape operand stays a constant. */
    int64_t ds[] = {2};
    qf_tensor_init(&t, QF_DTYPE_I64, 1, ds);
    ((int64_t *)t.data)[0] = 1;
    ((int64_t *)t.data)[1] = -1;
    k[6] = qf_graph_add_constant(g, "shape", QF_VALUE_CONSTANT, &t);
    qf_value *rin[2] = {bn->outputs[0], k[6]};
    qf_node *rs = qf_graph_add_node(g, QF_OP_RESHAPE, "rs", 2, rin, 1);
    qf_graph_add_output(g, rs->outputs[0]);
    qf_graph_classify_constants(g);
    CHECK(k[0]->kind == QF_VALUE_PARAMETER && k[1]->kind == QF_VALUE_PARAMETER);
    CHECK(k[2]->kind == QF_VALUE_PARAMETER && k[3]->kind == QF_VALUE_PARAMETER);
    CHECK(k[4]->kind == QF_VALUE_BUFFER && k[5]->kind == QF_VALUE_BUFFER);
    CHECK(k[6]->kind == QF_VALUE_CONSTANT && x->kind == QF_VALUE_INPUT);
    for (int i = 0; i < 7; i++) CHECK(qf_value_is_const(k[i]));
    CHECK_OK(qf_graph_verify(g));
    qf_graph_free(g);
}

#define RUN_COUNTED(fn)                                                                  \
    do {                                                                                 \
        qf_check_count_allocs(&alloc);                                                   \
        RUN(fn);                                                                         \
        if (alloc.live != 0) {                                                           \
            printf("FAIL %s: %ld blocks not freed\n", #fn, alloc.live);                  \
            qf_check_failed++;                                                           \
        }                                                                                \
        qf_set_allocator(NULL, NULL);                                                    \
    } while (0)

int main(void)
{
    RUN_COUNTED(test_build);
    RUN_COUNTED(test_use_lists_set_input);
    RUN_COUNTED(test_replace_uses_and_remove);
    RUN_COUNTED(test_toposort);
    RUN_COUNTED(test_verifier_catches);
    RUN_COUNTED(test_insert_node_oom);
    RUN_COUNTED(test_verify_shapes_leaves_graph);
    RUN_COUNTED(test_dce);
    RUN_COUNTED(test_names);
    RUN_COUNTED(test_attributes);
    RUN_COUNTED(test_bind_input);
    RUN_COUNTED(test_classify_constants);
    return qf_check_report();
}
