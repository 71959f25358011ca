/* Topological order, the verifier (structure and arity, from the op schema)
 * and the classification of initializers into parameters and buffers. */
#include <inttypes.h>
#include <string.h>

#include "graph_impl.h"
#include "qfold/schema.h"

/* Kahn's algorithm keyed on the current list order, so a graph that is
 * already sorted keeps its order exactly. */
qf_status qf_graph_toposort(qf_graph *g)
{
    int n = g->nnodes;
    if (n == 0) return QF_OK;
    qf_node **nodes = qf_malloc(sizeof *nodes * (size_t)n);
    int *pending = qf_calloc((size_t)n, sizeof *pending);
    qf_node **order = qf_malloc(sizeof *order * (size_t)n);
    uint32_t maxid = 0;
    for (qf_node *x = g->first; x; x = x->next) maxid = x->id > maxid ? x->id : maxid;
    int *pos = qf_malloc(sizeof *pos * ((size_t)maxid + 1));
    qf_status st = QF_OK;
    if (!nodes || !pending || !order || !pos) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    int k = 0;
    for (qf_node *x = g->first; x; x = x->next) {
        pos[x->id] = k;
        nodes[k++] = x;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < nodes[i]->ninputs; j++)
            if (nodes[i]->inputs[j] && nodes[i]->inputs[j]->producer) pending[i]++;
    /* Always emit the ready node that comes first in the current order. The
     * scan starts at the first node not yet emitted: O(n) on sorted input
     * (what rewrites leave behind), O(n^2) at worst. */
    int done_n = 0, scan = 0;
    char *emitted = qf_calloc((size_t)n, 1);
    if (!emitted) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    while (done_n < n) {
        int pick = -1;
        for (int i = scan; i < n; i++) {
            if (!emitted[i] && pending[i] == 0) {
                pick = i;
                break;
            }
        }
        if (pick < 0) {
            for (int i = 0; i < n; i++) {
                if (!emitted[i]) {
                    st = qf_error(QF_ERR_INVALID,
                                  "graph has a cycle: node '%s' (%s) depends on its own output",
                                  nodes[i]->name, qf_op_name(nodes[i]->op));
                    break;
                }
            }
            qf_free(emitted);
            goto done;
        }
        emitted[pick] = 1;
        order[done_n++] = nodes[pick];
        for (int o = 0; o < nodes[pick]->noutputs; o++) {
            qf_value *v = nodes[pick]->outputs[o];
            for (int u = 0; u < v->nuses; u++) pending[pos[v->uses[u].node->id]]--;
        }
        while (scan < n && emitted[scan]) scan++;
    }
    qf_free(emitted);
    g->first = order[0];
    for (int i = 0; i < n; i++) {
        order[i]->prev = i ? order[i - 1] : NULL;
        order[i]->next = i + 1 < n ? order[i + 1] : NULL;
    }
    g->last = order[n - 1];
done:
    qf_free(nodes);
    qf_free(pending);
    qf_free(order);
    qf_free(pos);
    return st;
}

static qf_status qf_graph_verify_nodes(const qf_graph *g, const int *pos, uint32_t maxid);

static qf_status qf_verify_fail(const char *what, const char *name, const char *detail)
{
    return qf_error(QF_ERR_INVALID, "verifier: %s '%s': %s", what, name, detail);
}

qf_status qf_graph_verify(const qf_graph *g)
{
    /* Position of each node in the list, to check producers come first. */
    uint32_t maxid = 0;
    for (qf_node *x = g->first; x; x = x->next) maxid = x->id > maxid ? x->id : maxid;
    int *pos = qf_malloc(sizeof *pos * ((size_t)maxid + 1));
    if (!pos) return QF_ERR_NOMEM;
    for (uint32_t i = 0; i <= maxid; i++) pos[i] = -1;
    int k = 0;
    for (qf_node *x = g->first; x; x = x->next) pos[x->id] = k++;
    qf_status st = qf_graph_verify_nodes(g, pos, maxid);
    qf_free(pos);
    return st;
}

/* Whether node x is in the graph's list (pos from qf_graph_verify). A node
 * that was removed, or never linked, may still be referenced by a stale
 * producer or use entry; its id can be past every listed node's. */
static bool qf_verify_listed(const qf_node *x, const int *pos, uint32_t maxid)
{
    return x->id <= maxid && pos[x->id] >= 0;
}

