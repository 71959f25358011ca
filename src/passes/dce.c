/* dce: dead-code elimination as a pass.
 *
 * qf_graph_dce_ex removes every node none of whose outputs is read or is a
 * graph output (recording each one here), then the constants nobody reads
 * any more (a folded BN's parameters, a Dropout's ratio). */
#include "qfold/pass.h"

static void qf_dce_record(void *ctx, const qf_node *n)
{
    qf_pass_rewrite_as(ctx, n, QF_PASS_REMOVED, NULL, "removed: no output is used");
}

static qf_status qf_dce_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    int nvalues_before = 0;
    for (int i = 0; i < g->nvalues; i++) nvalues_before += g->values[i] != NULL;
    int removed = qf_graph_dce_ex(g, qf_dce_record, ctx);
    int nvalues_after = 0;
    for (int i = 0; i < g->nvalues; i++) nvalues_after += g->values[i] != NULL;
    *changed = removed > 0 || nvalues_after != nvalues_before;
    return QF_OK;
}

const qf_pass qf_pass_dce = {
    .name = "dce",
    .summary = "remove nodes whose outputs nobody reads, and unused constants",
    .run = qf_dce_run,
    .deferred = true, /* reads no payload */
};
