/* The int8 lowering as a walk and a pass: every node is offered to the
 * lowering entry of its op's quantization row (op_quant.c; the entries are
 * lower.c's). A file of its own so that the rows point at the entries and the
 * walk reads the rows, and no two files use each other. */
#include "qfold/pass.h"
#include "qfold/quant.h"
#include "quant/op_quant.h"

/* Every node whose row has a lowering entry is offered to it: the entry
 * decides whether its group is one its int8 op takes. With ONNX's
 * requantization only the entries of ONNX's integer ops run (the others'
 * int8 ops compute TFLite's). */
qf_status qf_quant_lower_int8(qf_graph *g, qf_pass_ctx *ctx, qf_int8_requant_kind rq, int *count)
{
    int k = 0;
    for (qf_node *n = g->first; n; n = n->next) {
        const qf_op_quant *r = qf_op_quant_get(n->op);
        if (!r->lower || (rq != QF_REQUANT_FIXED_POINT && !r->lower_onnx)) continue;
        bool done = false;
        QF_TRY(r->lower(g, ctx, n, rq, &done));
        k += done;
    }
    if (count) *count = k;
    if (k) {
        qf_graph_dce(g);
        QF_TRY(qf_graph_toposort(g));
        QF_TRY(qf_graph_infer_shapes(g));
    }
    return QF_OK;
}

static qf_status quant_lower_run(qf_graph *g, qf_pass_ctx *ctx, bool *changed)
{
    int k = 0;
    QF_TRY(qf_quant_lower_int8(g, ctx, QF_REQUANT_FIXED_POINT, &k));
    *changed = k > 0;
    return QF_OK;
}

const qf_pass qf_pass_quant_lower_int8 = {
    .name = "quant_lower_int8",
    .summary = "int8 executor: DQ -> op -> [ReLU] -> Q groups become integer nodes (for running, not export)",
    .run = quant_lower_run,
};
