/* A deep copy of a graph: the same inputs, constants (payloads copied),
 * nodes (in list order, with their attributes), outputs and names. QAT's
 * --keep-qat writes the training graph in its exportable form (a pass that
 * rewrites it) while the trained graph itself goes on to finalize. */
#include <string.h>

#include "graph_notes.h"
#include "qfold/graph.h"

static qf_status clone_attr(qf_graph *d, qf_node *n, const qf_attr *a)
{
    switch (a->type) {
    case QF_ATTR_INT:
        return qf_node_set_attr_int(d, n, a->name, a->i);
    case QF_ATTR_FLOAT:
        return qf_node_set_attr_float(d, n, a->name, a->f);
    case QF_ATTR_STRING:
        return qf_node_set_attr_string(d, n, a->name, a->s);
    case QF_ATTR_INTS:
        return qf_node_set_attr_ints(d, n, a->name, a->ints, a->n);
    case QF_ATTR_FLOATS:
        return qf_node_set_attr_floats(d, n, a->name, a->floats, a->n);
    case QF_ATTR_TENSOR: {
        qf_tensor t;
        QF_TRY(qf_tensor_copy(&t, a->t));
        qf_status st = qf_node_set_attr_tensor(d, n, a->name, &t);
        qf_tensor_free(&t);
        return st;
    }
    }
    return qf_error(QF_ERR_INTERNAL, "node '%s': attribute '%s' of unknown type %d", n->name, a->name, (int)a->type);
}

/* The value of d standing for s's value v (map by v's id). */
static qf_status clone_body(const qf_graph *s, qf_graph *d, qf_value **map)
{
    if (s->name && !(d->name = qf_graph_strdup(d, s->name))) return QF_ERR_NOMEM;
    if (s->producer_name && !(d->producer_name = qf_graph_strdup(d, s->producer_name))) return QF_ERR_NOMEM;
    d->opset = s->opset;
    d->ir_version = s->ir_version;
    QF_TRY(qf_graph_notes_copy(d, s));
    for (int i = 0; i < s->ninputs; i++) {
        const qf_value *v = s->inputs[i];
        if (!(map[v->id] = qf_graph_add_input(d, v->name, v->type.dtype, v->type.ndim, v->type.dims)))
            return QF_ERR_NOMEM;
        map[v->id]->store = v->store;
        if (v->type.data) { /* its default */
            qf_tensor t;
            QF_TRY(qf_tensor_copy(&t, &v->type));
            qf_value_set_data(map[v->id], &t);
        }
    }
    for (int i = 0; i < s->nvalues; i++) {
        const qf_value *v = s->values[i];
        if (!v || v->producer || map[v->id] || !qf_value_has_data(v)) continue;
        qf_tensor t;
        if (v->deferred) {
            /* A payload left in the file: the copy reads it (scaled). */
            QF_TRY(qf_tensor_init(&t, v->type.dtype, v->type.ndim, v->type.dims));
            qf_status st = qf_value_read(s, v, 0, t.data, qf_tensor_nbytes(&t), true);
            if (st != QF_OK) {
                qf_tensor_free(&t);
                return st;
            }
        } else {
            QF_TRY(qf_tensor_copy(&t, &v->type));
        }
        if (!(map[v->id] = qf_graph_add_constant(d, v->name, v->kind, &t))) {
            qf_tensor_free(&t);
            return QF_ERR_NOMEM;
        }
        map[v->id]->store = v->store;
    }
    qf_value *in[64], **ins = in;
    for (const qf_node *n = s->first; n; n = n->next) {
        if (n->ninputs > (int)(sizeof in / sizeof in[0])) {
            if (ins != in) qf_free(ins);
            ins = qf_calloc((size_t)n->ninputs, sizeof *ins);
            if (!ins) return QF_ERR_NOMEM;
        }
        qf_status st = QF_OK;
        for (int k = 0; k < n->ninputs && st == QF_OK; k++) {
            const qf_value *v = n->inputs[k];
            ins[k] = v ? map[v->id] : NULL;
            if (v && !ins[k])
                st = qf_error(QF_ERR_INVALID, "node '%s': input '%s' has no producer, is no graph input and holds no "
                              "data: the graph can not be copied", n->name, v->name);
        }
        qf_node *c = st == QF_OK ? qf_graph_add_node(d, n->op, n->name, n->ninputs, ins, n->noutputs) : NULL;
        if (st == QF_OK && !c) st = QF_ERR_NOMEM;
        for (int k = 0; k < n->noutputs && st == QF_OK; k++) {
            map[n->outputs[k]->id] = c->outputs[k];
            c->outputs[k]->type.dtype = n->outputs[k]->type.dtype;
            c->outputs[k]->store = n->outputs[k]->store;
            c->outputs[k]->type.ndim = n->outputs[k]->type.ndim;
            memcpy(c->outputs[k]->type.dims, n->outputs[k]->type.dims, sizeof c->outputs[k]->type.dims);
            st = qf_graph_rename_value(d, c->outputs[k], n->outputs[k]->name);
        }
        for (int k = 0; k < n->nattrs && st == QF_OK; k++) st = clone_attr(d, c, &n->attrs[k]);
        if (st != QF_OK) {
            if (ins != in) qf_free(ins);
            return st;
        }
    }
    if (ins != in) qf_free(ins);
    for (int i = 0; i < s->noutputs; i++) {
        qf_value *v = map[s->outputs[i]->id];
        if (!v) return qf_error(QF_ERR_INVALID, "output '%s' is not computed: the graph can not be copied",
                                s->outputs[i]->name);
        QF_TRY(qf_graph_add_output(d, v));
    }
    return QF_OK;
}

qf_status qf_graph_clone(const qf_graph *g, qf_graph **out)
{
    *out = NULL;
    qf_value **map = qf_calloc((size_t)g->nvalues + 1, sizeof *map);
    if (!map) return QF_ERR_NOMEM;
    qf_graph *d = NULL;
    qf_status st = qf_graph_init(&d);
    if (st == QF_OK) st = clone_body(g, d, map);
    qf_free(map);
    if (st != QF_OK) {
        qf_graph_free(d);
        return st;
    }
    *out = d;
    return QF_OK;
}
