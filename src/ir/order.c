/* Topological order, the verifier (structure and arity, from the op schema)
 * and the classification of initializers into parameters and buffers. */
#include <inttypes.h>
#include <string.h>

#include "graph_impl.h"
#include "qfold/schema.h"

/* A min-heap of list positions: the ready nodes of the sort below. */
static void qf_order_heap_push(int *heap, int *len, int x)
{
    int i = (*len)++;
    while (i > 0 && heap[(i - 1) / 2] > x) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = x;
}

static int qf_order_heap_pop(int *heap, int *len)
{
    int top = heap[0], x = heap[--*len], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *len) break;
        if (c + 1 < *len && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= x) break;
        heap[i] = heap[c];
        i = c;
    }
    if (*len) heap[i] = x;
    return top;
}

/* Kahn's algorithm keyed on the current list order, so a graph that is
 * already sorted keeps its order exactly: always emit the ready node that
 * comes first in the current order, from a min-heap of ready positions.
 * O((nodes + edges) log nodes) whatever the input order (a linear scan for
 * the first ready node was quadratic on a list in reverse order). */
qf_status qf_graph_toposort(qf_graph *g)
{
    int n = g->nnodes;
    if (n == 0) return QF_OK;
    qf_node **nodes = qf_malloc(sizeof *nodes * (size_t)n);
    int *pending = qf_calloc((size_t)n, sizeof *pending);
    qf_node **order = qf_malloc(sizeof *order * (size_t)n);
    int *heap = qf_malloc(sizeof *heap * (size_t)n);
    uint32_t maxid = 0;
    for (qf_node *x = g->first; x; x = x->next) maxid = x->id > maxid ? x->id : maxid;
    int *pos = qf_malloc(sizeof *pos * ((size_t)maxid + 1));
    qf_status st = QF_OK;
    if (!nodes || !pending || !order || !heap || !pos) {
        st = QF_ERR_NOMEM;
        goto done;
    }
    int k = 0;
    for (qf_node *x = g->first; x; x = x->next) {
        pos[x->id] = k;
        nodes[k++] = x;
    }
    int nheap = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < nodes[i]->ninputs; j++)
            if (nodes[i]->inputs[j] && nodes[i]->inputs[j]->producer) pending[i]++;
        if (pending[i] == 0) qf_order_heap_push(heap, &nheap, i);
    }
    int done_n = 0;
    while (nheap > 0) {
        int pick = qf_order_heap_pop(heap, &nheap);
        order[done_n++] = nodes[pick];
        /* A reader appears once per input slot in the use list, as it is
         * counted once per slot in pending. */
        for (int o = 0; o < nodes[pick]->noutputs; o++) {
            qf_value *v = nodes[pick]->outputs[o];
            for (int u = 0; u < v->nuses; u++) {
                int r = pos[v->uses[u].node->id];
                if (--pending[r] == 0) qf_order_heap_push(heap, &nheap, r);
            }
        }
    }
    if (done_n < n) {
        /* The first node (in list order) never emitted is on a cycle or
         * downstream of one. */
        for (int i = 0; i < n; i++) {
            if (pending[i] > 0) {
                st = qf_error(QF_ERR_INVALID,
                              "graph has a cycle: node '%s' (%s) depends on its own output",
                              nodes[i]->name, qf_op_name(nodes[i]->op));
                break;
            }
        }
        goto done;
    }
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
    qf_free(heap);
    qf_free(pos);
    return st;
}

/* The verifier's scratch, indexed by node id: the node's position in the
 * list (-1: not listed) and the index of its first input slot among all the
 * listed nodes' slots; one mark per slot. */
typedef struct {
    int *pos;
    size_t *slot_base;
    unsigned char *slot_seen;
    uint32_t maxid;
} qf_verify_scratch;

static qf_status qf_graph_verify_nodes(const qf_graph *g, const qf_verify_scratch *vs);

static qf_status qf_verify_fail(const char *what, const char *name, const char *detail)
{
    return qf_error(QF_ERR_INVALID, "verifier: %s '%s': %s", what, name, detail);
}

qf_status qf_graph_verify(const qf_graph *g)
{
    /* Position of each node in the list, to check producers come first. */
    qf_verify_scratch vs = {0};
    size_t nslots = 0;
    for (qf_node *x = g->first; x; x = x->next) {
        vs.maxid = x->id > vs.maxid ? x->id : vs.maxid;
        nslots += (size_t)(x->ninputs > 0 ? x->ninputs : 0);
    }
    vs.pos = qf_malloc(sizeof *vs.pos * ((size_t)vs.maxid + 1));
    vs.slot_base = qf_malloc(sizeof *vs.slot_base * ((size_t)vs.maxid + 1));
    vs.slot_seen = qf_calloc(nslots + 1, 1);
    qf_status st = QF_ERR_NOMEM;
    if (vs.pos && vs.slot_base && vs.slot_seen) {
        for (uint32_t i = 0; i <= vs.maxid; i++) vs.pos[i] = -1;
        int k = 0;
        size_t base = 0;
        for (qf_node *x = g->first; x; x = x->next) {
            vs.pos[x->id] = k++;
            vs.slot_base[x->id] = base;
            base += (size_t)(x->ninputs > 0 ? x->ninputs : 0);
        }
        st = qf_graph_verify_nodes(g, &vs);
    }
    qf_free(vs.pos);
    qf_free(vs.slot_base);
    qf_free(vs.slot_seen);
    return st;
}

/* Whether node x is in the graph's list (pos from qf_graph_verify). A node
 * that was removed, or never linked, may still be referenced by a stale
 * producer or use entry; its id can be past every listed node's. */
static bool qf_verify_listed(const qf_node *x, const qf_verify_scratch *vs)
{
    return x->id <= vs->maxid && vs->pos[x->id] >= 0;
}

static qf_status qf_graph_verify_nodes(const qf_graph *g, const qf_verify_scratch *vs)
{
    const int *pos = vs->pos;
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
            if (v->producer) {
                /* The producer must come earlier in the list. */
                if (!qf_verify_listed(v->producer, vs) || pos[v->producer->id] >= pos[n->id])
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
            if (!qf_verify_listed(us->node, vs))
                return qf_verify_fail("value", v->name, "use list names a node that is not in the graph");
            if (us->slot < 0 || us->slot >= us->node->ninputs || us->node->inputs[us->slot] != v)
                return qf_verify_fail("value", v->name, "use list names a node that does not read it");
            unsigned char *seen = &vs->slot_seen[vs->slot_base[us->node->id] + (size_t)us->slot];
            if (*seen) return qf_verify_fail("value", v->name, "use list names a reader twice");
            *seen = 1;
        }
        if (v->producer && !qf_verify_listed(v->producer, vs))
            return qf_verify_fail("value", v->name, "its producer is not in the graph");
        if (qf_value_has_data(v) && qf_tensor_numel(&v->type) < 0)
            return qf_verify_fail("value", v->name, "constant with unknown shape");
    }
    /* Every use entry marked its (node, slot) above, once: a slot left
     * unmarked reads a value whose use list misses it. One pass over the
     * slots instead of a scan of the value's use list per slot, which was
     * quadratic in a value's readers (a Concat of 10^6 copies of x). */
    for (qf_node *n = g->first; n; n = n->next) {
        for (int i = 0; i < n->ninputs; i++) {
            qf_value *v = n->inputs[i];
            if (v && !vs->slot_seen[vs->slot_base[n->id] + (size_t)i])
                return qf_verify_fail("value", v->name, "use list misses a reader");
        }
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
