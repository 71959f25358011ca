/* opaque: a node whose op qfold does not know (another domain such as
 * com.microsoft, or a default-domain op without a row in QF_OP_LIST), kept
 * so that the rest of the graph can be folded and the model written back.
 *
 * The ONNX importer (src/io/onnx_keep.c) fills its attributes:
 *   op_type, domain   the NodeProto's
 *   attributes        uint8 tensor: the node's AttributeProtos as they were
 *                     in the file, each as varint(length) + bytes
 *   output_types      per output: dtype, rank, dims (-1 unknown); dtype 0
 *                     (rank 0, nothing more) when the model declares none
 *   empty_outputs     slots whose ONNX name was "" (an omitted output)
 *   unnamed           1 when the node had no name (one was generated)
 * It has shape inference (the declared types) and no kernel: a plan refuses
 * it, naming the node, its op and domain. Passes match no pattern on it,
 * so it is a barrier: nothing is folded or moved across it. */
#include "ops/op_table.h"

static qf_status qf_opaque_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    int count = 0;
    const int64_t *t = qf_node_attr_ints(n, "output_types", &count);
    int at = 0;
    for (int i = 0; i < n->noutputs; i++) {
        qf_tensor *ty = &n->outputs[i]->type;
        ty->dtype = QF_DTYPE_UNDEFINED;
        ty->ndim = 0;
        if (at + 2 > count) continue;
        int64_t dt = t[at], nd = t[at + 1];
        if (nd < 0 || nd > QF_MAX_DIMS || at + 2 + nd > count)
            return qf_error(QF_ERR_INVALID, "node '%s' (%s): output_types is malformed", n->name,
                            qf_op_label(n));
        if (dt != QF_DTYPE_UNDEFINED) {
            ty->dtype = (qf_dtype)dt;
            ty->ndim = (int)nd;
            for (int d = 0; d < nd; d++) ty->dims[d] = t[at + 2 + d];
        }
        at += 2 + (int)nd;
    }
    return QF_OK;
}

const qf_op_kernels qf_opaque_kernels = {
    .infer = qf_opaque_infer,
};

qf_status qf_graph_check_runnable(const qf_graph *g)
{
    qf_graph_for_each_node(g, n)
    {
        if (n->op != QF_OP_OPAQUE) continue;
        const char *domain = qf_node_attr_string(n, "domain", "");
        return qf_error(QF_ERR_UNSUPPORTED,
                        "node '%s': op '%s' (domain '%s') is not one qfold can run; it is kept "
                        "as an opaque node, which fuse and inspect handle",
                        n->name, qf_op_label(n), *domain ? domain : "ai.onnx");
    }
    return QF_OK;
}
