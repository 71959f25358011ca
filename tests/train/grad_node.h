/* Helpers of the pool / layout gradient checks (test_grad_pool.c,
 * test_grad_layout.c): a deterministic uniform generator and a one-node graph
 * whose slots are graph inputs (fed from tensors) or int64 / float32
 * constants, so that shape operands (Reshape's shape, Slice's starts, Pad's
 * pads, axes) are constants as the kernels need. */
#ifndef QF_TEST_GRAD_NODE_H
#define QF_TEST_GRAD_NODE_H

#include <string.h>

#include "qfold/exec.h"
#include "qfold/schema.h"
#include "tools/qf_check.h"
#include "tools/qf_node_run.h"

static uint64_t grad_rng = 0x9e3779b97f4a7c15ull;

static float grad_rnd(void) /* uniform in [-1, 1) */
{
    grad_rng = grad_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(grad_rng >> 11) / (double)(1ull << 52) - 1.0);
}

static void grad_fill(qf_tensor *t, float scale)
{
    float *p = t->data;
    for (int64_t i = 0, n = qf_tensor_numel(t); i < n; i++) p[i] = scale * grad_rnd();
}

typedef enum { SLOT_NONE, SLOT_INPUT, SLOT_I64, SLOT_F32 } grad_slot_kind;

/* One input slot of the node: a graph input fed from `t`, an int64 1-D
 * constant of `n` values `iv`, a float32 scalar constant `f`, or omitted. */
typedef struct grad_slot {
    grad_slot_kind kind;
    const qf_tensor *t;
    const int64_t *iv;
    int n;
    float f;
} grad_slot;

#define GS_IN(tp) ((grad_slot){.kind = SLOT_INPUT, .t = (tp)})
#define GS_I64(...)                                                                                \
    ((grad_slot){.kind = SLOT_I64, .iv = (const int64_t[]){__VA_ARGS__},                           \
                 .n = (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))})
#define GS_F32(v) ((grad_slot){.kind = SLOT_F32, .f = (v)})
#define GS_NONE ((grad_slot){.kind = SLOT_NONE})

/* A graph of opset `opset` with one node `op` over `nin` slots and `nout`
 * outputs, ready in r (attributes on r->n, then qf_node_runner_run). */
static void grad_node(qf_node_runner *r, qf_op op, int64_t opset, int nin, const grad_slot *slots, int nout)
{
    qf_graph *g;
    REQUIRE_OK(qf_graph_init(&g));
    g->opset = opset;
    qf_value *ins[QF_NODE_RUN_MAX_IN] = {0};
    const qf_tensor *feed[QF_NODE_RUN_MAX_IN] = {0};
    int nfeed = 0;
    for (int i = 0; i < nin; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        qf_tensor t;
        switch (slots[i].kind) {
        case SLOT_NONE: break;
        case SLOT_INPUT:
            ins[i] = qf_graph_add_input(g, name, slots[i].t->dtype, slots[i].t->ndim, slots[i].t->dims);
            feed[nfeed++] = slots[i].t;
            break;
        case SLOT_I64: {
            int64_t d = slots[i].n;
            REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_I64, 1, &d));
            if (d) memcpy(t.data, slots[i].iv, sizeof(int64_t) * (size_t)d);
            ins[i] = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
            break;
        }
        case SLOT_F32:
            REQUIRE_OK(qf_tensor_init(&t, QF_DTYPE_F32, 0, NULL));
            *(float *)t.data = slots[i].f;
            ins[i] = qf_graph_add_constant(g, name, QF_VALUE_CONSTANT, &t);
            break;
        }
        REQUIRE(slots[i].kind == SLOT_NONE || ins[i], "slot %d", i);
    }
    qf_node *n = qf_graph_add_node(g, op, "n0", nin, ins, nout);
    REQUIRE(n, "add node");
    for (int j = 0; j < nout; j++) REQUIRE_OK(qf_graph_add_output(g, n->outputs[j]));
    REQUIRE_OK(qf_node_runner_init_node(r, g, n, feed));
    r->owns_graph = 1;
}

/* Forward, then the gradient check of the float graph inputs in `slots`
 * (0: all), `what` naming the case. */
static void grad_run_check(qf_node_runner *r, uint32_t slots, bool training, const qf_gradcheck_opts *o,
                           const char *what)
{
    qf_status st = qf_node_runner_run(r);
    CHECKF(st == QF_OK, "%s: forward: %s", what, qf_error_message());
    if (st == QF_OK) {
        printf("%s\n", what);
        CHECKF(qf_node_gradcheck(r, slots, training, 11, o, stdout), "%s backward", what);
    }
    qf_node_runner_free(r);
}

#endif
