/* Shared by the backward kernels' gradchecks of the linear and elementwise
 * families: one node over inputs that are graph inputs or constants
 * (initializers), checked by qf_node_gradcheck for every float input.
 *
 *   qf_tensor a = grad_case_tensor(2, (int64_t[]){3, 4}, 1.0f, 0.0f);
 *   grad_case c = {.op = QF_OP_MUL, .nin = 2, .in = {&a, &b}, .consts = 1u << 1};
 *   grad_case_check(&c, "mul [3,4] * const [4]");
 *
 * Header-only (static functions): each test file includes it once. */
#ifndef QF_TEST_GRAD_CASE_H
#define QF_TEST_GRAD_CASE_H

#include <stdio.h>
#include <string.h>

#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

static uint64_t grad_case_rng = 0x9e3779b97f4a7c15ull;

static float grad_case_rnd(void) /* uniform in [-1, 1) */
{
    grad_case_rng = grad_case_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(grad_case_rng >> 11) / (double)(1ull << 52) - 1.0);
}

/* A float32 tensor of shape dims, uniform in [-scale, scale), moved away
 * from 0 by `away` (|v| >= away: a divisor). */
static qf_tensor grad_case_tensor(int ndim, const int64_t *dims, float scale, float away)
{
    qf_tensor t;
    if (qf_tensor_init(&t, QF_DTYPE_F32, ndim, dims) != QF_OK) {
        memset(&t, 0, sizeof t);
        QF_FAIL("out of memory");
        return t;
    }
    float *p = t.data;
    for (int64_t i = 0, n = qf_tensor_numel(&t); i < n; i++) {
        float v = scale * grad_case_rnd();
        p[i] = v < 0 ? v - away : v + away;
    }
    return t;
}

typedef struct grad_case {
    qf_op op;
    int nin;
    const qf_tensor *in[4]; /* NULL: an omitted optional input */
    uint32_t consts;        /* bit i: slot i is a constant (a parameter), else a graph input */
    int64_t opset;          /* 0: 13 */
    /* attributes */
    const char *int_names[4];
    int64_t int_vals[4];
    const char *float_names[4];
    float float_vals[4];
    double eps; /* 0: 1e-2 */
} grad_case;

/* Build the one-node graph, run it, check every float input's gradient
 * against central differences. */
static void grad_case_check(const grad_case *c, const char *what)
{
    qf_graph *g = NULL;
    QF_REQUIRE_OK(qf_graph_init(&g));
    g->opset = c->opset ? c->opset : 13;
    qf_value *vals[4] = {0};
    const qf_tensor *feed[4] = {0};
    int nfeed = 0;
    for (int i = 0; i < c->nin; i++) {
        const qf_tensor *t = c->in[i];
        if (!t) continue;
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        if ((c->consts >> i) & 1u) {
            qf_tensor copy;
            QF_REQUIRE_OK(qf_tensor_init(&copy, t->dtype, t->ndim, t->dims));
            memcpy(copy.data, t->data, qf_tensor_nbytes(t));
            vals[i] = qf_graph_add_constant(g, name, QF_VALUE_PARAMETER, &copy);
        } else {
            vals[i] = qf_graph_add_input(g, name, t->dtype, t->ndim, t->dims);
            feed[nfeed++] = t;
        }
        QF_REQUIRE(vals[i], "adding input %d", i);
    }
    qf_node *n = qf_graph_add_node(g, c->op, "n0", c->nin, vals, 1);
    QF_REQUIRE(n, "adding the node");
    QF_REQUIRE_OK(qf_graph_add_output(g, n->outputs[0]));
    for (int i = 0; i < 4 && c->int_names[i]; i++) QF_REQUIRE_OK(qf_node_set_attr_int(g, n, c->int_names[i], c->int_vals[i]));
    for (int i = 0; i < 4 && c->float_names[i]; i++)
        QF_REQUIRE_OK(qf_node_set_attr_float(g, n, c->float_names[i], c->float_vals[i]));
    qf_node_runner r;
    QF_REQUIRE_OK(qf_node_runner_init_node(&r, g, n, feed));
    QF_CHECK_OK(qf_node_runner_run(&r));
    qf_gradcheck_opts o = {.eps = c->eps ? c->eps : 1e-2};
    printf("-- %s\n", what);
    QF_CHECKF(qf_node_gradcheck(&r, 0, false, 5, &o, stdout), "%s backward", what);
    qf_node_runner_free(&r);
    qf_graph_free(g);
}

#endif
