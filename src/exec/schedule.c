/* The plan's node order (see exec_impl.h, qf_plan_schedule).
 *
 * The graph's topological order runs a residual block's strided 1x1
 * downsample conv after the block's conv2, as PyTorch exports it:
 *
 *   x ─┬─ conv1 ─ conv2 ─────────────┐
 *      └───────────────── downsample ─ Add
 *
 * so the downsample reads x back from memory (at batch 8, a 1x1 conv that
 * takes 0.5 ms alone took 0.7-1.0 ms there) and carries the Add as a sum
 * post-op. Run right after conv1, it reads x while x is still in cache,
 * and conv2 carries the sum instead. The rule, general: after a node runs,
 * every other reader of one of its activation inputs whose inputs are all
 * written by then runs next (siblings of one value run together). A node
 * only moves earlier, after its producers, so the order stays topological;
 * the graph itself keeps its order. */
#include "exec_impl.h"

static bool sch_ready(const qf_node *n, const int *pos, const unsigned char *done)
{
    for (int j = 0; j < n->ninputs; j++) {
        const qf_value *v = n->inputs[j];
        if (v && v->producer && !done[pos[v->producer->id]]) return false;
    }
    return true;
}

qf_status qf_plan_schedule(const qf_graph *g, const qf_node **order)
{
    const int n = g->nnodes;
    uint32_t maxid = 0;
    for (const qf_node *x = g->first; x; x = x->next) maxid = x->id > maxid ? x->id : maxid;
    const qf_node **nodes = qf_malloc(sizeof *nodes * (size_t)(n ? n : 1));
    int *pos = qf_malloc(sizeof *pos * ((size_t)maxid + 1));
    unsigned char *done = qf_calloc((size_t)(n ? n : 1), 1);
    if (!nodes || !pos || !done) {
        qf_free(nodes);
        qf_free(pos);
        qf_free(done);
        return QF_ERR_NOMEM;
    }
    int k = 0;
    for (const qf_node *x = g->first; x; x = x->next, k++) {
        nodes[k] = x;
        pos[x->id] = k;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        const qf_node *x = nodes[i];
        done[i] = 1;
        order[m++] = x;
        for (int j = 0; j < x->ninputs; j++) {
            const qf_value *v = x->inputs[j];
            if (!v || v->nuses < 2 || (!v->producer && v->kind != QF_VALUE_INPUT)) continue;
            for (int u = 0; u < v->nuses; u++) {
                const qf_node *r = v->uses[u].node;
                int ri = pos[r->id];
                if (done[ri] || !sch_ready(r, pos, done)) continue;
                done[ri] = 1;
                order[m++] = r;
            }
        }
    }
    qf_free(nodes);
    qf_free(pos);
    qf_free(done);
    return QF_OK;
}
