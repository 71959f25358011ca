/* dce: dead-code elimination as a pass.
 *
 * Removes every node none of whose outputs is read or is a graph output,
 * recording each one, then lets qf_graph_dce drop the constants nobody reads
 * any more (a folded BN's parameters, a Dropout's ratio). */
#include "qfold/pass.h"

static qf_status qf_dce_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    int removed = 0;
    /* Backwards: removing a node can make its producers dead in turn. */
    for (qf_node *n = g->last; n;) {
        qf_node *prev = n->prev;
        bool live = false;
        for (int i = 0; i < n->noutputs && !live; i++)
            live = n->outputs[i]->nuses > 0 || n->outputs[i]->is_output;
        if (!live) {
            qf_pass_rewrite(ctx, n, NULL, "removed: no output is used");
            qf_graph_remove_node(g, n);
            removed++;
        }
        n = prev;
    }
    int nvalues_before = 0;
    for (int i = 0; i < g->nvalues; i++) nvalues_before += g->values[i] != NULL;
    removed += qf_graph_dce(g);
    int nvalues_after = 0;
    for (int i = 0; i < g->nvalues; i++) nvalues_after += g->values[i] != NULL;
    *changed = removed > 0 || nvalues_after != nvalues_before;
    return QF_OK;
}

const qf_pass qf_pass_dce = {
    .name = "dce",
    .summary = "remove nodes whose outputs nobody reads, and unused constants",
    .run = qf_dce_run,
};
