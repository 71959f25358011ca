/* conv ops: placeholder until the family is written. */
#include "kernels.h"

qf_status qf_conv_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_conv_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

size_t qf_conv_scratch(const qf_node *n)
{
    (void)n;
    return 0;
}

qf_status qf_conv_transpose_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_conv_transpose_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

size_t qf_conv_transpose_scratch(const qf_node *n)
{
    (void)n;
    return 0;
}
