/* qfold — graph rewrites and the pass manager.
 *
 *   qf_pass_report *r;
 *   QF_TRY(qf_pipeline_run(g, "ptq", &(qf_pass_options){.verify = true}, &r));
 *   qf_pass_report_print(r, stderr);        // per pass: changed, rewrites, skips
 *   qf_pass_report_free(r);
 *
 * A pass is {name, summary, run}. `run` rewrites the graph and records, in its
 * qf_pass_ctx, how many rewrites it made and every node it skipped with the
 * reason ("conv output has 2 users"). The manager runs a list of passes once
 * or to a fixpoint, verifies the graph after each pass, runs dead-code
 * elimination at the end and returns one report.
 */
#ifndef QFOLD_PASS_H
#define QFOLD_PASS_H

#include <stdbool.h>
#include <stdio.h>

#include "qfold/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qf_pass_ctx qf_pass_ctx;

typedef struct qf_pass {
    const char *name;     /* "fuse_batch_norm" */
    const char *summary;  /* one line for `qfold passes` */
    /* Rewrite g. Set *changed when the graph changed. Record rewrites and
     * skips through qf_pass_rewrite / qf_pass_skip. */
    qf_status (*run)(qf_graph *g, qf_pass_ctx *ctx, bool *changed);
    /* The pass reads every payload it needs through qf_value_load (or
     * handles one left in the model file, graph.h); for any other pass the
     * pass manager reads them all first (qf_graph_load_all). */
    bool deferred;
} qf_pass;

typedef struct qf_pipeline {
    const char *name;     /* "ptq" */
    const char *summary;
    const char *const *passes; /* NULL-terminated pass names */
} qf_pipeline;

typedef struct qf_pass_options {
    bool verify;          /* run qf_graph_verify after every pass (always on in tests) */
    bool fixpoint;        /* repeat the list until no pass changes the graph */
    int max_iterations;   /* fixpoint bound; 0 = 8 */
    void *user;           /* handed to every pass (qf_pass_user): a layer's session state, e.g. the
                           * quantizer's profile and calibration; NULL for the built-in passes */
} qf_pass_options;

/* What a rewrite did to the node it names, so a caller can total the
 * report (BatchNorms folded, nodes removed) without knowing pass names. */
typedef enum qf_pass_action {
    QF_PASS_REWROTE = 0,  /* changed or replaced by an equivalent node (canonicalize) */
    QF_PASS_FOLDED,       /* removed; its computation absorbed by a neighbour (BN into a conv) */
    QF_PASS_DECOMPOSED,   /* replaced by several simpler nodes (BN -> Mul + Add) */
    QF_PASS_REMOVED,      /* removed as dead code (dce) */
    QF_PASS_ACTION_COUNT
} qf_pass_action;

/* One record of what a pass did to one node. */
typedef struct qf_pass_event {
    const char *node;     /* node name (owned by the report) */
    const char *op;       /* ONNX / qfold op name */
    const char *reason;   /* skips: why; rewrites: what was done */
    const char *detail;   /* optional JSON object text with numbers (diagnostics), or NULL */
    qf_op node_op;        /* the node's op; QF_OP_COUNT for a graph-level event */
    qf_pass_action action; /* rewrites: what happened to the node; skips: QF_PASS_REWROTE */
} qf_pass_event;

typedef struct qf_pass_result {
    const char *pass;
    bool changed;
    int rewrites;
    qf_pass_event *rewritten; int nrewritten;
    qf_pass_event *skipped; int nskipped;
    int actions[QF_PASS_ACTION_COUNT]; /* rewrites by action (they sum to `rewrites`) */
    double seconds;
    int iteration;
} qf_pass_result;

typedef struct qf_pass_report {
    qf_pass_result *results;  /* one per pass run, in run order (all iterations) */
    int nresults;
    int dce_removed;          /* nodes removed as dead code (QF_PASS_REMOVED) over all runs */
    double seconds;
    const char *pipeline;     /* pipeline name, or NULL for an explicit list */
    int iterations;           /* times the list ran (1 unless opt->fixpoint) */
    bool converged;           /* fixpoint: the last iteration changed nothing */
} qf_pass_report;

/* Registry. */
/* Register passes and pipelines of a layer above passes (quant, train), so
 * that they run by name and `qfold passes` lists them. Idempotent for the
 * same objects; QF_ERR_INVALID for a name taken by another. Call it before
 * running passes on other threads (registration locks, lookups do not). */
