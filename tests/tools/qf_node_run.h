/* Run one node's float forward kernel in a test, outside any plan.
 *
 *   qf_node_runner r;
 *   const qf_tensor *in[2] = {&a, &b};
 *   QF_TRY(qf_node_runner_init(&r, QF_OP_GEMM, "n0", 2, in, 1, 13));
 *   qf_node_set_attr_int(r.g, r.n, "transB", 1);       // attributes on r.n
 *   qf_status st = qf_node_runner_run(&r);              // infer, allocate, poison, run
 *   ... compare r.out[0] with a reference ...
 *   qf_node_runner_free(&r);
 *
 * Or take a node the test built itself (constants as initializers, graph
 * inputs fed from tensors in graph-input order):
 *
 *   qf_node_runner_init_node(&r, g, n, feed);            // r does not own g
 *
 * qf_node_runner_run infers shapes, verifies the graph, allocates each output
 * with the inferred dtype and shape, fills it with a poison byte pattern
 * (0x7f: 3.4e38 in float32, large values in the integer types) so that a
 * kernel that leaves elements unwritten is caught by the comparison, and runs
 * the node's float forward kernel through qf_node_run_kernel. Errors of
 * inference and of the kernel come back as their status, message intact, so
 * tests can check them.
 */
#ifndef QF_NODE_RUN_H
#define QF_NODE_RUN_H

#include <stdio.h>

#include "qfold/graph.h"
#include "tools/qf_gradcheck.h"

#define QF_NODE_RUN_MAX_IN  16
#define QF_NODE_RUN_MAX_OUT 8
#define QF_NODE_RUN_POISON  0x7f

typedef struct qf_node_runner {
    qf_graph *g;    /* the graph holding the node */
    qf_node *n;     /* the node to run */
    int owns_graph; /* built by qf_node_runner_init: freed with the runner */
    const qf_tensor *feed[QF_NODE_RUN_MAX_IN]; /* data of the graph inputs, in graph-input order */
    int nout;                                  /* outputs allocated so far */
    qf_tensor out[QF_NODE_RUN_MAX_OUT];        /* the node's outputs (owned) */
} qf_node_runner;

/* A graph of opset `opset` with one node of `op` named `name`, reading graph
 * inputs x0, x1, ... shaped and typed like in[i] (NULL: an omitted optional
 * input), with `nout` outputs that are graph outputs. The tensors in[] are
 * borrowed until qf_node_runner_free. Set attributes on r->n afterwards. */
qf_status qf_node_runner_init(qf_node_runner *r, qf_op op, const char *name, int nin,
                              const qf_tensor *const *in, int nout, int64_t opset);

/* Run node n of the caller's graph g (not freed by the runner): graph inputs
 * take their data from feed[k] (k: index in g->inputs), constants their
 * payload. */
qf_status qf_node_runner_init_node(qf_node_runner *r, qf_graph *g, qf_node *n,
                                   const qf_tensor *const *feed);

/* Infer, verify, allocate and poison the outputs, run the kernel. The
 * outputs are r->out[0 .. r->n->noutputs - 1]. May be called once. */
qf_status qf_node_runner_run(qf_node_runner *r);

/* Free the outputs and, if the runner built it, the graph. */
void qf_node_runner_free(qf_node_runner *r);

/* The only call of a forward kernel in the test tools: run node n (opset
 * `opset`) on in[] (NULL: omitted optional input) into out[], whose dtype,
 * shape and data the caller has set up. Same contract as the library's
 * qf_node_eval. */
qf_status qf_node_run_kernel(const qf_node *n, int64_t opset, const qf_tensor *const *in,
                             qf_tensor *const *out);


/* --- the backward kernel of the runner's node, checked -----------------------
 *
 *   REQUIRE_OK(qf_node_runner_run(&r));                  // forward ran
 *   qf_gradcheck_opts o = {.eps = 1e-2};
 *   CHECK(qf_node_gradcheck(&r, 0, false, 42, &o, stdout)); // every float input
 *
 * Draws an upstream gradient dy for every float output (uniform [-1, 1),
 * from `seed`), runs the node's backward (qf_node_eval_grad, in training
 * mode when `training`) and checks d sum(dy * y) / d x for every float input
 * slot in `slots` (bit i: slot i; 0: every float input) against central
 * differences of the forward (tests/tools/qf_gradcheck.h: its kink guard,
 * tolerances from opts, may be NULL). Inputs are copied, never changed.
 * Prints one line per slot to `log` (may be NULL). True when every checked
 * slot passed and at least one element was compared. */
bool qf_node_gradcheck(qf_node_runner *r, uint32_t slots, bool training, uint64_t seed,
                       const qf_gradcheck_opts *opts, FILE *log);

#endif
