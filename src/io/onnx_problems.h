/* Private: problems found while importing a model, collected instead of
 * failing at the first one (src/io/onnx_problems.c).
 *
 * The importer reports every problem through qf_problems_add. An op qfold
 * does not know is a problem the import carries (the node becomes an
 * opaque node: the model loads, it cannot be run). Other problems (a dtype
 * or an opset qfold does not handle) end the import, unless the caller
 * asked to collect (`qfold inspect`, through qf_onnx_load_collect): then
 * qf_problems_add records the problem and returns QF_OK, and the reporter
 * goes on with a stand-in (say, the closest opset it handles, or the value
 * left without a type) so that later problems are found too.
 *
 *   // where the importer meets an element type it cannot read:
 *   QF_TRY(qf_problems_add(im->problems, QF_PROBLEM_DTYPE, "float16", "init 'w'",
 *                          qf_error(QF_ERR_UNSUPPORTED, "initializer 'w' has dtype float16")));
 *   // collecting: recorded, go on with a stand-in; otherwise: the error
 *
 * qf_problems_print lists them grouped by kind and key, with counts:
 *   unsupported ops: 3 x com.microsoft.FusedGemm (nodes a, b, c), 1 x Foo (node d)
 */
#ifndef QF_ONNX_PROBLEMS_H
#define QF_ONNX_PROBLEMS_H

#include <stdbool.h>
#include <stdio.h>

#include "qfold/graph.h"

typedef enum qf_problem_kind {
    QF_PROBLEM_OP = 0, /* an op qfold does not know: key "domain.op_type" */
    QF_PROBLEM_DTYPE,  /* an element type: key its name ("float16") */
    QF_PROBLEM_OPSET,  /* an opset: key "ai.onnx 5" */
    QF_PROBLEM_OTHER,  /* anything else that keeps a model from running */
    QF_PROBLEM_KINDS
} qf_problem_kind;

typedef struct qf_problem {
    qf_problem_kind kind;
    char *key;     /* what groups it */
    char *where;   /* the node / value / field it was found at ("" for the model) */
    char *message; /* the error the import would have failed with ("" for carried ones) */
} qf_problem;

typedef struct qf_problems {
    bool collect; /* keep importing past problems that would end the import */
    qf_problem *items;
    int n, cap;
} qf_problems;

/* Record a problem (key and where copied). err: QF_OK for a problem the
 * import carries (an opaque node); otherwise the status the import fails
 * with, its message recorded by qf_error. Returns QF_OK when the import
 * goes on (a carried problem, or collecting), else err. Out of memory is
 * returned as such. */
qf_status qf_problems_add(qf_problems *p, qf_problem_kind kind, const char *key, const char *where,
                          qf_status err);
void qf_problems_free(qf_problems *p);
/* One line per kind, groups in first-seen order, "N x key (node a, b)". */
void qf_problems_print(const qf_problems *p, FILE *f, const char *indent);

/* qf_onnx_load collecting problems into *p (p->collect set by the call):
 * *out is the graph when the import could finish (with stand-ins for the
 * collected problems: it must not be run or written), NULL otherwise. The
 * status is that of the import; problems may be recorded either way. */
qf_status qf_onnx_load_collect(const char *path, qf_problems *p, qf_graph **out);

/* The symbolic name the model gave dim i of graph input / output `value`
 * (of rank ndim), NULL when it gave none (src/io/onnx_keep.c). `fuse
 * --verify` sizes the dims that share a name alike. */
const char *qf_onnx_dim_name(const qf_graph *g, const char *value, int ndim, int i);
/* The shape the model declared for `value` (a graph input / output or a
 * value_info entry; -1 for a dim it gave no number): false when it declared
 * none. `fuse --verify` sizes unknown input dims so that shape inference
 * reproduces the declared dims of the values after them. */
bool qf_onnx_declared_shape(const qf_graph *g, const char *value, int *ndim, int64_t *dims);

#endif