qf_status qf_pass_register(const qf_pass *const *passes, int npasses, const qf_pipeline *const *pipelines,
                           int npipelines);
/* The options' `user` pointer, for a pass that needs session state. */
void *qf_pass_user(const qf_pass_ctx *ctx);
const qf_pass *qf_pass_find(const char *name);
const qf_pass *const *qf_pass_list(int *count);
const qf_pipeline *qf_pipeline_find(const char *name);
const qf_pipeline *const *qf_pipeline_list(int *count);

/* Called by passes. `fmt` is the reason, printf-style. Call them while the
 * node is still in the graph (its name and op are copied into the report).
 * n may be NULL for a graph-level event. detail_json is NULL or one JSON
 * value (an object with numbers: per-channel diagnostics), copied verbatim.
 * qf_pass_rewrite records a QF_PASS_REWROTE; qf_pass_rewrite_as says what
 * happened to n (folded, decomposed, removed). */
void qf_pass_rewrite(qf_pass_ctx *ctx, const qf_node *n, const char *detail_json, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void qf_pass_rewrite_as(qf_pass_ctx *ctx, const qf_node *n, qf_pass_action action, const char *detail_json,
                        const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
void qf_pass_skip(qf_pass_ctx *ctx, const qf_node *n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The walk a rewrite pass runs over the nodes of one op (the BN passes):
 * for every node of `op` in graph order, as the graph was when the walk
 * started, match(g, ctx, n, user) decides; it returns false to pass n by
 * (recording why with qf_pass_skip when that is worth a line in the
 * report), true to have apply(g, ctx, n, user) rewrite it. apply may remove
 * n, insert nodes and remove other nodes: a node removed before its turn is
 * passed over, and nodes added during the walk are not visited. `user` is
 * handed to both (e.g. the match state apply reads). *changed (may be NULL)
 * is set to true when an apply ran; the walk stops at the first status
 * apply returns. */
typedef bool (*qf_pass_match_fn)(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user);
typedef qf_status (*qf_pass_apply_fn)(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user);
qf_status qf_pass_for_each_op(qf_graph *g, qf_pass_ctx *ctx, qf_op op, qf_pass_match_fn match,
                              qf_pass_apply_fn apply, void *user, bool *changed);

/* Run the named passes (NULL-terminated) / a named pipeline. *out gets the
 * report (also on failure, when it could be built); free it. */
qf_status qf_passes_run(qf_graph *g, const char *const *names, const qf_pass_options *opt,
                        qf_pass_report **out);
qf_status qf_pipeline_run(qf_graph *g, const char *pipeline, const qf_pass_options *opt,
                          qf_pass_report **out);
/* Same with pass objects instead of names (tests, out-of-tree passes). */
qf_status qf_passes_run_list(qf_graph *g, const qf_pass *const *passes, int npasses,
                             const qf_pass_options *opt, qf_pass_report **out);
/* The report as one JSON object (text owned by the caller: qf_free). `extra`
 * is NULL or JSON members ("\"verify\": {...}") added to the top-level object. */
qf_status qf_pass_report_json(const qf_pass_report *r, const char *extra, char **out, size_t *len);
void qf_pass_report_print(const qf_pass_report *r, FILE *f);
/* Nodes of op `op` (QF_OP_COUNT: of any op) that the passes recorded with
 * `action`, over every pass and iteration: e.g. the BatchNorms decomposed,
 * qf_pass_report_count(r, QF_PASS_DECOMPOSED, QF_OP_BATCH_NORM). */
int qf_pass_report_count(const qf_pass_report *r, qf_pass_action action, qf_op op);
void qf_pass_report_free(qf_pass_report *r);

/* --- constant folding (src/passes/fold_constants.c; also the `fold_constants` pass) */
/* Evaluate one node whose inputs are all constants (or a Shape of a known
 * shape) with its own kernel (qf_node_eval) and store its outputs as
 * constants: the node is removed and its outputs become constant values of
 * the same names. */
qf_status qf_graph_fold_node(qf_graph *g, qf_node *n);
/* Fold every node whose inputs are constant (and Shape of a known shape),
 * except QuantizeLinear / DequantizeLinear, nodes whose output would blow up
 * constant memory, and nodes reading several float initializers or one that
 * others read too (a node that is a weight's only reader, e.g. Transpose(W),
 * folds and the result keeps the weight's name); returns the number folded
 * in *count (may be NULL). Import runs it on every model. */
qf_status qf_graph_fold_constants(qf_graph *g, int *count);

#ifdef __cplusplus
}
#endif
#endif
