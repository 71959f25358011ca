/* layout ops: placeholder until the family is written. */
#include "kernels.h"

qf_status qf_flatten_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_flatten_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_reshape_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_reshape_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_transpose_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_transpose_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_concat_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_concat_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_slice_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_slice_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_split_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_split_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_squeeze_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_squeeze_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_unsqueeze_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_unsqueeze_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_pad_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_pad_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_identity_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_identity_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}

qf_status qf_dropout_infer(qf_graph *g, qf_node *n)
{
    (void)g;
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': op %s not implemented yet", n->name, qf_op_name(n->op));
}

qf_status qf_dropout_forward(const qf_kernel_io *io)
{
    return qf_error(QF_ERR_UNSUPPORTED, "node '%s': kernel not implemented yet", io->node->name);
}
