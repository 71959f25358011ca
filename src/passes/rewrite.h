/* Private helpers every graph rewrite may use (the BN passes today, the QAT
 * passes next): reasons for a skip, guards on constants, installing a new
 * constant payload, and splicing a node out. Nothing here knows an op.
 *
 *   static bool match(qf_graph *g, qf_pass_ctx *ctx, qf_node *n, void *user)
 *   {
 *       char why[256];
 *       if (my_match(g, n, user, why, sizeof why)) {  // returns qf_rewrite_why(...)
 *           qf_pass_skip(ctx, n, "%s", why);
 *           return false;
 *       }
 *       return true;
 *   }
 *   ...
 *   QF_TRY(qf_pass_for_each_op(g, ctx, QF_OP_BATCH_NORM, match, apply, &state, changed));
 *
 * The walk itself (qf_pass_for_each_op) is public, in qfold/pass.h.
 */
#ifndef QF_PASSES_REWRITE_H
#define QF_PASSES_REWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qfold/graph.h"

/* printf into why[size] (truncated, always terminated) and return true, so
 * a matcher that returns "has a reason to skip" can `return qf_rewrite_why(...)`. */
bool qf_rewrite_why(char *why, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* True when v is non-NULL and a float32 constant (data present). */
bool qf_rewrite_is_f32_const(const qf_value *v);

/* QF_ERR_NUMERIC naming node n, the tensor and the first bad index when
 * constant v holds a NaN or an Inf; QF_OK otherwise (and for non-float v).
 * Call it before the first write, so a rewrite that fails leaves the graph
 * as it was. */
qf_status qf_rewrite_check_finite(const qf_value *v, const qf_node *n);

/* The only node that reads v, or NULL when v is NULL, is a graph output, or
 * has no or several uses. *slot (may be NULL) gets the input slot it reads. */
qf_node *qf_rewrite_sole_user(const qf_value *v, int *slot);

/* True when n may overwrite constant v in place: v is a constant whose
 * payload it owns or alone borrows (qf_tensor.writable: its slice of the
 * buffer the model was read into), is not a graph output, and n reading it
 * at `slot` is its only use (a tied weight read elsewhere must keep its
 * value). Any other payload is copied before it is rewritten. */
bool qf_rewrite_can_write_in_place(const qf_value *v, const qf_node *n, int slot);

/* Install t as input `slot` of n; takes t's data (t is left empty, also on
 * failure). When the current input is a constant that only n reads at that
 * slot, its payload is replaced in place and the value keeps its name and
 * kind. Otherwise a fresh constant (kind of the old constant, else
 * PARAMETER) named after `name_hint` (made unique by the graph) is created
 * and n is rewired to it; an old constant left without readers is removed.
 * slot may be n->ninputs or beyond: the input is appended (slots in between
 * become omitted inputs), e.g. the bias a fold creates. */
qf_status qf_rewrite_install_const(qf_graph *g, qf_node *n, int slot, qf_tensor *t,
                                   const char *name_hint);

/* A new float32 constant of the given shape holding vals (numel(dims)
 * entries, computed in double and rounded once here). NULL on out-of-memory
 * (nothing is left in the graph). */
qf_value *qf_rewrite_new_const_f32(qf_graph *g, const char *name, qf_value_kind kind,
                                   const double *vals, int ndim, const int64_t *dims);

/* Part i of `parts` equal parts of constant v along axis 0 (a grouped
 * conv's weights, bias, per-channel qparams): a new constant of v's kind
 * named <v>_g<i>; v itself when it is NULL or holds one value. */
qf_status qf_rewrite_const_part(qf_graph *g, qf_value *v, int64_t i, int64_t parts,
                                qf_value **out);

/* Remove the constants among vals[0..n) that nothing reads any more and
 * that are not graph outputs. NULL entries, non-constants and repeats (one
 * constant in two slots) are passed over. */
void qf_rewrite_drop_dead_consts(qf_graph *g, qf_value *const *vals, int n);

/* Splice n out: every reader of n's output 0 reads `with` instead (when the
 * output is a graph output, `with` takes its name, as qf_graph_replace_uses
 * does), n is removed, and the constant inputs of n that nothing reads any
 * more are removed with it. n's other outputs must be unused and not graph
 * outputs. On failure (out of memory) n is still in the graph. */
qf_status qf_rewrite_splice_out(qf_graph *g, qf_node *n, qf_value *with);

#endif
