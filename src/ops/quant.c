/* quant ops: placeholder until the family is written. */
#include "kernels.h"

qf_status qf_quantize_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_quantize_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_dequantize_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_dequantize_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}
