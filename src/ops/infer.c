/* Shape inference over the graph, with the op table's infer column:
 * qf_node_infer, qf_graph_infer_shapes and the shape verifier
 * qf_graph_verify_shapes (declared in qfold/graph.h). */
#include <inttypes.h>

#include "op_table.h"

/* A shape too large for qfold (see QF_MAX_TENSOR_BYTES), as the error of
 * node n's input or output `v`. */
static qf_status qf_node_too_large(const qf_node *n, const char *label, const char *role, int i,
                                   const qf_value *v)
{
    char buf[160];
    return qf_error(QF_ERR_SHAPE,
                    "node '%s' (%s): %s %d '%s' has shape %s of %s, larger than qfold handles (%lld bytes)",
                    n->name, label, role, i, v->name,
                    qf_shape_str(v->type.ndim, v->type.dims, buf, sizeof buf), qf_dtype_name(v->type.dtype),
                    (long long)QF_MAX_TENSOR_BYTES);
}

qf_status qf_node_infer(qf_graph *g, qf_node *n)
{
    const qf_op_kernels *k = qf_op_kernels_get(n->op);
    const char *label = qf_op_label(n);
    bool unknown = false;
    for (int i = 0; i < n->ninputs; i++) {
        const qf_value *v = n->inputs[i];
        if (!v) continue;
        if (v->type.dtype == QF_DTYPE_UNDEFINED && v->producer) {
            /* Downstream of an opaque node whose outputs the model declares
             * no type for (src/ops/ref/opaque.c): inference stops here, and the
             * outputs stay unknown too. */
            unknown = true;
            continue;
        }
        if (v->type.dtype == QF_DTYPE_UNDEFINED)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): input %d '%s' has no type", n->name, label, i,
                            v->name);
        /* Graph inputs and constants are checked at import; this catches
         * whatever else reaches a node (a binding, a rewrite). */
        if (!qf_shape_fits(v->type.dtype, v->type.ndim, v->type.dims))
            return qf_node_too_large(n, label, "input", i, v);
    }
    if (unknown && n->op != QF_OP_OPAQUE) {
        for (int i = 0; i < n->noutputs; i++) {
            n->outputs[i]->type.dtype = QF_DTYPE_UNDEFINED;
            n->outputs[i]->type.ndim = 0;
        }
        return QF_OK;
    }
    if (!k || !k->infer) return qf_error(QF_ERR_INTERNAL, "op %s has no shape inference", qf_op_name(n->op));
    QF_TRY(k->infer(g, n));
    /* Shapes computed from file data (a Reshape target, Expand, Range,
     * ConstantOfShape, pads, ...) may be absurd: refuse them here, once for
     * every op, so that no kernel, planner or fold ever sizes memory from
     * an overflowing product. */
    for (int i = 0; i < n->noutputs; i++) {
        const qf_value *v = n->outputs[i];
        if (!qf_shape_fits(v->type.dtype, v->type.ndim, v->type.dims))
            return qf_node_too_large(n, label, "output", i, v);
    }
    return QF_OK;
}

qf_status qf_graph_infer_shapes(qf_graph *g)
{
    for (qf_node *n = g->first; n; n = n->next) QF_TRY(qf_node_infer(g, n));
    return QF_OK;
}

/* Put back the output types inference overwrote (from `saved`). */
static void qf_restore_outputs(qf_node *n, const qf_tensor *saved)
{
    for (int i = 0; i < n->noutputs; i++) n->outputs[i]->type = saved[i];
}

qf_status qf_graph_verify_shapes(qf_graph *g)
{
    QF_TRY(qf_graph_verify(g));
    int maxo = 1;
    for (qf_node *n = g->first; n; n = n->next) maxo = n->noutputs > maxo ? n->noutputs : maxo;
    qf_tensor *saved = qf_malloc(sizeof *saved * (size_t)maxo);
    if (!saved) return QF_ERR_NOMEM;
    qf_status st = QF_OK;
    for (qf_node *n = g->first; n && st == QF_OK; n = n->next) {
        for (int i = 0; i < n->noutputs; i++) saved[i] = n->outputs[i]->type;
        if (qf_node_infer(g, n) != QF_OK) {
            st = qf_error_prefix(QF_ERR_INVALID, "verifier: shape inference fails on node '%s': ", n->name);
            qf_restore_outputs(n, saved);
            break;
        }
        for (int i = 0; i < n->noutputs; i++) {
            const qf_tensor *a = &saved[i], *b = &n->outputs[i]->type;
            if (a->dtype == b->dtype && qf_shape_equal(a->ndim, a->dims, b->ndim, b->dims)) continue;
            char sa[128], sb[128];
            st = qf_error(QF_ERR_INVALID, "verifier: value '%s' of node '%s' is %s %s, but its op infers %s %s",
                          n->outputs[i]->name, n->name, qf_dtype_name(a->dtype),
                          qf_shape_str(a->ndim, a->dims, sa, sizeof sa), qf_dtype_name(b->dtype),
                          qf_shape_str(b->ndim, b->dims, sb, sizeof sb));
            /* The verifier reports; it does not repair the graph. */
            qf_restore_outputs(n, saved);
            break;
        }
    }
    qf_free(saved);
    return st;
}
