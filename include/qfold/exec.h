/* qfold — the reference executor.
 *
 *   qf_plan *p;
 *   QF_TRY(qf_plan_init(&p, g));            // order, shapes, buffers: once
 *   const qf_tensor *in[] = {&x};
 *   QF_TRY(qf_plan_run(p, in, 1));          // as often as needed
 *   const qf_tensor *y = qf_plan_output(p, 0);  // valid until the next run
 *   qf_plan_free(p);
 *
 * The plan sorts the graph, infers every shape from the graph inputs' shapes
 * (all must be known), prepares every node once (attributes decoded,
 * geometry checked; the state is kept for the runs), then lays every
 * activation out in one arena by
 * liveness (a buffer is reused once its last reader has run). Kernels get
 * their scratch memory from the plan; nothing is allocated per run.
 * The graph must outlive the plan and must not change while the plan exists.
 */
#ifndef QFOLD_EXEC_H
#define QFOLD_EXEC_H

#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_plan qf_plan;

qf_status qf_plan_init(qf_plan **out, qf_graph *g);
void qf_plan_free(qf_plan *p);

/* inputs in graph input order; dtype and shape must match the graph's. */
qf_status qf_plan_run(qf_plan *p, const qf_tensor *const *inputs, int ninputs);
int qf_plan_num_outputs(const qf_plan *p);
/* A borrowed view of output i (graph output order). */
const qf_tensor *qf_plan_output(const qf_plan *p, int i);
/* Bytes of the activation arena (planned) and the sum of all activations
 * (unplanned) — the ratio says what the planner saved. */
size_t qf_plan_arena_bytes(const qf_plan *p);
size_t qf_plan_naive_bytes(const qf_plan *p);

/* Run node n alone (its shapes inferred): prepare it, allocate its scratch,
 * run its float forward kernel. in: n->ninputs tensors (NULL for an omitted
 * optional input); out: n->noutputs tensors set up by the caller (dtype,
 * shape, data). Allocates only transient state. Errors name the node. */
qf_status qf_node_eval(const qf_node *n, int64_t opset, const qf_tensor *const *in, qf_tensor *const *out);

/* Evaluate one node whose inputs are all constants and store its outputs as
 * constants (used by import to fold shape-computation chains). The node is
 * removed and its outputs become constant values of the same names. */
qf_status qf_graph_fold_node(qf_graph *g, qf_node *n);
/* Fold every node whose inputs are constant (and Shape of a known shape),
 * except QuantizeLinear / DequantizeLinear, nodes whose output would blow up
 * constant memory, and nodes reading several float initializers or one that
 * others read too (a node that is a weight's only reader, e.g. Transpose(W),
 * folds and the result keeps the weight's name); returns the number folded
 * in *count (may be NULL). */
qf_status qf_graph_fold_constants(qf_graph *g, int *count);

#ifdef __cplusplus
}
#endif
#endif