static qf_status qf_graph_verify_nodes(const qf_graph *g, const int *pos, uint32_t maxid)
{
    int count = 0;
    for (qf_node *n = g->first; n; n = n->next, count++) {
        if ((unsigned)n->op >= QF_OP_COUNT) return qf_verify_fail("node", n->name, "bad op");
        const qf_op_schema *info = qf_op_schema_get(n->op);
        if (qf_graph_find_node(g, n->name) != n)
            return qf_verify_fail("node", n->name, "name table does not point at it");
        if (n->next && n->next->prev != n) return qf_verify_fail("node", n->name, "list links broken");
        if (n->ninputs < info->min_inputs || (info->max_inputs >= 0 && n->ninputs > info->max_inputs))
            return qf_verify_fail("node", n->name, "wrong number of inputs for its op");
        if (n->noutputs < info->min_outputs || (info->max_outputs >= 0 && n->noutputs > info->max_outputs))
            return qf_verify_fail("node", n->name, "wrong number of outputs for its op");
        for (int i = 0; i < n->ninputs; i++) {
            qf_value *v = n->inputs[i];
            if (!v) continue;
            if (v->id >= (uint32_t)g->nvalues || g->values[v->id] != v)
                return qf_verify_fail("node", n->name, "input value is not in the graph");
            bool found = false;
            for (int u = 0; u < v->nuses; u++) found |= v->uses[u].node == n && v->uses[u].slot == i;
            if (!found) return qf_verify_fail("value", v->name, "use list misses a reader");
            if (v->producer) {
                /* The producer must come earlier in the list. */
                if (!qf_verify_listed(v->producer, pos, maxid) || pos[v->producer->id] >= pos[n->id])
                    return qf_verify_fail("node", n->name, "reads a value produced later (not sorted, or a cycle)");
            } else if (v->kind == QF_VALUE_ACTIVATION) {
                return qf_verify_fail("value", v->name, "activation without a producer");
            } else if (v->kind != QF_VALUE_INPUT && !qf_value_has_data(v)) {
                return qf_verify_fail("value", v->name, "initializer without data");
            }
        }
        for (int i = 0; i < n->noutputs; i++) {
            qf_value *v = n->outputs[i];
            if (!v || v->producer != n || v->producer_slot != i)
                return qf_verify_fail("node", n->name, "output's producer link is wrong");
            if (v->kind != QF_VALUE_ACTIVATION)
                return qf_verify_fail("value", v->name, "node output is not an activation");
        }
    }
    if (count != g->nnodes) return qf_error(QF_ERR_INVALID, "verifier: node count %d, list has %d", g->nnodes, count);
    for (int i = 0; i < g->nvalues; i++) {
        qf_value *v = g->values[i];
        if (!v) continue;
        if (v->id != (uint32_t)i) return qf_verify_fail("value", v->name, "id does not match its slot");
        if (qf_graph_find_value(g, v->name) != v)
            return qf_verify_fail("value", v->name, "name table does not point at it");
        for (int u = 0; u < v->nuses; u++) {
            const qf_use *us = &v->uses[u];
            if (!qf_verify_listed(us->node, pos, maxid))
                return qf_verify_fail("value", v->name, "use list names a node that is not in the graph");
            if (us->slot < 0 || us->slot >= us->node->ninputs || us->node->inputs[us->slot] != v)
                return qf_verify_fail("value", v->name, "use list names a node that does not read it");
        }
        if (v->producer && !qf_verify_listed(v->producer, pos, maxid))
            return qf_verify_fail("value", v->name, "its producer is not in the graph");
        if (qf_value_has_data(v) && qf_tensor_numel(&v->type) < 0)
            return qf_verify_fail("value", v->name, "constant with unknown shape");
    }
    for (int i = 0; i < g->noutputs; i++) {
        qf_value *v = g->outputs[i];
        if (!v->is_output) return qf_verify_fail("graph output", v->name, "not marked as output");
        if (!v->producer && v->kind == QF_VALUE_ACTIVATION)
            return qf_verify_fail("graph output", v->name, "is not produced");
    }
    return QF_OK;
}

void qf_graph_classify_constants(qf_graph *g)
{
    for (qf_node *n = g->first; n; n = n->next) {
        const qf_op_schema *info = qf_op_schema_get(n->op);
        for (int i = 0; i < n->ninputs && i < QF_MAX_ROLES; i++) {
            qf_value *v = n->inputs[i];
            if (!v || v->producer || v->kind == QF_VALUE_INPUT || !qf_value_has_data(v)) continue;
            switch (info->roles[i]) {
            case QF_ROLE_WEIGHT: case QF_ROLE_BIAS: case QF_ROLE_BN_SCALE: case QF_ROLE_BN_SHIFT:
                if (v->type.dtype == QF_DTYPE_F32 || v->type.dtype == QF_DTYPE_F64) v->kind = QF_VALUE_PARAMETER;
                break;
            case QF_ROLE_BN_STAT:
                if (v->kind != QF_VALUE_PARAMETER) v->kind = QF_VALUE_BUFFER;
                break;
            case QF_ROLE_DATA: case QF_ROLE_SHAPE:
                break;
            }
        }
    }
}
